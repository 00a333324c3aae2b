"""Keras export (``rk.save_keras`` / ``rk.save_keras_weights`` / ``model.save("m.keras")``):
Keras' ``load_model`` predicts what rnnkit predicts (<= 1e-5), ``load_keras`` gives back the
same weights, and every refusal names what Keras cannot express."""

from __future__ import annotations

import itertools
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from seq_helpers import randomise

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
pytest.importorskip("h5py")

TOL = 1e-5



def same_weights(a: Any, b: Any) -> None:
    wa, wb = a.named_weights(), b.named_weights()
    va = [lay.weight(n) for lay, n in wa.values()]
    vb = [lay.weight(n) for lay, n in wb.values()]
    assert len(va) == len(vb)
    for x, y in zip(va, vb, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def check_keras(model: Any, path: Path, xs: list[np.ndarray]) -> float:
    km = keras.saving.load_model(str(path))
    worst = 0.0
    for x in xs:
        got = np.asarray(km.predict(x, verbose=0))
        want = model.predict(x)
        assert got.shape == want.shape
        worst = max(worst, float(np.abs(got - want).max()))
    assert worst <= TOL
    return worst


SEQ_LAYERS = [
    lambda: rk.SimpleRNN(4, "relu", return_sequences=True),
    lambda: rk.SimpleRNN(4, use_bias=False, go_backwards=True, return_sequences=True),
    lambda: rk.LSTM(5, return_sequences=True, go_backwards=True),
    lambda: rk.LSTM(5, recurrent_activation="hard_sigmoid", use_bias=False, return_sequences=True),
    lambda: rk.GRU(4, return_sequences=True),
    lambda: rk.GRU(4, reset_after=True, go_backwards=True, return_sequences=True),
    lambda: rk.GRU(4, reset_after=True, use_bias=False, return_sequences=True),
]


@pytest.mark.parametrize("make", SEQ_LAYERS, ids=["rnn-relu", "rnn-nobias-back", "lstm-back",
                                                  "lstm-hard-nobias",
                                                  "gru", "gru-ra-back", "gru-ra-nobias"])
def test_each_cell_to_keras_and_back(make: Any, tmp_path: Path) -> None:
    model = rk.Sequential([make(), rk.Dropout(0.2), rk.LSTM(3), rk.RepeatVector(2),
                           rk.GRU(3, return_sequences=True), rk.Dense(2, activation="softmax")],
                          input_shape=(None, None, 3))
    randomise(model.layers, 1)
    path = tmp_path / "m.keras"
    rk.save_keras(model, path)
    assert set(zipfile.ZipFile(path).namelist()) == {"config.json", "metadata.json", "model.weights.h5"}
    rng = np.random.default_rng(2)
    check_keras(model, path, [rng.normal(size=(B, T, 3)).astype(np.float32) for B, T in [(2, 5), (3, 8)]])
    same_weights(model, rk.load_keras(path))


def test_functional_with_bidirectional_embedding_and_shared_layer(tmp_path: Path) -> None:
    """The graph load_keras builds from a Keras Bidirectional goes back as a Bidirectional; a
    layer used at two nodes is one Keras layer called twice."""
    b = rk.GraphBuilder("clf")
    tok = b.input((None, None), name="tokens")
    e = b.add(rk.Embedding(20, 6), tok)
    fwd = b.add(rk.LSTM(5, return_sequences=True), e, name="bi__forward")
    bwd = b.add(rk.LSTM(5, return_sequences=True, go_backwards=True), e, name="bi__backward")
    bwd = b.add(rk.Reverse(1), bwd, name="bi__reverse")
    h = b.add(rk.Concatenate(-1), [fwd, bwd], name="bi")
    side = b.add(rk.SimpleRNN(10, return_sequences=True), e, name="side")
    h = b.add(rk.Concatenate(-1), [h, side], name="cat")
    h = b.add(rk.GRU(4, reset_after=True), h, name="gru")
    shared = rk.Dense(4, activation="tanh")
    h = b.add(shared, h, name="d1")
    h = b.add(shared, h, name="d2")
    model = b.build(b.add(rk.Dense(3, activation="softmax"), h, name="out"))
    randomise(model.layers, 3)
    path = tmp_path / "g.keras"
    model.save(str(path))                       # the suffix picks the format
    km = keras.saving.load_model(str(path))
    assert [type(lay).__name__ for lay in km.layers].count("Bidirectional") == 1
    rng = np.random.default_rng(4)
    check_keras(model, path, [rng.integers(0, 20, (B, T)).astype(np.float32) for B, T in [(2, 4), (5, 9)]])
    back = rk.load_keras(path)
    # the pattern's three nodes come back as one Bidirectional ("bi.forward.*", then
    # "bi.backward.*"); this flat graph lists the backward LSTM first (deeper: it feeds the
    # Reverse), as Keras orders it, so the weights are compared by name
    ours = {k.replace("bi__", "bi."): lay.weight(n) for k, (lay, n) in model.named_weights().items()}
    theirs = {k: lay.weight(n) for k, (lay, n) in back.named_weights().items()}
    assert sorted(ours) == sorted(theirs)
    for k, v in ours.items():
        assert v.dtype == theirs[k].dtype and np.array_equal(v, theirs[k]), k
    x = rng.integers(0, 20, (3, 6)).astype(np.float32)
    np.testing.assert_array_equal(back.predict(x), model.predict(x))


def test_weights_file_for_a_keras_model_of_the_same_architecture(tmp_path: Path) -> None:
    model = rk.Sequential([rk.Embedding(9, 4), rk.GRU(3, reset_after=True, return_sequences=True),
                           rk.LSTM(2), rk.Dense(2)], input_shape=(None, None))
    randomise(model.layers, 5)
    path = tmp_path / "w.weights.h5"
    rk.save_keras_weights(model, path)
    km = keras.Sequential([keras.Input((None,)), keras.layers.Embedding(9, 4),
                           keras.layers.GRU(3, return_sequences=True), keras.layers.LSTM(2),
                           keras.layers.Dense(2)])
    km.load_weights(str(path))
    x = np.random.default_rng(6).integers(0, 9, (3, 6)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(km.predict(x, verbose=0)), model.predict(x), atol=TOL, rtol=0)
    again = rk.Sequential([rk.Embedding(9, 4), rk.GRU(3, reset_after=True, return_sequences=True),
                           rk.LSTM(2), rk.Dense(2)], input_shape=(None, None))
    rk.load_keras_weights(again, path)
    same_weights(model, again)


class TinyCell(rk.Cell):
    name = "TinyCell"

    def params(self, input_dim: int) -> list[rk.Param]:
        return [rk.Param("V", (input_dim, self.units), lambda rng, s, dt: rng.uniform(-1, 1, s).astype(dt))]

    def step(self, w: Any, inp: np.ndarray, prev: Any, park: Any) -> Any:
        return (np.tanh(inp @ w["V"] + prev[0]),)

    def step_back(self, *a: Any) -> Any:
        raise NotImplementedError


@pytest.mark.parametrize("layers,match", [
    (lambda: [rk.LSTM(4, proj_size=2, name="p")], "layer 'p': proj_size: Keras' LSTM has no projection"),
    (lambda: [rk.RecurrentLayer(TinyCell(3), name="t")],
     r"layer 't': cell: a custom cell \(TinyCell\) has no Keras layer"),
    (lambda: [rk.rnn.RNNNet("lstm", 3, 4, rk.rnn.RNNConfig(batch_first=True), name="net")],
     "layer 'net': RNNNet: an RNNNet is a PyTorch-layout stack with no Keras layer"),
    (lambda: [rk.GRU(3, return_sequences=True), rk.Reverse(1, name="rev")],
     "layer 'rev': Reverse: Keras has no layer reversing an axis"),
    (lambda: [rk.GRU(3, stateful=True, name="s")], "layer 's': stateful: a stateful Keras layer"),
    (lambda: [rk.GRU(3, return_sequences=True), rk.ActivationLayer(rk.Softmax(axis=1), name="sm")],
     "layer 'sm': activation: softmax over axis 1"),
], ids=["proj", "cell", "rnnnet", "reverse", "stateful", "softmax-axis"])
def test_refusals(layers: Any, match: str, tmp_path: Path) -> None:
    model = rk.Sequential(layers(), input_shape=(None, None, 3))
    path = tmp_path / "m.keras"
    with pytest.raises(rk.UnsupportedFeatureError, match=match):
        rk.save_keras(model, path)
    with pytest.raises(rk.UnsupportedFeatureError, match=match):
        model.save(str(path))                   # never another format under a .keras name
    assert not path.exists()


def test_return_state_needs_a_graph_that_picks_outputs(tmp_path: Path) -> None:
    """Refused where graph nodes cannot pick one of a layer's outputs; where they can, the
    states are Keras' extra outputs (tests/test_keras_seq_export.py checks the values)."""
    b = rk.GraphBuilder()
    x = b.input((None, None, 3))
    node = b.add(rk.GRU(3, return_state=True, name="rs"), x)
    try:
        out = node[0]
    except TypeError:
        with pytest.raises(rk.UnsupportedFeatureError, match="layer 'rs_0': return_state: a Keras layer"):
            rk.save_keras(b.build(node), tmp_path / "m.keras")
        assert not (tmp_path / "m.keras").exists()
        return
    rk.save_keras(b.build(out), tmp_path / "m.keras")
    assert (tmp_path / "m.keras").exists()


def test_names_decide_the_format(tmp_path: Path) -> None:
    model = rk.Sequential([rk.GRU(3)], input_shape=(None, None, 2))
    with pytest.raises(rk.InvalidParameterError, match="Keras reads archives named"):
        rk.save_keras(model, tmp_path / "m.zip")
    with pytest.raises(rk.InvalidParameterError, match="Keras reads weights files named"):
        rk.save_keras_weights(model, tmp_path / "m.h5")
    with pytest.raises(rk.InvalidParameterError, match="names an HDF5 \\(Keras weights\\) file"):
        model.save(str(tmp_path / "m.h5"))
    with pytest.raises(rk.InvalidParameterError, match="metadata= is stored in rnnkit model files only"):
        rk.save_model(model, tmp_path / "m.keras", metadata={"a": "b"})
    with pytest.raises(rk.InvalidInputError, match="is not built"):
        rk.save_keras(rk.Sequential([rk.GRU(3)]), tmp_path / "m.keras")
    assert not list(tmp_path.iterdir())
    model.save(str(tmp_path / "m.safetensors"))          # rnnkit's own format as before
    assert rk.load_model(tmp_path / "m.safetensors").get_config() == model.get_config()


CELLS = [("SimpleRNN", {}), ("SimpleRNN", {"activation": "relu"}), ("LSTM", {}),
         ("LSTM", {"recurrent_activation": "hard_sigmoid"}), ("GRU", {}), ("GRU", {"reset_after": True})]


@pytest.mark.parametrize("cell,kw", CELLS, ids=[c + "".join(f"-{v}" for v in k.values()) for c, k in CELLS])
def test_each_direction_sequences_and_bias(cell: str, kw: dict[str, Any], tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    for go_backwards, seqs, bias in itertools.product([False, True], repeat=3):
        layer = getattr(rk, cell)(4, go_backwards=go_backwards, return_sequences=seqs, use_bias=bias, **kw)
        model = rk.Sequential([layer], input_shape=(None, None, 3))
        randomise(model.layers, 8)
        path = tmp_path / f"{go_backwards}{seqs}{bias}.keras"
        rk.save_keras(model, path)
        check_keras(model, path, [rng.normal(size=(B, T, 3)).astype(np.float32) for B, T in [(2, 5), (4, 3)]])
        same_weights(model, rk.load_keras(path))
