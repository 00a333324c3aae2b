"""xLSTM's sLSTM and mLSTM (rnnkit.recurrent._xlstm): values against PyTorch autograd of the
same equations written here (independently: sLSTM's block-diagonal recurrence as one full
block-diagonal matrix, mLSTM's outer products by einsum), gradients against float64 central
differences (the shared harness), mLSTM's recurrent, parallel and chunkwise forms against one
another, and the layer paths (masks, initial states, stateful, Bidirectional, streaming, files).

Tolerances. float64: every path computes the same sums in another order, so the differences
are rounding, a few 1e-16 per operation over a few hundred operations: 1e-10 (outputs and
forms), 1e-9 (gradients, relative to the largest entry). float32: the same over eps32 = 6e-8,
T <= 12 steps with tens of operations each, relative to the largest entry: 1e-5.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer
from rnnkit.recurrent._xlstm import MLSTMCell, mlstm_chunkwise, mlstm_parallel, mlstm_parallel_back
from rnnkit.testing import check_cell

B, T, F = 3, 7, 5
FORGETS = ["sigmoid", "exp"]


def _rel(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def _layer(kind: str, units: int, heads: int, fg: str, dtype: str, rng: np.random.Generator,
           **kw: Any) -> rk.RecurrentLayer:
    """A built layer with random weights (scale 0.5: gates away from saturation and ties)."""
    cls = rk.SLSTM if kind == "slstm" else rk.MLSTM
    layer = cls(units, heads, forget_gate=fg, seed=1, dtype=dtype, **kw)
    layer.build(rk.Shape((None, None, F)))
    for name in layer.weight_names:
        layer.set_weight(name, 0.5 * rng.standard_normal(layer.weight(name).shape))
    return layer


# -- PyTorch autograd of the same equations ----------------------------------------------------

def _torch_slstm(torch: Any, x: Any, W: Any, R: Any, b: Any, nh: int, fg: str, init: Any = None) -> Any:
    Bx, Tx, _ = x.shape
    H = W.shape[1] // 4
    dh = H // nh
    # the block-diagonal recurrent matrix, (H, 4H) with gate blocks [i | f | z | o]
    Rfull = torch.cat([torch.block_diag(*[R[k][:, g * dh:(g + 1) * dh] for k in range(nh)])
                       for g in range(4)], dim=1)
    h, c, n, m = init if init is not None else [torch.zeros(Bx, H, dtype=x.dtype) for _ in range(4)]
    hs = []
    for t in range(Tx):
        a = x[:, t] @ W + b[0] + h @ Rfull
        ai, af, az, ao = a[:, :H], a[:, H:2 * H], a[:, 2 * H:3 * H], a[:, 3 * H:]
        logf = af if fg == "exp" else torch.nn.functional.logsigmoid(af)
        mn = torch.where(logf + m >= ai, logf + m, ai)
        ip, fp = torch.exp(ai - mn), torch.exp(logf + m - mn)
        c = fp * c + ip * torch.tanh(az)
        n = fp * n + ip
        h = torch.sigmoid(ao) * c / n
        m = mn
        hs.append(h)
    return torch.stack(hs, 1), (h, c, n, m)


def _torch_mlstm(torch: Any, x: Any, W: Any, b: Any, nh: int, fg: str, init: Any = None) -> Any:
    Bx, Tx, _ = x.shape
    H = (W.shape[1] - 2 * nh) // 4
    dh = H // nh
    if init is None:
        h = torch.zeros(Bx, H, dtype=x.dtype)
        C, n, m = (torch.zeros(Bx, nh, dh, dh, dtype=x.dtype), torch.zeros(Bx, nh, dh, dtype=x.dtype),
                   torch.zeros(Bx, nh, dtype=x.dtype))
    else:
        h, C, n, m = init[0], init[1].reshape(Bx, nh, dh, dh), init[2].reshape(Bx, nh, dh), init[3]
    hs = []
    for t in range(Tx):
        p = x[:, t] @ W + b[0]
        q = p[:, :H].reshape(Bx, nh, dh)
        k = p[:, H:2 * H].reshape(Bx, nh, dh) / math.sqrt(dh)
        v = p[:, 2 * H:3 * H].reshape(Bx, nh, dh)
        ao, ai, af = p[:, 3 * H:4 * H], p[:, 4 * H:4 * H + nh], p[:, 4 * H + nh:]
        logf = af if fg == "exp" else torch.nn.functional.logsigmoid(af)
        mn = torch.where(logf + m >= ai, logf + m, ai)
        ip, fp = torch.exp(ai - mn), torch.exp(logf + m - mn)
        C = fp[..., None, None] * C + ip[..., None, None] * torch.einsum("bki,bkj->bkij", v, k)
        n = fp[..., None] * n + ip[..., None] * k
        num = torch.einsum("bkij,bkj->bki", C, q)
        den = torch.maximum(torch.einsum("bkj,bkj->bk", n, q).abs(), torch.exp(-mn))
        h = torch.sigmoid(ao) * (num / den[..., None]).reshape(Bx, H)
        m = mn
        hs.append(h)
    return torch.stack(hs, 1), (h, C.reshape(Bx, -1), n.reshape(Bx, -1), m)


def _torch_run(kind: str, layer: rk.RecurrentLayer, x: np.ndarray, G: np.ndarray,
               init: list[np.ndarray] | None = None, d_final: list[np.ndarray] | None = None
               ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, dict[str, np.ndarray], list[np.ndarray]]:
    """(outputs (B, T, H), final state, dx, {weight: grad}, d_init) in float64 for
    L = sum(y * G) + sum(final_k * d_final_k)."""
    torch = pytest.importorskip("torch")
    t = {n: torch.tensor(np.asarray(layer.weight(n), np.float64), requires_grad=True)
         for n in layer.weight_names}
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ti = None if init is None else [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in init]
    nh, fg = layer.cell.num_heads, layer.cell.forget_gate  # type: ignore[attr-defined]
    if kind == "slstm":
        y, fin = _torch_slstm(torch, tx, t["kernel"], t["recurrent_kernel"], t["bias"], nh, fg, ti)
    else:
        y, fin = _torch_mlstm(torch, tx, t["kernel"], t["bias"], nh, fg, ti)
    loss = (y * torch.tensor(G)).sum()
    if d_final is not None:
        loss = loss + sum((f * torch.tensor(d)).sum() for f, d in zip(fin, d_final, strict=True))
    loss.backward()
    d_init = [] if ti is None else [np.zeros(a.shape) if a.grad is None else a.grad.numpy() for a in ti]
    return (y.detach().numpy(), [f.detach().numpy() for f in fin], tx.grad.numpy(),
            {n: v.grad.numpy() for n, v in t.items()}, d_init)


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-9), ("float32", 1e-5)])
@pytest.mark.parametrize("fg", FORGETS)
@pytest.mark.parametrize("kind", ["slstm", "mlstm"])
def test_plain_pass_matches_torch_autograd(kind: str, fg: str, dtype: str, tol: float) -> None:
    """The plain pass (sLSTM: the step walk; mLSTM: the parallel form, inference the chunkwise
    form) against torch's loop: outputs, input and weight gradients."""
    rng = np.random.default_rng(3)
    layer = _layer(kind, 8, 2, fg, dtype, rng, return_sequences=True,
                   **({"chunk_size": 3} if kind == "mlstm" else {}))
    x = rng.standard_normal((B, T, F))
    G = rng.standard_normal((B, T, 8))
    ty, _, tdx, tg, _ = _torch_run(kind, layer, x, G)
    ctx = rk.Ctx.training()
    y = layer.forward(x, ctx)
    dx = layer.backward(G, ctx)
    assert y.dtype == np.dtype(dtype)
    assert _rel(y, ty) <= tol
    assert _rel(layer.predict(x), ty) <= tol
    assert _rel(dx, tdx) <= tol
    for name in layer.weight_names:
        assert _rel(ctx.grad(layer, name), tg[name]) <= tol, name


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-9), ("float32", 1e-5)])
@pytest.mark.parametrize("fg", FORGETS)
@pytest.mark.parametrize("kind", ["slstm", "mlstm"])
def test_states_in_and_out_match_torch_autograd(kind: str, fg: str, dtype: str, tol: float) -> None:
    """From a given initial state, handing out the final state (mLSTM: the parallel form, the
    walker's choice for a pass of several steps), with a gradient on every final state part
    (the stabilizer m's included)."""
    rng = np.random.default_rng(4)
    layer = _layer(kind, 8, 2, fg, dtype, rng, return_sequences=True, return_state=True)
    x = rng.standard_normal((B, T, F))
    G = rng.standard_normal((B, T, 8))
    sizes = layer.cell.state_sizes()
    # a reachable initial state: the final state of another sequence (n > 0 where it must be)
    warm = _layer(kind, 8, 2, fg, "float64", np.random.default_rng(4), return_sequences=True,
                  return_state=True)
    init = [np.asarray(a) for a in warm.forward(rng.standard_normal((B, 4, F)), rk.Ctx.inference())[1:]]
    d_final = [rng.standard_normal((B, n)) for n in sizes]
    ty, tfin, tdx, tg, td_init = _torch_run(kind, layer, x, G, init, d_final)
    ctx = rk.Ctx.training()
    out = layer.forward([x, *init], ctx)
    assert _rel(out[0], ty) <= tol
    for a, b in zip(out[1:], tfin, strict=True):
        assert _rel(a, b) <= tol
    back = layer.backward([G, *d_final], ctx)
    assert _rel(back[0], tdx) <= tol
    for a, b in zip(back[1:], td_init, strict=True):
        assert _rel(a, b) <= tol
    for name in layer.weight_names:
        assert _rel(ctx.grad(layer, name), tg[name]) <= tol, name


