"""The GRU cell, in both of Keras' forms. Fused gate order ``[z | r | h]`` (Keras' order);
the candidate block is called ``n`` below. ``z`` near 1 keeps the previous state. ``xw`` is the
step input ``x_s @ W + b[0]``; ``sg`` the recurrent (gate) activation, sigmoid by default.

``reset_after=False`` (default; Cho et al., one bias row), step s::

    1.  a_zr = xw_zr + h_prev @ U_zr               (B, 2H)
    2.  z = sg(a_z) ;  r = sg(a_r)
    3.  rh = r * h_prev
    4.  n = act(xw_n + rh @ U_n)
    5.  h = z * h_prev + (1 - z) * n

Parks ``gates`` = [z|r|n] (B, 3H) and ``rh`` (B, H). Backward::

    5b. dz = dh * (h_prev - n) ;  dn = dh * (1 - z) ;  dh_prev = dh * z
    4b. da_n = act'(n) * dn ;  drh = da_n @ U_n^T
    3b. dr = drh * h_prev ;  dh_prev += drh * r
    2b. da_z = sg'(z) * dz ;  da_r = sg'(r) * dr
    1b. dxw = [da_z | da_r | da_n] ;  dh_prev += da_zr @ U_zr^T

``reset_after=True`` (cuDNN / PyTorch / Keras default; bias rows ``b_in``, ``b_rec``; without a
bias ``b_rec`` is 0)::

    1.  hu = h_prev @ U + b_rec                    (B, 3H)
    2.  z = sg(xw_z + hu_z) ;  r = sg(xw_r + hu_r)
    4.  n = act(xw_n + r * hu_n)
    5.  h = z * h_prev + (1 - z) * n

Parks ``gates`` = [z|r|n] and ``hu_n`` (B, H). Backward::

    5b. as above
    4b. da_n = act'(n) * dn ;  dhu_n = da_n * r ;  dr = da_n * hu_n
    2b. da_z, da_r as above
    1b. dxw = [da_z | da_r | da_n] ;  drec = [da_z | da_r | dhu_n] ;  dh_prev += drec @ U^T
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from rnnkit._activations import ActivationLike
from rnnkit._errors import InvalidParameterError
from rnnkit._layer import check_bool
from rnnkit.kernels import ACTIVATIONS, Step
from rnnkit.recurrent._cell import Arrays, Cell, StepBack
from rnnkit.recurrent._gated import GatedCell, fed_back, fed_back_grad, gate_codes, resolve_gate_activation
from rnnkit.recurrent._states import GRUState

#: the options of a GRU cell and the values its compiled steps compute (a softmax activation: none)
GATED_OPTIONS = {"activation": ACTIVATIONS, "recurrent_activation": ACTIVATIONS, "use_bias": (True, False)}


class GRUCell(GatedCell):
    """``GRUCell(units, activation="tanh", *, recurrent_activation="sigmoid", use_bias=True,
    reset_after=None, **options)``: the GRU cell; ``options`` are Keras' cell options
    (:class:`~rnnkit.recurrent._gated.GatedCell`). Called as Keras' ``GRUCell``:
    ``h, [h] = cell(x_t, [h])`` (:mod:`rnnkit.recurrent._step_call`).

    ``reset_after`` chooses the cell, as Keras' argument does: ``GRUCell(units)`` and
    ``GRUCell(units, reset_after=True)`` make a :class:`GRUResetAfterCell` (Keras' default:
    the reset gate scales the candidate's recurrent product, two bias rows);
    ``reset_after=False`` makes this class itself, whose reset gate acts before the
    candidate's recurrent matmul (one bias row). ``None`` means True for ``GRUCell`` and the
    class's own form for a subclass; a subclass cannot be given the other form.
    :attr:`reset_after` says which an instance computes; its class records it in files
    (:meth:`from_config` rebuilds a ``GRUCell`` with ``reset_after=False``, as files written
    before this argument existed mean)."""

    name: ClassVar[str] = "GRU"
    kind: ClassVar[str | None] = "GRU"
    gates: ClassVar[int] = 3
    state_type: ClassVar[type | None] = GRUState
    reset_after: ClassVar[bool] = False
    #: the gate arithmetic compiled (rnnkit.kernels._gru): two groups, parks rh, the gates
    compiled_step: ClassVar[Step | None] = Step(
        "rnnkit.kernels._gru:forward", "rnnkit.kernels._gru:backward", parks=lambda cell: {"rh": cell.units},
        input_park="gates", options=gate_codes, implements={**GATED_OPTIONS, "reset_after": (False,)})

    def __new__(cls, *args: Any, reset_after: bool | None = None, **kwargs: Any) -> GRUCell:
        # a constructor call names the units; a bare __new__ (copy.deepcopy's) keeps the class
        if cls is GRUCell and (args or kwargs) and (reset_after is None or reset_after is True):
            cls = GRUResetAfterCell
        return super().__new__(cls)

    def __init__(self, units: int, activation: ActivationLike = "tanh", *,
                 recurrent_activation: ActivationLike = "sigmoid", use_bias: bool = True,
                 reset_after: bool | None = None, **options: Any) -> None:
        if reset_after is not None and check_bool(reset_after, "reset_after", self.name) != self.reset_after:
            raise InvalidParameterError(
                f"{type(self).__name__} computes the GRU with reset_after={self.reset_after}; got "
                f"reset_after={reset_after}")
        super().__init__(units, activation, use_bias=use_bias, **options)
        self.recurrent_activation = resolve_gate_activation(recurrent_activation, self.name)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Cell:
        """The cell of ``config`` in the class's own form (``GRUCell``: ``reset_after=False``)."""
        return cls(**{"reset_after": cls.reset_after, **config})

    def rec_groups(self, width: int) -> list[tuple[str, int, int]]:
        H = self.units
        return [("h", 0, 2 * H), ("rh", 2 * H, 3 * H)]

    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        cfg["recurrent_activation"] = self.recurrent_activation.name
        cfg["reset_after"] = self.reset_after   # (the class's form; files before it: from_config)
        return cfg

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None, *, rdrop: np.ndarray | None = None) -> Arrays:
        H, U = self.units, w["recurrent_kernel"]
        (h_prev,) = prev
        hm = fed_back(rdrop, h_prev)                           # (h_prev under recurrent dropout)
        gates = hm @ U[:, :2 * H]                          # 1.
        gates += inp[:, :2 * H]
        self.recurrent_activation(gates, out=gates)        # 2.
        z, r = gates[:, :H], gates[:, H:]
        rh = r * hm                                        # 3.
        n = rh @ U[:, 2 * H:]                              # 4.
        n += inp[:, 2 * H:]
        self.activation(n, out=n)
        h = h_prev - n                                     # 5. h = n + z * (h_prev - n)
        h *= z
        h += n
        if park is not None:
            park["gates"], park["rh"] = np.concatenate([gates, n], axis=1), rh
        return (h,)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray], *,
                  rdrop: np.ndarray | None = None) -> StepBack:
        H, U, sg = self.units, w["recurrent_kernel"], self.recurrent_activation
        (dh,) = d
        (h_prev,) = prev
        gates = park["gates"]
        z, r, n = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:]
        dz = dh * (h_prev - n)                             # 5b.
        dn = dh * (1.0 - z)
        dh_prev = dh * z
        dxw = np.empty_like(gates)
        dxw[:, 2 * H:] = da_n = self.activation.vjp(n, dn)  # 4b.
        drh = da_n @ U[:, 2 * H:].T
        dr = drh * fed_back(rdrop, h_prev)                     # 3b.
        dxw[:, :H] = sg.vjp(z, dz)                         # 2b.
        dxw[:, H:2 * H] = sg.vjp(r, dr)
        dh_prev += fed_back_grad(rdrop, drh * r + dxw[:, :2 * H] @ U[:, :2 * H].T)   # 1b.
        return StepBack((dh_prev,), dxw)


