"""Products against a packed right-hand side: every GEMM of the compiled kernels.

``C = A @ B (+ C)`` where ``B`` (K, N) is first laid out once as panels ``P`` (npan, K, nr):
panel ``p`` holds columns ``[p*nr, (p+1)*nr)`` of ``B``, row after row, zero-padded past ``N``.
The micro-kernel (:mod:`._micro`) then reads one panel row (``nr`` contiguous elements) per
step of ``k`` and keeps an ``MR x nr`` block of ``C`` in registers.

A recurrent layer's kernels (U, U^T, the projection W, the output projection of LSTM) do not
change during a pass, so :func:`pack` runs once per pass and every timestep's product reads the
same panels (BLAS packs its operand again on every call: ~210 us for a 256 x 1024 U, whatever
the batch). :func:`gemm` packs ``B`` itself, ``KC`` rows at a time (for the batched reductions,
whose ``B`` is a different array every pass).

Every element of ``C`` is one chain of fused multiply-adds over ``k`` in increasing order
(split into ``KC`` blocks at fixed offsets, stored and reloaded in between, which does not
change its value), so a row's result is the same whatever the number of rows in the product,
the block of the batch it sits in, or the columns another thread takes: results do not depend
on the thread count or on the batch size.

Addresses go to :func:`panels` as integers with strides in elements (one compiled version per
dtype whatever the layouts of the callers' arrays); the array-taking entry points (``rgemm``,
``gemm``, ``pack``) are thin.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numba import cfunc, types
from numba.extending import overload

from rnnkit.kernels import _threads
from rnnkit.kernels._isa import has_avx512
from rnnkit.kernels._jit import OPTS, njit
from rnnkit.kernels._micro import micro_switch
from rnnkit.kernels._numba_private import llvm

#: rows of C per micro-kernel call; columns per panel are 64 bytes (16 float32, 8 float64).
#: Under AVX2, 6: 6 x 16 float32 accumulators are 12 of the 16 ymm registers. Under AVX-512, 8
#: (x 3 panels: 24 of the 32 zmm registers), which divides the usual batch sizes (32, 64, 128):
#: with 6, a batch of 64 left a block of 4 rows on one panel a call, whose 4 chains wait on the
#: FMA latency. Measured on an Intel Xeon (one core), 64 x 256 x 1024: 150 GFLOP/s with 6 rows,
#: 162 with 8; 64 x 512 x 2048: 127 and 148.
MR = 8 if has_avx512() else 6
NR32, NR64 = 16, 8
#: rows of A per outer block (its slice of A stays in L1/L2 while every panel passes over it)
MB = 96
#: steps of k packed at a time by :func:`gemm` (a panel block: KC x nr elements, 32 KB in float32)
KC = 512

#: panels per micro-kernel call for ONE row (the per-step product of a batch of one): under
#: AVX-512 (32 zmm registers) 8 one-register accumulators, so a 128-column product (an LSTM
#: of 32 units) is one call; under AVX2 (16 ymm) 6 two-register accumulators, 12 registers
#: (8 would take all 16, leaving none for the panel rows and the broadcast: spills)
ROW_PANELS = 8 if has_avx512() else 6


def _rest_group(mr: int) -> int:
    """Panels per micro-kernel call for the last ``mr < MR`` rows of a product (several panels, so
    that enough accumulator chains run side by side): under AVX2 about MR chains; under AVX-512
    up to 24, with the panel rows and a broadcast still in the 32 registers (so the 4 to 7 rows
    left by a batch that is not a multiple of 8 do not run a few chains on the FMA latency)."""
    if mr == 1:
        return ROW_PANELS
    if not has_avx512():
        return max(1, MR // mr)
    return max(1, min(ROW_PANELS, 24 // mr, 31 // (mr + 1)))


#: panels per micro-kernel call for a full block of MR rows: under AVX-512 three (24 of the 32 zmm
#: registers with 8 rows; each broadcast of A then feeds three FMAs, and A is read a third as
#: often), under AVX2 one (two panels would need 24 of the 16 ymm registers). Measured on the
#: per-step product (128 x 512) @ (512 x 2048), one Zen 4 core, 6 rows: 71 GFLOP/s with one
#: panel, 86 with two, 101 with three
FULL_PANELS = 3 if has_avx512() else 1
#: panels per micro-kernel call for a block of ``mr`` rows, ``GROUP[mr]`` (index 0 unused; a
#: tuple, so compiled code reads it as a constant)
GROUP = (1, *(_rest_group(mr) for mr in range(1, MR)), FULL_PANELS)
#: every (rows, panels) variant :func:`panels` calls, per float width: full blocks of MR rows
#: on 1 to FULL_PANELS panels, the last rows on their group of panels or on one (the panels
#: left over after the whole groups, one a call: fewer variants to compile)
_VARIANTS = [(MR, g) for g in range(1, FULL_PANELS + 1)] + \
    [(mr, g) for mr in range(1, MR) for g in sorted({1, GROUP[mr]})]


def block_cost(n: int) -> float:
    """Modelled cycles per panel and step of ``k`` of the products over ``n`` rows (for
    :func:`._threads.blocks`): per call on ``r`` rows and ``g`` panels, the larger of its FMAs
    and its loads at two a cycle, at least the FMA latency (4). (Measured at S4, 128 rows on two
    threads: 66 + 62 rows, its choice under AVX-512, against 64 + 64: 4.4 % less CPU on the longer
    block in inference, 2.9 % in training; at S3, 30 + 34, which it rejects: 9 % more.)"""
    full, rem = divmod(n, MR)
    return sum(k * max(4.0, r * GROUP[r] / 2, (r + GROUP[r]) / 2) / GROUP[r]
               for k, r in ((full, MR), (1, rem)) if r)


_threads.block_cost, _threads.block_rows = block_cost, MR


def nr_of(dtype: Any) -> int:
    """Panel width (columns) for a dtype."""
    return NR32 if np.dtype(dtype).itemsize == 4 else NR64


#: ``_block(P, mr, g, a, ars, aks, p, pst, c, ldc, K, load, ncol)``: the micro-kernel of the
#: variant ``(mr, g)`` for the dtype of ``P`` (one switch over :data:`_VARIANTS`)
_block = micro_switch(_VARIANTS, {32: NR32, 64: NR64})


@njit(inline="always", **OPTS)
def addr(x: Any) -> Any:
    """The address of an array's first element, as a signed integer."""
    return np.int64(x.ctypes.data)