# -- mLSTM's three forms -----------------------------------------------------------------------

def _recurrent(cell: MLSTMCell, inp: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    Bx, Tx, _ = inp.shape
    state = tuple(np.zeros((Bx, n), inp.dtype) for n in cell.state_sizes())
    hs = []
    for t in range(Tx):
        state = cell.step({}, inp[:, t], state, None)
        hs.append(state[0])
    return np.stack(hs, 1), state


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-10), ("float32", 1e-5)])
@pytest.mark.parametrize("fg", FORGETS)
def test_mlstm_recurrent_parallel_chunkwise_agree(fg: str, dtype: str, tol: float) -> None:
    cell = MLSTMCell(12, 3, forget_gate=fg)
    rng = np.random.default_rng(5)
    inp = (1.5 * rng.standard_normal((4, 12, cell.width))).astype(dtype)
    h_rec, final = _recurrent(cell, inp)
    h_par, fin_par, _ = mlstm_parallel(cell, inp)
    assert h_par.dtype == np.dtype(dtype)
    assert _rel(h_par, h_rec) <= tol
    for a, b in zip(fin_par, final[1:], strict=True):
        assert _rel(a, b) <= tol
    for L in (1, 4, 5, 12, 40):
        h_ch, (C, n, m) = mlstm_chunkwise(cell, inp, L)
        assert _rel(h_ch, h_rec) <= tol, L
        for a, b in zip((C, n, m), final[1:], strict=True):
            assert _rel(a, b) <= tol, L
    # the chunkwise form from a state: the second half after the first
    _, mid = mlstm_chunkwise(cell, inp[:, :5], 2)
    h2, _ = mlstm_chunkwise(cell, inp[:, 5:], 3, mid)
    assert _rel(h2, h_rec[:, 5:]) <= tol
    # the parallel form from a state too
    h3, fin3, _ = mlstm_parallel(cell, inp[:, 5:], mid)
    assert _rel(h3, h_rec[:, 5:]) <= tol
    for a, b in zip(fin3, final[1:], strict=True):
        assert _rel(a, b) <= tol


