"""The forecasting network the command line trains (its file, the model plus the settings that
turn CSV rows into its input and its output back into data units, is
:func:`rnnkit.io.save_forecaster`'s).

Network: ``layers`` recurrent layers of ``units`` (all but the last with
``return_sequences=True``), then ``Dense(1)`` (linear)::

    (batch, window, features) -> [cell]*layers -> (batch, units) -> Dense(1) -> (batch, 1)

trained with Adam and the mean squared error on standardised values, mini-batches shuffled by a
seeded generator, early stopping on the validation loss (best weights restored) and a
checkpoint of the best weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rnnkit as rk
from rnnkit.cli._common import CliError
from rnnkit.layers import Dense
from rnnkit.models import EarlyStopping, ModelCheckpoint, SequentialBuilder
from rnnkit.timeseries import ForecastSpec, WindowArrays

CELLS = {"lstm": "LSTM", "gru": "GRU", "rnn": "SimpleRNN"}


@dataclass(frozen=True)
class TrainConfig:
    """Network and training settings (the ``rnnkit train`` flags)."""

    cell: str = "lstm"
    units: int = 32
    layers: int = 1
    epochs: int = 100
    batch_size: int = 32
    lr: float = 0.005
    patience: int = 20
    seed: int = 0
    verbose: bool = True


def build_network(cfg: TrainConfig, window: int, n_features: int) -> Any:
    """The Sequential forecaster, built for (None, window, n_features) inputs, compiled."""
    if cfg.cell not in CELLS:
        raise CliError(f"unknown cell {cfg.cell!r}; choose lstm, gru or rnn")
    cls = getattr(rk, CELLS[cfg.cell])
    builder = SequentialBuilder()
    for k in range(cfg.layers):
        builder = builder.add(cls(cfg.units, "tanh", return_sequences=k < cfg.layers - 1,
                                  seed=cfg.seed + k))
    builder = builder.add(Dense(1, "linear", seed=cfg.seed + cfg.layers))
    model = builder.build(rk.Shape.with_free_batch((1, window, n_features)))
    model.compile(rk.Adam(cfg.lr, 0.9, 0.999, 1e-8, 0.0), rk.MeanSquaredError())
    return model


def train_network(model: Any, cfg: TrainConfig, train: WindowArrays, val: WindowArrays | None,
                  checkpoint: Path | None = None, distributed: Any = None) -> dict[str, list[float]]:
    """Fit on ``train`` (scaled), early-stopping on ``val``; returns the History's dict.
    ``distributed``: an ``rnnkit.distributed.MPI`` (fit on every rank; rank 0 checkpoints)."""
    monitor = "val_loss" if val is not None and len(val) else "loss"
    callbacks: list[Any] = []
    if cfg.patience > 0:
        callbacks.append(EarlyStopping(monitor=monitor, patience=cfg.patience,
                                          restore_best_weights=True))
    if checkpoint is not None:
        callbacks.append(ModelCheckpoint(str(checkpoint), monitor=monitor, save_best_only=True))
    hist = model.fit(
        train.x, train.y, epochs=cfg.epochs, batch_size=cfg.batch_size,
        validation_data=(val.x, val.y) if val is not None and len(val) else None,
        callbacks=callbacks, verbose=1 if cfg.verbose else 0, shuffle=True, seed=cfg.seed,
        distributed=distributed,
    )
    return {k: [float(v) for v in vals] for k, vals in hist.history.items()}


def describe_spec(spec: ForecastSpec) -> str:
    """A few lines: what the forecaster reads, predicts, and how it scales."""
    xs = spec.x_scaler
    lines = [
        f"forecast: {spec.target!r}, {spec.horizon} row(s) after a window of {spec.window} rows",
        f"features: {', '.join(spec.features)}"
        + (f" (read as {', '.join(parts)})" if (parts := [p for p, on in (
            ("logarithms", spec.log), (f"seasonal differences at lag {spec.seasonal}", spec.seasonal),
            ("first differences: it forecasts the change", spec.difference)) if on]) else ""),
        f"index column of the training data: {spec.index_name}",
        "missing values: " + (f"read with --missing {spec.missing}" if spec.missing is not None
                              else "policy not stored (an older file): --missing error unless given"),
        f"scaling (fitted on training rows): transform {xs.transform}; "
        + "; ".join(f"{n}: mean {m:.6g}, std {s:.6g}" for n, m, s in zip(xs.names, xs.mean, xs.std,
                                                                       strict=True)),
    ]
    if spec.extra:
        lines.append("training: " + json.dumps(spec.extra, sort_keys=True))
    return "\n".join(lines)


__all__ = ["CELLS", "TrainConfig", "build_network", "describe_spec", "train_network"]
