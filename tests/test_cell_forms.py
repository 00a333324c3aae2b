"""A cell's two forms: the step form and the parallel (whole-sequence) form.

A minGRU cell (h_t = (1 - z_t) h_{t-1} + z_t g(k_t), z_t = sigmoid(x_t W_z + b_z), k_t = x_t W_h + b_h,
g(v) = v + 0.5 for v >= 0 else sigmoid(v)) written with both forms. The walker runs the parallel form
for a pass of two steps or more without a mask or recurrent dropout, the step form otherwise (counted
by the calls each form receives), and both give the same outputs, final states, dL/dx and weight
gradients; float64 gradients of the parallel form against central differences. Tolerances: the two
forms evaluate the same products and sums in a different order (a scan of T = 6 steps: a few roundings
per step), so 1e-12 relative in float64; finite differences with eps 1e-6 in float64 agree to about
1e-7 relative (truncation ~eps^2, rounding ~1e-16/eps), checked at 1e-6.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import assert_gradcheck
from rnnkit.recurrent._walker import has_sequence_form, sequence_form
from rnnkit.testing import check_cell

Arrays = tuple[np.ndarray, ...]
B, T, F, H = 3, 6, 4, 5


def _sig(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _g(v: np.ndarray) -> np.ndarray:
    return np.where(v >= 0, v + 0.5, _sig(np.minimum(v, 0.0)))


def _dg(v: np.ndarray) -> np.ndarray:
    s = _sig(np.minimum(v, 0.0))
    return np.where(v >= 0, 1.0, s * (1.0 - s))


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return rng.uniform(-0.5, 0.5, shape).astype(dtype)


class MinGRUTestCell(rk.Cell):
    """minGRU with both forms; ``calls`` counts which form ran."""

    name = "MinGRUTest"
    input_kernel = "kernel"
    bias = "bias"
    calls: dict[str, int] = {"step": 0, "sequence": 0}

    def __init__(self, units: int) -> None:
        super().__init__(units, "linear")

    def get_config(self) -> dict[str, Any]:
        return {"units": self.units}

    def params(self, input_dim: int) -> list[rk.Param]:
        return [rk.Param("kernel", (input_dim, 2 * self.units), _uniform),
                rk.Param("bias", (1, 2 * self.units), _uniform)]

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        MinGRUTestCell.calls["step"] += 1
        H = self.units
        z, k = _sig(inp[:, :H]), inp[:, H:]
        if park is not None:
            park["z"], park["k"] = z, k
        return ((1.0 - z) * prev[0] + z * _g(k),)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> rk.StepBack:
        z, k, dh = park["z"], park["k"], d[0]
        dz = dh * (_g(k) - prev[0]) * z * (1.0 - z)
        dk = dh * z * _dg(k)
        return rk.StepBack(d_prev=(dh * (1.0 - z),), d_inp=np.concatenate([dz, dk], axis=1))

    def sequence_forward(self, w: Mapping[str, np.ndarray], inp: np.ndarray, init: Arrays,
                         park: dict[str, np.ndarray] | None) -> Arrays:
        MinGRUTestCell.calls["sequence"] += 1
        H = self.units
        z, k = _sig(inp[..., :H]), inp[..., H:]
        a, b = 1.0 - z, z * _g(k)               # h_t = a_t h_{t-1} + b_t, a scan over time
        h = np.empty_like(b)
        prev = init[0]
        for t in range(inp.shape[0]):
            prev = h[t] = a[t] * prev + b[t]
        if park is not None:
            park["z"], park["k"] = z, k
        return (h,)

    def sequence_backward(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None,
                          init: Arrays, states: Arrays, park: Mapping[str, np.ndarray]) -> rk.SequenceBack:
        z, k, h = park["z"], park["k"], states[0]
        a = 1.0 - z
        dh = np.empty_like(h)                   # the reverse scan: dh_t = d_t + a_{t+1} dh_{t+1}
        carry = np.zeros_like(init[0])
        for t in range(h.shape[0] - 1, -1, -1):
            carry = dh[t] = d[0][t] + carry
            carry = carry * a[t]
        hprev = np.concatenate([init[0][None], h[:-1]])
        dz = dh * (_g(k) - hprev) * z * (1.0 - z)
        dk = dh * z * _dg(k)
        return rk.SequenceBack(d_init=(carry,), d_inp=np.concatenate([dz, dk], axis=-1))


def _layer(rs: bool = True, **kw: Any) -> rk.RecurrentLayer:
    layer = rk.RecurrentLayer(MinGRUTestCell(H), return_sequences=rs, seed=3, dtype="float64", **kw)
    layer.build(rk.Shape((None, None, F)))
    return layer


def _pass(layer: rk.RecurrentLayer, x: np.ndarray, G: np.ndarray, lengths: np.ndarray | None = None
          ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    MinGRUTestCell.calls.update(step=0, sequence=0)
    ctx = rk.Ctx.training()
    if lengths is not None:
        ctx.set_mask(lengths=lengths)
    y = layer.forward(x, ctx)
    out = {"y": y, "dx": layer.backward(G, ctx)}
    out.update({f"d_{n}": ctx.grad(layer, n) for n in layer.weight_names})
    ictx = rk.Ctx.inference()
    if lengths is not None:
        ictx.set_mask(lengths=lengths)
    out["y_infer"] = layer.forward(x, ictx)
    return out, dict(MinGRUTestCell.calls)


def test_the_walker_chooses_the_form() -> None:
    cell = MinGRUTestCell(H)
    assert has_sequence_form(cell) and not has_sequence_form(rk.LSTMCell(H))
    assert sequence_form(cell, T, None, None)
    assert not sequence_form(cell, 1, None, None)                       # one step: streaming
    assert not sequence_form(cell, T, np.ones((T, B), bool), None)      # a mask
    assert not sequence_form(cell, T, None, np.ones((B, H)))            # recurrent dropout

    class Overridden(MinGRUTestCell):   # a different step below the parallel form: not its form
        def step(self, w: Any, inp: Any, prev: Any, park: Any) -> Arrays:
            return super().step(w, inp, prev, park)

    assert not has_sequence_form(Overridden(H))


@pytest.mark.parametrize("rs", [True, False])
def test_parallel_form_equals_step_form(rs: bool) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, F))
    layer = _layer(rs)
    G = rng.standard_normal((B, T, H) if rs else (B, H))
    par, calls = _pass(layer, x, G)
    assert calls == {"step": 0, "sequence": 2}       # training forward + inference forward
    # every row real: the same numbers by the step form (a mask forces it)
    step, calls = _pass(layer, x, G, lengths=np.full(B, T))
    assert calls["sequence"] == 0 and calls["step"] == 2 * T
    for name in par:
        np.testing.assert_allclose(par[name], step[name], rtol=1e-12, atol=1e-14, err_msg=name)


def test_stateful_and_single_steps_use_the_step_form_and_agree() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, T, F))
    whole = _layer().forward(x, rk.Ctx.inference())
    streamed = _layer(stateful=True)
    MinGRUTestCell.calls.update(step=0, sequence=0)
    got = np.concatenate([streamed.forward(x[:, t:t + 1], rk.Ctx.inference()) for t in range(T)], axis=1)
    assert MinGRUTestCell.calls == {"step": T, "sequence": 0}
    np.testing.assert_allclose(got, whole, rtol=1e-12, atol=1e-14)
    # a stateful continuation of several steps: the parallel form from the carried state
    cont = _layer(stateful=True)
    first = cont.forward(x[:, :3], rk.Ctx.inference())
    second = cont.forward(x[:, 3:], rk.Ctx.inference())
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), whole, rtol=1e-12, atol=1e-14)


def test_parallel_form_gradients_against_finite_differences() -> None:
    x = np.random.default_rng(2).standard_normal((B, T, F))
    assert_gradcheck(_layer(), x, rtol=1e-6)


# -- rnnkit.testing.check_cell: one call checks every form of a cell ------------------------------
def test_check_cell_passes_a_cell_with_both_forms() -> None:
    errs = check_cell(MinGRUTestCell(4))
    assert {"gradcheck:dx", "gradcheck:d_kernel", "gradcheck:d_bias", "gradcheck:d_init0",
            "parallel form:y", "parallel form:d_kernel", "parallel form:d_init0"} <= set(errs)
    assert not any(k.startswith("compiled") for k in errs)   # (no compiled step declared)


@pytest.mark.parametrize("cell", [rk.LSTMCell(3), rk.GRUCell(3), rk.SimpleRNNCell(3)],
                         ids=["LSTM", "GRU", "SimpleRNN"])
def test_check_cell_compares_the_compiled_step(cell: rk.Cell) -> None:
    pytest.importorskip("numba")
    errs = check_cell(cell, steps=4)
    assert {"compiled step:y", "compiled step:d_recurrent_kernel", "compiled step (masked):dx"} <= set(errs)


class _WrongParallel(MinGRUTestCell):
    """The parallel backward forgets the gradient that flows back through the recurrence."""

    def sequence_backward(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None,
                          init: Arrays, states: Arrays, park: Mapping[str, np.ndarray]) -> rk.SequenceBack:
        z, k, h = park["z"], park["k"], states[0]
        hprev = np.concatenate([init[0][None], h[:-1]])
        dz = d[0] * (_g(k) - hprev) * z * (1.0 - z)
        return rk.SequenceBack(d_init=(d[0][0] * (1.0 - z[0]),),
                               d_inp=np.concatenate([dz, d[0] * z * _dg(k)], axis=-1))


class _WrongStepBack(MinGRUTestCell):
    """The reference backward drops the candidate's derivative g'(k)."""

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> rk.StepBack:
        r = super().step_back(w, d, inp, prev, new, park)
        H = self.units
        return r._replace(d_inp=np.concatenate([r.d_inp[:, :H], d[0] * park["z"]], axis=1))


def test_check_cell_names_what_differs() -> None:
    with pytest.raises(AssertionError, match=r"check_cell\(_WrongParallel\): parallel form differs from "
                                             r"the reference step in (dx|d_init0|d_kernel|d_bias): relative"):
        check_cell(_WrongParallel(4))
    with pytest.raises(AssertionError, match=r"check_cell\(_WrongStepBack\): the reference step's dx differs "
                                             r"from central differences of its forward: relative error"):
        check_cell(_WrongStepBack(4))
