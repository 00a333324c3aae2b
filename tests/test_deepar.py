"""DeepAR-style global forecaster: panels and their typed errors, calendar features against
pandas, the network inputs and training windows against a direct construction, ancestral
sampling (lag feeding, scaling, seeds) through a known stepper, the stateful stepper against
the whole-sequence network, save/load, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rnnkit import InvalidInputError
from rnnkit.io import DeepAR
from rnnkit.timeseries import DataError
from rnnkit.timeseries._backtest import mase
from rnnkit.timeseries._deepar import (
    DeepARSpec,
    Stepper,
    default_lags,
    fit_spec,
    sample_paths,
    scale_of,
    training_windows,
)
from rnnkit.timeseries._panel import Panel, calendar_features, panel_from_frame, read_panel


def _quarters(start: str, n: int) -> np.ndarray:
    m0 = np.datetime64(start, "M").astype(np.int64)
    return (m0 + 3 * np.arange(n)).astype("datetime64[M]").astype("datetime64[D]")


def _panel(n: int = 24, ids: tuple[str, ...] = ("a", "b"), covariate: bool = False, seed: int = 0) -> Panel:
    rng = np.random.default_rng(seed)
    ii, dd, yy, cc = [], [], [], []
    for k, sid in enumerate(ids):
        d = _quarters("2000-01", n)
        y = (10.0 * (k + 1)) * (1 + 0.3 * np.sin(np.arange(n) * np.pi / 2)) + rng.normal(0, 0.5, n)
        ii += [sid] * n
        dd += list(d)
        yy += list(y)
        cc += list(rng.normal(size=n))
    return Panel.from_columns(ii, np.array(dd), yy, {"c": cc} if covariate else None)


def _csv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "p.csv"
    p.write_text(text)
    return p


def test_panel_errors_name_the_series_and_the_rule(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"series 'b': date 2000-04-01 appears 2 times; a panel has one row"):
        read_panel(_csv(tmp_path, "unique_id,ds,y\na,2000-01-01,1\na,2000-04-01,2\na,2000-07-01,3\n"
                                  "b,2000-01-01,1\nb,2000-04-01,2\nb,2000-04-01,3\nb,2000-07-01,3\n"))
    with pytest.raises(DataError, match=r"series 'a': its dates are not evenly spaced: after 2000-04-01 "
                                        r"comes 2000-10-01, where the usual step is 3 month"):
        read_panel(_csv(tmp_path, "unique_id,ds,y\na,2000-01-01,1\na,2000-04-01,2\na,2000-10-01,3\n"
                                  "a,2001-01-01,3\na,2001-04-01,3\n"))
    with pytest.raises(DataError, match=r"series 'a': no y value at 2000-04-01"):
        read_panel(_csv(tmp_path, "unique_id,ds,y\na,2000-01-01,1\na,2000-04-01,\na,2000-07-01,3\n"))
    with pytest.raises(DataError, match=r"series 'b' has frequency MS, series 'a' QS-JAN"):
        read_panel(_csv(tmp_path, "unique_id,ds,y\na,2000-01-01,1\na,2000-04-01,2\na,2000-07-01,3\n"
                                  "b,2000-01-01,1\nb,2000-02-01,2\nb,2000-03-01,3\n"))
    with pytest.raises(DataError, match=r"no column\(s\) 'unique_id'"):
        read_panel(_csv(tmp_path, "id,ds,y\na,2000-01-01,1\n"))


def test_series_too_short_and_negative_counts_are_typed_errors() -> None:
    p = _panel(24)
    short = Panel((p.series[0], p.series[1].head(10)), (), p.freq)
    with pytest.raises(DataError, match=r"series 'b': 10 row\(s\), too short: training needs at least 12 "
                                        r"\(context 4 \+ largest lag 4 \+ horizon 4\)"):
        DeepAR(4, context=4, epochs=1, patience=0, calibration=None, lags=(1, 4)).fit(short)
    # conformal calibration holds out 4 + 3 x 1 rows (4 windows, origins 1 row apart)
    with pytest.raises(DataError, match=r"training needs at least 19 .* \+ 7 held-out rows"):
        DeepAR(4, context=4, epochs=1, patience=0, lags=(1, 4)).fit(short)
    with pytest.raises(DataError, match=r"series 'b': 10 row\(s\), too short: training needs at least 16 "
                                        r"\(context 4 \+ largest lag 4 \+ horizon 4 \+ 4 held-out rows for "
                                        r"validation and calibration\)"):
        DeepAR(4, context=4, epochs=1, calibration=None, lags=(1, 4)).fit(short)
    # the default lags of a quarterly panel reach 2 seasons back: 4 rows more
    with pytest.raises(DataError,
                       match=r"training needs at least 16 \(context 4 \+ largest lag 8 \+ horizon 4\)"):
        DeepAR(4, context=4, epochs=1, patience=0, calibration=None).fit(short)
    with pytest.raises(DataError, match=r"series 'b': 7 row\(s\), too short: a forecast needs at least 8 "
                                        r"\(context 4 \+ largest lag 4\)"):
        fit_spec(p, 4, 4, "gaussian", (1, 4), {}).check_series(p.series[1].head(7), "a forecast")
    neg = Panel.from_columns(["a"] * 12, _quarters("2000-01", 12), [1.0] * 11 + [-1.0])
    with pytest.raises(InvalidInputError, match=r"series 'a': the negative binomial likelihood is for "
                                                r"counts"):
        DeepAR(2, likelihood="negative_binomial", epochs=1).fit(neg)


def test_default_lags_cover_one_season_and_the_one_before() -> None:
    assert default_lags(None) == default_lags(1) == (1,)
    assert default_lags(4) == (1, 2, 3, 4, 5, 8)
    assert default_lags(12) == (*range(1, 14), 24)
    assert fit_spec(_panel(24), 4, 4, "gaussian", None, {}).lags == (1, 2, 3, 4, 5, 8)
    assert fit_spec(_panel(24), 4, 4, "gaussian", (1, 4), {}).lags == (1, 4)


def test_pandas_frame_and_csv_give_the_same_panel(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    p = _panel(12, covariate=True)
    rows = [(s.id, str(d), y, c) for s in p.series
            for d, y, c in zip(s.index, s.y, s.covariates[:, 0], strict=True)]
    df = pd.DataFrame(rows[::-1], columns=["unique_id", "ds", "y", "c"])      # any row order
    df["ds"] = pd.to_datetime(df["ds"])
    a = panel_from_frame(df)
    path = tmp_path / "p.csv"
    df.to_csv(path, index=False)
    b = read_panel(path)
    assert a.ids == b.ids == ["b", "a"]          # series in order of first appearance
    for z in p.series:
        x, y = a[z.id], b[z.id]
        np.testing.assert_array_equal(x.index, z.index)
        np.testing.assert_array_equal(x.y, z.y)
        np.testing.assert_array_equal(y.y, z.y)
        np.testing.assert_array_equal(y.covariates, z.covariates)


def test_calendar_features_match_pandas() -> None:
    pd = pytest.importorskip("pandas")
    for freq, field, m in (("QS", "quarter", 4), ("MS", "month", 12)):
        idx = pd.date_range("1999-04-01", periods=30, freq=freq)
        p = Panel.from_columns(["a"] * 30, idx.to_numpy().astype("datetime64[D]"), np.arange(30.0))
        f = calendar_features(p.series[0].index, p.freq)
        want = np.eye(m)[getattr(idx, field).to_numpy() - 1]
        np.testing.assert_array_equal(f, want)
        np.testing.assert_array_equal(p.future_index(p.series[0], 3).astype("datetime64[ns]"),
                                      pd.date_range(idx[-1], periods=4, freq=freq)[1:].to_numpy())


def test_training_windows_hold_the_scaled_lags_and_targets() -> None:
    p = _panel(20, covariate=True)
    spec = fit_spec(p, 2, 3, "gaussian", (1, 4), {"cell": "lstm", "units": 4, "layers": 1})
    x, y = training_windows(spec, p, None)
    per = 20 - 4 - 5 + 1
    assert x.shape[0] == y.shape[0] == 2 * per
    s = p.series[1]
    w = per + 2                         # series b's third window: positions 6 .. 10
    b = 4 + 2
    nu = np.mean(np.abs(s.y[b:b + 3]))
    for j in range(5):
        t = b + j
        cov = (s.covariates[t, 0] - spec.cov_mean[0]) / spec.cov_std[0]
        cal = np.eye(4)[(t % 4)]        # quarters from 2000-01
        want = [s.y[t - 1] / nu, s.y[t - 4] / nu, *cal, cov, np.log(nu), 0.0, 1.0]
        np.testing.assert_allclose(x[w, j], want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(y[w, j], [s.y[t], nu], rtol=1e-15)
    # validation: each series' last window; training then ends `horizon` rows before the end
    xt, yt = training_windows(spec, p, None, held_out=2)
    xv, yv = training_windows(spec, p, None, last=True)
    assert len(xt) == 2 * (per - 2) and len(xv) == 2
    np.testing.assert_array_equal(xv[1], x[-1])
    np.testing.assert_array_equal(yt[per - 3, :, 0], p.series[0].y[per - 3 + 4:per - 3 + 9])
    assert yt[per - 3, -1, 0] == p.series[0].y[-3]        # the last training target: 2 rows before


def _lag_stepper(spec: DeepARSpec, column: int,
                 sigma_raw: float = -30.0) -> tuple[Stepper, list[tuple[int, ...]]]:
    """A stepper whose Gaussian mean is nu * (input column ``column``): the scaled lag it reads."""
    calls: list[tuple[int, ...]] = []

    def step(x: np.ndarray) -> np.ndarray:
        calls.append(x.shape)
        out = np.empty(x.shape[:2] + (2,))
        out[..., 0] = x[..., column]
        out[..., 1] = sigma_raw
        return out

    return (step, lambda: None), calls


def test_sampling_feeds_each_draw_back_as_the_next_lag() -> None:
    p = _panel(16)
    spec = fit_spec(p, 6, 4, "gaussian", (1, 4), {"cell": "lstm", "units": 4, "layers": 1})
    # mean = the previous value (lag 1), sigma ~ 1e-13 nu: every path is the persistence forecast
    # the network reads float32 inputs: each fed-back lag is rounded to 2^-24 relative, at most
    # 6 roundings along a path (< 4e-7)
    tol = 6 * 2.0 ** -24
    stepper, calls = _lag_stepper(spec, 0)
    fc = sample_paths(spec, p, stepper, 3, seed=0)
    for i, s in enumerate(p.series):
        np.testing.assert_allclose(fc.samples[i], np.full((3, 6), s.y[-1]), rtol=tol)
    assert calls == [(6, 4, spec.n_features)] + [(6, 1, spec.n_features)] * 6
    # mean = the value a season before (lag 4): the seasonal-naive forecast, repeating
    stepper, _ = _lag_stepper(spec, 1)
    fc = sample_paths(spec, p, stepper, 2, seed=0)
    for i, s in enumerate(p.series):
        np.testing.assert_allclose(fc.samples[i], np.tile(s.y[-4:], 2)[None, :6].repeat(2, 0), rtol=tol)
    np.testing.assert_array_equal(fc.index[0], p.future_index(p.series[0], 6))


def test_sampling_is_seeded_and_spreads_as_the_head_says() -> None:
    p = _panel(16)
    spec = fit_spec(p, 1, 4, "gaussian", (1, 4), {"cell": "lstm", "units": 4, "layers": 1})
    stepper, _ = _lag_stepper(spec, 0, sigma_raw=0.0)      # sigma = nu softplus(0) = nu log 2
    a = sample_paths(spec, p, stepper, 20000, seed=3)
    b = sample_paths(spec, p, stepper, 20000, seed=3)
    np.testing.assert_array_equal(a.samples, b.samples)
    assert not np.array_equal(a.samples, sample_paths(spec, p, stepper, 20000, seed=4).samples)
    for i, s in enumerate(p.series):
        nu = scale_of(s.y[-4:])
        sd = nu * np.log(2.0)
        # 20000 draws: the sample sd's standard error is sd / sqrt(2 * 20000) = 0.005 sd
        assert abs(a.samples[i, :, 0].std() - sd) < 0.025 * sd
        lo, hi = a.interval(0.8)
        # the 0.1 / 0.9 quantiles of N(mu, sd): mu -/+ 1.2816 sd, within a few standard errors
        np.testing.assert_allclose([lo[i, 0], hi[i, 0]], [s.y[-1] - 1.2816 * sd, s.y[-1] + 1.2816 * sd],
                                   atol=0.04 * sd)


def test_mase_is_the_m4_definition() -> None:
    hist = np.array([1.0, 3, 2, 5, 4, 6])
    # seasonal (m = 2) naive in-sample errors: |2-1|, |5-3|, |4-2|, |6-5| -> mean 1.5
    assert mase(np.array([7.0, 8]), np.array([6.0, 10]), hist, 2) == pytest.approx(1.5 / 1.5)


def test_fit_forecast_save_load_and_the_stepper_match_the_whole_network(tmp_path: Path) -> None:
    p = _panel(32, covariate=True)
    hist, held = p.split(4)
    m = DeepAR(4, context=4, units=6, layers=1, epochs=3, batch_size=16, seed=1).fit(hist)
    assert m.history["loss"][-1] < m.history["loss"][0]
    fc = m.forecast(hist, num_samples=16, seed=2, future=held)
    path = m.save(tmp_path / "m.safetensors")
    m2 = DeepAR.load(path)
    fc2 = m2.forecast(hist, num_samples=16, seed=2, future=held)
    np.testing.assert_array_equal(fc.samples, fc2.samples)
    with pytest.raises(DataError, match=r"known-future covariates \['c'\]"):
        m.forecast(hist, num_samples=2)
    with pytest.raises(DataError, match=r"series 'z' was not among the 2 series"):
        m.forecast(Panel.from_columns(["z"] * 10, _quarters("2000-01", 10), np.ones(10), {"c": np.ones(10)}),
                   future=held)
    # the stateful one-step network equals the whole-sequence network on the same inputs
    spec = m.spec
    assert spec is not None and m.network is not None
    x, _ = training_windows(spec, hist, 4)
    from rnnkit.io._deepar import _network
    st = _network(spec, stateful=True)
    st.set_weights(m.network.get_weights())
    whole = m.network.predict(x)
    st.reset_states()
    parts = [st.predict(x[:, :3], batch_size=len(x))] + [st.predict(x[:, t:t + 1], batch_size=len(x))
                                                         for t in range(3, x.shape[1])]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), whole, rtol=1e-5, atol=1e-6)


def test_cli_train_panel_and_predict_quantiles(tmp_path: Path) -> None:
    p = _panel(32, ids=("a", "b", "c"))
    rows = ["unique_id,ds,y"] + [f"{s.id},{d},{float(y)!r}" for s in p.series
                                 for d, y in zip(s.index, s.y, strict=True)]
    data = tmp_path / "panel.csv"
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    run = [sys.executable, "-m", "rnnkit"]
    r = subprocess.run(run + ["train", str(data), "--target", "y", "--panel", "--horizon", "4",
                              "--window", "4", "--units", "6", "--epochs", "2", "--out", str(out), "--quiet",
                              "--no-plots"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "80 % interval coverage" in r.stdout
    r = subprocess.run(run + ["predict", str(out / "model.safetensors"), str(data),
                              "--quantiles", "0.1,0.5,0.9", "--samples", "50"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "unique_id,ds,mean,q0.1,q0.5,q0.9"
    assert len(lines) == 1 + 3 * 4
    m = DeepAR.load(out / "model.safetensors")
    # the conformal factors found on the 3 series x 4 windows x 4 calibration rows are stored,
    # reported, and applied (pooled: 12 points a step are too few for a factor per step)
    metrics = json.loads((out / "metrics.json").read_text())
    assert m.spec is not None and metrics["spread"] == list(m.spec.spread) and len(m.spec.spread) == 4
    assert metrics["calibration"]["points"] == 3 * 4 * 4 and not metrics["calibration"]["per_step"]
    assert len(set(m.spec.spread)) == 1
    fc = m.forecast(p, num_samples=50, seed=0)
    q = fc.quantile([0.1, 0.5, 0.9])
    first = lines[1].split(",")
    assert first[:2] == ["a", "2008-01-01"]
    np.testing.assert_allclose([float(v) for v in first[2:]], [fc.mean[0, 0], *q[:, 0, 0]], rtol=1e-15)
    r = subprocess.run(run + ["predict", str(out / "model.safetensors"), str(data), "--quantiles", "0.5,1.5"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "--quantiles: every quantile must lie in (0, 1), got '0.5,1.5'" in r.stderr
    pytest.importorskip("matplotlib")
    png = tmp_path / "fan.png"
    r = subprocess.run(run + ["predict", str(out / "model.safetensors"), str(data),
                              "--fan-chart", str(png), "--output", str(tmp_path / "f.csv")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "fan chart of 3 series" in r.stderr
