"""The one training loop: one STEP, one EVALUATOR and one EPOCH LOOP for every way ``fit`` runs
(arrays, batch sources, the shards of an MPI job). Arguments and data are checked before any of
this runs (:mod:`rnnkit.models._fit`); nothing here re-checks what cannot have changed.

A :class:`Team` is the set of processes that train one model together. The base class is ONE
process, and each of its hooks is the identity; ``rnnkit.distributed.MPI`` overrides them with
collectives. One STEP on a :class:`Batch` (this process's part of the global batch)::

    preds       = model forward(xb)                          in the step's training Ctx
    totals      = team.totals([n_r, V_r per output])          n_b = sum n_r, V = sum V_r
    loss_k      = Loss(y_k, pred_k, w_k) * s_k               this process's SHARE of the global loss
                  masked sequence output: w = valid * sample_weight * P_r / V  (s = 1)
                  otherwise:              w = sample_weight,                   s = n_r / n_b
    loss        = sum_k loss_k + weight penalties + activity penalties (checked finite)
    model backward(d loss / d pred)                          no checks on the way
    grads       = team.sum_grads(...)                        the gradient of the GLOBAL loss
    grads      += regularizer.grad(weight) per regularized weight
    optimizer.apply_gradients(grads); constraints          one write (rnnkit._consistency):
                                                             a reader sees all or none of it

With one process ``n_r = n_b`` and ``V_r = V``: every share is the whole, nothing is scaled, and
the step is the plain single-process step. The loss and the gradients are tested for NaN/Inf
every step, the gradients by the sum of their squares (one BLAS dot each; NaN and Inf carry
into it, and only a sum that is not finite, which a finite array can give by overflowing, is
followed by the elementwise test). A step that produced NaN or Inf anywhere is run again with
every layer output and gradient checked, so the error names where it first appeared. The new
weights are not tested each step: a weight the optimizer step made NaN/Inf is looked for (and
named, with the step that made it) when the next step's loss or gradients are not finite,
before any per-batch callback sees it, and after the epoch's last step, before the epoch's
callbacks and validation (a non-finite weight that left the next losses finite is named with
that last step).
The step's logs are the loss and the metrics on the pre-update predictions; metrics of a
team are the means of the processes' values weighted by their sample counts. Nothing is looked
up per step that :class:`~rnnkit.models._plan.Plan` found when the run started; per-batch
callback hooks run, and the step's logs are made as a dict, only when a callback listens.

A model's pass is its own: a Sequential or graph model runs its layers, a subclassed model
(:mod:`rnnkit.models._subclass`) runs its ``call`` on a tape of its own and its backward is that
tape's gradient, so this one step trains every kind of model. A model overriding Keras'
``train_step`` has that run as its step instead (:func:`custom_step`): its returned dict is the
step's logs, and the epoch's logs are the last step's (Keras' stateful metrics); it trains in one
process.

One EPOCH: the batches of :class:`Batches` (arrays: a permutation drawn each epoch when
shuffling, from the fit generator, which then draws one Ctx seed per step; a batch source:
its batches as given), callbacks around each batch and epoch, ``model.stop_training`` checked
after each batch (Keras 3), the epoch's logs the sample-weighted means of the batch logs, then
``val_*`` from :func:`evaluate`, the checkpoint, the progress bar.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rnnkit import _penalties as _pen
from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._mask import Mask
from rnnkit._tape import call_scope
from rnnkit.models._batch import Batch
from rnnkit.models._callbacks import CallbackList, History
from rnnkit.models._checks import NonFiniteAt, all_finite, unlist
from rnnkit.models._checks import Trainable as Model
from rnnkit.models._objective import loss_and_grads, metric_values
from rnnkit.models._plan import Facts, Plan, eval_facts, non_finite
from rnnkit.models._progress import EpochBar
from rnnkit.models._weighting import output_weights

Arrays = list[np.ndarray]


class Batches(Protocol):
    """What the loop walks: ``epoch(e)`` yields the epoch's batches, ``steps()`` their number
    when known, ``end_epoch()`` runs after the epoch's last batch."""

    def epoch(self, epoch: int) -> Iterator[Batch]: ...

    def steps(self) -> int | None: ...

    def end_epoch(self) -> None: ...


