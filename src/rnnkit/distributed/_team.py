"""``fit`` and ``evaluate`` over MPI ranks: the team hooks of the one training loop
(:mod:`rnnkit.models._trainer`), filled with collectives.

Start (every rank): the data is checked on each rank, then ONE allgather compares what every
rank holds (the model's weight names, shapes and dtypes; with ``shard="replicated"`` the sample
count and a CRC-32 of the data, masks and sample weights, which must be equal). For ``fit``,
rank 0's weights, optimizer slots, step count and learning rate are broadcast to every rank.

One STEP on a global batch of ``n_b`` samples (a sample-index array shared by every rank in
``"replicated"`` mode; each rank's own part of its shard in ``"local"`` mode)::

    replicated: rank r takes its contiguous part of the batch (numpy.array_split's rule; a part
                may be empty when n_b < ranks)
    forward on the part, in the rank's own training Ctx
    Allreduce [failed?, n_r, V_r per output]                  (V: valid steps of a masked output)
    this rank's share of the global loss (the trainer's step), backward, its gradients
    Allreduce [failed?, loss share, metrics, has-gradient per weight]; Allreduce (sum) of each
    flat gradient buffer (one per dtype)
    regularizer gradients; optimizer.apply_gradients(summed gradients); constraints

Because each rank's loss is its share of the loss over the GLOBAL batch (normalized by ``n_b``,
or by ``V`` for a masked sequence output, sample and class weights included), the summed
gradient is the gradient of the global loss: the step equals a single process's step on the
same batch, up to rounding. Every rank sums the same numbers in the same order, so weights stay
bit-identical (a CRC-32 of the weights is compared across ranks at the end of ``fit``).

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
from rnnkit.distributed._buffers import FlatLayout, data_crc, optimizer_state, set_optimizer_state
from rnnkit.distributed._comm import Comm
from rnnkit.distributed._errors import DistributedError
from rnnkit.distributed._guard import Guard
from rnnkit.models._batch import Batch
from rnnkit.models._callbacks import CallbackList, History
from rnnkit.models._checks import Trainable as Model
from rnnkit.models._trainer import Plan, Team, index_batches


def rank_seed(step_seed: int, rank: int) -> int:
    """The Ctx seed of ``rank`` for a step: the single-process seed on rank 0, a seed derived
    from it and the rank elsewhere (independent dropout masks per rank)."""
    if rank == 0:
        return step_seed
    return int(np.random.SeedSequence([step_seed, rank]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def _arrays(data: Batch | None) -> list[np.ndarray]:
    """What the replicated-data CRC covers: inputs, targets, masks, sample weights."""
    if data is None:
        return []
    out = [*data.xs, *data.ys]
    for m, x in zip(data.masks or [], data.xs, strict=False):
        if m is not None:
            out.append(np.ascontiguousarray(m.valid(x.shape[1])))
    out.extend(np.asarray(w) for w in data.sws or [] if w is not None)
    return out


def agree(dist: Comm, guard: Guard, what: str, info: dict[str, Any]) -> list[dict[str, Any]]:
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


class MPITeam(Team):
    """The ranks of ``dist`` running one ``fit`` or ``evaluate`` (``what``) of ``model``."""

    def __init__(self, dist: Comm, model: Model, what: str) -> None:
        self.dist, self.model, self.what = dist, model, what
        self.rank, self.size, self.is_root = dist.rank, dist.size, dist.is_root
        self.guard = Guard()
        self.layout: FlatLayout | None = None
        self.n_total = 0
        self.n_max = 0
        self.local_rng: np.random.Generator | None = None

    @property
    def failed(self) -> bool:
        return self.guard.failed

    def region(self, where: str) -> Guard:
        return self.guard.region(where)

    def start(self, model: Model, data: Batch | None, val: Batch | None, rng: np.random.Generator | None,
              seed: int | None) -> None:
        d = self.dist
        info: dict[str, Any] = {}
        with self.guard.region("checking the data"):
            if data is not None and not self.guard.failed:
                state = rng.bit_generator.state if rng is not None and seed is None and d.is_root else None
                info = {"signature": FlatLayout(model).signature(), "n": data.n, "rng": state,
                        "crc": data_crc(_arrays(data) + _arrays(val)) if d.shard == "replicated" else 0}
        infos = agree(d, self.guard, self.what, info)
        if rng is not None and seed is None:  # every rank draws the batches from rank 0's generator
            rng.bit_generator.state = infos[0]["rng"]
        self.n_total = int(sum(inf["n"] for inf in infos)) if d.shard == "local" else int(infos[0]["n"])
        self.n_max = int(max(inf["n"] for inf in infos))
        self.layout = FlatLayout(model)
        if self.what != "fit":
            return
        assert rng is not None
        self.layout.bcast_weights(d)
        opt_state = d.bcast(optimizer_state(model.optimizer, self.layout) if d.is_root else None)
        if not d.is_root and opt_state is not None:
            set_optimizer_state(model.optimizer, self.layout, opt_state)
        if d.shard == "local":
            self.local_rng = np.random.default_rng([int(rng.integers(0, 2**63 - 1)), d.rank])

    # -- steps -------------------------------------------------------------------------------
    def at(self, epoch: int, epochs: int, batch: int, of: str) -> str:
        return f"epoch {epoch}/{epochs}, batch {batch}{of}"

    def step_seed(self, seed: int) -> int:
        return rank_seed(seed, self.rank)

    def epoch_batches(self, n: int, bs: int | None, shuffle: bool, rng: np.random.Generator) -> list[Any]:
        if self.local_rng is None:  # replicated: each rank's part of the single-process batches
            parts = []
            for idx in index_batches(self.n_total, bs, shuffle, rng):
                if isinstance(idx, slice):
                    start, stop, _ = idx.indices(self.n_total)
                    lo, hi = self.dist.bounds(stop - start)
                    parts.append(slice(start + lo, start + hi))
                else:
                    lo, hi = self.dist.bounds(len(idx))
                    parts.append(idx[lo:hi])
            return parts
        steps = 1 if bs is None else min(math.ceil(self.n_total / bs), self.n_max)
        order = self.local_rng.permutation(n) if shuffle else np.arange(n)
        return list(np.array_split(order, steps))

    def eval_batches(self, n: int, bs: int | None) -> list[slice]:
        """Collective in ``"local"`` mode (the ranks' sample counts). ``"replicated"``: each
        rank's part of the single-process batches; ``"local"``: ``ceil(N / bs)`` batches (at most
        the largest shard's size; one when None), each rank contributing a near-equal part of
        its shard to each."""
        if self.dist.shard == "replicated":
            parts = []
            for whole in super().eval_batches(n, bs):
                lo, hi = self.dist.bounds(whole.stop - whole.start)
                parts.append(slice(whole.start + lo, whole.start + hi))
            return parts
        ns = [int(v) for v in self.dist.allgather(int(n))]
        steps = 1 if bs is None else max(1, min(math.ceil(sum(ns) / bs), max(ns)))
        edges = [len(a) for a in np.array_split(np.arange(n), steps)]
        out, a = [], 0
        for size in edges:
            out.append(slice(a, a + size))
            a += size
        return out

    def totals(self, local: np.ndarray) -> np.ndarray:
        buf = np.concatenate([[1.0 if self.guard.failed else 0.0], local])
        self.dist.allreduce_sum(buf)
        if buf[0] > 0:
            self.dist.raise_failures(self.guard, self.what)
        return buf[1:]

    def sum_grads(self, plan: Plan, ctx: Ctx, stats: np.ndarray) -> tuple[np.ndarray, list[Any]]:
        layout = self.layout
        assert layout is not None
        present = layout.load_grads(None if self.guard.failed else ctx, 1.0)
        k = len(stats)
        tot = self.totals(np.concatenate([stats, present]))
        layout.allreduce(self.dist)
        return tot[:k], layout.grad_pairs(tot[k:])

    def stop_after_batch(self, model: Model) -> bool:
        return False  # rank 0's stop flag reaches the others after the epoch

    # -- callbacks and the end ---------------------------------------------------------------
    def hook(self, cbs: CallbackList, hook: str, *args: Any) -> None:
        """Run a callback hook on rank 0 only; an exception is held for the next collective."""
        if self.is_root and not self.guard.failed:
            with self.guard.region(f"callback {hook}"):
                cbs.call(hook, *args)

    def sync(self, model: Model, history: History, final: bool = False) -> None:
        """Collective: every rank's held error (raised on every rank), then rank 0's stop flag
        and learning rate (and at the end its History) on every rank."""
        d, g = self.dist, self.guard
        mine: dict[str, Any] = {"error": g.describe() if g.failed else None}
        if d.is_root:
            mine.update(stop=bool(model.stop_training), lr=float(model.optimizer.learning_rate),
                        history=(history.history, history.epoch) if final else None)
        ctls = d.allgather(mine)
        failed = {r: c["error"] for r, c in enumerate(ctls) if c["error"] is not None}
        if failed:
            raise DistributedError(self.what, failed, d.rank, d.size) from g.error
        if not d.is_root:
            model.stop_training = bool(ctls[0]["stop"])
            model.optimizer.learning_rate = ctls[0]["lr"]
            if final:
                history.history, history.epoch = ctls[0]["history"]

    def check_identical(self) -> None:
        """Collective: held errors are raised on every rank; then every rank's weights must
        have rank 0's CRC-32, else DistributedError."""
        assert self.layout is not None
        g = self.guard
        got = self.dist.allgather((self.layout.weights_crc(), g.describe() if g.failed else None))
        failed = {r: note for r, (_, note) in enumerate(got) if note is not None}
        if failed:
            raise DistributedError("fit", failed, self.dist.rank, self.dist.size) from g.error
        crc0 = got[0][0]
        bad = {r: f"its weights differ from rank 0's after training (CRC-32 {c:08x} vs {crc0:08x}): the "
                  f"ranks did not take the same steps (an optimizer or callback state that differs "
                  f"between ranks, or an Allreduce that does not give every rank the same sum)"
               for r, (c, _) in enumerate(got) if c != crc0}
        if bad:
            raise DistributedError("fit", bad, self.dist.rank, self.dist.size)

    def finish(self, model: Model, history: History, cbs: CallbackList, logs: dict[str, float]) -> None:
        self.check_identical()
        self.hook(cbs, "on_train_end", logs)
        self.sync(model, history, final=True)
        assert self.layout is not None
        self.layout.bcast_weights(self.dist)  # what on_train_end did to rank 0's weights
