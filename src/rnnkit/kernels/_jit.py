"""Numba building blocks of the fast paths: the compile options, the activations, the row-wise
helpers of the time loops (carries and holds for masks, recurrent dropout), the ``row`` view.
The products are in :mod:`._packed` (the walker's own in :mod:`._gemm`).

Importing this module imports numba; :mod:`rnnkit.kernels` does so lazily, on the first call
that needs a kernel.

Activations are passed to the kernels as an int code (:data:`ACT_CODES`); ``act_cols`` /
``act_ip`` map pre-activations, ``dact_cols`` maps (output ``y``, upstream ``g``) to dL/da, as in
:mod:`rnnkit._activations`:

====  =======  ===========================  ==================
code  name     y = f(a)                     dL/da
====  =======  ===========================  ==================
0     tanh     tanh(a)                      g * (1 - y*y)
1     sigmoid  0.5 + 0.5 * tanh(a / 2)      g * y * (1 - y)
2     relu     max(a, 0)                    g * (y > 0)
3     linear   a                            g
4     hard_sig min(max(a + 3, 0), 6) / 6     g / 6 where 0 < y < 1, else 0
====  =======  ===========================  ==================

The gate (recurrent) activations of LSTM and GRU use the same codes (:func:`dgate` is their
derivative in terms of the output).

In float64 ``tanh`` is libm's. In float32 it is the rational approximation :func:`tanh32`
(a 13/6 odd/even rational on [-7.9053, 7.9053], clamped outside; max abs error 2.92e-7 against
float64 tanh, at x = +-5.126039, 4.9 float32 ulp there, measured by the tests on every float32
of [2, 9.010914), where the error is largest; at most 4.32 ulp on [2^-6, 2), measured once),
which vectorises where libm calls do not. Its division is not what it costs: on an AMD EPYC
(AVX-512 and AVX2 paths) the same loop without the division ran as fast, and a reciprocal
estimate with one Newton step (``arcp``) was no faster and 5.3 ulp off; it is bound by its ~17
vector operations, 8 lanes each under AVX2 against 16 under AVX-512 (0.40 and 0.20 ns an
element).
From |x| = 9.010914 on, where the correctly rounded float32 tanh is exactly +-1, it returns
exactly +-1, so a saturated unit passes no gradient (``1 - y*y == 0``), as the reference does.

Python's garbage collector is off while Numba compiles (:mod:`._gcpause`).

The overloads of the kernels (here, in :mod:`._steps` and :mod:`._packed`) are not
``inline="always"``: Numba compiles an overload's implementation as a function of its own in any
case, and inlining it types its IR again at every call site; LLVM inlines these small functions
into their callers all the same (measured on an empty cache: about 1.3 CPU s less for the
demo's training and inference walks; the same machine code in the loops).

Numba's on-disk cache of every kernel is keyed on the contents of ALL the ``.py`` files of this
package (:mod:`._cache`), not only on the kernel's own file: after an edit of any of them (a
helper here that the loops elsewhere inline, say) the next process recompiles.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic, overload

from rnnkit.kernels import _gcpause
from rnnkit.kernels._cache import key_cache_on_sources
from rnnkit.kernels._numba_private import cgutils, impl_ret_borrowed, ir

key_cache_on_sources(os.path.dirname(os.path.abspath(__file__)))
_gcpause.install()   # (the collector off while Numba compiles: ~14 % less compile time)

#: compile options of every kernel: on-disk cache, numpy error model (lets loops vectorise),
#: FMA contraction allowed (no reassociation: results stay within a few ulp of the reference)
OPTS: dict[str, Any] = {"cache": True, "error_model": "numpy", "fastmath": {"contract"}, "nogil": True}
#: the options of a private kernel that only other kernels call: no Python or C entry point of
#: its own (Numba lowers and compiles none; a call from Python would jump to a null address)
INNER: dict[str, Any] = {**OPTS, "no_cpython_wrapper": True, "no_cfunc_wrapper": True}
# Writing style of the kernels: each elementwise loop touches few arrays (one written, up to three
# read), so LLVM's runtime alias checks stay under its limit and the loop vectorises; a step is a
# few such passes over rows that sit in L1, not one loop over many arrays (measured 7x slower).
njit = numba.njit

ACT_CODES = {"tanh": 0, "sigmoid": 1, "relu": 2, "linear": 3, "hard_sigmoid": 4}

_C = 7.90531110763549805
_A = (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
      -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16)
_B = (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06)
_F32 = np.float32
_CLAMP, _NCLAMP = _F32(_C), _F32(-_C)
#: the smallest float32 whose correctly rounded tanh is 1.0
_SAT, _NSAT, _ONE, _NONE = _F32(9.010914), _F32(-9.010914), _F32(1.0), _F32(-1.0)
_A1, _A3, _A5, _A7, _A9, _A11, _A13 = (_F32(v) for v in _A)
_B0, _B2, _B4, _B6 = (_F32(v) for v in _B)


@njit(**OPTS)
def tanh32(x: Any) -> Any:
    """float32 tanh: odd 13th-degree / even 6th-degree rational, clamped at +-7.9053; exactly
    +-1 from +-9.010914 on (where float32 tanh rounds to +-1)."""
    if x >= _SAT:
        return _ONE
    if x <= _NSAT:
        return _NONE
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


@overload(fast_tanh)
def _fast_tanh_ov(x: Any) -> Any:
    if isinstance(x, types.Float) and x.bitwidth == 32:
        def impl32(x: Any) -> Any:
            return tanh32(x)
        return impl32

    def impl64(x: Any) -> Any:
        return math.tanh(x)
    return impl64


def bitcast(src: Any, dst: Any) -> Any:
    """An intrinsic: a ``src`` scalar's bits as a ``dst`` scalar of the same width."""

    @intrinsic
    def cast(typingctx: Any, v: Any) -> Any:
        if v != src:
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.bitcast(args[0], context.get_value_type(dst))
        return dst(v), codegen

    return cast


