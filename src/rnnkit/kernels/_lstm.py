"""The LSTM cell's compiled step, equal to :class:`rnnkit.recurrent._lstm.LSTMCell` step by step.

Same equations and fused layout ``[i | f | g | o]`` (the cell's docstring numbers them): the
walker adds ``h_prev @ U`` into ``a`` (step 1) and, with ``proj_size``, computes step 5
``h = m @ Wp`` (and ``dm = dh @ Wp^T`` first, backward). Parks ``act_c`` (and ``m``); the step
input leaves as the gates. ``opts = (act, gate act, proj)``.
"""

from __future__ import annotations

from typing import Any

from rnnkit.kernels._jit import OPTS, act_cols, act_ip, dact_cols, dgate, fast_tanh, njit, row, sig
from rnnkit.kernels._walk import _zero_rows


@njit(inline="always", **OPTS)
def _one_row(a: Any, c_prev: Any, c: Any, act_c: Any, h: Any) -> None:
    """:func:`forward` on one row with the default activations: the general passes' loops
    without their calls and 2D views (the values are theirs, operation for operation). Each
    loop maps one contiguous run of the row in place: a single loop over the four gate blocks
    at once (``a[j]``, ``a[H + j]``, ...) did not vectorise (LLVM's run-time overlap check
    between the blocks sent it to the scalar loop: measured 5x slower)."""
    H = c.shape[1]
    ar = row(a, 0)
    for jj in range(2 * H):
        ar[jj] = sig(ar[jj])
    for jj in range(H):
        ar[3 * H + jj] = sig(ar[3 * H + jj])
    for jj in range(H):
        ar[2 * H + jj] = fast_tanh(ar[2 * H + jj])
    cp = row(c_prev, 0)
    cn = row(c, 0)
    for jj in range(H):
        cn[jj] = ar[H + jj] * cp[jj] + ar[jj] * ar[2 * H + jj]
    ac = row(act_c, 0)
    for jj in range(H):
        ac[jj] = fast_tanh(cn[jj])
    hr = row(h, 0)
    for jj in range(H):
        hr[jj] = ar[3 * H + jj] * ac[jj]


@njit(**OPTS)
def forward(k: int, a: Any, rec: Any, fed: Any, st: Any, i0: int, i1: int, pk: Any, j: int,
            own: Any, tmp: Any, opts: Any) -> None:
    """Steps 2-4 on (B, 4H) pre-activations ``a`` (in place -> gates [i|f|g|o]); a block of one
    row with the default activations takes :func:`_one_row`."""
    code, rcode = opts[0], opts[1]
    B, G = a.shape
    H = G // 4
    c_prev, c, act_c = st[1][i0], st[1][i1], pk[0][j]
    h = pk[1][j] if opts[2] else st[0][i1]
    if B == 1 and rcode == 1 and code == 0:
        _one_row(a, c_prev, c, act_c, h)
        return
    if rcode == 1:
        for b in range(B):
            ar = row(a, b)
            for jj in range(2 * H):
                ar[jj] = sig(ar[jj])
            for jj in range(H):                  # (a loop from 0: measured 3x faster)
                ar[3 * H + jj] = sig(ar[3 * H + jj])
    else:
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


@njit(**OPTS)
def backward(k: int, g: Any, d: Any, dr: Any, dfed: Any, fed: Any, dst: Any, dpk: Any, st: Any,
             i0: int, i1: int, pk: Any, j: int, own: Any, gown: Any, tmp: Any, opts: Any) -> None:
    """Steps 4b-2b: ``d`` = dL/da from dh (dm with a projection) and dc; dc becomes dc_prev."""
    code, rcode = opts[0], opts[1]
    B, G = d.shape
    H = G // 4
    src = dpk[1] if opts[2] else dst[0]
    dc, c_prev, act_c = dst[1], st[1][i0], pk[0][j]
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