_AT_ONCE = contextlib.nullcontext()  # (a nullcontext can be entered any number of times)


class Team:
    """One process training alone: every hook is the identity (see the module docstring)."""

    rank = 0
    size = 1
    is_root = True
    @property
    def failed(self) -> bool:
        """Whether this process holds an error for the next collective (never, alone)."""
        return False

    def start(self, model: Model, data: Batch, val: Batch | None, rng: np.random.Generator | None,
              seed: int | None) -> None:
        """Before the first step, with the checked data: nothing to agree on alone."""

    def region(self, where: str) -> contextlib.AbstractContextManager[Any]:
        """Where an exception goes: raised at once (a team holds it for the next collective)."""
        return _AT_ONCE

    def at(self, epoch: int, epochs: int, batch: int, of: str) -> str:
        """How errors name a step (``epoch``, ``batch`` from 1; ``of``: ``"/steps"`` or "")."""
        return f"epoch {epoch}/{epochs} (batch {batch}{of})"

    def step_seed(self, seed: int) -> int:
        """This process's Ctx seed for a step whose single-process seed is ``seed``."""
        return seed

    def totals(self, local: np.ndarray) -> np.ndarray:
        """The sums of ``local`` over the processes (alone: ``local``)."""
        return local

    def sum_grads(self, plan: Plan, ctx: Ctx, stats: np.ndarray) -> tuple[np.ndarray, list[Any]]:
        """The summed ``stats`` and ``(layer, name, gradient)`` for every trainable weight with a
        gradient, summed over the processes (alone: the Ctx's own arrays, no copies)."""
        grads = ctx.grads
        return stats, [(la, n, grads[(la, n)]) for la, n in plan.trainable if (la, n) in grads]

    def epoch_batches(self, n: int, bs: int | None, shuffle: bool, rng: np.random.Generator) -> list[Any]:
        """The sample indices of this process's part of each batch of an epoch."""
        return index_batches(n, bs, shuffle, rng)

    def eval_batches(self, n: int, bs: int | None) -> list[slice]:
        """This process's part of each evaluation batch of ``n`` samples (alone: consecutive
        batches of ``bs``, all at once when None)."""
        step = max(1, n if bs is None else bs)
        return [slice(a, min(a + step, n)) for a in range(0, n, step)]

    def stop_after_batch(self, model: Model) -> bool:
        return bool(model.stop_training)

    def hook(self, cbs: CallbackList, hook: str, *args: Any) -> None:
        """Run a callback hook (a team runs them on its root process only)."""
        cbs.call(hook, *args)

    def sync(self, model: Model, history: History, final: bool = False) -> None:
        """After the epoch's hooks: nothing to agree on alone."""

    def finish(self, model: Model, history: History, cbs: CallbackList, logs: dict[str, float]) -> None:
        """After the last epoch: ``on_train_end``."""
        cbs.call("on_train_end", logs)


SOLO = Team()


def index_batches(n: int, bs: int | None, shuffle: bool, rng: np.random.Generator) -> list[Any]:
    """One full batch (``slice(None)``) when ``bs`` is None or ``>= n``, else ``ceil(n / bs)``
    batches: index arrays over a permutation drawn from ``rng`` when ``shuffle``, consecutive
    slices otherwise."""
    if bs is None or bs >= n:
        return [slice(None)]
    if not shuffle:  # consecutive samples: slices (views, no copies)
        return [slice(a, min(a + bs, n)) for a in range(0, n, bs)]
    order = rng.permutation(n)
    return [order[a:a + bs] for a in range(0, n, bs)]


class NonFiniteLoss(NonFiniteAt):
    """Internal: the batch's loss itself is NaN/Inf (``values``: the step's log values, the loss
    first); nothing was applied."""

    def __init__(self, where: str, values: np.ndarray) -> None:
        super().__init__(where)
        self.values = values


def _valid_counts(preds: Arrays, masks: list[Any]) -> list[float]:
    return [float(m.valid(p.shape[1]).sum()) if isinstance(m, Mask) and p.ndim >= 3 else 0.0
            for p, m in zip(preds, masks, strict=True)]


