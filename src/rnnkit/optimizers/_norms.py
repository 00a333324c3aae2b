"""The squared L2 norm of a gradient for clipping: one pass, no copy of the gradient."""

from __future__ import annotations

import numpy as np

#: elements per partial sum: a block's dot product runs on one thread (a BLAS dot of more than
#: about 10,000 elements may start threads, which costs more than the block on a busy machine)
BLOCK = 1 << 13


def sum_of_squares(g: np.ndarray) -> float:
    """``sum(g ** 2)`` as a Python float. A float32 or float64 gradient is read once, in place
    (a non-contiguous one is copied first): each block of :data:`BLOCK` elements is a dot
    product in the gradient's own type, and the blocks are summed in float64 (for float32 a
    relative error of about 1e-8, under the resolution of the float32 values the norm scales;
    for float64 about 1e-15). Any other type is squared in float64 (a copy)."""
    a = np.asarray(g)
    if a.dtype not in (np.float32, np.float64):
        return float(np.sum(np.square(a, dtype=np.float64)))
    flat = a.reshape(-1)
    total = 0.0
    for lo in range(0, flat.size, BLOCK):
        part = flat[lo:lo + BLOCK]
        total += float(np.dot(part, part))
    return total
