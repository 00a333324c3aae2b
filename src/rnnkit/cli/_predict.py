"""``rnnkit predict MODEL DATA.csv`` and ``rnnkit summary MODEL``.

predict, one step (default)
    every complete window of the file's feature columns gives one forecast of the target
    ``horizon`` rows after the window's last row; CSV columns ``<index>,prediction,actual``
    (``actual`` is empty where the file has no such row). The last window's forecast lies past
    the end of the file.
predict ``--steps K`` (recursive)
    from the last window, forecast the next row, append it to the window, repeat K times;
    needs a model whose only feature is its target and whose horizon is 1. CSV columns
    ``<index>,prediction``.

``--steps`` is at most :data:`MAX_STEPS`; one prediction's input windows (rows x window x
features numbers) at most :data:`MAX_WINDOW_NUMBERS` (a model file's window times a long CSV
could otherwise ask for any amount of memory): a one-line error otherwise.

``<index>`` is the training file's date column (dates as YYYY-MM-DD, years as integers; rows
past the end continue the last spacing) or ``row`` (0-based data-row numbers).
"""

from __future__ import annotations

import argparse
import collections
import io
import sys
from pathlib import Path

import numpy as np

from rnnkit.cli._common import CliError, check_output_file, data_path, write_text_atomic
from rnnkit.cli._model import describe_spec, load_forecaster, predict_values, read_metadata
from rnnkit.io._weights import WEIGHTS_FORMAT, read_safetensors
from rnnkit.timeseries import ForecastSpec, Table, Windows, read_csv

#: the most forecasts ``--steps`` makes (each is one model call on one window)
MAX_STEPS = 100_000
#: the most numbers the input windows of one ``predict`` may hold (2**27: 1 GiB as float64)
MAX_WINDOW_NUMBERS = 1 << 27


def _check_steps(steps: object) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise CliError(f"--steps must be a whole number from 1 to {MAX_STEPS}, got {steps!r}")
    return steps


def _check_windows(rows: int, spec: ForecastSpec, what: str) -> None:
    per_window = spec.window * len(spec.features)
    n = max(rows - spec.window + 1, 0) * per_window
    if n > MAX_WINDOW_NUMBERS:
        raise CliError(f"{what}: {rows} rows in windows of {spec.window} rows x {len(spec.features)} "
                       f"feature(s) make {n} numbers, over the limit of {MAX_WINDOW_NUMBERS}; predict "
                       f"from fewer rows (at most "
                       f"{MAX_WINDOW_NUMBERS // max(per_window, 1) + spec.window - 1})")


def _index_labels(table: Table, positions: np.ndarray) -> list[str]:
    """Labels of data rows ``positions`` (past the end: the last spacing continued)."""
    idx = table.index
    n = len(idx)
    step = idx[-1] - idx[-2] if n >= 2 else (np.timedelta64(1, "D") if idx.dtype.kind == "M" else 1)
    out = []
    for p in positions:
        v = idx[p] if p < n else idx[-1] + step * int(p - n + 1)
        if idx.dtype.kind == "M":
            out.append(str(np.datetime_as_string(v)))
        else:
            out.append(str(int(v)))
    return out


def _fmt(v: float) -> str:
    return "" if not np.isfinite(v) else f"{v:.8g}"


def _require_spec(spec: ForecastSpec | None, path: str) -> ForecastSpec:
    if spec is None:
        raise CliError(f"{path}: this model was saved without forecast settings (window, scaler); "
                       "only models written by 'rnnkit train' or 'rnnkit demo' can predict from a CSV")
    return spec


def _emit(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text_atomic(output, text)
        print(f"wrote {text.count(chr(10)) - 1} forecast(s) to {output}", file=sys.stderr)


def predict_command(args: argparse.Namespace) -> int:
    if args.steps is not None:
        _check_steps(args.steps)
    if args.output is not None:
        check_output_file(args.output, "--output")
    args.data = data_path(args.data)
    model, spec_or_none = load_forecaster(args.model)
    spec = _require_spec(spec_or_none, args.model)
    feats = list(spec.features)
    header = read_csv(args.data, [], date_col=None, missing="keep").all_columns
    want_target = spec.target in header and spec.target not in feats
    date_col = spec.index_name if spec.index_name in header else None
    table = read_csv(args.data, feats + ([spec.target] if want_target else []), date_col=date_col,
                     missing=args.missing)
    target = table.columns.get(spec.target)
    buf = io.StringIO()
    if args.steps is None:
        _check_windows(len(table), spec, str(args.data))
        w = spec.input_windows(table.matrix(feats), what=str(args.data))
        pred = predict_values(model, spec, w, target)
        buf.write(f"{table.index_name},prediction,actual\n")
        for label, p, pos in zip(_index_labels(table, w.pos), pred, w.pos, strict=True):
            a = target[pos] if target is not None and pos < len(table) else np.nan
            buf.write(f"{label},{_fmt(p)},{_fmt(a)}\n")
    else:
        if feats != [spec.target] or spec.horizon != 1:
            raise CliError(
                f"--steps needs a model whose only feature is its target and whose horizon is 1; "
                f"this one reads {', '.join(feats)} and forecasts {spec.target!r} {spec.horizon} ahead"
            )
        assert target is not None
        need = spec.rows_needed
        if len(table) < need:
            raise CliError(f"too few rows in {args.data}: {len(table)} row(s), but window "
                           f"{spec.window} needs at least {need}")
        hist = collections.deque(target[-need:], maxlen=need)  # raw levels; forecasts appended
        preds = []
        for _ in range(args.steps):
            levels = np.asarray(hist, dtype=np.float64)
            win = Windows(spec.prepare(levels[:, None])[None], np.zeros((1, 0)), np.array([need]))
            v = float(predict_values(model, spec, win, levels)[0])   # row `need` follows the window
            preds.append(v)
            hist.append(v)
        positions = np.arange(len(table), len(table) + args.steps)
        buf.write(f"{table.index_name},prediction\n")
        for label, p in zip(_index_labels(table, positions), preds, strict=True):
            buf.write(f"{label},{_fmt(p)}\n")
    _emit(buf.getvalue(), args.output)
    return 0


def summary_command(args: argparse.Namespace) -> int:
    meta = read_metadata(args.model) if Path(args.model).is_file() else {}
    if meta.get("format") == WEIGHTS_FORMAT:
        print(describe_weights_file(args.model))
        return 0
    model, spec = load_forecaster(args.model)
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
