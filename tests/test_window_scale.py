"""Window (instance) scaling of a forecaster, ``rnnkit train --scale window``: each input window's
target column is standardised by that window's own mean and standard deviation (floored), the
network predicts in those units and its output is mapped back with the same statistics, by
training, ``rnnkit predict`` (one step and ``--steps``), the model server and Python alike."""

from __future__ import annotations

import csv
import io
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import rnnkit as rk
from rnnkit.cli import main
from rnnkit.cli._model import describe_spec
from rnnkit.cli._prepare import prepare
from rnnkit.timeseries import DataError, ForecastSpec
from rnnkit.timeseries._forecast import WINDOW_STD_FLOOR

warnings.filterwarnings("ignore", message=".*httpx2.*")

TRAIN = ["--epochs", "3", "--units", "4", "--quiet", "--no-plots", "--lr", "0.02"]


def bits(values: Any) -> bytes:
    return np.asarray(values, dtype=np.float64).tobytes()


def by_hand(a: np.ndarray, floor: float) -> tuple[float, float]:
    """(mean, max(population std, floor)) of one window's target values."""
    return float(np.mean(a)), max(float(np.std(a)), floor)


def test_a_windows_scaled_input_and_the_inverse_of_its_output_by_hand() -> None:
    rng = np.random.default_rng(3)
    n = 40
    y = 100.0 + 5.0 * np.sin(np.arange(n) / 3.0) + rng.standard_normal(n)
    y[10:16] = 7.25                                   # a constant stretch: window 10..15 is flat
    other = rng.standard_normal(n) * 4.0 + 2.0
    feats = np.stack([other, y], axis=1)
    prep = prepare(feats, y, ["other", "y"], "y", window=6, horizon=2, val_split=0.0, scale="window")
    spec = prep.spec
    assert spec.scale == "window"
    train_rows = len(prep.train) + 6 - 1 + 2          # rows the training windows read or predict
    assert spec.window_floor == pytest.approx(WINDOW_STD_FLOOR * np.std(y[:train_rows]), rel=1e-14)
    xo = spec.x_scaler                                # the other feature keeps the global scaling
    assert xo.mean[0] == pytest.approx(np.mean(other[:train_rows]), rel=1e-14)
    for s in (0, 10, 23):
        a = y[s:s + 6]
        mu, sigma = by_hand(a, spec.window_floor)
        # the scaled windows are float32 roundings of the float64 values: compare to 1e-12 before it
        np.testing.assert_allclose(prep.train.scale[s], [mu, sigma], rtol=1e-12, atol=0)
        expect_x = np.stack([(other[s:s + 6] - xo.mean[0]) / xo.std[0], (a - mu) / sigma], axis=1)
        np.testing.assert_array_equal(prep.train.x[s], expect_x.astype(np.float32))
        assert prep.train.y[s, 0] == np.float32((y[s + 6 - 1 + 2] - mu) / sigma)
        # the output mapped back with the same window's statistics: output * sigma + mean
        z = np.array([[0.37], [-1.5]])
        back = spec.to_levels(z, y, np.array([s + 7, s + 7]), np.tile(prep.train.scale[s], (2, 1)))
        np.testing.assert_allclose(back, z[:, 0] * sigma + mu, rtol=1e-12, atol=0)
        # the rows of one window sent alone: the same input bits and the same mapping back
        rows = feats[s:s + 6][None]
        np.testing.assert_array_equal(spec.window_inputs(rows)[0], prep.train.x[s])
        assert bits(spec.window_levels(z[:1], rows)) == bits(back[:1])
    # the flat window: std 0 -> the floor; its input column is exactly 0 and the forecast is
    # the constant plus output * floor
    assert prep.train.scale[10, 1] == spec.window_floor
    assert not prep.train.x[10, :, 1].any()
    got = spec.window_levels(np.array([[2.0]]), feats[10:16][None])
    assert got[0] == pytest.approx(7.25 + 2.0 * spec.window_floor, rel=1e-15)


