"""The int8 arithmetic in NumPy: float32 and int64, the same quantization and the same rounding
as the compiled loops of :mod:`rnnkit.kernels._int8` (whose docstring states the scheme).

Every function here has the signature of its compiled twin, with the plain (N, K) int8 weights
where the compiled one takes them packed (:func:`rnnkit.kernels._int8.pack`); it runs when
numba is missing or under ``rnnkit.kernels.use("reference")``, and the tests hold the compiled
loops to it.
"""

from __future__ import annotations

import numpy as np

from rnnkit import kernels
from rnnkit.kernels import _int8_act as A

F32 = np.float32


def quantize_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``w`` (K, N) float -> (q (N, K) int8 in [-127, 127], scale (N,) float32): symmetric, one
    scale per output column, ``scale = max|w[:, n]| / 127`` (1 for an all-zero column),
    ``q = clip(rint(w / scale), -127, 127)`` in float32."""
    wt = np.ascontiguousarray(np.asarray(w, F32).T)
    amax = np.max(np.abs(wt), axis=1) if wt.shape[1] else np.zeros(wt.shape[0], F32)
    s = (amax / F32(127.0)).astype(F32)
    s[s == 0] = F32(1.0)
    q = np.clip(np.rint(wt / s[:, None]), -127, 127).astype(np.int8)
    return q, s


def quant_rows(x: np.ndarray, levels: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of ``x`` (M, K) float32 -> (q (M, K) uint8, scale (M,) float32, zero point (M,)
    int32), ``L = levels`` (by default this machine's, :func:`rnnkit.kernels.int8_levels`: 255,
    or 127 where the compiled products run the AVX2 tile): ``lo = min(x, 0)``, ``hi = max(x,
    0)``, ``s = (hi - lo) / L`` (1 when 0), ``zp = clip(rint(-lo / s), 0, L)``,
    ``q = clip(rint(x * (1 / s)) + zp, 0, L)``."""
    top = F32(kernels.int8_levels() if levels is None else levels)
    x = np.asarray(x, F32)
    lo = np.minimum(x.min(axis=1), F32(0.0))
    hi = np.maximum(x.max(axis=1), F32(0.0))
    s = ((hi - lo) / top).astype(F32)
    s[s == 0] = F32(1.0)
    zp = np.clip(np.rint(-lo / s), F32(0.0), top).astype(F32)
    inv = (F32(1.0) / s).astype(F32)
    q = np.clip(np.rint(x * inv[:, None]) + zp[:, None], F32(0.0), top).astype(np.uint8)
    return q, s, zp.astype(np.int32)


