"""The fast paths (rnnkit.kernels) equal the NumPy reference cells.

Every cell (SimpleRNN, LSTM, GRU reset_after False/True) x return_sequences x go_backwards x
activation (tanh, sigmoid, relu, linear) x dtype: training output, inference output, the caches
(time-major input, every state, every park), the final states from ``seq_init`` with a random
initial state, dL/dx and all three weight gradients, the fast forward feeding the reference
backward. Tolerance: float64 max|fast - ref| <= 1e-12 * max(1, max|ref|); float32 (rational
tanh/sigmoid, max abs error 2.6e-7 / 1.6e-7, tested below) 2e-5 * max(1, max|ref|).
Unsupported activations (softmax) fall back to the reference; a missing numba falls back with
exactly one warning.
"""

from __future__ import annotations

import sys
import tracemalloc
import warnings
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels

pytest.importorskip("numba")

CELLS = ("rnn", "lstm", "gru", "gru_ra")
ACTS = ("tanh", "sigmoid", "relu", "linear")
TOL = {"float64": 1e-12, "float32": 2e-5}
B, T, F, H = 3, 7, 4, 5


def make(cell: str, act: Any, dtype: str, rs: bool, gb: bool, seed: int = 1,
         **opts: Any) -> rk.RecurrentLayer:
    kw: dict[str, Any] = dict(return_sequences=rs, go_backwards=gb, seed=seed, dtype=dtype, input_dim=F,
                              **opts)
    layer: rk.RecurrentLayer
    if cell == "rnn":
        layer = rk.SimpleRNN(H, act, **kw)
    elif cell == "lstm":
        layer = rk.LSTM(H, act, **kw)
    else:
        layer = rk.GRU(H, act, reset_after=(cell == "gru_ra"), **kw)
    if "bias" in layer.weight_names:
        b = layer.weight("bias")
        layer.set_weight("bias", 0.3 * np.random.default_rng(seed + 2).standard_normal(b.shape))
    return layer


def run(layer: rk.RecurrentLayer, x: np.ndarray, init: Any) -> dict[str, Any]:
    """Everything a pass produces, by name."""
    ctx = rk.Ctx.training()
    y = layer.forward(x, ctx)
    cache = ctx.peek(layer).walk
    saved = {"x_tm": cache.x_tm.copy(), **{f"state{k}": a.copy() for k, a in enumerate(cache.states)},
             **{f"park_{n}": a.copy() for n, a in cache.parks.items()}}
    g = np.random.default_rng(5).standard_normal(y.shape)
    dx = layer.backward(g, ctx)
    out = {"y_train": y, "dx": dx, **saved, **{f"d_{n}": ctx.grad(layer, n) for n in layer.weight_names}}
    out["y_infer"] = layer.forward(x, rk.Ctx.inference())
    seq, st = layer.seq_init(x, init)
    out["seq_init"] = seq
    if isinstance(st, rk.LSTMState):
        out["final_h"], out["final_c"] = st.h, st.c
    else:
        out["final_h"] = st.h
    return out


def init_state(cell: str, dtype: str, out: int = H) -> Any:
    rng = np.random.default_rng(9)
    h = (0.5 * rng.standard_normal((B, out))).astype(dtype)
    if cell == "lstm":
        return rk.LSTMState(h, (0.5 * rng.standard_normal((B, H))).astype(dtype))
    return rk.SimpleRNNState(h) if cell == "rnn" else rk.GRUState(h)


