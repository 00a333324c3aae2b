"""Graph models: a bidirectional model (trains; the Reverse aligns timesteps, and
without it the merge pairs mismatched timesteps, shown numerically), weight sharing with the
summed gradient, whole-model float64 gradient checks, configs, summary."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

import rnnkit as rk
from harness import rel_err
from rnnkit.layers import Concatenate, Dense, Embedding, Reverse
from rnnkit.models import GraphBuilder, GraphModel, Sequential, model_from_config

B, T, F, H = 6, 5, 2, 4


def _bidirectional(dtype: str = "float32", reverse: bool = True) -> tuple[GraphModel, rk.LSTM, rk.LSTM]:
    b = GraphBuilder()
    inp = b.input(rk.Shape.known((B, T, F)))
    fwd_layer = rk.LSTM(H, rk.Activation.TANH, dtype=dtype, seed=1).with_return_sequences(True)
    bwd_layer = rk.LSTM(H, rk.Activation.TANH, dtype=dtype, seed=2).with_return_sequences(True) \
        .with_go_backwards(True)
    forward = b.add(fwd_layer, [inp])
    backward = b.add(bwd_layer, [inp])
    aligned = b.add(Reverse(1, dtype=dtype), [backward]) if reverse else backward
    merged = b.add(Concatenate(-1, dtype=dtype), [forward, aligned])
    out = b.add(Dense(1, dtype=dtype, seed=3), [merged])
    return b.build(out), fwd_layer, bwd_layer


def _data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).uniform(-1, 1, (B, T, F))
    # a target at timestep t needs the neighbours on both sides
    pad = np.pad(x[..., 0], ((0, 0), (1, 1)))
    y = (0.5 * pad[:, :-2] + 0.5 * pad[:, 2:])[..., None]
    return x, y


def test_bidirectional_model_trains() -> None:
    model, _, _ = _bidirectional()
    model.compile(rk.Adam(0.02), rk.MeanSquaredError())
    x, y = _data()
    hist = model.fit(x, y, 150)
    loss = hist.history["loss"]
    assert loss[-1] < loss[0] / 10, f"{loss[0]} -> {loss[-1]}"
    assert model.predict(x).shape == (B, T, 1)


def test_reverse_aligns_timesteps_and_its_absence_mismatches_them() -> None:
    aligned_model, fwd, bwd = _bidirectional("float64", reverse=True)
    plain_model, fwd2, bwd2 = _bidirectional("float64", reverse=False)  # same seeds: same weights
    x, _ = _data()

    def merged(model: GraphModel) -> np.ndarray:
        # the same nodes (same layers) up to the merge, as a model of their own
        node = next(n for n in model.nodes if isinstance(n.layer, Concatenate))
        upto = model.nodes[:model.nodes.index(node) + 1]
        return GraphModel(upto, model.inputs, [node], "merged").predict(x)

    a, p = merged(aligned_model), merged(plain_model)
    for k in range(T):
        # the state of the backward branch that consumed input timesteps T-1 .. k, ending at k
        back_k = bwd.seq(x[:, k:])[1].h
        fwd_k = fwd.seq(x[:, :k + 1])[1].h
        np.testing.assert_allclose(a[:, k, :H], fwd_k, atol=1e-12)
        np.testing.assert_allclose(a[:, k, H:], back_k, atol=1e-12)  # aligned: timestep k at slot k
        # without Reverse, slot k holds the backward state that ENDED at timestep T-1-k
        np.testing.assert_allclose(p[:, k, H:], bwd2.seq(x[:, T - 1 - k:])[1].h, atol=1e-12)
        if k != T // 2:
            assert np.abs(p[:, k, H:] - back_k).max() > 1e-3, f"slot {k} should be mismatched"
    np.testing.assert_array_equal(p[:, :, :H], a[:, :, :H])  # the forward half is the same


def test_shared_layer_runs_one_direction_at_both_nodes() -> None:
    """The pitfall: one layer at two nodes is real sharing; go_backwards is the layer's, so
    both branches run the SAME direction and the model still builds, predicts and trains."""
    b = GraphBuilder()
    inp = b.input((None, T, F))
    shared = rk.LSTM(H, return_sequences=True, go_backwards=True, seed=5, dtype="float64")
    n1, n2 = b.add(shared, [inp]), b.add(shared, [inp])
    model = b.build(b.add(Concatenate(-1, dtype="float64"), [n1, n2]))
    x, _ = _data()
    y = model.predict(x)
    np.testing.assert_array_equal(y[..., :H], y[..., H:])
    assert list(model.named_weights()) == ["lstm_0.kernel", "lstm_0.recurrent_kernel", "lstm_0.bias"]
    assert model.param_count() == shared.param_count()


def _graph_loss(model: GraphModel | Sequential, x: object, Gs: list[np.ndarray]) -> float:
    out = model.predict(x)
    outs = out if isinstance(out, list) else [out]
    return float(sum(np.sum(o * g) for o, g in zip(outs, Gs, strict=True)))


def _fd_check(model: GraphModel | Sequential, x: object, Gs: list[np.ndarray],
              analytic: Callable[[rk.Layer, str], np.ndarray], eps: float = 1e-6) -> dict[str, float]:
    errs = {}
    for key, (layer, n) in model.named_weights().items():
        w0 = np.array(layer.weight(n))
        num = np.empty_like(w0)
        for i in np.ndindex(w0.shape):
            w = w0.copy()
            w[i] += eps
            layer.set_weight(n, w)
            lp = _graph_loss(model, x, Gs)
            w[i] -= 2 * eps
            layer.set_weight(n, w)
            lm = _graph_loss(model, x, Gs)
            num[i] = (lp - lm) / (2 * eps)
        layer.set_weight(n, w0)
        errs[key] = rel_err(analytic(layer, n), num)
    return errs


def test_shared_layer_gradient_is_the_sum_and_matches_finite_differences() -> None:
    b = GraphBuilder()
    i1, i2 = b.input((None, 3, 2)), b.input((None, 3, 2))
    shared = rk.GRU(3, return_sequences=True, seed=4, dtype="float64")
    a1, a2 = b.add(shared, [i1]), b.add(shared, [i2])
    cat = b.add(Concatenate(-1, dtype="float64"), [a1, a2])
    head = b.add(Dense(2, "tanh", seed=5, dtype="float64"), [cat])
    model = b.build([a2, head])  # two outputs; a2 also feeds the head
    rng = np.random.default_rng(1)
    x1, x2 = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2))
    Gs = [rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 3, 2))]
    ctx = rk.Ctx.training()
    model.forward([x1, x2], ctx)
    dx1, dx2 = model.backward(Gs, ctx)
    errs = _fd_check(model, [x1, x2], Gs, lambda layer, n: ctx.grad(layer, n))
    assert max(errs.values()) < 1e-7, errs
    # the sum, term by term: the gradients reaching each node, pushed through the bare layer
    dense = head.layer
    c = rk.Ctx.training()
    h1, h2 = shared.forward(x1, c), shared.forward(x2, c)
    cat = np.concatenate([h1, h2], -1)
    cd = rk.Ctx.training()
    dense.forward(cat, cd)
    dcat = dense.backward(Gs[1], cd)
    c1, c2 = rk.Ctx.training(), rk.Ctx.training()
    shared.forward(x1, c1)
    shared.backward(dcat[..., :3], c1)
    shared.forward(x2, c2)
    shared.backward(dcat[..., 3:] + Gs[0], c2)
    for n in ("kernel", "recurrent_kernel", "bias"):
        np.testing.assert_allclose(ctx.grad(shared, n), c1.grad(shared, n) + c2.grad(shared, n),
                                   rtol=1e-12, atol=1e-14)
        assert np.abs(c1.grad(shared, n)).max() > 1e-3 and np.abs(c2.grad(shared, n)).max() > 1e-3
    # input gradients against finite differences too
    eps = 1e-6
    for k, (xk, dxk) in enumerate(((x1, dx1), (x2, dx2))):
        num = np.empty_like(xk)
        for i in np.ndindex(xk.shape):
            xp, xm = [x1.copy(), x2.copy()], [x1.copy(), x2.copy()]
            xp[k][i] += eps
            xm[k][i] -= eps
            num[i] = (_graph_loss(model, xp, Gs) - _graph_loss(model, xm, Gs)) / (2 * eps)
        assert rel_err(dxk, num) < 1e-7


def test_whole_sequential_gradcheck_embedding_lstm_dense() -> None:
    model = Sequential([Embedding(5, 3, seed=1, dtype="float64"),
                        rk.LSTM(4, seed=2, dtype="float64", return_sequences=True),
                        rk.LSTM(3, seed=4, dtype="float64"),
                        Dense(2, "sigmoid", seed=3, dtype="float64")], input_shape=(None, 3))
    x = np.array([[1.0, 4.0, 2.5], [0.0, 1.2, 3.0]])
    # vectors of order 1 (not the U(-0.05, 0.05) init) keep every gradient well above FD noise
    model.layers[0].set_weight("embeddings", np.random.default_rng(5).uniform(-1, 1, (5, 3)))
    G = np.random.default_rng(2).standard_normal((2, 2))
    ctx = rk.Ctx.training()
    model.forward(x, ctx)
    model.backward(G, ctx)
    errs = _fd_check(model, x, [G], lambda layer, n: ctx.grad(layer, n))
    assert set(errs) == {"0.embeddings", "1.kernel", "1.recurrent_kernel", "1.bias", "2.kernel",
                         "2.recurrent_kernel", "2.bias", "3.kernel", "3.bias"}
    assert max(errs.values()) < 1e-7, errs


def test_bidirectional_whole_graph_gradcheck() -> None:
    model, _, _ = _bidirectional("float64")
    x = np.random.default_rng(3).standard_normal((2, T, F))
    G = np.random.default_rng(4).standard_normal((2, T, 1))
    ctx = rk.Ctx.training()
    model.forward(x, ctx)
    model.backward(G, ctx)
    errs = _fd_check(model, x, [G], lambda layer, n: ctx.grad(layer, n))
    assert max(errs.values()) < 1e-7, errs


# by hand from the summary rules: widths 27 / 12 / 7 / 17, width 27+12+7+17+3*2 = 69;
# LSTM 4*(2*4 + 4*4 + 4) = 112 each, Dense 8 + 1 = 9, total 233
BIDIRECTIONAL_SUMMARY = """\
Model: "graph_model"
=====================================================================
Layer (type)                 Output Shape  Param #  Connected to
---------------------------------------------------------------------
input_0 (Input)              (None, 5, 2)  0
lstm_0 (LSTM)                (None, 5, 4)  112      input_0
lstm_1 (LSTM)                (None, 5, 4)  112      input_0
reverse_0 (Reverse)          (None, 5, 4)  0        lstm_1
concatenate_0 (Concatenate)  (None, 5, 8)  0        lstm_0, reverse_0
dense_0 (Dense)              (None, 5, 1)  9        concatenate_0
=====================================================================
Total params: 233
Trainable params: 233
Non-trainable params: 0"""


def test_graph_summary_names_and_config_round_trip() -> None:
    model, _, _ = _bidirectional()
    assert model.summary(print_fn=None) == BIDIRECTIONAL_SUMMARY
    # Keras' order (model.layers): the backward LSTM first, being deeper (it feeds the Reverse)
    assert list(model.named_weights()) == [f"lstm_{k}.{w}" for k in (1, 0)
                                           for w in ("kernel", "recurrent_kernel", "bias")] \
        + ["dense_0.kernel", "dense_0.bias"]
    again = model_from_config(json.loads(json.dumps(model.get_config())))
    assert isinstance(again, GraphModel) and list(again.named_weights()) == list(model.named_weights())
    x, y = _data()
    np.testing.assert_array_equal(again.predict(x), model.predict(x))  # seeds are in the config
    model.compile(rk.SGD(0.1), rk.MeanSquaredError())
    model.fit(x, y, 2)
    assert not np.array_equal(again.predict(x), model.predict(x))  # the trained weights differ
    again.set_weights(model.get_weights())
    np.testing.assert_array_equal(again.predict(x), model.predict(x))


def test_free_time_axis_prints_none_and_accepts_any_length() -> None:
    model = Sequential([rk.LSTM(3, return_sequences=True, seed=1), Dense(2, seed=2)],
                       input_shape=(None, None, 1))
    # by hand: widths 12 / 15 / 7, width 38; LSTM 4*(1*3 + 3*3 + 3) = 60, Dense 3*2 + 2 = 8
    assert model.summary(print_fn=None) == """\