def product(x: np.ndarray, w: np.ndarray, col: np.ndarray, ws: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``float32(q @ w^T - zp * col) * (s * ws) + base``: the dequantized product of the rows of
    ``x`` (M, K) with ``w`` (N, K) int8 (``col`` its row sums), in int64 then float32."""
    q, s, zp = quant_rows(x)
    acc = q.astype(np.int64) @ w.astype(np.int64).T - zp.astype(np.int64)[:, None] * col.astype(np.int64)
    return acc.astype(np.int32).astype(F32) * (s[:, None] * ws[None, :]) + base


def project(x: np.ndarray, wp: np.ndarray, col: np.ndarray, ws: np.ndarray, bias: np.ndarray,
            out: np.ndarray) -> None:
    """``out = product(x, wp, col, ws, bias)`` (the compiled one works in chunks of rows)."""
    out[...] = product(x, wp, col, ws, np.broadcast_to(bias, out.shape))


def tanh8(x: np.ndarray) -> np.ndarray:
    """The clamped float32 5/4 rational tanh of the compiled loops
    (:func:`rnnkit.kernels._int8.tanh8`, constants in :mod:`rnnkit.kernels._int8_act`),
    elementwise, rounded as they round it."""
    x = np.minimum(np.maximum(np.asarray(x, F32), -A.T_CLAMP), A.T_CLAMP)
    y = x * x
    y2 = y * y
    return ((x * ((A.T_A1 + A.T_A3 * y) + A.T_A5 * y2)) / ((A.T_B0 + A.T_B2 * y) + y2)).astype(F32)


def sigm8(x: np.ndarray) -> np.ndarray:
    """The clamped float32 rational sigmoid of the compiled loops
    (:func:`rnnkit.kernels._int8.sigm8`: ``0.5 + 0.5 tanh8(x / 2)`` with the halvings in the
    coefficients), elementwise, rounded as they round it."""
    x = np.minimum(np.maximum(np.asarray(x, F32), -A.S_CLAMP), A.S_CLAMP)
    y = x * x
    y2 = y * y
    return (F32(0.5) + (x * ((A.S_A1 + A.S_A3 * y) + A.S_A5 * y2)) / ((A.S_B0 + A.S_B2 * y) + y2)).astype(F32)


def act8(x: np.ndarray, code: int) -> np.ndarray:
    """Activation ``code``: tanh 0 (:func:`tanh8`), sigmoid 1 (:func:`sigm8`), relu 2, linear 3,
    hard_sigmoid 4 (min(max(x + 3, 0), 6) / 6), in float32."""
    x = np.asarray(x, F32)
    if code == 0:
        return tanh8(x)
    if code == 1:
        return sigm8(x)
    if code == 2:
        return np.maximum(x, F32(0.0))
    if code == 4:
        return np.minimum(np.maximum(x + F32(3.0), F32(0.0)), F32(6.0)) / F32(6.0)
    return x


def _keep(mask: np.ndarray, t: int, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    if mask.shape[0] == 0:
        return new
    return np.where(mask[t][:, None] != 0, new, old)


def _xw(x: np.ndarray, wp: np.ndarray, wcol: np.ndarray, ws: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return product(x, wp, wcol, ws, np.broadcast_to(bias, (x.shape[0], bias.shape[0])))


def walk_lstm(x: np.ndarray, wp: np.ndarray, wcol: np.ndarray, ws: np.ndarray, bias: np.ndarray,
              up: np.ndarray, col: np.ndarray, us: np.ndarray, h: np.ndarray, c: np.ndarray,
              mask: np.ndarray, seq: np.ndarray, code: int, rcode: int) -> None:
    """LSTM: ``a = product(x_t, W) + bias + product(h, U)``; i, f, o = ra(.), g = act(.);
    ``c = f c + i g``; ``h = o act(c)``; masked rows keep their state."""
    H = bias.shape[0] // 4
    for t in range(x.shape[0]):
        a = product(h, up, col, us, _xw(x[t], wp, wcol, ws, bias))
        i, f = act8(a[:, :H], rcode), act8(a[:, H:2 * H], rcode)
        g, o = act8(a[:, 2 * H:3 * H], code), act8(a[:, 3 * H:], rcode)
        cn = f * c + i * g
        hn = o * act8(cn, code)
        c[...] = _keep(mask, t, cn, c)
        h[...] = _keep(mask, t, hn, h)
        if seq.shape[0]:
            seq[t] = h


def walk_gru(x_seq: np.ndarray, wp: np.ndarray, wcol: np.ndarray, ws: np.ndarray, bias: np.ndarray,
             up: np.ndarray, col: np.ndarray, us: np.ndarray, hb: np.ndarray, h: np.ndarray,
             mask: np.ndarray, seq: np.ndarray, code: int, rcode: int, reset_after: bool,
             up_n: np.ndarray, col_n: np.ndarray, us_n: np.ndarray) -> None:
    """GRU, both forms (see :func:`rnnkit.kernels._int8.walk_gru`); ``h = (h - n) z + n``."""
    H = bias.shape[0] // 3
    for t in range(x_seq.shape[0]):
        x = _xw(x_seq[t], wp, wcol, ws, bias)
        if reset_after:
            a = product(h, up, col, us, np.broadcast_to(hb, (h.shape[0], 3 * H)))
            zr = act8(x[:, :2 * H] + a[:, :2 * H], rcode)
            n = act8(zr[:, H:] * a[:, 2 * H:] + x[:, 2 * H:], code)
        else:
            zr = act8(product(h, up, col, us, x[:, :2 * H]), rcode)
            rh = zr[:, H:] * h
            n = act8(product(rh, up_n, col_n, us_n, x[:, 2 * H:]), code)
        h[...] = _keep(mask, t, (h - n) * zr[:, :H] + n, h)
        if seq.shape[0]:
            seq[t] = h


def walk_simple(x: np.ndarray, wp: np.ndarray, wcol: np.ndarray, ws: np.ndarray, bias: np.ndarray,
                up: np.ndarray, col: np.ndarray, us: np.ndarray, h: np.ndarray, mask: np.ndarray,
                seq: np.ndarray, code: int) -> None:
    """SimpleRNN: ``h = act(product(x_t, W) + bias + product(h, U))``."""
    for t in range(x.shape[0]):
        xw = _xw(x[t], wp, wcol, ws, bias)
        h[...] = _keep(mask, t, act8(product(h, up, col, us, xw), code), h)
        if seq.shape[0]:
            seq[t] = h


def pack(wq: np.ndarray) -> np.ndarray:
    """The weights as the functions here take them: unchanged (N, K) int8."""
    return np.ascontiguousarray(wq, np.int8)
