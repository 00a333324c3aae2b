"""The ETS (exponential smoothing) baseline: its forecasts are statsmodels' own
``ExponentialSmoothing`` call in the configuration of smallest AICc (chosen here independently),
on a real seasonal series (monthly means of the bundled Mauna Loa CO2 weeks); the backtest and
``rnnkit train --backtest-windows`` rank it, ``rnnkit predict --model best`` forecasts with it;
without statsmodels it is left out with a note naming the extra."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
import rnnkit.timeseries._backtest as backtest_mod
from rnnkit.cli import main
from rnnkit.timeseries import backtest, baselines
from rnnkit.timeseries._backtest import ETS, ETS_MISSING, ETSConfig, ets_candidates

pd = pytest.importorskip("pandas")


def monthly_co2() -> tuple[np.ndarray, np.ndarray]:
    """(months, ppmv): the weekly CO2 averaged per calendar month by pandas, from 1964-05 on
    (the first month after the last month without any measurement): 452 months, no gap."""
    c = rk.datasets.co2()
    s = pd.Series(c.values, index=pd.DatetimeIndex(c.dates)).resample("MS").mean()
    s = s[s.index >= "1964-05-01"]
    assert not s.isna().any()
    return s.index.to_numpy().astype("datetime64[D]"), s.to_numpy(dtype=np.float64)


def statsmodels_choice(y: np.ndarray, season: int | None) -> tuple[ETSConfig, np.ndarray, float]:
    """statsmodels' fits of the six configurations written out by hand: the one of smallest
    AICc, its 1..24-step forecasts and that AICc."""
    hw = pytest.importorskip("statsmodels.tsa.holtwinters")
    grid = [(None, False, None), ("add", False, None), ("add", True, None)]
    if season and len(y) >= 2 * season:
        grid += [(None, False, season), ("add", False, season), ("add", True, season)]
    best = None
    for trend, damped, m in grid:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = hw.ExponentialSmoothing(y, trend=trend, damped_trend=damped,
                                          seasonal="add" if m else None, seasonal_periods=m,
                                          initialization_method="estimated").fit()
        if best is None or fit.aicc < best[2]:
            best = (ETSConfig(trend, damped, m), np.asarray(fit.forecast(24)), float(fit.aicc))
    assert best is not None
    return best


def test_ets_forecasts_are_statsmodels_own_on_monthly_co2() -> None:
    pytest.importorskip("statsmodels")
    _, y = monthly_co2()
    hist = y[:300]
    cfg, want, _ = statsmodels_choice(hist, 12)
    ets = ETS(12)
    got = ets(hist, 24)
    assert ets.chosen == [cfg]
    # a seasonal series with a trend: the AICc picks a seasonal configuration with a trend
    assert cfg.season == 12 and cfg.trend == "add"
    # the same call on the same float64 values: the same optimiser path, the same bits
    assert np.array_equal(got, want)
    # and the forecasts are worth ranking: within 1 ppmv of the next two years (CO2 ~ 330 ppmv)
    assert np.max(np.abs(got - y[300:324])) < 1.0


def test_ets_candidates_follow_the_stated_rule() -> None:
    assert [c.describe() for c in ets_candidates(12, 24)] == [
        "no trend, no season", "additive trend, no season", "additive damped trend, no season",
        "no trend, additive season of 12", "additive trend, additive season of 12",
        "additive damped trend, additive season of 12"]
    assert len(ets_candidates(12, 23)) == 3      # fewer than two seasons: no seasonal candidate
    assert len(ets_candidates(None, 500)) == 3
    assert len(ets_candidates(24, 48)) == 6
    assert len(ets_candidates(52, 500)) == 3     # a season longer than 24 is not modelled (R's ets rule)


def test_backtest_ranks_ets_with_statsmodels_numbers() -> None:
    pytest.importorskip("statsmodels")
    _, y = monthly_co2()
    y = y[:240]
    methods = baselines(12, max_p=6)
    assert "ets" in methods
    bt = backtest(y, methods, horizon=6, windows=2, season=12, name="co2 monthly")
    assert "ets" in [s.name for s in bt.ranking()]
    score = bt.score("ets")
    for k, o in enumerate(bt.origins):
        _, want, _ = statsmodels_choice(y[:o], 12)
        assert np.array_equal(score.forecasts[k], want[:6])
    # MASE as the module defines it, from those forecasts
    scales = np.array([np.mean(np.abs(y[12:o] - y[:o - 12])) for o in bt.origins])
    mase = np.mean(np.abs(score.forecasts - bt.actual) / scales[:, None])
    assert score.overall["mase"] == pytest.approx(mase, rel=1e-14)


def test_without_statsmodels_ets_is_left_out_with_a_note(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "statsmodels", None)     # as if not installed
    assert "ets" not in baselines(12)
    assert ETS_MISSING.endswith('(pip install "rnnkit[forecast]")')
    months, y = monthly_co2()
    data = tmp_path / "co2m.csv"
    rows = zip(months[-120:], y[-120:], strict=True)
    data.write_text("date,co2\n" + "".join(f"{d},{float(v)!r}\n" for d, v in rows))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["train", str(data), "--target", "co2", "--window", "6", "--backtest-windows", "2",
                   "--horizon", "3", "--epochs", "1", "--units", "3", "--quiet", "--no-plots",
                   "--out", str(tmp_path / "out")])
    assert rc == 0
    text = buf.getvalue()
    assert f"note: {ETS_MISSING}" in text.splitlines()
    assert " ets " not in text


def test_cli_ranks_ets_and_predict_best_forecasts_with_it(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("statsmodels")
    months, y = monthly_co2()
    months, y = months[-150:], y[-150:]
    data = tmp_path / "co2m.csv"
    data.write_text("date,co2\n" + "".join(f"{d},{float(v)!r}\n" for d, v in zip(months, y, strict=True)))
    rc = main(["train", str(data), "--target", "co2", "--window", "6", "--backtest-windows", "2",
               "--horizon", "3", "--epochs", "1", "--units", "3", "--quiet", "--no-plots",
               "--out", str(tmp_path / "out")])
    assert rc == 0
    text = capsys.readouterr().out
    model = tmp_path / "out" / "model.safetensors"
    fc = rk.io.load_forecaster(model)
    info = fc.spec.extra["backtest"]
    assert "ets" in [r["name"] for r in info["ranking"]]
    origins = info["origins"]
    chosen = [statsmodels_choice(y[:o], 12) for o in origins]
    assert info["ets"] == [dataclasses.asdict(c[0]) for c in chosen]
    line = "ETS configuration (smallest AICc on each window's history): " + "; ".join(
        f"origin {o}: {c[0].describe()}" for o, c in zip(origins, chosen, strict=True))
    assert line in text.splitlines()
    # the stored ETS score is the one of statsmodels' forecasts
    actual = np.stack([y[o:o + 3] for o in origins])
    fcs = np.stack([c[1][:3] for c in chosen])
    row = next(r for r in info["ranking"] if r["name"] == "ets")
    assert row["mae"] == pytest.approx(float(np.mean(np.abs(fcs - actual))), rel=1e-14)
    # predict --model best with ETS as the stored winner: statsmodels' forecast from every row
    extra = dict(fc.spec.extra)
    extra["backtest"] = {**info, "best": "ets"}
    forced = tmp_path / "forced.safetensors"
    rk.io.save_forecaster(fc.model, dataclasses.replace(fc.spec, extra=extra), forced)
    assert main(["predict", str(forced), str(data), "--model", "best", "--steps", "5"]) == 0
    out = capsys.readouterr()
    got = np.array([float(r.split(",")[1]) for r in out.out.splitlines()[1:]])
    cfg, want, _ = statsmodels_choice(y, 12)
    assert np.array_equal(got, want[:5])
    assert f"backtest's best: ets ({cfg.describe()}: the smallest AICc on these rows)" in out.err


def test_predict_best_ets_without_statsmodels_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from rnnkit.cli._backtest import best_path
    from rnnkit.cli._common import CliError
    from rnnkit.timeseries import Forecaster, ForecastSpec, Scaler

    ident = Scaler(("y",), np.zeros(1), np.ones(1))
    spec = ForecastSpec("y", ("y",), 4, 1, ident, ident, extra={"backtest": {"best": "ets", "season": 12}})
    monkeypatch.setitem(sys.modules, "statsmodels", None)     # as if not installed
    with pytest.raises(CliError, match=r"the ETS baseline, which needs statsmodels \(pip install "
                                       r"\"rnnkit\[forecast\]\"\)"):
        best_path(Forecaster(None, spec), monthly_co2()[1][:100], 3)


def test_ets_fits_a_long_history_on_its_last_rows_as_statsmodels_does_on_that_slice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A history longer than ETS_MAX_ROWS is fitted on its last ETS_MAX_ROWS rows: the forecasts
    are statsmodels' own on that slice (the same call, so the same bits), not on the whole."""
    pytest.importorskip("statsmodels")
    assert backtest_mod.ETS_MAX_ROWS == 5000
    _, y = monthly_co2()
    monkeypatch.setattr(backtest_mod, "ETS_MAX_ROWS", 120)
    ets = ETS(12)
    got = ets(y[:300], 24)
    cfg, want, _ = statsmodels_choice(y[180:300], 12)
    assert ets.rows == [120] and ets.chosen == [cfg]
    np.testing.assert_array_equal(got, want)
    whole = statsmodels_choice(y[:300], 12)[1]
    assert not np.array_equal(got, whole)          # the bound changed what was fitted
    assert ets(y[:100], 24).shape == (24,) and ets.rows[-1] == 100    # a shorter history: all of it
