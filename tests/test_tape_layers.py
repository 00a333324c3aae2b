"""Layers on the tape: programs of rnnkit layers and ``rk.ops`` whose gradients equal PyTorch
autograd's on the same program with copied weights, and float64 central finite differences.

Each layer call records one entry whose backward is the layer's own (compiled BPTT for the
recurrent layers). Tolerances: float64 against torch 1e-9 (both are exact arithmetic up to
summation order over at most ~100 terms per gradient element, ~1e-14 relative); float32 against
torch (float64) 1e-5 absolute and relative: float32's eps 6e-8 times the ~10-step recurrences
and sums of ~50 terms stays near 1e-6; finite differences with h = 1e-6 in float64: truncation
~h^2 and rounding ~1e-16 |L| / h, below 1e-7 for these |L| < 50.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import ops

B, T, F, U = 3, 5, 2, 4
TOL = {"float64": dict(rtol=1e-9, atol=1e-9), "float32": dict(rtol=1e-5, atol=1e-5)}


def torch() -> Any:
    return pytest.importorskip("torch")


def lstm(dtype: str, **kw: Any) -> rk.LSTM:
    layer = rk.LSTM(U, seed=3, dtype=dtype, **kw)
    layer.build((None, None, F))
    rng = np.random.default_rng(11)
    layer.set_weight("bias", rng.uniform(-0.5, 0.5, (1, 4 * U)))   # a nonzero bias is checked too
    return layer


def dense(dtype: str, units: int, width: int) -> rk.Dense:
    layer = rk.Dense(units, seed=5, dtype=dtype)
    layer.build((None, width))
    return layer


def t_lstm(layer: rk.LSTM) -> Any:
    """nn.LSTM holding ``layer``'s weights (both use gate order i, f, c/g, o; Keras' one bias is
    torch's bias_ih with bias_hh 0)."""
    th = torch()
    m = th.nn.LSTM(F, U, batch_first=True, dtype=th.float64)
    with th.no_grad():
        m.weight_ih_l0.copy_(th.tensor(np.asarray(layer.weight("kernel"), np.float64).T))
        m.weight_hh_l0.copy_(th.tensor(np.asarray(layer.weight("recurrent_kernel"), np.float64).T))
        m.bias_ih_l0.copy_(th.tensor(np.asarray(layer.weight("bias"), np.float64)[0]))
        m.bias_hh_l0.zero_()
    return m


def t_dense(layer: rk.Dense) -> Any:
    th = torch()
    k = np.asarray(layer.weight("kernel"), np.float64)
    m = th.nn.Linear(k.shape[0], k.shape[1], dtype=th.float64)
    with th.no_grad():
        m.weight.copy_(th.tensor(k.T))
        m.bias.copy_(th.tensor(np.asarray(layer.weight("bias"), np.float64)))
    return m


def lstm_grads(m: Any) -> dict[str, np.ndarray]:
    return {"kernel": m.weight_ih_l0.grad.numpy().T, "recurrent_kernel": m.weight_hh_l0.grad.numpy().T,
            "bias": m.bias_ih_l0.grad.numpy()[None, :]}


def dense_grads(m: Any) -> dict[str, np.ndarray]:
    return {"kernel": m.weight.grad.numpy().T, "bias": m.bias.grad.numpy()}


def data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape)


# -- the programs, in rnnkit and in PyTorch ---------------------------------------------------------
def shared_encoder(enc: rk.LSTM, head: rk.Dense, x1: Any, x2: Any) -> Any:
    """One encoder read by two inputs; the loss mixes both codes."""
    h1, h2 = enc(x1), enc(x2)
    y = head(ops.tanh(ops.add(h1, h2)))
    return ops.add(ops.sum(ops.square(y)), ops.multiply(ops.sum(ops.square(ops.subtract(h1, h2))), 0.5))


def t_shared_encoder(enc: Any, head: Any, x1: Any, x2: Any) -> Any:
    h1, h2 = enc(x1)[0][:, -1], enc(x2)[0][:, -1]
    y = head((h1 + h2).tanh())
    return (y ** 2).sum() + 0.5 * ((h1 - h2) ** 2).sum()


def states_loss(enc: rk.LSTM, x: Any, h0: Any, c0: Any, w: np.ndarray) -> Any:
    """A loss from the sequence and both final states, the start state given."""
    seq, h, c = enc(x, initial_state=[h0, c0])
    return ops.add(ops.add(ops.mean(ops.square(seq)), ops.sum(ops.multiply(c, w))), ops.sum(ops.tanh(h)))


