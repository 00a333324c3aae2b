"""minLSTM (Feng et al., 2024, "Were RNNs All We Needed?", arXiv:2410.01201): the cell (its
step form) and its whole-sequence (parallel) form.

Per unit, with ``k = x_t @ kernel + bias`` split into the column blocks ``[f | i | h~]``::

    f_t  = sigmoid(k_f),  i_t = sigmoid(k_i)
    f'_t = f_t / (f_t + i_t),  i'_t = i_t / (f_t + i_t)          (normalised: f' + i' = 1)
    h~_t = g(k_h),       g(x) = x + 0.5 (x >= 0), sigmoid(x) (x < 0)
    h_t  = f'_t * h_{t-1} + i'_t * h~_t

With ``u = softplus(-k_f) - softplus(-k_i)`` = log(i / f): ``i' = sigmoid(u)``, ``f' = 1 - i'``,
so minLSTM is the blend of :mod:`rnnkit.recurrent._min_scan` with gate logit ``u`` (the
paper's log-space form: log f' = -softplus(u), log i' = -softplus(-u)), and
``du/dk_f = -(1 - f)``, ``du/dk_i = 1 - i``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rnnkit.recurrent._cell import Arrays, StepBack
from rnnkit.recurrent._min_scan import MinCell, g, g_grad, sigmoid, softplus


class MinLSTMCell(MinCell):
    """``MinLSTMCell(units)``: one step of minLSTM (module docstring), Keras' weight convention.

    Weights: ``kernel`` (F, 3H), column blocks ``[f | i | h~]``, Glorot-uniform with the fan of
    one block (F + H); ``bias`` (3H,), zeros. ``param_count = 3 * (F*H + H)``. State:
    ``MinLSTMState(h)``, h >= 0 (g's range; a given initial state must be >= 0).
    """

    name = "MinLSTM"
    scan_kind = 1
    blocks = 3
    sequence_forward = MinCell.parallel_forward      # the parallel form, beside this step
    sequence_backward = MinCell.parallel_backward

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        H = self.units
        (h_prev,) = prev
        k = inp + w["bias"]
        f, i, ht = sigmoid(k[:, :H]), sigmoid(k[:, H:2 * H]), g(k[:, 2 * H:])
        if park is not None:
            park["k"] = k
        return ((f * h_prev + i * ht) / (f + i),)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> StepBack:
        H = self.units
        (dh,), (h_prev,) = d, prev
        k = park["k"]
        f, i, kh = sigmoid(k[:, :H]), sigmoid(k[:, H:2 * H]), k[:, 2 * H:]
        zi = i / (f + i)                                # i' = sigmoid(u), f' = 1 - i'
        du = dh * (g(kh) - h_prev) * zi * (1 - zi)
        dk = np.concatenate([-du * (1 - f), du * (1 - i), dh * zi * g_grad(kh)], axis=1)
        return StepBack(d_prev=(dh * (1 - zi),), d_inp=dk, params={"bias": dk.sum(axis=0)})

    def logit(self, k: np.ndarray) -> np.ndarray:
        """``u = softplus(-k_f) - softplus(-k_i)`` = log(i / f)."""
        H = self.units
        return softplus(-k[:, :, :H]) - softplus(-k[:, :, H:2 * H])

    def dk(self, k: np.ndarray, du: np.ndarray, dv: np.ndarray) -> np.ndarray:
        H = self.units                                  # du/dk_f = -sigmoid(-k_f), du/dk_i = sigmoid(-k_i)
        return np.concatenate([-du * sigmoid(-k[:, :, :H]), du * sigmoid(-k[:, :, H:2 * H]), dv], axis=2)
