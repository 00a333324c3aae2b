"""The LSTM cell's compiled step, equal to :class:`rnnkit.recurrent._lstm.LSTMCell` step by step.

Same equations and fused layout ``[i | f | g | o]`` (the cell's docstring numbers them): the
walker adds ``h_prev @ U`` into ``a`` (step 1) and, with ``proj_size``, computes step 5
``h = m @ Wp`` (and ``dm = dh @ Wp^T`` first, backward). Parks ``act_c`` (and ``m``); the step
input leaves as the gates. ``opts = (act, gate act, proj)``.
"""

from __future__ import annotations

from typing import Any

from rnnkit.kernels._jit import OPTS, act_cols, act_ip, cst, dact_cols, dgate, fast_tanh, njit, row, sig
from rnnkit.kernels._walk import _zero_rows


@njit(inline="always", **OPTS)
def _row_default(a: Any, c_prev: Any, c: Any, act_c: Any, h: Any, b: int) -> None:
    """:func:`forward` on row ``b`` with the default activations (sigmoid gates, tanh): the
    general passes' values, operation for operation, in two passes over the row while it sits
    in L1. The gate activations map one contiguous run of the row each, in place (one loop over
    the four gate blocks at once does not vectorise: LLVM's run-time overlap check between the
    blocks sends it to the scalar loop, measured 5x slower); then ONE loop computes ``c``,
    ``act_c = tanh(c)`` and ``h = o * act_c`` (reading the gates, writing three other arrays: it
    vectorises; measured at S2 and S3 a quarter less time per step than the three passes over
    the whole block, which at S3 (64 x 1024 gates, 256 KB) went to L2 and back between passes)."""
    H = c.shape[1]
    ar = row(a, b)
    for jj in range(2 * H):
        ar[jj] = sig(ar[jj])
    for jj in range(H):                      # (a loop from 0: measured 3x faster)
        ar[3 * H + jj] = sig(ar[3 * H + jj])
    for jj in range(H):
        ar[2 * H + jj] = fast_tanh(ar[2 * H + jj])
    cp = row(c_prev, b)
    cn = row(c, b)
    ac = row(act_c, b)
    hr = row(h, b)
    for jj in range(H):
        v = ar[H + jj] * cp[jj] + ar[jj] * ar[2 * H + jj]
        cn[jj] = v
        t = fast_tanh(v)
        ac[jj] = t
        hr[jj] = ar[3 * H + jj] * t


@njit(**OPTS)
def forward(k: int, a: Any, rec: Any, fed: Any, st: Any, i0: int, i1: int, pk: Any, j: int,
            own: Any, tmp: Any, opts: Any) -> None:
    """Steps 2-4 on (B, 4H) pre-activations ``a`` (in place -> gates [i|f|g|o]); with the
    default activations row by row (:func:`_row_default`)."""
    code, rcode = opts[0], opts[1]
    B, G = a.shape
    H = G // 4
    c_prev, c, act_c = st[1][i0], st[1][i1], pk[0][j]
    h = pk[1][j] if opts[2] else st[0][i1]
    if rcode == 1 and code == 0:
        for b in range(B):
            _row_default(a, c_prev, c, act_c, h, b)
        return
    act_ip(a[:, 0:2 * H], rcode)
    act_ip(a[:, 3 * H:4 * H], rcode)
    act_ip(a[:, 2 * H:3 * H], code)
    for b in range(B):
        ar = row(a, b)
        cp = row(c_prev, b)
        cn = row(c, b)
        for jj in range(H):
            cn[jj] = ar[H + jj] * cp[jj] + ar[jj] * ar[2 * H + jj]
    act_cols(c[:, 0:H], act_c[:, 0:H], code)
    for b in range(B):
        ar = row(a, b)
        ac = row(act_c, b)
        hr = row(h, b)
        for jj in range(H):
            hr[jj] = ar[3 * H + jj] * ac[jj]


