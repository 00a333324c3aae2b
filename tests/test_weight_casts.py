"""Weights given in a wider dtype than the layer's are checked for finiteness AFTER the cast: a
float64 1e300 never becomes a float32 Inf silently. Every door that casts a user's array to a
layer's dtype refuses it with a typed error naming the weight, the value and the dtype, and
changes nothing; inputs beyond the dtype are refused too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._safetensors import write_safetensors

F32_MAX = float(np.finfo(np.float32).max)
#: above float32's largest value yet below the half-way point to the next power of two's ulp:
#: the cast rounds it to the largest float32 (finite), so it must be accepted
ROUNDS_DOWN = F32_MAX * (1 + 2.0 ** -26)
#: the message of a refused cast: the value as given and the dtype it does not fit
BEYOND = r"1e\+300.*beyond the largest float32"


def _model(dtype: str = "float32") -> rk.Sequential:
    return rk.Sequential([rk.LSTM(3, seed=1, dtype=dtype), rk.Dense(2, seed=2, dtype=dtype)],
                         input_shape=(None, 4, 2))


def _big(a: np.ndarray, at: tuple[int, ...] = (0, 1)) -> np.ndarray:
    b = np.array(a, dtype=np.float64)
    b[at] = 1e300
    return b


def _same(before: list[np.ndarray], after: list[np.ndarray]) -> bool:
    return all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_layer_set_weight_refuses_a_value_that_overflows_the_cast() -> None:
    layer = _model().layers[1]
    before = layer.get_weights()
    with pytest.raises(rk.InvalidInputError,
                       match=rf"Dense\.kernel: the weight holds {BEYOND}.*float32 it would be inf"):
        layer.set_weight("kernel", _big(layer.weight("kernel")))
    assert _same(before, layer.get_weights())
    k = np.array(layer.weight("kernel"), np.float64)
    k[0, 0] = ROUNDS_DOWN   # the cast makes it the largest float32, a finite number
    layer.set_weight("kernel", k)
    assert layer.weight("kernel")[0, 0] == np.float32(F32_MAX)


def test_model_set_weights_refuses_it_and_changes_nothing() -> None:
    model = _model()
    before = model.get_weights()
    ws = [np.array(w, np.float64) for w in before]
    ws[0] = ws[0] + 0.5          # a good first weight: not installed either
    ws[3] = _big(ws[3])          # the Dense kernel
    with pytest.raises(rk.InvalidInputError, match=rf"weight 1\.kernel.*{BEYOND}"):
        model.set_weights(ws)
    assert _same(before, model.get_weights())


def test_layer_set_weights_of_dense_recurrent_and_rnn_net() -> None:
    model = _model()
    lstm, dense = model.layers
    before = model.get_weights()
    k, rk_, b = lstm.get_weights()
    with pytest.raises(rk.InvalidInputError, match=rf"recurrent_kernel.*{BEYOND}"):
        lstm.set_weights(k, _big(rk_), b)
    with pytest.raises(rk.InvalidInputError, match=rf"bias.*{BEYOND}"):
        dense.set_weights(dense.weight("kernel"), _big(dense.weight("bias"), (1,)))
    assert _same(before, model.get_weights())
    unbuilt = rk.GRU(3, dtype="float32")   # built from the arrays: refused before it is built
    src = rk.GRU(3, dtype="float64")
    src.build((None, 4, 2))
    with pytest.raises(rk.InvalidInputError, match=rf"kernel.*{BEYOND}"):
        unbuilt.set_weights(_big(src.weight("kernel")), src.weight("recurrent_kernel"), src.weight("bias"))
    assert not unbuilt.built
    net = rk.rnn.lstm(2, 3, dtype="float32")
    state = {n: np.array(v, np.float64) for n, v in net.state_dict().items()}
    old = net.state_dict()
    state["weight_hh_l0"] = _big(state["weight_hh_l0"])
    with pytest.raises(rk.InvalidInputError, match=rf"weight_hh_l0.*{BEYOND}"):
        net.load_state_dict(state)
    assert all(np.array_equal(old[n], v) for n, v in net.state_dict().items())


def test_weights_file_of_a_float64_model_into_a_float32_model(tmp_path: Path) -> None:
    wide = _model("float64")
    wide.build((None, 4, 2))
    k = wide.layers[1].get_weights()
    wide.layers[1].set_weights(_big(k[0]), k[1])
    path = tmp_path / "w.safetensors"
    wide.save_weights(str(path))
    narrow = _model()
    narrow.build((None, 4, 2))
    before = narrow.get_weights()
    with pytest.raises(rk.FileFormatError, match=rf"'1\.kernel'.*{BEYOND}.*nothing was loaded"):
        narrow.load_weights(str(path))
    assert _same(before, narrow.get_weights())
    # the same file's values that fit are read (the cast of each value as numpy rounds it)
    wide.layers[1].set_weights(k[0], k[1])
    wide.save_weights(str(path))
    narrow.load_weights(str(path))
    assert _same([w.astype(np.float32) for w in wide.get_weights()], narrow.get_weights())


def test_torch_file_read_as_float32(tmp_path: Path) -> None:
    net = rk.rnn.gru(2, 3, dtype="float64", seed=0)
    state = net.state_dict()
    state["weight_ih_l0"] = _big(state["weight_ih_l0"], (2, 1))
    path = tmp_path / "gru.safetensors"
    write_safetensors(path, state, {})
    with pytest.raises(rk.FileFormatError,
                       match=r"weight_ih_l0.* 1e\+300 at \(2, 1\), beyond the largest float32"):
        rk.load_torch_rnn(path, dtype="float32")
    assert rk.load_torch_rnn(path).dtype == np.float64   # its own dtype holds it


def test_interop_from_torch_state_and_from_keras_weights() -> None:
    layer = rk.LSTM(3, dtype="float32")
    layer.build((None, 4, 2))
    before = layer.get_weights()
    torch_state = {"weight_ih_l0": np.zeros((12, 2)), "weight_hh_l0": np.zeros((12, 3)),
                   "bias_ih_l0": np.zeros(12), "bias_hh_l0": _big(np.zeros(12), (5,))}
    with pytest.raises(rk.InvalidInputError, match=rf"from_torch_state: bias holds {BEYOND}"):
        rk.io.from_torch_state(layer, torch_state)
    keras = [np.zeros((2, 12)), _big(np.zeros((3, 12))), np.zeros(12)]
    with pytest.raises(rk.InvalidInputError, match=rf"from_keras_weights: recurrent_kernel holds {BEYOND}"):
        rk.io.from_keras_weights(layer, keras)
    assert _same(before, layer.get_weights())


def test_onnx_graph_of_a_float32_model_holding_a_float64_layer(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    model = rk.Sequential([rk.LSTM(3, seed=1), rk.Dense(2, seed=2, dtype="float64")],
                          input_shape=(None, 4, 2))
    k = model.layers[1].get_weights()
    model.layers[1].set_weights(_big(k[0]), k[1])   # fits float64, the Dense's dtype
    path = tmp_path / "m.onnx"
    with pytest.raises(rk.InvalidInputError, match=rf"kernel.*{BEYOND}"):
        rk.save_onnx(model, path)
    assert not path.exists()


@pytest.mark.parametrize("first", ["Dense", "LSTM", "Bidirectional"])
def test_inputs_beyond_float32_are_refused_by_predict_fit_and_evaluate(first: str) -> None:
    layer = {"Dense": lambda: rk.Dense(3), "LSTM": lambda: rk.LSTM(3),
             "Bidirectional": lambda: rk.Bidirectional(rk.LSTM(3))}[first]()
    model = rk.Sequential([layer, rk.Dense(1)], input_shape=(None, 4, 2)).compile("sgd", "mse")
    x = np.zeros((3, 4, 2))
    x[1, 2, 0] = 1e300
    y = np.zeros((3, 4, 1) if first == "Dense" else (3, 1))
    for call in (lambda: model.predict(x), lambda: model(x), lambda: model.predict(x, batch_size=2),
                 lambda: model.fit(x, y), lambda: model.evaluate(x, y)):
        with pytest.raises(rk.InvalidInputError, match=r"1e\+300.*beyond the largest float32"):
            call()
