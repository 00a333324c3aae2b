"""Rolling-origin backtests: every forecaster judged on the last ``windows`` stretches of a
series, each forecast made only from the values before its origin.

Origins (0-based rows; ``n`` rows, ``K`` windows, horizon ``H``, ``step`` rows between
origins, ``H`` by default)::

    origin_k = n - H - (K - 1 - k) * step          k = 0 .. K - 1

From origin ``o`` a forecaster sees ``y[:o]`` and returns ``H`` values, the forecasts of
``y[o : o + H]`` (horizon steps 1 .. H). A forecaster is any callable
``(history, horizon) -> array (horizon,)`` (:data:`Method`); the baselines below are such
callables, and so is a trained network run recursively.

Metrics, for each forecaster and each horizon step ``h`` (averaged over the K windows), and
over all steps and windows (``overall``):

    MAE    mean |yhat - y|
    RMSE   sqrt(mean (yhat - y)^2)
    sMAPE  mean 200 |yhat - y| / (|yhat| + |y|)   (in percent; a term with yhat = y = 0 is 0)
    MASE   mean |yhat - y| / scale_k,  scale_k = mean_{t=m..o_k-1} |y[t] - y[t-m]|

``scale_k`` is the in-sample MAE of the seasonal-naive forecast with season ``m`` (``m = 1``
without a season: the naive forecast) over the history of window k (Hyndman & Koehler, 2006).
A history whose scale is 0 (constant at lag ``m``) makes MASE undefined: a DataError.

Baselines (all refitted from each window's history):

naive
    ``y[o - 1]`` at every step (persistence).
mean
    ``mean(y[:o])``.
drift
    ``y[o - 1] + h * (y[o - 1] - y[0]) / (o - 1)``: the line through the first and last values.
seasonal naive (season ``m``)
    ``y[o - m + (h - 1) mod m]``: the same phase of the last season seen.
AR(p)
    one-step least squares (``c + sum a_k y[t - k]``) applied recursively; ``p`` in 1 .. max_p is
    chosen on validation: each order is fitted on the history less its last ``H`` values and
    forecasts those; the smallest MAE wins, and that order is refitted on the whole history.
ETS (exponential smoothing; with statsmodels installed, ``pip install "rnnkit[forecast]"``)
    statsmodels' ``ExponentialSmoothing`` (Holt-Winters, parameters and initial states by
    maximum likelihood, ``initialization_method="estimated"``) of the configuration with the
    smallest AICc among: no trend / additive trend / additive damped trend, each without and
    (with a season ``m`` of at most :data:`ETS_MAX_SEASON` and at least ``2 m`` rows of history)
    with an additive season of ``m`` (the AICc selection of Hyndman et al.'s automatic ETS;
    ties: the simpler, earlier in that order). The configuration is chosen afresh on each
    history, as AR(p)'s order is. A history longer than :data:`ETS_MAX_ROWS` rows is fitted on
    its last :data:`ETS_MAX_ROWS` rows (statsmodels' time and memory per fit grow with the
    length; the older rows barely move a smoothing model's forecast). Without statsmodels it is
    left out (:func:`baselines` says why: :data:`ETS_MISSING`).

Season detection (:func:`detect_season`): the calendar's cycle when the index is dated
(:func:`~rnnkit.timeseries.season_of`: hourly 24, daily 7, weekly 52, monthly 12, quarterly 4);
otherwise the lag ``k`` in ``2 .. n // 3`` with the highest sample autocorrelation of the
first differences among those that are a local maximum of it and exceed ``1.96 / sqrt(n)``
(the 5% band of white noise); None when no lag does.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnkit._numbers import check_int
from rnnkit.timeseries._baselines import BLOCK, ARModel, as_series, pair_difference
from rnnkit.timeseries._csv import DataError

#: a forecaster: (history (o,), horizon) -> forecasts of the next ``horizon`` values
Method = Callable[[np.ndarray, int], np.ndarray]

METRICS = ("mase", "smape", "rmse", "mae")


# -- metrics ---------------------------------------------------------------------------------
def smape(pred: np.ndarray, actual: np.ndarray) -> float:
    """Symmetric MAPE in percent: ``mean(200 |p - a| / (|p| + |a|))``, a term with
    ``p = a = 0`` counting 0."""
    d = pair_difference(pred, actual, "smape")
    a = as_series(np.ravel(np.asarray(actual, dtype=np.float64)), "smape")
    p = a + d
    den = np.abs(p) + np.abs(a)
    terms = np.where(den > 0, 200.0 * np.abs(p - a) / np.where(den > 0, den, 1.0), 0.0)
    return float(np.mean(terms))


def mase_scale(history: np.ndarray, season: int | None = None, *, name: str = "the series") -> float:
    """``mean |y[t] - y[t - m]|`` over the history (``m = season or 1``): the in-sample MAE of
    the seasonal-naive forecast, MASE's denominator. DataError when the history has no two
    values ``m`` apart or the scale is 0."""
    y = as_series(history, "mase_scale")
    m = check_int(season, "season", "mase_scale", lo=1, none_ok=True, error=DataError) or 1
    if y.shape[0] <= m:
        raise DataError(f"{name}: MASE scales by the in-sample seasonal-naive error at lag {m}, which "
                        f"needs more than {m} rows of history; got {y.shape[0]}")
    total = 0.0                     # block by block: no temporaries the length of the history
    for a in range(m, y.shape[0], BLOCK):
        b = min(a + BLOCK, y.shape[0])
        total += float(np.sum(np.abs(y[a:b] - y[a - m:b - m])))
    s = total / (y.shape[0] - m)
    if not s > 0:
        raise DataError(f"{name}: MASE is undefined: the history is constant at lag {m} (its "
                        f"seasonal-naive in-sample error is 0)")
    return s


def mase(pred: np.ndarray, actual: np.ndarray, history: np.ndarray, season: int | None = None) -> float:
    """``mean |pred - actual| / mase_scale(history, season)``."""
    d = pair_difference(pred, actual, "mase")
    return float(np.mean(np.abs(d)) / mase_scale(history, season))


# -- baselines as multi-step forecasters -----------------------------------------------------
def naive(history: np.ndarray, horizon: int) -> np.ndarray:
    """The last value, ``horizon`` times."""
    return np.full(horizon, float(history[-1]))


def mean(history: np.ndarray, horizon: int) -> np.ndarray:
    """The history's mean, ``horizon`` times."""
    return np.full(horizon, float(np.mean(history)))


