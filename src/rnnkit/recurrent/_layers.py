"""SimpleRNN, LSTM and GRU: ``RecurrentLayer`` over the built-in cells. The docstrings are the spec."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._activations import ActivationLike
from rnnkit._errors import InvalidInputError, InvalidParameterError, WeightShapeError
from rnnkit._layer import check_bool
from rnnkit._penalties import attach, config_of
from rnnkit.recurrent._base import RecurrentLayer, kind_config
from rnnkit.recurrent._gated import GatedCell
from rnnkit.recurrent._gru import GRUCell, GRUResetAfterCell
from rnnkit.recurrent._lstm import LSTMCell, LSTMTorchBiasCell
from rnnkit.recurrent._registry import register_cell
from rnnkit.recurrent._simple_rnn import SimpleRNNCell, SimpleRNNTorchBiasCell

for _c in (SimpleRNNCell, LSTMCell, GRUCell, GRUResetAfterCell, LSTMTorchBiasCell, SimpleRNNTorchBiasCell):
    register_cell(_c)

BIAS_LAYOUTS = ("fused", "torch")


def _torch_bias(bias_layout: Any, where: str) -> bool:
    """Whether ``bias_layout`` asks for PyTorch's two biases (InvalidParameterError if unknown)."""
    if not isinstance(bias_layout, str) or bias_layout not in BIAS_LAYOUTS:
        raise InvalidParameterError(f"{where}: bias_layout must be one of {list(BIAS_LAYOUTS)} ('fused': "
                                    f"one bias row; 'torch': PyTorch's bias_ih and bias_hh), got "
                                    f"{bias_layout!r}")
    return bias_layout == "torch"


