"""Keras' one-batch calls and model plumbing: ``train_on_batch`` / ``test_on_batch`` /
``predict_on_batch`` against a hand computation, ``reset_states`` of stateful layers and
models, and ``summary()`` of a model not built yet as Keras 3.15 prints it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk

N, F, OUT = 6, 3, 2
LR = 0.1


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, F)), rng.normal(size=(N, OUT))


def _dense_model(metrics: list[Any] | None = None) -> rk.Sequential:
    model = rk.Sequential([rk.Dense(OUT, seed=3, dtype="float64")], input_shape=(None, F))
    model.compile(rk.SGD(LR), "mse", metrics=metrics)
    return model


def _by_hand(W: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray,
             sw: np.ndarray | None = None) -> tuple[float, float, np.ndarray, np.ndarray]:
    """Keras' mse (mean over the outputs, then the sample weights summed over the batch size:
    ``sum_over_batch_size``), its mae (a ``metrics=`` entry: unweighted, Keras 3.15.1 weights
    only ``weighted_metrics``), and one SGD step: (loss, mae, W', b')."""
    r = x @ W + b - y
    per = (r ** 2).mean(axis=1)
    w = np.ones(len(x)) if sw is None else sw
    loss = float((w * per).sum() / len(x))
    mae = float(np.abs(r).mean())
    d = (2.0 / (len(x) * r.shape[1])) * w[:, None] * r     # dL/d(prediction)
    return loss, mae, W - LR * (x.T @ d), b - LR * d.sum(axis=0)


def test_train_on_batch_is_one_step_returning_the_pre_update_loss() -> None:
    """Two calls: each returns the loss of the weights BEFORE its step (Keras 3.15.1 returns
    that, not a running mean) and moves the weights by exactly one SGD step. float64 end to
    end: the only differences are summation orders, ~1e-16 relative; bound 1e-12."""
    x, y = _data()
    model = _dense_model()
    for _ in range(2):
        W, b = (np.array(a) for a in model.get_weights())
        loss, _, W1, b1 = _by_hand(W, b, x, y)
        got = model.train_on_batch(x, y)
        assert isinstance(got, float)
        assert abs(got - loss) <= 1e-12 * loss
        W2, b2 = model.get_weights()
        np.testing.assert_allclose(W2, W1, rtol=0, atol=1e-12)
        np.testing.assert_allclose(b2, b1, rtol=0, atol=1e-12)


def test_train_on_batch_metrics_sample_weight_and_dict() -> None:
    """With a metric: ``[loss, mae]`` (``return_dict=True``: keyed as Keras keys them); a
    ``sample_weight`` weights the loss as Keras' ``sum_over_batch_size`` and not the mae
    (Keras 3.15.1 gives 2.3203 / 1.1602 unweighted where the weighted mae is 1.2896 on such
    data). Bound 1e-12 as above."""
    x, y = _data()
    sw = np.array([1.0, 0.5, 2.0, 0.0, 1.5, 1.0])
    model = _dense_model(["mae"])
    W, b = model.get_weights()
    loss, mae, W1, b1 = _by_hand(W, b, x, y, sw)
    got = model.train_on_batch(x, y, sample_weight=sw, return_dict=True)
    assert isinstance(got, dict) and list(got) == ["loss", "mae"]
    assert abs(got["loss"] - loss) <= 1e-12 * loss and abs(got["mae"] - mae) <= 1e-12 * mae
    np.testing.assert_allclose(model.get_weights()[0], W1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.get_weights()[1], b1, rtol=0, atol=1e-12)
    W, b = model.get_weights()
    loss, mae, _, _ = _by_hand(W, b, x, y)
    got_list = model.test_on_batch(x, y)
    assert isinstance(got_list, list) and len(got_list) == 2
    assert abs(got_list[0] - loss) <= 1e-12 * loss and abs(got_list[1] - mae) <= 1e-12 * mae
    np.testing.assert_array_equal(model.get_weights()[0], W)      # test_on_batch trains nothing
    np.testing.assert_allclose(model.predict_on_batch(x), x @ W + b, rtol=0, atol=1e-12)


def test_on_batch_refusals() -> None:
    """Not compiled, no targets, a bad return_dict: typed errors naming what was wrong."""
    x, y = _data()
    model = rk.Sequential([rk.Dense(OUT, seed=3)], input_shape=(None, F))
    with pytest.raises(rk.Error, match="compile"):
        model.train_on_batch(x, y)
    model.compile("sgd", "mse")
    with pytest.raises(rk.InvalidInputError, match="y"):
        model.train_on_batch(x)
    with pytest.raises(TypeError, match="return_dict"):
        model.train_on_batch(x, y, return_dict="yes")


def _stateful_model() -> tuple[rk.Sequential, np.ndarray]:
    layer = rk.LSTM(4, stateful=True, return_sequences=True, seed=1, dtype="float64")
    model = rk.Sequential([layer, rk.Dense(1, seed=2, dtype="float64")], input_shape=(2, 5, 3))
    return model, np.random.default_rng(4).normal(size=(2, 5, 3))


def test_reset_states_the_next_batch_starts_from_zeros() -> None:
    """The second call of a stateful model continues from the first's state (different
    outputs); after ``model.reset_states()`` or ``layer.reset_states()`` the next call equals
    a fresh non-stateful twin's (zero state), bit for bit (the same arithmetic)."""
    model, x = _stateful_model()
    twin = rk.Sequential([rk.LSTM(4, return_sequences=True, seed=1, dtype="float64"),
                          rk.Dense(1, seed=2, dtype="float64")], input_shape=(2, 5, 3))
    twin.set_weights(model.get_weights())
    zero = twin.predict(x)
    first = model.predict(x)
    np.testing.assert_array_equal(first, zero)
    assert np.abs(model.predict(x) - zero).max() > 1e-3      # carried on from the first call
    model.reset_states()
    np.testing.assert_array_equal(model.predict(x), zero)
    model.predict(x)
    model.layers[0].reset_states()
    np.testing.assert_array_equal(model.predict(x), zero)


