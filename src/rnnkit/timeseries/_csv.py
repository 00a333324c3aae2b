"""Reading a time series from a CSV file: named numeric columns, an optional date column, and an
explicit policy for missing values. The file is read as a stream, in blocks of rows: memory is
the arrays it returns plus one block, never a list of every row.

The file must have a header row; rows must be in time order (a date column that goes back is an
error, never re-sorted). Column names must be unique (a repeated name is an error). An empty
FIRST name is the index column pandas writes (``to_csv`` of an unnamed index); it is called
``index``.

The *date column* is the one named by ``date_col``; ``date_col=False`` means none (rows are
numbered). By default it is the first column whose name (case-insensitive) is one of
:data:`DATE_COLUMN_NAMES` and that is not read as a feature or target, or else pandas' unnamed
index. Its values may be

* ``YYYYMMDD``, ISO 8601 ``YYYY-MM-DD`` (optionally with a time ``HH:MM[:SS[.f]]`` after ``T``
  or a space, as pandas writes timestamps) -> ``datetime64[D]`` / ``datetime64[s]``;
* ``YYYY-MM`` (monthly periods) -> ``datetime64[M]``;
* ``YYYYQn`` (quarterly periods, ``1959Q1``) -> ``datetime64[M]``, the quarter's first month,
  written back as ``YYYYQn`` by :meth:`Table.labels`;
* whole numbers, also as pandas writes them for a float column (``1871.0``) -> int64 (years).

A date column found by name whose values repeat without going back (the ``year`` of quarterly
data) does not identify rows: it is not used and :attr:`Table.notes` says so. pandas' unnamed
index is used only when it holds dates or whole numbers other than ``0, 1, 2, ...`` (a plain
row count); otherwise it is ignored and the notes say so. A named date column with a value none
of the forms above is an error naming the line.

Every other column read is numeric: an empty field or ``NA``/``N/A``/``NaN``/``null``/``None``
is *missing*; anything else that is not a finite number is an error naming the line and the value.

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
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from rnnkit.timeseries._dates import DataError, IndexParseError, IndexParser, continue_index, format_index

#: column names recognised as the date / index column (compared lower-case)
DATE_COLUMN_NAMES = ("date", "datetime", "time", "timestamp", "ds", "day", "week", "month", "quarter",
                     "period", "year")
#: fields that mean "no value"
MISSING_TOKENS = frozenset({"", "na", "n/a", "nan", "null", "none"})
MissingPolicy = Literal["error", "drop", "interpolate", "keep"]
MISSING_POLICIES = ("error", "drop", "interpolate", "keep")
#: the name given to pandas' unnamed index column (an empty first header field)
UNNAMED_INDEX = "index"
BLOCK_ROWS = 1 << 15


@dataclass(frozen=True)
class Table:
    """Columns read from a CSV file, rows in file order.

    ``columns`` maps each requested column name to a float64 array (NaN = missing, only under
    ``missing="keep"``). ``index`` holds the parsed date column (``datetime64`` or int64) or,
    without one, the 0-based data-row numbers; ``index_name`` is that column's name, or
    ``"row"``; ``index_kind`` is how its values are written (``"row"``, ``"int"``, ``"date"``,
    ``"datetime"``, ``"month"``, ``"quarter"``). ``lines`` holds each row's CSV line number
    (header = line 1), so later errors can name rows of the file. ``notes`` are sentences about
    columns the reader decided not to use (see the module docstring), for the user to read.
    """

    path: str
    index_name: str
    index: np.ndarray
    columns: dict[str, np.ndarray]
    lines: np.ndarray
    all_columns: tuple[str, ...]
    index_kind: str = "row"
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return int(self.lines.shape[0])

    def matrix(self, names: list[str], dtype: type = np.float64) -> np.ndarray:
        """The named columns side by side, shape (rows, len(names)), in ``dtype`` (for one
        float64 column, a read-only view of it)."""
        if len(names) == 1 and np.dtype(dtype) == np.float64:
            view = self.columns[names[0]][:, None]
            view.flags.writeable = False
            return view
        out: np.ndarray = np.empty((len(self), len(names)), dtype=dtype)
        for k, n in enumerate(names):
            out[:, k] = self.columns[n]
        return out

    def labels(self, positions: np.ndarray, *, as_in_file: bool = False) -> list[str]:
        """The index of data rows ``positions`` as text (:func:`format_index`; dates as
        ``YYYY-MM-DD`` unless ``as_in_file``); a position past the last row continues the index
        (:func:`continue_index`: the calendar frequency pandas would infer from it, else the
        last step)."""
        idx = self.index
        n = len(idx)
        pos = np.asarray(positions, dtype=np.int64)
        past = int(pos.max()) - (n - 1) if pos.size else 0
        if past <= 0:
            return format_index(idx[pos], self.index_kind, as_in_file=as_in_file)
        ext = np.concatenate([idx[-1:], continue_index(idx, past)])
        vals = np.where(pos < n, idx[np.minimum(pos, n - 1)], ext[np.maximum(pos - (n - 1), 0)])
        return format_index(vals, self.index_kind, as_in_file=as_in_file)


def _lines_text(lines: np.ndarray, limit: int = 8, labels: list[str] | None = None) -> str:
    """``"8 (19580510), 11 (19580531) and 3 more"`` — CSV line numbers, with the date if known."""
    shown = ", ".join(str(int(v)) + (f" ({labels[k]})" if labels is not None else "")
                      for k, v in enumerate(lines[:limit]))
    more = len(lines) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def _parse_numeric(raw: list[str], lines: array, name: str, path: str) -> np.ndarray:
    """Fields of one block to float64 (NaN = missing); the fast path is numpy's conversion,
    a block it refuses (or that holds NaN/Inf) is checked field by field to name the line."""
    try:
        out = np.array(raw, dtype=np.float64)
        if np.isfinite(out).all():
            return out
    except ValueError:
        pass
    out = np.empty(len(raw), dtype=np.float64)
    for k, text in enumerate(raw):
        t = text.strip()
        if t.lower() in MISSING_TOKENS:
            out[k] = np.nan
            continue
        try:
            v = float(t)
        except ValueError:
            raise DataError(
                f"{path}: column {name!r} is not numeric: line {lines[k]} has {text!r}"
            ) from None
        if not np.isfinite(v):
            raise DataError(f"{path}: column {name!r} has a non-finite value {text!r} at line {lines[k]}")
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


def read_header(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The column names of the CSV file at ``path`` (pandas' unnamed index as ``index``),
    reading only the first line. Raises :class:`DataError` as :func:`read_csv` does."""
    with _open(path) as fh:
        return _header(next(csv.reader(fh), []), str(path))[0]


