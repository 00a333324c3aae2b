"""``rnnkit train --backtest-windows K --preprocess auto``: the printed and stored ranking is the
one :func:`rnnkit.timeseries.backtest` computes for the saved network and the baselines; the
KPSS choice is stored and applied alike by ``rnnkit predict``, Python and the model server;
``rnnkit predict --model best`` forecasts with the stored winner; bad input is a typed error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.cli import main
from rnnkit.timeseries import DataError, backtest, baselines, choose_difference, mase_scale

N = 90


def trending(n: int = N) -> np.ndarray:
    """A trend with a period-6 wave and noise: KPSS rejects the levels, not the differences."""
    rng = np.random.default_rng(3)
    t = np.arange(n)
    return 50 + 0.8 * t + 4 * np.sin(2 * np.pi * t / 6) + rng.standard_normal(n)


def write(path: Path, y: np.ndarray) -> Path:
    path.write_text("t,value\n" + "".join(f"{i},{float(v)!r}\n" for i, v in enumerate(y)))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    d = tmp_path_factory.mktemp("bt")
    data = write(d / "series.csv", trending())
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["train", str(data), "--target", "value", "--date-col", "none", "--window", "6",
                   "--backtest-windows", "3", "--horizon", "4", "--season", "6", "--preprocess", "auto",
                   "--epochs", "3", "--units", "4", "--quiet", "--no-plots", "--out", str(d / "out"),
                   "--no-highway"])     # the KPSS rule is the recurrent branch's alone (test_highway.py)
    assert rc == 0
    return d / "out" / "model.safetensors", data, buf.getvalue()


def test_stored_ranking_is_the_api_backtest_of_the_saved_network(trained: tuple[Path, Path, str]) -> None:
    model, data, text = trained
    y = trending()
    fc = rk.io.load_forecaster(model)
    info = fc.spec.extra["backtest"]
    methods = {info["network"]: lambda h, k: fc.path(h, k), **baselines(6, max_p=6)}
    bt = backtest(y, methods, horizon=4, windows=3, season=6, min_history=8)
    got = {r["name"]: r for r in info["ranking"]}
    for s in bt.scores:      # the same float64 sums in the same order: equal
        for m in ("mase", "smape", "rmse", "mae"):
            assert got[s.name][m] == s.overall[m], (s.name, m)
    # the naive baseline by hand: origins 78, 82, 86; MASE scale each history's mean |y_t - y_{t-6}|
    errs = [np.abs(y[o - 1] - y[o:o + 4]) / mase_scale(y[:o], 6) for o in (78, 82, 86)]
    assert got["naive"]["mase"] == pytest.approx(float(np.mean(errs)), rel=1e-13)
    winner = bt.ranking()[0].name
    assert info["best"] == ("network" if winner == info["network"] else winner)
    assert bt.verdict(info["network"]) in text                    # the printed sentence is the ranking's
    metrics = json.loads((model.parent / "metrics.json").read_text())
    assert metrics["backtest"] == json.loads(json.dumps(info))


def test_preprocessing_choice_is_stored_and_applied_alike(trained: tuple[Path, Path, str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    model, data, text = trained
    y = trending()
    choice = choose_difference(y[:78])
    fc = rk.io.load_forecaster(model)
    assert choice.difference and fc.spec.difference
    assert fc.spec.extra["preprocess"]["reason"] == choice.reason
    assert f"preprocessing: first differences: {choice.reason}" in text
    capsys.readouterr()
    assert main(["predict", str(model), str(data), "--steps", "5"]) == 0
    cli = np.array([float(r.split(",")[1]) for r in capsys.readouterr().out.splitlines()[1:]])
    assert np.array_equal(cli, fc.path(y, 5))
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    windows = np.stack([y[s:s + 7, None] for s in range(len(y) - 6)])   # window 6 + 1 for the difference
    with TestClient(rk.serve.app(str(model))) as c:
        r = c.post("/v1/predict", json={"x": windows.tolist()})
    assert r.status_code == 200, r.text
    served = np.asarray(r.json()["outputs"], dtype=np.float64)[:, 0]
    # by hand: the scaled differences through the network, the change added to the last level
    z = fc.network(fc.spec.x_scaler.apply(np.diff(windows[:, :, 0], axis=1).reshape(-1, 1),
                                          np.float32).reshape(-1, 6, 1))
    hand = fc.spec.y_scaler.invert(z)[:, 0] + windows[:, -1, 0]
    assert np.array_equal(served, hand)
    assert np.array_equal(served, fc.predict_windows(windows))


def test_predict_model_best_uses_the_stored_winner(trained: tuple[Path, Path, str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    model, data, _ = trained
    y = trending()
    fc = rk.io.load_forecaster(model)
    best = fc.spec.extra["backtest"]["best"]
    capsys.readouterr()
    assert main(["predict", str(model), str(data), "--model", "best"]) == 0
    out = capsys.readouterr()
    got = np.array([float(r.split(",")[1]) for r in out.out.splitlines()[1:]])
    assert f"backtest's best: {best}" in out.err
    want = fc.path(y, 4) if best == "network" else baselines(6, max_p=6)[best](y, 4)
    assert np.array_equal(got, want)
    # a baseline chosen: the file names it; forcing one checks the baseline path itself
    import dataclasses

    from rnnkit.cli._backtest import best_path

    extra = dict(fc.spec.extra)
    extra["backtest"] = {**extra["backtest"], "best": "seasonal_naive"}
    forced = rk.timeseries.Forecaster(fc.model, dataclasses.replace(fc.spec, extra=extra))
    name, path = best_path(forced, y, 8)
    assert name == "seasonal_naive" and np.array_equal(path, np.r_[y[-6:], y[-6:-4]])


def test_too_short_for_the_season_is_a_typed_error_naming_the_series(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write(tmp_path / "short.csv", trending(30))
    rc = main(["train", str(data), "--target", "value", "--date-col", "none", "--backtest-windows", "3",
               "--horizon", "4", "--season", "12", "--quiet", "--no-plots", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert ("short.csv: too short for 3 backtest window(s) of horizon 4: the first origin is row 18, but "
            "it needs at least 24 rows of history (two seasons of 12); the series has 30 rows"
            in capsys.readouterr().err)
    assert not (tmp_path / "o").exists()      # refused before anything is trained or written
    with pytest.raises(DataError, match="short: too short"):   # the same rule, typed, in Python
        backtest(trending(30), baselines(12), horizon=4, windows=3, season=12, name="short")
