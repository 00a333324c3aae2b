"""``Dataset``: batches by index, as Keras' ``PyDataset`` — what ``fit``, ``evaluate`` and
``predict`` take besides arrays and generators.

A subclass defines ``__len__`` (batches per epoch) and ``__getitem__(i)`` -> one batch, a tuple
``(x, y)`` or ``(x, y, sample_weight)`` (``x`` alone for ``predict``), each an array or a list
of arrays (one per model input / output). ``fit`` asks for batches ``0 .. len - 1`` in order
each epoch and calls ``on_epoch_end()`` after every epoch (reshuffle there). Batches may differ
in shape where the model allows (a free time axis).
"""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidParameterError


class Dataset:
    """Base class (see the module docstring). ``on_epoch_end`` does nothing by default."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError

    def on_epoch_end(self) -> None:
        """Called by ``fit`` after every epoch."""

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self[i]


def check_batch_index(index: Any, n: int, where: str) -> int:
    """``index`` as an int in ``[-n, n)`` (negative counts from the end), else IndexError."""
    if isinstance(index, bool) or not hasattr(index, "__index__"):
        raise TypeError(f"{where}: a batch index must be an int, got {index!r}")
    i = int(index)
    if not -n <= i < n:
        raise IndexError(f"{where}: batch {i} out of range; there are {n} batches")
    return i % n


def check_count(value: Any, what: str, where: str, lo: int = 1) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < lo:
        raise InvalidParameterError(f"{where}: {what} must be an int >= {lo}, got {value!r}")
    return int(value)
