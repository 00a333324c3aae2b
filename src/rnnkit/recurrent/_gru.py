"""The GRU cell, in both of Keras' forms. Fused gate order ``[z | r | h]`` (Keras' order);
the candidate block is called ``n`` below. ``z`` near 1 keeps the previous state.

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
    2b. da_z = dz*z*(1-z) ;  da_r = dr*r*(1-r)
    1b. dxw = [da_z | da_r | da_n] ;  dh_prev += da_zr @ U_zr^T

``reset_after=True`` (cuDNN / PyTorch / Keras default; bias rows ``b_in``, ``b_rec``)::

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

from typing import ClassVar

import numpy as np

from rnnkit._activations import sigmoid
from rnnkit.recurrent._cell import Arrays, Cell


class GRUCell(Cell):
    """``reset_after=False``: the reset gate acts before the candidate's recurrent matmul."""

    name: ClassVar[str] = "GRU"
    gates: ClassVar[int] = 3
    parks: ClassVar[dict[str, int]] = {"gates": 3, "rh": 1}
    rec_groups: ClassVar[tuple[tuple[str, int, int], ...]] = (("h", 0, 2), ("rh", 2, 3))

    def step(self, xw: np.ndarray, prev: Arrays, out: Arrays, U: np.ndarray,
             b_rec: np.ndarray | None, park: dict[str, np.ndarray] | None) -> None:
        H = self.units
        (h_prev,) = prev
        (h,) = out
        a_zr = h_prev @ U[:, :2 * H]                       # 1.
        a_zr += xw[:, :2 * H]
        gates = np.empty_like(xw) if park is None else park["gates"]
        sigmoid(a_zr, out=gates[:, :2 * H])                # 2.
        z, r, n = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:]
        rh = np.multiply(r, h_prev, out=None if park is None else park["rh"])  # 3.
        a_n = rh @ U[:, 2 * H:]                            # 4.
        a_n += xw[:, 2 * H:]
        self.act(a_n, out=n)
        np.subtract(h_prev, n, out=h)                      # 5. h = n + z * (h_prev - n)
        h *= z
        h += n

    def step_back(self, d: Arrays, prev: Arrays, new: Arrays, park: dict[str, np.ndarray],
                  U: np.ndarray, dxw: np.ndarray, drec: np.ndarray) -> Arrays:
        H = self.units
        (dh,) = d
        (h_prev,) = prev
        gates = park["gates"]
        z, r, n = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:]
        dz = dh * (h_prev - n)                             # 5b.
        dn = dh * (1.0 - z)
        dh_prev = dh * z
        da_n = dxw[:, 2 * H:]                              # 4b.
        da_n[...] = self.act.vjp(n, dn)
        drh = da_n @ U[:, 2 * H:].T
        dr = drh * h_prev                                  # 3b.
        dh_prev += drh * r
        np.multiply(dz, z * (1.0 - z), out=dxw[:, :H])     # 2b.
        np.multiply(dr, r * (1.0 - r), out=dxw[:, H:2 * H])
        dh_prev += dxw[:, :2 * H] @ U[:, :2 * H].T         # 1b.
        return (dh_prev,)


class GRUResetAfterCell(Cell):
    """``reset_after=True``: the reset gate scales the candidate's recurrent projection."""

    name: ClassVar[str] = "GRU"
    gates: ClassVar[int] = 3
    parks: ClassVar[dict[str, int]] = {"gates": 3, "hu_n": 1}
    rec_groups: ClassVar[tuple[tuple[str, int, int], ...]] = (("h", 0, 3),)
    separate_rec_grad: ClassVar[bool] = True
    bias_rows: ClassVar[int] = 2

    def step(self, xw: np.ndarray, prev: Arrays, out: Arrays, U: np.ndarray,
             b_rec: np.ndarray | None, park: dict[str, np.ndarray] | None) -> None:
        H = self.units
        (h_prev,) = prev
        (h,) = out
        hu = h_prev @ U                                    # 1.
        hu += b_rec
        gates = np.empty_like(xw) if park is None else park["gates"]
        np.add(xw[:, :2 * H], hu[:, :2 * H], out=gates[:, :2 * H])
        sigmoid(gates[:, :2 * H], out=gates[:, :2 * H])    # 2.
        z, r, n = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:]
        hu_n = hu[:, 2 * H:]
        if park is not None:
            park["hu_n"][...] = hu_n
        np.multiply(r, hu_n, out=n)                        # 4.
        n += xw[:, 2 * H:]
        self.act(n, out=n)
        np.subtract(h_prev, n, out=h)                      # 5.
        h *= z
        h += n

    def step_back(self, d: Arrays, prev: Arrays, new: Arrays, park: dict[str, np.ndarray],
                  U: np.ndarray, dxw: np.ndarray, drec: np.ndarray) -> Arrays:
        H = self.units
        (dh,) = d
        (h_prev,) = prev
        gates, hu_n = park["gates"], park["hu_n"]
        z, r, n = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:]
        dz = dh * (h_prev - n)                             # 5b.
        dn = dh * (1.0 - z)
        dh_prev = dh * z
        da_n = dxw[:, 2 * H:]                              # 4b.
        da_n[...] = self.act.vjp(n, dn)
        np.multiply(da_n, r, out=drec[:, 2 * H:])
        dr = da_n * hu_n
        np.multiply(dz, z * (1.0 - z), out=dxw[:, :H])     # 2b.
        np.multiply(dr, r * (1.0 - r), out=dxw[:, H:2 * H])
        drec[:, :2 * H] = dxw[:, :2 * H]
        dh_prev += drec @ U.T                              # 1b.
        return (dh_prev,)
