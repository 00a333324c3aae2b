"""minGRU (Feng et al., 2024, "Were RNNs All We Needed?", arXiv:2410.01201): the cell (its step
form) and its whole-sequence (parallel) form.

Per unit, with ``k = x_t @ kernel + bias`` split into the column blocks ``[z | h~]``::

    z_t  = sigmoid(k_z)
    h~_t = g(k_h),       g(x) = x + 0.5 (x >= 0), sigmoid(x) (x < 0)
    h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t

The gates read the input only (no recurrent kernel), so the whole sequence is one linear
recurrence in ``h``: the cell's ``sequence_forward`` computes it with the log-space scan of
:mod:`rnnkit.recurrent._min_scan` (log z = -softplus(-k_z), log(1 - z) = -softplus(k_z),
log h~ = log g(k_h)).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rnnkit.recurrent._cell import Arrays, StepBack
from rnnkit.recurrent._min_scan import MinCell, g, g_grad, sigmoid


class MinGRUCell(MinCell):
    """``MinGRUCell(units)``: one step of minGRU (module docstring), Keras' weight convention.

    Weights: ``kernel`` (F, 2H), column blocks ``[z | h~]``, Glorot-uniform with the fan of one
    block (F + H); ``bias`` (2H,), zeros. ``param_count = 2 * (F*H + H)``. State:
    ``MinGRUState(h)``, h >= 0 (g's range; a given initial state must be >= 0).
    """

    name = "MinGRU"
    scan_kind = 0
    blocks = 2
    sequence_forward = MinCell.parallel_forward      # the parallel form, beside this step
    sequence_backward = MinCell.parallel_backward

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        H = self.units
        (h_prev,) = prev
        k = inp + w["bias"]
        z, ht = sigmoid(k[:, :H]), g(k[:, H:])
        if park is not None:
            park["k"] = k
        return ((1 - z) * h_prev + z * ht,)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> StepBack:
        H = self.units
        (dh,), (h_prev,) = d, prev
        k = park["k"]
        z, kh = sigmoid(k[:, :H]), k[:, H:]
        dk = np.concatenate([dh * (g(kh) - h_prev) * z * (1 - z), dh * z * g_grad(kh)], axis=1)
        return StepBack(d_prev=(dh * (1 - z),), d_inp=dk, params={"bias": dk.sum(axis=0)})

    def logit(self, k: np.ndarray) -> np.ndarray:
        return k[:, :, :self.units]                     # u = k_z

    def dk(self, k: np.ndarray, du: np.ndarray, dv: np.ndarray) -> np.ndarray:
        return np.concatenate([du, dv], axis=2)
