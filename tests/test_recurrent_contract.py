"""The recurrent-layer contract and its traps, value by value.

Four headline tests come first; then one test per trap, every documented error, and the
surface (param_count, weights(), chainables, input_dim=, forward_mut, dtype,
zero_state/step/seq/seq_init).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk

LAYERS = {"SimpleRNN": rk.SimpleRNN, "LSTM": rk.LSTM, "GRU": rk.GRU}
GATES = {"SimpleRNN": 1, "LSTM": 4, "GRU": 3}


def _sig(a: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-a))


def _built(cls: Any, units: int = 3, F: int = 4, T: int | None = 5, **kw: Any) -> Any:
    layer = cls(units, **kw)
    layer.build(rk.Shape((None, T, F)))
    return layer


def _gru_triples(F: int, H: int, seed: int) -> list[np.ndarray]:
    """(reset, update, candidate) x (kernel, recurrent_kernel, bias), random."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for _ in range(3):
        out += [rng.uniform(-0.8, 0.8, (F, H)), rng.uniform(-0.8, 0.8, (H, H)),
                rng.uniform(-0.5, 0.5, (1, H))]
    return out


# -- the headline tests ------------------------------------------------------------------------

def test_lstm_forget_bias_is_one_not_zero() -> None:
    H, F, T = 3, 2, 6
    layer = rk.LSTM(H, seed=4, dtype="float64")
    layer.build(rk.Shape((None, T, F)))
    b = layer.weight("bias")
    np.testing.assert_array_equal(b[0, H:2 * H], np.ones(H))
    np.testing.assert_array_equal(np.delete(b[0], np.s_[H:2 * H]), np.zeros(3 * H))
    # behaviour: only the cell block reads the input (feature 0), only at step 0; the cell
    # then decays by f = sigmoid(1.0) per step, and h_T = sigmoid(0) * tanh(c_T)
    kernel = np.zeros((F, 4 * H))
    kernel[0, 2 * H:3 * H] = [1.0, -0.5, 2.0]
    layer.set_weights(kernel, np.zeros((H, 4 * H)), b)
    x = np.zeros((1, T, F))
    x[0, 0, 0] = 0.8
    c = 0.5 * np.tanh(0.8 * np.array([1.0, -0.5, 2.0])) * _sig(1.0) ** (T - 1)
    np.testing.assert_allclose(layer.predict(x)[0], 0.5 * np.tanh(c), rtol=1e-13)
    zero_forget = 0.5 * np.tanh(0.5 * np.tanh(0.8 * np.array([1.0, -0.5, 2.0])) * 0.5 ** (T - 1))
    assert np.max(np.abs(layer.predict(x)[0] - zero_forget)) > 1e-2


def test_gru_update_gate_one_keeps_previous_hidden() -> None:
    F, H = 3, 4
    t = _gru_triples(F, H, 1)
    t[5] = np.full((1, H), 40.0)  # update bias: z = sigmoid(40 + ...) = 1 - 4e-18
    t[3] = np.zeros((F, H))       # update kernel
    t[4] = np.zeros((H, H))       # update recurrent kernel
    layer = rk.GRU(H, dtype="float64", return_sequences=True)
    layer.set_gate_weights(*t)
    h0 = np.random.default_rng(2).uniform(-1, 1, (2, H))
    x = np.random.default_rng(3).standard_normal((2, 5, F))
    seq, state = layer.seq_init(x, rk.GRUState(h0))
    for s in range(5):
        np.testing.assert_allclose(seq[:, s], h0, atol=1e-15)
    np.testing.assert_allclose(state.h, h0, atol=1e-15)
    # from the zero state the output stays exactly 0 whatever the input
    np.testing.assert_allclose(layer.predict(x), 0.0, atol=1e-15)


