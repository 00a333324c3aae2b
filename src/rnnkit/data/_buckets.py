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

from rnnkit._errors import InvalidInputError
from rnnkit._mask import Mask
from rnnkit._random import check_seed, make_rng
from rnnkit.data._dataset import Dataset, check_batch_index, check_count


class Buckets(Dataset):
    """The batches of :func:`bucket_by_length` (a :class:`~rnnkit.data.Dataset`)."""

    def __init__(self, sequences: Any, batch_size: int, targets: Any, bucket_width: int | None,
                 shuffle: bool, seed: int | None, pad_value: float, dtype: Any) -> None:
        if not isinstance(sequences, (list, tuple)) or not sequences:
            raise InvalidInputError("bucket_by_length: sequences must be a non-empty list of arrays")
        self.sequences = [np.asarray(s) for s in sequences]
        tail = self.sequences[0].shape[1:]
        for i, s in enumerate(self.sequences):
            if s.ndim < 1 or s.shape[1:] != tail or s.dtype.kind not in "biuf":
                raise InvalidInputError(f"bucket_by_length: sequence {i} has dtype {s.dtype} shape "
                                        f"{s.shape}; expected real numbers of shape (T,{' ' if tail else ''}"
                                        f"{', '.join(map(str, tail))}) like sequence 0")
        self.lengths_all = np.array([s.shape[0] for s in self.sequences], dtype=np.int64)
        self.targets = None if targets is None else np.asarray(targets)
        if self.targets is not None and self.targets.shape[0] != len(self.sequences):
            raise InvalidInputError(f"bucket_by_length: {self.targets.shape[0]} targets for "
                                    f"{len(self.sequences)} sequences")
        self.batch_size = check_count(batch_size, "batch_size", "bucket_by_length")
        self.bucket_width = None if bucket_width is None else check_count(bucket_width, "bucket_width",
                                                                            "bucket_by_length")
        self.shuffle, self.pad_value = bool(shuffle), pad_value
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._rng = make_rng(check_seed(seed, "bucket_by_length"))
        self._batches: list[np.ndarray] = []
        self._plan()

    def _plan(self) -> None:
        n, bs = len(self.sequences), self.batch_size
        tie = self._rng.permutation(n) if self.shuffle else np.arange(n)
        if self.bucket_width is None:
            order = tie[np.argsort(self.lengths_all[tie], kind="stable")]
            batches = [order[a:a + bs] for a in range(0, n, bs)]
        else:
            keys = self.lengths_all[tie] // self.bucket_width
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
        dt = self.dtype if self.dtype is not None else first.dtype
        x = np.full((len(idx), int(lens.max()), *first.shape[1:]), self.pad_value, dtype=dt)
        for row, i in enumerate(idx):
            x[row, :lens[row]] = self.sequences[i]
        if self.targets is None:
            return x
        return x, self.targets[idx]

    def on_epoch_end(self) -> None:
        if self.shuffle:
            self._plan()


def bucket_by_length(sequences: Any, batch_size: int, targets: Any = None, *, bucket_width: int | None = None,
                     shuffle: bool = True, seed: int | None = None, pad_value: float = 0,
                     dtype: Any = None) -> Buckets:
    """Batches of sequences of similar length (see the module docstring); pass the result to
    ``fit`` / ``evaluate`` / ``predict``. ``dtype``: of ``x`` (default: the sequences')."""
    return Buckets(sequences, batch_size, targets, bucket_width, shuffle, seed, pad_value, dtype)