#: a float32's bits as an int32, and back
f32_bits, f32_from_bits = bitcast(types.float32, types.int32), bitcast(types.int32, types.float32)

_LOG2E, _LN2_HI, _LN2_LO = _F32(1.44269504088896341), _F32(0.693359375), _F32(-2.12194440e-4)
_EXP_LO, _EXP_HI = _F32(-87.33654), _F32(88.0)
_E0, _E1, _E2, _E3, _E4, _E5 = (_F32(v) for v in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                                  4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_HALF32 = _F32(0.5)


@njit(inline="always", **OPTS)
def exp32(x: Any) -> Any:
    """float32 ``exp`` without a libm call (so that a loop of it vectorises): ``2^n * p(r)``,
    ``n = round(x / ln 2)``, ``r = x - n ln 2`` (ln 2 in two parts, exact products), ``p`` the
    degree-7 polynomial of Cephes' ``expf`` (relative error under 2 float32 ulp, measured by the
    tests against float64 ``exp``). 0 below -87.33654 (where float32 ``exp`` leaves the normal
    numbers); above 88 it returns ``exp(88)`` (its callers take ``exp`` of values <= 0). Inlined
    into Numba's IR (``inline="always"``): left to LLVM's inliner, a loop with four or more
    calls of it ran out of the inlining budget, kept a call and did not vectorise (measured:
    minLSTM's backward 110 ms against 10)."""
    keep = x >= _EXP_LO                            # (no conditional expression: no branch, no phi)
    x = min(max(x, _EXP_LO), _EXP_HI)
    fx = np.floor(x * _LOG2E + _HALF32)
    r = x - fx * _LN2_HI - fx * _LN2_LO
    y = _E0 * r + _E1
    y = y * r + _E2
    y = y * r + _E3
    y = y * r + _E4
    y = y * r + _E5
    y = y * (r * r) + r + _ONE
    y = y * f32_from_bits(np.int32((np.int32(fx) + np.int32(127)) << np.int32(23)))
    return y * np.float32(keep)


def fast_exp(x: Any) -> Any:  # pragma: no cover - replaced by the overload inside kernels
    return math.exp(x)


@overload(fast_exp, inline="always")
def _fast_exp_ov(x: Any) -> Any:
    """``exp`` in the kernels: :func:`exp32` in float32 (vectorises), libm's in float64."""
    if isinstance(x, types.Float) and x.bitwidth == 32:
        def impl32(x: Any) -> Any:
            return exp32(x)
        return impl32

    def impl64(x: Any) -> Any:
        return math.exp(x)
    return impl64


def cst(x: Any, v: float) -> Any:  # pragma: no cover - replaced by the overload
    return v


@overload(cst)
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
def hsig(x: Any) -> Any:
    """Keras 3's hard sigmoid ``relu6(x + 3) / 6``."""
    v = x + cst(x, 3.0)
    v = v if v > cst(x, 0.0) else cst(x, 0.0)
    v = v if v < cst(x, 6.0) else cst(x, 6.0)
    return v / cst(x, 6.0)


@njit(inline="always", **OPTS)
def act(x: Any, code: int) -> Any:
    if code == 0:
        return fast_tanh(x)
    if code == 1:
        return sig(x)
    if code == 2:
        return x if x > cst(x, 0.0) else cst(x, 0.0)
    if code == 4:
        return hsig(x)
    return x


@njit(inline="always", **OPTS)
def dgate(y: Any, code: int) -> Any:
    """The derivative of activation ``code`` written in terms of its output ``y``."""
    one = cst(y, 1.0)
    if code == 1:
        return y * (one - y)
    if code == 0:
        return one - y * y
    if code == 2:
        return one if y > cst(y, 0.0) else cst(y, 0.0)
    if code == 4:
        return cst(y, 1.0 / 6.0) if (y > cst(y, 0.0) and y < one) else cst(y, 0.0)
    return one


@njit(**OPTS)
def act_cols(src: Any, dst: Any, code: int) -> None:
    """``dst = act(src)`` over two 2D views of the same shape (column blocks of bigger arrays).

    One loop per activation (the branch hoisted by hand), so each vectorises. The kernels pass
    ``[:, lo:hi]`` views, so one compiled version serves every call site."""
    R, n = src.shape
    if code == 0:
        for r in range(R):
            s, d = row(src, r), row(dst, r)
            for j in range(n):
                d[j] = fast_tanh(s[j])
    elif code == 1:
        for r in range(R):
            s, d = row(src, r), row(dst, r)
            for j in range(n):
                d[j] = sig(s[j])
    elif code == 2:
        for r in range(R):
            s, d = row(src, r), row(dst, r)
            for j in range(n):
                v = s[j]
                d[j] = v if v > cst(v, 0.0) else cst(v, 0.0)
    elif code == 4:
        for r in range(R):
            s, d = row(src, r), row(dst, r)
            for j in range(n):
                d[j] = hsig(s[j])
    else:
        for r in range(R):
            s, d = row(src, r), row(dst, r)
            for j in range(n):
                d[j] = s[j]


@njit(inline="always", **OPTS)
def add_upstream(dh: Any, g3: Any, gs: int) -> None:
    """``dh += g3[:, gs]``: the upstream gradient of one output slot into the backward state."""
    B, H = dh.shape
    for b in range(B):
        dhr = row(dh, b)
        gr = row(g3[b], gs)
        for j in range(H):
            dhr[j] += gr[j]


@njit(inline="always", **OPTS)
def copy_rows(src: Any, dst: Any) -> None:
    """``dst[:] = src`` for 2D arrays with contiguous rows (numba's generic strided copy is slow)."""
    for b in range(src.shape[0]):
        s, d = row(src, b), row(dst, b)
        for j in range(s.shape[0]):
            d[j] = s[j]


@njit(inline="always", **OPTS)
def mul_rows(a: Any, m: Any, out: Any) -> None:
    """``out = a * m`` elementwise over 2D arrays (the recurrent dropout of the state fed back)."""
    for b in range(a.shape[0]):
        ar, mr, o = row(a, b), row(m, b), row(out, b)
        for j in range(ar.shape[0]):
            o[j] = ar[j] * mr[j]


@njit(inline="always", **OPTS)
def add_mul_rows(acc: Any, a: Any, m: Any) -> None:
    """``acc += a * m`` elementwise over 2D arrays."""
    for b in range(a.shape[0]):
        r, ar, mr = row(acc, b), row(a, b), row(m, b)
        for j in range(ar.shape[0]):
            r[j] += ar[j] * mr[j]


@njit(inline="always", **OPTS)
def carry(prev: Any, new: Any, m: Any) -> None:
    """``new[b] = prev[b]`` for every row with ``m[b] == 0``: a masked step carries the state."""
    for b in range(m.shape[0]):
        if m[b] == 0:
            s, d = row(prev, b), row(new, b)
            for j in range(s.shape[0]):
                d[j] = s[j]


@njit(inline="always", **OPTS)
def hold(d: Any, save: Any, m: Any) -> None:
    """Backward of a masked step, before it: rows with ``m[b] == 0`` of ``d`` move into ``save``
    (``d`` there becomes 0, so the step's backward contributes nothing for them)."""
    for b in range(m.shape[0]):
        if m[b] == 0:
            r, v = row(d, b), row(save, b)
            for j in range(r.shape[0]):
                v[j] = r[j]
                r[j] = 0


@njit(inline="always", **OPTS)
def release(d: Any, save: Any, m: Any) -> None:
    """Backward of a masked step, after it: ``d[b] += save[b]`` for the held rows (the carried
    state passes its gradient straight through)."""
    for b in range(m.shape[0]):
        if m[b] == 0:
            r, v = row(d, b), row(save, b)
            for j in range(r.shape[0]):
                r[j] += v[j]


@njit(**OPTS)
def act_ip(a: Any, code: int) -> None:
    """``a = act(a)`` in place on a 2D view. (A separate function: with two array arguments that
    are the same array, LLVM's overlap check would pick the scalar loop.)"""
    R, n = a.shape
    if code == 0:
        for r in range(R):
            x = row(a, r)
            for j in range(n):
                x[j] = fast_tanh(x[j])
    elif code == 1:
        for r in range(R):
            x = row(a, r)
            for j in range(n):
                x[j] = sig(x[j])
    elif code == 2:
        for r in range(R):
            x = row(a, r)
            for j in range(n):
                v = x[j]
                x[j] = v if v > cst(v, 0.0) else cst(v, 0.0)
    elif code == 4:
        for r in range(R):
            x = row(a, r)
            for j in range(n):
                x[j] = hsig(x[j])


@njit(**OPTS)
def dact_cols(y: Any, g: Any, code: int) -> None:
    """``g = dact(y, g)`` in place on ``g`` (2D views of the same shape)."""
    R, n = y.shape
    if code == 0:
        for r in range(R):
            yr, gr = row(y, r), row(g, r)
            for j in range(n):
                v = yr[j]
                gr[j] = gr[j] * (cst(v, 1.0) - v * v)
    elif code == 1:
        for r in range(R):
            yr, gr = row(y, r), row(g, r)
            for j in range(n):
                v = yr[j]
                gr[j] = gr[j] * v * (cst(v, 1.0) - v)
    elif code == 2:
        for r in range(R):
            yr, gr = row(y, r), row(g, r)
            for j in range(n):
                gr[j] = gr[j] if yr[j] > cst(yr[j], 0.0) else cst(yr[j], 0.0)
    elif code == 4:
        for r in range(R):
            yr, gr = row(y, r), row(g, r)
            for j in range(n):
                gr[j] = gr[j] * dgate(yr[j], 4)


@njit(**OPTS)
def apply_act(x: Any, out: Any, code: int) -> None:
    """``out = act(x)`` elementwise over 1D arrays (exposes the kernels' activations to tests)."""
    for i in range(x.size):
        out[i] = act(x[i], code)


@njit(**OPTS)
def apply_exp(x: Any, out: Any) -> None:
    """``out = fast_exp(x)`` elementwise over 1D arrays (exposes the kernels' ``exp`` to tests)."""
    for i in range(x.size):
        out[i] = fast_exp(x[i])


def _row(typingctx: Any, a: Any, i: Any) -> Any:
    """``row(a, i)``: row ``i`` of a 2D array as a C-contiguous 1D array (no copy, no bounds check).

    Every 2D array of the kernels has contiguous rows (any row stride: a batch block of a bigger
    array, a column block ``[:, lo:hi]``), but numba types such views as layout 'A', and the
    inner loops over an 'A' row index with a run-time stride, which LLVM does not vectorise
    (measured: the LSTM inference loop 1.5x slower). This view tells it the stride is one
    element."""
    if not (isinstance(a, types.Array) and a.ndim == 2 and isinstance(i, types.Integer)):
        return None
    out = types.Array(a.dtype, 1, "C", readonly=not a.mutable)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        arr_t = sig.args[0]
        src = context.make_array(arr_t)(context, builder, args[0])
        idx = context.cast(builder, args[1], sig.args[1], types.intp)
        # the row index through an empty inline asm: LLVM then cannot express the row's address
        # as a function of an enclosing loop's counter, so it does not hoist an elementwise
        # loop's run-time alias checks out of a loop over the rows (a hoisted check spans every
        # row of every array; measured: the LSTM step's state update ran its scalar fallback,
        # 100 ns a 32-unit row against 19 ns)
        idx = builder.asm(ir.FunctionType(idx.type, [idx.type]), "", "=r,0", [idx], False, "rnnkit.row")
        shapes = cgutils.unpack_tuple(builder, src.shape, 2)
        strides = cgutils.unpack_tuple(builder, src.strides, 2)
        ptr = cgutils.pointer_add(builder, src.data, builder.mul(idx, strides[0]))
        dst = context.make_array(sig.return_type)(context, builder)
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(
            context.get_data_type(arr_t.dtype)))
        context.populate_array(dst, data=builder.bitcast(ptr, src.data.type), shape=[shapes[1]],
                               strides=[itemsize], itemsize=itemsize, meminfo=src.meminfo)
        return impl_ret_borrowed(context, builder, sig.return_type, dst._getvalue())

    return out(a, i), codegen


row: Any = intrinsic(_row)
