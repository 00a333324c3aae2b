"""Keras' functional API on the graph model, without Keras: rk.Input, layers called on nodes,
rk.Model(inputs, outputs), names, sub-models sharing weights, files, and the refusals.
(The values against Keras itself: tests/test_functional_keras.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._errors import GraphCallError


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape)


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def _lstm_ref(x: np.ndarray, W: np.ndarray, U: np.ndarray, b: np.ndarray, h: np.ndarray,
              c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A float64 LSTM in Keras' gate order (i, f, c, o): (sequence of h, final h, final c)."""
    H = h.shape[1]
    hs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ W + h @ U + b.reshape(-1)
        i, f = _sigmoid(z[:, :H]), _sigmoid(z[:, H:2 * H])
        g, o = np.tanh(z[:, 2 * H:3 * H]), _sigmoid(z[:, 3 * H:])
        c = f * c + i * g
        h = o * np.tanh(c)
        hs.append(h)
    return np.stack(hs, 1), h, c


def _weights(layer: rk.Layer) -> list[np.ndarray]:
    return [np.asarray(layer.weight(n), np.float64) for n in ("kernel", "recurrent_kernel", "bias")]


def _seq2seq(seed: int = 0) -> tuple[rk.GraphModel, list[rk.Layer]]:
    enc_in = rk.Input((None, 3))
    _, h, c = rk.LSTM(5, return_state=True, seed=seed, dtype="float64")(enc_in)
    dec_in = rk.Input((None, 2))
    dec_lstm = rk.LSTM(5, return_sequences=True, return_state=True, seed=seed + 1, dtype="float64")
    seq, _, _ = dec_lstm(dec_in, initial_state=[h, c])
    dense = rk.Dense(2, "softmax", seed=seed + 2, dtype="float64")
    return rk.Model([enc_in, dec_in], dense(seq)), [dec_lstm, dense]


def test_a_functional_model_computes_the_reference_lstm() -> None:
    inputs = rk.Input((4, 3), name="series")
    seq, h, c = rk.LSTM(5, return_sequences=True, return_state=True, seed=1, dtype="float64")(inputs)
    y = rk.Dense(2, seed=2, dtype="float64")(h)
    model = rk.Model(inputs, [y, seq, c])
    assert isinstance(model, rk.GraphModel) and isinstance(model, rk.Model)
    assert isinstance(rk.Sequential([rk.Dense(1)]), rk.Model)
    x = _x(6, 4, 3)
    lstm, dense = model.layers[1], model.layers[2]
    ref_seq, ref_h, ref_c = _lstm_ref(x, *_weights(lstm), np.zeros((6, 5)), np.zeros((6, 5)))
    got_y, got_seq, got_c = model.predict(x)
    np.testing.assert_allclose(got_seq, ref_seq, atol=1e-12)
    np.testing.assert_allclose(got_c, ref_c, atol=1e-12)
    W, b = np.asarray(dense.weight("kernel")), np.asarray(dense.weight("bias"))
    np.testing.assert_allclose(got_y, ref_h @ W + b.reshape(-1), atol=1e-12)


def test_inputs_outputs_layers_and_names_as_keras_has_them() -> None:
    a, b = rk.Input((5, 3)), rk.Input((5, 2), name="extra")
    merged = rk.Concatenate()([a, b])
    out = rk.Dense(1)(rk.GRU(4)(merged))
    model = rk.Model(inputs=[a, b], outputs=out, name="two_inputs")
    assert model.input == [a, b] and model.inputs == [a, b] and model.output is out
    assert [type(lay).__name__ for lay in model.layers] == ["InputLayer", "InputLayer", "Concatenate",
                                                           "GRU", "Dense"]
    assert [lay.name for lay in model.layers] == ["input_layer", "extra", "concatenate", "gru", "dense"]
    assert model.layers[0].output is a and model.layers[1].batch_shape == (None, 5, 2)
    assert model.get_layer("gru") is model.layers[3] and model.get_layer(index=-1) is model.layers[4]
    assert model.layers[3].input is merged and model.layers[3].output is out.inbound[0]
    assert set(model.named_weights()) == {"gru.kernel", "gru.recurrent_kernel", "gru.bias",
                                          "dense.kernel", "dense.bias"}
    with pytest.raises(rk.InvalidInputError, match="no layer is named 'nope'"):
        model.get_layer("nope")


