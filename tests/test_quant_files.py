"""int8 models in rnnkit's own files (int8 tensors and float32 scales as weights), refused when
tampered with, and on the command line (``convert --quantize``, ``predict``); what has no int8
form is a typed error naming it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import datasets
from rnnkit.cli import main
from rnnkit.io._weights import read_safetensors, write_safetensors

F32 = np.float32


def _int8_model() -> tuple[rk.Sequential, rk.Sequential]:
    m = rk.Sequential([rk.Bidirectional(rk.GRU(6, seed=1, return_sequences=True)), rk.LSTM(5, seed=2),
                       rk.Dense(2, seed=3)]).build((None, None, 3))
    return m, rk.quantize(m)


def test_saved_and_loaded_bit_for_bit_with_int8_tensors(tmp_path: Path) -> None:
    m, q = _int8_model()
    p = tmp_path / "q.rnnkit"
    rk.save_model(q, p)
    tensors, _ = read_safetensors(p)
    assert tensors["2.kernel_q"].dtype == np.int8 and tensors["2.kernel_q"].shape == (2, 5)
    rs = tensors["1.recurrent_kernel_scale"]
    assert rs.dtype == F32 and rs.shape == (20,)
    w = m.layers[2].weight("kernel")       # the Dense kernel: per output column, max |w| / 127
    assert np.array_equal(tensors["2.kernel_scale"], (np.abs(w).max(axis=0) / F32(127)).astype(F32))
    back = rk.load_model(p)
    x = np.random.default_rng(0).normal(size=(4, 7, 3)).astype(F32)
    assert np.array_equal(back.predict(x), q.predict(x))
    assert np.abs(back.predict(x) - m.predict(x)).max() < 0.03
    assert back.layers[1].weight("kernel_q").dtype == np.int8
    kernels = [layer.weight(n).nbytes for layer, n in m.named_weights().values() if n.endswith("kernel")]
    assert 4 * sum(t.nbytes for k, t in tensors.items() if k.endswith("_q")) == sum(kernels)


@pytest.mark.parametrize("change,error,says", [
    (lambda t: t.update({"2.kernel_scale": np.ones(3, F32)}), rk.WeightShapeError, "2.kernel_scale"),
    (lambda t: t.update({"1.kernel_scale": np.ones((20, 1), F32)}), rk.WeightShapeError, "1.kernel_scale"),
    (lambda t: t["2.kernel_scale"].__setitem__(0, -1.0), rk.InvalidInputError, "scales must be"),
    (lambda t: t["1.recurrent_kernel_scale"].__setitem__(3, 0.0), rk.InvalidInputError, "scales must be"),
    (lambda t: t.update({"2.kernel_q": np.full((2, 5), 1.5, F32)}), rk.InvalidInputError, "integers"),
    (lambda t: t.update({"2.kernel_q": np.full((2, 5), -128, np.int8)}), rk.InvalidInputError, "[-127, 127]"),
])
def test_a_tampered_file_is_refused(tmp_path: Path, change: object, error: type, says: str) -> None:
    _, q = _int8_model()
    p = tmp_path / "q.rnnkit"
    rk.save_model(q, p)
    tensors, meta = read_safetensors(p)
    tensors = {k: np.array(v) for k, v in tensors.items()}
    change(tensors)  # type: ignore[operator]
    write_safetensors(p, tensors, meta)
    with pytest.raises(error) as info:
        rk.load_model(p)
    assert says in str(info.value)


def test_what_has_no_int8_form_is_named() -> None:
    with pytest.raises(rk.InvalidParameterError, match="proj_size"):
        rk.quantize(rk.Sequential([rk.LSTM(6, proj_size=3, name="projected")]).build((None, 4, 2)))
    with pytest.raises(rk.InvalidParameterError, match="float64"):
        rk.quantize(rk.Sequential([rk.Dense(2, dtype="float64")]).build((None, 3)))
    with pytest.raises(rk.InvalidParameterError, match="not built"):
        rk.quantize(rk.Sequential([rk.Dense(2)]))
    with pytest.raises(rk.InvalidParameterError, match="Sequential"):
        rk.quantize(rk.Dense(2))


def test_int8_models_do_not_train() -> None:
    _, q = _int8_model()
    q.compile(loss="mse", optimizer="adam")
    x = np.zeros((2, 4, 3), F32)
    with pytest.raises(rk.InvalidInputError, match="int8 inference layer"):
        q.fit(x, np.zeros((2, 2), F32), epochs=1, verbose=0)


def test_convert_quantize_then_predict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sun = str(datasets.path("sunspots"))
    out = tmp_path / "run"
    assert main(["train", sun, "--target", "SUNACTIVITY", "--window", "6", "--units", "8", "--epochs", "3",
                 "--batch-size", "64", "--seed", "3", "--out", str(tmp_path / "hw"), "--quiet"]) == 0
    capsys.readouterr()      # the default network (a graph: LSTM + AR highway) has no int8 form
    assert main(["convert", str(tmp_path / "hw" / "model.safetensors"), str(tmp_path / "hw.rnnkit"),
                 "--quantize"]) == 2
    assert "graph models have no int8 form" in capsys.readouterr().err
    assert main(["train", sun, "--target", "SUNACTIVITY", "--window", "6", "--units", "8", "--epochs", "3",
                 "--batch-size", "64", "--seed", "3", "--out", str(out), "--quiet", "--no-highway"]) == 0
    src, dst = out / "model.safetensors", tmp_path / "int8.rnnkit"
    capsys.readouterr()
    assert main(["convert", str(src), str(dst), "--quantize"]) == 0
    assert "int8" in capsys.readouterr().out
    assert read_safetensors(dst)[0]["0.kernel_q"].dtype == np.int8
    assert main(["predict", str(src), sun]) == 0
    f32 = capsys.readouterr().out.splitlines()
    assert main(["predict", str(dst), sun]) == 0
    i8 = capsys.readouterr().out.splitlines()
    assert f32[0] == i8[0] and len(f32) == len(i8) == 309 - 6 + 2
    a = np.array([float(r.split(",")[1]) for r in f32[1:]])
    b = np.array([float(r.split(",")[1]) for r in i8[1:]])
    assert 0 < np.abs(a - b).max() < 0.02 * np.abs(a).max()
    assert main(["convert", str(src), str(tmp_path / "m.onnx"), "--quantize"]) == 2
    assert "--quantize writes an rnnkit model file" in capsys.readouterr().err


def test_the_sunspots_demo_keeps_its_test_rmse_in_int8(tmp_path: Path) -> None:
    from rnnkit.cli._demo import TEST_YEARS, TRANSFORM, VAL_SPLIT, WINDOW, run_demo
    from rnnkit.cli._prepare import predict_blocks, prepare

    res = run_demo(tmp_path, verbose=False, plots=False)
    model = rk.io.load_forecaster(res.model_path).model
    values = datasets.sunspots().values
    prep = prepare(values[:, None], values, ["SUNACTIVITY"], "SUNACTIVITY", window=WINDOW, horizon=1,
                   val_split=VAL_SPLIT, n_test=TEST_YEARS, transform=TRANSFORM, index_name="YEAR",
                   what="sunspots")
    actual = prep.target[prep.test.pos]
    f32, i8 = (np.sqrt(np.mean((predict_blocks(m, prep.spec, prep.test, prep.target) - actual) ** 2))
               for m in (model, rk.quantize(model)))
    assert f32 == pytest.approx(res.comparison.rows[0][1], rel=1e-9)   # the demo's own figure
    assert abs(i8 / f32 - 1) < 0.01, (f32, i8)