def test_a_window_whose_spread_overflows_is_refused_by_name() -> None:
    y = np.linspace(1.0, 2.0, 30)
    spec = prepare(y[:, None], y, ["y"], "y", window=4, horizon=1, val_split=0.0, scale="window").spec
    rows = np.array([[[1.0], [2.0], [3.0], [4.0]], [[1e200], [-1e200], [1e200], [-1e200]]])
    # the target's values themselves must lie in float32's range, as with global scaling
    with pytest.raises(DataError, match=r"row 4 holds 1e\+200, .*beyond float32's range"):
        spec.window_inputs(rows)
    # windows given in float64 whose squared deviations overflow: refused by window, never passed on
    w = rk.timeseries.WindowArrays(rows, np.zeros((2, 1)), np.array([4, 5]))
    with pytest.raises(DataError, match=r"window 1 \(for data row 5\) cannot be scaled by its own"):
        spec.scale_windows(w)


def test_window_scaling_needs_the_target_among_the_features(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    y = np.linspace(1.0, 2.0, 30)
    with pytest.raises(DataError, match=r"expected the target 'y' among the features, got features \['x'\]"):
        prepare(y[:, None] * 2, y, ["x"], "y", window=4, horizon=1, val_split=0.0, scale="window")
    data = tmp_path / "two.csv"
    data.write_text("x,y\n" + "".join(f"{2 * float(v)!r},{float(v)!r}\n" for v in y))
    assert main(["train", str(data), "--target", "y", "--features", "x", "--scale", "window", *TRAIN,
                 "--out", str(tmp_path / "o")]) == 2
    assert "among the features" in capsys.readouterr().err
    # a panel (DeepAR) model has its own per-series scaler: the option is refused, not ignored
    assert main(["train", str(data), "--target", "y", "--panel", "--scale", "window", *TRAIN,
                 "--out", str(tmp_path / "p")]) == 2
    assert "--panel scales each series by its own mean" in capsys.readouterr().err


def series(n: int) -> np.ndarray:
    k = np.arange(n)
    return np.round(50.0 + 4.0 * np.sin(k / 3.0) + 0.3 * k, 6)


@pytest.fixture(scope="module")
def windowed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("windowed")
    data = d / "series.csv"
    data.write_text("level\n" + "".join(f"{float(v)!r}\n" for v in series(70)))
    assert main(["train", str(data), "--target", "level", "--window", "6", "--scale", "window", *TRAIN,
                 "--out", str(d / "out")]) == 0
    return d / "out" / "model.safetensors", data


def predict_csv(capsys: pytest.CaptureFixture[str], *args: str) -> list[list[str]]:
    capsys.readouterr()
    assert main(["predict", *args]) == 0, capsys.readouterr().err
    return list(csv.reader(io.StringIO(capsys.readouterr().out)))[1:]


def test_predict_serve_and_python_give_the_same_bits(windowed: tuple[Path, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    model, data = windowed
    fc = rk.io.load_forecaster(model)
    assert fc.spec.scale == "window" and fc.spec.window_floor > 0
    shown = describe_spec(fc.spec)
    assert f"std floor {fc.spec.window_floor:.6g}" in shown and "level: mean" not in shown
    rows = predict_csv(capsys, str(model), str(data))
    cli = np.array([float(r[1]) for r in rows])
    _, python = fc.one_step(fc.read_csv(data))
    v = series(70)
    windows = np.stack([v[s:s + 6, None] for s in range(len(v) - 5)])
    with TestClient(rk.serve.app(str(model))) as c:
        assert c.get("/v1/model").json()["forecast"]["scale"] == "window"
        r = c.post("/v1/predict", json={"x": windows.tolist()})
        assert r.status_code == 200, r.text
        served = np.asarray(r.json()["outputs"], dtype=np.float64)[:, 0]
        one = np.asarray(c.post("/v1/predict", json={"x": windows[9:10].tolist()}).json()["outputs"])
    assert bits(cli) == bits(python) == bits(served) == bits(fc.predict_windows(windows))
    assert bits(one[:, 0]) == bits(cli[9:10])
    # by hand: the last window standardised by its own statistics, the network, mapped back
    a = v[-6:]
    mu, sigma = by_hand(a, fc.spec.window_floor)
    z = float(np.asarray(fc.model.predict(((a - mu) / sigma)[None, :, None].astype(np.float32)),
                         dtype=np.float64)[0, 0])
    assert cli[-1] == pytest.approx(z * sigma + mu, rel=1e-12)
    # recursive: --steps, Forecaster.recursive and the one-window path appended by hand agree
    rec = np.array([float(r[1]) for r in predict_csv(capsys, str(model), str(data), "--steps", "5")])
    _, python_rec = fc.recursive(fc.read_csv(data), 5)
    hist = list(v)
    for _ in range(5):
        hist.append(float(fc.predict_windows(np.array(hist[-6:])[None, :, None])[0]))
    assert bits(rec) == bits(python_rec) == bits(hist[-5:])


def test_an_older_file_without_the_key_reads_as_global_scaling(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "series.csv"
    data.write_text("level\n" + "".join(f"{float(v)!r}\n" for v in series(50)))
    assert main(["train", str(data), "--target", "level", "--window", "4", *TRAIN,
                 "--out", str(tmp_path / "o")]) == 0
    model = tmp_path / "o" / "model.safetensors"
    with safe_open(str(model), framework="numpy") as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no items()
    spec = json.loads(meta[rk.timeseries.SPEC_KEY])
    assert spec["scale"] == "global"
    del spec["scale"], spec["window_floor"]
    meta[rk.timeseries.SPEC_KEY] = json.dumps(spec)
    old = tmp_path / "old.safetensors"
    save_file(tensors, str(old), metadata=meta)
    fc = rk.io.load_forecaster(old)
    assert fc.spec.scale == "global" and fc.spec == rk.io.load_forecaster(model).spec
    assert predict_csv(capsys, str(old), str(data)) == predict_csv(capsys, str(model), str(data))
    # a stored scale that is neither is damaged settings, a DataError
    spec["scale"] = "windowed"
    with pytest.raises(DataError, match=r"damaged .*scale must be one of global, window, got 'windowed'"):
        ForecastSpec.from_json(json.dumps(spec))


def test_window_scaling_forecasts_a_level_far_beyond_training_better_than_global(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sine on a ramp: the held-out third lies far above every training value. Without the
    highway, the globally scaled network sees inputs beyond any it was trained on (its tanh
    units saturate) while window scaling sees windows like the training ones."""
    n, cut = 240, 160
    k = np.arange(n)
    y = np.round(10.0 * np.sin(2 * np.pi * k / 12) + 0.5 * k, 6)
    train = tmp_path / "train.csv"
    train.write_text("level\n" + "".join(f"{float(v)!r}\n" for v in y[:cut]))
    full = tmp_path / "full.csv"
    full.write_text("level\n" + "".join(f"{float(v)!r}\n" for v in y))
    err = {}
    for scale in ("global", "window"):
        out = tmp_path / scale
        assert main(["train", str(train), "--target", "level", "--window", "12", "--scale", scale,
                     "--no-highway", "--epochs", "60", "--units", "8", "--lr", "0.01", "--quiet",
                     "--no-plots", "--seed", "1", "--out", str(out)]) == 0
        fc = rk.io.load_forecaster(out / "model.safetensors")
        pos, pred = fc.one_step(fc.read_csv(full))
        held = (pos >= cut) & (pos < n)
        err[scale] = float(np.sqrt(np.mean((pred[held] - y[pos[held]]) ** 2)))
    print(f"held-out RMSE: global {err['global']:.4g}, window {err['window']:.4g}")
    # the held-out values run 80..120 above a training range of about -10..90: the global
    # network's error is of the order of the level gap, window scaling's of the sine's
    assert err["window"] < 0.25 * err["global"], err