def test_a_given_layer_name_names_its_node_and_a_second_model_counts_on() -> None:
    x = rk.Input((3,))
    y = rk.Dense(2, name="head")(rk.Dense(4)(x))
    model = rk.Model(x, y)
    assert [n.name for n in model.nodes] == ["input_layer", "dense", "head"]
    y2 = rk.Dense(1)(rk.Dense(3)(model.output))
    bigger = rk.Model(model.input, y2)
    assert [n.name for n in bigger.nodes] == ["input_layer", "dense", "head", "dense_1", "dense_2"]


def test_sub_models_share_the_trained_layers_and_their_weights() -> None:
    model, (dec_lstm, dense) = _seq2seq()
    enc_lstm = model.layers[2]
    assert model.layers[3] is dec_lstm and model.layers[4] is dense   # Keras' lstm_seq2seq indices
    encoder = rk.Model(model.input[0], model.layers[2].output[1:])
    h_in, c_in = rk.Input((5,)), rk.Input((5,))
    seq, h, c = dec_lstm(model.input[1], initial_state=[h_in, c_in])
    decoder = rk.Model([model.input[1], h_in, c_in], [dense(seq), h, c])
    assert encoder.layers[1] is enc_lstm and decoder.get_layer("lstm_1") is dec_lstm
    g = np.random.default_rng(3)
    xe, xd = _x(8, 6, 3, seed=1), _x(8, 4, 2, seed=2)
    target = np.eye(2)[g.integers(0, 2, (8, 4))]
    before = model.predict([xe, xd])
    model.compile(rk.Adam(0.05), "categorical_crossentropy")
    model.fit([xe, xd], target, epochs=3, batch_size=4, verbose=0)
    after = model.predict([xe, xd])
    assert np.abs(after - before).max() > 1e-3
    # the sub-models run the trained weights: encoder then decoder equals the trained model
    h0, c0 = encoder.predict(xe)
    ref_seq, ref_h, ref_c = _lstm_ref(xe, *_weights(enc_lstm), np.zeros((8, 5)), np.zeros((8, 5)))
    np.testing.assert_allclose(h0, ref_h, atol=1e-12)
    np.testing.assert_allclose(c0, ref_c, atol=1e-12)
    probs, _, _ = decoder.predict([xd, h0, c0])
    np.testing.assert_allclose(probs, after, atol=1e-12)
    # and training a sub-model moves the weights the others read
    kernel = np.array(enc_lstm.weight("kernel"))
    encoder.compile(rk.SGD(0.5), "mse")
    encoder.fit(xe, [np.ones((8, 5)), np.ones((8, 5))], epochs=1, verbose=0)
    assert np.abs(np.asarray(enc_lstm.weight("kernel")) - kernel).max() > 1e-4
    np.testing.assert_allclose(model.predict([xe, xd]), decoder.predict([xd, *encoder.predict(xe)])[0],
                               atol=1e-12)


def test_step_by_step_decoding_equals_the_whole_sequence() -> None:
    model, (dec_lstm, dense) = _seq2seq(seed=4)
    encoder = rk.Model(model.input[0], model.layers[2].output[1:])
    step_in, h_in, c_in = rk.Input((1, 2)), rk.Input((5,)), rk.Input((5,))
    seq, h, c = dec_lstm(step_in, initial_state=[h_in, c_in])
    decoder = rk.Model([step_in, h_in, c_in], [dense(seq), h, c])
    xe, xd = _x(3, 5, 3, seed=5), _x(3, 4, 2, seed=6)
    state = encoder.predict(xe)
    steps = []
    for t in range(4):
        p, *state = decoder.predict([xd[:, t:t + 1], *state])
        steps.append(p[:, 0])
    np.testing.assert_allclose(np.stack(steps, 1), model.predict([xe, xd]), atol=1e-12)


