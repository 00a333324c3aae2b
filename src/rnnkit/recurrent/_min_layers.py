"""``MinGRU`` and ``MinLSTM``: ``RecurrentLayer`` over :class:`MinGRUCell` / :class:`MinLSTMCell`
whose walker runs a pass of more than one step in the cells' whole-sequence (parallel,
log-space scan) form and a single step (streaming: ``step``, ``seq_init`` of one step) in the
step form."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._layer import check_positive_int
from rnnkit.recurrent._base import RecurrentLayer
from rnnkit.recurrent._min_gru import MinGRUCell
from rnnkit.recurrent._min_lstm import MinLSTMCell
from rnnkit.recurrent._min_scan import compiled
from rnnkit.recurrent._registry import register_cell

for _c in (MinGRUCell, MinLSTMCell):
    register_cell(_c)


class _MinLayer(RecurrentLayer):
    """What MinGRU and MinLSTM share: a layer over the cell, whose config is its units and the
    walk's options. The walker chooses the form of every pass
    (:func:`rnnkit.recurrent._walker.sequence_form`): the cell's parallel form for a pass of
    T > 1 steps (masked or not), the step form for one step."""

    def __init__(self, cell: MinGRUCell | MinLSTMCell, **kwargs: Any) -> None:
        super().__init__(cell, **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {"units": self.units, **self._walk_config()}

    def step(self, x: Any, state: Any) -> Any:
        """:meth:`rnnkit.RecurrentLayer.step`. One sequence (``x`` an array (1, F) of the layer's
        dtype, ``state`` a state of one (1, H) array of it, both C-contiguous) in the ``"fast"``
        kernel mode runs the compiled step (:func:`rnnkit.kernels._min.step`: the projection and
        the blend in one call, no checks or arrays beyond the new state's); anything else, and a
        state the compiled step finds negative or non-finite (refused there), the general path."""
        kern = compiled()
        built = self._input_shape
        if kern is not None and built is not None and type(x) is np.ndarray and x.dtype == self.dtype \
                and x.shape == (1, built.dims[2]) and x.flags.c_contiguous \
                and isinstance(state, tuple) and len(state) == 1:
            h = state[0]
            w = self._weights
            if type(h) is np.ndarray and h.dtype == self.dtype and h.shape == (1, self.units) \
                    and h.flags.c_contiguous and w["kernel"].flags.c_contiguous:
                out = np.empty_like(h)
                if kern.step(x, w["kernel"], w["bias"], h, out, self.cell.scan_kind):
                    return self.cell.make_state((out,))
        return super().step(x, state)


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
    reverse sweep of the linear recurrence and two GEMMs (compiled, in the ``"fast"`` kernel
    mode: the recurrence itself, step by step over vectorised units, in linear space). A single
    step (``step``, streaming) runs the step form (compiled for one sequence). Masked steps
    carry the state. No ``recurrent_dropout`` (there is no
    recurrent product).
    """

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

    def __init__(self, units: int, **kwargs: Any) -> None:
        super().__init__(MinLSTMCell(check_positive_int(units, "units", "MinLSTM")), **kwargs)
