"""Compiled LSTM time loops, equal to the reference LSTM cell step by step.

Same equations and the same fused layout ``[i | f | g | o]`` (steps 1-5 of the cell's
docstring); ``code`` is the activation, ``rcode`` the gate activation (:data:`ACT_CODES`).
``xw`` rows are the input projections ``x_s @ W + b``; ``U`` is (S, 4H) with S = H, or P with a
projection (``proj``: ``Wp`` (H, P), ``h = m @ Wp`` with ``m = o * act(c)``; without one, ``Wp``
and ``m`` are unused placeholders). 2D arrays need contiguous rows only (batch slices of bigger
arrays are fine); ``x_tm`` is C-contiguous.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._gemm import project
from rnnkit.kernels._jit import (
    OPTS,
    act_cols,
    act_ip,
    add_upstream,
    carry,
    copy_rows,
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
def _step(a: Any, c_prev: Any, c: Any, act_c: Any, h: Any, code: int, rcode: int) -> None:
    """Steps 2-4 on (B, 4H) pre-activations ``a`` (in place -> gates [i|f|g|o]); ``c`` may be
    ``c_prev``; ``act_c`` receives act(c), ``h`` = o * act(c) (``m`` with a projection)."""
    B, G = a.shape
    H = G // 4
    if rcode == 1:
        for b in range(B):
            ar = row(a, b)
            for j in range(2 * H):
                ar[j] = sig(ar[j])
            for j in range(H):                  # (a loop from 0: measured 3x faster)
                ar[3 * H + j] = sig(ar[3 * H + j])
    else:
        act_ip(a[:, 0:2 * H], rcode)
        act_ip(a[:, 3 * H:4 * H], rcode)
    act_ip(a[:, 2 * H:3 * H], code)
    for b in range(B):
        ar = row(a, b)
        cp = row(c_prev, b)
        cn = row(c, b)
        for j in range(H):
            cn[j] = ar[H + j] * cp[j] + ar[j] * ar[2 * H + j]
    act_cols(c[:, 0:H], act_c[:, 0:H], code)
    for b in range(B):
        ar = row(a, b)
        ac = row(act_c, b)
        hr = row(h, b)
        for j in range(H):
            hr[j] = ar[3 * H + j] * ac[j]


@njit(**OPTS)
def lstm_train(xw: Any, U: Any, hist_h: Any, hist_c: Any, act_c: Any, proj: bool, Wp: Any, m: Any,
               code: int, rcode: int, mask: Any, masked: bool, rm: Any, rdrop: bool, lo: int,
               hi: int) -> None:
    """Training forward. ``xw`` (T, B, 4H) holds the projections on entry and the parked gates
    ``[i|f|g|o]`` on exit; ``hist_h`` (T+1, B, S) / ``hist_c`` (T+1, B, H) have row 0 set to
    the initial state and receive every later one; ``act_c`` (T, B, H) receives act(c), and
    with ``proj`` ``m`` (T, B, H) receives o * act(c). ``masked``/``rdrop`` as in the SimpleRNN
    kernel."""
    xw, hist_h, hist_c = xw[:, lo:hi], hist_h[:, lo:hi], hist_c[:, lo:hi]
    act_c, m = act_c[:, lo:hi], m[:, lo:hi]
    mask, rm = mask[:, lo:hi], rm[lo:hi]              # (rows [lo, hi) of the batch: see the module)
    T, B = xw.shape[0], xw.shape[1]
    hm = np.empty((B, hist_h.shape[2]), xw.dtype)[:, 0:hist_h.shape[2]]
    for s in range(T):
        gt = xw[s]
        if rdrop:
            mul_rows(hist_h[s], rm, hm)
            rgemm(hm, U, gt, 1.0)
        else:
            rgemm(hist_h[s], U, gt, 1.0)  # a = xw + h_prev @ U, accumulated in place
        if proj:
            _step(gt, hist_c[s], hist_c[s + 1], act_c[s], m[s], code, rcode)
            rgemm(m[s], Wp, hist_h[s + 1], 0.0)     # 5. h = m @ Wp
        else:
            _step(gt, hist_c[s], hist_c[s + 1], act_c[s], hist_h[s + 1], code, rcode)
        if masked:                              # a masked step carries (h, c) over
            carry(hist_h[s], hist_h[s + 1], mask[s])
            carry(hist_c[s], hist_c[s + 1], mask[s])


@njit(**OPTS)
def lstm_infer(x_tm: Any, W: Any, b0: Any, U: Any, h: Any, c: Any, seq: Any, keep: bool,
               buf: Any, proj: bool, Wp: Any, code: int, rcode: int, mask: Any, masked: bool) -> None:
    """Inference: ``h``/``c`` (B, H) hold the initial state on entry, the final one on exit.
    The projection runs ``chunk`` steps at a time into ``buf`` (chunk*B, 4H) (nothing per step
    is kept); with ``keep`` step ``s`` writes ``seq[s]`` (any layout, e.g. a view of (B, T, H))."""
    T, B, F = x_tm.shape
    H = c.shape[1]
    chunk = max(1, buf.shape[0] // max(B, 1))   # (an empty batch: any chunk)
    S, G = h.shape[1], buf.shape[1]
    h, c = h[:, 0:S], c[:, 0:H]          # [:, 0:n] views: the types the training loops pass
    ac = np.empty((B, H), x_tm.dtype)[:, 0:H]
    m = np.empty((B, H), x_tm.dtype)[:, 0:H]
    hp = np.empty((B, S), x_tm.dtype)[:, 0:S]
    cp = np.empty((B, H), x_tm.dtype)[:, 0:H]
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        xp = buf[:n * B]
        project(x_tm[t0:t0 + n].reshape((n * B, F)), W, b0, xp)
        for s in range(n):
            a = xp[s * B:(s + 1) * B, 0:G]
            rgemm(h, U, a, 1.0)             # a = xw + h_prev @ U, in place
            if masked:
                copy_rows(h, hp)
                copy_rows(c, cp)
            if proj:
                _step(a, c, c, ac, m, code, rcode)
                rgemm(m, Wp, h, 0.0)
            else:
                _step(a, c, c, ac, h, code, rcode)
            if masked:
                carry(hp, h, mask[t0 + s])
                carry(cp, c, mask[t0 + s])
            if keep:
                copy_rows(h, seq[t0 + s])


@njit(**OPTS)
def lstm_back(g3: Any, full: bool, hist_c: Any, gates: Any, act_c: Any, UT: Any, proj: bool, WpT: Any,
              dh_seq: Any, dh: Any, dc: Any, code: int, rcode: int, dxw: Any, mask: Any,
              masked: bool, rm: Any, rdrop: bool, lo: int, hi: int) -> None:
    """The backward walk: fills ``dxw`` (T, B, 4H) with dL/dxw_s. ``g3`` is the upstream
    gradient (B, T, S) when ``full`` (return_sequences), else (B, 1, S) for the last step;
    ``UT`` is U transposed, (4H, S), packed.
    With ``proj``: ``WpT`` (P, H), and ``dh_seq`` (T, B, P) receives dL/dh of every step (for
    the projection's gradient). ``dh`` (B, S) and ``dc`` (B, H) start at zero and end as
    dL/d(initial state)."""
    g3, hist_c, gates, act_c = g3[lo:hi], hist_c[:, lo:hi], gates[:, lo:hi], act_c[:, lo:hi]
    dh_seq, dh, dc, dxw = dh_seq[:, lo:hi], dh[lo:hi], dc[lo:hi], dxw[:, lo:hi]
    mask, rm = mask[:, lo:hi], rm[lo:hi]
    T, B, G = gates.shape
    H = G // 4
    dt = gates.dtype
    dm = np.empty((B, H), dt)
    tmp = np.empty((B, H), dt)
    sh = np.empty(dh.shape, dt)
    sc = np.empty((B, H), dt)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            add_upstream(dh, g3, s if full else 0)
        if masked:                               # masked rows: the gradient passes straight through
            hold(dh, sh, mask[s])
            hold(dc, sc, mask[s])
        src = dh
        if proj:                                 # 5b.
            copy_rows(dh, dh_seq[s])
            rgemm(dh, WpT, dm, 0.0)
            src = dm
        gt2 = gates[s]
        d2 = dxw[s]
        for b in range(B):                       # 4b. do, and dc += act'(act_c) * (dh * o)
            gt = row(gt2, b)
            ac = row(act_c[s], b)
            d = row(d2, b)
            dhr = row(src, b)
            tr = row(tmp, b)
            for j in range(H):
                o = gt[3 * H + j]
                d[3 * H + j] = (dhr[j] * ac[j]) * dgate(o, rcode)
            for j in range(H):
                tr[j] = dhr[j] * gt[3 * H + j]
        dact_cols(act_c[s, :, 0:H], tmp[:, 0:H], code)
        for b in range(B):                       # 3b. + 2b.
            gt = row(gt2, b)
            cp = row(hist_c[s], b)
            d = row(d2, b)
            dcr = row(dc, b)
            tr = row(tmp, b)
            for j in range(H):
                dcr[j] = dcr[j] + tr[j]
            for j in range(H):
                i = gt[j]
                f = gt[H + j]
                dcv = dcr[j]
                d[j] = (dcv * gt[2 * H + j]) * dgate(i, rcode)
                d[H + j] = (dcv * cp[j]) * dgate(f, rcode)
                d[2 * H + j] = dcv * i
            for j in range(H):
                dcr[j] = dcr[j] * gt[H + j]
        dact_cols(gt2[:, 2 * H:3 * H], d2[:, 2 * H:3 * H], code)
        rgemm(d2, UT, dh, 0.0)
        if rdrop:
            mul_rows(dh, rm, dh)
        if masked:
            release(dh, sh, mask[s])
            release(dc, sc, mask[s])