def drift(history: np.ndarray, horizon: int) -> np.ndarray:
    """``y[-1] + h * (y[-1] - y[0]) / (n - 1)``, h = 1 .. horizon (the naive forecast for one value)."""
    y = np.asarray(history, dtype=np.float64)
    slope = (y[-1] - y[0]) / (len(y) - 1) if len(y) > 1 else 0.0
    return y[-1] + slope * np.arange(1, horizon + 1)


def seasonal_naive(season: int) -> Method:
    """``y[n - m + (h - 1) mod m]``: the same phase of the last season seen."""
    if season < 1:
        raise DataError(f"season must be >= 1, got {season}")

    def forecast(history: np.ndarray, horizon: int) -> np.ndarray:
        y = np.asarray(history, dtype=np.float64)
        if len(y) < season:
            raise DataError(f"the seasonal-naive forecast with season {season} needs at least {season} "
                            f"rows of history, got {len(y)}")
        return y[len(y) - season + np.arange(horizon) % season]

    return forecast


def _ar_path(y: np.ndarray, model: ARModel, horizon: int) -> np.ndarray:
    buf = np.concatenate([y, np.zeros(horizon)])
    n = len(y)
    for h in range(horizon):
        buf[n + h] = float(model.predict(buf, np.array([n + h]))[0])
    return buf[n:]


def ar_order(history: np.ndarray, horizon: int, max_p: int) -> int:
    """The order in ``1 .. max_p`` whose recursive forecast of the history's last ``horizon``
    values, fitted on the values before them, has the smallest MAE (ties: the smaller p)."""
    y = np.asarray(history, dtype=np.float64)
    fit, held = y[:-horizon], y[-horizon:]
    best, best_err = 1, np.inf
    for p in range(1, max_p + 1):
        if len(fit) < 2 * p + 2:
            break
        m = ARModel.fit(fit, np.arange(p, len(fit)), p, 1)
        err = float(np.mean(np.abs(_ar_path(fit, m, horizon) - held)))
        if err < best_err - 1e-12:
            best, best_err = p, err
    return best


