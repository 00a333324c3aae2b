"""DeepAR's conformal calibration of its intervals: the factor is the conformal order statistic
(checked by the coverage it gives on its own points), pooled over series, windows and steps
where a step has too few points and per step where it has enough, it brings a too-narrow and a
too-wide spread to the nominal coverage of fresh points within the binomial bound, a trained
model's factors are the pooled conformal quantile of its rolling-origin windows' scores
(recomputed here by hand from forecasts of those windows), applied to every forecast (the
median unchanged) and kept through save/load, and the final model is the one calibration=None
trains."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rnnkit import InvalidParameterError
from rnnkit.io import DeepAR
from rnnkit.timeseries._deepar import (
    DeepARSpec,
    Forecast,
    conformal_quantile,
    conformal_scores,
    conformal_spread,
    per_step_points,
    spread_paths,
)
from rnnkit.timeseries._panel import Panel


def _forecast(samples: np.ndarray) -> Forecast:
    n, _, h = samples.shape
    index = np.tile(np.arange(h).astype("datetime64[D]"), (n, 1))
    return Forecast(tuple(f"s{i}" for i in range(n)), index, samples)


def _gaussian_case(rng: np.random.Generator, n: int, sampled_sd: float) -> tuple[Forecast, np.ndarray]:
    """Points whose truth is N(m, 1) and whose 200 sample paths are N(m, sampled_sd)."""
    m = rng.normal(0.0, 5.0, (n, 1))
    samples = m[:, :, None] + sampled_sd * rng.standard_normal((n, 200, 1))
    return _forecast(samples), m + rng.standard_normal((n, 1))


def test_the_factor_is_the_conformal_order_statistic() -> None:
    rng = np.random.default_rng(0)
    fc, actual = _gaussian_case(rng, 37, 0.7)
    (c,), per_step = conformal_spread(conformal_scores(fc, actual, 0.8), 0.8)
    assert not per_step                                          # 37 points < 64
    k = math.ceil((37 + 1) * 0.8)                                # 31 of the 37 points
    # the k-th smallest score lies on the widened interval's edge: k points in, and one fewer
    # for a factor a hair smaller (the interval's ends scale exactly with the factor)
    inside = _forecast(spread_paths(fc.samples, (c,))).coverage(actual, 0.8) * 37
    assert round(inside) == k
    assert round(_forecast(spread_paths(fc.samples, (c * (1 - 1e-9),))).coverage(actual, 0.8) * 37) == k - 1
    # the median stays where it was
    np.testing.assert_allclose(np.median(spread_paths(fc.samples, (c,)), axis=1),
                               np.median(fc.samples, axis=1))


def test_steps_get_their_own_factor_only_with_enough_points() -> None:
    # scores whose spread doubles from step 1 to step 2: |N(0, 1)| and |N(0, 2)|
    rng = np.random.default_rng(4)
    assert per_step_points(0.8) == 64 and per_step_points(0.9) == 36
    many = np.abs(rng.standard_normal((4000, 2))) * [1.0, 2.0]
    c, per_step = conformal_spread(many, 0.8)
    assert per_step
    # the 0.8 quantile of |N(0, s)| is 1.2816 s; its sampling sd on 4000 points is about 0.02 s
    np.testing.assert_allclose(c, [1.2816, 2 * 1.2816], rtol=0.05)
    assert c[0] == conformal_quantile(many[:, 0], 0.8) == np.sort(many[:, 0])[math.ceil(4001 * 0.8) - 1]
    # 63 rows (series x windows) of 2 steps: pooled, the 102nd smallest of all 126 scores
    few = many[:63]
    c, per_step = conformal_spread(few, 0.8)
    assert not per_step and c[0] == c[1] == np.sort(few.ravel())[math.ceil(127 * 0.8) - 1]


def test_a_factor_stored_as_one_number_by_an_older_file_applies_to_every_step() -> None:
    spec = DeepARSpec(3, 4, "gaussian", (1,), ("a",), spread=(1.5, 1.5, 1.5))
    old = spec.to_json().replace('"spread": [1.5, 1.5, 1.5]', '"spread": 1.5')
    assert '"spread": 1.5' in old
    assert DeepARSpec.from_json(old).spread == (1.5, 1.5, 1.5)
    assert DeepARSpec.from_json(old.replace('"spread": 1.5', '"spread": 1.0')).spread == ()
    with pytest.raises(InvalidParameterError, match=r"must be \(\) or 3 finite numbers > 0 \(one per horizon "
                                                    r"step\), got \(1.5, 1.5\)"):
        DeepARSpec(3, 4, "gaussian", (1,), ("a",), spread=(1.5, 1.5))


@pytest.mark.parametrize("sampled_sd", [0.5, 2.0])
def test_calibrated_intervals_cover_the_nominal_share_of_fresh_points(sampled_sd: float) -> None:
    rng = np.random.default_rng(1)
    cal, cal_y = _gaussian_case(rng, 2000, sampled_sd)
    new, new_y = _gaussian_case(rng, 4000, sampled_sd)
    before = cal.coverage(cal_y, 0.8)
    c, per_step = conformal_spread(conformal_scores(cal, cal_y, 0.8), 0.8)
    assert per_step                                              # 2000 points for the one step
    # sampled sd 0.5 covers P(|Z| < 0.64) = 0.48, sd 2 covers P(|Z| < 2.56) = 0.99 of N(0, 1)
    assert abs(before - (0.48 if sampled_sd == 0.5 else 0.99)) < 0.04
    assert c[0] == pytest.approx(1 / sampled_sd, rel=0.1)
    after = _forecast(spread_paths(new.samples, c)).coverage(new_y, 0.8)
    # the coverage given the calibration points varies with sd sqrt(0.16 / 2000), the share of
    # 4000 fresh points around it with sd sqrt(0.16 / 4000): 4 of their combined sd (0.011)
    bound = 4 * math.sqrt(0.16 / 2000 + 0.16 / 4000)
    assert abs(after - 0.8) <= bound, (after, bound)


def test_bad_level_and_shape_are_typed_errors() -> None:
    fc, actual = _gaussian_case(np.random.default_rng(2), 5, 1.0)
    with pytest.raises(InvalidParameterError, match=r"level must lie in \(0, 1\), got 1.2"):
        conformal_scores(fc, actual, 1.2)
    with pytest.raises(InvalidParameterError, match=r"level must lie in \(0, 1\), got 1.2"):
        conformal_spread(np.ones((5, 1)), 1.2)
    with pytest.raises(InvalidParameterError,
                       match=r"actual must be \(series, horizon\) = \(5, 1\), got \(4, 1\)"):
        conformal_scores(fc, actual[:4], 0.8)
    with pytest.raises(InvalidParameterError,
                       match=r"scores must be \(series x windows, horizon\), got shape \(5,\)"):
        conformal_spread(np.ones(5), 0.8)
    with pytest.raises(InvalidParameterError, match="DeepAR: calibration_windows must"):
        DeepAR(4, calibration_windows=0)
    with pytest.raises(InvalidParameterError, match="calibration must be 'conformal' or None, got 'cqr'"):
        DeepAR(4, calibration="cqr")
    with pytest.raises(InvalidParameterError, match="calibration must be 'conformal' or None, got array"):
        DeepAR(4, calibration=np.array([1, 2]))             # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="DeepAR: calibration_level must"):
        DeepAR(4, calibration_level=1.0)


def _noisy_panel(series: int, rows: int, sd: float, seed: int) -> Panel:
    """Quarterly series: a level times a fixed season, plus N(0, sd) noise (so the best 80 %
    interval is the season's value +- 1.2816 sd)."""
    rng = np.random.default_rng(seed)
    m0 = np.datetime64("1990-01", "M").astype(np.int64)
    dates = (m0 + 3 * np.arange(rows)).astype("datetime64[M]").astype("datetime64[D]")
    ii, dd, yy = [], [], []
    for k in range(series):
        level = 20.0 + k
        y = level * (1 + 0.2 * np.sin(np.arange(rows) * np.pi / 2)) + rng.normal(0, sd, rows)
        ii += [f"s{k}"] * rows
        dd += list(dates)
        yy += list(y)
    return Panel.from_columns(ii, np.array(dd), yy)


def test_a_trained_model_applies_its_factor_and_covers_known_gaussian_noise(tmp_path: Path) -> None:
    panel = _noisy_panel(60, 40, 1.0, 3)
    hist, held = panel.split(4)
    m = DeepAR(4, context=8, likelihood="gaussian", units=12, layers=1, epochs=8, max_windows=12,
               batch_size=64, seed=0).fit(hist)
    spec = m.spec
    assert spec is not None
    # 4 windows with origins ceil(4 / 4) = 1 row apart: 60 x 4 = 240 points a step, >= 64
    assert spec.calibration["points"] == 60 * 4 * 4 and spec.calibration["level"] == 0.8
    assert spec.calibration["windows"] == 4 and spec.calibration["step"] == 1 and spec.calibration["per_step"]
    # the factors by hand: the calibration model (trained on each series without its last 4 + 3
    # rows) forecasts each window from the rows before its origin (len - 4 - (3 - k)); each point
    # is scored in half-widths from the median, each step's factor is its ceil(241 x 0.8)-th score
    cal = m.calibration_model
    assert cal is not None and cal.network is not None and m.network is not None
    assert not np.array_equal(cal.network.get_weights()[0], m.network.get_weights()[0])
    scores = []
    for k in range(4):
        cut = 3 - k
        before, rows = (hist.split(cut)[0] if cut else hist).split(4)
        fc = cal.forecast(before, num_samples=200, seed=0, calibrated=False)
        lo, med, hi = np.quantile(fc.samples, [0.1, 0.5, 0.9], axis=1)
        a = np.stack([s.y for s in rows.series])
        scores.append(np.where(a >= med, (a - med) / (hi - med), (med - a) / (med - lo)))
    pooled = np.concatenate(scores)                          # (240, 4)
    want = np.sort(pooled, axis=0)[math.ceil(241 * 0.8) - 1]
    np.testing.assert_allclose(spec.spread, want, rtol=1e-12)
    fc = m.forecast(hist, num_samples=200, seed=5)
    raw = m.forecast(hist, num_samples=200, seed=5, calibrated=False)
    med = np.median(raw.samples, axis=1, keepdims=True)
    np.testing.assert_allclose(fc.samples, med + np.asarray(spec.spread) * (raw.samples - med), rtol=1e-12,
                               atol=1e-9)
    actual = np.stack([s.y for s in held.series])
    # 240 held-out points (binomial sd sqrt(0.16 / 240)), and factors from 240 calibration points
    # a step (the coverage they give varies with at most the same sd): 3 combined sd
    bound = 3 * math.sqrt(2 * 0.16 / 240)
    assert abs(fc.coverage(actual, 0.8) - 0.8) <= bound, (fc.coverage(actual, 0.8), raw.coverage(actual, 0.8))
    m2 = DeepAR.load(m.save(tmp_path / "m.safetensors"))
    assert m2.spec is not None and m2.spec.spread == spec.spread and m2.calibration_windows == 4
    np.testing.assert_array_equal(m2.forecast(hist, num_samples=200, seed=5).samples, fc.samples)


def test_a_small_panel_pools_its_windows_scores_into_one_factor() -> None:
    # 6 series x 4 windows = 24 points a step (< 64): one factor, the ceil(97 x 0.8) = 78th
    # smallest of all 6 x 4 x 4 = 96 scores, recomputed here from the calibration model
    hist = _noisy_panel(6, 36, 1.0, 4)
    m = DeepAR(4, context=8, likelihood="gaussian", units=4, layers=1, epochs=2, max_windows=8,
               seed=0).fit(hist)
    assert m.spec is not None and m.calibration_model is not None
    assert not m.spec.calibration["per_step"] and m.spec.calibration["points"] == 96
    scores = []
    for k in range(4):
        before, rows = (hist.split(3 - k)[0] if k < 3 else hist).split(4)
        fc = m.calibration_model.forecast(before, num_samples=200, seed=0, calibrated=False)
        lo, med, hi = np.quantile(fc.samples, [0.1, 0.5, 0.9], axis=1)
        a = np.stack([s.y for s in rows.series])
        scores.append(np.where(a >= med, (a - med) / (hi - med), (med - a) / (med - lo)))
    want = np.sort(np.concatenate(scores).ravel())[78 - 1]
    np.testing.assert_allclose(m.spec.spread, [want] * 4, rtol=1e-12)


def test_calibration_leaves_the_final_model_and_its_median_as_without_it() -> None:
    # the calibration model trains on its own; the final model's weights, and so the median of
    # every forecast (and its MASE), are those of calibration=None, bit for bit
    hist = _noisy_panel(6, 36, 1.0, 5)
    kw = dict(context=8, likelihood="gaussian", units=4, layers=1, epochs=2, max_windows=8, seed=0)
    cal = DeepAR(4, **kw).fit(hist)                          # type: ignore[arg-type]
    plain = DeepAR(4, calibration=None, **kw).fit(hist)      # type: ignore[arg-type]
    assert cal.network is not None and plain.network is not None and cal.spec is not None
    for a, b in zip(cal.network.get_weights(), plain.network.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert cal.spec.spread and plain.spec is not None and plain.spec.spread == ()
    c = cal.forecast(hist, num_samples=201, seed=3)
    p = plain.forecast(hist, num_samples=201, seed=3)
    # 201 paths: the median is one of them, unmoved by median + c (path - median)
    np.testing.assert_array_equal(c.quantile(0.5), p.quantile(0.5))
    assert not np.array_equal(c.samples, p.samples)