class _Gated(RecurrentLayer):
    """The constructor arguments every built-in recurrent layer shares: RecurrentLayer's, and
    Keras' ``kernel_regularizer``, ``recurrent_regularizer``, ``bias_regularizer``,
    ``activity_regularizer``, ``kernel_constraint``, ``recurrent_constraint``,
    ``bias_constraint`` (anything ``rnnkit.regularizers.get`` / ``rnnkit.constraints.get``
    takes; see :func:`rnnkit.attach_regularization`)."""

    cell: GatedCell

    def __init__(self, cell: GatedCell, *, kernel_regularizer: Any = None,
                 recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(cell, **kwargs)
        given = {"kernel_regularizer": kernel_regularizer, "recurrent_regularizer": recurrent_regularizer,
                 "bias_regularizer": bias_regularizer, "activity_regularizer": activity_regularizer,
                 "kernel_constraint": kernel_constraint, "recurrent_constraint": recurrent_constraint,
                 "bias_constraint": bias_constraint}
        if any(v is not None for v in given.values()):
            attach(self, **given)

    @property
    def use_bias(self) -> bool:
        return self.cell.use_bias

    @property
    def gate_width(self) -> int:
        return self.cell.gate_width

    def get_config(self) -> dict[str, Any]:
        """The constructor keywords, the regularizers and constraints set included (Keras')."""
        return {**kind_config(self.cell, self._walk_config()), **config_of(self)}

    def _set_gate_blocks(self, blocks: list[tuple[Any, ...]], names: list[str]) -> None:
        """Per-gate ``(kernel, recurrent_kernel[, bias])`` in fused order -> :meth:`set_weights`."""
        H, S = self.units, self.cell.rec_width
        parts: list[list[np.ndarray]] = [[], [], []]
        for gate, arrs in zip(names, blocks, strict=True):
            arrs = tuple(np.asarray(a) for a in arrs)
            F = self.input_dim if self.built else (arrs[0].shape[0] if arrs[0].ndim == 2 else -1)
            want = [(f"{gate}.kernel", (F, H)), (f"{gate}.recurrent_kernel", (S, H)),
                    (f"{gate}.bias", (self.cell.bias_rows, H))][:len(arrs)]
            for (nm, exp), arr in zip(want, arrs, strict=True):
                if arr.shape != exp or F < 1:
                    raise WeightShapeError(nm, exp, arr.shape, f"layer {self.name}")
            for k, arr in enumerate(arrs):
                parts[k].append(arr)
        self.set_weights(*(np.concatenate(p, axis=1) for p in parts if p))

    def _gate_arrays(self, arrays: tuple[Any, ...], gates: int) -> list[tuple[Any, ...]]:
        per = 3 if self.use_bias else 2
        if getattr(self.cell, "proj_size", 0):
            raise InvalidParameterError(
                f"{self.name}.set_gate_weights: a projected LSTM has a projection_kernel too; "
                f"use set_weights(kernel, recurrent_kernel, bias, projection_kernel)")
        if len(arrays) != gates * per:
            what = "(kernel, recurrent_kernel, bias)" if per == 3 else "(kernel, recurrent_kernel), no bias"
            raise InvalidInputError(
                f"{self.name}.set_gate_weights: expected {gates * per} arrays ({gates} gates x {what}), "
                f"got {len(arrays)}")
        return [tuple(arrays[k:k + per]) for k in range(0, gates * per, per)]


class SimpleRNN(_Gated):
    """Elman recurrence, from a zero state::

        h_0 = 0
        h_t = act(x_t @ W + h_{t-1} @ U + b)        t = 1..T

    ``SimpleRNN(units, activation="tanh", *, use_bias=True, return_sequences=False,
    go_backwards=False, seed=None, dtype="float32", input_dim=None, name=None)``.

    Input (B, T, F), output (B, H) = h_T, or (B, T, H) with ``return_sequences`` (slot k holds
    the state after processing step k; under ``go_backwards`` processing step 0 reads input
    timestep T-1 and the output stays in processing order).

    Weights: ``kernel`` W (F, H) Glorot-uniform (fan F + H); ``recurrent_kernel`` U (H, H)
    orthogonal; ``bias`` b (1, H) zeros (none with ``use_bias=False``).
    ``param_count = F*H + H*H + H``. ``activation`` defaults to tanh; it may be relu, sigmoid,
    hard_sigmoid, linear or softmax (axis -1). State: ``SimpleRNNState(h)``.

    ``bias_layout="torch"`` keeps PyTorch's two biases (``torch.nn.RNN``'s ``bias_ih`` and
    ``bias_hh``) as the rows of a (2, H) bias, both added: the outputs are the same as with
    their sum in one row, but each row is trained as a parameter of its own, as PyTorch does
    (an optimizer then moves the sum as PyTorch's moves it). It runs the reference walker
    (slower than the compiled one). ``rnnkit.io.from_torch_state`` fills both rows.
    """

    def __init__(self, units: int, activation: ActivationLike = "tanh", *, use_bias: bool = True,
                 bias_layout: str = "fused", **kwargs: Any) -> None:
        cls = SimpleRNNTorchBiasCell if _torch_bias(bias_layout, "SimpleRNN") else SimpleRNNCell
        super().__init__(cls(units, activation, use_bias=use_bias), **kwargs)


class LSTM(_Gated):
    """Long short-term memory, fused gate order ``[i | f | g | o]`` (Keras')::

        i_t = ra(x_t @ W_i + h_{t-1} @ U_i + b_i)
        f_t = ra(x_t @ W_f + h_{t-1} @ U_f + b_f)
        g_t = act(x_t @ W_g + h_{t-1} @ U_g + b_g)
        o_t = ra(x_t @ W_o + h_{t-1} @ U_o + b_o)
        c_t = f_t * c_{t-1} + i_t * g_t
        h_t = o_t * act(c_t)                        (with proj_size P: h_t = (o_t * act(c_t)) @ W_p)

    ``LSTM(units, activation="tanh", *, recurrent_activation="sigmoid", use_bias=True,
    proj_size=0, return_sequences=False, go_backwards=False, seed=None, dtype="float32",
    input_dim=None, name=None)``.

    ``act`` (default tanh) is the candidate and cell-output activation; ``ra`` the gate
    activation: sigmoid (default), hard_sigmoid (Keras 3's ``relu6(x + 3) / 6``), tanh, relu or
    linear. Weights: ``kernel`` (F, 4H) Glorot-uniform with the per-gate fan F + H;
    ``recurrent_kernel`` (S, 4H), four independent (semi-)orthogonal blocks (S = H, or P with a
    projection); ``bias`` (1, 4H), zeros except the forget block = 1.0 (none with
    ``use_bias=False``); with ``proj_size`` P (0 < P < H, PyTorch's LSTMP) also
    ``projection_kernel`` W_p (H, P), Glorot-uniform, and the output and ``h`` are P wide.
    ``param_count = 4 * (F*H + S*H + H) (+ H*P)``. State: ``LSTMState(h, c)``, ``c`` H wide.

    ``bias_layout="torch"`` keeps PyTorch's two biases (``torch.nn.LSTM``'s ``bias_ih`` and
    ``bias_hh``) as the rows of a (2, 4H) bias, both added (at initialisation the forget block
    of row 0 is 1.0, row 1 zeros): the outputs are the same as with their sum in one row, but
    each row is trained as a parameter of its own, as PyTorch does -- with one summed row an
    optimizer moves the sum once where PyTorch's moves each of the two (SGD: half as far; Adam:
    by one step where PyTorch's takes two), so the losses part from the first step. It runs
    the reference walker (slower than the compiled one). ``rnnkit.io.from_torch_state`` fills
    both rows; ``GRU(reset_after=True)`` keeps PyTorch's two biases always.
    """

    def __init__(self, units: int, activation: ActivationLike = "tanh", *,
                 recurrent_activation: ActivationLike = "sigmoid", use_bias: bool = True,
                 proj_size: int = 0, bias_layout: str = "fused", **kwargs: Any) -> None:
        cls = LSTMTorchBiasCell if _torch_bias(bias_layout, "LSTM") else LSTMCell
        cell = cls(units, activation, recurrent_activation=recurrent_activation, use_bias=use_bias,
                   proj_size=proj_size)
        super().__init__(cell, **kwargs)

    @property
    def recurrent_activation(self) -> Any:
        return self.cell.recurrent_activation  # type: ignore[attr-defined]

    @property
    def proj_size(self) -> int:
        return int(self.cell.proj_size)  # type: ignore[attr-defined]

    def set_gate_weights(self, *arrays: Any) -> None:
        """12 arrays: (kernel, recurrent_kernel, bias) for the input, forget, cell and output
        gates, in that order; kernel (F, H), recurrent_kernel (H, H), bias (1, H). Without a
        bias: 8 arrays, (kernel, recurrent_kernel) per gate."""
        blocks = self._gate_arrays(arrays, 4)
        self._set_gate_blocks(blocks, ["input", "forget", "cell", "output"])


class GRU(_Gated):
    """Gated recurrent unit, fused gate order ``[z | r | h]`` (Keras'); ``z`` near 1 KEEPS the
    previous state. ``reset_after=False`` (default, Cho et al., one bias row)::

        z_t = ra(x_t @ W_z + h_{t-1} @ U_z + b_z)
        r_t = ra(x_t @ W_r + h_{t-1} @ U_r + b_r)
        n_t = act(x_t @ W_h + (r_t * h_{t-1}) @ U_h + b_h)
        h_t = z_t * h_{t-1} + (1 - z_t) * n_t

    ``reset_after=True`` (cuDNN / PyTorch / Keras' default) gives the bias two rows, ``b_in`` and
    ``b_rec``, and applies the reset after the recurrent matmul::

        n_t = act(x_t @ W_h + b_in_h + r_t * (h_{t-1} @ U_h + b_rec_h))
        (z and r add both bias rows)

    ``GRU(units, activation="tanh", *, recurrent_activation="sigmoid", use_bias=True,
    reset_after=False, return_sequences=False, go_backwards=False, seed=None, dtype="float32",
    input_dim=None, name=None)``; ``ra`` as for LSTM.

    Weights: ``kernel`` (F, 3H) Glorot-uniform (per-gate fan F + H); ``recurrent_kernel``
    (H, 3H), three orthogonal blocks; ``bias`` (1, 3H) or (2, 3H), zeros (none with
    ``use_bias=False``). ``param_count = 3 * (F*H + H*H + H)`` (+ 3H with ``reset_after``).
    State: ``GRUState(h)``.
    """

    def __init__(self, units: int, activation: ActivationLike = "tanh", *,
                 recurrent_activation: ActivationLike = "sigmoid", use_bias: bool = True,
                 reset_after: bool = False, **kwargs: Any) -> None:
        cell = GRUCell(units, activation, recurrent_activation=recurrent_activation, use_bias=use_bias,
                       reset_after=check_bool(reset_after, "reset_after", "GRU"))
        super().__init__(cell, **kwargs)

    @property
    def reset_after(self) -> bool:
        return bool(self.cell.reset_after)  # type: ignore[attr-defined]

    @property
    def recurrent_activation(self) -> Any:
        return self.cell.recurrent_activation  # type: ignore[attr-defined]

    def set_gate_weights(self, *arrays: Any) -> None:
        """9 arrays: (kernel, recurrent_kernel, bias) for the RESET, UPDATE and candidate gates,
        in that order (the fused layout stores update first: ``[z | r | h]``). Without a bias:
        6 arrays, (kernel, recurrent_kernel) per gate."""
        reset, update, cand = self._gate_arrays(arrays, 3)
        self._set_gate_blocks([update, reset, cand], ["update", "reset", "candidate"])
