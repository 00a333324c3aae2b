"""The forecasting network the command line trains (its file, the model plus the settings that
turn CSV rows into its input and its output back into data units, is
:func:`rnnkit.io.save_forecaster`'s).

Default network (LSTNet's "highway", Lai et al. 2018): a recurrent branch plus a linear
autoregressive branch over the last ``p`` steps of the window, added::

    x = (batch, window, features)       the standardised window (x[:, -1] its newest row)
    yhat = Dense_r(cell^layers(x))  +  c + sum_{k=1..p} sum_{f} a_{k,f} * x[:, window - k, f]
           `-- recurrent branch --'    `------------- highway: linear AR(p) ------------'

``cell^layers``: ``layers`` recurrent layers of ``units`` (all but the last with
``return_sequences=True``); ``Dense_r`` a linear ``Dense(1)``. With the target as the only
feature (the default, and what ``--backtest-windows`` needs) the highway is the AR(p) model of
the target; with more features it is linear in the last ``p`` rows of every feature. ``p``
(``--highway-lags``) defaults to the whole window. Before training the highway starts at the
least-squares AR(p) fit on the training windows and ``Dense_r`` at zero, so training starts from
the linear AR model and the recurrent branch learns a nonlinear correction of it (early stopping
on the validation loss keeps it only where it helps). ``--no-highway`` gives the recurrent
branch alone::

    (batch, window, features) -> [cell]*layers -> (batch, units) -> Dense(1) -> (batch, 1)

trained with Adam and the mean squared error on standardised values, mini-batches shuffled by a
seeded generator, early stopping on the validation loss (best weights restored) and a
checkpoint of the best weights.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import rnnkit as rk
from rnnkit.cli._common import CliError
from rnnkit.layers import Add, Cropping1D, Dense, Flatten
from rnnkit.models import EarlyStopping, ModelCheckpoint, SequentialBuilder
from rnnkit.timeseries import ForecastSpec, WindowArrays
from rnnkit.timeseries._baselines import BLOCK

CELLS = {"lstm": "LSTM", "gru": "GRU", "rnn": "SimpleRNN"}
#: the names of the highway's Dense layer and of the recurrent branch's output Dense layer
HIGHWAY, RECURRENT_OUT = "highway", "recurrent_out"


@dataclass(frozen=True)
class TrainConfig:
    """Network and training settings (the ``rnnkit train`` flags). ``highway``: the highway's
    lags ``p`` (``--highway-lags``; None: the whole window), or 0 for no highway
    (``--no-highway``)."""

    cell: str = "lstm"
    units: int = 32
    layers: int = 1
    epochs: int = 100
    batch_size: int = 32
    lr: float = 0.005
    patience: int = 20
    seed: int = 0
    verbose: bool = True
    highway: int | None = None

    def lags(self, window: int) -> int:
        """The highway's ``p`` for a window of ``window`` rows (0: no highway); CliError when
        ``--highway-lags`` exceeds the window."""
        if self.highway is None:
            return window
        if self.highway > window:
            raise CliError(f"--highway-lags {self.highway} reads more rows than the window holds; "
                           f"expected at most --window {window}")
        return self.highway

    def name(self, window: int) -> str:
        """The network's name in reports: ``"LSTM (32 units x 1) + AR(12) highway"``."""
        p = self.lags(window)
        return f"{self.cell.upper()} ({self.units} units x {self.layers})" + (
            f" + AR({p}) highway" if p else "")


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The :class:`TrainConfig` of ``rnnkit train``'s parsed flags; CliError for both
    ``--no-highway`` and ``--highway-lags``, or ``--highway-lags`` beyond ``--window``."""
    lags, off = getattr(args, "highway_lags", None), getattr(args, "no_highway", False)
    if off and lags is not None:
        raise CliError(f"--no-highway drops the highway that --highway-lags {lags} sizes; give one of them")
    cfg = TrainConfig(cell=args.cell, units=args.units, layers=args.layers, epochs=args.epochs,
                      batch_size=args.batch_size, lr=args.lr, patience=args.patience, seed=args.seed,
                      verbose=not args.quiet,
                      highway=0 if off else lags)
    cfg.lags(args.window)                 # --highway-lags beyond the window: refused before any work
    return cfg


def build_network(cfg: TrainConfig, window: int, n_features: int) -> Any:
    """The forecaster of the module docstring for (None, window, n_features) inputs, compiled: a
    functional model (recurrent branch + highway) or, with ``cfg.highway == 0``, a Sequential
    one (the recurrent branch alone)."""
    if cfg.cell not in CELLS:
        raise CliError(f"unknown cell {cfg.cell!r}; choose lstm, gru or rnn")
    cls = getattr(rk, CELLS[cfg.cell])
    p = cfg.lags(window)
    model: Any
    if p == 0:
        builder = SequentialBuilder()
        for k in range(cfg.layers):
            builder = builder.add(cls(cfg.units, "tanh", return_sequences=k < cfg.layers - 1,
                                      seed=cfg.seed + k))
        builder = builder.add(Dense(1, "linear", seed=cfg.seed + cfg.layers))
        model = builder.build(rk.Shape.with_free_batch((1, window, n_features)))
    else:
        inputs = rk.Input((window, n_features), name="window")
        x = inputs
        for k in range(cfg.layers):
            x = cls(cfg.units, "tanh", return_sequences=k < cfg.layers - 1, seed=cfg.seed + k)(x)
        recurrent = Dense(1, "linear", seed=cfg.seed + cfg.layers, name=RECURRENT_OUT)(x)
        last = Cropping1D((window - p, 0), name="highway_lags")(inputs) if p < window else inputs
        highway = Dense(1, "linear", seed=cfg.seed + cfg.layers + 1, name=HIGHWAY)(
            Flatten(name="highway_flat")(last))
        model = rk.Model(inputs, Add(name="forecast")([recurrent, highway]))
    model.compile(rk.Adam(cfg.lr, 0.9, 0.999, 1e-8, 0.0), rk.MeanSquaredError())
    return model


def highway_start(x: np.ndarray, y: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """``(kernel (p * F, 1), bias (1,))``: the least-squares fit of ``y`` (N, 1) on the last
    ``p`` rows of the windows ``x`` (N, window, F), flattened as ``Flatten`` does (row by row),
    plus an intercept (the minimum-norm solution when the lags are collinear). Solved by a QR
    factorisation updated block by block (``BLOCK`` windows at a time, as the AR baseline's fit:
    ``R_k = qr([R_{k-1}; block_k])``), so the memory stays a few blocks however many windows."""
    n, k = x.shape[0], p * x.shape[2] + 1
    r = np.zeros((0, k + 1))
    for a in range(0, n, BLOCK):
        lags = np.asarray(x[a:a + BLOCK, x.shape[1] - p:, :], dtype=np.float64).reshape(-1, k - 1)
        rows = np.concatenate([lags, np.ones((lags.shape[0], 1)),
                               np.asarray(y[a:a + BLOCK], dtype=np.float64).reshape(-1, 1)], axis=1)
        r = np.asarray(np.linalg.qr(np.concatenate([r, rows]), mode="r"))
    coef, *_ = np.linalg.lstsq(r[:k, :k], r[:k, k], rcond=None)
    return coef[:-1].reshape(-1, 1), coef[-1:]


def start_from_ar(model: Any, train: WindowArrays) -> bool:
    """Set a highway network's highway to :func:`highway_start` on ``train`` and its recurrent
    branch's output ``Dense`` to zero, so the untrained network is the least-squares AR(p)
    model; a network without a highway is left as it is. Returns whether it set them."""
    names = {layer.name for layer in model.layers}
    if HIGHWAY not in names or not len(train):
        return False
    hw = model.get_layer(HIGHWAY)
    p = hw.get_weights()[0].shape[0] // train.x.shape[2]
    kernel, bias = highway_start(train.x, train.y, p)
    hw.set_weights([kernel.astype(np.float32), bias.astype(np.float32)])
    rec = model.get_layer(RECURRENT_OUT)
    rec.set_weights([np.zeros_like(w) for w in rec.get_weights()])
    return True


def train_network(model: Any, cfg: TrainConfig, train: WindowArrays, val: WindowArrays | None,
                  checkpoint: Path | None = None, distributed: Any = None) -> dict[str, list[float]]:
    """Fit on ``train`` (scaled), early-stopping on ``val``; returns the History's dict. A highway
    network starts from the AR fit (:func:`start_from_ar`) and, with validation windows and
    ``patience > 0``, ends there when no epoch's ``val_loss`` is below the start's (the
    checkpoint then holds the start too, and a line says so).
    ``distributed``: an ``rnnkit.distributed.MPI`` (fit on every rank; rank 0 checkpoints)."""
    has_val = val is not None and len(val) > 0
    monitor = "val_loss" if has_val else "loss"
    start = start_from_ar(model, train)
    start_loss, start_weights = np.inf, None
    if start and has_val and cfg.patience > 0:
        assert val is not None
        start_weights = model.get_weights()
        start_loss = float(model.evaluate(val.x, val.y, batch_size=cfg.batch_size))
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
    out = {k: [float(v) for v in vals] for k, vals in hist.history.items()}
    if start_weights is not None and out.get(monitor) and min(out[monitor]) >= start_loss:
        model.set_weights(start_weights)            # no epoch beat the AR start on validation
        if checkpoint is not None and (distributed is None or distributed.is_root):
            model.save_weights(str(checkpoint))
        if distributed is None or distributed.is_root:
            print(f"kept the least-squares AR start: no epoch's val_loss (best {min(out[monitor]):.6g}) "
                  f"beat its {start_loss:.6g}")
    return out


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
                                                                       strict=True)
                    if not (spec.scale == "window" and n == spec.target)),
    ]
    if spec.scale == "window":
        lines.append(f"window scaling: {spec.target!r} standardised by each window's own mean and std "
                     f"(std floor {spec.window_floor:.6g}); forecasts mapped back with them")
    if spec.extra:
        lines.append("training: " + json.dumps(spec.extra, sort_keys=True))
    return "\n".join(lines)


__all__ = ["CELLS", "HIGHWAY", "RECURRENT_OUT", "TrainConfig", "build_network", "describe_spec",
           "highway_start", "start_from_ar", "train_config", "train_network"]
