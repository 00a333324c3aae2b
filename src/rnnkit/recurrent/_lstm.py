"""The LSTM cell. Fused gate order ``[i | f | g | o]`` (Keras' order).

Forward, step s (``sg`` = sigmoid, ``act`` = the layer's activation, tanh by default)::

    1.  a = xw + h_prev @ U                        (B, 4H)
    2.  i = sg(a_i)   f = sg(a_f)   g = act(a_g)   o = sg(a_o)
    3.  c = f * c_prev + i * g
    4.  h = o * act(c)

Parks ``gates`` = [i|f|g|o] (B, 4H) and ``act_c`` = act(c) (B, H).

Backward (``dh``, ``dc`` flow in from the step after)::

    4b. do = dh * act_c ;   dc += act'(act_c) * (dh * o)
    3b. di = dc * g ;  df = dc * c_prev ;  dg = dc * i ;  dc_prev = dc * f
    2b. da_i = di*i*(1-i) ; da_f = df*f*(1-f) ; da_g = act'(g) * dg ; da_o = do*o*(1-o)
    1b. dxw = da ;  dh_prev = da @ U^T
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from rnnkit._activations import sigmoid
from rnnkit.recurrent._cell import Arrays, Cell


class LSTMCell(Cell):
    name: ClassVar[str] = "LSTM"
    gates: ClassVar[int] = 4
    states: ClassVar[tuple[str, ...]] = ("h", "c")
    parks: ClassVar[dict[str, int]] = {"gates": 4, "act_c": 1}
    rec_groups: ClassVar[tuple[tuple[str, int, int], ...]] = (("h", 0, 4),)

    def initial_bias(self, dtype: np.dtype) -> np.ndarray:
        b = super().initial_bias(dtype)
        b[:, self.units:2 * self.units] = 1.0   # forget gate starts open
        return b

    def step(self, xw: np.ndarray, prev: Arrays, out: Arrays, U: np.ndarray,
             b_rec: np.ndarray | None, park: dict[str, np.ndarray] | None) -> None:
        H = self.units
        h_prev, c_prev = prev
        h, c = out
        a = h_prev @ U                                    # 1.
        a += xw
        gates = a if park is None else park["gates"]
        sigmoid(a[:, :2 * H], out=gates[:, :2 * H])       # 2. i, f
        self.act(a[:, 2 * H:3 * H], out=gates[:, 2 * H:3 * H])  # g
        sigmoid(a[:, 3 * H:], out=gates[:, 3 * H:])       # o
        i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]
        np.multiply(f, c_prev, out=c)                     # 3.
        c += i * g
        act_c = self.act(c, out=None if park is None else park["act_c"])
        np.multiply(o, act_c, out=h)                      # 4.

    def step_back(self, d: Arrays, prev: Arrays, new: Arrays, park: dict[str, np.ndarray],
                  U: np.ndarray, dxw: np.ndarray, drec: np.ndarray) -> Arrays:
        H = self.units
        dh, dc = d
        _, c_prev = prev
        gates, act_c = park["gates"], park["act_c"]
        i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]
        do = dh * act_c                                   # 4b.
        dc = dc + self.act.vjp(act_c, dh * o)
        ifo_d = dxw                                       # 3b. + 2b. written into dxw blocks
        np.multiply(dc * g, i * (1.0 - i), out=ifo_d[:, :H])
        np.multiply(dc * c_prev, f * (1.0 - f), out=ifo_d[:, H:2 * H])
        dxw[:, 2 * H:3 * H] = self.act.vjp(g, dc * i)
        np.multiply(do, o * (1.0 - o), out=dxw[:, 3 * H:])
        dc_prev = dc * f
        return (dxw @ U.T, dc_prev)                       # 1b.
