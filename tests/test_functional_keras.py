"""The functional API against Keras 3 itself (torch backend): the same graphs built both ways,
Keras' weights copied through the ``.weights.h5`` file Keras writes, the outputs compared;
``model.layers`` indices; the lstm_seq2seq inference models; ``.keras`` round trips."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
ATOL = 2e-5


@pytest.fixture(scope="module")
def keras() -> Any:
    pytest.importorskip("h5py")
    return keras_or_skip()


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _copy(kmodel: Any, model: rk.GraphModel, path: Path, seed: int = 0) -> None:
    """Random weights in ``kmodel``, written by Keras and read into ``model``."""
    g = np.random.default_rng(seed)
    for w in kmodel.weights:
        w.assign(g.normal(0.0, 0.4, tuple(w.shape)).astype("float32"))
    kmodel.save_weights(path / "k.weights.h5")
    rk.load_keras_weights(model, path / "k.weights.h5")


def _close(want: Any, got: Any) -> None:
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    got = got if isinstance(got, list) else [got]
    assert len(want) == len(got)
    for w, o in zip(want, got, strict=True):
        np.testing.assert_allclose(o, np.asarray(w), atol=ATOL)


def _kinds(model: Any) -> list[str]:
    return [type(lay).__name__ for lay in model.layers]


def test_functional_lstm_model(keras: Any, tmp_path: Path) -> None:
    L = keras.layers
    ki = keras.Input((7, 3))
    kmodel = keras.Model(ki, L.Dense(2)(L.LSTM(4)(L.LSTM(8, return_sequences=True)(ki))))
    inputs = rk.Input((7, 3))
    model = rk.Model(inputs, rk.Dense(2)(rk.LSTM(4)(rk.LSTM(8, return_sequences=True)(inputs))))
    assert _kinds(model) == _kinds(kmodel) == ["InputLayer", "LSTM", "LSTM", "Dense"]
    _copy(kmodel, model, tmp_path)
    x = _x(5, 7, 3)
    _close(kmodel.predict(x, verbose=0), model.predict(x))


def test_two_input_concat_model(keras: Any, tmp_path: Path) -> None:
    L = keras.layers
    ka, kb = keras.Input((6, 3)), keras.Input((6, 2))
    kh = L.SimpleRNN(5)(L.Concatenate()([ka, kb]))
    kmodel = keras.Model([ka, kb], [L.Dense(1)(kh), L.Dense(3, activation="softmax")(kh)])
    a, b = rk.Input((6, 3)), rk.Input((6, 2))
    h = rk.SimpleRNN(5)(rk.Concatenate()([a, b]))
    model = rk.Model([a, b], [rk.Dense(1)(h), rk.Dense(3, "softmax")(h)])
    assert _kinds(model) == _kinds(kmodel)
    assert model.layers[2] is model.get_layer(index=2) and isinstance(model.layers[2], rk.Concatenate)
    _copy(kmodel, model, tmp_path, seed=1)
    x = [_x(4, 6, 3, seed=1), _x(4, 6, 2, seed=2)]
    _close(kmodel.predict(x, verbose=0), model.predict(x))


def test_return_state_models(keras: Any, tmp_path: Path) -> None:
    L = keras.layers
    for k_rnn, ours in ((L.LSTM(5, return_state=True), rk.LSTM(5, return_state=True)),
                        (L.GRU(5, return_state=True, return_sequences=True),
                         rk.GRU(5, return_state=True, return_sequences=True, reset_after=True))):
        ki = keras.Input((6, 3))
        kmodel = keras.Model(ki, k_rnn(ki))
        inputs = rk.Input((6, 3))
        outs = ours(inputs)
        assert isinstance(outs, list) and len(outs) == len(kmodel.outputs)
        model = rk.Model(inputs, outs)
        _copy(kmodel, model, tmp_path, seed=2)
        x = _x(3, 6, 3, seed=3)
        _close(kmodel.predict(x, verbose=0), model.predict(x))


def test_weights_file_by_position_when_the_names_differ(keras: Any, tmp_path: Path) -> None:
    """Keras names the groups by class and position (``lstm``, ``lstm_1``; ``dense`` is the one
    Keras lists first), whatever the layers are called."""
    L = keras.layers
    ka, kb = keras.Input((5, 3)), keras.Input((4, 2), name="dec_in")
    kx, kh, kc = L.LSTM(6, return_state=True, name="enc")(ka)
    ky = L.LSTM(6, return_sequences=True, name="dec")(kb, initial_state=[kh, kc])
    kmodel = keras.Model([ka, kb], [L.Dense(2, name="d_seq")(ky), L.Dense(3, name="d_last")(kx)])
    a, b = rk.Input((5, 3)), rk.Input((4, 2), name="dec_in")
    x, h, c = rk.LSTM(6, return_state=True)(a)
    y = rk.LSTM(6, return_sequences=True)(b, initial_state=[h, c])
    model = rk.Model([a, b], [rk.Dense(2)(y), rk.Dense(3)(x)])
    assert _kinds(model) == _kinds(kmodel)
    assert [lay.name for lay in model.layers][1] == kmodel.layers[1].name == "dec_in"
    _copy(kmodel, model, tmp_path, seed=4)
    xs = [_x(2, 5, 3, seed=5), _x(2, 4, 2, seed=6)]
    _close(kmodel.predict(xs, verbose=0), model.predict(xs))


def _keras_seq2seq(keras: Any) -> tuple[Any, Any, Any]:
    """The lstm_seq2seq example's training model and, from its layers, its inference models
    (built as the example builds them, from ``model.input`` and ``model.layers[i]``)."""
    L = keras.layers
    enc_in = keras.Input((None, 4))
    _, h, c = L.LSTM(6, return_state=True)(enc_in)
    dec_in = keras.Input((None, 3))
    seq, _, _ = L.LSTM(6, return_sequences=True, return_state=True)(dec_in, initial_state=[h, c])
    model = keras.Model([enc_in, dec_in], L.Dense(3, activation="softmax")(seq))
    return (model, *_inference(keras, model, keras.Input, keras.Model))


def _inference(lib: Any, model: Any, Input: Any, Model: Any) -> tuple[Any, Any]:
    encoder_inputs = model.input[0]
    _, state_h_enc, state_c_enc = model.layers[2].output
    encoder_model = Model(encoder_inputs, [state_h_enc, state_c_enc])
    decoder_inputs = model.input[1]
    h_in, c_in = Input(shape=(6,)), Input(shape=(6,))
    decoder_lstm = model.layers[3]
    out, state_h, state_c = decoder_lstm(decoder_inputs, initial_state=[h_in, c_in])
    decoder_outputs = model.layers[4](out)
    return encoder_model, Model([decoder_inputs, h_in, c_in], [decoder_outputs, state_h, state_c])


def _compare_seq2seq(kmodels: tuple[Any, ...], models: tuple[Any, ...]) -> None:
    xe, xd = _x(3, 5, 4, seed=7), _x(3, 4, 3, seed=8)
    _close(kmodels[0].predict([xe, xd], verbose=0), models[0].predict([xe, xd]))
    states = models[1].predict(xe)
    _close(kmodels[1].predict(xe, verbose=0), states)
    h, c = _x(3, 6, seed=9), _x(3, 6, seed=10)
    _close(kmodels[2].predict([xd[:, :1], h, c], verbose=0), models[2].predict([xd[:, :1], h, c]))


def test_seq2seq_encoder_and_decoder_inference_models(keras: Any, tmp_path: Path) -> None:
    kmodels = _keras_seq2seq(keras)
    enc_in = rk.Input((None, 4))
    _, h, c = rk.LSTM(6, return_state=True)(enc_in)
    dec_in = rk.Input((None, 3))
    seq, _, _ = rk.LSTM(6, return_sequences=True, return_state=True)(dec_in, initial_state=[h, c])
    model = rk.Model([enc_in, dec_in], rk.Dense(3, "softmax")(seq))
    assert _kinds(model) == _kinds(kmodels[0])
    _copy(kmodels[0], model, tmp_path, seed=11)
    _compare_seq2seq(kmodels, (model, *_inference(rk, model, rk.Input, rk.Model)))


def test_a_loaded_keras_seq2seq_gives_its_inference_models(keras: Any, tmp_path: Path) -> None:
    """The example's second half: load the saved model, build the inference models from it."""
    kmodels = _keras_seq2seq(keras)
    g = np.random.default_rng(12)
    for w in kmodels[0].weights:
        w.assign(g.normal(0.0, 0.4, tuple(w.shape)).astype("float32"))
    kmodels[0].save(tmp_path / "s2s.keras")
    model = rk.load_keras(tmp_path / "s2s.keras")
    assert _kinds(model) == _kinds(kmodels[0])
    _compare_seq2seq(kmodels, (model, *_inference(rk, model, rk.Input, rk.Model)))