@pytest.mark.parametrize("m0", [None, -3.0, 12.0], ids=["zeros", "steps_win", "init_wins"])
def test_mlstm_parallel_backward_against_float64_differences(m0: float | None) -> None:
    """The parallel form's hand-written backward (row maxima held constant for h; the final
    stabilizer m_T differentiated through its max) against central differences of the parallel
    form itself, on every entry of the step inputs and of the initial state, with a gradient on
    h and on every final state part; a large forget pre-activation spread makes the maxima
    switch rows, and m_0 (-3 / +12) puts m_T's largest term on a step / on the initial state."""
    cell = MLSTMCell(4, 2)
    rng = np.random.default_rng(6)
    inp = 2.0 * rng.standard_normal((2, 6, cell.width))
    G = rng.standard_normal((2, 6, 4))
    sizes = cell.state_sizes()[1:]
    init = None if m0 is None else [rng.standard_normal((2, sizes[0])),
                                    np.abs(rng.standard_normal((2, sizes[1]))),
                                    m0 + 0.1 * rng.standard_normal((2, sizes[2]))]
    Gf = [rng.standard_normal((2, n)) for n in sizes]
    _, _, cache = mlstm_parallel(cell, inp, init, record=True)
    assert cache is not None
    if m0 is not None:   # the branch of m_T's max this case is for
        assert (cache.last == 6).all() if m0 > 0 else (cache.last < 6).all()
    d, d_init = mlstm_parallel_back(cell, cache, G, Gf)

    def loss() -> float:
        h, fin, _ = mlstm_parallel(cell, inp, init)
        return float(np.sum(h * G) + sum(np.sum(a * b) for a, b in zip(fin, Gf, strict=True)))

    eps = 1e-6
    # central differences: truncation O(eps^2) relative, plus the rounding of the loss over eps,
    # a few ulps of |L| / eps in absolute terms (it dominates for the small dL/dC_0 of "steps_win")
    noise = 8 * abs(loss()) * np.finfo(np.float64).eps / eps
    for arr, got in [(inp, d), *([] if init is None else zip(init, d_init, strict=True))]:
        num = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            old = arr[i]
            arr[i] = old + eps
            up = loss()
            arr[i] = old - eps
            num[i] = (up - loss()) / (2 * eps)
            arr[i] = old
        assert np.abs(got - num).max() <= 1e-7 * np.abs(num).max() + noise


