"""The LSTM cell. Fused gate order ``[i | f | g | o]`` (Keras' order); ``xw`` is the step input
``x_s @ W + b``; ``ra`` the recurrent (gate) activation, sigmoid by default; ``act`` the layer's
activation, tanh by default.

Forward, step s::

    1.  a = xw + h_prev @ U                        (B, 4H)
    2.  i = ra(a_i)   f = ra(a_f)   g = act(a_g)   o = ra(a_o)
    3.  c = f * c_prev + i * g
    4.  m = o * act(c)                             (h = m without a projection)
    5.  h = m @ P                                  (only with proj_size: P (H, proj_size))

Parks ``gates`` = [i|f|g|o] (B, 4H), ``act_c`` = act(c) (B, H), and ``m`` with a projection.

Backward (``dh``, ``dc`` flow in from the step after)::

    5b. dm = dh @ P^T ;  dP += m^T @ dh             (without a projection: dm = dh)
    4b. do = dm * act_c ;   dc += act'(act_c) * (dm * o)
    3b. di = dc * g ;  df = dc * c_prev ;  dg = dc * i ;  dc_prev = dc * f
    2b. da_i = ra'(i) * di ; da_f = ra'(f) * df ; da_g = act'(g) * dg ; da_o = ra'(o) * do
    1b. dxw = da ;  dh_prev = da @ U^T
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from rnnkit._activations import ActivationLike
from rnnkit._layer import check_bool
from rnnkit._numbers import check_int
from rnnkit.kernels import ACTIVATIONS, ANY, Step
from rnnkit.recurrent._cell import Arrays, Cell, Param, StepBack
from rnnkit.recurrent._gated import (
    GatedCell,
    both_bias_rows,
    check_torch_bias,
    fed_back,
    fed_back_grad,
    gate_codes,
    glorot_gates,
    resolve_gate_activation,
    summed_bias_view,
)
from rnnkit.recurrent._states import LSTMState


class LSTMCell(GatedCell):
    """``LSTMCell(units, activation="tanh", *, recurrent_activation="sigmoid", use_bias=True,
    proj_size=0, unit_forget_bias=True, **options)``; ``proj_size`` P in (0, units) adds the
    parameter ``projection_kernel`` (units, P), Glorot-uniform, drawn after the others
    (PyTorch's LSTM with ``proj_size``). ``unit_forget_bias``: the forget block of the bias
    starts at 1.0 (over ``bias_initializer``'s values), as Keras'. ``options``: Keras' cell
    options (:class:`~rnnkit.recurrent._gated.GatedCell`). Called as Keras' ``LSTMCell``:
    ``h, [h, c] = cell(x_t, [h, c])`` (:mod:`rnnkit.recurrent._step_call`)."""

    name: ClassVar[str] = "LSTM"
    kind: ClassVar[str | None] = "LSTM"
    gates: ClassVar[int] = 4
    state_names: ClassVar[tuple[str, ...]] = ("h", "c")
    #: and ``unit_forget_bias``, which only sets the forget bias's first value
    layer_options: ClassVar[tuple[str, ...]] = (*GatedCell.layer_options, "unit_forget_bias")
    state_type: ClassVar[type | None] = LSTMState
    #: the gate arithmetic compiled (rnnkit.kernels._lstm); parks act_c (and m), the gates
    compiled_step: ClassVar[Step | None] = Step(
        "rnnkit.kernels._lstm:forward", "rnnkit.kernels._lstm:backward",
        parks=lambda cell: {"act_c": cell.units, **({"m": cell.units} if cell.proj_size else {})},
        input_park="gates", projects="m",
        options=lambda cell: gate_codes(cell, (1 if cell.proj_size else 0,)),
        implements={"activation": ACTIVATIONS, "recurrent_activation": ACTIVATIONS, "use_bias": (True, False),
                    "proj_size": ANY})

    def __init__(self, units: int, activation: ActivationLike = "tanh", *,
                 recurrent_activation: ActivationLike = "sigmoid", use_bias: bool = True,
                 proj_size: int | None = 0, unit_forget_bias: bool = True, **options: Any) -> None:
        super().__init__(units, activation, use_bias=use_bias, **options)
        self.unit_forget_bias = check_bool(unit_forget_bias, "unit_forget_bias", self.name)
        self.recurrent_activation = resolve_gate_activation(recurrent_activation, self.name)
        self.proj_size = check_int(0 if proj_size is None else proj_size,
                                   f"proj_size (0: no projection; below units={self.units})", self.name,
                                   lo=0, hi=self.units - 1)
        self.projection = "projection_kernel" if self.proj_size else None

    @property
    def rec_width(self) -> int:
        return self.proj_size or self.units

    def state_sizes(self) -> tuple[int, ...]:
        return (self.rec_width, self.units)

    def initial_bias(self, rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        b = super().initial_bias(rng, shape, dt)
        if self.unit_forget_bias:
            b[:, self.units:2 * self.units] = 1.0   # forget gate starts open (Keras' unit_forget_bias)
        return b

    def params(self, input_dim: int) -> list[Param]:
        out = super().params(input_dim)
        if self.proj_size:
            out.append(Param("projection_kernel", (self.units, self.proj_size),
                             glorot_gates(self.units, self.proj_size)))
        return out

    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        cfg["recurrent_activation"] = self.recurrent_activation.name
        cfg["proj_size"] = self.proj_size
        return cfg

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None, *, rdrop: np.ndarray | None = None) -> Arrays:
        H, ra = self.units, self.recurrent_activation
        h_prev, c_prev = prev
        a = fed_back(rdrop, h_prev) @ w["recurrent_kernel"]   # 1.
        a += inp
        ra(a[:, :2 * H], out=a[:, :2 * H])                # 2. i, f
        self.activation(a[:, 2 * H:3 * H], out=a[:, 2 * H:3 * H])  # g
        ra(a[:, 3 * H:], out=a[:, 3 * H:])                # o
        i, f, g, o = a[:, :H], a[:, H:2 * H], a[:, 2 * H:3 * H], a[:, 3 * H:]
        c = f * c_prev                                    # 3.
        c += i * g
        act_c = self.activation(c)
        m = o * act_c                                     # 4.
        h = m @ w["projection_kernel"] if self.proj_size else m   # 5.
        if park is not None:
            park["gates"], park["act_c"] = a, act_c
            if self.proj_size:
                park["m"] = m
        return (h, c)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray], *,
                  rdrop: np.ndarray | None = None) -> StepBack:
        H, ra = self.units, self.recurrent_activation
        dh, dc = d
        _, c_prev = prev
        gates, act_c = park["gates"], park["act_c"]
        i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]
        grads = None
        if self.proj_size:                                # 5b.
            grads = {"projection_kernel": park["m"].T @ dh}
            dh = dh @ w["projection_kernel"].T
        do = dh * act_c                                   # 4b.
        dc = dc + self.activation.vjp(act_c, dh * o)
        da = np.empty_like(gates)                         # 3b. + 2b.
        da[:, :H] = ra.vjp(i, dc * g)
        da[:, H:2 * H] = ra.vjp(f, dc * c_prev)
        da[:, 2 * H:3 * H] = self.activation.vjp(g, dc * i)
        da[:, 3 * H:] = ra.vjp(o, do)
        return StepBack((fed_back_grad(rdrop, da @ w["recurrent_kernel"].T), dc * f), da, None, grads)   # 1b.


class LSTMTorchBiasCell(LSTMCell):
    """``LSTM(..., bias_layout="torch")``: the bias is (2, 4H), row 0 PyTorch's ``bias_ih`` and
    row 1 its ``bias_hh``; step 1 adds both (``a = xw + b_hh + h_prev @ U``, ``xw`` holding
    ``b_ih``), so each row is a parameter of its own with the gradient of their sum, as PyTorch
    trains them. The compiled walker takes one bias row: it runs this cell as a plain
    :class:`LSTMCell` (:meth:`compiled_view`) whose one bias row is the sum of the two, and both
    rows get that row's gradient (the gradient of their sum)."""

    kind: ClassVar[str | None] = "LSTM"
    bias_rows: ClassVar[int] = 2
    bias_layout: ClassVar[str] = "torch"

    def __init__(self, units: int, activation: ActivationLike = "tanh", *,
                 recurrent_activation: ActivationLike = "sigmoid", use_bias: bool = True,
                 proj_size: int | None = 0) -> None:
        super().__init__(units, activation, recurrent_activation=recurrent_activation, use_bias=use_bias,
                         proj_size=proj_size)
        check_torch_bias(self)
        self._fused = LSTMCell(units, activation, recurrent_activation=recurrent_activation,
                               use_bias=use_bias, proj_size=proj_size)

    def initial_bias(self, rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        b = np.zeros(shape, dtype=dt)
        b[0, self.units:2 * self.units] = 1.0   # forget gate starts open (the sum is 1.0)
        return b

    def compiled_view(self, w: Mapping[str, np.ndarray]) -> tuple[Cell, Mapping[str, np.ndarray]] | None:
        """This cell as a plain :class:`LSTMCell` with the bias ``b_ih + b_hh`` in one row (the
        same arithmetic: every gate reads the sum); None for a subclass, whose own step the
        plain cell would not run."""
        return summed_bias_view(self, self._fused, w) if type(self) is LSTMTorchBiasCell else None

    def grads_from_view(self, grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Both bias rows get the gradient of the summed row."""
        return both_bias_rows(grads)

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None, *, rdrop: np.ndarray | None = None) -> Arrays:
        return super().step(w, inp + w["bias"][1], prev, park, rdrop=rdrop)
