"""Windowing a series into recurrent-layer input, and the scaler that travels with a model.

A forecaster reads ``window`` consecutive rows of its features and predicts the target
``horizon`` rows after the last one::

    x[s] = features[s : s + window]                       shape (window, F)
    y[s] = target[s + window - 1 + horizon]               the target row pos[s]
    S    = rows - window - horizon + 1                    samples (must be >= 1)

so ``make_windows`` returns ``x`` of shape (S, window, F), exactly the (batch, timesteps,
features) contract of a recurrent layer, ``y`` of shape (S, 1) and ``pos`` (S,).

The :class:`Scaler` maps each column through an optional variance-stabilising transform and
then standardises it with statistics fitted on the TRAINING rows only::

    z = (f(v) - mean) / std          f = identity | sqrt | log1p
    v = f^-1(z * std + mean)         sqrt^-1(u) = max(u, 0)^2, log1p^-1(u) = expm1(u)

A column whose training rows are constant gets ``std = 1`` (it is centred only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._numbers import check_int, show
from rnnkit._validate import resolve_dtype
from rnnkit.timeseries._csv import DataError

TRANSFORMS = ("none", "sqrt", "log1p")
F32_MAX = float(np.finfo(np.float32).max)
#: rows scaled at once
BLOCK = 1 << 16


@dataclass(frozen=True)
class WindowArrays:
    """``x`` (S, window, F) float, ``y`` (S, 1) float, ``pos`` (S,) the target row of each: the
    windows of a series cut at once, in memory (:class:`rnnkit.data.Windows` reads the windows
    of a series lazily, batch by batch, for ``fit``). ``scale`` (S, 2) float64: each window's own
    (mean, std) where the windows were scaled one by one
    (:meth:`~rnnkit.timeseries.ForecastSpec.scale_windows`), else None."""

    x: np.ndarray
    y: np.ndarray
    pos: np.ndarray
    scale: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.pos.shape[0])

    def take(self, sel: slice | np.ndarray) -> WindowArrays:
        return WindowArrays(self.x[sel], self.y[sel], self.pos[sel],
                            None if self.scale is None else self.scale[sel])


def count_windows(rows: int, window: int, horizon: int) -> int:
    """``rows - window - horizon + 1``, the number of complete (input, target) pairs."""
    rows = check_int(rows, "rows", "count_windows", lo=0)
    window = check_int(window, "window", "count_windows", lo=1)
    return rows - window - check_int(horizon, "horizon", "count_windows", lo=0) + 1


def make_windows(features: np.ndarray, target: np.ndarray | None, window: int, horizon: int,
                 *, dtype: Any = np.float32, what: str = "the data") -> WindowArrays:
    """Cut ``features`` (rows, F) into (S, window, F) inputs and their ``horizon``-ahead targets.

    ``x`` is a read-only strided view of ``features`` cast once to ``dtype`` (S windows cost
    the memory of the rows, not ``window`` times it); index it (``x[batch]``) to get a copy.

    With ``target=None`` every complete input window is returned (``rows - window + 1`` of
    them, for forecasting past the data); ``y`` is then empty-width (S, 0) and ``pos`` still
    names the row each forecast is for (which may lie past the last row).
    """
    window = check_int(window, "window", "make_windows", lo=1)
    horizon = check_int(horizon, "horizon", "make_windows", lo=1)
    dt = resolve_dtype(dtype, "make_windows")
    f = as_real_array(features, "features", "make_windows")
    if f.ndim != 2:
        raise DataError(f"make_windows: features must be (rows, F), got shape {f.shape}")
    rows = int(f.shape[0])
    if target is not None:
        target = as_real_array(target, "target", "make_windows")
        if target.ndim != 1 or target.shape[0] != rows:
            raise DataError(f"make_windows: target must be 1-D with one value per row of features ({rows}), "
                            f"got shape {target.shape}")
    need = window + (horizon if target is not None else 0)
    n = count_windows(rows, window, horizon) if target is not None else rows - window + 1
    if n < 1:
        raise DataError(
            f"too few rows in {what}: {rows} row(s), but window {window}"
            + (f" and horizon {horizon} need at least {need}" if target is not None
               else f" needs at least {window}")
        )
    flat = np.asarray(f, dtype=dt)
    # a read-only view: window s is rows s .. s + window - 1, nothing copied
    x = np.lib.stride_tricks.sliding_window_view(flat, window, axis=0)[:n].transpose(0, 2, 1)
    pos = np.arange(n) + window - 1 + horizon
    if target is None:
        return WindowArrays(x, np.zeros((n, 0), dtype=dtype), pos)
    return WindowArrays(x, np.asarray(target[pos], dtype=dtype)[:, None], pos)


@dataclass(frozen=True)
class Scaler:
    """Per-column ``z = (f(v) - mean) / std``; ``names`` label the columns (for messages)."""

    names: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    transform: str = "none"

    @classmethod
    def fit(cls, values: np.ndarray, names: list[str] | tuple[str, ...], transform: str = "none") -> Scaler:
        """Fit on ``values`` (rows, F) — pass the training rows only."""
        if not isinstance(transform, str) or transform not in TRANSFORMS:
            raise DataError(f"transform must be one of {', '.join(TRANSFORMS)}, got {show(transform)}")
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise DataError(f"Scaler.fit: names must be a list of column names (str), got {show(names)}")
        v = as_real_array(values, "values", "Scaler.fit").astype(np.float64)
        if v.ndim != 2 or v.shape[1] != len(names) or v.shape[0] < 1:
            raise DataError(f"Scaler.fit: expected ({'rows'}, {len(names)}) values, got shape {v.shape}")
        u = _forward(v, transform, tuple(names))
        with np.errstate(over="ignore", invalid="ignore"):
            mean = u.mean(axis=0)
            std = u.std(axis=0)
        for k, name in enumerate(names):
            if not (np.isfinite(mean[k]) and np.isfinite(std[k])):
                big = float(np.max(np.abs(v[:, k])))
                raise DataError(
                    f"column {name!r}: its values are too large to standardise (the largest magnitude "
                    f"is {big:.3g}; its mean or standard deviation overflows float64); rescale the column")
        std = np.where(std > 0, std, 1.0)
        return cls(tuple(names), mean, std, transform)

    def __post_init__(self) -> None:
        if not isinstance(self.names, tuple) or not all(isinstance(n, str) for n in self.names):
            raise DataError(f"Scaler: names must be a tuple of column names (str), got {show(self.names)}")
        if not isinstance(self.transform, str) or self.transform not in TRANSFORMS:
            raise DataError(f"Scaler: transform must be one of {', '.join(TRANSFORMS)}, "
                            f"got {show(self.transform)}")
        mean = as_real_array(self.mean, "mean", "Scaler").astype(np.float64)
        std = as_real_array(self.std, "std", "Scaler").astype(np.float64)
        if mean.shape != (len(self.names),) or std.shape != (len(self.names),):
            raise DataError(f"Scaler: expected {len(self.names)} means and standard deviations, got "
                            f"shapes {mean.shape} and {std.shape}")
        if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
            raise DataError(f"Scaler: means must be finite and standard deviations finite and > 0, got "
                            f"mean {mean.tolist()}, std {std.tolist()}")
        if self.transform not in TRANSFORMS:
            raise DataError(f"Scaler: transform must be one of {', '.join(TRANSFORMS)}, "
                            f"got {self.transform!r}")

    def apply(self, values: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
        """Scale (rows, F) values into a new ``dtype`` array, a block of rows at a time (no
        full-size temporaries). A scaled value beyond float32's range (the network's input
        type) is a DataError naming the column and the row (0-based); NaN stays NaN."""
        v = as_real_array(values, "values", "Scaler.apply").astype(np.float64)
        if v.ndim != 2 or v.shape[1] != len(self.names):
            raise DataError(f"Scaler.apply: expected values (rows, {len(self.names)}) (one column per name), "
                            f"got shape {v.shape}")
        dt = resolve_dtype(dtype, "Scaler.apply")
        flat = v.reshape(len(v), -1)
        out = np.empty(flat.shape, dtype=dt)
        for a in range(0, len(flat), BLOCK):
            u = _forward(flat[a:a + BLOCK], self.transform, self.names)
            with np.errstate(over="ignore", invalid="ignore"):
                z = (u - self.mean) / self.std
            bad = ~(np.abs(z) <= F32_MAX) & ~np.isnan(u)
            if bad.any():
                r, c = (int(i) for i in np.argwhere(bad)[0])
                raise DataError(f"column {self.names[c]!r}: row {a + r} holds {float(u[r, c]):.3g}, "
                                f"which scales to {float(z[r, c]):.3g} (mean {self.mean[c]:.3g}, std "
                                f"{self.std[c]:.3g}), beyond float32's range {F32_MAX:.3g}")
            out[a:a + BLOCK] = z
        return out.reshape(v.shape)

    def invert(self, scaled: np.ndarray) -> np.ndarray:
        """Back to data units (float64 out; an overflow gives inf, see
        :meth:`ForecastSpec.to_levels`)."""
        with np.errstate(over="ignore", invalid="ignore"):
            u = as_real_array(scaled, "scaled", "Scaler.invert").astype(np.float64) * self.std + self.mean
            if self.transform == "sqrt":
                return np.square(np.maximum(u, 0.0))
            if self.transform == "log1p":
                return np.expm1(u)
        return u

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "mean": [float(m) for m in self.mean],
                "std": [float(s) for s in self.std], "transform": self.transform}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scaler:
        return cls(tuple(d["names"]), np.asarray(d["mean"], dtype=np.float64),
                   np.asarray(d["std"], dtype=np.float64), str(d.get("transform", "none")))


def _forward(v: np.ndarray, transform: str, names: tuple[str, ...]) -> np.ndarray:
    if transform == "sqrt":
        bad = np.flatnonzero((v < 0).any(axis=0))
        if bad.size:
            raise DataError(f"transform 'sqrt' needs values >= 0; column {names[bad[0]]!r} has negatives")
        return np.sqrt(v)
    if transform == "log1p":
        bad = np.flatnonzero((v <= -1).any(axis=0))
        if bad.size:
            raise DataError(f"transform 'log1p' needs values > -1; column {names[bad[0]]!r} has some <= -1")
        return np.log1p(v)
    return v
