"""The model files the server reads (told apart by content) and the models it serves besides a
Sequential LSTM: a PyTorch-layout network, a Keras archive, token-id inputs."""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

pytest.importorskip("starlette")
pytest.importorskip("httpx")
warnings.filterwarnings("ignore", message=".*httpx2.*")

from starlette.testclient import TestClient  # noqa: E402

from rnnkit.serve import load  # noqa: E402
from rnnkit.serve._servable import load_file  # noqa: E402

F = 3


def f32(v: Any) -> np.ndarray:
    return np.asarray(v, dtype=np.float32)


def test_a_pytorch_state_dict_is_served_batch_first_with_streams(tmp_path: Path) -> None:
    path = tmp_path / "torch.safetensors"
    rk.save_torch_safetensors(rk.rnn.lstm(F, 5, rk.rnn.RNNConfig(num_layers=2), seed=3), path)
    net = rk.load_torch_rnn(path)  # PyTorch's default layout: (T, B, F)
    assert not net.config.batch_first
    sv = load(path)
    assert type(sv.model).__name__ == "RNNNet"
    assert sv.describe()["streams"]["state"] == {"h": [2, 5], "c": [2, 5]}
    x = np.random.default_rng(0).standard_normal((2, 4, F)).astype(np.float32)
    want, _ = net.seq(x.transpose(1, 0, 2))                       # (T, B, H)
    with TestClient(rk.serve.app(sv)) as c:
        got = f32(c.post("/v1/predict", json={"x": x.tolist()}).json()["outputs"])
        assert got.tobytes() == np.ascontiguousarray(want.transpose(1, 0, 2)).tobytes()
        sid = c.post("/v1/streams").json()["id"]
        outs = [f32(c.post(f"/v1/streams/{sid}/step", json={"seq": t + 1, "x": x[0, t:t + 1].tolist()}
                           ).json()["outputs"]) for t in range(4)]
        state = c.get(f"/v1/streams/{sid}").json()["state"]
    alone, final = net.seq(x[:1].transpose(1, 0, 2))
    assert np.concatenate(outs).tobytes() == np.ascontiguousarray(alone[:, 0]).tobytes()
    assert f32(state["h"]).tobytes() == np.ascontiguousarray(final[0][:, 0]).tobytes()
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file as torch_load

    module = torch.nn.LSTM(F, 5, num_layers=2)
    module.load_state_dict(torch_load(os.fspath(path)))
    with torch.no_grad():
        ref, _ = module(torch.from_numpy(x.transpose(1, 0, 2).copy()))
    np.testing.assert_allclose(got, ref.numpy().transpose(1, 0, 2), atol=2e-6)


def test_a_keras_archive_is_served(tmp_path: Path) -> None:
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    km = keras.Sequential([keras.Input((None, F)), keras.layers.GRU(4), keras.layers.Dense(2)])
    path = tmp_path / "m.keras"
    km.save(path)
    sv = load(path)
    x = np.random.default_rng(1).standard_normal((3, 5, F)).astype(np.float32)
    with TestClient(rk.serve.app(sv)) as c:
        got = f32(c.post("/v1/predict", json={"x": x.tolist()}).json()["outputs"])
    assert got.tobytes() == rk.load_keras(path).predict(x).tobytes()
    np.testing.assert_allclose(got, km.predict(x, verbose=0), atol=1e-5)


def test_token_ids_are_checked_against_the_vocabulary() -> None:
    model = rk.Sequential([rk.Embedding(10, 4, seed=1), rk.LSTM(3, seed=2)], input_shape=(None, 6))
    with pytest.raises(rk.InvalidParameterError, match="time axis"):
        rk.serve.Servable(rk.Sequential([rk.Dense(2)], input_shape=(None, 4)))
    app = rk.serve.app(model)
    ids = np.array([[1, 2, 3, 4, 5, 6]], dtype=np.int64)
    with TestClient(app) as c:
        got = c.post("/v1/predict", json={"x": ids.tolist()})
        assert got.status_code == 200, got.text
        assert f32(got.json()["outputs"]).tobytes() == model.predict(ids).tobytes()
        bad = c.post("/v1/predict", json={"x": [[1, 2, 3, 4, 5, 10]]})
        assert bad.status_code == 422 and bad.json()["error"]["expected"] == [0, 9]
        frac = c.post("/v1/predict", json={"x": [[1.5] * 6]})
        assert frac.status_code == 422 and frac.json()["error"]["code"] == "bad_dtype"
        assert c.post("/v1/streams").status_code == 409   # (batch, T) token input: no streams


def test_files_that_are_no_model_are_refused_without_unpickling(tmp_path: Path) -> None:
    evil = tmp_path / "model.pt"
    evil.write_bytes(pickle.dumps({"w": 1}))
    with pytest.raises(rk.FileFormatError, match="pickle"):
        load_file(evil)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(rk.FileFormatError, match="not a safetensors"):
        load_file(text)
    with pytest.raises(FileNotFoundError):
        load_file(tmp_path / "missing.safetensors")
