"""Each optimizer's ``formula="keras"`` against ``keras.optimizers`` and ``formula="torch"``
against ``torch.optim``: 25 steps from the same float64 weights, the gradient at each step a
function of the framework's own current weights (so a difference in the rule compounds), with a
learning rate that changes between steps (where Keras' and PyTorch's momentum slots part)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import optimizers
from rnnkit._errors import InvalidParameterError
from rnnkit._layer import Layer
from rnnkit._shape import Shape

STEPS = 25
_RNG = np.random.default_rng(11)
W0 = _RNG.standard_normal((3, 4))
U0 = _RNG.standard_normal(5)
TARGET_W = _RNG.standard_normal((3, 4))
TARGET_U = _RNG.standard_normal(5)
# per-element gradient scales from 1e-5 to 1: the small ones sit where epsilon matters
SCALE_W = 10.0 ** _RNG.uniform(-5, 0, (3, 4))
SCALE_U = 10.0 ** _RNG.uniform(-5, 0, 5)


def lr_at(step: int, base: float, vary: bool) -> float:
    """The rate of step ``step``, a float32 number (Keras keeps its learning rate in float32)."""
    return float(np.float32(base * (1.0 + 0.5 * np.sin(step)) if vary else base))


def grads_at(w: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gradient of sum(scale * (x - target)**2 / 2 + 0.1 * sin(x)), elementwise."""
    return (SCALE_W * (w - TARGET_W) + 0.1 * SCALE_W * np.cos(w),
            SCALE_U * (u - TARGET_U) + 0.1 * SCALE_U * np.cos(u))


class Param(Layer):
    """A stand-in layer holding the weights ``w`` and ``u``."""

    def __init__(self) -> None:
        super().__init__(dtype="float64", name="Param")
        self.build(Shape((None, 1)))

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        self._add_weight("w", np.array(W0))
        self._add_weight("u", np.array(U0))


def run_rnnkit(opt: optimizers.Optimizer, base: float, vary: bool) -> tuple[np.ndarray, np.ndarray]:
    p = Param()
    for k in range(STEPS):
        opt.learning_rate = lr_at(k, base, vary)
        gw, gu = grads_at(p.weight("w"), p.weight("u"))
        opt.apply_gradients([(p, "w", gw), (p, "u", gu)])
    return np.array(p.weight("w")), np.array(p.weight("u"))


def run_torch(name: str, kw: dict[str, Any], base: float, vary: bool) -> tuple[np.ndarray, np.ndarray]:
    torch = pytest.importorskip("torch")
    tw = torch.nn.Parameter(torch.tensor(W0))
    tu = torch.nn.Parameter(torch.tensor(U0))
    opt = getattr(torch.optim, name)([tw, tu], lr=base, **kw)
    for k in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = lr_at(k, base, vary)
        gw, gu = grads_at(tw.detach().numpy(), tu.detach().numpy())
        tw.grad, tu.grad = torch.tensor(gw), torch.tensor(gu)
        opt.step()
    return tw.detach().numpy().copy(), tu.detach().numpy().copy()


def run_keras(name: str, kw: dict[str, Any], base: float, vary: bool) -> tuple[np.ndarray, np.ndarray]:
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    vw = keras.Variable(W0, dtype="float64")
    vu = keras.Variable(U0, dtype="float64")
    opt = getattr(keras.optimizers, name)(learning_rate=base, **kw)
    opt.build([vw, vu])
    for k in range(STEPS):
        opt.learning_rate = lr_at(k, base, vary)
        gw, gu = grads_at(keras.ops.convert_to_numpy(vw), keras.ops.convert_to_numpy(vu))
        opt.apply_gradients([(keras.ops.convert_to_tensor(gw, dtype="float64"), vw),
                             (keras.ops.convert_to_tensor(gu, dtype="float64"), vu)])
    return keras.ops.convert_to_numpy(vw).copy(), keras.ops.convert_to_numpy(vu).copy()


