"""The compiled walker keeps each cell's plan (packed W, U, projection) between passes only
while the weights are the same arrays and nothing can write to them: a replaced weight
(``set_weight``, an optimizer step, ``set_weights``), or a weight that can change in place,
never runs on stale panels. Every check compares values against the NumPy reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.recurrent._walker import reference_walk, walk

pytest.importorskip("numba")

B, T, F, H = 2, 6, 3, 4
TOL = 2e-5


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, T, F)).astype(np.float32)


def _layers() -> list[rk.RecurrentLayer]:
    return [rk.SimpleRNN(H, seed=1, input_dim=F), rk.LSTM(H, seed=2, input_dim=F),
            rk.LSTM(H, proj_size=2, seed=3, input_dim=F), rk.GRU(H, seed=4, input_dim=F),
            rk.GRU(H, reset_after=False, seed=5, input_dim=F)]


def _ref(layer: rk.RecurrentLayer, x: np.ndarray) -> np.ndarray:
    with kernels.use("reference"):
        return np.asarray(layer.forward(x, rk.Ctx.inference()))


def _close(a: Any, b: Any) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=TOL)


@pytest.mark.parametrize("i", range(5))
def test_set_weight_reaches_the_next_pass(i: int) -> None:
    layer, x = _layers()[i], _x()
    first = layer.forward(x, rk.Ctx.inference())
    _close(first, _ref(layer, x))
    rng = np.random.default_rng(7)
    for name in layer.weight_names:            # each weight alone, every one replaced once
        layer.set_weight(name, rng.uniform(-0.8, 0.8, layer.weight(name).shape))
        got = layer.forward(x, rk.Ctx.inference())
        _close(got, _ref(layer, x))
    assert np.max(np.abs(np.asarray(got) - np.asarray(first))) > 1e-3


@pytest.mark.parametrize("i", range(5))
def test_optimizer_step_reaches_the_next_pass(i: int) -> None:
    layer, x = _layers()[i], _x()
    model = rk.Sequential([layer, rk.Dense(1, "linear", seed=9)])
    model.compile(rk.optimizers.SGD(0.5), "mse")
    before = np.asarray(layer.forward(x, rk.Ctx.inference()))
    y = np.ones((B, 1), np.float32)
    model.fit(x, y, epochs=2, batch_size=B, shuffle=False, verbose=0)
    after = np.asarray(layer.forward(x, rk.Ctx.inference()))
    _close(after, _ref(layer, x))
    assert np.max(np.abs(after - before)) > 1e-4
    # training passes on the kept plans: gradients equal the reference's
    def grads() -> dict[str, np.ndarray]:
        ctx = rk.Ctx.training(0)
        out = layer.forward(x, ctx)
        layer.backward(np.ones_like(out), ctx)
        return {n: np.array(ctx.grads[(layer, n)]) for n in layer.trainable_names}
    fast = grads()
    with kernels.use("reference"):
        ref = grads()
    for n in fast:
        np.testing.assert_allclose(fast[n], ref[n], rtol=0, atol=1e-4 * max(1.0, np.abs(ref[n]).max()))


def test_weights_that_can_change_in_place_are_read_every_pass() -> None:
    layer = rk.LSTM(H, seed=2, input_dim=F)
    cell = layer.cell
    w = {n: np.array(layer.weight(n)) for n in layer.weight_names}    # writeable copies
    x_tm = np.ascontiguousarray(_x().transpose(1, 0, 2))
    for k in range(3):
        seq, final, _ = walk(cell, w, x_tm, None, False, True)
        rseq, rfinal, _ = reference_walk(cell, w, x_tm, None, False, True)
        _close(seq, rseq)
        _close(final[1], rfinal[1])
        w["recurrent_kernel"] += np.float32(0.2 * (k + 1))            # in place: no new array
        w["kernel"][0] -= np.float32(0.3)


def test_a_read_only_view_of_writeable_memory_is_not_kept() -> None:
    layer = rk.GRU(H, seed=4, input_dim=F)
    cell = layer.cell
    owners = {n: np.array(layer.weight(n)) for n in layer.weight_names}
    w = {}
    for n, a in owners.items():
        v = a.view()
        v.flags.writeable = False                                      # read-only, but its owner is not
        w[n] = v
    x_tm = np.ascontiguousarray(_x(1).transpose(1, 0, 2))
    for _ in range(2):
        _, final, _ = walk(cell, w, x_tm, None, False, False)
        _, rfinal, _ = reference_walk(cell, w, x_tm, None, False, False)
        _close(final[0], rfinal[0])
        owners["recurrent_kernel"] *= np.float32(-1.5)


def test_owner_made_writeable_again_is_read_every_pass() -> None:
    layer = rk.SimpleRNN(H, seed=1, input_dim=F)
    x = _x(2)
    layer.forward(x, rk.Ctx.inference())                               # the plan is kept
    owner = layer.weight("recurrent_kernel").base
    assert isinstance(owner, np.ndarray) and owner.base is None
    owner.flags.writeable = True
    owner *= np.float32(-2.0)
    _close(layer.forward(x, rk.Ctx.inference()), _ref(layer, x))


def test_two_layers_sharing_nothing_keep_their_own_plans() -> None:
    a, b = rk.LSTM(H, seed=2, input_dim=F), rk.LSTM(H, seed=3, input_dim=F)
    x = _x(3)
    for _ in range(2):
        _close(a.forward(x, rk.Ctx.inference()), _ref(a, x))
        _close(b.forward(x, rk.Ctx.inference()), _ref(b, x))


def test_bidirectional_after_set_weight() -> None:
    layer = rk.Bidirectional(rk.LSTM(H, seed=2, return_sequences=True))
    layer.build((None, T, F))
    x = _x(4)
    layer.forward(x, rk.Ctx.inference())
    rng = np.random.default_rng(5)
    for name in layer.weight_names:
        layer.set_weight(name, rng.uniform(-0.5, 0.5, layer.weight(name).shape))
    got = layer.forward(x, rk.Ctx.inference())
    with kernels.use("reference"):
        ref = layer.forward(x, rk.Ctx.inference())
    _close(got, ref)


def test_the_plan_and_its_panels_are_kept_while_the_weights_are_the_same() -> None:
    from rnnkit.kernels import _driver as drv

    layer = rk.LSTM(H, seed=2, input_dim=F)
    x = _x(5)
    layer.forward(x, rk.Ctx.inference())
    step = kernels.find(layer.cell)
    w = {n: layer.weight(n) for n in layer.weight_names}
    p1 = drv._plan(layer.cell, step, w, np.dtype(np.float32))
    assert drv._plan(layer.cell, step, w, np.dtype(np.float32)) is p1
    assert p1.packed_u()[0] is p1.packed_u()[0] and p1.packed("w") is p1.packed("w")
    layer.set_weight("bias", np.zeros(layer.weight("bias").shape))
    w = {n: layer.weight(n) for n in layer.weight_names}
    assert drv._plan(layer.cell, step, w, np.dtype(np.float32)) is not p1


def test_a_kept_plan_is_left_for_another_dtype_options_or_weight_in_place() -> None:
    """The lean lookup keeps a plan only for the same step, dtype, options and weight arrays,
    all still read-only; and the options a pass reads once are the step's own."""
    from rnnkit.kernels import _driver as drv

    layer = rk.GRU(H, seed=4, input_dim=F)
    x = _x(6)
    layer.forward(x, rk.Ctx.inference())
    found = kernels.find_options(layer.cell)
    assert found is not None
    step, opts = found
    assert step is kernels.find(layer.cell) and opts == step.options(layer.cell)
    w = {n: layer.weight(n) for n in layer.weight_names}
    f32 = np.dtype(np.float32)
    p1 = drv._plan(layer.cell, step, w, f32, opts)
    assert drv._plan(layer.cell, step, w, f32) is p1 and drv._plan(layer.cell, step, w, f32, opts) is p1
    assert drv._plan(layer.cell, step, w, np.dtype(np.float64), opts) is not p1
    p2 = drv._plan(layer.cell, step, w, f32, opts)
    assert drv._plan(layer.cell, step, w, f32, (*opts[:-1], 1 - opts[-1])) is not p2
    p3 = drv._plan(layer.cell, step, w, f32, opts)
    writable = dict(w, kernel=np.array(w["kernel"]))      # a writeable copy: never kept
    assert drv._plan(layer.cell, step, writable, f32, opts) is not p3
    assert drv._plan(layer.cell, step, writable, f32, opts) is not drv._plan(layer.cell, step, writable, f32)


