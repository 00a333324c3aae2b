"""Layer normalization over the last axis of an (N, F) array, forward and backward, one row at a
time (the row sits in L1 while it is read twice), for :class:`rnnkit.LayerNormalization`.

Forward, per row ``x``: ``m = sum(x) / F``, ``v = sum((x - m)^2) / F`` (two passes, as the
reference), ``r = 1 / sqrt(v + eps)``, ``xhat = (x - m) * r``, ``y = xhat * gamma + beta``.
Backward, per row, with ``d = g * gamma``: ``dx = (d - sum(d) / F - xhat * sum(d * xhat) / F) * r``;
``dgamma += g * xhat`` and ``dbeta += g`` over the rows, in increasing row order.

Each row sum is eight interleaved partial sums (lanes ``j mod 8``) added at the end: the chain of
one sum has an eighth of the length, and the result is the same whatever the number of rows.
An empty ``gamma`` / ``beta`` (length 0) means none (``scale=False`` / ``center=False``).
"""

from __future__ import annotations

import numpy as np

from rnnkit.kernels._jit import OPTS, njit


@njit(**OPTS)
def _dot8(a: np.ndarray, b: np.ndarray) -> float:
    """``sum(a * b)`` as eight interleaved partial sums (lanes ``j mod 8``, which the compiler
    keeps in one vector register) added pairwise at the end."""
    F = a.shape[0]
    z = a.dtype.type(0)
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = z
    j = 0
    while j + 8 <= F:
        s0 += a[j] * b[j]
        s1 += a[j + 1] * b[j + 1]
        s2 += a[j + 2] * b[j + 2]
        s3 += a[j + 3] * b[j + 3]
        s4 += a[j + 4] * b[j + 4]
        s5 += a[j + 5] * b[j + 5]
        s6 += a[j + 6] * b[j + 6]
        s7 += a[j + 7] * b[j + 7]
        j += 8
    while j < F:
        s0 += a[j] * b[j]
        j += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@njit(**OPTS)
def forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, y: np.ndarray,
            xhat: np.ndarray, inv: np.ndarray) -> None:
    """``y``, ``xhat`` (N, F) and ``inv`` (N,) of ``x`` (N, F), all C-contiguous, one dtype."""
    N, F = x.shape
    one = x.dtype.type(1)
    e = x.dtype.type(eps)
    nf = x.dtype.type(F)
    ones = np.ones(F, x.dtype)
    for i in range(N):
        xi, hi, yi = x[i], xhat[i], y[i]
        m = _dot8(xi, ones) / nf
        for j in range(F):
            hi[j] = xi[j] - m
        r = one / np.sqrt(_dot8(hi, hi) / nf + e)
        inv[i] = r
        for j in range(F):
            hi[j] *= r
        if gamma.shape[0] and beta.shape[0]:
            for j in range(F):
                yi[j] = hi[j] * gamma[j] + beta[j]
        elif gamma.shape[0]:
            for j in range(F):
                yi[j] = hi[j] * gamma[j]
        elif beta.shape[0]:
            for j in range(F):
                yi[j] = hi[j] + beta[j]
        else:
            for j in range(F):
                yi[j] = hi[j]


@njit(**OPTS)
def backward(g: np.ndarray, xhat: np.ndarray, inv: np.ndarray, gamma: np.ndarray, dx: np.ndarray,
             dgamma: np.ndarray, dbeta: np.ndarray, want_dx: bool) -> None:
    """``dx`` (N, F) (when ``want_dx``) and ``dgamma``, ``dbeta`` (F,; zeroed here; length 0:
    not wanted) from the upstream ``g`` and the forward's ``xhat``, ``inv``."""
    N, F = g.shape
    nf = g.dtype.type(F)
    dgamma[:] = 0
    dbeta[:] = 0
    ones = np.ones(F, g.dtype)
    for i in range(N):
        gi, hi = g[i], xhat[i]
        if dbeta.shape[0]:
            for j in range(F):
                dbeta[j] += gi[j]
        if dgamma.shape[0]:
            for j in range(F):
                dgamma[j] += gi[j] * hi[j]
        if not want_dx:
            continue
        di = dx[i]
        if gamma.shape[0]:
            for j in range(F):
                di[j] = gi[j] * gamma[j]
        else:
            for j in range(F):
                di[j] = gi[j]
        a = _dot8(di, ones) / nf
        c = _dot8(di, hi) / nf
        r = inv[i]
        for j in range(F):
            di[j] = (di[j] - a - hi[j] * c) * r
