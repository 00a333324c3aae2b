"""Losses: values against hand computation, gradients against float64 finite differences,
from_logits against the probability form, and torch.nn.functional as an oracle."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import losses

RNG = np.random.default_rng(11)


def fd_grad(loss: losses.Loss, y_true: np.ndarray, y_pred: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of loss(y_true, .) at y_pred, float64."""
    g = np.zeros_like(y_pred, dtype=np.float64)
    for idx in np.ndindex(y_pred.shape):
        up, dn = y_pred.astype(np.float64), y_pred.astype(np.float64)
        up[idx] += h
        dn[idx] -= h
        g[idx] = (loss(y_true, up) - loss(y_true, dn)) / (2 * h)
    return g


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# -- values by hand ------------------------------------------------------------------------------
def test_mse_and_mae_by_hand() -> None:
    yt = [[0.0, 1.0], [2.0, 3.0]]
    yp = [[1.0, 1.0], [2.0, 5.0]]        # differences 1, 0, 0, 2
    assert rk.MeanSquaredError()(yt, yp) == pytest.approx((1 + 0 + 0 + 4) / 4, abs=1e-15)
    assert rk.MeanAbsoluteError()(yt, yp) == pytest.approx(3 / 4, abs=1e-15)
    v, g = rk.MeanSquaredError().value_and_grad(yt, yp)
    np.testing.assert_allclose(g, [[0.5, 0.0], [0.0, 1.0]], atol=1e-15)   # 2 d / 4
    _, g = rk.MeanAbsoluteError().value_and_grad(yt, yp)
    np.testing.assert_allclose(g, [[0.25, 0.0], [0.0, 0.25]], atol=1e-15)  # sign(d) / 4


def test_mse_rank3_is_keras_mean_of_last_axis_then_samples() -> None:
    yt = np.zeros((2, 3, 4))
    yp = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    keras_style = np.mean(np.mean(yp ** 2, axis=-1))
    assert rk.MeanSquaredError()(yt, yp) == pytest.approx(keras_style, rel=1e-15)


def test_bce_by_hand() -> None:
    bce = rk.BinaryCrossEntropy()
    expected = -(math.log(0.8) + math.log(0.6)) / 2
    assert bce([[1.0], [0.0]], [[0.8], [0.4]]) == pytest.approx(expected, rel=1e-14)
    # probabilities are clipped to [1e-7, 1 - 1e-7] as Keras does
    assert bce([[1.0]], [[0.0]]) == pytest.approx(-math.log(1e-7), rel=1e-12)
    assert bce([[0.0]], [[1.0]]) == pytest.approx(-math.log(1e-7), rel=1e-6)
    logits = rk.BinaryCrossEntropy(from_logits=True)
    assert logits([[1.0]], [[2.0]]) == pytest.approx(math.log(1 + math.exp(-2.0)), rel=1e-14)
    assert logits([[0.0]], [[2.0]]) == pytest.approx(2.0 + math.log(1 + math.exp(-2.0)), rel=1e-14)
    # stable at extreme logits: log(1 + e^1000) = 1000
    assert logits([[1.0], [0.0]], [[-1000.0], [1000.0]]) == pytest.approx(1000.0, rel=1e-14)
    _, g = logits.value_and_grad([[1.0], [0.0]], [[-1000.0], [1000.0]])
    np.testing.assert_allclose(g, [[-0.5], [0.5]], atol=1e-15)   # (sigmoid(z) - y) / 2


def test_bce_saturated_wrong_prediction_still_has_a_gradient() -> None:
    _, g = rk.BinaryCrossEntropy().value_and_grad([[1.0]], [[0.0]])
    assert g[0, 0] == pytest.approx(-1.0 / 1e-7, rel=1e-6)   # -y / clip(p)


