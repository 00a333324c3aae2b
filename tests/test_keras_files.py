"""Whole-model import of Keras 3 ``.keras`` / ``.weights.h5`` files (rnnkit.io.load_keras,
load_keras_weights), with live Keras 3.15.1 (torch backend) as the oracle: models are built
and given random weights here, saved, loaded WITHOUT keras by rnnkit and compared on predict.
Every refusal is checked for its type, the layer it names and the option."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.io import UnsupportedFeatureError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
pytest.importorskip("h5py")
L = keras.layers

ATOL = 1e-5


def _randomize(model: Any, seed: int) -> None:
    """Random (non-default) weights, so a weight in the wrong place shows in the outputs."""
    g = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(g.normal(0.0, 0.5, tuple(w.shape)).astype("float32"))


def _roundtrip(model: Any, x: Any, path: Path, seed: int = 0) -> tuple[Any, float]:
    _randomize(model, seed)
    model.save(path)
    ours = rk.load_keras(path)
    want = model.predict(x, verbose=0)
    got = ours.predict(x)
    if isinstance(want, list):
        diff = max(float(np.abs(np.asarray(w) - g).max()) for w, g in zip(want, got, strict=True))
    else:
        assert got.shape == tuple(want.shape)
        diff = float(np.abs(np.asarray(want) - got).max())
    return ours, diff


def _x(*shape: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


# -- parity ------------------------------------------------------------------------------------

def test_lstm_seq_gru_dense(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((6, 3)), L.LSTM(5, return_sequences=True), L.GRU(4),
                          L.Dense(2, activation="softmax")])
    ours, diff = _roundtrip(m, _x(4, 6, 3), tmp_path / "m.keras")
    assert isinstance(ours, rk.Sequential)
    assert [type(x).__name__ for x in ours.layers] == ["LSTM", "GRU", "Dense"]
    assert ours.layers[1].reset_after  # Keras' GRU default
    assert diff <= ATOL


def test_embedding_simplernn_dense_sigmoid(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((None,)), L.Embedding(12, 4), L.SimpleRNN(6, activation="relu"),
                          L.Dropout(0.3), L.Dense(1, activation="sigmoid")])
    x = np.random.default_rng(2).integers(0, 12, size=(5, 7)).astype("float32")
    ours, diff = _roundtrip(m, x, tmp_path / "m.keras")
    assert ours.layers[0].weight("embeddings").shape == (12, 4)
    assert diff <= ATOL


def test_gru_reset_before_and_go_backwards(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((5, 3)),
                          L.GRU(4, reset_after=False, return_sequences=True, go_backwards=True),
                          L.LSTM(3, go_backwards=True, return_sequences=True, use_bias=False),
                          L.Activation("tanh")])
    ours, diff = _roundtrip(m, _x(3, 5, 3), tmp_path / "m.keras")
    assert not ours.layers[0].reset_after
    assert ours.layers[1].weight_names == ["kernel", "recurrent_kernel"]  # use_bias=False: no bias at all
    assert diff <= ATOL


@pytest.mark.parametrize("gate", ["hard_sigmoid", "sigmoid", "tanh", "relu", "linear"])
def test_recurrent_activation_and_no_bias(tmp_path: Path, gate: str) -> None:
    """Keras' recurrent_activation (hard_sigmoid is Keras 3's relu6(x + 3) / 6) and use_bias=False
    import exactly, for LSTM and both GRU forms."""
    m = keras.Sequential([keras.Input((6, 3)),
                          L.LSTM(4, recurrent_activation=gate, return_sequences=True, use_bias=False),
                          L.GRU(3, recurrent_activation=gate, return_sequences=True),
                          L.GRU(3, recurrent_activation=gate, reset_after=False, use_bias=False)])
    ours, diff = _roundtrip(m, 0.5 * _x(4, 6, 3), tmp_path / "m.keras")
    assert [lay.recurrent_activation.name for lay in ours.layers] == [gate] * 3
    assert [lay.use_bias for lay in ours.layers] == [False, True, False]
    assert diff <= ATOL, diff


@pytest.mark.parametrize("return_sequences", [True, False])
def test_bidirectional_lstm(tmp_path: Path, return_sequences: bool) -> None:
    m = keras.Sequential([keras.Input((6, 3)), L.Bidirectional(L.LSTM(4, return_sequences=return_sequences)),
                          L.Dense(2)])
    ours, diff = _roundtrip(m, _x(3, 6, 3), tmp_path / "m.keras")
    assert isinstance(ours, rk.Sequential) and isinstance(ours.layers[0], rk.Bidirectional)
    assert diff <= ATOL


def test_bidirectional_gru_then_repeatvector(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((5, 2)), L.Bidirectional(L.GRU(3)), L.RepeatVector(4),
                          L.SimpleRNN(2, return_sequences=True)])
    _, diff = _roundtrip(m, _x(2, 5, 2), tmp_path / "m.keras")
    assert diff <= ATOL


def test_trained_model_without_input_layer_and_time_distributed(tmp_path: Path) -> None:
    """Built with build() (no InputLayer), compiled and fitted (the file then also holds the
    optimizer's variables, which are not weights of the model)."""
    m = keras.Sequential([L.LSTM(4, return_sequences=True), L.TimeDistributed(L.Dense(2, activation="relu")),
                          L.GRU(3), L.Dense(1)])
    m.build((None, 5, 3))
    _randomize(m, 9)
    x = _x(6, 5, 3)
    m.compile("adam", "mse")
    m.fit(x, np.ones((6, 1), "float32"), epochs=1, verbose=0)
    m.save(tmp_path / "m.keras")
    ours = rk.load_keras(tmp_path / "m.keras")
    assert [type(x).__name__ for x in ours.layers] == ["LSTM", "TimeDistributed", "GRU", "Dense"]
    assert np.abs(m.predict(x, verbose=0) - ours.predict(x)).max() <= ATOL


def test_functional_shared_layer_concatenate_two_outputs(tmp_path: Path) -> None:
    inp = keras.Input((6, 3))
    a = L.GRU(3, return_sequences=True)(inp)
    b = L.LSTM(3, return_sequences=True)(inp)
    c = L.Concatenate()([a, b])
    shared = L.Dense(6, activation="relu")
    o1 = L.Dense(2)(shared(c))
    o2 = shared(L.Dense(6)(c))  # the shared Dense called a second time
    m = keras.Model(inp, [o1, o2])
    ours, diff = _roundtrip(m, _x(3, 6, 3), tmp_path / "m.keras")
    assert isinstance(ours, rk.GraphModel) and ours.n_outputs == 2
    assert sum(1 for n in ours.nodes if n.layer is not None and n.layer.name == shared.name) == 2
    assert diff <= ATOL


def test_functional_two_inputs_with_bidirectional(tmp_path: Path) -> None:
    a, b = keras.Input((5, 3), name="a"), keras.Input((5, 2), name="b")
    h = L.Bidirectional(L.GRU(3, return_sequences=True, reset_after=False), name="bi")(a)
    c = L.Concatenate(name="cat")([h, L.SimpleRNN(2, return_sequences=True)(b)])
    m = keras.Model([a, b], L.Dense(1)(c))
    xs = [_x(2, 5, 3), _x(2, 5, 2, seed=3)]
    ours, diff = _roundtrip(m, xs, tmp_path / "m.keras")
    assert [n.name for n in ours.inputs] == ["a", "b"]
    assert {"bi", "cat"} <= {n.name for n in ours.nodes}
    assert isinstance(next(n for n in ours.nodes if n.name == "bi").layer, rk.Bidirectional)
    assert diff <= ATOL


def test_load_keras_weights_into_same_architecture(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((5, 3)), L.LSTM(4, return_sequences=True), L.Dropout(0.1),
                          L.LSTM(3), L.Dense(2)])
    _randomize(m, 7)
    m.save_weights(tmp_path / "w.weights.h5")
    ours = rk.Sequential([rk.LSTM(4, return_sequences=True), rk.Dropout(0.1), rk.LSTM(3), rk.Dense(2)],
                         input_shape=(None, 5, 3))
    rk.load_keras_weights(ours, tmp_path / "w.weights.h5")
    x = _x(3, 5, 3)
    assert np.abs(m.predict(x, verbose=0) - ours.predict(x)).max() <= ATOL
    # a .keras archive's weights load the same way
    m.save(tmp_path / "m.keras")
    again = rk.Sequential([rk.LSTM(4, return_sequences=True), rk.LSTM(3), rk.Dense(2)],
                          input_shape=(None, 5, 3))
    rk.load_keras_weights(again, tmp_path / "m.keras")
    np.testing.assert_array_equal(again.predict(x), ours.predict(x))


