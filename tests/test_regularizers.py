"""Regularizers and constraints: the definitions (by hand and against Keras' classes), where
they enter training, files and configs, and a training run against Keras 3 (torch backend):
the same model with L1/L2 regularizers and a MaxNorm constraint, imported with load_keras,
five SGD steps, reported losses and weights within 1e-5."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip
from rnnkit import constraints as C
from rnnkit import regularizers as R

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")



W = np.array([[0.5, -2.0, 0.0], [1.5, 0.25, -0.75]])


def test_regularizer_penalties_and_gradients_by_hand() -> None:
    assert R.L1(0.1).penalty(W) == pytest.approx(0.1 * 5.0)
    assert R.L2(0.1).penalty(W) == pytest.approx(0.1 * (0.25 + 4 + 2.25 + 0.0625 + 0.5625))
    assert R.L1L2(0.1, 0.2).penalty(W) == pytest.approx(0.5 + 0.2 * 7.125)
    np.testing.assert_array_equal(R.L1(0.1).grad(W), 0.1 * np.sign(W))
    np.testing.assert_allclose(R.L2(0.1).grad(W), 0.2 * W)
    assert R.get("l2") == R.L2(0.01) and R.get("l1") == R.L1(0.01) and R.get("l1_l2") == R.L1L2(0.0, 0.0)
    assert R.get(R.serialize(R.L1L2(0.3, 0.4))) == R.L1L2(0.3, 0.4)
    with pytest.raises(rk.InvalidParameterError, match="l1"):
        R.L1(-1.0)
    with pytest.raises(rk.InvalidParameterError, match="unknown regularizer"):
        R.get("l3")


@pytest.mark.parametrize("name,kw", [
    ("MaxNorm", {"max_value": 1.0}), ("MaxNorm", {"max_value": 0.5, "axis": 1}), ("NonNeg", {}),
    ("UnitNorm", {}), ("UnitNorm", {"axis": 1}),
    ("MinMaxNorm", {"min_value": 0.8, "max_value": 1.2, "rate": 0.5})])
def test_constraints_equal_keras(name: str, kw: dict[str, Any]) -> None:
    keras = keras_or_skip()
    w = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    ours = getattr(C, name)(**kw)(w)
    kc = getattr(keras.constraints, name)(**kw)
    theirs = keras.ops.convert_to_numpy(kc(keras.ops.convert_to_tensor(w)))
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    assert ours.dtype == np.float32
    assert C.get(C.serialize(getattr(C, name)(**kw))) == getattr(C, name)(**kw)


def _keras_model(keras: Any) -> Any:
    L = keras.layers
    m = keras.Sequential([
        keras.Input((5, 3)),
        L.LSTM(4, kernel_regularizer=keras.regularizers.L2(0.02),
               recurrent_regularizer=keras.regularizers.L1(0.01),
               bias_regularizer=keras.regularizers.L1L2(0.01, 0.03),
               kernel_constraint=keras.constraints.MaxNorm(0.6),
               recurrent_constraint=keras.constraints.UnitNorm(),
               bias_constraint=keras.constraints.MaxNorm(0.3)),
        L.Dense(2, kernel_regularizer=keras.regularizers.L1(0.02), bias_regularizer="l2",
                kernel_constraint=keras.constraints.MaxNorm(0.7), bias_constraint=keras.constraints.NonNeg(),
                activity_regularizer=keras.regularizers.L2(0.05)),
    ])
    keras.utils.set_random_seed(3)
    for v in m.weights:  # random biases too, so the bias terms matter
        v.assign(np.random.default_rng(len(v.path)).uniform(-0.4, 0.4, v.shape).astype(np.float32))
    return m


def test_training_with_regularizers_and_constraints_equals_keras(tmp_path: Path) -> None:
    keras = keras_or_skip()
    km = _keras_model(keras)
    km.save(tmp_path / "m.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing "not carried over"
        ours = rk.load_keras(tmp_path / "m.keras")
    lstm, dense = ours.layers
    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:  # Keras stores some factors as float32
        return a.keys() == b.keys() and all(
            type(a[k]) is type(b[k]) and a[k].get_config() == pytest.approx(b[k].get_config(), rel=1e-7)
            for k in a)

    assert same(lstm.regularizers, {"kernel": R.L2(0.02), "recurrent_kernel": R.L1(0.01),
                                    "bias": R.L1L2(0.01, 0.03)})
    assert lstm.constraints == {"kernel": C.MaxNorm(0.6), "recurrent_kernel": C.UnitNorm(),
                                "bias": C.MaxNorm(0.3)}
    assert same({"a": dense.activity_regularizer}, {"a": R.L2(0.05)})
    assert dense.constraints["bias"] == C.NonNeg()

    rng = np.random.default_rng(7)
    x = rng.normal(size=(6, 5, 3)).astype(np.float32)
    y = rng.normal(size=(6, 2)).astype(np.float32)
    km.compile(keras.optimizers.SGD(0.1), "mse")
    theirs = [float(km.train_on_batch(x, y)) for _ in range(5)]
    ours.compile(rk.SGD(0.1), "mse")
    hist = ours.fit(x, y, 5, shuffle=False)
    got = hist.history["loss"]
    diff_loss = max(abs(a - b) for a, b in zip(got, theirs, strict=True))
    diff_w = max(float(np.abs(a.reshape(b.shape) - b).max())
                 for a, b in zip(ours.get_weights(), [np.asarray(v) for v in km.get_weights()], strict=True))
    print(f"parity: losses {diff_loss:.2e}, weights {diff_w:.2e}")
    assert diff_loss <= 1e-5 and diff_w <= 1e-5
    # the penalties matter: the plain MSE of the first step is well below the reported loss
    plain = float(np.mean((km.layers[1](km.layers[0](x)).detach().cpu().numpy() - y) ** 2))
    assert got[0] - plain > 0.05 or theirs[0] - plain > 0.05
    # evaluate reports the penalty too (Keras' evaluate does)
    assert ours.evaluate(x, y) == pytest.approx(float(km.evaluate(x, y, verbose=0)), abs=1e-5)


def test_reported_loss_and_step_by_hand_on_dense() -> None:
    x = np.array([[1.0, 2.0], [-1.0, 0.5]])
    y = np.array([[1.0], [0.0]])
    d = rk.Dense(1, dtype="float64", kernel_regularizer=R.L2(0.5), kernel_constraint=C.MaxNorm(0.1))
    m = rk.Sequential([d], input_shape=(None, 2))
    m.set_weights([np.array([[0.3], [-0.4]]), np.array([0.1])])
    m.compile(rk.SGD(0.1), "mse")
    hist = m.fit(x, y, 1)
    k, b = np.array([[0.3], [-0.4]]), np.array([0.1])
    pred = x @ k + b
    assert hist.history["loss"][0] == pytest.approx(np.mean((pred - y) ** 2) + 0.5 * 0.25)
    gk = x.T @ (2 * (pred - y) / 2) + 2 * 0.5 * k
    k2 = k - 0.1 * gk
    k2 = k2 * min(1.0, 0.1 / np.linalg.norm(k2)) * np.linalg.norm(k2) / (1e-7 + np.linalg.norm(k2))
    np.testing.assert_allclose(m.get_weights()[0], k2, rtol=1e-12)
    assert np.linalg.norm(m.get_weights()[0]) <= 0.1 + 1e-9


@pytest.mark.parametrize("make", [rk.LSTM, rk.GRU, rk.SimpleRNN])
def test_recurrent_keywords_enter_the_loss_and_the_step_by_hand(make: Any) -> None:
    """``LSTM(..., kernel_regularizer=...)`` (Keras' keywords on every recurrent layer): the
    reported loss is the plain loss plus the penalties, and one SGD step differs from the
    unregularized step by exactly ``-lr * reg.grad(w)`` per weight; a constraint then holds."""
    r = np.random.default_rng(4)
    x, y = r.normal(size=(5, 4, 3)), r.normal(size=(5, 2))
    regs = {"kernel": R.L2(0.05), "recurrent_kernel": R.L1(0.02), "bias": R.L1L2(0.01, 0.03)}

    def model(**kw: Any) -> rk.Sequential:
        m = rk.Sequential([make(3, seed=5, dtype="float64", **kw), rk.Dense(2, seed=6, dtype="float64")],
                          input_shape=(None, 4, 3))
        m.compile(rk.SGD(0.1), "mse")
        return m

    plain = model()
    reg = model(kernel_regularizer=regs["kernel"], recurrent_regularizer=regs["recurrent_kernel"],
                bias_regularizer=regs["bias"])
    w0 = {n: np.array(reg.layers[0].weight(n)) for n in ("kernel", "recurrent_kernel", "bias")}
    penalty = sum(regs[n].penalty(w) for n, w in w0.items())
    loss_plain = plain.fit(x, y, 1).history["loss"][0]
    loss_reg = reg.fit(x, y, 1).history["loss"][0]
    assert penalty > 0.05 and loss_reg == pytest.approx(loss_plain + penalty, rel=1e-12)
    for n, w in w0.items():
        step = reg.layers[0].weight(n) - plain.layers[0].weight(n)
        np.testing.assert_allclose(step, -0.1 * regs[n].grad(w), rtol=1e-9, atol=1e-14)
    con = model(recurrent_constraint=C.MaxNorm(0.05))
    con.fit(x, y, 1)
    assert np.linalg.norm(con.layers[0].weight("recurrent_kernel"), axis=0).max() <= 0.05 + 1e-12


def test_recurrent_keywords_train_as_keras(tmp_path: Path) -> None:
    keras = keras_or_skip()
    km = _keras_model(keras)
    km.save(tmp_path / "m.keras")
    loaded = rk.load_keras(tmp_path / "m.keras")
    ours = rk.Sequential([
        rk.LSTM(4, kernel_regularizer=R.L2(0.02), recurrent_regularizer=R.L1(0.01),
                bias_regularizer=R.L1L2(0.01, 0.03), kernel_constraint=C.MaxNorm(0.6),
                recurrent_constraint=C.UnitNorm(), bias_constraint=C.MaxNorm(0.3)),
        rk.Dense(2, kernel_regularizer=R.L1(0.02), bias_regularizer="l2", kernel_constraint=C.MaxNorm(0.7),
                 bias_constraint=C.NonNeg(), activity_regularizer=R.L2(0.05))], input_shape=(None, 5, 3))
    ours.set_weights(loaded.get_weights())
    rng = np.random.default_rng(7)
    x = rng.normal(size=(6, 5, 3)).astype(np.float32)
    y = rng.normal(size=(6, 2)).astype(np.float32)
    km.compile(keras.optimizers.SGD(0.1), "mse")
    theirs = [float(km.train_on_batch(x, y)) for _ in range(5)]
    ours.compile(rk.SGD(0.1), "mse")
    got = ours.fit(x, y, 5, shuffle=False).history["loss"]
    assert max(abs(a - b) for a, b in zip(got, theirs, strict=True)) <= 1e-5
    for a, b in zip(ours.get_weights(), [np.asarray(v) for v in km.get_weights()], strict=True):
        np.testing.assert_allclose(a.reshape(b.shape), b, atol=1e-5)


def test_saved_in_model_files_and_configs(tmp_path: Path) -> None:
    gru = rk.attach_regularization(rk.GRU(3, seed=1), recurrent_regularizer="l1",
                                   bias_constraint={"class_name": "NonNeg", "config": {}})
    emb = rk.Embedding(10, 4, embeddings_regularizer=R.L2(0.1), embeddings_constraint=C.UnitNorm(axis=1))
    m = rk.Sequential([emb, gru, rk.Dense(1, kernel_constraint="max_norm")], input_shape=(None, 6))
    m.compile("sgd", "mse")
    m.predict(np.zeros((1, 6)))
    path = tmp_path / "m.safetensors"
    rk.save_model(m, path)
    back = rk.load_model(path)
    assert back.layers[1].regularizers == {"recurrent_kernel": R.L1(0.01)}
    assert back.layers[1].constraints == {"bias": C.NonNeg()}
    assert back.layers[0].regularizers == {"embeddings": R.L2(0.1)}
    assert back.layers[0].constraints == {"embeddings": C.UnitNorm(axis=1)}
    assert back.layers[2].constraints == {"kernel": C.MaxNorm(2.0)}
    with pytest.raises(rk.InvalidParameterError, match="recurrent_kernel"):
        rk.Sequential([rk.attach_regularization(rk.Dense(2), recurrent_regularizer="l2")],
                      input_shape=(None, 3)).compile().fit(np.zeros((2, 3)), np.zeros((2, 2)))
    built = rk.Dense(2)
    built.build((None, 3))
    with pytest.raises(rk.InvalidParameterError, match="recurrent_kernel"):
        rk.attach_regularization(built, recurrent_constraint="non_neg")
    with pytest.raises(TypeError, match="kernel_regulariser"):
        rk.attach_regularization(rk.Dense(2), kernel_regulariser="l2")


def test_distributed_fit_refuses_activity_regularizers_instead_of_ignoring_them() -> None:
    # weight regularizers train over MPI (tests/test_distributed.py); activity ones are refused
    from rnnkit.models._training import Parallel

    m = rk.Sequential([rk.Dense(1, activity_regularizer="l2")], input_shape=(None, 2))
    m.compile("sgd", "mse")
    with pytest.raises(rk.InvalidParameterError, match="distributed= does not apply activity regularizers"):
        m.fit(np.zeros((4, 2)), np.zeros((4, 1)), 1, distributed=Parallel())
    with pytest.raises(TypeError, match=r"distributed= must be an rnnkit\.distributed\.MPI .* got object"):
        m.fit(np.zeros((4, 2)), np.zeros((4, 1)), 1, distributed=object())


def test_bidirectional_regularizers_and_constraints_equal_keras(tmp_path: Path) -> None:
    keras = keras_or_skip()
    L = keras.layers
    km = keras.Sequential([
        keras.Input((4, 3)),
        L.Bidirectional(L.GRU(3, kernel_regularizer=keras.regularizers.L2(0.05),
                              recurrent_constraint=keras.constraints.MaxNorm(0.4),
                              bias_regularizer=keras.regularizers.L1(0.02))),
        L.Dense(1),
    ])
    for v in km.weights:
        v.assign(np.random.default_rng(len(v.path)).uniform(-0.5, 0.5, v.shape).astype(np.float32))
    km.save(tmp_path / "b.keras")
    ours = rk.load_keras(tmp_path / "b.keras")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 4, 3)).astype(np.float32)
    y = rng.normal(size=(5, 1)).astype(np.float32)
    km.compile(keras.optimizers.SGD(0.1), "mse")
    theirs = [float(km.train_on_batch(x, y)) for _ in range(3)]
    ours.compile(rk.SGD(0.1), "mse")
    got = ours.fit(x, y, 3, shuffle=False).history["loss"]
    np.testing.assert_allclose(got, theirs, atol=1e-5)
    fresh = rk.load_keras(tmp_path / "b.keras")  # the starting weights: the penalty is in the loss
    assert got[0] - float(np.mean((fresh.predict(x) - y) ** 2)) > 1e-3
    for a, b in zip(ours.get_weights(), [np.asarray(v) for v in km.get_weights()], strict=True):
        np.testing.assert_allclose(a.reshape(b.shape), b, atol=1e-5)
