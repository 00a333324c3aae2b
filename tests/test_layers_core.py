"""Dense, ActivationLayer, RepeatVector, Reverse, Concatenate, Dropout: harness contract
(float64 gradchecks), hand-computed values, errors, configs."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from harness import assert_gradcheck, check_layer, rel_err
from rnnkit.layers import (
    ActivationLayer,
    Concatenate,
    Dense,
    Dropout,
    RepeatVector,
    Reverse,
    layer_from_config,
    layer_to_config,
)


@pytest.mark.parametrize("act", ["linear", "tanh", "sigmoid", "relu", "softmax"])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_dense_contract(act: str, shape: tuple[int, ...]) -> None:
    rep = check_layer(lambda dt: Dense(3, act, seed=5, dtype=dt), lambda r: r.standard_normal(shape))
    assert rep.output_shape == (*shape[:-1], 3)
    assert max(rep.grad_errors.values()) < 1e-6


def test_dense_without_bias_and_softmax_axis_contract() -> None:
    check_layer(lambda dt: Dense(2, rk.Softmax(axis=1), use_bias=False, seed=1, dtype=dt),
                lambda r: r.standard_normal((2, 3, 4)))


def test_dense_values_by_hand_and_glorot_limit() -> None:
    d = Dense(2, "relu", dtype="float64")
    d.set_weights(np.array([[1.0, -1.0], [2.0, 0.5]]), np.array([0.5, -3.0]))
    x = np.array([[1.0, 2.0], [-1.0, 0.0]])
    # [1+4+0.5, -1+1-3] = [5.5, -3] -> relu; [-1+0.5, 1-3] = [-0.5, -2] -> 0
    np.testing.assert_array_equal(d.predict(x), [[5.5, 0.0], [0.0, 0.0]])
    big = Dense(50, seed=0, dtype="float64")
    big.build((None, 30))
    k = big.weight("kernel")
    lim = np.sqrt(6.0 / 80.0)
    assert k.shape == (30, 50) and np.abs(k).max() <= lim and np.abs(k).max() > 0.95 * lim
    np.testing.assert_array_equal(big.weight("bias"), np.zeros(50))
    assert big.param_count() == 30 * 50 + 50


def test_dense_errors() -> None:
    with pytest.raises(rk.InvalidParameterError, match="units"):
        Dense(0)
    with pytest.raises(rk.InvalidParameterError, match="activation"):
        Dense(2, "swish")
    d = Dense(2)
    with pytest.raises(rk.InvalidInputError, match="rank >= 2"):
        d.build((None,))
    d.build((None, 3))
    with pytest.raises(rk.InvalidInputError, match=r"3 features.*\(2, 4\)"):
        d.predict(np.zeros((2, 4)))
    with pytest.raises(rk.WeightShapeError) as e:
        d.set_weights(np.zeros((4, 2)), np.zeros(2))
    assert e.value.expected == (3, 2) and e.value.got == (4, 2)


@pytest.mark.parametrize("act", ["tanh", "sigmoid", "softmax"])
def test_activation_layer_contract(act: str) -> None:
    check_layer(lambda dt: ActivationLayer(act, dtype=dt), lambda r: r.standard_normal((2, 3, 4)))
    y = ActivationLayer(act, dtype="float64").predict(np.array([[0.0, 1.0]]))
    ref = {"tanh": np.tanh([0.0, 1.0]), "sigmoid": 1 / (1 + np.exp([-0.0, -1.0])),
           "softmax": np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()}[act]
    np.testing.assert_allclose(y[0], ref, rtol=1e-15)


def test_repeat_vector_values_contract_and_errors() -> None:
    rv = RepeatVector(3, dtype="float64")
    y = rv.predict(np.array([[1.0, 2.0]]))
    np.testing.assert_array_equal(y, [[[1.0, 2.0]] * 3])
    ctx = rk.Ctx.training()
    rv.forward(np.array([[1.0, 2.0]]), ctx)
    g = np.arange(6.0).reshape(1, 3, 2)
    np.testing.assert_array_equal(rv.backward(g, ctx), [[0 + 2 + 4, 1 + 3 + 5]])
    check_layer(lambda dt: RepeatVector(3, dtype=dt), lambda r: r.standard_normal((2, 4)))
    assert rv.compute_output_shape((None, 5)) == (None, 3, 5)
    with pytest.raises(rk.InvalidInputError, match="rank-2"):
        rv.predict(np.zeros((2, 3, 4)))


def test_reverse_values_contract_and_rank2_refusal() -> None:
    x = np.arange(12.0).reshape(1, 3, 4)
    np.testing.assert_array_equal(Reverse(1).predict(x)[0], x[0, ::-1])
    np.testing.assert_array_equal(Reverse(-1).predict(x)[0], x[0, :, ::-1])
    check_layer(lambda dt: Reverse(1, dtype=dt), lambda r: r.standard_normal((2, 4, 3)))
    # a rank-2 (batch, units) state is refused, at build and at forward
    with pytest.raises(rk.InvalidInputError, match=r"rank >= 3.*\(None, 8\)"):
        Reverse(1).build((None, 8))
    with pytest.raises(rk.InvalidInputError, match=r"rank 2"):
        Reverse(1).predict(np.zeros((2, 8)))
    with pytest.raises(rk.InvalidInputError, match="batch axis"):
        Reverse(0).predict(x)
    with pytest.raises(rk.InvalidInputError, match="out of range"):
        Reverse(3).predict(x)


def test_concatenate_values_gradcheck_and_errors() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 4))
    cat = Concatenate(-1, dtype="float64")
    assert cat.compute_output_shape([(None, 3, 2), (None, None, 4)]) == (None, 3, 6)
    y = cat.predict([a, b])
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=-1))
    G = rng.standard_normal(y.shape)
    ctx = rk.Ctx.training()
    cat.forward([a, b], ctx)
    ga, gb = cat.backward(G, ctx)
    np.testing.assert_array_equal(ga, G[..., :2])
    np.testing.assert_array_equal(gb, G[..., 2:])
    # finite differences through the list input: L = sum(y * G) is linear, so dL/da = G[..., :2]
    eps = 1e-6
    a2 = a.copy()
    a2[1, 2, 1] += eps
    num = (np.sum(cat.predict([a2, b]) * G) - np.sum(y * G)) / eps
    assert abs(num - G[1, 2, 1]) < 1e-6
    with pytest.raises(rk.InvalidInputError, match="axis 1 differs"):
        cat.compute_output_shape([(None, 3, 2), (None, 4, 2)])
    with pytest.raises(rk.InvalidInputError, match="same rank"):
        cat.predict([a, np.zeros((2, 3))])
    with pytest.raises(rk.InvalidInputError, match="list"):
        cat.predict(a)
    with pytest.raises(rk.InvalidInputError, match="batch axis"):
        Concatenate(0).predict([a, a])


def test_dropout_inverted_masks_from_ctx_and_identity_in_inference() -> None:
    x = np.ones((200, 50))
    d = Dropout(0.25, dtype="float64")
    np.testing.assert_array_equal(d.predict(x), x)
    y1 = d.forward(x, rk.Ctx.training(seed=3))
    y2 = d.forward(x, rk.Ctx.training(seed=3))
    np.testing.assert_array_equal(y1, y2)  # the mask comes from ctx.rng only
    assert set(np.unique(y1)) == {0.0, 1.0 / 0.75}
    assert abs((y1 == 0).mean() - 0.25) < 0.01
    ctx = rk.Ctx.training(seed=3)
    d.forward(x, ctx)
    G = np.random.default_rng(1).standard_normal(x.shape)
    np.testing.assert_array_equal(d.backward(G, ctx), G * (y1 / x))
    # gradcheck with a fixed mask: the same seeded Ctx makes the pass deterministic
    small = np.random.default_rng(2).standard_normal((3, 4))
    d2 = Dropout(0.5, dtype="float64")
    ctx = rk.Ctx.training(seed=9)
    ys = d2.forward(small, ctx)
    gs = d2.backward(np.ones_like(ys), ctx)
    assert rel_err(gs, ys / small) < 1e-15
    with pytest.raises(rk.InvalidParameterError, match="rate"):
        Dropout(1.0)
    with pytest.raises(rk.ForwardPassNotRunError):
        d.backward(G, rk.Ctx.training())


def test_harness_gradcheck_of_dense_on_rank3_reports_small_errors() -> None:
    d = Dense(3, "tanh", seed=2, dtype="float64")
    d.build((None, 2, 4))
    errs = assert_gradcheck(d, np.random.default_rng(0).standard_normal((2, 2, 4)), rtol=1e-7)
    assert set(errs) == {"input", "kernel", "bias"}


@pytest.mark.parametrize("layer", [
    Dense(3, rk.Softmax(axis=1), use_bias=False, seed=4), ActivationLayer("relu"), RepeatVector(2),
    Reverse(-2), Concatenate(1), Dropout(0.1), rk.LSTM(4, return_sequences=True, seed=3),
    rk.GRU(2, reset_after=True, go_backwards=True), rk.SimpleRNN(3, "relu"),
])
def test_registry_round_trip(layer: rk.Layer) -> None:
    cfg = layer_to_config(layer)
    import json
    again = layer_from_config(json.loads(json.dumps(cfg)))
    assert type(again) is type(layer) and layer_to_config(again) == cfg


def test_registry_errors_name_the_class() -> None:
    with pytest.raises(rk.InvalidInputError, match="'Conv1DTranspose'"):
        layer_from_config({"class_name": "Conv1DTranspose", "config": {}})
    with pytest.raises(rk.InvalidInputError, match="Dense"):
        layer_from_config({"class_name": "Dense", "config": {"unitz": 3}})
