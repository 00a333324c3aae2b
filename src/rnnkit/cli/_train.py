"""``rnnkit train DATA.csv --target COL``: window, split in time order, scale on the training
rows, fit with early stopping and a best-weights checkpoint, report validation metrics beside
persistence, AR(p), the training mean and (with a season) the seasonal-naive forecast, say
plainly which of them the model does not beat, and save the model with its forecast settings.

Writes into ``--out`` (default ``./rnnkit_out``): ``model.safetensors`` (the model; the scaler
and windowing settings in its metadata), ``checkpoint.safetensors`` (best weights seen during
training), ``history.csv`` (loss per epoch), ``metrics.json`` and, with matplotlib, its own
``loss.png`` and ``forecast.png`` (pictures an earlier run left there are replaced, or removed
under ``--no-plots``). ``DATA`` is a CSV path or a bundled data set's name (``sunspots``, ``co2``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rnnkit.cli._backtest import seasonal_lag, train_backtest, windows_for
from rnnkit.cli._common import (
    CliError,
    compile_status,
    data_path,
    ensure_dir,
    history_csv,
    metrics_table,
    write_text_atomic,
)
from rnnkit.cli._model import build_network, train_config, train_network
from rnnkit.cli._plots import forecast_plot, have_matplotlib, loss_curve, remove_pictures
from rnnkit.cli._prepare import Comparison, compare, predict_blocks, prepare
from rnnkit.distributed import MPI, DistributedError
from rnnkit.io import DeepAR, save_forecaster
from rnnkit.timeseries import WindowArrays, read_csv, season_of
from rnnkit.timeseries._backtest import mase
from rnnkit.timeseries._panel import read_panel


def parse_columns(text: str | None, target: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]`` (default: the target alone); duplicates are an error."""
    if text is None:
        return [target]
    cols = [c.strip() for c in text.split(",")]
    if not all(cols):
        raise CliError(f"--features: empty column name in {text!r}")
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        raise CliError(f"--features: column(s) named twice: {', '.join(dup)}")
    return cols


def train_command(args: argparse.Namespace) -> int:
    """``rnnkit train``; with ``--distributed mpi`` on every rank of an MPI job: every rank reads
    the data and trains its part of each batch, rank 0 alone prints and writes. An error on one
    rank that the others cannot see (e.g. a file missing on one host) prints
    ``rnnkit: error: rank K failed: ...`` and aborts the whole job, so no rank waits forever."""
    if getattr(args, "panel", False):
        return train_panel(args)
    if getattr(args, "distributed", "none") != "mpi":
        return _train(args, None)

    dist = MPI()
    try:
        return _train(args, dist)
    except DistributedError:
        raise  # raised on every rank at once: main() reports it, no rank is left waiting
    except Exception as e:
        if dist.size > 1:
            dist.abort(e, 2, prefix="rnnkit: error: ", traceback_=False)
        raise


