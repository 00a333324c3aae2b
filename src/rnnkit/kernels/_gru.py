"""The GRU cell's compiled steps, equal to :mod:`rnnkit.recurrent._gru` (both forms) step by step.

Fused layout ``[z | r | n]``; ``h = (h_prev - n) * z + n``. ``opts = (act, gate act)``.

``reset_after=False``: two groups. After the walker's ``a_zr += fed @ U_zr`` phase 0 takes
``z, r`` and parks ``rh = r * fed``; after ``a_n += rh @ U_n`` phase 1 takes ``n`` and ``h``.
Backward, phase 1 gives ``dz`` (raw), ``da_n`` and ``dh_prev = dh * z``; the walker takes
``drh = da_n @ U_n^T``; phase 0 gives ``da_r``, ``da_z`` and ``dfed += drh * r``.

``reset_after=True``: one group whose product ``hu = fed @ U + b_rec`` goes to ``rec``; parks
``hu_n``; backward gives ``dxw`` and ``drec`` (the walker takes ``dfed += drec @ U^T``).
"""

from __future__ import annotations

from typing import Any

from rnnkit.kernels._jit import OPTS, act, act_ip, cst, dact_cols, dgate, fast_tanh, njit, row, sig


@njit(inline="always", **OPTS)
def _blend(xg: Any, h_prev: Any, h: Any) -> None:
    """Step 5 of both forms: ``h = z * h_prev + (1 - z) * n``, written ``(h_prev - n) * z + n``."""
    B, H = h.shape
    for b in range(B):
        x = row(xg, b)
        hp = row(h_prev, b)
        hr = row(h, b)
        for j in range(H):
            n = x[2 * H + j]
            hr[j] = (hp[j] - n) * x[j] + n


@njit(inline="always", **OPTS)
def _dz_dn(g: Any, d: Any, dh: Any, hp_: Any, code: int) -> None:
    """5b. and 4b. of both forms: ``d_z`` = dh * (h_prev - n) (raw), ``d_n`` = act'(n) * dh * (1-z);
    ``dh`` becomes dh * z."""
    B, G = d.shape
    H = G // 3
    one = cst(g, 1.0)
    for b in range(B):
        gt = row(g, b)
        hp = row(hp_, b)
        dd = row(d, b)
        dhr = row(dh, b)
        for j in range(H):
            dd[2 * H + j] = dhr[j] * (one - gt[j])
        for j in range(H):
            dd[j] = dhr[j] * (hp[j] - gt[2 * H + j])
        for j in range(H):
            dhr[j] = dhr[j] * gt[j]
    dact_cols(g[:, 2 * H:3 * H], d[:, 2 * H:3 * H], code)


@njit(**OPTS)
def forward(k: int, a: Any, rec: Any, fed: Any, st: Any, i0: int, i1: int, pk: Any, j: int,
            own: Any, tmp: Any, opts: Any) -> None:
    """reset_after=False (see the module)."""
    code, rcode = opts[0], opts[1]
    B, G = a.shape
    H = G // 3
    if k == 0:
        if rcode != 1:
            act_ip(a[:, 0:2 * H], rcode)
        rh = pk[0][j]
        for b in range(B):
            x = row(a, b)
            if rcode == 1:
                for jj in range(2 * H):
                    x[jj] = sig(x[jj])
            hp = row(fed, b)
            rr = row(rh, b)
            for jj in range(H):
                rr[jj] = x[H + jj] * hp[jj]
    elif code == 0:                          # n = tanh(a_n) and h in one loop per row
        h_prev, h = st[0][i0], st[0][i1]
        for b in range(B):
            x = row(a, b)
            xz, xn = x[0:H], x[2 * H:3 * H]
            hp, hr = row(h_prev, b), row(h, b)
            for jj in range(H):
                n = fast_tanh(xn[jj])
                xn[jj] = n
                hr[jj] = (hp[jj] - n) * xz[jj] + n
    else:
        act_ip(a[:, 2 * H:3 * H], code)
        _blend(a, st[0][i0], st[0][i1])


