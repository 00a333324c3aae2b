"""ConvLSTM1D / ConvLSTM2D step by step: ``zero_state`` / ``step`` / ``seq`` / ``seq_init``
against the layer's whole-sequence forward, the recorded ``seq_init`` pass against float64
central differences, the carried state of a ``stateful`` layer, and typed refusals.

Tolerances. float64: the step-by-step run computes every step's products on one frame instead
of all frames in one product, the same sums in another blocking: rounding, a few 1e-16 per
operation: 1e-12. float32: each pre-activation is a sum of K = prod(kernel_size) * (C + F)
products of terms below ``w * x`` (weights below 0.5, inputs and states below ~3), so another
summation order moves it by at most K * eps32 * 0.5 * 3; the gates contract it (sigmoid' <= 1/4,
tanh' <= 1) and ``c`` adds the error of every step (T of them): ``T * K * eps32 * 1.5``. The
gradient check is float64 central differences with h = 1e-6 (truncation ~h^2 ~ 1e-12, rounding
~1e-16 / h = 1e-10): relative 1e-7.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk

EPS32 = float(np.finfo(np.float32).eps)


def _layer(rank: int, dtype: str, **kw: Any) -> Any:
    if rank == 1:
        layer = rk.ConvLSTM1D(3, 3, padding="same", seed=4, dtype=dtype, **kw)
        layer.build((None, None, 7, 2))
    else:
        layer = rk.ConvLSTM2D(2, (2, 3), strides=(2, 1), seed=4, dtype=dtype, **kw)
        layer.build((None, None, 5, 4, 2))
    rng = np.random.default_rng(rank)
    for n in layer.weight_names:
        layer.set_weight(n, rng.uniform(-0.5, 0.5, layer.weight(n).shape))
    return layer


def _x(layer: Any, B: int, T: int, seed: int = 0) -> np.ndarray:
    shape = (B, T, *layer.input_shape.dims[2:])
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(layer.dtype)


def _f32_tol(layer: Any, T: int) -> float:
    K = int(np.prod(layer.kernel_size)) * (layer.input_shape.dims[-1] + layer.filters)
    return T * K * EPS32 * 1.5


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("rank", [1, 2])
def test_steps_equal_the_whole_sequence(rank: int, dtype: str) -> None:
    layer = _layer(rank, dtype, return_sequences=True, return_state=True)
    B, T = 3, 5
    x = _x(layer, B, T)
    want, h_want, c_want = layer.predict(x)
    tol = 1e-12 if dtype == "float64" else _f32_tol(layer, T)
    state = layer.zero_state(B)
    assert state.h.shape == want.shape[:1] + want.shape[2:] and not state.h.any() and not state.c.any()
    for t in range(T):
        state = layer.step(x[:, t], state)
        np.testing.assert_allclose(state.h, want[:, t], atol=tol, rtol=0)
    np.testing.assert_allclose(state.c, c_want, atol=tol, rtol=0)
    seq, fin = layer.seq(x)
    np.testing.assert_allclose(seq, want, atol=tol, rtol=0)
    np.testing.assert_allclose(fin.h, h_want, atol=tol, rtol=0)
    # the state carried across calls: two pieces, then single steps, equal the whole
    first, mid = layer.seq(x[:, :2])
    rest, end = layer.seq_init(x[:, 2:4], mid)
    last = layer.step(x[:, 4], end)
    np.testing.assert_allclose(np.concatenate([first, rest], 1), want[:, :4], atol=tol, rtol=0)
    np.testing.assert_allclose(last.h, h_want, atol=tol, rtol=0)
    np.testing.assert_allclose(last.c, c_want, atol=tol, rtol=0)
    # a plain tuple is a state too, and seq_init(x, state) equals forward([x, h0, c0])
    h0 = np.asarray(mid.h) * 0.5
    c0 = np.asarray(mid.c) - 0.25
    s2, f2 = layer.seq_init(x, (h0, c0))
    o2, hh, cc = layer.forward([x, h0, c0], rk.Ctx.inference())
    np.testing.assert_allclose(s2, o2, atol=tol, rtol=0)
    np.testing.assert_allclose(f2.c, cc, atol=tol, rtol=0)


def test_streaming_leaves_a_stateful_layer_alone_and_states_set() -> None:
    layer = _layer(1, "float64", return_sequences=True, stateful=True)
    x = _x(layer, 2, 4)
    assert layer.states is None
    want = layer.predict(x)
    carried = layer.states
    layer.seq(x[:, :2])
    layer.step(x[:, 0], layer.zero_state(2))
    assert all(np.array_equal(a, b) for a, b in zip(layer.states, carried, strict=True))
    layer.reset_state()
    layer.predict(x[:, :2])
    np.testing.assert_allclose(layer.predict(x[:, 2:]), want[:, 2:], atol=1e-12, rtol=0)
    _, mid = layer.seq(x[:, :3])
    layer.reset_state(mid)
    np.testing.assert_allclose(layer.predict(x[:, 3:]), want[:, 3:], atol=1e-12, rtol=0)


@pytest.mark.parametrize("given", [True, False])
@pytest.mark.parametrize("rank", [1, 2])
def test_recorded_seq_init_gradients_equal_finite_differences(rank: int, given: bool) -> None:
    layer = _layer(rank, "float64")
    B, T = 2, 3
    x = _x(layer, B, T, seed=5).astype(np.float64)
    rng = np.random.default_rng(6)
    grid = layer.zero_state(B).h.shape
    h0, c0 = rng.uniform(-1, 1, grid), rng.uniform(-1, 1, grid)
    G = rng.standard_normal((B, T, *grid[1:]))
    Gh, Gc = rng.standard_normal(grid), rng.standard_normal(grid)

    def loss(xx: np.ndarray, hh: np.ndarray, cc: np.ndarray) -> float:
        seq, fin = layer.seq_init(xx, (hh, cc) if given else None)
        return float(np.sum(seq * G) + np.sum(fin.h * Gh) + np.sum(fin.c * Gc))

    ctx = rk.Ctx.training()
    layer.seq_init(x, (h0, c0) if given else None, ctx)
    dx, d_state = layer.backward((G, (Gh, Gc)), ctx)
    assert (d_state is None) is not given
    h = 1e-6

    def fd(arr: np.ndarray, f: Any) -> np.ndarray:
        out = np.empty_like(arr)
        for i in np.ndindex(arr.shape):
            old = arr[i]
            arr[i] = old + h
            up = f()
            arr[i] = old - h
            out[i] = (up - f()) / (2 * h)
            arr[i] = old
        return out

    def rel(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.abs(a - b).max() / np.abs(b).max())

    assert rel(dx, fd(x, lambda: loss(x, h0, c0))) < 1e-7
    if given:
        assert rel(d_state.h, fd(h0, lambda: loss(x, h0, c0))) < 1e-7
        assert rel(d_state.c, fd(c0, lambda: loss(x, h0, c0))) < 1e-7
    for n in layer.weight_names:
        w = np.array(layer.weight(n))

        def lw(w: np.ndarray = w, n: str = n) -> float:
            layer.set_weight(n, w)
            return loss(x, h0, c0)

        num = fd(w, lw)
        layer.set_weight(n, w)
        assert rel(ctx.grad(layer, n), num) < 1e-7, n


def test_bad_states_and_steps_are_typed() -> None:
    layer = _layer(2, "float32")
    x = _x(layer, 2, 3)
    st = layer.zero_state(2)
    with pytest.raises(rk.InvalidInputError,
                       match=r"state 'c' must have shape \(2, 2, 2, 2\), got \(2, 2, 2\)"):
        layer.seq_init(x, (st.h, st.c[..., 0]))
    with pytest.raises(rk.InvalidInputError, match="expected a ConvLSTMState"):
        layer.step(x[:, 0], st.h)
    with pytest.raises(rk.InvalidInputError, match=r"step: expected one timestep \(batch, 5, 4, 2\)"):
        layer.step(x, st)
    with pytest.raises(rk.InvalidParameterError, match="batch"):
        layer.zero_state(0)
    with pytest.raises(rk.NotBuiltError):
        rk.ConvLSTM1D(2, 2).zero_state(1)
    ctx = rk.Ctx.training()
    layer.seq(x, ctx)
    with pytest.raises(rk.InvalidInputError, match=r"backward\(\(d_seq, d_final_state\), ctx\)"):
        layer.backward(np.zeros((2, 3, 3, 2, 2)), ctx)


def test_served_streams_equal_predict() -> None:
    """``rnnkit serve``'s streams over a ConvLSTM2D model: the step plan fed a sequence in
    pieces (two streams batched, as timestep grids and as flattened binary timesteps) gives what
    predict gives for the whole, and a JSON step over HTTP gives the prefix's prediction.
    float64 plan: 1e-12 (the same arithmetic on pieces, rounding); float32 HTTP: the bound of
    test_steps_equal_the_whole_sequence, carried through the Dense layer (weights below 1, 2
    filters x positions terms): 10x it."""
    pytest.importorskip("starlette")
    from rnnkit.serve._stepper import plan_streams

    def model(dtype: str) -> Any:
        conv = _layer(2, dtype, return_sequences=True)
        m = rk.Sequential([conv, rk.Dense(3, seed=2, dtype=dtype)], input_shape=(None, None, 5, 4, 2))
        m.layers[0].set_weights(conv.get_weights())
        return m

    m64 = model("float64")
    plan, why = plan_streams(m64, [1, 2])
    assert plan is not None, why
    assert plan.describe()["step_input"] == ["T", 5, 4, 2]
    x = _x(m64.layers[0], 2, 5, seed=7)
    want = m64.predict(x)
    for flat in (False, True):
        states = plan.stack([plan.zero(), plan.zero()])
        outs = []
        for t0, t1 in ((0, 2), (2, 3), (3, 5)):
            piece = x[:, t0:t1]
            y, states = plan.step(piece.reshape(2, t1 - t0, -1) if flat else piece, states)
            outs.append(y)
        np.testing.assert_allclose(np.concatenate(outs, 1), want, atol=1e-12, rtol=0)
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    m32 = model("float32")
    xs = _x(m32.layers[0], 1, 3, seed=8)[0]
    with TestClient(rk.serve.app(m32)) as c:
        sid = c.post("/v1/streams").json()["id"]
        got = [c.post(f"/v1/streams/{sid}/step", json={"seq": t + 1, "x": xs[t:t + 1].tolist()}).json()
               for t in range(3)]
    for t in range(3):
        want32 = m32.predict(xs[None, :t + 1])[0, -1]
        np.testing.assert_allclose(np.asarray(got[t]["outputs"], np.float32).reshape(want32.shape), want32,
                                   atol=10 * _f32_tol(m32.layers[0], t + 1), rtol=0)
