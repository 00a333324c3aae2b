"""Compiled int8 inference: u8 x s8 products accumulated in int32, and the LSTM / GRU / SimpleRNN
time loops built on them. :mod:`rnnkit.quant._reference` is the same arithmetic in NumPy.

The scheme (the names below are those of the reference):

- weights ``w`` (N, K) int8 in [-127, 127], one float32 scale ``ws[n]`` per output row;
- an activation row ``x`` (K,) float32 is quantized on its own (dynamic, asymmetric, uint8
  from 0 to ``L`` = :data:`QMAX`: 255, or 127 where the products run the AVX2 tile):
  ``lo = min(x, 0)``, ``hi = max(x, 0)``, ``s = (hi - lo) / L`` (1 when ``hi == lo``),
  ``zp = clip(rint(-lo / s), 0, L)``, ``q = clip(rint(x * (1 / s)) + zp, 0, L)``;
- ``acc[n] = sum_k q[k] * w[n, k] - zp * colsum[n]`` in int32 (``colsum[n] = sum_k w[n, k]``,
  computed once), then ``y[n] = float32(acc[n]) * (s * ws[n])`` (+ bias, + the other product).

All float arithmetic is float32 without contraction or reassociation, so the NumPy reference
rounds exactly as these loops do.

Products (:mod:`rnnkit.kernels._int8_gemm`): ``vpdpbusd`` tiles on a CPU with AVX-512 VNNI,
``vpmaddubsw`` + ``vpmaddwd`` tiles on 7-bit activations with AVX2, a plain int32 loop
elsewhere; the quantized rows are :data:`QDT` (uint8).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._int8_act import (
    S_A1,
    S_A3,
    S_A5,
    S_B0,
    S_B2,
    S_CLAMP,
    T_A1,
    T_A3,
    T_A5,
    T_B0,
    T_B2,
    T_CLAMP,
)
from rnnkit.kernels._int8_gemm import (
    AVX2,
    KG,
    NB,
    OPTS8,
    QDT,
    QMAX,
    VNNI,
    assembly,
    gemm,
    out_width,
    pack,
    padded,
)
from rnnkit.kernels._jit import f32_bits as _bits
from rnnkit.kernels._jit import f32_from_bits as _from_bits
from rnnkit.kernels._jit import njit, row

_F32 = np.float32
_HALF, _ZERO, _THREE, _SIX, _QMAX = _F32(0.5), _F32(0.0), _F32(3.0), _F32(6.0), _F32(QMAX)
_NT_CLAMP, _NS_CLAMP = -T_CLAMP, -S_CLAMP


_SIGN = np.int32(-2 ** 31)


@njit(**OPTS8)
def _range(x: Any) -> tuple[Any, Any]:
    """(min(x, 0), max(x, 0)) of a finite row, as integer maxima over its bits (LLVM vectorises
    an integer max; it leaves a float one scalar without fast-math). A float's bits as an int32
    order the non-negative floats as their values, and with the sign bit flipped they order the
    negative ones by magnitude; a zero result comes back as -0.0 for ``lo`` (the same scale and
    zero point as +0.0)."""
    hi, neg = np.int32(0), np.int32(0)
    for k in range(x.shape[0]):
        b = _bits(x[k])
        hi = max(hi, b)
        neg = max(neg, np.int32(b ^ _SIGN))
    return _from_bits(np.int32(neg ^ _SIGN)), _from_bits(hi)


@njit(**OPTS8)
def quant_row(x: Any, q: Any) -> tuple[Any, Any]:
    """Quantize the float32 row ``x`` into ``q`` (:data:`QDT`, len >= len(x); the tail set to 0)
    with values 0 to :data:`QMAX`: returns (scale, zero point)."""
    lo, hi = _range(x)
    s = (hi - lo) / _QMAX
    if s == _ZERO:
        s = _F32(1.0)
    zp = min(max(np.rint(-lo / s), _ZERO), _QMAX)
    inv = _F32(1.0) / s
    for k in range(x.shape[0]):
        v = min(max(np.rint(x[k] * inv) + zp, _ZERO), _QMAX)
        q[k] = np.uint8(np.int32(v))   # through int32: a float -> uint8 conversion stays scalar
    for k in range(x.shape[0], q.shape[0]):
        q[k] = 0
    return s, np.int32(zp)


@njit(**OPTS8)
def quant_rows(x: Any, q: Any, s: Any, zp: Any) -> None:
    """:func:`quant_row` for every row of ``x`` (M, K) into ``q`` (M, K'), ``s`` (M,), ``zp`` (M,).
    Rows of contiguous elements (any row stride) are read as C-contiguous views (:func:`row`):
    numba types a row of a sliced array as layout 'A', whose loops index with a run-time stride
    and do not vectorise."""
    if x.strides[1] == x.itemsize:
        for m in range(x.shape[0]):
            s[m], zp[m] = quant_row(row(x, m), row(q, m))
    else:
        for m in range(x.shape[0]):
            s[m], zp[m] = quant_row(x[m], row(q, m))


@njit(**OPTS8)
def dequant_row(acc: Any, zm: Any, sm: Any, col: Any, ws: Any, base: Any, out: Any) -> None:
    """``out[n] = float32(acc[n] - zm * col[n]) * (sm * ws[n]) + base[n]``: one row's
    dequantized product (``zm``, ``sm`` its zero point and scale) plus ``base`` (another array
    than ``out``: the loop then vectorises)."""
    for n in range(out.shape[0]):
        c = np.int32(acc[n] - zm * col[n])
        out[n] = np.float32(c) * (sm * ws[n]) + base[n]


@njit(**OPTS8)
def dequant_add(acc: Any, zp: Any, s: Any, col: Any, ws: Any, base: Any, out: Any) -> None:
    """``out[m, n] = float32(acc[m, n] - zp[m] * col[n]) * (s[m] * ws[n]) + base[m, n]``."""
    for m in range(out.shape[0]):
        dequant_row(row(acc, m), zp[m], s[m], col, ws, row(base, m), row(out, m))


@njit(**OPTS8)
def dequant_bias(acc: Any, zp: Any, s: Any, col: Any, ws: Any, bias: Any, out: Any) -> None:
    """:func:`dequant_add` with the same ``bias`` (N,) row added to every row."""
    for m in range(out.shape[0]):
        dequant_row(row(acc, m), zp[m], s[m], col, ws, bias, row(out, m))


@njit(**OPTS8)
def project(x: Any, wp: Any, col: Any, ws: Any, bias: Any, out: Any) -> None:
    """``out (M, N) = dequant(quant(x) (M, K) @ w^T) + bias`` in chunks of 64 rows."""
    M, K = x.shape
    no = out.shape[1] if wp.ndim == 2 else wp.shape[0] * NB
    step = 64
    q = np.empty((step, (K + KG - 1) // KG * KG), QDT)
    acc = np.empty((step, no), np.int32)
    s = np.empty(step, np.float32)
    zp = np.empty(step, np.int32)
    for m0 in range(0, M, step):
        m1 = min(M, m0 + step)
        r = m1 - m0
        quant_rows(x[m0:m1], q[:r], s[:r], zp[:r])
        gemm(q[:r], wp, acc[:r])
        dequant_bias(acc[:r], zp[:r], s[:r], col, ws, bias, out[m0:m1])


@njit(inline="always", **{**OPTS8, "cache": False})
def tanh8(x: Any) -> Any:
    """float32 tanh of the int8 loops: the clamped 5/4 rational of
    :mod:`rnnkit.kernels._int8_act`, ``x`` clamped to [-C, C], ``y = x * x``,
    ``(x ((A1 + A3 y) + A5 y^2)) / ((B0 + B2 y) + y^2)``: max abs error 1.76e-4 against float64
    tanh, 5 multiplies, 4 adds and a division. No contraction: every operation rounds as in
    the NumPy reference, :func:`rnnkit.quant._reference.tanh8`. Inlined into cached callers,
    not cached on its own."""
    if x > T_CLAMP:
        x = T_CLAMP
    if x < _NT_CLAMP:
        x = _NT_CLAMP
    y = x * x
    y2 = y * y
    return (x * ((T_A1 + T_A3 * y) + T_A5 * y2)) / ((T_B0 + T_B2 * y) + y2)


@njit(inline="always", **{**OPTS8, "cache": False})
def sigm8(x: Any) -> Any:
    """float32 sigmoid of the int8 loops: ``0.5 + 0.5 tanh8(x / 2)`` with the halvings folded
    into the coefficients (:mod:`rnnkit.kernels._int8_act`), ``x`` clamped to [-2C, 2C]:
    ``0.5 + (x ((SA1 + SA3 y) + SA5 y^2)) / ((SB0 + SB2 y) + y^2)``, max abs error 8.8e-5.
    Rounds as :func:`rnnkit.quant._reference.sigm8`."""
    if x > S_CLAMP:
        x = S_CLAMP
    if x < _NS_CLAMP:
        x = _NS_CLAMP
    y = x * x
    y2 = y * y
    return _HALF + (x * ((S_A1 + S_A3 * y) + S_A5 * y2)) / ((S_B0 + S_B2 * y) + y2)


@njit(**OPTS8)
def act8(x: Any, code: int) -> Any:
    """The activation of ``code`` (tanh 0: :func:`tanh8`, sigmoid 1: :func:`sigm8`, relu 2,
    linear 3, hard_sigmoid 4) in float32."""
    if code == 0:
        return tanh8(x)
    if code == 1:
        return sigm8(x)
    if code == 2:
        return max(x, _ZERO)
    if code == 4:
        return min(max(x + _THREE, _ZERO), _SIX) / _SIX
    return x


@njit(**OPTS8)
def act_ip(v: Any, code: int) -> None:
    """:func:`act8` over the 1D ``v`` in place (one loop per code, from 0: it vectorises)."""
    n = v.shape[0]
    if code == 0:
        for k in range(n):
            v[k] = tanh8(v[k])
    elif code == 1:
        for k in range(n):
            v[k] = sigm8(v[k])
    elif code == 2:
        for k in range(n):
            v[k] = max(v[k], _ZERO)
    elif code == 4:
        for k in range(n):
            v[k] = min(max(v[k] + _THREE, _ZERO), _SIX) / _SIX


@njit(**OPTS8)
def _rec(h: Any, wp: Any, col: Any, ws: Any, base: Any, q: Any, s: Any, zp: Any, acc: Any, out: Any) -> None:
    """out = base + dequant(quant(h) @ w^T): the recurrent product of one step."""
    quant_rows(h, q, s, zp)
    gemm(q, wp, acc)
    dequant_add(acc, zp, s, col, ws, base, out)


#: the input rows of a walk are quantized up to this many bytes of one batch row's steps at a
#: time (read in batch-row order: a time-major view of a batch-major input puts one step's rows
#: a whole sequence apart, and reading them step by step cost 40 us a step at S3, 15 % of it)
RUN_BYTES = 16384
#: and at most this many bytes of quantized rows at a time (beside the weights in L2)
CHUNK_BYTES = 1 << 18


@njit(**OPTS8)
def walks_chunk(T: int, B: int, F: int) -> int:
    """Steps per quantized chunk of the inputs (T, B, F): :data:`RUN_BYTES` of each batch row's
    float32 inputs, :data:`CHUNK_BYTES` of quantized rows."""
    return max(1, min(T, RUN_BYTES // max(4 * F, 1), CHUNK_BYTES // max(B * F, 1)))


@njit(**OPTS8)
def _quant_steps(x: Any, t0: int, n: int, q: Any, s: Any, zp: Any) -> None:
    """Quantize the rows of steps ``t0 .. t0+n`` of ``x`` (T, B, F): row ``b`` of step
    ``t0 + i`` into row ``i * B + b`` of ``q``, ``s``, ``zp`` (batch row by batch row)."""
    B = x.shape[1]
    unit = x.strides[2] == x.itemsize
    for b in range(B):
        for i in range(n):
            r = i * B + b
            if unit:   # a C-contiguous view of the row: its loops vectorise (see quant_rows)
                s[r], zp[r] = quant_row(row(x[t0 + i], b), row(q, r))
            else:
                s[r], zp[r] = quant_row(x[t0 + i, b], row(q, r))


@njit(**OPTS8)
def _inp(i: int, q: Any, s: Any, zp: Any, wp: Any, wcol: Any, ws: Any, bias: Any, acc: Any,
         out: Any) -> None:
    """out = dequant(q_i @ W^T) + bias: the input product of step ``i`` of a quantized chunk."""
    B = out.shape[0]
    lo = i * B
    gemm(q[lo:lo + B], wp, acc)
    dequant_bias(acc, zp[lo:lo + B], s[lo:lo + B], wcol, ws, bias, out)


@njit(**OPTS8)
def _bufs(B: int, R: int, N: int, no: int) -> tuple[Any, Any, Any, Any, Any]:
    return (np.empty((B, (R + KG - 1) // KG * KG), QDT), np.empty(B, np.float32),
            np.empty(B, np.int32), np.empty((B, no), np.int32), np.empty((B, N), np.float32))


@njit(**OPTS8)
def _in_bufs(x: Any, G: int, wp: Any) -> tuple[Any, Any, Any, Any]:
    """The input side's buffers of a walk over ``x`` (T, B, F): (quantized chunk (n*B, F'), its
    scales, its zero points, one step's accumulators (B, G'))."""
    T, B, F = x.shape
    rows = walks_chunk(T, B, F) * B
    return (np.empty((rows, (F + KG - 1) // KG * KG), QDT), np.empty(rows, np.float32),
            np.empty(rows, np.int32), np.empty((B, G if wp.ndim == 2 else wp.shape[0] * NB), np.int32))


@njit(**OPTS8)
def _lstm_rows(t: int, i0: int, accx: Any, zpx: Any, sx: Any, wcol: Any, ws: Any, bias: Any, acc: Any,
               zp: Any, s: Any, col: Any, us: Any, h: Any, c: Any, mask: Any, code: int, rcode: int,
               xr: Any, ar: Any, tmp: Any) -> None:
    """The rows of LSTM step ``t`` after its products: row ``b``'s input accumulators ``accx[b]``
    (scale and zero point at ``i0 + b``) and recurrent ones ``acc[b]`` dequantized, the gates
    activated, ``c`` and ``h`` updated, each row while it sits in L1 (``xr``, ``ar`` (4H,),
    ``tmp`` (H,) scratch), in passes of few arrays each. (Fusing the recurrent dequantization
    into the activations' loops, or tanh(c) into the cell update, measured slower at S3: 5.4
    and 6.4 ms against 4.0-5.1 ms for these passes, 100 steps of 64 rows.)"""
    B, H = h.shape
    G = 4 * H
    g0, g1 = 2 * H, 3 * H
    for b in range(B):
        if mask.shape[0] > 0 and mask[t, b] == 0:
            continue
        i = i0 + b
        dequant_row(row(accx, b), zpx[i], sx[i], wcol, ws, bias, xr)
        dequant_row(row(acc, b), zp[b], s[b], col, us, xr, ar)
        act_ip(ar[:g0], rcode)
        act_ip(ar[g0:g1], code)
        act_ip(ar[g1:G], rcode)
        cr, hr = row(c, b), row(h, b)
        for j in range(H):
            cn = ar[H + j] * cr[j] + ar[j] * ar[2 * H + j]
            cr[j] = cn
            tmp[j] = cn
        act_ip(tmp, code)
        for j in range(H):
            hr[j] = ar[3 * H + j] * tmp[j]


@njit(**OPTS8)
def walk_lstm(x: Any, wp: Any, wcol: Any, ws: Any, bias: Any, up: Any, col: Any, us: Any, h: Any,
              c: Any, mask: Any, seq: Any, code: int, rcode: int) -> None:
    """LSTM over ``x`` (T, B, F) (processing order; any strides) with the packed input kernel
    ``wp`` (row sums ``wcol``, scales ``ws``) and bias row ``bias`` (4H,), from state ``h``,
    ``c`` (B, H) (updated in place); ``mask`` (T, B) uint8 or (0, 0); ``seq`` (T, B, H) or
    (0, B, H) receives h after every step."""
    T, B, F = x.shape
    G = bias.shape[0]
    H = G // 4
    no = G if up.ndim == 2 else up.shape[0] * NB
    q, s, zp, acc, _ = _bufs(B, H, 0, no)
    qx, sx, zpx, accx = _in_bufs(x, G, wp)
    xr, ar, tmp = np.empty(G, np.float32), np.empty(G, np.float32), np.empty(H, np.float32)
    per = walks_chunk(T, B, F)
    for t in range(T):
        i0 = t % per
        if i0 == 0:
            _quant_steps(x, t, min(per, T - t), qx, sx, zpx)
        gemm(qx[i0 * B:(i0 + 1) * B], wp, accx)
        quant_rows(h, q, s, zp)
        gemm(q, up, acc)
        _lstm_rows(t, i0 * B, accx, zpx, sx, wcol, ws, bias, acc, zp, s, col, us, h, c, mask, code, rcode,
                   xr, ar, tmp)
        if seq.shape[0] > 0:
            seq[t] = h


@njit(**OPTS8)
def walk_gru(x: Any, wp: Any, wcol: Any, ws: Any, bias: Any, up: Any, col: Any, us: Any, hb: Any,
             h: Any, mask: Any, seq: Any, code: int, rcode: int, reset_after: bool, up_n: Any,
             col_n: Any, us_n: Any) -> None:
    """GRU over ``x`` (T, B, F), the input product as in :func:`walk_lstm`. ``reset_after``:
    ``hu = dequant(h @ U^T) + hb`` over all 3H (``up`` packs all of U); otherwise ``up`` packs
    the z|r rows and ``up_n`` the n rows, applied to ``r * h`` (quantized on its own). ``hb``
    (3H,) is the recurrent bias row (zeros without)."""
    T, B, F = x.shape
    G = bias.shape[0]
    H = G // 3
    nr = 3 * H if reset_after else 2 * H
    no = nr if up.ndim == 2 else up.shape[0] * NB
    q, s, zp, acc, a = _bufs(B, H, nr, no)
    qx, sx, zpx, accx = _in_bufs(x, G, wp)
    xx = np.empty((B, G), np.float32)
    base = np.empty((B, nr), np.float32)
    for b in range(B):
        for j in range(nr):
            base[b, j] = hb[j]
    no_n = H if up_n.ndim == 2 else up_n.shape[0] * NB
    acc_n = np.empty((B, no_n), np.int32)
    rh = np.empty((B, H), np.float32)
    nn = np.empty((B, H), np.float32)
    zr = np.empty((B, 2 * H), np.float32)
    per = walks_chunk(T, B, F)
    for t in range(T):
        if t % per == 0:
            _quant_steps(x, t, min(per, T - t), qx, sx, zpx)
        _inp(t % per, qx, sx, zpx, wp, wcol, ws, bias, accx, xx)
        if reset_after:
            _rec(h, up, col, us, base, q, s, zp, acc, a)
            for b in range(B):
                for j in range(2 * H):
                    zr[b, j] = xx[b, j] + a[b, j]
                act_ip(row(zr, b), rcode)
                for j in range(H):
                    nn[b, j] = zr[b, H + j] * a[b, 2 * H + j] + xx[b, 2 * H + j]
                act_ip(row(nn, b), code)
        else:
            _rec(h, up, col, us, xx[:, :2 * H], q, s, zp, acc, zr)
            for b in range(B):
                act_ip(row(zr, b), rcode)
                for j in range(H):
                    rh[b, j] = zr[b, H + j] * h[b, j]
            _rec(rh, up_n, col_n, us_n, xx[:, 2 * H:], q, s, zp, acc_n, nn)
            for b in range(B):
                act_ip(row(nn, b), code)
        for b in range(B):
            if mask.shape[0] > 0 and mask[t, b] == 0:
                continue
            for j in range(H):
                n = nn[b, j]
                h[b, j] = (h[b, j] - n) * zr[b, j] + n
        if seq.shape[0] > 0:
            seq[t] = h


@njit(**OPTS8)
def walk_simple(x: Any, wp: Any, wcol: Any, ws: Any, bias: Any, up: Any, col: Any, us: Any, h: Any,
                mask: Any, seq: Any, code: int) -> None:
    """SimpleRNN over ``x`` (T, B, F): ``h = act(xw_t + dequant(quant(h) @ U^T))``, ``xw_t`` the
    input product as in :func:`walk_lstm`."""
    T, B, F = x.shape
    H = bias.shape[0]
    no = H if up.ndim == 2 else up.shape[0] * NB
    q, s, zp, acc, a = _bufs(B, H, H, no)
    qx, sx, zpx, accx = _in_bufs(x, H, wp)
    xt = np.empty((B, H), np.float32)
    per = walks_chunk(T, B, F)
    for t in range(T):
        if t % per == 0:
            _quant_steps(x, t, min(per, T - t), qx, sx, zpx)
        _inp(t % per, qx, sx, zpx, wp, wcol, ws, bias, accx, xt)
        _rec(h, up, col, us, xt, q, s, zp, acc, a)
        for b in range(B):
            if mask.shape[0] > 0 and mask[t, b] == 0:
                continue
            act_ip(row(a, b), code)
            for j in range(H):
                h[b, j] = a[b, j]
        if seq.shape[0] > 0:
            seq[t] = h


__all__ = ["AVX2", "QDT", "QMAX", "VNNI", "act8", "assembly", "gemm", "pack", "padded", "project",
           "quant_row", "quant_rows", "walk_gru", "walks_chunk", "walk_lstm", "walk_simple", "out_width"]
