"""The feed-forward layers' matrix products, computed the same way whatever the batch.

:func:`matmul` (``A @ op(B)``) and :func:`matmul_tn` (``A^T @ G``, the weight gradient) run on
the compiled kernels' packed product (:mod:`rnnkit.kernels._packed`) when the kernel mode is
``"fast"`` (the default) and numba is installed. Every element of the result is then one chain of
multiply-adds over ``k`` in increasing order, so a row of ``A @ op(B)`` has the same value,
bit for bit, whatever other rows share the product: a model's ``predict`` gives the same output
for a sample whatever ``batch_size`` it runs under, as the recurrent kernels do. Large products
are split over the cores (by columns, or by rows when there are few columns), which does not
change any value either.

In the ``"reference"`` mode, or without numba, both are numpy's ``@`` (its BLAS may sum in an
order that depends on the number of rows, so results can differ across batch sizes in the last
bits: about 1e-7 relative in float32).
"""

from __future__ import annotations

import weakref
from types import ModuleType
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit.kernels._threads import CORES, run_parts

#: from this many multiply-adds (M * K * N) on, a product runs in parts on the cores
PARALLEL_PRODUCT = 1 << 22


def _packed() -> ModuleType | None:
    """The packed-product module when the compiled path is in force here, else None."""
    if kernels.mode() != "fast" or not kernels.available():
        return None
    # compiled with numba, an optional dependency: loaded on first use, once available() said so
    from rnnkit.kernels import _packed
    return _packed


def _operand(a: np.ndarray, writable: bool) -> np.ndarray:
    """``a`` (2-D) C-contiguous, and writable when asked: the layouts the compiled product is
    compiled for (each other layout would compile another version of it). A read-only ``b`` of
    :func:`matmul` (a layer's weight) is taken as it is; any other read-only operand is copied."""
    if a.flags.c_contiguous and (a.flags.writeable or not writable):
        return a
    return np.array(a, order="C")


#: packed panels of read-only right-hand sides, by ``(id, transposed)``:
#: {(id, transposed): (weak reference, panels)}
_PANELS: dict[tuple[int, bool], tuple[weakref.ref[np.ndarray], np.ndarray]] = {}


def _panels(pk: ModuleType, b: np.ndarray, transposed: bool = False) -> np.ndarray:
    """``b`` (``b.T`` when ``transposed``; ``b`` read-only, so its values never change: a
    layer's weight) packed once while it lives (a new weight is a new array): a layer's input
    gradient ``g @ W.T`` reads the panels of ``W.T`` for every call of a step as its forward
    reads those of ``W``. The entry goes when ``b`` does."""
    key = (id(b), transposed)
    hit = _PANELS.get(key)
    if hit is not None and hit[0]() is b:
        return hit[1]
    P: np.ndarray = pk.pack(b, trans=transposed)       # (b.T read in place: no transposed copy)

    def drop(_ref: Any, key: tuple[int, bool] = key) -> None:
        got = _PANELS.get(key)
        if got is not None and got[0] is _ref:
            del _PANELS[key]

    _PANELS[key] = (weakref.ref(b, drop), P)
    return P


def matmul(a: np.ndarray, b: np.ndarray, trans_b: bool = False) -> np.ndarray:
    """``a @ b`` (``a @ b.T`` when ``trans_b``) for a 2-D ``a`` (M, K) and ``b`` (K, N) (or
    (N, K)) of one float dtype; a new C-contiguous (M, N) array. Row ``i`` of the result depends
    on row ``i`` of ``a`` and on ``b`` only (bit for bit, in the fast mode). A read-only ``b``
    (a weight) is packed once and the panels kept while ``b`` lives, so a run of small products
    (``predict`` with a small ``batch_size``) does not lay it out again each time."""
    pk = _packed()
    if pk is None:
        return a @ (b.T if trans_b else b)
    A, B = _operand(a, True), _operand(b, False)
    M, K = A.shape
    N = B.shape[0] if trans_b else B.shape[1]
    out = np.empty((M, N), A.dtype)
    if M == 0 or N == 0:
        return out
    pk.ready(A.dtype)
    big = M * K * N >= PARALLEL_PRODUCT and CORES > 1
    if not B.flags.writeable:     # a weight: laid out once (as W or W.T), for every call
        P = _panels(pk, B, trans_b)
        if big and M >= 4 * CORES:
            run_parts(M, lambda lo, hi: pk.rgemm(A[lo:hi], P, out[lo:hi], 0.0))
        else:
            pk.rgemm(A, P, out, 0.0)
        return out
    nr = pk.nr_of(A.dtype)
    npan = -(-N // nr)
    if not big:
        pk.gemm(A, B, trans_b, out, False, 0, N)
    elif npan >= 4 * CORES:   # many columns: each part packs only its own columns of B
        run_parts(npan, lambda lo, hi: pk.gemm(A, B, trans_b, out, False, lo * nr, min(hi * nr, N)))
    else:
        run_parts(M, lambda lo, hi: pk.gemm(A[lo:hi], B, trans_b, out[lo:hi], False, 0, N))
    return out


def matmul_tn(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``a.T @ g`` for 2-D ``a`` (M, K) and ``g`` (M, N) of one float dtype (the weight gradient
    ``x^T @ da`` over every row); a new C-contiguous (K, N) array, summed over the rows in
    increasing order (in the fast mode)."""
    pk = _packed()
    if pk is None:
        return a.T @ g
    A, G = _operand(a, True), _operand(g, True)
    M, K = A.shape
    N = G.shape[1]
    out = np.empty((K, N), A.dtype)
    if K == 0 or N == 0:
        return out
    if M == 0:
        out[...] = 0
        return out
    pk.ready(A.dtype)
    nr = pk.nr_of(A.dtype)
    npan = -(-N // nr)
    At = A.T
    if M * K * N < PARALLEL_PRODUCT or CORES == 1 or npan < 2 * CORES:
        pk.gemm(At, G, False, out, False, 0, N)
    else:
        run_parts(npan, lambda lo, hi: pk.gemm(At, G, False, out, False, lo * nr, min(hi * nr, N)))
    return out
