"""minGRU (Feng et al., 2024, "Were RNNs All We Needed?", arXiv:2410.01201): the cell (its step
form) and its whole-sequence (parallel) form.

Per unit, with ``k = x_t @ kernel + bias`` split into the column blocks ``[z | h~]``::

    z_t  = sigmoid(k_z)
    h~_t = g(k_h),       g(x) = x + 0.5 (x >= 0), sigmoid(x) (x < 0)
    h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t

The gates read the input only (no recurrent kernel), so the whole sequence is one linear
recurrence in ``h``: :func:`parallel_forward` computes it with the log-space scan of
:mod:`rnnkit.recurrent._min_scan` (log z = -softplus(-k_z), log(1 - z) = -softplus(k_z),
log h~ = log g(k_h)).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnkit._initializers import glorot_uniform
from rnnkit.recurrent._cell import Arrays, Cell, Param, StepBack
from rnnkit.recurrent._min_scan import (
    compiled,
    g,
    g_grad,
    mask_u8,
    project,
    reduce,
    scan_backward,
    scan_forward,
    sigmoid,
)


class MinGRUCell(Cell):
    """``MinGRUCell(units)``: one step of minGRU (module docstring), Keras' weight convention.

    Weights: ``kernel`` (F, 2H), column blocks ``[z | h~]``, Glorot-uniform with the fan of one
    block (F + H); ``bias`` (2H,), zeros. ``param_count = 2 * (F*H + H)``. State:
    ``MinGRUState(h)``, h >= 0 (g's range; a given initial state must be >= 0).
    """

    name = "MinGRU"
    input_kernel = "kernel"      # the walker projects x @ kernel; the step adds the (2H,) bias

    def __init__(self, units: int) -> None:
        super().__init__(units)

    def get_config(self) -> dict[str, Any]:
        return {"units": self.units}

    def params(self, input_dim: int) -> list[Param]:
        H = self.units
        return [Param("kernel", (input_dim, 2 * H),
                      lambda rng, shape, dt: glorot_uniform(rng, shape, input_dim, H, dt)),
                Param("bias", (2 * H,), lambda rng, shape, dt: np.zeros(shape, dt))]

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


def parallel_forward(w: Mapping[str, np.ndarray], x_tm: np.ndarray, h0: np.ndarray,
                     mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The whole sequence at once: ``x_tm`` (T, B, F), ``h0`` (B, H) >= 0, ``mask`` (T, B) or
    None. Returns (the states (T+1, B, H), row 0 = h0; ``k`` (T, B, 2H), what :meth:`MinGRUCell.step`
    parks at each step)."""
    k = project(w, x_tm)
    H = k.shape[2] // 2
    kern = compiled()
    if kern is not None:
        hist = np.empty((k.shape[0] + 1, k.shape[1], H), k.dtype)
        kern.scan_forward(k, 0, np.ascontiguousarray(h0, k.dtype), mask_u8(mask), hist)
        return hist, k
    return scan_forward(k[:, :, :H], k[:, :, H:], h0, mask), k


def parallel_backward(w: Mapping[str, np.ndarray], x_tm: np.ndarray, hist: np.ndarray, k: np.ndarray,
                      dh: np.ndarray, mask: np.ndarray | None = None, need_dx: bool = True
                      ) -> tuple[np.ndarray | None, dict[str, np.ndarray], np.ndarray]:
    """The gradients of :func:`parallel_forward` from ``dh`` (T, B, H), the gradient reaching
    each step's state from outside the recurrence: (dL/dx_tm or None, {kernel, bias}, dL/dh0)."""
    H = k.shape[2] // 2
    kern = compiled()
    if kern is not None:
        dk, dh0 = np.empty_like(k), np.empty((k.shape[1], H), k.dtype)
        kern.scan_backward(k, 0, hist, np.ascontiguousarray(dh), mask_u8(mask), dk, dh0)
        dx, grads = reduce(w, x_tm, dk, need_dx)
        return dx, grads, dh0
    du, dv, dh0 = scan_backward(k[:, :, :H], k[:, :, H:], hist, dh, mask)
    dx, grads = reduce(w, x_tm, np.concatenate([du, dv], axis=2), need_dx)
    return dx, grads, dh0
