"""Logs and seasonal differences for forecasting: the rules that choose them checked against
independent computations (statsmodels' classical decomposition, numpy's polyfit), the
transform of :class:`~rnnkit.timeseries.ForecastSpec` inverted to 1e-12 on every combination,
``rnnkit train --preprocess auto`` storing its choice with the reason, and ``rnnkit predict``,
the model server and Python applying it alike; a value <= 0 under ``--log`` is a typed error."""

from __future__ import annotations

import contextlib
import io
import itertools
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.cli import main
from rnnkit.timeseries import DataError, ForecastSpec, Scaler, choose_preprocess, transform_rows
from rnnkit.timeseries._preprocess import amplitude_slope, choose_log, seasonal_strength


def multiplicative(n: int = 144) -> np.ndarray:
    """A positive monthly series whose seasonal swing is 20 % of a level growing 2.5 times."""
    t = np.arange(n)
    rng = np.random.default_rng(5)
    return (100 + 2 * t) * (1 + 0.2 * np.sin(2 * np.pi * t / 12)) * np.exp(0.02 * rng.standard_normal(n))


def monthly_co2() -> np.ndarray:
    """Monthly means (pandas) of the bundled weekly Mauna Loa CO2 from 1964-05 (no gap)."""
    pd = pytest.importorskip("pandas")
    c = rk.datasets.co2()
    s = pd.Series(c.values, index=pd.DatetimeIndex(c.dates)).resample("MS").mean()
    return s[s.index >= "1964-05-01"].to_numpy(dtype=np.float64)


def test_seasonal_strength_equals_statsmodels_classical_decomposition() -> None:
    sm = pytest.importorskip("statsmodels.tsa.seasonal")
    for y, m in ((monthly_co2()[:240], 12), (np.log(multiplicative()), 12), (multiplicative()[:100], 7)):
        d = sm.seasonal_decompose(y, model="additive", period=m)
        ok = ~np.isnan(d.resid)
        r, s = d.resid[ok], d.seasonal[ok]
        want = max(0.0, 1 - np.var(r) / np.var(s + r))
        got = seasonal_strength(y, m)
        assert got is not None
        # the same sums of a few hundred values of O(1e2): float64 rounding, well below 1e-12
        assert got == pytest.approx(want, abs=1e-12)


def test_amplitude_slope_by_polyfit() -> None:
    y = multiplicative()
    k = len(y) // 12
    blocks = y[:k * 12].reshape(k, 12)
    t = np.arange(12.0)
    amp = [np.std(b - np.polyval(np.polyfit(t, b, 1), t)) for b in blocks]
    slope = np.polyfit(np.log(blocks.mean(axis=1)), np.log(amp), 1)[0]
    got = amplitude_slope(y, 12)
    assert got is not None
    assert got[0] == pytest.approx(slope, rel=1e-10)      # two least-squares solutions of 12 points
    assert got[1] == pytest.approx(blocks.mean(axis=1).max() / blocks.mean(axis=1).min(), rel=1e-14)
    assert 0.8 < got[0] < 1.2                              # multiplicative: the swing tracks the level


def test_rules_choose_log_and_seasonal_differences_as_stated() -> None:
    mul = choose_preprocess(multiplicative()[:120], 12)
    assert mul.log and mul.seasonal == 12
    assert mul.reason.startswith("log: the seasonal amplitude grows with the level (slope ")
    co2 = choose_preprocess(monthly_co2()[:300], 12)     # additive season, level spans x1.10
    assert not co2.log and co2.seasonal == 12
    assert "levels spanning only x1.10 < x1.5" in co2.reason
    assert "seasonal differences at lag 12: seasonal strength 0.98" in co2.reason
    assert choose_log(np.r_[0.0, multiplicative()[1:]], 12) == (False, "no log: the series has values <= 0")
    assert not choose_preprocess(multiplicative(), None).log            # no season: no amplitude rule


def spec(log: bool, seasonal: int, difference: bool, horizon: int) -> ForecastSpec:
    ident = Scaler(("y",), np.zeros(1), np.ones(1))
    return ForecastSpec("y", ("y",), 4, horizon, ident, ident, log=log, seasonal=seasonal,
                        difference=difference)


