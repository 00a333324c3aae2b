"""Baselines every forecaster must beat, and the error metrics they are compared by.

Both baselines forecast ``target[pos]`` from values up to row ``pos - horizon`` only, the
information a window model with the same horizon has:

persistence
    ``yhat[pos] = target[pos - horizon]`` (tomorrow is like today).
least-squares AR(p)
    ``yhat[pos] = c + sum_{k=1..p} a_k * target[pos - horizon - k + 1]``, with ``(c, a)`` the
    ordinary least-squares solution over the TRAINING positions (a direct ``horizon``-step
    regression, no recursion). :func:`select_ar_order` picks ``p`` in ``1..max_p`` by the
    Akaike information criterion ``n * log(RSS / n) + 2 * (p + 1)``, every order fitted on the
    same ``n`` training positions (those with ``max_p`` lags of history).

training mean
    ``yhat[pos] = mean(target[train_pos])``, one constant: a model that does not beat it has
    learnt nothing about the series' dynamics.
seasonal naive
    ``yhat[pos] = target[pos - k * season]`` with ``k = ceil(horizon / season)`` (the same time
    of the last season the model could have seen), for a series with a season of ``season``
    rows; :func:`season_of` reads it from the index spacing.

The least squares are solved block by block (a QR factorisation of the lag matrix, updated
with each block of :data:`BLOCK` rows), so memory stays a few blocks however long the series.

Metrics in data units: ``rmse = sqrt(mean((yhat - y)^2))``, ``mae = mean(|yhat - y|)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._numbers import check_int
from rnnkit.timeseries._csv import DataError
from rnnkit.timeseries._dates import infer_frequency


def as_series(target: object, where: str) -> np.ndarray:
    """``target`` as a 1-D float64 array (``target`` itself when it is one: not a copy, so
    callers never write to it); DataError naming ``where`` otherwise."""
    t = as_real_array(target, "target", where).astype(np.float64, copy=False)    # no copy of a long series
    if t.ndim != 1:
        raise DataError(f"{where}: target must be a 1-D series, got shape {t.shape}")
    return t


def _positions(pos: object, rows: int, what: str, where: str) -> np.ndarray:
    """``pos`` as a 1-D int64 array of row positions in ``[0, rows)``; DataError naming
    ``where``, ``what``, the range and what was given otherwise."""
    p = as_real_array(pos, what, where)
    if p.dtype.kind not in "iu" or p.ndim != 1:
        raise DataError(f"{where}: {what} must be a 1-D array of integer row positions, got dtype {p.dtype} "
                        f"shape {p.shape}")
    if p.size and (int(p.min()) < 0 or int(p.max()) >= rows):
        raise DataError(f"{where}: {what} must lie in [0, {rows - 1}] (the target's rows), got "
                        f"[{int(p.min())}, {int(p.max())}]")
    return p.astype(np.int64, copy=False)


def _with_history(pos: np.ndarray, rows: int) -> np.ndarray:
    """The positions of ``pos`` with at least ``rows`` rows before them (``pos`` itself when all
    have: no copy of a long array of positions)."""
    return pos if not pos.size or int(pos.min()) >= rows else pos[pos >= rows]


def pair_difference(pred: object, actual: object, where: str) -> np.ndarray:
    """``pred - actual`` (both flattened) of two real arrays of one size; DataError otherwise."""
    a = as_real_array(pred, "pred", where).astype(np.float64).ravel()
    b = as_real_array(actual, "actual", where).astype(np.float64).ravel()
    if a.size != b.size or a.size == 0:
        raise DataError(f"{where}: pred and actual must hold the same number (>= 1) of values, got "
                        f"{a.size} and {b.size}")
    return a - b


def rmse(pred: np.ndarray, actual: np.ndarray) -> float:
    """Root mean squared error."""
    d = pair_difference(pred, actual, "rmse")
    return float(np.sqrt(np.mean(d * d)))


def mae(pred: np.ndarray, actual: np.ndarray) -> float:
    """Mean absolute error."""
    d = pair_difference(pred, actual, "mae")
    return float(np.mean(np.abs(d)))


def persistence_forecast(target: np.ndarray, pos: np.ndarray, horizon: int = 1) -> np.ndarray:
    """``target[pos - horizon]`` for every position (each must be >= horizon)."""
    t = as_series(target, "persistence_forecast")
    p = _positions(pos, t.shape[0], "pos", "persistence_forecast")
    horizon = check_int(horizon, "horizon", "persistence_forecast", lo=1)
    if p.size and p.min() < horizon:
        raise DataError(f"persistence needs positions >= horizon {horizon}, got {int(p.min())}")
    return t[p - horizon]


#: rows of the lag matrix formed at once
BLOCK = 1 << 13


def _lag_matrix(target: np.ndarray, pos: np.ndarray, p: int, horizon: int) -> np.ndarray:
    """Rows ``[1, target[pos-h], target[pos-h-1], ..., target[pos-h-p+1]]``."""
    last = np.asarray(pos)[:, None] - horizon - np.arange(p)[None, :]
    return np.concatenate([np.ones((last.shape[0], 1)), np.asarray(target, dtype=np.float64)[last]], axis=1)


def _qr_r(target: np.ndarray, pos: np.ndarray, p: int, horizon: int) -> np.ndarray:
    """R of the QR factorisation of ``[lag matrix | target[pos]]`` (p + 2 columns), built from
    blocks of :data:`BLOCK` positions: ``R_k = qr([R_{k-1}; block_k])``. Its last column holds
    the target's coordinates on the orthonormalised lags, so the residual sum of squares of
    the first ``j + 1`` columns is the sum of the squares of ``R[j + 1:, -1]``."""
    t = np.asarray(target, dtype=np.float64)
    r: np.ndarray = np.zeros((0, p + 2))
    for a in range(0, len(pos), BLOCK):
        blk = pos[a:a + BLOCK]
        m = np.concatenate([_lag_matrix(t, blk, p, horizon), t[blk, None]], axis=1)
        r = np.asarray(np.linalg.qr(np.concatenate([r, m]), mode="r"))
    return r


@dataclass(frozen=True)
class ARModel:
    """A fitted AR(p): ``coef[0]`` the intercept, ``coef[k]`` the weight of lag k (k = 1..p)."""

    p: int
    horizon: int
    coef: np.ndarray

    @classmethod
    def fit(cls, target: np.ndarray, train_pos: np.ndarray, p: int, horizon: int = 1) -> ARModel:
        """Least squares over ``train_pos`` (each needs ``p + horizon - 1`` rows of history);
        the minimum-norm solution when lags are collinear (a constant series)."""
        target = as_series(target, "ARModel.fit")
        tp = _positions(train_pos, target.shape[0], "train_pos", "ARModel.fit")
        p = check_int(p, "p", "ARModel.fit", lo=1)
        horizon = check_int(horizon, "horizon", "ARModel.fit", lo=1)
        tp = _with_history(tp, horizon + p - 1)
        if tp.size < p + 1:
            raise DataError(f"AR({p}) needs at least {p + 1} training positions with {p} lags, got {tp.size}")
        r = _qr_r(target, tp, p, horizon)
        coef, *_ = np.linalg.lstsq(r[: p + 1, : p + 1], r[: p + 1, -1], rcond=None)
        return cls(p, horizon, coef)

    def predict(self, target: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Forecast ``target[pos]`` from its lags (the values at ``pos`` are not read)."""
        target = as_series(target, "ARModel.predict")
        pp = _positions(pos, target.shape[0] + self.horizon, "pos", "ARModel.predict")
        if pp.size and pp.min() - self.horizon - self.p + 1 < 0:
            raise DataError(
                f"AR({self.p}) needs {self.p + self.horizon - 1} rows before position {int(pp.min())}"
            )
        out = np.empty(pp.shape[0], dtype=np.float64)
        for a in range(0, len(pp), BLOCK):
            out[a:a + BLOCK] = _lag_matrix(target, pp[a:a + BLOCK], self.p, self.horizon) @ self.coef
        return out