# (name, rnnkit kwargs, torch kwargs, keras kwargs, base lr, vary lr)
CASES = [
    ("SGD", {"momentum": 0.9}, {"momentum": 0.9}, {"momentum": 0.9}, 0.05, True),
    ("SGD", {"momentum": 0.8, "nesterov": True}, {"momentum": 0.8, "nesterov": True},
     {"momentum": 0.8, "nesterov": True}, 0.05, True),
    ("Adam", {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-3}, {"betas": (0.8, 0.99), "eps": 1e-3},
     {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3}, 0.01, False),
    # Keras forms 1 - weight_decay * lr in float32: 2**-4 * 2**-7 keeps it exact
    ("AdamW", {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-4, "weight_decay": 0.0625},
     {"betas": (0.9, 0.999), "eps": 1e-4, "weight_decay": 0.0625},
     {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-4, "weight_decay": 0.0625}, 0.0078125, False),
    ("RMSprop", {"rho": 0.9, "epsilon": 1e-7}, {"alpha": 0.9, "eps": 1e-7},
     {"rho": 0.9, "epsilon": 1e-7}, 0.01, False),
    ("RMSprop", {"rho": 0.8, "epsilon": 1e-6, "momentum": 0.5, "centered": True},
     {"alpha": 0.8, "eps": 1e-6, "momentum": 0.5, "centered": True},
     {"rho": 0.8, "epsilon": 1e-6, "momentum": 0.5, "centered": True}, 0.01, True),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


@pytest.mark.parametrize(("name", "rk_kw", "torch_kw", "keras_kw", "base", "vary"), CASES, ids=IDS)
def test_torch_formula_matches_torch_optim(name: str, rk_kw: dict[str, Any], torch_kw: dict[str, Any],
                                          keras_kw: dict[str, Any], base: float, vary: bool) -> None:
    tw, tu = run_torch(name, torch_kw, base, vary)
    w, u = run_rnnkit(getattr(rk, name)(formula="torch", **rk_kw), base, vary)
    np.testing.assert_allclose(w, tw, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(u, tu, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("name", "rk_kw", "torch_kw", "keras_kw", "base", "vary"), CASES, ids=IDS)
def test_keras_formula_matches_keras_optimizers(name: str, rk_kw: dict[str, Any], torch_kw: dict[str, Any],
                                               keras_kw: dict[str, Any], base: float, vary: bool) -> None:
    kw_, ku = run_keras(name, keras_kw, base, vary)
    w, u = run_rnnkit(getattr(rk, name)(formula="keras", **rk_kw), base, vary)
    np.testing.assert_allclose(w, kw_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(u, ku, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("name", "rk_kw", "torch_kw", "keras_kw", "base", "vary"), CASES, ids=IDS)
def test_the_two_formulas_differ_in_these_runs(name: str, rk_kw: dict[str, Any], torch_kw: dict[str, Any],
                                              keras_kw: dict[str, Any], base: float, vary: bool) -> None:
    """The cases above tell the formulas apart: the parity tests would fail with the other one."""
    wk, _ = run_rnnkit(getattr(rk, name)(formula="keras", **rk_kw), base, vary)
    wt, _ = run_rnnkit(getattr(rk, name)(formula="torch", **rk_kw), base, vary)
    assert np.max(np.abs(wk - wt)) > 1e-6


def test_sgd_formulas_agree_at_a_constant_rate() -> None:
    wk, uk = run_rnnkit(rk.SGD(momentum=0.9, nesterov=True, formula="keras"), 0.05, False)
    wt, ut = run_rnnkit(rk.SGD(momentum=0.9, nesterov=True, formula="torch"), 0.05, False)
    np.testing.assert_allclose(wk, wt, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(uk, ut, rtol=1e-12, atol=1e-14)


def test_defaults_formula_config_round_trip_and_bad_formula() -> None:
    assert rk.SGD().formula == "keras"
    assert rk.Adam().formula == rk.AdamW().formula == rk.RMSprop().formula == "torch"
    for opt in (rk.SGD(0.1, 0.9, formula="torch"), rk.Adam(formula="keras"),
                rk.AdamW(formula="keras"), rk.RMSprop(formula="keras", centered=True)):
        again = optimizers.deserialize(optimizers.serialize(opt))
        assert type(again) is type(opt) and again.get_config() == opt.get_config()
        assert again.get_config()["formula"] == opt.formula
    # a config written before the argument existed rebuilds with the default
    assert optimizers.deserialize({"class_name": "RMSprop", "config": {"rho": 0.8}}).formula == "torch"
    for cls in (rk.SGD, rk.Adam, rk.AdamW, rk.RMSprop):
        with pytest.raises(InvalidParameterError, match=r"formula must be one of \['keras', 'torch'\].*'tf'"):
            cls(formula="tf")
