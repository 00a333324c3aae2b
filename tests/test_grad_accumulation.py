"""Gradients summed over several passes in one ``Ctx``: the two-pass program against PyTorch.

Every case runs the same program in rnnkit and in PyTorch autograd, with the weights copied:
two forward passes on two different inputs, the loss ``L = sum(y1 * G1) + sum(y2 * G2)``, one
backward per pass into one ``Ctx`` (PyTorch: one ``backward`` of the summed loss), and compares
EVERY parameter gradient. A gradient stored in memory it does not own (a view of another
gradient, of a weight, or of a buffer something else writes) shows up here as a wrong sum.

Tolerances: ``max|rnnkit - torch| <= tol * max(1, max|torch|)`` with tol = 1e-9 in float64 (each
gradient is a sum of at most a few hundred products of O(1) terms: rounding is ~1e-14, so 1e-9
leaves five orders of margin without hiding a missing or doubled term, which is O(1)) and 1e-5
in float32 (the same sums at float32's 6e-8 unit roundoff, times the ~100 terms of a sum).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
import torch_layout
from harness import check_layer, numeric_grad, rel_err
from rnnkit import rnn

TOL = {"float64": 1e-9, "float32": 1e-5}


def _rel_close(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got64.shape == want64.shape, f"{what}: shape {got64.shape} != {want64.shape}"
    err = float(np.max(np.abs(got64 - want64))) if got64.size else 0.0
    scale = max(1.0, float(np.max(np.abs(want64))) if want64.size else 0.0)
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol:g} * {scale:.3g}"


# -- the rnnkit.rnn networks (PyTorch's nn.RNN / nn.LSTM / nn.GRU) ------------------------------
NET_CASES = [
    ("lstm", 1, False, True), ("rnn", 1, False, True), ("gru", 1, False, True),
    ("lstm", 2, True, True), ("rnn", 2, True, True), ("gru", 2, True, True),
    ("lstm", 2, True, False), ("rnn", 2, False, False), ("gru", 2, True, False),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("mode", "layers", "bidirectional", "has_biases"), NET_CASES)
def test_two_passes_of_an_rnn_net_in_one_ctx_equal_torch(mode: str, layers: int, bidirectional: bool,
                                                         has_biases: bool, dtype: str) -> None:
    """``bias_ih`` and ``bias_hh`` of an LSTM / RNN net are the gradient of one summed bias row:
    after two passes each must hold the sum of the two passes once (PyTorch's), not twice."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    tdt = torch.float64 if dtype == "float64" else torch.float32
    ref = getattr(torch.nn, mode.upper())(3, 4, num_layers=layers, bidirectional=bidirectional,
                                           bias=has_biases, batch_first=True).to(tdt)
    cfg = rnn.RNNConfig(num_layers=layers, bidirectional=bidirectional, has_biases=has_biases)
    net = getattr(rnn, mode)(3, 4, cfg, dtype=dtype)
    net.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((2, 5, 3)).astype(dtype) for _ in range(2)]
    width = 4 * (2 if bidirectional else 1)
    gs = [rng.standard_normal((2, 5, width)).astype(dtype) for _ in range(2)]

    ctx = rk.Ctx.training()
    for x in xs:
        net.forward(x, ctx)
    for g in reversed(gs):           # last in, first out
        net.backward(g, ctx)
    loss = sum((ref(torch.tensor(x))[0] * torch.tensor(g)).sum() for x, g in zip(xs, gs, strict=True))
    loss.backward()
    names = [n for n, _ in ref.named_parameters()]
    assert sorted(names) == sorted(net.weight_names)
    for name, p in ref.named_parameters():
        _rel_close(ctx.grad(net, name), p.grad.numpy(), TOL[dtype], f"{mode} {name}")


