"""Loss weights: sample_weight (per sample, per timestep), class_weight and the masks of
sequence outputs, by hand, against finite differences, and against Keras 3 (torch backend)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip
from rnnkit import losses
from rnnkit.models._training import output_weights

RNG = np.random.default_rng(3)

LOSSES = [rk.MeanSquaredError(), rk.MeanAbsoluteError(), rk.BinaryCrossEntropy(from_logits=True),
          rk.CategoricalCrossEntropy(from_logits=True), rk.CategoricalCrossEntropy()]


def _pair(loss: rk.Loss) -> tuple[np.ndarray, np.ndarray]:
    yp = RNG.uniform(0.1, 0.9, (3, 4, 5))
    if isinstance(loss, rk.CategoricalCrossEntropy):
        yt = np.eye(5)[RNG.integers(0, 5, (3, 4))]
    elif isinstance(loss, rk.BinaryCrossEntropy):
        yt = RNG.integers(0, 2, (3, 4, 5)).astype(float)
    else:
        yt = RNG.standard_normal((3, 4, 5))
    return yt, yp


@pytest.mark.parametrize("loss", LOSSES, ids=lambda x: repr(x))
@pytest.mark.parametrize("kind", ["sample", "timestep"])
def test_weighted_loss_is_keras_sum_over_batch_size(loss: rk.Loss, kind: str) -> None:
    yt, yp = _pair(loss)
    w = RNG.uniform(0, 2, (3,) if kind == "sample" else (3, 4))
    wp = np.broadcast_to(w[:, None] if w.ndim == 1 else w, (3, 4))
    per = np.array([[loss(yt[i, t][None], yp[i, t][None]) for t in range(4)] for i in range(3)])
    assert loss(yt, yp, w) == pytest.approx(float(np.sum(wp * per) / 12), rel=1e-12)
    v, g = loss.value_and_grad(yt, yp, w)
    h = 1e-6
    num = np.zeros_like(yp)
    for i in np.ndindex(yp.shape):
        up, dn = yp.copy(), yp.copy()
        up[i] += h
        dn[i] -= h
        num[i] = (loss(yt, up, w) - loss(yt, dn, w)) / (2 * h)
    assert np.max(np.abs(g - num)) / np.max(np.abs(num)) < 1e-6
    with pytest.raises(rk.InvalidInputError, match="sample_weight"):
        loss(yt, yp, np.ones(5))
    with pytest.raises(rk.InvalidInputError, match=">= 0"):
        loss(yt, yp, -np.ones(3))


def test_a_mask_makes_the_loss_the_mean_over_valid_steps() -> None:
    yt, yp = RNG.standard_normal((3, 4, 2)), RNG.standard_normal((3, 4, 2))
    valid = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], bool)
    lw, mw = output_weights([yp], [rk.Mask(valid)], None)
    mse = rk.MeanSquaredError()
    assert mse(yt, yp, lw[0]) == pytest.approx(mse(yt[valid], yp[valid]), rel=1e-13)
    assert rk.metrics.MeanAbsoluteError()(yt, yp, mw[0]) == pytest.approx(
        float(np.mean(np.abs(yt[valid] - yp[valid]))), rel=1e-13)
    sw = np.array([2.0, 1.0, 0.5])
    lw, mw = output_weights([yp], [rk.Mask(lengths=valid.sum(1))], [sw])
    per = np.mean((yt - yp) ** 2, -1)
    want = float(np.sum((per * sw[:, None])[valid]) / valid.sum())
    assert mse(yt, yp, lw[0]) == pytest.approx(want, rel=1e-13)
    assert rk.metrics.MeanSquaredError()(yt, yp, mw[0]) == pytest.approx(
        float(np.mean(per[valid])), rel=1e-13)
    assert output_weights([yp], [None], [sw])[1] == [None]      # Keras: metrics= are unweighted


def test_fit_and_evaluate_take_weights_and_refuse_bad_ones() -> None:
    x = RNG.standard_normal((6, 3))
    y = RNG.integers(0, 3, 6)
    model = rk.Sequential([rk.Dense(3, "softmax", seed=1, dtype="float64")])
    model.compile(rk.SGD(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.build((None, 3))
    sw = np.array([1.0, 0, 0, 2, 0, 1])
    full = model.evaluate(x, y, sample_weight=sw, return_dict=True)
    loss = losses.SparseCategoricalCrossEntropy()
    assert full["loss"] == pytest.approx(loss(y, model.predict(x), sw), rel=1e-12)
    right = (np.argmax(model.predict(x), -1) == y).astype(float)
    assert full["accuracy"] == pytest.approx(float(np.mean(right)), rel=1e-12)
    weighted = float(np.sum(right * sw) / sw.sum())
    assert rk.metrics.Accuracy()(y, model.predict(x), sw) == pytest.approx(weighted)
    cw = {0: 3.0, 2: 0.5}
    h = model.fit(x, y, 1, class_weight=cw, shuffle=False)
    assert np.isfinite(h.history["loss"][0])
    with pytest.raises(rk.InvalidParameterError, match="not both"):
        model.fit(x, y, 1, class_weight=cw, sample_weight=sw)
    with pytest.raises(rk.InvalidInputError, match="samples"):
        model.fit(x, y, 1, sample_weight=sw[:4])
    seq = rk.Sequential([rk.Dense(3, "softmax", dtype="float64")])
    seq.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(rk.InvalidInputError, match="one target per sample"):
        seq.fit(RNG.standard_normal((6, 4, 3)), RNG.integers(0, 3, (6, 4)), 1, class_weight=cw)


# -- Keras 3 (torch backend) ---------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_keras_parity_masked_sequence_loss_sample_and_class_weights() -> None:
    keras = keras_or_skip()
    B, T, F = 5, 6, 3
    x = RNG.standard_normal((B, T, F)).astype(np.float32)
    lengths = np.array([6, 2, 4, 1, 5])
    x[np.arange(T)[None, :] >= lengths[:, None]] = 0.0
    y = RNG.standard_normal((B, T, 2)).astype(np.float32)
    sw = RNG.uniform(0.5, 2, (B, T)).astype(np.float32)
    km = keras.Sequential([keras.Input((T, F)), keras.layers.Masking(0.0), keras.layers.Dense(2)])
    km.compile(keras.optimizers.SGD(0.1), "mse", metrics=["mae"])
    ours = rk.Sequential([rk.Masking(0.0), rk.Dense(2)], input_shape=(None, T, F))
    ours.set_weights([np.asarray(w) for w in km.get_weights()])
    ours.compile(rk.SGD(0.1), "mse", metrics=["mae"])
    per_sample = np.repeat(sw[:, :1], T, axis=1)  # Keras cannot multiply a (B,) weight into a mask
    for kw, rkw in (({}, {}), ({"sample_weight": sw}, {"sample_weight": sw}),
                    ({"sample_weight": per_sample}, {"sample_weight": sw[:, 0]})):
        k = km.evaluate(x, y, verbose=0, batch_size=B, return_dict=True, **kw)
        r = ours.evaluate(x, y, return_dict=True, **rkw)
        assert abs(k["loss"] - r["loss"]) < 1e-5 and abs(k["mae"] - r["mae"]) < 1e-5, (kw, k, r)
    kh = km.fit(x, y, epochs=3, batch_size=B, sample_weight=sw, shuffle=False, verbose=0)
    rh = ours.fit(x, y, 3, sample_weight=sw, shuffle=False)
    np.testing.assert_allclose(rh.history["loss"], kh.history["loss"], atol=1e-5)
    for a, b in zip(ours.get_weights(), km.get_weights(), strict=True):
        np.testing.assert_allclose(a, np.asarray(b), atol=1e-5)
    # class_weight on a per-sample classifier
    xc = RNG.standard_normal((8, 4)).astype(np.float32)
    yc = RNG.integers(0, 3, 8)
    kc = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    kc.compile(keras.optimizers.SGD(0.5), "sparse_categorical_crossentropy")
    rc = rk.Sequential([rk.Dense(3, "softmax")], input_shape=(None, 4))
    rc.set_weights([np.asarray(w) for w in kc.get_weights()])
    rc.compile(rk.SGD(0.5), "sparse_categorical_crossentropy")
    cw = {0: 2.0, 1: 0.25, 2: 1.0}
    kh = kc.fit(xc, yc, epochs=3, batch_size=8, class_weight=cw, shuffle=False, verbose=0)
    rh = rc.fit(xc, yc, 3, class_weight=cw, shuffle=False)
    np.testing.assert_allclose(rh.history["loss"], kh.history["loss"], atol=1e-5)
    for a, b in zip(rc.get_weights(), kc.get_weights(), strict=True):
        np.testing.assert_allclose(a, np.asarray(b), atol=1e-5)


def test_validation_triples_and_checkpoints_know_the_weights(tmp_path: Any) -> None:
    x = RNG.standard_normal((6, 3))
    y = RNG.standard_normal((6, 2))
    sw = np.array([1.0, 0, 2, 1, 0, 1])
    model = rk.Sequential([rk.Dense(2, seed=1, dtype="float64")], input_shape=(None, 3))
    model.compile(rk.SGD(0.1), "mse")
    h = model.fit(x, y, 2, validation_data=(x, y, sw))
    assert h.history["val_loss"][-1] == pytest.approx(model.evaluate(x, y, sample_weight=sw), rel=1e-12)
    assert h.history["val_loss"][-1] != pytest.approx(model.evaluate(x, y), rel=1e-6)
    ck = str(tmp_path / "ck")
    model.fit(x, y, 2, checkpoint=ck, sample_weight=sw)
    model.fit(x, y, 2, checkpoint=ck, sample_weight=sw)            # the same run: resumes (done)
    with pytest.raises(rk.Error, match="checkpoint"):               # other weights: another run
        model.fit(x, y, 2, checkpoint=ck, sample_weight=np.ones(6))