def test_cce_and_sparse_by_hand() -> None:
    cce = rk.CategoricalCrossEntropy()
    assert cce([[0, 1, 0]], [[0.2, 0.5, 0.3]]) == pytest.approx(-math.log(0.5), rel=1e-14)
    # Keras normalises the probabilities first
    assert cce([[0, 1, 0]], [[0.4, 1.0, 0.6]]) == pytest.approx(-math.log(0.5), rel=1e-14)
    two = cce([[0, 1, 0], [1, 0, 0]], [[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
    assert two == pytest.approx(-(math.log(0.5) + math.log(0.1)) / 2, rel=1e-14)
    sp = rk.SparseCategoricalCrossEntropy()
    assert sp([1, 0], [[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]]) == pytest.approx(two, rel=1e-14)
    assert sp([[1], [0]], [[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]]) == pytest.approx(two, rel=1e-14)
    z = [[1.0, 2.0, 3.0]]
    lse = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    assert rk.CategoricalCrossEntropy(from_logits=True)([[0, 1, 0]], z) == pytest.approx(lse - 2, rel=1e-14)
    assert rk.SparseCategoricalCrossEntropy(from_logits=True)([1], z) == pytest.approx(lse - 2, rel=1e-14)
    # fused softmax: huge logits stay finite
    big = rk.SparseCategoricalCrossEntropy(from_logits=True)([0], [[1000.0, 0.0, -1000.0]])
    assert big == pytest.approx(0.0, abs=1e-12)
    assert rk.SparseCategoricalCrossEntropy(from_logits=True)([2], [[1000.0, 0.0, -1000.0]]) == \
        pytest.approx(2000.0, rel=1e-14)


# -- gradients against finite differences --------------------------------------------------------
def _cases() -> list[tuple[str, losses.Loss, np.ndarray, np.ndarray]]:
    yt_reg = RNG.standard_normal((3, 4))
    yp_reg = RNG.standard_normal((3, 4))
    yb = (RNG.random((4, 2)) > 0.5).astype(np.float64)
    pb = RNG.uniform(0.05, 0.95, (4, 2))
    zb = RNG.standard_normal((4, 2)) * 3
    onehot = np.eye(4)[RNG.integers(0, 4, (3, 2))]        # (3, 2, 4) rank 3
    pc = RNG.uniform(0.1, 1.0, (3, 2, 4))                  # unnormalised, Keras normalises
    zc = RNG.standard_normal((3, 2, 4)) * 2
    soft = softmax(RNG.standard_normal((3, 4)))            # soft (non one-hot) targets
    labels = RNG.integers(0, 4, (3, 2))
    return [
        ("mse", rk.MeanSquaredError(), yt_reg, yp_reg),
        ("mae", rk.MeanAbsoluteError(), yt_reg, yp_reg),
        ("bce", rk.BinaryCrossEntropy(), yb, pb),
        ("bce_soft_targets", rk.BinaryCrossEntropy(), RNG.random((4, 2)), pb),
        ("bce_logits", rk.BinaryCrossEntropy(from_logits=True), yb, zb),
        ("cce", rk.CategoricalCrossEntropy(), onehot, pc),
        ("cce_soft", rk.CategoricalCrossEntropy(), soft, RNG.uniform(0.1, 1.0, (3, 4))),
        ("cce_logits", rk.CategoricalCrossEntropy(from_logits=True), onehot, zc),
        ("cce_logits_soft", rk.CategoricalCrossEntropy(from_logits=True), soft * 1.5,
         RNG.standard_normal((3, 4))),
        ("sparse", rk.SparseCategoricalCrossEntropy(), labels, pc),
        ("sparse_logits", rk.SparseCategoricalCrossEntropy(from_logits=True), labels, zc),
        ("sparse_logits_col", rk.SparseCategoricalCrossEntropy(from_logits=True), labels[:, :1], zc[:, 0, :]),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_gradient_matches_finite_differences(case: tuple[str, losses.Loss, np.ndarray, np.ndarray]) -> None:
    _, loss, yt, yp = case
    value, g = loss.value_and_grad(yt, yp)
    assert value == loss(yt, yp)
    assert g.shape == yp.shape and g.dtype == np.float64
    np.testing.assert_allclose(g, fd_grad(loss, yt, yp), rtol=1e-6, atol=1e-9)
    assert np.abs(g).max() > 1e-3


def test_gradient_dtype_follows_y_pred() -> None:
    yp = RNG.uniform(0.1, 0.9, (3, 2)).astype(np.float32)
    for loss in (rk.MeanSquaredError(), rk.BinaryCrossEntropy(), rk.CategoricalCrossEntropy()):
        _, g = loss.value_and_grad(np.ones((3, 2), np.float64), yp)
        assert g.dtype == np.float32
    _, g = rk.SparseCategoricalCrossEntropy().value_and_grad([0, 1, 1], yp)
    assert g.dtype == np.float32
    assert isinstance(rk.MeanSquaredError()(np.ones(3), np.zeros(3, np.float32)), float)


# -- from_logits equals the probability form -----------------------------------------------------
def test_from_logits_equals_probability_form() -> None:
    z = RNG.standard_normal((5, 1)) * 2
    y = (RNG.random((5, 1)) > 0.5).astype(np.float64)
    p = 1 / (1 + np.exp(-z))
    v_l, g_l = rk.BinaryCrossEntropy(from_logits=True).value_and_grad(y, z)
    v_p, g_p = rk.BinaryCrossEntropy().value_and_grad(y, p)
    assert v_l == pytest.approx(v_p, rel=1e-12)
    np.testing.assert_allclose(g_l, g_p * p * (1 - p), rtol=1e-10)    # chain rule through sigmoid
    zc = RNG.standard_normal((4, 3)) * 2
    yc = np.eye(3)[[0, 2, 1, 1]]
    v_l, g_l = rk.CategoricalCrossEntropy(from_logits=True).value_and_grad(yc, zc)
    pc = softmax(zc)
    v_p, g_p = rk.CategoricalCrossEntropy().value_and_grad(yc, pc)
    assert v_l == pytest.approx(v_p, rel=1e-12)
    jac_t = pc * (g_p - np.sum(g_p * pc, axis=-1, keepdims=True))     # softmax VJP
    np.testing.assert_allclose(g_l, jac_t, rtol=1e-9, atol=1e-12)
    sp_l = rk.SparseCategoricalCrossEntropy(from_logits=True)([0, 2, 1, 1], zc)
    assert sp_l == pytest.approx(v_l, rel=1e-14)


# -- torch.nn.functional as an oracle ------------------------------------------------------------
def _torch_value_grad(fn: Any, yt: Any, yp: np.ndarray) -> tuple[float, np.ndarray]:
    torch = pytest.importorskip("torch")
    t = torch.tensor(yp, requires_grad=True)
    out = fn(t, yt)
    out.backward()
    return float(out.detach()), t.grad.numpy()


def test_against_torch_functional() -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    yt = RNG.standard_normal((4, 3))
    yp = RNG.standard_normal((4, 3))
    checks: list[tuple[losses.Loss, Any, Any, np.ndarray]] = [
        (rk.MeanSquaredError(), lambda a, b: F.mse_loss(a, b), yt, yp),
        (rk.MeanAbsoluteError(), lambda a, b: F.l1_loss(a, b), yt, yp),
    ]
    yb = (RNG.random((4, 3)) > 0.5).astype(np.float64)
    pb = RNG.uniform(0.02, 0.98, (4, 3))
    checks += [
        (rk.BinaryCrossEntropy(), lambda a, b: F.binary_cross_entropy(a, b), yb, pb),
        (rk.BinaryCrossEntropy(from_logits=True), lambda a, b: F.binary_cross_entropy_with_logits(a, b),
         yb, yp * 4),
    ]
    labels = RNG.integers(0, 3, 4)
    checks += [
        (rk.SparseCategoricalCrossEntropy(from_logits=True), lambda a, b: F.cross_entropy(a, b), labels, yp),
        (rk.CategoricalCrossEntropy(from_logits=True), lambda a, b: F.cross_entropy(a, b),
         softmax(yt), yp),   # probability targets
    ]
    # rank 3 (N, T, C): mean over N * T positions, as torch over the flattened positions
    z3 = RNG.standard_normal((2, 5, 3))
    l3 = RNG.integers(0, 3, (2, 5))
    checks.append((rk.SparseCategoricalCrossEntropy(from_logits=True),
                   lambda a, b: F.cross_entropy(a.reshape(-1, 3), b.reshape(-1)), l3, z3))
    for loss, fn, target, pred in checks:
        ours_v, ours_g = loss.value_and_grad(target, pred)
        tv, tg = _torch_value_grad(fn, torch.tensor(target), pred)
        assert ours_v == pytest.approx(tv, rel=1e-12), loss
        np.testing.assert_allclose(ours_g, tg, rtol=1e-10, atol=1e-14, err_msg=repr(loss))


# -- errors, names, config -----------------------------------------------------------------------
def test_shape_mismatch_names_both_shapes() -> None:
    for loss in (rk.MeanSquaredError(), rk.MeanAbsoluteError(), rk.BinaryCrossEntropy(),
                 rk.CategoricalCrossEntropy()):
        with pytest.raises(rk.InvalidInputError, match=r"\(4,\).*\(4, 1\)"):
            loss(np.zeros(4), np.zeros((4, 1)))
    with pytest.raises(rk.InvalidInputError, match=r"\(4, 2\).*\(4, 3\).*expected \(4,\) or \(4, 1\)"):
        rk.SparseCategoricalCrossEntropy()(np.zeros((4, 2)), np.ones((4, 3)))


def test_sparse_labels_are_checked() -> None:
    sp = rk.SparseCategoricalCrossEntropy(from_logits=True)
    with pytest.raises(rk.InvalidInputError, match=r"label 3 at position \(1,\).*0\.\.2"):
        sp([0, 3], np.zeros((2, 3)))
    with pytest.raises(rk.InvalidInputError, match=r"label -1"):
        sp([-1, 0], np.zeros((2, 3)))
    with pytest.raises(rk.InvalidInputError, match=r"1\.5.*whole"):
        sp([0.0, 1.5], np.zeros((2, 3)))
    with pytest.raises(rk.InvalidInputError, match=r"nan"):
        sp([0.0, np.nan], np.zeros((2, 3)))
    assert sp([0.0, 2.0], np.zeros((2, 3))) == pytest.approx(math.log(3), rel=1e-14)


def test_bad_inputs() -> None:
    with pytest.raises(rk.InvalidInputError, match="y_pred.*real numbers"):
        rk.MeanSquaredError()([1.0], ["a"])
    with pytest.raises(rk.InvalidInputError, match="empty"):
        rk.MeanSquaredError()([], [])
    with pytest.raises(rk.InvalidParameterError, match="from_logits"):
        rk.BinaryCrossEntropy(from_logits="yes")  # type: ignore[arg-type]


def test_get_and_serialize() -> None:
    for name, cls in [("mse", rk.MeanSquaredError), ("mae", rk.MeanAbsoluteError),
                      ("binary_crossentropy", rk.BinaryCrossEntropy),
                      ("categorical_crossentropy", rk.CategoricalCrossEntropy),
                      ("sparse_categorical_crossentropy", rk.SparseCategoricalCrossEntropy),
                      ("MeanSquaredError", rk.MeanSquaredError)]:
        assert type(losses.get(name)) is cls
    obj = rk.BinaryCrossEntropy(from_logits=True)
    assert losses.get(obj) is obj
    again = losses.get(losses.serialize(obj))
    assert isinstance(again, rk.BinaryCrossEntropy) and again.from_logits
    assert obj.get_config() == {"from_logits": True}
    with pytest.raises(rk.InvalidParameterError, match="hinge"):
        losses.get("hinge")