def test_gru_update_gate_zero_takes_the_candidate() -> None:
    F, H = 3, 4
    rk_, ru, rb, uk, uu, ub, ck, cu, cb = _gru_triples(F, H, 5)
    uk, uu, ub = np.zeros((F, H)), np.zeros((H, H)), np.full((1, H), -40.0)  # z = 4e-18
    layer = rk.GRU(H, dtype="float64", return_sequences=True)
    layer.set_gate_weights(rk_, ru, rb, uk, uu, ub, ck, cu, cb)
    h = np.random.default_rng(6).uniform(-1, 1, (2, H))
    x = np.random.default_rng(7).standard_normal((2, 4, F))
    seq, _ = layer.seq_init(x, rk.GRUState(h))
    for s in range(4):  # h_t = n_t = tanh(x W_h + (r * h_prev) U_h + b_h)
        r = _sig(x[:, s] @ rk_ + h @ ru + rb)
        h = np.tanh(x[:, s] @ ck + (r * h) @ cu + cb)
        np.testing.assert_allclose(seq[:, s], h, atol=1e-14)


def test_gru_fused_kernel_first_block_is_the_update_gate() -> None:
    F, H = 2, 3
    t = _gru_triples(F, H, 9)
    layer = rk.GRU(H, dtype="float64")
    layer.set_gate_weights(*t)  # (reset, update, candidate)
    reset, update, cand = t[0:3], t[3:6], t[6:9]
    for k, name in enumerate(("kernel", "recurrent_kernel", "bias")):
        w = layer.weight(name)
        np.testing.assert_array_equal(w[:, :H], update[k])       # [z | r | h]
        np.testing.assert_array_equal(w[:, H:2 * H], reset[k])
        np.testing.assert_array_equal(w[:, 2 * H:], cand[k])
    # behaviour: a +40 bias in the FIRST fused block freezes the state; in the second it does not
    x = np.random.default_rng(1).standard_normal((2, 4, F))
    h0 = rk.GRUState(np.random.default_rng(2).uniform(-1, 1, (2, H)))
    for block, frozen in ((0, True), (1, False)):
        k, u, b = (np.array(layer.weight(n)) for n in ("kernel", "recurrent_kernel", "bias"))
        k[:, block * H:(block + 1) * H] = 0.0
        u[:, block * H:(block + 1) * H] = 0.0
        b[:, block * H:(block + 1) * H] = 40.0
        probe = rk.GRU(H, dtype="float64")
        probe.set_weights(k, u, b)
        _, st = probe.seq_init(x, h0)
        assert np.allclose(st.h, h0.h, atol=1e-14) is frozen


# -- one test per trap ------------------------------------------------------------------------

def test_trap_gru_set_gate_weights_order_is_reset_update_candidate() -> None:
    F, H = 2, 2
    marks = [np.full(s, float(v)) for v, s in zip(range(1, 10), [(F, H), (H, H), (1, H)] * 3, strict=True)]
    layer = rk.GRU(H)
    layer.set_gate_weights(*marks)  # reset = 1,2,3 ; update = 4,5,6 ; candidate = 7,8,9
    np.testing.assert_array_equal(layer.weight("kernel")[0], [4, 4, 1, 1, 7, 7])
    np.testing.assert_array_equal(layer.weight("recurrent_kernel")[0], [5, 5, 2, 2, 8, 8])
    np.testing.assert_array_equal(layer.weight("bias")[0], [6, 6, 3, 3, 9, 9])
    lstm = rk.LSTM(1)
    lstm.set_gate_weights(*[np.full(s, float(v)) for v, s in
                            zip(range(1, 13), [(F, 1), (1, 1), (1, 1)] * 4, strict=True)])
    np.testing.assert_array_equal(lstm.weight("kernel")[0], [1, 4, 7, 10])  # [i | f | g | o]
    np.testing.assert_array_equal(lstm.weight("bias")[0], [3, 6, 9, 12])


