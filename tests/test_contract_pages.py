"""Contract audit: stated behaviours that no other test pinned by value.

- ``get_weights()`` returns the kernel, recurrent kernel and bias
  (``[4, 32], [8, 32], [1, 32]`` for ``LSTM(8)`` on 4 features); Embedding maps ``[N]`` ->
  ``[N, D]`` and ``[N, T, K]`` -> ``[N, T, K, D]``.
- "a gradient is not clipped inside the layer" — backward is linear in the
  upstream gradient, however large.
- reliability: training that produces NaN/Inf in a GRAPH model names the epoch and the node.
"""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk


def test_get_weights_listing_and_copy_between_layers() -> None:
    lstm = rk.LSTM(8, rk.Tanh(), input_dim=4).with_random_state(42)
    ws = lstm.get_weights()
    assert [w.shape for w in ws] == [(4, 32), (8, 32), (1, 32)]
    for w, e in zip(ws, lstm.weights(), strict=True):
        np.testing.assert_array_equal(w, e.value)
    np.testing.assert_array_equal(ws[2][0, 8:16], 1.0)  # the forget block starts at 1.0
    ws[0][...] = 0.0  # a copy: the layer keeps its weights
    assert np.abs(lstm.weight("kernel")).max() > 0.1
    other = rk.LSTM(8, input_dim=4, seed=1)
    x = np.random.default_rng(0).standard_normal((2, 5, 4))
    assert np.abs(other.predict(x) - lstm.predict(x)).max() > 1e-3
    other.set_weights(*lstm.get_weights())
    np.testing.assert_array_equal(other.predict(x), lstm.predict(x))
    d = rk.Dense(2, seed=3)
    d.build((None, 3))
    d2 = rk.Dense(2, seed=4)
    d2.set_weights(*d.get_weights())
    np.testing.assert_array_equal(d2.predict(np.eye(3)), d.predict(np.eye(3)))
    assert rk.Reverse(1).get_weights() == []


def test_embedding_rank_one_and_rank_three_inputs_select_rows() -> None:
    emb = rk.Embedding(10, 3, seed=5)
    emb.build((None,))
    table = emb.weight("embeddings")
    x1 = np.array([7.0, 0.0, 9.9, 2.5])
    np.testing.assert_array_equal(emb.predict(x1), table[[7, 0, 9, 2]])
    x3 = np.random.default_rng(1).integers(0, 10, (2, 3, 4)).astype(float) + 0.75
    y3 = emb.predict(x3)
    assert y3.shape == (2, 3, 4, 3)
    for idx in np.ndindex(x3.shape):
        np.testing.assert_array_equal(y3[idx], table[int(x3[idx])])
    assert emb.compute_output_shape((None, 3, 4)) == rk.Shape((None, 3, 4, 3))


@pytest.mark.parametrize("make", [lambda: rk.SimpleRNN(3, seed=1, dtype="float64"),
                                  lambda: rk.LSTM(3, seed=1, dtype="float64", return_sequences=True),
                                  lambda: rk.GRU(3, seed=1, dtype="float64", go_backwards=True),
                                  lambda: rk.GRU(3, seed=1, dtype="float64", reset_after=True)])
def test_no_gradient_clipping_inside_a_layer(make: object) -> None:
    layer = make()  # type: ignore[operator]
    x = np.random.default_rng(2).standard_normal((2, 4, 2))
    results = []
    for scale in (1.0, 1e8):
        ctx = rk.Ctx.training()
        y = layer.forward_mut(x, ctx)
        g = np.random.default_rng(3).standard_normal(y.shape) * scale
        dx = layer.backward(g, ctx)
        results.append((dx, {n: ctx.grad(layer, n) for n in layer.weight_names}))
    (dx1, g1), (dx2, g2) = results
    np.testing.assert_allclose(dx2, 1e8 * dx1, rtol=1e-12)
    for n in g1:
        np.testing.assert_allclose(g2[n], 1e8 * g1[n], rtol=1e-12, atol=1e-300)
    assert max(np.abs(g2[n]).max() for n in g2) > 1e6


