"""Optimizers: two steps against hand-computed values, five steps against torch.optim, clipping,
learning-rate decay and schedules, validation, state keyed per parameter, config round trip."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import optimizers
from rnnkit._layer import Layer
from rnnkit._shape import Shape


class Param(Layer):
    """A stand-in layer holding one weight ``w`` (and optionally ``u``)."""

    def __init__(self, w: Any, u: Any = None, dtype: str = "float64") -> None:
        super().__init__(dtype=dtype, name="Param")
        self._init = {"w": np.asarray(w)} | ({} if u is None else {"u": np.asarray(u)})
        self.build(Shape((None, 1)))

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        for k, v in self._init.items():
            self._add_weight(k, v)


W0 = [1.0, -2.0]
G1 = np.array([0.5, -1.0])
G2 = np.array([0.1, 0.3])


def two_steps(opt: optimizers.Optimizer, w0: list[float] = W0) -> tuple[np.ndarray, np.ndarray]:
    p = Param(w0)
    opt.apply_gradients([(p, "w", G1)])
    w1 = np.array(p.weight("w"))
    opt.apply_gradients([(p, "w", G2)])
    return w1, np.array(p.weight("w"))


# -- two steps by hand ---------------------------------------------------------------------------
def test_sgd_plain_two_steps() -> None:
    w1, w2 = two_steps(rk.SGD(0.1))
    np.testing.assert_allclose(w1, [0.95, -1.9], rtol=0, atol=1e-15)      # w - 0.1 g1
    np.testing.assert_allclose(w2, [0.94, -1.93], rtol=0, atol=1e-15)     # w1 - 0.1 g2


def test_sgd_momentum_two_steps() -> None:
    # m1 = -0.1 g1 = [-0.05, 0.1];  w1 = w0 + m1
    # m2 = 0.9 m1 - 0.1 g2 = [-0.055, 0.06];  w2 = w1 + m2
    w1, w2 = two_steps(rk.SGD(0.1, momentum=0.9))
    np.testing.assert_allclose(w1, [0.95, -1.9], atol=1e-15)
    np.testing.assert_allclose(w2, [0.895, -1.84], atol=1e-15)


def test_sgd_nesterov_two_steps() -> None:
    # w1 = w0 + 0.9 m1 - 0.1 g1 = [1 - 0.045 - 0.05, -2 + 0.09 + 0.1]
    # w2 = w1 + 0.9 m2 - 0.1 g2 = [0.905 - 0.0495 - 0.01, -1.81 + 0.054 - 0.03]
    w1, w2 = two_steps(rk.SGD(0.1, momentum=0.9, nesterov=True))
    np.testing.assert_allclose(w1, [0.905, -1.81], atol=1e-15)
    np.testing.assert_allclose(w2, [0.8455, -1.786], atol=1e-15)


def _adam_by_hand(lr: float, b1: float, b2: float, eps: float, wd: float = 0.0,
                  decay: float = 0.0) -> list[list[float]]:
    """Scalar re-statement of the formulas, element by element."""
    out = []
    w, m, v = list(W0), [0.0, 0.0], [0.0, 0.0]
    for t, g in enumerate((G1, G2), start=1):
        lr_t = lr / (1 + decay * (t - 1))
        for k in range(2):
            w[k] = w[k] * (1 - lr_t * wd)
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            m_hat, v_hat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            w[k] = w[k] - lr_t * m_hat / (math.sqrt(v_hat) + eps)
        out.append(list(w))
    return out


def test_adam_two_steps_positional_order() -> None:
    # positional order: Adam(lr, beta1, beta2, epsilon, decay)
    w1, w2 = two_steps(rk.Adam(0.1, 0.9, 0.999, 1e-8, 0.0))
    e1, e2 = _adam_by_hand(0.1, 0.9, 0.999, 1e-8)
    # the first bias-corrected step is lr * g / (|g| + eps): almost exactly lr * sign(g)
    np.testing.assert_allclose(w1, [0.9, -1.9], atol=1e-8)
    np.testing.assert_allclose(w1, e1, rtol=0, atol=1e-14)
    np.testing.assert_allclose(w2, e2, rtol=0, atol=1e-14)


def test_adam_decay_is_time_based() -> None:
    w1, w2 = two_steps(rk.Adam(0.1, 0.9, 0.999, 1e-8, 0.5))
    e1, e2 = _adam_by_hand(0.1, 0.9, 0.999, 1e-8, decay=0.5)    # step 2 uses 0.1 / 1.5
    np.testing.assert_allclose(w1, e1, atol=1e-14)
    np.testing.assert_allclose(w2, e2, atol=1e-14)
    opt = rk.Adam(0.1, decay=0.5)
    opt.iterations = 4
    assert opt.current_learning_rate == pytest.approx(0.1 / 3.0)


def test_adamw_two_steps() -> None:
    w1, w2 = two_steps(rk.AdamW(0.1, 0.9, 0.999, 1e-8, weight_decay=0.1))
    e1, e2 = _adam_by_hand(0.1, 0.9, 0.999, 1e-8, wd=0.1)
    np.testing.assert_allclose(w1, e1, atol=1e-14)
    np.testing.assert_allclose(w2, e2, atol=1e-14)
    # decoupled: a zero gradient still shrinks the weight by lr * wd
    p = Param([2.0, -4.0])
    rk.AdamW(0.1, weight_decay=0.5).apply_gradients([(p, "w", np.zeros(2))])
    np.testing.assert_allclose(p.weight("w"), [2.0 * 0.95, -4.0 * 0.95], atol=1e-15)


@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_rmsprop_two_steps(centered: bool, momentum: float) -> None:
    lr, rho, eps = 0.01, 0.9, 1e-7
    w1, w2 = two_steps(rk.RMSprop(lr, rho, momentum, eps, centered))
    w, v, a, b = list(W0), [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
    exp = []
    for g in (G1, G2):
        for k in range(2):
            v[k] = rho * v[k] + (1 - rho) * g[k] ** 2
            a[k] = rho * a[k] + (1 - rho) * g[k]
            s = math.sqrt(v[k] - (a[k] ** 2 if centered else 0.0)) + eps
            b[k] = momentum * b[k] + g[k] / s
            w[k] -= lr * (b[k] if momentum else g[k] / s)
        exp.append(list(w))
    np.testing.assert_allclose(w1, exp[0], atol=1e-14)
    np.testing.assert_allclose(w2, exp[1], atol=1e-14)
    if not centered and momentum == 0.0:
        # first step: v = 0.1 g^2, so the step is lr * g / (sqrt(0.1) |g|) = lr / sqrt(0.1) * sign(g)
        np.testing.assert_allclose(w1, [1 - 0.01 / math.sqrt(0.1), -2 + 0.01 / math.sqrt(0.1)], atol=1e-6)


# -- torch.optim over five steps -----------------------------------------------------------------
TORCH_CASES = [
    ("SGD", {"lr": 0.1, "momentum": 0.9}, lambda: rk.SGD(0.1, momentum=0.9)),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}, lambda: rk.SGD(0.1, 0.9, True)),
    ("SGD", {"lr": 0.05}, lambda: rk.SGD(0.05)),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-8}, lambda: rk.Adam(0.01, 0.8, 0.99, 1e-8)),
    ("AdamW", {"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.05},
     lambda: rk.AdamW(0.01, 0.9, 0.999, 1e-8, weight_decay=0.05)),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "eps": 1e-7}, lambda: rk.RMSprop(0.01, 0.9, epsilon=1e-7)),
    ("RMSprop", {"lr": 0.01, "alpha": 0.8, "eps": 1e-7, "momentum": 0.5, "centered": True},
     lambda: rk.RMSprop(0.01, 0.8, 0.5, 1e-7, True)),
]


@pytest.mark.parametrize(("tname", "tkw", "make"), TORCH_CASES)
def test_against_torch_optim_five_steps(tname: str, tkw: dict[str, Any], make: Any) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((3, 4))
    u0 = rng.standard_normal(5)
    grads = [(rng.standard_normal((3, 4)), rng.standard_normal(5)) for _ in range(5)]
    tw = torch.nn.Parameter(torch.tensor(w0))
    tu = torch.nn.Parameter(torch.tensor(u0))
    topt = getattr(torch.optim, tname)([tw, tu], **tkw)
    p = Param(w0, u0)
    opt = make()
    for gw, gu in grads:
        tw.grad, tu.grad = torch.tensor(gw), torch.tensor(gu)
        topt.step()
        opt.apply_gradients([(p, "w", gw), (p, "u", gu)])
        np.testing.assert_allclose(p.weight("w"), tw.detach().numpy(), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(p.weight("u"), tu.detach().numpy(), rtol=1e-12, atol=1e-13)
    assert opt.iterations == 5
    assert not np.allclose(p.weight("w"), w0)


def test_float32_weights_stay_float32() -> None:
    p = Param(W0, dtype="float32")
    opt = rk.Adam(0.1)
    opt.apply_gradients([(p, "w", G1)])          # float64 gradient into a float32 weight
    assert p.weight("w").dtype == np.float32
    assert opt.get_state(p, "w")["m"].dtype == np.float32
    np.testing.assert_allclose(p.weight("w"), [0.9, -1.9], atol=1e-6)


# -- clipping (Keras semantics) ------------------------------------------------------------------
def test_clipnorm_is_per_tensor() -> None:
    p = Param([0.0, 0.0], [0.0, 0.0, 0.0])
    rk.SGD(1.0, clipnorm=1.0).apply_gradients([(p, "w", [3.0, 4.0]), (p, "u", [0.1, 0.2, 0.2])])
    np.testing.assert_allclose(p.weight("w"), [-0.6, -0.8], atol=1e-15)  # norm 5 -> 1
    np.testing.assert_allclose(p.weight("u"), [-0.1, -0.2, -0.2], atol=1e-15)  # norm 0.3 kept


def test_global_clipnorm_scales_every_tensor_by_the_global_norm() -> None:
    p = Param([0.0, 0.0], [0.0, 0.0, 0.0])
    # global norm sqrt(3^2 + 4^2 + 12^2) = 13
    rk.SGD(1.0, global_clipnorm=1.0).apply_gradients([(p, "w", [3.0, 4.0]), (p, "u", [0.0, 0.0, 12.0])])
    np.testing.assert_allclose(p.weight("w"), [-3 / 13, -4 / 13], atol=1e-15)
    np.testing.assert_allclose(p.weight("u"), [0.0, 0.0, -12 / 13], atol=1e-15)
    q = Param([0.0, 0.0])
    rk.SGD(1.0, global_clipnorm=10.0).apply_gradients([(q, "w", [3.0, 4.0])])  # 5 < 10: unchanged
    np.testing.assert_allclose(q.weight("w"), [-3.0, -4.0], atol=1e-15)


def test_clipvalue_is_elementwise() -> None:
    p = Param([0.0, 0.0, 0.0])
    rk.SGD(1.0, clipvalue=0.5).apply_gradients([(p, "w", [3.0, -4.0, 0.2])])
    np.testing.assert_allclose(p.weight("w"), [-0.5, 0.5, -0.2], atol=1e-15)


def test_clipping_applies_before_the_adam_moments() -> None:
    p = Param([0.0, 0.0])
    opt = rk.Adam(0.1, clipnorm=1.0)
    opt.apply_gradients([(p, "w", [30.0, 40.0])])
    np.testing.assert_allclose(opt.get_state(p, "w")["m"], [0.1 * 0.6, 0.1 * 0.8], atol=1e-15)


def test_only_one_clipping_option() -> None:
    with pytest.raises(rk.InvalidParameterError, match="clipnorm.*clipvalue"):
        rk.SGD(clipnorm=1.0, clipvalue=1.0)
    with pytest.raises(rk.InvalidParameterError, match="clipnorm"):
        rk.Adam(clipnorm=0.0)


# -- validation, state, learning rate, config ----------------------------------------------------
@pytest.mark.parametrize(("make", "arg"), [
    (lambda: rk.SGD(-0.1), "learning_rate"),
    (lambda: rk.SGD(0.1, momentum=1.5), "momentum"),
    (lambda: rk.SGD(0.1, nesterov=True), "nesterov"),
    (lambda: rk.Adam(-1.0), "learning_rate"),
    (lambda: rk.Adam(0.1, 1.0), "beta1"),
    (lambda: rk.Adam(0.1, 0.9, -0.1), "beta2"),
    (lambda: rk.Adam(0.1, 0.9, 0.999, -1e-8), "epsilon"),
    (lambda: rk.Adam(0.1, 0.9, 0.999, 1e-8, -1.0), "decay"),
    (lambda: rk.Adam(float("nan")), "learning_rate"),
    (lambda: rk.Adam(0.1, learning_rate=0.2), "learning_rate"),
    (lambda: rk.AdamW(0.1, weight_decay=-1.0), "weight_decay"),
    (lambda: rk.RMSprop(0.1, rho=1.0), "rho"),
    (lambda: rk.RMSprop(0.1, centered="yes"), "centered"),
    (lambda: rk.SGD(global_clipnorm=-1.0), "global_clipnorm"),
])
def test_bad_hyperparameters_name_the_argument(make: Any, arg: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match=arg):
        make()


def test_learning_rate_keyword_and_setter() -> None:
    assert rk.Adam(learning_rate=0.02).learning_rate == 0.02
    assert rk.Adam().learning_rate == 0.001
    p = Param([0.0, 0.0])
    opt = rk.SGD(0.1)
    opt.apply_gradients([(p, "w", [1.0, 1.0])])
    opt.learning_rate = 0.5                    # what a scheduler does between epochs
    opt.apply_gradients([(p, "w", [1.0, 1.0])])
    np.testing.assert_allclose(p.weight("w"), [-0.6, -0.6], atol=1e-15)
    with pytest.raises(rk.InvalidParameterError, match="learning_rate"):
        opt.learning_rate = -1.0


def test_state_is_keyed_by_layer_and_name() -> None:
    a, b = Param([0.0, 0.0]), Param([0.0, 0.0])
    opt = rk.SGD(1.0, momentum=0.5)
    opt.apply_gradients([(a, "w", [1.0, 1.0])])
    opt.apply_gradients([(a, "w", [1.0, 1.0]), (b, "w", [1.0, 1.0])])
    np.testing.assert_allclose(a.weight("w"), [-2.5, -2.5])     # -1, then -(0.5 + 1)
    np.testing.assert_allclose(b.weight("w"), [-1.0, -1.0])     # fresh velocity
    assert opt.get_state(a, "w")["t"] == 2 and opt.get_state(b, "w")["t"] == 1


def test_a_bad_pair_changes_nothing() -> None:
    p = Param([1.0, 2.0], [3.0, 4.0, 5.0])
    opt = rk.Adam(0.1)
    with pytest.raises(rk.InvalidInputError, match=r"\(3,\).*\(2,\)"):
        opt.apply_gradients([(p, "w", [1.0, 1.0]), (p, "u", [1.0, 1.0])])
    with pytest.raises(rk.InvalidInputError, match="nope"):
        opt.apply_gradients([(p, "nope", [1.0])])
    with pytest.raises(rk.InvalidInputError, match="twice"):
        opt.apply_gradients([(p, "w", [1.0, 1.0]), (p, "w", [1.0, 1.0])])
    np.testing.assert_array_equal(p.weight("w"), [1.0, 2.0])
    assert opt.iterations == 0 and opt.get_state(p, "w") == {}


def test_get_and_config_round_trip() -> None:
    assert isinstance(optimizers.get("adam"), rk.Adam)
    assert isinstance(optimizers.get("SGD"), rk.SGD)
    assert isinstance(optimizers.get("rmsprop"), rk.RMSprop)
    assert isinstance(optimizers.get("adamw"), rk.AdamW)
    inst = rk.SGD(0.3)
    assert optimizers.get(inst) is inst
    with pytest.raises(rk.InvalidParameterError, match="adagrad"):
        optimizers.get("adagrad")
    for opt in (rk.SGD(0.2, 0.5, True, clipvalue=2.0), rk.Adam(0.01, 0.8, 0.99, 1e-8, 0.1),
                rk.AdamW(0.01, weight_decay=0.3, global_clipnorm=1.0),
                rk.RMSprop(0.02, 0.7, 0.1, 1e-6, True)):
        again = optimizers.get(optimizers.serialize(opt))
        assert type(again) is type(opt) and again.get_config() == opt.get_config()
    # the rebuilt optimizer steps identically
    a, b = Param(W0), Param(W0)
    o1 = rk.RMSprop(0.02, 0.7, 0.1, 1e-6, True)
    o2 = type(o1).from_config(o1.get_config())
    for g in (G1, G2):
        o1.apply_gradients([(a, "w", g)])
        o2.apply_gradients([(b, "w", g)])
    np.testing.assert_array_equal(a.weight("w"), b.weight("w"))


def test_momentum_moves_a_weight_whose_gradient_is_zero() -> None:
    # a stated behaviour: "A momentum term or a weight decay also moves a row whose gradient is 0"
    p = Param([0.0, 0.0])
    opt = rk.SGD(0.1, momentum=0.9)
    opt.apply_gradients([(p, "w", [1.0, 0.0])])          # m = [-0.1, 0]
    opt.apply_gradients([(p, "w", [0.0, 0.0])])          # m = [-0.09, 0]: still moving
    np.testing.assert_allclose(p.weight("w"), [-0.19, 0.0], atol=1e-15)
