"""rnnkit.rnn: the lstm / gru networks in PyTorch layout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import rnn


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_matches_torch_outputs_states_and_gradients(
    mode: str, bidirectional: bool, batch_first: bool
) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ref = getattr(torch.nn, mode.upper())(5, 7, num_layers=2, bidirectional=bidirectional,
                                           batch_first=batch_first).double()
    net = getattr(rnn, mode)(5, 7, rnn.RNNConfig(num_layers=2, bidirectional=bidirectional,
                                                 batch_first=batch_first), dtype="float64")
    assert sorted(net.state_dict()) == sorted(ref.state_dict())
    net.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    x = _x((3, 6, 5) if batch_first else (6, 3, 5))
    out, state = net.seq(x)
    tx = torch.tensor(x, requires_grad=True)
    t_out, t_state = ref(tx)
    np.testing.assert_allclose(out, t_out.detach().numpy(), atol=1e-12)
    if mode == "lstm":
        np.testing.assert_allclose(state.h, t_state[0].detach().numpy(), atol=1e-12)
        np.testing.assert_allclose(state.c, t_state[1].detach().numpy(), atol=1e-12)
    else:
        np.testing.assert_allclose(state.h, t_state.detach().numpy(), atol=1e-12)
    g = _x(out.shape, 1)
    (t_out * torch.tensor(g)).sum().backward()
    ctx = rk.Ctx.training()
    np.testing.assert_allclose(net.forward(x, ctx), out, atol=1e-12)
    dx = net.backward(g, ctx)
    np.testing.assert_allclose(dx, tx.grad.numpy(), atol=1e-12)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(ctx.grad(net, name), p.grad.numpy(), atol=1e-11, err_msg=name)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_step_loop_equals_seq_and_seq_init_continues(mode: str) -> None:
    net = getattr(rnn, mode)(4, 6, rnn.RNNConfig(num_layers=2, bidirectional=False), seed=3, dtype="float64")
    x = _x((2, 8, 4))
    out, final = net.seq(x)
    state = net.zero_state(2)
    for t in range(8):
        state = net.step(x[:, t], state)
    h = (lambda s: s.h) if mode == "lstm" else (lambda s: s.h)
    np.testing.assert_allclose(h(state), h(final), atol=1e-13)
    np.testing.assert_allclose(h(final)[-1], out[:, -1], atol=1e-13)  # top layer's last output
    first, mid = net.seq(x[:, :5])
    second, end = net.seq_init(x[:, 5:], mid)
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), out, atol=1e-13)
    np.testing.assert_allclose(h(end), h(final), atol=1e-13)


def test_defaults_follow_the_tch_page() -> None:
    c = rnn.RNNConfig()
    assert (c.has_biases, c.num_layers, c.dropout, c.train, c.bidirectional, c.batch_first) == \
        (True, 1, 0.0, True, False, True)
    net = rnn.lstm(16, 8, seed=0)
    w = net.weight("weight_ih_l0")
    assert w.shape == (32, 16)
    limit = np.sqrt(2.0) * np.sqrt(3.0 / 16)  # Kaiming uniform, fan_in = in_dim
    assert np.abs(w).max() <= limit
    assert np.abs(w).max() > 0.9 * limit
    assert np.all(net.weight("bias_ih_l0") == 0) and np.all(net.weight("bias_hh_l0") == 0)
    out, st = net.seq(np.zeros((4, 3, 16), np.float32))
    assert out.shape == (4, 3, 8) and st.h.shape == (1, 4, 8)


def test_bidirectional_output_width_and_orthogonal_init() -> None:
    cfg = rnn.RNNConfig(num_layers=2, bidirectional=True, w_hh_init=rnn.Init.orthogonal())
    net = rnn.gru(128, 256, cfg, seed=1)
    assert net.weight("weight_ih_l1_reverse").shape == (768, 512)
    blk = net.weight("weight_hh_l0").astype(np.float64)[:256]
    np.testing.assert_allclose(blk @ blk.T, np.eye(256), atol=1e-5)
    out, st = net.seq(np.zeros((4, 20, 128), np.float32))
    assert out.shape == (4, 20, 512) and st.h.shape == (4, 4, 256)


def test_no_biases_and_dropout_only_in_training() -> None:
    net = rnn.lstm(3, 4, rnn.RNNConfig(has_biases=False, num_layers=2, dropout=0.5), seed=2, dtype="float64")
    assert not any(n.startswith("bias") for n in net.state_dict())
    x = _x((2, 5, 3))
    ref, _ = net.seq(x)
    np.testing.assert_allclose(net.forward(x, rk.Ctx.inference()), ref, atol=1e-14)
    a = net.forward(x, rk.Ctx.training(seed=0))
    assert np.abs(a - ref).max() > 1e-3  # dropout between the two layers changed the output
    off = rnn.lstm(3, 4, rnn.RNNConfig(has_biases=False, num_layers=2, dropout=0.5, train=False),
                   seed=2, dtype="float64")
    np.testing.assert_allclose(off.forward(x, rk.Ctx.training(seed=0)), ref, atol=1e-14)


def test_bad_input_and_config_errors() -> None:
    with pytest.raises(rk.InvalidParameterError, match="num_layers"):
        rnn.RNNConfig(num_layers=0)
    with pytest.raises(rk.InvalidParameterError, match="dropout"):
        rnn.RNNConfig(dropout=1.0)
    net = rnn.gru(3, 4)
    with pytest.raises(rk.InvalidInputError, match="3 features"):
        net.seq(np.zeros((2, 5, 4)))
    with pytest.raises(rk.InvalidInputError, match="GRUState"):
        net.seq_init(np.zeros((2, 5, 3)), rnn.LSTMState(np.zeros((1, 2, 4)), np.zeros((1, 2, 4))))
    with pytest.raises(rk.InvalidInputError, match=r"\(1, 2, 4\)"):
        net.seq_init(np.zeros((2, 5, 3)), rnn.GRUState(np.zeros((1, 3, 4))))
    with pytest.raises(rk.InvalidInputError, match="unexpected"):
        net.load_state_dict({**net.state_dict(), "extra": np.zeros(1)})
    with pytest.raises(rk.WeightShapeError) as e:
        net.load_state_dict({**net.state_dict(), "weight_hh_l0": np.zeros((12, 5))})
    assert e.value.name == "weight_hh_l0" and e.value.expected == (12, 4)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_float32_stack_matches_float64_stack(mode: str) -> None:
    """The per-direction layers get their weights as transposed views of PyTorch's layout; the
    stored weights must be C-ordered copies, whatever path (reference or compiled) runs them."""
    cfg = rnn.RNNConfig(num_layers=2, bidirectional=True)
    n64 = getattr(rnn, mode)(3, 5, cfg, seed=4, dtype="float64")
    n32 = getattr(rnn, mode)(3, 5, cfg, seed=4, dtype="float32")
    for k in (0, 1):
        for d in (0, 1):
            for entry in n32._layer(k, d).weights():
                assert entry.value.flags["C_CONTIGUOUS"], (k, d, entry.name)
    x = _x((2, 6, 3))
    np.testing.assert_allclose(n32.seq(x.astype(np.float32))[0], n64.seq(x)[0], atol=2e-6)


@pytest.mark.parametrize("make, cfg", [
    (rnn.lstm, {"num_layers": 2, "bidirectional": True}),
    (rnn.gru, {"num_layers": 2}),
    (rnn.lstm, {"proj_size": 2}),
])
def test_an_optimizer_step_updates_the_direction_layers_in_place_as_a_rebuild_would(
        make: Any, cfg: dict[str, Any]) -> None:
    """An optimizer step rebuilds no direction layer (it updates the one rnnkit weight each
    parameter makes), and the net then computes exactly what a net loaded with its parameters
    computes."""
    net = make(3, 4, rnn.RNNConfig(**cfg), seed=0)
    before = dict(net._layers)
    x = np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)
    ctx = rk.Ctx.training(0)
    y = net.forward(x, ctx)
    net.backward(np.ones_like(y), ctx)
    rk.optimizers.Adam(0.1).apply_gradients([(net, n, g) for (_, n), g in ctx.grads.items()])
    assert all(net._layers[k] is before[k] for k in before)
    fresh = make(3, 4, rnn.RNNConfig(**cfg), seed=5)
    fresh.load_state_dict(net.state_dict())
    np.testing.assert_array_equal(net.forward(x, rk.Ctx.inference()),
                                  fresh.forward(x, rk.Ctx.inference()))