def test_load_keras_weights_into_imported_graph(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((4, 2)), L.Bidirectional(L.GRU(3, return_sequences=True)), L.Dense(1)])
    _randomize(m, 3)
    m.save(tmp_path / "m.keras")
    ours = rk.load_keras(tmp_path / "m.keras")
    _randomize(m, 4)  # new weights, same architecture
    m.save_weights(tmp_path / "w.weights.h5")
    rk.load_keras_weights(ours, tmp_path / "w.weights.h5")
    x = _x(2, 4, 2)
    assert np.abs(m.predict(x, verbose=0) - ours.predict(x)).max() <= ATOL


def test_load_keras_weights_strict_and_all_or_nothing(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((5, 3)), L.LSTM(4), L.Dense(2)])
    m.save_weights(tmp_path / "w.weights.h5")
    wrong = rk.Sequential([rk.LSTM(6), rk.Dense(2)], input_shape=(None, 5, 3))
    before = wrong.layers[1].weight("kernel").copy()
    with pytest.raises(rk.WeightShapeError, match=r"0\.kernel.*\(3, 24\).*\(3, 16\)"):
        rk.load_keras_weights(wrong, tmp_path / "w.weights.h5")
    np.testing.assert_array_equal(wrong.layers[1].weight("kernel"), before)  # nothing changed
    short = rk.Sequential([rk.LSTM(4)], input_shape=(None, 5, 3))
    with pytest.raises(rk.WeightShapeError, match=r"layers/dense/vars/0.*unexpected"):
        rk.load_keras_weights(short, tmp_path / "w.weights.h5")
    extra = rk.Sequential([rk.LSTM(4), rk.Dense(2), rk.Dense(1)], input_shape=(None, 5, 3))
    with pytest.raises(rk.WeightShapeError, match=r"layers/dense_1/vars.*missing"):
        rk.load_keras_weights(extra, tmp_path / "w.weights.h5")


