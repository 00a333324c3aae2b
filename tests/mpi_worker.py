"""The program ``tests/test_distributed.py`` runs on every rank (``mpiexec -n N python
mpi_worker.py MODE OUT``), and the cases it shares with the single-process references there.

Each rank writes ``OUT/stderr.<rank>`` (its own stderr, redirected at start) and, for the
training modes, ``OUT/rank<rank>.npz`` (the weights of every case) and ``OUT/rank<rank>.json``
(histories and evaluate results). Modes:

- ``equal``: LSTM + Dense, float32 and float64, Adam and SGD, mini-batches whose last one is
  uneven (17 samples in batches of 8: a last batch of ONE sample, so a rank gets nothing; in
  batches of 7: parts of 4/3 and 2/1), with a LearningRateScheduler on rank 0 and rank 1's
  weights zeroed before ``fit`` (which starts from rank 0's); plus
  ``evaluate``, EarlyStopping, a callback that records which rank ran it, a ``"local"``
  shard case, ``seed=None`` under a global seed, a resume from rank 0's model and optimizer
  state, a stateful LSTM, masks with sample weights and L2 (a sequence output and a last-step
  output), and a two-input, two-output graph model with a shared LSTM.
- ``raise``: rank 1's loss raises at its 3rd call (step 3); ``abort``: rank 1's gradient
  allreduce raises at step 3 (outside any guarded region); ``die``: rank 1 exits at step 3
  (the ranks' collectives time out after 30 s, a backstop should the process manager miss the
  death); ``stall``: rank 1 sleeps for 10 minutes at step 3, alive, and rank 0's collective
  times out after 5 s; ``callback``: a callback (on rank 0) raises after the 2nd step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import rnnkit as rk

#: (name, dtype, optimizer, batch_size)
CASES = [(f"{dt}-{opt}-b{bs}", dt, opt, bs) for dt in ("float32", "float64") for opt in ("adam", "sgd")
         for bs in (8, 7)]
EPOCHS = 2
#: the collectives' timeout (seconds) of the modes that need one other than the default
TIMEOUTS = {"die": 30.0, "stall": 5.0}


def data(dtype: str, n: int = 17) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(n, 6, 3)).astype(dtype)
    y = np.stack([x[:, :, 0].sum(1), x[:, -1, 1] * x[:, 0, 2]], axis=1).astype(dtype)
    return x, y


def build(dtype: str, opt: str, loss: Any = "mse") -> rk.Sequential:
    model = rk.Sequential([rk.LSTM(5, "tanh", seed=11, dtype=dtype),
                           rk.Dense(2, "linear", seed=12, dtype=dtype)])
    model.compile(rk.Adam(0.02) if opt == "adam" else rk.SGD(0.1), loss, metrics=["mae"])
    return model


def schedule(epoch: int, lr: float) -> float:
    return lr if epoch == 0 else lr * 0.5


def fit_case(model: rk.Sequential, dtype: str, bs: int, **kw: Any) -> rk.History:
    x, y = data(dtype)
    return model.fit(x, y, EPOCHS, batch_size=bs, seed=3, validation_split=0.2,
                     callbacks=[rk.LearningRateScheduler(schedule)], **kw)


def stop_case(extra: list[Any] | None = None, **kw: Any) -> tuple[rk.Sequential, rk.History]:
    """EarlyStopping on a monitor that cannot improve by 10: stops after epoch 2 of 6."""
    model = build("float64", "adam")
    x, y = data("float64")
    es = rk.EarlyStopping(monitor="val_loss", patience=1, min_delta=10.0)
    hist = model.fit(x, y, 6, batch_size=5, seed=4, validation_data=(x[:6], y[:6]),
                     callbacks=[es, *(extra or [])], **kw)
    return model, hist


def local_case(dist: Any = None) -> rk.Sequential:
    """Full-batch steps, no shuffling: with shard="local" rank r holds its array_split part."""
    model = build("float64", "sgd")
    x, y = data("float64")
    if dist is not None:
        lo, hi = dist.bounds(len(x))
        x, y = x[lo:hi], y[lo:hi]
    model.fit(x, y, 3, shuffle=False, distributed=dist)
    model.evaluation = model.evaluate(x, y, batch_size=3, return_dict=True, distributed=dist)  # type: ignore[attr-defined]
    return model


def global_seed_case(dist: Any = None) -> rk.Sequential:
    """``seed=None`` with a global seed: the batches come from the global stream."""
    rk.set_global_seed(5)
    model = build("float64", "sgd")
    x, y = data("float64")
    model.fit(x, y, 2, batch_size=5, distributed=dist)
    rk.set_global_seed(None)
    return model


def resume_case(dist: Any = None) -> rk.Sequential:
    """Adam, one epoch trained on rank 0 alone (as if rank 0 had loaded a checkpoint with the
    optimizer's moments), then a second epoch on every rank with ``initial_epoch=1``."""
    model = build("float64", "adam")
    x, y = data("float64")
    if dist is None or dist.is_root:
        model.fit(x, y, 1, batch_size=5, seed=1)
    model.fit(x, y, 2, batch_size=5, seed=2, initial_epoch=1, distributed=dist)
    return model


def stateful_case(dist: Any = None) -> rk.Sequential:
    """A stateful LSTM on consecutive chunks (no shuffling, batches of 8 of 16 samples)."""
    model = rk.Sequential([rk.LSTM(4, "tanh", seed=31, dtype="float64", stateful=True),
                           rk.Dense(1, "linear", seed=32, dtype="float64")])
    model.compile(rk.SGD(0.1), "mse")
    x, y = data("float64", 16)
    model.fit(x, y[:, :1], 3, batch_size=8, shuffle=False, distributed=dist)
    return model


def graph_case(dist: Any = None) -> tuple[rk.GraphModel, rk.History]:
    """Two inputs, a SHARED LSTM (its gradients summed over both uses), two outputs, float64,
    Adam, mini-batches of 7 with the evaluate result."""
    b = rk.GraphBuilder()
    i1 = b.input(rk.Shape.with_free_batch((1, 6, 3)))
    i2 = b.input(rk.Shape.with_free_batch((1, 6, 3)))
    lstm = rk.LSTM(4, "tanh", seed=21, dtype="float64")
    h1, h2 = b.add(lstm, [i1]), b.add(lstm, [i2])
    joined = b.add(rk.Concatenate(-1, dtype="float64"), [h1, h2])  # merge layers default to float32
    out1 = b.add(rk.Dense(2, "linear", seed=22, dtype="float64"), [joined])
    out2 = b.add(rk.Dense(1, "linear", seed=23, dtype="float64"), [h2])
    model = b.build([out1, out2])
    model.compile(rk.Adam(0.02), "mse", metrics=["mae"])
    x, y = data("float64")
    hist = model.fit([x, x[::-1].copy()], [y, y[:, :1] * 2], 2, batch_size=7, seed=8, distributed=dist)
    return model, hist


def weighted_case(seq: bool, dist: Any = None) -> rk.Sequential:
    """Masks (``lengths=``), per-sample weights and L2 on every weight, float64, mini-batches of
    7 of 17 (the last has 3 samples): ``seq`` a masked sequence output (the loss normalized by
    the valid steps of the whole batch), else the last valid step's output."""
    model = rk.Sequential([rk.LSTM(4, "tanh", seed=41, dtype="float64", return_sequences=seq),
                           rk.Dense(2, "linear", seed=42, dtype="float64",
                                    kernel_regularizer=rk.regularizers.L2(0.01),
                                    bias_regularizer=rk.regularizers.L1(0.02))])
    rk.attach_regularization(model.layers[0], kernel_regularizer=rk.regularizers.L2(0.03),
                             recurrent_regularizer="l2")
    model.compile(rk.Adam(0.02), "mse", metrics=["mae"])
    x, y = data("float64")
    lengths = np.random.default_rng(9).integers(1, 7, len(x))
    yy = np.repeat(y[:, None, :], 6, axis=1) * np.linspace(0.5, 1.5, 6)[None, :, None] if seq else y
    sw = np.linspace(0.2, 2.0, len(x))
    model.fit(x, yy, 2, batch_size=7, seed=6, lengths=lengths, sample_weight=sw, distributed=dist)
    model.evaluation = model.evaluate(x, yy, sample_weight=sw, lengths=lengths, return_dict=True,  # type: ignore[attr-defined]
                                      distributed=dist)
    return model


class RankLog(rk.models._callbacks.Callback):
    """Appends this process's rank to a file at every epoch end."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path, self.rank = path, rank

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        with open(self.path, "a") as fh:
            fh.write(f"{self.rank}\n")


def run_equal(dist: Any, out: Path) -> None:
    weights: dict[str, np.ndarray] = {}
    report: dict[str, Any] = {"size": dist.size}
    for name, dt, opt, bs in CASES:
        model = build(dt, opt).build((None, 6, 3))
        if dist.rank == 1:  # fit starts from rank 0's weights, whatever the others hold
            model.set_weights([np.zeros_like(w) for w in model.get_weights()])
        hist = fit_case(model, dt, bs, distributed=dist)
        for k, w in enumerate(model.get_weights()):
            weights[f"{name}/{k}"] = w
        ev = model.evaluate(*data(dt), batch_size=4, return_dict=True, distributed=dist)
        report[name] = {"history": hist.history, "lr": model.optimizer.learning_rate, "evaluate": ev}
    model, hist = stop_case([RankLog(out / "callback_ranks.txt", dist.rank)], distributed=dist)
    report["stop"] = {"epochs": hist.epoch, "history": hist.history}
    for k, w in enumerate(model.get_weights()):
        weights[f"stop/{k}"] = w
    local = local_case(rk.distributed.MPI(shard="local"))
    for k, w in enumerate(local.get_weights()):
        weights[f"local/{k}"] = w
    report["local"] = {"evaluate": local.evaluation}  # type: ignore[attr-defined]
    for k, w in enumerate(global_seed_case(dist).get_weights()):
        weights[f"global_seed/{k}"] = w
    for k, w in enumerate(resume_case(dist).get_weights()):
        weights[f"resume/{k}"] = w
    for k, w in enumerate(stateful_case(dist).get_weights()):
        weights[f"stateful/{k}"] = w
    for seq in (True, False):
        wm = weighted_case(seq, dist)
        for k, w in enumerate(wm.get_weights()):
            weights[f"weighted-{seq}/{k}"] = w
        report[f"weighted-{seq}"] = wm.evaluation  # type: ignore[attr-defined]
    model, hist = graph_case(dist)
    report["graph"] = {"history": hist.history}
    for k, w in enumerate(model.get_weights()):
        weights[f"graph/{k}"] = w
    np.savez(out / f"rank{dist.rank}.npz", **weights)
    (out / f"rank{dist.rank}.json").write_text(json.dumps(report))


class FailingLoss(rk.MeanSquaredError):
    """MSE that raises (or exits) on rank ``rank`` at its ``at``-th call."""

    def __init__(self, rank: int, at: int, how: str) -> None:
        super().__init__()
        self.rank, self.at, self.how, self.calls = rank, at, how, 0

    def value_and_grad(self, y_true: Any, y_pred: Any) -> tuple[float, np.ndarray]:
        self.calls += 1
        if self.calls == self.at and self.rank == 1:
            if self.how == "die":
                os._exit(3)
            if self.how == "stall":
                time.sleep(600)
            raise ValueError(f"injected failure at step {self.at}")
        return super().value_and_grad(y_true, y_pred)


class FailingCallback(rk.models._callbacks.Callback):
    """Raises at the end of the 2nd batch (callbacks run on rank 0 only)."""

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        if batch == 1:
            raise RuntimeError("injected callback failure")


def run_failure(dist: Any, mode: str) -> None:
    if mode == "abort" and dist.rank == 1:
        from rnnkit.distributed._buffers import FlatLayout

        calls = [0]
        real = FlatLayout.allreduce

        def failing(self: FlatLayout, d: Any) -> None:
            calls[0] += 1
            if calls[0] == 3:
                raise RuntimeError("injected allreduce failure at step 3")
            real(self, d)

        FlatLayout.allreduce = failing  # type: ignore[method-assign]
    loss = FailingLoss(dist.rank, 3, mode) if mode in ("raise", "die", "stall") else "mse"
    model = build("float32", "sgd", loss)
    x, y = data("float32", 40)
    model.fit(x, y, 5, batch_size=8, seed=0, distributed=dist,
              callbacks=[FailingCallback()] if mode == "callback" else None)
    print(f"rank {dist.rank} finished", flush=True)


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    dist = rk.distributed.MPI(timeout=TIMEOUTS[mode]) if mode in TIMEOUTS else rk.distributed.MPI()
    err = open(out / f"stderr.{dist.rank}", "w")  # noqa: SIM115 - lives as long as the process
    os.dup2(err.fileno(), 2)
    sys.stderr = err
    if mode == "equal":
        run_equal(dist, out)
    else:
        run_failure(dist, mode)


if __name__ == "__main__":
    main()
