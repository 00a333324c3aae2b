"""SimpleRNN, LSTM and GRU: the walker over one cell each. The docstrings are the spec."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._activations import ActivationLike
from rnnkit._errors import InvalidInputError
from rnnkit.recurrent._cell import Cell
from rnnkit.recurrent._gru import GRUCell, GRUResetAfterCell
from rnnkit.recurrent._lstm import LSTMCell
from rnnkit.recurrent._simple_rnn import SimpleRNNCell
from rnnkit.recurrent._walker import LSTMState, RecurrentLayer


class SimpleRNN(RecurrentLayer):
    """Elman recurrence, from a zero state::

        h_0 = 0
        h_t = act(x_t @ W + h_{t-1} @ U + b)        t = 1..T

    Input (B, T, F), output (B, H) = h_T, or (B, T, H) with ``return_sequences`` (slot k holds
    the state after processing step k; under ``go_backwards`` processing step 0 reads input
    timestep T-1 and the output stays in processing order).

    Weights: ``kernel`` W (F, H) Glorot-uniform (fan F + H); ``recurrent_kernel`` U (H, H)
    orthogonal; ``bias`` b (1, H) zeros. ``param_count = F*H + H*H + H``.
    ``activation`` defaults to tanh; it may be relu, sigmoid, linear or softmax (axis -1).
    """

    cell_class = SimpleRNNCell


class LSTM(RecurrentLayer):
    """Long short-term memory, fused gate order ``[i | f | g | o]`` (Keras')::

        i_t = sigmoid(x_t @ W_i + h_{t-1} @ U_i + b_i)
        f_t = sigmoid(x_t @ W_f + h_{t-1} @ U_f + b_f)
        g_t = act(    x_t @ W_g + h_{t-1} @ U_g + b_g)
        o_t = sigmoid(x_t @ W_o + h_{t-1} @ U_o + b_o)
        c_t = f_t * c_{t-1} + i_t * g_t
        h_t = o_t * act(c_t)

    ``act`` (default tanh) is the candidate and cell-output activation; the gates are always
    sigmoid. Weights: ``kernel`` (F, 4H) Glorot-uniform with the per-gate fan F + H;
    ``recurrent_kernel`` (H, 4H), four independent orthogonal (H, H) blocks; ``bias`` (1, 4H),
    zeros except the forget block = 1.0. ``param_count = 4 * (F*H + H*H + H)``. The cell state
    stays internal; output as for SimpleRNN.
    """

    cell_class = LSTMCell

    def set_gate_weights(self, *arrays: Any) -> None:
        """12 arrays: (kernel, recurrent_kernel, bias) for the input, forget, cell and output
        gates, in that order; kernel (F, H), recurrent_kernel (H, H), bias (1, H)."""
        if len(arrays) != 12:
            raise InvalidInputError(
                f"LSTM.set_gate_weights: expected 12 arrays (4 gates x 3), got {len(arrays)}"
            )
        t = [tuple(arrays[k:k + 3]) for k in range(0, 12, 3)]
        self._set_gate_triples(t, ["input", "forget", "cell", "output"])  # type: ignore[arg-type]

    def _pack_state(self, arrays: tuple[np.ndarray, ...]) -> Any:
        return LSTMState(arrays[0], arrays[1])

    def _unpack_state(self, state: Any) -> tuple[np.ndarray, ...]:
        if isinstance(state, LSTMState):
            return (self._as_input(state.h(), "state"), self._as_input(state.c(), "state"))
        raise InvalidInputError(f"LSTM: expected an LSTMState as state, got {type(state).__name__}")


class GRU(RecurrentLayer):
    """Gated recurrent unit, fused gate order ``[z | r | h]`` (Keras'); ``z`` near 1 KEEPS the
    previous state. ``reset_after=False`` (default, Cho et al., one bias row)::

        z_t = sigmoid(x_t @ W_z + h_{t-1} @ U_z + b_z)
        r_t = sigmoid(x_t @ W_r + h_{t-1} @ U_r + b_r)
        n_t = act(x_t @ W_h + (r_t * h_{t-1}) @ U_h + b_h)
        h_t = z_t * h_{t-1} + (1 - z_t) * n_t

    ``reset_after=True`` (cuDNN / PyTorch / Keras' default) gives the bias two rows, ``b_in`` and
    ``b_rec``, and applies the reset after the recurrent matmul::

        n_t = act(x_t @ W_h + b_in_h + r_t * (h_{t-1} @ U_h + b_rec_h))
        (z and r add both bias rows)

    Weights: ``kernel`` (F, 3H) Glorot-uniform (per-gate fan F + H); ``recurrent_kernel``
    (H, 3H), three orthogonal blocks; ``bias`` (1, 3H) or (2, 3H), zeros.
    ``param_count = 3 * (F*H + H*H + H)`` (+ 3H with ``reset_after``).
    """

    cell_class = GRUCell

    def __init__(self, units: int, activation: ActivationLike = "tanh", *, reset_after: bool = False,
                 **kwargs: Any) -> None:
        self.reset_after = bool(reset_after)
        super().__init__(units, activation, **kwargs)

    def _make_cell(self) -> Cell:
        cls = GRUResetAfterCell if self.reset_after else GRUCell
        return cls(self.units, self.activation)

    def set_gate_weights(self, *arrays: Any) -> None:
        """9 arrays: (kernel, recurrent_kernel, bias) for the RESET, UPDATE and candidate gates,
        in that order (the fused layout stores update first: ``[z | r | h]``)."""
        if len(arrays) != 9:
            raise InvalidInputError(
                f"GRU.set_gate_weights: expected 9 arrays (3 gates x 3), got {len(arrays)}"
            )
        reset, update, cand = (tuple(arrays[k:k + 3]) for k in range(0, 9, 3))
        self._set_gate_triples([update, reset, cand], ["update", "reset", "candidate"])  # type: ignore[list-item]

    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        cfg["reset_after"] = self.reset_after
        return cfg
