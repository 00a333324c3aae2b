"""The data side of a DeepAR-style forecaster (Salinas et al., 2020): what the network reads at
each timestep, the training windows, ancestral sampling and the forecast it gives.

The network (``rnnkit.io.DeepAR`` builds it: stacked LSTM/GRU layers and a dense head of the
likelihood's ``k`` raw outputs) reads at each step ``t`` of a series ``i``::

    [ y[t - l] / nu  for l in lags ]          the lagged target, scaled
    calendar(t)                               the place in the season (known future)
    (covariate(t) - mean) / std               user covariates (known future), standardised
    log(nu)                                   the series' scale (static)
    one_hot(i)                                the series' id (static; the LSTM's input weights
                                              of these columns are the id's embedding)

and outputs the distribution of ``y[t]`` (:mod:`rnnkit.timeseries._likelihood`). ``nu``, the
series' scale, is the mean absolute value of the ``context`` rows before the forecast (1 where
they are all 0), as DeepAR's mean scaler. Training windows are ``context + horizon`` rows long,
every position's log-likelihood counted (teacher forcing: the inputs hold the observed lags).
A forecast runs the context through the network, then, ``horizon`` times, draws each sample
path's next value from the distribution and feeds it back as the next step's lag (ancestral
sampling; a seeded generator gives the same paths every time).

Calibration (split conformal over rolling origins, on rows the network never trained on):
``rnnkit.io.DeepAR`` trains a calibration model without the last ``horizon + (K - 1) step``
rows of each series (``K`` windows, ``step`` = :func:`calibration_step`), forecasts with it each
window ``k`` (the ``horizon`` rows from origin ``len - horizon - (K - 1 - k) step``, as a
rolling-origin backtest) from the rows before it, and scores every point by
:func:`conformal_scores` (half-widths of the central ``level`` interval from the median:
scale-free). :func:`conformal_spread` takes the
finite-sample conformal quantile (the ``ceil((n + 1) level)``-th smallest of ``n`` scores, the
rule of conformalized quantile regression, Romano et al., 2019) of each horizon step's
``series x K`` scores where there are at least :func:`per_step_points` of them, of all the
scores pooled otherwise; the spec stores these factors as ``spread`` and :func:`sample_paths`
applies them to every forecast: ``median + c[h] (path - median)`` at step ``h``. The median, and
so the MASE of the median forecast, is unchanged; ``c > 1`` widens, ``c < 1`` narrows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit.timeseries._dates import DataError, format_index
from rnnkit.timeseries._likelihood import get_likelihood
from rnnkit.timeseries._panel import Panel, Series, calendar_features

#: metadata key of a DeepAR model file's settings
DEEPAR_KEY = "rnnkit.deepar"
DEEPAR_FORMAT = "rnnkit.deepar/1"


def labels(dates: np.ndarray) -> list[str]:
    """Dates as text: ``YYYY-MM-DD`` for days, ``YYYY-MM-DDTHH:MM:SS`` for finer ones."""
    d = np.asarray(dates)
    days = d.astype("datetime64[D]")
    return format_index(d, "date" if np.all(days == d) else "datetime")


def scale_of(context: np.ndarray) -> np.ndarray:
    """DeepAR's mean scaler: the mean absolute value along the last axis, 1 where it is 0."""
    nu = np.mean(np.abs(context), axis=-1)
    return np.where(nu > 0, nu, 1.0)


