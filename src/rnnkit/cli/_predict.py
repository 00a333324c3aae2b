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

``--steps`` is at most :data:`MAX_STEPS` (a one-line error otherwise). The input windows are a
strided view of the file's rows and are predicted and written :data:`CHUNK` at a time, so a
long CSV costs memory in proportion to its rows, whatever the model's window.

``<index>`` is the training file's date column (dates as YYYY-MM-DD, years as integers; rows
past the end continue the last spacing) or ``row`` (0-based data-row numbers).
"""

from __future__ import annotations

import argparse
import collections
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np

from rnnkit._safetensors import read_safetensors
from rnnkit.cli._common import CliError, check_output_file, data_path, write_chunks, write_text_atomic
from rnnkit.cli._model import describe_spec, load_forecaster, predict_values, read_metadata
from rnnkit.io._weights import WEIGHTS_FORMAT
from rnnkit.timeseries import ForecastSpec, Table, WindowArrays, read_csv, read_header

#: windows predicted, and output rows formatted, at once
CHUNK = 1 << 14

#: the most forecasts ``--steps`` makes (each is one model call on one window)
MAX_STEPS = 100_000


def _check_steps(steps: object) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise CliError(f"--steps must be a whole number from 1 to {MAX_STEPS}, got {steps!r}")
    return steps



def _one_step_rows(table: Table, w: WindowArrays, pred: np.ndarray,
                   target: np.ndarray | None) -> Iterator[str]:
    """The one-step CSV, a block of rows at a time."""
    yield f"{table.index_name},prediction,actual\n"
    for a in range(0, len(w), CHUNK):
        pos = w.pos[a:a + CHUNK]
        act = [target[q] if target is not None and q < len(table) else np.nan for q in pos]
        yield "".join(f"{label},{_fmt(p)},{_fmt(v)}\n"
                      for label, p, v in zip(table.labels(pos), pred[a:a + CHUNK], act, strict=True))


def _emit_chunks(chunks: Iterator[str], output: str | None) -> None:
    n = write_chunks(output, chunks)
    if output is not None:
        print(f"wrote {n - 1} forecast(s) to {output}", file=sys.stderr)


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
    header = read_header(args.data)
    want_target = spec.target in header and spec.target not in feats
    date_col: str | Literal[False] | None = (spec.index_name if spec.index_name in header
                                             else False if spec.index_name == "row" else None)
    table = read_csv(args.data, feats + ([spec.target] if want_target else []), date_col=date_col,
                     missing=args.missing)
    target = table.columns.get(spec.target)
    buf = io.StringIO()
    if args.steps is None:
        w = spec.input_windows(table.matrix(feats), what=str(args.data))
        pred = np.empty(len(w))                  # every forecast checked before any is written
        for a in range(0, len(w), CHUNK):
            pred[a:a + CHUNK] = predict_values(model, spec, w.take(slice(a, a + CHUNK)), target)
        _emit_chunks(_one_step_rows(table, w, pred, target), args.output)
        return 0
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
            win = WindowArrays(spec.prepare(levels[:, None])[None], np.zeros((1, 0)), np.array([need]))
            v = float(predict_values(model, spec, win, levels)[0])   # row `need` follows the window
            preds.append(v)
            hist.append(v)
        positions = np.arange(len(table), len(table) + args.steps)
        buf.write(f"{table.index_name},prediction\n")
        for label, p in zip(table.labels(positions), preds, strict=True):
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