@njit(inline="always", **OPTS)
def empty_panels(n0: int, n1: int, n2: int, like: Any) -> Any:
    """``np.empty((n0, n1, n2), like.dtype)`` whose first element sits on a 64-byte boundary, so
    that no panel row (64 bytes) straddles two cache lines: each row is one load instead of
    two. (numba's ``np.empty`` aligns to 16 bytes. Measured on an Intel Xeon with AVX-512, the
    one-row product (1 x 32) @ (32 x 128): 75 ns a call on aligned panels, 109 on panels 16
    bytes off; (1 x 64) @ (64 x 256): 409 against 642 ns.)"""
    n, isz = n0 * n1 * n2, like.itemsize
    flat = np.empty(n + 64 // isz, like.dtype)
    off = ((-addr(flat)) % 64) // isz
    return flat[off:off + n].reshape((n0, n1, n2))


@njit(inline="always", **OPTS)
def _panels_body(marker: Any, a: int, ars: int, aks: int, asl: int, M: int, K: int, pb: int, pst: int,
                 c: int, ldc: int, N: int, ld: int, p0: int, p1: int) -> None:
    """The loops of :func:`panels` for the dtype of ``marker`` (``P`` given by its address ``pb``
    and panel stride ``pst``)."""
    isz = marker.itemsize
    nr = 16 if isz == 4 else 8
    for mb in range(0, M, MB):
        me = min(M, mb + MB)
        full = mb + (me - mb) // MR * MR
        if full > mb:
            for p in range(p0, p1, FULL_PANELS):
                n0 = p * nr
                g = min(FULL_PANELS, p1 - p)
                for m0 in range(mb, full, MR):
                    _block(marker, MR, g, a + m0 // MR * asl * isz, ars, aks, pb + p * pst * isz, pst,
                           c + (m0 * ldc + n0) * isz, ldc, K, ld, N - n0)
        if full < me:
            mr = me - full
            g = GROUP[mr]
            ar = a + full // MR * asl * isz
            for p in range(p0, p1, g):
                n0 = p * nr
                if p + g <= p1:
                    _block(marker, mr, g, ar, ars, aks, pb + p * pst * isz, pst, c + (full * ldc + n0) * isz,
                           ldc, K, ld, N - n0)
                else:                           # the panels after the last whole group
                    for q in range(p, p1):
                        _block(marker, mr, 1, ar, ars, aks, pb + q * pst * isz, pst,
                               c + (full * ldc + q * nr) * isz, ldc, K, ld, N - q * nr)


_F32, _F64 = np.zeros(0, np.float32), np.zeros(0, np.float64)


def _panels_f32(a: int, ars: int, aks: int, asl: int, M: int, K: int, pb: int, pst: int, c: int, ldc: int,
                N: int, ld: int, p0: int, p1: int) -> None:
    _panels_body(_F32, a, ars, aks, asl, M, K, pb, pst, c, ldc, N, ld, p0, p1)


def _panels_f64(a: int, ars: int, aks: int, asl: int, M: int, K: int, pb: int, pst: int, c: int, ldc: int,
                N: int, ld: int, p0: int, p1: int) -> None:
    _panels_body(_F64, a, ars, aks, asl, M, K, pb, pst, c, ldc, N, ld, p0, p1)


# The loops above are compiled ONCE per dtype, as a C-callable function whose address is given to
# LLVM under a fixed symbol name; every kernel calls that symbol instead of linking (and
# compiling again) its own copy of them and of the micro-kernel variants. (Measured: each
# function that linked them cost ~0.45 s more to compile.) ``ready`` compiles (or loads from the
# on-disk cache) and registers the dtype's version; it runs before any kernel of that dtype.
_SIG = types.void(*[types.int64] * 14)
_SYMBOLS = {32: "rnnkit_packed_panels_f32", 64: "rnnkit_packed_panels_f64"}
_EXT = {bits: types.ExternalFunction(name, _SIG) for bits, name in _SYMBOLS.items()}
_ext32, _ext64 = _EXT[32], _EXT[64]
_compiled: dict[int, Any] = {}
_ready_lock = threading.Lock()


def ready(dtype: Any) -> None:
    """Make the dtype's :func:`panels` loops callable from compiled code (once per process)."""
    bits = np.dtype(dtype).itemsize * 8
    if bits in _compiled:
        return
    with _ready_lock:
        if bits not in _compiled:
            fn = _panels_f32 if bits == 32 else _panels_f64
            opts = {k: v for k, v in OPTS.items() if k != "nogil"}
            cf = cfunc(_SIG, **opts)(fn)
            llvm.add_symbol(_SYMBOLS[bits], cf.address)
            _compiled[bits] = cf


def _call(P: Any, a: int, ars: int, aks: int, asl: int, M: int, K: int, pb: int, pst: int, c: int,
          ldc: int, N: int, ld: int, p0: int, p1: int) -> None:  # pragma: no cover - the overload
    raise NotImplementedError


@overload(_call)
def _call_ov(P: Any, a: Any, ars: Any, aks: Any, asl: Any, M: Any, K: Any, pb: Any, pst: Any, c: Any,
             ldc: Any, N: Any, ld: Any, p0: Any, p1: Any) -> Any:
    if P.dtype.bitwidth == 32:
        def impl32(P: Any, a: Any, ars: Any, aks: Any, asl: Any, M: Any, K: Any, pb: Any, pst: Any, c: Any,
                   ldc: Any, N: Any, ld: Any, p0: Any, p1: Any) -> None:
            _ext32(a, ars, aks, asl, M, K, pb, pst, c, ldc, N, ld, p0, p1)
        return impl32

    def impl64(P: Any, a: Any, ars: Any, aks: Any, asl: Any, M: Any, K: Any, pb: Any, pst: Any, c: Any,
               ldc: Any, N: Any, ld: Any, p0: Any, p1: Any) -> None:
        _ext64(a, ars, aks, asl, M, K, pb, pst, c, ldc, N, ld, p0, p1)
    return impl64


@njit(inline="always", **OPTS)
def panels(a: int, ars: int, aks: int, asl: int, M: int, K: int, P: Any, c: int, ldc: int, N: int,
           load: bool, p0: int, p1: int) -> None:
    """``C[:, p0*nr : min(p1*nr, N)] = (C if load else 0) + A @ B`` for the panels ``[p0, p1)``
    of ``P`` (their first ``K`` rows). ``A`` (M, K) at address ``a``: element ``(r, k)`` of the
    ``s``-th block of MR rows at ``s*asl + (r - s*MR)*ars + k*aks`` (``asl = MR*ars`` for a plain
    strided matrix; packed slivers have their own); ``C`` at ``c`` with row stride ``ldc``
    (columns contiguous). Blocks of MR rows go panel by panel (the panel stays in L1 across the
    row blocks); the last few rows take several panels per call."""
    i64 = np.int64
    _call(P, i64(a), i64(ars), i64(aks), i64(asl), i64(M), i64(K), addr(P), i64(P.shape[1] * P.shape[2]),
          i64(c), i64(ldc), i64(N), i64(1 if load else 0), i64(p0), i64(p1))


@njit(**OPTS)
def pack_into(B: Any, trans: bool, k0: int, kc: int, c0: int, c1: int, P: Any) -> None:
    """``P[p, k, j] = op(B)[k0 + k, c0 + p*nr + j]`` (``op(B)`` = ``B``, or its transpose when
    ``trans``) for ``k < kc``, zero from column ``c1`` on. Each row of ``B`` is read once, in
    order: row by row of ``op(B)``, or, transposed, column by column of it, a panel at a time
    (reading ``B`` column-wise instead, a row stride apart, took 4-9x as long at 256 x 768-1024)."""
    npan, kp, nr = P.shape
    flat = P.reshape(P.size)
    N = c1 - c0
    full = N // nr                             # panels with every column live
    if trans:                                  # row by row of B (a column of op(B)), read in order:
        for p in range(npan):                  # a panel's writes stay in one panel (kp * nr values)
            for j in range(min(nr, N - p * nr)):
                src = B[c0 + p * nr + j, k0:k0 + kc]
                o = p * kp * nr + j
                for k in range(kc):
                    flat[o + k * nr] = src[k]
    for k in range(kc):
        if not trans:
            src = B[k0 + k, c0:c1]
            for p in range(full):
                o = (p * kp + k) * nr
                for j in range(nr):
                    flat[o + j] = src[p * nr + j]
            if full < npan:
                o = (full * kp + k) * nr
                for j in range(N - full * nr):
                    flat[o + j] = src[full * nr + j]
        for p in range(full, npan):            # the last panel's dead columns
            o = (p * kp + k) * nr
            for j in range(N - p * nr, nr):
                flat[o + j] = 0


@njit(**OPTS)
def pack_cols(B: Any, trans: bool, c0: int, c1: int) -> Any:
    """Columns ``[c0, c1)`` of ``op(B)`` (K, N) as panels (npan, K, nr)."""
    K = B.shape[1] if trans else B.shape[0]
    nr = 16 if B.itemsize == 4 else 8
    P = empty_panels((c1 - c0 + nr - 1) // nr, K, nr, B)
    pack_into(B, trans, np.int64(0), K, c0, c1, P)   # (a literal 0 would compile a version of its own)
    return P


def pack(B: np.ndarray, trans: bool = False, cols: tuple[int, int] | None = None) -> np.ndarray:
    """``B`` (K, N), or the transpose of ``B`` (N, K) when ``trans``, as panels (npan, K, nr);
    only the columns ``cols = (c0, c1)`` of it when given."""
    N = B.shape[0] if trans else B.shape[1]
    c0, c1 = cols if cols is not None else (0, N)
    ready(B.dtype)
    return pack_cols(B, trans, c0, c1)


@njit(inline="always", **OPTS)
def rgemm(A: Any, P: Any, C: Any, beta: float) -> None:
    """``C = A @ B + beta * C`` (beta 0 or 1) with ``B`` packed in ``P`` (the per-step product
    of a time loop; 2D ``A`` and ``C`` with contiguous rows, any row stride)."""
    isz = A.itemsize
    ars = A.strides[0] // isz
    panels(addr(A), ars, A.strides[1] // isz, MR * ars, A.shape[0], A.shape[1], P, addr(C),
           C.strides[0] // isz, C.shape[1], beta != 0, 0, P.shape[0])


#: the one-row variants of :data:`_block` alone (what :func:`rgemm1` calls)
_row_block = micro_switch([(1, g) for g in range(1, ROW_PANELS + 1)], {32: NR32, 64: NR64})


@njit(inline="always", **OPTS)
def rgemm1(A: Any, P: Any, C: Any, beta: float) -> None:
    """:func:`rgemm` for ``A`` and ``C`` of ONE row (the per-step product of a batch of one),
    the micro-kernel called in place, ``ROW_PANELS`` panels a call: the same calls, so the
    same values, as :func:`panels` makes for one row, without its call and blocking loops."""
    isz = A.itemsize
    nr, pst = P.shape[2], P.shape[1] * P.shape[2]
    a, aks, pb, c = addr(A), np.int64(A.strides[1] // isz), addr(P), addr(C)
    K, N, load = np.int64(A.shape[1]), C.shape[1], np.int64(1 if beta != 0 else 0)
    for p in range(0, P.shape[0], ROW_PANELS):
        _row_block(P, 1, min(ROW_PANELS, P.shape[0] - p), a, 0, aks, pb + p * pst * isz, np.int64(pst),
                   c + p * nr * isz, 0, K, load, np.int64(N - p * nr))


@njit(**OPTS)
def pack_rows(A: Any, m0: int, m1: int, k0: int, kc: int, buf: Any) -> None:
    """Rows ``[m0, m1)``, columns ``[k0, k0+kc)`` of ``A`` as slivers of MR rows, each ``k``
    step's MR elements side by side (``buf[s, k, r] = A[m0 + s*MR + r, k0 + k]``): the
    micro-kernel then reads one short contiguous run per step (for an ``A`` whose rows are not
    contiguous, e.g. a transposed view)."""
    for s in range((m1 - m0 + MR - 1) // MR):
        dst = buf[s]
        r1 = min(MR, m1 - m0 - s * MR)
        for k in range(kc):
            d = dst[k]
            for r in range(r1):
                d[r] = A[m0 + s * MR + r, k0 + k]


@njit(inline="always", **OPTS)
def _rows_times_block(A: Any, C: Any, c0: int, c1: int, k0: int, kc: int, bbuf: Any, abuf: Any,
                      load: bool) -> None:
    """``C[:, c0:c1] (+)= A[:, k0:k0+kc] @ (the packed block of B in bbuf)``, MB rows at a time
    (``A`` read in place when its rows are contiguous, else packed into slivers in ``abuf``)."""
    M = A.shape[0]
    isz = A.itemsize
    npan, kb = bbuf.shape[0], bbuf.shape[1]
    c, ldc = addr(C) + c0 * isz, C.strides[0] // isz
    ars, aks = A.strides[0] // isz, A.strides[1] // isz
    for mb in range(0, M, MB):
        me = min(M, mb + MB)
        cm = c + mb * ldc * isz
        if aks == 1:                       # rows contiguous: read in place
            panels(addr(A) + (mb * ars + k0) * isz, ars, 1, MR * ars, me - mb, kc, bbuf, cm, ldc, c1 - c0,
                   load, 0, npan)
        else:
            pack_rows(A, mb, me, k0, kc, abuf)
            panels(addr(abuf), 1, MR, kb * MR, me - mb, kc, bbuf, cm, ldc, c1 - c0, load, 0, npan)


@njit(**OPTS)
def gemm(A: Any, B: Any, trans_b: bool, C: Any, load: bool, c0: int, c1: int) -> None:
    """Columns ``[c0, c1)`` of ``C = A @ op(B) (+ C when load)``, ``op(B) = B.T`` when
    ``trans_b``, for the batched reductions (long ``K``). Both operands are packed here, ``KC``
    steps of ``k`` at a time: ``op(B)`` into panels, ``A`` into MR-row slivers, MB rows at a time.
    ``A`` any 2D array (a transposed view reads as one), ``B`` C-contiguous, ``C`` rows
    contiguous. A column's value does not depend on ``c0``/``c1`` (the ``KC`` blocks of ``k``
    start at 0 whatever the split)."""
    M, K = A.shape
    if c1 <= c0 or M == 0:
        return
    if K == 0:
        if not load:
            C[:, c0:c1] = 0
        return
    nr = 16 if A.itemsize == 4 else 8
    kb = min(K, KC)
    bbuf = empty_panels((c1 - c0 + nr - 1) // nr, kb, nr, A)
    abuf = np.empty((MB // MR, kb, MR), A.dtype)
    for k0 in range(0, K, KC):
        kc = min(KC, K - k0)
        pack_into(B, trans_b, k0, kc, c0, c1, bbuf)
        _rows_times_block(A, C, c0, c1, k0, kc, bbuf, abuf, load or k0 > 0)


@njit(**OPTS)
def gemm2(A1: Any, C1: Any, A2: Any, C2: Any, B: Any, c0: int, c1: int) -> None:
    """Columns ``[c0, c1)`` of ``C1 = A1 @ B`` and ``C2 = A2 @ B`` (the same ``K``), each block
    of ``B`` packed once for both (the weight-gradient reductions ``x^T dxw`` and ``h^T dxw``).
    The same values as two :func:`gemm` calls. (Its loop is :func:`gemm`'s written out again:
    one function serving both, with an empty second operand for ``gemm``, measured 2-5 s more
    compilation on a new machine.)"""
    K = B.shape[0]
    if c1 <= c0:
        return
    if K == 0:
        C1[:, c0:c1] = 0
        C2[:, c0:c1] = 0
        return
    nr = 16 if B.itemsize == 4 else 8
    kb = min(K, KC)
    bbuf = empty_panels((c1 - c0 + nr - 1) // nr, kb, nr, B)
    abuf = np.empty((MB // MR, kb, MR), B.dtype)
    for k0 in range(0, K, KC):
        kc = min(KC, K - k0)
        pack_into(B, np.bool_(False), k0, kc, c0, c1, bbuf)   # (not a literal: gemm's version)
        if A1.shape[0] > 0:
            _rows_times_block(A1, C1, c0, c1, k0, kc, bbuf, abuf, k0 > 0)
        if A2.shape[0] > 0:
            _rows_times_block(A2, C2, c0, c1, k0, kc, bbuf, abuf, k0 > 0)
