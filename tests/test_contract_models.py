"""Contract audit (model names and signatures, architecture, reliability) for models, checked with numbers:

- ``fit(x, y, epochs)`` is ONE full-batch gradient step per epoch and
  ``fit_with_batches(x, y, epochs, batch_size)`` one step per batch: the weights after training
  equal SGD steps computed by hand;
- a graph model has ``forward`` / ``backward`` like a layer (one input / output a plain array,
  several a list), checked against float64 finite differences, plus ``compile`` / ``fit`` /
  ``predict`` / ``evaluate``;
- model entry points refuse wrong inputs with ``InvalidInputError`` naming expected and given;
- inference and passes leave a model unchanged (models keep no per-call state);
- ``fit`` / ``evaluate`` before ``compile`` say to compile (not to build).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk


def _x(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _dense_model() -> rk.Sequential:
    return rk.SequentialBuilder().add(rk.Dense(2, seed=1, dtype="float64")).build(
        rk.Shape.with_free_batch((5, 3)))


def _mse_step(W: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray,
              lr: float) -> tuple[np.ndarray, np.ndarray]:
    """One SGD step of a linear Dense on MSE = mean over every element (by hand)."""
    p = x @ W + b
    g = 2.0 * (p - y) / p.size
    return W - lr * (x.T @ g), b - lr * g.sum(axis=0)


def test_fit_is_one_full_batch_sgd_step_per_epoch_by_value() -> None:
    x, y = _x((5, 3), 0), _x((5, 2), 1)
    m = _dense_model().compile(rk.SGD(0.1), rk.MeanSquaredError())
    W, b = np.array(m.layers[0].weight("kernel")), np.array(m.layers[0].weight("bias"))
    m.fit(x, y, 3)
    for _ in range(3):
        W, b = _mse_step(W, b, x, y, 0.1)
    np.testing.assert_allclose(m.layers[0].weight("kernel"), W, rtol=1e-12)
    np.testing.assert_allclose(m.layers[0].weight("bias"), b, rtol=1e-12)


@pytest.mark.parametrize("style", ["positional", "keywords"])
def test_fit_with_batches_is_one_step_per_batch_by_value(style: str) -> None:
    x, y = _x((5, 3), 2), _x((5, 2), 3)
    m = _dense_model().compile(rk.SGD(0.05), "mse")
    W, b = np.array(m.layers[0].weight("kernel")), np.array(m.layers[0].weight("bias"))
    if style == "positional":
        m.fit_with_batches(x, y, 2, 2, shuffle=False)
    else:
        m.fit_with_batches(x, y, epochs=2, batch_size=2, shuffle=False)
    for _ in range(2):
        for a in (0, 2, 4):  # batches of 2, 2, 1 in order
            W, b = _mse_step(W, b, x[a:a + 2], y[a:a + 2], 0.05)
    np.testing.assert_allclose(m.layers[0].weight("kernel"), W, rtol=1e-12)
    np.testing.assert_allclose(m.layers[0].weight("bias"), b, rtol=1e-12)


def _two_in_two_out() -> rk.GraphModel:
    b = rk.GraphBuilder()
    seq = b.input(rk.Shape.with_free_batch((2, 3, 2)))
    vec = b.input(rk.Shape.with_free_batch((2, 2)))
    h = b.add(rk.GRU(3, seed=1, dtype="float64"), [seq])
    cat = b.add(rk.Concatenate(-1, dtype="float64"), [h, vec])
    o1 = b.add(rk.Dense(1, "tanh", seed=2, dtype="float64"), [cat])
    o2 = b.add(rk.Dense(2, seed=3, dtype="float64"), [h])
    return b.build([o1, o2])


def _loss(model: Any, xs: list[np.ndarray], gs: list[np.ndarray]) -> float:
    outs = model.predict(xs)
    return float(sum((o * g).sum() for o, g in zip(outs, gs, strict=True)))


def test_graph_model_forward_backward_with_lists_matches_finite_differences() -> None:
    m = _two_in_two_out()
    xs = [_x((2, 3, 2), 4), _x((2, 2), 5)]
    gs = [_x((2, 1), 6), _x((2, 2), 7)]
    ctx = rk.Ctx.training()
    outs = m.forward(xs, ctx)
    assert isinstance(outs, list) and [o.shape for o in outs] == [(2, 1), (2, 2)]
    dxs = m.backward(gs, ctx)
    assert isinstance(dxs, list) and len(dxs) == 2
    eps = 1e-6
    for k in range(2):  # input gradients
        num = np.zeros_like(xs[k])
        for idx in np.ndindex(xs[k].shape):
            hi = [a.copy() for a in xs]
            lo = [a.copy() for a in xs]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            num[idx] = (_loss(m, hi, gs) - _loss(m, lo, gs)) / (2 * eps)
        np.testing.assert_allclose(dxs[k], num, rtol=1e-6, atol=1e-9)
    for key, (layer, wname) in m.named_weights().items():  # weight gradients, under node names
        w0 = np.array(layer.weight(wname))
        num = np.zeros_like(w0)
        for idx in np.ndindex(w0.shape):
            for sign in (1, -1):
                w = w0.copy()
                w[idx] += sign * eps
                layer.set_weight(wname, w)
                num[idx] += sign * _loss(m, xs, gs) / (2 * eps)
            layer.set_weight(wname, w0)
        np.testing.assert_allclose(ctx.grad(layer, wname), num, rtol=1e-6, atol=1e-9, err_msg=key)


def test_graph_model_one_input_one_output_takes_plain_arrays() -> None:
    b = rk.GraphBuilder()
    i = b.input(rk.Shape.known((4, 3, 2)))
    h = b.add(rk.LSTM(3, seed=1, dtype="float64"), [i])
    o = b.add(rk.Dense(1, seed=2, dtype="float64"), [h])
    g = b.build(o)
    x = _x((4, 3, 2), 8)
    ctx = rk.Ctx.training()
    y = g.forward(x, ctx)
    assert isinstance(y, np.ndarray)
    dx = g.backward(np.ones_like(y), ctx)
    assert isinstance(dx, np.ndarray) and dx.shape == x.shape
    lay_h, lay_o = h.layer, o.layer
    seq = rk.Sequential([lay_h, lay_o])  # the same layers as a stack: the same numbers
    seq.build((None, 3, 2))
    c2 = rk.Ctx.training()
    np.testing.assert_array_equal(seq.forward(x, c2), y)
    np.testing.assert_array_equal(seq.backward(np.ones_like(y), c2), dx)
    np.testing.assert_array_equal(g.predict(x), y)
    np.testing.assert_array_equal(g.predict([x]), y)


def test_graph_model_compile_fit_predict_evaluate_with_lists_by_value() -> None:
    m = _two_in_two_out()
    xs = [_x((6, 3, 2), 9), _x((6, 2), 10)]
    ys = [_x((6, 1), 11), _x((6, 2), 12)]
    assert m.compile(rk.SGD(0.1), rk.MeanSquaredError()) is m
    before = m.get_weights()
    # by hand: one full-batch SGD step on the summed MSE of both outputs
    ctx = rk.Ctx.training()
    outs = m.forward(xs, ctx)
    m.backward([2.0 * (o - y) / o.size for o, y in zip(outs, ys, strict=True)], ctx)
    want = [w - 0.1 * ctx.grad(layer, n) for w, (layer, n) in zip(before, m.trainable_weights(), strict=True)]
    loss0 = sum(float(np.mean((o - y) ** 2)) for o, y in zip(outs, ys, strict=True))
    hist = m.fit(xs, ys, 1)
    np.testing.assert_allclose(hist.history["loss"][0], loss0, rtol=1e-12)
    for got, w in zip(m.get_weights(), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-14)
    preds = m.predict(xs)
    assert m.evaluate(xs, ys) == pytest.approx(
        sum(float(np.mean((p - y) ** 2)) for p, y in zip(preds, ys, strict=True)), rel=1e-12)
    np.testing.assert_array_equal(m.predict(xs, batch_size=4)[1], preds[1])


def _seq_model() -> rk.Sequential:
    return rk.SequentialBuilder().add(rk.LSTM(3, seed=1)).add(rk.Dense(1, seed=2)).build(
        rk.Shape.with_free_batch((4, 5, 2)))


def test_model_entry_points_refuse_wrong_inputs_naming_expected_and_given() -> None:
    m = _seq_model().compile("adam", "mse")
    x, y = np.ones((4, 5, 2)), np.ones((4, 1))
    for bad, given in ((np.ones((4, 5, 3)), r"\(4, 5, 3\)"), (np.ones((4, 5)), r"\(4, 5\)"),
                       (np.ones((4, 6, 2)), r"\(4, 6, 2\)")):
        for call in (lambda: m.predict(bad), lambda: m.forward(bad, rk.Ctx.inference()),  # noqa: B023
                     lambda: m.fit(bad, y, 1), lambda: m.evaluate(bad, y)):  # noqa: B023
            with pytest.raises(rk.InvalidInputError, match=given + r".*built for \(None, 5, 2\)"):
                call()
    with pytest.raises(rk.InvalidInputError, match=r"y_true shape \(4, 2\).*y_pred shape \(4, 1\)"):
        m.fit(x, np.ones((4, 2)), 1)
    with pytest.raises(rk.InvalidInputError, match=r"\(3, 1\).*expected 4 samples"):
        m.fit(x, np.ones((3, 1)), 1)
    ctx = rk.Ctx.training()
    m.forward(x, ctx)
    with pytest.raises(rk.InvalidInputError, match=r"shape \(4, 1\), got \(4, 3\)"):
        m.backward(np.ones((4, 3)), ctx)
    g = _two_in_two_out()
    xs = [np.ones((2, 3, 2)), np.ones((2, 2))]
    with pytest.raises(rk.InvalidInputError, match="expected 2 input array.*got one array"):
        g.predict(xs[0])
    with pytest.raises(rk.InvalidInputError, match="expected 2 input array.*got a list of 3"):
        g.predict([*xs, xs[1]])
    with pytest.raises(rk.InvalidInputError, match=r"input 1 has shape \(2, 3\).*\(None, 2\)"):
        g.predict([xs[0], np.ones((2, 3))])
    with pytest.raises(rk.InvalidInputError, match="different sample counts"):
        g.predict([xs[0], np.ones((3, 2))])


def _state(model: Any) -> Any:
    out = {k: v for k, v in vars(model).items() if k not in ("_build_lock",)}
    layers = model.layers
    return repr(out), [(id(lay), sorted(vars(lay)), [(e.name, e.value.tobytes()) for e in lay.weights()])
                       for lay in layers]


@pytest.mark.parametrize("which", ["sequential", "graph"])
def test_passes_predict_and_evaluate_leave_the_model_unchanged(which: str) -> None:
    if which == "sequential":
        m: Any = _seq_model().compile("adam", "mse")
        x: Any = _x((4, 5, 2), 13)
        y: Any = _x((4, 1), 14)
        g: Any = np.ones((4, 1))
    else:
        m = _two_in_two_out().compile("adam", "mse")
        x = [_x((2, 3, 2), 13), _x((2, 2), 14)]
        y = [_x((2, 1), 15), _x((2, 2), 16)]
        g = [np.ones((2, 1)), np.ones((2, 2))]
    before = _state(m)
    m.predict(x)
    m.evaluate(x, y)
    m.summary(print_fn=None)
    ctx = rk.Ctx.training()
    m.forward(x, ctx)
    m.backward(g, ctx)
    assert _state(m) == before


def test_fit_and_evaluate_before_compile_say_compile() -> None:
    m = _seq_model()
    for call in (lambda: m.fit(np.ones((4, 5, 2)), np.ones((4, 1)), 1),
                 lambda: m.evaluate(np.ones((4, 5, 2)), np.ones((4, 1)))):
        with pytest.raises(rk.NotBuiltError, match=r"compile\(optimizer, loss\)") as info:
            call()
        assert "build(shape)" not in str(info.value)
