"""Regularizers and constraints as part of a weight's declaration: what ``layer.declaration``
says, that training reads it (a regularized and constrained LSTM trained three steps equals a
loop written here over the bare layers, float64 to 1e-12, and Keras' own training of the same
model), that a layer's own ``_add_weight(..., regularizer=, constraint=)`` is honoured, and that
the declarations survive ``set_weight``, configs and files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip
from rnnkit import constraints as C
from rnnkit import regularizers as R
from rnnkit._penalties import Plan
from rnnkit._shape import Shape
from rnnkit.layers._registry import layer_to_config

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

LR, STEPS, L2, MAX = 0.125, 3, 2.0 ** -7, 2.0  # (exact in float32, as Keras keeps them)


def _data() -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(11)
    return r.normal(size=(5, 4, 3)), r.normal(size=(5, 2))


def _start(lstm: Any, dense: Any) -> list[np.ndarray]:
    """Starting weights whose recurrent columns have norm 3 (> MAX: the constraint binds)."""
    r = np.random.default_rng(12)
    k, u, b = (np.array(w) for w in lstm.get_weights())
    return [k, 3.0 * u, r.uniform(-0.3, 0.3, b.shape), *(r.uniform(-0.5, 0.5, np.shape(w))
                                                          for w in dense.get_weights())]


def _model(**kw: Any) -> rk.Sequential:
    lstm = rk.LSTM(4, seed=3, dtype="float64", **kw)
    m = rk.Sequential([lstm, rk.Dense(2, seed=4, dtype="float64")], input_shape=(None, 4, 3))
    m.set_weights(_start(*m.layers))
    m.compile(rk.SGD(LR), "mse")
    return m


def _max_norm(w: np.ndarray) -> np.ndarray:
    norms = np.sqrt((w ** 2).sum(axis=0, keepdims=True))
    return w * np.clip(norms, 0, MAX) / (1e-7 + norms)


def _by_hand(x: np.ndarray, y: np.ndarray) -> tuple[list[float], list[np.ndarray], list[float]]:
    """The losses, the final weights, and the largest recurrent column norm before each
    constraint: a loop over the bare layers' forward / backward, the L2 term, SGD and MaxNorm
    written out."""
    lstm, dense = rk.LSTM(4, seed=3, dtype="float64"), rk.Dense(2, seed=4, dtype="float64")
    lstm.build((None, 4, 3))
    dense.build((None, 4))
    w = _start(lstm, dense)
    losses, norms = [], []
    for _ in range(STEPS):
        lstm.set_weights(*w[:3])
        dense.set_weights(*w[3:])
        ctx = rk.Ctx.training(0)
        pred = dense.forward(lstm.forward(x, ctx), ctx)
        losses.append(float(np.mean((pred - y) ** 2)) + L2 * float((w[0] ** 2).sum()))
        lstm.backward(dense.backward(2 * (pred - y) / pred.size, ctx), ctx)
        grads = [ctx.grads[(la, n)] for la, names in ((lstm, lstm.weight_names), (dense, dense.weight_names))
                 for n in names]
        grads[0] = grads[0] + 2 * L2 * w[0]
        w = [a - LR * g for a, g in zip(w, grads, strict=True)]
        norms.append(float(np.sqrt((w[1] ** 2).sum(axis=0)).max()))
        w[1] = _max_norm(w[1])
    return losses, w, norms


def test_regularized_constrained_lstm_trains_as_the_loop_by_hand() -> None:
    x, y = _data()
    m = _model(kernel_regularizer=R.L2(L2), recurrent_constraint=C.MaxNorm(MAX))
    got = m.fit(x, y, STEPS, shuffle=False).history["loss"]
    losses, want, norms = _by_hand(x, y)
    assert min(norms) > MAX + 1e-4  # the constraint binds at every step
    np.testing.assert_allclose(got, losses, rtol=1e-12, atol=0)
    for a, b in zip(m.get_weights(), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    plain = _model()
    assert abs(plain.fit(x, y, 1, shuffle=False).history["loss"][0] - losses[0]) > 1e-3  # the L2 counts


def test_regularized_constrained_lstm_trains_as_keras() -> None:
    keras = keras_or_skip()
    x, y = _data()
    ours = _model(kernel_regularizer=R.L2(L2), recurrent_constraint=C.MaxNorm(MAX))
    km = keras.Sequential([
        keras.Input((4, 3), dtype="float64"),
        keras.layers.LSTM(4, dtype="float64", kernel_regularizer=keras.regularizers.L2(L2),
                          recurrent_constraint=keras.constraints.MaxNorm(MAX)),
        keras.layers.Dense(2, dtype="float64")])
    w = [np.array(a) for a in ours.get_weights()]
    km.set_weights([w[0], w[1], w[2].reshape(-1), w[3], w[4]])
    km.compile(keras.optimizers.SGD(LR), "mse")
    theirs = [float(km.train_on_batch(x, y)) for _ in range(STEPS)]
    got = ours.fit(x, y, STEPS, shuffle=False).history["loss"]
    for a, b in zip(ours.get_weights(), km.get_weights(), strict=True):
        # Keras' float64 training is not float64 throughout: the same model without penalties
        # ends 2.5e-9 from ours too, and the losses it reports are float32 numbers
        np.testing.assert_allclose(np.reshape(a, np.shape(b)), b, rtol=0, atol=1e-8)
    np.testing.assert_allclose(got, theirs, rtol=1e-7, atol=0)


class Scale(rk.Layer):
    """``y = x * s`` over the last axis, ``s`` declared with an L1 regularizer and NonNeg."""

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        width = shape[-1]
        assert width is not None
        self._add_weight("s", np.ones(width), regularizer=R.L1(0.1), constraint=C.NonNeg())

    def compute_output_shape(self, shape: Any) -> Shape:
        return Shape.of(shape)

    def forward(self, x: np.ndarray, ctx: rk.Ctx) -> np.ndarray:
        ctx.save(self, np.asarray(x))
        return np.asarray(x) * self.weight("s")

    def backward(self, grad: np.ndarray, ctx: rk.Ctx) -> np.ndarray:
        x = ctx.load(self)
        ctx.add_grad(self, "s", (grad * x).reshape(-1, x.shape[-1]).sum(axis=0))
        return grad * self.weight("s")


def test_a_layers_own_declaration_is_trained_with() -> None:
    x = np.array([[1.0, -2.0], [3.0, 0.5]])
    y = np.array([[4.0, 1.0], [-9.0, 0.0]])
    layer = Scale(dtype="float64")
    m = rk.Sequential([layer], input_shape=(None, 2))
    m.compile(rk.SGD(LR), "mse")
    assert layer.declaration("s").regularizer == R.L1(0.1) and layer.declaration("s").constraint == C.NonNeg()
    s = np.array([1.0, 1.0])
    loss = m.fit(x, y, 1).history["loss"][0]
    g = (2 * (x * s - y) / y.size * x).sum(axis=0) + 0.1 * np.sign(s)
    assert loss == pytest.approx(np.mean((x * s - y) ** 2) + 0.1 * 2, rel=1e-12)
    np.testing.assert_allclose(layer.weight("s"), np.maximum(s - LR * g, 0), rtol=1e-12)
    assert layer.weight("s").min() == 0.0  # NonNeg bound


def test_declarations_follow_the_keywords_and_survive_set_weight_configs_and_files(tmp_path: Path) -> None:
    lstm = rk.LSTM(3, seed=1, kernel_regularizer="l2", recurrent_constraint=C.MaxNorm(1.5))
    assert lstm.regularizers == {"kernel": R.L2(0.01)}  # before the build: what the keywords name
    lstm.build((None, 5, 2))
    assert lstm.declaration("kernel").regularizer == R.L2(0.01)
    assert lstm.declaration("recurrent_kernel").constraint == C.MaxNorm(1.5)
    assert lstm.declaration("bias") == rk._weight_decl.WeightDecl("bias", (1, 12))
    lstm.set_weight("kernel", np.zeros((2, 12)))
    assert lstm.declaration("kernel").regularizer == R.L2(0.01)
    rk.attach_regularization(lstm, kernel_regularizer=None, bias_constraint="non_neg")
    assert lstm.declaration("kernel").regularizer is None
    assert lstm.declaration("bias").constraint == C.NonNeg()
    assert lstm.declaration("bias").flat  # a recurrent (1, N) bias is constrained as Keras' (N,)
    again = rk.layers.layer_from_config(rk.layers.layer_to_config(lstm))
    again.build((None, 5, 2))
    assert again.regularizers == {} and again.constraints == lstm.constraints == {
        "recurrent_kernel": C.MaxNorm(1.5), "bias": C.NonNeg()}
    # a RecurrentLayer over the built-in cell is the same thing: declared alike, saved as LSTM
    plain = rk.attach_regularization(rk.RecurrentLayer(rk.LSTMCell(3), seed=1), kernel_regularizer="l1")
    assert layer_to_config(plain) == layer_to_config(rk.LSTM(3, seed=1, kernel_regularizer="l1"))
    m = rk.Sequential([plain], input_shape=(None, 5, 2))
    rk.save_model(m, tmp_path / "m.safetensors")
    back = rk.load_model(tmp_path / "m.safetensors").layers[0]
    assert type(back) is rk.LSTM and back.declaration("kernel").regularizer == R.L1(0.01)
    assert plain.declaration("kernel").regularizer == R.L1(0.01)
    with pytest.raises(rk.UnknownWeightError, match="no weight 'kernel_q'"):
        lstm.declaration("kernel_q")


def test_a_model_without_penalties_plans_nothing_and_bidirectional_declares_per_direction() -> None:
    m = rk.Sequential([rk.LSTM(3), rk.Dense(1)], input_shape=(None, 4, 2))
    plan = Plan(m)
    assert plan.regs == [] and plan.cons == [] and plan.weight_penalty() == 0.0
    bi = rk.Bidirectional(rk.GRU(2, kernel_regularizer=R.L2(0.5), recurrent_constraint="unit_norm"))
    m2 = rk.Sequential([bi, rk.Dense(1)], input_shape=(None, 4, 2))
    plan = Plan(m2)
    # both directions: the backward one is made from the forward one's config, keywords included
    assert [(la, n) for la, n, _ in plan.regs] == [(bi, "forward.kernel"), (bi, "backward.kernel")]
    assert [n for _, n, _, _ in plan.cons] == ["forward.recurrent_kernel", "backward.recurrent_kernel"]
    want = sum(0.5 * float((np.asarray(bi.weight(f"{d}.kernel"), np.float64) ** 2).sum())
               for d in ("forward", "backward"))
    assert plan.weight_penalty() == pytest.approx(want, rel=1e-6)
