"""Compiled GRU time loops, equal to :mod:`rnnkit.recurrent._gru` (both forms) step by step.

Fused layout ``[z | r | n]``; ``h = (h_prev - n) * z + n``. ``reset_after=False`` takes the
column blocks ``Uzr`` (H, 2H) and ``Un`` (H, H) (views of U: rows need only be contiguous);
``reset_after=True`` takes ``U`` (H, 3H) and the recurrent bias ``b1`` (3H,).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._gemm import project
from rnnkit.kernels._jit import (
    OPTS,
    act,
    act_ip,
    add_mul_rows,
    add_upstream,
    carry,
    copy_rows,
    cst,
    dact_cols,
    dgate,
    hold,
    mul_rows,
    njit,
    release,
    row,
    sig,
)
from rnnkit.kernels._packed import rgemm


@njit(**OPTS)
def _blend(xg: Any, h_prev: Any, h: Any) -> None:
    """Step 5 of both forms: ``h = z * h_prev + (1 - z) * n``, written ``(h_prev - n) * z + n``
    (``xg`` holds [z|r|n]; ``h`` may be ``h_prev``)."""
    B, H = h.shape
    for b in range(B):
        x = row(xg, b)
        hp = row(h_prev, b)
        hr = row(h, b)
        for j in range(H):
            n = x[2 * H + j]
            hr[j] = (hp[j] - n) * x[j] + n


@njit(**OPTS)
def _gru_step(xg: Any, h_prev: Any, hm: Any, h: Any, rh: Any, Uzr: Any, Un: Any, code: int,
              rcode: int) -> None:
    """reset_after=False, one step: ``xg`` (B, 3H) = xw on entry, gates [z|r|n] on exit.
    ``hm`` is the state as the recurrent products see it (``h_prev``, or it times the
    recurrent dropout mask); ``h`` may be ``h_prev`` (updated in place)."""
    B, H = h.shape
    rgemm(hm, Uzr, xg[:, :2 * H], 1.0)          # xw_zr + h_prev @ U_zr, in place
    if rcode != 1:
        act_ip(xg[:, 0:2 * H], rcode)
    for b in range(B):
        x = row(xg, b)
        if rcode == 1:
            for j in range(2 * H):
                x[j] = sig(x[j])
        hp = row(hm, b)
        rr = row(rh, b)
        for j in range(H):
            rr[j] = x[H + j] * hp[j]
    rgemm(rh, Un, xg[:, 2 * H:], 1.0)          # xw_n + rh @ U_n, in place
    act_ip(xg[:, 2 * H:3 * H], code)
    _blend(xg, h_prev, h)


@njit(**OPTS)
def _gru_ra_step(xg: Any, h_prev: Any, hm: Any, h: Any, hun: Any, U: Any, b1: Any, hu: Any, code: int,
                 rcode: int) -> None:
    """reset_after=True, one step: ``xg`` (B, 3H) = xw on entry, gates [z|r|n] on exit.
    ``hm`` as in :func:`_gru_step`; ``h`` may be ``h_prev`` (updated in place)."""
    B, H = h.shape
    rgemm(hm, U, hu, 0.0)
    for b in range(B):
        x = row(xg, b)
        a = row(hu, b)
        if rcode == 1:
            for j in range(2 * H):
                x[j] = sig(x[j] + (a[j] + b1[j]))
        else:
            for j in range(2 * H):
                x[j] = act(x[j] + (a[j] + b1[j]), rcode)
        hn = row(hun, b)
        for j in range(H):
            hn[j] = a[2 * H + j] + b1[2 * H + j]
        for j in range(H):
            x[2 * H + j] = x[H + j] * hn[j] + x[2 * H + j]
    act_ip(xg[:, 2 * H:3 * H], code)
    _blend(xg, h_prev, h)


@njit(**OPTS)
def gru_train(xw: Any, Uzr: Any, Un: Any, hist_h: Any, rh: Any, code: int, rcode: int, mask: Any,
              masked: bool, rm: Any, rdrop: bool, lo: int, hi: int) -> None:
    """Training forward, reset_after=False: xw -> gates in place; fills hist_h and ``rh``; with
    ``masked``, rows with ``mask[s, b] == 0`` carry the state through step ``s``; with
    ``rdrop`` the recurrent products see the state times ``rm`` (the blend does not)."""
    xw, hist_h, rh = xw[:, lo:hi], hist_h[:, lo:hi], rh[:, lo:hi]
    mask, rm = mask[:, lo:hi], rm[lo:hi]              # (rows [lo, hi) of the batch: see the module)
    T, B = xw.shape[0], xw.shape[1]
    hm = np.empty((B, hist_h.shape[2]), xw.dtype)[:, 0:hist_h.shape[2]]
    for s in range(T):
        if rdrop:
            mul_rows(hist_h[s], rm, hm)
            _gru_step(xw[s], hist_h[s], hm, hist_h[s + 1], rh[s], Uzr, Un, code, rcode)
        else:
            _gru_step(xw[s], hist_h[s], hist_h[s], hist_h[s + 1], rh[s], Uzr, Un, code, rcode)
        if masked:
            carry(hist_h[s], hist_h[s + 1], mask[s])


@njit(**OPTS)
def gru_ra_train(xw: Any, U: Any, b1: Any, hist_h: Any, hun: Any, code: int, rcode: int, mask: Any,
                 masked: bool, rm: Any, rdrop: bool, lo: int, hi: int) -> None:
    """Training forward, reset_after=True: xw -> gates in place; fills hist_h and ``hu_n``."""
    xw, hist_h, hun = xw[:, lo:hi], hist_h[:, lo:hi], hun[:, lo:hi]
    mask, rm = mask[:, lo:hi], rm[lo:hi]              # (rows [lo, hi) of the batch: see the module)
    T, B, G = xw.shape
    hu = np.empty((B, G), xw.dtype)[:, 0:G]
    hm = np.empty((B, hist_h.shape[2]), xw.dtype)[:, 0:hist_h.shape[2]]
    for s in range(T):
        if rdrop:
            mul_rows(hist_h[s], rm, hm)
            _gru_ra_step(xw[s], hist_h[s], hm, hist_h[s + 1], hun[s], U, b1, hu, code, rcode)
        else:
            _gru_ra_step(xw[s], hist_h[s], hist_h[s], hist_h[s + 1], hun[s], U, b1, hu, code, rcode)
        if masked:
            carry(hist_h[s], hist_h[s + 1], mask[s])


@njit(**OPTS)
def gru_infer(x_tm: Any, W: Any, b0: Any, Ua: Any, Ub: Any, b1: Any, ra: bool, h: Any, seq: Any,
              keep: bool, buf: Any, code: int, rcode: int, mask: Any, masked: bool) -> None:
    """Inference for either form (``ra`` = reset_after: ``Ua`` = U, ``b1`` the recurrent bias;
    else ``Ua`` = Uzr, ``Ub`` = Un); ``h`` (B, H) initial state in, final out; ``buf``
    (chunk*B, 3H) receives a chunk of projections at a time."""
    T, B, F = x_tm.shape
    G = buf.shape[1]
    H = G // 3
    dt = x_tm.dtype
    chunk = max(1, buf.shape[0] // max(B, 1))   # (an empty batch: any chunk)
    h = h[:, 0:H]                        # [:, 0:n] views: the types the training loops pass
    t1 = np.empty((B, H), dt)[:, 0:H]
    hu = np.empty((B, G), dt)[:, 0:G]
    hp = np.empty((B, H), dt)[:, 0:H]
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        xp = buf[:n * B]
        project(x_tm[t0:t0 + n].reshape((n * B, F)), W, b0, xp)
        for s in range(n):
            xg = xp[s * B:(s + 1) * B, 0:G]
            if masked:
                copy_rows(h, hp)
            if ra:
                _gru_ra_step(xg, h, h, h, t1, Ua, b1, hu, code, rcode)
            else:
                _gru_step(xg, h, h, h, t1, Ua, Ub, code, rcode)
            if masked:
                carry(hp, h, mask[t0 + s])
            if keep:
                copy_rows(h, seq[t0 + s])


@njit(**OPTS)
def gru_back(g3: Any, full: bool, hist_h: Any, gates: Any, rh: Any, UnT: Any, UzrT: Any, code: int,
             rcode: int, dh: Any, dxw: Any, mask: Any, masked: bool, rm: Any, rdrop: bool, lo: int,
             hi: int) -> None:
    """reset_after=False backward walk: fills ``dxw`` (T, B, 3H). ``UnT``/``UzrT``: the
    transposed blocks, (H, H) and (2H, H). ``dh`` (B, H) starts at zero and ends as
    dL/d(initial state)."""
    g3, hist_h, gates, rh = g3[lo:hi], hist_h[:, lo:hi], gates[:, lo:hi], rh[:, lo:hi]
    dh, dxw = dh[lo:hi], dxw[:, lo:hi]
    mask, rm = mask[:, lo:hi], rm[lo:hi]              # (rows [lo, hi) of the batch: see the module)
    T, B, G = gates.shape
    H = G // 3
    dt = gates.dtype
    one = cst(gates, 1.0)
    dan = np.empty((B, H), dt)
    drh = np.empty((B, H), dt)
    dzr = np.empty((B, 2 * H), dt)
    sv = np.empty((B, H), dt)
    tmp = np.empty((B, H), dt)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            add_upstream(dh, g3, s if full else 0)
        if masked:
            hold(dh, sv, mask[s])
        for b in range(B):
            gt = row(gates[s], b)
            hp = row(hist_h[s], b)
            d = row(dxw[s], b)
            dhr = row(dh, b)
            dn = row(dan, b)
            for j in range(H):                   # 5b.
                dn[j] = dhr[j] * (one - gt[j])
            for j in range(H):                   # 2b. for z
                z = gt[j]
                d[j] = (dhr[j] * (hp[j] - gt[2 * H + j])) * dgate(z, rcode)
            for j in range(H):
                dhr[j] = dhr[j] * gt[j]
        dact_cols(gates[s, :, 2 * H:3 * H], dan[:, 0:H], code)   # 4b.
        d2 = dxw[s]
        for b in range(B):
            d = row(d2, b)
            dn = row(dan, b)
            for j in range(H):
                d[2 * H + j] = dn[j]
        rgemm(dan, UnT, drh, 0.0)
        if rdrop:                                # the products saw h_prev * rm
            mul_rows(drh, rm, tmp)
        for b in range(B):
            gt = row(gates[s], b)
            hp = row(hist_h[s], b)
            d = row(dxw[s], b)
            dr = row(drh, b)
            for j in range(H):                   # 3b. + 2b. for r
                r = gt[H + j]
                d[H + j] = (dr[j] * (hp[j] * rm[b, j] if rdrop else hp[j])) * dgate(r, rcode)
            dhr = row(dh, b)
            dm = row(tmp, b) if rdrop else dr
            for j in range(H):
                dhr[j] += dm[j] * gt[H + j]
            zr = row(dzr, b)
            for j in range(2 * H):
                zr[j] = d[j]
        if rdrop:
            rgemm(dzr, UzrT, tmp, 0.0)       # 1b.
            add_mul_rows(dh, tmp, rm)
        else:
            rgemm(dzr, UzrT, dh, 1.0)        # 1b.
        if masked:
            release(dh, sv, mask[s])


@njit(**OPTS)
def gru_ra_back(g3: Any, full: bool, hist_h: Any, gates: Any, hun: Any, UT: Any, code: int, rcode: int,
                dh: Any, dxw: Any, drec: Any, mask: Any, masked: bool, rm: Any, rdrop: bool, lo: int,
                hi: int) -> None:
    """reset_after=True backward walk: fills ``dxw`` and ``drec`` (T, B, 3H); ``UT`` (3H, H);
    ``dh`` as in :func:`gru_back`."""
    g3, hist_h, gates, hun = g3[lo:hi], hist_h[:, lo:hi], gates[:, lo:hi], hun[:, lo:hi]
    dh, dxw, drec = dh[lo:hi], dxw[:, lo:hi], drec[:, lo:hi]
    mask, rm = mask[:, lo:hi], rm[lo:hi]              # (rows [lo, hi) of the batch: see the module)
    T, B, G = gates.shape
    H = G // 3
    one = cst(gates, 1.0)
    sv = np.empty((B, H), gates.dtype)
    tmp = np.empty((B, H), gates.dtype)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            add_upstream(dh, g3, s if full else 0)
        if masked:
            hold(dh, sv, mask[s])
        for b in range(B):
            gt = row(gates[s], b)
            d = row(dxw[s], b)
            dhr = row(dh, b)
            for j in range(H):                   # 5b.
                d[2 * H + j] = dhr[j] * (one - gt[j])
        dact_cols(gates[s, :, 2 * H:3 * H], dxw[s, :, 2 * H:3 * H], code)   # 4b.
        for b in range(B):
            gt = row(gates[s], b)
            hp = row(hist_h[s], b)
            hn = row(hun[s], b)
            d = row(dxw[s], b)
            dr_ = row(drec[s], b)
            dhr = row(dh, b)
            for j in range(H):
                dr_[2 * H + j] = d[2 * H + j] * gt[H + j]
            for j in range(H):                   # 2b.
                z = gt[j]
                d[j] = (dhr[j] * (hp[j] - gt[2 * H + j])) * dgate(z, rcode)
            for j in range(H):
                r = gt[H + j]
                d[H + j] = (d[2 * H + j] * hn[j]) * dgate(r, rcode)
            for j in range(2 * H):
                dr_[j] = d[j]
            for j in range(H):
                dhr[j] = dhr[j] * gt[j]
        if rdrop:
            rgemm(drec[s], UT, tmp, 0.0)     # 1b.
            add_mul_rows(dh, tmp, rm)
        else:
            rgemm(drec[s], UT, dh, 1.0)      # 1b.
        if masked:
            release(dh, sv, mask[s])
