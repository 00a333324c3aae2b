"""Seeding: a layer's own seed, else the global seed, else entropy.

``set_global_seed(s)`` makes every later unseeded build reproducible: each unseeded layer
draws its own seed from one global stream, in build order.
"""

from __future__ import annotations

import threading

import numpy as np

from rnnkit._numbers import check_int

_lock = threading.Lock()
_global: np.random.Generator | None = None


def check_seed(seed: object, where: str) -> int | None:
    """A seed argument: None, or an int in ``0..2**63 - 1`` (:func:`~rnnkit._numbers.check_int`)."""
    return None if seed is None else check_int(seed, "seed", where, lo=0)


def set_global_seed(seed: int | None) -> None:
    """Seed the stream that unseeded layers draw from (``None`` returns to entropy)."""
    global _global
    s = check_seed(seed, "set_global_seed")
    with _lock:
        _global = None if s is None else np.random.default_rng(s)


def make_rng(seed: int | None) -> np.random.Generator:
    """The generator a build draws from: the layer seed, else the global stream, else entropy."""
    if seed is not None:
        return np.random.default_rng(seed)
    with _lock:
        if _global is not None:
            return np.random.default_rng(int(_global.integers(0, 2**63 - 1)))
    return np.random.default_rng()
