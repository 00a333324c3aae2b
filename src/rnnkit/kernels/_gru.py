"""Compiled GRU time loops, equal to :mod:`rnnkit.recurrent._gru` (both forms) step by step.

Fused layout ``[z | r | n]``; ``h = (h_prev - n) * z + n``. ``reset_after=False`` takes the
contiguous column blocks ``Uzr`` (H, 2H) and ``Un`` (H, H) (and their transposes in backward);
``reset_after=True`` takes ``U`` (H, 3H), ``UT`` and the recurrent bias ``b1`` (3H,).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._jit import OPTS, act, cst, dact, mm, mm_add, njit, sig


@njit(**OPTS)
def _gru_step(xg: Any, h_prev: Any, h: Any, rh: Any, Uzr: Any, Un: Any, azr: Any, an: Any,
              code: int) -> None:
    """reset_after=False, one step: ``xg`` (B, 3H) = xw on entry, gates [z|r|n] on exit."""
    B, H = h.shape
    mm(h_prev, Uzr, azr)
    for b in range(B):
        for j in range(2 * H):
            xg[b, j] = sig(azr[b, j] + xg[b, j])
        for j in range(H):
            rh[b, j] = xg[b, H + j] * h_prev[b, j]
    mm(rh, Un, an)
    for b in range(B):
        for j in range(H):
            n = act(an[b, j] + xg[b, 2 * H + j], code)
            xg[b, 2 * H + j] = n
            h[b, j] = (h_prev[b, j] - n) * xg[b, j] + n


@njit(**OPTS)
def _gru_ra_step(xg: Any, h_prev: Any, h: Any, hun: Any, U: Any, b1: Any, hu: Any, code: int) -> None:
    """reset_after=True, one step: ``xg`` (B, 3H) = xw on entry, gates [z|r|n] on exit."""
    B, H = h.shape
    mm(h_prev, U, hu)
    for b in range(B):
        for j in range(2 * H):
            xg[b, j] = sig(xg[b, j] + (hu[b, j] + b1[j]))
        for j in range(H):
            hn = hu[b, 2 * H + j] + b1[2 * H + j]
            hun[b, j] = hn
            n = act(xg[b, H + j] * hn + xg[b, 2 * H + j], code)
            xg[b, 2 * H + j] = n
            h[b, j] = (h_prev[b, j] - n) * xg[b, j] + n


@njit(**OPTS)
def gru_train(xw: Any, Uzr: Any, Un: Any, hist_h: Any, rh: Any, code: int) -> None:
    """Training forward, reset_after=False: xw -> gates in place; fills hist_h and ``rh``."""
    T, B, G = xw.shape
    H = G // 3
    azr = np.empty((B, 2 * H), xw.dtype)
    an = np.empty((B, H), xw.dtype)
    for s in range(T):
        _gru_step(xw[s], hist_h[s], hist_h[s + 1], rh[s], Uzr, Un, azr, an, code)


@njit(**OPTS)
def gru_ra_train(xw: Any, U: Any, b1: Any, hist_h: Any, hun: Any, code: int) -> None:
    """Training forward, reset_after=True: xw -> gates in place; fills hist_h and ``hu_n``."""
    T, B, G = xw.shape
    hu = np.empty((B, G), xw.dtype)
    for s in range(T):
        _gru_ra_step(xw[s], hist_h[s], hist_h[s + 1], hun[s], U, b1, hu, code)


@njit(**OPTS)
def gru_infer(x_tm: Any, W: Any, b0: Any, Ua: Any, Ub: Any, b1: Any, ra: bool, h: Any, seq: Any,
              keep: bool, buf: Any, code: int) -> None:
    """Inference for either form (``ra`` = reset_after: ``Ua`` = U, ``b1`` the recurrent bias;
    else ``Ua`` = Uzr, ``Ub`` = Un); ``h`` (B, H) initial state in, final out; ``buf``
    (chunk*B, 3H) receives a chunk of projections at a time."""
    T, B, F = x_tm.shape
    G = W.shape[1]
    H = G // 3
    dt = x_tm.dtype
    chunk = buf.shape[0] // B
    h2 = np.empty((B, H), dt)
    t1 = np.empty((B, H), dt)
    azr = np.empty((B, 2 * H), dt)
    an = np.empty((B, H), dt)
    hu = np.empty((B, G), dt)
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        xp = buf[:n * B]
        mm(x_tm[t0:t0 + n].reshape((n * B, F)), W, xp)
        for r in range(n * B):
            for j in range(G):
                xp[r, j] += b0[j]
        for s in range(n):
            xg = xp[s * B:(s + 1) * B]
            if ra:
                _gru_ra_step(xg, h, h2, t1, Ua, b1, hu, code)
            else:
                _gru_step(xg, h, h2, t1, Ua, Ub, azr, an, code)
            h[:] = h2
            if keep:
                seq[t0 + s] = h


@njit(**OPTS)
def gru_back(g3: Any, full: bool, hist_h: Any, gates: Any, rh: Any, UnT: Any, UzrT: Any, code: int,
             dxw: Any) -> None:
    """reset_after=False backward walk: fills ``dxw`` (T, B, 3H)."""
    T, B, G = gates.shape
    H = G // 3
    dt = gates.dtype
    one = cst(gates, 1.0)
    dh = np.zeros((B, H), dt)
    dz = np.empty((B, H), dt)
    dan = np.empty((B, H), dt)
    drh = np.empty((B, H), dt)
    dzr = np.empty((B, 2 * H), dt)
    tmp = np.empty((B, H), dt)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            gs = s if full else 0
            for b in range(B):
                for j in range(H):
                    dh[b, j] += g3[b, gs, j]
        gt = gates[s]
        hp = hist_h[s]
        d = dxw[s]
        for b in range(B):
            for j in range(H):
                z = gt[b, j]
                n = gt[b, 2 * H + j]
                dhv = dh[b, j]
                dz[b, j] = dhv * (hp[b, j] - n)
                v = dact(n, dhv * (one - z), code)
                dan[b, j] = v
                d[b, 2 * H + j] = v
                dh[b, j] = dhv * z
        mm(dan, UnT, drh)
        for b in range(B):
            for j in range(H):
                z = gt[b, j]
                r = gt[b, H + j]
                dr = drh[b, j] * hp[b, j]
                dh[b, j] += drh[b, j] * r
                vz = dz[b, j] * (z * (one - z))
                vr = dr * (r * (one - r))
                d[b, j] = vz
                d[b, H + j] = vr
                dzr[b, j] = vz
                dzr[b, H + j] = vr
        mm_add(dzr, UzrT, dh, tmp)


@njit(**OPTS)
def gru_ra_back(g3: Any, full: bool, hist_h: Any, gates: Any, hun: Any, UT: Any, code: int,
                dxw: Any, drec: Any) -> None:
    """reset_after=True backward walk: fills ``dxw`` and ``drec`` (T, B, 3H)."""
    T, B, G = gates.shape
    H = G // 3
    dt = gates.dtype
    one = cst(gates, 1.0)
    dh = np.zeros((B, H), dt)
    tmp = np.empty((B, H), dt)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            gs = s if full else 0
            for b in range(B):
                for j in range(H):
                    dh[b, j] += g3[b, gs, j]
        gt = gates[s]
        hp = hist_h[s]
        d = dxw[s]
        dr_ = drec[s]
        for b in range(B):
            for j in range(H):
                z = gt[b, j]
                r = gt[b, H + j]
                n = gt[b, 2 * H + j]
                dhv = dh[b, j]
                dz = dhv * (hp[b, j] - n)
                dan = dact(n, dhv * (one - z), code)
                d[b, 2 * H + j] = dan
                dr_[b, 2 * H + j] = dan * r
                dr = dan * hun[s, b, j]
                vz = dz * (z * (one - z))
                vr = dr * (r * (one - r))
                d[b, j] = vz
                d[b, H + j] = vr
                dr_[b, j] = vz
                dr_[b, H + j] = vr
                dh[b, j] = dhv * z
        mm_add(dr_, UT, dh, tmp)
