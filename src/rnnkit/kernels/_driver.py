"""Python glue between the walker and the compiled loops: buffers in, caches out.

``walk`` returns exactly what :meth:`RecurrentLayer._walk` returns (the same cache layout:
``x_tm``, ``states`` (T+1, B, H) per state, ``parks`` per the cell's ``parks``), so either
backward can follow either forward; ``backward`` does all of :meth:`RecurrentLayer.backward` after
the upstream gradient is checked (``back``: the walk filling ``dxw`` / ``drec``; then the
batched reductions). Each entry point splits the batch into row blocks (:mod:`._threads`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels import _gru, _lstm, _simple
from rnnkit.kernels._jit import ACT_CODES, project, reductions
from rnnkit.kernels._threads import blocks, run_blocks, run_parts
from rnnkit.recurrent._gru import GRUCell, GRUResetAfterCell
from rnnkit.recurrent._lstm import LSTMCell
from rnnkit.recurrent._simple_rnn import SimpleRNNCell

_CELLS = (SimpleRNNCell, LSTMCell, GRUCell, GRUResetAfterCell)

#: inference projects a chunk of timesteps at a time into a buffer of at most about this many
#: bytes (a bound independent of T: inference keeps no per-step arrays)
CHUNK_BYTES = 1 << 22


#: from this many multiply-adds ((T*B) * G*H * (F+H)) on, the reductions run in parts on the
#: cores (gate columns of dW/dU/db, rows of dx; single-threaded BLAS each) instead of one call;
#: likewise the training projection (rows), from (T*B) * F * G*H
PARALLEL_REDUCTIONS = 1 << 24


def supports(layer: Any) -> bool:
    """True for the four cells of rnnkit.recurrent (exactly) with tanh/sigmoid/relu/linear."""
    return type(layer.cell) in _CELLS and layer.activation.name in ACT_CODES


def _chunk(T: int, B: int, row_bytes: int) -> int:
    """Timesteps per projection chunk (at least 1, at most T)."""
    return max(1, min(T, CHUNK_BYTES // max(B * row_bytes, 1)))


def walk(layer: Any, x_tm: np.ndarray, init: tuple[np.ndarray, ...] | None, record: bool,
         keep_seq: bool) -> tuple[np.ndarray | None, tuple[np.ndarray, ...], dict[str, Any] | None]:
    """The time loop of ``layer`` on ``x_tm`` (T, B, F): (sequence (T, B, H) or None, final
    states, cache or None), as :meth:`RecurrentLayer._walk`."""
    cell = layer.cell
    kind = type(cell)
    T, B, F = x_tm.shape
    H, dt = layer.units, layer.dtype
    # writable copies: numba's code for read-only arrays (the layer's weights) measured 4x slower
    W = np.array(layer._weights["kernel"])
    U = np.array(layer._weights["recurrent_kernel"])
    bias = np.array(layer._weights["bias"])
    code = ACT_CODES[layer.activation.name]
    n_states = len(cell.states)
    if record:
        xw = np.empty((T, B, layer.gate_width), dt)
        x2, xw2, b0 = x_tm.reshape(T * B, F), xw.reshape(T * B, layer.gate_width), bias[0]
        if T * B * F * layer.gate_width >= PARALLEL_REDUCTIONS:   # rows in parts on the cores
            run_parts(T * B, lambda lo, hi: project(x2[lo:hi], W, b0, xw2[lo:hi]))
        else:
            project(x2, W, b0, xw2)
        hist = [np.empty((T + 1, B, H), dt) for _ in range(n_states)]
        for k in range(n_states):
            hist[k][0] = 0.0 if init is None else init[k]
        parks = {n: (xw if n == "gates" else np.empty((T, B, w * H), dt)) for n, w in cell.parks.items()}

        def train(lo: int, hi: int) -> None:
            xb, hh = xw[:, lo:hi], hist[0][:, lo:hi]
            if kind is LSTMCell:
                _lstm.lstm_train(xb, U, hh, hist[1][:, lo:hi], parks["act_c"][:, lo:hi], code)
            elif kind is SimpleRNNCell:
                _simple.simple_train(xb, U, hh, code)
            elif kind is GRUCell:
                _gru.gru_train(xb, U[:, :2 * H], U[:, 2 * H:], hh, parks["rh"][:, lo:hi], code)
            else:
                _gru.gru_ra_train(xb, U, bias[1], hh, parks["hu_n"][:, lo:hi], code)

        run_blocks(B, B * H * layer.gate_width, train)
        cache = {"x_tm": x_tm, "states": hist, "parks": parks}
        return (hist[0][1:] if keep_seq else None), tuple(a[T] for a in hist), cache
    # inference: the state and one chunk of projections; the output written in (B, T, H) order
    st = [np.zeros((B, H), dt) if init is None else np.array(init[k], dt, order="C")
          for k in range(n_states)]
    out = np.empty((B, T if keep_seq else 1, H), dt)
    seq_view = out.transpose(1, 0, 2)
    b0 = bias[0]

    def infer(lo: int, hi: int) -> None:
        xb = x_tm if hi - lo == B else np.ascontiguousarray(x_tm[:, lo:hi])
        rows = _chunk(T, hi - lo, layer.gate_width * dt.itemsize) * (hi - lo)
        buf = np.empty((rows, layer.gate_width), dt)   # one chunk of projections
        h, sq = st[0][lo:hi], seq_view[:, lo:hi]
        if kind is LSTMCell:
            _lstm.lstm_infer(xb, W, b0, U, h, st[1][lo:hi], sq, keep_seq, buf, code)
        elif kind is SimpleRNNCell:
            _simple.simple_infer(xb, W, b0, U, h, sq, keep_seq, buf, code)
        elif kind is GRUCell:
            _gru.gru_infer(xb, W, b0, U[:, :2 * H], U[:, 2 * H:], b0, False, h, sq, keep_seq, buf, code)
        else:
            _gru.gru_infer(xb, W, b0, U, U, bias[1], True, h, sq, keep_seq, buf, code)

    run_blocks(B, B * H * layer.gate_width, infer)
    return (seq_view if keep_seq else None), tuple(st), None


def back(layer: Any, cache: dict[str, Any], g: np.ndarray, full: bool, dxw: np.ndarray,
         drec: np.ndarray) -> None:
    """Fill ``dxw`` (and ``drec`` for GRU reset_after=True) from the upstream gradient ``g``
    ((B, T, H) when ``full``, else (B, H))."""
    cell = layer.cell
    kind = type(cell)
    hist, parks = cache["states"], cache["parks"]
    T, B, _ = dxw.shape
    H = layer.units
    g3 = np.ascontiguousarray(g).reshape(B, T if full else 1, H)
    U = layer._weights["recurrent_kernel"]
    UT = np.ascontiguousarray(U.T)           # writable, and BLAS is faster untransposed
    UnT = np.ascontiguousarray(U[:, 2 * H:].T) if kind is GRUCell else UT
    UzrT = np.ascontiguousarray(U[:, :2 * H].T) if kind is GRUCell else UT
    code = ACT_CODES[layer.activation.name]

    def job(lo: int, hi: int) -> None:
        gb, hh, dx = g3[lo:hi], hist[0][:, lo:hi], dxw[:, lo:hi]
        if kind is LSTMCell:
            _lstm.lstm_back(gb, full, hist[1][:, lo:hi], parks["gates"][:, lo:hi],
                            parks["act_c"][:, lo:hi], UT, code, dx)
        elif kind is SimpleRNNCell:
            _simple.simple_back(gb, full, hh, UT, code, dx)
        elif kind is GRUCell:
            _gru.gru_back(gb, full, hh, parks["gates"][:, lo:hi], parks["rh"][:, lo:hi], UnT, UzrT,
                          code, dx)
        else:
            _gru.gru_ra_back(gb, full, hh, parks["gates"][:, lo:hi], parks["hu_n"][:, lo:hi], UT, code,
                             dx, drec[:, lo:hi])

    run_blocks(B, B * H * layer.gate_width, job)


def backward(layer: Any, cache: dict[str, Any], g: np.ndarray, ctx: Any) -> np.ndarray:
    """The whole of :meth:`RecurrentLayer.backward` after the upstream gradient is checked:
    the backward walk (:func:`back`), then the batched reductions in one compiled call."""
    cell = layer.cell
    x_tm, hist, parks = cache["x_tm"], cache["states"], cache["parks"]
    T, B, F = x_tm.shape
    H, GH, dt = layer.units, layer.gate_width, layer.dtype
    dxw = np.empty((T, B, GH), dt)
    drec = np.empty((T, B, GH), dt) if cell.separate_rec_grad else dxw
    back(layer, cache, g, layer.return_sequences, dxw, drec)
    groups = cell.rec_groups
    P = [(hist[cell.states.index(src)][:T] if src in cell.states else parks[src]).reshape(T * B, H)
         for src, _, _ in groups]
    dW = np.empty((F, GH), dt)
    db = np.empty((cell.bias_rows, GH), dt)
    dU = np.empty((H, GH), dt)
    dx_tm = np.empty((T, B, F), dt)
    args = (x_tm.reshape(T * B, F), dxw.reshape(T * B, GH), drec.reshape(T * B, GH), P[0], P[-1],
            groups[0][2] * H, np.array(layer._weights["kernel"]), dW, db, dU, dx_tm.reshape(T * B, F))
    starts = [lo for lo, _ in blocks(T * B)] if T * B * GH * (F + H) >= PARALLEL_REDUCTIONS else [0]
    n_parts = len(starts)

    def part(lo: int, hi: int) -> None:   # rows [lo, hi) of dx; the matching share of columns
        k = starts.index(lo)
        reductions(*args, GH * k // n_parts, GH * (k + 1) // n_parts, lo, hi)

    if n_parts == 1:
        reductions(*args, 0, GH, 0, T * B)
    else:
        run_parts(T * B, part)
    ctx.add_grad(layer, "kernel", dW)
    ctx.add_grad(layer, "bias", db)
    ctx.add_grad(layer, "recurrent_kernel", dU)
    if layer.go_backwards:
        dx_tm = dx_tm[::-1]
    return np.ascontiguousarray(dx_tm.transpose(1, 0, 2))