# -- the shared harness ------------------------------------------------------------------------

@pytest.mark.parametrize("fg", FORGETS)
@pytest.mark.parametrize("cls", [rk.SLSTM, rk.MLSTM])
def test_layer_contract(cls: type, fg: str) -> None:
    report = check_layer(lambda dtype: cls(4, 2, forget_gate=fg, return_sequences=True, seed=3, dtype=dtype),
                         lambda rng: rng.standard_normal((2, 5, 3)))
    assert max(report.grad_errors.values()) < 1e-6


@pytest.mark.parametrize("blocks", [None, 2])
@pytest.mark.parametrize("fg", FORGETS)
def test_mlstm_recurrent_form_contract(fg: str, blocks: int | None) -> None:
    """``RecurrentLayer(MLSTMCell(...))`` walks the recurrent form on every pass: its step
    backward against float64 central differences, through the shared harness."""
    def make(dtype: str) -> rk.RecurrentLayer:
        return rk.RecurrentLayer(rk.MLSTMCell(4, 2, forget_gate=fg, qkv_blocksize=blocks),
                                 return_sequences=True, seed=3, dtype=dtype)

    report = check_layer(make,
                         lambda rng: rng.standard_normal((2, 5, 4)))
    assert max(report.grad_errors.values()) < 1e-6


# -- every layer path --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["slstm", "mlstm"])
def test_lengths_mask_equals_each_sequence_alone(kind: str) -> None:
    rng = np.random.default_rng(7)
    layer = _layer(kind, 8, 2, "sigmoid", "float64", rng, return_sequences=True)
    x = rng.standard_normal((B, T, F))
    lengths = [7, 4, 2]
    ctx = rk.Ctx.inference().set_mask(lengths=lengths)
    y = layer.forward(x, ctx)
    for b, n in enumerate(lengths):
        alone = layer.predict(x[b:b + 1, :n])
        assert _rel(y[b, :n], alone[0]) <= 1e-12
        assert not y[b, n:].any()


