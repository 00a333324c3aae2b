"""The default forecaster of ``rnnkit train``: a recurrent branch plus LSTNet's linear AR
highway (rnnkit.cli._model), its start at the least-squares AR fit, its flags, and its file
read back by ``rnnkit predict`` and the model server with the numbers of the network in memory."""

from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.cli import main
from rnnkit.cli._backtest import HIGHWAY_READS_VALUES
from rnnkit.cli._model import (
    HIGHWAY,
    RECURRENT_OUT,
    TrainConfig,
    build_network,
    highway_start,
    start_from_ar,
    train_network,
)
from rnnkit.cli._prepare import prepare
from rnnkit.timeseries import ARModel, Forecaster, WindowArrays, backtest, baselines, choose_difference

warnings.filterwarnings("ignore", message=".*httpx2.*")


def ar_series(n: int, seed: int = 0) -> np.ndarray:
    """An AR(2) series with a seasonal swing, in float32-representable values."""
    rng = np.random.default_rng(seed)
    y = np.zeros(n)
    for t in range(2, n):
        y[t] = 0.6 * y[t - 1] - 0.3 * y[t - 2] + np.sin(t / 2.0) + 0.3 * rng.standard_normal()
    return y.astype(np.float32).astype(np.float64)


def test_the_network_is_the_recurrent_branch_plus_a_linear_map_of_the_last_p_rows() -> None:
    """The equation of rnnkit.cli._model's docstring, against PyTorch with the weights copied."""
    torch = pytest.importorskip("torch")
    window, feats, units, p = 5, 2, 3, 2
    model = build_network(TrainConfig(units=units, highway=p, seed=0), window, feats)
    rng = np.random.default_rng(1)
    for layer in model.layers:
        ws = layer.get_weights()
        if ws:
            layer.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in ws])
    x = rng.standard_normal((7, window, feats)).astype(np.float32)
    got = np.asarray(model.predict(x), dtype=np.float64)

    lstm = next(layer for layer in model.layers if isinstance(layer, rk.LSTM))
    kernel, rec, bias = lstm.get_weights()              # Keras layout, gates i, f, c, o (torch's order)
    net = torch.nn.LSTM(feats, units, batch_first=True).double()
    hw_k, hw_b = model.get_layer(HIGHWAY).get_weights()
    r_k, r_b = model.get_layer(RECURRENT_OUT).get_weights()
    assert hw_k.shape == (p * feats, 1)
    with torch.no_grad():
        net.weight_ih_l0.copy_(torch.from_numpy(kernel.T.astype(np.float64)))
        net.weight_hh_l0.copy_(torch.from_numpy(rec.T.astype(np.float64)))
        net.bias_ih_l0.copy_(torch.from_numpy(bias.astype(np.float64).ravel()))
        net.bias_hh_l0.zero_()
        xt = torch.from_numpy(x.astype(np.float64))
        h = net(xt)[0][:, -1].numpy()
    lags = x[:, window - p:, :].astype(np.float64).reshape(len(x), -1)    # row by row, as Flatten
    want = h @ r_k.astype(np.float64) + r_b + lags @ hw_k.astype(np.float64) + hw_b
    # float32 arithmetic over O(1) values through 5 steps of 3 units and 4 + 3 products: the
    # rounding (2**-24 relative per operation) stays below 1e-5
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_before_training_the_network_is_the_least_squares_ar_model() -> None:
    """start_from_ar: the highway at the least-squares AR(p) fit (against ARModel's QR solution
    of the same regression), the recurrent branch's output at zero."""
    window, p = 6, 3
    s = ar_series(80)
    pos = np.arange(window, len(s))
    x = np.stack([s[t - window:t] for t in pos])[:, :, None].astype(np.float32)
    train = WindowArrays(x, s[pos, None].astype(np.float32), pos)
    model = build_network(TrainConfig(units=4, highway=p, seed=3), window, 1)
    start_from_ar(model, train)
    got = np.asarray(model.predict(x), dtype=np.float64)[:, 0]
    want = ARModel.fit(s, pos, p, 1).predict(s, pos)
    assert np.abs(want - s[pos]).mean() < 0.5 * np.abs(s[pos]).mean()     # the fit explains the series
    # two solutions of one least-squares problem (float64), then float32 weights and inputs: the
    # p + 1 products of O(1) values round to well below 1e-5
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert not np.any(model.get_layer(RECURRENT_OUT).get_weights()[0])


