"""The forecasting network the command line trains, and its file (the model plus the settings
that turn CSV rows into its input and its output back into data units).

Network: ``layers`` recurrent layers of ``units`` (all but the last with
``return_sequences=True``), then ``Dense(1)`` (linear)::

    (batch, window, features) -> [cell]*layers -> (batch, units) -> Dense(1) -> (batch, 1)

trained with Adam and the mean squared error on standardised values, mini-batches shuffled by a
seeded generator, early stopping on the validation loss (best weights restored) and a
checkpoint of the best weights.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

import rnnkit as rk
from rnnkit import io as rio
from rnnkit._errors import FileFormatError
from rnnkit._files import check_regular
from rnnkit.cli._common import CliError
from rnnkit.io._sniff import sniff
from rnnkit.layers import Dense
from rnnkit.models import EarlyStopping, ModelCheckpoint, SequentialBuilder
from rnnkit.timeseries import DataError, ForecastSpec, WindowArrays

#: metadata key under which the forecast settings are stored in the model file
SPEC_KEY = "rnnkit.forecast"
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


def predict_values(model: Any, spec: ForecastSpec, windows: WindowArrays,
                   target: np.ndarray | None = None) -> np.ndarray:
    """Forecasts in data units for scaled ``windows`` (S,), at data rows ``windows.pos``;
    ``target`` (raw, data rows) anchors the changes a ``difference`` model predicts."""
    z = np.asarray(model.predict(windows.x.astype(np.float32)), dtype=np.float64)
    return spec.to_levels(z, target, windows.pos)


def save_forecaster(model: Any, spec: ForecastSpec, path: str | os.PathLike[str]) -> Path:
    """Write the model file at ``path`` (``rnnkit.io.save_model``: one safetensors file, the
    architecture in its metadata) with ``spec`` as one more metadata entry, :data:`SPEC_KEY`.

    The write is atomic (temporary file, then rename)."""
    p = Path(path)
    rio.save_model(model, p, metadata={SPEC_KEY: spec.to_json()})
    return p


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The safetensors metadata of ``path``; ``{}`` for a model file of another format (a Keras
    archive: it has none); FileFormatError when it is safetensors that cannot be read."""
    p = check_regular(path, "a model file")
    if sniff(p) != "safetensors":
        return {}
    try:
        with safe_open(p, framework="numpy") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, ValueError, TypeError, OSError) as e:
        raise FileFormatError(f"{path}: not a safetensors file ({e})") from None


def load_forecaster(path: str | os.PathLike[str]) -> tuple[Any, ForecastSpec | None]:
    """The model at ``path`` and its forecast settings (None for a model saved without them).

    A missing file, or a file that is not an rnnkit model, raises an rnnkit error naming it."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such model file")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a model file")

    model = getattr(rk, "load_model", rio.load_model)(p)
    text = read_metadata(p).get(SPEC_KEY)
    return model, (ForecastSpec.from_json(text) if text is not None else None)


def describe_spec(spec: ForecastSpec) -> str:
    """A few lines: what the forecaster reads, predicts, and how it scales."""
    xs = spec.x_scaler
    lines = [
        f"forecast: {spec.target!r}, {spec.horizon} row(s) after a window of {spec.window} rows",
        f"features: {', '.join(spec.features)}"
        + (" (first differences; it forecasts the change)" if spec.difference else ""),
        f"index column of the training data: {spec.index_name}",
        f"scaling (fitted on training rows): transform {xs.transform}; "
        + "; ".join(f"{n}: mean {m:.6g}, std {s:.6g}" for n, m, s in zip(xs.names, xs.mean, xs.std,
                                                                       strict=True)),
    ]
    if spec.extra:
        lines.append("training: " + json.dumps(spec.extra, sort_keys=True))
    return "\n".join(lines)


__all__ = ["CELLS", "SPEC_KEY", "TrainConfig", "build_network", "describe_spec", "load_forecaster",
           "predict_values", "read_metadata", "save_forecaster", "train_network"]