def _first_non_finite(model: Model, batch: Batch, seed: int | None, lw: Any, scales: Any) -> str | None:
    """Run the step's passes again in a Ctx of the same seed with every layer output and
    gradient checked; where the first NaN/Inf appears (None: nowhere this time)."""
    ctx = Ctx.training(seed)
    try:
        preds, _ = model._forward_masks(batch.xs, ctx, True, batch.masks)
        _, grads = loss_and_grads(model, batch.ys, preds, lw, scales)
        model._backward(grads, ctx, True)
    except NonFiniteAt as e:
        return e.where
    return None


def _forward_counted(model: Model, batch: Batch, ctx: Ctx, team: Team,
                     at: str) -> tuple[Arrays | None, list[Any], np.ndarray]:
    """This process's forward pass on its part of ``batch`` (none for an empty part) and the
    team's totals ``[samples, valid positions of each output...]`` over every part."""
    local = np.zeros(1 + model.n_outputs)
    preds: Arrays | None = None
    out_masks: list[Any] = []
    with team.region(at):
        n = batch.n
        if n and not team.failed:
            preds, out_masks = model._forward_masks(batch.xs, ctx, False, batch.masks)
            local[0] = n
            if out_masks.count(None) != len(out_masks):
                local[1:] = _valid_counts(preds, out_masks)
    return preds, out_masks, team.totals(local)


def train_step(model: Model, batch: Batch, ctx: Ctx, team: Team, at: str,
               plan: Plan) -> tuple[int, np.ndarray]:
    """One optimizer step (see the module docstring); returns the global batch size and the
    pre-update values of ``plan.keys`` (float64). Raises NonFiniteLoss when the loss is NaN/Inf
    (nothing applied), and NonFiniteError naming ``at`` and the first NaN/Inf elsewhere (or an
    earlier step's non-finite weight that caused it)."""
    if plan.custom is not None:
        return custom_step(model, batch, ctx, plan)
    n_out = model.n_outputs
    ctx.skip_input_grad(*plan.unread)   # (before the pass: a model taping its pass reads it there)
    preds, out_masks, tot = _forward_counted(model, batch, ctx, team, at)
    n_b = int(tot[0])
    stats = np.zeros(len(plan.keys))
    penalty = 0.0
    with team.region(at):
        if not team.failed:  # the same on every process (the weights are), also with no part
            penalty = plan.penalties.weight_penalty() + _pen.activity_penalty(ctx)
        if preds is not None and not team.failed:
            if batch.sws is None and out_masks.count(None) == len(out_masks):
                lw: list[Any] | None = None
                mw: list[Any] | None = None
            else:
                lw, mw = output_weights(preds, out_masks, batch.sws, tot[1:])
            share = batch.n / n_b
            scales = None if share == 1.0 else [1.0 if tot[1 + k] > 0 else share for k in range(n_out)]
            loss, grads = loss_and_grads(model, batch.ys, preds, lw, scales, plan.fused)
            whole = loss + penalty
            lname = type(model.loss).__name__
            metrics = metric_values(model, batch.ys, preds, mw) if plan.metered else {}
            if not math.isfinite(whole):
                stale = plan.stale_error(model)
                if stale is not None:
                    raise stale
                raise NonFiniteLoss(f"the loss ({lname}) is {whole}", np.array([whole, *metrics.values()]))
            stats[0] = loss
            if metrics:
                stats[1:] = [v * share for v in metrics.values()] if share != 1.0 else list(metrics.values())
            for g in grads:
                if not all_finite(g):
                    raise plan.stale_error(model) or non_finite(
                        model, at, f"the gradient of the loss ({lname}) w.r.t. the model output")
            model._backward(grads, ctx, False)
            for (layer, n), g in ctx.grads.items():
                if not all_finite(g):
                    stale = plan.stale_error(model)
                    if stale is not None:
                        raise stale
                    where = _first_non_finite(model, batch, ctx.seed, lw, scales)
                    raise non_finite(model, at, where or f"the gradient of {layer.name}.{n}")
    stats, pairs = team.sum_grads(plan, ctx, stats)
    with team.region(f"{at}, optimizer step"):
        if not team.failed:
            pairs = plan.penalties.add_grads(pairs)
            with WEIGHTS:   # readers in other threads see the weights before or after, whole
                plan.apply(model, pairs)
                plan.penalties.apply_constraints()  # (a constraint keeps finite weights finite)
    stats[0] += penalty
    return n_b, stats


