"""``Dataset``: batches by index, as Keras' ``PyDataset`` — what ``fit``, ``evaluate`` and
``predict`` take besides arrays and generators.

A subclass defines ``__len__`` (batches per epoch) and ``__getitem__(i)`` -> one batch, a tuple
``(x, y)`` or ``(x, y, sample_weight)`` (``x`` alone for ``predict``), each an array or a list
of arrays (one per model input / output). ``fit`` asks for batches ``0 .. len - 1`` in order
each epoch and calls ``on_epoch_end()`` after every epoch (reshuffle there). Batches may differ
in shape where the model allows (a free time axis).

Keras' ``PyDataset(workers=, use_multiprocessing=, max_queue_size=)`` keywords, for a subclass
that calls ``super().__init__(**kwargs)``: ``workers=0`` reads every batch in the training
thread; ``workers >= 1`` reads ahead on ONE background thread (rnnkit reads in order on one
thread whatever the number, so results are bit-identical to ``workers=0``), up to
``max_queue_size`` batches ahead (default 1). They apply where ``fit`` / ``evaluate`` /
``predict`` are given no ``workers=`` of their own (that counts the batches read ahead and
wins). ``use_multiprocessing=True`` is refused: worker processes would need the dataset
pickled, which rnnkit never does; NumPy work in ``__getitem__`` releases the GIL, so a thread
already overlaps it with training.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._numbers import check_int


class BatchIndexError(InvalidInputError, IndexError):
    """A batch index out of range (also an ``IndexError``, as Python's sequences raise, so a
    ``for`` loop over ``ds[i]`` ends there)."""


class Dataset:
    """Base class (see the module docstring). ``on_epoch_end`` does nothing by default."""

    #: Keras' keywords as given to ``__init__`` (None: not given; see the module docstring)
    workers: int | None = None
    max_queue_size: int | None = None
    use_multiprocessing: bool = False

    def __init__(self, workers: int | None = None, use_multiprocessing: bool = False,
                 max_queue_size: int | None = None) -> None:
        where = type(self).__name__
        if use_multiprocessing is not False:
            raise InvalidParameterError(
                f"{where}: use_multiprocessing must be False, got {use_multiprocessing!r}; rnnkit reads "
                f"batches on a thread (workers=), never in other processes: those would need the dataset "
                f"pickled, which rnnkit does not do, and NumPy work in __getitem__ releases the GIL anyway")
        self.workers = None if workers is None else check_int(workers, "workers", where, lo=0)
        self.max_queue_size = None if max_queue_size is None else check_int(max_queue_size,
                                                                                "max_queue_size", where, lo=1)

    def prefetch(self) -> int | None:
        """How many batches ``fit`` reads ahead when it is given no ``workers=``: 0 for
        ``workers=0``, else ``max_queue_size`` (1 when not given); None when neither was given."""
        if self.workers is None and self.max_queue_size is None:
            return None
        return 0 if self.workers == 0 else (self.max_queue_size or 1)

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
    """``index`` as an int in ``[-n, n)`` (negative counts from the end), else
    :class:`BatchIndexError` (TypeError for a non-int)."""
    i = check_int(index, "a batch index", where, hi=None, error=TypeError)
    if not -n <= i < n:
        raise BatchIndexError(f"{where}: batch {i} out of range; there are {n} batches")
    return i % n


def as_array(value: Any, what: str, where: str) -> np.ndarray:
    """``value`` as an array (an ndarray, a memory map as it is), or InvalidInputError naming
    ``what`` when numpy cannot make one (a ragged list)."""
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as e:
        raise InvalidInputError(f"{where}: {what} is not an array ({type(value).__name__}: {e})") from None


def check_dtype(dtype: Any, where: str, kinds: str = "iuf") -> np.dtype:
    """``dtype`` as a numpy dtype of one of ``kinds`` (``"iuf"``: ints and floats), else
    InvalidParameterError naming it."""
    try:
        dt = np.dtype(dtype) if dtype is not None and not isinstance(dtype, bool) else None
    except (TypeError, ValueError):
        dt = None
    if dt is None or dt.kind not in kinds:
        allowed = "a float dtype" if kinds == "f" else "an int or float dtype"
        raise InvalidParameterError(f"{where}: dtype must be {allowed} (e.g. 'float32'), got {dtype!r}")
    return dt


def check_cast(a: np.ndarray, dt: np.dtype, what: str, where: str) -> None:
    """InvalidInputError unless every value of ``a`` survives the cast to ``dt``: a float to an
    int dtype, an int outside ``dt``'s range, or a finite value beyond a float ``dt``'s range
    (which would become inf) is refused; floats rounding to a narrower float is fine."""
    if a.dtype == dt or a.size == 0 or a.dtype.kind == "b":
        return
    if dt.kind in "iu":
        if a.dtype.kind == "f":
            raise InvalidInputError(f"{where}: {what} holds floats ({a.dtype}); dtype {dt} would truncate "
                                    f"them")
        info = np.iinfo(dt)
        lo, hi = int(a.min()), int(a.max())
        if lo < info.min or hi > info.max:
            raise InvalidInputError(f"{where}: {what} holds values in [{lo}, {hi}], outside dtype {dt}'s "
                                    f"[{info.min}, {info.max}]")
        return
    with np.errstate(over="ignore", invalid="ignore"):
        big = np.abs(a[np.isfinite(a)] if a.dtype.kind == "f" else a).max(initial=0)
    if float(big) > float(np.finfo(dt).max):
        raise InvalidInputError(f"{where}: {what} holds {float(big)!r}, beyond dtype {dt}'s largest value "
                                f"{float(np.finfo(dt).max)!r} (it would become inf)")
