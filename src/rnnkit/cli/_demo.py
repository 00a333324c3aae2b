"""``rnnkit demo``: a small LSTM forecaster on the bundled yearly sunspots, held-out metrics
beside persistence, a least-squares AR(p) and the training mean (yearly data has no calendar
season, so no seasonal-naive row), the model and two pictures saved.

The task: forecast next year's mean sunspot number from the previous :data:`WINDOW` years.
Windows are split in time order — the last :data:`TEST_YEARS` target years (1959-2008) are
held out for the final comparison and never touched in training; of the earlier windows the
last :data:`VAL_SPLIT` serve early stopping. Values pass through ``sqrt`` (the classic
variance-stabilising transform for counts) and are standardised with statistics of the
training rows only. The baselines see the same information: persistence repeats the last
year; AR(p) (p <= WINDOW by AIC) is fitted by least squares, and the mean taken, on every year
before the test part.

The verdict comes from a rolling-origin backtest (:func:`rnnkit.timeseries.backtest`, the
ranking ``rnnkit train --backtest-windows`` prints): :data:`BACKTEST_WINDOWS` windows of
:data:`BACKTEST_HORIZON` years that tile the held-out test years (origins 1959, 1969, ...,
1999), the LSTM run recursively a decade ahead from each origin with its weights fixed, the
baselines (naive, mean, drift, AR(p) with ``p <= WINDOW`` chosen on validation) refitted on
each origin's history. Every forecaster is ranked by MASE; the last line names the winner
and its margin over the runner-up (or, when a baseline wins, by how much it beats the LSTM).

Everything is seeded (:data:`SEED`), so two runs print the same numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnkit import datasets
from rnnkit.cli._backtest import backtest_table
from rnnkit.cli._common import compile_status, ensure_dir, metrics_table
from rnnkit.cli._model import TrainConfig, build_network, train_network
from rnnkit.cli._plots import forecast_plot, have_matplotlib, loss_curve, remove_pictures
from rnnkit.cli._prepare import Comparison, compare, predict_blocks, prepare
from rnnkit.io import save_forecaster
from rnnkit.kernels import _warm
from rnnkit.timeseries import Backtest, Forecaster, backtest, baselines

WINDOW = 9
TEST_YEARS = 50
VAL_SPLIT = 0.2
TRANSFORM = "sqrt"
#: the backtest: windows x horizon = TEST_YEARS, so its windows are exactly the held-out years
BACKTEST_WINDOWS = 5
BACKTEST_HORIZON = 10
CONFIG = TrainConfig(cell="lstm", units=24, layers=1, epochs=600, batch_size=64, lr=0.01,
                     patience=30, seed=0, verbose=True, highway=0)   # LSTM(24) -> Dense(1), no highway


@dataclass(frozen=True)
class DemoResult:
    """What the demo measured and wrote."""

    comparison: Comparison
    backtest: Backtest
    model_name: str
    test_years: np.ndarray
    epochs_run: int
    seconds: float
    model_path: Path
    loss_png: Path | None
    forecast_png: Path | None

    @property
    def winner(self) -> str:
        """The forecaster ranked first by MASE on the backtest (the verdict's subject)."""
        return self.backtest.ranking()[0].name

    @property
    def beats_baselines(self) -> bool:
        """Whether the LSTM ranks first on the backtest (the verdict the demo prints)."""
        return self.winner == self.model_name


def run_demo(out: str | Path = "rnnkit_out", *, verbose: bool = True, plots: bool = True,
             progress: bool | None = None) -> DemoResult:
    """Train, compare, save (see the module docstring); prints its report when ``verbose`` and
    a progress bar when ``progress`` (default: ``verbose``)."""
    say = print if verbose else (lambda *a, **k: None)
    cfg = TrainConfig(**{**CONFIG.__dict__, "verbose": verbose if progress is None else progress})
    model = build_network(cfg, WINDOW, 1)
    for layer in model.layers:     # an empty kernel cache: the backward compiled by a second process,
        if getattr(layer, "cell", None) is not None:   # started first (it compiles while data loads)
            _warm.start(layer.cell, layer.input_dim, layer.dtype)
    sun = datasets.sunspots()
    years, values = sun.years, sun.values
    out_dir = ensure_dir(out)
    prep = prepare(values[:, None], values, ["SUNACTIVITY"], "SUNACTIVITY", window=WINDOW, horizon=1,
                   val_split=VAL_SPLIT, n_test=TEST_YEARS, transform=TRANSFORM, index_name="YEAR",
                   what="sunspots")
    yr = lambda w: f"{years[w.pos[0]]}-{years[w.pos[-1]]}"  # noqa: E731
    say(f"rnnkit demo: yearly mean sunspot number {years[0]}-{years[-1]} ({len(years)} years, "
        f"bundled, NOAA NGDC)")
    say(f"task: forecast next year from the last {WINDOW} years with LSTM({cfg.units}) -> Dense(1); "
        f"sqrt + standardise fitted on the training rows")
    say(f"split in time: train {yr(prep.train)} ({len(prep.train)} windows), validation {yr(prep.val)} "
        f"({len(prep.val)}, early stopping), held-out test {yr(prep.test)} ({len(prep.test)})", flush=True)
    t0 = time.perf_counter()
    with compile_status() if cfg.verbose else contextlib.nullcontext():
        history = train_network(model, cfg, prep.train, prep.val)
    secs = time.perf_counter() - t0
    pred = predict_blocks(model, prep.spec, prep.test, prep.target)
    fit_pos = np.concatenate([prep.train.pos, prep.val.pos])
    cmp = compare(f"LSTM({cfg.units}) rnnkit", pred, prep.target, prep.test.pos, fit_pos, WINDOW, 1)
    epochs_run = len(history.get("loss", []))
    val = history.get("val_loss", [])
    best = int(np.argmin(val)) + 1 if val else None
    say(f"trained {epochs_run} epochs in {secs:.1f} s (best validation epoch {best}, weights restored)")
    say(metrics_table(cmp.rows, f"held-out test, last {TEST_YEARS} years ({yr(prep.test)}), "
                                f"sunspot number, one year ahead:"))
    model_name = f"LSTM({cfg.units})"
    forecaster = Forecaster(model, prep.spec)
    bt = backtest(values, {model_name: lambda hist, h: forecaster.path(hist, h, what="sunspots"),
                           **baselines(None, max_p=WINDOW)},
                  horizon=BACKTEST_HORIZON, windows=BACKTEST_WINDOWS, name="sunspots",
                  min_history=WINDOW + 2)
    say(backtest_table(bt, f"backtest: {BACKTEST_WINDOWS} windows of {BACKTEST_HORIZON} years from "
                           f"{years[bt.origins[0]]} on, the LSTM run recursively (MASE scaled by the "
                           f"in-sample naive MAE):"))
    model_path = save_forecaster(model, prep.spec, out_dir / "model.safetensors")
    loss_png = forecast_png = None
    if not (plots and have_matplotlib()):
        for gone in remove_pictures(out_dir):
            say(f"removed {gone} (a picture of an earlier run)")
    else:
        loss_png = loss_curve(history, out_dir / "loss.png", best_epoch=best,
                              title=f"rnnkit demo: LSTM({cfg.units}) on sunspots, loss per epoch")
        ty = years[prep.test.pos]
        vy = years[prep.val.pos]
        val_pred = predict_blocks(model, prep.spec, prep.val, prep.target)
        forecast_png = forecast_plot(
            years[prep.train.pos[0]:], values[prep.train.pos[0]:],
            {f"LSTM (test RMSE {cmp.rows[0][1]:.1f})": (ty, pred),
             f"AR({cmp.ar_order}) (test RMSE {cmp.rows[2][1]:.1f})": (ty, cmp.ar),
             f"persistence (test RMSE {cmp.rows[1][1]:.1f})": (ty, cmp.persistence)},
            out_dir / "forecast.png", split_at=float(ty[0]) - 0.5, ylabel="mean sunspot number",
            title="rnnkit demo: one-year-ahead forecasts vs actual",
            before=("LSTM, validation years (early stopping)", vy, val_pred))
    result = DemoResult(cmp, bt, model_name, years[prep.test.pos], epochs_run, secs, model_path, loss_png,
                        forecast_png)
    say(bt.verdict(model_name))
    say(f"saved the model to {model_path}")
    if loss_png is not None and forecast_png is not None:
        say(f"saved the loss curve to {loss_png}")
        say(f"saved the forecast-vs-actual picture to {forecast_png}")
    elif plots:
        say('no pictures: matplotlib is not installed (pip install "rnnkit[plot]")')
    say(f"try: rnnkit predict {model_path} {datasets.path('sunspots')} --steps 5")
    return result


def demo_command(args: argparse.Namespace) -> int:
    run_demo(args.out, verbose=True, plots=not args.no_plots, progress=not args.quiet)
    return 0
