"""A backward refused for a mis-shaped upstream gradient leaves the forward pass in the Ctx: the
same backward with the right gradient then works, and gives what a fresh pass gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

rng = np.random.default_rng(0)
X3 = rng.standard_normal((2, 4, 3))
IDX = np.array([[1.0, 2.0, 0.0, 3.0], [4.0, 0.0, 1.0, 2.0]])

CASES: list[tuple[str, Callable[[], Any], np.ndarray]] = [
    ("SimpleRNN", lambda: rk.SimpleRNN(5, seed=1, dtype="float64"), X3),
    ("LSTM", lambda: rk.LSTM(5, return_sequences=True, seed=1, dtype="float64"), X3),
    ("GRU", lambda: rk.GRU(5, reset_after=True, go_backwards=True, seed=1, dtype="float64"), X3),
    ("Dense", lambda: rk.Dense(4, "tanh", seed=1, dtype="float64"), X3),
    ("ActivationLayer", lambda: rk.ActivationLayer("sigmoid", dtype="float64"), X3),
    ("Embedding", lambda: rk.Embedding(6, 3, seed=1, dtype="float64"), IDX),
    ("Reverse", lambda: rk.Reverse(1, dtype="float64"), X3),
    ("Dropout", lambda: rk.Dropout(0.5, dtype="float64"), X3),
    ("rnn.lstm", lambda: rk.rnn.lstm(3, 4, rk.rnn.RNNConfig(batch_first=False), seed=1, dtype="float64"),
     X3),
]


@pytest.mark.parametrize(("name", "make", "x"), CASES, ids=[c[0] for c in CASES])
def test_wrong_gradient_keeps_the_forward_pass(name: str, make: Callable[[], Any], x: np.ndarray) -> None:
    layer = make()
    if not layer.built:
        layer.build(rk.Shape.with_free_batch(x.shape))
    ctx = rk.Ctx.training(seed=3)
    y = layer.forward(x, ctx)
    g = np.random.default_rng(1).standard_normal(y.shape)
    with pytest.raises(rk.InvalidInputError, match=r"gradient"):
        layer.backward(g[..., :-1], ctx)
    with pytest.raises(rk.InvalidInputError, match=r"gradient"):
        layer.backward(g[0], ctx)
    dx = layer.backward(g, ctx)
    fresh = rk.Ctx.training(seed=3)
    np.testing.assert_array_equal(layer.forward(x, fresh), y)
    np.testing.assert_array_equal(layer.backward(g, fresh), dx)
    for (lay, wname), value in fresh.grads.items():
        np.testing.assert_array_equal(ctx.grad(lay, wname), value)
    with pytest.raises(rk.ForwardPassNotRunError):  # consumed now
        layer.backward(g, ctx)


def test_concatenate_keeps_its_pass_too() -> None:
    cat = rk.Concatenate(-1, dtype="float64")
    ctx = rk.Ctx.training()
    y = cat.forward([X3, X3[..., :2]], ctx)
    with pytest.raises(rk.InvalidInputError, match="width 5"):
        cat.backward(np.ones((2, 4, 4)), ctx)
    parts = cat.backward(np.arange(y.size, dtype=float).reshape(y.shape), ctx)
    np.testing.assert_array_equal(np.concatenate(parts, axis=-1), np.arange(y.size).reshape(y.shape))
