"""``fit`` and ``evaluate`` over MPI ranks (``distributed=rk.distributed.MPI()``).

Start (every rank): the data is checked on each rank, then ONE allgather compares what every
rank holds (the model's weight names, shapes and dtypes; with ``shard="replicated"`` the sample
count and a CRC-32 of the data, which must be equal). Rank 0's weights, optimizer slots, step
count and learning rate are broadcast to every rank.

One STEP on a global batch of ``n_b`` samples (a sample-index array shared by every rank in
``"replicated"`` mode; each rank's own part of its shard in ``"local"`` mode)::

    replicated: rank r takes its contiguous part of the batch (numpy.array_split's rule; a part
                may be empty when n_b < ranks)
    forward, loss, metrics, backward on the part, in the rank's own training Ctx
    Allreduce [failed?, n_r, n_r * loss_r, n_r * metric_r..., has-gradient per weight]  (small)
    gradient slots <- (n_r / n_b) * grad_r; Allreduce (sum) of each flat buffer
    optimizer.apply_gradients(summed gradients)          the same numbers on every rank

Because the loss is a mean over samples, ``sum_r (n_r / n_b) grad_r`` is the gradient of the
mean over the global batch: the step equals a single process's step on the same batch, up to
rounding. Every rank sums the same numbers in the same order, so weights stay bit-identical (a
CRC-32 of the weights is compared across ranks at the end of ``fit``).

Epochs: ``"replicated"`` draws the batches exactly as a single-process ``fit`` does (same
``seed``, same permutations; with ``seed=None`` every rank uses rank 0's generator, made as a
single process makes it: from the global seed, else from entropy). ``"local"``: the
epoch has ``ceil(N / batch_size)`` steps (``N`` the sum of the shards; at most the largest
shard's size; one step with ``batch_size=None``), and each rank splits its shard (shuffled by its
own generator) into that many near-equal parts. Dropout masks come from a per-rank seed (rank
0 uses the single-process step seed), so with dropout only the distribution matches.

Rank 0 alone runs the callbacks, the History and the progress bar; after each epoch it
broadcasts ``stop_training`` (e.g. EarlyStopping's decision), the learning rate (a
LearningRateScheduler's) and its History, so every rank stops together and returns the same
History; after ``on_train_end`` its weights are broadcast (``restore_best_weights``).
Validation and ``evaluate`` split the samples across ranks (``"local"``: each rank its shard)
and reduce the sample-weighted sums. Failures: see :mod:`rnnkit.distributed._mpi`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidParameterError, NonFiniteError
from rnnkit._random import make_rng
from rnnkit.distributed._buffers import FlatLayout, data_crc, optimizer_state, set_optimizer_state
from rnnkit.distributed._errors import DistributedError
from rnnkit.distributed._mpi import MPI, Guard, check_distributed
from rnnkit.models._base import Data, Model, NonFiniteAt, check_finite
from rnnkit.models._callbacks import Callback, CallbackList, History
from rnnkit.models._training import (
    _check_finite_data,
    _split,
    _targets,
    check_fit_counts,
    loss_and_grads,
    metric_values,
)

Arrays = list[np.ndarray]


def log_keys(model: Model) -> list[str]:
    """``loss`` then the metric keys, in the order :func:`metric_values` makes them."""
    ms = [m.name for m in model.metrics]
    return ["loss", *(ms if model.n_outputs == 1 else
                      [f"output_{k}_{m}" for k in range(model.n_outputs) for m in ms])]


def local_step(model: Model, xb: Arrays, yb: Arrays, ctx: Ctx, where: str) -> dict[str, float]:
    """Forward, loss, metrics and backward on this rank's part (``train_step`` without the
    optimizer step); NaN/Inf raises NonFiniteError naming ``where`` and the first place."""
    try:
        preds = model._forward(xb, ctx, True)
        loss, grads = loss_and_grads(model, yb, preds)
        if not math.isfinite(loss):
            raise NonFiniteAt(f"the loss ({type(model.loss).__name__}) is {loss}")
        for g in grads:
            check_finite(g, f"the gradient of the loss ({type(model.loss).__name__}) w.r.t. the model output")
        logs = {"loss": loss, **metric_values(model, yb, preds)}
        model._backward(grads, ctx, True)
    except NonFiniteAt as e:
        raise NonFiniteError(f"{model.name}: training produced NaN or Inf in {where}: first at {e.where}") \
            from None
    return logs


def sums_of(model: Model, xs: Arrays, ys: Arrays, batch_size: int | None) -> dict[str, float]:
    """Sample-weighted SUMS of loss and metrics over inference passes in batches (empty: {})."""
    n = xs[0].shape[0]
    bs = max(1, n if batch_size is None else batch_size)
    sums: dict[str, float] = {}
    for a in range(0, n, bs):
        xb, yb = [v[a:a + bs] for v in xs], [v[a:a + bs] for v in ys]
        preds = model._forward(xb, Ctx.inference(), False)
        loss, _ = loss_and_grads(model, yb, preds)
        for k, v in {"loss": loss, **metric_values(model, yb, preds)}.items():
            sums[k] = sums.get(k, 0.0) + xb[0].shape[0] * v
    return sums


def _checked(model: Model, x: Data, y: Data, what: str) -> tuple[Arrays, Arrays]:
    xs = model._inputs(x)
    ys = _targets(model, y, xs[0].shape[0])
    _check_finite_data(xs, f"{what}: x")
    _check_finite_data(ys, f"{what}: y")
    return xs, ys


def agree(dist: MPI, guard: Guard, what: str, info: dict[str, Any]) -> list[dict[str, Any]]:
    """Collective start: every rank's ``info`` (or its error) on every rank; raises the same
    DistributedError everywhere when a rank failed, a model differs from rank 0's, or (in
    ``"replicated"`` mode) a rank's data differs from rank 0's."""
    got = dist.allgather((guard.describe() if guard.failed else None, info))
    failed = {r: note for r, (note, _) in enumerate(got) if note is not None}
    if failed:
        raise DistributedError(what, failed, dist.rank, dist.size) from guard.error
    infos = [inf for _, inf in got]
    ref = infos[0]
    for r, inf in enumerate(infos):
        if inf.get("signature") != ref.get("signature"):
            failed[r] = (f"its model's weights {inf.get('signature')} differ from rank 0's "
                         f"{ref.get('signature')}; build the same model on every rank")
        elif dist.shard == "replicated" and (inf["n"], inf["crc"]) != (ref["n"], ref["crc"]):
            failed[r] = (f"shard='replicated' needs the same data on every rank, but rank {r} holds "
                         f"{inf['n']} samples (CRC-32 {inf['crc']:08x}) and rank 0 {ref['n']} "
                         f"(CRC-32 {ref['crc']:08x}); use shard='local' for per-rank shards")
    if failed:
        raise DistributedError(what, failed, dist.rank, dist.size)
    return infos


def reduce_sums(dist: MPI, guard: Guard, keys: list[str], n: int, sums: dict[str, float],
                what: str) -> tuple[int, dict[str, float]]:
    """Collective: the total sample count and the summed ``sums`` (failures raised everywhere)."""
    buf = np.array([1.0 if guard.failed else 0.0, float(n), *(sums.get(k, 0.0) for k in keys)])
    dist.allreduce_sum(buf)
    if buf[0] > 0:
        dist.raise_failures(guard, what)
    return int(buf[1]), dict(zip(keys, buf[2:].tolist(), strict=True))


def run_evaluate_distributed(model: Model, x: Data, y: Data, batch_size: int | None,
                             distributed: Any) -> dict[str, float]:
    """``Model.evaluate(..., distributed=)``: the logs over the union of the ranks' samples
    (``"replicated"``: each rank evaluates its part of the same data), equal on every rank."""
    dist = check_distributed(distributed, "evaluate")
    if batch_size is not None and (isinstance(batch_size, bool) or not hasattr(batch_size, "__index__")
                                   or int(batch_size) < 1):
        raise InvalidParameterError(f"evaluate: batch_size must be an int >= 1 or None, got {batch_size!r}")

    def body() -> dict[str, float]:
        guard = Guard()
        keys = log_keys(model)
        info: dict[str, Any] = {}
        with guard.region("checking the data"):
            xs, ys = _checked(model, x, y, "evaluate")
            info = {"signature": FlatLayout(model).signature(), "n": xs[0].shape[0],
                    "crc": data_crc(xs + ys) if dist.shard == "replicated" else 0}
        agree(dist, guard, "evaluate", info)
        n_part, sums = 0, {}
        with guard.region("evaluate"):
            if dist.shard == "replicated":
                lo, hi = dist.bounds(xs[0].shape[0])
                xs, ys = [v[lo:hi] for v in xs], [v[lo:hi] for v in ys]
            n_part = xs[0].shape[0]
            sums = sums_of(model, xs, ys, None if batch_size is None else int(batch_size))
        n, total = reduce_sums(dist, guard, keys, n_part, sums, "evaluate")
        return {k: v / n for k, v in total.items()}

    return dist.run(body)


def run_fit_distributed(model: Model, x: Data, y: Data, epochs: int, *, batch_size: int | None,
                        validation_data: tuple[Data, Data] | None, validation_split: float,
                        callbacks: list[Callback] | None, verbose: int, shuffle: bool,
                        seed: int | None, initial_epoch: int, distributed: Any) -> History:
    """``Model.fit(..., distributed=)`` (see the module docstring); the arguments mean what they
    mean for ``fit``, ``batch_size`` being the GLOBAL batch (summed over the ranks)."""
    dist = check_distributed(distributed, "fit")
    model._require_compiled("fit")
    check_fit_counts(epochs, initial_epoch, batch_size)
    if validation_data is not None and (not isinstance(validation_data, (tuple, list))
                                        or len(validation_data) != 2):
        raise InvalidParameterError("fit: validation_data must be a pair (x_val, y_val)")
    history = History()
    cbs = CallbackList([*(callbacks or []), history], model)
    from rnnkit.distributed._loop import FitLoop

    loop = FitLoop(model, dist, cbs, history, epochs=int(epochs), initial_epoch=int(initial_epoch),
                   batch_size=None if batch_size is None else int(batch_size), shuffle=bool(shuffle),
                   verbose=bool(verbose))
    return dist.run(lambda: loop.run(x, y, validation_data, validation_split, seed))


def start(model: Model, dist: MPI, x: Data, y: Data, validation_data: tuple[Data, Data] | None,
          validation_split: float, seed: int | None) -> tuple[Any, ...]:
    """The collective start of ``fit``: checked data, the agreed layout, the shared generator,
    N (the global sample count); rank 0's weights and optimizer state on every rank."""
    guard = Guard()
    info: dict[str, Any] = {}
    xs: Arrays = []
    ys: Arrays = []
    val: tuple[Arrays, Arrays] | None = None
    rng = np.random.default_rng(0)
    with guard.region("checking the data"):
        xs, ys = _checked(model, x, y, "fit")
        if validation_data is not None:
            val = _checked(model, validation_data[0], validation_data[1], "fit: validation_data")
        elif validation_split:
            xs, ys, vx, vy = _split(model, xs, ys, validation_split)
            val = (vx, vy)
        rng = make_rng(seed)  # as a single process makes it (seed=None: the global stream, else entropy)
        state = rng.bit_generator.state if seed is None and dist.is_root else None
        info = {"signature": FlatLayout(model).signature(), "n": xs[0].shape[0], "rng": state,
                "crc": data_crc(xs + ys + (val[0] + val[1] if val else [])) if dist.shard == "replicated"
                else 0}
    infos = agree(dist, guard, "fit", info)
    if seed is None:  # every rank draws the batches from rank 0's generator
        rng.bit_generator.state = infos[0]["rng"]
    n_total = int(sum(inf["n"] for inf in infos)) if dist.shard == "local" else int(infos[0]["n"])
    n_max = int(max(inf["n"] for inf in infos))
    layout = FlatLayout(model)
    layout.bcast_weights(dist)
    opt_state = dist.bcast(optimizer_state(model.optimizer, layout) if dist.is_root else None)
    if not dist.is_root and opt_state is not None:
        set_optimizer_state(model.optimizer, layout, opt_state)
    return xs, ys, val, layout, rng, n_total, n_max, guard


__all__ = ["agree", "local_step", "log_keys", "reduce_sums", "run_evaluate_distributed",
           "run_fit_distributed", "start", "sums_of"]
