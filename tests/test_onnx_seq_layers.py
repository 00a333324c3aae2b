"""ONNX export of the sequence-model layers (``Bidirectional``, ``Masking``,
``Embedding(mask_zero=True)``, ``Add`` / ``Multiply`` / ``Average``, graph nodes with several
outputs for ``return_state``): onnxruntime's outputs equal rnnkit's (<= 1e-5) at two batch sizes
and two lengths; Keras masking is refused. Skipped where rnnkit has no ``Bidirectional``."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from seq_helpers import randomise

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
if not hasattr(rk, "Bidirectional"):
    pytest.skip("this rnnkit has no Bidirectional / Masking / merge layers", allow_module_level=True)
ort.set_default_logger_severity(3)

TOL = 1e-5
SIZES = [(2, 5), (4, 8)]



def check(model: Any, tmp_path: Path, feeds: Any, **kw: Any) -> None:
    """``feeds(B, T) -> (onnx feeds, rnnkit predict kwargs)``; every output compared."""
    path = tmp_path / "m.onnx"
    rk.save_onnx(model, path, **kw)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    sess = ort.InferenceSession(str(path))
    for B, T in SIZES:
        f, args, pkw = feeds(B, T)
        want = model.predict(*args, **pkw)
        want = want if isinstance(want, list) else [want]
        got = sess.run(None, f)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, atol=TOL, rtol=0)


@pytest.mark.parametrize("cell", ["SimpleRNN", "LSTM", "GRU"])
def test_bidirectional_every_merge_mode_with_lengths(cell: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    kw = {"reset_after": True} if cell == "GRU" else {}
    cls = getattr(rk, cell)
    for mode, seqs, own_backward in itertools.product(["concat", "sum", "mul", "ave", None], [False, True],
                                                      [False, True]):
        back = cls(3, go_backwards=True, return_sequences=seqs, activation="relu", **kw) if own_backward \
            else None
        b = rk.GraphBuilder()
        x = b.input((None, None, 2))
        bi = rk.Bidirectional(cls(3, return_sequences=seqs, **kw), merge_mode=mode, backward_layer=back)
        h = b.add(bi, x)
        model = b.build([h[0], h[1]] if mode is None else h)
        randomise(model.layers, 2)

        def feeds(B: int, T: int) -> Any:
            xx = rng.normal(size=(B, T, 2)).astype(np.float32)
            n = rng.integers(1, T + 1, B)
            return {"input_0": xx, "lengths": n}, (xx,), {"lengths": n}

        check(model, tmp_path, feeds, lengths=True)


def test_embedding_bidirectional_classifier_and_merges(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    b = rk.GraphBuilder()
    tok = b.input((None, None), name="tokens")
    e = b.add(rk.Embedding(30, 6), tok)
    h = b.add(rk.Bidirectional(rk.LSTM(5, return_sequences=True)), e)
    g = b.add(rk.GRU(10, return_sequences=True, reset_after=True), e)
    s = b.add(rk.Add(), [h, g])
    m = b.add(rk.Multiply(), [s, h])
    a = b.add(rk.Average(), [m, g, s])
    out = b.add(rk.Dense(3, activation="softmax"), b.add(rk.GRU(4), a))
    model = b.build(out)
    randomise(model.layers, 4)

    def feeds(B: int, T: int) -> Any:
        ids = rng.integers(0, 30, (B, T))
        return {"tokens": ids.astype(np.int64)}, (ids.astype(np.float32),), {}

    check(model, tmp_path, feeds)


def test_encoder_decoder_with_states(tmp_path: Path) -> None:
    """The encoder's final states start the decoder; the decoder's states are outputs too."""
    rng = np.random.default_rng(5)
    b = rk.GraphBuilder()
    src = b.input((None, None, 3), name="src")
    tgt = b.input((None, None, 2), name="tgt")
    _, h, c = b.add(rk.LSTM(6, return_state=True), src)
    y, h2, c2 = b.add(rk.LSTM(6, return_sequences=True, return_state=True), [tgt, h, c])
    bi = b.add(rk.Bidirectional(rk.GRU(4, return_sequences=True, return_state=True, reset_after=True)), y)
    model = b.build([b.add(rk.Dense(2), bi[0]), h2, c2, bi[1], bi[2]])
    randomise(model.layers, 6)

    def feeds(B: int, T: int) -> Any:
        xs = rng.normal(size=(B, T, 3)).astype(np.float32)
        xt = rng.normal(size=(B, T + 1, 2)).astype(np.float32)   # a length of its own
        return {"src": xs, "tgt": xt}, ([xs, xt],), {}

    check(model, tmp_path, feeds)


def test_keras_masks_are_refused(tmp_path: Path) -> None:
    masked = rk.Sequential([rk.Masking(0.0, name="mask"), rk.LSTM(3)], input_shape=(None, None, 2))
    with pytest.raises(rk.UnsupportedFeatureError, match="layer 'mask': Masking: Keras masking repeats"):
        rk.save_onnx(masked, tmp_path / "m.onnx")
    emb = rk.Sequential([rk.Embedding(5, 3, mask_zero=True, name="emb"), rk.GRU(2)], input_shape=(None, None))
    with pytest.raises(rk.UnsupportedFeatureError, match="layer 'emb': mask_zero: Keras masking repeats"):
        rk.save_onnx(emb, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()