def _train(args: argparse.Namespace, dist: Any) -> int:
    root = dist is None or dist.is_root
    args.data = data_path(args.data)
    features = parse_columns(args.features, args.target)
    cols = features + ([args.target] if args.target not in features else [])
    date_col: str | Literal[False] | None = False if args.date_col == "none" else args.date_col
    table = read_csv(args.data, cols, date_col=date_col, missing=args.missing)
    x_raw = table.matrix(features)
    y_raw = table.columns[args.target]
    # keep what training needs, not the line numbers (8 bytes a row of a long file)
    rows, index_name, notes = len(table), table.index_name, table.notes
    index: np.ndarray | None = table.index
    season = season_of(table.index, table.index_kind) if args.season is None else (args.season or None)
    # --backtest-windows (on by default) / --preprocess: rnnkit.cli._backtest
    calendar = season_of(table.index, table.index_kind)
    windows, why_not = windows_for(args, features, y_raw, calendar)
    if windows:
        del table
        return train_backtest(args, features, y_raw, calendar, index_name, notes, rows, windows)
    if getattr(args, "preprocess", "none") == "auto":
        raise CliError("--preprocess auto chooses on the training rows of a backtest; give "
                       "--backtest-windows K too")
    if why_not is not None:
        notes = (*notes, why_not)
    del table
    plots = not args.no_plots and root and have_matplotlib()
    if not plots:
        index = None                      # only the pictures need it (8 bytes a row)
    prep = prepare(x_raw, y_raw, features, args.target, window=args.window, horizon=args.horizon,
                   val_split=args.val_split, transform=args.transform, index_name=index_name,
                   what=str(args.data), difference=args.difference, missing=args.missing,
                   log=getattr(args, "log", False), seasonal=seasonal_lag(args, season),
                   scale=getattr(args, "scale", "global"))
    cfg = train_config(args)
    out = ensure_dir(args.out) if root else Path(args.out)
    if root:
        for note in notes:
            print(f"note: {note}")
        print(f"{args.data}: {rows} rows, {len(prep.train) + len(prep.val)} windows of "
              f"{args.window} -> {args.target!r} {args.horizon} ahead: {len(prep.train)} train, "
              f"{len(prep.val)} validation" + (" (the last ones)" if len(prep.val) else ""), flush=True)
    model = build_network(cfg, args.window, len(features))
    t0 = time.perf_counter()
    with compile_status() if cfg.verbose and root else contextlib.nullcontext():
        history = train_network(model, cfg, prep.train, prep.val if len(prep.val) else None,
                                checkpoint=out / "checkpoint.safetensors", distributed=dist)
    secs = time.perf_counter() - t0
    if not root:
        return 0
    part = prep.val if len(prep.val) else prep.train
    label = "validation" if len(prep.val) else "training (no validation part: --val-split 0)"
    pred = predict_blocks(model, prep.spec, part, prep.target)
    # the baselines are fitted on the training positions only, like the network
    model_name = cfg.name(args.window)
    cmp = compare(model_name, pred, prep.target, part.pos, prep.train.pos, args.window, args.horizon,
                  season=season)
    epochs_run = len(history.get("loss", []))
    monitored = history.get("val_loss" if len(prep.val) else "loss", [])
    best = int(np.argmin(monitored)) + 1 if monitored and args.patience > 0 else None
    spec = dataclasses.replace(prep.spec, extra={
        "cell": args.cell, "units": args.units, "layers": args.layers,
        "highway_lags": cfg.lags(args.window), "epochs_run": epochs_run,
        "seed": args.seed, "data": str(args.data), "rows": rows, "missing": args.missing,
        "transform": args.transform})
    model_path = save_forecaster(model, spec, out / "model.safetensors")
    write_text_atomic(out / "history.csv", history_csv(history))
    write_text_atomic(out / "metrics.json", json.dumps(
        {"part": "validation" if len(prep.val) else "training", "windows": int(len(part)),
         "metrics": cmp.as_dict(), "epochs_run": epochs_run, "best_epoch": best,
         "beats_every_baseline": not cmp.not_beaten_by_model(), "seconds": round(secs, 3)}, indent=1))
    pictures = draw_pictures(out, history, index, y_raw, part, pred, cmp, label.split()[0],
                             index_name, args.target, plots=not args.no_plots)
    which = "validation" if len(prep.val) else "training"
    print(f"trained {epochs_run} epoch(s) in {secs:.1f} s " + (
        f"(best {which} epoch {best}, weights restored)" if best is not None
        else "(early stopping off: the last epoch's weights)"))
    print(metrics_table(cmp.rows, f"{label} metrics on {len(part)} window(s), in data units:"))
    print(cmp.verdict(model_name))
    print(f"model saved to {model_path} (scaler and window settings inside); best weights in "
          f"{out / 'checkpoint.safetensors'}; loss per epoch in {out / 'history.csv'}")
    for line in pictures:
        print(line)
    return 0


def draw_pictures(out: Path, history: dict[str, list[float]], index: np.ndarray | None,
                  actual: np.ndarray,
                  part: WindowArrays, pred: np.ndarray, cmp: Comparison, part_name: str, index_name: str,
                  target: str, *, plots: bool) -> list[str]:
    """This run's loss.png and forecast.png in ``out`` (replacing an earlier run's), or none
    (removing an earlier run's) without matplotlib or with ``--no-plots``. Returns what to say."""
    if not (plots and have_matplotlib()):
        said = [f"removed {p} (a picture of an earlier run)" for p in remove_pictures(out)]
        return said + ([] if not plots else ['no pictures: matplotlib is not installed '
                                             '(pip install "rnnkit[plot]")'])
    assert index is not None             # kept whenever pictures can be drawn
    val = history.get("val_loss", [])
    best = int(np.argmin(val)) + 1 if val else None
    loss = loss_curve(history, out / "loss.png", best_epoch=best, title="rnnkit train: loss per epoch")
    xs = index[part.pos]
    start = part.pos[0]
    ar_name, p_name = cmp.rows[2][0], cmp.rows[1][0]
    fc = forecast_plot(
        index[max(0, start - 4 * len(part.pos)):], actual[max(0, start - 4 * len(part.pos)):],
        {f"{cmp.rows[0][0]} ({part_name} RMSE {cmp.rows[0][1]:.3g})": (xs, pred),
         f"{ar_name} ({part_name} RMSE {cmp.rows[2][1]:.3g})": (xs, cmp.ar),
         f"{p_name} ({part_name} RMSE {cmp.rows[1][1]:.3g})": (xs, cmp.persistence)},
        out / "forecast.png", split_at=xs[0], part=part_name, xlabel=index_name, ylabel=target,
        title=f"rnnkit train: forecasts of {target!r} vs actual")
    return [f"saved the loss curve to {loss}", f"saved the forecast-vs-actual picture to {fc}"]


