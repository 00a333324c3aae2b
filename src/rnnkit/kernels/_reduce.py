"""The backward walk's batched weight-gradient reductions, on the cores.

Over the ``M = T*B`` rows of a pass: ``dW = x^T dxw``, ``dU = P^T drec``, the bias sums and
``dx = dxw W^T`` (:func:`rnnkit.kernels._gemm.reductions`), and the output projection's
``dWp = m^T dh`` (:func:`product_tn`). A big one is split along ``K`` (the rows) into two halves
(:func:`split_k`): the sums over rows ``[0, M // 2)`` and ``[M // 2, M)``, one call per half, each
on a thread of its own (its columns split further when there are more than two cores); then, on
the same threads after one barrier (:func:`rnnkit.kernels._threads.run_phases`), ``half 0 +
half 1``, each thread adding its share of the elements. The order of every sum is fixed by the
shape alone, so the results do not depend on the thread count (one thread computes the same two
halves one after the other, then the same sum). Each half packs only its own rows of both
operands; split by columns instead, every part would pack all of ``x^T`` and ``P^T`` (measured
4-11 % more work than one call, against 0-3 % for the halves).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rnnkit.kernels import _pool, _threads
from rnnkit.kernels._gemm import reductions
from rnnkit.kernels._packed import gemm

Arrays = tuple[np.ndarray, ...]
#: ``half(lo, hi, dst, j, c)``: fill ``dst`` with the sums over the rows ``[lo, hi)``, column part
#: ``j`` of ``c`` (and whatever rows ``[lo, hi)`` of other outputs the half owns)
Half = Callable[[int, int, Arrays, int, int], None]


def _flat(a: np.ndarray) -> np.ndarray:
    """The elements of a C-contiguous ``a`` as a 1D view (never a copy)."""
    if not a.flags.c_contiguous:
        raise ValueError(f"the halves' sum needs C-contiguous arrays, got shape {a.shape} with strides "
                         f"{a.strides}")
    return a.reshape(a.size)


def split_k(half: Half, outs: Arrays, M: int) -> None:
    """The K-split reduction: ``half`` fills ``outs`` with the sums over the rows ``[0, M // 2)``
    and fresh arrays of the same shapes with those over ``[M // 2, M)``, one call per half and
    column part, on the cores; then ``outs += the fresh arrays`` (every output C-contiguous), the
    elements of that sum split over the same threads after one barrier. One thread runs the same
    calls one after the other: the same bits."""
    m = M // 2
    c = max(1, _threads.CORES // 2)          # column parts per half
    n = 2 * c
    spare = tuple(_pool.empty(a.shape, a.dtype) for a in outs)
    flats = [(_flat(a), _flat(b)) for a, b in zip(outs, spare, strict=True)]

    def first(i: int, _: int) -> None:
        h, j = divmod(i, c)
        if h == 0:
            half(0, m, outs, j, c)
        else:
            half(m, M, spare, j, c)

    def then(i: int, _: int) -> None:
        for fa, fb in flats:
            lo, hi = fa.size * i // n, fa.size * (i + 1) // n
            fa[lo:hi] += fb[lo:hi]

    parts = [(i, i + 1) for i in range(n)]
    if _threads.CORES == 1:
        for i in range(n):
            first(i, i + 1)
        for i in range(n):
            then(i, i + 1)
    else:
        _threads.run_phases(parts, first, then)


def reduce(x2: np.ndarray, dxw2: np.ndarray, drec2: np.ndarray, shared: bool, P1: np.ndarray,
           P2: np.ndarray, split: int, W: np.ndarray, dW: np.ndarray, db: np.ndarray, dU: np.ndarray,
           dx2: np.ndarray, need_dx: bool, halves: bool) -> None:
    """Fill ``dW``, ``db``, ``dU`` and (with ``need_dx``) ``dx2`` as
    :func:`~rnnkit.kernels._gemm.reductions` does for every column and row, in one call, or with
    ``halves`` as the two halves of the rows (:func:`split_k`; each half also computes its own
    rows of ``dx2``)."""
    M, N = dxw2.shape
    if not halves:
        reductions(x2, dxw2, drec2, shared, P1, P2, split, W, dW, db, dU, dx2, 0, N, 0, M if need_dx else 0)
        return

    def half(lo: int, hi: int, dst: Arrays, j: int, c: int) -> None:
        n = hi - lo if need_dx else 0
        gw, gb, gu = dst
        reductions(x2[lo:hi], dxw2[lo:hi], drec2[lo:hi], shared, P1[lo:hi], P2[lo:hi], split, W, gw, gb, gu,
                   dx2[lo:hi], N * j // c, N * (j + 1) // c, n * j // c, n * (j + 1) // c)

    split_k(half, (dW, db, dU), M)


def product_tn(A: np.ndarray, G: np.ndarray, out: np.ndarray, halves: bool) -> None:
    """``out = A^T @ G`` over the rows of ``A`` (M, K) and ``G`` (M, N), in one product or, with
    ``halves``, split along the rows (:func:`split_k`): ``A[:m]^T G[:m] + A[m:]^T G[m:]``, one
    :func:`~rnnkit.kernels._packed.gemm` call per half (and column part), ``m = M // 2``."""
    M, N = G.shape
    if not halves:
        gemm(A.T, G, False, out, False, 0, N)
        return

    def half(lo: int, hi: int, dst: Arrays, j: int, c: int) -> None:
        gemm(A[lo:hi].T, G[lo:hi], False, dst[0], False, N * j // c, N * (j + 1) // c)

    split_k(half, (out,), M)
