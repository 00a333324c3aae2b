"""What a recurrence is: a built-in cell class declares its kind once, read by one function
(``builtin_kind``) from the exact class. A subclass that changes the arithmetic is no built-in
kind: it runs the reference and every exporter refuses it, naming the layer.
``RecurrentLayer(LSTMCell(...))`` and ``rk.LSTM(...)`` are one thing in files and exporters."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import assert_gradcheck
from rnnkit import kernels
from rnnkit._kind import builtin_kind
from rnnkit.io import UnsupportedFeatureError
from rnnkit.layers._registry import layer_to_config
from rnnkit.recurrent import (
    Cell,
    GRUCell,
    GRUResetAfterCell,
    LSTMCell,
    RecurrentLayer,
    SimpleRNNCell,
    StepBack,
)


class HalfGRU(GRUResetAfterCell):
    """A GRU (reset_after) whose new state is half the GRU's: h_t = 0.5 * gru(x_t, h_{t-1})."""

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: tuple[np.ndarray, ...],
             park: dict[str, np.ndarray] | None) -> tuple[np.ndarray, ...]:
        (h,) = super().step(w, inp, prev, park)
        return (0.5 * h,)

    def step_back(self, w: Mapping[str, np.ndarray], d: tuple[np.ndarray, ...], inp: np.ndarray | None,
                  prev: tuple[np.ndarray, ...], new: tuple[np.ndarray, ...],
                  park: Mapping[str, np.ndarray]) -> StepBack:
        return super().step_back(w, (0.5 * d[0],), inp, prev, new, park)


