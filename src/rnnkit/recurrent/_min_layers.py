"""``MinGRU`` and ``MinLSTM``: ``RecurrentLayer`` over :class:`MinGRUCell` / :class:`MinLSTMCell`
that run a pass of more than one step in the whole-sequence (parallel, log-space scan) form
and a single step (streaming: ``step``, ``seq_init`` of one step) in the step form."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rnnkit._layer import check_positive_int
from rnnkit.recurrent import _min_gru, _min_lstm
from rnnkit.recurrent._base import RecurrentLayer
from rnnkit.recurrent._cell import Arrays
from rnnkit.recurrent._min_gru import MinGRUCell
from rnnkit.recurrent._min_lstm import MinLSTMCell
from rnnkit.recurrent._min_scan import check_state
from rnnkit.recurrent._registry import register_cell
from rnnkit.recurrent._walker import Walk, WalkCache, walk

for _c in (MinGRUCell, MinLSTMCell):
    register_cell(_c)

ParallelForward = Callable[[Mapping[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray | None],
                           tuple[np.ndarray, np.ndarray]]
ParallelBackward = Callable[..., tuple[np.ndarray | None, dict[str, np.ndarray], np.ndarray]]


class _MinLayer(RecurrentLayer):
    """What MinGRU and MinLSTM share: the parallel form for a pass of T > 1 steps, the step
    form (the cell's ``step``, by the walker) for one step. Both give the walker's cache (the
    states and the per-step ``k``), so either backward can follow either forward; the backward
    is always the parallel one."""

    _parallel_forward: ParallelForward
    _parallel_backward: ParallelBackward

    def __init__(self, cell: MinGRUCell | MinLSTMCell, **kwargs: Any) -> None:
        super().__init__(cell, **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {"units": self.units, **self._walk_config()}

    def _time_walk(self, x_tm: np.ndarray, init: Arrays | None, record: bool, keep_seq: bool,
              mask: np.ndarray | None = None, rdrop: np.ndarray | None = None) -> Walk:
        if init is not None:
            check_state(init[0], self.name)
        T, B, _ = x_tm.shape
        if T == 1:     # streaming: the step form
            return walk(self.cell, self._weights, x_tm, init, record, keep_seq, mask, rdrop)
        h0 = np.zeros((B, self.units), x_tm.dtype) if init is None else np.asarray(init[0], x_tm.dtype)
        hist, k = type(self)._parallel_forward(self._weights, x_tm, h0, mask)
        cache = WalkCache(x_tm, [hist], {"k": k}, mask, rdrop) if record else None
        return (hist[1:] if keep_seq else None), (hist[T],), cache

    def _time_walk_back(self, cache: WalkCache, g: np.ndarray, full: bool, d_final: Arrays | None,
                   need_dx: bool) -> tuple[np.ndarray | None, dict[str, np.ndarray], Arrays]:
        x_tm = cache.x_tm
        T, B, _ = x_tm.shape
        if full:
            dh = np.array(g.transpose(1, 0, 2), x_tm.dtype, order="C")   # (a copy: d_final is added)
        else:
            dh = np.zeros((T, B, self.units), x_tm.dtype)
            dh[T - 1] = g
        if d_final is not None:
            dh[T - 1] += d_final[0]
        dx, grads, dh0 = type(self)._parallel_backward(self._weights, x_tm, cache.states[0],
                                                       cache.parks["k"], dh, cache.mask, need_dx)
        return dx, grads, (dh0,)


class MinGRU(_MinLayer):
    """minGRU (Feng et al., 2024, "Were RNNs All We Needed?", arXiv:2410.01201)::

        z_t  = sigmoid(x_t @ W_z + b_z)
        h~_t = g(x_t @ W_h + b_h),     g(x) = x + 0.5 (x >= 0), sigmoid(x) (x < 0)
        h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t          h_0 = 0, or the initial state (>= 0)

    ``MinGRU(units, *, return_sequences=False, go_backwards=False, return_state=False,
    stateful=False, dropout=0.0, seed=None, dtype="float32", input_dim=None, name=None)``.

    Input (B, T, F); output (B, H) = h_T, or (B, T, H) with ``return_sequences``. Weights:
    ``kernel`` (F, 2H), column blocks ``[z | h~]``, Glorot-uniform (fan of one block, F + H);
    ``bias`` (2H,), zeros. ``param_count = 2 * (F*H + H)``. State: ``MinGRUState(h)``; the
    state stays >= 0, and a given initial state must be >= 0 (InvalidInputError otherwise).
    The paper passes its ``h_0`` through ``g``; here the state is h itself, so that a pass
    resumed from a final state continues the sequence exactly.

    A pass of T > 1 steps (training and inference) runs the whole-sequence form: one GEMM for
    every step's gates, then the log-space (Heinsen) scan ``log h_t = A_t +
    logcumsumexp(log h_0, log(z_s h~_s) - A_s)``, ``A_t = sum_{s<=t} log(1 - z_s)``; its backward is one
    reverse sweep of the linear recurrence and two GEMMs. A single step (``step``, streaming)
    runs the step form. Masked steps carry the state. No ``recurrent_dropout`` (there is no
    recurrent product).
    """

    _parallel_forward = staticmethod(_min_gru.parallel_forward)
    _parallel_backward = staticmethod(_min_gru.parallel_backward)

    def __init__(self, units: int, **kwargs: Any) -> None:
        super().__init__(MinGRUCell(check_positive_int(units, "units", "MinGRU")), **kwargs)


class MinLSTM(_MinLayer):
    """minLSTM (Feng et al., 2024, "Were RNNs All We Needed?", arXiv:2410.01201)::

        f_t  = sigmoid(x_t @ W_f + b_f),   i_t = sigmoid(x_t @ W_i + b_i)
        h~_t = g(x_t @ W_h + b_h),         g(x) = x + 0.5 (x >= 0), sigmoid(x) (x < 0)
        h_t  = f_t / (f_t + i_t) * h_{t-1} + i_t / (f_t + i_t) * h~_t     h_0 = 0, or given (>= 0)

    ``MinLSTM(units, *, return_sequences=False, go_backwards=False, return_state=False,
    stateful=False, dropout=0.0, seed=None, dtype="float32", input_dim=None, name=None)``.

    Input (B, T, F); output (B, H) = h_T, or (B, T, H) with ``return_sequences``. Weights:
    ``kernel`` (F, 3H), column blocks ``[f | i | h~]``, Glorot-uniform (fan of one block,
    F + H); ``bias`` (3H,), zeros. ``param_count = 3 * (F*H + H)``. State:
    ``MinLSTMState(h)``, >= 0, as :class:`MinGRU`'s. Passes as :class:`MinGRU`'s, with the
    gate logit ``u = softplus(-k_f) - softplus(-k_i)`` (log f' = -softplus(u),
    log i' = -softplus(-u)).
    """

    _parallel_forward = staticmethod(_min_lstm.parallel_forward)
    _parallel_backward = staticmethod(_min_lstm.parallel_backward)

    def __init__(self, units: int, **kwargs: Any) -> None:
        super().__init__(MinLSTMCell(check_positive_int(units, "units", "MinLSTM")), **kwargs)
