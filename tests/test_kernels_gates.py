"""The default-activation gate steps of LSTM and GRU (one pass per row, ``c`` / ``tanh(c)`` /
``h`` and GRU's ``n`` / ``h`` in one loop) at widths where their loops vectorise (H = 37: vector
bodies and remainders; H = 64: whole vectors), against the NumPy reference (training forward,
backward, inference; float32 and float64) and, bit for bit, against the separate passes over the
whole block that the other activations take."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels

pytest.importorskip("numba")

import numba  # noqa: E402

from rnnkit.kernels import _gru, _lstm  # noqa: E402
from rnnkit.kernels._jit import act_cols, act_ip, dact_cols, dgate, row, sig  # noqa: E402

TOL = {"float64": 1e-12, "float32": 2e-5}
SHAPES = [(7, 4, 11, 37), (32, 3, 8, 64)]


def _layer(cell: str, H: int, F: int, dtype: str) -> rk.RecurrentLayer:
    kw: dict[str, Any] = dict(return_sequences=True, seed=3, dtype=dtype, input_dim=F)
    layer = rk.LSTM(H, **kw) if cell == "lstm" else rk.GRU(H, reset_after=(cell == "gru_ra"), **kw)
    b = layer.weight("bias")
    layer.set_weight("bias", 0.5 * np.random.default_rng(4).standard_normal(b.shape))
    return layer


def _pass(layer: rk.RecurrentLayer, x: np.ndarray, g: np.ndarray) -> dict[str, np.ndarray]:
    ctx = rk.Ctx.training()
    y = layer.forward(x, ctx)
    dx = layer.backward(g, ctx)
    return {"y": y, "dx": dx, "y_infer": layer.forward(x, rk.Ctx.inference()),
            **{f"d_{n}": ctx.grad(layer, n) for n in layer.weight_names}}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=["B7-H37", "B32-H64"])
@pytest.mark.parametrize("cell", ["lstm", "gru", "gru_ra"])
def test_default_gates_equal_reference(cell: str, shape: tuple[int, int, int, int], dtype: str) -> None:
    B, T, F, H = shape
    layer = _layer(cell, H, F, dtype)
    assert kernels.find(layer.cell) is not None
    x = (2 * np.random.default_rng(0).standard_normal((B, T, F))).astype(dtype)
    g = np.random.default_rng(1).standard_normal((B, T, H)).astype(dtype)
    fast = _pass(layer, x, g)
    with kernels.use("reference"):
        ref = _pass(layer, x, g)
    for name, r in ref.items():
        err = float(np.max(np.abs(fast[name] - r)))
        assert err <= TOL[dtype] * max(1.0, float(np.max(np.abs(r)))), f"{name} differs by {err:.3e}"


@numba.njit(cache=False, error_model="numpy", fastmath={"contract"})
def _lstm_passes(a: Any, c_prev: Any, c: Any, act_c: Any, h: Any) -> None:
    """The LSTM step with the default activations as separate passes over the whole block."""
    B, G = a.shape
    H = G // 4
    act_ip(a[:, 0:2 * H], 1)
    act_ip(a[:, 3 * H:4 * H], 1)
    act_ip(a[:, 2 * H:3 * H], 0)
    for b in range(B):
        ar, cp, cn = row(a, b), row(c_prev, b), row(c, b)
        for jj in range(H):
            cn[jj] = ar[H + jj] * cp[jj] + ar[jj] * ar[2 * H + jj]
    act_cols(c[:, 0:H], act_c[:, 0:H], 0)
    for b in range(B):
        ar, ac, hr = row(a, b), row(act_c, b), row(h, b)
        for jj in range(H):
            hr[jj] = ar[3 * H + jj] * ac[jj]


@numba.njit(cache=False, error_model="numpy", fastmath={"contract"})
def _lstm_step(a: Any, c2: Any, act_c: Any, h2: Any) -> None:
    _lstm.forward(0, a, a[:, 0:0], h2[0], (h2, c2), 0, 1, (act_c, act_c[:, :, 0:0]), 0,
                  (a[0, 0:0],), a, (0, 1, 0))


@numba.njit(cache=False, error_model="numpy", fastmath={"contract"})
def _gru_n_passes(a: Any, h_prev: Any, h: Any) -> None:
    """GRU's n and h (tanh) as separate passes: ``n = tanh(a_n)``, then the blend."""
    B, G = a.shape
    H = G // 3
    act_ip(a[:, 2 * H:3 * H], 0)
    for b in range(B):
        x, hp, hr = row(a, b), row(h_prev, b), row(h, b)
        for j in range(H):
            n = x[2 * H + j]
            hr[j] = (hp[j] - n) * x[j] + n


