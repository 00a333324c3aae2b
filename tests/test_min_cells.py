"""MinGRU and MinLSTM (Feng et al., 2024): the step form against the parallel (log-space scan)
form, gradients against float64 finite differences and against PyTorch autograd of the
paper's equations written here, masks, states, streaming, Bidirectional, files (ONNX: test_onnx_scan.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer
from rnnkit.recurrent._walker import has_sequence_form, reference_walk, reference_walk_back, walk, walk_back
from rnnkit.testing import check_cell

LAYERS = [rk.MinGRU, rk.MinLSTM]
F, H = 3, 5


def _layer(cls: Any, dtype: str = "float64", seed: int = 1, **kw: Any) -> Any:
    """A built layer whose bias is drawn too (zeros would leave half of the gates' range unused),
    scaled so that both branches of g (x >= 0, x < 0) are taken."""
    layer = cls(H, seed=seed, dtype=dtype, **kw)
    layer.build(rk.Shape((None, None, F)))
    rng = np.random.default_rng(seed + 100)
    layer.set_weight("kernel", 1.5 * rng.standard_normal(layer.weight("kernel").shape))
    layer.set_weight("bias", rng.standard_normal(layer.weight("bias").shape))
    return layer


def _x(B: int = 4, T: int = 9, dtype: str = "float64", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, T, F)).astype(dtype)


# -- step form == parallel form ---------------------------------------------------------------
# The parallel form differs from the step form by rounding only. float64: the log-space scan
# adds and subtracts the cumulative log(1 - z), |A_t| <= T * max softplus(k) ~ 9 * 6 here, so
# a few ulps of 60 relative: ~1e-14, asserted 1e-10. float32: the same with eps = 6e-8:
# ~60 * 6e-8 * a few ~ 1e-5 relative at the end of the sequence; h ~ O(1): asserted 1e-5 absolute.
@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("dtype,tol", [("float64", 1e-10), ("float32", 1e-5)])
@pytest.mark.parametrize("go_backwards", [False, True])
def test_step_and_parallel_forms_agree(cls: Any, dtype: str, tol: float, go_backwards: bool) -> None:
    layer = _layer(cls, dtype, return_sequences=True, go_backwards=go_backwards)
    x = _x(dtype=dtype)
    par = layer.predict(x)                                  # T > 1: the parallel form
    state = layer.zero_state(4)
    steps = []
    for t in (range(8, -1, -1) if go_backwards else range(9)):
        state = layer.step(x[:, t], state)                  # one step: the step form
        steps.append(state[0])
    assert np.abs(par - np.stack(steps, axis=1)).max() < tol
    x_tm = np.ascontiguousarray((x[:, ::-1] if go_backwards else x).transpose(1, 0, 2))
    seq, _, _ = reference_walk(layer.cell, layer._weights, x_tm, None, False, True)
    assert np.abs(par - seq.transpose(1, 0, 2)).max() < tol
    assert par.min() > 0                                   # g > 0 keeps h positive


@pytest.mark.parametrize("cls", LAYERS)
def test_parallel_backward_equals_step_backward(cls: Any) -> None:
    """The parallel backward against the cell's step_back walked by the reference walker, on the
    same cache, with a mask, an initial state and a final-state gradient (float64, rounding)."""
    layer = _layer(cls, return_sequences=True, return_state=True)
    x, rng = _x(), np.random.default_rng(5)
    mask = rng.random((4, 9)) > 0.3
    h0 = rng.uniform(0, 2, (4, H))
    ctx = rk.Ctx.training().set_mask(mask)
    layer.forward([x, h0], ctx)
    cache = ctx.peek(layer).walk
    G, dfin = rng.standard_normal((4, 9, H)), rng.standard_normal((4, H))
    assert cache.form == "sequence"                        # a masked pass of T > 1: the parallel form
    got = walk_back(layer.cell, layer._weights, cache, G, True, (dfin,), True)
    ref = reference_walk_back(layer.cell, layer._weights, cache, G, True, (dfin,), True)
    assert np.abs(got[0] - ref[0]).max() < 1e-12
    for name in ("kernel", "bias"):
        assert np.abs(got[1][name] - ref[1][name]).max() < 1e-12
    assert np.abs(got[2][0] - ref[2][0]).max() < 1e-12


# -- the cell contract's parallel-form hook ----------------------------------------------------
@pytest.mark.parametrize("cell_cls", [rk.MinGRUCell, rk.MinLSTMCell])
@pytest.mark.parametrize("mode", ["fast", "reference"])
def test_check_cell_passes_the_min_cells(cell_cls: Any, mode: str) -> None:
    """rnnkit.testing.check_cell on the cells: the step backward against float64 central
    differences, the parallel form (the compiled scan in "fast", the NumPy scan in "reference")
    against the step form, with and without a mask. The initial state is >= 0 (the cells'
    check_init refuses a negative one). rtol 1e-10: the scans differ from the step form by the
    rounding of |A| <= 5 * ~4 in float64, ~1e-14 relative."""
    if mode == "fast" and not rk.kernels.available():
        pytest.skip("numba is not installed")
    cell = cell_cls(4)
    assert has_sequence_form(cell) and cell.sequence_takes_mask
    init = (np.random.default_rng(3).uniform(0.5, 2.0, (3, 4)),)
    with rk.kernels.use(mode):
        errs = check_cell(cell, init=init)
    assert {"parallel form:y", "parallel form:d_kernel", "parallel form:d_bias", "parallel form:d_init0",
            "parallel form (masked):y", "parallel form (masked):dx", "gradcheck:d_init0"} <= set(errs)


@pytest.mark.parametrize("cls", LAYERS)
def test_any_layer_over_the_cell_gets_the_masked_parallel_form(cls: Any) -> None:
    """The walker alone chooses the form: a plain RecurrentLayer over the cell runs the cell's
    parallel form for a masked training pass of T > 1 (a cache of form "sequence"), with the
    values of the step form walked by the reference walker (float64, rounding: 1e-12)."""
    layer = _layer(cls, return_sequences=True)
    plain = rk.RecurrentLayer(type(layer.cell)(H), return_sequences=True, dtype="float64")
    plain.build(rk.Shape((None, None, F)))
    plain.set_weights(**dict(layer.weights()))
    x, rng = _x(), np.random.default_rng(8)
    mask = rng.random((4, 9)) > 0.3
    ctx = rk.Ctx.training().set_mask(mask)
    y = plain.forward(x, ctx)
    cache = ctx.peek(plain).walk
    assert cache.form == "sequence"
    x_tm = np.ascontiguousarray(x.transpose(1, 0, 2))
    m_tm = np.ascontiguousarray(mask.T)
    seq, _, _ = reference_walk(plain.cell, plain._weights, x_tm, None, False, True, m_tm)
    assert np.abs(y - seq.transpose(1, 0, 2)).max() < 1e-12
    one, _, one_cache = walk(plain.cell, plain._weights, x_tm[:1], None, True, True)
    assert one_cache is not None and one_cache.form == "step"       # one step: the step form
    ref1, _, _ = reference_walk(plain.cell, plain._weights, x_tm[:1], None, False, True)
    assert np.abs(one - ref1).max() < 1e-12


# -- gradients: finite differences, the harness -----------------------------------------------
@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("kw", [{"return_sequences": True}, {"go_backwards": True}])
def test_harness_contract(cls: Any, kw: dict[str, Any]) -> None:
    """Gradients of every weight and of the input against float64 central differences (rtol
    1e-6), the fast path against the reference, threads, float32 vs float64, save/load."""
    report = check_layer(lambda dtype: _layer(cls, dtype, **kw), lambda rng: rng.standard_normal((3, 6, F)))
    assert max(report.grad_errors.values()) < 1e-6


# -- gradients: PyTorch autograd of the paper's equations -------------------------------------
def _torch_min(kind: str, x: Any, W: Any, b: Any, h0: Any, mask: Any) -> Any:
    """The paper's sequential equations, in torch (float64): every state, (B, T, H)."""
    torch = pytest.importorskip("torch")
    k = x @ W + b

    def g(v: Any) -> Any:
        return torch.where(v >= 0, v + 0.5, torch.sigmoid(v))

    h, out = h0, []
    for t in range(x.shape[1]):
        kt = k[:, t]
        if kind == "MinGRU":
            z, ht = torch.sigmoid(kt[:, :H]), g(kt[:, H:])
            new = (1 - z) * h + z * ht
        else:
            f, i, ht = torch.sigmoid(kt[:, :H]), torch.sigmoid(kt[:, H:2 * H]), g(kt[:, 2 * H:])
            new = f / (f + i) * h + i / (f + i) * ht
        h = torch.where(mask[:, t, None], new, h)
        out.append(h)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("cls", LAYERS)
def test_gradients_match_torch_autograd(cls: Any) -> None:
    torch = pytest.importorskip("torch")
    layer = _layer(cls, return_sequences=True)
    rng = np.random.default_rng(3)
    x, h0, G = _x(T=12), rng.uniform(0, 1, (4, H)), rng.standard_normal((4, 12, H))
    mask = np.ones((4, 12), bool)
    mask[1, 7:] = False
    mask[2, 3:5] = False
    ctx = rk.Ctx.training().set_mask(mask)
    y = layer.forward([x, h0], ctx)
    dx, dh0 = layer.backward(G, ctx)
    tx, th0 = torch.tensor(x, requires_grad=True), torch.tensor(h0, requires_grad=True)
    tW = torch.tensor(layer.weight("kernel"), requires_grad=True)
    tb = torch.tensor(layer.weight("bias"), requires_grad=True)
    ty = _torch_min(cls.__name__, tx, tW, tb, th0, torch.tensor(mask))
    (ty * torch.tensor(G)).sum().backward()
    # float64 both sides, different orders of the sums: rounding, ~1e-15 relative; 1e-10
    assert np.abs(y - ty.detach().numpy()).max() < 1e-10
    for got, want in ((dx, tx.grad), (dh0, th0.grad), (ctx.grad(layer, "kernel"), tW.grad),
                      (ctx.grad(layer, "bias"), tb.grad)):
        w = want.numpy()
        assert np.abs(got - w).max() < 1e-10 * max(1.0, np.abs(w).max())


# -- masks, states, streaming -----------------------------------------------------------------
@pytest.mark.parametrize("cls", LAYERS)
def test_lengths_equal_each_sequence_alone(cls: Any) -> None:
    layer = _layer(cls)
    x, lengths = _x(T=8), np.array([8, 3, 5, 1])
    got = layer.forward(x, rk.Ctx.inference().set_mask(lengths=lengths))
    for b, n in enumerate(lengths):
        alone = layer.predict(x[b:b + 1, :n]) if n > 1 else layer.step(x[b:b + 1, 0], layer.zero_state(1))[0]
        assert np.abs(got[b] - alone[0]).max() < 1e-12


@pytest.mark.parametrize("cls", LAYERS)
def test_stateful_halves_equal_the_whole(cls: Any) -> None:
    whole = _layer(cls, return_sequences=True).predict(_x(T=10))
    layer = _layer(cls, return_sequences=True, stateful=True)
    x = _x(T=10)
    parts = [layer.forward(x[:, :4], rk.Ctx.inference()), layer.forward(x[:, 4:], rk.Ctx.inference())]
    assert np.abs(np.concatenate(parts, axis=1) - whole).max() < 1e-12


@pytest.mark.parametrize("cls", LAYERS)
def test_negative_initial_state_is_refused(cls: Any) -> None:
    layer = _layer(cls)
    h0 = np.full((4, H), 0.5)
    h0[2, 1] = -0.1
    with pytest.raises(rk.InvalidInputError, match="initial state has 1 negative"):
        layer.forward([_x(), h0], rk.Ctx.inference())
    with pytest.raises(rk.InvalidInputError, match=">= 0"):
        layer.step(_x()[:, 0], (h0,))


@pytest.mark.parametrize("make", [lambda: rk.MinGRUCell(H), lambda: rk.StackedRNNCells([rk.MinLSTMCell(H)])],
                         ids=["cell", "stacked"])
def test_negative_initial_state_is_refused_by_any_layer_over_the_cell(make: Any) -> None:
    """The cell's check_init runs in the walker: an RNN over the cell, or over a stack of it,
    refuses a negative initial state as the MinGRU layer does."""
    layer = rk.RNN(make(), return_state=True, dtype="float64", input_dim=F)
    h0 = np.full((4, H), 0.5)
    h0[1, 2] = -0.25
    with pytest.raises(rk.InvalidInputError, match="initial state has 1 negative"):
        layer.forward([_x(), h0], rk.Ctx.inference())


def test_no_recurrent_dropout() -> None:
    with pytest.raises(rk.InvalidParameterError, match="recurrent_dropout"):
        rk.MinGRU(4, recurrent_dropout=0.2)


# -- in models, files --------------------------------------------------------------------------
@pytest.mark.parametrize("cls", LAYERS)
def test_bidirectional_model_trains_saves_and_loads(cls: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (64, 8, 1)).astype(np.float32)
    y = (x[:, 0] + x[:, -1]).astype(np.float32)
    model = rk.Sequential([rk.Bidirectional(cls(8, seed=1, return_sequences=True)), cls(8, seed=2),
                           rk.Dense(1, seed=3)]).build(rk.Shape((None, 8, 1)))
    model.compile(rk.Adam(0.01), "mse")
    loss = model.fit(x, y, epochs=30, batch_size=16, seed=0, verbose=0).history["loss"]
    assert loss[-1] < 0.5 * loss[0]
    model.save(str(tmp_path / "m.rnnkit"))
    again = rk.load_model(str(tmp_path / "m.rnnkit"))
    assert type(again.layers[1]) is cls
    assert np.array_equal(again.predict(x[:4]), model.predict(x[:4]))
    cfg = rk.layers.layer_to_config(model.layers[1])
    assert cfg["class_name"] == cls.__name__ and cfg["config"]["units"] == 8


@pytest.mark.parametrize("cls", LAYERS)
def test_plain_recurrent_layer_over_the_cell_equals_the_layer(cls: Any) -> None:
    layer = _layer(cls, return_sequences=True)
    plain = rk.RecurrentLayer(type(layer.cell)(H), return_sequences=True, dtype="float64")
    plain.build(rk.Shape((None, None, F)))
    plain.set_weights(**dict(layer.weights()))
    x = _x()
    assert np.abs(plain.predict(x) - layer.predict(x)).max() < 1e-12
    assert rk.layers.layer_from_config(rk.layers.layer_to_config(plain)).cell.units == H


@pytest.mark.parametrize("cls", LAYERS)
def test_compiled_scan_equals_numpy_scan(cls: Any) -> None:
    """The compiled scan (fast mode) against the NumPy log-space form (reference mode), forward
    and backward, with a mask, an initial state and a final-state gradient: the same arithmetic
    in another order of roundings, float64 (T = 40: |A| <= ~300, ulps of it: < 1e-12 relative)."""
    if not rk.kernels.available():
        pytest.skip("numba is not installed")
    layer = _layer(cls, return_sequences=True, return_state=True)
    rng = np.random.default_rng(9)
    x, h0 = _x(T=40), rng.uniform(0, 2, (4, H))
    mask = rng.random((4, 40)) > 0.25
    G, dfin = rng.standard_normal((4, 40, H)), rng.standard_normal((4, H))
    got = []
    for mode in ("fast", "reference"):
        with rk.kernels.use(mode):
            ctx = rk.Ctx.training().set_mask(mask)
            y, fin = layer.forward([x, h0], ctx)
            dx, dh0 = layer.backward([G, dfin], ctx)
            got.append([y, fin, dx, dh0, ctx.grad(layer, "kernel"), ctx.grad(layer, "bias")])
    for a, b in zip(*got, strict=True):
        assert np.abs(a - b).max() < 1e-12 * max(1.0, np.abs(b).max())


@pytest.mark.parametrize("cls", LAYERS)
def test_serve_stream_steps_equal_predict_of_each_prefix(cls: Any) -> None:
    """A stream of ``rnnkit serve`` over a MinGRU / MinLSTM model: each step's output equals
    the model's prediction of the prefix so far (float32: the step form against the parallel
    form, 1e-5 as in test_step_and_parallel_forms_agree)."""
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    model = rk.Sequential([cls(6, seed=1, return_sequences=True), rk.Dense(2, seed=2)],
                          input_shape=(None, None, F))
    xs = np.random.default_rng(4).standard_normal((5, 1, F)).astype(np.float32)
    with TestClient(rk.serve.app(model)) as c:
        sid = c.post("/v1/streams").json()["id"]
        got = [c.post(f"/v1/streams/{sid}/step", json={"seq": t + 1, "x": xs[t].tolist()}).json()["outputs"]
               for t in range(5)]
    seq_all = np.concatenate(xs)[None]
    for t in range(5):
        want = model.predict(seq_all[:, :t + 1])[0, -1]
        assert np.abs(np.asarray(got[t], np.float32).reshape(-1) - want).max() < 1e-5


@pytest.mark.parametrize("cls", LAYERS)
def test_compiled_scan_equals_numpy_scan_float32(cls: Any) -> None:
    """The compiled scan in float32 (the linear recurrence with :func:`exp32`, vectorised)
    against the NumPy log-space form, forward and backward, mask, initial state and final-state
    gradient. Bound: the log-space form's relative error is about T * eps * max|log a|
    (T = 40, |log a| < 10 here, eps = 6e-8: 2.4e-5); the compiled one's a few eps per step."""
    if not rk.kernels.available():
        pytest.skip("numba is not installed")
    layer = _layer(cls, return_sequences=True, return_state=True, dtype="float32")
    rng = np.random.default_rng(9)
    x, h0 = _x(T=40).astype(np.float32), rng.uniform(0, 2, (4, H)).astype(np.float32)
    mask = rng.random((4, 40)) > 0.25
    G = rng.standard_normal((4, 40, H)).astype(np.float32)
    dfin = rng.standard_normal((4, H)).astype(np.float32)
    got = []
    for mode in ("fast", "reference"):
        with rk.kernels.use(mode):
            ctx = rk.Ctx.training().set_mask(mask)
            y, fin = layer.forward([x, h0], ctx)
            dx, dh0 = layer.backward([G, dfin], ctx)
            got.append([y, fin, dx, dh0, ctx.grad(layer, "kernel"), ctx.grad(layer, "bias")])
    for a, b in zip(*got, strict=True):
        assert a.dtype == np.float32
        assert np.abs(a - b).max() < 5e-5 * max(1.0, np.abs(b).max())


def test_exp32_within_two_ulp_of_float64_exp() -> None:
    """The kernels' float32 ``exp`` (no libm call) on a dense grid of [-87.3, 88]: relative
    error under 2 float32 ulp against float64 ``exp``; 0 below -87.33654."""
    if not rk.kernels.available():
        pytest.skip("numba is not installed")
    from rnnkit.kernels._jit import apply_exp
    x = np.linspace(-87.3, 88.0, 2_000_003).astype(np.float32)
    out = np.empty_like(x)
    apply_exp(x, out)
    want = np.exp(x.astype(np.float64))
    assert np.max(np.abs(out - want) / want) < 2 * np.finfo(np.float32).eps
    tail = np.array([-87.4, -100.0, -1e30], np.float32)
    apply_exp(tail, out[:3])
    assert (out[:3] == 0).all()


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize(("dtype", "tol"), [("float32", 2e-6), ("float64", 1e-12)])
def test_compiled_streaming_step_equals_reference_step(cls: Any, dtype: str, tol: float) -> None:
    """``layer.step`` at batch 1 in the fast mode (the compiled step: projection and blend in one
    call) against the reference mode's step form, 60 steps from a given state. Bound: each step
    rounds a few times per unit and the blend is a contraction (|dh_t/dh_{t-1}| = a < 1), so the
    difference stays a few ulps of max|h| (~4 here): 2e-6 in float32, 1e-12 in float64."""
    if not rk.kernels.available():
        pytest.skip("numba is not installed")
    layer = _layer(cls, dtype=dtype)
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((60, 1, F)).astype(dtype)
    start = layer.cell.make_state((rng.uniform(0, 2, (1, H)).astype(dtype),))
    got = []
    for mode in ("fast", "reference"):
        with rk.kernels.use(mode):
            s = start
            for t in range(60):
                s = layer.step(xs[t], s)
            got.append(s[0])
    assert got[0].dtype == np.dtype(dtype)
    assert np.abs(got[0] - got[1]).max() < tol * max(1.0, np.abs(got[1]).max())
    assert not np.array_equal(got[1], start[0])


@pytest.mark.parametrize("cls", LAYERS)
def test_compiled_streaming_step_refuses_a_negative_state(cls: Any) -> None:
    """The compiled step checks the state as the general path does: a negative or NaN entry is
    an InvalidInputError naming the min cell's state rule."""
    layer = _layer(cls, dtype="float32")
    x = np.ones((1, F), np.float32)
    for bad in (-1.0, np.nan):
        h = np.ones((1, H), np.float32)
        h[0, 3] = bad
        with pytest.raises(rk.InvalidInputError, match="state h of a min cell is >= 0"):
            layer.step(x, layer.cell.make_state((h,)))