def t_states_loss(enc: Any, x: Any, h0: Any, c0: Any, w: Any) -> Any:
    seq, (h, c) = enc(x, (h0[None], c0[None]))
    return (seq ** 2).mean() + (c[0] * w).sum() + h[0].tanh().sum()


def decoder_loop(dec: rk.LSTM, proj: rk.Dense, start: Any, h: Any, c: Any, target: np.ndarray) -> Any:
    """Four steps, each one call of the recurrent layer on one step, its prediction fed back."""
    loss: Any = 0.0
    inp = start
    for t in range(target.shape[1]):
        out, h, c = dec(inp, initial_state=[h, c])
        y = proj(out)
        loss = ops.add(loss, ops.sum(ops.square(ops.subtract(y, target[:, t]))))
        inp = ops.expand_dims(y, 1)
    return loss


def t_decoder_loop(dec: Any, proj: Any, start: Any, h: Any, c: Any, target: Any) -> Any:
    loss = 0.0
    inp, st = start, (h[None], c[None])
    for t in range(target.shape[1]):
        out, st = dec(inp, st)
        y = proj(out[:, -1])
        loss = loss + ((y - target[:, t]) ** 2).sum()
        inp = y[:, None]
    return loss


# -- the checks -------------------------------------------------------------------------------------
def fd(loss: Callable[[], float], layer: Any, name: str, h: float = 1e-6) -> np.ndarray:
    w0 = np.array(layer.weight(name))
    g = np.zeros_like(w0)
    for j in np.ndindex(w0.shape):
        vals = []
        for s in (h, -h):
            w = w0.copy()
            w[j] += s
            layer.set_weight(name, w)
            vals.append(float(loss()))
        g[j] = (vals[0] - vals[1]) / (2 * h)
    layer.set_weight(name, w0)
    return g


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_shared_encoder_equals_torch(dtype: str) -> None:
    th = torch()
    enc, head = lstm(dtype), dense(dtype, 1, U)
    x1, x2 = data(1, B, T, F).astype(dtype), data(2, B, T, F).astype(dtype)
    with rk.GradientTape() as tape:
        tape.watch(x1)
        loss = shared_encoder(enc, head, x1, x2)
    got = tape.gradient(loss, {"enc": [(enc, n) for n in enc.weight_names], "head": [(head, "kernel"),
                                                                                      (head, "bias")],
                                "x1": x1, "x2": x2})
    assert got["x2"] is None          # not watched: a constant, as TensorFlow
    te, th_head = t_lstm(enc), t_dense(head)
    tx1 = th.tensor(x1, dtype=th.float64, requires_grad=True)
    tl = t_shared_encoder(te, th_head, tx1, th.tensor(x2, dtype=th.float64))
    tl.backward()
    np.testing.assert_allclose(float(loss), tl.item(), **TOL[dtype])
    want = lstm_grads(te)
    for (_, n), g in zip([(enc, n) for n in enc.weight_names], got["enc"], strict=True):
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g, want[n], **TOL[dtype], err_msg=n)
    hw = dense_grads(th_head)
    np.testing.assert_allclose(got["head"][0], hw["kernel"], **TOL[dtype])
    np.testing.assert_allclose(got["head"][1], hw["bias"], **TOL[dtype])
    np.testing.assert_allclose(got["x1"], tx1.grad.numpy(), **TOL[dtype])


