"""Sequences as users have them, in the recurrent core: padded batches (Keras' mask, PyTorch's
lengths), states in and out with gradients, seq_init in a training Ctx, stateful layers,
input dropout. Every check runs on the compiled path and on the reference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import rel_err

B, T, F, H = 4, 6, 3, 5
LENGTHS = np.array([6, 3, 1, 4])

CELLS: dict[str, Callable[..., rk.RecurrentLayer]] = {
    "SimpleRNN": lambda **kw: rk.SimpleRNN(H, **kw),
    "LSTM": lambda **kw: rk.LSTM(H, **kw),
    "LSTMP": lambda **kw: rk.LSTM(H, proj_size=2, **kw),
    "GRU": lambda **kw: rk.GRU(H, **kw),
    "GRU_ra": lambda **kw: rk.GRU(H, reset_after=True, **kw),
}
MODES = ["fast", "reference"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> Any:
    with rk.kernels.use(request.param):
        yield request.param


def make(cell: str, dtype: str = "float64", **kw: Any) -> rk.RecurrentLayer:
    layer = CELLS[cell](seed=3, dtype=dtype, **kw)
    layer.build(rk.Shape((None, None, F)))     # any number of timesteps
    b = layer.weight("bias")
    layer.set_weight("bias", b + np.random.default_rng(1).uniform(-0.4, 0.4, b.shape))
    return layer


def states(layer: rk.RecurrentLayer, seed: int) -> list[np.ndarray]:
    """Random (B, width) arrays, one per state part of ``layer``'s cell."""
    sizes = layer.cell.state_sizes()
    return [np.random.default_rng(seed + k).standard_normal((B, n)) for k, n in enumerate(sizes)]


def x_in(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, T, F))


def plain_masked_loop(layer: rk.RecurrentLayer, x: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, Any]:
    """Keras' masking written out with the one-step API: a masked step keeps the state and
    repeats the previous output; a backwards layer reads each sequence's real span reversed."""
    outs, finals = [], []
    for b in range(x.shape[0]):
        state = layer.zero_state(1)
        seq = []
        ts = list(range(T))
        if layer.go_backwards:
            end = int(np.max(np.nonzero(valid[b])[0]) + 1) if valid[b].any() else 0
            ts = list(range(end - 1, -1, -1)) + list(range(end, T))
        for t in ts:
            if valid[b, t]:
                state = layer.step(x[b:b + 1, t], state)
            seq.append(state[0][0])
        outs.append(np.stack(seq))
        finals.append(state)
    return np.stack(outs), tuple(np.concatenate([f[k] for f in finals]) for k in range(len(finals[0])))


# -- padded batches ------------------------------------------------------------------------------

