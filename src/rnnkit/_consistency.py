"""Whole-step weights for every reader: a pass, ``get_weights`` or a save running in one thread
while ``fit`` (or ``set_weights``, a loader) replaces weights in another sees the weights of one
whole step, never some from before a step and some from after it.

A layer's weights are read-only arrays that a write REPLACES (never changes in place), so what a
reader needs is that no write of several weights runs while it reads. :data:`WEIGHTS` is one
process-wide sequence lock:

- a WRITE of several weights (an optimizer step with its constraints, ``Model.set_weights``, a
  layer's ``set_weights``, a weights file being installed) runs as ``with WEIGHTS: ...``: it takes
  the lock and counts one up when it starts and one up when it ends (odd while writing);
- a READ (``predict``, ``evaluate``, ``model(x)``, ``get_weights``) is ``WEIGHTS.read(fn, ...)``:
  when no write is under way it runs ``fn`` at once, without any lock, and keeps the result when
  the count is unchanged afterwards (no write started or ended meanwhile, so every weight it read
  was of one step). Otherwise (a write was under way, or one started while it ran) it runs ``fn``
  again holding the lock, so no write can start until it is done. A reader thus pays two reads of
  an int when no write overlaps it, and at most one second pass when one does; a write pays one
  uncontended lock and two increments. Readers that cannot run twice (a generator's batches, a
  file being written) use ``WEIGHTS.read_once(fn, ...)``: they hold the lock throughout.

The lock is re-entrant: a callback of ``fit`` (the writing thread) may predict, save or set
weights. One count serves every model: a write to one model makes an overlapping read of another
model take the locked path, which costs time and never correctness.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class WeightGuard:
    """The sequence lock of the module docstring: ``with guard:`` around a write of several
    weights, ``guard.read(fn, *args)`` around a reader."""

    __slots__ = ("_lock", "count")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        #: writes started plus writes ended (odd while one is under way)
        self.count = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        self.count += 1

    def __exit__(self, *exc: object) -> None:
        self.count += 1
        self._lock.release()

    def read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` run on the weights of one whole write (see the module
        docstring): once without the lock when no write overlaps it, else again under the lock.
        An exception of the lock-free run is raised as it is when no write overlapped it."""
        start = self.count
        if not start & 1:
            try:
                out = fn(*args, **kwargs)
            except Exception:
                if self.count == start:
                    raise
            else:
                if self.count == start:
                    return out
        with self._lock:
            return fn(*args, **kwargs)

    def read_once(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` run holding the lock: for readers that cannot run twice (a
        batch source's batches, a file being written). No write starts until it returns."""
        with self._lock:
            return fn(*args, **kwargs)


#: the process's one guard (see the module docstring)
WEIGHTS = WeightGuard()