def autoregressive(max_p: int) -> Method:
    """AR(p) by least squares, ``p <= max_p`` chosen on validation (:func:`ar_order`), forecast
    recursively."""

    def forecast(history: np.ndarray, horizon: int) -> np.ndarray:
        y = np.asarray(history, dtype=np.float64)
        p = ar_order(y, horizon, max_p) if len(y) > horizon + 4 else 1
        p = min(p, max(1, (len(y) - 2) // 2))
        return _ar_path(y, ARModel.fit(y, np.arange(p, len(y)), p, 1), horizon)

    return forecast


#: the name of the exponential-smoothing baseline
ETS_NAME = "ets"
#: why the ETS baseline is missing when statsmodels is not installed
ETS_MISSING = ('the ETS (exponential smoothing) baseline is left out: it needs statsmodels '
               '(pip install "rnnkit[forecast]")')


def have_statsmodels() -> bool:
    """Whether statsmodels (the optional ``forecast`` extra) is installed."""
    return importlib.util.find_spec("statsmodels") is not None


@dataclass(frozen=True)
class ETSConfig:
    """One exponential-smoothing configuration: ``trend`` None or ``"add"``, ``damped``
    (additive trend only), ``season`` the additive season's length in rows (None: no season)."""

    trend: str | None = None
    damped: bool = False
    season: int | None = None

    def describe(self) -> str:
        """E.g. ``"additive damped trend, additive season of 12"``."""
        t = ("no trend" if self.trend is None
             else "additive damped trend" if self.damped else "additive trend")
        return t + (f", additive season of {self.season}" if self.season else ", no season")

    def to_dict(self) -> dict[str, Any]:
        return {"trend": self.trend, "damped": self.damped, "season": self.season}


#: the longest season the ETS baseline models (R's ``forecast::ets`` ignores longer ones: one
#: initial state per phase makes the likelihood search slow and poorly determined; statsmodels
#: takes 4-13 s a fit with a weekly season of 52)
ETS_MAX_SEASON = 24


def ets_candidates(season: int | None, rows: int) -> list[ETSConfig]:
    """The configurations of the module docstring, simplest first: the trends (none, additive,
    additive damped) without a season, then with the additive season when ``season`` is given,
    ``1 < season <= ETS_MAX_SEASON`` and ``rows >= 2 * season``."""
    trends = [ETSConfig(), ETSConfig("add"), ETSConfig("add", True)]
    seasonal = season is not None and 1 < season <= ETS_MAX_SEASON and rows >= 2 * season
    seasons: list[int | None] = [None, season] if seasonal else [None]
    return [ETSConfig(t.trend, t.damped, m) for m in seasons for t in trends]


def ets_fit(history: np.ndarray, config: ETSConfig) -> Any:
    """statsmodels' fitted ``ExponentialSmoothing`` of ``history`` in ``config`` (the call of
    the module docstring; its convergence warnings are not shown: a baseline is judged by its
    forecasts). DataError naming the extra when statsmodels is not installed."""
    if not have_statsmodels():
        raise DataError(ETS_MISSING)
    # statsmodels is an optional extra and takes about a second to import: imported on first use
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    y = as_series(history, "ets_fit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ExponentialSmoothing(y, trend=config.trend, damped_trend=config.damped,
                                    seasonal="add" if config.season else None,
                                    seasonal_periods=config.season,
                                    initialization_method="estimated").fit()


def ets_select(history: np.ndarray, season: int | None) -> tuple[ETSConfig, Any]:
    """The candidate (:func:`ets_candidates`) with the smallest finite AICc on ``history`` and
    its fit (ties: the earlier candidate; no finite AICc: no trend, no season)."""
    y = as_series(history, "ets_select")
    if len(y) < 4:
        raise DataError(f"the ETS baseline needs at least 4 rows of history, got {len(y)}")
    best: tuple[ETSConfig, Any] | None = None
    best_aicc = np.inf
    for cfg in ets_candidates(season, len(y)):
        fit = ets_fit(y, cfg)
        aicc = float(fit.aicc)
        if np.isfinite(aicc) and aicc < best_aicc:
            best, best_aicc = (cfg, fit), aicc
    return best if best is not None else (ETSConfig(), ets_fit(y, ETSConfig()))


#: the most rows of history the ETS baseline is fitted on: a longer history is fitted on its
#: last ETS_MAX_ROWS rows. statsmodels' ExponentialSmoothing holds arrays of the history's length
#: (measured with tracemalloc, a fit's peak grows by about 76 bytes, 9.5 float64, per row of
#: history from 5,000 to 10,000 rows: 760 MB per fit of a 10-million-row history) and its time
#: per fit grows with the length; 5000 rows are 714 weeks of daily data, 416 years of monthly,
#: 208 days of hourly, and more than every series of benchmarks/bench_forecast.py (cut to 2000)
ETS_MAX_ROWS = 5000


class ETS:
    """The ETS baseline as a :data:`Method`: on each history — its last :data:`ETS_MAX_ROWS`
    rows when it is longer — the configuration of smallest AICc (:func:`ets_select`), refitted,
    forecasts ``horizon`` values. ``chosen`` lists the configuration of every call and ``rows``
    the rows it was fitted on, in order (what ``rnnkit train`` prints)."""

    def __init__(self, season: int | None) -> None:
        self.season = check_int(season, "season", "ETS", lo=0, none_ok=True, error=DataError) or None
        self.chosen: list[ETSConfig] = []
        self.rows: list[int] = []

    def __call__(self, history: np.ndarray, horizon: int) -> np.ndarray:
        y = as_series(history, "ETS")
        y = y[max(0, len(y) - ETS_MAX_ROWS):]
        cfg, fit = ets_select(y, self.season)
        self.chosen.append(cfg)
        self.rows.append(len(y))
        return np.asarray(fit.forecast(horizon), dtype=np.float64)


def baselines(season: int | None, max_p: int = 12) -> dict[str, Method]:
    """The baselines every forecaster is ranked against: naive, mean, drift, AR(p), with a
    season the seasonal naive forecast and, with statsmodels installed, ETS
    (:func:`have_statsmodels`; without it the ETS baseline is left out, :data:`ETS_MISSING`)."""
    out: dict[str, Method] = {"naive": naive, "mean": mean, "drift": drift, "ar": autoregressive(max_p)}
    if season:
        out["seasonal_naive"] = seasonal_naive(season)
    if have_statsmodels():
        out[ETS_NAME] = ETS(season)
    return out


def detect_season(values: np.ndarray, calendar: int | None = None) -> int | None:
    """The season in rows: ``calendar`` when given (the dates' cycle), else the ACF rule of the
    module docstring (None: no seasonal lag stands out)."""
    if calendar:
        return check_int(calendar, "calendar", "detect_season", lo=1, error=DataError)
    d = np.diff(as_series(values, "detect_season"))
    n = len(d)
    top = n // 3
    if top < 3:
        return None
    d = d - d.mean()
    den = float(np.dot(d, d))
    if den == 0:
        return None
    acf = np.array([float(np.dot(d[k:], d[:n - k])) / den for k in range(top + 2)])
    band = 1.96 / np.sqrt(n)
    best, best_v = None, band
    for k in range(2, top + 1):
        if acf[k] > best_v and acf[k] >= acf[k - 1] and acf[k] >= acf[k + 1]:
            best, best_v = k, float(acf[k])
    return best


# -- the backtest ----------------------------------------------------------------------------
def origins(n: int, horizon: int, windows: int, step: int | None = None) -> np.ndarray:
    """The K origins of the module docstring (ascending)."""
    s = horizon if step is None else step
    return n - horizon - (windows - 1 - np.arange(windows)) * s


@dataclass(frozen=True)
class Score:
    """One forecaster's errors: ``forecasts`` (K, H); per-step metrics (H,) and overall."""

    name: str
    forecasts: np.ndarray
    per_step: dict[str, np.ndarray]
    overall: dict[str, float]


@dataclass(frozen=True)
class Backtest:
    """The result of :func:`backtest`: ``actual`` (K, H), ``origins`` (K,), ``scores`` in the
    order the forecasters were given, and the season used for MASE."""

    origins: np.ndarray
    actual: np.ndarray
    season: int | None
    scores: list[Score] = field(default_factory=list)

    def ranking(self, metric: str = "mase") -> list[Score]:
        """The scores, best (smallest overall ``metric``) first; ties keep the given order."""
        return sorted(self.scores, key=lambda s: s.overall[metric])

    def score(self, name: str) -> Score:
        for s in self.scores:
            if s.name == name:
                return s
        raise KeyError(name)

    def table(self) -> list[tuple[str, float, float, float, float]]:
        """``(name, MASE, sMAPE, RMSE, MAE)`` overall, ranked by MASE."""
        return [(s.name, *(s.overall[m] for m in METRICS)) for s in self.ranking()]  # type: ignore[misc]

    def verdict(self, model: str) -> str:
        """One sentence from the MASE ranking: where ``model`` ranks, and when a baseline beats it,
        which (the best) and by how much."""
        ranked = self.ranking()
        names = [s.name for s in ranked]
        k = names.index(model)
        m = ranked[k].overall["mase"]
        if k == 0:
            second = ranked[1] if len(ranked) > 1 else None
            tail = (f"; the best baseline, {second.name}, has MASE {second.overall['mase']:.4g} "
                    f"({100 * (second.overall['mase'] - m) / second.overall['mase']:.1f}% worse)"
                    if second is not None else "")
            return f"the {model} ranks 1st of {len(ranked)} on the backtest (MASE {m:.4g}){tail}"
        best = ranked[0]
        b = best.overall["mase"]
        return (f"the {model} ranks {k + 1} of {len(ranked)} on the backtest (MASE {m:.4g}): the "
                f"{best.name} baseline beats it, MASE {b:.4g}, {100 * (m - b) / m:.1f}% lower")


def check_length(n: int, *, horizon: int, windows: int, season: int | None = None, step: int | None = None,
                 name: str = "the series", min_history: int = 2) -> np.ndarray:
    """The origins of a backtest of ``n`` rows, after checking the first has
    ``max(min_history, 2 * season, season + 1)`` rows of history (DataError naming the series
    and the rule otherwise)."""
    for what, v in (("horizon", horizon), ("windows", windows)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise DataError(f"{name}: {what} must be a whole number >= 1, got {v!r}")
    orig = origins(n, horizon, windows, step)
    need = max(min_history, 2 * season if season else 2, (season or 1) + 1)
    if orig[0] < need:
        raise DataError(
            f"{name}: too short for {windows} backtest window(s) of horizon {horizon}"
            + (f" every {step} rows" if step is not None else "")
            + f": the first origin is row {int(orig[0])}, but it needs at least {need} rows of history"
            + (f" (two seasons of {season})" if season and need == 2 * season else
               " (the forecaster's window and lags, and one row more)" if need == min_history else "")
            + f"; the series has {n} rows")
    return orig


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (``a`` itself stays writeable)."""
    v = a.view()
    v.flags.writeable = False
    return v


def backtest(values: np.ndarray, methods: dict[str, Method], *, horizon: int, windows: int,
             season: int | None = None, step: int | None = None, name: str = "the series",
             min_history: int = 2) -> Backtest:
    """Rolling-origin evaluation of every forecaster in ``methods`` (module docstring) over the
    last ``windows`` stretches of ``horizon`` values of ``values``. ``season`` sets MASE's lag
    (1 without). The first origin needs ``max(min_history, 2 * season, season + 1)`` rows of
    history, else a DataError naming the series and the rule. Each forecaster is given a
    read-only view of its history (not a copy: a long series is not duplicated per call)."""
    y = np.asarray(values, dtype=np.float64)
    if y.ndim != 1:
        raise DataError(f"{name}: expected one series (rows,), got shape {y.shape}")
    if not np.isfinite(y).all():
        bad = int(np.flatnonzero(~np.isfinite(y))[0])
        raise DataError(f"{name}: the series holds non-finite values (row {bad}); expected finite values")
    orig = check_length(len(y), horizon=horizon, windows=windows, season=season, step=step, name=name,
                        min_history=min_history)
    actual = np.stack([y[o:o + horizon] for o in orig])
    scales = np.array([mase_scale(y[:o], season, name=name) for o in orig])
    scores = []
    for mname, method in methods.items():
        fc = np.empty_like(actual)
        for k, o in enumerate(orig):
            f = np.asarray(method(_read_only(y[:o]), horizon), dtype=np.float64).ravel()
            if f.shape != (horizon,) or not np.isfinite(f).all():
                raise DataError(f"{name}: forecaster {mname!r} returned {f.shape[0]} value(s) with "
                                f"{int(np.sum(~np.isfinite(f)))} not finite from origin {int(o)}; "
                                f"expected {horizon} finite values")
            fc[k] = f
        err = fc - actual
        ae = np.abs(err)
        den = np.abs(fc) + np.abs(actual)
        sm = np.where(den > 0, 200.0 * ae / np.where(den > 0, den, 1.0), 0.0)
        sc = ae / scales[:, None]
        per = {"mase": sc.mean(axis=0), "smape": sm.mean(axis=0),
               "rmse": np.sqrt((err * err).mean(axis=0)), "mae": ae.mean(axis=0)}
        overall = {"mase": float(sc.mean()), "smape": float(sm.mean()),
                   "rmse": float(np.sqrt((err * err).mean())), "mae": float(ae.mean())}
        scores.append(Score(mname, fc, per, overall))
    return Backtest(orig, actual, season, scores)


__all__ = ["ETS", "ETS_MAX_ROWS", "ETS_MISSING", "ETS_NAME", "METRICS", "Backtest", "ETSConfig", "Method",
           "Score",
           "ar_order", "autoregressive", "backtest", "baselines",
           "check_length",
           "detect_season", "drift", "ets_candidates", "ets_fit", "ets_select", "have_statsmodels", "mase",
           "mase_scale", "mean", "naive", "origins", "seasonal_naive", "smape"]