@pytest.mark.parametrize("kind", ["slstm", "mlstm"])
def test_stateful_halves_equal_the_whole(kind: str) -> None:
    rng = np.random.default_rng(8)
    whole = _layer(kind, 8, 2, "exp", "float64", rng, return_sequences=True)
    half = type(whole)(8, 2, forget_gate="exp", return_sequences=True, stateful=True, dtype="float64")
    half.build(rk.Shape((None, None, F)))
    half.set_weights(**dict(whole.weights()))
    x = rng.standard_normal((B, 8, F))
    y = whole.predict(x)
    y1 = half.forward(x[:, :5], rk.Ctx.inference())
    y2 = half.forward(x[:, 5:], rk.Ctx.inference())
    assert _rel(np.concatenate([y1, y2], 1), y) <= 1e-12


@pytest.mark.parametrize("kind", ["slstm", "mlstm"])
def test_streaming_steps_and_go_backwards(kind: str) -> None:
    rng = np.random.default_rng(9)
    layer = _layer(kind, 8, 2, "sigmoid", "float64", rng, return_sequences=True)
    x = rng.standard_normal((B, T, F))
    y = layer.predict(x)
    state = layer.zero_state(B)
    for t in range(T):
        state = layer.step(x[:, t], state)
        assert _rel(state[0], y[:, t]) <= 1e-12
    seq, _ = layer.seq(x)
    assert _rel(seq, y) <= 1e-12
    back = type(layer)(8, 2, return_sequences=True, go_backwards=True, dtype="float64")
    back.build(rk.Shape((None, None, F)))
    back.set_weights(**dict(layer.weights()))
    assert _rel(back.predict(x), layer.predict(x[:, ::-1])) <= 1e-12


@pytest.mark.parametrize("kind", ["slstm", "mlstm"])
def test_bidirectional_and_model_file(kind: str, tmp_path: Any) -> None:
    rng = np.random.default_rng(10)
    inner = _layer(kind, 8, 2, "sigmoid", "float64", rng)
    model = rk.Sequential([rk.Bidirectional(inner), rk.Dense(1, seed=2)]).build(rk.Shape((None, T, F)))
    x = rng.standard_normal((B, T, F))
    bi = model.layers[0]
    fwd, bwd = bi.forward_layer, bi.backward_layer
    y = bi.forward(x, rk.Ctx.inference())
    assert _rel(y, np.concatenate([fwd.predict(x), bwd.predict(x)], -1)) <= 1e-12
    assert _rel(bwd.predict(x), fwd.predict(x)) > 1e-3   # the two directions differ
    model.compile(rk.Adam(0.01), "mse")
    model.fit(x, rng.standard_normal((B, 1)), epochs=2, batch_size=B, seed=0, verbose=0)
    model.save(str(tmp_path / "x.rnnkit"))
    again = rk.load_model(str(tmp_path / "x.rnnkit"))
    assert np.array_equal(again.predict(x), model.predict(x))
    assert type(again.layers[0].forward_layer) is type(inner)


def test_mlstm_chunk_size_and_parallel_inference_agree() -> None:
    rng = np.random.default_rng(11)
    layer = _layer("mlstm", 8, 4, "sigmoid", "float64", rng, return_sequences=True)
    x = rng.standard_normal((B, 13, F))
    y = layer.predict(x)
    for cs in (None, 1, 5, 100):
        other = rk.MLSTM(8, 4, chunk_size=cs, return_sequences=True, dtype="float64")
        other.build(rk.Shape((None, None, F)))
        other.set_weights(**dict(layer.weights()))
        assert _rel(other.predict(x), y) <= 1e-12
    assert rk.MLSTM(8, chunk_size=None).get_config()["chunk_size"] is None


def test_bad_options_are_typed_errors() -> None:
    with pytest.raises(rk.InvalidParameterError, match="multiple of num_heads.*units=6, num_heads=4"):
        rk.SLSTM(6)
    with pytest.raises(rk.InvalidParameterError, match="forget_gate must be one of.*'tanh'"):
        rk.MLSTM(8, forget_gate="tanh")
    with pytest.raises(rk.InvalidParameterError, match="chunk_size"):
        rk.MLSTM(8, chunk_size=0)
    with pytest.raises(rk.InvalidParameterError, match="num_heads"):
        rk.SLSTMCell(8, 0)