def test_reset_states_reaches_a_nested_model() -> None:
    """A subclassed model holding a Sequential with a stateful layer: the outer model's
    ``reset_states`` clears the inner layer too."""
    inner, x = _stateful_model()

    class Outer(rk.Model):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def call(self, inputs: Any, training: bool = False) -> Any:
            return self.inner(inputs)

    outer = Outer()
    zero = np.array(outer(x))
    assert np.abs(np.array(outer(x)) - zero).max() > 1e-3
    outer.reset_states()
    np.testing.assert_array_equal(np.array(outer(x)), zero)


def test_summary_of_an_unbuilt_model_prints_as_keras() -> None:
    """Keras 3.15.1 prints an unbuilt ``Sequential([LSTM(4), Dense(2)])`` as ``?`` output
    shapes, ``0 (unbuilt)`` params and zero totals (rather than refusing); built, the counts
    are LSTM 4*(3*4 + 4*4 + 4) = 128 and Dense 4*2 + 2 = 10."""
    model = rk.Sequential([rk.LSTM(4), rk.Dense(2)])
    text = model.summary(print_fn=None)
    rows = text.splitlines()
    assert rows[4].split() == ["0", "(LSTM)", "?", "0", "(unbuilt)"]
    assert rows[5].split() == ["1", "(Dense)", "?", "0", "(unbuilt)"]
    assert rows[-3:] == ["Total params: 0", "Trainable params: 0", "Non-trainable params: 0"]
    model.build((None, 5, 3))
    rows = model.summary(print_fn=None).splitlines()
    assert rows[4].split() == ["0", "(LSTM)", "(None,", "4)", "128"]
    assert rows[-3:] == ["Total params: 138", "Trainable params: 138", "Non-trainable params: 0"]
