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

from rnnkit.timeseries._csv import DataError
from rnnkit.timeseries._dates import infer_frequency


def rmse(pred: np.ndarray, actual: np.ndarray) -> float:
    """Root mean squared error."""
    d = np.asarray(pred, dtype=np.float64).ravel() - np.asarray(actual, dtype=np.float64).ravel()
    return float(np.sqrt(np.mean(d * d)))


def mae(pred: np.ndarray, actual: np.ndarray) -> float:
    """Mean absolute error."""
    d = np.asarray(pred, dtype=np.float64).ravel() - np.asarray(actual, dtype=np.float64).ravel()
    return float(np.mean(np.abs(d)))


def persistence_forecast(target: np.ndarray, pos: np.ndarray, horizon: int = 1) -> np.ndarray:
    """``target[pos - horizon]`` for every position (each must be >= horizon)."""
    p = np.asarray(pos)
    if p.size and p.min() < horizon:
        raise DataError(f"persistence needs positions >= horizon {horizon}, got {int(p.min())}")
    return np.asarray(target, dtype=np.float64)[p - horizon]


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
        tp = np.asarray(train_pos)
        tp = tp[tp - horizon - p + 1 >= 0]
        if tp.size < p + 1:
            raise DataError(f"AR({p}) needs at least {p + 1} training positions with {p} lags, got {tp.size}")
        r = _qr_r(target, tp, p, horizon)
        coef, *_ = np.linalg.lstsq(r[: p + 1, : p + 1], r[: p + 1, -1], rcond=None)
        return cls(p, horizon, coef)

    def predict(self, target: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Forecast ``target[pos]`` from its lags (the values at ``pos`` are not read)."""
        pp = np.asarray(pos)
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
    tp = np.asarray(train_pos)
    tp = tp[tp - horizon - max_p + 1 >= 0]
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
    """The training mean ``mean(target[train_pos])`` at every position of ``pos``."""
    tp = np.asarray(train_pos)
    if tp.size == 0:
        raise DataError("the training-mean baseline needs at least one training position")
    return np.full(np.asarray(pos).shape[0], float(np.mean(np.asarray(target, dtype=np.float64)[tp])))


def seasonal_naive_forecast(target: np.ndarray, pos: np.ndarray, season: int, horizon: int = 1) -> np.ndarray:
    """``target[pos - k * season]``, ``k = ceil(horizon / season)`` (each position must be at
    least ``k * season``)."""
    if season < 1:
        raise DataError(f"season must be >= 1, got {season}")
    lag = season * -(-horizon // season)
    p = np.asarray(pos)
    if p.size and p.min() < lag:
        raise DataError(f"the seasonal-naive baseline needs positions >= {lag}, got {int(p.min())}")
    return np.asarray(target, dtype=np.float64)[p - lag]


#: rows per season by the spacing of a dated index (the calendar's own cycle)
SEASONS = {"hour": 24, "day": 7, "bday": 5, "week": 52, "month": 12, "quarter": 4}


def season_of(index: np.ndarray, kind: str) -> int | None:
    """The season length in rows a dated index implies: hourly data 24 (a day), daily 7 (a week),
    business days 5 (a week: :func:`~rnnkit.timeseries.infer_frequency` finds them), weekly 52,
    monthly 12, quarterly 4 (a year); None for years, row numbers and irregular or other
    spacings. Besides business days, the spacing is the median step between rows."""
    idx = np.asarray(index)
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