def test_rnnkit_files_round_trip_a_functional_model(tmp_path: Path) -> None:
    model, _ = _seq2seq(seed=7)
    xe, xd = _x(2, 5, 3, seed=8), _x(2, 3, 2, seed=9)
    rk.save_model(model, tmp_path / "m.rnnkit")
    again = rk.load_model(tmp_path / "m.rnnkit")
    assert [n.name for n in again.nodes] == [n.name for n in model.nodes]
    np.testing.assert_array_equal(again.predict([xe, xd]), model.predict([xe, xd]))
    assert [type(lay).__name__ for lay in again.layers] == [type(lay).__name__ for lay in model.layers]


def test_eager_calls_build_and_take_an_initial_state() -> None:
    dense = rk.Dense(3, seed=0, dtype="float64")
    x = _x(4, 2)
    y = dense(x)   # an unbuilt layer is built for the array's shape
    np.testing.assert_allclose(y, x @ np.asarray(dense.weight("kernel")) + np.asarray(dense.weight("bias")),
                               atol=1e-12)
    lstm = rk.LSTM(4, return_sequences=True, seed=1, dtype="float64")
    xs, h0, c0 = _x(2, 3, 5, seed=1), _x(2, 4, seed=2), _x(2, 4, seed=3)
    got = lstm(xs, initial_state=[h0, c0])
    np.testing.assert_allclose(got, _lstm_ref(xs, *_weights(lstm), h0, c0)[0], atol=1e-12)


def test_a_layer_called_twice_has_no_single_output() -> None:
    shared = rk.Dense(2)
    a, b = rk.Input((3,)), rk.Input((3,))
    ya, yb = shared(a), shared(b)
    model = rk.Model([a, b], rk.Add()([ya, yb]))
    assert [n.name for n in model.nodes if n.layer is shared] == ["dense", "dense__1"]
    with pytest.raises(GraphCallError, match="called 2 times"):
        _ = shared.output
    assert not hasattr(shared, "output") and not hasattr(rk.Dense(1), "input")
    x = _x(2, 3)
    W, bias = np.asarray(shared.weight("kernel"), np.float64), np.asarray(shared.weight("bias"), np.float64)
    np.testing.assert_allclose(model.predict([x, 2 * x]), (x @ W + bias) + (2 * x @ W + bias), atol=1e-5)


def test_refusals_are_typed_and_say_what_was_wrong() -> None:
    a, b = rk.Input((4, 3)), rk.Input((4, 3))
    merged = rk.Add()([a, b])
    with pytest.raises(rk.InvalidInputError, match="graph disconnected.*not listed"):
        rk.Model(a, merged)
    with pytest.raises(rk.InvalidInputError, match=r"inputs\[1\].*does not feed"):
        rk.Model([a, rk.Input((2,))], rk.Dense(1)(a))
    lstm = rk.LSTM(4)
    lstm(a)
    with pytest.raises(rk.InvalidInputError, match="calling LSTM.*feature width 3"):
        lstm(rk.Input((4, 5)))
    x1, x2 = rk.Input((3,), name="x"), rk.Input((3,), name="x")
    with pytest.raises(rk.InvalidInputError, match="two inputs are named 'x'"):
        rk.Model([x1, x2], rk.Add()([x1, x2]))
    with pytest.raises(rk.InvalidInputError, match="must be a node"):
        rk.Add()([a, np.zeros((1, 4, 3))])
    with pytest.raises(rk.InvalidInputError, match="initial_state= is for recurrent layers"):
        rk.Dense(2)(a, initial_state=[b])
    with pytest.raises(rk.InvalidInputError, match="takes at least 2 input nodes"):
        rk.Concatenate()([a])
    with pytest.raises(rk.InvalidInputError, match="initial state 'h' must have shape"):
        rk.LSTM(4)(a, initial_state=[rk.Input((3,)), rk.Input((4,))])
    seq = rk.LSTM(4)(a)
    with pytest.raises(rk.InvalidInputError, match="is a layer call's output"):
        rk.Model(seq, rk.Dense(1)(seq))
    with pytest.raises(rk.InvalidParameterError, match="each extent must be an int >= 1"):
        rk.Input((0, 3))
    with pytest.raises(rk.InvalidParameterError, match="dtype must be one of"):
        rk.Input((3,), dtype="float16")
    with pytest.raises(rk.InvalidParameterError, match="takes no ctx"):
        rk.Dense(1)(a, rk.Ctx.inference())
    with pytest.raises(rk.InvalidParameterError, match="takes name= only"):   # (Keras' subclassing:
        type("Sub", (rk.Model,), {})(a, seq)                                   # test_subclass.py)


