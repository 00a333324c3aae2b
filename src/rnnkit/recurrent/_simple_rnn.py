"""The Elman cell (SimpleRNN).

Forward, step s::

    1.  a = xw + h_prev @ U
    2.  h = act(a)

Backward::

    2b. da = act'(h) * dh            (act' written in terms of the output h)
    1b. dxw = da ;  dh_prev = da @ U^T

Parks nothing beyond the state entering each step (the walker also keeps the state leaving it).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from rnnkit.recurrent._cell import Arrays, Cell


class SimpleRNNCell(Cell):
    name: ClassVar[str] = "SimpleRNN"
    gates: ClassVar[int] = 1

    def step(self, xw: np.ndarray, prev: Arrays, out: Arrays, U: np.ndarray,
             b_rec: np.ndarray | None, park: dict[str, np.ndarray] | None) -> None:
        (h_prev,) = prev
        (h,) = out
        np.matmul(h_prev, U, out=h)      # 1.
        h += xw
        self.act(h, out=h)               # 2.

    def step_back(self, d: Arrays, prev: Arrays, new: Arrays, park: dict[str, np.ndarray],
                  U: np.ndarray, dxw: np.ndarray, drec: np.ndarray) -> Arrays:
        (dh,) = d
        (h,) = new
        dxw[...] = self.act.vjp(h, dh)   # 2b.
        return (dxw @ U.T,)              # 1b.
