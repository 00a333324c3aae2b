"""Contract audit: the PyTorch-layout networks (``rnnkit.rnn.lstm / gru``) hold parameters only.

The architecture: "Layers hold parameters, contexts hold passes" — a pass never changes a layer,
and a layer's outputs follow its current weights (also after ``with_random_state`` redraws
them or ``set_weight`` replaces one).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import rnn


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _snapshot(net: rnn.RNNNet) -> dict[str, object]:
    """Every attribute of the net, sub-layers by identity (a pass must not replace them)."""
    out: dict[str, object] = {}
    for k, v in vars(net).items():
        if k == "_weights":
            out[k] = {n: (id(a), a.tobytes()) for n, a in v.items()}
        elif k == "_layers":
            out[k] = {key: id(lay) for key, lay in v.items()}
        else:
            out[k] = copy.copy(v)
    return out


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_with_random_state_on_a_built_net_gives_the_new_seeds_outputs(mode: str) -> None:
    make = getattr(rnn, mode)
    cfg = rnn.RNNConfig(num_layers=2, bidirectional=True)
    x = _x((2, 5, 3)).astype(np.float32)
    net = make(3, 4, cfg, seed=1)
    before = net.predict(x)
    net.with_random_state(7)
    fresh = make(3, 4, cfg, seed=7)
    for name, w in fresh.state_dict().items():
        np.testing.assert_array_equal(net.weight(name), w)
    np.testing.assert_array_equal(net.predict(x), fresh.predict(x))
    assert np.abs(net.predict(x) - before).max() > 1e-3
    out, state = net.seq(x)
    np.testing.assert_array_equal(out, fresh.seq(x)[0])


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_set_weight_changes_the_outputs_like_a_torch_style_loop(mode: str) -> None:
    """One weight replaced by hand: the output equals a plain float64 loop of PyTorch's
    equations over the new weights (so no stale copy is used anywhere)."""
    net = getattr(rnn, mode)(3, 2, rnn.RNNConfig(), seed=2, dtype="float64")
    x = _x((2, 4, 3), 3)
    net.predict(x)  # a pass first: nothing it did may survive the change below
    new = _x(net.weight("weight_hh_l0").shape, 4)
    net.set_weight("weight_hh_l0", new)
    w = net.state_dict()
    Wi, Wh, bi, bh = w["weight_ih_l0"], w["weight_hh_l0"], w["bias_ih_l0"], w["bias_hh_l0"]
    np.testing.assert_array_equal(Wh, new)

    def sig(a: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-a))

    H = 2
    h = np.zeros((2, H))
    c = np.zeros((2, H))
    for t in range(4):
        gi = x[:, t] @ Wi.T + bi
        gh = h @ Wh.T + bh
        if mode == "lstm":
            a = gi + gh
            i, f, g, o = sig(a[:, :H]), sig(a[:, H:2 * H]), np.tanh(a[:, 2 * H:3 * H]), sig(a[:, 3 * H:])
            c = f * c + i * g
            h = o * np.tanh(c)
        else:  # PyTorch: r, z, n; reset after the matmul
            r = sig(gi[:, :H] + gh[:, :H])
            z = sig(gi[:, H:2 * H] + gh[:, H:2 * H])
            n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
            h = (1 - z) * n + z * h
    np.testing.assert_allclose(net.predict(x)[:, -1], h, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_passes_leave_the_net_unchanged(mode: str) -> None:
    net = getattr(rnn, mode)(3, 4, rnn.RNNConfig(num_layers=2, bidirectional=True, dropout=0.3),
                             seed=5, dtype="float64")
    x = _x((2, 5, 3))
    snap = _snapshot(net)
    net.predict(x)
    net.seq(x)
    net.step(x[:, 0], net.zero_state(2))
    ctx = rk.Ctx.training(0)
    y = net.forward(x, ctx)
    net.backward(np.ones_like(y), ctx)
    assert _snapshot(net) == snap
