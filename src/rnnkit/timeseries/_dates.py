"""The index column of a CSV time series: recognising how its values are written (days, times,
months, quarters, whole numbers), parsing them block by block, and writing them back."""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass

import numpy as np

from rnnkit._budget import check_array
from rnnkit._errors import InvalidInputError
from rnnkit._numbers import check_int


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
    if v.ndim != 1 or v.dtype.kind not in "iuM":
        raise DataError(f"format_index: values must be a 1-D array of integers or datetime64, got dtype "
                        f"{v.dtype} shape {v.shape}")
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


# -- the frequency of a dated index, and the dates that continue it -------------------------------
#: index values examined at once when inferring a frequency (bounded temporaries on long files)
FREQ_BLOCK = 1 << 16
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
#: a month anchor's letters in pandas' aliases: (monthly, quarterly, yearly)
_ANCHOR_ALIASES = {"cs": ("MS", "QS", "YS"), "bs": ("BMS", "BQS", "BYS"),
                   "ce": ("ME", "QE", "YE"), "be": ("BME", "BQE", "BYE")}
#: sub-daily units, finest last, with their names in pandas' aliases
_INTRADAY = (("h", "h"), ("m", "min"), ("s", "s"), ("ms", "ms"), ("us", "us"), ("ns", "ns"))


@dataclass(frozen=True)
class Frequency:
    """How a dated index steps from row to row, the rules and order of pandas' ``infer_freq``:

    ``"month"``
        every date at the same place in its month — ``anchor`` ``"cs"`` the first day, ``"ce"``
        the last day, ``"bs"`` the first weekday, ``"be"`` the last weekday — and ``step``
        months apart (12: yearly, a multiple of 3: quarterly, else monthly);
    ``"bday"``
        business days: every row is the weekday after the one before (Monday after Friday);
    ``"fixed"``
        one constant step, ``step`` ticks of the index's unit (days, weeks, hours, ...).

    ``name`` is the frequency as pandas names it (``"ME"``, ``"QS-JAN"``, ``"2YS-JAN"``,
    ``"B"``, ``"W-SUN"``, ``"3D"``, ``"h"``); ``per_day`` is the index's ticks per day (0 when
    its unit is coarser than a day).
    """

    rule: str
    step: int
    name: str
    anchor: str = ""
    per_day: int = 1


def _counted(alias: str, count: int) -> str:
    return alias if count == 1 else f"{count}{alias}"


