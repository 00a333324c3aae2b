"""Contract audit (names and signatures, traps, reliability) for single layers, checked with numbers:

- every activation spelling (string, ``Activation`` member, wrapper object) works wherever an
  activation is accepted, and gives the equations' values;
- ``Softmax(axis != -1)`` is refused by every recurrent layer, accepted by Dense;
- ``seed=`` and ``.with_random_state(seed)`` draw the same weights on every layer with weights;
- ``dtype=`` on every layer (float32 default);
- ``weights()`` / ``weight(name)`` hand out read-only arrays that cannot be made writeable;
- ``compute_output_shape`` agrees with ``forward``;
- wrong-rank / wrong-width inputs to every layer raise ``InvalidInputError`` naming what was
  expected and what was given (nothing reshaped).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import rnn

B, T, F, H = 2, 3, 4, 3

SPELLINGS: dict[str, list[Any]] = {
    "tanh": ["tanh", "TANH", rk.Activation.TANH, rk.Tanh()],
    "sigmoid": ["sigmoid", "Sigmoid", rk.Activation.SIGMOID, rk.Sigmoid()],
    "relu": ["relu", "RELU", rk.Activation.RELU, rk.ReLU()],
    "linear": ["linear", "Linear", rk.Activation.LINEAR, rk.Linear()],
    "softmax": ["softmax", "SOFTMAX", rk.Activation.SOFTMAX, rk.Softmax(), rk.Softmax(axis=-1),
                rk.Softmax().with_axis(-1)],
}


def _act(name: str) -> Callable[[np.ndarray], np.ndarray]:
    if name == "tanh":
        return np.tanh
    if name == "sigmoid":
        return lambda a: 1.0 / (1.0 + np.exp(-a))
    if name == "relu":
        return lambda a: np.maximum(a, 0.0)
    if name == "linear":
        return lambda a: a

    def softmax(a: np.ndarray) -> np.ndarray:
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    return softmax


def _sig(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def _reference(cell: str, act: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
               W: np.ndarray, U: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cells' equations (GRU reset_after=False) as a float64 loop."""
    h = np.zeros((x.shape[0], H))
    c = np.zeros_like(h)
    for t in range(x.shape[1]):
        xw = x[:, t] @ W + b[0]
        if cell == "SimpleRNN":
            h = act(xw + h @ U)
        elif cell == "LSTM":
            a = xw + h @ U
            i, f, g, o = _sig(a[:, :H]), _sig(a[:, H:2 * H]), act(a[:, 2 * H:3 * H]), _sig(a[:, 3 * H:])
            c = f * c + i * g
            h = o * act(c)
        else:
            z = _sig(xw[:, :H] + h @ U[:, :H])
            r = _sig(xw[:, H:2 * H] + h @ U[:, H:2 * H])
            n = act(xw[:, 2 * H:] + (r * h) @ U[:, 2 * H:])
            h = z * h + (1.0 - z) * n
    return h


RECURRENT = {"SimpleRNN": rk.SimpleRNN, "LSTM": rk.LSTM, "GRU": rk.GRU}


