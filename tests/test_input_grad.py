"""No input gradient for the first layer: a training step tells the model's first layer that
nobody reads dL/dx (``Ctx.skip_input_grad``); the layer adds its weights' gradients as always,
computes no dL/dx and returns None. The weights' gradients are those of a full backward, checked
against float64 finite differences and against a step of plain NumPy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.layers import Dense


def _weight_grads(layer: rk.Layer, x: np.ndarray, g: np.ndarray, skip: bool) -> tuple[Any, dict[str, Any]]:
    ctx = rk.Ctx.training(0)
    layer.forward(x, ctx)
    if skip:
        ctx.skip_input_grad(layer)
    dx = layer.backward(g, ctx)
    return dx, {n: ctx.grad(layer, n) for n in layer.weight_names}


def _fd(layer: rk.Layer, x: np.ndarray, g: np.ndarray, name: str, eps: float = 1e-6) -> np.ndarray:
    """d<g, forward(x)>/d weight, by central differences."""
    w0 = np.array(layer.weight(name))
    out = np.zeros_like(w0)
    for i in np.ndindex(w0.shape):
        vals = []
        for s in (eps, -eps):
            w = w0.copy()
            w[i] += s
            layer.set_weight(name, w)
            vals.append(float((layer.forward(x, rk.Ctx.inference()) * g).sum()))
        out[i] = (vals[0] - vals[1]) / (2 * eps)
    layer.set_weight(name, w0)
    return out


@pytest.mark.parametrize("mode", ["reference", "fast"])
@pytest.mark.parametrize("make", [lambda: rk.LSTM(3, seed=1, dtype="float64", return_sequences=True),
                                  lambda: rk.GRU(3, seed=2, dtype="float64"),
                                  lambda: Dense(3, seed=3, dtype="float64")])
def test_a_skipped_input_gradient_leaves_the_weight_gradients(mode: str, make: Any) -> None:
    rng = np.random.default_rng(0)
    layer = make()
    x = rng.normal(size=(2, 4, 2))
    layer.build(rk.Shape.with_free_batch(x.shape))
    y = layer.forward(x, rk.Ctx.inference())
    g = rng.normal(size=y.shape)
    with kernels.use(mode):
        dx_full, full = _weight_grads(layer, x, g, skip=False)
        dx_none, skipped = _weight_grads(layer, x, g, skip=True)
    assert dx_none is None and isinstance(dx_full, np.ndarray) and dx_full.shape == x.shape
    for n in layer.weight_names:
        np.testing.assert_array_equal(skipped[n], full[n])
        np.testing.assert_allclose(skipped[n], _fd(layer, x, g, n), rtol=1e-6, atol=1e-8)


class _Watching(Dense):
    """A Dense that records, at each backward, whether its dL/dx was asked for."""

    asked: list[bool]

    def backward(self, grad: Any, ctx: rk.Ctx) -> np.ndarray | None:
        self.asked.append(ctx.needs_input_grad(self))
        return super().backward(grad, ctx)


def test_fit_skips_the_first_layers_input_gradient_and_steps_as_numpy_does() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 1))
    first, last = _Watching(4, seed=1, dtype="float64"), _Watching(1, seed=2, dtype="float64")
    first.asked, last.asked = [], []
    model = rk.Sequential([first, last], input_shape=(None, 3))
    model.compile(rk.SGD(0.1), "mse")
    W1, b1 = np.array(first.weight("kernel")), np.array(first.weight("bias"))
    W2, b2 = np.array(last.weight("kernel")), np.array(last.weight("bias"))
    model.fit(x, y, epochs=1, batch_size=6, shuffle=False)
    assert first.asked == [False] and last.asked == [True]
    # one SGD step of mean squared error, in plain NumPy
    h = x @ W1 + b1
    p = h @ W2 + b2
    dp = 2 * (p - y) / p.size
    dW2, db2 = h.T @ dp, dp.sum(0)
    dh = dp @ W2.T
    dW1, db1 = x.T @ dh, dh.sum(0)
    np.testing.assert_allclose(first.weight("kernel"), W1 - 0.1 * dW1, rtol=1e-12)
    np.testing.assert_allclose(first.weight("bias"), b1 - 0.1 * db1, rtol=1e-12)
    np.testing.assert_allclose(last.weight("kernel"), W2 - 0.1 * dW2, rtol=1e-12)
    np.testing.assert_allclose(last.weight("bias"), b2 - 0.1 * db2, rtol=1e-12)
