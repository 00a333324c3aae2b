"""Gradient clipping's norm: one pass over each gradient in blocks (no float64 copy), checked
against exactly rounded float64 sums and against ``torch.nn.utils.clip_grad_norm_`` on the
gradients of a word language model's sizes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._layer import Layer
from rnnkit._shape import Shape
from rnnkit.optimizers import _norms


class Params(Layer):
    """A stand-in layer holding the given weights."""

    def __init__(self, weights: dict[str, np.ndarray], dtype: str = "float32") -> None:
        super().__init__(dtype=dtype, name="Params")
        self._init = weights
        self.build(Shape((None, 1)))

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        for k, v in self._init.items():
            self._add_weight(k, v)


def _exact(a: Any) -> float:
    return math.fsum(np.asarray(a, np.float64).ravel() ** 2)


@pytest.mark.parametrize("n", [0, 1, _norms.BLOCK - 1, _norms.BLOCK, 3 * _norms.BLOCK + 17, 200_003])
def test_sum_of_squares_float32_and_float64(n: int) -> None:
    rng = np.random.default_rng(n)
    g64 = rng.standard_normal(n) * 1e-3
    assert _norms.sum_of_squares(g64) == pytest.approx(_exact(g64), rel=1e-14, abs=0.0)
    g32 = g64.astype(np.float32)
    got = _norms.sum_of_squares(g32)
    assert isinstance(got, float)
    assert got == pytest.approx(_exact(g32), rel=2e-7, abs=0.0)


def test_sum_of_squares_of_other_layouts_and_types() -> None:
    rng = np.random.default_rng(1)
    g = rng.standard_normal((300, 70)).astype(np.float32)
    assert _norms.sum_of_squares(g.T) == pytest.approx(_exact(g), rel=2e-7)      # not contiguous
    assert _norms.sum_of_squares(g[::3, 1::2]) == pytest.approx(_exact(g[::3, 1::2]), rel=2e-7)
    ints = np.arange(-50, 50, dtype=np.int32)
    assert _norms.sum_of_squares(ints) == float(np.sum(ints.astype(np.int64) ** 2))
    assert _norms.sum_of_squares(np.float16([1.5, -2.0])) == 6.25


def test_global_clipnorm_equals_torch_clip_grad_norm_at_language_model_sizes() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    shapes = {"emb": (8606, 200), "k": (200, 800), "u": (200, 800), "b": (800,), "dec": (200, 8606),
              "db": (8606,)}
    w = {k: (0.1 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    g = {k: (0.01 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    layer = Params({k: v.copy() for k, v in w.items()})
    lr, clip = 20.0, 0.25
    rk.SGD(lr, global_clipnorm=clip).apply_gradients([(layer, k, v) for k, v in g.items()])
    params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in w.items()}
    for k, p in params.items():
        p.grad = torch.from_numpy(g[k].copy())
    total = torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
    exact = math.sqrt(sum(_exact(v) for v in g.values()))
    assert float(total) > clip                      # the clip acts
    # torch's float32 norm is within ~3e-5 of the exact one; rnnkit's within float32 rounding
    assert float(total) == pytest.approx(exact, rel=1e-4)
    with torch.no_grad():
        for k, p in params.items():
            step = lr * np.abs(g[k]).max() * clip / exact
            np.testing.assert_allclose(layer.weight(k), (p - lr * p.grad).numpy(), rtol=0, atol=1e-4 * step)
            want = w[k].astype(np.float64) - lr * g[k].astype(np.float64) * (clip / exact)
            np.testing.assert_allclose(layer.weight(k), want, rtol=0, atol=2e-6 * step + 1e-8)
    for k in g:                                     # the caller's gradients are left as they were
        assert g[k].dtype == np.float32


def test_clipnorm_per_tensor_at_large_sizes_against_exact_norms() -> None:
    rng = np.random.default_rng(3)
    g = (0.05 * rng.standard_normal((8606, 200))).astype(np.float32)
    small = np.float32([0.01, -0.02])
    layer = Params({"a": np.zeros_like(g), "s": np.zeros(2, np.float32)})
    rk.SGD(1.0, clipnorm=1.0).apply_gradients([(layer, "a", g), (layer, "s", small)])
    norm = math.sqrt(_exact(g))
    assert norm > 1.0
    np.testing.assert_allclose(layer.weight("a"), -(g.astype(np.float64) / norm), rtol=2e-6, atol=1e-9)
    np.testing.assert_array_equal(layer.weight("s"), -small)        # under the norm: unchanged


@pytest.mark.parametrize("gap", [0.3, 0.0, -5e-7])
@pytest.mark.parametrize("kind", ["global_clipnorm", "clipnorm"])
def test_clip_formula_torch_equals_clip_grad_norm_(gap: float, kind: str) -> None:
    """``clip_formula="torch"`` scales by PyTorch's ``min(1, c / (norm + 1e-6))``: checked where
    the norm is well over the clip (0.3 over), equal to it (Keras' formula leaves the gradients
    alone there, PyTorch's scales them by c / (c + 1e-6)) and just under it (5e-7 under: PyTorch
    still scales). float64 throughout, so the two differ only by rounding (rtol 1e-12: a few
    operations of 1.1e-16 each), while the formulas differ by 1e-6 / c = 2e-7 at the edge."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    g = {"a": rng.standard_normal((30, 7)), "b": rng.standard_normal(11)}
    norms = {k: math.sqrt(_exact(v)) for k, v in g.items()}
    total = math.sqrt(sum(n * n for n in norms.values()))
    clip = (total if kind == "global_clipnorm" else norms["a"]) - gap
    layer = Params({k: np.zeros_like(v) for k, v in g.items()}, dtype="float64")
    rk.SGD(1.0, clip_formula="torch", **{kind: clip}).apply_gradients([(layer, k, v) for k, v in g.items()])
    params = {k: torch.nn.Parameter(torch.zeros(v.shape, dtype=torch.float64)) for k, v in g.items()}
    for k, p in params.items():
        p.grad = torch.tensor(g[k])
    groups = [list(params.values())] if kind == "global_clipnorm" else [[p] for p in params.values()]
    for group in groups:
        torch.nn.utils.clip_grad_norm_(group, clip)
    for k, p in params.items():
        np.testing.assert_allclose(layer.weight(k), -p.grad.numpy(), rtol=1e-12, atol=0)
    keras_form = Params({k: np.zeros_like(v) for k, v in g.items()}, dtype="float64")
    rk.SGD(1.0, **{kind: clip}).apply_gradients([(keras_form, k, v) for k, v in g.items()])
    if gap < 0.1:     # at the edge the formulas differ: Keras' leaves the gradient as it is
        np.testing.assert_array_equal(keras_form.weight("a"), -g["a"])
        assert np.max(np.abs(layer.weight("a") + g["a"])) > 1e-8
    assert "clip_formula='torch'" in repr(rk.SGD(1.0, clip_formula="torch", **{kind: clip}))


def test_clip_formula_must_be_keras_or_torch() -> None:
    with pytest.raises(rk.InvalidParameterError, match=r"clip_formula.*\['keras', 'torch'\].*'tf'"):
        rk.SGD(1.0, clipnorm=1.0, clip_formula="tf")