@pytest.mark.parametrize("act_name", list(SPELLINGS))
@pytest.mark.parametrize("cell", list(RECURRENT))
def test_every_activation_spelling_in_every_recurrent_layer_gives_the_equations(
    cell: str, act_name: str
) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, T, F))
    outs = []
    for spelling in SPELLINGS[act_name]:
        layer = RECURRENT[cell](H, spelling, seed=3, dtype="float64", input_dim=F)
        assert layer.activation.name == act_name
        outs.append(layer.predict(x))
    kw = {"activation": SPELLINGS[act_name][2]}  # keyword form too
    outs.append(RECURRENT[cell](H, seed=3, dtype="float64", input_dim=F, **kw).predict(x))
    layer = RECURRENT[cell](H, act_name, seed=3, dtype="float64", input_dim=F)
    want = _reference(cell, _act(act_name), x, layer.weight("kernel"), layer.weight("recurrent_kernel"),
                      layer.weight("bias"))
    for y in outs:
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("act_name", list(SPELLINGS))
def test_every_activation_spelling_in_dense_and_activation_layer(act_name: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((B, F))
    ref_dense = rk.Dense(H, seed=4, dtype="float64")
    ref_dense.build((None, F))
    want = _act(act_name)(x @ ref_dense.weight("kernel") + ref_dense.weight("bias"))
    for spelling in SPELLINGS[act_name]:
        d = rk.Dense(H, spelling, seed=4, dtype="float64")
        np.testing.assert_allclose(d.forward_mut(x, rk.Ctx.inference()), want, rtol=1e-13, atol=1e-15)
        a = rk.ActivationLayer(spelling, dtype="float64")
        np.testing.assert_allclose(a.predict(x), _act(act_name)(x), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("make", [
    lambda a: rk.SimpleRNN(H, a), lambda a: rk.LSTM(H, a), lambda a: rk.GRU(H, a),
    lambda a: rk.GRU(H, a, reset_after=True), lambda a: rk.LSTM(H, activation=a, input_dim=F),
])
@pytest.mark.parametrize("axis", [0, 1, -2, 2])
def test_softmax_with_another_axis_is_refused_by_every_recurrent_layer(make: Any, axis: int) -> None:
    for sm in (rk.Softmax(axis=axis), rk.Softmax().with_axis(axis)):
        with pytest.raises(rk.InvalidParameterError, match=f"axis=-1.*got axis={axis}"):
            make(sm)


def test_dense_accepts_softmax_over_another_axis() -> None:
    x = np.random.default_rng(3).standard_normal((2, 5, 4))
    d = rk.Dense(3, rk.Softmax(axis=1), seed=1, dtype="float64")
    y = d.forward_mut(x, rk.Ctx.inference())
    a = x @ d.weight("kernel") + d.weight("bias")
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-13)


WEIGHTED: dict[str, tuple[Callable[..., Any], tuple[int | None, ...]]] = {
    "Dense": (lambda **kw: rk.Dense(H, **kw), (None, F)),
    "Embedding": (lambda **kw: rk.Embedding(10, H, **kw), (None, T)),
    "SimpleRNN": (lambda **kw: rk.SimpleRNN(H, **kw), (None, T, F)),
    "LSTM": (lambda **kw: rk.LSTM(H, **kw), (None, T, F)),
    "GRU": (lambda **kw: rk.GRU(H, **kw), (None, T, F)),
    "GRU_reset_after": (lambda **kw: rk.GRU(H, reset_after=True, **kw), (None, T, F)),
}


@pytest.mark.parametrize("name", list(WEIGHTED))
def test_seed_keyword_and_with_random_state_draw_the_same_weights(name: str) -> None:
    make, shape = WEIGHTED[name]
    a = make(seed=11)
    b = make().with_random_state(11)
    c = make(seed=12)
    built_then_seeded = make(seed=99)
    built_then_seeded.build(shape)
    built_then_seeded.with_random_state(11)  # a built layer redraws
    for layer in (a, b, c):
        layer.build(shape)
    assert type(b).__name__ == type(a).__name__  # with_random_state returns the layer
    for e in a.weights():
        np.testing.assert_array_equal(b.weight(e.name), e.value)
        np.testing.assert_array_equal(built_then_seeded.weight(e.name), e.value)
    assert any(not np.array_equal(c.weight(e.name), e.value) for e in a.weights())
    if name == "Embedding":
        t = a.weight("embeddings")
        assert t.min() >= -0.05 and t.max() <= 0.05 and t.std() > 0.01


ALL_LAYERS: dict[str, tuple[Callable[..., Any], Callable[[np.random.Generator], Any]]] = {
    "Dense": (lambda **kw: rk.Dense(H, "tanh", seed=1, **kw), lambda r: r.standard_normal((B, F))),
    "Embedding": (lambda **kw: rk.Embedding(10, H, seed=1, **kw),
                  lambda r: r.integers(0, 10, (B, T)).astype(float)),
    "SimpleRNN": (lambda **kw: rk.SimpleRNN(H, seed=1, **kw), lambda r: r.standard_normal((B, T, F))),
    "LSTM": (lambda **kw: rk.LSTM(H, seed=1, return_sequences=True, **kw),
             lambda r: r.standard_normal((B, T, F))),
    "GRU": (lambda **kw: rk.GRU(H, seed=1, go_backwards=True, **kw), lambda r: r.standard_normal((B, T, F))),
    "RepeatVector": (lambda **kw: rk.RepeatVector(3, **kw), lambda r: r.standard_normal((B, F))),
    "Reverse": (lambda **kw: rk.Reverse(1, **kw), lambda r: r.standard_normal((B, T, F))),
    "Dropout": (lambda **kw: rk.Dropout(0.5, **kw), lambda r: r.standard_normal((B, T, F))),
    "Activation": (lambda **kw: rk.ActivationLayer("sigmoid", **kw), lambda r: r.standard_normal((B, F))),
}


@pytest.mark.parametrize("name", list(ALL_LAYERS))
def test_dtype_on_every_layer_float32_by_default(name: str) -> None:
    make, data = ALL_LAYERS[name]
    x = data(np.random.default_rng(5))
    y_default = make().forward_mut(x, rk.Ctx.inference())
    y32 = make(dtype="float32").forward_mut(x, rk.Ctx.inference())
    y64 = make(dtype="float64").forward_mut(x, rk.Ctx.inference())
    assert make().dtype == np.float32 and y_default.dtype == np.float32 and y64.dtype == np.float64
    np.testing.assert_array_equal(y_default, y32)
    np.testing.assert_allclose(y32, y64, rtol=1e-5, atol=1e-6)  # one seed: the same weights
    with pytest.raises(rk.InvalidParameterError, match="float32.*float64.*float16"):
        make(dtype="float16")


def test_concatenate_takes_dtype() -> None:
    a, b = np.ones((2, 3)), np.zeros((2, 2))
    for dt in ("float32", "float64"):
        y = rk.Concatenate(-1, dtype=dt).forward([a, b], rk.Ctx.inference())
        assert y.dtype == np.dtype(dt)
        np.testing.assert_array_equal(y, [[1, 1, 1, 0, 0]] * 2)
    assert rk.Concatenate().dtype == np.float32


def _weighted_layers() -> list[Any]:
    out = []
    for make, shape in WEIGHTED.values():
        layer = make(seed=1)
        layer.build(shape)
        out.append(layer)
    out.append(rnn.lstm(3, 4, rnn.RNNConfig(num_layers=2), seed=1))
    out.append(rnn.gru(3, 4, seed=1))
    return out


@pytest.mark.parametrize("k", range(8))
def test_weights_are_read_only_and_cannot_be_made_writeable(k: int) -> None:
    layer = _weighted_layers()[k]
    x_before = {e.name: e.value.copy() for e in layer.weights()}
    for e in layer.weights():
        for arr in (e.value, layer.weight(e.name)):
            with pytest.raises(ValueError):
                arr[...] = 1.0
            with pytest.raises(ValueError):
                arr.flags.writeable = True
            np.testing.assert_array_equal(arr, x_before[e.name])
    # set_weight is the one way a weight changes; the entries then show the new value
    e0 = layer.weights()[0]
    new = np.full(e0.value.shape, 0.5)
    layer.set_weight(e0.name, new)
    np.testing.assert_array_equal(layer.weight(e0.name), new)
    assert {e.name for e in layer.weights()} == set(x_before)


@pytest.mark.parametrize("name", list(ALL_LAYERS))
def test_compute_output_shape_agrees_with_forward(name: str) -> None:
    make, data = ALL_LAYERS[name]
    x = data(np.random.default_rng(6))
    layer = make()
    y = layer.forward_mut(x, rk.Ctx.inference())
    got = layer.compute_output_shape(rk.Shape.with_free_batch(x.shape))
    assert got == rk.Shape((None, *y.shape[1:]))
    assert layer.compute_output_shape(rk.Shape.known(x.shape)) == rk.Shape(y.shape)


# -- nothing reshaped silently: every layer, wrong rank and wrong width -----------------------
BAD_INPUTS: list[tuple[str, Callable[[], Any], Any, list[str]]] = [
    # (label, built layer, bad input, fragments the message must hold)
    ("SimpleRNN 2D", lambda: rk.SimpleRNN(H, input_dim=F), np.ones((B, F)), ["3D", "(2, 4)"]),
    ("LSTM 4D", lambda: rk.LSTM(H, input_dim=F), np.ones((B, T, F, 1)), ["3D", "(2, 3, 4, 1)"]),
    ("GRU width", lambda: rk.GRU(H, input_dim=F), np.ones((B, T, F + 1)), ["4 features", "(2, 3, 5)"]),
    ("GRU 1D", lambda: rk.GRU(H, input_dim=F), np.ones(F), ["3D", "(4,)"]),
    ("Dense width", lambda: _built(rk.Dense(H), (None, F)), np.ones((B, F + 2)), ["4 features", "(2, 6)"]),
    ("Dense 1D", lambda: _built(rk.Dense(H), (None, F)), np.ones(F), ["rank >= 2", "(4,)"]),
    ("Embedding scalar", lambda: _built(rk.Embedding(10, H), (None, T)), np.array(3.0),
     ["rank >= 1", "scalar"]),
    ("RepeatVector 3D", lambda: rk.RepeatVector(2), np.ones((B, T, F)), ["rank-2", "(2, 3, 4)"]),
    ("Reverse 2D", lambda: rk.Reverse(1), np.ones((B, F)), ["rank >= 3", "(2, 4)"]),
    ("Concatenate widths", lambda: rk.Concatenate(-1), [np.ones((B, T, 2)), np.ones((B, T + 1, 2))],
     ["axis 1 differs", "(2, 3, 2)", "(2, 4, 2)"]),
    ("rnn.lstm width", lambda: rnn.lstm(F, H), np.ones((B, T, F - 1)), ["4 features", "(2, 3, 3)"]),
    ("rnn.gru 2D", lambda: rnn.gru(F, H), np.ones((B, F)), ["3D", "(2, 4)"]),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_wrong_inputs_raise_invalid_input_naming_expected_and_given(case: Any) -> None:
    _, make, bad, fragments = case
    layer = make()
    for call in (lambda: layer.forward(bad, rk.Ctx.inference()),
                 lambda: layer.forward(bad, rk.Ctx.training())):
        with pytest.raises(rk.InvalidInputError) as info:
            call()
        for frag in fragments:
            assert frag in str(info.value), (frag, str(info.value))


def _built(layer: Any, shape: tuple[int | None, ...]) -> Any:
    layer.build(shape)
    return layer


@pytest.mark.parametrize("name", ["SimpleRNN", "LSTM", "GRU"])
def test_recurrent_step_and_states_are_checked(name: str) -> None:
    layer = RECURRENT[name](H, input_dim=F)
    with pytest.raises(rk.InvalidInputError, match=r"one timestep.*\(2, 3, 4\)"):
        layer.step(np.ones((B, T, F)), layer.zero_state(B))
    with pytest.raises(rk.InvalidInputError, match=r"4 features.*\(2, 1, 5\)"):
        layer.step(np.ones((B, F + 1)), layer.zero_state(B))
    with pytest.raises(rk.InvalidInputError, match=r"\(2, 3\).*\(3, 3\)"):
        layer.seq_init(np.ones((B, T, F)), layer.zero_state(B + 1))
    with pytest.raises(rk.InvalidInputError, match="3D"):
        layer.seq(np.ones((B, F)))


def test_input_dim_constructor_refuses_zero_input_dim_and_units() -> None:
    for cls in RECURRENT.values():
        with pytest.raises(rk.InvalidParameterError, match="input_dim.*got 0"):
            cls(3, input_dim=0)
        with pytest.raises(rk.InvalidParameterError, match="units.*got 0"):
            cls(0, input_dim=3)


def _deep_state(obj: Any, depth: int = 0) -> Any:
    """Everything an object holds: arrays by bytes, objects by their own attributes."""
    if isinstance(obj, np.ndarray):
        return ("array", obj.dtype.str, obj.shape, obj.tobytes())
    if isinstance(obj, dict):
        return {repr(k): _deep_state(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_deep_state(v, depth + 1) for v in obj]
    if depth < 3 and hasattr(obj, "__dict__") and not isinstance(obj, type):
        return (type(obj).__name__, id(obj), {k: _deep_state(v, depth + 1) for k, v in vars(obj).items()})
    if depth < 3 and hasattr(obj, "__slots__"):
        return (type(obj).__name__, id(obj),
                {k: _deep_state(getattr(obj, k), depth + 1) for k in obj.__slots__ if hasattr(obj, k)})
    return repr(obj)


@pytest.mark.parametrize("name", list(ALL_LAYERS))
def test_passes_leave_every_layer_unchanged(name: str) -> None:
    """"Layers hold parameters, contexts hold passes": no attribute of a built layer (or of
    its cell) changes in predict, forward, backward, step or seq."""
    make, data = ALL_LAYERS[name]
    x = data(np.random.default_rng(7))
    layer = make(dtype="float64")
    layer.forward_mut(x, rk.Ctx.inference())
    before = _deep_state(layer)
    layer.predict(x)
    ctx = rk.Ctx.training(3)
    y = layer.forward(x, ctx)
    layer.backward(np.ones_like(y), ctx)
    if hasattr(layer, "zero_state"):
        layer.seq(x)
        layer.step(x[:, 0], layer.zero_state(x.shape[0]))
    assert _deep_state(layer) == before


def test_lookups_of_unknown_weights_raise_an_rnnkit_error_that_is_also_a_key_error() -> None:
    """Every error rnnkit raises on purpose derives from rnnkit.Error (the error hierarchy)."""
    layer = rk.LSTM(2, input_dim=3)
    with pytest.raises(rk.UnknownWeightError) as info:
        layer.weight("embeddings")
    assert isinstance(info.value, KeyError) and isinstance(info.value, rk.Error)
    assert str(info.value) == "LSTM has no weight 'embeddings'; it has ['kernel', 'recurrent_kernel', 'bias']"
    ctx = rk.Ctx.training()
    y = layer.forward(np.ones((1, 2, 3)), ctx)
    layer.backward(np.ones_like(y), ctx)
    with pytest.raises(KeyError, match=r"no gradient for LSTM\.embeddings.*LSTM\.bias") as info2:
        ctx.grad(layer, "embeddings")
    assert isinstance(info2.value, rk.UnknownWeightError)
    np.testing.assert_array_equal(ctx.grad(layer, "bias"), ctx.grads[(layer, "bias")])
