"""``rnnkit predict MODEL DATA.csv`` and ``rnnkit summary MODEL``.

predict reads DATA as the model's training file was read — its feature columns, its date
column, its missing-value policy — and scales (or differences) the rows as in training: all of
it is the model's (:class:`rnnkit.timeseries.Forecaster`, the path the model server and Python
take too). ``--missing`` is for a model file that does not store its policy; one that does
refuses a different one.

predict, one step (default)
    every complete window of the file's feature columns gives one forecast of the target
    ``horizon`` rows after the window's last row; CSV columns ``<index>,prediction,actual``
    (``actual`` is empty where the file has no such row). The last window's forecast lies past
    the end of the file.
predict ``--model best`` (after ``rnnkit train --backtest-windows``)
    the ``--steps`` rows past the end (default: the backtest horizon) forecast by the winner of
    the backtest stored in the model file: the network (recursively) or a baseline refitted on
    the file's target column. CSV columns ``<index>,prediction``.
predict ``--steps K`` (recursive)
    from the last window, forecast the next row, append it to the window, repeat K times;
    needs a model whose only feature is its target and whose horizon is 1. CSV columns
    ``<index>,prediction``.

``--steps`` is at most :data:`MAX_STEPS` (a one-line error otherwise). The input windows are a
strided view of the file's rows and are predicted and written :data:`CHUNK` at a time, so a
long CSV costs memory in proportion to its rows, whatever the model's window. Each forecast is
written as the shortest text that reads back to the same float64.

``<index>`` is the training file's date column (dates as YYYY-MM-DD, years as integers; rows
past the end follow the dates' calendar frequency, :func:`rnnkit.timeseries.continue_index`)
or ``row`` (0-based data-row numbers).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnkit._numbers import check_int
from rnnkit._safetensors import read_safetensors
from rnnkit.cli._backtest import EXTRA_KEY, best_path
from rnnkit.cli._common import CliError, check_output_file, data_path, write_chunks
from rnnkit.cli._model import describe_spec
from rnnkit.cli._plots import fan_chart, have_matplotlib
from rnnkit.io import DeepAR, load_forecaster, load_model, read_forecast_spec
from rnnkit.io._deepar import is_deepar_file
from rnnkit.io._forecaster import read_metadata
from rnnkit.io._weights import WEIGHTS_FORMAT
from rnnkit.timeseries import Table
from rnnkit.timeseries._forecast import CHUNK, MAX_STEPS
from rnnkit.timeseries._panel import read_panel


def _check_steps(steps: object) -> int:
    return check_int(steps, "--steps", "predict", lo=1, hi=MAX_STEPS, error=CliError)


def _rows(table: Table, pos: np.ndarray, pred: np.ndarray, actual: np.ndarray | None) -> Iterator[str]:
    """The forecast CSV, a block of rows at a time: ``<index>,prediction[,actual]``."""
    yield f"{table.index_name},prediction" + (",actual\n" if actual is not None else "\n")
    for a in range(0, len(pos), CHUNK):
        p = pos[a:a + CHUNK]
        labels = table.labels(p)
        if actual is None:
            yield "".join(f"{label},{_fmt(v)}\n" for label, v in zip(labels, pred[a:a + CHUNK], strict=True))
            continue
        act = [actual[q] if q < len(table) else np.nan for q in p]
        yield "".join(f"{label},{_fmt(v)},{_fmt(w)}\n"
                      for label, v, w in zip(labels, pred[a:a + CHUNK], act, strict=True))


def _fmt(v: float) -> str:
    """A value as the shortest text that reads back to the same float64 (``29``, not ``29.0``;
    empty: not finite)."""
    if not np.isfinite(v):
        return ""
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def predict_command(args: argparse.Namespace) -> int:
    if Path(args.model).is_file() and is_deepar_file(args.model):
        return predict_panel(args)
    if args.quantiles is not None or args.future is not None or args.fan_chart is not None:
        raise CliError("--quantiles, --future and --fan-chart are for a probabilistic model (rnnkit train "
                       f"--panel); {args.model} forecasts one value per window")
    if args.steps is not None:
        _check_steps(args.steps)
    if args.output is not None:
        check_output_file(args.output, "--output")
    args.data = data_path(args.data)
    forecaster = load_forecaster(args.model)
    table = forecaster.read_csv(args.data, missing=args.missing)
    if getattr(args, "use", "network") == "best":    # the backtest's winner: rnnkit.cli._backtest
        info = forecaster.spec.extra.get(EXTRA_KEY)
        stored = int(info.get("horizon", 1)) if isinstance(info, dict) else 1
        steps = args.steps if args.steps is not None else stored
        name, pred = best_path(forecaster, table.columns[forecaster.spec.target], steps)
        print(f"forecasting with the backtest's best: {name}", file=sys.stderr)
        chunks = _rows(table, np.arange(len(table), len(table) + steps), pred, None)
    elif args.steps is None:
        pos, pred = forecaster.one_step(table)
        actual = table.columns.get(forecaster.spec.target)
        chunks = _rows(table, pos, pred, actual if actual is not None else np.full(len(table), np.nan))
    else:
        pos, pred = forecaster.recursive(table, args.steps)
        chunks = _rows(table, pos, pred, None)
    n = write_chunks(args.output, chunks)
    if args.output is not None:
        print(f"wrote {n - 1} forecast(s) to {args.output}", file=sys.stderr)
    return 0


def summary_command(args: argparse.Namespace) -> int:
    meta = read_metadata(args.model) if Path(args.model).is_file() else {}
    if meta.get("format") == WEIGHTS_FORMAT:
        print(describe_weights_file(args.model))
        return 0
    model, spec = load_model(args.model), read_forecast_spec(args.model)
    text = model.summary(print_fn=None) if _takes_print_fn(model) else model.summary()
    if text is not None:
        print(str(text).rstrip("\n"))
    if spec is not None:
        print(describe_spec(spec))
    return 0


def _takes_print_fn(model: object) -> bool:
    import inspect

    try:
        return "print_fn" in inspect.signature(model.summary).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        return False


def describe_weights_file(path: str | Path) -> str:
    """The table of a weights-only file (``rnnkit train``'s ``checkpoint.safetensors``)."""
    tensors, _ = read_safetensors(path)
    width = max([len(k) for k in tensors] + [6])
    lines = [f"{path}: a weights-only file (the best weights seen in training); it holds no "
             f"architecture: load it into the model with model.load_weights(path)",
             f"  {'weight':<{width}}  {'shape':<16} {'params':>9}"]
    for k in sorted(tensors):
        lines.append(f"  {k:<{width}}  {str(tuple(tensors[k].shape)):<16} {tensors[k].size:>9,}")
    lines.append(f"total params: {sum(t.size for t in tensors.values()):,}")
    return "\n".join(lines)


# -- probabilistic forecasts of a DeepAR model file: rnnkit predict MODEL PANEL.csv --quantiles ...
def parse_quantiles(text: str | None) -> tuple[float, ...]:
    """``"0.1,0.5,0.9"`` -> (0.1, 0.5, 0.9); each in (0, 1) (default 0.1, 0.5, 0.9)."""
    if text is None:
        return (0.1, 0.5, 0.9)
    try:
        qs = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise CliError(f"--quantiles: expected numbers in (0, 1) separated by commas, got {text!r}") from None
    if not qs or not all(0 < q < 1 for q in qs):
        raise CliError(f"--quantiles: every quantile must lie in (0, 1), got {text!r}")
    return qs


def predict_panel(args: argparse.Namespace) -> int:
    """The DeepAR model's forecast of the horizon after each series of the panel DATA:
    CSV ``unique_id,ds,mean,q...`` (``--samples`` seeded sample paths; ``--future`` the
    covariates of those rows; ``--fan-chart`` a picture)."""
    qs = parse_quantiles(args.quantiles)
    if args.steps is not None:
        raise CliError("--steps: a DeepAR model forecasts its own horizon; leave --steps out")
    if args.output is not None:
        check_output_file(args.output, "--output")
    if args.fan_chart is not None and not have_matplotlib():
        raise CliError('--fan-chart needs matplotlib (pip install "rnnkit[plot]")')
    model = DeepAR.load(args.model)
    covs = list(model.spec.covariate_names) if model.spec else None
    panel = read_panel(data_path(args.data), covariates=covs)
    future = None if args.future is None else read_panel(data_path(args.future),
                                                         covariates=list(panel.covariate_names))
    fc = model.forecast(panel, num_samples=args.samples, seed=args.seed, future=future)
    n = write_chunks(args.output, (",".join(r) + "\n" for r in fc.rows(qs)))
    if args.output is not None:
        print(f"wrote {n - 1} forecast(s) to {args.output}", file=sys.stderr)
    if args.fan_chart is not None:
        shown = panel.series[:6]
        lo80, hi80 = fc.interval(0.8)
        lo50, hi50 = fc.interval(0.5)
        k = len(shown)
        fan_chart([(s.id, s.index[-4 * model.horizon:], s.y[-4 * model.horizon:]) for s in shown],
                  fc.index[:k], fc.quantile(0.5)[:k], [(0.8, lo80[:k], hi80[:k]), (0.5, lo50[:k], hi50[:k])],
                  args.fan_chart, title=f"rnnkit predict: {Path(args.model).name}")
        print(f"saved the fan chart of {k} series to {args.fan_chart}", file=sys.stderr)
    return 0