@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("rs", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("cell", list(CELLS))
def test_keras_mask_against_a_plain_loop(mode: str, cell: str, rs: bool, gb: bool) -> None:
    """A mask with holes and padding: every output and the final state, against the loop above."""
    layer = make(cell, return_sequences=rs, go_backwards=gb, return_state=True)
    valid = np.array([[1, 1, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0], [1, 0, 1, 1, 0, 0]], bool)
    x = x_in()
    out, *final = layer.forward(x, rk.Ctx.inference().set_mask(valid))
    want_seq, want_final = plain_masked_loop(layer, x, valid)
    np.testing.assert_allclose(out, want_seq if rs else want_seq[:, -1], atol=1e-12)
    for a, b in zip(final, want_final, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("kind", ["lengths", "mask"])
@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("cell", list(CELLS))
def test_every_padded_sequence_equals_it_run_alone(mode: str, cell: str, gb: bool, kind: str) -> None:
    """Outputs, final states, dx and every weight gradient: the padded batch gives each
    sequence exactly its unpadded result (a backwards layer never starts on the padding)."""
    layer = make(cell, return_sequences=True, go_backwards=gb, return_state=True)
    x = x_in(1)
    x[np.arange(T)[None, :] >= LENGTHS[:, None]] = 7.0          # padding that would show
    valid = np.arange(T)[None, :] < LENGTHS[:, None]
    ctx = rk.Ctx.training().set_mask(**({"lengths": LENGTHS} if kind == "lengths" else {"mask": valid}))
    out, *final = layer.forward(x, ctx)
    g = np.random.default_rng(2).standard_normal(out.shape)
    gs = [np.random.default_rng(3 + k).standard_normal(f.shape) for k, f in enumerate(final)]
    dx = layer.backward([g, *gs], ctx)
    grads = {n: ctx.grad(layer, n) for n in layer.weight_names}
    total = {n: np.zeros_like(v) for n, v in grads.items()}
    for b, n in enumerate(LENGTHS):
        c = rk.Ctx.training()
        o, *f = layer.forward(x[b:b + 1, :n], c)
        np.testing.assert_allclose(out[b, :n], o[0], atol=1e-12)
        if kind == "lengths":
            np.testing.assert_array_equal(out[b, n:], 0.0)           # PyTorch: zero past the end
        else:
            np.testing.assert_allclose(out[b, n:], np.broadcast_to(o[0, -1], out[b, n:].shape), atol=1e-12)
        for a, fb in zip(final, f, strict=True):
            np.testing.assert_allclose(a[b], fb[0], atol=1e-12)
        g_b = g[b:b + 1, :n].copy()
        if kind == "mask":   # the padded steps repeat the last real output: their gradient lands there
            g_b[:, -1] += g[b, n:].sum(axis=0)
        d = layer.backward([g_b, *(q[b:b + 1] for q in gs)], c)
        np.testing.assert_allclose(dx[b, :n], d[0], atol=1e-12)
        np.testing.assert_array_equal(dx[b, n:], 0.0)
        for name in total:
            total[name] += c.grad(layer, name)
    for name in total:
        np.testing.assert_allclose(grads[name], total[name], atol=1e-11, err_msg=name)


def _fd_check(layer: rk.RecurrentLayer, x: np.ndarray, make_ctx: Callable[[bool], rk.Ctx],
              init: list[np.ndarray] | None = None) -> dict[str, float]:
    """Float64 central differences of L = sum(out * G) (+ the returned states' terms) against
    backward, for the input, every weight and every initial state part."""
    def run(ctx: rk.Ctx) -> Any:
        res = layer.forward(x if init is None else [x, *init], ctx)
        return res if isinstance(res, list) else [res]

    outs = run(make_ctx(False))
    Gs = [np.random.default_rng(10 + k).standard_normal(o.shape) for k, o in enumerate(outs)]

    def loss() -> float:
        return float(sum(np.sum(o * g) for o, g in zip(run(make_ctx(False)), Gs, strict=True)))

    ctx = make_ctx(True)
    run(ctx)
    res = layer.backward(Gs if layer.return_state else Gs[0], ctx)
    dx, d_init = (res[0], res[1:]) if init is not None else (res, [])
    errs = {}
    targets: list[tuple[str, np.ndarray, Any]] = [("input", x, dx)]
    targets += [(f"init{k}", p, d) for k, (p, d) in enumerate(zip(init or [], d_init, strict=True))]
    for name, arr, ana in targets:
        num = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            old = arr[i]
            arr[i] = old + 1e-6
            up = loss()
            arr[i] = old - 1e-6
            num[i] = (up - loss()) / 2e-6
            arr[i] = old
        errs[name] = rel_err(ana, num)
    for name in layer.weight_names:
        w0 = np.array(layer.weight(name))
        num = np.zeros_like(w0)
        for i in np.ndindex(w0.shape):
            for sgn in (1, -1):
                w = w0.copy()
                w[i] += sgn * 1e-6
                layer.set_weight(name, w)
                num[i] += sgn * loss() / 2e-6
        layer.set_weight(name, w0)
        errs[name] = rel_err(ctx.grad(layer, name), num)
    return errs


@pytest.mark.parametrize("kind", ["lengths", "mask"])
@pytest.mark.parametrize("cell", ["LSTM", "GRU", "LSTMP"])
def test_gradcheck_through_masks_and_states(mode: str, cell: str, kind: str) -> None:
    layer = make(cell, return_sequences=True, go_backwards=True, return_state=True)
    x = x_in(4)
    valid = np.random.default_rng(5).random((B, T)) > 0.3
    arg = {"lengths": LENGTHS} if kind == "lengths" else {"mask": valid}
    init = states(layer, 6)
    def ctx(train: bool) -> rk.Ctx:
        return (rk.Ctx.training() if train else rk.Ctx.inference()).set_mask(**arg)

    errs = _fd_check(layer, x, ctx, init)
    assert max(errs.values()) < 1e-6, errs


def test_mask_errors_are_typed() -> None:
    layer = make("LSTM")
    with pytest.raises(rk.InvalidInputError, match=r"mask has shape \(4, 5\).*\(4, 6\)"):
        layer.forward(x_in(), rk.Ctx.inference().set_mask(np.ones((B, T - 1), bool)))
    with pytest.raises(rk.InvalidInputError, match="length of 9 exceeds the 6 timesteps"):
        layer.forward(x_in(), rk.Ctx.inference().set_mask(lengths=np.array([9, 1, 1, 1])))
    with pytest.raises(rk.InvalidInputError, match="boolean"):
        rk.Mask(np.full((B, T), 0.5))
    with pytest.raises(rk.InvalidInputError, match="exactly one"):
        rk.Mask()
    with pytest.raises(rk.InvalidInputError, match="cannot take a masked input"):
        rk.RepeatVector(2).compute_mask(np.zeros((B, 3)), rk.Mask(lengths=LENGTHS))


# -- states in and out --------------------------------------------------------------------------

@pytest.mark.parametrize("cell", list(CELLS))
def test_initial_and_returned_states_gradcheck(mode: str, cell: str) -> None:
    layer = make(cell, return_state=True)
    init = states(layer, 6)
    errs = _fd_check(layer, x_in(7), lambda train: rk.Ctx.training() if train else rk.Ctx.inference(), init)
    assert set(errs) >= {"input", "init0"} and max(errs.values()) < 1e-6, errs


def test_initial_state_is_where_seq_init_starts() -> None:
    layer = make("LSTM", return_sequences=True)
    st = layer.zero_state(B)._replace(h=np.full((B, H), 0.3), c=np.full((B, H), -0.2))
    out = layer.forward([x_in(), *st], rk.Ctx.inference())
    np.testing.assert_array_equal(out, layer.seq_init(x_in(), st)[0])
    with pytest.raises(rk.InvalidInputError, match=r"list \[x, h, c\]"):
        layer.forward([x_in(), st.h], rk.Ctx.inference())


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_seq_init_records_in_a_training_ctx(cell: str) -> None:
    """seq_init takes a training Ctx; its backward equals the layer's."""
    layer = make(cell, return_sequences=True, return_state=True)
    init = states(layer, 6)
    g = np.random.default_rng(1).standard_normal((B, T, H))
    gs = states(layer, 2)
    c1 = rk.Ctx.training()
    seq, final = layer.seq_init(x_in(), layer.cell.make_state(tuple(init)), c1)
    dx, d_state = layer.backward((g, layer.cell.make_state(tuple(gs))), c1)
    c2 = rk.Ctx.training()
    out, *fin = layer.forward([x_in(), *init], c2)
    want = layer.backward([g, *gs], c2)
    np.testing.assert_allclose(seq, out, atol=1e-14)
    np.testing.assert_allclose(dx, want[0], atol=1e-13)
    assert type(d_state) is type(final)
    for a, b in zip(d_state, want[1:], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-13)
    for n in layer.weight_names:
        np.testing.assert_allclose(c1.grad(layer, n), c2.grad(layer, n), atol=1e-12)


# -- stateful ------------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["LSTM", "GRU", "SimpleRNN"])
def test_stateful_chunks_equal_one_pass(mode: str, cell: str) -> None:
    whole = make(cell, return_sequences=True)
    chunks = make(cell, return_sequences=True, stateful=True)
    x = np.random.default_rng(0).standard_normal((B, 3 * T, F))
    want = whole.forward(x, rk.Ctx.inference())
    got = [chunks.forward(x[:, k * T:(k + 1) * T], rk.Ctx.inference()) for k in range(3)]
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, atol=1e-12)
    np.testing.assert_allclose(chunks.states[0], want[:, -1], atol=1e-12)
    chunks.reset_state()
    assert chunks.states is None
    np.testing.assert_allclose(chunks.forward(x[:, :T], rk.Ctx.inference()), want[:, :T], atol=1e-12)
    with pytest.raises(rk.InvalidInputError, match="carries the state of 4 sequences, this batch has 2"):
        chunks.forward(x[:2, :T], rk.Ctx.inference())


def test_stateful_training_truncates_bptt_at_the_chunk_edge(mode: str) -> None:
    """The second chunk's gradients equal a plain loop that starts from the carried state as a
    constant: nothing flows into the first chunk."""
    layer = make("LSTM", return_sequences=True, stateful=True)
    x = np.random.default_rng(0).standard_normal((B, 2 * T, F))
    layer.forward(x[:, :T], rk.Ctx.training())
    carried = layer.states
    ctx = rk.Ctx.training()
    y = layer.forward(x[:, T:], ctx)
    g = np.random.default_rng(1).standard_normal(y.shape)
    dx = layer.backward(g, ctx)
    plain = make("LSTM", return_sequences=True)
    c2 = rk.Ctx.training()
    y2 = plain.forward([x[:, T:], *carried], c2)
    dx2, *_ = plain.backward(g, c2)
    np.testing.assert_allclose(y, y2, atol=1e-13)
    np.testing.assert_allclose(dx, dx2, atol=1e-13)
    for n in layer.weight_names:
        np.testing.assert_allclose(ctx.grad(layer, n), c2.grad(plain, n), atol=1e-12)


# -- dropout ------------------------------------------------------------------------------------

def test_input_dropout_is_a_fixed_mask_in_the_ctx(mode: str) -> None:
    layer = make("GRU", return_sequences=True, dropout=0.4)
    plain = make("GRU", return_sequences=True)
    x = x_in(2)
    y_inf = layer.forward(x, rk.Ctx.inference())
    np.testing.assert_array_equal(y_inf, plain.forward(x, rk.Ctx.inference()))   # off in inference
    ctx = rk.Ctx.training(seed=5)
    y = layer.forward(x, ctx)
    drop = (np.random.default_rng(5).random((B, 1, F)) >= 0.4) / 0.6           # the same draw
    np.testing.assert_allclose(y, plain.forward(x * drop, rk.Ctx.inference()), atol=1e-13)
    errs = _fd_check(layer, x, lambda train: rk.Ctx.training(seed=5))       # the same mask each pass
    assert max(errs.values()) < 1e-6, errs
    assert layer.get_config()["dropout"] == 0.4
    with pytest.raises(rk.InvalidParameterError, match=r"dropout must be a finite number in \[0\.0, 1\.0\)"):
        rk.LSTM(3, dropout=1.0)


# -- PyTorch's packed sequences -------------------------------------------------------------------

@pytest.mark.parametrize("bidi", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_pack_padded_sequence_parity(kind: str, layers: int, bidi: bool) -> None:
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    torch.manual_seed(0)
    ref = getattr(torch.nn, kind.upper())(F, H, num_layers=layers, bidirectional=bidi, batch_first=True)
    net = getattr(rk.rnn, kind)(F, H, rk.rnn.RNNConfig(num_layers=layers, bidirectional=bidi),
                                return_state=True)
    net.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    packed = pack_padded_sequence(tx, torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False)
    t_out, t_state = ref(packed)
    t_out, _ = pad_packed_sequence(t_out, batch_first=True, total_length=T)
    ctx = rk.Ctx.training().set_mask(lengths=LENGTHS)
    out, *final = net.forward(x, ctx)
    np.testing.assert_allclose(out, t_out.detach().numpy(), atol=1e-5)
    t_parts = t_state if isinstance(t_state, tuple) else (t_state,)
    for a, b in zip(final, t_parts, strict=True):
        np.testing.assert_allclose(a, b.detach().numpy(), atol=1e-5)
    g = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    gs = [np.random.default_rng(2 + k).standard_normal(f.shape).astype(np.float32)
          for k, f in enumerate(final)]
    loss = (t_out * torch.tensor(g)).sum()
    for p, q in zip(t_parts, gs, strict=True):
        loss = loss + (p * torch.tensor(q)).sum()
    loss.backward()
    dx = net.backward([g, *gs], ctx)
    for ours, theirs, name in [(dx, tx.grad, "input")] + [(ctx.grad(net, n), p.grad, n)
                                                           for n, p in ref.named_parameters()]:
        err = np.abs(ours - theirs.numpy()).max() / max(np.abs(theirs.numpy()).max(), 1e-30)
        assert err <= 1e-4, f"{name}: {err:.2e}"


def test_model_reset_states_and_stateful_fit_on_chunks() -> None:
    """A stateful model trained on consecutive chunks of a long series: the state is carried
    between ``fit`` calls and ``reset_states`` clears it."""
    series = np.sin(np.arange(0, 2 * 3 * 20) * 0.3).reshape(2, 60, 1).astype(np.float32)
    model = (rk.SequentialBuilder().add(rk.LSTM(6, return_sequences=True, stateful=True, seed=1))
             .add(rk.Dense(1, seed=2)).build(rk.Shape((2, None, 1))))
    model.compile(rk.Adam(0.02), "mse")
    for _ in range(30):
        for k in range(3):
            chunk = series[:, 20 * k:20 * (k + 1)]
            model.fit(chunk[:, :-1], chunk[:, 1:], 1, verbose=0)
        model.reset_states()
    assert model.layers[0].states is None
    pred = model.predict(series[:, :-1])
    assert float(np.mean((pred - series[:, 1:]) ** 2)) < 0.02


@pytest.mark.parametrize("cell", list(CELLS))
def test_recurrent_dropout(mode: str, cell: str) -> None:
    """One mask per sequence on the state fed back, fixed by the Ctx's seed: finite differences
    agree, nothing happens in inference, and the compiled path equals the reference."""
    layer = make(cell, return_sequences=True, recurrent_dropout=0.3, dropout=0.2)
    x = x_in(8)
    np.testing.assert_array_equal(layer.forward(x, rk.Ctx.inference()),
                                  make(cell, return_sequences=True).forward(x, rk.Ctx.inference()))
    errs = _fd_check(layer, x, lambda train: rk.Ctx.training(seed=9))
    assert max(errs.values()) < 1e-6, errs
    c1, c2 = rk.Ctx.training(seed=9), rk.Ctx.training(seed=9)
    y1 = layer.forward(x, c1)
    with rk.kernels.use("reference" if mode == "fast" else "fast"):
        y2 = layer.forward(x, c2)
        d2 = layer.backward(np.ones_like(y2), c2)
    d1 = layer.backward(np.ones_like(y1), c1)
    np.testing.assert_allclose(y1, y2, atol=1e-12)
    np.testing.assert_allclose(d1, d2, atol=1e-12)
    for n in layer.weight_names:
        np.testing.assert_allclose(c1.grad(layer, n), c2.grad(layer, n), atol=1e-11)
    y_no = make(cell, return_sequences=True, dropout=0.2).forward(x, rk.Ctx.training(seed=9))
    assert np.abs(y1 - y_no).max() > 1e-3     # the recurrent mask does act


def test_return_state_shapes_and_an_unused_output() -> None:
    """compute_output_shape lists the state parts; backward takes None for an output nobody
    used (only the states feed on), as a graph model passes it."""
    layer = make("LSTM", return_state=True)
    shapes = layer.compute_output_shape(rk.Shape((None, T, F)))
    assert [tuple(s) for s in shapes] == [(None, H), (None, H), (None, H)]
    ctx = rk.Ctx.training()
    layer.forward(x_in(), ctx)
    dh = np.random.default_rng(1).standard_normal((B, H))
    dx = layer.backward([None, dh, None], ctx)
    c2 = rk.Ctx.training()
    layer.forward(x_in(), c2)
    want = layer.backward([np.zeros((B, H)), dh, np.zeros((B, H))], c2)
    np.testing.assert_array_equal(dx, want)
