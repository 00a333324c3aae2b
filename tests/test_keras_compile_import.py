"""``load_keras`` of a compiled Keras model: the model comes back compiled with Keras' optimizer
formula and hyperparameters, and ``fit`` then trains as Keras' ``fit`` does, step for step
(20 mini-batch steps, no shuffling; to Keras' own float32 matmul noise, with the PyTorch formula
at least 100 times further away where the formulas differ); settings rnnkit does not reproduce leave the model
uncompiled with a warning naming them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
pytest.importorskip("h5py")

STEPS, BATCH = 20, 8


@pytest.fixture(autouse=True)
def _float64_keras() -> Any:
    """Keras computes its losses in floatx: float64 here, for a float64 comparison. Keras keeps
    the global dtype policy it derives from floatx once, so that is put back too (else later
    files' float32 Inputs meet float64 layers and Keras inserts Cast layers)."""
    before, policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    yield
    keras.config.set_floatx(before)
    keras.config.set_dtype_policy(policy)


def _model(opt: Any, loss: Any = "mse") -> Any:
    """Dense layers only. Keras' torch backend computes a float64 matmul in float32, so the two
    models agree to ~1e-7 from the first prediction on, not to rounding."""
    m = keras.Sequential([keras.Input((6,), dtype="float64"),
                          keras.layers.Dense(8, activation="tanh", dtype="float64"),
                          keras.layers.Dense(2, dtype="float64")])
    m.compile(optimizer=opt, loss=loss)
    return m


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((STEPS * BATCH, 6))
    return x, np.tanh(x[:, :2] - x[:, 2:4]) + 0.1 * rng.standard_normal((STEPS * BATCH, 2))


OPTIMIZERS = [
    ("RMSprop", lambda: keras.optimizers.RMSprop(0.01, momentum=0.2), rk.RMSprop,
     {"learning_rate": np.float32(0.01), "momentum": 0.2, "rho": 0.9, "epsilon": 1e-7}),
    ("RMSprop-centered", lambda: keras.optimizers.RMSprop(0.005, rho=0.8, centered=True, epsilon=1e-6),
     rk.RMSprop, {"rho": 0.8, "centered": True, "epsilon": 1e-6}),
    ("Adam", lambda: keras.optimizers.Adam(0.01, beta_1=0.8, epsilon=1e-5), rk.Adam,
     {"beta1": 0.8, "beta2": 0.999, "epsilon": 1e-5}),
    ("AdamW", lambda: keras.optimizers.AdamW(0.01), rk.AdamW, {"weight_decay": 0.004}),
    ("SGD", lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True), rk.SGD,
     {"momentum": 0.9, "nesterov": True}),
]


@pytest.mark.parametrize(("label", "make", "cls", "expect"), OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_a_compiled_keras_model_trains_as_keras(tmp_path: Path, label: str, make: Any, cls: Any,
                                                expect: dict[str, Any]) -> None:
    km = _model(make())
    path = tmp_path / "m.keras"
    km.save(path)
    model = rk.load_keras(path)
    opt = model.optimizer
    assert type(opt) is cls and opt.formula == "keras"
    for k, v in expect.items():
        assert getattr(opt, k) == pytest.approx(float(v), rel=1e-7), k
    other = rk.load_keras(path)
    other.compile(cls(**{**opt.get_config(), "formula": "torch"}), "mse")
    x, y = _data()
    km.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False)
    other.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False)
    assert opt.iterations == STEPS
    keras_w = np.concatenate([w.reshape(-1) for w in km.get_weights()])
    err = np.max(np.abs(np.concatenate([np.ravel(w) for w in model.get_weights()]) - keras_w))
    assert err < 5e-6
    if label != "SGD":   # at a constant rate both SGD forms give the same weights
        err_torch = np.max(np.abs(np.concatenate([np.ravel(w) for w in other.get_weights()]) - keras_w))
        assert err_torch > 100 * err


def test_the_loss_and_metrics_come_along(tmp_path: Path) -> None:
    km = _model("rmsprop", keras.losses.BinaryCrossentropy(from_logits=True))
    km.compile(optimizer="rmsprop", loss=keras.losses.BinaryCrossentropy(from_logits=True),
               metrics=["mae"])
    km.save(tmp_path / "m.keras")
    model = rk.load_keras(tmp_path / "m.keras")
    assert isinstance(model.loss, rk.losses.BinaryCrossentropy) and model.loss.from_logits
    assert [type(m).__name__ for m in model.metrics] == ["MeanAbsoluteError"]
    assert model.optimizer.formula == "keras"


@pytest.mark.parametrize(("opt", "loss", "named"), [
    (lambda: keras.optimizers.Adam(amsgrad=True), "mse", "amsgrad=True"),
    (lambda: keras.optimizers.Adagrad(), "mse", "optimizer 'Adagrad'"),
    (lambda: keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)), "mse",
     "learning-rate schedule"),
    (lambda: "adam", lambda: keras.losses.MeanSquaredError(reduction="sum"), "reduction='sum'"),
])
def test_a_setting_not_reproduced_leaves_the_model_uncompiled(tmp_path: Path, opt: Any, loss: Any,
                                                              named: str) -> None:
    km = _model(opt(), loss if isinstance(loss, str) else loss())
    km.save(tmp_path / "m.keras")
    with pytest.warns(UserWarning, match=f"left uncompiled.*{named}"):
        model = rk.load_keras(tmp_path / "m.keras")
    assert model.optimizer is None


def test_an_uncompiled_keras_model_stays_uncompiled(tmp_path: Path) -> None:
    km = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
    km.save(tmp_path / "m.keras")
    assert rk.load_keras(tmp_path / "m.keras").optimizer is None
