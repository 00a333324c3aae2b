"""Files: safetensors weights and model files (bit-exact round trips, strict loading that names
each bad name, atomic writes under a crash, typed errors for foreign files, no pickle)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

import rnnkit as rk
from rnnkit import io as rio
from rnnkit._layer import Layer
from rnnkit._safetensors import read_safetensors, write_safetensors
from rnnkit.layers import Dense
from rnnkit.models import GraphBuilder, Sequential, SequentialBuilder

X = np.random.default_rng(5).standard_normal((3, 6, 2)).astype(np.float32)


class StandIn:
    """The minimal model interface io needs: named_weights() and get_config()."""

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers

    def named_weights(self) -> dict[str, tuple[Layer, str]]:
        return {f"{i}.{n}": (lay, n) for i, lay in enumerate(self.layers) for n in lay.weight_names}

    def get_config(self) -> dict[str, Any]:
        return {"class_name": "StandIn", "config": {}}


def built(layer: Layer, shape: tuple[int | None, ...] = (None, 6, 2)) -> Layer:
    layer.build(shape)
    return layer


def rnn_stack(seed: int, dtype: str = "float32") -> Sequential:
    return (SequentialBuilder()
            .add(rk.SimpleRNN(4, return_sequences=True, seed=seed, dtype=dtype))
            .add(rk.LSTM(5, return_sequences=True, seed=seed + 1, dtype=dtype))
            .add(rk.GRU(3, seed=seed + 2, dtype=dtype))
            .add(Dense(2, "linear", seed=seed + 3, dtype=dtype))
            .build(rk.Shape.with_free_batch(X.shape)))


def weights_of(model: Any) -> dict[str, np.ndarray]:
    return {k: np.array(lay.weight(n)) for k, (lay, n) in model.named_weights().items()}


# -- weights: round trips ------------------------------------------------------------------------
def test_stand_in_round_trip_bit_exact(tmp_path: Path) -> None:
    a = StandIn([built(rk.LSTM(4, seed=1)), built(rk.GRU(3, reset_after=True, seed=2))])
    b = StandIn([built(rk.LSTM(4, seed=7)), built(rk.GRU(3, reset_after=True, seed=8))])
    path = tmp_path / "w.safetensors"
    rk.save_weights(a, path)
    tensors, meta = rio.read_safetensors(path)
    assert sorted(tensors) == ["0.bias", "0.kernel", "0.recurrent_kernel",
                               "1.bias", "1.kernel", "1.recurrent_kernel"]
    assert meta["format"] == "rnnkit-weights"
    rk.load_weights(b, path)
    for k, v in weights_of(a).items():
        assert weights_of(b)[k].tobytes() == v.tobytes(), k
    np.testing.assert_array_equal(b.layers[0].predict(X), a.layers[0].predict(X))


def test_sequential_save_weights_load_reproduces_predict_bit_for_bit(tmp_path: Path) -> None:
    a, b = rnn_stack(1), rnn_stack(50)
    assert not np.array_equal(a.predict(X), b.predict(X))
    path = tmp_path / "model.weights.safetensors"
    a.save_weights(str(path))
    tensors, _ = rio.read_safetensors(path)
    assert {"2.kernel", "2.recurrent_kernel", "2.bias", "1.kernel", "3.kernel"} <= set(tensors)
    b.load_weights(str(path))
    assert b.predict(X).tobytes() == a.predict(X).tobytes()


def test_dtype_is_converted_to_the_layers(tmp_path: Path) -> None:
    a, b = rnn_stack(1, "float64"), rnn_stack(9, "float32")
    rk.save_weights(a, tmp_path / "w64")
    rk.load_weights(b, tmp_path / "w64")
    for k, v in weights_of(b).items():
        assert v.dtype == np.float32
        np.testing.assert_array_equal(v, weights_of(a)[k].astype(np.float32))


def test_layer_weights_round_trip(tmp_path: Path) -> None:
    a, b = built(rk.GRU(3, seed=1)), built(rk.GRU(3, seed=2))
    rk.save_layer_weights(a, tmp_path / "gru")
    assert sorted(rio.read_safetensors(tmp_path / "gru")[0]) == ["bias", "kernel", "recurrent_kernel"]
    rk.load_layer_weights(b, tmp_path / "gru")
    assert b.predict(X).tobytes() == a.predict(X).tobytes()


# -- weights: strict loading ---------------------------------------------------------------------
def test_strict_load_names_each_offending_name_and_loads_nothing(tmp_path: Path) -> None:
    model = rnn_stack(1)
    before = weights_of(model)
    good = weights_of(rnn_stack(2))
    bad = dict(good)
    del bad["2.bias"]                                   # missing
    bad["1.kernel"] = np.zeros((2, 7), np.float32)      # mis-shaped: expected (4, 20)
    bad["9.kernel"] = np.zeros((3,), np.float32)        # unexpected
    save_file(bad, str(tmp_path / "bad"))
    with pytest.raises(rk.WeightShapeError) as ei:
        rk.load_weights(model, tmp_path / "bad")
    msg = str(ei.value)
    assert re.search(r"'2\.bias': expected \(1, 9\), got missing", msg), msg
    assert re.search(r"'1\.kernel': expected \(4, 20\), got \(2, 7\)", msg), msg
    assert re.search(r"'9\.kernel': expected no such weight.*unexpected \(3,\)", msg), msg
    assert "3 problem(s)" in msg
    assert ei.value.name == "1.kernel" and ei.value.expected == (4, 20) and ei.value.got == (2, 7)
    assert [p[0] for p in ei.value.problems] == ["1.kernel", "2.bias", "9.kernel"]  # type: ignore[attr-defined]
    for k, v in weights_of(model).items():                # all or nothing
        assert v.tobytes() == before[k].tobytes(), k


def test_single_missing_name_fails_naming_it(tmp_path: Path) -> None:
    model = rnn_stack(1)
    w = weights_of(model)
    del w["3.bias"]
    save_file(w, str(tmp_path / "m"))
    with pytest.raises(rk.WeightShapeError, match=r"'3\.bias': expected \(2,\), got missing"):
        rk.load_weights(model, tmp_path / "m")


def test_layer_file_into_another_kind_of_layer(tmp_path: Path) -> None:
    rk.save_layer_weights(built(rk.LSTM(3, seed=1)), tmp_path / "lstm")
    gru = built(rk.GRU(3, seed=1))
    with pytest.raises(rk.WeightShapeError, match=r"'kernel': expected \(2, 9\), got \(2, 12\).*"
                                                   r"'recurrent_kernel': expected \(3, 9\), got \(3, 12\)"):
        rk.load_layer_weights(gru, tmp_path / "lstm")


# -- model files ---------------------------------------------------------------------------------
def test_save_model_load_model_reproduces_predict_and_compile(tmp_path: Path) -> None:
    model = rnn_stack(3)
    model.compile(rk.Adam(0.01, 0.9, 0.999, 1e-8, 0.0, clipnorm=1.0), rk.MeanSquaredError(),
                  metrics=["mae", rk.metrics.Accuracy(0.3)])
    path = tmp_path / "model.safetensors"
    rk.save_model(model, path)
    tensors, meta = rio.read_safetensors(path)
    assert meta["format"] == "rnnkit-model" and meta["format_version"] == "1"
    assert json.loads(meta["config"]) == model.get_config()
    assert set(tensors) == set(model.named_weights())
    again = rk.load_model(path)
    assert isinstance(again, Sequential)
    assert again.predict(X).tobytes() == model.predict(X).tobytes()
    assert again.get_config() == model.get_config()
    assert isinstance(again.optimizer, rk.Adam)
    assert again.optimizer.get_config() == model.optimizer.get_config()
    assert isinstance(again.loss, rk.MeanSquaredError)
    assert [m.name for m in again.metrics] == ["mae", "accuracy"]
    assert again.metrics[1].threshold == 0.3
    # the model method writes the same kind of file
    model.save(str(tmp_path / "m2"))
    assert rk.load_model(tmp_path / "m2").predict(X).tobytes() == model.predict(X).tobytes()


def test_uncompiled_graph_model_round_trip(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input(rk.Shape((None, 6, 2)))
    fwd = b.add(rk.LSTM(4, return_sequences=True, seed=1), [x])
    bwd = b.add(rk.LSTM(4, return_sequences=True, go_backwards=True, seed=2), [x])
    model = b.build([fwd, bwd])
    rk.save_model(model, tmp_path / "g")
    tensors, meta = rio.read_safetensors(tmp_path / "g")
    assert "compile" not in meta
    assert set(tensors) == set(model.named_weights())
    again = rk.load_model(tmp_path / "g")
    for p, q in zip(again.predict(X), model.predict(X), strict=True):
        assert p.tobytes() == q.tobytes()


def test_model_file_with_a_mis_shaped_tensor_fails_naming_it(tmp_path: Path) -> None:
    model = rnn_stack(3)
    rk.save_model(model, tmp_path / "m")
    tensors, meta = rio.read_safetensors(tmp_path / "m")
    tensors["2.recurrent_kernel"] = np.zeros((3, 3), np.float32)
    save_file(tensors, str(tmp_path / "m"), metadata=meta)
    with pytest.raises(rk.WeightShapeError, match=r"'2\.recurrent_kernel': expected \(3, 9\), got \(3, 3\)"):
        rk.load_model(tmp_path / "m")


# -- foreign files -------------------------------------------------------------------------------
def test_not_a_safetensors_file(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_bytes(b"hello, this is not a tensor file at all")
    for call in (lambda: rk.load_model(p), lambda: rk.load_weights(rnn_stack(1), p)):
        with pytest.raises(rk.FileFormatError, match=re.escape(str(p)) + r".*not a safetensors.*b'hello"):
            call()
    with pytest.raises(rk.FileFormatError, match="directory"):
        rk.load_model(tmp_path)
    with pytest.raises(FileNotFoundError):
        rk.load_model(tmp_path / "absent")
    assert issubclass(rk.FileFormatError, rk.Error) and issubclass(rk.FileFormatError, ValueError)


def test_safetensors_without_rnnkit_metadata_is_not_a_model(tmp_path: Path) -> None:
    save_file({"w": np.zeros(3, np.float32)}, str(tmp_path / "plain"))
    with pytest.raises(rk.FileFormatError, match=r"plain: not an rnnkit model file.*no metadata, 1 tensor"):
        rk.load_model(tmp_path / "plain")
    save_file({"w": np.zeros(3, np.float32)}, str(tmp_path / "hf"), metadata={"format": "pt"})
    with pytest.raises(rk.FileFormatError, match=r"found metadata keys \['format'\] \(format 'pt'\)"):
        rk.load_model(tmp_path / "hf")
    rk.save_weights(rnn_stack(1), tmp_path / "weights")
    with pytest.raises(rk.FileFormatError, match="weights-only.*load_weights"):
        rk.load_model(tmp_path / "weights")


# -- atomic writes -------------------------------------------------------------------------------
def test_a_crash_mid_write_leaves_the_previous_file_and_no_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rnnkit import _atomic

    model = rnn_stack(1)
    path = tmp_path / "model.safetensors"
    rk.save_model(model, path)
    old = path.read_bytes()
    monkeypatch.setattr(_atomic, "_CHUNK", 256)          # several chunks, so the crash is mid-file
    calls = {"n": 0}
    real = _atomic._write_chunk

    def crashing(f: Any, chunk: memoryview) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            real(f, chunk[: len(chunk) // 2])
            raise OSError("disk on fire")
        real(f, chunk)

    monkeypatch.setattr(_atomic, "_write_chunk", crashing)
    other = rnn_stack(77)
    for save in (lambda: rk.save_model(other, path), lambda: rk.save_weights(other, path)):
        calls["n"] = 0
        with pytest.raises(OSError, match="disk on fire"):
            save()
        assert calls["n"] == 3
        assert path.read_bytes() == old
        assert os.listdir(tmp_path) == ["model.safetensors"]
    assert rk.load_model(path).predict(X).tobytes() == model.predict(X).tobytes()
    # a crash at the rename leaves the old file too, and cleans up
    monkeypatch.setattr(_atomic, "_write_chunk", real)

    def bad_replace(src: str, dst: str) -> None:
        raise OSError("rename failed")

    monkeypatch.setattr(_atomic.os, "replace", bad_replace)
    with pytest.raises(OSError, match="rename failed"):
        rk.save_model(other, path)
    assert path.read_bytes() == old and os.listdir(tmp_path) == ["model.safetensors"]


def test_write_keeps_permissions_and_refuses_missing_directory(tmp_path: Path) -> None:
    p = tmp_path / "w"
    rk.save_weights(rnn_stack(1), p)
    os.chmod(p, 0o640)
    rk.save_weights(rnn_stack(2), p)
    assert os.stat(p).st_mode & 0o777 == 0o640
    with pytest.raises(FileNotFoundError, match="does not exist"):
        rk.save_weights(rnn_stack(1), tmp_path / "no" / "such" / "w")


# -- no pickle -----------------------------------------------------------------------------------
def test_no_pickle_anywhere_in_the_library() -> None:
    src = Path(rk.__file__).parent
    pattern = re.compile(r"^\s*(import|from)\s+(c?pickle|dill|joblib|shelve)\b|allow_pickle\s*=\s*True|"
                         r"torch\.load\(|np\.load\([^)]*allow_pickle", re.M)
    offenders = [f"{p.relative_to(src)}: {m.group(0).strip()}" for p in src.rglob("*.py")
                 for m in pattern.finditer(p.read_text(encoding="utf-8"))]
    assert offenders == []
    # and the files are read by safetensors, whose loader runs no code
    assert "safe_open" in (src / "_safetensors.py").read_text(encoding="utf-8")
    assert pattern.search("import pickle\n") and pattern.search("np.load(f, allow_pickle=True)")


def test_a_0d_weight_keeps_its_shape_in_safetensors(tmp_path: Path) -> None:
    """A scalar weight (Attention's ``scale``) is written with shape [] and read back 0-d (the
    writer's ``ascontiguousarray`` had made it (1,), and the load refused it)."""
    write_safetensors(tmp_path / "s.safetensors", {"scale": np.array(1.5, np.float32)}, {})
    got, _ = read_safetensors(tmp_path / "s.safetensors")
    assert got["scale"].shape == () and got["scale"] == np.float32(1.5)