@dataclass(frozen=True)
class DeepARSpec:
    """What a DeepAR model needs besides its weights, stored as JSON with it (:data:`DEEPAR_KEY`):
    the horizon and context (rows), the likelihood's name, the lags (rows), the training
    series' ids (in the order of the one-hot columns), the covariates with the mean and standard
    deviation they are standardised with, the season and frequency name of the training panel,
    the network's description (``cell``, ``units``, ``layers``), the conformal factors
    ``spread``, one per horizon step, by which every forecast's paths are widened (> 1) or
    narrowed (< 1) about their median (``()``: uncalibrated), and how they were found
    (``calibration``: method, level, windows, step, points, per_step, coverage before)."""

    horizon: int
    context: int
    likelihood: str
    lags: tuple[int, ...]
    ids: tuple[str, ...]
    covariate_names: tuple[str, ...] = ()
    cov_mean: tuple[float, ...] = ()
    cov_std: tuple[float, ...] = ()
    season: int | None = None
    calendar_width: int = 0
    freq_name: str = ""
    network: dict[str, Any] = field(default_factory=dict)
    spread: tuple[float, ...] = ()
    calibration: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.horizon < 1 or self.context < 1 or not self.lags or min(self.lags) < 1:
            raise InvalidParameterError(f"DeepAR: horizon, context and lags must be >= 1, got horizon="
                                        f"{self.horizon}, context={self.context}, lags={self.lags}")
        if self.spread and (len(self.spread) != self.horizon
                            or not all(math.isfinite(v) and v > 0 for v in self.spread)):
            raise InvalidParameterError(f"DeepAR: spread (the conformal factors of the paths' spread about "
                                        f"their median) must be () or {self.horizon} finite numbers > 0 (one "
                                        f"per horizon step), got {self.spread!r}")
        get_likelihood(self.likelihood)

    @property
    def max_lag(self) -> int:
        return max(self.lags)

    @property
    def n_features(self) -> int:
        ids = len(self.ids) if len(self.ids) > 1 else 0
        return len(self.lags) + self.calendar_width + len(self.covariate_names) + 1 + ids

    @property
    def history_needed(self) -> int:
        """Rows of a series a forecast reads: the context and the lags before it."""
        return self.context + self.max_lag

    def to_json(self) -> str:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return json.dumps({"format": DEEPAR_FORMAT, **{k: list(v) if isinstance(v, tuple) else v
                                                       for k, v in d.items()}}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DeepARSpec:
        try:
            d = json.loads(text)
            if d.pop("format", None) != DEEPAR_FORMAT:
                raise ValueError("unknown format")
            for k in ("lags", "ids", "covariate_names", "cov_mean", "cov_std"):
                d[k] = tuple(d[k])
            sp = d.get("spread", ())
            # files written before per-step factors hold one number (1.0: uncalibrated)
            if isinstance(sp, (int, float)):
                d["spread"] = () if sp == 1.0 else (float(sp),) * int(d["horizon"])
            else:
                d["spread"] = tuple(float(v) for v in sp)
            return cls(**d)
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(f"the DeepAR settings stored with the model are damaged ({e})") from None

    # -- network input ----------------------------------------------------------------------
    def check_series(self, s: Series, why: str, *, training: bool = False, validation: int = 0) -> int:
        """The one-hot column of ``s`` (DataError for a series the model was not trained on, or
        one with fewer rows than ``why`` needs: the context and the largest lag, with
        ``training`` the horizon too, and ``validation`` rows more)."""
        if s.id not in self.ids:
            raise DataError(f"series {s.id!r} was not among the {len(self.ids)} series this model was "
                            f"trained on (its id is an input); it knows {', '.join(map(repr, self.ids[:8]))}"
                            + (" ..." if len(self.ids) > 8 else ""))
        rows = self.history_needed + (self.horizon if training else 0) + validation
        if len(s) < rows:
            raise DataError(f"series {s.id!r}: {len(s)} row(s), too short: {why} needs at least {rows} "
                            f"(context {self.context} + largest lag {self.max_lag}"
                            + (f" + horizon {self.horizon}" if training else "")
                            + (f" + {validation} held-out rows for validation and calibration)"
                               if validation else ")"))
        return self.ids.index(s.id)

    def inputs(self, y: np.ndarray, t0: int, steps: int, nu: np.ndarray, calendar: np.ndarray,
               covariates: np.ndarray, series: np.ndarray) -> np.ndarray:
        """Network input (B, steps, F) float32 for positions ``t0 .. t0 + steps - 1`` of the rows
        ``y`` (B, >= t0 + steps - 1) (lags read ``y[:, t - l]``, which must exist), with scales
        ``nu`` (B,), calendar features (B, >= t0 + steps, K), raw covariates (B, >= t0 +
        steps, C) and one-hot columns ``series`` (B,) int."""
        B = y.shape[0]
        t = np.arange(t0, t0 + steps)
        parts = [np.stack([y[:, t - lag] for lag in self.lags], axis=-1) / nu[:, None, None]]
        parts.append(calendar[:, t0:t0 + steps])
        if self.covariate_names:
            c = covariates[:, t0:t0 + steps]
            parts.append((c - np.asarray(self.cov_mean)) / np.asarray(self.cov_std))
        parts.append(np.broadcast_to(np.log(nu)[:, None, None], (B, steps, 1)))
        if len(self.ids) > 1:
            n = len(self.ids)
            parts.append(np.broadcast_to(np.eye(n)[series][:, None, :], (B, steps, n)))
        return np.concatenate(parts, axis=-1).astype(np.float32)


def default_lags(season: int | None) -> tuple[int, ...]:
    """DeepAR's lags for a season of ``m`` rows: every lag 1 .. m + 1 (the last season in full
    and the row before it) and 2 m (the same place a season earlier), as DeepAR feeds the
    lagged values around the season's multiples (GluonTS: 1 .. 7 and the seasons' multiples
    +- 1); ``(1,)`` without a season. Quarterly: 1 .. 5 and 8; monthly: 1 .. 13 and 24."""
    if season is None or season == 1:
        return (1,)
    return (*range(1, season + 2), 2 * season)


def fit_spec(panel: Panel, horizon: int, context: int, likelihood: str, lags: tuple[int, ...] | None,
             network: dict[str, Any]) -> DeepARSpec:
    """The settings of a model trained on ``panel``: default lags :func:`default_lags` of its season, the
    covariates' mean and standard deviation over every training row (1 where it is 0)."""
    if not panel.series:
        raise DataError("a DeepAR model needs at least one series; the panel has none")
    season = panel.season
    if lags is None:
        lags = default_lags(season)
    cov = (np.concatenate([s.covariates for s in panel.series]) if panel.covariate_names
           else np.zeros((0, 0)))
    mean = cov.mean(axis=0) if cov.size else np.zeros(0)
    std = cov.std(axis=0) if cov.size else np.zeros(0)
    std = np.where(std > 0, std, 1.0)
    width = calendar_features(panel.series[0].index[:1], panel.freq).shape[1]
    head = get_likelihood(likelihood)
    for s in panel.series:
        head.check_target(s.y, f"series {s.id!r}")
    return DeepARSpec(horizon, context, head.name, tuple(int(v) for v in lags), tuple(panel.ids),
                      panel.covariate_names, tuple(float(v) for v in mean), tuple(float(v) for v in std),
                      season, width, panel.freq.name if panel.freq is not None else "", dict(network))


def training_windows(spec: DeepARSpec, panel: Panel, max_windows: int | None, *,
                     held_out: int = 0, last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: network inputs (W, context + horizon, F) float32 and targets (W, context +
    horizon, 2) float64 (value, scale) of every window of every series that ends at least
    ``held_out`` rows before the series' end (at most ``max_windows`` a series, evenly spaced,
    the last included); with ``last``, only each series' last window (ending at its end)."""
    T = spec.context + spec.horizon
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for s in panel.series:
        col = spec.check_series(s, "training", training=True, validation=held_out)
        starts = (np.array([len(s) - T]) if last
                  else np.arange(spec.max_lag, len(s) - T - held_out + 1))
        if max_windows is not None and len(starts) > max_windows:
            starts = starts[np.round(np.linspace(0, len(starts) - 1, max_windows)).astype(int)]
        # rows b - max_lag .. b + T of each window, so that lag l of position t is y[t - l]
        offs = np.arange(-spec.max_lag, T)
        rows = s.y[starts[:, None] + offs]
        nu = scale_of(rows[:, spec.max_lag:spec.max_lag + spec.context])
        cal = calendar_features(s.index, panel.freq)[starts[:, None] + offs]
        cov = s.covariates[starts[:, None] + offs]
        xs.append(spec.inputs(rows, spec.max_lag, T, nu, cal, cov, np.full(len(starts), col)))
        ys.append(np.stack([rows[:, spec.max_lag:], np.broadcast_to(nu[:, None], (len(starts), T))], axis=-1))
    return np.concatenate(xs), np.concatenate(ys)


@dataclass(frozen=True)
class Forecast:
    """Sample paths of the ``horizon`` rows after each series' last: ``samples`` (N, S, H) in
    data units, ``index`` (N, H) their dates, ``ids`` the series."""

    ids: tuple[str, ...]
    index: np.ndarray
    samples: np.ndarray

    def quantile(self, q: float | Any) -> np.ndarray:
        """The ``q`` quantile(s) of the samples: (N, H), or (Q, N, H) for several."""
        qs = np.asarray(q, dtype=np.float64)
        if not np.all((qs > 0) & (qs < 1)):
            raise InvalidParameterError(f"quantiles must lie in (0, 1), got {q!r}")
        return np.quantile(self.samples, qs, axis=1)

    @property
    def mean(self) -> np.ndarray:
        return self.samples.mean(axis=1)

    def interval(self, level: float) -> tuple[np.ndarray, np.ndarray]:
        """The central ``level`` interval (e.g. 0.8: the 0.1 and 0.9 quantiles), (N, H) each."""
        if not 0 < level < 1:
            raise InvalidParameterError(f"an interval's level must lie in (0, 1), got {level!r}")
        lo, hi = self.quantile([(1 - level) / 2, (1 + level) / 2])
        return lo, hi

    def coverage(self, actual: np.ndarray, level: float) -> float:
        """The fraction of ``actual`` (N, H) inside the central ``level`` intervals."""
        lo, hi = self.interval(level)
        a = np.asarray(actual, dtype=np.float64)
        return float(np.mean((a >= lo) & (a <= hi)))

    def rows(self, quantiles: tuple[float, ...]) -> list[list[str]]:
        """CSV rows ``unique_id, ds, mean, q...`` (a header first)."""
        qv = self.quantile(list(quantiles)) if quantiles else np.zeros((0,) + self.index.shape)
        out = [["unique_id", "ds", "mean", *(f"q{q:g}" for q in quantiles)]]
        mean = self.mean
        for i, sid in enumerate(self.ids):
            text = labels(self.index[i])
            for h in range(self.index.shape[1]):
                out.append([sid, text[h], repr(float(mean[i, h])),
                            *(repr(float(qv[j, i, h])) for j in range(len(quantiles)))])
        return out


#: ``step(x) -> raw``: the network's outputs (B, steps, k) for inputs (B, steps, F), continuing
#: from the state the previous call left (a stateful network); ``reset()`` forgets it
Stepper = tuple[Callable[[np.ndarray], np.ndarray], Callable[[], None]]


def sample_paths(spec: DeepARSpec, panel: Panel, stepper: Stepper, num_samples: int, seed: int,
                 future: Panel | None = None) -> Forecast:
    """Ancestral sampling of ``num_samples`` paths per series of ``panel`` (every path of every
    series one batch row): the context through the network, then each step's draw fed back as
    the next step's lag. ``future`` holds the covariates of the ``horizon`` rows after each
    series' end (needed when the model has covariates)."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise InvalidParameterError(f"num_samples must be a whole number >= 1, got {num_samples!r}")
    head = get_likelihood(spec.likelihood)
    H, C, L = spec.horizon, spec.context, spec.max_lag
    N, S = len(panel), num_samples
    hist = np.empty((N, L + C + H))
    cal = np.empty((N, L + C + H, spec.calendar_width))
    cov = np.zeros((N, L + C + H, len(spec.covariate_names)))
    cols = np.empty(N, dtype=np.int64)
    index = []
    for i, s in enumerate(panel.series):
        cols[i] = spec.check_series(s, "a forecast")
        fut = panel.future_index(s, H)
        index.append(fut)
        hist[i, :L + C] = s.y[-(L + C):]
        dates = np.concatenate([s.index[-(L + C):], fut])
        cal[i] = calendar_features(dates, panel.freq)
        if spec.covariate_names:
            cov[i, :L + C] = _covariates(spec, panel, s)[-(L + C):]
            cov[i, L + C:] = _future_covariates(spec, future, s.id, fut)
    nu = scale_of(hist[:, L:L + C])
    rep = np.repeat(np.arange(N), S)
    y = hist[rep]
    step, reset = stepper
    reset()
    step(spec.inputs(y, L, C, nu[rep], cal[rep], cov[rep], cols[rep]))
    rng = np.random.default_rng(seed)
    for h in range(H):
        t = L + C + h
        raw = np.asarray(step(spec.inputs(y, t, 1, nu[rep], cal[rep], cov[rep], cols[rep])), dtype=np.float64)
        y[:, t] = head.sample(raw[:, -1], nu[rep], rng)
    reset()
    paths = spread_paths(y[:, L + C:].reshape(N, S, H), spec.spread)
    return Forecast(tuple(panel.ids), np.stack(index), paths)


def spread_paths(paths: np.ndarray, factor: tuple[float, ...]) -> np.ndarray:
    """``median + factor[h] (paths - median)`` at each series and step ``h`` of ``paths`` (N, S,
    H), the median taken over the S paths: every quantile's distance from the median times the
    step's factor, the median itself unchanged (``paths`` as given where ``factor`` is ``()``,
    uncalibrated)."""
    if not factor:
        return paths
    f = np.asarray(factor, dtype=np.float64)
    if f.shape != paths.shape[2:]:
        raise InvalidParameterError(f"spread_paths: one factor per horizon step ({paths.shape[2]}) expected, "
                                    f"got {f.shape[0]}")
    med = np.median(paths, axis=1, keepdims=True)
    return med + f * (paths - med)


def calibration_step(horizon: int, windows: int) -> int:
    """Rows between the origins of ``windows`` calibration windows: ``ceil(horizon / windows)``,
    so that their origins spread over one horizon and the rows held out of training for
    them, ``horizon + (windows - 1) x step``, are fewer than twice the horizon."""
    return -(-horizon // windows)


def calibration_rows(horizon: int, windows: int) -> int:
    """Rows at the end of each series held out of training to calibrate ``windows`` windows."""
    return horizon + (windows - 1) * calibration_step(horizon, windows)


def per_step_points(level: float) -> int:
    """Points a horizon step needs for a factor of its own: ``ceil(level (1 - level) / 0.05^2)``,
    the count at which the coverage the step's factor gives has a binomial s.e. of at most 5
    points (64 for a level of 0.8)."""
    return math.ceil(level * (1 - level) / 0.0025 - 1e-9)


def conformal_scores(forecast: Forecast, actual: np.ndarray, level: float) -> np.ndarray:
    """(N, H): how many half-widths of the central ``level`` interval each ``actual`` (N, H)
    lies from the paths' median ``m``: ``(y - m) / (hi - m)`` above it, ``(m - y) / (m - lo)``
    below (``lo``, ``hi``: the interval's ends). A ratio of two lengths in the series' units, so
    free of its scale: a series of 10^5 weighs as much as one of 10."""
    if not 0 < level < 1:
        raise InvalidParameterError(f"a calibration level must lie in (0, 1), got {level!r}")
    a = np.asarray(actual, dtype=np.float64)
    if a.shape != forecast.samples.shape[::2]:
        raise InvalidParameterError(f"conformal_scores: actual must be (series, horizon) = "
                                    f"{forecast.samples.shape[::2]}, got {a.shape}")
    lo, hi = forecast.interval(level)
    med = forecast.quantile(0.5)
    tiny = 1e-12 * np.maximum(np.abs(med), 1.0)
    return np.where(a >= med, (a - med) / np.maximum(hi - med, tiny), (med - a) / np.maximum(med - lo, tiny))


def conformal_quantile(scores: np.ndarray, level: float) -> float:
    """The finite-sample conformal quantile of ``n`` scores: the ``k = ceil((n + 1) level)``-th
    smallest (the largest where ``k > n``). For a new score exchangeable with them,
    ``P(score <= it) >= level`` (Romano et al., 2019)."""
    s = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    if s.size == 0:
        raise InvalidParameterError("conformal_quantile: no scores")
    k = math.ceil((s.size + 1) * level)
    return float(s[min(k, s.size) - 1])


def conformal_spread(scores: np.ndarray, level: float) -> tuple[tuple[float, ...], bool]:
    """``(factors, per_step)``: the conformal factor of each horizon step's spread about the
    median, from ``scores`` (M, H) (:func:`conformal_scores` of every calibration window of
    every series, stacked: M = series x windows).

    Where every step has at least :func:`per_step_points` scores (``M`` of them), each step ``h``
    gets the conformal quantile of its own ``M`` scores (``per_step`` True): the forecast's
    miss grows with the step in ways the sampled spread need not follow. Otherwise all ``M x
    H`` scores are pooled into one quantile, used at every step. ``median + c (interval -
    median)`` then covers at least ``k`` of the points its quantile was taken over. Scores of one
    series and one stretch of time are correlated, so with few series the guarantee holds only
    roughly. A factor of 0 (every point on its median) is raised to 1e-6 so that the paths stay
    apart."""
    if not 0 < level < 1:
        raise InvalidParameterError(f"a calibration level must lie in (0, 1), got {level!r}")
    sc = np.asarray(scores, dtype=np.float64)
    if sc.ndim != 2 or sc.size == 0:
        raise InvalidParameterError(f"conformal_spread: scores must be (series x windows, horizon), "
                                    f"got shape {sc.shape}")
    per_step = sc.shape[0] >= per_step_points(level)
    if per_step:
        c = [conformal_quantile(sc[:, h], level) for h in range(sc.shape[1])]
    else:
        c = [conformal_quantile(sc, level)] * sc.shape[1]
    return tuple(max(v, 1e-6) for v in c), per_step


def _covariates(spec: DeepARSpec, panel: Panel, s: Series) -> np.ndarray:
    if tuple(panel.covariate_names) != spec.covariate_names:
        raise DataError(f"this model reads the covariates {list(spec.covariate_names)}; the data has "
                        f"{list(panel.covariate_names)}")
    return s.covariates


def _future_covariates(spec: DeepARSpec, future: Panel | None, sid: str, dates: np.ndarray) -> np.ndarray:
    if future is None:
        raise DataError(f"this model reads the known-future covariates {list(spec.covariate_names)}: give "
                        f"their values for the {spec.horizon} row(s) after each series' end (future=)")
    f = future[sid]
    c = _covariates(spec, future, f)
    if len(f) < len(dates) or not np.array_equal(f.index[:len(dates)].astype(dates.dtype), dates):
        raise DataError(f"series {sid!r}: the future covariates must start at {labels(dates[:1])[0]} "
                        f"and cover the {len(dates)} row(s) after the series' end; they cover "
                        f"{len(f)} row(s) from {labels(f.index[:1])[0] if len(f) else 'nothing'}")
    return c[:len(dates)]


__all__ = ["DEEPAR_FORMAT", "DEEPAR_KEY", "DeepARSpec", "Forecast", "Stepper", "calibration_rows",
           "calibration_step", "conformal_quantile", "conformal_scores", "conformal_spread", "default_lags",
           "fit_spec",
           "per_step_points", "sample_paths", "scale_of", "spread_paths", "training_windows"]
