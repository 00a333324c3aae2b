"""``predict`` on one array: the same values as the layers' own passes, and the input check
that comes before them (every NaN / Inf refused with its position; large finite values, whose
squares overflow, accepted)."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk


def _model() -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(8, seed=1, return_sequences=True), rk.GRU(4, seed=2)])
    m.build((None, 5, 3))
    return m


def test_predict_equals_the_layers_passes() -> None:
    m = _model()
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    h = x
    for layer in m.layers:
        h = layer.forward(h, rk.Ctx.inference())
    np.testing.assert_array_equal(m.predict(x), h)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_predict_refuses_a_non_finite_value_and_names_where(bad: float, dtype: str) -> None:
    m = _model()
    x = np.ones((2, 5, 3), dtype)
    x[1, 3, 2] = bad
    with pytest.raises(rk.InvalidInputError, match=r"at \(1, 3, 2\)"):
        m.predict(x)
    x[1, 3, 2] = 1.0
    x[0, 0, 0] = 3e38 if dtype == "float32" else 1e300   # squares overflow; still finite
    x[0, 0, 1] = bad
    with pytest.raises(rk.InvalidInputError, match=r"at \(0, 0, 1\)"):
        m.predict(x)


def test_predict_accepts_values_whose_squares_overflow() -> None:
    m = rk.Sequential([rk.Dense(1, "linear", seed=1)])
    m.build((None, 2))
    big = np.array([[3e38, -3e38], [1.0, 2.0]], np.float32)
    w = m.layers[0].weight("kernel")
    out = m.predict(big)
    expect = big.astype(np.float64) @ w.astype(np.float64) + m.layers[0].weight("bias")
    assert np.isfinite(out[1]).all()
    np.testing.assert_allclose(out[1], expect[1], rtol=1e-5)