# -- a global probabilistic (DeepAR-style) model over a panel: rnnkit train --panel -------------
def train_panel(args: argparse.Namespace) -> int:
    """``rnnkit train PANEL.csv --panel --target y``: hold out each series' last ``--horizon``
    rows, train one DeepAR-style model on the rest of every series (with ``--patience``, the
    ``--horizon`` rows before those validate it: :class:`rnnkit.io.DeepAR`), report its mean MASE (the
    median forecast), the seasonal-naive MASE and the 80 % interval coverage on the held-out
    rows, and save that model (``model.safetensors``; ``rnnkit predict`` and
    ``rnnkit.io.DeepAR.load`` read it) with ``metrics.json`` and ``history.csv``."""
    if args.distributed != "none":
        raise CliError("--panel trains in one process; leave out --distributed")
    if args.cell == "rnn":
        raise CliError("--panel: --cell must be lstm or gru")
    if getattr(args, "scale", "global") != "global":
        raise CliError(f"--panel scales each series by its own mean (DeepAR's scaler); --scale "
                       f"{args.scale} is for single-series forecasters; leave it out")
    covs = None if args.covariates is None else parse_columns(args.covariates, args.target)
    panel = read_panel(data_path(args.data), target=args.target, covariates=covs)
    history, held = panel.split(args.horizon)
    model = DeepAR(args.horizon, context=args.window, likelihood=args.likelihood, cell=args.cell,
                   units=args.units, layers=args.layers, epochs=args.epochs, patience=args.patience,
                   batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                   calibration=None if getattr(args, "calibration", "conformal") == "none" else "conformal")
    print(f"{args.data}: {len(panel)} series, {sum(len(s) for s in panel.series)} rows; the last "
          f"{args.horizon} of each held out", flush=True)
    t0 = time.perf_counter()
    model.fit(history, verbose=0 if args.quiet else 1)
    secs = time.perf_counter() - t0
    fc = model.forecast(history, num_samples=200, seed=args.seed,
                        future=held if panel.covariate_names else None)
    actual = np.stack([s.y for s in held.series])
    med = fc.quantile(0.5)
    m = panel.season
    scores = [mase(actual[i], med[i], s.y, m) for i, s in enumerate(history.series)]
    naive = [mase(actual[i], s.y[-m:][np.arange(args.horizon) % m] if m else np.full(args.horizon, s.y[-1]),
                  s.y, m) for i, s in enumerate(history.series)]
    coverage = fc.coverage(actual, 0.8)
    out = ensure_dir(args.out)
    path = model.save(out / "model.safetensors")
    write_text_atomic(out / "history.csv", history_csv(model.history))
    write_text_atomic(out / "metrics.json", json.dumps(
        {"part": "held-out", "rows_per_series": args.horizon, "series": len(panel),
         "mean_mase": float(np.mean(scores)), "seasonal_naive_mean_mase": float(np.mean(naive)),
         "coverage_80": coverage, "mase": dict(zip(panel.ids, scores, strict=True)),
         "spread": list(model.spec.spread) if model.spec else [],
         "calibration": model.spec.calibration if model.spec else {},
         "seconds": round(secs, 3)}, indent=1))
    print(f"trained {len(model.history.get('loss', []))} epoch(s) in {secs:.1f} s")
    print(f"held-out rows: mean MASE {np.mean(scores):.3f} (seasonal naive {np.mean(naive):.3f}); "
          f"80 % interval coverage {100 * coverage:.1f} % of {actual.size} value(s)")
    print(f"model saved to {path} (trained without the held-out rows); metrics in {out / 'metrics.json'}")
    return 0
