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
from rnnkit.recurrent._cell import Arrays, Cell, StepBack
from rnnkit.recurrent._gated import (
    GatedCell,
    both_bias_rows,
    check_torch_bias,
    fed_back,
    fed_back_grad,
    summed_bias_view,
)
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
    as PyTorch trains them. The compiled walker takes one bias row: it runs this cell as a
    plain :class:`SimpleRNNCell` (:meth:`compiled_view`) whose one bias row is the sum of the
    two, and both rows get that row's gradient (the gradient of their sum)."""

    kind: ClassVar[str | None] = "SimpleRNN"
    bias_rows: ClassVar[int] = 2
    bias_layout: ClassVar[str] = "torch"

    def __init__(self, units: int, activation: ActivationLike = "tanh", *, use_bias: bool = True) -> None:
        super().__init__(units, activation, use_bias=use_bias)
        check_torch_bias(self)
        self._fused = SimpleRNNCell(units, activation, use_bias=use_bias)

    def compiled_view(self, w: Mapping[str, np.ndarray]) -> tuple[Cell, Mapping[str, np.ndarray]] | None:
        """This cell as a plain :class:`SimpleRNNCell` with the bias ``b_ih + b_hh`` in one row;
        None for a subclass, whose own step the plain cell would not run."""
        return summed_bias_view(self, self._fused, w) if type(self) is SimpleRNNTorchBiasCell else None

    def grads_from_view(self, grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Both bias rows get the gradient of the summed row."""
        return both_bias_rows(grads)

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None, *, rdrop: np.ndarray | None = None) -> Arrays:
        return super().step(w, inp + w["bias"][1], prev, park, rdrop=rdrop)