@njit(inline="always", **OPTS)
def _back_row_default(g: Any, d: Any, src: Any, dc: Any, c_prev: Any, act_c: Any, tmp: Any, b: int) -> None:
    """:func:`backward` on row ``b`` with the default activations (sigmoid gates, tanh): the
    general passes' values, operation for operation, in passes over the row while it sits in
    L1 (the general passes each go over the whole block: at S3, 64 x 1024 gates, 256 KB, from
    L2 between passes). ``tanh'`` and ``sigmoid'`` are written in terms of the outputs, as
    :func:`~rnnkit.kernels._jit.dgate` and :func:`~rnnkit.kernels._jit.dact_cols` write them."""
    H = dc.shape[1]
    one = cst(g, 1.0)
    gt = row(g, b)
    ac = row(act_c, b)
    dd = row(d, b)
    dhr = row(src, b)
    tr = row(tmp, b)
    cp = row(c_prev, b)
    dcr = row(dc, b)
    for jj in range(H):                      # 4b. do
        o = gt[3 * H + jj]
        dd[3 * H + jj] = (dhr[jj] * ac[jj]) * (o * (one - o))
    for jj in range(H):                      # dh * o * tanh'(act_c)
        v = ac[jj]
        tr[jj] = (dhr[jj] * gt[3 * H + jj]) * (one - v * v)
    for jj in range(H):
        dcr[jj] = dcr[jj] + tr[jj]
    for jj in range(H):                      # 3b. + 2b.
        i = gt[jj]
        f = gt[H + jj]
        dcv = dcr[jj]
        dd[jj] = (dcv * gt[2 * H + jj]) * (i * (one - i))
        dd[H + jj] = (dcv * cp[jj]) * (f * (one - f))
    for jj in range(H):
        v = gt[2 * H + jj]
        dd[2 * H + jj] = (dcr[jj] * gt[jj]) * (one - v * v)
    for jj in range(H):
        dcr[jj] = dcr[jj] * gt[H + jj]


@njit(**OPTS)
def backward(k: int, g: Any, d: Any, dr: Any, dfed: Any, fed: Any, dst: Any, dpk: Any, st: Any,
             i0: int, i1: int, pk: Any, j: int, own: Any, gown: Any, tmp: Any, opts: Any) -> None:
    """Steps 4b-2b: ``d`` = dL/da from dh (dm with a projection) and dc; dc becomes dc_prev."""
    code, rcode = opts[0], opts[1]
    B, G = d.shape
    H = G // 4
    src = dpk[1] if opts[2] else dst[0]
    dc, c_prev, act_c = dst[1], st[1][i0], pk[0][j]
    if rcode == 1 and code == 0:
        for b in range(B):
            _back_row_default(g, d, src, dc, c_prev, act_c, tmp, b)
        _zero_rows(dst[0])                   # h_prev reaches the step through the product only
        return
    for b in range(B):                       # 4b. do, and dc += act'(act_c) * (dh * o)
        gt = row(g, b)
        ac = row(act_c, b)
        dd = row(d, b)
        dhr = row(src, b)
        tr = row(tmp, b)
        for jj in range(H):
            o = gt[3 * H + jj]
            dd[3 * H + jj] = (dhr[jj] * ac[jj]) * dgate(o, rcode)
        for jj in range(H):
            tr[jj] = dhr[jj] * gt[3 * H + jj]
    dact_cols(act_c[:, 0:H], tmp[:, 0:H], code)
    for b in range(B):                       # 3b. + 2b.
        gt = row(g, b)
        cp = row(c_prev, b)
        dd = row(d, b)
        dcr = row(dc, b)
        tr = row(tmp, b)
        for jj in range(H):
            dcr[jj] = dcr[jj] + tr[jj]
        for jj in range(H):
            i = gt[jj]
            f = gt[H + jj]
            dcv = dcr[jj]
            dd[jj] = (dcv * gt[2 * H + jj]) * dgate(i, rcode)
            dd[H + jj] = (dcv * cp[jj]) * dgate(f, rcode)
            dd[2 * H + jj] = dcv * i
        for jj in range(H):
            dcr[jj] = dcr[jj] * gt[H + jj]
    dact_cols(g[:, 2 * H:3 * H], d[:, 2 * H:3 * H], code)
    _zero_rows(dst[0])                       # h_prev reaches the step through the product only
