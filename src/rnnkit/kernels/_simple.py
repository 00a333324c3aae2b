"""The SimpleRNN cell's compiled step (:class:`rnnkit.recurrent._simple_rnn.SimpleRNNCell`):
``h = act(a)`` after the walker's product ``a = xw + h_prev @ U``; backward
``dxw = act'(h) * dh`` (the walker then takes ``dh_prev = dxw @ U^T``). ``opts = (act,)``."""

from __future__ import annotations

from typing import Any

from rnnkit.kernels._jit import OPTS, act_cols, copy_rows, dact_cols, njit
from rnnkit.kernels._walk import _zero_rows


@njit(**OPTS)
def forward(k: int, a: Any, rec: Any, fed: Any, st: Any, i0: int, i1: int, pk: Any, j: int,
            own: Any, tmp: Any, opts: Any) -> None:
    H = a.shape[1]
    act_cols(a[:, 0:H], st[0][i1][:, 0:H], opts[0])


@njit(**OPTS)
def backward(k: int, g: Any, d: Any, dr: Any, dfed: Any, fed: Any, dst: Any, dpk: Any, st: Any,
             i0: int, i1: int, pk: Any, j: int, own: Any, gown: Any, tmp: Any, opts: Any) -> None:
    H = d.shape[1]
    copy_rows(dst[0], d)
    dact_cols(st[0][i1][:, 0:H], d[:, 0:H], opts[0])
    _zero_rows(dst[0])