@pytest.mark.parametrize("log,seasonal,difference", list(itertools.product((False, True), (0, 12),
                                                                             (False, True))))
@pytest.mark.parametrize("horizon", [1, 3])
def test_inverse_of_the_transform_is_the_input(log: bool, seasonal: int, difference: bool,
                                               horizon: int) -> None:
    for y in (multiplicative(), monthly_co2()[:150]):
        s = spec(log, seasonal, difference, horizon)
        u = np.log(y) if log else y
        pos = np.arange(horizon + s.rows_needed - 1, len(y))   # rows with a whole window before them
        z = u[pos] - s.base(lambda k, u=u, pos=pos: u[pos - k])    # the network's exact training target
        back = s.to_levels(z, y, pos)
        # log/exp round trip and a few additions of values <= 1e3: relative error ~1e-15
        np.testing.assert_allclose(back, y[pos], rtol=1e-12, atol=0)
        # the same through the window path the model server takes
        rows = np.stack([y[p - horizon - s.rows_needed + 1:p - horizon + 1, None] for p in pos])
        np.testing.assert_allclose(s.window_levels(z, rows), y[pos], rtol=1e-12, atol=0)
        # and the input rows are the transform written out
        x = transform_rows(y[:, None], log=log, seasonal=seasonal, difference=difference)[:, 0]
        g = u[seasonal:] - u[:-seasonal] if seasonal else u
        np.testing.assert_array_equal(x, np.diff(g) if difference else g)


def test_spec_json_and_checks() -> None:
    s = spec(True, 12, True, 1)
    back = ForecastSpec.from_json(s.to_json())
    assert (back.log, back.seasonal, back.difference, back.rows_needed) == (True, 12, True, 17)
    old = s.to_json().replace('"log": true, ', "").replace('"seasonal": 12, ', "")
    assert (ForecastSpec.from_json(old).log, ForecastSpec.from_json(old).seasonal) == (False, 0)
    with pytest.raises(DataError, match="lag 2 cannot be undone 3 rows ahead"):
        spec(False, 2, False, 3)
    ident = Scaler(("x",), np.zeros(1), np.ones(1))
    with pytest.raises(DataError, match="need the target 'y' among the features"):
        ForecastSpec("y", ("x",), 4, 1, ident, Scaler(("y",), np.zeros(1), np.ones(1)), seasonal=12)
    with pytest.raises(DataError, match=r"the data: column 'y' holds -2 at row 3; the log transform needs "
                                        r"every value > 0"):
        spec(True, 0, False, 1).prepare(np.array([[1.0], [2.0], [3.0], [-2.0], [4.0]]))


def write(path: Path, y: np.ndarray) -> Path:
    start = np.datetime64("1990-01", "M")
    path.write_text("date,value\n" + "".join(f"{start + i}-01,{float(v)!r}\n" for i, v in enumerate(y)))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    d = tmp_path_factory.mktemp("tf")
    data = write(d / "mul.csv", multiplicative())
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["train", str(data), "--target", "value", "--window", "6", "--backtest-windows", "2",
                   "--horizon", "6", "--preprocess", "auto", "--epochs", "2", "--units", "4", "--quiet",
                   "--no-plots", "--no-highway", "--out", str(d / "out")])   # (the rules are the
                                                                              # recurrent branch's)
    assert rc == 0
    return d / "out" / "model.safetensors", data, buf.getvalue()