def _open(path: str | os.PathLike[str]):  # type: ignore[no-untyped-def]
    p = Path(path)
    if not p.exists():
        raise DataError(f"{path}: no such file")
    if p.is_dir():
        raise DataError(f"{path}: is a directory, expected a CSV file")
    if not p.is_file():
        raise DataError(f"{path}: is not a regular file, expected a CSV file")
    try:
        return open(p, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise DataError(f"{path}: cannot be opened ({e.strerror or e})") from None


def _header(first: list[str], spath: str) -> tuple[tuple[str, ...], bool]:
    """The stripped names, and whether the first one was empty (pandas' unnamed index)."""
    if not first or not any(f.strip() for f in first):
        raise DataError(f"{spath}: empty file, expected a header row of column names")
    header = [h.strip() for h in first]
    unnamed = header[0] == "" and UNNAMED_INDEX not in header
    if unnamed:
        header[0] = UNNAMED_INDEX
    blank = [k + 1 for k, h in enumerate(header) if not h]
    if blank:
        raise DataError(f"{spath}: the header has no name for column(s) {', '.join(map(str, blank))}; "
                        "every column needs a name")
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise DataError(f"{spath}: column name(s) used more than once in the header: {', '.join(dup)}; "
                        "column names must be unique")
    return tuple(header), unnamed


def read_csv(
    path: str | os.PathLike[str],
    columns: list[str],
    *,
    date_col: str | Literal[False] | None = None,
    missing: str = "error",
) -> Table:
    """Read ``columns`` (numeric) and the date column (see the module docstring) from the CSV
    file at ``path``; ``date_col``: a column name, ``False`` for none, ``None`` to find it.

    Raises :class:`DataError` for a missing or unreadable file, a file without a header,
    repeated column names, an unknown column (the message lists the file's columns), a
    non-numeric or non-finite value, an unparseable date, a date column that goes back, and
    missing values as ``missing`` says.
    """
    if not isinstance(missing, str) or missing not in MISSING_POLICIES:
        raise DataError(f"missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}")
    spath = str(path)
    try:
        with _open(path) as fh:
            return _read(csv.reader(fh), spath, list(columns), date_col, missing)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"{spath}: cannot read as a CSV text file ({e})") from None


