"""The ``rnnkit`` command line: argument parsing, dispatch, and the error contract.

Every command returns an exit status. Bad input (a missing file, an unknown or non-numeric
column, too few rows for the window, a model file that is not one, ...) prints ONE line
``rnnkit: error: <what is wrong>`` on stderr and returns 2, never a traceback; argparse usage
errors also exit with 2. An unexpected failure prints one line and returns 1 (set
``RNNKIT_DEBUG=1`` to see the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from rnnkit import __version__
from rnnkit._errors import Error
from rnnkit.cli._bench import run_bench
from rnnkit.cli._common import CliError
from rnnkit.cli._compile import add_parser as add_compile
from rnnkit.cli._compile import compile_command
from rnnkit.cli._convert import add_parser as add_convert
from rnnkit.cli._convert import convert_command
from rnnkit.cli._demo import demo_command
from rnnkit.cli._predict import predict_command, summary_command
from rnnkit.cli._train import train_command
from rnnkit.serve._cli import add_parser as add_serve
from rnnkit.serve._cli import serve_command

_EPILOG = """DATA.csv may also name a bundled data set: sunspots (column SUNACTIVITY, yearly) or
co2 (column co2, weekly, 59 missing weeks), e.g.  rnnkit train sunspots --target SUNACTIVITY
`rnnkit COMMAND --help` describes each command. Bad input exits with status 2 and one line on
stderr."""

_DATA_HELP = "a CSV file with a header row, or a bundled data set by name: sunspots, co2"


def _number(cast: type, lo: float, hi: float | None, what: str) -> Any:
    """An argparse type: ``cast(text)`` within [lo, hi) (no upper bound when ``hi`` is None)."""

    def parse(text: str) -> Any:
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < lo or (hi is not None and v >= hi):
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        return v

    return parse


_positive = _number(int, 1, None, "an integer >= 1")
_nonneg = _number(int, 0, None, "an integer >= 0")
_fraction = _number(float, 0.0, 1.0, "a number in [0, 1)")


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not v > 0.0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    """The full ``rnnkit`` parser (every subcommand and flag)."""
    p = argparse.ArgumentParser(
        prog="rnnkit", description="rnnkit: recurrent neural networks on NumPy.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"rnnkit {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True

    d = sub.add_parser("demo", help="train a small LSTM on the bundled sunspots, compare it with "
                                    "persistence and AR(p), draw it")
    d.add_argument("--out", default="rnnkit_out", metavar="DIR",
                   help="output directory for the model and the pictures (default ./rnnkit_out)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.add_argument("--no-plots", action="store_true", help="skip the two PNG pictures")

    t = sub.add_parser("train", help="train a forecaster on a CSV file or a bundled data set")
    t.add_argument("data", metavar="DATA.csv", help=_DATA_HELP)
    t.add_argument("--target", required=True, metavar="COL", help="the column to forecast")
    t.add_argument("--features", default=None, metavar="A,B,...",
                   help="comma-separated input columns (default: the target alone)")
    t.add_argument("--date-col", default=None, metavar="COL",
                   help="the date column; 'none': no date column, rows are numbered (default: "
                        "a column named date/time/year/..., else pandas' unnamed index)")
    t.add_argument("--window", type=_positive, default=12, help="timesteps per input (default 12)")
    t.add_argument("--horizon", type=_positive, default=1, help="rows ahead to forecast (default 1)")
    t.add_argument("--cell", choices=("lstm", "gru", "rnn"), default="lstm",
                   help="the recurrent cell (default lstm)")
    t.add_argument("--units", type=_positive, default=32, help="hidden width of each recurrent layer "
                                                              "(default 32)")
    t.add_argument("--layers", type=_positive, default=1, help="stacked recurrent layers (default 1)")
    t.add_argument("--highway-lags", type=_positive, default=None, metavar="P",
                   help="the highway, a linear AR(P) over the window's last P rows added to the "
                        "recurrent branch's output, reads P rows (default: the whole --window)")
    t.add_argument("--no-highway", action="store_true",
                   help="the recurrent branch alone, without the linear AR highway")
    t.add_argument("--epochs", type=_positive, default=100, help="at most this many epochs (default 100)")
    t.add_argument("--batch-size", type=_positive, default=32,
                   help="mini-batch size, shuffled each epoch (default 32)")
    t.add_argument("--val-split", type=_fraction, default=0.2,
                   help="fraction of the windows, the LAST ones, held out for validation (default 0.2)")
    t.add_argument("--patience", type=_nonneg, default=20,
                   help="early-stopping patience in epochs, 0 = off (default 20)")
    t.add_argument("--lr", type=_rate, default=0.005, help="Adam learning rate (default 0.005)")
    t.add_argument("--transform", choices=("none", "sqrt", "log1p"), default="none",
                   help="variance-stabilising transform before standardising (default none)")
    t.add_argument("--scale", choices=("global", "window"), default="global",
                   help="global (default): standardise with the training rows' mean and std; window: "
                        "standardise each input window by the mean and std of its own target values "
                        "and map the forecast back with them (instance normalisation, for series whose "
                        "level leaves the training range; the target must be a feature)")
    t.add_argument("--difference", action="store_true",
                   help="read first differences and forecast the change (for trending series)")
    t.add_argument("--log", action="store_true",
                   help="read the logarithm of the values (every value must be > 0; for a series whose "
                        "seasonal swing grows with its level)")
    t.add_argument("--seasonal-difference", action="store_true",
                   help="read the differences at the season's lag (--season, or the dates' cycle)")
    t.add_argument("--missing", choices=("error", "drop", "interpolate"), default="error",
                   help="what to do with empty fields (default error, naming the rows)")
    t.add_argument("--season", type=_nonneg, default=None, metavar="ROWS",
                   help="rows per season for the seasonal-naive baseline, 0 = none (default: from "
                        "the dates: 24 hourly, 7 daily, 52 weekly, 12 monthly, 4 quarterly)")
    # backtest and preprocessing choice (rnnkit.cli._backtest)
    t.add_argument("--backtest-windows", type=_nonneg, default=None, metavar="K",
                   help="rank the network among the baselines (naive, mean, drift, AR(p), seasonal "
                        "naive, ETS with statsmodels) by MASE, sMAPE, RMSE and MAE on the last K "
                        "windows of --horizon steps, rolling origin; the network then trains on the "
                        "rows before them and "
                        "forecasts one step at a time (default 3; 0: one validation split, also "
                        "what a run with --features or --distributed mpi or a series too short "
                        "for 3 windows gets, with a note saying why)")
    t.add_argument("--preprocess", choices=("none", "auto"), default="none",
                   help="auto (with --backtest-windows): the values for the default network (its AR "
                        "highway models a trend and a season); with --no-highway, logs when the "
                        "seasonal amplitude grows with the level, seasonal differences when the "
                        "seasonal strength exceeds 0.64 and first differences when the KPSS test "
                        "rejects level stationarity and not for the differences; the choice and its "
                        "reason are printed and stored with the model (default none)")
    t.add_argument("--seed", type=_nonneg, default=0, help="seeds the weights and the shuffling (default 0)")
    t.add_argument("--out", default="rnnkit_out", metavar="DIR",
                   help="output directory for the model, checkpoint, history, metrics and pictures "
                        "(default ./rnnkit_out)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--distributed", choices=("none", "mpi"), default="none",
                   help="mpi: data-parallel on every rank of `mpiexec -n N rnnkit train ...` "
                        "(needs rnnkit[mpi]; rank 0 writes the outputs)")
    t.add_argument("--no-plots", action="store_true", help="skip the two PNG pictures")
    # -- a global probabilistic (DeepAR-style) model over a panel: rnnkit.cli._train.train_panel
    t.add_argument("--panel", action="store_true",
                   help="DATA is a long-format panel (unique_id, ds, --target, covariates): train one "
                        "DeepAR-style model over every series (--window: the context rows)")
    t.add_argument("--likelihood", choices=("gaussian", "student_t", "negative_binomial"),
                   default="student_t", help="with --panel: the forecast distribution (default student_t)")
    t.add_argument("--calibration", choices=("conformal", "none"), default="conformal",
                   help="with --panel: widen or narrow the intervals by split conformal prediction on 4 "
                        "rolling-origin windows of a calibration model trained without each series' last "
                        "rows (default conformal)")
    t.add_argument("--covariates", default=None, metavar="A,B,...",
                   help="with --panel: known-future covariate columns (default: every other column)")

    pr = sub.add_parser("predict", help="forecast with a saved model (one step per window, or "
                                        "--steps K recursively)")
    pr.add_argument("model", metavar="MODEL", help="a model file written by rnnkit train or demo")
    pr.add_argument("data", metavar="DATA.csv", help=_DATA_HELP)
    pr.add_argument("--steps", type=_positive, default=None, metavar="K",
                    help="forecast K steps past the end, feeding each forecast back in")
    pr.add_argument("--output", default=None, metavar="FILE", help="write the CSV here (default stdout)")
    pr.add_argument("--missing", choices=("error", "drop", "interpolate"), default=None,
                    help="what to do with empty fields: the model's own policy (the one it was "
                         "trained with); only a model file that does not store one takes another "
                         "(default there: error, naming the rows)")
    # the backtest's winner (rnnkit.cli._backtest)
    pr.add_argument("--model", dest="use", choices=("network", "best"), default="network",
                    help="best: forecast the --steps (default: the backtest horizon) after the data "
                         "with the backtest's winner stored in the model file, the network or a "
                         "baseline refitted on the data (default network)")
    # -- probabilistic forecasts of a DeepAR model file: rnnkit.cli._predict.predict_panel
    pr.add_argument("--quantiles", default=None, metavar="Q,Q,...",
                    help="a DeepAR model's quantiles to write (default 0.1,0.5,0.9)")
    pr.add_argument("--samples", type=_positive, default=200, help="sample paths of a DeepAR forecast "
                                                                   "(default 200)")
    pr.add_argument("--seed", type=_nonneg, default=0, help="seeds a DeepAR forecast's sampling (default 0)")
    pr.add_argument("--future", default=None, metavar="FILE",
                    help="a DeepAR model with covariates: their values for the horizon after each "
                         "series' end (long format)")
    pr.add_argument("--fan-chart", default=None, metavar="PNG",
                    help="draw a DeepAR forecast's fan chart (needs matplotlib)")

    s = sub.add_parser("summary", help="describe a saved model or checkpoint")
    s.add_argument("model", metavar="MODEL", help="a model file, or a weights-only checkpoint")

    add_convert(sub)

    add_serve(sub)

    add_compile(sub)

    sub.add_parser("bench", help="time rnnkit against PyTorch (needs torch; arguments go to "
                                 "benchmarks/bench.py)", add_help=False)
    return p


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "bench":
        return run_bench(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return demo_command(args)
    if args.command == "train":
        return train_command(args)
    if args.command == "predict":
        return predict_command(args)
    if args.command == "summary":
        return summary_command(args)
    if args.command == "serve":
        return serve_command(args)
    if args.command == "convert":
        return convert_command(args)
    if args.command == "compile":
        return compile_command(args)
    raise CliError(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses it


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rnnkit`` command line with ``argv`` (default ``sys.argv[1:]``); return the status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(args)
    except SystemExit as e:  # argparse: --help (0) and usage errors (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except (Error, CliError, OSError) as e:
        if os.environ.get("RNNKIT_DEBUG"):
            traceback.print_exc()
        print(f"rnnkit: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rnnkit: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the contract: one line, never a traceback
        if os.environ.get("RNNKIT_DEBUG"):
            traceback.print_exc()
        print(f"rnnkit: internal error: {type(e).__name__}: {_one_line(e)} "
              "(set RNNKIT_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
