"""The index column of a CSV time series: recognising how its values are written (days, times,
months, quarters, whole numbers), parsing them block by block, and writing them back."""

from __future__ import annotations

import re
from array import array

import numpy as np

from rnnkit._errors import InvalidInputError


class DataError(InvalidInputError):
    """A data file cannot be used as asked: missing file, unknown or non-numeric column,
    missing values under ``missing="error"``, too few rows for a window, ..."""


class IndexParseError(Exception):
    """An index column found by name (not asked for) that is not used; the message says why."""


#: kind -> (the pattern every value must match, the numpy unit it is stored in)
KINDS: dict[str, tuple[re.Pattern[str], str]] = {
    "yyyymmdd": (re.compile(r"\d{8}"), "D"),
    "date": (re.compile(r"\d{4}-\d{2}-\d{2}"), "D"),
    "datetime": (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?"), "s"),
    "month": (re.compile(r"\d{4}-\d{2}"), "M"),
    "quarter": (re.compile(r"\d{4}[Qq][1-4]"), "M"),
    "int": (re.compile(r"[+-]?\d{1,15}(\.0*)?"), ""),
}
EXPECTED = ("YYYYMMDD, YYYY-MM-DD[ HH:MM[:SS]], YYYY-MM, YYYYQn (quarters) or a whole number "
            "(a year; 1871.0 is taken as 1871)")


def kind_of(text: str) -> str | None:
    """The first kind of :data:`KINDS` whose pattern matches all of ``text`` (stripped)."""
    t = text.strip()
    for kind, (rx, _) in KINDS.items():
        if rx.fullmatch(t):
            return kind
    return None


def _convert(raw: list[str], kind: str) -> np.ndarray:
    """One block of stripped values of ``kind`` to int64 / datetime64 (ValueError if any is bad)."""
    rx, unit = KINDS[kind]
    if not all(map(rx.fullmatch, raw)):
        raise ValueError("pattern")
    if kind == "int":
        return np.array(raw, dtype=np.float64).astype(np.int64)
    if kind == "yyyymmdd":
        return np.array([f"{t[:4]}-{t[4:6]}-{t[6:]}" for t in raw], dtype="datetime64[D]")
    if kind == "quarter":
        months = [(int(t[:4]) - 1970) * 12 + 3 * (int(t[5]) - 1) for t in raw]
        return np.array(months, dtype=np.int64).astype("datetime64[M]")
    return np.array(raw, dtype=f"datetime64[{unit}]")


def format_index(values: np.ndarray, kind: str, *, as_in_file: bool = False) -> list[str]:
    """Index values as text: dates ``YYYY-MM-DD`` (``YYYYMMDD`` with ``as_in_file`` when the file
    wrote them so), times ``YYYY-MM-DDTHH:MM:SS``, months ``YYYY-MM``, quarters ``YYYYQn``,
    whole numbers (and row numbers) as integers."""
    v = np.asarray(values)
    if kind in ("row", "int") or v.dtype.kind != "M":
        return [str(int(x)) for x in v]
    if kind == "quarter":
        m = v.astype("datetime64[M]").astype(np.int64)
        return [f"{1970 + int(k) // 12}Q{int(k) % 12 // 3 + 1}" for k in m]
    unit = {"datetime": "s", "month": "M"}.get(kind, "D")
    text = [str(s) for s in np.datetime_as_string(v, unit=unit)]  # type: ignore[call-overload]
    if kind == "yyyymmdd" and as_in_file:
        return [s.replace("-", "") for s in text]
    return text


class IndexParser:
    """Parses one index column block by block (:meth:`feed`), then checks the whole
    (:meth:`result`). ``strict``: a bad value is a :class:`DataError` (a column found by name
    or asked for); otherwise (pandas' unnamed index) it makes the column unused."""

    def __init__(self, name: str, path: str, *, strict: bool, asked: bool = False,
                 unnamed: bool = False) -> None:
        self.name, self.path, self.strict, self.asked, self.unnamed = name, path, strict, asked, unnamed
        self.kind: str | None = None
        self.parts: list[np.ndarray] = []
        self.failed: str | None = None

    def _what(self) -> str:
        return ("unnamed first column (pandas' index)" if self.unnamed
                else f"date column {self.name!r}")

    def _fail(self, text: str, line: int) -> None:
        msg = f"{self.path}: line {line}: {self._what()} has {text!r}, expected {EXPECTED}"
        if self.strict:
            hint = "" if self.asked else "; name another with --date-col COL, or --date-col none"
            raise DataError(msg + hint)
        self.failed = f"{msg}: it is not used"

    def feed(self, raw: list[str], lines: array) -> None:
        if self.failed is not None or not raw:
            return
        vals = [t.strip() for t in raw]
        if self.kind is None:
            self.kind = kind_of(vals[0])
            if self.kind is None:
                self._fail(raw[0], lines[0])
                return
        if self.kind == "datetime" and any("." in t for t in vals):
            k = next(i for i, t in enumerate(vals) if "." in t)
            self._fail(raw[k], lines[k])
            return
        try:
            self.parts.append(_convert(vals, self.kind))
        except ValueError:
            for k, t in enumerate(vals):
                try:
                    _convert([t], self.kind)
                except ValueError:
                    self._fail(raw[k], lines[k])
                    return

    def result(self, lines: np.ndarray) -> tuple[np.ndarray, str]:
        """(index, kind); :class:`IndexParseError` saying why when the column is not used: it
        failed to parse (not strict), it is pandas' row count, its values repeat, or it holds
        whole numbers that go back (a ``quarter`` 1..4). Dates that go back are a DataError."""
        if self.failed is not None:
            raise IndexParseError(self.failed)
        assert self.kind is not None or not self.parts
        kind = self.kind or "int"
        idx = np.concatenate(self.parts) if self.parts else np.zeros(0, np.int64)
        if self.unnamed and not self.asked and kind == "int" and np.array_equal(idx, np.arange(len(idx))):
            raise IndexParseError(f"{self.path}: the unnamed first column (pandas' index) counts the rows "
                                  f"0, 1, 2, ...: it is not used")
        if len(idx) < 2:
            return idx, kind
        steps = np.diff(idx)
        zero = np.zeros_like(steps[:1])
        back = np.flatnonzero(steps < zero)
        same = np.flatnonzero(steps == zero)
        if back.size or (same.size and self.asked):
            k = int(back[0] if back.size else same[0])
            shown = format_index(idx[k:k + 2], kind, as_in_file=True)
            msg = (f"{self.path}: the {self._what()} must increase row by row: line {lines[k + 1]} "
                   f"({shown[1]}) does not come after line {lines[k]} ({shown[0]})")
            if self.asked or (self.strict and kind != "int"):   # dates out of order: the file's fault
                raise DataError(msg + "; sort the file by date")
            raise IndexParseError(msg + ": it is not used")
        if same.size:
            k = int(same[0])
            value = format_index(idx[k:k + 1], kind, as_in_file=True)[0]
            raise IndexParseError(
                f"{self.path}: the {self._what()} repeats values (line {lines[k]} and line {lines[k + 1]} "
                f"both have {value}), so it does not tell the rows apart: it is not used as the index "
                "(rows are numbered)")
        return idx, kind