def test_trap_gru_z_near_one_keeps_state_keras_convention() -> None:
    """One step by hand: h = z * h_prev + (1 - z) * n, NOT (1 - z) * h_prev + z * n."""
    H = 2
    layer = rk.GRU(H, dtype="float64")
    k = np.zeros((1, 3 * H))
    b = np.zeros((1, 3 * H))
    b[0, :H] = np.log(0.9 / 0.1)           # z = 0.9
    b[0, 2 * H:] = [0.3, -0.2]             # n = tanh(b_h) (U_h acts on r * h_prev)
    layer.set_weights(k, np.zeros((H, 3 * H)), b)
    h_prev = np.array([[0.5, -0.7]])
    h = layer.step(np.zeros((1, 1)), rk.GRUState(h_prev)).h
    np.testing.assert_allclose(h, 0.9 * h_prev + 0.1 * np.tanh([[0.3, -0.2]]), rtol=1e-14)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trap_lstm_forget_bias_one_rest_zero(seed: int, dtype: str) -> None:
    H = 5
    b = _built(rk.LSTM, H, F=3, seed=seed, dtype=dtype).weight("bias")
    assert b.shape == (1, 4 * H) and b.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(b[0], np.r_[np.zeros(H), np.ones(H), np.zeros(2 * H)])
    for cls, kw in ((rk.GRU, {}), (rk.GRU, {"reset_after": True}), (rk.SimpleRNN, {})):
        assert not np.any(_built(cls, H, F=3, seed=seed, **kw).weight("bias"))


@pytest.mark.parametrize("name", list(LAYERS))
def test_trap_glorot_per_gate_fan_and_orthogonal_blocks(name: str) -> None:
    F, H = 4, 8
    G = GATES[name]
    layer = _built(LAYERS[name], H, F=F, seed=13, dtype="float64")
    W, U = layer.weight("kernel"), layer.weight("recurrent_kernel")
    per_gate, fused = np.sqrt(6 / (F + H)), np.sqrt(6 / (F + G * H))
    assert np.max(np.abs(W)) <= per_gate
    for k in range(G):  # every gate block reaches the per-gate limit, beyond any fused one
        blk = W[:, k * H:(k + 1) * H]
        assert np.max(np.abs(blk)) > 0.85 * per_gate
        assert np.max(np.abs(blk)) > 1.2 * fused or G == 1
        Uk = U[:, k * H:(k + 1) * H]
        np.testing.assert_allclose(Uk.T @ Uk, np.eye(H), atol=1e-12)
        np.testing.assert_allclose(Uk @ Uk.T, np.eye(H), atol=1e-12)
        for j in range(k):  # independent draws
            assert np.max(np.abs(Uk - U[:, j * H:(j + 1) * H])) > 0.1
    assert abs(np.var(W) - per_gate ** 2 / 3) < 0.35 * per_gate ** 2 / 3


@pytest.mark.parametrize("kw", [{"cls": rk.SimpleRNN}, {"cls": rk.LSTM}, {"cls": rk.GRU},
                                {"cls": rk.GRU, "reset_after": True}])
