"""Compiled SimpleRNN time loops, equal to :class:`rnnkit.recurrent._simple_rnn.SimpleRNNCell`:
``h = act(xw + h_prev @ U)``; backward ``dxw = act'(h) * dh``, ``dh_prev = dxw @ U^T``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._gemm import project
from rnnkit.kernels._jit import (
    OPTS,
    act_cols,
    add_upstream,
    carry,
    copy_rows,
    dact_cols,
    hold,
    mul_rows,
    njit,
    release,
)
from rnnkit.kernels._packed import rgemm


@njit(**OPTS)
def simple_train(xw: Any, U: Any, hist_h: Any, code: int, mask: Any, masked: bool, rm: Any,
                 rdrop: bool, lo: int, hi: int) -> None:
    """Training forward: ``hist_h`` (T+1, B, H) row 0 = initial state; fills rows 1..T. With
    ``masked``, rows with ``mask[s, b] == 0`` carry the state through step ``s``; with
    ``rdrop`` the state is multiplied by ``rm`` (B, H) where it enters the recurrent product."""
    xw, hist_h = xw[:, lo:hi], hist_h[:, lo:hi]
    mask, rm = mask[:, lo:hi], rm[lo:hi]              # (rows [lo, hi) of the batch: see the module)
    T, B, H = xw.shape
    hm = np.empty((B, H), xw.dtype)
    for s in range(T):
        if rdrop:
            mul_rows(hist_h[s], rm, hm)
            rgemm(hm, U, xw[s], 1.0)
        else:
            rgemm(hist_h[s], U, xw[s], 1.0)   # xw + h_prev @ U, in place (xw is scratch)
        act_cols(xw[s, :, 0:H], hist_h[s + 1, :, 0:H], code)
        if masked:
            carry(hist_h[s], hist_h[s + 1], mask[s])


@njit(**OPTS)
def simple_infer(x_tm: Any, W: Any, b0: Any, U: Any, h: Any, seq: Any, keep: bool, buf: Any,
                 code: int, mask: Any, masked: bool) -> None:
    """Inference from ``h`` (B, H) (final state on exit); the projection runs a chunk of steps
    at a time into ``buf`` (chunk*B, H)."""
    T, B, F = x_tm.shape
    H = h.shape[1]
    chunk = max(1, buf.shape[0] // max(B, 1))   # (an empty batch: any chunk)
    h = h[:, 0:H]                        # [:, 0:n] views: the types the training loops pass
    hp = np.empty((B, H), h.dtype)[:, 0:H]
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        xp = buf[:n * B]
        project(x_tm[t0:t0 + n].reshape((n * B, F)), W, b0, xp)
        for s in range(n):
            a = xp[s * B:(s + 1) * B, 0:H]
            rgemm(h, U, a, 1.0)
            if masked:
                copy_rows(h, hp)
            act_cols(a[:, 0:H], h[:, 0:H], code)
            if masked:
                carry(hp, h, mask[t0 + s])
            if keep:
                copy_rows(h, seq[t0 + s])


@njit(**OPTS)
def simple_back(g3: Any, full: bool, hist_h: Any, UT: Any, code: int, dh: Any, dxw: Any, mask: Any,
                masked: bool, rm: Any, rdrop: bool, lo: int, hi: int) -> None:
    """Fills ``dxw`` (T, B, H); ``g3`` as in :func:`rnnkit.kernels._lstm.lstm_back`; ``dh``
    (B, H) holds dL/d(final state) on entry and dL/d(initial state) on exit."""
    g3, hist_h, dh, dxw = g3[lo:hi], hist_h[:, lo:hi], dh[lo:hi], dxw[:, lo:hi]
    mask, rm = mask[:, lo:hi], rm[lo:hi]              # (rows [lo, hi) of the batch: see the module)
    T, B, H = dxw.shape
    sv = np.empty((B, H), dxw.dtype)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            add_upstream(dh, g3, s if full else 0)
        if masked:
            hold(dh, sv, mask[s])
        d2 = dxw[s]
        copy_rows(dh, d2)
        dact_cols(hist_h[s + 1, :, 0:H], d2[:, 0:H], code)
        rgemm(d2, UT, dh, 0.0)
        if rdrop:
            mul_rows(dh, rm, dh)
        if masked:
            release(dh, sv, mask[s])