# -- refusals ----------------------------------------------------------------------------------

def _refused(tmp_path: Path, layers: list[Any], option: str, layer_name: str) -> UnsupportedFeatureError:
    m = keras.Sequential(layers)
    m.save(tmp_path / "r.keras")
    with pytest.raises(UnsupportedFeatureError) as ei:
        rk.load_keras(tmp_path / "r.keras")
    assert ei.value.option == option and ei.value.layer == layer_name
    assert isinstance(ei.value, rk.InvalidParameterError)
    assert layer_name in str(ei.value) and option in str(ei.value)
    return ei.value


@pytest.mark.parametrize("layer, option", [
    (lambda: L.LSTM(3, recurrent_activation="softmax", name="x"), "recurrent_activation"),
    (lambda: L.LSTM(3, activation="elu", name="x"), "activation"),
    (lambda: L.Dense(3, activation="gelu", name="x"), "activation"),
    (lambda: L.Conv1DTranspose(2, 2, name="x"), "class_name"),
])
def test_refusals(tmp_path: Path, layer: Any, option: str) -> None:
    stateful = option == "stateful"
    inp = keras.Input(batch_shape=(2, 5, 3)) if stateful else keras.Input((5, 3))
    _refused(tmp_path, [inp, layer()], option, "x")


def test_refuses_an_explicit_mask_argument(tmp_path: Path) -> None:
    inp = keras.Input((5, 3))
    out = L.LSTM(3, name="st")(inp, mask=keras.ops.ones((1, 5), dtype="bool"))
    keras.Model(inp, out).save(tmp_path / "s.keras")
    with pytest.raises((UnsupportedFeatureError, rk.FileFormatError)):
        rk.load_keras(tmp_path / "s.keras")


