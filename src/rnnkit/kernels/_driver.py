"""Python glue between the walker and the compiled loops: buffers in, caches out.

``walk`` returns exactly what :meth:`RecurrentLayer._walk` returns (the same cache layout:
``x_tm``, ``states`` (T+1, B, H) per state, ``parks`` per the cell's ``parks``), and ``back``
fills the ``dxw`` / ``drec`` arrays the walker's batched reductions read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels import _gru, _lstm, _simple
from rnnkit.kernels._jit import ACT_CODES
from rnnkit.recurrent._gru import GRUCell, GRUResetAfterCell
from rnnkit.recurrent._lstm import LSTMCell
from rnnkit.recurrent._simple_rnn import SimpleRNNCell

_CELLS = (SimpleRNNCell, LSTMCell, GRUCell, GRUResetAfterCell)

#: inference projects about this many (timestep x batch) rows at a time
CHUNK_ROWS = 512


def supports(layer: Any) -> bool:
    return type(layer.cell) in _CELLS and layer.activation.name in ACT_CODES


def _chunk(T: int, B: int) -> int:
    return max(1, min(T, CHUNK_ROWS // max(B, 1)))


def walk(layer: Any, x_tm: np.ndarray, init: tuple[np.ndarray, ...] | None, record: bool,
         keep_seq: bool) -> tuple[np.ndarray | None, tuple[np.ndarray, ...], dict[str, Any] | None]:
    cell = layer.cell
    kind = type(cell)
    T, B, F = x_tm.shape
    H, dt = layer.units, layer.dtype
    W = layer._weights["kernel"]
    U = layer._weights["recurrent_kernel"]
    bias = layer._weights["bias"]
    code = ACT_CODES[layer.activation.name]
    n_states = len(cell.states)
    if record:
        xw = np.matmul(x_tm.reshape(T * B, F), W)
        xw += bias[0]
        xw = xw.reshape(T, B, layer.gate_width)
        hist = [np.empty((T + 1, B, H), dt) for _ in range(n_states)]
        for k in range(n_states):
            hist[k][0] = 0.0 if init is None else init[k]
        if kind is LSTMCell:
            act_c = np.empty((T, B, H), dt)
            _lstm.lstm_train(xw, U, hist[0], hist[1], act_c, code)
            parks = {"gates": xw, "act_c": act_c}
        elif kind is SimpleRNNCell:
            _simple.simple_train(xw, U, hist[0], code)
            parks = {}
        elif kind is GRUCell:
            rh = np.empty((T, B, H), dt)
            _gru.gru_train(xw, np.ascontiguousarray(U[:, :2 * H]), np.ascontiguousarray(U[:, 2 * H:]),
                           hist[0], rh, code)
            parks = {"gates": xw, "rh": rh}
        else:
            hun = np.empty((T, B, H), dt)
            _gru.gru_ra_train(xw, U, bias[1], hist[0], hun, code)
            parks = {"gates": xw, "hu_n": hun}
        cache = {"x_tm": x_tm, "states": hist, "parks": parks}
        return (hist[0][1:] if keep_seq else None), tuple(a[T] for a in hist), cache
    # inference: the state and one chunk of projections; the output written in (B, T, H) order
    st = [np.zeros((B, H), dt) if init is None else np.array(init[k], dt, order="C")
          for k in range(n_states)]
    out = np.empty((B, T if keep_seq else 1, H), dt)
    seq_view = out.transpose(1, 0, 2)
    buf = np.empty((_chunk(T, B) * B, layer.gate_width), dt)   # one chunk of projections
    b0 = bias[0]
    if kind is LSTMCell:
        _lstm.lstm_infer(x_tm, W, b0, U, st[0], st[1], seq_view, keep_seq, buf, code)
    elif kind is SimpleRNNCell:
        _simple.simple_infer(x_tm, W, b0, U, st[0], seq_view, keep_seq, buf, code)
    elif kind is GRUCell:
        Uzr = np.ascontiguousarray(U[:, :2 * H])
        Un = np.ascontiguousarray(U[:, 2 * H:])
        _gru.gru_infer(x_tm, W, b0, Uzr, Un, b0, False, st[0], seq_view, keep_seq, buf, code)
    else:
        _gru.gru_infer(x_tm, W, b0, U, U, bias[1], True, st[0], seq_view, keep_seq, buf, code)
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
    code = ACT_CODES[layer.activation.name]
    if kind is LSTMCell:
        _lstm.lstm_back(g3, full, hist[1], parks["gates"], parks["act_c"], np.ascontiguousarray(U.T),
                        code, dxw)
    elif kind is SimpleRNNCell:
        _simple.simple_back(g3, full, hist[0], np.ascontiguousarray(U.T), code, dxw)
    elif kind is GRUCell:
        _gru.gru_back(g3, full, hist[0], parks["gates"], parks["rh"],
                      np.ascontiguousarray(U[:, 2 * H:].T), np.ascontiguousarray(U[:, :2 * H].T),
                      code, dxw)
    else:
        _gru.gru_ra_back(g3, full, hist[0], parks["gates"], parks["hu_n"], np.ascontiguousarray(U.T),
                         code, dxw, drec)
