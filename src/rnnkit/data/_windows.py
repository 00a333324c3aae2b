"""``windows``: forecasting windows read lazily from a long series (an array or a NumPy memory
map), batch by batch — Keras' ``timeseries_dataset_from_array`` for the usual forecasting set-up.

With ``series`` of shape (N, F) (a 1-D series is read as (N, 1)) and ``targets`` (default: the
series itself), sample ``s`` is::

    x[s] = series[s : s + window]                    (window, F)
    y[s] = targets[s + window - 1 + horizon]         the row ``horizon`` steps after the window
    S    = N - window - horizon + 1                  samples, s = 0 .. S - 1

which is ``keras.utils.timeseries_dataset_from_array(series[:N - horizon],
targets[window - 1 + horizon:], sequence_length=window, batch_size=batch_size)`` (the same
windows in the same batches; ``y`` keeps a feature axis: (B, F_target)). Only the rows of the
batch asked for are read (a fancy index of the memory map); nothing else is copied. With
``shuffle=True`` the sample order is a permutation drawn from ``seed`` (a uint32/int64 index,
4 or 8 bytes per sample, the only memory that grows with ``S``) and redrawn on every
``on_epoch_end()``; the last batch may be smaller.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError
from rnnkit._layer import check_bool
from rnnkit._random import check_seed, make_rng
from rnnkit.data._dataset import Dataset, as_array, check_batch_index, check_count, check_dtype


def _as_rows(a: Any, what: str) -> np.ndarray:
    a = as_array(a, what, "windows")
    if a.ndim not in (1, 2) or a.dtype.kind not in "biuf":
        raise InvalidInputError(f"windows: {what} must be a 1-D or 2-D array of real numbers (rows, "
                                f"features), got dtype {a.dtype} shape {a.shape}")
    return a


class Windows(Dataset):
    """The batches of :func:`windows` (a :class:`~rnnkit.data.Dataset`)."""

    def __init__(self, series: Any, window: int, horizon: int, batch_size: int, shuffle: bool,
                 seed: int | None, targets: Any, dtype: Any) -> None:
        self.series = _as_rows(series, "series")
        self.targets = self.series if targets is None else _as_rows(targets, "targets")
        self.window = check_count(window, "window", "windows")
        self.horizon = check_count(horizon, "horizon", "windows", lo=0)
        self.batch_size = check_count(batch_size, "batch_size", "windows")
        if self.targets.shape[0] != self.series.shape[0]:
            raise InvalidInputError(f"windows: targets has {self.targets.shape[0]} rows, the series "
                                    f"{self.series.shape[0]}; expected the same")
        n = int(self.series.shape[0])
        self.samples = n - self.window - self.horizon + 1
        if self.samples < 1:
            raise InvalidInputError(f"windows: {n} rows are too few for window {self.window} and horizon "
                                    f"{self.horizon} (need at least {self.window + self.horizon})")
        self.shuffle = check_bool(shuffle, "shuffle", "windows")
        self.dtype = check_dtype(dtype, "windows", kinds="f")
        self._rng = make_rng(check_seed(seed, "windows"))
        self._order: np.ndarray | None = None
        if self.shuffle:
            self._draw()

    def _draw(self) -> None:
        dt = np.uint32 if self.samples < 2**32 else np.int64
        order = np.arange(self.samples, dtype=dt)
        self._rng.shuffle(order)  # in place: no second copy of the index
        self._order = order

    def __len__(self) -> int:
        return -(-self.samples // self.batch_size)

    def starts(self, index: int) -> np.ndarray:
        """The first row of each window in batch ``index``."""
        i = check_batch_index(index, len(self), "windows")
        lo, hi = i * self.batch_size, min((i + 1) * self.batch_size, self.samples)
        return (np.arange(lo, hi, dtype=np.int64) if self._order is None
                else self._order[lo:hi].astype(np.int64))

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        s = self.starts(index)
        rows = s[:, None] + np.arange(self.window)[None, :]
        x = self._cast(self.series[rows], "series", s)
        y = self._cast(self.targets[s + self.window - 1 + self.horizon], "targets", s)
        if x.ndim == 2:
            x = x[:, :, None]
        if y.ndim == 1:
            y = y[:, None]
        return x, y

    def _cast(self, src: np.ndarray, what: str, starts: np.ndarray) -> np.ndarray:
        """``src`` (rows read for a batch) in the batches' dtype; InvalidInputError where a finite
        value becomes inf (a float64 series beyond float32's range)."""
        with np.errstate(over="ignore"):
            out = np.asarray(src, dtype=self.dtype)
        if (src.dtype.kind == "f" and out.dtype.itemsize < src.dtype.itemsize) or src.dtype.kind in "iu":
            lost = np.isinf(out)
            if src.dtype.kind == "f" and lost.any():
                lost &= ~np.isinf(src)       # an inf of the data itself is the data's (fit refuses it)
            if lost.any():
                pos = tuple(int(i) for i in np.argwhere(lost)[0])
                raise InvalidInputError(
                    f"windows: {what} holds {src[pos].item()!r} (in the batch of windows starting at row "
                    f"{int(starts[pos[0]])}), beyond dtype {self.dtype}'s largest value; pass "
                    f"dtype='float64' or scale the data")
        return out

    def on_epoch_end(self) -> None:
        if self.shuffle:
            self._draw()

    def __repr__(self) -> str:
        return (f"Windows(samples={self.samples}, window={self.window}, horizon={self.horizon}, "
                f"batch_size={self.batch_size}, batches={len(self)}, shuffle={self.shuffle})")


def windows(series: Any, window: int, horizon: int = 1, batch_size: int = 128, shuffle: bool = False,
            seed: int | None = None, *, targets: Any = None, dtype: Any = "float32") -> Windows:
    """Batches of (window, horizon-ahead target) pairs read lazily from ``series`` (see the
    module docstring); pass the result to ``fit`` / ``evaluate`` / ``predict``.

    ``series`` / ``targets``: arrays or ``np.memmap`` / ``np.load(..., mmap_mode="r")`` of
    shape (N,) or (N, F) of real numbers. ``horizon=0`` targets the window's last row.
    ``dtype``: of the batches, a float dtype; a value that does not fit it (it would become inf)
    raises InvalidInputError when its batch is read. ``shuffle``: a bool (TypeError otherwise).
    """
    return Windows(series, window, horizon, batch_size, shuffle, seed, targets, dtype)