@numba.njit(cache=False, error_model="numpy", fastmath={"contract"})
def _gru_step(k: int, ra: bool, a: Any, rec: Any, h2: Any, pk: Any) -> None:
    if ra:
        _gru.forward_ra(k, a, rec, h2[0], (h2,), 0, 1, (pk, pk[:, :, 0:0]), 0, (a[0, 0:0],), a, (0, 1))
    else:
        _gru.forward(k, a, rec, h2[0], (h2,), 0, 1, (pk, pk[:, :, 0:0]), 0, (a[0, 0:0],), a, (0, 1))


@pytest.mark.parametrize("shape", SHAPES, ids=["B7-H37", "B32-H64"])
def test_lstm_row_step_equals_the_passes_bit_for_bit(shape: tuple[int, int, int, int]) -> None:
    B, _, _, H = shape
    rng = np.random.default_rng(2)
    pre = (3 * rng.standard_normal((B, 4 * H))).astype(np.float32)
    pre[0, :4] = [12.0, -12.0, 1e8, -1e8]          # saturated gates
    c_prev = rng.uniform(-2, 2, (B, H)).astype(np.float32)
    a1, c1, ac1, h1 = pre.copy(), np.empty_like(c_prev), np.empty_like(c_prev), np.empty_like(c_prev)
    _lstm_passes(a1, c_prev, c1, ac1, h1)
    a2, c2, ac2 = pre.copy(), np.stack([c_prev, c_prev]), np.empty((1, B, H), np.float32)
    h2 = np.zeros((2, B, H), np.float32)
    _lstm_step(a2, c2, ac2, h2)
    for got, want in ((a2, a1), (c2[1], c1), (ac2[0], ac1), (h2[1], h1)):
        np.testing.assert_array_equal(got, want)


@numba.njit(cache=False, error_model="numpy", fastmath={"contract"})
def _lstm_back_passes(g: Any, d: Any, dh: Any, dc: Any, c_prev: Any, act_c: Any, tmp: Any) -> None:
    """The LSTM backward step with the default activations as separate passes over the whole
    block (what the other activations take): ``d`` = dL/da, ``dc`` becomes dc_prev."""
    B, G = d.shape
    H = G // 4
    for b in range(B):
        gt, ac, dd, dhr, tr = row(g, b), row(act_c, b), row(d, b), row(dh, b), row(tmp, b)
        for jj in range(H):
            o = gt[3 * H + jj]
            dd[3 * H + jj] = (dhr[jj] * ac[jj]) * dgate(o, 1)
        for jj in range(H):
            tr[jj] = dhr[jj] * gt[3 * H + jj]
    dact_cols(act_c[:, 0:H], tmp[:, 0:H], 0)
    for b in range(B):
        gt, cp, dd, dcr, tr = row(g, b), row(c_prev, b), row(d, b), row(dc, b), row(tmp, b)
        for jj in range(H):
            dcr[jj] = dcr[jj] + tr[jj]
        for jj in range(H):
            i, f, dcv = gt[jj], gt[H + jj], dcr[jj]
            dd[jj] = (dcv * gt[2 * H + jj]) * dgate(i, 1)
            dd[H + jj] = (dcv * cp[jj]) * dgate(f, 1)
            dd[2 * H + jj] = dcv * i
        for jj in range(H):
            dcr[jj] = dcr[jj] * gt[H + jj]
    dact_cols(g[:, 2 * H:3 * H], d[:, 2 * H:3 * H], 0)


@numba.njit(cache=False, error_model="numpy", fastmath={"contract"})
def _lstm_back_step(g: Any, d: Any, dh: Any, dc: Any, c2: Any, act_c: Any, tmp: Any) -> None:
    _lstm.backward(0, g, d, d[:, 0:0], dh, dh, (dh, dc), (dh, dh), (c2, c2), 0, 1,
                   (act_c, act_c[:, :, 0:0]), 0, (g[0, 0:0],), (tmp,), tmp, (0, 1, 0))