def _candidates(header: tuple[str, ...], unnamed: bool, columns: list[str],
                date_col: str | Literal[False] | None, spath: str) -> list[str]:
    """The index columns to parse, in order of preference (the first usable one is the index)."""
    for c in columns:
        if c not in header:
            raise DataError(f"{spath}: unknown column {c!r}; the file has columns: {', '.join(header)}")
    if date_col is False:
        return []
    if date_col is not None:
        if date_col not in header:
            raise DataError(f"{spath}: unknown date column {date_col!r}; the file has columns: "
                            f"{', '.join(header)} (--date-col none: no date column)")
        if date_col in columns:
            raise DataError(f"{spath}: column {date_col!r} is the date column, it cannot be a feature "
                            "or target")
        return [date_col]
    named = [h for h in header if h.lower() in DATE_COLUMN_NAMES and h not in columns]
    return ([UNNAMED_INDEX] if unnamed and UNNAMED_INDEX not in columns else []) + named[:1]


def _read(reader: Iterator[list[str]], spath: str, columns: list[str],
          date_col: str | Literal[False] | None, missing: str) -> Table:
    header, unnamed = _header(next(reader, []), spath)
    line_num: Callable[[], int] = lambda: reader.line_num  # type: ignore[attr-defined]  # noqa: E731
    cands = _candidates(header, unnamed, columns, date_col, spath)
    width = len(header)
    want = list(dict.fromkeys(columns + cands))
    pos = [header.index(c) for c in want]
    parsers = {c: IndexParser(c, spath, strict=not (unnamed and c == UNNAMED_INDEX and date_col is None),
                              asked=date_col is not None, unnamed=unnamed and c == UNNAMED_INDEX)
               for c in cands}
    values: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    line_arr = array("q")
    block: list[list[str]] = [[] for _ in want]
    block_lines = array("q")

    def flush() -> None:
        for c, raw in zip(want, block, strict=True):
            if c in values:
                values[c].append(_parse_numeric(raw, block_lines, c, spath))
            if c in parsers:
                parsers[c].feed(raw, block_lines)
            raw.clear()
        line_arr.extend(block_lines)
        del block_lines[:]

    for row in reader:
        if len(row) != width or not any(row):
            if not any(f.strip() for f in row):
                continue
            raise DataError(f"{spath}: line {line_num()} has {len(row)} fields, the header "
                            f"has {width}")
        for dst, k in zip(block, pos, strict=True):
            dst.append(row[k])
        block_lines.append(line_num())
        if len(block_lines) >= BLOCK_ROWS:
            flush()
    flush()
    lines = np.frombuffer(line_arr, dtype=np.int64) if len(line_arr) else np.zeros(0, np.int64)
    cols = {c: (np.concatenate(v) if v else np.zeros(0)) for c, v in values.items()}
    notes: list[str] = []
    index_name, index, kind = "row", np.arange(len(lines), dtype=np.int64), "row"
    for c, parser in parsers.items():
        try:
            idx, found = parser.result(lines)
        except IndexParseError as e:
            notes.append(str(e))
            continue
        if index_name == "row":
            index_name, index, kind = c, idx, found
    return _apply_missing(Table(spath, index_name, index, cols, lines, header, kind, tuple(notes)), missing)


def _apply_missing(t: Table, missing: str) -> Table:
    cols, index, lines = t.columns, t.index, t.lines
    if not cols or missing == "keep":
        return t
    miss_any = np.zeros(len(t), dtype=bool)
    for c, v in cols.items():
        m = np.isnan(v)
        if m.any() and missing == "error":
            where = np.flatnonzero(m)[:8]
            labels = t.labels(where, as_in_file=True) if t.index_name != "row" else None
            raise DataError(
                f"{t.path}: column {c!r} has {int(m.sum())} missing value(s) at lines "
                f"{_lines_text(lines[m], labels=labels)}; choose --missing drop or "
                f"--missing interpolate"
            )
        miss_any |= m
    if missing == "drop" and miss_any.any():
        keep = ~miss_any
        cols = {c: v[keep] for c, v in cols.items()}
        index, lines = index[keep], lines[keep]
    elif missing == "interpolate":
        cols = {c: _interpolate(v, c, t.path, lines) for c, v in cols.items()}
    return Table(t.path, t.index_name, index, cols, lines, t.all_columns, t.index_kind, t.notes)