def _sig(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def half_gru_reference(x: np.ndarray, W: np.ndarray, U: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An independent float64 loop of HalfGRU: the reset-after GRU equations, halved."""
    B, T, _ = x.shape
    H = U.shape[0]
    h = np.zeros((B, H))
    for t in range(T):
        xw = x[:, t] @ W + b[0]
        hu = h @ U + b[1]
        z = _sig(xw[:, :H] + hu[:, :H])
        r = _sig(xw[:, H:2 * H] + hu[:, H:2 * H])
        n = np.tanh(xw[:, 2 * H:] + r * hu[:, 2 * H:])
        h = 0.5 * (z * h + (1 - z) * n)
    return h


def test_the_declaration_is_read_from_the_exact_class() -> None:
    assert [builtin_kind(c(3)) for c in (SimpleRNNCell, LSTMCell, GRUCell, GRUResetAfterCell)] == \
        ["SimpleRNN", "LSTM", "GRU", "GRU"]
    assert builtin_kind(HalfGRU(3)) is None          # inherits `kind`, does not declare it
    assert builtin_kind(HalfGRU) is None

    class SameLSTM(LSTMCell):
        kind = "LSTM"                                # a subclass that declares it: a promise

    class Odd(Cell):
        kind = "Transformer"                         # not a built-in kind at all

    assert builtin_kind(SameLSTM(2)) == "LSTM"
    assert builtin_kind(Odd(2)) is None
    assert builtin_kind(object()) is None


def test_a_subclass_that_changes_step_runs_the_reference() -> None:
    layer = RecurrentLayer(HalfGRU(3), seed=4, dtype="float64")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 5))
    y = layer.forward_mut(x, rk.Ctx.inference())   # (builds the layer)
    assert kernels.find(layer.cell) is None
    W, U, b = (layer.weight(n) for n in ("kernel", "recurrent_kernel", "bias"))
    np.testing.assert_allclose(y, half_gru_reference(x, W, U, b), rtol=1e-12, atol=1e-14)
    plain = rk.GRU(3, reset_after=True, seed=4, dtype="float64")
    assert np.abs(plain.forward_mut(x, rk.Ctx.inference()) - y).max() > 0.05
    assert_gradcheck(layer, x, rtol=1e-6)


def _half_gru_model() -> rk.Sequential:
    model = rk.Sequential([RecurrentLayer(HalfGRU(3), seed=1, name="halfgru"), rk.Dense(2, seed=2)],
                          input_shape=(None, None, 4))
    return model


def test_onnx_refuses_the_subclass_naming_the_layer(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    with pytest.raises(UnsupportedFeatureError, match="halfgru.*HalfGRU.*subclass of GRUResetAfterCell") as e:
        rk.save_onnx(_half_gru_model(), tmp_path / "m.onnx")
    assert (e.value.layer, e.value.option) == ("halfgru", "cell")
    assert not (tmp_path / "m.onnx").exists()


def test_keras_refuses_the_subclass_naming_the_layer(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    with pytest.raises(UnsupportedFeatureError, match="halfgru.*HalfGRU") as e:
        rk.save_keras(_half_gru_model(), tmp_path / "m.keras")
    assert e.value.layer == "halfgru"
    assert not (tmp_path / "m.keras").exists()


def test_torch_refuses_the_subclass_naming_the_layer(tmp_path: Path) -> None:
    layer = _half_gru_model().layers[0]
    for export in (rk.io.to_torch_state, lambda lay: rk.io.save_torch_safetensors(lay, tmp_path / "t.st")):
        with pytest.raises(rk.InvalidInputError, match="'halfgru'.*HalfGRU"):
            export(layer)
    with pytest.raises(rk.InvalidInputError, match="'halfgru'.*HalfGRU"):
        rk.io.to_keras_weights(layer)
    assert not (tmp_path / "t.st").exists()


def _pair(**kw: Any) -> tuple[rk.Sequential, rk.Sequential]:
    """The same LSTM model twice: through RecurrentLayer(LSTMCell) and through rk.LSTM."""
    a = rk.Sequential([RecurrentLayer(LSTMCell(4), seed=3, **kw), rk.Dense(1, seed=5)],
                      input_shape=(None, None, 2))
    b = rk.Sequential([rk.LSTM(4, seed=3, **kw), rk.Dense(1, seed=5)], input_shape=(None, None, 2))
    return a, b


def test_recurrent_layer_over_a_builtin_cell_is_the_layer_in_files(tmp_path: Path) -> None:
    a, b = _pair(return_sequences=False)
    assert layer_to_config(a.layers[0]) == layer_to_config(b.layers[0])
    assert layer_to_config(a.layers[0])["class_name"] == "LSTM"
    assert a.get_config() == b.get_config()
    gru = RecurrentLayer(GRUResetAfterCell(3, use_bias=False))
    assert layer_to_config(gru) == layer_to_config(rk.GRU(3, reset_after=True, use_bias=False))
    x = np.random.default_rng(1).normal(size=(3, 6, 2)).astype(np.float32)
    assert np.array_equal(a.predict(x), b.predict(x))
    a.save(tmp_path / "a.rnnkit")
    again = rk.load_model(tmp_path / "a.rnnkit")
    assert type(again.layers[0]) is rk.LSTM
    assert np.array_equal(again.predict(x), b.predict(x))


def test_recurrent_layer_over_a_builtin_cell_exports_as_the_layer(tmp_path: Path) -> None:
    a, b = _pair(return_sequences=True)
    assert {k: v.tolist() for k, v in rk.io.to_torch_state(a.layers[0]).items()} == \
        {k: v.tolist() for k, v in rk.io.to_torch_state(b.layers[0]).items()}
    assert all(np.array_equal(p, q) for p, q in zip(rk.io.to_keras_weights(a.layers[0]),
                                                    rk.io.to_keras_weights(b.layers[0]), strict=True))
    # the weights of a torch state dict go back into a RecurrentLayer(LSTMCell) as into an LSTM
    back = RecurrentLayer(LSTMCell(4))
    rk.io.from_torch_state(back, rk.io.to_torch_state(b.layers[0]))
    assert np.array_equal(back.weight("kernel"), b.layers[0].weight("kernel"))
    if _has("h5py"):
        rk.save_keras(a, tmp_path / "a.keras")
        rk.save_keras(b, tmp_path / "b.keras")
        read = [json.loads(zipfile.ZipFile(tmp_path / f"{n}.keras").read("config.json")) for n in "ab"]
        assert read[0] == read[1]
    if _has("onnxruntime") and _has("onnx"):
        import onnxruntime as ort

        x = np.random.default_rng(2).normal(size=(2, 5, 2)).astype(np.float32)
        outs = []
        for name, model in (("a", a), ("b", b)):
            rk.save_onnx(model, tmp_path / f"{name}.onnx")
            sess = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
            outs.append(sess.run(None, {"input": x})[0])
        assert np.array_equal(outs[0], outs[1])
        np.testing.assert_allclose(outs[0], b.predict(x), atol=1e-5, rtol=0)


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True