def test_input_dtype_and_batch_size_are_kept() -> None:
    ids = rk.Input((None,), dtype="int32", batch_size=4, name="ids")
    out = rk.Dense(1)(rk.LSTM(3)(rk.Embedding(10, 4)(ids)))
    model = rk.Model(ids, out)
    assert model.inputs[0].shape.dims == (4, None) and model.layers[0].batch_shape == (4, None)
    spec = model.get_config()["config"]["nodes"][0]
    assert spec == {"name": "ids", "input_shape": [4, None], "dtype": "int32"}
    again = rk.GraphModel.from_config(model.get_config()["config"])
    assert again.inputs[0].dtype == "int32"


def test_a_graph_model_called_on_nodes_repeats_its_layer_calls() -> None:
    x = rk.Input((4, 3))
    inner = rk.Model(x, rk.Dense(2, dtype="float64")(rk.LSTM(5, dtype="float64")(x)))
    a = rk.Input((4, 3))
    head = rk.Dense(1, dtype="float64")
    outer = rk.Model(a, head(inner(a)))
    assert [lay.name for lay in outer.layers] == ["input_layer", "lstm", "dense", "dense_1"]
    assert outer.layers[1] is inner.layers[1]          # the same layers, so the same weights
    xa = _x(2, 4, 3)
    W, b = np.asarray(head.weight("kernel")), np.asarray(head.weight("bias"))
    np.testing.assert_allclose(outer.predict(xa), inner.predict(xa) @ W + b, atol=1e-12)
    with pytest.raises(rk.InvalidInputError, match="one node per model input"):
        inner([a, a])


def test_evaluate_and_summary_of_a_functional_model() -> None:
    a, b = rk.Input((3,), name="left"), rk.Input((2,), name="right")
    dense = rk.Dense(1, seed=1, dtype="float64")
    model = rk.Model([a, b], dense(rk.Concatenate(dtype="float64")([a, b])))
    model.compile(rk.SGD(0.1), "mse")
    xa, xb, y = _x(6, 3, seed=1), _x(6, 2, seed=2), _x(6, 1, seed=3)
    W, bias = np.asarray(dense.weight("kernel")), np.asarray(dense.weight("bias"))
    want = float(np.mean((np.concatenate([xa, xb], 1) @ W + bias - y) ** 2))
    assert abs(float(model.evaluate([xa, xb], y)) - want) < 1e-12
    text = model.summary(print_fn=None)
    assert "left (Input)" in text and "concatenate (Concatenate)" in text and "dense (Dense)" in text
    assert "left, right" in text and "Total params: 6" in text


def test_a_sequential_called_on_a_node_calls_its_layers_with_their_weights() -> None:
    inner = rk.Sequential([rk.Dense(4, seed=1, activation="tanh"), rk.Dense(2, seed=2)]).build((None, 3))
    x = rk.Input((3,))
    model = rk.Model(x, inner(x))
    a = np.random.default_rng(0).normal(size=(5, 3))
    (w1, b1), (w2, b2) = (layer.get_weights() for layer in inner.layers)
    want = np.tanh(a.astype(np.float32) @ w1 + b1) @ w2 + b2      # the two Dense layers by hand
    np.testing.assert_allclose(model.predict(a), want, rtol=1e-5, atol=1e-6)
    assert [la for la in model.called_layers] == inner.layers     # the same layer objects
    with pytest.raises(rk.InvalidInputError, match="takes no ctx"):
        inner(x, rk.Ctx.inference())
