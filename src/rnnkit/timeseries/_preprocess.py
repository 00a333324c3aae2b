"""Preprocessing chosen by a stated rule: whether a forecaster reads first differences.

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
the reason in its ``extra``), so ``rnnkit predict``, the model server and Python apply it alike.
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
    """Whether to difference, and why (the statistics behind the rule)."""

    difference: bool
    reason: str
    kpss_level: float
    kpss_diff: float | None


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


__all__ = ["KPSS_CRITICAL_5", "MIN_ROWS", "Choice", "choose_difference", "kpss", "kpss_lags"]
