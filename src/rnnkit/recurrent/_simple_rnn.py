"""The Elman cell (SimpleRNN). ``xw`` is the step input ``x_s @ W + b``.

Forward, step s::

    1.  a = xw + h_prev @ U
    2.  h = act(a)

Backward::

    2b. da = act'(h) * dh            (act' written in terms of the output h)
    1b. dxw = da ;  dh_prev = da @ U^T

Parks nothing: the walker keeps the states entering and leaving every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from rnnkit._activations import ActivationLike
from rnnkit.kernels import ACTIVATIONS, Step, activation_code
from rnnkit.recurrent._cell import Arrays, StepBack
from rnnkit.recurrent._gated import GatedCell, check_torch_bias, fed_back, fed_back_grad
from rnnkit.recurrent._states import SimpleRNNState


def act_code(cell: GatedCell) -> tuple[int, ...] | None:
    """The compiled step's options: (activation code,), or None (no compiled form)."""
    code = activation_code(cell.activation)
    return None if code is None else (code,)


class SimpleRNNCell(GatedCell):
    name: ClassVar[str] = "SimpleRNN"
    kind: ClassVar[str | None] = "SimpleRNN"
    gates: ClassVar[int] = 1
    state_type: ClassVar[type | None] = SimpleRNNState
    #: the arithmetic compiled (rnnkit.kernels._simple): h = act(a), parks nothing
    compiled_step: ClassVar[Step | None] = Step(
        "rnnkit.kernels._simple:forward", "rnnkit.kernels._simple:backward", options=act_code,
        implements={"activation": ACTIVATIONS, "use_bias": (True, False)})

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None, *, rdrop: np.ndarray | None = None) -> Arrays:
        (h_prev,) = prev
        a = fed_back(rdrop, h_prev) @ w["recurrent_kernel"]   # 1.
        a += inp
        return (self.activation(a, out=a),)  # 2.

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray], *,
                  rdrop: np.ndarray | None = None) -> StepBack:
        (dh,) = d
        (h,) = new
        da = self.activation.vjp(h, dh)                             # 2b.
        return StepBack((fed_back_grad(rdrop, da @ w["recurrent_kernel"].T),), da)   # 1b.



class SimpleRNNTorchBiasCell(SimpleRNNCell):
    """``SimpleRNN(..., bias_layout="torch")``: the bias is (2, H), rows PyTorch's ``bias_ih``
    and ``bias_hh``, both added (``a = xw + b_hh + h_prev @ U``), each a parameter of its own
    as PyTorch trains them. The compiled walker takes one bias row: this cell runs the
    reference walker."""

    kind: ClassVar[str | None] = "SimpleRNN"
    bias_rows: ClassVar[int] = 2
    bias_layout: ClassVar[str] = "torch"

    def __init__(self, units: int, activation: ActivationLike = "tanh", *, use_bias: bool = True) -> None:
        super().__init__(units, activation, use_bias=use_bias)
        check_torch_bias(self)

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None, *, rdrop: np.ndarray | None = None) -> Arrays:
        return super().step(w, inp + w["bias"][1], prev, park, rdrop=rdrop)
