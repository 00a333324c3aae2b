"""From raw columns to scaled train / validation / test windows, split in time order.

The windows (see :func:`rnnkit.timeseries.make_windows`) are split chronologically::

    | train (first) | validation | test (last n_test) |

The scalers are fitted on the rows the TRAINING windows read or predict — rows
``0 .. pos[n_train - 1]`` — so no validation or test value leaks into the scaling (with
``scale="window"`` the target is scaled by each window's own statistics instead, and the
training rows give only the floor on their standard deviation, see
:class:`~rnnkit.timeseries.ForecastSpec`). The
baselines are fitted on every position before the test part (train and validation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnkit.timeseries import (
    ARModel,
    DataError,
    Forecaster,
    ForecastSpec,
    Scaler,
    WindowArrays,
    count_windows,
    mae,
    make_windows,
    mean_forecast,
    persistence_forecast,
    rmse,
    seasonal_naive_forecast,
    select_ar_order,
)
from rnnkit.timeseries._forecast import WINDOW_STD_FLOOR
from rnnkit.timeseries._preprocess import transform_rows


@dataclass(frozen=True)
class Prepared:
    """Scaled windows of each part, the spec to save with the model, and the raw target."""

    spec: ForecastSpec
    target: np.ndarray
    train: WindowArrays
    val: WindowArrays
    test: WindowArrays


def split_counts(n_windows: int, val_split: float, n_test: int = 0) -> tuple[int, int, int]:
    """(n_train, n_val, n_test): ``n_val = round(val_split * (n_windows - n_test))``, at least 1
    when ``val_split > 0``; at least one training window is left, else DataError."""
    rest = n_windows - n_test
    n_val = int(round(val_split * rest)) if val_split > 0 else 0
    if val_split > 0:
        n_val = max(n_val, 1)
    n_train = rest - n_val
    if n_train < 1:
        raise DataError(
            f"too few rows: {n_windows} window(s) leave no training window after "
            f"{n_val} validation and {n_test} test window(s); add rows or lower --window/--val-split"
        )
    return n_train, n_val, n_test


def prepare(features: np.ndarray, target: np.ndarray, feature_names: list[str], target_name: str, *,
            window: int, horizon: int, val_split: float, n_test: int = 0, transform: str = "none",
            index_name: str = "row", what: str = "the data", difference: bool = False,
            missing: str = "error", log: bool = False, seasonal: int = 0,
            scale: str = "global") -> Prepared:
    """Window, split and scale (see the module docstring). With ``log``, ``seasonal`` (a lag)
    or ``difference`` the windows read the transformed rows
    (:func:`~rnnkit.timeseries.transform_rows`) and the targets are ``U[pos] - base`` of
    :class:`~rnnkit.timeseries.ForecastSpec` (with ``difference`` alone: the changes
    ``target[pos] - target[pos - horizon]``); every ``pos`` is a data row either way.
    ``missing``: the policy the data was read with, stored in the spec. ``scale``: ``"global"``
    or ``"window"`` (:class:`~rnnkit.timeseries.ForecastSpec`)."""
    rows = int(features.shape[0])
    chosen = [f for f, on in (("--log", log), (f"seasonal differences (lag {seasonal})", seasonal),
                              ("--difference", difference)) if on]
    if chosen and transform != "none":
        raise DataError(f"{' and '.join(chosen)} work(s) on the values themselves; it cannot be combined "
                        f"with --transform {transform}")
    used = seasonal + (1 if difference else 0)
    n = count_windows(rows - used, window, horizon)
    if n < 1:
        raise DataError(f"too few rows in {what}: {rows} row(s), but window {window} and horizon "
                        f"{horizon}" + (f" with {' and '.join(chosen)}" if used else "")
                        + f" need at least {window + horizon + used}")
    # the spec's checks (lag >= horizon, the target a feature) before any value is transformed
    nf = len(feature_names)
    probe = ForecastSpec(target_name, tuple(feature_names), window, horizon,
                         Scaler(tuple(feature_names), np.zeros(nf), np.ones(nf)),
                         Scaler((target_name,), np.zeros(1), np.ones(1)), index_name,
                         difference=difference, missing=missing, log=log, seasonal=seasonal,
                         scale=scale, window_floor=1.0 if scale == "window" else 0.0)
    xin = transform_rows(features, log=log, seasonal=seasonal, difference=difference,
                         names=tuple(feature_names), what=what)
    u = probe.levels(target, what=what)
    tfull = np.full(rows, np.nan)
    p = np.arange(seasonal + (horizon if difference else 0), rows)      # rows whose base is known
    tfull[p] = u[p] - probe.base(lambda k: u[p - k])
    tin = tfull[used:]                                                   # tin[j]: data row j + used
    n_train, n_val, n_test = split_counts(n, val_split, n_test)
    fit_rows = n_train - 1 + window - 1 + horizon + 1
    xs = Scaler.fit(xin[:fit_rows], feature_names, transform)
    tfit = tin[:fit_rows]
    ys = Scaler.fit(tfit[~np.isnan(tfit), None], [target_name], transform)
    if scale == "window":
        k = feature_names.index(target_name)
        floor = float(WINDOW_STD_FLOOR * xs.std[k])         # xs.std is 1 for constant training rows
        xs = dataclasses.replace(xs, mean=np.where(np.arange(nf) == k, 0.0, xs.mean),
                                 std=np.where(np.arange(nf) == k, 1.0, xs.std))
        ys = dataclasses.replace(ys, mean=np.zeros(1), std=np.ones(1))
        spec = dataclasses.replace(probe, x_scaler=xs, y_scaler=ys, window_floor=floor)
        w = spec.scale_windows(make_windows(xs.apply(xin, np.float64),
                                            ys.apply(tin[:, None], np.float64)[:, 0], window, horizon,
                                            dtype=np.float64, what=what))
    else:
        spec = dataclasses.replace(probe, x_scaler=xs, y_scaler=ys)
        w = make_windows(xs.apply(xin, np.float32), ys.apply(tin[:, None], np.float32)[:, 0], window,
                         horizon, what=what)
    if used:
        w = WindowArrays(w.x, w.y, w.pos + used, w.scale)
    return Prepared(spec, np.asarray(target, dtype=np.float64), w.take(slice(0, n_train)),
                    w.take(slice(n_train, n_train + n_val)), w.take(slice(n_train + n_val, n)))


def predict_blocks(model: Any, spec: ForecastSpec, windows: WindowArrays, target: np.ndarray) -> np.ndarray:
    """Forecasts in data units for prepared ``windows`` (:meth:`Forecaster.predict_prepared`,
    the path ``rnnkit predict`` takes)."""
    return Forecaster(model, spec).predict_prepared(windows, target)


@dataclass(frozen=True)
class Comparison:
    """RMSE / MAE of the model and every baseline on one set of positions (data units).

    ``rows``: the model, persistence, AR(p), the training mean, then (with a season) the
    seasonal-naive forecast; ``keys`` name them in :meth:`as_dict`."""

    rows: list[tuple[str, float, float]]
    ar_order: int
    actual: np.ndarray
    predicted: np.ndarray
    persistence: np.ndarray
    ar: np.ndarray
    keys: tuple[str, ...] = ()
    season: int | None = None

    def metric(self, name: str) -> tuple[float, float]:
        for n, r, m in self.rows:
            if n.startswith(name):
                return r, m
        raise KeyError(name)

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {k: {"rmse": r, "mae": m} for k, (_, r, m) in zip(self.keys, self.rows, strict=True)}

    def not_beaten_by_model(self) -> list[tuple[str, float, float]]:
        """The baselines the model does not beat on RMSE or on MAE (a NaN baseline, one that
        could not be fitted, is beaten by any number)."""
        (_, m_r, m_m), others = self.rows[0], self.rows[1:]
        return [row for row in others if not (m_r < row[1] or np.isnan(row[1]))
                or not (m_m < row[2] or np.isnan(row[2]))]

    def verdict(self, model: str) -> str:
        """One sentence: the model beats every baseline, or it does NOT beat these (named, with
        their RMSE / MAE beside the model's)."""
        lost = self.not_beaten_by_model()
        _, m_r, m_m = self.rows[0]
        if not lost:
            return f"the {model} beats every baseline on RMSE and MAE"
        names = "; ".join(f"{n} (RMSE {r:.4g}, MAE {m:.4g})" for n, r, m in lost)
        return (f"the {model} does NOT beat {len(lost)} of {len(self.rows) - 1} baselines "
                f"(its RMSE {m_r:.4g}, MAE {m_m:.4g}): {names}")


def compare(model_name: str, predicted: np.ndarray, target: np.ndarray, eval_pos: np.ndarray,
            fit_pos: np.ndarray, window: int, horizon: int, season: int | None = None) -> Comparison:
    """The model's forecasts at ``eval_pos`` beside persistence, AR(p) (p <= ``window`` by AIC,
    fitted by least squares on ``fit_pos``), the mean of ``target[fit_pos]`` and, with a
    ``season`` (rows), the seasonal-naive forecast."""
    actual = target[eval_pos]
    per = persistence_forecast(target, eval_pos, horizon)
    try:
        p = select_ar_order(target, fit_pos, window, horizon)
        ar = ARModel.fit(target, fit_pos, p, horizon).predict(target, eval_pos)
        ar_name = f"AR({p}) least squares"
    except DataError:  # too few training positions for any AR fit: report it, do not fail
        p, ar, ar_name = 0, np.full(actual.shape, np.nan), "AR(p): too few training rows"
    mean = mean_forecast(target, fit_pos, eval_pos)
    rows = [(model_name, rmse(predicted, actual), mae(predicted, actual)),
            ("persistence", rmse(per, actual), mae(per, actual)),
            (ar_name, rmse(ar, actual), mae(ar, actual)),
            ("training mean", rmse(mean, actual), mae(mean, actual))]
    keys = ["model", "persistence", f"ar({p})", "mean"]
    lag = season * -(-horizon // season) if season else 0
    if season and len(eval_pos) and int(np.min(eval_pos)) >= lag:
        sn = seasonal_naive_forecast(target, eval_pos, season, horizon)
        rows.append((f"seasonal naive ({season} rows)", rmse(sn, actual), mae(sn, actual)))
        keys.append("seasonal_naive")
    else:
        season = None
    return Comparison(rows, p, actual, np.asarray(predicted, dtype=np.float64), per, ar, tuple(keys), season)
