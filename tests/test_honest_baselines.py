"""The tables of ``rnnkit demo`` / ``rnnkit train`` show the training mean and, for seasonal data,
the seasonal-naive forecast beside persistence and AR(p), and say plainly what the model does
not beat; on the Nile series (tests/data/pandas_csv) and on the bundled CO2 data, every
baseline number equals an independent computation written here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pandas_frames import FIXTURES, NILE
from rnnkit import datasets
from rnnkit.cli import main
from rnnkit.cli._prepare import compare
from rnnkit.timeseries import mean_forecast, season_of, seasonal_naive_forecast

ROW = re.compile(r"^  (\S.*?)\s+([0-9.]+|nan)\s+([0-9.]+|nan)$", re.M)


def table(text: str) -> dict[str, tuple[float, float]]:
    return {m.group(1): (float(m.group(2)), float(m.group(3))) for m in ROW.finditer(text)}


def rmse_mae(pred: np.ndarray, actual: np.ndarray) -> tuple[float, float]:
    d = pred - actual
    return round(float(np.sqrt(np.mean(d * d))), 3), round(float(np.mean(np.abs(d))), 3)


def test_baseline_functions_by_hand() -> None:
    t = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 11.0])
    np.testing.assert_array_equal(mean_forecast(t, np.array([0, 1, 2]), np.array([5, 6])), [2.0, 2.0])
    np.testing.assert_array_equal(seasonal_naive_forecast(t, np.array([3, 6]), 3), [1.0, 10.0])
    # horizon 4 with a season of 3: the same phase two seasons back
    np.testing.assert_array_equal(seasonal_naive_forecast(t, np.array([6]), 3, horizon=4), [1.0])
    assert season_of(np.arange("2020-01", "2021-06", dtype="datetime64[M]").astype("datetime64[D]"),
                     "date") == 12
    assert season_of(np.arange("2020-01-01", "2020-03-01", 7, dtype="datetime64[D]"), "date") == 52
    assert season_of(np.arange(1871, 1971), "int") is None


def test_verdict_names_each_baseline_the_model_does_not_beat() -> None:
    target = np.array([5.0, 7.0, 5.0, 7.0, 5.0, 7.0, 5.0, 7.0, 5.0, 7.0, 5.0, 7.0])
    pos = np.arange(8, 12)
    cmp = compare("M", np.full(4, 6.5), target, pos, np.arange(2, 8), 2, 1, season=2)
    assert [r[0] for r in cmp.rows][3:] == ["training mean", "seasonal naive (2 rows)"]
    assert cmp.metric("seasonal naive") == (0.0, 0.0)
    lost = [r[0] for r in cmp.not_beaten_by_model()]
    assert lost[0].startswith("AR(") and lost[1:] == ["training mean", "seasonal naive (2 rows)"], lost
    text = cmp.verdict("M")
    assert text.startswith("the M does NOT beat 3 of 4 baselines (its RMSE 1.118, MAE 1): ")
    assert "training mean (RMSE 1, MAE 1)" in text and "seasonal naive (2 rows) (RMSE 0, MAE 0)" in text
    good = compare("M", target[pos], target, pos, np.arange(2, 8), 2, 1, season=2)
    assert good.verdict("M") == "the M does NOT beat 1 of 4 baselines (its RMSE 0, MAE 0): " \
                                "seasonal naive (2 rows) (RMSE 0, MAE 0)"        # a tie is not a win


def test_nile_table_shows_the_mean_and_says_the_verdict(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["train", str(FIXTURES / "nile_float_year.csv"), "--target", "volume", "--window", "5",
                 "--epochs", "3", "--units", "4", "--quiet", "--no-plots", "--out", str(out),
                 "--backtest-windows", "0"]) == 0                      # one validation split
    text = capsys.readouterr().out
    rows = table(text)
    # 100 years, window 5: 95 windows, the last 19 validate (targets 1952-1970); fit on 1876-1951
    val_pos, fit_pos = np.arange(81, 100), np.arange(5, 81)
    assert rows["training mean"] == rmse_mae(np.full(19, NILE[fit_pos].mean()), NILE[val_pos])
    assert rows["persistence"] == rmse_mae(NILE[val_pos - 1], NILE[val_pos])
    assert not any(k.startswith("seasonal") for k in rows)                    # years: no season
    model = next(v for k, v in rows.items() if k.startswith("LSTM"))
    lost = [k for k, v in rows.items()
            if not k.startswith("LSTM") and not (model[0] < v[0] and model[1] < v[1])]
    verdict = next(line for line in text.splitlines() if line.startswith("the LSTM"))
    if lost:
        assert "does NOT beat" in verdict and all(k in verdict for k in lost), (verdict, lost)
    else:
        assert verdict.endswith("beats every baseline on RMSE and MAE")
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["metrics"]) >= {"model", "persistence", "mean"} and m["beats_every_baseline"] == (not lost)
    assert re.search(r"trained 3 epoch\(s\) in [0-9.]+ s \(best validation epoch [123], weights restored\)",
                     text), text
    assert m["best_epoch"] in (1, 2, 3)


def test_weekly_co2_gets_the_seasonal_naive_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "co2", "--target", "co2", "--missing", "interpolate", "--window", "8",
                 "--epochs", "1", "--units", "4", "--quiet", "--no-plots", "--out", str(tmp_path),
                 "--backtest-windows", "0"]) == 0                      # one validation split
    rows = table(capsys.readouterr().out)
    co2 = datasets.co2().values
    present = np.flatnonzero(~np.isnan(co2))
    y = np.interp(np.arange(len(co2)), present, co2[present])
    n = len(y) - 8                                     # windows of 8, horizon 1
    n_val = int(round(0.2 * n))
    val_pos = np.arange(n - n_val, n) + 8
    assert rows["seasonal naive (52 rows)"] == rmse_mae(y[val_pos - 52], y[val_pos])
    assert rows["training mean"] == rmse_mae(np.full(n_val, y[8:val_pos[0]].mean()), y[val_pos])
    assert main(["train", "co2", "--target", "co2", "--missing", "interpolate", "--window", "8",
                 "--epochs", "1", "--units", "4", "--quiet", "--no-plots", "--season", "0",
                 "--out", str(tmp_path), "--backtest-windows", "0"]) == 0
    assert not any(k.startswith("seasonal") for k in table(capsys.readouterr().out))
