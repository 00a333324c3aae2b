"""The layers of a language-model head at their real shapes: Dense against ``torch.nn.Linear`` and
float64 finite differences, the Embedding's row sums against ``np.add.at``, gradients handed to
the Ctx without a copy."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.layers._embedding import MAX_ROUNDS, scatter_rows


def test_dense_linear_matches_torch_linear_with_copied_weights() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    B, T, F, V = 4, 35, 200, 3001
    dense = rk.Dense(V, seed=1)
    dense.build((None, T, F))
    b = (0.1 * rng.standard_normal(V)).astype(np.float32)
    dense.set_weights(dense.weight("kernel"), b)
    lin = torch.nn.Linear(F, V)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(np.array(dense.weight("kernel")).T.copy()))
        lin.bias.copy_(torch.from_numpy(b))
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    g = rng.standard_normal((B, T, V)).astype(np.float32)
    ctx = rk.Ctx.training(0)
    y = dense.forward(x, ctx)
    dx = dense.backward(g, ctx)
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = lin(xt)
    yt.backward(torch.from_numpy(g))
    assert y.dtype == np.float32 and dx.dtype == np.float32
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ctx.grad(dense, "kernel"), lin.weight.grad.numpy().T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ctx.grad(dense, "bias"), lin.bias.grad.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("activation", ["linear", "softmax", "tanh"])
def test_dense_gradients_match_finite_differences(activation: str) -> None:
    rng = np.random.default_rng(1)
    dense = rk.Dense(7, activation, dtype="float64", seed=2)
    dense.build((None, 3, 5))
    x = rng.standard_normal((2, 3, 5))
    r = rng.standard_normal((2, 3, 7))

    def loss(xx: np.ndarray) -> float:
        return float(np.sum(r * dense.forward(xx, rk.Ctx.inference())))

    ctx = rk.Ctx.training(0)
    dense.forward(x, ctx)
    dx = dense.backward(r.copy(), ctx)
    h = 1e-6
    for idx in [(0, 0, 0), (1, 2, 4), (0, 1, 3)]:
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        assert abs((loss(xp) - loss(xm)) / (2 * h) - dx[idx]) < 1e-7
    # a second pass adds into the stored gradient: it was handed over, not shared
    ctx2 = rk.Ctx.training(0)
    for _ in range(2):
        dense.forward(x, ctx2)
    dense.backward(r, ctx2)
    dense.backward(r, ctx2)
    np.testing.assert_allclose(ctx2.grad(dense, "kernel"), 2 * ctx.grad(dense, "kernel"), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n", [(700, 8606), (5000, 300), (3 * MAX_ROUNDS, 2), (1, 3), (64, 1)])
def test_scatter_rows_equals_add_at_bit_for_bit(dtype: type, m: int, n: int) -> None:
    rng = np.random.default_rng(m + n)
    idx = rng.integers(0, n, m)
    rows = rng.standard_normal((m, 9)).astype(dtype)
    ref = np.zeros((n, 9), dtype)
    np.add.at(ref, idx, rows)
    got = scatter_rows(idx, rows, n, np.dtype(dtype))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, ref)


def test_embedding_gradient_sums_repeated_tokens_like_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    emb = rk.Embedding(50, 6, seed=0)
    emb.build((None, 12))
    x = rng.integers(0, 8, (5, 12))          # 60 positions over 8 tokens: many repeats
    g = rng.standard_normal((5, 12, 6)).astype(np.float32)
    ctx = rk.Ctx.training(0)
    emb.forward(x, ctx)
    emb.backward(g, ctx)
    te = torch.nn.Embedding(50, 6)
    with torch.no_grad():
        te.weight.copy_(torch.from_numpy(np.array(emb.weight("embeddings"))))
    te(torch.from_numpy(x)).backward(torch.from_numpy(g))
    np.testing.assert_allclose(ctx.grad(emb, "embeddings"), te.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert not ctx.grad(emb, "embeddings")[8:].any()
