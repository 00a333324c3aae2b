"""Embedding: truncation toward zero, errors naming the value, U(-0.05, 0.05),
``embeddings``, scatter-add backward (unselected rows exactly 0, duplicates summed)."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer, numeric_grad, rel_err
from rnnkit.layers import Embedding


def _emb(dtype: str = "float64") -> Embedding:
    e = Embedding(5, 3, seed=1, dtype=dtype)
    e.set_weights(np.arange(15.0).reshape(5, 3))
    return e


def test_contract_through_the_harness() -> None:
    rep = check_layer(lambda dt: Embedding(6, 3, seed=2, dtype=dt),
                      lambda r: r.integers(0, 6, (3, 4)).astype(np.float64), input_grad=False)
    assert rep.output_shape == (3, 4, 3)
    assert rep.grad_errors["embeddings"] < 1e-8


def test_truncation_toward_zero() -> None:
    e = _emb()
    y = e.predict(np.array([[2.0, 2.9, -0.5, 0.99, 4.999]]))
    np.testing.assert_array_equal(y[0], np.arange(15.0).reshape(5, 3)[[2, 2, 0, 0, 4]])
    np.testing.assert_array_equal(e.predict(np.array([3, 1])), [[9.0, 10, 11], [3, 4, 5]])  # ints


@pytest.mark.parametrize("bad,shown", [(5.0, "5.0"), (7.3, "7.3"), (-1.0, "-1.0"), (-1.5, "-1.5")])
def test_out_of_range_names_the_value(bad: float, shown: str) -> None:
    x = np.array([[1.0, bad]], dtype=np.float32)
    with pytest.raises(rk.InvalidInputError, match=rf"index value {shown} at position \(0, 1\)"):
        _emb().predict(x)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_names_the_value(bad: float) -> None:
    with pytest.raises(rk.InvalidInputError, match=rf"index value {bad} at position \(1,\) is not finite"):
        _emb().predict(np.array([0.0, bad]))


def test_init_name_param_count_and_shapes() -> None:
    e = Embedding(1000, 20, seed=7)
    e.build((None, 4))
    t = e.weight("embeddings")
    assert [w.name for w in e.weights()] == ["embeddings"]
    assert t.shape == (1000, 20) and t.dtype == np.float32
    assert -0.05 <= t.min() < -0.049 and 0.049 < t.max() <= 0.05  # U(-0.05, 0.05), not Glorot
    assert e.param_count() == 1000 * 20
    for inp, out in [((None,), (None, 20)), ((None, 4), (None, 4, 20)), ((None, 4, 2), (None, 4, 2, 20))]:
        assert e.compute_output_shape(inp) == out
    assert e.mask_zero is False and e.compute_mask(np.array([[0, 1]]), None) is None
    with pytest.raises(rk.InvalidParameterError, match="mask_zero"):
        Embedding(10, 4, mask_zero=1)  # type: ignore[arg-type]


def test_scatter_add_unselected_rows_exactly_zero_and_duplicates_sum() -> None:
    e = _emb()
    x = np.array([[1.0, 3.0, 1.0], [1.9, 0.0, 3.2]])  # row 1 three times, 3 twice, 0 once; 2, 4 never
    G = np.random.default_rng(0).standard_normal((2, 3, 3))
    ctx = rk.Ctx.training()
    e.forward(x, ctx)
    dx = e.backward(G, ctx)
    g = ctx.grad(e, "embeddings")
    np.testing.assert_array_equal(dx, np.zeros((2, 3)))
    assert np.all(g[2] == 0.0) and np.all(g[4] == 0.0)
    np.testing.assert_allclose(g[1], G[0, 0] + G[0, 2] + G[1, 0], rtol=1e-15)
    np.testing.assert_allclose(g[3], G[0, 1] + G[1, 2], rtol=1e-15)
    np.testing.assert_array_equal(g[0], G[1, 1])
    assert rel_err(g, numeric_grad(e, x, G, "embeddings")) < 1e-9


def test_set_weights_checks_shape() -> None:
    e = Embedding(4, 2)
    with pytest.raises(rk.WeightShapeError) as err:
        e.set_weights(np.zeros((2, 4)))
    assert err.value.name == "embeddings" and err.value.expected == (4, 2) and err.value.got == (2, 4)
    e.set_weights(np.ones((4, 2)))
    np.testing.assert_array_equal(e.predict(np.array([[3.0]])), [[[1.0, 1.0]]])


def test_summary_shows_embedding_shape_without_a_forward_pass() -> None:
    m = rk.models.Sequential([Embedding(10, 8, seed=1)], input_shape=(None, 4))
    assert "(None, 4, 8)" in m.summary(print_fn=None)
