"""Keras' keyword spellings, pasted as they are, give the same objects as rnnkit's own."""

from __future__ import annotations

import pytest

import rnnkit as rk


def test_adam_and_adamw_take_keras_beta_names() -> None:
    keras_style = rk.Adam(learning_rate=0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-6, clipnorm=1.0)
    own = rk.Adam(0.01, 0.8, 0.99, 1e-6, clipnorm=1.0)
    assert keras_style.get_config() == own.get_config()
    assert keras_style.beta1 == 0.8 and keras_style.beta2 == 0.99
    w = rk.AdamW(learning_rate=0.01, beta_1=0.7, weight_decay=0.1)
    assert w.get_config() == rk.AdamW(0.01, 0.7, weight_decay=0.1).get_config()
    with pytest.raises(rk.InvalidParameterError, match="beta_1 or beta1"):
        rk.Adam(beta1=0.5, beta_1=0.6)


def test_sgd_and_rmsprop_keras_names_are_their_own() -> None:
    assert (rk.SGD(learning_rate=0.1, momentum=0.9, nesterov=True).get_config()
            == rk.SGD(0.1, 0.9, True).get_config())
    assert (rk.RMSprop(learning_rate=0.01, rho=0.8, momentum=0.1, epsilon=1e-6, clipvalue=0.5).get_config()
            == rk.RMSprop(0.01, 0.8, 0.1, 1e-6, clipvalue=0.5).get_config())


@pytest.mark.parametrize("keras_shape,full", [((8, 8), (1, 8, 8)), ((None, 8), (1, None, 8))])
def test_sequential_input_shape_without_batch_axis_builds_the_with_free_batch_model(
        keras_shape: tuple[int | None, ...], full: tuple[int | None, ...]) -> None:
    import numpy as np

    a = rk.Sequential([rk.LSTM(4, seed=1), rk.Dense(10, "softmax", seed=2)], input_shape=keras_shape)
    b = rk.Sequential([rk.LSTM(4, seed=1), rk.Dense(10, "softmax", seed=2)],
                      input_shape=rk.Shape.with_free_batch(full))
    assert a.input_shapes() == b.input_shapes() and a.get_config() == b.get_config()
    x = np.random.default_rng(0).normal(size=(3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(a.predict(x), b.predict(x))
    # rnnkit's own convention is unchanged, and so is the builder (the batch axis given)
    assert rk.Sequential([rk.Dense(2)], input_shape=(None, 3)).input_shapes() == [rk.Shape((None, 3))]
    built = rk.SequentialBuilder().add(rk.LSTM(2)).build((5, 8, 8))
    assert built.input_shapes() == [rk.Shape((None, 8, 8))]
    emb = rk.Sequential([rk.Embedding(20, 4), rk.GRU(3)], input_shape=(None,))
    assert emb.input_shapes() == [rk.Shape((None, None))]