def test_dropout_and_recurrent_dropout_are_carried_over(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((5, 3)), L.GRU(3, dropout=0.2, recurrent_dropout=0.1, name="g",
                                                     return_sequences=True),
                          L.SimpleRNN(2, recurrent_dropout=0.3, name="s")])
    _randomize(m, 5)
    m.save(tmp_path / "m.keras")
    with pytest.warns(UserWarning, match=r"'s'.*recurrent_dropout=0\.3"):
        ours = rk.load_keras(tmp_path / "m.keras")
    assert ours.layers[0].dropout == pytest.approx(0.2)
    assert ours.layers[0].recurrent_dropout == pytest.approx(0.1)
    x = _x(2, 5, 3)
    assert np.abs(m.predict(x, verbose=0) - ours.predict(x)).max() <= ATOL


# -- foreign files -----------------------------------------------------------------------------

def test_foreign_files(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((5, 3)), L.Dense(2)])
    m.save_weights(tmp_path / "w.weights.h5")
    with pytest.raises(rk.FileFormatError, match="HDF5.*load_keras_weights"):
        rk.load_keras(tmp_path / "w.weights.h5")
    (tmp_path / "junk.keras").write_bytes(b"not a zip at all")
    with pytest.raises(rk.FileFormatError, match="not a Keras '.keras' archive"):
        rk.load_keras(tmp_path / "junk.keras")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(rk.FileFormatError, match="without config.json"):
        rk.load_keras(tmp_path / "other.zip")
    with pytest.raises(FileNotFoundError):
        rk.load_keras(tmp_path / "absent.keras")
    # a subclassed-model config is refused by class
    with zipfile.ZipFile(tmp_path / "sub.keras", "w") as z:
        z.writestr("config.json", json.dumps({"class_name": "MyModel", "config": {"name": "mine"}}))
        z.writestr("model.weights.h5", b"")
    with pytest.raises(UnsupportedFeatureError, match="MyModel"):
        rk.load_keras(tmp_path / "sub.keras")
    # a layer entry without its units is a malformed file, named as such
    bad = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 5, 3]}},
        {"class_name": "LSTM", "config": {"name": "l"}}]}}
    with zipfile.ZipFile(tmp_path / "bad.keras", "w") as z:
        z.writestr("config.json", json.dumps(bad))
        z.writestr("model.weights.h5", b"")
    with pytest.raises(rk.FileFormatError, match="malformed Keras LSTM.*units"):
        rk.load_keras(tmp_path / "bad.keras")


def test_missing_h5py_gives_a_clear_error(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((5, 3)), L.Dense(2)])
    m.save(tmp_path / "m.keras")
    code = (
        "import sys; sys.modules['h5py'] = None\n"
        "import rnnkit as rk\n"
        f"try:\n    rk.load_keras({str(tmp_path / 'm.keras')!r})\n"
        "except rk.MissingDependencyError as e:\n    print('OK', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("OK") and "pip install rnnkit[interop]" in out.stdout, out.stderr


def test_loading_imports_no_keras(tmp_path: Path) -> None:
    m = keras.Sequential([keras.Input((4, 2)), L.LSTM(3), L.Dense(1)])
    m.save(tmp_path / "m.keras")
    code = (
        "import sys, rnnkit as rk, numpy as np\n"
        f"m = rk.load_keras({str(tmp_path / 'm.keras')!r})\n"
        "m.predict(np.zeros((1, 4, 2), 'float32'))\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('keras', 'torch', 'tensorflow')))\n"
    )
    with warnings.catch_warnings():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