def select_ar_order(target: np.ndarray, train_pos: np.ndarray, max_p: int, horizon: int = 1) -> int:
    """The order in ``1..max_p`` with the smallest AIC on the common training positions."""
    target = as_series(target, "select_ar_order")
    tp = _positions(train_pos, target.shape[0], "train_pos", "select_ar_order")
    max_p = check_int(max_p, "max_p", "select_ar_order", lo=1)
    horizon = check_int(horizon, "horizon", "select_ar_order", lo=1)
    tp = _with_history(tp, horizon + max_p - 1)
    if tp.size < max_p + 2:
        raise DataError(f"AR order selection up to {max_p} needs more than {max_p + 1} training positions")
    n = tp.size
    last = _qr_r(target, tp, max_p, horizon)[:, -1]
    best_p, best_aic = 1, np.inf
    for p in range(1, max_p + 1):
        rss = float(np.sum(last[p + 1:] ** 2))
        aic = n * np.log(max(rss, 1e-300) / n) + 2 * (p + 1)
        if aic < best_aic - 1e-12:
            best_p, best_aic = p, aic
    return best_p


def mean_forecast(target: np.ndarray, train_pos: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The training mean ``mean(target[train_pos])`` at every position of ``pos`` (1-D, any
    non-negative row numbers: the values there are not read)."""
    t = as_series(target, "mean_forecast")
    tp = _positions(train_pos, t.shape[0], "train_pos", "mean_forecast")
    if tp.size == 0:
        raise DataError("the training-mean baseline needs at least one training position")
    p = _positions(pos, np.iinfo(np.int64).max, "pos", "mean_forecast")
    return np.full(p.shape[0], float(np.mean(t[tp])))


def seasonal_naive_forecast(target: np.ndarray, pos: np.ndarray, season: int, horizon: int = 1) -> np.ndarray:
    """``target[pos - k * season]``, ``k = ceil(horizon / season)`` (each position must be at
    least ``k * season``)."""
    t = as_series(target, "seasonal_naive_forecast")
    p = _positions(pos, t.shape[0], "pos", "seasonal_naive_forecast")
    season = check_int(season, "season", "seasonal_naive_forecast", lo=1)
    horizon = check_int(horizon, "horizon", "seasonal_naive_forecast", lo=1)
    lag = season * -(-horizon // season)
    if p.size and p.min() < lag:
        raise DataError(f"the seasonal-naive baseline needs positions >= {lag}, got {int(p.min())}")
    return t[p - lag]


#: rows per season by the spacing of a dated index (the calendar's own cycle)
SEASONS = {"hour": 24, "day": 7, "bday": 5, "week": 52, "month": 12, "quarter": 4}


def season_of(index: np.ndarray, kind: str) -> int | None:
    """The season length in rows a dated index implies: hourly data 24 (a day), daily 7 (a week),
    business days 5 (a week: :func:`~rnnkit.timeseries.infer_frequency` finds them), weekly 52,
    monthly 12, quarterly 4 (a year); None for years, row numbers and irregular or other
    spacings. Besides business days, the spacing is the median step between rows."""
    if not isinstance(kind, str):
        raise DataError(f"season_of: kind must be the index kind (a str), got {type(kind).__name__}")
    try:
        idx = np.asarray(index)
    except (TypeError, ValueError) as e:
        raise DataError(f"season_of: index is not an array ({e})") from None
    if kind == "quarter":
        return SEASONS["quarter"]
    if idx.dtype.kind != "M" or len(idx) < 3:
        return None
    freq = infer_frequency(idx)
    if freq is not None and freq.rule == "bday":
        return SEASONS["bday"]
    step = float(np.median(np.diff(idx.astype("datetime64[s]").astype(np.int64))))
    for name, secs, slack in (("hour", 3600, 0), ("day", 86400, 0), ("week", 7 * 86400, 0),
                              ("month", 30.44 * 86400, 3 * 86400), ("quarter", 91.3 * 86400, 3 * 86400)):
        if abs(step - secs) <= slack:
            return SEASONS[name]
    return None
