"""``bucket_by_length``: batches of variable-length sequences grouped by length, padded only to
the longest sequence of their batch, with the lengths attached.

``sequences`` is a list of arrays of shape (T_i,) (token ids) or (T_i, F). Each epoch:

- ``bucket_width=None``: sequences are ordered by length (ties in random order when
  ``shuffle``) and cut into batches of ``batch_size``; the batch order is shuffled.
- ``bucket_width=w``: sequence ``i`` goes to bucket ``T_i // w``; each bucket is shuffled and
  cut into batches of ``batch_size`` (the last of a bucket may be smaller), and the batch order
  is shuffled. A batch then pads by less than ``w`` steps per sequence.

Batch ``b`` is ``(x, y)``: ``x`` of shape (B, T_max, ...) with ``pad_value`` after each
sequence's end, ``y`` the targets of those sequences (stacked; ``None`` targets give ``x``
alone). ``lengths(b)`` gives the (B,) lengths and ``mask(b)`` the matching
``rnnkit.Mask(lengths=...)`` (PyTorch's packed semantics: steps past a length are padding).
``indices(b)`` names the sequences of the batch. Every sequence is in exactly one batch per
epoch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import check_bool
from rnnkit._mask import Mask
from rnnkit._numbers import check_float, check_int
from rnnkit._random import check_seed, make_rng
from rnnkit.data._dataset import Dataset, as_array, check_batch_index, check_cast, check_dtype


class Buckets(Dataset):
    """The batches of :func:`bucket_by_length` (a :class:`~rnnkit.data.Dataset`)."""

    def __init__(self, sequences: Any, batch_size: int, targets: Any, bucket_width: int | None,
                 shuffle: bool, seed: int | None, pad_value: float, dtype: Any) -> None:
        where = "bucket_by_length"
        if not isinstance(sequences, (list, tuple)) or not sequences:
            raise InvalidInputError(f"{where}: sequences must be a non-empty list of arrays, got "
                                    f"{type(sequences).__name__}")
        self.sequences = [as_array(s, f"sequence {i}", where) for i, s in enumerate(sequences)]
        tail = self.sequences[0].shape[1:]
        for i, s in enumerate(self.sequences):
            if s.ndim < 1 or s.shape[1:] != tail or s.dtype.kind not in "biuf":
                raise InvalidInputError(f"{where}: sequence {i} has dtype {s.dtype} shape "
                                        f"{s.shape}; expected real numbers of shape (T,{' ' if tail else ''}"
                                        f"{', '.join(map(str, tail))}) like sequence 0")
        self.lengths_all = np.array([s.shape[0] for s in self.sequences], dtype=np.int64)
        self.targets = None if targets is None else as_array(targets, "targets", where)
        if self.targets is not None:
            if self.targets.ndim < 1 or self.targets.dtype.kind not in "biuf":
                raise InvalidInputError(f"{where}: targets must be an array of real numbers with one row "
                                        f"per sequence, got dtype {self.targets.dtype} shape "
                                        f"{self.targets.shape}")
            if self.targets.shape[0] != len(self.sequences):
                raise InvalidInputError(f"{where}: {self.targets.shape[0]} targets for "
                                        f"{len(self.sequences)} sequences")
        self.batch_size = check_int(batch_size, "batch_size", where, lo=1)
        self.bucket_width = check_int(bucket_width, "bucket_width", where, lo=1, hi=None, none_ok=True)
        self.shuffle = check_bool(shuffle, "shuffle", where)
        self.dtype = None if dtype is None else check_dtype(dtype, where)
        out = self.dtype if self.dtype is not None else np.result_type(*(s.dtype for s in self.sequences))
        if self.dtype is not None:
            for i, s in enumerate(self.sequences):
                check_cast(s, out, f"sequence {i}", where)
        self.pad_value = pad_value_of(pad_value, out, where)
        self._out = out
        self._rng = make_rng(check_seed(seed, where))
        self._batches: list[np.ndarray] = []
        self._plan()

    def _plan(self) -> None:
        n, bs = len(self.sequences), self.batch_size
        tie = self._rng.permutation(n) if self.shuffle else np.arange(n)
        if self.bucket_width is None:
            order = tie[np.argsort(self.lengths_all[tie], kind="stable")]
            batches = [order[a:a + bs] for a in range(0, n, bs)]
        else:
            width = min(self.bucket_width, int(self.lengths_all.max()) + 1)   # wider: one bucket, as this
            keys = self.lengths_all[tie] // width
            batches = []
            for k in np.unique(keys):
                members = tie[keys == k]
                batches += [members[a:a + bs] for a in range(0, len(members), bs)]
        if self.shuffle:
            batches = [batches[i] for i in self._rng.permutation(len(batches))]
        self._batches = batches

    def __len__(self) -> int:
        return len(self._batches)

    def indices(self, index: int) -> np.ndarray:
        return self._batches[check_batch_index(index, len(self), "bucket_by_length")]

    def lengths(self, index: int) -> np.ndarray:
        return self.lengths_all[self.indices(index)]

    def mask(self, index: int) -> Mask:
        return Mask(lengths=self.lengths(index))

    def __getitem__(self, index: int) -> Any:
        idx = self.indices(index)
        lens = self.lengths_all[idx]
        first = self.sequences[0]
        x = np.full((len(idx), int(lens.max()), *first.shape[1:]), self.pad_value, dtype=self._out)
        for row, i in enumerate(idx):
            x[row, :lens[row]] = self.sequences[i]
        if self.targets is None:
            return x
        return x, self.targets[idx]

    def on_epoch_end(self) -> None:
        if self.shuffle:
            self._plan()


def pad_value_of(value: Any, dt: np.dtype, where: str, arg: str = "pad_value") -> Any:
    """``value`` (the argument ``arg``) as a number of the batches' dtype ``dt``: a finite real
    number (not a bool) that ``dt`` holds exactly (0.5 in an int dtype, 1e40 in float32, 300 in
    uint8 are refused)."""
    fv = check_float(value, arg, where)
    if dt.kind == "b":
        if fv not in (0.0, 1.0):
            raise InvalidParameterError(f"{where}: {arg} {value!r} is not a value of the batches' dtype "
                                        f"bool (0 or 1)")
        return dt.type(fv == 1.0)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        iv = (check_int(value, arg, where) if isinstance(value, (int, np.integer))
              else int(fv) if fv.is_integer() else None)
        if iv is None or not info.min <= iv <= info.max:
            raise InvalidParameterError(f"{where}: {arg} {value!r} is not a value of the batches' dtype "
                                        f"{dt} (integers in [{info.min}, {info.max}])")
        return dt.type(iv)
    if abs(float(value)) > float(np.finfo(dt).max):
        raise InvalidParameterError(f"{where}: {arg} {value!r} is beyond the batches' dtype {dt} "
                                    f"(largest {float(np.finfo(dt).max)!r})")
    return dt.type(value)


def bucket_by_length(sequences: Any, batch_size: int, targets: Any = None, *, bucket_width: int | None = None,
                     shuffle: bool = True, seed: int | None = None, pad_value: float = 0,
                     dtype: Any = None) -> Buckets:
    """Batches of sequences of similar length (see the module docstring); pass the result to
    ``fit`` / ``evaluate`` / ``predict``. ``dtype``: of ``x``, an int or float dtype (default: the
    sequences' common dtype, ``np.result_type`` of theirs: ints and floats give floats). Every argument
    is checked here: ``shuffle`` a bool, ``pad_value`` a finite number the dtype holds exactly,
    ``targets`` one row per sequence, and with ``dtype`` every sequence's values must survive
    the cast (no float truncated to an int, no int out of range, no finite value made inf)."""
    return Buckets(sequences, batch_size, targets, bucket_width, shuffle, seed, pad_value, dtype)
