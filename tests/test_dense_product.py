"""Dense's products: batch-independent bit for bit on the compiled path, exact against float64.

A sample's output must not depend on which other samples share its batch, so ``predict`` gives
the same bits under every ``batch_size``; and the products still equal a float64 reference
computed here with plain Python sums (``math.fsum``, no BLAS)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.layers import _product

pytest.importorskip("numba")


def _ref_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float64 with exactly rounded sums (an independent reference)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    out = np.empty((a64.shape[0], b64.shape[1]))
    for i in range(a64.shape[0]):
        for j in range(b64.shape[1]):
            out[i, j] = math.fsum(a64[i] * b64[:, j])
    return out


def _sum3_model() -> rk.Model:
    return (rk.SequentialBuilder()
            .add(rk.LSTM(16, rk.Tanh()).with_random_state(42))
            .add(rk.Dense(1, rk.Linear()).with_random_state(0))
            .build(rk.Shape.with_free_batch((4, 3, 1))))


def test_sum3_predict_is_bit_equal_across_batch_sizes() -> None:
    model = _sum3_model()
    x = np.random.default_rng(0).uniform(0, 0.3, (61, 3, 1)).astype(np.float32)
    whole = model.predict(x)
    for bs in (1, 3, 7, 61):
        np.testing.assert_array_equal(model.predict(x, batch_size=bs), whole)


@pytest.mark.parametrize(("rows", "features", "units"), [
    (301, 37, 45),      # one compiled call
    (200, 200, 300),    # parallel parts by columns
    (4000, 300, 5),     # parallel parts by rows (few columns)
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dense_2d_rows_do_not_depend_on_the_batch(rows: int, features: int, units: int, dtype: str) -> None:
    d = rk.Dense(units, "tanh", seed=1, dtype=dtype)
    d.build(rk.Shape((None, features)))
    x = np.random.default_rng(2).standard_normal((rows, features)).astype(dtype)
    whole = d.forward(x, rk.Ctx.inference())
    for bs in (1, 3, 7):
        parts = [d.forward(x[i:i + bs], rk.Ctx.inference()) for i in range(0, rows, bs)]
        np.testing.assert_array_equal(np.concatenate(parts), whole)
    # the rows of a 3-D input are the same rows too
    np.testing.assert_array_equal(d.forward(x[: rows // 4 * 4].reshape(4, -1, features),
                                            rk.Ctx.inference()).reshape(-1, units), whole[: rows // 4 * 4])


def test_dense_predict_in_a_model_is_bit_equal_across_batch_sizes() -> None:
    model = rk.Sequential([rk.Dense(24, "relu", seed=0), rk.Dense(3, seed=1)])
    x = np.random.default_rng(3).standard_normal((50, 9)).astype(np.float32)
    whole = model.predict(x)
    for bs in (1, 3, 7):
        np.testing.assert_array_equal(model.predict(x, batch_size=bs), whole)


@pytest.mark.parametrize("mode", ["fast", "reference"])
def test_dense_forward_and_backward_equal_the_float64_reference(mode: str) -> None:
    rng = np.random.default_rng(4)
    d = rk.Dense(7, seed=2, dtype="float64")
    d.build(rk.Shape((None, 5, 6)))
    x = rng.standard_normal((3, 5, 6))
    g = rng.standard_normal((3, 5, 7))
    W, b = np.array(d.weight("kernel")), np.array(d.weight("bias"))
    with kernels.use(mode):
        ctx = rk.Ctx.training(0)
        y = d.forward(x, ctx)
        dx = d.backward(g, ctx)
    x2, g2 = x.reshape(-1, 6), g.reshape(-1, 7)
    np.testing.assert_allclose(y.reshape(-1, 7), _ref_matmul(x2, W) + b, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dx.reshape(-1, 6), _ref_matmul(g2, W.T), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ctx.grad(d, "kernel"), _ref_matmul(x2.T, g2), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ctx.grad(d, "bias"), [math.fsum(c) for c in g2.T], rtol=1e-13, atol=1e-13)


def test_float32_products_stay_within_rounding_of_float64() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((67, 130)).astype(np.float32)
    b = rng.standard_normal((130, 41)).astype(np.float32)
    g = rng.standard_normal((67, 41)).astype(np.float32)
    ref = _ref_matmul(a, b)
    np.testing.assert_allclose(_product.matmul(a, b), ref, rtol=0, atol=2e-5 * np.abs(ref).max())
    ref_t = _ref_matmul(a.T, g)
    np.testing.assert_allclose(_product.matmul_tn(a, g), ref_t, rtol=0, atol=2e-5 * np.abs(ref_t).max())
    ref_bt = _ref_matmul(g, b.T)
    np.testing.assert_allclose(_product.matmul(g, b, trans_b=True), ref_bt, rtol=0,
                               atol=2e-5 * np.abs(ref_bt).max())


def test_any_layout_of_the_operands_gives_the_same_bits() -> None:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((40, 12)).astype(np.float32)
    b = rng.standard_normal((12, 9)).astype(np.float32)
    want = _product.matmul(a, b)
    ro = a.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(_product.matmul(ro, b), want)            # read-only input
    np.testing.assert_array_equal(_product.matmul(np.asfortranarray(a), b), want)
    np.testing.assert_array_equal(_product.matmul(a, np.asfortranarray(b)), want)
    np.testing.assert_array_equal(_product.matmul(np.ascontiguousarray(b.T), b.T, trans_b=True),
                                  _product.matmul(np.ascontiguousarray(b.T), np.ascontiguousarray(b)))
    g = rng.standard_normal((40, 9)).astype(np.float32)
    np.testing.assert_array_equal(_product.matmul_tn(ro, g), _product.matmul_tn(a, g))


def test_empty_products() -> None:
    a = np.zeros((0, 4), np.float32)
    assert _product.matmul(a, np.ones((4, 3), np.float32)).shape == (0, 3)
    out = _product.matmul_tn(a, np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(out, np.zeros((4, 3), np.float32))


def test_a_weight_is_packed_once_and_never_stale() -> None:
    rng = np.random.default_rng(7)
    d = rk.Dense(33, seed=3)
    d.build(rk.Shape((None, 20)))
    x = rng.standard_normal((5, 20)).astype(np.float32)
    writable = np.array(d.weight("kernel"))
    # the kept panels (read-only weight) give the bits of a fresh packing (writable copy)
    np.testing.assert_array_equal(_product.matmul(x, d.weight("kernel")), _product.matmul(x, writable))
    before = len(_product._PANELS)
    for _ in range(20):                        # each new weight replaces the old one's panels
        new = rng.standard_normal((20, 33)).astype(np.float32)
        d.set_weight("kernel", new)
        want = _ref_matmul(x, new) + np.asarray(d.weight("bias"), np.float64)
        np.testing.assert_allclose(d.forward(x, rk.Ctx.inference()), want, rtol=1e-5, atol=1e-5)
    assert len(_product._PANELS) <= before + 1


def test_the_input_gradient_packs_a_weights_transpose_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``g @ W.T`` (Dense's input gradient, once per call of a layer called at every step of a
    decoder) lays out the panels of a read-only ``W.T`` once while the weight lives, with the
    bits of a fresh product (a writable ``W``) and within float32 rounding of float64."""
    from rnnkit.kernels import _packed
    packs: list[tuple[int, ...]] = []
    real = _packed.pack

    def counting(b: np.ndarray, trans: bool = False) -> np.ndarray:
        packs.append(b.T.shape if trans else b.shape)          # the shape of op(b), packed
        return real(b, trans)

    monkeypatch.setattr(_packed, "pack", counting)
    rng = np.random.default_rng(8)
    w = rng.standard_normal((37, 300)).astype(np.float32)     # (F, N): a Dense kernel
    w.flags.writeable = False
    g = rng.standard_normal((9, 300)).astype(np.float32)
    first = _product.matmul(g, w, trans_b=True)
    for _ in range(5):
        np.testing.assert_array_equal(_product.matmul(g, w, trans_b=True), first)
    assert packs == [(300, 37)]                                # W.T, packed once
    np.testing.assert_array_equal(first, _product.matmul(g, np.array(w), trans_b=True))
    ref = _ref_matmul(g, w.T)
    np.testing.assert_allclose(first, ref, rtol=0, atol=300 * 6e-8 * np.abs(g).max() * np.abs(w).max())
    np.testing.assert_array_equal(_product.matmul(g[3:5], w, trans_b=True), first[3:5])   # rows alone
