"""Files are read by their content, never by their name alone, and a name never lies about
the format written: whatever ``save`` writes, ``load_model``, ``rnnkit convert``, ``predict``
and ``summary`` read."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.io._sniff import sniff

X = np.random.default_rng(0).standard_normal((4, 5, 3)).astype(np.float32)


def _model() -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(4, seed=0), rk.Dense(2, seed=1)], input_shape=(None, 5, 3))
    rng = np.random.default_rng(3)
    m.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.5 for w in m.get_weights()])
    return m


def _reference(m: rk.Sequential, x: np.ndarray) -> np.ndarray:
    """The LSTM (gates i, f, c, o) and Dense written out with numpy, from the model's weights."""
    k, u, b, w, c = (np.asarray(a, np.float64) for a in m.get_weights())
    h = np.zeros((x.shape[0], 4))
    s = np.zeros_like(h)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for t in range(x.shape[1]):
        z = x[:, t] @ k + h @ u + b.reshape(-1)
        i, f, g, o = sig(z[:, :4]), sig(z[:, 4:8]), np.tanh(z[:, 8:12]), sig(z[:, 12:])
        s = f * s + i * g
        h = o * np.tanh(s)
    return h @ w + c.reshape(-1)


def test_the_reference_is_the_model() -> None:
    m = _model()
    np.testing.assert_allclose(m.predict(X), _reference(m, X), rtol=1e-5, atol=1e-6)


def test_load_model_reads_a_keras_archive_by_content(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    m = _model()
    m.save(str(tmp_path / "m.keras"))
    assert sniff(tmp_path / "m.keras") == "keras"
    np.testing.assert_allclose(rk.load_model(tmp_path / "m.keras").predict(X), _reference(m, X),
                               rtol=1e-5, atol=1e-6)
    (tmp_path / "renamed.safetensors").write_bytes((tmp_path / "m.keras").read_bytes())
    np.testing.assert_allclose(rk.load_model(tmp_path / "renamed.safetensors").predict(X),
                               _reference(m, X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["sum3.rnnkit", "m.keras.bak", "model"])
def test_rnnkit_model_files_load_whatever_their_name(tmp_path: Path, name: str) -> None:
    m = _model()
    m.save(str(tmp_path / "m.safetensors"))
    (tmp_path / name).write_bytes((tmp_path / "m.safetensors").read_bytes())
    np.testing.assert_allclose(rk.load_model(tmp_path / name).predict(X), _reference(m, X),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("blob,kind,match", [
    (b"\x80\x04\x95" + b"\x00" * 40, "pickle", "a Python pickle .* never unpickles"),
    (b"\x89HDF\r\n\x1a\n" + b"\x00" * 40, "hdf5", r"a Keras weights file \(HDF5\), which holds no"),
    (b"hello world, not a model", "unknown", "nor any other file rnnkit reads: 24 bytes starting b'hello"),
])
def test_load_model_says_what_a_foreign_file_is(tmp_path: Path, blob: bytes, kind: str, match: str) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(blob)
    assert sniff(path) == kind
    with pytest.raises(rk.FileFormatError, match=match):
        rk.load_model(path)


def test_onnx_graphs_are_recognised(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    from rnnkit.cli._main import main

    m = _model()
    m.save(str(tmp_path / "sum3.rnnkit"))
    assert main(["convert", str(tmp_path / "sum3.rnnkit"), str(tmp_path / "m.onnx")]) == 0
    assert sniff(tmp_path / "m.onnx") == "onnx"
    with pytest.raises(rk.FileFormatError, match="an ONNX graph: rnnkit writes ONNX"):
        rk.load_model(tmp_path / "m.onnx")
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    out = sess.run(None, {sess.get_inputs()[0].name: X})[0]
    np.testing.assert_allclose(out, _reference(m, X), rtol=1e-5, atol=1e-5)


def test_convert_and_summary_read_by_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("h5py")
    from rnnkit.cli._main import main

    m = _model()
    m.save(str(tmp_path / "m.keras"))
    (tmp_path / "m.bin").write_bytes((tmp_path / "m.keras").read_bytes())
    assert main(["convert", str(tmp_path / "m.bin"), str(tmp_path / "back.rnnkit")]) == 0
    assert sniff(tmp_path / "back.rnnkit") == "safetensors"
    np.testing.assert_allclose(rk.load_model(tmp_path / "back.rnnkit").predict(X), _reference(m, X),
                               rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    assert main(["summary", str(tmp_path / "m.keras")]) == 0
    assert "LSTM" in capsys.readouterr().out
    (tmp_path / "p.txt").write_bytes(b"\x80\x04\x95junk")
    assert main(["convert", str(tmp_path / "p.txt"), str(tmp_path / "o.onnx")]) == 2
    assert "a Python pickle" in capsys.readouterr().err


def test_a_weights_h5_checkpoint_is_keras_hdf5(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    m = _model()
    m.compile("adam", "mse")
    y = np.zeros((4, 2), np.float32)
    ck = rk.ModelCheckpoint(str(tmp_path / "best.weights.h5"), monitor="loss", save_best_only=True)
    m.fit(X, y, epochs=2, batch_size=4, callbacks=[ck], verbose=0)
    assert (tmp_path / "best.weights.h5").read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
    assert sniff(tmp_path / "best.weights.h5") == "hdf5"
    fresh = rk.Sequential([rk.LSTM(4, seed=5), rk.Dense(2, seed=6)], input_shape=(None, 5, 3))
    fresh.load_weights(str(tmp_path / "best.weights.h5"))
    for a, b in zip(fresh.get_weights(), m.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["w.h5", "w.keras", "w.onnx"])
def test_weights_are_not_written_under_another_formats_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match=f"{name}' ends with .* name it '\\*.safetensors'"):
        _model().save_weights(str(tmp_path / name))
    layer = _model().layers[0]
    with pytest.raises(rk.InvalidParameterError, match="save_layer_weights"):
        rk.io.save_layer_weights(layer, tmp_path / name)
    assert not list(tmp_path.iterdir())


def test_saving_keras_without_h5py_says_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(rk.io.MissingDependencyError, match="writing Keras files needs h5py"):
        _model().save(str(tmp_path / "m.keras"))
    from rnnkit.io._keras_h5 import import_h5py

    with pytest.raises(rk.io.MissingDependencyError, match="reading Keras files needs h5py"):
        import_h5py()