@njit(**OPTS)
def backward(k: int, g: Any, d: Any, dr: Any, dfed: Any, fed: Any, dst: Any, dpk: Any, st: Any,
             i0: int, i1: int, pk: Any, j: int, own: Any, gown: Any, tmp: Any, opts: Any) -> None:
    """reset_after=False (see the module)."""
    code, rcode = opts[0], opts[1]
    B, G = d.shape
    H = G // 3
    if k == 1:
        _dz_dn(g, d, dst[0], st[0][i0], code)
        return
    drh = dpk[0]
    for b in range(B):
        gt = row(g, b)
        hp = row(fed, b)
        dd = row(d, b)
        dv = row(drh, b)
        df = row(dfed, b)
        for jj in range(H):                  # 3b. + 2b. for r
            r = gt[H + jj]
            dd[H + jj] = (dv[jj] * hp[jj]) * dgate(r, rcode)
        for jj in range(H):
            df[jj] += dv[jj] * gt[H + jj]
        for jj in range(H):                  # 2b. for z
            dd[jj] = dd[jj] * dgate(gt[jj], rcode)


@njit(inline="always", **OPTS)
def _ra_row_default(a: Any, rec: Any, hun: Any, h_prev: Any, h: Any, b: int) -> None:
    """:func:`forward_ra` on row ``b`` with the default activations (sigmoid gates, tanh): ``z, r``
    in one pass, then ONE loop for ``n = tanh(r * hu_n + a_n)`` and ``h = (h_prev - n) * z + n``
    over the row's gate blocks as separate views (it vectorises). The values are the separate
    passes', operation for operation; measured at S2 and S3 5-25 % less time per step than the
    passes over the whole block."""
    H = h.shape[1]
    x = row(a, b)
    hu = row(rec, b)
    for jj in range(2 * H):
        x[jj] = sig(x[jj] + hu[jj])
    hn = row(hun, b)
    for jj in range(H):
        hn[jj] = hu[2 * H + jj]
    hp, hr = row(h_prev, b), row(h, b)
    xz, xr, xn = x[0:H], x[H:2 * H], x[2 * H:3 * H]
    for jj in range(H):
        n = fast_tanh(xr[jj] * hn[jj] + xn[jj])
        xn[jj] = n
        hr[jj] = (hp[jj] - n) * xz[jj] + n


@njit(**OPTS)
def forward_ra(k: int, a: Any, rec: Any, fed: Any, st: Any, i0: int, i1: int, pk: Any, j: int,
               own: Any, tmp: Any, opts: Any) -> None:
    """reset_after=True (see the module); with the default activations row by row."""
    code, rcode = opts[0], opts[1]
    B, G = a.shape
    H = G // 3
    hun = pk[0][j]
    if rcode == 1 and code == 0:
        for b in range(B):
            _ra_row_default(a, rec, hun, st[0][i0], st[0][i1], b)
        return
    for b in range(B):
        x = row(a, b)
        hu = row(rec, b)
        if rcode == 1:
            for jj in range(2 * H):
                x[jj] = sig(x[jj] + hu[jj])
        else:
            for jj in range(2 * H):
                x[jj] = act(x[jj] + hu[jj], rcode)
        hn = row(hun, b)
        for jj in range(H):
            hn[jj] = hu[2 * H + jj]
        for jj in range(H):
            x[2 * H + jj] = x[H + jj] * hn[jj] + x[2 * H + jj]
    act_ip(a[:, 2 * H:3 * H], code)
    _blend(a, st[0][i0], st[0][i1])


@njit(**OPTS)
def backward_ra(k: int, g: Any, d: Any, dr: Any, dfed: Any, fed: Any, dst: Any, dpk: Any, st: Any,
                i0: int, i1: int, pk: Any, j: int, own: Any, gown: Any, tmp: Any, opts: Any) -> None:
    """reset_after=True (see the module)."""
    rcode = opts[1]
    B, G = d.shape
    H = G // 3
    _dz_dn(g, d, dst[0], st[0][i0], opts[0])
    hun = pk[0][j]
    for b in range(B):
        gt = row(g, b)
        hn = row(hun, b)
        dd = row(d, b)
        dq = row(dr, b)
        for jj in range(H):
            dq[2 * H + jj] = dd[2 * H + jj] * gt[H + jj]
        for jj in range(H):
            dd[jj] = dd[jj] * dgate(gt[jj], rcode)
        for jj in range(H):
            dd[H + jj] = (dd[2 * H + jj] * hn[jj]) * dgate(gt[H + jj], rcode)
        for jj in range(2 * H):
            dq[jj] = dd[jj]