def test_non_finite_training_in_a_graph_model_names_the_epoch_and_the_node() -> None:
    b = rk.GraphBuilder()
    i = b.input((None, 2))
    h = b.add(rk.Dense(3, seed=1), [i], name="hidden")
    o = b.add(rk.Dense(1, seed=2), [h], name="head")
    m = b.build(o)
    m.compile(rk.SGD(0.01), "mse")
    h.layer.set_weight("kernel", np.full((2, 3), 3e38, np.float32))  # 1 * 3e38 * 2 overflows
    with pytest.raises(rk.NonFiniteError, match=r"epoch 1/2 .*node hidden \(Dense\)"):
        m.fit(np.ones((4, 2)), np.zeros((4, 1)), 2)


def _gram_schmidt(a: np.ndarray) -> np.ndarray:
    """Classical Gram-Schmidt on the columns of ``a`` (rnnkit's orthogonal initialiser,
    written again here)."""
    q = np.zeros_like(a)
    for j in range(a.shape[1]):
        v = a[:, j].copy()
        for i in range(j):
            v -= (q[:, i] @ a[:, j]) * q[:, i]
        q[:, j] = v / np.linalg.norm(v)
    return q


@pytest.mark.parametrize(("cls", "gates"), [(rk.SimpleRNN, 1), (rk.LSTM, 4), (rk.GRU, 3)])
def test_seed_is_spent_on_the_kernel_then_the_recurrent_blocks_in_that_order(cls: type, gates: int) -> None:
    """The seed feeds the kernel draw (Glorot, per-gate fan F + H), then one
    Gram-Schmidt orthogonal block per gate; biases are zeros except LSTM's forget block."""
    F, H, seed = 3, 4, 1234
    layer = cls(H, dtype="float64").with_random_state(seed)
    layer.build((None, None, F))
    rng = np.random.default_rng(seed)
    lim = np.sqrt(6.0 / (F + H))
    np.testing.assert_allclose(layer.weight("kernel"), rng.uniform(-lim, lim, (F, gates * H)), rtol=1e-15)
    blocks = [_gram_schmidt(rng.standard_normal((H, H))) for _ in range(gates)]
    np.testing.assert_allclose(layer.weight("recurrent_kernel"), np.concatenate(blocks, axis=1), atol=1e-12)
    want_bias = np.zeros((1, gates * H))
    if cls is rk.LSTM:
        want_bias[0, H:2 * H] = 1.0
    np.testing.assert_array_equal(layer.weight("bias"), want_bias)


def test_dense_and_embedding_initialisers_by_value() -> None:
    d = rk.Dense(5, seed=7, dtype="float64")
    d.build((None, 3))
    lim = np.sqrt(6.0 / (3 + 5))
    np.testing.assert_allclose(d.weight("kernel"), np.random.default_rng(7).uniform(-lim, lim, (3, 5)),
                               rtol=1e-15)
    np.testing.assert_array_equal(d.weight("bias"), np.zeros(5))
    e = rk.Embedding(6, 2, dtype="float64").with_random_state(8)
    e.build((None, 4))
    np.testing.assert_allclose(e.weight("embeddings"), np.random.default_rng(8).uniform(-0.05, 0.05, (6, 2)),
                               rtol=1e-15)


@pytest.mark.parametrize("cls", [rk.SimpleRNN, rk.LSTM, rk.GRU])
def test_constructor_defaults_and_keyword_only_flags(cls: type) -> None:
    """The constructor: ``(units, activation="tanh", *, return_sequences=False, go_backwards=False,
    seed=None, dtype="float32", input_dim=None)``; GRU adds ``reset_after=False``."""
    layer = cls(3)
    assert (layer.units, layer.activation.name, layer.return_sequences, layer.go_backwards,
            layer.seed, layer.dtype, layer.built) == (3, "tanh", False, False, None, np.float32, False)
    assert getattr(layer, "reset_after", False) is False
    with pytest.raises(TypeError):
        cls(3, "tanh", True)  # the flags are keyword-only
    full = cls(3, "relu", return_sequences=True, go_backwards=True, seed=4, dtype="float64", input_dim=2)
    assert (full.activation.name, full.return_sequences, full.go_backwards, full.seed, full.dtype,
            full.built, full.input_dim) == ("relu", True, True, 4, np.float64, True, 2)
    x = np.random.default_rng(0).standard_normal((2, 5, 2))
    chained = cls(3, "relu", dtype="float64").with_random_state(4).with_return_sequences(True) \
        .with_go_backwards(True)
    np.testing.assert_array_equal(chained.forward_mut(x, rk.Ctx.inference()), full.predict(x))
