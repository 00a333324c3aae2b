"""The whole-sequence (parallel) form of minGRU / minLSTM compiled: the log-space scan and its
reverse sweep of :mod:`rnnkit.recurrent._min_scan` (whose docstring gives the equations), each
fused into one pass over the gate pre-activations ``k`` (T, B, N), time-major.

``kind`` 0 is minGRU (``k = [k_z | k_h]``, gate logit ``u = k_z``), 1 minLSTM (``k = [k_f | k_i |
k_h]``, ``u = softplus(-k_f) - softplus(-k_i)``); ``v`` is the last block. ``mask`` (T, B) uint8,
or (0, 0): every step real. Per unit and row, in the order of the steps::

    forward   A += log a_t;  L = logaddexp(L, log b_t - A);  h_t = exp(A + L)   (L_0 = log h_0)
    backward  G = dh_t + carry;  du, dv from G;  carry = a_t * G                  (dh_0 = carry)

The same arithmetic as the NumPy form, in another order of the roundings (the tests compare
both with the step form).
"""

from __future__ import annotations

import math

import numpy as np

from rnnkit.kernels._jit import OPTS, cst, njit


@njit(inline="always", **OPTS)
def _softplus(x: float) -> float:
    """``log(1 + exp(x))`` = ``max(x, 0) + log1p(exp(-|x|))``."""
    return (x if x > 0 else x * 0) + math.log1p(math.exp(-abs(x)))


@njit(inline="always", **OPTS)
def _logit(k: np.ndarray, t: int, b: int, u: int, H: int, kind: int) -> float:
    if kind == 0:
        return k[t, b, u]
    return _softplus(-k[t, b, u]) - _softplus(-k[t, b, H + u])


@njit(**OPTS)
def scan_forward(k: np.ndarray, kind: int, h0: np.ndarray, mask: np.ndarray, hist: np.ndarray) -> None:
    """Fill ``hist`` (T+1, B, H): row 0 = ``h0`` (>= 0), row t+1 the state leaving step t."""
    T, B, N = k.shape
    H = h0.shape[1]
    vo = N - H
    half, zero = cst(h0, 0.5), cst(h0, 0.0)
    ninf = -np.inf
    A = np.empty(H, h0.dtype)
    L = np.empty(H, h0.dtype)
    masked = mask.shape[0] > 0
    for b in range(B):
        for u in range(H):
            A[u] = zero
            L[u] = math.log(h0[b, u]) if h0[b, u] > zero else ninf
            hist[0, b, u] = h0[b, u]
        for t in range(T):
            if masked and mask[t, b] == 0:
                for u in range(H):
                    hist[t + 1, b, u] = hist[t, b, u]
                continue
            for u in range(H):
                uu = _logit(k, t, b, u, H, kind)
                vv = k[t, b, vo + u]
                spu = _softplus(uu)
                lg = math.log(vv + half) if vv >= zero else vv - _softplus(vv)
                A[u] -= spu                                # log a = -softplus(u)
                c = uu - spu + lg - A[u]                   # log b - A, log z = u - softplus(u)
                lo = L[u]
                if lo == ninf:
                    lo = c
                elif c > lo:
                    lo = c + math.log1p(math.exp(lo - c))
                else:
                    lo = lo + math.log1p(math.exp(c - lo))
                L[u] = lo
                hist[t + 1, b, u] = math.exp(A[u] + lo)


@njit(**OPTS)
def scan_backward(k: np.ndarray, kind: int, hist: np.ndarray, dh: np.ndarray, mask: np.ndarray,
                  dk: np.ndarray, dh0: np.ndarray) -> None:
    """Fill ``dk`` (T, B, N) = dL/dk and ``dh0`` (B, H) = dL/dh_0 from ``dh`` (T, B, H), the
    gradient reaching each step's state from outside the recurrence."""
    T, B, N = k.shape
    H = dh.shape[2]
    vo = N - H
    one, half, zero = cst(dh, 1.0), cst(dh, 0.5), cst(dh, 0.0)
    carry = np.empty(H, dh.dtype)
    masked = mask.shape[0] > 0
    for b in range(B):
        for u in range(H):
            carry[u] = zero
        for t in range(T - 1, -1, -1):
            if masked and mask[t, b] == 0:
                for u in range(H):
                    carry[u] += dh[t, b, u]
                for n in range(N):
                    dk[t, b, n] = zero
                continue
            for u in range(H):
                G = dh[t, b, u] + carry[u]
                z = one / (one + math.exp(-_logit(k, t, b, u, H, kind)))
                a = one - z
                vv = k[t, b, vo + u]
                if vv >= zero:
                    gv, gp = vv + half, one
                else:
                    gv = one / (one + math.exp(-vv))
                    gp = gv * (one - gv)
                du = G * (gv - hist[t, b, u]) * z * a
                dk[t, b, vo + u] = G * z * gp
                if kind == 0:
                    dk[t, b, u] = du
                else:
                    dk[t, b, u] = -du / (one + math.exp(k[t, b, u]))          # du * -sigmoid(-k_f)
                    dk[t, b, H + u] = du / (one + math.exp(k[t, b, H + u]))   # du * sigmoid(-k_i)
                carry[u] = a * G
        for u in range(H):
            dh0[b, u] = carry[u]