def test_paper_defaults() -> None:
    s, m = rk.SLSTM(8), rk.MLSTM(8)
    assert s.cell.num_heads == m.cell.num_heads == 4
    assert s.cell.forget_gate == m.cell.forget_gate == "sigmoid"
    s.build(rk.Shape((None, None, 3)))
    m.build(rk.Shape((None, None, 3)))
    assert s.param_count() == 4 * (3 * 8 + 8 * 2 + 8)
    assert m.param_count() == (3 + 1) * (4 * 8 + 2 * 4)
    f = 1.0 / (1.0 + np.exp(-s.weight("bias")[0, 8:16]))
    assert np.allclose(f, 1.0 / (1.0 + np.exp(-np.linspace(3, 6, 8))))


def test_parallel_form_respects_the_memory_budget() -> None:
    """The parallel form's (B, heads, T, T) decay matrix is refused over the per-array budget
    before it is allocated; the chunkwise inference path needs only (B, heads, L, L)."""
    layer = rk.MLSTM(8, 2, chunk_size=4, return_sequences=True, seed=0, dtype="float64", input_dim=F)
    x = np.random.default_rng(12).standard_normal((1, 50, F))
    old = rk.io.set_limits(max_array_bytes=1 * 2 * 50 * 50 * 8 - 1)
    try:
        with pytest.raises(rk.MemoryBudgetError, match=r"parallel form.*\(1, 2, 50, 50\)"):
            layer.forward(x, rk.Ctx.training())
        y = layer.predict(x)
    finally:
        rk.io.set_limits(**old)
    assert _rel(y, layer.forward(x, rk.Ctx.training())) <= 1e-12


