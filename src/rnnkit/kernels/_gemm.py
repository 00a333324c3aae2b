"""The GEMMs of the kernels: scipy's BLAS called from compiled code, and the compiled loop
that beats it for the small per-step products (the crossover: :mod:`._tuning`).

``gemm`` / ``gemm_at`` call BLAS ``?gemm`` on 2D arrays whose rows are contiguous (any row
stride, so batch slices need no copies); ``loop_gemm`` is the loop; ``rgemm`` picks one for a
per-step product; ``project`` and ``reductions`` are the walker's input projection and batched
weight-gradient reductions. Importing this module needs scipy (``ensure_blas``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.np.linalg import ensure_blas

from rnnkit.kernels._jit import OPTS, njit

#: at most this many multiply-adds (M*K*N) a GEMM runs in a plain compiled loop; above, BLAS
#: (measured: BLAS called from a kernel costs ~0.2 us, so only the tiniest products stay here)
SMALL_GEMM = 1 << 10

ensure_blas()   # imports scipy.linalg.cython_blas (ImportError without scipy: the fallback)

#: numba's own helper around scipy's BLAS ?gemm (column-major, Fortran conventions); declared
#: with void pointers so one declaration serves float32 ('s') and float64 ('d')
_xxgemm: Any = types.ExternalFunction("numba_xxgemm", types.intc(
    types.char, types.char, types.char, types.intp, types.intp, types.intp, types.voidptr,
    types.voidptr, types.intp, types.voidptr, types.intp, types.voidptr, types.voidptr, types.intp))
_N, _T = ord("N"), ord("T")


@njit(**OPTS)
def gemm(A: Any, Bm: Any, C: Any, beta: float, tb: bool) -> None:
    """``C = A @ op(Bm) + beta * C`` with ``op(Bm) = Bm.T`` when ``tb``; 2D arrays whose rows
    are contiguous (any row stride: batch slices of bigger arrays work without copies). A plain
    loop when tiny (and not transposed), else one BLAS call (beta and the transpose go to BLAS,
    no temporaries)."""
    M, K = A.shape
    N = C.shape[1]
    if M == 0 or N == 0:
        return
    if not tb and M * K * N <= SMALL_GEMM:
        for m in range(M):
            cr = C[m]
            if beta == 0:
                for n in range(N):
                    cr[n] = 0
            for k in range(K):
                a = A[m, k]
                br = Bm[k]
                for n in range(N):
                    cr[n] += a * br[n]
        return
    isz = A.itemsize
    sc = np.empty(2, A.dtype)
    sc[0] = 1.0
    sc[1] = beta
    kind = ord("s") if isz == 4 else ord("d")
    _xxgemm(kind, _T if tb else _N, _N, N, M, K, sc[0:].ctypes, Bm.ctypes, Bm.strides[0] // isz,
            A.ctypes, A.strides[0] // isz, sc[1:].ctypes, C.ctypes, C.strides[0] // isz)


@njit(**OPTS)
def loop_gemm(A: Any, Bm: Any, C: Any, beta: float) -> None:
    """``C = A @ Bm + beta * C`` by a compiled loop, two rows of ``A`` at a time sharing each row
    of ``Bm`` (so one load of ``Bm`` feeds two accumulations); each element of ``C`` sums over
    ``k`` in increasing order, whatever ``M`` is. For the small per-step products, where a BLAS
    call costs more than the arithmetic (its fixed floor and its packing of ``Bm``)."""
    M, K = A.shape
    N = C.shape[1]
    if beta == 0:
        for m in range(M):
            cr = C[m]
            for j in range(N):
                cr[j] = 0
    m = 0
    while m + 2 <= M:
        c0 = C[m]
        c1 = C[m + 1]
        for k in range(K):
            a0 = A[m, k]
            a1 = A[m + 1, k]
            b = Bm[k]
            for j in range(N):
                bj = b[j]
                c0[j] += a0 * bj
                c1[j] += a1 * bj
        m += 2
    if m < M:
        c0 = C[m]
        for k in range(K):
            a0 = A[m, k]
            b = Bm[k]
            for j in range(N):
                c0[j] += a0 * b[j]


@njit(**OPTS)
def rgemm(A: Any, Bm: Any, C: Any, beta: float, loop_m: int) -> None:
    """A per-step recurrent product ``C = A @ Bm + beta * C``: :func:`loop_gemm` when ``A`` has at
    most ``loop_m`` rows (the crossover measured on this machine, :mod:`._tuning`), else BLAS."""
    if A.shape[0] <= loop_m:
        loop_gemm(A, Bm, C, beta)
    else:
        gemm(A, Bm, C, beta, False)


@njit(**OPTS)
def time_gemms(A: Any, Bm: Any, C: Any, reps: int, loop: bool) -> None:
    """``reps`` products by one path (the crossover measurement of :mod:`._tuning`)."""
    for _ in range(reps):
        if loop:
            loop_gemm(A, Bm, C, 1.0)
        else:
            gemm(A, Bm, C, 1.0, False)




@njit(**OPTS)
def gemm_at(A: Any, Bm: Any, C: Any) -> None:
    """``C = A.T @ Bm`` (A (K, M), Bm (K, N), C (M, N); rows contiguous), one BLAS call."""
    K, M = A.shape
    N = C.shape[1]
    if M == 0 or N == 0:
        return
    isz = A.itemsize
    sc = np.empty(2, A.dtype)
    sc[0] = 1.0
    sc[1] = 0.0
    kind = ord("s") if isz == 4 else ord("d")
    _xxgemm(kind, _N, _T, N, M, K, sc[0:].ctypes, Bm.ctypes, Bm.strides[0] // isz,
            A.ctypes, A.strides[0] // isz, sc[1:].ctypes, C.ctypes, C.strides[0] // isz)


@njit(**OPTS)
def project(x2: Any, W: Any, b0: Any, out: Any) -> None:
    """``out = x2 @ W + b0`` (the input projection of every step, one GEMM)."""
    for r in range(out.shape[0]):
        o = out[r]
        for j in range(o.shape[0]):
            o[j] = b0[j]
    gemm(x2, W, out, 1.0, False)


@njit(**OPTS)
def reductions(x2: Any, dxw2: Any, drec2: Any, P1: Any, P2: Any, split: int, W: Any, dW: Any,
               db: Any, dU: Any, dx2: Any, c0: int, c1: int, r0: int, r1: int) -> None:
    """The walker's batched weight-gradient reductions (see its docstring) for the gate columns
    ``[c0, c1)`` and the input-gradient rows ``[r0, r1)`` (so parts can run on several threads):
    ``dW = x^T dxw``, ``db[0] = sum(dxw)`` (``db[1] = sum(drec)`` when 2 rows), ``dU[:, :split]
    = P1^T drec[:, :split]``, ``dU[:, split:] = P2^T drec[:, split:]``, ``dx = dxw W^T``."""
    if c1 > c0:
        gemm_at(x2, dxw2[:, c0:c1], dW[:, c0:c1])
        db[:, c0:c1] = 0
        d0 = db[0]
        for r in range(dxw2.shape[0]):
            row = dxw2[r]
            for j in range(c0, c1):
                d0[j] += row[j]
        if db.shape[0] == 2:
            d1 = db[1]
            for r in range(drec2.shape[0]):
                row = drec2[r]
                for j in range(c0, c1):
                    d1[j] += row[j]
        a, b = c0, min(c1, split)
        if b > a:
            gemm_at(P1, drec2[:, a:b], dU[:, a:b])
        a, b = max(c0, split), c1
        if b > a:
            gemm_at(P2, drec2[:, a:b], dU[:, a:b])
    if r1 > r0:
        gemm(dxw2[r0:r1], W, dx2[r0:r1], 0.0, True)


