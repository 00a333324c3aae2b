"""``rnnkit.ops``: every op's gradient on the tape against float64 central finite differences and
against PyTorch autograd, on random inputs with broadcasting and several axes.

The scalar checked is ``L = sum(op(inputs) * R)`` with a fixed random ``R`` (so every output
element weighs differently). Tolerances, from the arithmetic:

- finite differences, step h = 1e-6 in float64: truncation h^2 |f'''| / 6 ~ 1e-12 and rounding
  ~ eps |L| / h ~ 1e-10 * |L|; with |L| <= ~50 here, 1e-7 absolute + 1e-6 relative holds;
- PyTorch autograd in float64: the same formulas up to summation order, a few ulp of the
  largest term: 1e-10 absolute + 1e-10 relative.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import ops

RNG = np.random.default_rng(7)


def pos(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, shape)


def sym(*shape: int) -> np.ndarray:
    """Values away from 0 (|v| in [0.2, 1.5]), so kinks (abs, relu, clip) are not straddled."""
    return RNG.uniform(0.2, 1.5, shape) * RNG.choice([-1.0, 1.0], shape)


def torch() -> Any:
    return pytest.importorskip("torch")


def torch_fn(name: str) -> Callable[..., Any]:
    def f(*a: Any) -> Any:
        obj = torch()
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj(*a)
    return f


def torch_dot(a: Any, b: Any) -> Any:
    return torch().tensordot(a, b, dims=([a.dim() - 1], [b.dim() - 2]))


IDX = np.array([[2, 0], [1, 2], [2, 2]])

# name, rnnkit function, torch function (on tensors), inputs
CASES: list[tuple[str, Callable[..., Any], Callable[..., Any], list[np.ndarray]]] = [
    ("add", lambda a, b: ops.add(a, b), lambda a, b: a + b, [sym(3, 1, 4), sym(2, 4)]),
    ("subtract", lambda a, b: ops.subtract(a, b), lambda a, b: a - b, [sym(2, 4), sym(3, 1, 1)]),
    ("multiply", lambda a, b: ops.multiply(a, b), lambda a, b: a * b, [sym(4), sym(3, 4)]),
    ("divide", lambda a, b: ops.divide(a, b), lambda a, b: a / b, [sym(3, 4), pos(3, 1)]),
    ("negative", ops.negative, lambda a: -a, [sym(2, 3)]),
    ("matmul", ops.matmul, lambda a, b: a @ b, [sym(2, 1, 3, 4), sym(5, 4, 2)]),
    ("matmul_vec", ops.matmul, lambda a, b: a @ b, [sym(4), sym(3, 4, 2)]),
    ("matmul_mat_vec", ops.matmul, lambda a, b: a @ b, [sym(2, 3, 4), sym(4)]),
    ("dot", ops.dot, lambda a, b: torch_dot(a, b), [sym(2, 3, 4), sym(5, 4, 2)]),
    ("dot_vec", ops.dot, lambda a, b: a @ b, [sym(3, 4), sym(4)]),
    ("einsum", lambda a, b: ops.einsum("btf,fu->btu", a, b),
     lambda a, b: torch().einsum("btf,fu->btu", a, b), [sym(2, 3, 4), sym(4, 5)]),
    ("einsum_implicit_sum", lambda a, b: ops.einsum("ij,jk", a, b),
     lambda a, b: torch().einsum("ij,jk", a, b), [sym(2, 3), sym(3, 4)]),
    ("einsum_ellipsis_reduce", lambda a, b: ops.einsum("...i,ij->...", a, b),
     lambda a, b: torch().einsum("...i,ij->...", a, b), [sym(2, 3, 4), sym(4, 5)]),
    ("tensordot", lambda a, b: ops.tensordot(a, b, axes=([0, 2], [2, 0])),
     lambda a, b: torch().tensordot(a, b, dims=([0, 2], [2, 0])), [sym(3, 4, 5), sym(5, 2, 3)]),
    ("tensordot_int", lambda a, b: ops.tensordot(a, b, axes=1),
     lambda a, b: torch().tensordot(a, b, dims=1), [sym(3, 4), sym(4, 2)]),
    ("transpose", lambda a: ops.transpose(a, (2, 0, 1)), lambda a: a.permute(2, 0, 1), [sym(2, 3, 4)]),
    ("transpose_none", ops.transpose, lambda a: a.permute(2, 1, 0), [sym(2, 3, 4)]),
    ("reshape", lambda a: ops.reshape(a, (4, -1)), lambda a: a.reshape(4, -1), [sym(2, 3, 4)]),
    ("expand_dims", lambda a: ops.expand_dims(a, 1), lambda a: a.unsqueeze(1), [sym(2, 3)]),
    ("squeeze", lambda a: ops.squeeze(a, 1), lambda a: a.squeeze(1), [sym(2, 1, 3)]),
    ("concatenate", lambda a, b: ops.concatenate([a, b, a], axis=1),
     lambda a, b: torch().cat([a, b, a], dim=1), [sym(2, 3), sym(2, 1)]),
    ("stack", lambda a, b: ops.stack([a, b], axis=-1), lambda a, b: torch().stack([a, b], dim=-1),
     [sym(2, 3), sym(2, 3)]),
    ("split", lambda a: ops.add(ops.multiply(ops.split(a, 3, axis=1)[0], 2.0), ops.split(a, 3, axis=1)[2]),
     lambda a: torch().tensor_split(a, 3, dim=1)[0] * 2 + torch().tensor_split(a, 3, dim=1)[2], [sym(2, 6)]),
    ("split_indices", lambda a: ops.split(a, [1, 3], axis=0)[1],
     lambda a: torch().tensor_split(a, [1, 3], dim=0)[1], [sym(4, 2)]),
    ("take", lambda a: ops.take(a, IDX, axis=1), lambda a: a[:, torch().as_tensor(IDX)], [sym(2, 3, 2)]),
    ("take_flat", lambda a: ops.take(a, IDX), lambda a: a.reshape(-1)[torch().as_tensor(IDX)], [sym(2, 2)]),
    ("take_along_axis", lambda a: ops.take_along_axis(a, IDX, axis=1),
     lambda a: torch().take_along_dim(a, torch().as_tensor(IDX), dim=1), [sym(3, 4)]),
    ("where", lambda a, b: ops.where(np.array([[True], [False]]), a, b),
     lambda a, b: torch().where(torch().tensor([[True], [False]]), a, b), [sym(2, 3), sym(3)]),
    ("maximum", ops.maximum, torch_fn("maximum"), [sym(2, 3), sym(3)]),
    ("minimum", ops.minimum, torch_fn("minimum"), [sym(3, 1), sym(3, 4)]),
    ("clip", lambda a: ops.clip(a, -0.7, 0.9), lambda a: a.clamp(-0.7, 0.9), [sym(3, 4)]),
    ("abs", ops.abs, lambda a: a.abs(), [sym(3, 4)]),
    ("exp", ops.exp, lambda a: a.exp(), [sym(3, 4)]),
    ("log", ops.log, lambda a: a.log(), [pos(3, 4)]),
    ("sqrt", ops.sqrt, lambda a: a.sqrt(), [pos(3, 4)]),
    ("square", ops.square, lambda a: a * a, [sym(3, 4)]),
    ("power", ops.power, lambda a, b: a ** b, [pos(3, 4), sym(4)]),
    ("tanh", ops.tanh, lambda a: a.tanh(), [sym(3, 4)]),
    ("sigmoid", ops.sigmoid, lambda a: a.sigmoid(), [sym(3, 4) * 4]),
    ("relu", ops.relu, lambda a: a.relu(), [sym(3, 4)]),
    ("softplus", ops.softplus, torch_fn("nn.functional.softplus"), [sym(3, 4) * 4]),
    ("softmax", lambda a: ops.softmax(a, axis=1), lambda a: a.softmax(1), [sym(2, 3, 4)]),
    ("softmax_axes", lambda a: ops.softmax(a, axis=(0, 2)),
     lambda a: (a - a.logsumexp((0, 2), keepdim=True)).exp(), [sym(2, 3, 4)]),
    ("log_softmax", ops.log_softmax, lambda a: a.log_softmax(-1), [sym(2, 3, 4)]),
    ("logsumexp", lambda a: ops.logsumexp(a, axis=1), lambda a: a.logsumexp(1), [sym(2, 3, 4)]),
    ("logsumexp_all", ops.logsumexp, lambda a: a.logsumexp((0, 1)), [sym(2, 3)]),
    ("sum", lambda a: ops.sum(a, axis=(0, 2), keepdims=True), lambda a: a.sum((0, 2), keepdim=True),
     [sym(2, 3, 4)]),
    ("mean", lambda a: ops.mean(a, axis=-1), lambda a: a.mean(-1), [sym(2, 3, 4)]),
    ("max", lambda a: ops.max(a, axis=1), lambda a: a.amax(1), [sym(2, 3, 4)]),
    ("min", lambda a: ops.min(a, keepdims=True), lambda a: a.amin((0, 1), keepdim=True), [sym(3, 4)]),
    ("cumsum", lambda a: ops.cumsum(a, axis=1), lambda a: a.cumsum(1), [sym(2, 3, 4)]),
    ("cumsum_flat", ops.cumsum, lambda a: a.reshape(-1).cumsum(0), [sym(2, 3)]),
    ("norm", lambda a: ops.norm(a, axis=-1), lambda a: a.norm(dim=-1), [sym(2, 3, 4)]),
    ("norm_fro", ops.norm, lambda a: a.norm(), [sym(3, 4)]),
    ("norm_1", lambda a: ops.norm(a, ord=1, axis=0), lambda a: a.abs().sum(0), [sym(3, 4)]),
    ("cast", lambda a: ops.cast(a, "float32"), lambda a: a.float(), [sym(3, 4)]),
]


def loss_weights(out: np.ndarray) -> np.ndarray:
    return np.random.default_rng(out.size).uniform(-1, 1, np.shape(out))


def tape_grads(fn: Callable[..., Any], xs: list[np.ndarray]) -> list[np.ndarray]:
    xs = [np.array(x) for x in xs]
    with rk.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        out = fn(*xs)
        loss = ops.sum(ops.multiply(ops.cast(out, "float64"), loss_weights(out)))
    return tape.gradient(loss, xs)


def fd_grads(fn: Callable[..., Any], xs: list[np.ndarray], h: float = 1e-6) -> list[np.ndarray]:
    def f(*a: np.ndarray) -> float:
        out = np.asarray(fn(*a), dtype=np.float64)
        return float(np.sum(out * loss_weights(out)))
    res = []
    for i, x in enumerate(xs):
        g = np.zeros_like(x)
        for j in np.ndindex(x.shape):
            up = [np.array(v) for v in xs]
            dn = [np.array(v) for v in xs]
            up[i][j] += h
            dn[i][j] -= h
            g[j] = (f(*up) - f(*dn)) / (2 * h)
        res.append(g)
    return res


@pytest.mark.parametrize("name,fn,tfn,xs", CASES, ids=[c[0] for c in CASES])
def test_vjp_equals_finite_differences(name: str, fn: Any, tfn: Any, xs: list[np.ndarray]) -> None:
    got = tape_grads(fn, xs)
    if name == "cast":   # float32 values: the difference quotient sees float32 rounding
        np.testing.assert_array_equal(got[0], loss_weights(np.zeros((3, 4))).astype(np.float32))
        return
    for g, want in zip(got, fd_grads(fn, xs), strict=True):
        assert g is not None and g.shape == want.shape and g.dtype == np.float64
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name,fn,tfn,xs", CASES, ids=[c[0] for c in CASES])
def test_vjp_equals_torch_autograd(name: str, fn: Any, tfn: Any, xs: list[np.ndarray]) -> None:
    th = torch()
    got = tape_grads(fn, xs)
    ts = [th.tensor(x, dtype=th.float64, requires_grad=True) for x in xs]
    out = tfn(*ts)
    np.testing.assert_allclose(fn(*xs), out.detach().numpy(), rtol=1e-6 if name == "cast" else 1e-12,
                               atol=1e-12)
    (out.double() * th.as_tensor(loss_weights(out.detach().numpy()))).sum().backward()
    for g, t in zip(got, ts, strict=True):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-10, atol=1e-10)
