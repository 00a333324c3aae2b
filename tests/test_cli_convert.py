"""``rnnkit convert SRC DST``: SRC read by content, DST's format by suffix, values checked against
the other framework (Keras, torch, onnxruntime), and bad input as one line on stderr with exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
TOL = 1e-5


def convert(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main(["convert", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def bad(capsys: pytest.CaptureFixture[str], *args: Any, says: str) -> None:
    code, _, err = convert(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("rnnkit: error: "), (code, err)
    assert says in lines[0], lines[0]


def model(tmp_path: Path) -> Path:
    m = rk.Sequential([rk.GRU(4, reset_after=True, return_sequences=True, seed=1), rk.LSTM(3, seed=2),
                       rk.Dense(2, seed=3)], input_shape=(None, None, 2))
    p = tmp_path / "m.safetensors"
    m.save(str(p))
    return p


def test_rnnkit_to_keras_onnx_and_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    src = model(tmp_path)
    ours = rk.load_model(src)
    x = np.random.default_rng(0).normal(size=(3, 7, 2)).astype(np.float32)
    code, out, _ = convert(capsys, src, tmp_path / "m.keras")
    assert code == 0 and "a Keras 3 archive" in out
    km = keras.saving.load_model(str(tmp_path / "m.keras"))
    np.testing.assert_allclose(np.asarray(km.predict(x, verbose=0)), ours.predict(x), atol=TOL, rtol=0)
    assert convert(capsys, tmp_path / "m.keras", tmp_path / "back.safetensors")[0] == 0
    np.testing.assert_allclose(rk.load_model(tmp_path / "back.safetensors").predict(x), ours.predict(x),
                               atol=0, rtol=0)
    assert convert(capsys, src, tmp_path / "w.weights.h5")[0] == 0
    assert convert(capsys, tmp_path / "w.weights.h5", tmp_path / "w.safetensors", "--like", src)[0] == 0
    np.testing.assert_array_equal(rk.load_model(tmp_path / "w.safetensors").predict(x), ours.predict(x))
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    code, out, _ = convert(capsys, tmp_path / "m.keras", tmp_path / "m.onnx", "--opset", "18")
    assert code == 0 and "an ONNX graph" in out
    got = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, ours.predict(x), atol=TOL, rtol=0)


def test_torch_in_and_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    mod = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2, batch_first=True)
    st_torch.save_file({"enc." + k: v for k, v in mod.state_dict().items()}, tmp_path / "t.safetensors")
    assert convert(capsys, tmp_path / "t.safetensors", tmp_path / "r.safetensors", "--prefix", "enc.",
                   "--batch-first")[0] == 0
    net = rk.load_model(tmp_path / "r.safetensors")
    x = np.random.default_rng(1).normal(size=(2, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(net.predict(x), mod(torch.from_numpy(x))[0].detach().numpy(), atol=TOL)
    code, out, _ = convert(capsys, tmp_path / "r.safetensors", tmp_path / "back.safetensors")
    assert code == 0 and "a PyTorch state dict" in out
    again = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2, batch_first=True)
    again.load_state_dict(st_torch.load_file(tmp_path / "back.safetensors"))
    for k, v in mod.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k
    bad(capsys, tmp_path / "r.safetensors", tmp_path / "p.onnx", says="ONNX's LSTM has no projection")
    assert not (tmp_path / "p.onnx").exists()


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = model(tmp_path)
    bad(capsys, tmp_path / "none.keras", tmp_path / "o.safetensors", says="none.keras: no such file")
    (tmp_path / "m.pt").write_bytes(b"\x80\x04junk")
    bad(capsys, tmp_path / "m.pt", tmp_path / "o.safetensors", says="found a Python pickle")
    bad(capsys, src, tmp_path / "o.pb", says="unknown output format '.pb'; convert writes .onnx")
    bad(capsys, src, src, says="DST is SRC")
    bad(capsys, src, tmp_path / "t.safetensors", says="a PyTorch state dict holds one torch.nn.LSTM/GRU/RNN; "
                                                      "this model has 3 layers (GRU, LSTM, Dense)")
    bad(capsys, src, tmp_path / "k.keras", "--opset", "17", says="--opset and --lengths apply to an .onnx")
    (tmp_path / "w.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
    bad(capsys, tmp_path / "w.weights.h5", tmp_path / "o.safetensors", says="pass --like MODEL")
    junk = tmp_path / "junk.safetensors"
    junk.write_text("not a model\n")
    bad(capsys, junk, tmp_path / "o.onnx", says="not a safetensors file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.safetensors", "m.pt", "m.safetensors",
                                                          "w.weights.h5"]


def test_console_entry_point(tmp_path: Path) -> None:
    src = model(tmp_path)
    res = subprocess.run([sys.executable, "-m", "rnnkit", "convert", str(src), str(tmp_path / "x.onnx2")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("rnnkit: error: ") and "'.onnx2'" in res.stderr


def test_an_int8_model_is_refused_by_every_exporter_naming_its_layer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An int8 model (rk.quantize) has no exact Keras or ONNX form: the exporters refuse it with
    UnsupportedFeatureError naming the int8 layer (it was a KeyError 'kernel'), and ``rnnkit
    convert`` says so in one line with exit status 2 (it exited 1 without a message)."""
    pytest.importorskip("onnx")
    pytest.importorskip("h5py")
    m = rk.Sequential([rk.LSTM(8, seed=1), rk.Dense(1, seed=2)], input_shape=(None, 5, 3))
    q = rk.quantize(m)
    for save, suffix in ((rk.io.save_onnx, "onnx"), (rk.io.save_keras, "keras")):
        with pytest.raises(rk.io.UnsupportedFeatureError, match="int8 layer .*export the float model") as e:
            save(q, tmp_path / f"q.{suffix}")
        assert e.value.layer == q.layers[0].name
        assert not (tmp_path / f"q.{suffix}").exists()
    src = tmp_path / "q.rnnkit"
    q.save(str(src))
    for suffix in ("onnx", "keras"):
        bad(capsys, src, tmp_path / f"c.{suffix}", says="int8 layer")
