"""``windows``: forecasting windows read lazily from a long series (an array or a NumPy memory
map), batch by batch — Keras' ``timeseries_dataset_from_array`` for the usual forecasting set-up.

With ``series`` of shape (N, F) (a 1-D series is read as (N, 1)), ``targets`` (default: the
series itself, then of the same N rows), ``r = sampling_rate`` and ``span = (window - 1) * r + 1``
rows per window, sample ``s`` is::

    x[s] = series[s : s + span : r]                  (window, F)
    y[s] = targets[s + span - 1 + horizon]           the row ``horizon`` steps after the window
    S    = N - span - horizon + 1                    samples, s = 0 .. S - 1

which is ``keras.utils.timeseries_dataset_from_array(series[:N - horizon],
targets[span - 1 + horizon:], sequence_length=window, sampling_rate=r,
batch_size=batch_size)`` (the same windows in the same batches; ``y`` keeps a feature axis:
(B, F_target)).

``target_offset=k`` instead of ``horizon`` is Keras' own convention: ``y[s] = targets[s + k]``,
the target counted from the window's FIRST row, and ``targets`` may have any number of rows:
``S = min(N - span + 1, len(targets) - k)``. ``target_offset=0`` with ``targets=t`` is
``timeseries_dataset_from_array(series, t, window, sampling_rate=r)``. Only the rows of the
batch asked for are read (a fancy index of the memory map); nothing else is copied. With
``shuffle=True`` the sample order is a permutation drawn from ``seed`` (a uint32/int64 index,
4 or 8 bytes per sample, the only memory that grows with ``S``) and redrawn on every
``on_epoch_end()``; the last batch may be smaller.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import check_bool
from rnnkit._numbers import check_int
from rnnkit._random import check_seed, make_rng
from rnnkit.data._dataset import Dataset, as_array, check_batch_index, check_dtype


def _as_rows(a: Any, what: str) -> np.ndarray:
    a = as_array(a, what, "windows")
    if a.ndim not in (1, 2) or a.dtype.kind not in "biuf":
        raise InvalidInputError(f"windows: {what} must be a 1-D or 2-D array of real numbers (rows, "
                                f"features), got dtype {a.dtype} shape {a.shape}")
    return a


class Windows(Dataset):
    """The batches of :func:`windows` (a :class:`~rnnkit.data.Dataset`)."""

    def __init__(self, series: Any, window: int, horizon: int | None, batch_size: int, shuffle: bool,
                 seed: int | None, targets: Any, dtype: Any, sampling_rate: int = 1,
                 target_offset: int | None = None) -> None:
        self.series = _as_rows(series, "series")
        self.targets = self.series if targets is None else _as_rows(targets, "targets")
        self.window = check_int(window, "window", "windows", lo=1)
        self.sampling_rate = check_int(sampling_rate, "sampling_rate", "windows", lo=1)
        self.batch_size = check_int(batch_size, "batch_size", "windows", lo=1)
        if horizon is not None and target_offset is not None:
            raise InvalidParameterError("windows: give horizon (counted after the window's last row) or "
                                        "target_offset (Keras': counted from its first row), not both")
        self.target_offset = (None if target_offset is None
                              else check_int(target_offset, "target_offset", "windows", lo=0))
        self.horizon = 1 if horizon is None else check_int(horizon, "horizon", "windows", lo=0)
        n = int(self.series.shape[0])
        self.span = (self.window - 1) * self.sampling_rate + 1
        if self.target_offset is None:
            if self.targets.shape[0] != n:
                raise InvalidInputError(f"windows: targets has {self.targets.shape[0]} rows, the series {n}; "
                                        f"expected the same (or pass target_offset=, Keras' convention, "
                                        f"for targets of another length)")
            self.samples = n - self.span - self.horizon + 1
            need = f"window {self.window} at sampling_rate {self.sampling_rate} and horizon {self.horizon}"
            least = self.span + self.horizon
        else:
            self.samples = min(n - self.span + 1, int(self.targets.shape[0]) - self.target_offset)
            need = (f"window {self.window} at sampling_rate {self.sampling_rate} with target_offset "
                    f"{self.target_offset} into {self.targets.shape[0]} target rows")
            least = self.span
        if self.samples < 1:
            raise InvalidInputError(f"windows: {n} rows are too few for {need} (need at least {least} rows"
                                    f"{' and a target row' if self.target_offset is not None else ''})")
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
        rows = s[:, None] + np.arange(0, self.span, self.sampling_rate)[None, :]
        x = self._cast(self.series[rows], "series", s)
        at = s + (self.span - 1 + self.horizon if self.target_offset is None else self.target_offset)
        y = self._cast(self.targets[at], "targets", s)
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
                f"sampling_rate={self.sampling_rate}, target_offset={self.target_offset}, "
                f"batch_size={self.batch_size}, batches={len(self)}, shuffle={self.shuffle})")


def windows(series: Any, window: int, horizon: int | None = None, batch_size: int = 128,
            shuffle: bool = False, seed: int | None = None, *, targets: Any = None, dtype: Any = "float32",
            sampling_rate: int = 1, target_offset: int | None = None) -> Windows:
    """Batches of (window, horizon-ahead target) pairs read lazily from ``series`` (see the
    module docstring); pass the result to ``fit`` / ``evaluate`` / ``predict``.

    ``series`` / ``targets``: arrays or ``np.memmap`` / ``np.load(..., mmap_mode="r")`` of
    shape (N,) or (N, F) of real numbers. ``horizon`` (default 1) counts from the window's last
    row: ``horizon=0`` targets the window's last row. ``sampling_rate``: every ``r``-th row
    goes into a window. ``target_offset``: Keras' convention instead of ``horizon`` (the module
    docstring).
    ``dtype``: of the batches, a float dtype; a value that does not fit it (it would become inf)
    raises InvalidInputError when its batch is read. ``shuffle``: a bool (TypeError otherwise).
    """
    return Windows(series, window, horizon, batch_size, shuffle, seed, targets, dtype, sampling_rate,
                   target_offset)
