"""The recurrent layers' API surface:
param_count, weights(), the chainable builders, ``input_dim=``, ``forward_mut``, ``dtype``,
``zero_state / step / seq / seq_init``, and what a pass may not share with the caller."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk

LAYERS = {"SimpleRNN": rk.SimpleRNN, "LSTM": rk.LSTM, "GRU": rk.GRU}
KINDS: list[tuple[str, dict[str, Any]]] = [("SimpleRNN", {}), ("LSTM", {}), ("GRU", {}),
                                          ("GRU", {"reset_after": True})]
IDS = ["SimpleRNN", "LSTM", "GRU", "GRU_reset_after"]


@pytest.mark.parametrize("F,H", [(1, 1), (4, 8), (7, 3)])
def test_param_count_formulas(F: int, H: int) -> None:
    per = F * H + H * H + H
    expected = {"SimpleRNN": per, "LSTM": 4 * per, "GRU": 3 * per}
    for name, cls in LAYERS.items():
        layer = cls(H)
        assert layer.param_count() == 0
        layer.build(rk.Shape.with_free_batch((2, 5, F)))
        assert layer.param_count() == expected[name]
    gru_ra = rk.GRU(H, reset_after=True, input_dim=F)
    assert gru_ra.param_count() == 3 * per + 3 * H


@pytest.mark.parametrize("name,kw", KINDS, ids=IDS)
def test_weights_names_order_shapes_and_read_only_views(name: str, kw: dict[str, Any]) -> None:
    F, H = 4, 8
    G = {"SimpleRNN": 1, "LSTM": 4, "GRU": 3}[name]
    layer = LAYERS[name](H, seed=1, **kw)
    layer.build(rk.Shape.with_free_batch((2, 5, F)))
    entries = layer.weights()
    assert [e.name for e in entries] == ["kernel", "recurrent_kernel", "bias"]
    rows = 2 if kw.get("reset_after") else 1
    assert [e.value.shape for e in entries] == [(F, G * H), (H, G * H), (rows, G * H)]
    for e in entries:
        assert e.value is layer.weight(e.name)  # the live array, not a copy
        with pytest.raises(ValueError):
            e.value[...] = 0.0
    new = np.full((F, G * H), 0.25)
    layer.set_weight("kernel", new)
    np.testing.assert_array_equal(layer.weight("kernel"), new)
    with pytest.raises(KeyError, match="kernel.*recurrent_kernel"):
        layer.weight("embeddings")


def test_chainable_builders_return_the_layer_and_match_keywords() -> None:
    for cls in LAYERS.values():
        layer = cls(3)
        assert layer.with_random_state(5) is layer
        assert layer.with_return_sequences(True) is layer
        assert layer.with_go_backwards(True) is layer
        assert (layer.seed, layer.return_sequences, layer.go_backwards) == (5, True, True)
        kw = cls(3, seed=5, return_sequences=True, go_backwards=True)
        x = np.random.default_rng(0).standard_normal((2, 4, 2))
        ya, yb = layer.forward_mut(x, rk.Ctx.inference()), kw.forward_mut(x, rk.Ctx.inference())
        np.testing.assert_array_equal(ya, yb)
        assert layer.with_return_sequences(False) is layer and not layer.return_sequences


def test_with_random_state_on_a_built_layer_redraws() -> None:
    layer = rk.LSTM(3, seed=1, input_dim=2)
    other = rk.LSTM(3, seed=2, input_dim=2)
    layer.with_random_state(2)
    np.testing.assert_array_equal(layer.weight("kernel"), other.weight("kernel"))


@pytest.mark.parametrize("name", list(LAYERS))
def test_input_dim_builds_at_once_and_predict(name: str) -> None:
    layer = LAYERS[name](3, input_dim=4, seed=0)
    assert layer.built and layer.input_shape == rk.Shape((None, None, 4))
    x = np.random.default_rng(1).standard_normal((2, 6, 4))
    y = layer.predict(x)
    assert y.shape == (2, 3)
    np.testing.assert_array_equal(y, layer.forward(x, rk.Ctx.inference()))
    assert layer.predict(x[:, :2]).shape == (2, 3)  # any number of timesteps
    with pytest.raises(rk.InvalidParameterError, match="input_dim"):
        LAYERS[name](3, input_dim=0)


@pytest.mark.parametrize("name", list(LAYERS))
def test_forward_mut_builds_forward_does_not(name: str) -> None:
    x = np.random.default_rng(2).standard_normal((2, 5, 4))
    layer = LAYERS[name](3, seed=3)
    with pytest.raises(rk.NotBuiltError, match=name):
        layer.forward(x, rk.Ctx.inference())
    y = layer.forward_mut(x, rk.Ctx.inference())
    assert layer.built and layer.input_shape == rk.Shape((None, 5, 4))
    ref = LAYERS[name](3, seed=3)
    ref.build(rk.Shape.with_free_batch(x.shape))
    np.testing.assert_array_equal(y, ref.predict(x))
    assert layer.compute_output_shape(rk.Shape((None, 5, 4))) == rk.Shape((None, 3))
    assert layer.with_return_sequences(True).compute_output_shape((None, 5, 4)) == (None, 5, 3)


@pytest.mark.parametrize("name,kw", KINDS, ids=IDS)
def test_dtypes(name: str, kw: dict[str, Any]) -> None:
    x = np.random.default_rng(4).standard_normal((2, 5, 4))
    outs = {}
    for dtype in ("float32", "float64", np.float32, np.float64):
        layer = LAYERS[name](3, seed=6, dtype=dtype, return_sequences=True, input_dim=4, **kw)
        assert all(e.value.dtype == np.dtype(dtype) for e in layer.weights())
        ctx = rk.Ctx.training()
        y = layer.forward(x, ctx)  # float64 input to a float32 layer: converted, float32 out
        assert y.dtype == np.dtype(dtype)
        assert layer.backward(np.ones_like(y), ctx).dtype == np.dtype(dtype)
        assert ctx.grad(layer, "kernel").dtype == np.dtype(dtype)
        outs[np.dtype(dtype).name] = y
    assert np.max(np.abs(outs["float32"] - outs["float64"])) < 1e-5


@pytest.mark.parametrize("name,kw", KINDS, ids=IDS)
def test_step_loop_equals_seq_equals_forward(name: str, kw: dict[str, Any]) -> None:
    """``zero_state / step / seq / seq_init`` on a layer built with a fixed time axis of 5."""
    x = np.random.default_rng(8).standard_normal((2, 5, 4))
    layer = LAYERS[name](3, seed=9, return_sequences=True, dtype="float64", **kw)
    layer.build(rk.Shape.with_free_batch((2, 5, 4)))
    full = layer.predict(x)
    seq, final = layer.seq(x)
    np.testing.assert_array_equal(seq, full)
    state = layer.zero_state(2)
    hs = []
    for t in range(5):
        state = layer.step(x[:, t], state)
        hs.append(state.h)
    np.testing.assert_allclose(np.stack(hs, 1), full, rtol=0, atol=1e-15)
    last = final.h
    np.testing.assert_array_equal(last, full[:, -1])
    if name == "LSTM":
        assert isinstance(final, rk.LSTMState) and final.c.shape == (2, 3)
        assert np.max(np.abs(final.c - final.h)) > 1e-3  # the cell state is its own array
        h, c = final                                      # a named tuple: unpackable
        assert h is final.h and c is final.c
    elif name == "GRU":
        assert type(final) is rk.GRUState and final.value is final.h  # .value: a second name of h
    else:
        assert type(final) is rk.SimpleRNNState  # no cell returns another cell's state type
        (h,) = final
        assert h is final.h


@pytest.mark.parametrize("name,kw", KINDS, ids=IDS)
def test_seq_init_continues_a_split_sequence(name: str, kw: dict[str, Any]) -> None:
    x = np.random.default_rng(10).standard_normal((3, 7, 2))
    layer = LAYERS[name](4, seed=11, dtype="float64", input_dim=2, **kw)
    whole, fin = layer.seq(x)
    first, mid = layer.seq(x[:, :3])
    second, fin2 = layer.seq_init(x[:, 3:], mid)
    np.testing.assert_allclose(np.concatenate([first, second], 1), whole, atol=1e-15)
    get = (lambda s: (s.h, s.c)) if name == "LSTM" else (lambda s: (s.h,))
    for a, b in zip(get(fin2), get(fin), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-15)
    zero = layer.zero_state(3)
    for a in get(zero):
        np.testing.assert_array_equal(a, np.zeros((3, 4)))
    np.testing.assert_array_equal(layer.seq_init(x, zero)[0], whole)
    with pytest.raises(rk.InvalidInputError, match="state"):
        layer.seq_init(x, layer.zero_state(2))


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("B,T", [(1, 4), (3, 1), (1, 1)])
def test_output_is_not_a_view_of_the_training_cache(name: str, B: int, T: int) -> None:
    """A caller that edits the output in place cannot corrupt the backward pass."""
    x = np.random.default_rng(12).standard_normal((B, T, 2))
    for rs in (False, True):
        layer = LAYERS[name](3, seed=13, dtype="float64", return_sequences=rs, input_dim=2)
        G = np.random.default_rng(14).standard_normal(layer.predict(x).shape)
        ref = rk.Ctx.training()
        layer.forward(x, ref)
        dx_ref = layer.backward(G, ref)
        ctx = rk.Ctx.training()
        y = layer.forward(x, ctx)
        y[...] = 7.0
        np.testing.assert_array_equal(layer.backward(G, ctx), dx_ref)
        for n in ("kernel", "recurrent_kernel", "bias"):
            np.testing.assert_array_equal(ctx.grad(layer, n), ref.grad(layer, n))


def test_gru_reset_after_gate_weights_and_config() -> None:
    """``reset_after=True``: each gate's bias is (2, H) (input row, recurrent row), fused
    ``[z | r | h]`` into the (2, 3H) bias; the recurrent row enters inside the reset product."""
    F, H = 2, 2
    rng = np.random.default_rng(3)
    t = [rng.uniform(-1, 1, s) for s in [(F, H), (H, H), (2, H)] * 3]  # reset, update, candidate
    layer = rk.GRU(H, reset_after=True, dtype="float64")
    layer.set_gate_weights(*t)
    np.testing.assert_array_equal(layer.weight("bias"), np.concatenate([t[5], t[2], t[8]], axis=1))
    assert layer.get_config()["reset_after"] is True and rk.GRU(2).get_config()["reset_after"] is False
    x = rng.standard_normal((1, 1, F))
    h0 = rng.uniform(-1, 1, (1, H))
    sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    r = sig(x[0] @ t[0] + t[2][0] + h0 @ t[1] + t[2][1])
    z = sig(x[0] @ t[3] + t[5][0] + h0 @ t[4] + t[5][1])
    n = np.tanh(x[0] @ t[6] + t[8][0] + r * (h0 @ t[7] + t[8][1]))
    _, st = layer.seq_init(x, rk.GRUState(h0))
    np.testing.assert_allclose(st.h, z * h0 + (1 - z) * n, rtol=1e-14)
    with pytest.raises(rk.WeightShapeError) as e:
        rk.GRU(H, reset_after=True).set_gate_weights(*t[:8], np.zeros((1, H)))
    assert e.value.name == "candidate.bias" and tuple(e.value.expected) == (2, H)