def test_auto_choice_is_stored_printed_and_applied_alike(trained: tuple[Path, Path, str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    model, data, text = trained
    y = multiplicative()
    choice = choose_preprocess(y[:132], 12)             # the rows before the first origin 144 - 12
    assert choice.log and choice.seasonal == 12
    fc = rk.io.load_forecaster(model)
    assert (fc.spec.log, fc.spec.seasonal, fc.spec.difference) == (choice.log, 12, choice.difference)
    assert fc.spec.extra["preprocess"]["reason"] == choice.reason
    assert f"preprocessing: {choice.describe()}: {choice.reason}" in text.splitlines()
    capsys.readouterr()
    assert main(["summary", str(model)]) == 0
    assert ("features: value (read as logarithms, seasonal differences at lag 12"
            in capsys.readouterr().out)
    # predict --steps after train: the in-process recursive forecast, to the bit
    capsys.readouterr()
    assert main(["predict", str(model), str(data), "--steps", "5"]) == 0
    cli = np.array([float(r.split(",")[1]) for r in capsys.readouterr().out.splitlines()[1:]])
    assert np.array_equal(cli, fc.path(y, 5))
    # one-step predict: the network on the scaled transformed windows, inverted by hand
    assert main(["predict", str(model), str(data)]) == 0
    one = np.array([float(r.split(",")[1]) for r in capsys.readouterr().out.splitlines()[1:]])
    need = fc.spec.rows_needed
    windows = np.stack([y[s:s + need, None] for s in range(len(y) - need + 1)])
    u = np.log(windows[:, :, 0])
    g = u[:, 12:] - u[:, :-12]
    x = np.diff(g, axis=1) if choice.difference else g
    z = fc.network(fc.spec.x_scaler.apply(x.reshape(-1, 1), np.float32).reshape(len(x), 6, 1))
    base = u[:, -12] + ((u[:, -1] - u[:, -13]) if choice.difference else 0)      # U[pos-12] (+ g[pos-1])
    hand = np.exp(fc.spec.y_scaler.invert(z)[:, 0] + base)
    np.testing.assert_allclose(one, hand, rtol=1e-12, atol=0)   # exp of the same float64 sums
    assert np.array_equal(one, fc.predict_windows(windows))
    # the model server: windows of rows_needed raw rows, the same forecasts
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    with TestClient(rk.serve.app(str(model))) as c:
        r = c.post("/v1/predict", json={"x": windows.tolist()})
        described = c.get("/v1/model").json()["forecast"]
    assert r.status_code == 200, r.text
    assert np.array_equal(np.asarray(r.json()["outputs"], dtype=np.float64)[:, 0], one)
    assert (described["log"], described["seasonal"], described["rows_per_window"]) == (True, 12, need)


def test_explicit_log_of_a_non_positive_series_is_a_typed_error(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    y = multiplicative()
    y[40] = 0.0
    data = write(tmp_path / "zero.csv", y)
    rc = main(["train", str(data), "--target", "value", "--window", "6", "--log", "--epochs", "1",
               "--quiet", "--no-plots", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert (f"{data}: column 'value' holds 0 at row 40; the log transform needs every value > 0"
            in capsys.readouterr().err)
    rc = main(["train", str(data), "--target", "value", "--window", "6", "--log", "--seasonal-difference",
               "--backtest-windows", "2", "--horizon", "3", "--epochs", "1", "--quiet", "--no-plots",
               "--out", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "column 'value' holds 0 at row 40; the log transform needs every value > 0" in err
    rc = main(["train", str(data), "--target", "value", "--window", "6", "--seasonal-difference",
               "--season", "0", "--epochs", "1", "--quiet", "--no-plots", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "--seasonal-difference needs a season" in capsys.readouterr().err


def test_backtest_history_counts_the_seasonal_lag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write(tmp_path / "short.csv", multiplicative(40))
    args = ["train", str(data), "--target", "value", "--window", "21", "--backtest-windows", "3",
            "--horizon", "4", "--season", "6", "--epochs", "1", "--quiet", "--no-plots",
            "--out", str(tmp_path / "o")]
    # origins 28, 32, 36; the first window from row 28 reads 21 + 6 rows and one more to train on
    assert main([*args, "--seasonal-difference"]) == 2
    assert ("short.csv: too short for 3 backtest window(s) of horizon 4: the first origin is row 28, but "
            "it needs at least 29 rows of history (the forecaster's window and lags, and one row more); the "
            "series has 40 rows"
            in capsys.readouterr().err)
    assert not (tmp_path / "o").exists()
