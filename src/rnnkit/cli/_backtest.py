"""``rnnkit train ... --backtest-windows K``: the network judged among the baselines on a
rolling-origin backtest (:func:`rnnkit.timeseries.backtest`), and the preprocessing chosen by
stated rules (``--preprocess auto``: logs, seasonal and first differences,
:func:`rnnkit.timeseries.choose_preprocess`; the default network, whose linear AR highway models
a trend and a season itself, reads the values; or given by hand:
``--log``, ``--seasonal-difference``, ``--difference``).

The backtest is on by default (:data:`DEFAULT_WINDOWS` windows; ``--backtest-windows 0`` turns
it off and trains on one validation split). Where the default cannot apply — features other
than the target alone, ``--distributed mpi``, or a series too short for the windows — training
falls back to the validation split and says why on a ``note:`` line (:func:`windows_for`); a
``--backtest-windows K`` given explicitly is refused there instead.

With K backtest windows of ``--horizon H`` the network is a one-step model (horizon 1) run
recursively over the H steps, as ``rnnkit predict --steps H`` runs it; it is trained (with
early stopping on the last ``--val-split`` of its windows) on the rows before the first
backtest origin only, so every backtest forecast is out of sample. From each origin it reads
the values before that origin; its weights stay fixed. The baselines (naive, mean, drift,
AR(p) with ``p <= --window`` chosen on validation, with a season the seasonal naive
forecast and, with statsmodels installed, ETS with its configuration chosen by AICc, printed
and stored; without statsmodels a note says which extra adds it) are refitted from each
origin's history. The season is ``--season`` when given,
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
from rnnkit.timeseries import (
    Backtest,
    Choice,
    Forecaster,
    backtest,
    baselines,
    choose_preprocess,
    detect_season,
)
from rnnkit.timeseries._backtest import (
    ETS,
    ETS_MAX_ROWS,
    ETS_MISSING,
    ETS_NAME,
    METRICS,
    check_length,
    have_statsmodels,
)
from rnnkit.timeseries._csv import DataError

#: the key under which the backtest's ranking is stored in the model's forecast settings
EXTRA_KEY = "backtest"
#: what ``rnnkit predict --model best`` calls the network
NETWORK = "network"
#: ``--backtest-windows`` when not given
DEFAULT_WINDOWS = 3


def season_for(args: argparse.Namespace, y: np.ndarray, calendar: int | None) -> int | None:
    """The backtest's season: ``--season`` (0: none), else the dates' cycle, else the ACF rule."""
    return detect_season(y, calendar) if args.season is None else (args.season or None)


def windows_for(args: argparse.Namespace, features: list[str], y: np.ndarray,
                calendar: int | None) -> tuple[int, str | None]:
    """``(K, note)``: the backtest windows ``rnnkit train`` runs. ``--backtest-windows K`` given:
    K (0: none). Not given: :data:`DEFAULT_WINDOWS`, or 0 with a note saying why when the run
    cannot have a backtest (features besides the target, ``--distributed mpi``, a series too
    short for the windows) or asks for none (``--panel``)."""
    if args.backtest_windows is not None:
        return int(args.backtest_windows), None
    off = "no backtest (trained on one validation split instead): "
    if getattr(args, "distributed", "none") == "mpi":
        return 0, off + "--distributed mpi trains on several processes; the backtest runs on one"
    if features != [args.target]:
        return 0, (off + f"--features {','.join(features)}: a backtest runs the network recursively, "
                         f"which needs the target as its only feature")
    try:
        check_length(len(y), horizon=int(args.horizon), windows=DEFAULT_WINDOWS,
                     season=season_for(args, y, calendar), name=str(args.data),
                     min_history=args.window + 2)
    except DataError as e:
        return 0, off + str(e)
    return DEFAULT_WINDOWS, None


#: ``--preprocess auto``'s reason under a network with the AR highway (measured on 19 real series:
#: mean MASE 1.071 on the values, 1.132 with the log rule, 1.165 with the KPSS differencing rule)
HIGHWAY_READS_VALUES = ("the network has a linear AR highway, which models a trend itself (a unit root "
                        "is its AR(p) with a_1 = 1, what differencing imposes) and keeps the levels' "
                        "seasonal shape; logs and differences measured worse with it")


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
                   index_name: str, notes: tuple[str, ...] | list[str], rows: int, windows: int) -> int:
    """``rnnkit train`` with ``windows`` backtest windows (module docstring)."""
    if getattr(args, "distributed", "none") == "mpi":
        raise CliError("--backtest-windows trains on one process; leave out --distributed mpi")
    if features != [args.target]:
        raise CliError(f"--backtest-windows runs the network recursively over the horizon, which needs "
                       f"the target as its only feature; got --features {','.join(features)}")
    name = str(args.data)
    horizon = int(args.horizon)
    season = season_for(args, y, calendar)
    orig = check_length(len(y), horizon=horizon, windows=windows, season=season, name=name,
                        min_history=args.window + 2)
    first = int(orig[0])
    given = [f for f in ("log", "seasonal_difference", "difference") if getattr(args, f, False)]
    difference, log = bool(args.difference), bool(getattr(args, "log", False))
    seasonal = seasonal_lag(args, season)
    reason = ("given: " + " ".join("--" + f.replace("_", "-") for f in given) if given
              else "the values (--preprocess none)")
    cfg = train_config(args)
    if args.preprocess == "auto":
        if given:
            raise CliError("--preprocess auto chooses the logs and differences; leave out "
                           + " ".join("--" + f.replace("_", "-") for f in given))
        if cfg.lags(args.window):
            choice = Choice(False, HIGHWAY_READS_VALUES, 0.0, None, False, 0)
        else:
            choice = choose_preprocess(y[:first], season, name=name)
        difference, log, seasonal, reason = choice.difference, choice.log, choice.seasonal, choice.reason
        if (difference or log or seasonal) and args.transform != "none":
            raise CliError(f"--preprocess auto chose {choice.describe()} ({reason}), which cannot be "
                           f"combined with --transform {args.transform}; leave out --transform")
    # the network's first window from the first origin: window + lag + 1 rows, and one to train on
    history_rows = args.window + 2 + seasonal
    check_length(len(y), horizon=horizon, windows=windows, season=season, name=name, min_history=history_rows)
    for note in notes:
        print(f"note: {note}")
    if not have_statsmodels():
        print(f"note: {ETS_MISSING}")
    print(f"{name}: {rows} rows; the network trains on the {first} before the first of {windows} "
          f"backtest window(s) of {horizon} step(s)"
          + (f", season {season} rows" if season else ", no season"), flush=True)
    print(f"preprocessing: {Choice(difference, reason, 0.0, None, log, seasonal).describe()}: {reason}")
    prep = prepare(y[:first, None], y[:first], features, args.target, window=args.window, horizon=1,
                   val_split=args.val_split, transform=args.transform, index_name=index_name, what=name,
                   difference=difference, missing=args.missing, log=log, seasonal=seasonal,
                   scale=getattr(args, "scale", "global"))
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
                  min_history=history_rows)
    ranked = bt.ranking()
    winner = NETWORK if ranked[0].name == model_name else ranked[0].name
    summary = backtest_dict(bt, winner, model_name)
    ets = methods.get(ETS_NAME)
    if isinstance(ets, ETS):
        summary["ets"] = [c.to_dict() for c in ets.chosen]
    spec = dataclasses.replace(prep.spec, extra={
        "cell": args.cell, "units": args.units, "layers": args.layers,
        "highway_lags": cfg.lags(args.window),
        "epochs_run": len(history.get("loss", [])), "seed": args.seed, "data": name, "rows": rows,
        "missing": args.missing, "transform": args.transform, "trained_rows": first,
        "preprocess": {"rule": args.preprocess, "difference": difference, "log": log, "seasonal": seasonal,
                       "reason": reason},
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
    if isinstance(ets, ETS):
        print("ETS configuration (smallest AICc on each window's history"
              + (f"; a history longer than {ETS_MAX_ROWS} rows is fitted on its last {ETS_MAX_ROWS}"
                 if max(ets.rows) < int(bt.origins[-1]) else "")
              + "): " + "; ".join(f"origin {int(o)}: {c.describe()}"
                                  for o, c in zip(bt.origins, ets.chosen, strict=True)))
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


def seasonal_lag(args: argparse.Namespace, season: int | None) -> int:
    """The seasonal-differencing lag ``--seasonal-difference`` asks for: the season (0 without
    the flag); CliError when the series has no season."""
    if not getattr(args, "seasonal_difference", False):
        return 0
    if not season:
        raise CliError("--seasonal-difference needs a season: give --season ROWS (or dated rows whose "
                       "calendar has a cycle)")
    return int(season)


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
    if best == ETS_NAME and not have_statsmodels():
        raise CliError('the backtest\'s best forecaster is the ETS baseline, which needs statsmodels '
                       '(pip install "rnnkit[forecast]")')
    if best not in methods:
        raise CliError(f"the model file names {best!r} as the best forecaster, which this rnnkit does not "
                       f"know (expected one of {', '.join([NETWORK, *methods])})")
    method = methods[best]
    out = np.asarray(method(np.asarray(history, dtype=np.float64), steps), dtype=np.float64)
    if isinstance(method, ETS):
        used = method.rows[-1]
        best += (f" ({method.chosen[-1].describe()}: the smallest AICc on "
                 + ("these rows)" if used == len(history) else f"their last {used})"))
    return best, out


__all__ = ["DEFAULT_WINDOWS", "EXTRA_KEY", "NETWORK", "backtest_dict", "backtest_table", "best_path",
           "season_for", "seasonal_lag", "train_backtest", "windows_for"]
