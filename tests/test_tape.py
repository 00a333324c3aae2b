"""``rk.GradientTape`` semantics (TensorFlow's): persistent tapes, watch, None for what the
target does not reach, nested sources, output_gradients, a value used twice; ``rk.ops``'
values and dtypes against Keras 3; the typed errors of bad input; and
``optimizer.apply_gradients(zip(grads, weights))``.

Expected gradients are closed forms written in the test (float64; 1e-12 covers the few
roundings of each formula)."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip
from rnnkit import ops


def test_outside_a_tape_ops_take_and_return_numpy_arrays() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    s = ops.sum(ops.multiply(x, x))
    assert type(s) is np.ndarray and float(s) == 30.0
    np.testing.assert_array_equal(np.asarray(ops.softmax(np.zeros(4))), np.full(4, 0.25))


def test_a_value_used_twice_sums_its_gradients() -> None:
    x = np.array([0.3, -1.2, 0.7])
    with rk.GradientTape() as tape:
        tape.watch(x)
        y = ops.tanh(x)
        z = ops.add(ops.multiply(y, y), y)          # y*y + y: y reaches z along three edges
    (g,) = tape.gradient(z, [x])
    t = np.tanh(x)
    np.testing.assert_allclose(g, (2 * t + 1) * (1 - t * t), rtol=1e-12)


def test_gradient_with_respect_to_an_intermediate_and_output_gradients() -> None:
    x = np.array([1.0, 2.0, 3.0])
    w = np.array([0.5, -1.0, 2.0])
    with rk.GradientTape() as tape:
        tape.watch(x)
        h = ops.exp(x)
        y = ops.multiply(h, 3.0)
    gh, gx = tape.gradient(y, [h, x], output_gradients=w)
    np.testing.assert_allclose(gh, 3 * w, rtol=1e-12)
    np.testing.assert_allclose(gx, 3 * w * np.exp(x), rtol=1e-12)


def test_a_non_scalar_target_is_summed_as_tensorflow_does() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    with rk.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = ops.square(x)
        s = ops.sum(y)
    np.testing.assert_array_equal(tape.gradient(y, x), tape.gradient(s, x))
    np.testing.assert_allclose(tape.gradient(y, x), 2 * x, rtol=1e-12)


def test_persistent_tape_gives_the_same_gradient_twice_and_a_plain_one_refuses() -> None:
    x = np.array([0.5, 1.5])
    with rk.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = ops.sum(ops.log(x))
    first = tape.gradient(y, x)
    np.testing.assert_array_equal(first, tape.gradient(y, x))
    np.testing.assert_allclose(first, 1 / x, rtol=1e-12)
    with rk.GradientTape() as once:
        once.watch(x)
        y = ops.sum(ops.log(x))
    once.gradient(y, x)
    with pytest.raises(rk.TapeError, match="second call"):
        once.gradient(y, x)


def test_unwatched_and_unreached_sources_get_none_or_zeros() -> None:
    x, c, u = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0])
    with rk.GradientTape(persistent=True) as tape:
        tape.watch(x)
        tape.watch(u)
        y = ops.sum(ops.multiply(x, c))             # c is not watched: a constant
    assert tape.gradient(y, [c, u]) == [None, None]
    got = tape.gradient(y, {"u": u, "x": (x,)}, unconnected_gradients="zero")
    assert set(got) == {"u", "x"} and isinstance(got["x"], tuple)
    np.testing.assert_array_equal(got["u"], np.zeros(1))
    np.testing.assert_array_equal(got["x"][0], c)


def test_stop_gradient_and_stop_recording_cut_the_path() -> None:
    x = np.array([2.0])
    with rk.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = ops.multiply(ops.stop_gradient(ops.square(x)), x)    # d/dx = x^2 (held constant)
        with tape.stop_recording():
            z = ops.square(x)
    np.testing.assert_allclose(tape.gradient(y, x), [4.0])
    assert tape.gradient(z, x) is None


def test_nested_tapes_both_record() -> None:
    x = np.array([0.4])
    with rk.GradientTape() as outer:
        outer.watch(x)
        with rk.GradientTape() as inner:
            inner.watch(x)
            y = ops.tanh(x)
        g_inner = inner.gradient(y, x)
    np.testing.assert_allclose(g_inner, outer.gradient(y, x), rtol=0)
    np.testing.assert_allclose(g_inner, 1 - np.tanh(x) ** 2, rtol=1e-12)


def test_dtypes_follow_keras() -> None:
    keras = keras_or_skip()
    k = keras.ops
    i32, f32, f64 = np.array([1, 2], "int32"), np.array([1.5, 2.5], "float32"), np.array([1.0, 2.0])
    cases = [
        (ops.add(i32, f32), k.add(i32, f32)), (ops.add(f32, f64), k.add(f32, f64)),
        (ops.add(i32, 2.5), k.add(i32, 2.5)), (ops.multiply(f32, 2.0), k.multiply(f32, 2.0)),
        (ops.divide(i32, i32), k.divide(i32, i32)), (ops.exp(i32), k.exp(i32)),
        (ops.sqrt(i32), k.sqrt(i32)), (ops.mean(i32), k.mean(i32)), (ops.sum(i32), k.sum(i32)),
        (ops.argmax(f32), k.argmax(f32)),
        (ops.convert_to_tensor([1.0, 2.0]), k.convert_to_tensor([1.0, 2.0])),
        (ops.convert_to_tensor([1, 2]), k.convert_to_tensor([1, 2])), (ops.cumsum(i32), k.cumsum(i32)),
        (ops.one_hot(np.array([1, -1]), 3), k.one_hot(np.array([1, -1]), 3)),
    ]
    for ours, theirs in cases:
        t = keras.ops.convert_to_numpy(theirs)
        assert ours.dtype == t.dtype, (ours, t)
        np.testing.assert_allclose(ours, t, rtol=1e-6)


@pytest.mark.parametrize("call,match", [
    (lambda: ops.add(np.ones((2, 3)), np.ones((4,))), r"ops.add: the shapes of x1 \(2, 3\) and x2 \(4,\)"),
    (lambda: ops.matmul(np.ones((2, 3)), np.ones((4, 5))), r"ops.matmul: x1's last axis \(3"),
    (lambda: ops.multiply(np.array(["a"]), 1.0), r"ops.multiply: x1 must hold real numbers.*<U1"),
    (lambda: ops.concatenate([np.ones((2, 3)), np.ones((3, 3))], axis=1), r"xs\[1\] has shape \(3, 3\)"),
    (lambda: ops.sum(np.ones((2, 3)), axis=2), r"ops.sum: axis \(of an input of rank 2\) must be an int in "
                                                r"\[-2, 1\], got 2"),
    (lambda: ops.reshape(np.ones(6), (4, -1)), r"cannot give shape \(4, -1\) to an array of shape \(6,\)"),
    (lambda: ops.take(np.ones(3), np.array([3])), r"indices must be in \[-3, 3\)"),
    (lambda: ops.one_hot(np.array([0, 3]), 3), r"smaller than num_classes=3, got 3"),
    (lambda: ops.stack([np.ones(2), np.ones(3)]), r"x\[1\] has shape \(3,\)"),
])
def test_bad_input_is_a_typed_error_naming_expected_and_given(call: object, match: str) -> None:
    with pytest.raises(rk.InvalidInputError, match=match):
        call()  # type: ignore[operator]


def test_tape_misuse_is_typed() -> None:
    x = np.array([1.0, 2.0])
    with rk.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = ops.square(x)
    with pytest.raises(rk.InvalidInputError,
                       match=r"output_gradients must have the target's shape \(2,\), got \(3,\)"):
        tape.gradient(y, x, output_gradients=np.ones(3))
    with pytest.raises(rk.TapeError, match="a target must be an array"):
        tape.gradient(3.0, x)
    with pytest.raises(rk.TapeError, match="a source must be an array"):
        tape.gradient(y, ["kernel"])
    with pytest.raises(rk.InvalidInputError, match="expected a float array, got dtype int64"):
        tape.watch(np.array([1, 2]))


def test_apply_gradients_takes_keras_pairs_and_steps_like_triples() -> None:
    def fresh() -> rk.Dense:
        d = rk.Dense(3, seed=1, dtype="float64")
        d.build((None, 2))
        return d
    a, b = fresh(), fresh()
    ga = [np.full((2, 3), 0.5), np.array([1.0, -1.0, 2.0])]
    opt_a, opt_b = rk.Adam(0.1), rk.Adam(0.1)
    opt_a.apply_gradients(zip(ga, [(a, "kernel"), (a, "bias")], strict=True))
    opt_b.apply_gradients([(b, "kernel", ga[0]), (b, "bias", ga[1])])
    for n in ("kernel", "bias"):
        np.testing.assert_array_equal(a.weight(n), b.weight(n))
    before = a.weight("bias").copy()
    opt_a.apply_gradients([(ga[0], (a, "kernel")), (None, (a, "bias"))])   # None: skipped, as Keras
    np.testing.assert_array_equal(a.weight("bias"), before)
    with pytest.raises(rk.InvalidInputError, match="no gradient for any weight"):
        opt_a.apply_gradients([(None, (a, "kernel"))])
    with pytest.raises(rk.InvalidInputError, match=r"names the weight as \(layer, weight name\)"):
        opt_a.apply_gradients([(ga[0], a.weight("kernel"))])


def test_every_gradient_returned_is_storage_of_its_own() -> None:
    a = np.array([1.0, 2.0])
    b = np.array([3.0, 4.0])
    with rk.GradientTape() as tape:
        tape.watch(a)
        tape.watch(b)
        y = rk.ops.sum(rk.ops.add(a, b))
    ga, gb = tape.gradient(y, [a, b])
    assert not np.shares_memory(ga, gb)
    ga *= 10.0                       # a caller clipping one gradient in place leaves the other
    np.testing.assert_array_equal(gb, [1.0, 1.0])


def test_a_layer_called_three_times_sums_in_place_and_each_request_is_its_own_array() -> None:
    """The walk sums a weight's gradients of several calls into the first call's array and hands
    that sum out as it is, once: a weight named twice among the sources (as a pair and by its
    live array) gets two arrays of their own, both the closed form, and a persistent tape's
    second walk sums afresh (its first results are not changed in place)."""
    dense = rk.Dense(2, dtype="float64")
    dense.build((None, 3))
    dense.set_weights(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([0.5, -0.5]))
    xs = [np.array([[1.0, 2.0, 3.0]]), np.array([[0.0, -1.0, 2.0]]), np.array([[4.0, 0.5, -2.0]])]
    with rk.GradientTape(persistent=True) as tape:
        loss = ops.sum(ops.add(ops.add(dense(xs[0]), dense(xs[1])), dense(xs[2])))
    # d loss / d kernel = sum over calls of x^T @ ones(1, 2); d loss / d bias = 3 * ones
    want_k = sum(x.T @ np.ones((1, 2)) for x in xs)
    first = tape.gradient(loss, [(dense, "kernel"), dense.weight("kernel"), (dense, "bias")])
    np.testing.assert_array_equal(first[0], want_k)
    np.testing.assert_array_equal(first[1], want_k)
    np.testing.assert_array_equal(first[2], [3.0, 3.0])
    assert not np.shares_memory(first[0], first[1])
    first[0] *= 10.0                   # a caller scaling one leaves the other
    np.testing.assert_array_equal(first[1], want_k)
    again = tape.gradient(loss, [(dense, "kernel")])
    np.testing.assert_array_equal(again[0], want_k)
    np.testing.assert_array_equal(first[1], want_k)