def test_shared_encoder_equals_finite_differences() -> None:
    enc, head = lstm("float64"), dense("float64", 1, U)
    x1, x2 = data(1, B, T, F), data(2, B, T, F)
    with rk.GradientTape() as tape:
        loss = shared_encoder(enc, head, x1, x2)
    sources = [(enc, n) for n in enc.weight_names] + [(head, "kernel"), (head, "bias")]
    got = tape.gradient(loss, sources)
    for (layer, n), g in zip(sources, got, strict=True):
        want = fd(lambda: shared_encoder(enc, head, x1, x2), layer, n)   # noqa: B023
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7, err_msg=f"{layer.name}.{n}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_loss_from_intermediate_states_equals_torch(dtype: str) -> None:
    th = torch()
    enc = lstm(dtype, return_sequences=True, return_state=True)
    x, h0, c0 = data(3, B, T, F).astype(dtype), data(4, B, U).astype(dtype), data(5, B, U).astype(dtype)
    w = data(6, B, U)
    with rk.GradientTape() as tape:
        tape.watch([x, h0, c0])
        loss = states_loss(enc, x, h0, c0, w)
    got = tape.gradient(loss, [x, h0, c0, (enc, "kernel"), (enc, "recurrent_kernel"), (enc, "bias")])
    te = t_lstm(enc)
    ts = [th.tensor(a, dtype=th.float64, requires_grad=True) for a in (x, h0, c0)]
    tl = t_states_loss(te, *ts, th.tensor(w))
    tl.backward()
    np.testing.assert_allclose(float(loss), tl.item(), **TOL[dtype])
    want = [t.grad.numpy() for t in ts] + list(lstm_grads(te).values())
    for g, wv in zip(got, want, strict=True):
        np.testing.assert_allclose(g, wv, **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_decoder_loop_step_by_step_equals_torch(dtype: str) -> None:
    th = torch()
    dec, proj = lstm(dtype, return_state=True), dense(dtype, F, U)
    start, h, c = data(7, B, 1, F).astype(dtype), data(8, B, U).astype(dtype), data(9, B, U).astype(dtype)
    target = data(10, B, 4, F).astype(dtype)
    with rk.GradientTape() as tape:
        tape.watch([h, c])
        loss = decoder_loop(dec, proj, start, h, c, target)
    sources = [h, c, (dec, "kernel"), (dec, "recurrent_kernel"), (dec, "bias"), (proj, "kernel"),
               (proj, "bias")]
    got = tape.gradient(loss, sources)
    td, tp = t_lstm(dec), t_dense(proj)
    th_h, th_c = (th.tensor(a, dtype=th.float64, requires_grad=True) for a in (h, c))
    tl = t_decoder_loop(td, tp, th.tensor(start, dtype=th.float64), th_h, th_c,
                        th.tensor(target, dtype=th.float64))
    tl.backward()
    np.testing.assert_allclose(float(loss), tl.item(), **TOL[dtype])
    want = [th_h.grad.numpy(), th_c.grad.numpy(), *lstm_grads(td).values(), *dense_grads(tp).values()]
    for g, wv in zip(got, want, strict=True):
        np.testing.assert_allclose(g, wv, **TOL[dtype])


def test_decoder_loop_equals_finite_differences() -> None:
    dec, proj = lstm("float64", return_state=True), dense("float64", F, U)
    start, h, c, target = data(7, B, 1, F), data(8, B, U), data(9, B, U), data(10, B, 4, F)
    with rk.GradientTape() as tape:
        loss = decoder_loop(dec, proj, start, h, c, target)
    got = tape.gradient(loss, [(dec, "recurrent_kernel"), (proj, "kernel")])
    for (layer, n), g in zip([(dec, "recurrent_kernel"), (proj, "kernel")], got, strict=True):
        want = fd(lambda: decoder_loop(dec, proj, start, h, c, target), layer, n)   # noqa: B023
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7)


def test_persistent_tape_walks_layer_entries_twice() -> None:
    enc, head = lstm("float64"), dense("float64", 1, U)
    x1, x2 = data(1, B, T, F), data(2, B, T, F)
    with rk.GradientTape(persistent=True) as tape:
        loss = shared_encoder(enc, head, x1, x2)
    first = tape.gradient(loss, [(enc, "kernel"), enc.weight("recurrent_kernel")])
    second = tape.gradient(loss, [(enc, "kernel"), enc.weight("recurrent_kernel")])
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_training_decides_dropout_on_the_tape() -> None:
    drop = rk.Dropout(0.5, dtype="float64")
    x = data(12, 4, 6)
    with rk.GradientTape(persistent=True) as tape:
        tape.watch(x)
        off = drop(x)                       # Keras' default outside fit: training=False
        on = drop(x, training=True)
    np.testing.assert_array_equal(off, x)
    np.testing.assert_array_equal(tape.gradient(off, x), np.ones_like(x))
    kept = on != 0
    assert 0 < kept.sum() < x.size
    np.testing.assert_allclose(tape.gradient(on, x), np.where(kept, 2.0, 0.0), rtol=1e-15)


