"""Numba building blocks of the fast paths: the compile options, the activations, one GEMM.

Importing this module imports numba (and needs scipy for ``np.dot``); :mod:`rnnkit.kernels`
does so lazily, on the first call that needs a kernel.

Activations are passed to the kernels as an int code (:data:`ACT_CODES`); ``act`` maps a
pre-activation, ``dact`` maps (output ``y``, upstream ``g``) to dL/da, as in
:mod:`rnnkit._activations`:

====  =======  ===========================  ==================
code  name     y = f(a)                     dL/da
====  =======  ===========================  ==================
0     tanh     tanh(a)                      g * (1 - y*y)
1     sigmoid  0.5 + 0.5 * tanh(a / 2)      g * y * (1 - y)
2     relu     max(a, 0)                    g * (y > 0)
3     linear   a                            g
====  =======  ===========================  ==================

In float64 ``tanh`` is libm's. In float32 it is the rational approximation :func:`tanh32`
(a 13/6 odd/even rational on [-7.9053, 7.9053], clamped outside; max abs error 2.6e-7 against
float64 tanh, measured on a dense grid by the tests), which vectorises where libm calls do not.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import types
from numba.extending import overload

#: compile options of every kernel: on-disk cache, numpy error model (lets loops vectorise),
#: FMA contraction allowed (no reassociation: results stay within a few ulp of the reference)
OPTS: dict[str, Any] = {"cache": True, "error_model": "numpy", "fastmath": {"contract"}, "nogil": True}
njit = numba.njit

ACT_CODES = {"tanh": 0, "sigmoid": 1, "relu": 2, "linear": 3}

#: at most this many multiply-adds (M*K*N) a GEMM runs in a plain compiled loop; above, BLAS
SMALL_GEMM = 1 << 15

_C = 7.90531110763549805
_A = (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
      -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16)
_B = (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06)
_F32 = np.float32
_CLAMP, _NCLAMP = _F32(_C), _F32(-_C)
_A1, _A3, _A5, _A7, _A9, _A11, _A13 = (_F32(v) for v in _A)
_B0, _B2, _B4, _B6 = (_F32(v) for v in _B)


@njit(**OPTS)
def tanh32(x: Any) -> Any:
    """float32 tanh: odd 13th-degree / even 6th-degree rational, clamped at +-7.9053."""
    if x > _CLAMP:
        x = _CLAMP
    if x < _NCLAMP:
        x = _NCLAMP
    x2 = x * x
    p = x2 * _A13 + _A11
    p = p * x2 + _A9
    p = p * x2 + _A7
    p = p * x2 + _A5
    p = p * x2 + _A3
    p = p * x2 + _A1
    q = x2 * _B6 + _B4
    q = q * x2 + _B2
    q = q * x2 + _B0
    return (x * p) / q


def fast_tanh(x: Any) -> Any:  # pragma: no cover - replaced by the overload inside kernels
    return math.tanh(x)


@overload(fast_tanh, inline="always")
def _fast_tanh_ov(x: Any) -> Any:
    if isinstance(x, types.Float) and x.bitwidth == 32:
        def impl32(x: Any) -> Any:
            return tanh32(x)
        return impl32

    def impl64(x: Any) -> Any:
        return math.tanh(x)
    return impl64


def cst(x: Any, v: float) -> Any:  # pragma: no cover - replaced by the overload
    return v


@overload(cst, inline="always")
def _cst_ov(x: Any, v: Any) -> Any:
    """The constant ``v`` in the float type of ``x`` (a scalar or an array; keeps float32
    arithmetic float32)."""
    t = x.dtype if isinstance(x, types.Array) else x
    if isinstance(t, types.Float) and t.bitwidth == 32:
        def c32(x: Any, v: Any) -> Any:
            return np.float32(v)
        return c32

    def c64(x: Any, v: Any) -> Any:
        return np.float64(v)
    return c64


@njit(inline="always", **OPTS)
def sig(x: Any) -> Any:
    """Logistic function ``0.5 + 0.5 * tanh(x / 2)`` (the reference's formulation)."""
    half = cst(x, 0.5)
    return half + half * fast_tanh(half * x)


@njit(inline="always", **OPTS)
def act(x: Any, code: int) -> Any:
    if code == 0:
        return fast_tanh(x)
    if code == 1:
        return sig(x)
    if code == 2:
        return x if x > cst(x, 0.0) else cst(x, 0.0)
    return x


@njit(inline="always", **OPTS)
def dact(y: Any, g: Any, code: int) -> Any:
    if code == 0:
        return g * (cst(y, 1.0) - y * y)
    if code == 1:
        return g * y * (cst(y, 1.0) - y)
    if code == 2:
        return g if y > cst(y, 0.0) else cst(y, 0.0)
    return g


@njit(**OPTS)
def mm(A: Any, Bm: Any, C: Any) -> None:
    """``C = A @ Bm`` for C-contiguous 2D arrays: a plain loop when small, else BLAS."""
    M, K = A.shape
    N = Bm.shape[1]
    if M * K * N <= SMALL_GEMM:
        for m in range(M):
            for n in range(N):
                C[m, n] = 0
            for k in range(K):
                a = A[m, k]
                for n in range(N):
                    C[m, n] += a * Bm[k, n]
    else:
        np.dot(A, Bm, C)


@njit(**OPTS)
def mm_add(A: Any, Bm: Any, C: Any, tmp: Any) -> None:
    """``C += A @ Bm`` (``tmp`` a scratch array of C's shape)."""
    M, K = A.shape
    N = Bm.shape[1]
    if M * K * N <= SMALL_GEMM:
        for m in range(M):
            for k in range(K):
                a = A[m, k]
                for n in range(N):
                    C[m, n] += a * Bm[k, n]
    else:
        np.dot(A, Bm, tmp)
        C += tmp


@njit(**OPTS)
def apply_act(x: Any, out: Any, code: int) -> None:
    """``out = act(x)`` elementwise over 1D arrays (exposes the kernels' activations to tests)."""
    for i in range(x.size):
        out[i] = act(x[i], code)
