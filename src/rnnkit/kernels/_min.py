"""The whole-sequence (parallel) form of minGRU / minLSTM compiled: the recurrence
``h_t = a_t h_{t-1} + b_t`` of :mod:`rnnkit.recurrent._min_scan` (whose docstring gives the
equations) and its reverse sweep, each one pass over the gate pre-activations ``k`` (T, B, N),
time-major, with no array in between.

The log-space scan exists to spread the steps over processors; on a CPU the B*H independent
units are the parallelism (one vector lane each), so these kernels walk the steps in order and
update every unit of a step at once, in linear space: ``h_t = a_t h_{t-1} + z_t g(v_t)``, one
multiply-add a unit and step, with no ``log``, no cumulative sum and no ``exp(A_t)`` (whose
rounding grows with ``|A_t|``; here each step rounds once, as the step form does). The states are
those of the log-space form to float32 rounding, and both stay in ``[0, max(h_0, g)]``.

``kind`` 0 is minGRU (``k = [k_z | k_h]``, gate logit ``u = k_z``, ``z = sigmoid(u)``), 1
minLSTM (``k = [k_f | k_i | k_h]``, ``z = i / (f + i)`` with ``f = sigmoid(k_f)``, ``i =
sigmoid(k_i)``); ``v`` is the last block, ``a = 1 - z``. ``mask`` (T, B) uint8, or (0, 0): every
step real; a masked step carries the state (``a = 1``, ``b = 0``). Per step and row::

    forward   h_t = a_t * h_{t-1} + z_t * g(v_t)
    backward  G = dh_t + carry;  du = G (g(v_t) - h_{t-1}) z a;  dv = G z g'(v_t);  carry = a G
              (dh_0 = carry after the first step)

Each of ``z``, ``a``, ``g`` is computed from ``exp`` of a value <= 0 (:func:`_gate`, :func:`_g`),
so that it is accurate relative to its own size also where the other is near 1, and never 0/0.
In float32 ``exp`` is :func:`rnnkit.kernels._jit.exp32` (no libm call: the loops vectorise), in
float64 libm's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._jit import OPTS, cst, fast_exp, njit, row


@njit(inline="always", **OPTS)
def _sig_pair(x: Any) -> tuple[Any, Any]:
    """``(sigmoid(x), sigmoid(-x))`` from ``e = exp(-|x|)``: each to rounding relative to itself."""
    one = cst(x, 1.0)
    e = fast_exp(-abs(x))
    s = one / (one + e)
    es = e * s
    pos = x >= cst(x, 0.0)
    return (s if pos else es), (es if pos else s)


@njit(inline="always", **OPTS)
def _lstm_gate(f: Any, i: Any) -> tuple[Any, Any, Any, Any]:
    """minLSTM's ``(z, a, sigmoid(-k_f), sigmoid(-k_i))`` from ``f = k_f``, ``i = k_i``.

    With ``p = -k_i``, ``q = -k_f``, ``m = max(p, q, 0)``: ``1/i = 1 + e^p``, ``1/f = 1 + e^q``,
    ``z = i / (f + i) = den / (num + den)``, ``a = num / (num + den)`` with ``num = (1 + e^p) e^-m``,
    ``den = (1 + e^q) e^-m``: every ``exp`` of a value <= 0, and ``num + den >= 1`` (the term
    ``e^0`` of the largest of p, q, 0). ``sigmoid(-k_i) = e^p / (1 + e^p) = e^(p-m) / num`` (and
    ``sigmoid(-k_f)`` from ``den``); where ``num`` underflows to 0 so does ``e^(p-m)``, and the
    quotient is 0 (``num`` bounded below by the smallest normal number: no 0/0)."""
    p = -i
    q = -f
    zero, one, tiny = cst(p, 0.0), cst(p, 1.0), cst(p, 1.1754944e-38)  # (of scalars: vectorises)
    m = max(max(p, q), zero)                        # (max, not a conditional expression: vectorises)
    e0 = fast_exp(-m)
    ep = fast_exp(p - m)
    eq = fast_exp(q - m)
    num = e0 + ep
    den = e0 + eq
    s = one / (num + den)
    return den * s, num * s, eq / max(den, tiny), ep / max(num, tiny)


@njit(inline="always", **OPTS)
def _gate(k0: Any, k1: Any, u: int, kind: int) -> tuple[Any, Any]:
    """``(z, a = 1 - z)`` of unit ``u`` from the gate blocks ``k0`` (``k_z``; minLSTM ``k_f``) and
    ``k1`` (minLSTM ``k_i``), (H,) views of a row of ``k`` (an index known >= 0 vectorises; one
    computed from the row's width carries a negative-index check that does not)."""
    if kind == 0:
        return _sig_pair(k0[u])
    z, a, _, _ = _lstm_gate(k0[u], k1[u])
    return z, a


@njit(inline="always", **OPTS)
def _g(v: Any) -> tuple[Any, Any]:
    """``(g(v), g'(v))``: ``(v + 0.5, 1)`` for v >= 0, ``(sigmoid(v), sigmoid(v) sigmoid(-v))`` otherwise."""
    one = cst(v, 1.0)
    e = fast_exp(-abs(v))
    s1 = one / (one + e)
    sg = e * s1
    pos = v >= cst(v, 0.0)
    return (v + cst(v, 0.5) if pos else sg), (one if pos else sg * s1)


@njit(inline="always", **OPTS)
def _forward_row(kr: Any, hp: Any, hn: Any, H: int, kind: int) -> None:
    """One step of one batch row: ``hn = a * hp + z * g(v)``, unit by unit."""
    k0, k1, kv = kr[:H], kr[H:2 * H], kr[kr.size - H:]
    for u in range(H):
        z, a = _gate(k0, k1, u, kind)
        gv, _ = _g(kv[u])
        hn[u] = a * hp[u] + z * gv


@njit(inline="always", **OPTS)
def _backward_row(kr: Any, hp: Any, dhr: Any, carry: Any, dkr: Any, H: int, kind: int) -> None:
    """One step of one batch row backward: ``dkr`` (N,) = dL/dk, ``carry`` (H,) from dL/dh_t
    (``dhr`` + ``carry``) to dL/dh_{t-1}. One loop per block of ``dkr`` and for ``carry``, each
    writing one array (so that LLVM's run-time alias checks stay few and every loop vectorises;
    the gate is computed again in each: cheaper than the memory of keeping it)."""
    vo = kr.size - H
    k0, k1, kv = kr[:H], kr[H:2 * H], kr[vo:]
    for u in range(H):
        carry[u] += dhr[u]                          # G = dL/dh_t
    dv = dkr[vo:]
    for u in range(H):
        z, _ = _gate(k0, k1, u, kind)
        _, gp = _g(kv[u])
        dv[u] = carry[u] * z * gp
    d0 = dkr[:H]
    if kind == 0:
        for u in range(H):
            z, a = _gate(k0, k1, u, kind)
            gv, _ = _g(kv[u])
            d0[u] = carry[u] * (gv - hp[u]) * z * a
    else:                                           # du/dk_f = -sigmoid(-k_f), du/dk_i = sigmoid(-k_i)
        for u in range(H):
            z, a, sf, _ = _lstm_gate(k0[u], k1[u])
            gv, _ = _g(kv[u])
            d0[u] = -(carry[u] * (gv - hp[u]) * z * a) * sf
        d1 = dkr[H:2 * H]
        for u in range(H):
            z, a, _, si = _lstm_gate(k0[u], k1[u])
            gv, _ = _g(kv[u])
            d1[u] = carry[u] * (gv - hp[u]) * z * a * si
    for u in range(H):
        _, a = _gate(k0, k1, u, kind)
        carry[u] *= a


@njit(inline="always", **OPTS)
def _forward(k: Any, h0: Any, mask: Any, hist: Any, kind: int) -> None:
    T, B, N = k.shape
    H = h0.shape[1]
    k2 = k.reshape(T * B, N)
    h2 = hist.reshape((T + 1) * B, H)
    masked = mask.shape[0] > 0
    for b in range(B):
        dst = row(h2, b)
        src = row(h0, b)
        for u in range(H):
            dst[u] = src[u]
    for t in range(T):
        for b in range(B):
            hp = row(h2, t * B + b)
            hn = row(h2, (t + 1) * B + b)
            if masked and mask[t, b] == 0:
                for u in range(H):
                    hn[u] = hp[u]
            else:
                _forward_row(row(k2, t * B + b), hp, hn, H, kind)


@njit(**OPTS)
def scan_forward(k: np.ndarray, kind: int, h0: np.ndarray, mask: np.ndarray, hist: np.ndarray) -> None:
    """Fill ``hist`` (T+1, B, H): row 0 = ``h0`` (>= 0), row t+1 the state leaving step t.
    All arrays C-contiguous."""
    if kind == 0:                                   # (a constant kind: each loop compiled for its cell)
        _forward(k, h0, mask, hist, 0)
    else:
        _forward(k, h0, mask, hist, 1)


@njit(inline="always", **OPTS)
def _backward(k: Any, h0: Any, states: Any, dh: Any, mask: Any, dk: Any, dh0: Any, kind: int) -> None:
    T, B, N = k.shape
    H = h0.shape[1]
    k2 = k.reshape(T * B, N)
    s2 = states.reshape(T * B, H)
    d2 = dh.reshape(T * B, H)
    dk2 = dk.reshape(T * B, N)
    carry = dh0                                     # dL/dh_t from the steps after t, row by row
    masked = mask.shape[0] > 0
    zero = cst(dh, 0.0)
    for b in range(B):
        c = row(carry, b)
        for u in range(H):
            c[u] = zero
    for t in range(T - 1, -1, -1):
        for b in range(B):
            r = t * B + b
            c = row(carry, b)
            dhr = row(d2, r)
            dkr = row(dk2, r)
            if masked and mask[t, b] == 0:          # the state passed through: so does its gradient
                for u in range(H):
                    c[u] += dhr[u]
                for n in range(N):
                    dkr[n] = zero
            else:
                hp = row(h0, b) if t == 0 else row(s2, r - B)
                _backward_row(row(k2, r), hp, dhr, c, dkr, H, kind)


@njit(**OPTS)
def scan_backward(k: np.ndarray, kind: int, h0: np.ndarray, states: np.ndarray, dh: np.ndarray,
                  mask: np.ndarray, dk: np.ndarray, dh0: np.ndarray) -> None:
    """Fill ``dk`` (T, B, N) = dL/dk and ``dh0`` (B, H) = dL/dh_0 from ``dh`` (T, B, H), the
    gradient reaching each step's state from outside the recurrence; ``h0`` (B, H) and
    ``states`` (T, B, H) are the forward's (row t of ``states`` leaves step t). All arrays
    C-contiguous."""
    if kind == 0:
        _backward(k, h0, states, dh, mask, dk, dh0, 0)
    else:
        _backward(k, h0, states, dh, mask, dk, dh0, 1)


@njit(inline="always", **OPTS)
def _step(x: Any, W: Any, bias: Any, h: Any, out: Any, kind: int) -> bool:
    F, N = W.shape
    H = h.shape[1]
    hr = row(h, 0)
    zero = cst(h, 0.0)
    for u in range(H):
        v = hr[u]
        if not (v >= zero and v - v == zero):       # negative, NaN or infinite: not a state
            return False
    k = bias.copy()
    xr = row(x, 0)
    for f in range(F):
        xf = xr[f]
        wr = row(W, f)
        for n in range(N):
            k[n] += xf * wr[n]
    _forward_row(k, hr, row(out, 0), H, kind)
    return True


@njit(**OPTS)
def step(x: np.ndarray, W: np.ndarray, bias: np.ndarray, h: np.ndarray, out: np.ndarray, kind: int) -> bool:
    """One streaming step of one sequence: ``out`` (1, H) = the state after input ``x`` (1, F)
    from ``h`` (1, H), with ``k = x @ W + bias`` (``W`` (F, N), ``bias`` (N,)) in the same
    arithmetic as :func:`scan_forward`. False, and ``out`` untouched, when ``h`` has a negative
    or non-finite entry (the caller's general path then refuses it). All arrays C-contiguous."""
    if kind == 0:
        return _step(x, W, bias, h, out, 0)
    return _step(x, W, bias, h, out, 1)