def test_masked_call_on_the_tape_equals_the_ctx_pass() -> None:
    enc = lstm("float64", return_sequences=True)
    x = data(13, B, T, F)
    mask = np.array([[True] * T, [True] * 3 + [False] * 2, [True] * 2 + [False] * 3])
    with rk.GradientTape() as tape:
        tape.watch(x)
        y = enc(x, mask=mask)
    w = data(14, B, T, U)
    gx, gk = tape.gradient(y, [x, (enc, "kernel")], output_gradients=w)
    ctx = rk.Ctx.training().set_mask(mask)
    np.testing.assert_array_equal(y, enc.forward(x, ctx))
    np.testing.assert_array_equal(gx, enc.backward(w, ctx))
    np.testing.assert_array_equal(gk, ctx.grad(enc, "kernel"))


def _x3() -> np.ndarray:
    return data(20, 2, 4, 3)


def _x2() -> np.ndarray:
    return data(21, 2, 3)


LAYERS: dict[str, tuple[Callable[[], rk.Layer], Callable[[], Any]]] = {
    "Dense": (lambda: rk.Dense(5, seed=1, dtype="float64"), _x2),
    "GRU": (lambda: rk.GRU(4, seed=1, dtype="float64", return_sequences=True), _x3),
    "GRU_reset_after": (lambda: rk.GRU(4, seed=1, dtype="float64", reset_after=True), _x3),
    "SimpleRNN": (lambda: rk.SimpleRNN(4, seed=1, dtype="float64"), _x3),
    "LSTM_go_backwards": (lambda: rk.LSTM(4, seed=1, dtype="float64", go_backwards=True), _x3),
    "Bidirectional": (lambda: rk.Bidirectional(rk.LSTM(4, seed=1, dtype="float64", return_sequences=True)),
                      _x3),
    "RepeatVector": (lambda: rk.RepeatVector(3, dtype="float64"), _x2),
    "Reverse": (lambda: rk.Reverse(dtype="float64"), _x3),
    "ActivationLayer": (lambda: rk.ActivationLayer("tanh", dtype="float64"), _x2),
    "Add": (lambda: rk.Add(dtype="float64"), lambda: [_x2(), data(22, 2, 3)]),
    "Concatenate": (lambda: rk.Concatenate(dtype="float64"), lambda: [_x2(), data(22, 2, 3)]),
    "Multiply": (lambda: rk.Multiply(dtype="float64"), lambda: [_x2(), data(22, 2, 3)]),
    "rnn.lstm": (lambda: rk.rnn.lstm(3, 4, rk.rnn.RNNConfig(num_layers=2), seed=1, dtype="float64"), _x3),
    "rnn.gru_bidirectional": (lambda: rk.rnn.gru(3, 4, rk.rnn.RNNConfig(bidirectional=True), seed=1,
                                                 dtype="float64"), _x3),
    "Embedding": (lambda: rk.Embedding(10, 3, seed=1, dtype="float64"),
                  lambda: np.array([[1, 2, 1], [0, 9, 9]])),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_every_kind_of_layer_on_the_tape_is_its_own_ctx_pass(name: str) -> None:
    """One entry per call, whose backward is the layer's own: the tape's gradients are exactly
    (bit for bit) those of ``forward`` / ``backward`` in a training Ctx."""
    make, inputs = LAYERS[name]
    layer, x = make(), inputs()
    xs = x if isinstance(x, list) else [x]
    with rk.GradientTape() as tape:
        for a in xs:
            if a.dtype.kind == "f":
                tape.watch(a)
        y = layer(x)
    w = data(23, *y.shape)
    names = layer.trainable_names
    got = tape.gradient(y, [(layer, n) for n in names] + xs, output_gradients=w)
    ctx = rk.Ctx.training()
    np.testing.assert_array_equal(y, layer.forward(x, ctx))
    back = layer.backward(w, ctx)
    for n, g in zip(names, got, strict=False):
        np.testing.assert_array_equal(g, ctx.grad(layer, n), err_msg=n)
    want_x = back if isinstance(x, list) else [back]
    for a, g, wx in zip(xs, got[len(names):], want_x, strict=True):
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(g, wx)
        else:
            assert g is None      # integer ids: no gradient, as TensorFlow


def test_a_pytorch_layout_network_on_the_tape_equals_torch() -> None:
    """``rnnkit.rnn.lstm`` (PyTorch's parameter names) on the tape: its gradients are
    ``nn.LSTM``'s with the same state dict."""
    th = torch()
    net = rk.rnn.lstm(3, 4, rk.rnn.RNNConfig(num_layers=2), seed=1, dtype="float64")
    x, w = data(30, 2, 5, 3), data(31, 2, 5, 4)
    with rk.GradientTape() as tape:
        tape.watch(x)
        loss = ops.sum(ops.multiply(ops.tanh(net(x)), w))
    names = net.trainable_names
    got = tape.gradient(loss, [x] + [(net, n) for n in names])
    m = th.nn.LSTM(3, 4, num_layers=2, batch_first=True, dtype=th.float64)
    m.load_state_dict({n: th.tensor(np.asarray(net.weight(n))) for n in names})
    tx = th.tensor(x, requires_grad=True)
    tl = (m(tx)[0].tanh() * th.tensor(w)).sum()
    tl.backward()
    np.testing.assert_allclose(float(loss), tl.item(), rtol=1e-12)
    np.testing.assert_allclose(got[0], tx.grad.numpy(), **TOL["float64"])
    params = dict(m.named_parameters())
    for n, g in zip(names, got[1:], strict=True):
        np.testing.assert_allclose(g, params[n].grad.numpy(), **TOL["float64"], err_msg=n)


def test_keras_call_arguments_without_a_tape() -> None:
    enc = lstm("float64", return_sequences=True)
    x = data(13, B, T, F)
    mask = np.array([[True] * T, [True] * 3 + [False] * 2, [True] * 2 + [False] * 3])
    np.testing.assert_array_equal(enc(x, mask=mask), enc.forward(x, rk.Ctx.inference().set_mask(mask)))
    drop = rk.Dropout(0.5, dtype="float64")
    y = drop(np.ones((8, 8)), training=True)
    assert set(np.unique(y)) == {0.0, 2.0}
    np.testing.assert_array_equal(drop(np.ones((8, 8))), np.ones((8, 8)))
    with pytest.raises(rk.InvalidParameterError, match="give ctx, or mask= / training=, not both"):
        drop(np.ones(3), rk.Ctx.training(), training=True)
    with pytest.raises(rk.InvalidParameterError, match="a call on graph nodes takes no ctx, mask or trai"):
        rk.Dense(2)(rk.Input((3,)), training=True)


def test_models_called_on_the_tape_are_one_entry_of_their_own_pass() -> None:
    """``model(x)`` inside a tape (Sequential, functional) records the model's forward /
    backward: gradients bit for bit those of its own training Ctx pass."""
    seq = rk.Sequential([rk.LSTM(4, seed=1, dtype="float64", return_sequences=True),
                         rk.Dense(2, seed=2, dtype="float64")])
    seq.build((None, T, F))
    a = rk.Input((T, F))
    b = rk.Input((T, F))
    shared = rk.LSTM(4, seed=3, dtype="float64")
    graph = rk.Model([a, b], rk.Dense(1, seed=4, dtype="float64")(rk.Concatenate()([shared(a), shared(b)])))
    x1, x2 = data(40, B, T, F), data(41, B, T, F)
    for model, x in ((seq, x1), (graph, [x1, x2])):
        with rk.GradientTape() as tape:
            tape.watch(x1)
            y = model(x)
        w = data(42, *y.shape)
        pairs = model.trainable_weights()
        got = tape.gradient(y, [x1, pairs], output_gradients=w)
        ctx = rk.Ctx.training()
        np.testing.assert_array_equal(y, model.forward(x, ctx))
        dx = model.backward(w, ctx)
        np.testing.assert_array_equal(got[0], dx[0] if isinstance(x, list) else dx)
        for (lay, n), g in zip(pairs, got[1], strict=True):
            np.testing.assert_array_equal(g, ctx.grad(lay, n), err_msg=f"{lay.name}.{n}")


def test_nested_tapes_both_walk_a_layer_call() -> None:
    enc, head = lstm("float64"), dense("float64", 1, U)
    x1, x2 = data(1, B, T, F), data(2, B, T, F)
    with rk.GradientTape() as outer:
        with rk.GradientTape() as inner:
            loss = shared_encoder(enc, head, x1, x2)
        g_inner = inner.gradient(loss, (enc, "kernel"))
    np.testing.assert_array_equal(g_inner, outer.gradient(loss, (enc, "kernel")))