def test_trap_go_backwards_return_sequences_processing_order(kw: dict[str, Any]) -> None:
    kw = dict(kw)
    cls = kw.pop("cls")
    x = np.random.default_rng(0).standard_normal((2, 5, 4))
    back = _built(cls, seed=7, return_sequences=True, go_backwards=True, **kw)
    fwd = _built(cls, seed=7, return_sequences=True, **kw)
    ys = back.predict(x)
    # processing order == a forward-direction layer on the flipped input, slot for slot
    np.testing.assert_array_equal(ys, fwd.predict(x[:, ::-1]))
    # slot 0 depends on the LAST input step only
    x2 = x.copy()
    x2[:, :-1] += 1.0
    np.testing.assert_array_equal(back.predict(x2)[:, 0], ys[:, 0])
    assert np.max(np.abs(back.predict(x2)[:, 1] - ys[:, 1])) > 1e-3
    # not flipped back into input order
    assert np.max(np.abs(ys - fwd.predict(x)[:, ::-1])) > 1e-3
    # without return_sequences: the state after input step 0
    last = _built(cls, seed=7, go_backwards=True, **kw)
    np.testing.assert_array_equal(last.predict(x), ys[:, -1])


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("shape", [(5, 4), (2, 5, 4, 1), (20,), (1, 2, 5, 4)])
def test_trap_non_3d_input_refused_never_reshaped(name: str, shape: tuple[int, ...]) -> None:
    layer = _built(LAYERS[name], T=None)
    x = np.zeros(shape)
    for call in (layer.predict, lambda a: layer.forward(a, rk.Ctx.training()),
                 lambda a: layer.forward_mut(a, rk.Ctx.inference()), layer.seq):
        with pytest.raises(rk.InvalidInputError, match=name) as e:
            call(x)
        assert str(shape) in str(e.value) and "3D" in str(e.value)
    unbuilt = LAYERS[name](3)
    with pytest.raises(rk.InvalidInputError, match=name):
        unbuilt.forward_mut(x, rk.Ctx.inference())
    with pytest.raises(rk.InvalidInputError, match=name):
        unbuilt.build(rk.Shape.with_free_batch(shape))
    assert not unbuilt.built


@pytest.mark.parametrize("name", list(LAYERS))
def test_trap_two_layers_from_one_seed_draw_identical_weights(name: str) -> None:
    a = _built(LAYERS[name], 6, seed=21)
    rk.set_global_seed(99)  # the global stream does not touch a seeded layer
    b = LAYERS[name](6).with_random_state(21)
    b.build(rk.Shape.with_free_batch((2, 5, 4)))
    c = _built(LAYERS[name], 6, seed=22)
    for e in a.weights():
        np.testing.assert_array_equal(e.value, b.weight(e.name))
    assert not np.array_equal(a.weight("kernel"), c.weight("kernel"))
    assert not np.array_equal(a.weight("recurrent_kernel"), c.weight("recurrent_kernel"))


# -- every documented error ------------------------------------------------------------------

@pytest.mark.parametrize("name", list(LAYERS))
def test_invalid_parameters(name: str) -> None:
    cls = LAYERS[name]
    for units in (0, -1, 2.5, True, "3"):
        with pytest.raises(rk.InvalidParameterError, match=name):
            cls(units)
    with pytest.raises(rk.InvalidParameterError, match=f"{name}.*axis"):
        cls(3, rk.Softmax(axis=1))
    with pytest.raises(rk.InvalidParameterError, match=name):
        cls(3, rk.Softmax().with_axis(0))
    cls(3, rk.Softmax())  # the default axis -1 is accepted
    with pytest.raises(rk.InvalidParameterError, match="swish"):
        cls(3, "swish")
    with pytest.raises(rk.InvalidParameterError, match="dtype"):
        cls(3, dtype="float16")
    with pytest.raises(rk.InvalidParameterError):
        cls(3, seed=-1)
    assert issubclass(rk.InvalidParameterError, rk.Error)


@pytest.mark.parametrize("name", list(LAYERS))
def test_invalid_inputs_name_expected_and_got(name: str) -> None:
    layer = _built(LAYERS[name], F=4, T=None)
    with pytest.raises(rk.InvalidInputError, match=rf"{name}.*4 features.*\(2, 5, 3\)"):
        layer.predict(np.zeros((2, 5, 3)))
    with pytest.raises(rk.InvalidInputError, match=name):
        layer.predict(np.zeros((2, 0, 4)))
    with pytest.raises(rk.InvalidInputError, match=name):
        layer.predict(np.array([["a"]]))
    fixed = _built(LAYERS[name], F=4, T=5)
    with pytest.raises(rk.InvalidInputError, match="5 timesteps"):
        fixed.predict(np.zeros((2, 6, 4)))
    ctx = rk.Ctx.training()
    layer.forward(np.zeros((2, 5, 4)), ctx)
    with pytest.raises(rk.InvalidInputError, match=r"\(2, 3\)"):
        layer.backward(np.zeros((2, 5, 3)), ctx)
    assert issubclass(rk.InvalidInputError, rk.Error)


