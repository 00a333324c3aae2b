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
from typing import Any

import numpy as np

from rnnkit.kernels import _pool, _threads
from rnnkit.kernels._jit import OPTS, njit, row
from rnnkit.kernels._packed import KC, MB, MR, _rows_times_block, addr, empty_panels, gemm, pack, panels

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


#: rows of ``dxw`` packed at a time, then multiplied by ``W^T`` into their rows of ``dx`` while
#: they still sit in L1/L2 (:func:`fused`)
SUB = 32


@njit(inline="always", **OPTS)
def _pack_sum(B: Any, r0: int, r1: int, k0: int, c0: int, c1: int, P: Any, acc: Any, sums: bool) -> None:
    """Rows ``[r0, r1)`` of ``B``, columns ``[c0, c1)``, into the panels ``P`` (npan, kb, nr) at
    panel rows ``r - k0`` (zero past ``c1``), and with ``sums`` ``acc[j] += B[r, c0 + j]``, row
    after row in increasing order. Row by row: each row of ``B`` is read once, in order."""
    npan, kb, nr = P.shape
    flat = P.reshape(P.size)
    n = c1 - c0
    full = n // nr
    for r in range(r0, r1):
        src = row(B, r)[c0:c1]
        if sums:
            for j in range(n):
                acc[j] += src[j]
        o = (r - k0) * nr
        for p in range(full):
            q = o + p * kb * nr
            for j in range(nr):
                flat[q + j] = src[p * nr + j]
        if full < npan:
            q = o + full * kb * nr
            for j in range(nr):
                flat[q + j] = src[full * nr + j] if full * nr + j < n else 0


@njit(**OPTS)
def fused(x2: Any, dxw2: Any, drec2: Any, shared: bool, P1: Any, P2: Any, split: int, PWT: Any, dW: Any,
          db: Any, dU: Any, dx2: Any, c0: int, c1: int, with_dx: bool) -> None:
    """Columns ``[c0, c1)`` of ``dW = x^T dxw``, ``db[0] = sum(dxw)`` (``db[1] = sum(drec)`` when
    2 rows), ``dU[:, :split] = P1^T drec[:, :split]``, ``dU[:, split:] = P2^T drec[:, split:]``
    and, with ``with_dx``, every row of ``dx = dxw W^T`` (``W^T`` packed in ``PWT``), in ONE pass
    over the rows of ``dxw`` (and of ``drec`` when not ``shared``, i.e. not the same array).

    ``KC`` rows at a time, ``dxw``'s block is packed into panels as :func:`~._packed.gemm` packs
    it, its column sums accumulated on the way (no second pass for the bias), and ``SUB`` rows at
    a time the rows just packed are multiplied by ``W^T`` (read again from L1/L2, not memory);
    then ``x^T``, ``P1^T`` and ``P2^T`` multiply the block (``P1`` with ``dxw``'s own panels when
    ``shared``). Every element is the chain :func:`~._gemm.reductions` computes: a product's
    over ``k`` in increasing order, a sum's over the rows in increasing order from 0, so the
    values are the same bits, whatever the column range."""
    M = dxw2.shape[0]
    n = c1 - c0
    dt = dxw2.dtype
    isz = dxw2.itemsize
    nr = 16 if isz == 4 else 8
    e1 = min(c1, split)                      # dU's columns from P1: [c0, e1); from P2: [s2, c1)
    s2 = max(c0, split)
    two = db.shape[0] == 2
    n = max(n, 0)
    acc0, acc1 = np.zeros(n, dt), np.zeros(n, dt)
    kb = max(1, min(M, KC))
    npan = (n + nr - 1) // nr
    bx = empty_panels(npan, kb, nr, dxw2)
    br = bx if shared else empty_panels(npan, kb, nr, drec2)
    own2 = s2 < c1 and (s2 - c0) % nr != 0          # P2's columns start inside a panel
    b2 = empty_panels((c1 - s2 + nr - 1) // nr if own2 else 0, kb, nr, drec2)
    abuf = np.empty((MB // MR, kb, MR), dt)
    if M == 0 and n > 0:                       # sums over no rows
        dW[:, c0:c1] = 0
        dU[:, c0:c1] = 0
    ldx, ldo, F = dxw2.strides[0] // isz, dx2.strides[0] // isz, dx2.shape[1]
    dx_on = with_dx and F > 0 and dxw2.shape[1] > 0
    for k0 in range(0, M, KC):
        kc = min(KC, M - k0)
        for r0 in range(k0, k0 + kc, SUB):
            r1 = min(k0 + kc, r0 + SUB)
            if n > 0:
                _pack_sum(dxw2, r0, r1, k0, c0, c1, bx, acc0, True)
            if dx_on:
                panels(addr(dxw2) + r0 * ldx * isz, ldx, 1, MR * ldx, r1 - r0, dxw2.shape[1], PWT,
                       addr(dx2) + r0 * ldo * isz, ldo, F, False, 0, PWT.shape[0])
        if n == 0:
            continue
        if not shared:
            _pack_sum(drec2, k0, k0 + kc, k0, c0, c1, br, acc1, two)
        if own2:
            _pack_sum(drec2, k0, k0 + kc, k0, s2, c1, b2, acc1, False)
        load = k0 > 0
        _rows_times_block(x2.T, dW, c0, c1, k0, kc, bx, abuf, load)
        if e1 > c0:
            _rows_times_block(P1.T, dU, c0, e1, k0, kc, br, abuf, load)
        if s2 < c1:
            p2 = b2 if own2 else br[(s2 - c0) // nr:]
            _rows_times_block(P2.T, dU, s2, c1, k0, kc, p2, abuf, load)
    for j in range(n):
        db[0, c0 + j] = acc0[j]
    if two:
        for j in range(n):
            db[1, c0 + j] = acc0[j] if shared else acc1[j]


def reduce(x2: np.ndarray, dxw2: np.ndarray, drec2: np.ndarray, shared: bool, P1: np.ndarray,
           P2: np.ndarray, split: int, W: np.ndarray, dW: np.ndarray, db: np.ndarray, dU: np.ndarray,
           dx2: np.ndarray, need_dx: bool, halves: bool) -> None:
    """Fill ``dW``, ``db``, ``dU`` and (with ``need_dx``) ``dx2`` as
    :func:`~rnnkit.kernels._gemm.reductions` does for every column and row (the same values),
    by :func:`fused`: in one call, or with ``halves`` as the two halves of the rows
    (:func:`split_k`; each half also computes its own rows of ``dx2``: with the half's columns
    in one part, fused; in several parts, ``dx2``'s rows of the half split among them)."""
    M, N = dxw2.shape
    nr = 16 if dxw2.itemsize == 4 else 8
    PWT = pack(W, trans=True) if need_dx and dx2.shape[1] > 0 else np.empty((0, 1, nr), dxw2.dtype)
    if not halves:
        fused(x2, dxw2, drec2, shared, P1, P2, split, PWT, dW, db, dU, dx2, 0, N, need_dx)
        return

    def half(lo: int, hi: int, dst: Arrays, j: int, c: int) -> None:
        gw, gb, gu = dst
        sub = slice(lo, hi)
        fused(x2[sub], dxw2[sub], drec2[sub], shared, P1[sub], P2[sub], split, PWT, gw, gb, gu, dx2[sub],
              N * j // c, N * (j + 1) // c, need_dx and c == 1)
        if need_dx and c > 1:
            n = hi - lo
            r0, r1 = lo + n * j // c, lo + n * (j + 1) // c
            gemm(dxw2[r0:r1], W, True, dx2[r0:r1], False, 0, dx2.shape[1])

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