Model: "sequential"
======================================
Layer (type)  Output Shape     Param #
--------------------------------------
0 (LSTM)      (None, None, 3)  60
1 (Dense)     (None, None, 2)  8
======================================
Total params: 68
Trainable params: 68
Non-trainable params: 0"""
    assert model.predict(np.zeros((2, 7, 1))).shape == (2, 7, 2)
    assert model.predict(np.zeros((1, 2, 1))).shape == (1, 2, 2)


def test_graph_builder_errors_name_the_node() -> None:
    b = GraphBuilder()
    inp = b.input((None, 5, 2))
    last = b.add(rk.LSTM(4), [inp])  # rank-2 output
    with pytest.raises(rk.InvalidInputError, match=r"node 'reverse_0'.*rank >= 3"):
        b.add(Reverse(1), [last])
    with pytest.raises(rk.InvalidInputError, match="at least 2"):
        b.add(Concatenate(), [last])
    with pytest.raises(rk.InvalidInputError, match="exactly 1"):
        b.add(Dense(2), [last, last])
    with pytest.raises(rk.InvalidInputError, match="already used"):
        b.add(Dense(2), [last], name="lstm_0")
    other = GraphBuilder().input((None, 2))
    with pytest.raises(rk.InvalidInputError, match="not a node of this builder"):
        b.add(Dense(2), [other])
    b2 = GraphBuilder()
    i1, i2 = b2.input((None, 2)), b2.input((None, 2))
    with pytest.raises(rk.InvalidInputError, match="does not feed"):
        b2.build(b2.add(Dense(1), [i1]))
    m = b2.build(b2.add(Concatenate(), [i1, i2]))
    with pytest.raises(rk.InvalidInputError, match="expected 2 input"):
        m.predict(np.zeros((3, 2)))