@pytest.mark.parametrize("name", list(LAYERS))
def test_backward_before_forward(name: str) -> None:
    layer = _built(LAYERS[name])
    with pytest.raises(rk.ForwardPassNotRunError) as e:
        layer.backward(np.zeros((2, 3)), rk.Ctx.training())
    assert e.value.layer == name and name in str(e.value)
    ctx = rk.Ctx.inference()
    layer.forward(np.zeros((2, 5, 4)), ctx)
    with pytest.raises(rk.ForwardPassNotRunError, match="inference") as e:
        layer.backward(np.zeros((2, 3)), ctx)
    assert e.value.layer == name
    ctx = rk.Ctx.training()  # one forward allows one backward
    layer.forward(np.zeros((2, 5, 4)), ctx)
    layer.backward(np.zeros((2, 3)), ctx)
    with pytest.raises(rk.ForwardPassNotRunError):
        layer.backward(np.zeros((2, 3)), ctx)
    assert issubclass(rk.ForwardPassNotRunError, rk.Error)


@pytest.mark.parametrize("name", list(LAYERS))
def test_weight_shape_errors(name: str) -> None:
    F, H, G = 4, 3, GATES[name]
    layer = _built(LAYERS[name], H, F=F)
    before = [np.array(e.value) for e in layer.weights()]
    good = [np.zeros((F, G * H)), np.zeros((H, G * H)), np.zeros((1, G * H))]
    for k, (nm, bad) in enumerate((("kernel", (F + 1, G * H)), ("recurrent_kernel", (H, G * H + 1)),
                                   ("bias", (G * H,)))):
        args = list(good)
        args[k] = np.zeros(bad)
        with pytest.raises(rk.WeightShapeError) as e:
            layer.set_weights(*args)
        assert (e.value.name, tuple(e.value.expected), tuple(e.value.got)) == (nm, good[k].shape, bad)
        assert name in str(e.value)
    for e_, b in zip(layer.weights(), before, strict=True):  # a refused call changes nothing
        np.testing.assert_array_equal(e_.value, b)
    with pytest.raises(rk.WeightShapeError) as e:
        layer.set_weight("kernel", np.zeros((F, G * H + 1)))
    assert e.value.expected == (F, G * H) and e.value.got == (F, G * H + 1)
    assert issubclass(rk.WeightShapeError, rk.Error)


def test_set_gate_weights_shape_errors() -> None:
    F, H = 3, 2
    t = _gru_triples(F, H, 0)
    t[4] = np.zeros((H, H + 1))  # the update gate's recurrent kernel
    gru = rk.GRU(H)
    with pytest.raises(rk.WeightShapeError) as e:
        gru.set_gate_weights(*t)
    assert e.value.name == "update.recurrent_kernel"
    assert (tuple(e.value.expected), tuple(e.value.got)) == ((H, H), (H, H + 1))
    assert not gru.built
    lstm = _built(rk.LSTM, H, F=F)
    arrays = [np.zeros(s) for s in [(F, H), (H, H), (1, H)] * 4]
    arrays[6] = np.zeros((F + 1, H))  # the cell gate's kernel
    with pytest.raises(rk.WeightShapeError) as e:
        lstm.set_gate_weights(*arrays)
    assert e.value.name == "cell.kernel" and tuple(e.value.expected) == (F, H)
    with pytest.raises(rk.InvalidInputError, match="12"):
        lstm.set_gate_weights(*arrays[:9])
    with pytest.raises(rk.InvalidInputError, match="9"):
        gru.set_gate_weights(*t[:6])
