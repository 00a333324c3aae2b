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
from rnnkit.timeseries import DataError, backtest, baselines, choose_difference, choose_preprocess, mase_scale

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
    choice = choose_preprocess(y[:78], 6)
    fc = rk.io.load_forecaster(model)
    # the period-6 wave is strong (seasonal strength > 0.64): seasonal differences at lag 6, and
    # their KPSS statistic does not reject stationarity: no first differences, no log (additive)
    assert (choice.log, choice.seasonal, choice.difference) == (False, 6, False)
    assert (fc.spec.log, fc.spec.seasonal, fc.spec.difference) == (False, 6, False)
    assert fc.spec.extra["preprocess"]["reason"] == choice.reason
    # the KPSS part of the reason is the test on the lag-6 differences
    assert choice.reason.endswith("; " + choose_difference(y[6:78] - y[:72]).reason)
    assert f"preprocessing: seasonal differences (lag 6): {choice.reason}" in text
    capsys.readouterr()
    assert main(["predict", str(model), str(data), "--steps", "5"]) == 0
    cli = np.array([float(r.split(",")[1]) for r in capsys.readouterr().out.splitlines()[1:]])
    assert np.array_equal(cli, fc.path(y, 5))
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    windows = np.stack([y[s:s + 12, None] for s in range(len(y) - 11)])   # window 6 + the lag 6
    with TestClient(rk.serve.app(str(model))) as c:
        r = c.post("/v1/predict", json={"x": windows.tolist()})
    assert r.status_code == 200, r.text
    served = np.asarray(r.json()["outputs"], dtype=np.float64)[:, 0]
    # by hand: the scaled seasonal differences through the network, the forecast difference
    # added to the value one season before the forecast row
    w = windows[:, :, 0]
    z = fc.network(fc.spec.x_scaler.apply((w[:, 6:] - w[:, :-6]).reshape(-1, 1),
                                          np.float32).reshape(-1, 6, 1))
    hand = fc.spec.y_scaler.invert(z)[:, 0] + w[:, -6]
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


def test_the_backtest_is_on_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--backtest-windows``: 3 windows of ``--horizon`` (1) rows, the ranking printed and
    stored; ``--backtest-windows 0`` trains on one validation split."""
    y = trending()
    data = write(tmp_path / "series.csv", y)
    common = ["train", str(data), "--target", "value", "--date-col", "none", "--window", "6", "--season", "6",
              "--epochs", "2", "--units", "4", "--quiet", "--no-plots"]
    assert main([*common, "--out", str(tmp_path / "on")]) == 0
    text = capsys.readouterr().out
    fc = rk.io.load_forecaster(tmp_path / "on" / "model.safetensors")
    info = fc.spec.extra["backtest"]
    assert (info["windows"], info["horizon"], info["origins"]) == (3, 1, [87, 88, 89])
    # the naive baseline by hand: y[o - 1] for y[o], scaled by the history's mean |y_t - y_{t-6}|
    errs = [abs(y[o - 1] - y[o]) / np.mean(np.abs(y[6:o] - y[:o - 6])) for o in (87, 88, 89)]
    naive = next(r for r in info["ranking"] if r["name"] == "naive")
    assert naive["mase"] == pytest.approx(float(np.mean(errs)), rel=1e-13)
    bt = backtest(y, {info["network"]: lambda h, k: fc.path(h, k), **baselines(6, max_p=6)},
                  horizon=1, windows=3, season=6, min_history=8)
    assert [r["name"] for r in info["ranking"]] == [s.name for s in bt.ranking()]
    assert text.strip().splitlines()[-2] == bt.verdict(info["network"])     # before "model saved to"
    metrics = json.loads((tmp_path / "on" / "metrics.json").read_text())
    assert metrics["part"] == "backtest" and metrics["backtest"]["origins"] == [87, 88, 89]
    assert main([*common, "--backtest-windows", "0", "--out", str(tmp_path / "off")]) == 0
    text = capsys.readouterr().out
    assert "on the backtest" not in text and "rank" not in text and "note:" not in text
    metrics = json.loads((tmp_path / "off" / "metrics.json").read_text())
    assert metrics["part"] == "validation" and "backtest" not in metrics
    # 84 windows of 6, the last 17 validate: the validation table's persistence row by hand
    pos = np.arange(84 - 17, 84) + 6
    assert metrics["metrics"]["persistence"]["rmse"] == pytest.approx(
        float(np.sqrt(np.mean((y[pos - 1] - y[pos]) ** 2))), rel=1e-12)


def test_a_run_the_default_backtest_cannot_take_says_why(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Features besides the target, or a series too short for 3 windows: one validation split and
    a note naming the reason; the same run with ``--backtest-windows 3`` given is refused."""
    y = trending()
    two = tmp_path / "two.csv"
    two.write_text("t,value,other\n" + "".join(f"{i},{float(v)!r},{float(v) / 2 + i % 3}\n"
                                                for i, v in enumerate(y)))
    common = ["--target", "value", "--date-col", "none", "--window", "6", "--epochs", "1", "--units", "3",
              "--quiet", "--no-plots"]
    assert main(["train", str(two), "--features", "value,other", *common, "--out", str(tmp_path / "f")]) == 0
    out = capsys.readouterr().out
    assert ("note: no backtest (trained on one validation split instead): --features value,other: a "
            "backtest runs the network recursively, which needs the target as its only feature") in out
    assert json.loads((tmp_path / "f" / "metrics.json").read_text())["part"] == "validation"
    assert main(["train", str(two), "--features", "value,other", *common, "--backtest-windows", "3",
                 "--out", str(tmp_path / "g")]) == 2
    assert "needs the target as its only feature" in capsys.readouterr().err
    short = write(tmp_path / "short.csv", trending(30))
    assert main(["train", str(short), *common, "--season", "12", "--horizon", "4",
                 "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert ("note: no backtest (trained on one validation split instead): " + str(short) + ": too short "
            "for 3 backtest window(s) of horizon 4: the first origin is row 18, but it needs at least 24 "
            "rows of history (two seasons of 12); the series has 30 rows") in out
    assert json.loads((tmp_path / "s" / "metrics.json").read_text())["part"] == "validation"


def test_the_default_backtest_rule_for_mpi_and_explicit_windows() -> None:
    """``--distributed mpi`` without ``--backtest-windows``: none, with a note; an explicit K is
    kept as given (``train_backtest`` then refuses what it cannot take)."""
    import argparse

    from rnnkit.cli._backtest import DEFAULT_WINDOWS, windows_for

    y = trending()
    args = argparse.Namespace(backtest_windows=None, distributed="mpi", target="value", horizon=1, window=6,
                              season=None, data="series.csv")
    k, note = windows_for(args, ["value"], y, None)
    assert k == 0 and note is not None and "--distributed mpi trains on several processes" in note
    args.distributed = "none"
    assert windows_for(args, ["value"], y, None) == (DEFAULT_WINDOWS, None) == (3, None)
    args.backtest_windows = 5
    assert windows_for(args, ["value", "other"], y, None) == (5, None)
    args.backtest_windows = 0
    assert windows_for(args, ["value"], y, None) == (0, None)
