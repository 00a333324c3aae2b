"""Compiled SimpleRNN time loops, equal to :class:`rnnkit.recurrent._simple_rnn.SimpleRNNCell`:
``h = act(xw + h_prev @ U)``; backward ``dxw = act'(h) * dh``, ``dh_prev = dxw @ U^T``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._jit import OPTS, act, dact, mm, njit


@njit(**OPTS)
def simple_train(xw: Any, U: Any, hist_h: Any, code: int) -> None:
    """Training forward: ``hist_h`` (T+1, B, H) row 0 = initial state; fills rows 1..T."""
    T, B, H = xw.shape
    for s in range(T):
        hn = hist_h[s + 1]
        mm(hist_h[s], U, hn)
        x_s = xw[s]
        for b in range(B):
            for j in range(H):
                hn[b, j] = act(hn[b, j] + x_s[b, j], code)


@njit(**OPTS)
def simple_infer(x_tm: Any, W: Any, b0: Any, U: Any, h: Any, seq: Any, keep: bool, buf: Any,
                 code: int) -> None:
    """Inference from ``h`` (B, H) (final state on exit); the projection runs a chunk of steps
    at a time into ``buf`` (chunk*B, H)."""
    T, B, F = x_tm.shape
    H = W.shape[1]
    dt = x_tm.dtype
    chunk = buf.shape[0] // B
    a = np.empty((B, H), dt)
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        xp = buf[:n * B]
        mm(x_tm[t0:t0 + n].reshape((n * B, F)), W, xp)
        for s in range(n):
            mm(h, U, a)
            for b in range(B):
                xr = xp[s * B + b]
                for j in range(H):
                    h[b, j] = act(a[b, j] + (xr[j] + b0[j]), code)
            if keep:
                seq[t0 + s] = h


@njit(**OPTS)
def simple_back(g3: Any, full: bool, hist_h: Any, UT: Any, code: int, dxw: Any) -> None:
    """Fills ``dxw`` (T, B, H); ``g3`` as in :func:`rnnkit.kernels._lstm.lstm_back`."""
    T, B, H = dxw.shape
    dh = np.zeros((B, H), dxw.dtype)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            gs = s if full else 0
            for b in range(B):
                for j in range(H):
                    dh[b, j] += g3[b, gs, j]
        hn = hist_h[s + 1]
        d = dxw[s]
        for b in range(B):
            for j in range(H):
                d[b, j] = dact(hn[b, j], dh[b, j], code)
        mm(d, UT, dh)