def test_the_blockwise_ar_fit_is_the_least_squares_solution_of_all_windows() -> None:
    """highway_start over more windows than one QR block (8192) against numpy's lstsq of the whole
    design matrix: one well-conditioned problem (random lags, 11 columns), two float64 solvers,
    agreement to ~1e-15; 1e-12 leaves room for the blocks' different rounding order."""

    rng = np.random.default_rng(4)
    x = rng.standard_normal((20000, 7, 2)).astype(np.float32)
    y = (x[:, -1, :1] * 0.5 - x[:, -3, 1:] + 0.1 * rng.standard_normal((20000, 1))).astype(np.float32)
    kernel, bias = highway_start(x, y, 5)
    design = np.concatenate([x[:, -5:, :].astype(np.float64).reshape(20000, -1), np.ones((20000, 1))], axis=1)
    want = np.linalg.lstsq(design, y.astype(np.float64), rcond=None)[0]
    np.testing.assert_allclose(kernel, want[:-1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(bias, want[-1], rtol=0, atol=1e-12)


def test_training_keeps_the_ar_start_when_no_epoch_beats_it_on_validation(tmp_path: Path) -> None:
    """A sinusoid, an AR(2) without noise: the least-squares start predicts it to rounding, every Adam step
    (steps of about lr whatever the gradient's size) moves away from it, so training ends at the
    start, the checkpoint holding it too."""
    window, p = 4, 2
    s = np.sin(0.7 * np.arange(120)).astype(np.float32).astype(np.float64)   # s_t = 2 cos(0.7) s_t-1 - s_t-2
    pos = np.arange(window, len(s))
    x = np.stack([s[k - window:k] for k in pos])[:, :, None].astype(np.float32)
    arrays = WindowArrays(x, s[pos, None].astype(np.float32), pos)
    train, val = arrays.take(slice(0, 90)), arrays.take(slice(90, None))
    cfg = TrainConfig(units=4, epochs=3, patience=2, seed=0, verbose=False, highway=p)
    model = build_network(cfg, window, 1)
    hist = train_network(model, cfg, train, val, checkpoint=tmp_path / "ck.safetensors")
    fresh = build_network(cfg, window, 1)
    start_from_ar(fresh, train)
    start_loss = float(fresh.evaluate(val.x, val.y))
    assert min(hist["val_loss"]) > start_loss                # no epoch beat the start...
    for a, b in zip(model.get_weights(), fresh.get_weights(), strict=True):
        assert a.tobytes() == b.tobytes()                    # ...so the start's weights are kept
    fresh.load_weights(str(tmp_path / "ck.safetensors"))
    np.testing.assert_array_equal(fresh.predict(x), model.predict(x))


def test_no_highway_is_the_recurrent_branch_alone() -> None:
    model = build_network(TrainConfig(units=4, highway=0, seed=0), 6, 1)
    assert isinstance(model, rk.Sequential)
    assert [type(layer).__name__ for layer in model.layers] == ["LSTM", "Dense"]
    start_from_ar(model, WindowArrays(np.zeros((4, 6, 1), np.float32), np.zeros((4, 1), np.float32),
                                      np.arange(4)))          # leaves a network without a highway alone


def test_the_flags_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "s.csv"
    data.write_text("y\n" + "".join(f"{v}\n" for v in ar_series(40)))
    base = ["train", str(data), "--target", "y", "--window", "4", "--epochs", "1", "--quiet", "--no-plots",
            "--out", str(tmp_path / "o")]
    assert main([*base, "--highway-lags", "5"]) == 2
    assert capsys.readouterr().err.strip() == ("rnnkit: error: --highway-lags 5 reads more rows than the "
                                               "window holds; expected at most --window 4")
    assert main([*base, "--highway-lags", "2", "--no-highway"]) == 2
    assert "--no-highway drops the highway that --highway-lags 2 sizes" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Forecaster]:
    """A highway network trained in this process on a dated CSV, saved as a forecaster file:
    (the file, the data, the in-memory forecaster)."""
    d = tmp_path_factory.mktemp("highway")
    s = ar_series(70, seed=2) + 10.0
    data = d / "series.csv"
    months = (np.datetime64("2015-01") + np.arange(70)).astype(str)
    data.write_text("date,level\n"
                    + "".join(f"{m}-01,{float(v)!r}\n" for m, v in zip(months, s, strict=True)))
    prep = prepare(s[:, None], s, ["level"], "level", window=5, horizon=1, val_split=0.2,
                   transform="none", index_name="date", what="series.csv")
    cfg = TrainConfig(units=4, epochs=3, patience=0, seed=0, verbose=False, highway=3)
    model = build_network(cfg, 5, 1)
    train_network(model, cfg, prep.train, prep.val)
    assert not np.any(np.isnan(model.get_layer(HIGHWAY).get_weights()[0]))
    path = rk.io.save_forecaster(model, prep.spec, d / "model.safetensors")
    return path, data, Forecaster(model, prep.spec)


def test_predict_and_the_loaded_file_give_the_bits_of_the_network_in_memory(
        trained: tuple[Path, Path, Forecaster], capsys: pytest.CaptureFixture[str]) -> None:
    path, data, live = trained
    pos, want = live.one_step(live.read_csv(data))
    loaded = rk.io.load_forecaster(path)
    assert loaded.model.get_layer(HIGHWAY).get_weights()[0].shape == (3, 1)
    assert np.asarray(loaded.one_step(loaded.read_csv(data))[1]).tobytes() == np.asarray(want).tobytes()
    capsys.readouterr()
    assert main(["predict", str(path), str(data)]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))[1:]
    assert len(rows) == len(want) == 70 - 5 + 1
    # the CSV prints repr(float): it reads back to the same float64
    assert np.array([float(r[1]) for r in rows]).tobytes() == np.asarray(want, dtype=np.float64).tobytes()


