"""Core types: Shape, Ctx, the error hierarchy, activations, initializers, seeding."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._activations import ActivationFn, resolve_activation
from rnnkit._initializers import glorot_uniform, kaiming_uniform, orthogonal, uniform, zeros
from rnnkit._random import make_rng

# -- Shape -------------------------------------------------------------------------------------


def test_shape_free_batch_known_and_accepts() -> None:
    s = rk.Shape.with_free_batch((2, 5, 4))
    assert s.dims == (None, 5, 4) and s == (None, 5, 4) and s.rank == 3 and len(s) == 3
    assert s[0] is None and s[1:] == (5, 4) and list(s) == [None, 5, 4]
    assert str(s) == "(None, 5, 4)" and repr(s) == "Shape((None, 5, 4))"
    assert s.accepts((7, 5, 4)) and not s.accepts((7, 6, 4)) and not s.accepts((7, 5, 4, 1))
    k = rk.Shape.known([2, 5, 4])
    assert k.dims == (2, 5, 4) and k != s and k.accepts((2, 5, 4)) and not k.accepts((3, 5, 4))
    assert rk.Shape.of(s) is s and rk.Shape.of((np.int64(3), None)) == (3, None)
    assert hash(rk.Shape((1, None))) == hash(rk.Shape([1, None]))
    assert str(rk.Shape((4,))) == "(4,)"


@pytest.mark.parametrize("bad", [(-1, 2), (2.5,), (True, 3), ("3",)])
def test_shape_refuses_bad_axes(bad: tuple[Any, ...]) -> None:
    with pytest.raises(rk.InvalidInputError, match="Shape"):
        rk.Shape(bad)
    with pytest.raises(rk.InvalidInputError):
        rk.Shape.with_free_batch(())


# -- Ctx ---------------------------------------------------------------------------------------

class _Named(rk.Layer):
    pass


def test_ctx_caches_are_lifo_per_layer() -> None:
    a, b = _Named(name="A"), _Named(name="B")
    ctx = rk.Ctx.training()
    assert ctx.is_training and not rk.Ctx.inference().is_training
    ctx.save(a, "a1")
    ctx.save(b, "b1")
    ctx.save(a, "a2")
    assert ctx.load(a) == "a2" and ctx.load(b) == "b1" and ctx.load(a) == "a1"
    with pytest.raises(rk.ForwardPassNotRunError) as e:
        ctx.load(a)
    assert e.value.layer == "A" and "A" in str(e.value)


def test_ctx_inference_records_nothing() -> None:
    a = _Named(name="Dense")
    ctx = rk.Ctx.inference()
    ctx.save(a, "cache")
    with pytest.raises(rk.ForwardPassNotRunError, match="inference") as e:
        ctx.load(a)
    assert e.value.layer == "Dense"


def test_ctx_grad_store_sums_and_names_what_it_holds() -> None:
    a, b = _Named(name="A"), _Named(name="B")
    ctx = rk.Ctx.training()
    g = np.array([1.0, 2.0])
    ctx.add_grad(a, "kernel", g)
    assert not np.shares_memory(ctx.grad(a, "kernel"), g)  # copied: the Ctx owns what it sums into
    ctx.add_grad(a, "kernel", np.array([0.5, 0.5]))
    ctx.add_grad(b, "kernel", np.array([3.0]))
    np.testing.assert_array_equal(ctx.grad(a, "kernel"), [1.5, 2.5])
    np.testing.assert_array_equal(g, [1.0, 2.0])  # the caller's array is only read
    frozen = np.array([1.0])
    frozen.flags.writeable = False
    ctx.add_grad(b, "bias", frozen)
    ctx.add_grad(b, "bias", np.array([2.0]))
    np.testing.assert_array_equal(ctx.grad(b, "bias"), [3.0])
    np.testing.assert_array_equal(frozen, [1.0])  # a read-only gradient is never written
    assert set(ctx.grads) == {(a, "kernel"), (b, "kernel"), (b, "bias")}
    with pytest.raises(KeyError, match=r"A\.bias.*A\.kernel.*B\.bias.*B\.kernel"):
        ctx.grad(a, "bias")
    with pytest.raises(KeyError, match="none"):
        rk.Ctx.training().grad(a, "bias")
    ctx.clear()
    assert not ctx.grads and ctx.is_training


def test_ctx_rng_is_seedable() -> None:
    assert rk.Ctx.training(3).rng.random() == rk.Ctx.training(3).rng.random()


def test_shared_layer_receives_the_summed_gradient() -> None:
    """One layer called twice in a pass: two caches, popped LIFO, gradients summed."""
    layer = rk.SimpleRNN(2, seed=0, dtype="float64", input_dim=3)
    x1, x2 = np.random.default_rng(0).standard_normal((2, 2, 4, 3))
    g1, g2 = np.random.default_rng(1).standard_normal((2, 2, 2))
    ctx = rk.Ctx.training()
    layer.forward(x1, ctx)
    layer.forward(x2, ctx)
    dx2 = layer.backward(g2, ctx)  # the latest forward first
    dx1 = layer.backward(g1, ctx)
    sep = []
    for x, g in ((x1, g1), (x2, g2)):
        c = rk.Ctx.training()
        layer.forward(x, c)
        sep.append((layer.backward(g, c), c.grad(layer, "kernel")))
    np.testing.assert_allclose(dx1, sep[0][0], rtol=1e-14)
    np.testing.assert_allclose(dx2, sep[1][0], rtol=1e-14)
    np.testing.assert_allclose(ctx.grad(layer, "kernel"), sep[0][1] + sep[1][1], rtol=1e-14)


# -- errors ------------------------------------------------------------------------------------

def test_error_hierarchy_and_fields() -> None:
    for cls in (rk.InvalidParameterError, rk.InvalidInputError, rk.NotBuiltError,
                rk.ForwardPassNotRunError, rk.WeightShapeError, rk.NonFiniteError):
        assert issubclass(cls, rk.Error) and issubclass(cls, Exception)
    assert issubclass(rk.InvalidInputError, ValueError)
    e = rk.ForwardPassNotRunError("LSTM")
    assert e.layer == "LSTM" and "ForwardPassNotRun('LSTM')" in str(e)
    w = rk.WeightShapeError("bias", (1, 8), (8,))
    assert (w.name, w.expected, w.got) == ("bias", (1, 8), (8,))
    assert "'bias'" in str(w) and "(1, 8)" in str(w) and "(8,)" in str(w)
    nb = rk.NotBuiltError("GRU")
    assert nb.layer == "GRU" and "build" in str(nb)


# -- activations -------------------------------------------------------------------------------

SPELLINGS = {
    "tanh": [rk.Activation.TANH, rk.Tanh()], "sigmoid": [rk.Activation.SIGMOID, rk.Sigmoid()],
    "relu": [rk.Activation.RELU, rk.ReLU()], "linear": [rk.Activation.LINEAR, rk.Linear()],
    "softmax": [rk.Activation.SOFTMAX, rk.Softmax()],
}


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_activation_string_enum_and_wrapper_agree(name: str) -> None:
    fns = [resolve_activation(a) for a in [name, name.upper(), *SPELLINGS[name]]]
    assert all(f == fns[0] for f in fns) and fns[0].name == name
    a = np.random.default_rng(0).standard_normal((3, 4))
    ys = [rk.SimpleRNN(4, spelling, seed=1, input_dim=2).predict(a.reshape(3, 2, 2))
          for spelling in [name, *SPELLINGS[name]]]
    for y in ys[1:]:
        np.testing.assert_array_equal(y, ys[0])


def test_activation_values() -> None:
    a = np.array([[-2.0, -0.5, 0.0, 0.7, 3.0]])
    f = {k: resolve_activation(k) for k in SPELLINGS}
    np.testing.assert_allclose(f["tanh"](a), np.tanh(a), rtol=1e-15)
    np.testing.assert_allclose(f["sigmoid"](a), 1 / (1 + np.exp(-a)), rtol=1e-15)
    np.testing.assert_array_equal(f["relu"](a), [[0, 0, 0, 0.7, 3.0]])
    np.testing.assert_array_equal(f["linear"](a), a)
    e = np.exp(a)
    np.testing.assert_allclose(f["softmax"](a), e / e.sum(), rtol=1e-15)
    big = np.array([[-1000.0, 0.0, 1000.0]])  # no overflow
    assert np.all(np.isfinite(f["sigmoid"](big))) and np.all(np.isfinite(f["softmax"](big)))
    np.testing.assert_allclose(f["softmax"](big), [[0, 0, 1]], atol=1e-300)
    out = np.empty_like(a)
    assert f["tanh"](a, out=out) is out


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_activation_vjp_matches_finite_differences(name: str) -> None:
    fn = resolve_activation(name)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 5))
    if name == "relu":
        a += np.sign(a) * 0.1  # away from the kink
    g = rng.standard_normal(a.shape)
    ana = fn.vjp(fn(a), g)
    num = np.empty_like(a)
    eps = 1e-6
    for i in np.ndindex(a.shape):
        ap, am = a.copy(), a.copy()
        ap[i] += eps
        am[i] -= eps
        num[i] = (np.sum(fn(ap) * g) - np.sum(fn(am) * g)) / (2 * eps)
    assert np.max(np.abs(ana - num)) <= 1e-6 * max(np.max(np.abs(num)), 1e-3)


def test_activation_refusals() -> None:
    with pytest.raises(rk.InvalidParameterError, match="gelu"):
        resolve_activation("gelu")
    with pytest.raises(rk.InvalidParameterError):
        rk.Softmax(axis=1.5)  # type: ignore[arg-type]
    assert resolve_activation(None) == ActivationFn(rk.Activation.LINEAR)
    assert rk.Softmax().with_axis(1).axis == 1 and rk.Softmax().axis == -1


# -- initializers ------------------------------------------------------------------------------

def test_glorot_limit_and_spread() -> None:
    w = glorot_uniform(np.random.default_rng(0), (40, 50), 10, 30, np.float64)
    lim = math.sqrt(6 / 40)
    assert np.max(np.abs(w)) <= lim and np.max(np.abs(w)) > 0.99 * lim
    assert abs(np.mean(w)) < 0.05 * lim and abs(np.var(w) - lim ** 2 / 3) < 0.05 * lim ** 2 / 3


@pytest.mark.parametrize("n", [1, 3, 16])
def test_orthogonal(n: int) -> None:
    q = orthogonal(np.random.default_rng(n), n, np.float64)
    np.testing.assert_allclose(q.T @ q, np.eye(n), atol=1e-13)
    q2 = orthogonal(np.random.default_rng(n), n, np.float32, gain=2.0)
    assert q2.dtype == np.float32
    np.testing.assert_allclose(q2, 2 * q, atol=1e-6)


def test_kaiming_uniform_zeros() -> None:
    w = kaiming_uniform(np.random.default_rng(0), (2000,), 6, np.float64)
    lim = math.sqrt(2) * math.sqrt(3 / 6)
    assert np.max(np.abs(w)) <= lim and np.max(np.abs(w)) > 0.99 * lim
    u = uniform(np.random.default_rng(0), (2000,), -0.05, 0.05, np.float32)
    assert u.dtype == np.float32 and -0.05 <= u.min() < -0.049 and 0.049 < u.max() <= 0.05
    assert not np.any(zeros((2, 3), np.float64)) and zeros((2, 3), np.float32).dtype == np.float32


@pytest.mark.parametrize("cls,G", [(rk.SimpleRNN, 1), (rk.LSTM, 4), (rk.GRU, 3)])
def test_layer_init_glorot_per_gate_and_orthogonal_blocks(cls: Any, G: int) -> None:
    F, H = 6, 10
    layer = cls(H, seed=31, dtype="float64", input_dim=F)
    W, U = layer.weight("kernel"), layer.weight("recurrent_kernel")
    lim = math.sqrt(6 / (F + H))
    for k in range(G):
        blk = np.abs(W[:, k * H:(k + 1) * H])
        assert blk.max() <= lim and blk.max() > 0.9 * lim
        Uk = U[:, k * H:(k + 1) * H]
        np.testing.assert_allclose(Uk.T @ Uk, np.eye(H), atol=1e-12)


# -- seeding -----------------------------------------------------------------------------------

def test_same_seed_same_weights_and_dtypes_agree() -> None:
    for cls in (rk.SimpleRNN, rk.LSTM, rk.GRU):
        a = cls(4, seed=5, dtype="float64", input_dim=3)
        b = cls(4, seed=5, dtype="float64", input_dim=3)
        c = cls(4, seed=5, dtype="float32", input_dim=3)
        for e in a.weights():
            np.testing.assert_array_equal(e.value, b.weight(e.name))
            np.testing.assert_array_equal(c.weight(e.name), e.value.astype(np.float32))
    assert make_rng(4).random() == make_rng(4).random()


def test_global_seed_reproducible_and_entropy_otherwise() -> None:
    def draw() -> list[np.ndarray]:
        return [np.array(rk.LSTM(3, input_dim=2).weight("kernel")) for _ in range(2)]

    rk.set_global_seed(123)
    first = draw()
    rk.set_global_seed(123)
    second = draw()
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])  # each layer draws its own seed
    seeded = rk.LSTM(3, seed=1, input_dim=2).weight("kernel")
    rk.set_global_seed(7)
    np.testing.assert_array_equal(rk.LSTM(3, seed=1, input_dim=2).weight("kernel"), seeded)
    rk.set_global_seed(None)
    assert not np.array_equal(draw()[0], draw()[0])
    with pytest.raises(rk.InvalidParameterError):
        rk.set_global_seed(-3)
