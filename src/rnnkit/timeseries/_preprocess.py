"""Preprocessing chosen by stated rules: whether a forecaster reads the logarithm of the
values, their seasonal differences and their first differences.

The transforms (:func:`transform_rows`), in this order, on the rows ``v`` of each column::

    u[t] = log v[t]                         with ``log`` (every value must be > 0)
    g[t] = u[t] - u[t - m]                  with a seasonal lag ``m`` (``seasonal``), else u[t]
    d[t] = g[t] - g[t - 1]                  with ``difference``, else g[t]

so ``m + (1 if difference)`` rows are used up; :class:`~rnnkit.timeseries.ForecastSpec`
stores the three choices and inverts them for every caller.

**Log rule** (:func:`amplitude_slope`, :func:`choose_log`): with a season ``m`` and at least
:data:`MIN_SEASONS` complete seasons of training values, cut the values into consecutive
seasons (from the first row); for each, ``level`` = its mean and ``amplitude`` = the standard
deviation of its residuals from a least-squares line (the trend within the season removed).
The slope ``b`` of the least-squares line of ``log amplitude`` on ``log level`` is 1 for a
multiplicative series (the swing grows in proportion to the level) and 0 for an additive one.
The forecaster reads logarithms when every value is > 0, ``b > 0.5`` (nearer 1 than 0) and the
levels span a factor of at least :data:`LEVEL_SPAN` (max / min; with less the slope says
nothing). Without a season the log is not chosen.

**Seasonal-differencing rule** (:func:`seasonal_strength`): the seasonal strength of the
(logged, when chosen) values by classical decomposition (Wang, Smith & Hyndman, 2006)::

    T   = the centred moving average of m rows (2 x m for an even m)
    D   = u - T                              on the rows where T is defined
    S   = the mean of D at each phase t mod m, less the mean of those means
    R   = D - S
    F_S = max(0, 1 - var(R) / var(D))

The forecaster reads seasonal differences at lag ``m`` when ``F_S > 0.64`` (the threshold of
Hyndman & Athanasopoulos' ``nsdiffs`` rule), with at least :data:`MIN_SEASONS` seasons.

**First differences** by the KPSS rule below, on the (logged, seasonally differenced) values.
:func:`choose_preprocess` applies the three rules in that order and says why.

The KPSS test of level stationarity (Kwiatkowski, Phillips, Schmidt & Shin, 1992), on the
training values ``y`` (n of them)::

    e_t   = y_t - mean(y)                     residuals of the level
    S_t   = e_1 + ... + e_t                   partial sums
    s^2   = (sum e_t^2 + 2 sum_{l=1..L} (1 - l / (L + 1)) sum_{t>l} e_t e_{t-l}) / n
    KPSS  = sum S_t^2 / (n^2 s^2)
    L     = ceil(12 (n / 100)^(1/4)), at most n - 1     (Schwert's rule; statsmodels' "legacy")

Level stationarity is rejected at 5% when ``KPSS > 0.463`` (the asymptotic critical value of
the level test). Rule (:func:`choose_difference`): the forecaster reads first differences when
the training values reject level stationarity and their first differences do not; otherwise it
reads the values themselves. The choice and its reason (both statistics) are printed by
``rnnkit train --preprocess auto`` and stored with the model (``ForecastSpec.difference``,
``log`` and ``seasonal`` likewise, the reason in its ``extra``), so ``rnnkit predict``, the
model server and Python apply it alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rnnkit.timeseries._csv import DataError

#: the 5% critical value of the KPSS level-stationarity test
KPSS_CRITICAL_5 = 0.463
#: fewest values the test is run on
MIN_ROWS = 8
#: fewest complete seasons the log and seasonal-differencing rules look at
MIN_SEASONS = 4
#: the slope of log amplitude on log level above which the log is taken
SLOPE_LOG = 0.5
#: the least ratio of the largest to the smallest seasonal level for the log rule
LEVEL_SPAN = 1.5
#: the seasonal strength above which seasonal differences are taken
STRENGTH_SEASONAL = 0.64


def transform_rows(values: np.ndarray, *, log: bool = False, seasonal: int = 0,
                   difference: bool = False, names: tuple[str, ...] | list[str] = ("the series",),
                   what: str = "the data") -> np.ndarray:
    """The transforms of the module docstring along axis -2 of ``values`` (..., rows, F), in
    float64: ``rows - seasonal - (1 if difference)`` rows come out. With ``log`` a value <= 0
    is a DataError naming ``what``, the column (``names``) and the rule."""
    v = np.asarray(values, dtype=np.float64)
    if log:
        bad = ~(v > 0) & ~np.isnan(v)
        if bad.any():
            rows = v.reshape(-1, v.shape[-1])
            r, col = (int(i) for i in np.argwhere(bad.reshape(rows.shape))[0])
            raise DataError(f"{what}: column {names[col]!r} holds {float(rows[r, col]):.6g} at row "
                            f"{r % v.shape[-2]}; the log transform needs every value > 0")
        v = np.log(v)
    if seasonal:
        v = v[..., seasonal:, :] - v[..., :-seasonal, :]
    if difference:
        v = np.diff(v, axis=-2)
    return v


def amplitude_slope(values: np.ndarray, season: int) -> tuple[float, float] | None:
    """``(b, span)`` of the log rule: the slope of log amplitude on log level over the complete
    seasons, and the ratio of the largest to the smallest level; None with fewer than
    :data:`MIN_SEASONS` seasons, a value <= 0, or a season of constant residuals."""
    y = np.asarray(values, dtype=np.float64).ravel()
    k = len(y) // season
    if season < 2 or k < MIN_SEASONS or not (y > 0).all():
        return None
    blocks = y[:k * season].reshape(k, season)
    t = np.arange(season, dtype=np.float64) - (season - 1) / 2
    level = blocks.mean(axis=1)
    slope = (blocks - level[:, None]) @ t / float(t @ t)
    resid = blocks - level[:, None] - slope[:, None] * t
    amp = resid.std(axis=1)
    if not (amp > 0).all():
        return None
    x, z = np.log(level), np.log(amp)
    xc = x - x.mean()
    den = float(xc @ xc)
    if den == 0:
        return None
    return float(xc @ (z - z.mean()) / den), float(level.max() / level.min())


def seasonal_strength(values: np.ndarray, season: int) -> float | None:
    """``F_S`` of the module docstring; None for a season < 2, fewer than
    :data:`MIN_SEASONS` seasons, or a detrended series without variance."""
    y = np.asarray(values, dtype=np.float64).ravel()
    m, n = int(season), len(y)
    if m < 2 or n < MIN_SEASONS * m:
        return None
    if m % 2:
        w = np.full(m, 1.0 / m)
    else:
        w = np.r_[0.5, np.ones(m - 1), 0.5] / m
    trend = np.convolve(y, w, mode="valid")
    off = (len(w) - 1) // 2
    d = y[off:off + len(trend)] - trend
    phase = (np.arange(len(d)) + off) % m
    means = np.array([d[phase == p].mean() for p in range(m)])
    s = (means - means.mean())[phase]
    vd = float(np.var(d))
    if not vd > 0:
        return None
    return max(0.0, 1.0 - float(np.var(d - s)) / vd)


def kpss_lags(n: int) -> int:
    """``ceil(12 (n / 100)^(1/4))``, at most ``n - 1``."""
    return min(n - 1, int(math.ceil(12.0 * (n / 100.0) ** 0.25)))


def kpss(values: np.ndarray, lags: int | None = None, *, name: str = "the series") -> float:
    """The KPSS level-stationarity statistic of the module docstring (``lags``: L, default
    :func:`kpss_lags`). DataError for fewer than :data:`MIN_ROWS` values or a constant series."""
    y = np.asarray(values, dtype=np.float64).ravel()
    n = y.shape[0]
    if n < MIN_ROWS:
        raise DataError(f"{name}: the KPSS test needs at least {MIN_ROWS} values, got {n}")
    if not np.isfinite(y).all():
        raise DataError(f"{name}: the KPSS test needs finite values")
    e = y - y.mean()
    lag = kpss_lags(n) if lags is None else int(lags)
    s2 = float(np.dot(e, e))
    for k in range(1, lag + 1):
        s2 += 2.0 * (1.0 - k / (lag + 1.0)) * float(np.dot(e[k:], e[:-k]))
    s2 /= n
    if not s2 > 0:
        raise DataError(f"{name}: the KPSS test is undefined for a constant series")
    s = np.cumsum(e)
    return float(np.dot(s, s) / (n * n * s2))


@dataclass(frozen=True)
class Choice:
    """Whether to difference, and why (the statistics behind the rule); from
    :func:`choose_preprocess` also whether to take logs and the seasonal lag (0: none)."""

    difference: bool
    reason: str
    kpss_level: float
    kpss_diff: float | None
    log: bool = False
    seasonal: int = 0

    def describe(self) -> str:
        """E.g. ``"logs, seasonal differences (lag 12), first differences"``, or ``"the values"``."""
        parts = (["logs"] if self.log else []) + ([f"seasonal differences (lag {self.seasonal})"]
                                                  if self.seasonal else []) + (
            ["first differences"] if self.difference else [])
        return ", ".join(parts) or "the values"


def choose_difference(values: np.ndarray, *, name: str = "the series") -> Choice:
    """The rule of the module docstring on the training ``values``."""
    y = np.asarray(values, dtype=np.float64).ravel()
    lvl = kpss(y, name=name)
    if lvl <= KPSS_CRITICAL_5:
        return Choice(False, f"KPSS {lvl:.3f} <= {KPSS_CRITICAL_5}: the levels look stationary, "
                             f"the network reads the values", lvl, None)
    dif = kpss(np.diff(y), name=name)
    if dif <= KPSS_CRITICAL_5:
        return Choice(True, f"KPSS {lvl:.3f} > {KPSS_CRITICAL_5} on the levels (not stationary) and "
                            f"{dif:.3f} <= {KPSS_CRITICAL_5} on the first differences: the network "
                            f"reads first differences", lvl, dif)
    return Choice(False, f"KPSS {lvl:.3f} on the levels and {dif:.3f} on the first differences, both > "
                         f"{KPSS_CRITICAL_5}: differencing does not make the series stationary, the "
                         f"network reads the values", lvl, dif)


def choose_log(values: np.ndarray, season: int | None) -> tuple[bool, str]:
    """The log rule of the module docstring on the training ``values``: (take logs, why)."""
    y = np.asarray(values, dtype=np.float64).ravel()
    if not season or season < 2:
        return False, "no log: the amplitude rule needs a season"
    if not (y > 0).all():
        return False, "no log: the series has values <= 0"
    fit = amplitude_slope(y, season)
    if fit is None:
        return False, f"no log: fewer than {MIN_SEASONS} complete seasons of {season} to compare"
    b, span = fit
    if b > SLOPE_LOG and span >= LEVEL_SPAN:
        return True, (f"log: the seasonal amplitude grows with the level (slope {b:.2f} > {SLOPE_LOG} of "
                      f"log amplitude on log level, levels spanning x{span:.2f} >= x{LEVEL_SPAN})")
    why = (f"slope {b:.2f} <= {SLOPE_LOG}" if b <= SLOPE_LOG
           else f"levels spanning only x{span:.2f} < x{LEVEL_SPAN}")
    return False, f"no log: the seasonal amplitude does not grow with the level ({why})"


def choose_preprocess(values: np.ndarray, season: int | None = None, *, name: str = "the series") -> Choice:
    """The three rules of the module docstring in order (log, seasonal differences, first
    differences by KPSS) on the training ``values``; the reason names every statistic."""
    y = np.asarray(values, dtype=np.float64).ravel()
    log, why_log = choose_log(y, season)
    u = np.log(y) if log else y
    seasonal, why_s = 0, "no seasonal differences: no season"
    if season and season >= 2:
        fs = seasonal_strength(u, season)
        if fs is None:
            why_s = f"no seasonal differences: fewer than {MIN_SEASONS} seasons of {season}"
        elif fs > STRENGTH_SEASONAL:
            seasonal, why_s = season, (f"seasonal differences at lag {season}: seasonal strength {fs:.3f} > "
                                       f"{STRENGTH_SEASONAL}")
        else:
            why_s = f"no seasonal differences: seasonal strength {fs:.3f} <= {STRENGTH_SEASONAL}"
    g = u[seasonal:] - u[:-seasonal] if seasonal else u
    c = choose_difference(g, name=name)
    return Choice(c.difference, f"{why_log}; {why_s}; {c.reason}", c.kpss_level, c.kpss_diff, log, seasonal)


__all__ = ["KPSS_CRITICAL_5", "LEVEL_SPAN", "MIN_ROWS", "MIN_SEASONS", "SLOPE_LOG", "STRENGTH_SEASONAL",
           "Choice",
           "amplitude_slope", "choose_difference", "choose_log", "choose_preprocess", "kpss", "kpss_lags",
           "seasonal_strength", "transform_rows"]