def custom_step(model: Model, batch: Batch, ctx: Ctx, plan: Plan) -> tuple[int, np.ndarray]:
    """One step of a model that overrides Keras' ``train_step(data)``: ``data`` is ``(x, y)``,
    or ``(x, y, sample_weight)`` with sample weights (one array, or a list per input / output,
    as the model's call and loss take them); the layer calls of its pass draw their seeds from
    the step's Ctx seed (:func:`rnnkit._tape.call_scope`). Its returned dict is the step's logs
    (``{name: value}``; each value read with ``float``): the first step's keys become the
    run's log keys (:attr:`Plan.keys`), and every later step must return the same keys
    (InvalidInputError naming them otherwise). The optimizer's ``apply_gradients`` inside it
    writes the weights as one write (:mod:`rnnkit._consistency`)."""
    assert plan.custom is not None
    train, _ = plan.custom
    x = unlist(batch.xs)
    y = unlist(batch.ys)
    data = (x, y) if batch.sws is None else (x, y, unlist(batch.sws))
    with call_scope(None, ctx.seed):
        logs = train(data)
    if not isinstance(logs, dict) or not all(isinstance(k, str) for k in logs):
        raise InvalidInputError(f"{model.name}.train_step must return a dict of str -> number (Keras' "
                                f"logs), got {type(logs).__name__}")
    keys = list(logs)
    if plan.keys != keys:
        if plan.previous is not None:
            raise InvalidInputError(f"{model.name}.train_step returned the keys {keys}; the earlier steps "
                                    f"returned {plan.keys}")
        plan.keys = keys
    return batch.n, np.array([float(v) for v in logs.values()], dtype=np.float64)


def guarded_step(model: Model, batch: Batch, ctx: Ctx, team: Team, at: str, nan_stops: bool,
                 plan: Plan) -> tuple[int, np.ndarray]:
    """:func:`train_step`; a NaN/Inf loss becomes NonFiniteError naming ``at`` and the first
    layer output that was not finite, except when ``nan_stops`` (TerminateOnNaN is among the
    callbacks): then the step's values go to the callbacks, which stop training."""
    with np.errstate(over="ignore", invalid="ignore"):  # reported as NonFiniteError
        try:
            return train_step(model, batch, ctx, team, at, plan)
        except NonFiniteLoss as e:
            if nan_stops:
                return batch.n, e.values
            where = _first_non_finite(model, batch, ctx.seed, None, None) or e.where
    raise non_finite(model, at, where)


def check_weights(model: Model, team: Team, plan: Plan) -> None:
    """NonFiniteError naming the last step (``plan.previous``) when a weight is NaN/Inf."""
    if plan.previous is not None:
        with team.region(plan.previous):
            stale = plan.stale_error(model)
            if stale is not None:
                raise stale


def evaluate(model: Model, batches: Iterator[Batch], team: Team = SOLO, where: str = "evaluate",
             facts: Facts | None = None) -> dict[str, float]:
    """Loss (penalties included, as Keras reports it) and metrics in inference passes: the
    sample-weighted mean of the batch values. In a team each batch is spread over the
    processes (``batches`` yields this process's part of each, possibly empty) and each part's
    loss is its share of the batch's loss, normalized as the step normalizes it, so the result
    is the one process's on the same batches. Empty: {}. ``facts``: :func:`eval_facts` of the
    model, when the caller evaluates it more than once (each epoch's validation)."""
    keys, regs = eval_facts(model) if facts is None else facts
    n_out = model.n_outputs
    sums = np.zeros(1 + len(keys))
    for b in batches:
        ctx = Ctx.inference()
        preds, out_masks, tot = _forward_counted(model, b, ctx, team, where)
        with team.region(where):
            if preds is not None and not team.failed:
                share = b.n / tot[0]
                lw, mw = output_weights(preds, out_masks, b.sws, tot[1:])
                scales = [1.0 if tot[1 + k] > 0 else share for k in range(n_out)]
                loss, _ = loss_and_grads(model, b.ys, preds, lw, scales)
                pen = regs.weight_penalty() + _pen.activity_penalty(ctx)
                loss += pen if share == 1.0 else pen * share
                mets = list(metric_values(model, b.ys, preds, mw).values())
                vals = [loss, *(mets if share == 1.0 else [v * share for v in mets])]
                sums[0] += b.n
                sums[1:] += [tot[0] * v for v in vals]
    tot = team.totals(sums)
    if tot[0] == 0:
        return {}
    return {k: float(v / tot[0]) for k, v in zip(keys, tot[1:], strict=True)}   # Python floats, as Keras


