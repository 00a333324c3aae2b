"""Rolling-origin backtests, their metrics and baselines, the season rule and the KPSS
differencing choice: every number checked against a hand computation or an independent
formula (pandas; statsmodels' KPSS where installed)."""

from __future__ import annotations

import numpy as np
import pytest

from rnnkit.timeseries import (
    DataError,
    backtest,
    baselines,
    choose_difference,
    detect_season,
    kpss,
    mase,
    mase_scale,
    smape,
)
from rnnkit.timeseries._backtest import ar_order, drift, naive, origins, seasonal_naive
from rnnkit.timeseries._backtest import mean as mean_method


def test_metrics_by_hand() -> None:
    # |1-2|/(1+2)*200 = 66.67, |4-4| = 0, 0 vs 0 counts 0
    got = smape(np.array([1.0, 4.0, 0.0]), np.array([2.0, 4.0, 0.0]))
    assert got == pytest.approx((200 / 3) / 3, rel=1e-15)
    hist = np.array([1.0, 3.0, 2.0, 6.0])          # lag-1 diffs 2, 1, 4 -> scale 7/3
    assert mase_scale(hist) == pytest.approx(7 / 3, rel=1e-15)
    assert mase_scale(hist, 2) == pytest.approx((1 + 3) / 2, rel=1e-15)
    assert mase(np.array([5.0, 5.0]), np.array([6.0, 8.0]), hist) == pytest.approx(2 / (7 / 3), rel=1e-15)


def test_baseline_paths_by_hand() -> None:
    y = np.array([1.0, 2.0, 4.0, 3.0, 5.0, 7.0])
    np.testing.assert_array_equal(naive(y, 3), [7.0, 7.0, 7.0])
    np.testing.assert_array_equal(mean_method(y, 2), [22 / 6, 22 / 6])
    np.testing.assert_allclose(drift(y, 3), [7 + 1.2, 7 + 2.4, 7 + 3.6], rtol=1e-15)   # slope (7-1)/5
    np.testing.assert_array_equal(seasonal_naive(4)(y, 6), [4.0, 3.0, 5.0, 7.0, 4.0, 3.0])
    # an exact AR(1) y[t] = 0.5 y[t-1] + 1: the order-1 fit recovers it and forecasts exactly
    z = np.empty(40)
    z[0] = 10.0
    for t in range(1, 40):
        z[t] = 0.5 * z[t - 1] + 1.0
    path = baselines(None, max_p=3)["ar"](z[:30], 5)
    np.testing.assert_allclose(path, z[30:35], rtol=1e-9)
    assert ar_order(z[:30], 5, 3) == 1 or np.allclose(path, z[30:35])


def test_backtest_numbers_by_hand_and_by_pandas() -> None:
    pd = pytest.importorskip("pandas")
    y = np.array([3.0, 5.0, 4.0, 6.0, 8.0, 7.0, 9.0, 12.0, 10.0, 11.0])
    np.testing.assert_array_equal(origins(10, 2, 3), [4, 6, 8])
    b = backtest(y, {"naive": naive, "snaive": seasonal_naive(2)}, horizon=2, windows=3, season=2)
    np.testing.assert_array_equal(b.actual, [[8, 7], [9, 12], [10, 11]])
    nv = b.score("naive")
    np.testing.assert_array_equal(nv.forecasts, [[6, 6], [7, 7], [12, 12]])
    # MASE by pandas: each window's errors over its history's mean |y_t - y_{t-2}|
    scaled = []
    for o, f in zip(b.origins, nv.forecasts, strict=True):
        s = pd.Series(y[:o])
        scaled.append(np.abs(f - y[o:o + 2]) / s.diff(2).abs().mean())
    sc = np.array(scaled)
    np.testing.assert_allclose(nv.per_step["mase"], sc.mean(axis=0), rtol=1e-14)
    assert nv.overall["mase"] == pytest.approx(sc.mean(), rel=1e-14)
    err = nv.forecasts - b.actual
    assert nv.overall["rmse"] == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=1e-14)
    np.testing.assert_allclose(nv.per_step["mae"], [(2 + 2 + 2) / 3, (1 + 5 + 1) / 3], rtol=1e-14)
    # sMAPE step 1 by hand: 200|6-8|/14, 200|7-9|/16, 200|12-10|/22
    assert nv.per_step["smape"][0] == pytest.approx((400 / 14 + 400 / 16 + 400 / 22) / 3, rel=1e-14)
    assert [s.name for s in b.ranking()][0] == min(b.scores, key=lambda s: s.overall["mase"]).name


def test_verdict_names_the_winner_and_the_margin() -> None:
    t = np.arange(60, dtype=np.float64)
    y = 10 + 3 * np.sin(2 * np.pi * t / 6) + 0.01 * t
    b = backtest(y, {"model": naive, **baselines(6)}, horizon=6, windows=3, season=6)
    best = b.ranking()[0]
    assert best.name in ("ar", "seasonal_naive")      # both fit a sine of period 6 almost exactly
    m = b.score("model").overall["mase"]
    text = b.verdict("model")
    assert text.startswith(f"the model ranks {[s.name for s in b.ranking()].index('model') + 1} of "
                           f"{6 + ('ets' in baselines(6))}")    # model, 5 baselines, ETS with statsmodels
    assert f"the {best.name} baseline beats it, MASE {best.overall['mase']:.4g}" in text
    assert f"{100 * (m - best.overall['mase']) / m:.1f}% lower" in text


def test_season_rule() -> None:
    rng = np.random.default_rng(0)
    t = np.arange(200)
    y = np.sin(2 * np.pi * t / 7) + 0.2 * rng.standard_normal(200) + 0.05 * t
    assert detect_season(y) == 7
    assert detect_season(y, calendar=12) == 12
    assert detect_season(np.ones(50)) is None


def test_too_short_is_a_typed_error_naming_series_and_rule() -> None:
    with pytest.raises(DataError, match=r"sales: too short for 3 backtest window\(s\) of horizon 12: "
                                        r"the first origin is row 4, but it needs at least 24 rows of "
                                        r"history \(two seasons of 12\); the series has 40 rows"):
        backtest(np.arange(40.0), baselines(12), horizon=12, windows=3, season=12, name="sales")
    with pytest.raises(DataError, match="windows must be a whole number >= 1, got 0"):
        backtest(np.arange(40.0), baselines(None), horizon=2, windows=0)
    with pytest.raises(DataError, match="constant at lag 1"):
        backtest(np.ones(40), baselines(None), horizon=2, windows=2)


def test_kpss_by_hand_and_choice() -> None:
    y = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 6.0, 8.0, 7.0])
    e = y - y.mean()
    s = np.cumsum(e)
    lag = 1
    s2 = (e @ e + 2 * (1 - 1 / 2) * (e[1:] @ e[:-1])) / 8
    assert kpss(y, lag) == pytest.approx((s @ s) / (64 * s2), rel=1e-14)
    rng = np.random.default_rng(1)
    walk = rng.standard_normal(300).cumsum()
    c = choose_difference(walk)
    assert c.difference and "reads first differences" in c.reason
    noise = rng.standard_normal(300)
    assert not choose_difference(noise).difference


def test_kpss_equals_statsmodels() -> None:
    stattools = pytest.importorskip("statsmodels.tsa.stattools")
    import warnings

    rng = np.random.default_rng(2)
    for y in (rng.standard_normal(150).cumsum(), rng.standard_normal(97), np.sin(np.arange(80) / 3.0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = stattools.kpss(y, regression="c", nlags="legacy")[0]
        assert kpss(y) == pytest.approx(ref, rel=1e-12)   # the same sums in another order
