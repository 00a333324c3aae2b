"""Reading a time series from a CSV file: named numeric columns, an optional date column, and an
explicit policy for missing values.

The file must have a header row; rows must be in time order (a date column that does not
increase row by row is an error, never re-sorted). A *date column* is the one named by ``date_col``, else the
first column whose name (case-insensitive) is one of :data:`DATE_COLUMN_NAMES`. Its values are
parsed as ``YYYYMMDD`` or ISO 8601 (``YYYY-MM-DD``, optionally with a time) into
``datetime64`` values, or, for a column named ``year``, as integer years. Every other column
read is numeric: an empty field or ``NA``/``N/A``/``NaN``/``null`` is *missing*; anything else
that is not a finite number is an error naming the line and the value.

Missing values follow ``missing``:

``"error"`` (the default)
    :class:`DataError` naming the column and the CSV line numbers (header = line 1).
``"drop"``
    rows with a missing value in any column read are removed (the series then has gaps).
``"interpolate"``
    linear interpolation over the row order between the nearest present neighbours; a missing
    value at the start or the end has only one neighbour, so it is an error, never filled.
``"keep"``
    missing values stay NaN (for loaders that document it).

Nothing is filled, reordered or truncated silently.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from rnnkit._errors import InvalidInputError

#: column names recognised as the date / index column (compared lower-case)
DATE_COLUMN_NAMES = ("date", "datetime", "time", "timestamp", "ds", "day", "week", "month", "year")
#: fields that mean "no value"
MISSING_TOKENS = frozenset({"", "na", "n/a", "nan", "null", "none"})
MissingPolicy = Literal["error", "drop", "interpolate", "keep"]
MISSING_POLICIES = ("error", "drop", "interpolate", "keep")

_YYYYMMDD = re.compile(r"^\d{8}$")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?$")


class DataError(InvalidInputError):
    """A data file cannot be used as asked: missing file, unknown or non-numeric column,
    missing values under ``missing="error"``, too few rows for a window, ..."""


@dataclass(frozen=True)
class Table:
    """Columns read from a CSV file, rows in file order.

    ``columns`` maps each requested column name to a float64 array (NaN = missing, only under
    ``missing="keep"``). ``index`` holds the parsed date column (``datetime64[D]`` /
    ``datetime64[s]``, or int64 years) or, without one, the 0-based data-row numbers;
    ``index_name`` is that column's name, or ``"row"``. ``lines`` holds each row's CSV line
    number (header = line 1), so later errors can name rows of the file.
    """

    path: str
    index_name: str
    index: np.ndarray
    columns: dict[str, np.ndarray]
    lines: np.ndarray
    all_columns: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.lines.shape[0])

    def matrix(self, names: list[str]) -> np.ndarray:
        """The named columns side by side, shape (rows, len(names)), float64."""
        return np.stack([self.columns[n] for n in names], axis=1)


def _lines_text(lines: np.ndarray, limit: int = 8, labels: list[str] | None = None) -> str:
    """``"8 (19580510), 11 (19580531) and 3 more"`` — CSV line numbers, with the date if known."""
    shown = ", ".join(str(int(v)) + (f" ({labels[k]})" if labels is not None else "")
                      for k, v in enumerate(lines[:limit]))
    more = len(lines) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def parse_date(text: str, line: int, column: str, path: str) -> np.datetime64:
    """``YYYYMMDD`` or ISO 8601 text to a ``datetime64`` (day or second resolution)."""
    t = text.strip()
    try:
        if _YYYYMMDD.match(t):
            return np.datetime64(f"{t[:4]}-{t[4:6]}-{t[6:]}", "D")
        if _ISO.match(t):
            return np.datetime64(t.replace(" ", "T"), "D" if len(t) == 10 else "s")
    except ValueError:
        pass
    raise DataError(
        f"{path}: line {line}: date column {column!r} has {text!r}, expected YYYYMMDD or "
        f"ISO 8601 (YYYY-MM-DD)"
    )


def _parse_index(raw: list[str], lines: list[int], name: str, path: str) -> np.ndarray:
    if name.lower() == "year":
        out = np.empty(len(raw), dtype=np.int64)
        for k, (text, line) in enumerate(zip(raw, lines, strict=True)):
            try:
                out[k] = int(text.strip())
            except ValueError:
                raise DataError(f"{path}: line {line}: column {name!r} has {text!r}, "
                                "expected an integer year") from None
        return out
    vals = [parse_date(t, ln, name, path) for t, ln in zip(raw, lines, strict=True)]
    return np.array(vals) if vals else np.array([], dtype="datetime64[D]")


def _parse_numeric(raw: list[str], lines: list[int], name: str, path: str) -> np.ndarray:
    out = np.empty(len(raw), dtype=np.float64)
    for k, (text, line) in enumerate(zip(raw, lines, strict=True)):
        t = text.strip()
        if t.lower() in MISSING_TOKENS:
            out[k] = np.nan
            continue
        try:
            v = float(t)
        except ValueError:
            raise DataError(
                f"{path}: column {name!r} is not numeric: line {line} has {text!r}"
            ) from None
        if not np.isfinite(v):
            raise DataError(f"{path}: column {name!r} has a non-finite value {text!r} at line {line}")
        out[k] = v
    return out


def _interpolate(values: np.ndarray, name: str, path: str, lines: np.ndarray) -> np.ndarray:
    miss = np.isnan(values)
    if not miss.any():
        return values
    present = np.flatnonzero(~miss)
    if present.size == 0:
        raise DataError(f"{path}: column {name!r} has no values at all; nothing to interpolate from")
    edge = miss & ((np.arange(len(values)) < present[0]) | (np.arange(len(values)) > present[-1]))
    if edge.any():
        raise DataError(
            f"{path}: column {name!r}: cannot interpolate missing values at the start or end "
            f"(lines {_lines_text(lines[edge])}); use --missing drop"
        )
    out = values.copy()
    out[miss] = np.interp(np.flatnonzero(miss), present, values[present])
    return out


def read_csv(
    path: str | os.PathLike[str],
    columns: list[str],
    *,
    date_col: str | None = None,
    missing: str = "error",
) -> Table:
    """Read ``columns`` (numeric) and the date column from the CSV file at ``path``.

    Raises :class:`DataError` for a missing or unreadable file, a file without a header or
    rows, an unknown column (the message lists the file's columns), a non-numeric or
    non-finite value, an unparseable date, and missing values as ``missing`` says.
    """
    if missing not in MISSING_POLICIES:
        raise DataError(f"missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}")
    p = Path(path)
    spath = str(path)
    if not p.exists():
        raise DataError(f"{spath}: no such file")
    if p.is_dir():
        raise DataError(f"{spath}: is a directory, expected a CSV file")
    try:
        with open(p, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"{spath}: cannot read as a CSV text file ({e})") from None
    if not rows or not any(f.strip() for f in rows[0]):
        raise DataError(f"{spath}: empty file, expected a header row of column names")
    header = [h.strip() for h in rows[0]]
    body: list[tuple[int, list[str]]] = [
        (k + 1, r) for k, r in enumerate(rows) if k > 0 and any(f.strip() for f in r)
    ]
    if date_col is None:
        dcol = next((h for h in header if h.lower() in DATE_COLUMN_NAMES), None)
    else:
        if date_col not in header:
            raise DataError(f"{spath}: unknown date column {date_col!r}; the file has columns: "
                            f"{', '.join(header)}")
        dcol = date_col
    for c in columns:
        if c not in header:
            raise DataError(f"{spath}: unknown column {c!r}; the file has columns: {', '.join(header)}")
        if c == dcol:
            raise DataError(f"{spath}: column {c!r} is the date column, it cannot be a feature or target")
    for line, r in body:
        if len(r) != len(header):
            raise DataError(f"{spath}: line {line} has {len(r)} fields, the header has {len(header)}")
    lines = [ln for ln, _ in body]
    cols = {c: _parse_numeric([r[header.index(c)] for _, r in body], lines, c, spath) for c in columns}
    raw_dates = [r[header.index(dcol)].strip() for _, r in body] if dcol is not None else None
    if dcol is not None and raw_dates is not None:
        index = _parse_index(raw_dates, lines, dcol, spath)
    else:
        index = np.arange(len(body), dtype=np.int64)
    line_arr = np.asarray(lines, dtype=np.int64)
    if dcol is not None and len(index) > 1:
        steps = np.diff(index)
        back = np.flatnonzero(steps <= np.zeros_like(steps[:1]))
        if back.size:
            k = int(back[0])
            raise DataError(
                f"{spath}: the date column {dcol!r} must increase row by row: line {lines[k + 1]} "
                f"({raw_dates[k + 1] if raw_dates else ''}) does not come after line {lines[k]} "
                f"({raw_dates[k] if raw_dates else ''}); sort the file by date"
            )
    if columns and missing != "keep":
        miss_any = np.zeros(len(body), dtype=bool)
        for c, v in cols.items():
            m = np.isnan(v)
            if m.any() and missing == "error":
                where = np.flatnonzero(m)
                labels = [raw_dates[k] for k in where[:8]] if raw_dates is not None else None
                raise DataError(
                    f"{spath}: column {c!r} has {int(m.sum())} missing value(s) at lines "
                    f"{_lines_text(line_arr[m], labels=labels)}; choose --missing drop or "
                    f"--missing interpolate"
                )
            miss_any |= m
        if missing == "drop" and miss_any.any():
            keep = ~miss_any
            cols = {c: v[keep] for c, v in cols.items()}
            index, line_arr = index[keep], line_arr[keep]
        elif missing == "interpolate":
            cols = {c: _interpolate(v, c, spath, line_arr) for c, v in cols.items()}
    return Table(spath, dcol or "row", index, cols, line_arr, tuple(header))
