"""Keras 3's ``test_step`` / ``predict_step`` overridden on a subclassed ``rk.Model``: ``evaluate``
and ``predict`` call them per batch, with the data Keras gives them (``(x, y[, sample_weight])``
to ``test_step``, the input batch itself to ``predict_step``, as Keras 3 on its torch backend
passes it).

Oracle: a hand computation in float64 of a Dense model's outputs ``x @ W + b`` from its weights
(float32 passes: relative bound 1e-6, a few roundings of sums of 4 products of values near 1)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk

F, O = 4, 2  # noqa: E741  (features, outputs)


class Affine(rk.Model):
    """One Dense layer; ``calls`` counts the steps run."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = rk.Dense(O, seed=3)
        self.calls: list[int] = []

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.dense(inputs)


class OwnTest(Affine):
    """``test_step`` returning a running sum of absolute errors and the batch sizes seen."""

    def test_step(self, data: Any) -> dict[str, float]:
        x, y = data[0], data[1]
        self.calls.append(len(x))
        err = np.abs(self(x, training=False) - y).sum()
        self.total = getattr(self, "total", 0.0) + float(err)
        return {"sae": self.total, "n": float(sum(self.calls))}


class DefaultTest(Affine):
    """Overrides ``test_step`` only to count: Keras' default step through ``super()``."""

    def test_step(self, data: Any) -> dict[str, float]:
        self.calls.append(len(data[0]))
        return super().test_step(data)


class OwnPredict(Affine):
    """``predict_step`` returning two outputs made from the pass."""

    def predict_step(self, data: Any) -> Any:
        self.calls.append(len(data))
        y = self(data, training=False)
        return [2.0 * y + 1.0, y * y]


def _data(n: int = 20) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, F)).astype(np.float32), rng.normal(size=(n, O)).astype(np.float32)


def _by_hand(model: Affine, x: np.ndarray) -> np.ndarray:
    w = model.dense.weight("kernel").astype(np.float64)
    b = model.dense.weight("bias").astype(np.float64)
    return x.astype(np.float64) @ w + b


def test_evaluate_calls_an_overridden_test_step_per_batch() -> None:
    x, y = _data()
    model = OwnTest()
    model.compile("sgd", "mse")
    logs = model.evaluate(x, y, batch_size=8, return_dict=True)
    assert model.calls == [8, 8, 4]
    want = np.abs(_by_hand(model, x) - y).sum()
    assert logs["n"] == 20.0
    np.testing.assert_allclose(logs["sae"], want, rtol=1e-6)
    # the list form: the logs' values in order, as Keras returns them
    model.total, model.calls = 0.0, []
    got = model.evaluate(x, y)
    assert model.calls == [20]
    np.testing.assert_allclose(got, [want, 20.0], rtol=1e-6)


def test_the_default_test_step_gives_the_batch_weighted_mean_loss() -> None:
    """``super().test_step``: the loss tracker's mean of the batch MSEs weighted by batch size
    (8, 8, 4), which is the MSE over all 20 samples; the trackers restart with each evaluate."""
    x, y = _data()
    model = DefaultTest()
    model.build(x.shape)
    model.compile("sgd", "mse", metrics=["mae"])
    want_mse = ((_by_hand(model, x) - y) ** 2).mean()
    want_mae = np.abs(_by_hand(model, x) - y).mean()
    for _ in range(2):
        logs = model.evaluate(x, y, batch_size=8, return_dict=True)
        np.testing.assert_allclose([logs["loss"], logs["mae"]], [want_mse, want_mae], rtol=1e-6)
    assert model.calls == [8, 8, 4] * 2
    plain = Affine()
    plain.build(x.shape)
    plain.compile("sgd", "mse", metrics=["mae"])
    plain.set_weights(model.get_weights())
    np.testing.assert_allclose(plain.evaluate(x, y, batch_size=8), [want_mse, want_mae], rtol=1e-6)


def test_predict_calls_an_overridden_predict_step_per_batch() -> None:
    x, _ = _data(19)
    model = OwnPredict()
    a, b = model.predict(x, batch_size=5)
    assert model.calls == [5, 5, 5, 4]
    y = _by_hand(model, x)
    np.testing.assert_allclose(a, 2.0 * y + 1.0, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(b, y * y, rtol=1e-6, atol=1e-6)


def test_an_unoverridden_predict_step_is_predict() -> None:
    x, _ = _data()
    model = Affine()
    np.testing.assert_allclose(model.predict(x, batch_size=8), _by_hand(model, x), rtol=1e-6, atol=1e-6)


def test_refusals_of_the_overriding_paths() -> None:
    x, y = _data()
    model = OwnTest()
    model.compile("sgd", "mse")
    with pytest.raises(rk.InvalidParameterError, match="test_step.*mask="):
        model.evaluate(x, y, mask=np.ones((20, 4), bool))
    with pytest.raises(rk.InvalidInputError, match="y .the targets. is missing"):
        model.evaluate(x)
    with pytest.raises(rk.InvalidInputError, match="holds nan"):
        model.evaluate(np.full_like(x, np.nan), y)

    class Bad(Affine):
        def test_step(self, data: Any) -> Any:
            return 1.0

        def predict_step(self, data: Any) -> Any:
            return 3.0

    bad = Bad()
    bad.compile("sgd", "mse")
    with pytest.raises(rk.InvalidInputError, match="test_step must return a dict"):
        bad.evaluate(x, y)
    with pytest.raises(rk.InvalidInputError, match="predict_step must return an array"):
        bad.predict(x)
    with pytest.raises(rk.InvalidParameterError, match="predict_step.*lengths="):
        bad.predict(x, lengths=np.ones(20, int))
