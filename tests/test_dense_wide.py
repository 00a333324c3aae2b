"""A wide Dense (a language model's output layer over a vocabulary): its forward product in
slices of columns with the bias added per slice, and its weight gradients from one product (the
bias gradient as the row of a row of ones), checked bit for bit against the plain products,
against exactly rounded float64 sums, across batch sizes, and against ``torch.nn.Linear`` with
copied weights."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.layers import _dense_products as dp
from rnnkit.layers import _product

pytest.importorskip("numba")


def _fsum_rows(a: np.ndarray) -> np.ndarray:
    """Column sums of ``a`` in float64, exactly rounded (an independent reference)."""
    return np.array([math.fsum(c) for c in np.asarray(a, np.float64).T])


def _fsum_tn(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``a^T @ g`` in float64 with exactly rounded sums."""
    a64, g64 = np.asarray(a, np.float64), np.asarray(g, np.float64)
    return np.array([[math.fsum(a64[:, i] * g64[:, j]) for j in range(g64.shape[1])]
                     for i in range(a64.shape[1])])


def _ro(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("rows", "units"), [(97, 256), (130, 1000), (700, 2307)])
def test_sliced_forward_has_the_bits_of_the_plain_product_plus_bias(dtype: str, rows: int,
                                                                     units: int) -> None:
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 40)).astype(dtype)
    w = _ro(rng.standard_normal((40, units)).astype(dtype))
    b = rng.standard_normal(units).astype(dtype)
    want = _product.matmul(x, w)
    np.testing.assert_array_equal(dp.affine(x, w, None), want)
    want += b
    got = dp.affine(x, w, b)
    assert got.flags.c_contiguous and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)
    ref = np.asarray(x, np.float64) @ np.asarray(w, np.float64) + b
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * np.abs(ref).max())


def test_wide_dense_rows_do_not_depend_on_the_batch() -> None:
    d = rk.Dense(3001, seed=4)
    d.build(rk.Shape((None, 24)))
    d.set_weights(d.weight("kernel"), np.random.default_rng(1).standard_normal(3001).astype(np.float32))
    x = np.random.default_rng(5).standard_normal((300, 24)).astype(np.float32)
    whole = d.forward(x, rk.Ctx.inference())
    for bs in (1, 7, 96, 97, 150):
        parts = [d.forward(x[i:i + bs], rk.Ctx.inference()) for i in range(0, 300, bs)]
        np.testing.assert_array_equal(np.concatenate(parts), whole)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("rows", "features", "units"), [(5, 3, 7), (700, 33, 1100), (1200, 64, 600)])
def test_weight_grads_have_the_bits_of_matmul_tn_and_the_column_sum(dtype: str, rows: int,
                                                                  features: int, units: int) -> None:
    rng = np.random.default_rng(units)
    x = rng.standard_normal((rows, features)).astype(dtype)
    g = rng.standard_normal((rows, units)).astype(dtype)
    dw, db = dp.weight_grads(x, g, True)
    np.testing.assert_array_equal(dw, _product.matmul_tn(x, g))
    np.testing.assert_array_equal(db, g.sum(axis=0))
    assert dw.shape == (features, units) and dw.flags.c_contiguous and db is not None
    dw2, none = dp.weight_grads(x, g, False)
    assert none is None
    np.testing.assert_array_equal(dw2, dw)
    if rows * units <= 1200 * 1100 and dtype == "float64":
        np.testing.assert_allclose(db, _fsum_rows(g), rtol=1e-12, atol=1e-12)


def test_weight_grads_against_exact_sums_in_float32() -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((130, 6)).astype(np.float32)
    g = rng.standard_normal((130, 300)).astype(np.float32)
    dw, db = dp.weight_grads(x, g, True)
    ref_w, ref_b = _fsum_tn(x, g), _fsum_rows(g)
    np.testing.assert_allclose(dw, ref_w, rtol=0, atol=2e-5 * np.abs(ref_w).max())
    np.testing.assert_allclose(db, ref_b, rtol=0, atol=2e-5 * np.abs(ref_b).max())


def test_weight_grads_of_no_rows_are_zeros() -> None:
    dw, db = dp.weight_grads(np.zeros((0, 4), np.float32), np.zeros((0, 300), np.float32), True)
    np.testing.assert_array_equal(dw, np.zeros((4, 300), np.float32))
    np.testing.assert_array_equal(db, np.zeros(300, np.float32))


@pytest.mark.parametrize("mode", ["fast", "reference"])
def test_wide_dense_forward_backward_equal_torch_linear(mode: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    d = rk.Dense(1500, seed=3)
    d.build(rk.Shape((None, 20, 48)))
    d.set_weights(d.weight("kernel"), (0.1 * rng.standard_normal(1500)).astype(np.float32))
    x = rng.standard_normal((10, 20, 48)).astype(np.float32)
    g = rng.standard_normal((10, 20, 1500)).astype(np.float32)
    lin = torch.nn.Linear(48, 1500)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(np.array(d.weight("kernel")).T))
        lin.bias.copy_(torch.from_numpy(np.array(d.weight("bias"))))
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = lin(xt)
    yt.backward(torch.from_numpy(g))
    with kernels.use(mode):
        ctx = rk.Ctx.training(0)
        y = d.forward(x, ctx)
        dx = d.backward(g, ctx)

    def close(a: np.ndarray, b: object) -> None:
        ref = b.detach().numpy()  # type: ignore[attr-defined]
        np.testing.assert_allclose(a, ref, rtol=0, atol=3e-6 * float(np.abs(ref).max()))

    close(y, yt)
    close(dx, xt.grad)
    close(ctx.grad(d, "kernel"), lin.weight.grad.T)
    close(ctx.grad(d, "bias"), lin.bias.grad)