class GRUResetAfterCell(GRUCell):
    """``reset_after=True`` (what ``GRUCell(units)`` makes): the reset gate scales the
    candidate's recurrent projection; the bias has two rows (input, recurrent)."""

    kind: ClassVar[str | None] = "GRU"
    reset_after: ClassVar[bool] = True
    bias_rows: ClassVar[int] = 2
    #: the gate arithmetic compiled: the product apart (with bias row 1), parks hu_n, the gates
    compiled_step: ClassVar[Step | None] = Step(
        "rnnkit.kernels._gru:forward_ra", "rnnkit.kernels._gru:backward_ra",
        parks=lambda cell: {"hu_n": cell.units}, input_park="gates", rec_apart=True, options=gate_codes,
        implements={**GATED_OPTIONS, "reset_after": (True,)})

    def rec_groups(self, width: int) -> list[tuple[str, int, int]]:
        return [("h", 0, width)]

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None, *, rdrop: np.ndarray | None = None) -> Arrays:
        H = self.units
        (h_prev,) = prev
        hu = fed_back(rdrop, h_prev) @ w["recurrent_kernel"]   # 1.
        if self.use_bias:
            hu += w["bias"][1]
        gates = inp + hu                                   # (the n block is replaced below)
        self.recurrent_activation(gates[:, :2 * H], out=gates[:, :2 * H])   # 2.
        z, r = gates[:, :H], gates[:, H:2 * H]
        hu_n = hu[:, 2 * H:]
        n = gates[:, 2 * H:]
        np.multiply(r, hu_n, out=n)                        # 4.
        n += inp[:, 2 * H:]
        self.activation(n, out=n)
        h = h_prev - n                                     # 5.
        h *= z
        h += n
        if park is not None:
            park["gates"], park["hu_n"] = gates, hu_n
        return (h,)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray], *,
                  rdrop: np.ndarray | None = None) -> StepBack:
        H, sg = self.units, self.recurrent_activation
        (dh,) = d
        (h_prev,) = prev
        gates, hu_n = park["gates"], park["hu_n"]
        z, r, n = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:]
        dz = dh * (h_prev - n)                             # 5b.
        dn = dh * (1.0 - z)
        dh_prev = dh * z
        dxw = np.empty_like(gates)
        drec = np.empty_like(gates)
        dxw[:, 2 * H:] = da_n = self.activation.vjp(n, dn)  # 4b.
        np.multiply(da_n, r, out=drec[:, 2 * H:])
        dr = da_n * hu_n
        dxw[:, :H] = sg.vjp(z, dz)                         # 2b.
        dxw[:, H:2 * H] = sg.vjp(r, dr)
        drec[:, :2 * H] = dxw[:, :2 * H]
        dh_prev += fed_back_grad(rdrop, drec @ w["recurrent_kernel"].T)   # 1b.
        return StepBack((dh_prev,), dxw, drec)

