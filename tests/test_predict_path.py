"""``predict`` on one array: the same values as the layers' own passes, and the input check
that comes before them (every NaN / Inf refused with its position; large finite values, whose
squares overflow, accepted, without a warning); the door checked once, so that ``predict`` adds
only a few calls to the layers' own passes, and the layers keep their checks for direct calls."""

from __future__ import annotations

import gc
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk


def _model() -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(8, seed=1, return_sequences=True), rk.GRU(4, seed=2)])
    m.build((None, 5, 3))
    return m


def test_predict_equals_the_layers_passes() -> None:
    m = _model()
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    h = x
    for layer in m.layers:
        h = layer.forward(h, rk.Ctx.inference())
    np.testing.assert_array_equal(m.predict(x), h)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_predict_refuses_a_non_finite_value_and_names_where(bad: float, dtype: str) -> None:
    m = _model()
    x = np.ones((2, 5, 3), dtype)
    x[1, 3, 2] = bad
    with pytest.raises(rk.InvalidInputError, match=r"at \(1, 3, 2\)"):
        m.predict(x)
    x[1, 3, 2] = 1.0
    x[0, 0, 0] = 3e38 if dtype == "float32" else 1e300   # squares overflow; still finite
    x[0, 0, 1] = bad
    with pytest.raises(rk.InvalidInputError, match=r"at \(0, 0, 1\)"):
        m.predict(x)


def test_predict_accepts_values_whose_squares_overflow() -> None:
    m = rk.Sequential([rk.Dense(1, "linear", seed=1)])
    m.build((None, 2))
    big = np.array([[3e38, -3e38], [1.0, 2.0]], np.float32)
    w = m.layers[0].weight("kernel")
    out = m.predict(big)
    expect = big.astype(np.float64) @ w.astype(np.float64) + m.layers[0].weight("bias")
    assert np.isfinite(out[1]).all()
    np.testing.assert_allclose(out[1], expect[1], rtol=1e-5)


# -- the door is checked once, and the pass after it is the layers' own ----------------------

def _rnnkit_calls(fn: object) -> int:
    """Python calls into rnnkit's own modules made by ``fn()`` (a count, not a duration): the
    fewest of three runs with the garbage collector off, so a finalizer that a collection
    happens to run inside ``fn`` is not counted as ``fn``'s."""
    pkg = str(Path(rk.__file__).resolve().parent)
    counts = []
    for _ in range(3):
        n = 0

        def prof(frame: Any, event: str, arg: Any) -> None:
            nonlocal n
            if event == "call" and frame.f_code.co_filename.startswith(pkg):
                n += 1

        gc.disable()
        sys.setprofile(prof)
        try:
            fn()  # type: ignore[operator]
        finally:
            sys.setprofile(None)
            gc.enable()
        counts.append(n)
    return min(counts)


def _bare(m: rk.Sequential, x: np.ndarray) -> np.ndarray:
    h = x
    for layer in m.layers:
        h = layer.forward(h, rk.Ctx.inference())
    return h


@pytest.mark.parametrize("layers", [lambda: [rk.LSTM(8, seed=1)],
                                    lambda: [rk.LSTM(8, seed=1), rk.Dense(1, seed=2)],
                                    lambda: [rk.GRU(8, seed=1, return_sequences=True), rk.LSTM(4, seed=2)]])
def test_predict_adds_a_few_calls_to_the_layers_own_passes(layers: Any) -> None:
    # the door checks the arguments and the input once (shape, sample count, NaN/Inf) in
    # predict's own code, then the plan runs the layers on the array as given in one Ctx:
    # predict, the plan's run and one Ctx, where the bare chain makes one Ctx (two calls) per
    # layer (the general path, with the mask plumbing, took 13 calls over the bare chain)
    m = rk.Sequential(layers())
    x = np.random.default_rng(0).standard_normal((1, 12, 3)).astype(np.float32)
    np.testing.assert_array_equal(m.predict(x), _bare(m, x))
    np.testing.assert_array_equal(m(x), _bare(m, x))
    most = 3 - 2 * len(m.layers)
    over = _rnnkit_calls(lambda: m.predict(x)) - _rnnkit_calls(lambda: _bare(m, x))
    assert over <= most, f"predict makes {over} rnnkit calls over the layers' own passes"
    assert _rnnkit_calls(lambda: m(x)) - _rnnkit_calls(lambda: _bare(m, x)) <= most


def test_the_recurrent_input_check_costs_few_calls() -> None:
    # an array of the layer's dtype that fits the build passes in one quick test (the check
    # and the build shape's dims; the slow path took 10)
    layer = rk.LSTM(4, seed=1)
    x = np.ones((2, 5, 3), np.float32)
    layer.build((None, 5, 3))
    assert _rnnkit_calls(lambda: layer._check_input(x)) <= 2


