"""``rnnkit train ... --backtest-windows K``: the network judged among the baselines on a
rolling-origin backtest (:func:`rnnkit.timeseries.backtest`), and the preprocessing chosen by a
stated rule (``--preprocess auto``: the default network, whose linear AR highway models a trend
itself, reads the values; the recurrent branch alone, ``--no-highway``, reads first differences
when :func:`rnnkit.timeseries.choose_difference` says so).

With K backtest windows of ``--horizon H`` the network is a one-step model (horizon 1) run
recursively over the H steps, as ``rnnkit predict --steps H`` runs it; it is trained (with
early stopping on the last ``--val-split`` of its windows) on the rows before the first
backtest origin only, so every backtest forecast is out of sample. From each origin it reads
the values before that origin; its weights stay fixed. The baselines (naive, mean, drift,
AR(p) with ``p <= --window`` chosen on validation and, with a season, the seasonal naive
forecast) are refitted from each origin's history. The season is ``--season`` when given,
else the dates' calendar cycle, else the autocorrelation rule of
:func:`rnnkit.timeseries.detect_season`.

The report ranks every forecaster by MASE and prints, per horizon step, MASE, sMAPE, RMSE and
MAE; the verdict comes from that ranking and names the best baseline and its margin when one
wins. The model file stores the choice of preprocessing with its reason and the ranking with
the winner (``extra["backtest"]``), so ``rnnkit predict --model best`` forecasts with the
winner, network or baseline. ``backtest.png`` (with matplotlib) shows MASE per horizon step.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import time
from typing import Any

import numpy as np

from rnnkit.cli._common import CliError, compile_status, ensure_dir, history_csv, write_text_atomic
from rnnkit.cli._model import build_network, train_config, train_network
from rnnkit.cli._plots import backtest_plot, have_matplotlib, loss_curve, remove_pictures
from rnnkit.cli._prepare import prepare
from rnnkit.io import save_forecaster
from rnnkit.timeseries import Backtest, Forecaster, backtest, baselines, choose_difference, detect_season
from rnnkit.timeseries._backtest import METRICS, check_length

#: the key under which the backtest's ranking is stored in the model's forecast settings
EXTRA_KEY = "backtest"
#: what ``rnnkit predict --model best`` calls the network
NETWORK = "network"
#: ``--preprocess auto``'s reason for a network with the AR highway
HIGHWAY_READS_VALUES = ("the network has a linear AR highway, which models a trend itself (a unit root is "
                        "its AR(p) with a_1 = 1, what differencing imposes) and keeps the levels' "
                        "seasonal shape: the network reads the values")


def backtest_table(bt: Backtest, title: str) -> str:
    """Overall MASE / sMAPE / RMSE / MAE per forecaster, ranked by MASE, then MASE per step."""
    width = max(len(s.name) for s in bt.scores)
    head = f"  {'rank':>4}  {'forecaster':<{width}}  {'MASE':>8}  {'sMAPE%':>8}  {'RMSE':>10}  {'MAE':>10}"
    lines = [title, head]
    for k, s in enumerate(bt.ranking()):
        o = s.overall
        lines.append(f"  {k + 1:>4}  {s.name:<{width}}  {o['mase']:8.3f}  {o['smape']:8.2f}  "
                     f"{o['rmse']:10.4g}  {o['mae']:10.4g}")
    h = bt.actual.shape[1]
    lines.append("MASE per horizon step " + " ".join(f"{i + 1:>6}" for i in range(h)))
    for s in bt.ranking():
        lines.append(f"  {s.name:<{max(width, 19)}} " + " ".join(f"{v:6.3f}" for v in s.per_step["mase"]))
    return "\n".join(lines)


def backtest_dict(bt: Backtest, winner: str, network: str) -> dict[str, Any]:
    """The JSON of metrics.json and the model file: ranking, metrics overall and per step."""
    return {
        "windows": int(bt.actual.shape[0]), "horizon": int(bt.actual.shape[1]), "season": bt.season,
        "origins": [int(o) for o in bt.origins], "best": winner, "network": network,
        "ranking": [{"name": s.name, **{m: s.overall[m] for m in METRICS},
                     "per_step": {m: [float(v) for v in s.per_step[m]] for m in METRICS}}
                    for s in bt.ranking()]}


def train_backtest(args: argparse.Namespace, features: list[str], y: np.ndarray, calendar: int | None,
                   index_name: str, notes: tuple[str, ...] | list[str], rows: int) -> int:
    """``rnnkit train`` with ``--backtest-windows`` (module docstring)."""
    if getattr(args, "distributed", "none") == "mpi":
        raise CliError("--backtest-windows trains on one process; leave out --distributed mpi")
    if features != [args.target]:
        raise CliError(f"--backtest-windows runs the network recursively over the horizon, which needs "
                       f"the target as its only feature; got --features {','.join(features)}")
    name = str(args.data)
    horizon, windows = int(args.horizon), int(args.backtest_windows)
    season = detect_season(y, calendar) if args.season is None else (args.season or None)
    orig = check_length(len(y), horizon=horizon, windows=windows, season=season, name=name,
                        min_history=args.window + 2)
    first = int(orig[0])
    difference, reason = bool(args.difference), ("--difference given" if args.difference
                                                 else "the values (--preprocess none)")
    cfg = train_config(args)
    if args.preprocess == "auto":
        if args.difference:
            raise CliError("--preprocess auto chooses whether to difference; leave out --difference")
        if cfg.lags(args.window):
            difference, reason = False, HIGHWAY_READS_VALUES
        else:
            choice = choose_difference(y[:first], name=name)
            difference, reason = choice.difference, choice.reason
        if difference and args.transform != "none":
            raise CliError(f"--preprocess auto chose first differences ({reason}), which cannot be "
                           f"combined with --transform {args.transform}; leave out --transform")
    for note in notes:
        print(f"note: {note}")
    print(f"{name}: {rows} rows; the network trains on the {first} before the first of {windows} "
          f"backtest window(s) of {horizon} step(s)"
          + (f", season {season} rows" if season else ", no season"), flush=True)
    print(f"preprocessing: {'first differences' if difference else 'the values'}: {reason}")
    prep = prepare(y[:first, None], y[:first], features, args.target, window=args.window, horizon=1,
                   val_split=args.val_split, transform=args.transform, index_name=index_name, what=name,
                   difference=difference, missing=args.missing)
    out = ensure_dir(args.out)
    model = build_network(cfg, args.window, 1)
    t0 = time.perf_counter()
    with compile_status() if cfg.verbose else contextlib.nullcontext():
        history = train_network(model, cfg, prep.train, prep.val if len(prep.val) else None,
                                checkpoint=out / "checkpoint.safetensors", distributed=None)
    secs = time.perf_counter() - t0
    model_name = cfg.name(args.window)
    forecaster = Forecaster(model, prep.spec)
    methods = {model_name: lambda hist, h: forecaster.path(hist, h, what=name),
               **baselines(season, max_p=args.window)}
    bt = backtest(y, methods, horizon=horizon, windows=windows, season=season, name=name,
                  min_history=args.window + 2)
    ranked = bt.ranking()
    winner = NETWORK if ranked[0].name == model_name else ranked[0].name
    summary = backtest_dict(bt, winner, model_name)
    spec = dataclasses.replace(prep.spec, extra={
        "cell": args.cell, "units": args.units, "layers": args.layers,
        "highway_lags": cfg.lags(args.window),
        "epochs_run": len(history.get("loss", [])), "seed": args.seed, "data": name, "rows": rows,
        "missing": args.missing, "transform": args.transform, "trained_rows": first,
        "preprocess": {"rule": args.preprocess, "difference": difference, "reason": reason},
        "max_p": args.window, EXTRA_KEY: summary})
    model_path = save_forecaster(model, spec, out / "model.safetensors")
    write_text_atomic(out / "history.csv", history_csv(history))
    write_text_atomic(out / "metrics.json", json.dumps(
        {"part": "backtest", "preprocess": spec.extra["preprocess"], "backtest": summary,
         "beats_every_baseline": winner == NETWORK, "seconds": round(secs, 3)}, indent=1))
    print(f"trained {spec.extra['epochs_run']} epoch(s) in {secs:.1f} s")
    print(backtest_table(bt, f"backtest: {windows} window(s) of {horizon} step(s) from row {first} on "
                             f"(MASE scaled by the in-sample {'seasonal-' if season else ''}naive MAE"
                             + (f", lag {season}" if season else "") + "):"))
    print(bt.verdict(model_name))
    print(f"model saved to {model_path} (preprocessing, window and the backtest ranking inside; "
          f"`rnnkit predict {model_path} DATA --model best` forecasts with "
          f"{'the network' if winner == NETWORK else 'the ' + winner + ' baseline'})")
    if not args.no_plots and have_matplotlib():
        (out / "forecast.png").unlink(missing_ok=True)     # no picture of another run's model
        loss = loss_curve(history, out / "loss.png", title="rnnkit train: loss per epoch")
        pic = backtest_plot(bt, out / "backtest.png", title=f"rnnkit train: backtest of {args.target!r}")
        print(f"saved the loss curve to {loss}; MASE per horizon step to {pic}")
    else:
        for p in remove_pictures(out):
            print(f"removed {p} (a picture of an earlier run)")
    return 0


def best_path(forecaster: Forecaster, history: np.ndarray, steps: int) -> tuple[str, np.ndarray]:
    """``(name, forecasts)`` of the ``steps`` values after ``history`` by the backtest's winner
    stored in the model file (the network, or a baseline refitted on ``history``)."""
    info = forecaster.spec.extra.get(EXTRA_KEY)
    if not isinstance(info, dict) or "best" not in info:
        raise CliError("--model best needs a model trained with --backtest-windows (its file stores "
                       "the ranking); this one has none: leave out --model best")
    best = str(info["best"])
    if best == NETWORK:
        return NETWORK, forecaster.path(history, steps)
    season = info.get("season")
    methods = baselines(int(season) if season else None, max_p=int(forecaster.spec.extra.get("max_p", 12)))
    if best not in methods:
        raise CliError(f"the model file names {best!r} as the best forecaster, which this rnnkit does not "
                       f"know (expected one of {', '.join([NETWORK, *methods])})")
    return best, np.asarray(methods[best](np.asarray(history, dtype=np.float64), steps), dtype=np.float64)


__all__ = ["EXTRA_KEY", "NETWORK", "backtest_dict", "backtest_table", "best_path", "train_backtest"]