@pytest.mark.parametrize("shape", SHAPES, ids=["B7-H37", "B32-H64"])
def test_lstm_row_back_step_equals_the_passes_bit_for_bit(shape: tuple[int, int, int, int]) -> None:
    """The backward step of the default activations, row by row, against the passes over the
    whole block: every gradient the same bits (gates saturated at 0 and 1 included), and
    dL/dh_prev left at zero (it reaches h_prev through the product only)."""
    B, _, _, H = shape
    rng = np.random.default_rng(5)
    g = rng.uniform(0, 1, (B, 4 * H)).astype(np.float32)          # sigmoid gates i, f, o
    g[:, 2 * H:3 * H] = rng.uniform(-1, 1, (B, H))                 # tanh candidate
    g[0, :3] = [0.0, 1.0, 0.5]
    g[0, H:H + 2] = [0.0, 1.0]
    act_c = rng.uniform(-1, 1, (1, B, H)).astype(np.float32)
    c_prev = rng.uniform(-3, 3, (B, H)).astype(np.float32)
    dh0 = rng.standard_normal((B, H)).astype(np.float32)
    dc0 = rng.standard_normal((B, H)).astype(np.float32)
    d1, dc1, tmp1 = np.full((B, 4 * H), np.nan, np.float32), dc0.copy(), np.empty((B, 4 * H), np.float32)
    _lstm_back_passes(g, d1, dh0, dc1, c_prev, act_c[0], tmp1)
    d2, dc2, dh2 = np.full((B, 4 * H), np.nan, np.float32), dc0.copy(), dh0.copy()
    _lstm_back_step(g, d2, dh2, dc2, np.stack([c_prev, c_prev]), act_c, np.empty((B, 4 * H), np.float32))
    np.testing.assert_array_equal(d2, d1)
    np.testing.assert_array_equal(dc2, dc1)
    np.testing.assert_array_equal(dh2, np.zeros_like(dh2))


@numba.njit(cache=False, error_model="numpy", fastmath={"contract"})
def _gru_ra_passes(a: Any, rec: Any, h_prev: Any, h: Any, hun: Any) -> None:
    """GRU reset_after=True with the default activations as separate passes (z, r and n's
    pre-activation per row; then ``tanh`` over the n block; then the blend)."""
    B, G = a.shape
    H = G // 3
    for b in range(B):
        x, hu, hn = row(a, b), row(rec, b), row(hun, b)
        for jj in range(2 * H):
            x[jj] = sig(x[jj] + hu[jj])
        for jj in range(H):
            hn[jj] = hu[2 * H + jj]
        for jj in range(H):
            x[2 * H + jj] = x[H + jj] * hn[jj] + x[2 * H + jj]
    _gru_n_passes(a, h_prev, h)


@pytest.mark.parametrize("ra", [False, True], ids=["gru", "gru_ra"])
@pytest.mark.parametrize("shape", SHAPES, ids=["B7-H37", "B32-H64"])
def test_gru_row_step_equals_the_passes_bit_for_bit(shape: tuple[int, int, int, int], ra: bool) -> None:
    B, _, _, H = shape
    rng = np.random.default_rng(3)
    pre = (3 * rng.standard_normal((B, 3 * H))).astype(np.float32)
    pre[0, 2 * H:2 * H + 2] = [1e8, -1e8]   # saturated n
    rec = (2 * rng.standard_normal((B, 3 * H))).astype(np.float32)
    h_prev = rng.uniform(-1, 1, (B, H)).astype(np.float32)
    a1, h1, pk1 = pre.copy(), np.empty_like(h_prev), np.empty((B, H), np.float32)
    a2, h2, pk2 = pre.copy(), np.stack([h_prev, h_prev]), np.empty((1, B, H), np.float32)
    if ra:
        _gru_ra_passes(a1, rec, h_prev, h1, pk1)
        _gru_step(0, True, a2, rec, h2, pk2)
        np.testing.assert_array_equal(pk2[0], pk1)
    else:                                   # phase 1 (n, h) after phase 0's gates
        a1[:, :2 * H] = a2[:, :2 * H] = 1.0 / (1.0 + np.exp(-pre[:, :2 * H]))
        _gru_n_passes(a1, h_prev, h1)
        _gru_step(1, False, a2, rec, h2, pk2)
    np.testing.assert_array_equal(a2, a1)
    np.testing.assert_array_equal(h2[1], h1)