def test_predict_with_masks_and_batches_equals_the_layers_passes() -> None:
    m = rk.Sequential([rk.GRU(6, seed=3, return_sequences=True), rk.LSTM(4, seed=4)]).build((None, 7, 3))
    x = np.random.default_rng(1).standard_normal((5, 7, 3)).astype(np.float32)
    lengths = np.array([7, 3, 1, 5, 6])
    valid = np.arange(7)[None, :] < lengths[:, None]

    want_len = np.concatenate([_masked(m, x[a:a + 2], lengths=lengths[a:a + 2]) for a in (0, 2, 4)])
    np.testing.assert_array_equal(m.predict(x, lengths=lengths), _masked(m, x, lengths=lengths))
    np.testing.assert_array_equal(m.predict(x, lengths=lengths, batch_size=5), _masked(m, x, lengths=lengths))
    np.testing.assert_array_equal(m.predict(x, lengths=lengths, batch_size=2), want_len)
    np.testing.assert_array_equal(m.predict(x, mask=valid), _masked(m, x, mask=valid))
    np.testing.assert_array_equal(m.predict(x, mask=valid, batch_size=9), _masked(m, x, mask=valid))


def _masked(m: rk.Sequential, x: np.ndarray, **given: Any) -> np.ndarray:
    """The model's layers run by hand on a padded batch: the first reads ``given`` as its
    mask, the next reads the first's output mask (a sequence output keeps it)."""
    ctx = rk.Ctx.inference()
    mask = rk.Mask(lengths=given["lengths"]) if "lengths" in given else rk.Mask.of(given["mask"])
    h = x
    for layer in m.layers:
        out_mask = layer.compute_mask(h, mask)
        h = layer.forward(h, ctx.set_mask(mask))
        mask = out_mask
    return h


def test_predict_converts_another_float_dtype_as_the_layer_does() -> None:
    m = rk.Sequential([rk.LSTM(5, seed=2), rk.Dense(2, seed=3)])
    x = np.random.default_rng(2).standard_normal((3, 4, 2))
    np.testing.assert_array_equal(m.predict(x), _bare(m, x.astype(np.float32)))
    strided = np.random.default_rng(3).standard_normal((3, 8, 2)).astype(np.float32)[:, ::2]
    np.testing.assert_array_equal(m.predict(strided), _bare(m, np.ascontiguousarray(strided)))
    strided[1, 2, 0] = np.nan
    with pytest.raises(rk.InvalidInputError, match=r"holds nan at \(1, 2, 0\)"):
        m.predict(strided)
    fortran = np.asfortranarray(np.random.default_rng(4).standard_normal((3, 4, 2)).astype(np.float32))
    np.testing.assert_array_equal(m.predict(fortran), _bare(m, np.ascontiguousarray(fortran)))


def test_the_door_refuses_what_it_refused_before() -> None:
    m = _model()
    with pytest.raises(rk.InvalidInputError, match=r"input has shape \(2, 4, 3\); the model was built for"):
        m.predict(np.ones((2, 4, 3), np.float32))
    with pytest.raises(rk.InvalidInputError, match=r"input holds no samples \(shape \(0, 5, 3\)\)"):
        m.predict(np.ones((0, 5, 3), np.float32))
    with pytest.raises(rk.InvalidInputError, match="must hold real numbers, got dtype complex128"):
        m.predict(np.ones((2, 5, 3), complex))
    with pytest.raises(rk.InvalidParameterError, match="verbose must be 0"):
        m.predict(np.ones((2, 5, 3), np.float32), verbose=0.0)
    with pytest.raises(rk.InvalidParameterError, match="batch_size must be an int >= 1"):
        m.predict(np.ones((2, 5, 3), np.float32), batch_size=0)


def test_a_recurrent_layer_called_directly_keeps_its_checks() -> None:
    layer = rk.LSTM(4, seed=1)
    layer.build((None, 5, 3))
    ctx = rk.Ctx.inference()
    for bad, says in [(np.ones((2, 5, 2), np.float32), "expected 3 features on the last axis"),
                      (np.ones((2, 0, 3), np.float32), "expected at least 1 timestep"),
                      (np.ones((2, 6, 3), np.float32), "built for 5 timesteps"),
                      (np.ones((5, 3), np.float32), "expected a 3D input")]:
        with pytest.raises(rk.InvalidInputError, match=says):
            layer.forward(bad, ctx)
    out, _ = layer.seq(np.ones((2, 6, 3), np.float32))   # streaming: any number of steps
    assert out.shape == (2, 6, 4)
    x64 = np.random.default_rng(5).standard_normal((2, 5, 3))
    np.testing.assert_array_equal(layer.forward(x64, ctx), layer.forward(x64.astype(np.float32), ctx))
    with pytest.raises(rk.InvalidInputError, match="beyond the largest float32"):
        layer.forward(np.full((2, 5, 3), 1e300), ctx)