def assert_close(ref: dict[str, Any], fast: dict[str, Any], dtype: str, what: str) -> None:
    assert ref.keys() == fast.keys()
    for name, r in ref.items():
        f = fast[name]
        assert f.shape == r.shape and f.dtype == r.dtype, (what, name)
        err = float(np.max(np.abs(f - r))) if r.size else 0.0
        scale = max(1.0, float(np.max(np.abs(r))) if r.size else 0.0)
        assert err <= TOL[dtype] * scale, f"{what}: {name} differs by {err:.3e} (scale {scale:.3g})"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("rs", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("cell", CELLS)
def test_fast_equals_reference(cell: str, rs: bool, gb: bool, act: str, dtype: str) -> None:
    layer = make(cell, act, dtype, rs, gb)
    assert kernels.find(layer.cell) is not None
    x = np.random.default_rng(2).standard_normal((B, T, F)).astype(dtype)
    init = init_state(cell, dtype)
    weights = {n: v.copy() for n, v in layer.weights()}
    with kernels.use("reference"):
        ref = run(layer, x, init)
    fast = run(layer, x, init)
    assert_close(ref, fast, dtype, f"{cell}/{act}/{dtype}")
    for n, v in layer.weights():  # the layer is untouched by the passes
        np.testing.assert_array_equal(v, weights[n])
    # mixed: the fast forward's cache feeds the reference backward, and the other way round
    g = np.random.default_rng(5).standard_normal(ref["y_train"].shape)
    for fwd, bwd in (("fast", "reference"), ("reference", "fast")):
        ctx = rk.Ctx.training()
        with kernels.use(fwd):
            layer.forward(x, ctx)
        with kernels.use(bwd):
            dx = layer.backward(g, ctx)
        assert_close({"dx": ref["dx"], "d_kernel": ref["d_kernel"]},
                     {"dx": dx, "d_kernel": ctx.grad(layer, "kernel")}, dtype, f"{fwd}->{bwd}")


OPTIONS = [("rnn", {"use_bias": False}), ("rnn", {"act": "hard_sigmoid"}),
           ("lstm", {"use_bias": False}), ("lstm", {"proj_size": 3}),
           ("lstm", {"proj_size": 2, "use_bias": False, "recurrent_activation": "hard_sigmoid"}),
           *[("lstm", {"recurrent_activation": a}) for a in ("hard_sigmoid", "tanh", "relu", "linear")],
           *[(c, {"use_bias": False}) for c in ("gru", "gru_ra")],
           *[(c, {"recurrent_activation": a}) for c in ("gru", "gru_ra") for a in ("hard_sigmoid", "tanh")]]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("rs", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("cell,opts", OPTIONS, ids=[f"{c}-{'-'.join(f'{k}={v}' for k, v in o.items())}"
                                                    for c, o in OPTIONS])
def test_cell_options_fast_equals_reference(cell: str, opts: dict[str, Any], rs: bool, gb: bool,
                                            dtype: str) -> None:
    """use_bias=False, the gate activations and proj_size run compiled, equal to the reference
    (outputs, caches, final states, dL/dx and every weight gradient)."""
    opts = dict(opts)
    act = opts.pop("act", "tanh")
    layer = make(cell, act, dtype, rs, gb, **opts)
    assert kernels.find(layer.cell) is not None
    x = np.random.default_rng(2).standard_normal((B, T, F)).astype(dtype)
    init = init_state(cell, dtype, opts.get("proj_size") or H)
    with kernels.use("reference"):
        ref = run(layer, x, init)
    assert_close(ref, run(layer, x, init), dtype, f"{cell}/{opts}/{dtype}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("rs", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("cell", CELLS)
def test_batch_split_equals_reference(monkeypatch: pytest.MonkeyPatch, cell: str, rs: bool,
                                      dtype: str) -> None:
    """A batch big enough to be split into row blocks run on two threads (strided views)."""
    from rnnkit.kernels import _driver, _threads

    monkeypatch.setattr(_threads, "CORES", 3)
    monkeypatch.setattr(_threads, "MIN_ROWS", 4)
    monkeypatch.setattr(_driver, "PARALLEL_REDUCTIONS", 0)   # reductions, projection in parts too
    assert _threads.blocks(20) == [(0, 6), (6, 13), (13, 20)]
    layer = make(cell, "tanh", dtype, rs, True)
    x = np.random.default_rng(4).standard_normal((20, 5, F)).astype(dtype)
    init = init_state(cell, dtype)
    init = type(init)(*(np.tile(p, (7, 1))[:20] for p in init))
    with kernels.use("reference"):
        ref = run(layer, x, init)
    fast = run(layer, x, init)
    assert_close(ref, fast, dtype, f"split {cell}/{dtype}")


def test_fast_path_differs_from_reference_in_float32_only_by_the_approximation() -> None:
    """The float32 fast path is not the reference bit for bit (it really runs), but close."""
    layer = make("lstm", "tanh", "float32", True, False)
    x = np.random.default_rng(2).standard_normal((B, T, F)).astype("float32")
    with kernels.use("reference"):
        ref = layer.predict(x)
    fast = layer.predict(x)
    assert 0 < np.max(np.abs(fast - ref)) <= 2e-6


def test_hard_sigmoid_kernel_equals_keras_definition() -> None:
    """Code 4 is relu6(x + 3) / 6 exactly, in float32 and float64."""
    from rnnkit.kernels._jit import apply_act

    for dt in (np.float32, np.float64):
        a = np.linspace(-5, 5, 10_001).astype(dt)
        out = np.empty(a.size, dt)
        apply_act(a, out, 4)
        np.testing.assert_array_equal(out, np.clip(a + dt(3), 0, 6) / dt(6))


def test_float32_tanh_saturates_exactly() -> None:
    """Where the correctly rounded float32 tanh is +-1 (|x| >= 9.010914) the kernels' tanh is
    exactly +-1, so a saturated LSTM passes no gradient: fed 1e8, its kernel gradients are 0 on
    the compiled path as on the reference (they were ~24 before)."""
    from rnnkit.kernels._jit import apply_act

    a = np.array([9.010913, 9.010914, 12.0, 1e8, np.inf], np.float32)
    out = np.empty_like(a)
    apply_act(np.concatenate([a, -a]), out := np.empty(10, np.float32), 0)
    np.testing.assert_array_equal(out[[1, 2, 3, 4, 6, 7, 8, 9]], [1, 1, 1, 1, -1, -1, -1, -1])
    assert 0.9999997 < out[0] < 1.0
    exact = np.tanh(a.astype(np.float64)).astype(np.float32)
    assert np.array_equal(out[:5] == 1.0, exact == 1.0)      # saturates exactly where float32 tanh does
    layer = rk.LSTM(4, seed=1, input_dim=3)
    x = np.full((2, 5, 3), 1e8, np.float32)
    grads = []
    for m in ("fast", "reference"):
        with kernels.use(m):
            ctx = rk.Ctx.training()
            y = layer.forward(x, ctx)
            layer.backward(np.ones_like(y), ctx)
            grads.append(ctx.grad(layer, "kernel"))
    np.testing.assert_array_equal(grads[0], 0.0)
    np.testing.assert_array_equal(grads[1], 0.0)


def test_float32_tanh_error_on_every_float32_where_it_is_largest() -> None:
    """Every float32 in [2, 9.010914) (where tanh32's absolute error is largest; 12.6 M inputs,
    the odd rational is exactly odd, so the negatives are the same) against float64 tanh: max
    absolute error 2.918e-7, at x = 5.126039, 4.90 float32 ulp of tanh(x) there. A grid of 400 K
    points over [-20, 20] finds only 2.6e-7 (what the docstring said before)."""
    from rnnkit.kernels._jit import apply_act

    worst, worst_ulp = 0.0, 0.0
    lo, hi = (int(np.float32(v).view(np.int32)) for v in (2.0, 9.010914))
    for c0 in range(lo, hi, 1 << 22):
        x = np.arange(c0, min(hi, c0 + (1 << 22)), dtype=np.int32).view(np.float32)
        out = np.empty_like(x)
        apply_act(x, out, 0)
        exact = np.tanh(x.astype(np.float64))
        err = np.abs(out - exact)
        worst = max(worst, float(err.max()))
        worst_ulp = max(worst_ulp, float((err / np.spacing(exact.astype(np.float32))).max()))
    out5 = np.empty(2, np.float32)
    apply_act(np.array([5.126039, -5.126039], np.float32), out5, 0)
    assert out5[0] == -out5[1]
    assert 2.9e-7 < worst <= 2.92e-7, worst        # the measured maximum: the docstring's figure
    assert worst_ulp <= 4.91, worst_ulp


@pytest.mark.parametrize("code,name", [(0, "tanh"), (1, "sigmoid")])
def test_float32_activation_error(code: int, name: str) -> None:
    from rnnkit.kernels._jit import apply_act

    a = np.linspace(-20.0, 20.0, 400_001)
    exact = np.tanh(a) if name == "tanh" else 1.0 / (1.0 + np.exp(-a))
    out = np.empty(a.size, np.float32)
    apply_act(a.astype(np.float32), out, code)
    a32 = a.astype(np.float32).astype(np.float64)   # the float32 input actually seen
    exact = np.tanh(a32) if name == "tanh" else 1.0 / (1.0 + np.exp(-a32))
    err = np.max(np.abs(out - exact))
    assert err <= (2.7e-7 if name == "tanh" else 1.7e-7), err
    assert np.all(np.abs(out) <= 1.0)
    out64 = np.empty(a.size, np.float64)
    apply_act(a, out64, code)   # float64 is exact libm
    np.testing.assert_allclose(out64, np.tanh(a) if name == "tanh" else 1 / (1 + np.exp(-a)),
                               rtol=1e-15, atol=1e-16)


def test_softmax_falls_back_to_the_reference() -> None:
    layer = rk.SimpleRNN(H, rk.Softmax(), return_sequences=True, seed=3, input_dim=F, dtype="float64")
    assert kernels.find(layer.cell) is None
    x = np.random.default_rng(2).standard_normal((B, T, F))
    y_fast = layer.predict(x)
    with kernels.use("reference"):
        y_ref = layer.predict(x)
    np.testing.assert_array_equal(y_fast, y_ref)
    np.testing.assert_allclose(y_fast.sum(axis=-1), 1.0, rtol=1e-12)


def test_mode_switches() -> None:
    layer = make("gru", "tanh", "float64", False, False)
    assert kernels.mode() == "fast"
    with kernels.use("reference"):
        assert kernels.mode() == "reference" and kernels.find(layer.cell) is None
        with kernels.use("FAST"):
            assert kernels.find(layer.cell) is not None
        assert kernels.mode() == "reference"
    assert kernels.mode() == "fast"
    kernels.set_mode("reference")
    try:
        assert kernels.find(layer.cell) is None
    finally:
        kernels.set_mode("fast")
    with pytest.raises(rk.InvalidParameterError, match="'turbo'"):
        with kernels.use("turbo"):
            pass
    with pytest.raises(rk.InvalidParameterError):
        kernels.set_mode("numba")


@pytest.mark.parametrize("value,expect,warns", [("reference", "reference", False), ("fast", "fast", False),
                                                 ("bogus", "fast", True)])
def test_environment_variable(monkeypatch: pytest.MonkeyPatch, value: str, expect: str, warns: bool) -> None:
    monkeypatch.setenv("RNNKIT_KERNELS", value)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = kernels._from_env()
    assert got == expect
    assert any("bogus" in str(w.message) for w in rec) == warns


def test_missing_numba_falls_back_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = make("lstm", "tanh", "float64", True, False)
    x = np.random.default_rng(2).standard_normal((B, T, F))
    with kernels.use("reference"):
        ref = layer.predict(x)
    for mod in [m for m in sys.modules if m.startswith("rnnkit.kernels.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "numba", None)   # `import numba` raises ImportError
    monkeypatch.setattr(kernels, "_drv", None)
    monkeypatch.setattr(kernels, "_unavailable", None)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        y1 = layer.predict(x)
        ctx = rk.Ctx.training()
        y2 = layer.forward(x, ctx)
        layer.backward(np.ones_like(y2), ctx)
    msgs = [str(w.message) for w in rec if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "numba" in msgs[0], msgs
    assert kernels.available() is False
    np.testing.assert_array_equal(y1, ref)
    np.testing.assert_array_equal(y2, ref)


def test_import_does_not_load_numba() -> None:
    import subprocess

    code = "import sys, rnnkit; print('numba' in sys.modules, 'rnnkit.kernels._driver' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("cell", CELLS)
def test_inference_keeps_no_per_step_arrays(monkeypatch: pytest.MonkeyPatch, cell: str) -> None:
    """Inference of a long sequence (last state only) allocates a bounded chunk of projections
    (``CHUNK_BYTES``, set small here), not O(T*B*G*H)."""
    from rnnkit.kernels import _driver

    monkeypatch.setattr(_driver, "CHUNK_BYTES", 4096)
    T_long = 4000
    layer = make(cell, "tanh", "float32", False, False)
    x = np.random.default_rng(2).standard_normal((2, T_long, F)).astype("float32")
    layer.predict(x)   # compile / warm up
    per_step = 2 * layer.gate_width * 4          # bytes of one step's projection
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        layer.predict(x)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    x_tm_bytes = x.nbytes                        # the walker's time-major copy of the input
    assert peak < x_tm_bytes + 4096 + 16384, (peak, x_tm_bytes, T_long * per_step)
    with kernels.use("reference"):                # the reference does materialise them
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            layer.predict(x)
            peak_ref = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    assert peak_ref > T_long * per_step


@pytest.mark.parametrize("cell", CELLS)
def test_empty_batch(cell: str) -> None:
    layer = make(cell, "tanh", "float64", True, False)
    x = np.zeros((0, T, F))
    ctx = rk.Ctx.training()
    y = layer.forward(x, ctx)
    dx = layer.backward(np.ones_like(y), ctx)
    assert y.shape == (0, T, H) and dx.shape == (0, T, F)
    for n in ("kernel", "recurrent_kernel", "bias"):
        np.testing.assert_array_equal(ctx.grad(layer, n), 0.0)
    assert kernels.find(layer.cell) is not None
    assert layer.predict(x).shape == (0, T, H)


def test_threads_share_one_layer() -> None:
    """Four threads run the fast path on one layer at once (batch split inside each call)."""
    from concurrent.futures import ThreadPoolExecutor

    layer = make("lstm", "tanh", "float64", True, True)
    xs = [np.random.default_rng(k).standard_normal((24, 6, F)) for k in range(4)]
    with kernels.use("reference"):
        ref = [layer.predict(x) for x in xs]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(layer.predict, xs * 3))
    for k, y in enumerate(got):
        np.testing.assert_allclose(y, ref[k % 4], rtol=1e-12, atol=1e-13)


def test_first_compilation_says_so_once(tmp_path: Any) -> None:
    """A process that compiles kernels says so once on stderr and counts the time; the next
    process loads them from the cache and says nothing."""
    import os
    import subprocess

    code = ("import numpy as np, rnnkit as rk\n"
            "layer = rk.SimpleRNN(3, seed=1, input_dim=2, dtype='float64')\n"
            "layer.predict(np.ones((2, 4, 2))); layer.predict(np.ones((3, 5, 2)))\n"
            "print(rk.kernels.compile_seconds())\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert first.stderr.count("compiling the kernels for this machine") == 1, first.stderr
    assert float(first.stdout) > 0.0
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "compiling" not in again.stderr and float(again.stdout) == 0.0, again.stderr


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_packed_products_equal_numpy(dtype: str) -> None:
    """The packed micro-kernel products against float64 numpy, every row count around the
    micro-kernel's MR rows (and its outer MB block), column counts around the panel width, depths
    around the packing block KC; beta 0 and 1; a transposed operand on either side."""
    from rnnkit.kernels._packed import KC, MB, MR, gemm, nr_of, pack, rgemm

    rng = np.random.default_rng(0)
    tol = 2e-5 if dtype == "float32" else 1e-13
    nr = nr_of(dtype)
    rows = sorted({1, MR - 1, MR, MR + 1, 2 * MR + 1, MB - 1, MB + MR + 1})
    for K, N in ((1, 1), (3, nr - 1), (17, nr), (32, nr + 1), (KC + 1, 2 * nr + 3)):
        Bm = rng.standard_normal((K, N)).astype(dtype)
        P, PT = pack(Bm), pack(np.ascontiguousarray(Bm.T), trans=True)
        np.testing.assert_array_equal(P, PT)
        for M in rows:
            A = rng.standard_normal((M, K)).astype(dtype)
            C0 = rng.standard_normal((M, N)).astype(dtype)
            want = A.astype(np.float64) @ Bm.astype(np.float64)
            scale = max(1.0, float(np.abs(want).max()))
            for beta in (0.0, 1.0):
                C = C0.copy()
                rgemm(A, P, C, beta)
                np.testing.assert_allclose(C / scale, (want + beta * C0) / scale, rtol=0, atol=tol)
            C1 = np.empty((M, N), dtype)
            rgemm(A, P, C1, 0.0)
            At = np.ascontiguousarray(A.T).T                # the same values through a transposed view
            for Bx, tb in ((Bm, False), (np.ascontiguousarray(Bm.T), True)):
                C2 = np.full((M, N), np.nan, dtype)
                gemm(At, Bx, tb, C2, False, 0, N)
                np.testing.assert_array_equal(C2, C1)        # packing on the fly: the same chains
            C3 = C0.copy()
            gemm(A, Bm, False, C3, True, 0, N)
            np.testing.assert_allclose(C3 / scale, (want + C0) / scale, rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_packed_products_do_not_depend_on_the_split(dtype: str) -> None:
    """A row's result is the same bits whatever rows share the product, a column's whatever
    columns another thread takes: the basis of thread-count and batch-size independence."""
    from rnnkit.kernels._packed import KC, gemm, gemm2, pack, rgemm

    rng = np.random.default_rng(1)
    A = rng.standard_normal((41, 70)).astype(dtype)
    Bm = rng.standard_normal((70, 53)).astype(dtype)
    full = np.empty((41, 53), dtype)
    rgemm(A, pack(Bm), full, 0.0)
    for lo, hi in ((0, 1), (3, 4), (5, 17), (17, 41)):
        part = np.empty((hi - lo, 53), dtype)
        rgemm(A[lo:hi], pack(Bm), part, 0.0)
        np.testing.assert_array_equal(part, full[lo:hi])
    X = rng.standard_normal((2 * KC + 9, 11)).astype(dtype)   # a reduction: depth over several blocks
    D = rng.standard_normal((2 * KC + 9, 53)).astype(dtype)
    whole = np.empty((11, 53), dtype)
    gemm(X.T, D, False, whole, False, 0, 53)
    parts = np.empty((11, 53), dtype)
    for c0, c1 in ((0, 5), (5, 29), (29, 53)):
        gemm(X.T, D, False, parts, False, c0, c1)
    np.testing.assert_array_equal(parts, whole)
    want = X.astype(np.float64).T @ D
    scale = float(np.abs(want).max())
    tol = 2e-5 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(whole / scale, want / scale, rtol=0, atol=tol)
    Y = rng.standard_normal((2 * KC + 9, 7)).astype(dtype)     # two products, one packing of D
    pair = np.empty((11, 53), dtype), np.empty((7, 53), dtype)
    gemm2(X.T, pair[0], Y.T, pair[1], D, 0, 53)
    alone = np.empty((7, 53), dtype)
    gemm(Y.T, D, False, alone, False, 0, 53)
    np.testing.assert_array_equal(pair[0], whole)
    np.testing.assert_array_equal(pair[1], alone)


@pytest.mark.parametrize("cell", CELLS)
def test_results_do_not_depend_on_the_thread_count(monkeypatch: pytest.MonkeyPatch, cell: str) -> None:
    """A seeded fit on one thread and on two (the batch in row blocks, the reductions and the
    projection in parts) ends with bit-identical weights; predict gives the same bits whatever
    its batch_size."""
    from rnnkit.kernels import _driver, _threads

    rng = np.random.default_rng(5)
    x = rng.standard_normal((37, 6, F)).astype("float32")
    y = rng.standard_normal((37, 2)).astype("float32")
    layer = {"rnn": rk.SimpleRNN, "lstm": rk.LSTM, "gru": rk.GRU,
             "gru_ra": lambda u, **k: rk.GRU(u, reset_after=True, **k)}[cell]

    def trained(cores: int) -> list[np.ndarray]:
        monkeypatch.setattr(_threads, "CORES", cores)
        monkeypatch.setattr(_threads, "MIN_ROWS", 4)
        monkeypatch.setattr(_driver, "PARALLEL_REDUCTIONS", 0)
        model = rk.Sequential([layer(7, input_dim=F, seed=3, return_sequences=True),
                               layer(6, seed=4), rk.Dense(2, seed=5)])
        model.compile(optimizer=rk.Adam(1e-2), loss="mse")
        model.fit(x, y, epochs=3, batch_size=19, shuffle=True, seed=7, verbose=0)
        preds = [model.layers[0].predict(x[lo:hi]) for lo, hi in ((0, 37), (0, 1), (1, 13), (13, 37))]
        np.testing.assert_array_equal(np.concatenate(preds[1:]), preds[0])
        return [v for layer_ in model.layers for v in layer_.get_weights()]

    one, two = trained(1), trained(2)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)
