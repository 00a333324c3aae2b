"""``timeseries_dataset``: Keras' ``timeseries_dataset_from_array`` as a batch source that
``fit`` / ``evaluate`` / ``predict`` take directly, read lazily from an array or a memory map.

With ``start = start_index or 0`` and ``end = end_index or len(data)``, the windows start at
the positions ``p = 0, s, 2s, ...`` (``s = sequence_stride``) below::

    S = end - start - (sequence_length - 1) * sampling_rate     (and at most len(targets))
    x[p] = data[start + p : start + p + sequence_length * sampling_rate : sampling_rate]
    y[p] = targets[start + p]                                   the target goes with the window
                                                                starting at the same row

so ``targets`` offset by ``k`` rows (``targets=data[k:]``, ``targets=series[seq_len + h - 1:]``)
give the row ``k`` after each window's first — Keras' forecasting set-up. Batches hold
``batch_size`` windows in that order (the last may be smaller); ``x`` has shape
``(B, sequence_length, *data.shape[1:])`` and ``y`` ``(B, *targets.shape[1:])``, both in the
arrays' own dtypes, as Keras gives them. ``targets=None``: batches are ``x`` alone (for
``predict``). ``shuffle=True``: the window order is a permutation drawn from ``seed`` (rnnkit's
generator), redrawn after every epoch — the same windows and targets as Keras, in another order
(Keras shuffles with TensorFlow's own generator).

Refused with a typed error, where Keras would too or would give an empty dataset: a
``start_index`` / ``end_index`` outside the data or in the wrong order, counts below 1, targets
with fewer rows than ``start``, and arguments that leave no window. ``end_index=len(data)`` is
accepted (Keras refuses it; it means the same as None).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import check_bool
from rnnkit._numbers import check_int
from rnnkit._random import check_seed, make_rng
from rnnkit.data._dataset import Dataset, as_array, check_batch_index

_WHERE = "timeseries_dataset"


def _rows(a: Any, what: str) -> np.ndarray:
    arr = as_array(a, what, _WHERE)
    if arr.ndim < 1 or arr.dtype.kind not in "biuf":
        raise InvalidInputError(f"{_WHERE}: {what} must be an array of real numbers with time on axis 0, got "
                                f"dtype {arr.dtype} shape {arr.shape}")
    return arr


def _index(value: Any, what: str, lo: int, hi: int, n: int) -> int:
    return check_int(value, what, f"{_WHERE} (the data has {n} rows)", lo=lo, hi=hi)


class TimeseriesDataset(Dataset):
    """The batches of :func:`timeseries_dataset` (a :class:`~rnnkit.data.Dataset`)."""

    def __init__(self, data: Any, targets: Any, sequence_length: int, sequence_stride: int,
                 sampling_rate: int, batch_size: int, shuffle: bool, seed: int | None,
                 start_index: int | None, end_index: int | None) -> None:
        self.data = _rows(data, "data")
        self.targets = None if targets is None else _rows(targets, "targets")
        n = int(self.data.shape[0])
        self.sequence_length = check_int(sequence_length, "sequence_length", _WHERE, lo=1)
        self.sequence_stride = check_int(sequence_stride, "sequence_stride", _WHERE, lo=1)
        self.sampling_rate = check_int(sampling_rate, "sampling_rate", _WHERE, lo=1)
        if batch_size is None:
            raise InvalidParameterError(f"{_WHERE}: batch_size must be an int >= 1, got None (Keras' None "
                                        f"gives single unbatched samples; fit takes batches)")
        self.batch_size = check_int(batch_size, "batch_size", _WHERE, lo=1)
        self.shuffle = check_bool(shuffle, "shuffle", _WHERE)
        self.start = 0 if start_index is None else _index(start_index, "start_index", 0, n - 1, n)
        self.end = n if end_index is None else _index(end_index, "end_index", 1, n, n)
        if self.end <= self.start:
            raise InvalidParameterError(f"{_WHERE}: end_index {self.end} must be above start_index "
                                        f"{self.start}")
        span = (self.sequence_length - 1) * self.sampling_rate + 1
        count = self.end - self.start - span + 1
        if self.targets is not None:
            if self.targets.shape[0] <= self.start:
                raise InvalidInputError(f"{_WHERE}: targets has {self.targets.shape[0]} rows; the first "
                                        f"window starts at row {self.start} and needs its target there")
            count = min(count, int(self.targets.shape[0]) - self.start)
        if count < 1:
            raise InvalidInputError(
                f"{_WHERE}: no window fits: rows {self.start}..{self.end - 1} ({self.end - self.start} rows) "
                f"are fewer than one window of sequence_length {self.sequence_length} at sampling_rate "
                f"{self.sampling_rate} spans ({span} rows)")
        self.positions = np.arange(0, count, self.sequence_stride, dtype=np.int64)
        self.samples = int(self.positions.shape[0])
        self._rng = make_rng(check_seed(seed, _WHERE))
        self._order: np.ndarray | None = None
        if self.shuffle:
            self._order = self._rng.permutation(self.positions)

    def __len__(self) -> int:
        return -(-self.samples // self.batch_size)

    def starts(self, index: int) -> np.ndarray:
        """The first data row (counted from ``start_index``) of each window of batch ``index``."""
        i = check_batch_index(index, len(self), _WHERE)
        order = self.positions if self._order is None else self._order
        return order[i * self.batch_size:(i + 1) * self.batch_size]

    def __getitem__(self, index: int) -> Any:
        p = self.starts(index) + self.start
        steps = np.arange(0, self.sequence_length * self.sampling_rate, self.sampling_rate)
        rows = p[:, None] + steps[None, :]
        x = np.asarray(self.data[rows])
        if self.targets is None:
            return x
        return x, np.asarray(self.targets[p])

    def on_epoch_end(self) -> None:
        if self.shuffle:
            self._order = self._rng.permutation(self.positions)

    def __repr__(self) -> str:
        return (f"TimeseriesDataset(samples={self.samples}, sequence_length={self.sequence_length}, "
                f"sequence_stride={self.sequence_stride}, sampling_rate={self.sampling_rate}, "
                f"batch_size={self.batch_size}, batches={len(self)}, shuffle={self.shuffle})")


def timeseries_dataset(data: Any, targets: Any, sequence_length: int, sequence_stride: int = 1,
                       sampling_rate: int = 1, batch_size: int = 128, shuffle: bool = False,
                       seed: int | None = None, start_index: int | None = None,
                       end_index: int | None = None) -> TimeseriesDataset:
    """Windows of ``data`` with their ``targets``, batched (Keras'
    ``timeseries_dataset_from_array``; see the module docstring). Pass the result to ``fit``
    / ``evaluate`` / ``predict``.

    ``data``: an array or memory map, time on axis 0; ``targets``: None, or an array whose row
    ``i`` is the target of the window starting at row ``i``; ``sequence_length``,
    ``sequence_stride``, ``sampling_rate``, ``batch_size``: ints >= 1; ``start_index`` /
    ``end_index``: the rows used, ``data[start_index:end_index]``."""
    return TimeseriesDataset(data, targets, sequence_length, sequence_stride, sampling_rate, batch_size,
                             shuffle, seed, start_index, end_index)
