"""The cell contract: the arithmetic of ONE timestep, forward and backward side by side.

Notation, used by every cell and by the walker:

- ``B`` batch, ``T`` timesteps, ``F`` input features, ``H`` units, ``G`` gate blocks.
- ``s`` is the processing step (0..T-1). Under ``go_backwards`` step ``s`` reads input
  timestep ``T-1-s``; otherwise timestep ``s``.
- ``W`` kernel ``(F, G*H)``, ``U`` recurrent kernel ``(H, G*H)``, ``b`` bias ``(1, G*H)``
  (``(2, G*H)`` for GRU ``reset_after=True``: row 0 input bias, row 1 recurrent bias).
- ``xw_s = x_s @ W + b[0]``: the input projection of step ``s``, computed by the walker for
  all steps in one GEMM before the walk.
- ``h_prev`` / ``c_prev``: the state entering step ``s``; ``h`` / ``c``: the state it leaves.
- Backward names a gradient ``d<name>`` (``dh`` = dL/dh) and numbers its steps after the
  forward steps it undoes (forward step ``3`` is undone by backward step ``3b``).

A cell never allocates the per-step caches: the walker owns (T, B, width) arrays for every
name in ``parks`` and hands the cell the slice of step ``s`` to write (training) or ``None``
(inference). Likewise the walker owns the state arrays and hands the cell where to write the
new state, and it owns ``dxw_s`` (dL/dxw_s) and ``drec_s`` (dL/d(h_prev@U + b[1])), from
which it makes the batched weight-gradient GEMMs after the walk.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from rnnkit._activations import ActivationFn

Arrays = tuple[np.ndarray, ...]


class Cell:
    """Base of the three cells. Subclasses set the class attributes and the two steps."""

    #: the layer name used in messages ("LSTM")
    name: ClassVar[str] = "Cell"
    #: number of fused gate blocks G
    gates: ClassVar[int] = 1
    #: recurrent states, each (B, H); the walker parks the state entering every step
    states: ClassVar[tuple[str, ...]] = ("h",)
    #: what the cell parks per step beyond the entering state: name -> width in units of H
    parks: ClassVar[dict[str, int]] = {}
    #: recurrent-kernel gradient groups: (array projected, first gate, end gate). The array
    #: is a parked state ("h") or a parked cell value; one GEMM per group.
    rec_groups: ClassVar[tuple[tuple[str, int, int], ...]] = (("h", 0, 1),)
    #: True when dL/d(recurrent projection) differs from dL/dxw (GRU reset_after=True)
    separate_rec_grad: ClassVar[bool] = False
    #: rows of the bias: 1, or 2 when the recurrent projection has its own bias
    bias_rows: ClassVar[int] = 1

    def __init__(self, units: int, activation: ActivationFn) -> None:
        self.units = units
        self.act = activation

    def initial_bias(self, dtype: np.dtype) -> np.ndarray:
        """The bias at initialisation: zeros (LSTM overrides: forget block = 1.0)."""
        return np.zeros((self.bias_rows, self.gates * self.units), dtype=dtype)

    def step(
        self, xw: np.ndarray, prev: Arrays, out: Arrays, U: np.ndarray, b_rec: np.ndarray | None,
        park: dict[str, np.ndarray] | None,
    ) -> None:
        """Forward one step: write the new state into ``out`` (and the caches into ``park``)."""
        raise NotImplementedError

    def step_back(
        self, d: Arrays, prev: Arrays, new: Arrays, park: dict[str, np.ndarray], U: np.ndarray,
        dxw: np.ndarray, drec: np.ndarray,
    ) -> Arrays:
        """Backward one step. ``d`` is dL/d(new state); write dL/dxw_s into ``dxw`` (and
        dL/d(recurrent projection) into ``drec`` when ``separate_rec_grad``); return dL/d(prev).
        """
        raise NotImplementedError
