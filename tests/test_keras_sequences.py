"""load_keras against live Keras 3 (torch backend) for the sequence features: Masking + LSTM,
mask_zero Embedding + Bidirectional in every merge mode, an encoder-decoder with return_state /
initial_state, stateful over three chunks, merge_mode=None; predictions <= 1e-5 and, for a few,
the weights after identical SGD steps in both <= 1e-5."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("h5py")
os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":  # pragma: no cover
    pytest.skip("Keras on its torch backend only", allow_module_level=True)
L = keras.layers
ATOL = 1e-5
RNG = np.random.default_rng(23)
LENGTHS = np.array([6, 2, 4, 1])


def _randomize(model: Any, seed: int) -> None:
    g = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(g.normal(0.0, 0.4, tuple(w.shape)).astype("float32"))


def _padded(F: int, T: int = 6) -> np.ndarray:
    x = RNG.normal(size=(len(LENGTHS), T, F)).astype("float32")
    x[np.arange(T)[None, :] >= LENGTHS[:, None]] = 0.0
    return x


def _ids(T: int = 6, vocab: int = 9) -> np.ndarray:
    ids = RNG.integers(1, vocab, (len(LENGTHS), T))
    ids[np.arange(T)[None, :] >= LENGTHS[:, None]] = 0
    return ids


def _diff(a: Any, b: Any) -> float:
    a = a if isinstance(a, list) else [a]
    b = b if isinstance(b, list) else [b]
    return max(float(np.abs(np.asarray(u) - np.asarray(v)).max()) for u, v in zip(a, b, strict=True))


def _load(model: Any, path: Path, seed: int = 0) -> Any:
    _randomize(model, seed)
    model.save(path)
    return rk.load_keras(path)


def _train_both(km: Any, ours: Any, x: Any, y: Any, loss: str, tmp: Path, epochs: int = 3) -> float:
    """Identical full-batch SGD steps in both; the largest weight difference afterwards."""
    km.compile(keras.optimizers.SGD(0.2), loss)
    ours.compile(rk.SGD(0.2), loss)
    n = (x[0] if isinstance(x, list) else x).shape[0]
    km.fit(x, y, epochs=epochs, batch_size=n, shuffle=False, verbose=0)
    ours.fit(x, y, epochs, shuffle=False)
    km.save(tmp / "trained.keras")
    theirs = rk.load_keras(tmp / "trained.keras")
    pairs = zip(ours.get_weights(), theirs.get_weights(), strict=True)
    return max(float(np.abs(a - b).max()) for a, b in pairs)


@pytest.mark.parametrize("seq", [False, True])
def test_masking_lstm(tmp_path: Path, seq: bool) -> None:
    km = keras.Sequential([keras.Input((6, 3)), L.Masking(0.0), L.LSTM(5, return_sequences=seq), L.Dense(2)])
    ours = _load(km, tmp_path / "m.keras")
    x = _padded(3)
    assert _diff(km.predict(x, verbose=0), ours.predict(x)) <= ATOL
    y = RNG.normal(size=(4, 6, 2) if seq else (4, 2)).astype("float32")
    assert _train_both(km, ours, x, y, "mse", tmp_path) <= ATOL
    assert _diff(km.predict(x, verbose=0), ours.predict(x)) <= ATOL


@pytest.mark.parametrize("mode", ["concat", "sum", "mul", "ave"])
def test_mask_zero_embedding_bidirectional_gru(tmp_path: Path, mode: str) -> None:
    km = keras.Sequential([keras.Input((6,)), L.Embedding(9, 4, mask_zero=True),
                           L.Bidirectional(L.GRU(3, return_sequences=True), merge_mode=mode),
                           L.Bidirectional(L.LSTM(2), merge_mode=mode), L.Dense(1, activation="sigmoid")])
    ours = _load(km, tmp_path / "m.keras")
    ids = _ids()
    assert _diff(km.predict(ids, verbose=0), ours.predict(ids)) <= ATOL
    if mode in ("concat", "mul"):
        y = RNG.integers(0, 2, (4, 1)).astype("float32")
        assert _train_both(km, ours, ids, y, "binary_crossentropy", tmp_path) <= ATOL


def test_encoder_decoder_return_state_initial_state(tmp_path: Path) -> None:
    enc_in, dec_in = keras.Input((5, 3)), keras.Input((6, 2))
    _, h, c = L.LSTM(4, return_state=True, name="enc")(L.Masking()(enc_in))
    dec = L.LSTM(4, return_sequences=True, name="dec")(dec_in, initial_state=[h, c])
    _, gh = L.GRU(3, return_state=True, name="g")(dec)
    km = keras.Model([enc_in, dec_in], [L.Dense(2, name="out")(dec), gh])
    ours = _load(km, tmp_path / "m.keras")
    xs = [_padded(3, 5), RNG.normal(size=(4, 6, 2)).astype("float32")]
    assert _diff(km.predict(xs, verbose=0), ours.predict(xs)) <= ATOL
    one = keras.Model([enc_in, dec_in], L.Dense(2, name="out")(dec))
    ours1 = _load(one, tmp_path / "one.keras", seed=2)
    y = RNG.normal(size=(4, 6, 2)).astype("float32")
    assert _train_both(one, ours1, xs, y, "mse", tmp_path) <= ATOL


def test_stateful_over_three_chunks(tmp_path: Path) -> None:
    km = keras.Sequential([keras.Input(batch_shape=(3, 4, 2)), L.GRU(5, stateful=True, return_sequences=True),
                           L.LSTM(3, stateful=True), L.Dense(1)])
    ours = _load(km, tmp_path / "m.keras")
    for layer in km.layers:
        if getattr(layer, "stateful", False):
            layer.reset_state()
    for k in range(3):
        x = RNG.normal(size=(3, 4, 2)).astype("float32")
        assert _diff(km.predict_on_batch(x), ours.predict(x)) <= ATOL, k
    ours.reset_states()
    for layer in km.layers:
        if getattr(layer, "stateful", False):
            layer.reset_state()
    x = RNG.normal(size=(3, 4, 2)).astype("float32")
    assert _diff(km.predict_on_batch(x), ours.predict(x)) <= ATOL


def test_merge_mode_none_and_merge_layers(tmp_path: Path) -> None:
    inp = keras.Input((None,))
    e = L.Embedding(9, 4, mask_zero=True)(inp)
    f, b = L.Bidirectional(L.SimpleRNN(3, return_sequences=True), merge_mode=None, name="bi")(e)
    s = L.Average()([L.Add()([f, b]), L.Multiply()([f, b])])
    km = keras.Model(inp, L.LSTM(2)(s))
    ours = _load(km, tmp_path / "m.keras")
    ids = _ids()
    assert _diff(km.predict(ids, verbose=0), ours.predict(ids)) <= ATOL


def test_bidirectional_return_state_and_initial_state(tmp_path: Path) -> None:
    src, tgt = keras.Input((5, 3)), keras.Input((6, 2))
    out, fh, fc, bh, bc = L.Bidirectional(L.LSTM(4, return_state=True), name="enc")(L.Masking()(src))
    dec = L.Bidirectional(L.LSTM(4, return_sequences=True), merge_mode="ave", name="dec")(
        tgt, initial_state=[fh, fc, bh, bc])
    km = keras.Model([src, tgt], [L.Dense(2, name="head")(dec), out])
    ours = _load(km, tmp_path / "m.keras")
    xs = [_padded(3, 5), RNG.normal(size=(4, 6, 2)).astype("float32")]
    assert _diff(km.predict(xs, verbose=0), ours.predict(xs)) <= ATOL
    one = keras.Model([src, tgt], L.Dense(2, name="head")(dec))
    ours1 = _load(one, tmp_path / "one.keras", seed=3)
    y = RNG.normal(size=(4, 6, 2)).astype("float32")
    assert _train_both(one, ours1, xs, y, "mse", tmp_path) <= ATOL


def test_multiply_of_differently_masked_sequences(tmp_path: Path) -> None:
    a, b = keras.Input((6,)), keras.Input((6,))
    ea = L.Embedding(9, 3, mask_zero=True)(a)
    eb = L.Embedding(9, 3, mask_zero=True)(b)
    km = keras.Model([a, b], L.GRU(2, return_sequences=True)(L.Multiply()([ea, eb])))
    ours = _load(km, tmp_path / "m.keras")
    ids_a, ids_b = _ids(), _ids()
    ids_b[:, 3:] = 0                                        # other padding than ids_a
    assert _diff(km.predict([ids_a, ids_b], verbose=0), ours.predict([ids_a, ids_b])) <= ATOL