def _full_kernel(layer: rk.MLSTM) -> np.ndarray:
    """The dense (F, 4H + 2 heads) kernel equal to a block-diagonal q/k/v layer's weights."""
    blocks, rest = np.asarray(layer.weight("qkv_kernel")), np.asarray(layer.weight("kernel"))
    full = [np.zeros((rest.shape[0], rest.shape[0])) for _ in range(3)]
    s = blocks.shape[2]
    for g in range(3):
        for j in range(blocks.shape[1]):
            full[g][j * s:(j + 1) * s, j * s:(j + 1) * s] = blocks[g, j]
    return np.concatenate([*full, rest], axis=1)


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-9), ("float32", 1e-5)])
@pytest.mark.parametrize("path", ["parallel", "recurrent"])
def test_mlstm_block_diagonal_qkv_matches_torch_autograd(path: str, dtype: str, tol: float) -> None:
    """qkv_blocksize: torch runs the dense kernel with the blocks laid out on its diagonal;
    the blocks' gradients are the diagonal blocks of the dense kernel's gradient."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    H = 8
    layer = rk.MLSTM(H, 2, qkv_blocksize=2, return_sequences=True, dtype=dtype,
                     return_state=path == "recurrent")
    layer.build(rk.Shape((None, None, H)))
    for name in layer.weight_names:
        layer.set_weight(name, 0.5 * rng.standard_normal(layer.weight(name).shape))
    assert layer.param_count() == 3 * H * 2 + (H + 1) * (H + 4) + 3 * H
    x = rng.standard_normal((B, T, H))
    G = rng.standard_normal((B, T, H))
    W = torch.tensor(_full_kernel(layer), requires_grad=True)
    b = torch.tensor(np.asarray(layer.weight("bias"), np.float64), requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    ty, _ = _torch_mlstm(torch, tx, W, b, 2, "sigmoid")
    (ty * torch.tensor(G)).sum().backward()
    ctx = rk.Ctx.training()
    out = layer.forward(x, ctx)
    y = out[0] if path == "recurrent" else out
    dx = layer.backward([G, None, None, None, None] if path == "recurrent" else G, ctx)
    assert _rel(y, ty.detach().numpy()) <= tol
    assert _rel(dx, tx.grad.numpy()) <= tol
    gW = W.grad.numpy()
    assert _rel(ctx.grad(layer, "kernel"), gW[:, 3 * H:]) <= tol
    assert _rel(ctx.grad(layer, "bias"), b.grad.numpy()) <= tol
    gq = ctx.grad(layer, "qkv_kernel")
    for g in range(3):
        for j in range(H // 2):
            want = gW[j * 2:(j + 1) * 2, g * H + j * 2:g * H + (j + 1) * 2]
            assert np.abs(gq[g, j] - want).max() <= tol * np.abs(gW).max()


def test_mlstm_block_diagonal_contract_and_refusal() -> None:
    report = check_layer(lambda dtype: rk.MLSTM(4, 2, qkv_blocksize=2, return_sequences=True, seed=3,
                                                dtype=dtype),
                         lambda rng: rng.standard_normal((2, 5, 4)))
    assert max(report.grad_errors.values()) < 1e-6
    with pytest.raises(rk.InvalidParameterError, match="keep the width.*units=4 features, got 3"):
        rk.MLSTM(4, 2, qkv_blocksize=2, input_dim=3)
    with pytest.raises(rk.InvalidParameterError, match="multiple of qkv_blocksize.*units=6, qkv_blocksize=4"):
        rk.MLSTM(6, 2, qkv_blocksize=4)


@pytest.mark.parametrize("cls", [rk.SLSTM, rk.MLSTM])
def test_serve_stream_steps_equal_predict(cls: type) -> None:
    """A stream of ``rnnkit serve`` (its step plan) fed a sequence in pieces gives what
    predict gives for the whole of it, for two streams batched together."""
    pytest.importorskip("starlette")
    from rnnkit.serve._stepper import plan_streams

    model = rk.Sequential([cls(8, 2, return_sequences=True, seed=1, dtype="float64"), rk.Dense(2, seed=2)],
                          input_shape=(None, None, F))
    plan, why = plan_streams(model, [1, 2])
    assert plan is not None, why
    x = np.random.default_rng(14).standard_normal((2, 9, F))
    states = plan.stack([plan.zero(), plan.zero()])
    outs = []
    for t0, t1 in ((0, 4), (4, 5), (5, 9)):
        y, states = plan.step(x[:, t0:t1], states)
        outs.append(y)
    assert _rel(np.concatenate(outs, 1), model.predict(x)) <= 1e-12


@pytest.mark.parametrize("kw", [{}, {"forget_gate": "exp"}, {"qkv_blocksize": 2}],
                         ids=["sigmoid", "exp", "qkv"])
def test_check_cell_passes_the_mlstm_cell(kw: dict[str, Any]) -> None:
    """rnnkit.testing.check_cell on MLSTMCell: its step backward against float64 central
    differences (input, every state part, every weight; grad_rtol 1e-6, eps 1e-6: truncation
    ~1e-12 and rounding ~1e-10 relative), and its parallel form (the contract's
    ``sequence_forward`` / ``sequence_backward``) against the step form from a random initial
    state with a gradient on every final state part: outputs, final states and every gradient
    (rtol 1e-10: the same sums in another order, float64)."""
    errs = check_cell(rk.MLSTMCell(4, num_heads=2, **kw), input_dim=4)
    assert {"gradcheck:dx", "gradcheck:d_kernel", "gradcheck:d_bias", "gradcheck:d_init1",
            "gradcheck:d_init2", "gradcheck:d_init3"} <= set(errs)
    assert {"parallel form:y", "parallel form:dx", "parallel form:final1", "parallel form:final3",
            "parallel form:d_init1", "parallel form:d_init3", "parallel form:d_kernel"} <= set(errs)
    # m_T's largest term on the initial state (m_0 = 4) and on a step (m_0 = -3)
    for m0 in (4.0, -3.0):
        sizes = rk.MLSTMCell(4, num_heads=2).state_sizes()
        rng = np.random.default_rng(1)
        init = tuple(rng.standard_normal((3, n)) for n in sizes[:3]) + (np.full((3, sizes[3]), m0),)
        errs = check_cell(rk.MLSTMCell(4, num_heads=2, **kw), input_dim=4, init=init)
        assert errs["parallel form:d_init3"] <= 1e-10