@pytest.mark.parametrize("i", [1, 3, 4])
def test_set_weights_reaches_the_next_training_pass(i: int) -> None:
    """A training pass keeps the plan and packs U^T for its backward; ``set_weights`` (every
    weight at once) then replaces them all: the next forward and backward read the new values,
    gradients equal to the NumPy reference's (float32 sums of a few terms: 1e-4 relative)."""
    layer, x = _layers()[i], _x(8)

    def grads() -> tuple[np.ndarray, dict[str, np.ndarray]]:
        ctx = rk.Ctx.training(0)
        out = layer.forward(x, ctx)
        layer.backward(np.ones_like(out), ctx)
        return np.array(out), {n: np.array(ctx.grads[(layer, n)]) for n in layer.trainable_names}

    grads()                                     # the plan and its panels (U^T included) kept
    rng = np.random.default_rng(11)
    layer.set_weights(*(rng.uniform(-0.7, 0.7, layer.weight(n).shape) for n in layer.weight_names))
    out, fast = grads()
    with kernels.use("reference"):
        rout, ref = grads()
    _close(out, rout)
    for n in fast:
        np.testing.assert_allclose(fast[n], ref[n], rtol=0, atol=1e-4 * max(1.0, np.abs(ref[n]).max()))


def test_an_option_assigned_to_a_cell_reaches_the_next_pass() -> None:
    """The step and options a pass runs are read once per cell while its attributes stay the
    same; assigning one (the activation) makes the next pass read them again: its output is the
    reference's for the new activation, and differs from the old one's."""
    from rnnkit._activations import resolve_activation

    layer, x = rk.GRU(H, seed=4, input_dim=F), _x(9)
    before = np.asarray(layer.forward(x, rk.Ctx.inference()))
    opts = kernels.find_options(layer.cell)
    layer.cell.activation = resolve_activation("relu", "GRU")
    found = kernels.find_options(layer.cell)
    assert found is not None and opts is not None and found[1] != opts[1]
    after = np.asarray(layer.forward(x, rk.Ctx.inference()))
    _close(after, _ref(layer, x))
    assert np.max(np.abs(after - before)) > 1e-3


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 37), (64, 256), (40, 33)])
def test_transposed_panels_are_the_definition(shape: tuple[int, int], dt: Any) -> None:
    """``pack_into(B, trans=True, ...)``: ``P[p, k, j] = B.T[k0 + k, c0 + p*nr + j]`` for
    ``k < kc``, zero past column ``c1`` (the panels of U^T and W^T the backward reads), for
    a block of ``k`` and of columns; exact (a copy)."""
    from rnnkit.kernels._packed import nr_of, pack_into

    B = np.random.default_rng(3).standard_normal(shape).astype(dt)
    N, K = shape
    nr = nr_of(np.dtype(dt))
    for k0, kc, c0, c1 in [(0, K, 0, N), (3, K - 5, 2, N - 3)]:
        npan = -(-(c1 - c0) // nr)
        P = np.full((npan, kc + 1, nr), np.nan, dt)
        pack_into(B, True, np.int64(k0), kc, c0, c1, P)
        want = np.zeros((npan, kc, nr), dt)
        BT = B.T
        for p in range(npan):
            for j in range(nr):
                if c0 + p * nr + j < c1:
                    want[p, :, j] = BT[k0:k0 + kc, c0 + p * nr + j]
        np.testing.assert_array_equal(P[:, :kc], want)
