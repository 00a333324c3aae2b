"""``rnnkit.rnn`` networks are the library's own recurrent layers: an ``rnn.lstm`` / ``rnn.gru``
of two bidirectional layers gives the outputs, input gradients and weight gradients of the same
stack built by hand from ``rk.Bidirectional(rk.LSTM / rk.GRU)`` with the weights copied (PyTorch's
layout converted by hand here: transposes, the LSTM's two biases summed, the GRU's ``r, z``
blocks swapped). float64: both run the same walker on the same numbers, so they agree to
rounding (1e-12 relative; the summed bias adds one rounding per gate pre-activation).

And an optimizer step on a net moves no data it need not: the direction layers' kernels of an
LSTM are views of the net's parameters after a step (no per-parameter rebuild or copy)."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import rnn

B, T, F, H = 3, 6, 4, 5


def _swap_rz(a: np.ndarray) -> np.ndarray:
    """PyTorch's GRU blocks r, z, n -> rnnkit's z, r, n (axis 0)."""
    return np.concatenate([a[H:2 * H], a[:H], a[2 * H:]])


def _stack(net: rnn.RNNNet, mode: str) -> list[rk.Bidirectional]:
    """The net's two bidirectional layers as rk.Bidirectional over rk.LSTM / rk.GRU, weights copied."""
    sd = net.state_dict()
    out = []
    for k in range(2):
        make = (lambda: rk.LSTM(H, return_sequences=True, dtype="float64")) if mode == "lstm" else (
            lambda: rk.GRU(H, reset_after=True, return_sequences=True, dtype="float64"))
        bi = rk.Bidirectional(make())
        bi.build((None, T, F if k == 0 else 2 * H))
        for role, sfx in (("forward", f"_l{k}"), ("backward", f"_l{k}_reverse")):
            wi, wh, bi_, bh = (sd[n + sfx] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            if mode == "lstm":
                kernel, rec, bias = wi.T, wh.T, (bi_ + bh)[None, :]
            else:
                kernel, rec, bias = _swap_rz(wi).T, _swap_rz(wh).T, np.stack([_swap_rz(bi_), _swap_rz(bh)])
            bi.set_weight(f"{role}.kernel", kernel)
            bi.set_weight(f"{role}.recurrent_kernel", rec)
            bi.set_weight(f"{role}.bias", bias)
        out.append(bi)
    return out


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_a_net_has_the_gradients_of_the_same_stack_of_rk_layers(mode: str) -> None:
    net = getattr(rnn, mode)(F, H, rnn.RNNConfig(num_layers=2, bidirectional=True), seed=3, dtype="float64")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, F))
    g = rng.standard_normal((B, T, 2 * H))       # L = sum(y * g)
    stack = _stack(net, mode)

    c1 = rk.Ctx.training(0)
    y = net.forward(x, c1)
    dx = net.backward(g, c1)
    c2 = rk.Ctx.training(0)
    y2 = stack[1].forward(stack[0].forward(x, c2), c2)
    dx2 = stack[0].backward(stack[1].backward(g, c2), c2)
    np.testing.assert_allclose(y, y2, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(dx, dx2, rtol=1e-12, atol=1e-13)
    for k in range(2):
        for role, sfx in (("forward", f"_l{k}"), ("backward", f"_l{k}_reverse")):
            dk, dr, db = (c2.grad(stack[k], f"{role}.{n}") for n in ("kernel", "recurrent_kernel", "bias"))
            fix = (lambda a: a) if mode == "lstm" else _swap_rz   # the swap is an involution
            got = {n: c1.grad(net, n + sfx) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
            np.testing.assert_allclose(got["weight_ih"], fix(dk.T), rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(got["weight_hh"], fix(dr.T), rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(got["bias_ih"], fix(db[0]), rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(got["bias_hh"], fix(db[-1]), rtol=1e-12, atol=1e-13)


def test_an_optimizer_step_leaves_the_lstm_kernels_views_of_the_parameters() -> None:
    net = rnn.lstm(F, H, rnn.RNNConfig(num_layers=2, bidirectional=True), seed=1)
    x = np.random.default_rng(1).standard_normal((B, T, F)).astype(np.float32)
    ctx = rk.Ctx.training(0)
    net.backward(np.ones_like(net.forward(x, ctx)), ctx)
    rk.optimizers.Adam(0.01).apply_gradients([(net, n, g) for (_, n), g in ctx.grads.items()])
    for (k, d), layer in net._layers.items():
        sfx = f"_l{k}" + ("_reverse" if d else "")
        for torch_name, rk_name in (("weight_ih", "kernel"), ("weight_hh", "recurrent_kernel")):
            w = layer.weight(rk_name)
            assert np.shares_memory(w, net.weight(torch_name + sfx)), (torch_name + sfx)
            np.testing.assert_array_equal(w, net.weight(torch_name + sfx).T)
    fresh = rnn.lstm(F, H, rnn.RNNConfig(num_layers=2, bidirectional=True), seed=1)
    fresh.load_state_dict(net.state_dict())
    np.testing.assert_array_equal(net.predict(x), fresh.predict(x))   # a rebuild gives the same
