"""The prepared inference call (``RecurrentLayer._infer`` -> ``kernels._driver.infer``): an
inference pass on one array from a zero state, without a mask, equals the NumPy reference for
every built-in cell, ``proj_size``, ``go_backwards``, both ``return_sequences``, one row and
several (one row block and a batch split into blocks), gives the very bits of the general pass
(``_pass``: the same compiled loop), and hands out arrays that are the caller's own."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.kernels import _plans, _threads

pytest.importorskip("numba")

T, F, H = 9, 5, 6
TOL = 2e-5
CELLS = ["rnn", "lstm", "lstm_proj", "gru", "gru_ra"]


def _layer(cell: str, **kw: Any) -> rk.RecurrentLayer:
    if cell == "rnn":
        layer: rk.RecurrentLayer = rk.SimpleRNN(H, seed=1, **kw)
    elif cell == "lstm":
        layer = rk.LSTM(H, seed=2, **kw)
    elif cell == "lstm_proj":
        layer = rk.LSTM(H, proj_size=3, seed=3, **kw)
    else:
        layer = rk.GRU(H, reset_after=(cell == "gru_ra"), seed=4, **kw)
    layer.build((None, None, F))
    return layer


def _x(B: int, seed: int = 0, steps: int = T) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((B, steps, F)) * 2).astype(np.float32)


def _general(layer: Any, x: np.ndarray) -> np.ndarray:
    """The general pass's output (what ``forward`` ran before the prepared call)."""
    out, _ = layer._pass(x, None, rk.Ctx.inference(), layer.return_sequences, "layer")
    return out  # type: ignore[no-any-return]