@pytest.mark.parametrize("mode", ["lstm", "rnn", "gru"])
def test_an_adam_step_after_two_passes_of_an_rnn_net_equals_torch(mode: str) -> None:
    """The optimizer reads the summed gradients as they are: one Adam step (PyTorch's formula)
    on a 2-layer bidirectional net gives PyTorch's weights, and the next output is PyTorch's."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(4)
    ref = getattr(torch.nn, mode.upper())(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    net = getattr(rnn, mode)(3, 4, rnn.RNNConfig(num_layers=2, bidirectional=True), dtype="float64")
    net.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((2, 5, 3)) for _ in range(2)]
    gs = [rng.standard_normal((2, 5, 8)) for _ in range(2)]
    ctx = rk.Ctx.training()
    for x in xs:
        net.forward(x, ctx)
    for g in reversed(gs):
        net.backward(g, ctx)
    rk.Adam(0.01, epsilon=1e-8).apply_gradients([(lay, n, g) for (lay, n), g in ctx.grads.items()])
    opt = torch.optim.Adam(ref.parameters(), lr=0.01, eps=1e-8)
    sum((ref(torch.tensor(x))[0] * torch.tensor(g)).sum() for x, g in zip(xs, gs, strict=True)).backward()
    opt.step()
    for name, p in ref.named_parameters():
        _rel_close(net.weight(name), p.detach().numpy(), 1e-9, f"{mode} {name} after the step")
    _rel_close(net.predict(xs[0]), ref(torch.tensor(xs[0]))[0].detach().numpy(), 1e-9, "next output")


# -- the recurrent layers, Bidirectional, Dense, Embedding against PyTorch -------------------------
def _two_passes(layer: Any, xs: list[np.ndarray], gs: list[np.ndarray]) -> rk.Ctx:
    """Two forward passes, then the two backward passes (last in, first out), in one Ctx."""
    ctx = rk.Ctx.training()
    for x in xs:
        layer.forward(x, ctx)
    for g in reversed(gs):
        layer.backward(g, ctx)
    return ctx


def _torch_two_passes(torch: Any, module: Any, xs: list[np.ndarray], gs: list[np.ndarray],
                      out: Any = lambda y: y) -> None:
    """PyTorch autograd of ``sum(out(module(x1)) * G1) + sum(out(module(x2)) * G2)``."""
    loss = sum((out(module(torch.tensor(x))) * torch.tensor(g)).sum() for x, g in zip(xs, gs, strict=True))
    loss.backward()


def _inputs(dtype: str, *shapes: tuple[int, ...], seed: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


RECURRENT = [("SimpleRNN", True), ("SimpleRNN", False), ("LSTM", True), ("LSTM", False),
             ("GRU", True), ("GRU", False)]


def _recurrent(kind: str, H: int, use_bias: bool, dtype: str, **kw: Any) -> Any:
    if kind == "GRU":
        return rk.GRU(H, reset_after=True, use_bias=use_bias, dtype=dtype, **kw)
    return getattr(rk, kind)(H, use_bias=use_bias, dtype=dtype, **kw)


def _copy_torch_direction(kind: str, module: Any, sfx: str, F: int) -> dict[str, np.ndarray]:
    """rnnkit weights of one direction of ``module`` (tests/torch_layout.py's conversion)."""
    p = {n: v.detach().numpy() for n, v in module.named_parameters()}
    G = torch_layout.TORCH_CELLS[kind][1]
    H = p["weight_hh" + sfx].shape[1]
    zeros = np.zeros(G * H, p["weight_hh" + sfx].dtype)
    k, r, b = torch_layout.to_ours(kind, p["weight_ih" + sfx], p["weight_hh" + sfx],
                                   p.get("bias_ih" + sfx, zeros), p.get("bias_hh" + sfx, zeros))
    return {"kernel": k, "recurrent_kernel": r, **({"bias": b} if "bias_ih" + sfx in p else {})}


def _check_torch_direction(kind: str, module: Any, sfx: str, ctx: rk.Ctx, layer: Any,
                           prefix: str, tol: float) -> None:
    """Every PyTorch parameter gradient of one direction against rnnkit's, converted."""
    p = dict(module.named_parameters())
    has_bias = "bias_ih" + sfx in p
    dk, dr = ctx.grad(layer, prefix + "kernel"), ctx.grad(layer, prefix + "recurrent_kernel")
    db = ctx.grad(layer, prefix + "bias") if has_bias else np.zeros((2, dk.shape[1]), dk.dtype)
    want = torch_layout.grads_to_torch(kind, dk, dr, db)
    for name, g in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), want, strict=True):
        if name + sfx in p:
            _rel_close(g, p[name + sfx].grad.numpy(), tol, f"{kind} {prefix}{name}{sfx}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("kind", "use_bias"), RECURRENT)
def test_two_passes_of_a_recurrent_layer_in_one_ctx_equal_torch(kind: str, use_bias: bool,
                                                                dtype: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(8)
    B, T, F, H = 2, 5, 3, 4
    tdt = torch.float64 if dtype == "float64" else torch.float32
    ref = getattr(torch.nn, torch_layout.TORCH_CELLS[kind][0])(F, H, bias=use_bias, batch_first=True).to(tdt)
    layer = _recurrent(kind, H, use_bias, dtype, return_sequences=True)
    layer.build(rk.Shape.with_free_batch((B, T, F)))
    layer.set_weights(**_copy_torch_direction(kind, ref, "_l0", F))
    xs = _inputs(dtype, (B, T, F), (B, T, F))
    gs = _inputs(dtype, (B, T, H), (B, T, H), seed=9)
    ctx = _two_passes(layer, xs, gs)
    _torch_two_passes(torch, ref, xs, gs, lambda y: y[0])
    _check_torch_direction(kind, ref, "_l0", ctx, layer, "", TOL[dtype])


@pytest.mark.parametrize("kind", ["SimpleRNN", "LSTM", "GRU"])
def test_two_passes_of_a_bidirectional_layer_in_one_ctx_equal_torch(kind: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(10)
    B, T, F, H = 2, 5, 3, 4
    module = getattr(torch.nn, torch_layout.TORCH_CELLS[kind][0])
    ref = module(F, H, bidirectional=True, batch_first=True).double()
    layer = rk.Bidirectional(_recurrent(kind, H, True, "float64", return_sequences=True))
    layer.build(rk.Shape.with_free_batch((B, T, F)))
    for role, sfx in (("forward", "_l0"), ("backward", "_l0_reverse")):
        for n, w in _copy_torch_direction(kind, ref, sfx, F).items():
            layer.set_weight(f"{role}.{n}", w)
    xs = _inputs("float64", (B, T, F), (B, T, F), seed=11)
    gs = _inputs("float64", (B, T, 2 * H), (B, T, 2 * H), seed=12)
    ctx = _two_passes(layer, xs, gs)
    _torch_two_passes(torch, ref, xs, gs, lambda y: y[0])
    for role, sfx in (("forward", "_l0"), ("backward", "_l0_reverse")):
        _check_torch_direction(kind, ref, sfx, ctx, layer, role + ".", TOL["float64"])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("use_bias", [True, False])
def test_two_passes_of_a_dense_layer_in_one_ctx_equal_torch(use_bias: bool, dtype: str) -> None:
    """Dense's kernel and bias gradients come out of one product (views of one array): each
    still sums on its own."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(13)
    tdt = torch.float64 if dtype == "float64" else torch.float32
    lin = torch.nn.Linear(3, 5, bias=use_bias).to(tdt)
    layer = rk.Dense(5, "tanh", use_bias=use_bias, dtype=dtype)
    layer.build(rk.Shape.with_free_batch((4, 6, 3)))
    layer.set_weights(lin.weight.detach().numpy().T, lin.bias.detach().numpy() if use_bias else None)
    xs = _inputs(dtype, (4, 6, 3), (4, 6, 3), seed=14)
    gs = _inputs(dtype, (4, 6, 5), (4, 6, 5), seed=15)
    ctx = _two_passes(layer, xs, gs)
    _torch_two_passes(torch, lin, xs, gs, torch.tanh)
    _rel_close(ctx.grad(layer, "kernel"), lin.weight.grad.numpy().T, TOL[dtype], "Dense kernel")
    if use_bias:
        _rel_close(ctx.grad(layer, "bias"), lin.bias.grad.numpy(), TOL[dtype], "Dense bias")


def test_two_passes_of_an_embedding_in_one_ctx_equal_torch() -> None:
    """Repeated indices within and across the passes: each row sums every use once."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(16)
    emb = torch.nn.Embedding(6, 3).double()
    layer = rk.layers.Embedding(6, 3, dtype="float64")
    layer.build(rk.Shape.with_free_batch((2, 5)))
    layer.set_weights(emb.weight.detach().numpy())
    rng = np.random.default_rng(17)
    idx = [rng.integers(0, 6, (2, 5)) for _ in range(2)]
    gs = _inputs("float64", (2, 5, 3), (2, 5, 3), seed=18)
    ctx = _two_passes(layer, [i.astype(np.float64) for i in idx], gs)
    sum((emb(torch.tensor(i)) * torch.tensor(g)).sum() for i, g in zip(idx, gs, strict=True)).backward()
    _rel_close(ctx.grad(layer, "embeddings"), emb.weight.grad.numpy(), TOL["float64"], "Embedding")


# -- shared weights: one layer at two places of a graph, a table read by two layers -----------
def test_a_layer_shared_by_two_graph_nodes_over_two_passes_equals_torch() -> None:
    """One LSTM encodes two inputs (two nodes of one functional graph), the model runs twice in
    one Ctx: four uses of the same weights, summed once each."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(19)
    B, T, F, H = 2, 4, 3, 4
    t_lstm = torch.nn.LSTM(F, H, batch_first=True).double()
    t_lin = torch.nn.Linear(H, 2).double()
    a, b = rk.Input((T, F)), rk.Input((T, F))
    enc = rk.LSTM(H, return_sequences=True, dtype="float64")
    dense = rk.Dense(2, dtype="float64")
    model = rk.Model([a, b], dense(rk.Add(dtype="float64")([enc(a), enc(b)])))
    enc.set_weights(**_copy_torch_direction("LSTM", t_lstm, "_l0", F))
    dense.set_weights(t_lin.weight.detach().numpy().T, t_lin.bias.detach().numpy())
    xs = _inputs("float64", *[(B, T, F)] * 4, seed=20)
    gs = _inputs("float64", (B, T, 2), (B, T, 2), seed=21)
    ctx = rk.Ctx.training()
    model.forward(xs[:2], ctx)
    model.forward(xs[2:], ctx)
    model.backward(gs[1], ctx)
    model.backward(gs[0], ctx)
    loss = sum((t_lin(t_lstm(torch.tensor(xa))[0] + t_lstm(torch.tensor(xb))[0]) * torch.tensor(g)).sum()
               for xa, xb, g in ((xs[0], xs[1], gs[0]), (xs[2], xs[3], gs[1])))
    loss.backward()
    _check_torch_direction("LSTM", t_lstm, "_l0", ctx, enc, "", TOL["float64"])
    _rel_close(ctx.grad(dense, "kernel"), t_lin.weight.grad.numpy().T, TOL["float64"], "Dense kernel")
    _rel_close(ctx.grad(dense, "bias"), t_lin.bias.grad.numpy(), TOL["float64"], "Dense bias")


def test_a_tied_table_over_two_passes_equals_torch() -> None:
    """``Dense(tie_to=embedding)``: the table's gradient sums the lookup's and the output
    layer's uses of both passes (PyTorch: ``decoder.weight = encoder.weight``)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(22)
    V, D = 6, 3
    enc, dec = torch.nn.Embedding(V, D).double(), torch.nn.Linear(D, V).double()
    dec.weight = enc.weight
    emb = rk.layers.Embedding(V, D, dtype="float64")
    out = rk.Dense(V, tie_to=emb, dtype="float64")
    model = rk.Sequential([emb, out], input_shape=(None, 5))
    emb.set_weights(enc.weight.detach().numpy())
    out.set_weights(None, dec.bias.detach().numpy())
    rng = np.random.default_rng(23)
    idx = [rng.integers(0, V, (2, 5)) for _ in range(2)]
    gs = _inputs("float64", (2, 5, V), (2, 5, V), seed=24)
    ctx = _two_passes(model, [i.astype(np.float64) for i in idx], gs)
    sum((dec(enc(torch.tensor(i))) * torch.tensor(g)).sum() for i, g in zip(idx, gs, strict=True)).backward()
    _rel_close(ctx.grad(emb, "embeddings"), enc.weight.grad.numpy(), TOL["float64"], "tied table")
    _rel_close(ctx.grad(out, "bias"), dec.bias.grad.numpy(), TOL["float64"], "output bias")


# -- no PyTorch equivalent: float64 finite differences -------------------------------------------
@pytest.mark.parametrize("use_bias", [True, False])
def test_two_passes_of_a_reset_before_gru_equal_finite_differences(use_bias: bool) -> None:
    """GRU(reset_after=False) (Keras' original form; PyTorch has none): the two-pass gradient
    equals the central differences of the two-pass loss, which is the sum of the differences
    of each pass's loss. Bound 1e-6 relative: the truncation error is O(eps^2) = 1e-12 and the
    rounding O(1e-16 / eps) = 1e-10 at eps = 1e-6."""
    layer = rk.GRU(4, reset_after=False, use_bias=use_bias, return_sequences=True, seed=25, dtype="float64")
    layer.build(rk.Shape.with_free_batch((2, 5, 3)))
    if use_bias:
        layer.set_weight("bias", np.random.default_rng(26).uniform(-1, 1, layer.weight("bias").shape))
    xs = _inputs("float64", (2, 5, 3), (2, 5, 3), seed=27)
    gs = _inputs("float64", (2, 5, 4), (2, 5, 4), seed=28)
    ctx = _two_passes(layer, xs, gs)
    for name in layer.trainable_names:
        fd = sum(numeric_grad(layer, x, g, name) for x, g in zip(xs, gs, strict=True))
        err = rel_err(ctx.grad(layer, name), fd)
        assert err <= 1e-6, f"GRU(reset_after=False) {name}: relative error {err:.3g}"


# -- the store itself ------------------------------------------------------------------------------
class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_store_owns_every_gradient_whatever_the_caller_hands_in() -> None:
    """One array handed for two weights, a weight (read-only), a view of a scratch buffer the
    caller overwrites afterwards: each gradient sums its own values and no input is written."""
    a, b = _Named("A"), _Named("B")
    ctx = rk.Ctx.training()
    row = np.array([1.0, 2.0])
    ctx.add_grad(a, "bias_ih", row)
    ctx.add_grad(a, "bias_hh", row)                 # the same array for both (the rnn nets' case)
    weight = np.array([[5.0, 6.0]])
    weight.flags.writeable = False
    ctx.add_grad(b, "kernel", weight[0])            # a read-only view
    scratch = np.array([[10.0, 20.0], [30.0, 40.0]])
    ctx.add_grad(b, "bias", scratch[1])             # a view of a buffer reused below
    scratch[...] = -1.0
    ctx.add_grad(a, "bias_ih", np.array([0.5, 0.5]))
    ctx.add_grad(a, "bias_hh", np.array([0.25, 0.25]))
    ctx.add_grad(b, "kernel", np.array([1.0, 1.0]))
    np.testing.assert_array_equal(ctx.grad(a, "bias_ih"), [1.5, 2.5])
    np.testing.assert_array_equal(ctx.grad(a, "bias_hh"), [1.25, 2.25])
    np.testing.assert_array_equal(ctx.grad(b, "kernel"), [6.0, 7.0])
    np.testing.assert_array_equal(ctx.grad(b, "bias"), [30.0, 40.0])
    np.testing.assert_array_equal(row, [1.0, 2.0])
    np.testing.assert_array_equal(weight, [[5.0, 6.0]])
    stored = [ctx.grad(la, n) for la, n in ctx.grads]
    assert all(g.flags.writeable and g.flags.c_contiguous for g in stored)
    assert not any(np.shares_memory(g, h) for i, g in enumerate(stored) for h in stored[i + 1:])


def test_the_store_copies_assignments_keeps_in_place_updates_and_moves_without_copies() -> None:
    a, b = _Named("A"), _Named("B")
    ctx = rk.Ctx.training()
    g = np.array([1.0, 2.0])
    ctx.grads[(a, "w")] = g                         # an assignment is a first write: copied
    assert not np.shares_memory(ctx.grads[(a, "w")], g)
    ctx.grads[(a, "w")] *= 2.0                      # the stored array, updated in place, kept
    np.testing.assert_array_equal(ctx.grad(a, "w"), [2.0, 4.0])
    ctx.grads[(b, "w")] = ctx.grads[(a, "w")]       # another key's array: copied
    assert not np.shares_memory(ctx.grads[(b, "w")], ctx.grads[(a, "w")])
    held = ctx.grad(a, "w")
    assert ctx.move_grad(a, "w", b, "v")            # taken over: the same array, no copy
    assert ctx.grad(b, "v") is held and (a, "w") not in ctx.grads
    ctx.add_grad(a, "w", np.array([1.0, 1.0]))
    assert ctx.move_grad(a, "w", b, "v")            # summed into the one already there
    np.testing.assert_array_equal(ctx.grad(b, "v"), [3.0, 5.0])
    assert not ctx.move_grad(a, "w", b, "v")
    np.testing.assert_array_equal(ctx.grads.pop((b, "w")), [2.0, 4.0])
    assert set(ctx.grads) == {(b, "v")} and len(ctx.grads) == 1


def test_a_gradient_of_another_shape_is_refused_not_broadcast() -> None:
    a = _Named("A")
    ctx = rk.Ctx.training()
    ctx.add_grad(a, "bias", np.zeros((1, 3)))
    with pytest.raises(rk.InvalidInputError, match=r"A\.bias.*\(1, 3\).*\(3,\)"):
        ctx.add_grad(a, "bias", np.ones(3))
    np.testing.assert_array_equal(ctx.grad(a, "bias"), np.zeros((1, 3)))


@pytest.mark.parametrize("mode", ["lstm", "rnn", "gru"])
def test_the_layer_harness_passes_on_a_two_layer_bidirectional_rnn_net(mode: str) -> None:
    """The whole layer contract (its step 5 sums two passes on two inputs in one Ctx), which the
    rnn nets' doubled bias gradient failed."""
    cfg = rnn.RNNConfig(num_layers=2, bidirectional=True)
    check_layer(lambda dtype: getattr(rnn, mode)(3, 2, cfg, seed=1, dtype=dtype),
                lambda rng: rng.standard_normal((2, 4, 3)))


def test_a_gradient_written_into_the_stores_own_array_is_kept_then_summed() -> None:
    """``add_grad_from``: the first gradient is the zeroed array the Ctx made and handed to
    ``write`` (kept, not copied); a later one is written into another zeroed array and added."""
    a = _Named("A")
    ctx = rk.Ctx.training()
    seen: list[np.ndarray] = []

    def write(rows: list[int]) -> Any:
        def w(out: np.ndarray) -> None:
            assert not out.any()
            seen.append(out)
            out[rows] += 1.0
        return w

    ctx.add_grad_from(a, "embeddings", (4, 2), np.float32, write([0, 2]))
    assert ctx.grad(a, "embeddings") is seen[0] and seen[0].dtype == np.float32
    ctx.add_grad_from(a, "embeddings", (4, 2), np.float32, write([2, 3]))
    np.testing.assert_array_equal(ctx.grad(a, "embeddings"), [[1, 1], [0, 0], [2, 2], [1, 1]])
    assert ctx.grad(a, "embeddings") is seen[0]
    np.testing.assert_array_equal(seen[1], [[0, 0], [0, 0], [1, 1], [1, 1]])  # only read
    with pytest.raises(rk.InvalidInputError, match=r"A\.embeddings.*\(4, 2\).*\(3, 2\)"):
        ctx.add_grad_from(a, "embeddings", (3, 2), np.float32, write([0]))
