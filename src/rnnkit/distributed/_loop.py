"""The epoch and step loop of a distributed ``fit`` (the contract is in
:mod:`rnnkit.distributed._fit`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tqdm import tqdm

from rnnkit._ctx import Ctx
from rnnkit._errors import NonFiniteError
from rnnkit.distributed._buffers import FlatLayout
from rnnkit.distributed._errors import DistributedError
from rnnkit.distributed._fit import local_step, log_keys, reduce_sums, start, sums_of
from rnnkit.distributed._mpi import MPI, Guard
from rnnkit.models._base import Data, Model
from rnnkit.models._callbacks import CallbackList, History

Arrays = list[np.ndarray]


def rank_seed(step_seed: int, rank: int) -> int:
    """The Ctx seed of ``rank`` for a step: the single-process seed on rank 0, a seed derived
    from it and the rank elsewhere (independent dropout masks per rank)."""
    if rank == 0:
        return step_seed
    return int(np.random.SeedSequence([step_seed, rank]).generate_state(1, np.uint64)[0] >> np.uint64(1))


class FitLoop:
    """One distributed ``fit``: :meth:`run` is collective (every rank calls it)."""

    def __init__(self, model: Model, dist: MPI, cbs: CallbackList, history: History, *, epochs: int,
                 initial_epoch: int, batch_size: int | None, shuffle: bool, verbose: bool) -> None:
        self.model, self.dist, self.cbs, self.history = model, dist, cbs, history
        self.epochs, self.initial_epoch = epochs, initial_epoch
        self.batch_size, self.shuffle, self.verbose = batch_size, shuffle, verbose
        self.keys = log_keys(model)
        self.guard = Guard()
        self.xs: Arrays = []
        self.ys: Arrays = []
        self.layout: FlatLayout | None = None
        self.n_total = 0
        self.n_max = 0

    # -- rank 0's hooks and the control broadcast --------------------------------------------
    def root_hook(self, hook: str, *args: Any) -> None:
        """Run a callback hook on rank 0 only; an exception is held for the next collective."""
        if self.dist.is_root and not self.guard.failed:
            with self.guard.region(f"callback {hook}"):
                getattr(self.cbs, hook)(*args)

    def sync_control(self, final: bool = False) -> None:
        """Collective: every rank's held error (raised on every rank), then rank 0's stop flag
        and learning rate (and at the end its History) on every rank."""
        d, m, g = self.dist, self.model, self.guard
        mine: dict[str, Any] = {"error": g.describe() if g.failed else None}
        if d.is_root:
            mine.update(stop=bool(m.stop_training), lr=float(m.optimizer.learning_rate),
                        history=(self.history.history, self.history.epoch) if final else None)
        ctls = d.allgather(mine)
        failed = {r: c["error"] for r, c in enumerate(ctls) if c["error"] is not None}
        if failed:
            raise DistributedError("fit", failed, d.rank, d.size) from g.error
        if not d.is_root:
            m.stop_training = bool(ctls[0]["stop"])
            m.optimizer.learning_rate = ctls[0]["lr"]
            if final:
                self.history.history, self.history.epoch = ctls[0]["history"]

    # -- batches and steps -------------------------------------------------------------------
    def batches(self, rng: np.random.Generator, local_rng: np.random.Generator | None) -> list[Any]:
        """This epoch's batches: global index arrays ("replicated", drawn as a single process
        draws them) or this rank's parts of its shard ("local")."""
        if local_rng is None:
            n = self.n_total
            bs = n if self.batch_size is None else min(self.batch_size, n)
            if bs >= n:
                return [slice(None)]
            order = rng.permutation(n) if self.shuffle else np.arange(n)
            return [order[a:a + bs] for a in range(0, n, bs)]
        n_r = self.xs[0].shape[0]
        steps = 1 if self.batch_size is None else min(math.ceil(self.n_total / self.batch_size), self.n_max)
        order = local_rng.permutation(n_r) if self.shuffle else np.arange(n_r)
        return list(np.array_split(order, steps))

    def step(self, idx: Any, step_seed: int, where: str) -> tuple[int, dict[str, float]]:
        """One collective optimizer step on a global batch; returns its size and logs."""
        d, g, model, layout = self.dist, self.guard, self.model, self.layout
        assert layout is not None
        if d.shard == "replicated":
            lo, hi = d.bounds(self.n_total if isinstance(idx, slice) else len(idx))
            mine: Any = slice(lo, hi) if isinstance(idx, slice) else idx[lo:hi]
            n_local = hi - lo
        else:
            mine, n_local = idx, len(idx)
        k = len(self.keys)
        stats = np.zeros(2 + k + len(layout.pairs))
        ctx: Ctx | None = None
        if n_local and not g.failed:
            with g.region(where):
                xb, yb = [v[mine] for v in self.xs], [v[mine] for v in self.ys]
                c = Ctx.training(rank_seed(step_seed, d.rank))
                with np.errstate(over="ignore", invalid="ignore"):  # reported as NonFiniteError
                    logs = local_step(model, xb, yb, c, where)
                stats[2:2 + k] = [n_local * logs[key] for key in self.keys]
                stats[2 + k:] = [1.0 if p in c.grads else 0.0 for p in layout.pairs]
                ctx = c
        stats[0] = 1.0 if g.failed else 0.0
        stats[1] = float(n_local)
        d.allreduce_sum(stats)
        if stats[0] > 0:
            d.raise_failures(g, "fit")
        nb = int(stats[1])
        layout.load_grads(ctx, n_local / nb)
        layout.allreduce(d)
        with g.region(f"{where}, optimizer step"):  # a failure is announced at the next collective
            model.optimizer.apply_gradients(layout.grad_pairs(stats[2 + k:]))
            for key, (layer, n) in model.named_weights().items():
                if not np.isfinite(layer.weight(n)).all():
                    raise NonFiniteError(f"{model.name}: training produced NaN or Inf in {where}: first "
                                         f"at weight {key} ({type(layer).__name__}) after the optimizer step")
        return nb, {key: float(stats[2 + i]) / nb for i, key in enumerate(self.keys)}

    def validate(self, val: tuple[Arrays, Arrays], where: str) -> dict[str, float]:
        """Collective: ``val_*`` logs over the validation samples split across the ranks."""
        vx, vy = val
        n_part, sums = 0, {}
        if not self.guard.failed:
            with self.guard.region(f"{where}, validation"):
                if self.dist.shard == "replicated":
                    lo, hi = self.dist.bounds(vx[0].shape[0])
                    vx, vy = [v[lo:hi] for v in vx], [v[lo:hi] for v in vy]
                n_part = vx[0].shape[0]
                sums = sums_of(self.model, vx, vy, self.batch_size)
        n, total = reduce_sums(self.dist, self.guard, self.keys, n_part, sums, "fit")
        return {f"val_{key}": v / n for key, v in total.items()}

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

    # -- the whole fit -----------------------------------------------------------------------
    def run(self, x: Data, y: Data, validation_data: tuple[Data, Data] | None, validation_split: float,
            seed: int | None) -> History:
        d, model = self.dist, self.model
        self.xs, self.ys, val, self.layout, rng, self.n_total, self.n_max, self.guard = start(
            model, d, x, y, validation_data, validation_split, seed)
        local_rng = (np.random.default_rng([int(rng.integers(0, 2**63 - 1)), d.rank])
                     if d.shard == "local" else None)
        model.stop_training = False
        self.root_hook("on_train_begin", {})
        self.sync_control()
        logs: dict[str, float] = {}
        bar = tqdm(range(self.initial_epoch, self.epochs), desc=model.name, unit="epoch",
                   disable=not (self.verbose and d.is_root), dynamic_ncols=True)
        try:
            for epoch in bar:
                self.root_hook("on_epoch_begin", epoch, {})
                self.sync_control()
                batches = self.batches(rng, local_rng)
                sums: dict[str, float] = {}
                for b, idx in enumerate(batches):
                    where = f"epoch {epoch + 1}/{self.epochs}, batch {b + 1}/{len(batches)}"
                    nb, step_logs = self.step(idx, int(rng.integers(0, 2**63 - 1)), where)
                    for key, v in step_logs.items():
                        sums[key] = sums.get(key, 0.0) + nb * v
                    self.root_hook("on_train_batch_end", b, step_logs)
                logs = {key: v / self.n_total for key, v in sums.items()}
                if val is not None:
                    logs.update(self.validate(val, f"epoch {epoch + 1}/{self.epochs}"))
                self.root_hook("on_epoch_end", epoch, logs)
                if d.is_root:
                    bar.set_postfix({key: f"{v:.4g}" for key, v in logs.items()}, refresh=False)
                self.sync_control()
                if model.stop_training:
                    break
        finally:
            bar.close()
        self.check_identical()
        self.root_hook("on_train_end", logs)
        self.sync_control(final=True)
        self.layout.bcast_weights(d)  # what on_train_end did to rank 0's weights (restore_best_weights)
        model.history = self.history
        return self.history
