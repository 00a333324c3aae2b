"""A saved forecaster's preprocessing, applied in one place: the settings stored with the model
(:class:`ForecastSpec`) and the network beside them (:class:`Forecaster`).

What a forecaster did to its input in training is part of the model, and every caller — the
``rnnkit predict`` command, the model server and Python — gets it from here:

* which columns it reads (``features``, in order) and forecasts (``target``),
* the date column of the training file (``index_name``; ``"row"``: rows were numbered),
* the missing-value policy the training file was read with (``missing``),
* the transform and standardisation fitted on the training rows (``x_scaler``, ``y_scaler``),
* the logarithm (``log``), seasonal differences (``seasonal``, the lag) and first
  differences (``difference``), chosen by hand or by the rules of
  :func:`~rnnkit.timeseries.choose_preprocess`,
* the window (``window`` rows of network input) and the ``horizon``,
* the scaling of the target (``scale``): ``"global"``, the standardisation above, or
  ``"window"``, each window standardised by its own statistics (:meth:`ForecastSpec.scale_windows`).

The network sees float32 windows of scaled rows; a forecast leaves it as a scaled value (or a
scaled change) and is mapped back to data units in float64. Scaling, logs and differences are
element-wise along the rows, so the windows of a whole file and one window sent alone give the same bits;
window scaling sums each window's values in a fixed order, so it keeps that.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rnnkit._numbers import check_int
from rnnkit.timeseries._csv import MISSING_POLICIES, DataError, Table, read_csv, read_header
from rnnkit.timeseries._preprocess import transform_rows
from rnnkit.timeseries._window import Scaler, WindowArrays, make_windows

#: metadata key under which the forecast settings are stored in a model file
SPEC_KEY = "rnnkit.forecast"
#: the format tag of the stored settings
SPEC_FORMAT = "rnnkit.forecast/1"
#: windows sent through the network at once
CHUNK = 1 << 14
#: the most forecasts :meth:`Forecaster.recursive` makes (each is one network call)
MAX_STEPS = 100_000
#: how a forecaster scales its target: one standardisation fitted on the training rows, or each
#: window by its own mean and standard deviation
SCALES = ("global", "window")
#: with ``scale="window"``: the floor on a window's standard deviation, as a fraction of the
#: standard deviation of the target's (transformed) training rows
WINDOW_STD_FLOOR = 1e-3


@dataclass(frozen=True)
class ForecastSpec:
    """Everything besides the network that a saved forecaster needs to predict from data rows.

    Stored as JSON with the model (metadata key :data:`SPEC_KEY`). ``features`` are the input
    columns in order; ``target`` the predicted column; ``index_name`` the date column the
    training file had (``"row"`` for none); ``x_scaler`` / ``y_scaler`` were fitted on training
    rows; ``missing`` is the policy the training file was read with (see
    :func:`~rnnkit.timeseries.read_csv`), None for a file saved before it was stored and whose
    training notes do not name it either.

    With ``difference`` the network reads first differences and predicts a change::

        input row j  = x_scaler(v[j + 1] - v[j])              (one row fewer than the data)
        forecast     = target[pos - horizon] + y_scaler^-1(network output)

    i.e. it forecasts ``target[pos] - target[pos - horizon]``, the change since the window's last
    row — the usual cure for a trending series, whose later values leave the training range.

    In general every column is transformed as :func:`~rnnkit.timeseries.transform_rows`
    describes (``u = log v`` with ``log``; ``g[t] = u[t] - u[t - m]`` with ``seasonal = m``;
    first differences of ``g`` with ``difference``) before scaling, and a forecast of the
    target at row ``pos`` (``h = horizon``, ``U`` the target's ``u``) is::

        base   = (U[pos - m] if m) + (U[pos - h] - (U[pos - h - m] if m) if difference)
        u_hat  = y_scaler^-1(network output) + base
        v_hat  = exp(u_hat) with log, else u_hat

    which reads only rows up to ``pos - h`` because ``m >= h`` is required. A seasonal lag
    needs the target among the features (the window holds the rows ``base`` reads). The
    network's training target is ``U[pos] - base`` (:meth:`base`), so this inverts it exactly.

    With ``scale="window"`` (instance normalisation, as RevIN, Kim et al. 2022) the target is
    not standardised by the training rows' statistics (its entries in ``x_scaler`` and
    ``y_scaler`` are mean 0, std 1: their ``transform`` alone acts) but window by window: with
    ``a`` the target's column of one window's transformed rows (``window`` values)::

        mu    = mean(a)
        sigma = max(std(a), window_floor)          (std: population, ddof 0)
        input column of the target = (a - mu) / sigma
        u_hat = y_scaler^-1(network output * sigma + mu) + base

    and the network's training target is ``(y_scaler(U[pos] - base) - mu) / sigma``; the other
    features keep their global standardisation. ``window_floor`` is :data:`WINDOW_STD_FLOOR`
    times the standard deviation of the target's transformed training rows (1 where those are
    constant), so a constant window is scaled safely: its input column is exactly 0 and its
    forecast ``mu + sigma * output``. Window scaling needs the target among the features.
    """

    target: str
    features: tuple[str, ...]
    window: int
    horizon: int
    x_scaler: Scaler
    y_scaler: Scaler
    index_name: str = "row"
    extra: dict[str, Any] = field(default_factory=dict)
    difference: bool = False
    missing: str | None = "error"
    log: bool = False
    seasonal: int = 0
    scale: str = "global"
    window_floor: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.scale, str) or self.scale not in SCALES:
            raise DataError(f"ForecastSpec: scale must be one of {', '.join(SCALES)}, got {self.scale!r}")
        if self.scale == "window":
            if self.target not in self.features:
                raise DataError(f"ForecastSpec: window scaling standardises each window by the target's "
                                f"values in it; expected the target {self.target!r} among the features, "
                                f"got features {list(self.features)}")
            if not (isinstance(self.window_floor, float) and np.isfinite(self.window_floor)
                    and self.window_floor > 0):
                raise DataError(f"ForecastSpec: window scaling needs a positive, finite floor on a "
                                f"window's standard deviation; got window_floor={self.window_floor!r}")
            k = self.features.index(self.target)
            if not (self.x_scaler.mean[k] == 0 and self.x_scaler.std[k] == 1
                    and self.y_scaler.mean[0] == 0 and self.y_scaler.std[0] == 1):
                raise DataError(f"ForecastSpec: with window scaling the scalers leave the target "
                                f"{self.target!r} unstandardised (mean 0, std 1); got input mean "
                                f"{self.x_scaler.mean[k]:.6g}, std {self.x_scaler.std[k]:.6g}, output mean "
                                f"{self.y_scaler.mean[0]:.6g}, std {self.y_scaler.std[0]:.6g}")
        if self.missing is not None and (not isinstance(self.missing, str)
                                         or self.missing not in MISSING_POLICIES):
            raise DataError(f"ForecastSpec: missing must be one of {', '.join(MISSING_POLICIES)} or None, "
                            f"got {self.missing!r}")
        check_int(self.window, "window", "ForecastSpec", lo=1)
        check_int(self.horizon, "horizon", "ForecastSpec", lo=1)
        if self.window < 1 or self.horizon < 1:
            raise DataError(f"ForecastSpec: window and horizon must be >= 1, got window={self.window}, "
                            f"horizon={self.horizon}")
        check_int(self.seasonal, "seasonal", "ForecastSpec", lo=0)
        if self.seasonal and self.seasonal < self.horizon:
            raise DataError(f"ForecastSpec: seasonal differences at lag {self.seasonal} cannot be undone "
                            f"{self.horizon} rows ahead (the row {self.seasonal} before the forecast is not "
                            f"known yet); expected a lag >= the horizon {self.horizon}")
        if self.seasonal and self.target not in self.features:
            raise DataError(f"ForecastSpec: seasonal differences need the target {self.target!r} among the "
                            f"features (the window holds the rows they are undone with); got features "
                            f"{list(self.features)}")
        if (self.log or self.seasonal or self.difference) and self.x_scaler.transform != "none":
            raise DataError(f"ForecastSpec: logs and differences work on the values themselves; they "
                            f"cannot be combined with the scaler's transform {self.x_scaler.transform!r}")
        if tuple(self.x_scaler.names) != tuple(self.features):
            raise DataError(f"ForecastSpec: the input scaler is for columns {list(self.x_scaler.names)}, "
                            f"the features are {list(self.features)}")

    def to_json(self) -> str:
        return json.dumps({
            "format": SPEC_FORMAT, "target": self.target, "features": list(self.features),
            "window": self.window, "horizon": self.horizon, "index_name": self.index_name,
            "x_scaler": self.x_scaler.to_dict(), "y_scaler": self.y_scaler.to_dict(),
            "extra": self.extra, "difference": self.difference, "missing": self.missing,
            "log": self.log, "seasonal": self.seasonal,
            "scale": self.scale, "window_floor": self.window_floor,
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ForecastSpec:
        """The settings stored as :meth:`to_json` wrote them. Settings saved before the
        missing-value policy had its own entry take it from the training notes (``extra``,
        where ``rnnkit train`` has always written it); without either it is None. Settings
        saved before ``scale`` existed are global scaling."""
        try:
            d = json.loads(text)
            if d.get("format") != SPEC_FORMAT:
                raise ValueError(f"unknown format {d.get('format')!r}")
            extra = dict(d.get("extra", {}))
            missing = d["missing"] if "missing" in d else extra.get("missing")
            return cls(str(d["target"]), tuple(d["features"]), int(d["window"]), int(d["horizon"]),
                       Scaler.from_dict(d["x_scaler"]), Scaler.from_dict(d["y_scaler"]),
                       str(d.get("index_name", "row")), extra, bool(d.get("difference", False)),
                       None if missing is None else str(missing), bool(d.get("log", False)),
                       int(d.get("seasonal", 0)), str(d.get("scale", "global")),
                       float(d.get("window_floor", 0.0)))
        except (ValueError, KeyError, TypeError, DataError) as e:
            raise DataError(f"the forecast settings stored with the model are damaged ({e})") from None

    @property
    def rows_needed(self) -> int:
        """Data rows one input window reads (``window``, plus the seasonal lag, plus 1 with
        ``difference``)."""
        return self.window + self.seasonal + (1 if self.difference else 0)

    # -- reading data as training did --------------------------------------------------------
    def policy(self, missing: str | None = None) -> str:
        """The missing-value policy to read data with: the stored one; ``missing`` must agree
        with it (DataError otherwise) and is used only where none is stored (then ``"error"``
        when it is None too)."""
        if missing is not None and missing not in MISSING_POLICIES:
            raise DataError(f"missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}")
        if self.missing is None:
            return missing or "error"
        if missing is not None and missing != self.missing:
            raise DataError(f"this model was trained on data read with --missing {self.missing} and "
                            f"reads its input the same way; got --missing {missing} (leave it out)")
        return self.missing

    def read_csv(self, path: str | os.PathLike[str], *, missing: str | None = None) -> Table:
        """The CSV file at ``path`` read as the training file was: the feature columns (and the
        target's, when the file has it and it is not a feature), the training file's date
        column when this file has it (rows numbered when training numbered them, else the date
        column found as :func:`~rnnkit.timeseries.read_csv` finds one), under the stored
        missing-value policy (:meth:`policy`)."""
        header = read_header(path)
        feats = list(self.features)
        want_target = self.target in header and self.target not in feats
        date_col: str | Literal[False] | None = (self.index_name if self.index_name in header
                                                 else False if self.index_name == "row" else None)
        return read_csv(path, feats + ([self.target] if want_target else []), date_col=date_col,
                        missing=self.policy(missing))

    # -- data rows to network input, network output to data units ---------------------------
    def prepare(self, features: np.ndarray, dtype: Any = np.float64, *, what: str = "the data") -> np.ndarray:
        """Network input rows from raw feature rows (..., rows, F): transformed
        (:func:`~rnnkit.timeseries.transform_rows`: row j of the result is data row
        ``j + rows_needed - window``) and scaled, in ``dtype``."""
        v = np.asarray(features, dtype=np.float64)
        if v.ndim < 2 or v.shape[-1] != len(self.features):
            raise DataError(f"expected rows of {len(self.features)} feature value(s) "
                            f"({', '.join(self.features)}), got shape {v.shape}")
        v = transform_rows(v, log=self.log, seasonal=self.seasonal, difference=self.difference,
                           names=self.features, what=what)
        return self.x_scaler.apply(v.reshape(-1, v.shape[-1]), dtype).reshape(v.shape)

    def input_windows(self, features: np.ndarray, *, what: str = "the data") -> WindowArrays:
        """Every complete input window of ``features`` (raw rows); ``pos`` = the DATA row each
        forecast is for (``horizon`` rows after the window's last data row; it may lie past
        the end). ``y`` is empty."""
        if features.shape[0] < self.rows_needed:
            raise DataError(f"too few rows in {what}: {features.shape[0]} row(s), but window "
                            f"{self.window} needs at least {self.rows_needed}")
        if self.scale == "window":
            w = self.scale_windows(make_windows(self.prepare(features, what=what), None, self.window,
                                                self.horizon, dtype=np.float64, what=what))
        else:
            w = make_windows(self.prepare(features, np.float32, what=what), None, self.window,
                             self.horizon, what=what)
        used = self.rows_needed - self.window
        return WindowArrays(w.x, w.y, w.pos + used, w.scale) if used else w

    def window_stats(self, x: np.ndarray) -> np.ndarray:
        """``(mu, sigma)`` of the class docstring for each window of :meth:`prepare`'d rows ``x``
        (S, window, F) float64: (S, 2) float64. Summed row by row in a fixed order, so a window
        gives the same bits alone or among others."""
        a = np.asarray(x, dtype=np.float64)[:, :, self.features.index(self.target)]
        n = a.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):         # overflows: refused by the caller
            total = a[:, 0].copy()
            for j in range(1, n):
                total += a[:, j]
            mu = total / n
            ss = np.zeros_like(mu)
            for j in range(n):
                d = a[:, j] - mu
                ss += d * d
            sigma = np.maximum(np.sqrt(ss / n), self.window_floor)
        return np.stack([mu, sigma], axis=1)

    def scale_windows(self, w: WindowArrays) -> WindowArrays:
        """``w`` (float64 windows of :meth:`prepare`'d rows, targets ``y`` (S, 1) scaled by
        ``y_scaler`` or (S, 0)) with the target's column and ``y`` standardised window by window
        (class docstring), in float32, each window's ``(mu, sigma)`` in ``scale``. A window
        whose scaled values are not finite in float32 (a deviation beyond 3.4e38 floors) is a
        DataError naming it, never passed on. The windows are scaled :data:`CHUNK` at a time
        into one float32 array: (S, window, F) values, ``window`` times the rows' memory."""
        n, k = len(w), self.features.index(self.target)
        stats = np.empty((n, 2))
        x32 = np.empty(w.x.shape, dtype=np.float32)
        y32 = np.empty(w.y.shape, dtype=np.float32)
        for a in range(0, n, CHUNK):
            part = slice(a, a + CHUNK)
            st = stats[part] = self.window_stats(w.x[part])
            mu, sigma = st[:, 0, None], st[:, 1, None]
            x = np.array(w.x[part], dtype=np.float64)
            with np.errstate(over="ignore", invalid="ignore"):
                x[:, :, k] = (x[:, :, k] - mu) / sigma
                x32[part] = x
                y32[part] = (np.asarray(w.y[part], dtype=np.float64) - mu) / sigma
        bad = (~np.isfinite(x32).all(axis=(1, 2)) | ~np.isfinite(y32).all(axis=1)
               | ~np.isfinite(stats).all(axis=1))
        if bad.any():
            s = int(np.flatnonzero(bad)[0])
            raise DataError(f"window {s} (for data row {int(w.pos[s])}) cannot be scaled by its own "
                            f"statistics: mean {stats[s, 0]:.3g}, std {stats[s, 1]:.3g} (floor "
                            f"{self.window_floor:.3g}) give values beyond float32's range; expected "
                            f"values whose spread within a window is finite and within 3.4e38 floors")
        return WindowArrays(x32, y32, w.pos, stats)

    def window_inputs(self, rows: np.ndarray) -> np.ndarray:
        """Network input (B, window, F) float32 for ``rows`` (B, :attr:`rows_needed`, F), each
        sample the data rows of one window (raw values, float64)."""
        r = np.asarray(rows, dtype=np.float64)
        if r.ndim != 3 or r.shape[1:] != (self.rows_needed, len(self.features)):
            raise DataError(f"expected windows of shape (batch, {self.rows_needed}, {len(self.features)}): "
                            f"{self.rows_needed} data rows of {', '.join(self.features)}; got shape "
                            f"{r.shape}")
        if self.scale == "window":
            return self.scale_windows(WindowArrays(self.prepare(r), np.zeros((r.shape[0], 0)),
                                                   np.arange(r.shape[0]) + self.horizon)).x
        return self.prepare(r, np.float32)

    @property
    def anchored(self) -> bool:
        """Whether a forecast is added to earlier target values (differences of any kind)."""
        return self.difference or self.seasonal > 0

    def levels(self, target: np.ndarray, *, what: str = "the data") -> np.ndarray:
        """``U``: the target's values, their logarithm with ``log`` (DataError for a value <= 0)."""
        t = np.asarray(target, dtype=np.float64)
        return transform_rows(t[..., None], log=self.log, names=(self.target,), what=what)[..., 0]

    def base(self, at: Callable[[int], np.ndarray]) -> np.ndarray | float:
        """``base`` of the class docstring, with ``at(k)`` = ``U`` ``k`` rows before each
        forecast's row (``k >= horizon``)."""
        h, m = self.horizon, self.seasonal
        b: np.ndarray | float = 0.0
        if m:
            b = b + at(m)
        if self.difference:
            b = b + at(h) - (at(h + m) if m else 0.0)
        return b

    def last_levels(self, rows: np.ndarray, target: np.ndarray | None) -> np.ndarray | None:
        """The target at each window's last data row, for a ``difference`` model: from
        ``rows`` when the target is a feature, else ``target`` (B,); None for other models."""
        if not self.difference:
            return None
        if self.target in self.features:
            return np.asarray(rows, dtype=np.float64)[:, -1, self.features.index(self.target)]
        if target is None:
            raise DataError(f"this model forecasts changes of {self.target!r}, which is not one of its "
                            f"features; give the value of {self.target!r} at each window's last row")
        t = np.asarray(target, dtype=np.float64)
        if t.shape != (np.asarray(rows).shape[0],):
            raise DataError(f"expected one value of {self.target!r} per window, shape "
                            f"({np.asarray(rows).shape[0]},); got shape {t.shape}")
        return t

    def _finish(self, z: np.ndarray, base: np.ndarray | float, pos: np.ndarray,
                stats: np.ndarray | None) -> np.ndarray:
        """``v_hat`` of the class docstring (``stats``: each window's ``(mu, sigma)`` with window
        scaling, else None); a forecast that is not finite (NaN, or an overflow mapping back) is
        a DataError, never returned."""
        with np.errstate(over="ignore", invalid="ignore"):
            zz = np.asarray(z, dtype=np.float64).reshape(-1, 1)
            if self.scale == "window":
                if stats is None or np.shape(stats) != (zz.shape[0], 2):
                    raise DataError(f"this model scales each window by its own statistics; expected "
                                    f"({zz.shape[0]}, 2) window statistics with its outputs, got "
                                    f"{None if stats is None else np.shape(stats)}")
                zz = zz * stats[:, 1:] + stats[:, :1]
            out = self.y_scaler.invert(zz)[:, 0] + base
            if self.log:
                out = np.exp(out)
        bad = np.flatnonzero(~np.isfinite(out))
        if bad.size:
            k = int(bad[0])
            raise DataError(f"the forecast for data row {int(np.asarray(pos)[k])} is not finite (network "
                            f"output {float(np.asarray(z).reshape(-1)[k]):.3g} in scaled units, "
                            f"{bad.size} such forecast(s)); the data or the model is outside the range "
                            f"the scaler can map back")
        return np.asarray(out, dtype=np.float64)

    def to_levels(self, z: np.ndarray, target: np.ndarray | None, pos: np.ndarray,
                  stats: np.ndarray | None = None) -> np.ndarray:
        """Network outputs (S, 1) or (S,) -> forecasts of the target at data rows ``pos`` in data
        units (the class docstring; ``target``, the target's data rows, anchors the
        differences; ``stats``, the windows' ``scale`` of :meth:`input_windows`, maps a window
        scaled model's outputs back). A forecast that is not finite is a DataError, never
        returned."""
        p = np.asarray(pos)
        base: np.ndarray | float = 0.0
        if self.anchored:
            if target is None:
                raise DataError(f"this model forecasts changes of {self.target!r}; the data must "
                                f"hold the {self.target!r} column")
            u = self.levels(target)
            base = self.base(lambda k: u[p - k])
        return self._finish(z, base, p, stats)

    def window_levels(self, z: np.ndarray, rows: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
        """Network outputs for :meth:`window_inputs` ``(rows)`` -> one forecast per window in
        data units (B,) float64; ``target`` as :meth:`last_levels` takes it."""
        r = np.asarray(rows, dtype=np.float64)
        n = int(r.shape[0])
        # window k's forecast is for "data row" k + horizon of a series whose row k is its last
        pos = np.arange(n) + self.horizon
        stats = self.window_stats(self.prepare(r)) if self.scale == "window" else None
        if not self.anchored:
            return self._finish(z, 0.0, pos, stats)
        if self.target in self.features:
            u = self.levels(r[:, :, self.features.index(self.target)])
            last = u.shape[1] - 1 + self.horizon          # the forecast row, in each window's rows
            return self._finish(z, self.base(lambda k: u[:, last - k]), pos, stats)
        last_row = self.last_levels(r, target)             # difference only: U at the last row
        assert last_row is not None                         # anchored, no seasonal lag: difference
        ul = self.levels(last_row)
        return self._finish(z, self.base(lambda k: ul), pos, stats)


@dataclass(frozen=True)
class Forecaster:
    """A network and the preprocessing it was trained with: what ``rnnkit predict`` and the
    model server run (``rnnkit.io.load_forecaster`` reads one from a model file).

    ``model`` is any model whose ``predict`` maps float32 windows (S, window, F) to (S, 1).
    """

    model: Any
    spec: ForecastSpec

    def network(self, x: np.ndarray) -> np.ndarray:
        """The network's outputs (S, 1) for scaled windows ``x``, in float64."""
        return np.asarray(self.model.predict(np.asarray(x, dtype=np.float32)), dtype=np.float64)

    def read_csv(self, path: str | os.PathLike[str], *, missing: str | None = None) -> Table:
        """:meth:`ForecastSpec.read_csv`."""
        return self.spec.read_csv(path, missing=missing)

    def predict_windows(self, rows: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
        """One forecast (data units, float64) per window of raw data rows ``rows`` (B,
        rows_needed, F); a ``difference`` model whose target is not a feature also needs the
        target at each window's last row (``target``, (B,))."""
        return self.spec.window_levels(self.network(self.spec.window_inputs(rows)), rows, target)

    def predict_prepared(self, windows: WindowArrays, target: np.ndarray | None) -> np.ndarray:
        """Forecasts in data units for prepared (scaled) ``windows`` at data rows ``windows.pos``
        (:meth:`ForecastSpec.to_levels`; ``target``, raw data rows, anchors the changes a
        ``difference`` model predicts), :data:`CHUNK` windows through the network at a time.
        Every forecast is checked (finite) before any is returned."""
        out = np.empty(len(windows))
        for a in range(0, len(windows), CHUNK):
            part = windows.take(slice(a, a + CHUNK))
            out[a:a + CHUNK] = self.spec.to_levels(self.network(part.x), target, part.pos, part.scale)
        return out

    def one_step(self, table: Table) -> tuple[np.ndarray, np.ndarray]:
        """``(pos, forecasts)``: a forecast for every complete window of ``table``'s feature
        rows, for data row ``pos`` (``horizon`` rows after the window's last; the last ones lie
        past the end of the table: :meth:`Table.labels` names them)."""
        w = self.spec.input_windows(table.matrix(list(self.spec.features)), what=table.path)
        return w.pos, self.predict_prepared(w, table.columns.get(self.spec.target))

    def recursive(self, table: Table, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """``(pos, forecasts)`` of the ``steps`` rows after ``table``'s last: from its last
        window, forecast the next row, append it to the window, repeat. Needs a model whose
        only feature is its target and whose horizon is 1, and 1 <= ``steps`` <=
        :data:`MAX_STEPS`."""
        path = self.path(table.columns.get(self.spec.target, np.empty(0)), steps, what=table.path)
        return np.arange(len(table), len(table) + steps), path

    def path(self, history: np.ndarray, steps: int, *, what: str = "the data") -> np.ndarray:
        """The ``steps`` values after ``history`` (raw levels of the target, oldest first): from
        its last window, forecast the next value, append it to the window, repeat. Needs a model
        whose only feature is its target and whose horizon is 1, and 1 <= ``steps`` <=
        :data:`MAX_STEPS`. The one recursion :meth:`recursive` and backtests run."""
        spec = self.spec
        steps = check_int(steps, "steps", "Forecaster.recursive", lo=1, hi=MAX_STEPS, error=DataError)
        if list(spec.features) != [spec.target] or spec.horizon != 1:
            raise DataError(
                f"recursive forecasts (--steps) need a model whose only feature is its target and whose "
                f"horizon is 1; this one reads {', '.join(spec.features)} and forecasts {spec.target!r} "
                f"{spec.horizon} ahead")
        need = spec.rows_needed
        target = np.asarray(history, dtype=np.float64)
        if len(target) < need:
            raise DataError(f"too few rows in {what}: {len(target)} row(s), but window "
                            f"{spec.window} needs at least {need}")
        hist = np.empty(need + steps)          # raw levels, each forecast appended
        hist[:need] = target[-need:]
        for k in range(steps):
            rows = hist[k:k + need, None][None]
            hist[need + k] = self.predict_windows(rows)[0]
        return hist[need:].copy()

__all__ = ["CHUNK", "MAX_STEPS", "SCALES", "SPEC_FORMAT", "SPEC_KEY", "WINDOW_STD_FLOOR", "ForecastSpec",
           "Forecaster"]
