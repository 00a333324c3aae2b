"""rk.losses.Pinball (QuantileLoss): values and gradients against PyTorch autograd, the quantile
it is minimised by, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import InvalidInputError, InvalidParameterError


def test_value_and_gradient_match_torch_autograd_ties_included() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    q = [0.1, 0.5, 0.9]
    y = rng.normal(size=(6, 5, 1))
    p = rng.normal(size=(6, 5, 3))
    p[0, 0, :] = y[0, 0, 0]                       # ties: the subgradient's midpoint
    loss = rk.losses.Pinball(q)
    value, grad = loss.value_and_grad(y, p)
    tp = torch.tensor(p, requires_grad=True)
    e = torch.tensor(y) - tp
    tq = torch.tensor(q, dtype=torch.float64)
    want = torch.maximum(tq * e, (tq - 1) * e).mean()
    want.backward()
    assert value == pytest.approx(float(want.detach()), rel=1e-14)
    np.testing.assert_allclose(grad, tp.grad.numpy(), rtol=1e-14, atol=1e-17)
    assert rk.losses.QuantileLoss is rk.losses.Pinball
    assert isinstance(rk.losses.get("pinball"), rk.losses.Pinball)
    assert rk.losses.deserialize(rk.losses.serialize(loss)).quantiles == (0.1, 0.5, 0.9)


def test_gradient_descent_on_constants_finds_the_quantiles() -> None:
    rng = np.random.default_rng(1)
    y = rng.exponential(size=(4000, 1))
    q = (0.1, 0.5, 0.9)
    loss = rk.losses.Pinball(q)
    c = np.zeros((1, 3))
    for k in range(4000):
        _, g = loss.value_and_grad(y, np.broadcast_to(c, (4000, 3)))
        c -= 0.5 / (1 + k / 100) * g.sum(axis=0, keepdims=True)
    want = np.quantile(y[:, 0], q)
    # the loss is flat between neighbouring order statistics; exponential samples near these
    # quantiles are ~1/(n f(x)) < 0.003 apart, and the decaying step ends < 0.01 wide
    np.testing.assert_allclose(c[0], want, atol=0.02)


def test_bad_input_is_named() -> None:
    with pytest.raises(InvalidParameterError, match=r"quantiles must be numbers in \(0, 1\)"):
        rk.losses.Pinball([0.5, 1.0])
    with pytest.raises(InvalidInputError,
                       match=r"y_pred must be \(\.\.\., 2\).*got y_true \(3, 2\), y_pred \(3, 3\)"):
        rk.losses.Pinball([0.1, 0.9]).value_and_grad(np.zeros((3, 2)), np.zeros((3, 3)))
