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

Metrics in data units: ``rmse = sqrt(mean((yhat - y)^2))``, ``mae = mean(|yhat - y|)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnkit.timeseries._csv import DataError


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


def _lag_matrix(target: np.ndarray, pos: np.ndarray, p: int, horizon: int) -> np.ndarray:
    """Rows ``[1, target[pos-h], target[pos-h-1], ..., target[pos-h-p+1]]``."""
    last = np.asarray(pos)[:, None] - horizon - np.arange(p)[None, :]
    return np.concatenate([np.ones((last.shape[0], 1)), np.asarray(target, dtype=np.float64)[last]], axis=1)


@dataclass(frozen=True)
class ARModel:
    """A fitted AR(p): ``coef[0]`` the intercept, ``coef[k]`` the weight of lag k (k = 1..p)."""

    p: int
    horizon: int
    coef: np.ndarray

    @classmethod
    def fit(cls, target: np.ndarray, train_pos: np.ndarray, p: int, horizon: int = 1) -> ARModel:
        """Least squares over ``train_pos`` (each needs ``p + horizon - 1`` rows of history)."""
        tp = np.asarray(train_pos)
        tp = tp[tp - horizon - p + 1 >= 0]
        if tp.size < p + 1:
            raise DataError(f"AR({p}) needs at least {p + 1} training positions with {p} lags, got {tp.size}")
        a = _lag_matrix(target, tp, p, horizon)
        coef, *_ = np.linalg.lstsq(a, np.asarray(target, dtype=np.float64)[tp], rcond=None)
        return cls(p, horizon, coef)

    def predict(self, target: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Forecast ``target[pos]`` from its lags (the values at ``pos`` are not read)."""
        pp = np.asarray(pos)
        if pp.size and pp.min() - self.horizon - self.p + 1 < 0:
            raise DataError(
                f"AR({self.p}) needs {self.p + self.horizon - 1} rows before position {int(pp.min())}"
            )
        return _lag_matrix(target, pp, self.p, self.horizon) @ self.coef


def select_ar_order(target: np.ndarray, train_pos: np.ndarray, max_p: int, horizon: int = 1) -> int:
    """The order in ``1..max_p`` with the smallest AIC on the common training positions."""
    tp = np.asarray(train_pos)
    tp = tp[tp - horizon - max_p + 1 >= 0]
    if tp.size < max_p + 2:
        raise DataError(f"AR order selection up to {max_p} needs more than {max_p + 1} training positions")
    y = np.asarray(target, dtype=np.float64)[tp]
    n = tp.size
    best_p, best_aic = 1, np.inf
    for p in range(1, max_p + 1):
        a = _lag_matrix(target, tp, p, horizon)
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        rss = float(np.sum((y - a @ coef) ** 2))
        aic = n * np.log(max(rss, 1e-300) / n) + 2 * (p + 1)
        if aic < best_aic - 1e-12:
            best_p, best_aic = p, aic
    return best_p
