"""Panels: many related series in long format (``unique_id, ds, y`` plus covariate columns, as
statsforecast and neuralforecast take them), checked once, and their calendar features.

A :class:`Panel` is built in one place, :meth:`Panel.from_columns` (flat long-format columns);
:func:`read_panel` (a CSV file) and :func:`panel_from_frame` (a pandas DataFrame, or anything
with ``columns`` and ``df[name].to_numpy()``; pandas is never imported) both end there. The
rules, each broken one a :class:`DataError` naming the series and the rule:

* one row per series and date (a date twice is an error, not averaged);
* every series evenly spaced at one calendar frequency, the same for all series
  (:func:`~rnnkit.timeseries.infer_frequency`; a missing date is an error, not filled);
* every value and covariate a finite number (an empty field is an error, not interpolated).

Rows may come in any order; each series is sorted by date.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnkit.timeseries._dates import DataError, Frequency, continue_index, infer_frequency


@dataclass(frozen=True)
class Series:
    """One series of a panel: its id, dates (datetime64, increasing), values (T,) float64 and
    covariates (T, C) float64 (C = the panel's covariate names)."""

    id: str
    index: np.ndarray
    y: np.ndarray
    covariates: np.ndarray

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def head(self, rows: int) -> Series:
        return Series(self.id, self.index[:rows], self.y[:rows], self.covariates[:rows])


def season_length(freq: Frequency | None) -> int | None:
    """Rows per season of a panel frequency: monthly 12, quarterly 4, weekly 52, daily 7,
    business days 5, hourly 24; None for yearly and other spacings."""
    if freq is None:
        return None
    if freq.rule == "month":
        return {1: 12, 3: 4}.get(freq.step)
    if freq.rule == "bday":
        return 5
    if freq.per_day and freq.step == freq.per_day:
        return 7
    if freq.per_day and freq.step == 7 * freq.per_day:
        return 52
    if freq.per_day and freq.per_day % 24 == 0 and freq.step == freq.per_day // 24:
        return 24
    return None


def season_position(index: np.ndarray, freq: Frequency | None) -> np.ndarray | None:
    """Each date's place in its season (0 .. :func:`season_length` - 1), None without a season."""
    m = season_length(freq)
    if m is None or freq is None:
        return None
    idx = np.asarray(index)
    if freq.rule == "month":
        months = idx.astype("datetime64[M]").astype(np.int64) % 12
        return months if m == 12 else months // 3
    ticks = idx.view(np.int64)
    days = ticks // freq.per_day
    if m in (5, 7):
        return (days + 3) % 7 % m                            # Monday = 0 (1970-01-01: a Thursday)
    if m == 52:
        doy = days - idx.astype("datetime64[Y]").astype("datetime64[D]").astype(np.int64)
        return np.minimum(doy // 7, 51)
    return (ticks % freq.per_day) // (freq.per_day // 24)    # hour of the day


def calendar_features(index: np.ndarray, freq: Frequency | None) -> np.ndarray:
    """Known-future calendar features of dates (T, K) float64: the one-hot place in the season
    for a season of at most 12 rows, else the sine and cosine of its first two harmonics; (T, 0)
    without a season."""
    pos = season_position(index, freq)
    m = season_length(freq)
    if pos is None or m is None:
        return np.zeros((len(index), 0))
    if m <= 12:
        return np.eye(m)[pos]
    a = 2 * np.pi * pos[:, None] * np.array([1.0, 2.0]) / m
    return np.concatenate([np.sin(a), np.cos(a)], axis=1)


def _fmt(d: Any) -> str:
    s = str(d)
    return s[:10] if s.endswith("T00:00:00") or s.endswith("T00:00:00.000000000") else s


@dataclass(frozen=True)
class Panel:
    """Related series in one calendar (see the module's rules); ``covariate_names`` the
    covariate columns every series has; ``freq`` their frequency (None when every series has
    fewer than 3 rows)."""

    series: tuple[Series, ...]
    covariate_names: tuple[str, ...]
    freq: Frequency | None

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.series]

    def __len__(self) -> int:
        return len(self.series)

    def __getitem__(self, key: str) -> Series:
        for s in self.series:
            if s.id == key:
                return s
        raise DataError(f"no series {key!r} in the panel; it has {', '.join(map(repr, self.ids[:10]))}"
                        + (" ..." if len(self) > 10 else ""))

    @property
    def season(self) -> int | None:
        return season_length(self.freq)

    def split(self, horizon: int) -> tuple[Panel, Panel]:
        """``(history, held_out)``: each series without its last ``horizon`` rows, and those
        rows (DataError naming a series with no more than ``horizon`` rows)."""
        for s in self.series:
            if len(s) <= horizon:
                raise DataError(f"series {s.id!r}: {len(s)} row(s), too short to hold out the last "
                                f"{horizon} (horizon) and keep any history")
        head = tuple(s.head(len(s) - horizon) for s in self.series)
        tail = tuple(Series(s.id, s.index[-horizon:], s.y[-horizon:], s.covariates[-horizon:])
                     for s in self.series)
        return Panel(head, self.covariate_names, self.freq), Panel(tail, self.covariate_names, self.freq)

    def future_index(self, series: Series, steps: int) -> np.ndarray:
        """The ``steps`` dates after ``series``' last, at the panel's frequency."""
        return continue_index(series.index, steps)

    @classmethod
    def from_columns(cls, ids: Sequence[Any], dates: Any, y: Any,
                     covariates: dict[str, Any] | None = None, *, what: str = "the panel") -> Panel:
        """A panel from long-format columns of equal length: series ids, dates (datetime64 or
        ISO text), values and named covariate columns, checked by the module's rules."""
        cov = dict(covariates or {})
        n = len(ids)
        try:
            d = np.asarray(dates)
            if d.dtype.kind != "M":
                d = np.array([str(v).strip() for v in d], dtype="datetime64")
        except ValueError as e:
            raise DataError(f"{what}: the date column holds a value that is not a date ({e})") from None
        yv = np.asarray(y, dtype=np.float64)
        cols = {k: np.asarray(v, dtype=np.float64) for k, v in cov.items()}
        for name, col in [("ds", d), ("y", yv), *cols.items()]:
            if len(col) != n:
                raise DataError(f"{what}: column {name!r} has {len(col)} value(s), the id column {n}")
        if n == 0:
            raise DataError(f"{what}: no rows")
        key = np.array([str(v) for v in ids], dtype=object)
        order: dict[str, list[int]] = {}
        for i, k in enumerate(key):
            order.setdefault(k, []).append(i)
        out: list[Series] = []
        for sid, rows in order.items():
            r = np.array(rows)
            r = r[np.argsort(d[r], kind="stable")]
            idx = d[r]
            same = np.flatnonzero(idx[1:] == idx[:-1])
            if same.size:
                dup = idx[same[0]]
                raise DataError(f"series {sid!r}: date {_fmt(dup)} appears {int((idx == dup).sum())} times; "
                                f"a panel has one row per series and date")
            vals = yv[r]
            c = np.stack([cols[k][r] for k in cols], axis=1) if cols else np.zeros((len(r), 0))
            for name, v in [("y", vals), *((k, c[:, j]) for j, k in enumerate(cols))]:
                bad = np.flatnonzero(~np.isfinite(v))
                if bad.size:
                    raise DataError(f"series {sid!r}: no {name} value at {_fmt(idx[bad[0]])} ({bad.size} "
                                    f"such row(s)); a panel needs every value (fill or drop them first)")
            out.append(Series(sid, idx, vals, c))
        return cls(tuple(out), tuple(cols), _common_frequency(out))


def _first_gap(idx: np.ndarray) -> tuple[Any, Any, str]:
    """The first step of ``idx`` that differs from its most common one: (before, after, step)."""
    month_starts = idx.astype("datetime64[M]").astype("datetime64[D]")
    if idx.dtype == np.dtype("datetime64[D]") and np.all(month_starts == idx):
        steps = np.diff(idx.astype("datetime64[M]").astype(np.int64))
        unit = "month(s)"
    else:
        steps = np.diff(idx.view(np.int64))
        unit = f"{np.datetime_data(idx.dtype)[0]} tick(s)"
    vals, counts = np.unique(steps, return_counts=True)
    common = vals[np.argmax(counts)]
    k = int(np.flatnonzero(steps != common)[0]) if (steps != common).any() else 0
    return idx[k], idx[k + 1], f"{int(common)} {unit}"


def _common_frequency(series: list[Series]) -> Frequency | None:
    found: tuple[str, Frequency] | None = None
    for s in series:
        if len(s) < 3:
            continue
        f = infer_frequency(s.index)
        if f is None:
            a, b, step = _first_gap(s.index)
            raise DataError(f"series {s.id!r}: its dates are not evenly spaced: after {_fmt(a)} comes "
                            f"{_fmt(b)}, where the usual step is {step} (a missing or an extra date); "
                            f"a panel needs every date of its frequency")
        if found is None:
            found = (s.id, f)
        elif found[1] != f:
            raise DataError(f"series {s.id!r} has frequency {f.name}, series {found[0]!r} {found[1].name}; "
                            f"a panel's series share one frequency")
    return None if found is None else found[1]


def read_panel(path: str | os.PathLike[str], *, id_col: str = "unique_id", date_col: str = "ds",
               target: str = "y", covariates: Sequence[str] | None = None) -> Panel:
    """The long-format CSV at ``path`` as a :class:`Panel`: columns ``id_col``, ``date_col``,
    ``target`` and the ``covariates`` (default: every other column)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file")
    with open(p, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise DataError(f"{p}: empty file")
    header = [h.strip() for h in rows[0]]
    need = [id_col, date_col, target]
    missing = [c for c in need if c not in header]
    if missing:
        raise DataError(f"{p}: no column(s) {', '.join(map(repr, missing))}; a panel file has columns "
                        f"{id_col}, {date_col}, {target} (long format), this one {header}")
    covs = [h for h in header if h not in need] if covariates is None else list(covariates)
    for c in covs:
        if c not in header:
            raise DataError(f"{p}: no covariate column {c!r}; the columns are {header}")
    body = rows[1:]
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise DataError(f"{p}: line {i + 2} has {len(r)} field(s), the header {len(header)}")
    col = {h: [r[j] for r in body] for j, h in enumerate(header)}

    def num(name: str) -> np.ndarray:
        out = np.empty(len(body))
        for i, v in enumerate(col[name]):
            try:
                out[i] = float(v) if v.strip() else np.nan
            except ValueError:
                raise DataError(f"{p}: line {i + 2}, column {name!r}: {v!r} is not a number") from None
        return out

    return Panel.from_columns(col[id_col], col[date_col], num(target), {c: num(c) for c in covs}, what=str(p))


def panel_from_frame(frame: Any, *, id_col: str = "unique_id", date_col: str = "ds", target: str = "y",
                     covariates: Sequence[str] | None = None) -> Panel:
    """A :class:`Panel` from a long-format pandas DataFrame (any object with ``columns`` and
    ``frame[name].to_numpy()``): columns as :func:`read_panel` takes them."""
    if not hasattr(frame, "columns") or not hasattr(frame, "__getitem__"):
        raise DataError(f"panel_from_frame: expected a long-format data frame (an object with columns, "
                        f"as pandas' DataFrame), got {type(frame).__name__}")
    names = [str(c) for c in frame.columns]
    for c in (id_col, date_col, target, *(covariates or ())):
        if c not in names:
            raise DataError(f"the data frame has no column {c!r}; its columns are {names}")
    covs = ([c for c in names if c not in (id_col, date_col, target)] if covariates is None
            else list(covariates))
    d = frame[date_col].to_numpy()
    if d.dtype.kind == "M" and np.all(d.astype("datetime64[D]") == d):
        d = d.astype("datetime64[D]")
    return Panel.from_columns(list(frame[id_col].to_numpy()), d, frame[target].to_numpy(),
                              {c: frame[c].to_numpy() for c in covs}, what="the data frame")


__all__ = ["Panel", "Series", "calendar_features", "panel_from_frame", "read_panel", "season_length",
           "season_position"]