def test_the_server_answers_the_numbers_of_the_network_in_memory(
        trained: tuple[Path, Path, Forecaster]) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    path, data, live = trained
    v = live.read_csv(data).columns["level"]
    windows = np.stack([v[s:s + 5, None] for s in range(len(v) - 4)])
    want = live.predict_windows(windows)
    with TestClient(rk.serve.app(str(path))) as c:
        r = c.post("/v1/predict", json={"x": windows.tolist()})
    assert r.status_code == 200, r.text
    served = np.asarray(r.json()["outputs"], dtype=np.float64)[:, 0]
    assert served.tobytes() == np.asarray(want, dtype=np.float64).tobytes()


def test_preprocess_auto_reads_the_values_and_the_backtest_ranks_the_saved_highway_network(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a trend that the KPSS rule would difference, the highway network reads the values (its
    AR(p) holds the unit root); the stored ranking is the API backtest of the saved network."""

    rng = np.random.default_rng(3)
    t = np.arange(90)
    y = 50 + 0.8 * t + 4 * np.sin(2 * np.pi * t / 6) + rng.standard_normal(90)
    data = tmp_path / "series.csv"
    data.write_text("t,value\n" + "".join(f"{i},{float(v)!r}\n" for i, v in enumerate(y)))
    assert choose_difference(y[:78]).difference             # the rule for the recurrent branch alone
    assert main(["train", str(data), "--target", "value", "--date-col", "none", "--window", "6",
                 "--backtest-windows", "3", "--horizon", "4", "--season", "6", "--preprocess", "auto",
                 "--epochs", "3", "--units", "4", "--quiet", "--no-plots", "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert f"preprocessing: the values: {HIGHWAY_READS_VALUES}" in text
    fc = rk.io.load_forecaster(tmp_path / "o" / "model.safetensors")
    assert not fc.spec.difference and not fc.spec.log and fc.spec.seasonal == 0
    assert fc.spec.extra["preprocess"]["reason"] == HIGHWAY_READS_VALUES
    assert fc.spec.extra["highway_lags"] == 6
    info = fc.spec.extra["backtest"]
    assert info["network"] == "LSTM (4 units x 1) + AR(6) highway"
    bt = backtest(y, {info["network"]: lambda h, k: fc.path(h, k), **baselines(6, max_p=6)}, horizon=4,
                  windows=3, season=6, min_history=8)
    got = {r["name"]: r["mase"] for r in info["ranking"]}
    assert got == {s.name: s.overall["mase"] for s in bt.scores}    # the same sums in the same order
    assert main(["predict", str(tmp_path / "o" / "model.safetensors"), str(data), "--steps", "5"]) == 0
    cli = np.array([float(r.split(",")[1]) for r in capsys.readouterr().out.splitlines()[1:]])
    assert cli.tobytes() == fc.path(y, 5).tobytes()