@dataclass
class Resume:
    """A checkpoint's two hooks: ``restore(history, callbacks) -> epochs done or None`` after
    ``on_train_begin``; ``save(epochs_done, history, callbacks)`` after each epoch."""

    restore: Callable[[History, list[Any]], int | None]
    save: Callable[[int, History, list[Any]], None]


def run(model: Model, batches: Batches, rng: np.random.Generator, cbs: CallbackList, history: History, *,
        epochs: int, initial_epoch: int, verbose: int, team: Team = SOLO,
        validate: Callable[[], dict[str, float]] | None = None, resume: Resume | None = None,
        nan_stops: bool = False, on_empty_epoch: Callable[[int], None] | None = None) -> History:
    """The epoch loop (see the module docstring); every argument already checked."""
    model.stop_training = False
    team.hook(cbs, "on_train_begin", {})
    team.sync(model, history)
    start = initial_epoch
    if resume is not None:
        done = resume.restore(history, cbs.callbacks)
        start = start if done is None else (epochs if model.stop_training else done)
    logs: dict[str, float] = {}
    plan = Plan(model, cbs)
    if plan.custom is not None and team.size > 1:
        raise InvalidParameterError(f"{model.name}: a model overriding train_step trains in one process; "
                                    f"distributed= runs the trainer's own step on each rank")
    bar = EpochBar(model.name, epochs, start, verbose if team.is_root else 0)
    try:
        for epoch in range(start, epochs):
            team.hook(cbs, "on_epoch_begin", epoch, {})
            if plan.custom is not None:
                plan.custom[1]()   # Keras resets the metrics at each epoch's start
            team.sync(model, history)
            epoch_batches = batches.epoch(epoch)  # (arrays: the epoch's permutation drawn here)
            total = batches.steps()
            of = "" if total is None else f"/{total}"
            sums: list[float] = []
            values = np.zeros(0)
            seen = steps_run = 0
            for b, batch in enumerate(epoch_batches):
                steps_run = b + 1
                ctx = Ctx.training(team.step_seed(int(rng.integers(0, 2**63 - 1))))
                if plan.batch_begin:
                    team.hook(cbs, "on_train_batch_begin", b, {})
                at = team.at(epoch + 1, epochs, b + 1, of)
                nb, values = guarded_step(model, batch, ctx, team, at, nan_stops, plan)
                plan.previous = at
                sums = [s + nb * v for s, v in zip(sums or [0.0] * len(values), values.tolist(), strict=True)]
                seen += nb
                if plan.batch_end:
                    check_weights(model, team, plan)  # a callback never sees a NaN/Inf weight
                    # Keras 3's batch logs: the running means over the epoch so far, each batch
                    # weighted by its samples, as the epoch's logs are (the last equals them)
                    team.hook(cbs, "on_train_batch_end", b,
                              {k: float(v) for k, v in zip(plan.keys, values, strict=True)}
                              if plan.custom is not None   # (a train_step's own running values)
                              else {k: float(s / seen) for k, s in zip(plan.keys, sums, strict=True)})
                if team.stop_after_batch(model):
                    break
            if seen == 0 and on_empty_epoch is not None:
                on_empty_epoch(epoch)
                break
            check_weights(model, team, plan)
            if seen == 0:
                logs = {}
            elif plan.custom is not None:   # Keras: the last step's logs (its metrics' running values)
                logs = {k: float(v) for k, v in zip(plan.keys, values, strict=True)}
            else:
                logs = {k: float(v / seen) for k, v in zip(plan.keys, sums, strict=True)}
            if validate is not None:
                logs.update({f"val_{k}": v for k, v in validate().items()})
            team.hook(cbs, "on_epoch_end", epoch, logs)
            batches.end_epoch()
            if resume is not None:
                resume.save(epoch + 1, history, cbs.callbacks)
            bar.epoch_done(logs, model.stop_training, steps_run)
            team.sync(model, history)
            if model.stop_training:
                break
    finally:
        bar.close()
    team.finish(model, history, cbs, logs)
    model.history = history
    return history