def test_keras_files_round_trip_functional_models(keras: Any, tmp_path: Path) -> None:
    L = keras.layers
    ka, kb = keras.Input((5, 3)), keras.Input((5, 3))
    shared = L.LSTM(4, return_sequences=True)
    kmodel = keras.Model([ka, kb], L.Dense(2)(L.Add()([shared(ka), shared(kb)])))
    g = np.random.default_rng(13)
    for w in kmodel.weights:
        w.assign(g.normal(0.0, 0.4, tuple(w.shape)).astype("float32"))
    kmodel.save(tmp_path / "k.keras")
    xs = [_x(2, 5, 3, seed=14), _x(2, 5, 3, seed=15)]
    want = kmodel.predict(xs, verbose=0)
    ours = rk.load_keras(tmp_path / "k.keras")
    rk.save_keras(ours, tmp_path / "again.keras")
    _close(want, keras.models.load_model(tmp_path / "again.keras").predict(xs, verbose=0))
    # a model made with rk.Input / rk.Model, written for Keras
    a = rk.Input((5, 3), name="series")
    x, h, c = rk.LSTM(4, return_state=True, seed=1)(a)
    model = rk.Model(a, [rk.Dense(2, seed=2)(rk.Concatenate()([x, c])), h])
    rk.save_keras(model, tmp_path / "ours.keras")
    back = keras.models.load_model(tmp_path / "ours.keras")
    assert [lay.name for lay in back.layers] == [lay.name for lay in model.layers]
    _close(back.predict(xs[0], verbose=0), model.predict(xs[0]))


def test_a_graph_builder_model_reads_a_keras_weights_file(keras: Any, tmp_path: Path) -> None:
    """Node names ``lstm_0``, ``dense_0`` are not Keras' names: the file is read by position."""
    L = keras.layers
    ki = keras.Input((4, 2))
    kmodel = keras.Model(ki, L.Dense(3)(L.GRU(5, return_sequences=True)(ki)))
    b = rk.GraphBuilder()
    x = b.input((None, 4, 2))
    model = b.build(b.add(rk.Dense(3), b.add(rk.GRU(5, return_sequences=True, reset_after=True), x)))
    assert [n.name for n in model.nodes] == ["input_0", "gru_0", "dense_0"]
    _copy(kmodel, model, tmp_path, seed=16)
    xs = _x(2, 4, 2, seed=17)
    _close(kmodel.predict(xs, verbose=0), model.predict(xs))