def test_ctx_takes_a_bool_and_only_a_bool() -> None:
    assert rk.Ctx(np.bool_(True)).training_mode is True
    assert rk.Ctx(False).training_mode is False
    with pytest.raises(TypeError, match="training must be a bool"):
        rk.Ctx("yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="training must be a bool"):
        rk.Ctx(1)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_finite_check_warns_of_nothing_on_squares_that_overflow(dtype: str) -> None:
    m = rk.Sequential([rk.Dense(1, "linear", seed=1, dtype=dtype)])
    m.build((None, 2))
    x = np.array([[np.finfo(dtype).max / 2, 1.0]], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = m.predict(x)
    w = m.layers[0].weight("kernel").astype(np.float64)
    np.testing.assert_allclose(out, x.astype(np.float64) @ w + m.layers[0].weight("bias"), rtol=1e-5)


# -- the maskless chain: no mask plumbing, and the plan follows the model ---------------------

def _calls_named(fn: object, names: set[str]) -> int:
    """Calls of rnnkit functions whose name is one of ``names`` made by ``fn()``."""
    pkg = str(Path(rk.__file__).resolve().parent)
    n = 0

    def prof(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event == "call" and frame.f_code.co_name in names and frame.f_code.co_filename.startswith(pkg):
            n += 1

    sys.setprofile(prof)
    try:
        fn()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return n


_PLUMBING = {"compute_mask", "set_mask"}


def test_a_maskless_chain_runs_without_the_mask_plumbing() -> None:
    m = rk.Sequential([rk.GRU(6, seed=1, return_sequences=True), rk.LSTM(4, seed=2), rk.Dense(2, seed=3)])
    m.build((None, 5, 2))
    m.compile("sgd", "mse")
    x = np.random.default_rng(6).standard_normal((3, 5, 2)).astype(np.float32)
    y = np.random.default_rng(7).standard_normal((3, 2)).astype(np.float32)
    want = _bare(m, x)
    np.testing.assert_array_equal(m.predict(x), want)
    assert _calls_named(lambda: m.predict(x), _PLUMBING) == 0
    assert _calls_named(lambda: m(x), _PLUMBING) == 0
    assert _calls_named(lambda: m.evaluate(x, y), _PLUMBING) == 0
    expect = float(np.mean((want.astype(np.float64) - y) ** 2))
    assert m.evaluate(x, y) == pytest.approx(expect, rel=1e-6)


def test_a_layer_that_makes_masks_keeps_the_general_path() -> None:
    m = rk.Sequential([rk.Masking(0.0), rk.LSTM(4, seed=2)]).build((None, 5, 2))
    x = np.random.default_rng(8).standard_normal((3, 5, 2)).astype(np.float32)
    x[1, 3:] = 0.0
    x[2, 1:] = 0.0
    lengths = np.array([5, 3, 1])
    want = _masked(rk.Sequential([rk.LSTM(4, seed=2)]).build((None, 5, 2)), x, lengths=lengths)
    np.testing.assert_array_equal(m.predict(x), want)
    np.testing.assert_array_equal(m(x), want)
    assert _calls_named(lambda: m.predict(x), _PLUMBING) > 0


def test_the_plan_follows_layers_added_after_the_build() -> None:
    # an input shape declared first builds the model at once; each later layer joins the pass
    m = rk.Sequential([rk.LSTM(4, seed=1, input_shape=(5, 3), return_sequences=True)])
    x = np.random.default_rng(9).standard_normal((2, 5, 3)).astype(np.float32)
    np.testing.assert_array_equal(m.predict(x), _bare(m, x))
    m.add(rk.GRU(3, seed=2))
    m.add(rk.Dense(2, seed=3))
    assert m.predict(x).shape == (2, 2)
    np.testing.assert_array_equal(m.predict(x), _bare(m, x))
    np.testing.assert_array_equal(m(x), _bare(m, x))
    m.add(rk.Dense(1, seed=4))
    np.testing.assert_array_equal(m.predict(x), _bare(m, x))


def test_a_free_time_axis_takes_any_length_and_the_door_still_refuses_the_rest() -> None:
    m = rk.Sequential([rk.LSTM(4, seed=1), rk.Dense(1, seed=2)], input_shape=(None, 3))
    for T in (1, 5, 9):
        x = np.random.default_rng(T).standard_normal((2, T, 3)).astype(np.float32)
        np.testing.assert_array_equal(m.predict(x), _bare(m, x))
        np.testing.assert_array_equal(m(x), _bare(m, x))
    with pytest.raises(rk.InvalidInputError, match=r"input has shape \(2, 5, 2\); the model was built for"):
        m.predict(np.ones((2, 5, 2), np.float32))
    with pytest.raises(rk.InvalidInputError, match=r"input has shape \(2, 5, 3, 1\); the model was built"):
        m(np.ones((2, 5, 3, 1), np.float32))
    with pytest.raises(rk.InvalidInputError, match=r"input holds no samples \(shape \(0, 5, 3\)\)"):
        m(np.ones((0, 5, 3), np.float32))


def test_a_call_passes_nan_through_as_the_layers_do_and_predict_refuses_it() -> None:
    m = _model()
    x = np.random.default_rng(10).standard_normal((2, 5, 3)).astype(np.float32)
    x[1, 2, 0] = np.nan
    out = m(x)
    np.testing.assert_array_equal(out, _bare(m, x))
    assert np.isnan(out[1]).all() and np.isfinite(out[0]).all()
    with pytest.raises(rk.InvalidInputError, match=r"holds nan at \(1, 2, 0\)"):
        m.predict(x)


def test_no_input_mask_given_beside_a_ctx_mask_clears_it_as_the_general_path_does() -> None:
    m = _model()
    x = np.random.default_rng(11).standard_normal((2, 5, 3)).astype(np.float32)
    ctx = rk.Ctx.inference().set_mask(lengths=np.array([5, 2]))
    outs, masks = m._forward_masks([x], ctx, False, [None])
    np.testing.assert_array_equal(outs[0], _bare(m, x))
    assert masks == [None] and ctx.mask is None


def test_a_graph_that_is_a_chain_predicts_with_the_layers_alone() -> None:
    inp = rk.Input((5, 3))
    out = rk.Dense(2, seed=2)(rk.GRU(3, seed=3)(rk.LSTM(4, seed=1, return_sequences=True)(inp)))
    m = rk.Model(inp, out)
    x = np.random.default_rng(12).standard_normal((2, 5, 3)).astype(np.float32)
    bare = rk.Sequential([m.get_layer(index=i) for i in (1, 2, 3)])
    want = _bare(bare, x)
    np.testing.assert_array_equal(m.predict(x), want)
    np.testing.assert_array_equal(m(x), want)
    over = _rnnkit_calls(lambda: m.predict(x)) - _rnnkit_calls(lambda: _bare(bare, x))
    assert over <= 3 - 2 * 3
    with pytest.raises(rk.InvalidInputError, match=r"input has shape \(2, 4, 3\); the model was built for"):
        m.predict(np.ones((2, 4, 3), np.float32))


def test_graphs_that_are_not_plain_chains_keep_the_general_path() -> None:
    x = np.random.default_rng(13).standard_normal((2, 5, 3))
    inp = rk.Input((5, 3), dtype="float64")   # a declared dtype converts the array first
    lstm = rk.LSTM(4, seed=1, dtype="float64")
    typed = rk.Model(inp, lstm(inp))
    assert _calls_named(lambda: typed.predict(x), {"cast_inputs"}) == 1
    np.testing.assert_array_equal(typed.predict(x), lstm.forward(x, rk.Ctx.inference()))
    inp = rk.Input((5, 3))
    seq, h, c = rk.LSTM(4, seed=1, return_state=True, return_sequences=True)(inp)
    states = rk.Model(inp, rk.Add()([h, c]))
    assert _calls_named(lambda: states.predict(x), {"cast_inputs"}) == 1
    ctx = rk.Ctx.inference()
    _, h0, c0 = states.get_layer(index=1).forward(x.astype(np.float32), ctx)
    np.testing.assert_allclose(states.predict(x), h0 + c0, rtol=1e-6)


def test_a_subclass_with_its_own_pass_keeps_it() -> None:
    class Doubled(rk.Sequential):
        def _forward_masks(self, xs: Any, ctx: Any, check: bool, masks: Any = None) -> Any:
            outs, out_masks = super()._forward_masks(xs, ctx, check, masks)
            return [2 * outs[0]], out_masks

    class Tripled(rk.Sequential):
        def forward(self, x: Any, ctx: Any) -> Any:
            return 3 * super().forward(x, ctx)

    x = np.random.default_rng(14).standard_normal((2, 5, 3)).astype(np.float32)
    doubled = Doubled([rk.LSTM(4, seed=1)]).build((None, 5, 3))
    np.testing.assert_array_equal(doubled.predict(x), 2 * _bare(doubled, x))
    np.testing.assert_array_equal(doubled(x), 2 * _bare(doubled, x))   # forward runs _forward_masks
    tripled = Tripled([rk.LSTM(4, seed=1)]).build((None, 5, 3))
    np.testing.assert_array_equal(tripled(x), 3 * _bare(tripled, x))   # model(x) is forward
