"""Compiled LSTM time loops, equal to :class:`rnnkit.recurrent._lstm.LSTMCell` step by step.

Same equations and the same fused layout ``[i | f | g | o]``; see that module's docstring.
``xw`` rows are the input projections ``x_s @ W + b``; ``U`` is (H, 4H), ``UT`` its contiguous
transpose (4H, H). Every array is C-contiguous unless said otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._jit import OPTS, act, cst, dact, mm, njit, sig


@njit(inline="always", **OPTS)
def _cell(a: Any, c_prev: Any, c: Any, h: Any, gates: Any, act_c: Any, H: int, code: int) -> None:
    """One batch row: ``a`` (4H,) pre-activations -> gates, c, act(c), h."""
    for j in range(H):
        i = sig(a[j])
        f = sig(a[H + j])
        g = act(a[2 * H + j], code)
        o = sig(a[3 * H + j])
        cv = f * c_prev[j] + i * g
        ac = act(cv, code)
        gates[j] = i
        gates[H + j] = f
        gates[2 * H + j] = g
        gates[3 * H + j] = o
        c[j] = cv
        act_c[j] = ac
        h[j] = o * ac


@njit(**OPTS)
def lstm_train(xw: Any, U: Any, hist_h: Any, hist_c: Any, act_c: Any, code: int) -> None:
    """Training forward. ``xw`` (T, B, 4H) holds the projections on entry and the parked gates
    ``[i|f|g|o]`` on exit; ``hist_h``/``hist_c`` (T+1, B, H) have row 0 set to the initial
    state and receive every later one; ``act_c`` (T, B, H) receives act(c)."""
    T, B, G = xw.shape
    H = G // 4
    a = np.empty((B, G), xw.dtype)
    for s in range(T):
        mm(hist_h[s], U, a)
        x_s = xw[s]
        for b in range(B):
            row = a[b]
            xr = x_s[b]
            for j in range(G):
                row[j] += xr[j]
            _cell(row, hist_c[s, b], hist_c[s + 1, b], hist_h[s + 1, b], xr, act_c[s, b], H, code)


@njit(**OPTS)
def lstm_infer(x_tm: Any, W: Any, b0: Any, U: Any, h: Any, c: Any, seq: Any, keep: bool,
               buf: Any, code: int) -> None:
    """Inference: ``h``/``c`` (B, H) hold the initial state on entry, the final one on exit.
    The projection runs ``chunk`` steps at a time into ``buf`` (chunk*B, 4H) (nothing per step
    is kept); with ``keep`` step ``s`` writes ``seq[s]`` (any layout, e.g. a view of (B, T, H))."""
    T, B, F = x_tm.shape
    G = W.shape[1]
    H = G // 4
    dt = x_tm.dtype
    chunk = buf.shape[0] // B
    a = np.empty((B, G), dt)
    h2 = np.empty((B, H), dt)
    c2 = np.empty((B, H), dt)
    junk = np.empty(G, dt)
    junk_c = np.empty(H, dt)
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        xs = x_tm[t0:t0 + n].reshape((n * B, F))
        xp = buf[:n * B]
        mm(xs, W, xp)
        for s in range(n):
            mm(h, U, a)
            for bi in range(B):
                row = a[bi]
                xr = xp[s * B + bi]
                for j in range(G):
                    row[j] += xr[j] + b0[j]
                _cell(row, c[bi], c2[bi], h2[bi], junk, junk_c, H, code)
            h[:] = h2
            c[:] = c2
            if keep:
                seq[t0 + s] = h


@njit(**OPTS)
def lstm_back(g3: Any, full: bool, hist_c: Any, gates: Any, act_c: Any, UT: Any, code: int,
              dxw: Any) -> None:
    """The backward walk: fills ``dxw`` (T, B, 4H) with dL/dxw_s. ``g3`` is the upstream
    gradient (B, T, H) when ``full`` (return_sequences), else (B, 1, H) for the last step."""
    T, B, G = gates.shape
    H = G // 4
    dt = gates.dtype
    dh = np.zeros((B, H), dt)
    dc = np.zeros((B, H), dt)
    one = cst(gates, 1.0)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            gs = s if full else 0
            for b in range(B):
                for j in range(H):
                    dh[b, j] += g3[b, gs, j]
        for b in range(B):
            gt = gates[s, b]
            ac = act_c[s, b]
            cp = hist_c[s, b]
            d = dxw[s, b]
            dcr = dc[b]
            dhr = dh[b]
            for j in range(H):
                i = gt[j]
                f = gt[H + j]
                g = gt[2 * H + j]
                o = gt[3 * H + j]
                dhv = dhr[j]
                do = dhv * ac[j]
                dcv = dcr[j] + dact(ac[j], dhv * o, code)
                d[j] = (dcv * g) * (i * (one - i))
                d[H + j] = (dcv * cp[j]) * (f * (one - f))
                d[2 * H + j] = dact(g, dcv * i, code)
                d[3 * H + j] = do * (o * (one - o))
                dcr[j] = dcv * f
        mm(dxw[s], UT, dh)
