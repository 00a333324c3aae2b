"""float64 finite-difference gradient checks of SimpleRNN, LSTM and GRU (both forms).

Every cell x ``return_sequences`` x ``go_backwards`` goes through the shared layer harness
(:func:`harness.check_layer`): the input, ``kernel``, ``recurrent_kernel`` and ``bias``
gradients against central differences (eps 1e-6, relative error <= 1e-6), weights unchanged,
gradient store sums, threads, float32 vs float64, weight round trip. The biases are set to
random non-zero values so no gate sits at a symmetric point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import assert_gradcheck, check_layer

B, T, F, H = 2, 3, 2, 3

CELLS: dict[str, Callable[..., rk.RecurrentLayer]] = {
    "SimpleRNN": lambda **kw: rk.SimpleRNN(H, **kw),
    "LSTM": lambda **kw: rk.LSTM(H, **kw),
    "GRU": lambda **kw: rk.GRU(H, **kw),
    "GRU_reset_after": lambda **kw: rk.GRU(H, reset_after=True, **kw),
}


def perturbed(layer: rk.RecurrentLayer, seed: int) -> rk.RecurrentLayer:
    """Build for (None, T, F) and give the bias random values (kernels keep their init)."""
    layer.build(rk.Shape.with_free_batch((B, T, F)))
    b = layer.weight("bias")
    layer.set_weight("bias", np.asarray(b, np.float64)
                     + np.random.default_rng(seed).uniform(-0.5, 0.5, b.shape))
    return layer


def make_input(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((B, T, F))


@pytest.mark.parametrize("go_backwards", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("return_sequences", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("cell", list(CELLS))
def test_gradcheck_every_cell_and_flag(cell: str, return_sequences: bool, go_backwards: bool) -> None:
    def make(dtype: str) -> Any:
        return perturbed(CELLS[cell](return_sequences=return_sequences, go_backwards=go_backwards,
                                     seed=11, dtype=dtype), seed=5)

    report = check_layer(make, make_input, rtol=1e-6)
    assert set(report.grad_errors) == {"input", "kernel", "recurrent_kernel", "bias"}
    expected = (B, T, H) if return_sequences else (B, H)
    assert report.output_shape == expected


@pytest.mark.parametrize("activation", ["relu", "sigmoid", "linear", "softmax"])
@pytest.mark.parametrize("cell", list(CELLS))
def test_gradcheck_other_activations(cell: str, activation: str) -> None:
    layer = perturbed(CELLS[cell](activation=activation, return_sequences=True, seed=3,
                                  dtype="float64"), seed=8)
    x = make_input(np.random.default_rng(2))
    if activation == "relu":  # keep every pre-activation away from the kink at 0
        x = x + np.sign(x) * 0.05
    errs = assert_gradcheck(layer, x, rtol=1e-6)
    assert set(errs) == {"input", "kernel", "recurrent_kernel", "bias"}


def test_gradcheck_longer_sequence_wider_batch() -> None:
    """A longer walk (T=7) with a non-zero upstream gradient at every step."""
    layer = rk.LSTM(4, seed=1, dtype="float64", return_sequences=True, go_backwards=True)
    layer.build(rk.Shape.with_free_batch((3, 7, 2)))
    layer.set_weight("bias", np.random.default_rng(0).uniform(-1, 1, (1, 16)))
    x = np.random.default_rng(1).standard_normal((3, 7, 2))
    assert_gradcheck(layer, x, rtol=1e-6)


def test_gradcheck_detects_a_wrong_gradient() -> None:
    """The harness can fail: a layer whose backward scales the kernel gradient is caught."""

    class Broken(rk.SimpleRNN):
        def backward(self, grad: Any, ctx: rk.Ctx) -> np.ndarray:
            dx = super().backward(grad, ctx)
            ctx.grads[(self, "kernel")] *= 1.001
            return dx

    layer = perturbed(Broken(H, seed=1, dtype="float64"), seed=2)
    with pytest.raises(AssertionError, match="kernel"):
        assert_gradcheck(layer, make_input(np.random.default_rng(0)))