def _per_day(unit: str) -> int:
    if unit == "D":
        return 1
    if unit not in dict(_INTRADAY):
        return 0
    return int(np.timedelta64(1, "D") // np.timedelta64(1, unit))  # type: ignore[call-overload]


def _month_fields(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(months since 1970-01, day of month 1.., days in the month, weekday Monday=0) of day numbers."""
    d = days.astype("datetime64[D]")
    months = d.astype("datetime64[M]")
    first = months.astype("datetime64[D]")
    dom = (d - first).astype(np.int64) + 1
    dim = ((months + 1).astype("datetime64[D]") - first).astype(np.int64)
    return months.astype(np.int64), dom, dim, (days + 3) % 7      # 1970-01-01 was a Thursday


class _Survey:
    """What :func:`infer_frequency` needs of a whole index, gathered a block at a time."""

    def __init__(self) -> None:
        self.deltas: set[int] = set()
        self.mdiffs: set[int] = set()
        self.ydiffs: set[int] = set()
        self.months_of_year: set[int] = set()
        self.pos = {"cs": True, "bs": True, "ce": True, "be": True}
        self.bday = True
        self.increasing = True

    def add(self, ticks: np.ndarray, per_day: int) -> None:
        steps = np.diff(ticks)
        if steps.size and int(steps.min()) <= 0:
            self.increasing = False
            return
        self.deltas.update(int(s) for s in np.unique(steps)[:4])
        if len(self.deltas) > 16:     # more step lengths than any month rule makes: none holds
            self.pos = dict.fromkeys(self.pos, False)
            self.bday = False
        if not (any(self.pos.values()) or self.bday):
            return
        days = ticks // per_day
        months, dom, dim, wd = _month_fields(days)
        self.mdiffs.update(int(s) for s in np.unique(np.diff(months))[:4])
        self.ydiffs.update(int(s) for s in np.unique(np.diff(months // 12))[:4])
        self.months_of_year.update(int(s) for s in np.unique(months % 12)[:4])
        ends = dom == dim
        checks = {"cs": dom == 1, "bs": (dom == 1) | ((dom <= 3) & (wd == 0)), "ce": ends,
                  "be": ends | ((dim - dom < 3) & (wd == 4))}
        for k, ok in checks.items():
            self.pos[k] = self.pos[k] and bool(ok.all())
        # pandas' business-day test: each row after the first is a Monday 3 days on, or a
        # Tuesday..Friday 1 day on
        day_steps = np.diff(days)
        after = wd[1:]
        self.bday = self.bday and bool((((after == 0) & (day_steps == 3))
                                        | ((after >= 1) & (after <= 4) & (day_steps == 1))).all())

    def position(self) -> str | None:
        return next((k for k in ("ce", "be", "cs", "bs") if self.pos[k]), None)


def infer_frequency(index: np.ndarray) -> Frequency | None:
    """The frequency pandas' ``infer_freq`` finds for a ``datetime64`` index of days or finer
    (at least 3 strictly increasing values), by its rules and in its order: yearly, quarterly
    or monthly dates anchored at a month's start or end (calendar or business), then one
    constant step (days, weeks, hours, ...), then business days. None when there is none (an
    irregular index, fewer than 3 values, a unit coarser than days, or pandas' week-of-month
    and business-hour rules, which are not followed)."""
    try:
        v = np.asarray(index)
    except (TypeError, ValueError) as e:
        raise DataError(f"infer_frequency: index is not an array ({e})") from None
    if v.dtype.kind != "M" or v.ndim != 1 or len(v) < 3:
        return None
    unit = str(np.datetime_data(v.dtype)[0])
    per_day = _per_day(unit)
    if per_day == 0:
        return None
    ticks = v.view(np.int64)
    s = _Survey()
    for a in range(0, len(ticks) - 1, FREQ_BLOCK):
        s.add(ticks[a:a + FREQ_BLOCK + 1], per_day)
        if not s.increasing:
            return None
    smallest = min(s.deltas)
    if smallest % per_day == 0:
        pos = s.position()
        if pos is not None and len(s.ydiffs) == 1 and len(s.months_of_year) == 1 and min(s.ydiffs) > 0:
            years = min(s.ydiffs)
            month = _MONTHS[int(v[-1].astype("datetime64[M]").astype(np.int64)) % 12]
            return Frequency("month", 12 * years, _counted(f"{_ANCHOR_ALIASES[pos][2]}-{month}", years),
                             pos, per_day)
        if pos is not None and len(s.mdiffs) == 1 and min(s.mdiffs) > 0:
            months = min(s.mdiffs)
            if months % 3 == 0:
                # the anchor month is known up to 3: a start is named by its first calendar
                # quarter's month (QS-JAN), an end by its last (QE-DEC), as pandas does
                m = int(v[-1].astype("datetime64[M]").astype(np.int64)) % 12 + 1
                firsts = pos in ("cs", "bs")
                anchor = _MONTHS[({1: 1, 2: 2, 0: 3} if firsts else {0: 12, 2: 11, 1: 10})[m % 3] - 1]
                return Frequency("month", months, _counted(f"{_ANCHOR_ALIASES[pos][1]}-{anchor}",
                                                           months // 3), pos, per_day)
            return Frequency("month", months, _counted(_ANCHOR_ALIASES[pos][0], months), pos, per_day)
        if len(s.deltas) == 1:
            days = smallest // per_day
            if days % 7 == 0:
                wd = _WEEKDAYS[int((ticks[-1] // per_day + 3) % 7)]
                return Frequency("fixed", smallest, _counted(f"W-{wd}", days // 7), per_day=per_day)
            return Frequency("fixed", smallest, _counted("D", days), per_day=per_day)
        if s.deltas == {per_day, 3 * per_day} and s.bday:
            return Frequency("bday", 1, "B", per_day=per_day)
        return None
    if len(s.deltas) != 1:
        return None
    for u, alias in _INTRADAY:
        size = per_day // _per_day(u)           # ticks of the index per ``u``
        if smallest % size == 0:
            return Frequency("fixed", smallest, _counted(alias, smallest // size), per_day=per_day)
    return None  # pragma: no cover - every step is a whole number of the finest unit


def _month_days(months: np.ndarray, anchor: str) -> np.ndarray:
    """The day numbers of months (since 1970-01) at ``anchor`` (see :class:`Frequency`)."""
    m = months.astype("datetime64[M]")
    if anchor in ("cs", "bs"):
        day = m.astype("datetime64[D]").astype(np.int64)
        if anchor == "bs":
            wd = (day + 3) % 7
            day = day + np.where(wd == 5, 2, np.where(wd == 6, 1, 0))
        return day
    day = (m + 1).astype("datetime64[D]").astype(np.int64) - 1
    if anchor == "be":
        wd = (day + 3) % 7
        day = day - np.where(wd == 5, 1, np.where(wd == 6, 2, 0))
    return day


def continue_index(index: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` index values after the last of ``index`` (``count >= 0``, at least one
    value): for a dated index with a frequency (:func:`infer_frequency`), what pandas'
    ``date_range(start=index[-1], periods=count + 1, freq=...)[1:]`` gives — month ends stay
    month ends, business days skip weekends — keeping the last value's time of day; otherwise
    (whole numbers, months and quarters stored as months, an irregular index) the last step
    repeated (one step for a one-value index)."""
    idx = np.asarray(index)
    if idx.ndim != 1 or idx.size == 0 or idx.dtype.kind not in "iuM":
        raise DataError(f"continue_index: index must be a 1-D array of at least one integer or datetime64 "
                        f"value, got dtype {idx.dtype} shape {idx.shape}")
    count = check_int(count, "count", "continue_index", lo=0)
    check_array((count,), 8, "continue_index")
    j = np.arange(1, count + 1, dtype=np.int64)
    freq = infer_frequency(idx) if count else None
    if freq is None or freq.rule == "fixed":         # a fixed frequency's step is the last step
        if len(idx) >= 2:
            step: object = idx[-1] - idx[-2]
        elif idx.dtype.kind == "M":
            step = np.timedelta64(1, np.datetime_data(idx.dtype)[0])  # type: ignore[call-overload]
        else:
            step = 1
        return idx[-1] + step * j  # type: ignore[operator]
    last = int(idx[-1:].view(np.int64)[0])
    day, tod = divmod(last, freq.per_day)
    if freq.rule == "bday":
        days = np.busday_offset(np.datetime64(day, "D"), j, roll="forward").astype(np.int64)
    else:
        month = int(np.datetime64(day, "D").astype("datetime64[M]").astype(np.int64))
        days = _month_days(month + freq.step * j, freq.anchor)
    return (days * freq.per_day + tod).astype(idx.dtype)
