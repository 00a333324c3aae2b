"""Compiled SimpleRNN time loops, equal to :class:`rnnkit.recurrent._simple_rnn.SimpleRNNCell`:
``h = act(xw + h_prev @ U)``; backward ``dxw = act'(h) * dh``, ``dh_prev = dxw @ U^T``."""

from __future__ import annotations

from typing import Any

from rnnkit.kernels._jit import OPTS, act_cols, add_upstream, copy_rows, dact_cols, gemm, njit, project


@njit(**OPTS)
def simple_train(xw: Any, U: Any, hist_h: Any, code: int) -> None:
    """Training forward: ``hist_h`` (T+1, B, H) row 0 = initial state; fills rows 1..T."""
    T, B, H = xw.shape
    for s in range(T):
        gemm(hist_h[s], U, xw[s], 1.0, False)   # xw + h_prev @ U, in place (xw is scratch)
        act_cols(xw[s], 0, hist_h[s + 1], 0, H, code)


@njit(**OPTS)
def simple_infer(x_tm: Any, W: Any, b0: Any, U: Any, h: Any, seq: Any, keep: bool, buf: Any,
                 code: int) -> None:
    """Inference from ``h`` (B, H) (final state on exit); the projection runs a chunk of steps
    at a time into ``buf`` (chunk*B, H)."""
    T, B, F = x_tm.shape
    H = W.shape[1]
    chunk = max(1, buf.shape[0] // max(B, 1))   # (an empty batch: any chunk)
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        xp = buf[:n * B]
        project(x_tm[t0:t0 + n].reshape((n * B, F)), W, b0, xp)
        for s in range(n):
            a = xp[s * B:(s + 1) * B]
            gemm(h, U, a, 1.0, False)
            act_cols(a, 0, h, 0, H, code)
            if keep:
                copy_rows(h, seq[t0 + s])


@njit(**OPTS)
def simple_back(g3: Any, full: bool, hist_h: Any, UT: Any, code: int, dh: Any, dxw: Any) -> None:
    """Fills ``dxw`` (T, B, H); ``g3`` as in :func:`rnnkit.kernels._lstm.lstm_back`; ``dh``
    (B, H) starts at zero and ends as dL/d(initial state)."""
    T, B, H = dxw.shape
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            add_upstream(dh, g3, s if full else 0)
        d2 = dxw[s]
        for b in range(B):
            d2[b] = dh[b]
        dact_cols(hist_h[s + 1], 0, d2, 0, H, code)
        gemm(d2, UT, dh, 0.0, False)
