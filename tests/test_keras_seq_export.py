"""Keras export of the sequence-model layers (``Bidirectional`` with every merge mode,
``Masking``, ``Embedding(mask_zero=True)``, ``Add`` / ``Multiply`` / ``Average``): Keras'
``load_model`` predicts what rnnkit predicts (<= 1e-5) and ``load_keras`` gives back the same
weights. Skipped where rnnkit has no ``Bidirectional``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from seq_helpers import randomise

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
pytest.importorskip("h5py")
if not hasattr(rk, "Bidirectional"):
    pytest.skip("this rnnkit has no Bidirectional / Masking / merge layers", allow_module_level=True)

TOL = 1e-5



def round_trip(model: Any, tmp_path: Path, xs: list[np.ndarray]) -> None:
    path = tmp_path / "m.keras"
    rk.save_keras(model, path)
    km = keras.saving.load_model(str(path))
    for x in xs:
        np.testing.assert_allclose(np.asarray(km.predict(x, verbose=0)), model.predict(x), atol=TOL, rtol=0)
    back = rk.load_keras(path)
    for x in xs:
        np.testing.assert_array_equal(back.predict(x), model.predict(x))


@pytest.mark.parametrize("mode", ["concat", "sum", "mul", "ave"])
def test_bidirectional_and_masking_in_a_sequential(mode: str, tmp_path: Path) -> None:
    model = rk.Sequential([rk.Masking(0.0),
                           rk.Bidirectional(rk.LSTM(4, return_sequences=True), merge_mode=mode),
                           rk.Bidirectional(rk.GRU(3, reset_after=True)), rk.Dense(2)],
                          input_shape=(None, None, 3))
    randomise(model.layers, 1)
    rng = np.random.default_rng(2)
    xs = []
    for B, T in [(2, 5), (4, 7)]:
        x = rng.normal(size=(B, T, 3)).astype(np.float32)
        x[1, T - 2:] = 0.0                        # padding: masked steps
        xs.append(x)
    round_trip(model, tmp_path, xs)


def test_embedding_mask_zero_and_merges(tmp_path: Path) -> None:
    b = rk.GraphBuilder()
    tok = b.input((None, None), name="tokens")
    e = b.add(rk.Embedding(20, 6, mask_zero=True), tok)
    h = b.add(rk.Bidirectional(rk.SimpleRNN(5, return_sequences=True)), e)
    g = b.add(rk.GRU(10, return_sequences=True), e)
    s = b.add(rk.Add(), [h, g])
    m = b.add(rk.Multiply(), [s, h])
    a = b.add(rk.Average(), [m, g])
    model = b.build(b.add(rk.Dense(3, activation="softmax"), b.add(rk.LSTM(4), a)))
    randomise(model.layers, 3)
    rng = np.random.default_rng(4)
    xs = []
    for B, T in [(2, 5), (3, 8)]:
        ids = rng.integers(1, 20, (B, T)).astype(np.float32)
        ids[0, T - 3:] = 0                        # padding id 0
        xs.append(ids)
    round_trip(model, tmp_path, xs)


def test_encoder_decoder_with_states(tmp_path: Path) -> None:
    """return_state outputs picked by the graph and initial_state calls become Keras' multi-output
    layers and ``initial_state=`` calls."""
    b = rk.GraphBuilder()
    src = b.input((None, None, 3), name="src")
    tgt = b.input((None, None, 2), name="tgt")
    _, h, c = b.add(rk.LSTM(6, return_state=True), src)
    y, h2, _ = b.add(rk.LSTM(6, return_sequences=True, return_state=True), [tgt, h, c])
    model = b.build([b.add(rk.Dense(2), y), h2])
    randomise(model.layers, 5)
    path = tmp_path / "ed.keras"
    rk.save_keras(model, path)
    km = keras.saving.load_model(str(path))
    rng = np.random.default_rng(6)
    for B, T in [(2, 4), (3, 6)]:
        xs = rng.normal(size=(B, T, 3)).astype(np.float32)
        xt = rng.normal(size=(B, T + 2, 2)).astype(np.float32)
        got, want = km.predict([xs, xt], verbose=0), model.predict([xs, xt])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, atol=TOL, rtol=0)
        back = rk.load_keras(path).predict([xs, xt])
        for g, w in zip(back, want, strict=True):
            np.testing.assert_array_equal(g, w)