def _close(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=0, atol=TOL * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("B", [1, 3, 2 * _threads.MIN_ROWS + 3])
@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("cell", CELLS)
def test_prepared_call_equals_reference_and_the_general_pass(cell: str, gb: bool, B: int) -> None:
    x = _x(B)
    for rs in (True, False):
        layer = _layer(cell, return_sequences=rs, go_backwards=gb)
        fast = [layer.forward(x, rk.Ctx.inference()) for _ in range(2)]   # the first call, the kept entry
        general = _general(layer, x)
        with kernels.use("reference"):
            ref = layer.forward(x, rk.Ctx.inference())
        for got in fast:
            assert got.dtype == np.float32 and got.flags.c_contiguous
            assert np.array_equal(got, general)
            _close(got, ref)


@pytest.mark.parametrize("cell", CELLS)
def test_prepared_call_rows_do_not_depend_on_the_batch(cell: str) -> None:
    x = _x(5, seed=1)
    layer = _layer(cell, return_sequences=True)
    whole = layer.forward(x, rk.Ctx.inference())
    for b in range(x.shape[0]):
        assert np.array_equal(layer.forward(x[b:b + 1], rk.Ctx.inference()), whole[b:b + 1])


def test_prepared_call_takes_any_input_layout_and_leaves_it_unchanged() -> None:
    layer = _layer("lstm", return_sequences=True)
    x = _x(1, seed=2)
    want = layer.forward(x.copy(), rk.Ctx.inference())
    ro = x.copy()
    ro.flags.writeable = False
    strided = np.repeat(x, 2, axis=2)[:, :, ::2]          # not contiguous
    fortran = np.asfortranarray(x)
    for v in (ro, strided, fortran):
        before = v.copy()
        assert np.array_equal(layer.forward(v, rk.Ctx.inference()), want)
        assert np.array_equal(v, before)


def test_prepared_call_hands_out_the_callers_own_arrays() -> None:
    for rs in (True, False):
        layer = _layer("gru_ra", return_sequences=rs)
        x1, x2 = _x(1, seed=3), _x(1, seed=4)
        a = layer.forward(x1, rk.Ctx.inference())
        keep = a.copy()
        b = layer.forward(x2, rk.Ctx.inference())
        assert not np.shares_memory(a, b)
        assert np.array_equal(a, keep)                    # a later call did not write it
        assert not np.array_equal(a, b)


def test_prepared_call_follows_new_weights_and_other_steps() -> None:
    layer = _layer("lstm", return_sequences=True)
    x = _x(1, seed=5)
    layer.forward(x, rk.Ctx.inference())
    U = layer.get_weights()[1] * 0.5
    layer.set_weight("recurrent_kernel", U)               # a new plan, a new prepared call
    with kernels.use("reference"):
        ref = layer.forward(x, rk.Ctx.inference())
    _close(layer.forward(x, rk.Ctx.inference()), ref)
    x7 = _x(1, seed=6, steps=7)                           # other steps: other scratch, same entry
    with kernels.use("reference"):
        ref7 = layer.forward(x7, rk.Ctx.inference())
    _close(layer.forward(x7, rk.Ctx.inference()), ref7)
    plan = _plans._plans[layer.cell].plan
    assert set(plan.quick) == {True}


def test_prepared_call_from_several_threads_at_once() -> None:
    layer = _layer("lstm", return_sequences=True)
    xs = [_x(1, seed=10 + k, steps=40) for k in range(4)]
    want = [layer.forward(x, rk.Ctx.inference()) for x in xs]
    bad: list[int] = []

    def run(k: int) -> None:
        for _ in range(50):
            if not np.array_equal(layer.forward(xs[k], rk.Ctx.inference()), want[k]):
                bad.append(k)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_masks_states_and_stateful_layers_keep_the_general_pass() -> None:
    """What the prepared call does not take gives what it gave before: a mask, an initial
    state, return_state, a stateful layer (each against the reference)."""
    x = _x(2, seed=7)
    init = [x, np.ones((2, H), np.float32), np.zeros((2, H), np.float32)]
    cases: list[tuple[Any, Any, dict[str, Any]]] = [
        (_layer("lstm", return_sequences=True), x, {"lengths": np.array([T, 4])}),
        (_layer("lstm", return_sequences=True), init, {}),
        (_layer("gru", return_state=True), x, {}),
        (_layer("gru", stateful=True), x, {}),
    ]
    for layer, inp, mask in cases:
        got = []
        for mode in ("fast", "reference"):
            with kernels.use(mode):
                if layer.stateful:
                    layer.reset_state()
                ctx = rk.Ctx.inference()
                if mask:
                    ctx.set_mask(**mask)
                out = layer.forward(inp, ctx)
                got.append([np.asarray(o) for o in (out if isinstance(out, list) else [out])])
        for a, b in zip(*got, strict=True):
            _close(a, b)


def test_an_int8_layer_keeps_its_own_pass() -> None:
    model = rk.Sequential([rk.LSTM(H, return_sequences=True, seed=8)])
    model.build((None, T, F))
    q = rk.quantize(model).layers[0]
    x = _x(1, seed=9)
    assert np.array_equal(q.forward(x, rk.Ctx.inference()), _general(q, x))


@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("cell", CELLS)
def test_one_row_under_lengths_equals_reference(cell: str, gb: bool) -> None:
    x = _x(1, seed=11)
    for rs in (True, False):
        layer = _layer(cell, return_sequences=rs, go_backwards=gb)
        for n in (T, 4, 1, 0):
            got = []
            for mode in ("fast", "reference"):
                with kernels.use(mode):
                    got.append(layer.forward(x, rk.Ctx.inference().set_mask(lengths=np.array([n]))))
            _close(got[0], got[1])
            if rs and 0 < n < T:
                assert not got[0][:, n:].any()


@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("cell", CELLS)
def test_a_batch_under_lengths_runs_longest_first_with_the_same_bits(cell: str, gb: bool) -> None:
    """Rows of a padded batch under ``lengths`` run in decreasing length (a step computes the
    rows up to its last real one): every row equals the reference and, bit for bit, the same
    row run alone; outputs and final states come back in the caller's order."""
    B = 7
    x = _x(B, seed=12)
    n = np.array([3, T, 1, 5, T, 0, 2])
    for rs in (True, False):
        layer = _layer(cell, return_sequences=rs, go_backwards=gb, return_state=True)
        got = []
        for mode in ("fast", "reference"):
            with kernels.use(mode):
                got.append(layer.forward(x, rk.Ctx.inference().set_mask(lengths=n)))
        for a, b in zip(*got, strict=True):
            _close(a, b)
        for b in range(B):
            alone = layer.forward(x[b:b + 1], rk.Ctx.inference().set_mask(lengths=n[b:b + 1]))
            for a, whole in zip(alone, got[0], strict=True):
                assert np.array_equal(a, whole[b:b + 1])
