"""int8 inference: the compiled loops equal their NumPy reference bit for bit, the reference
equals the scheme written out here, and int8 models stay close to their float32 models."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.kernels import _int8_act as A
from rnnkit.quant import _reference as ref

F32 = np.float32
#: the int8 outputs' distance from float32 is mostly the activations' rounding, half a step of
#: (hi - lo) / L: the bounds below hold 8-bit rows (L = 255) and grow with the step where the
#: AVX2 tile's 7-bit rows run (L = 127: about twice the error)
STEP = 255 / rk.kernels.int8_levels()


def compiled() -> Any:
    mod = rk.kernels.int8()
    if mod is None:
        pytest.skip("the compiled int8 loops need numba")
    return mod


def test_weight_quantization_is_symmetric_per_output_channel() -> None:
    w = np.random.default_rng(0).normal(size=(7, 5)).astype(F32)
    w[:, 3] = 0.0
    q, s = ref.quantize_weight(w)
    assert q.shape == (5, 7) and q.dtype == np.int8 and s.shape == (5,)
    for n in range(5):
        amax = np.abs(w[:, n]).max()
        want_s = F32(1.0) if amax == 0 else F32(amax) / F32(127.0)
        assert s[n] == want_s
        assert np.array_equal(q[n], np.clip(np.rint(w[:, n] / want_s), -127, 127).astype(np.int8))
        assert np.abs(q[n] * np.float64(s[n]) - w[:, n]).max() <= s[n] / 2 * 1.0001


def test_row_quantization_is_asymmetric_uint8_per_row() -> None:
    x = np.array([[-1.0, 0.5, 2.0, 0.25], [0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0],
                  [-4.0, -1.0, -2.0, -3.0]], F32)
    for top in (255, 127):       # 8 bits; 7 bits for the AVX2 tile
        q, s, zp = ref.quant_rows(x, top)
        assert s[1] == 1 and zp[1] == 0 and not q[1].any()          # an all-zero row
        assert s[0] == F32(3.0) / F32(top) and zp[0] == top // 3     # lo -1, hi 2: 1 / s = top / 3
        assert zp[2] == 0 and q[2, 3] == top                         # lo clamps at 0
        assert zp[3] == top and q[3, 0] == 0                         # hi clamps at 0
        assert q.max() == top
        back = (q.astype(np.float64) - zp[:, None]) * s[:, None]
        assert np.abs(back - x).max() <= s.max() / 2 * 1.0001
    # by default, the levels of this machine's compiled loops
    assert np.array_equal(ref.quant_rows(x)[0], ref.quant_rows(x, rk.kernels.int8_levels())[0])


@pytest.mark.parametrize("M,K,N", [(1, 16, 128), (3, 7, 3), (5, 130, 70), (8, 64, 256), (6, 1, 65)])
def test_compiled_product_equals_int64_product(M: int, K: int, N: int) -> None:
    k = compiled()
    rng = np.random.default_rng(M * K + N)
    q = np.zeros((M, k.padded(K)), k.QDT)
    q[:, :K] = rng.integers(0, k.QMAX + 1, (M, K))
    q[0, :K] = k.QMAX                                # the largest products, every one
    w = rng.integers(-127, 128, (N, K)).astype(np.int8)
    w[0, :] = 127
    w[-1, :] = -127
    out = np.zeros((M, k.out_width(N)), np.int32)
    k.gemm(q, k.pack(w), out)
    want = q[:, :K].astype(np.int64) @ w.astype(np.int64).T
    assert np.array_equal(out[:, :N], want)
    gemms = sys.modules["rnnkit.kernels._int8_gemm"]
    q8 = np.zeros_like(q)
    q8[:, :K] = rng.integers(0, 256, (M, K))
    q8[0, :K] = 255
    out2 = np.zeros((M, N), np.int32)               # the product of CPUs without a tile: 8 bits
    gemms._gemm_plain(q8, gemms.pack(w, "plain"), out2)
    assert np.array_equal(out2, q8[:, :K].astype(np.int64) @ w.astype(np.int64).T)
    if "+avx2" in gemms._target_features().split(","):   # the AVX2 tile, on any CPU with AVX2
        q7 = q8 >> 1                                 # 7 bits: vpmaddubsw's pair sums stay exact
        out3 = np.zeros((M, -(-N // 16) * 16), np.int32)
        gemms._gemm_tiled(q7, gemms.pack(w, "avx2"), out3)
        assert np.array_equal(out3[:, :N], q7[:, :K].astype(np.int64) @ w.astype(np.int64).T)


def test_the_product_compiles_to_integer_dot_products() -> None:
    k = compiled()
    counts = k.assembly()
    if k.VNNI:
        assert counts["vpdpbusd"] > 0
    elif k.AVX2:
        assert counts["vpmaddubsw"] > 0 and counts["vpmaddwd"] > 0 and counts["vpdpbusd"] == 0


def test_compiled_quantization_and_projection_equal_the_reference() -> None:
    k = compiled()
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(70, 13)) * rng.uniform(0.01, 10, (70, 1))).astype(F32)
    x[3] = 0.0
    x[4] = np.abs(x[4])
    x[5] = -np.abs(x[5])         # no positive value: max(x, 0) is 0
    x[6] = -0.0                  # signed zeros only
    x[7, ::2] = -0.0
    x[8] = rng.normal(size=13) * 1e-38   # subnormal and tiny magnitudes
    x[9] = rng.normal(size=13) * 1e30
    x[10] = -np.abs(x[10]) * 1e-3
    x[10, 5] = np.float32(-3.0e-45)      # a negative subnormal beside normal negatives
    rq, rs, rzp = ref.quant_rows(x, k.QMAX)
    q, s, zp = np.full((70, k.padded(13)), 7, k.QDT), np.zeros(70, F32), np.zeros(70, np.int32)
    k.quant_rows(x, q, s, zp)
    assert np.array_equal(q[:, :13], rq) and np.array_equal(s, rs) and np.array_equal(zp, rzp)
    assert not q[:, 13:].any()           # the padding set to 0
    assert rq.max() == k.QMAX
    # rows of a bigger array (a row stride of its own: read as contiguous rows) and rows whose
    # elements are apart (an element stride: read element by element) quantize the same
    wide = np.zeros((140, 27), F32)
    wide[::2, 1:27:2] = x
    for view in (wide[::2, 1:14], wide[::2, 1:27:2]):
        q2, s2, zp2 = np.full((70, k.padded(13)), 7, k.QDT), np.zeros(70, F32), np.zeros(70, np.int32)
        k.quant_rows(view, q2, s2, zp2)
        rq2, rs2, rzp2 = ref.quant_rows(np.ascontiguousarray(view), k.QMAX)
        assert np.array_equal(q2[:, :13], rq2) and np.array_equal(s2, rs2) and np.array_equal(zp2, rzp2)
    wq, ws = ref.quantize_weight(rng.normal(size=(13, 9)).astype(F32))
    bias = rng.normal(size=9).astype(F32)
    out, want = np.empty((70, 9), F32), np.empty((70, 9), F32)
    k.project(x, k.pack(wq), wq.sum(1, dtype=np.int32), ws, bias, out)
    ref.project(x, wq, wq.sum(1, dtype=np.int32), ws, bias, want)
    assert np.array_equal(out, want)
    # the reference itself: the scheme written out with float64 dequantization
    deq = (rq.astype(np.float64) - rzp[:, None]) @ wq.T.astype(np.float64) * (rs[:, None] * ws[None, :])
    assert np.allclose(want, deq + bias, rtol=1e-6, atol=1e-6)


def test_the_rational_activations_are_tanh_and_sigmoid() -> None:
    """The int8 loops' tanh and sigmoid (5/4 rationals, clamped) against float64 over a dense
    sweep of [-20, 20] that crosses both clamps, and at the float32 extremes.

    Bounds: the float64 minimax fit's own error, 1.7534e-4 for tanh (its extremes include
    1 - tanh(C) beyond the clamp), plus the float32 coefficients' and evaluation's rounding
    (about 10 roundings of at most 6e-8 relative near |tanh| = 1: < 1e-6): 1.76e-4; sigmoid is
    half of tanh at x / 2: 8.8e-5. Both are a twentieth of the half step of an int8 row spanning
    [-1, 1] (1 / 255). The sweep also shows the error is not much smaller than the bound: the fit's
    extremes are where it says (a test that the constants are the fitted ones)."""
    x = np.concatenate([np.linspace(-20, 20, 4_000_001),
                        [np.finfo(F32).max, -np.finfo(F32).max, 0.0, -0.0]]).astype(F32)
    x64 = x.astype(np.float64)
    t_err = np.abs(ref.tanh8(x) - np.tanh(x64)).max()
    s_err = np.abs(ref.act8(x, 1) - (0.5 + 0.5 * np.tanh(x64 / 2))).max()
    assert t_err <= A.TANH_ERROR and s_err <= A.SIGMOID_ERROR
    assert t_err > 1.7e-4 and s_err > 8.5e-5
    # odd and bounded: tanh(-x) = -tanh(x), |tanh| < 1, sigmoid(x) + sigmoid(-x) = 1 within a step
    assert np.array_equal(ref.tanh8(-x), -ref.tanh8(x)) and np.abs(ref.tanh8(x)).max() < 1
    assert np.abs(ref.act8(x, 1) + ref.act8(-x, 1) - 1).max() <= 6e-8
    assert ref.tanh8(np.array([0.0], F32))[0] == 0 and ref.act8(np.array([0.0], F32), 1)[0] == 0.5


def test_compiled_activations_equal_the_reference() -> None:
    """Every activation of the compiled loops rounds as the reference's, to the bit, over a
    dense grid through the clamps (C = 4.3242 for tanh, 2C for sigmoid), and at them."""
    k = compiled()
    edges = [float(A.T_CLAMP), float(A.S_CLAMP), 0.0, -0.0, 3.4e38]
    x = np.concatenate([np.linspace(-12, 12, 200_001), edges]).astype(F32)
    x = np.concatenate([x, -x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])
    for code in range(5):
        got = x.copy()
        k.act_ip(got, code)
        want = ref.act8(x, code)
        # bit for bit, but for the sign of a zero (relu(-0.0) is -0.0 here, 0.0 in NumPy)
        assert np.array_equal((got + F32(0)).view(np.int32), (want + F32(0)).view(np.int32)), code


def _models() -> dict[str, Callable[[], rk.Sequential]]:
    def seq(*layers: rk.Layer) -> rk.Sequential:
        return rk.Sequential(list(layers)).build((None, 9, 6))
    return {
        "lstm": lambda: seq(rk.LSTM(20, seed=1, return_sequences=True), rk.Dense(3, seed=2)),
        "gru": lambda: seq(rk.GRU(12, seed=3, go_backwards=True), rk.Dense(2, activation="tanh", seed=4)),
        "gru_before": lambda: seq(rk.GRU(11, seed=5, reset_after=False, return_sequences=True),
                                  rk.SimpleRNN(5, seed=6, activation="relu")),
        "simple": lambda: seq(rk.SimpleRNN(17, seed=7, return_sequences=True), rk.Dense(4, seed=8)),
        "masked": lambda: seq(rk.Masking(0.0), rk.LSTM(10, seed=9, return_sequences=True),
                              rk.GRU(6, seed=10, go_backwards=True)),
        "bidirectional": lambda: seq(rk.Bidirectional(rk.LSTM(7, seed=11, return_sequences=True)),
                                     rk.Bidirectional(rk.GRU(5, seed=12), merge_mode="sum")),
    }


def _x(B: int = 5) -> np.ndarray:
    x = np.random.default_rng(2).normal(size=(B, 9, 6)).astype(F32)
    x[1, 6:] = 0.0      # padding for the Masking model
    x[3, 4:] = 0.0
    return x


@pytest.mark.parametrize("layer", [
    lambda: rk.LSTM(9, seed=13, return_sequences=True),
    lambda: rk.GRU(8, seed=14, reset_after=False, go_backwards=True, return_sequences=True),
    lambda: rk.GRU(8, seed=15, return_sequences=True),
    lambda: rk.SimpleRNN(7, seed=16, return_sequences=True)], ids=["lstm", "gru_before", "gru", "simple"])
def test_int8_walks_quantize_the_inputs_in_chunks_of_steps(layer: Callable[[], rk.Layer]) -> None:
    """Wide inputs: the walks quantize a few steps of each batch row at a time (1,200 features:
    3 steps a chunk, so 7 steps are chunks of 3, 3 and 1); every output equals the reference."""
    k = compiled()
    assert k.walks_chunk(7, 6, 1200) == 3
    model = rk.Sequential([layer()]).build((None, 7, 1200))
    q = rk.quantize(model)
    x = np.random.default_rng(4).normal(size=(6, 7, 1200)).astype(F32)
    got = q.predict(x)
    with rk.kernels.use("reference"):
        want = q.predict(x)
    assert np.array_equal(got, want)
    assert np.abs(got - model.predict(x)).max() < 0.05 * STEP


@pytest.mark.parametrize("name", list(_models()))
def test_int8_model_compiled_equals_reference_and_stays_near_float(name: str) -> None:
    compiled()
    model = _models()[name]()
    q = rk.quantize(model)
    x = _x()
    got = q.predict(x)
    with rk.kernels.use("reference"):
        want = q.predict(x)
    assert np.array_equal(got, want)
    assert np.abs(got - model.predict(x)).max() < 0.05 * STEP
    # a sample's result does not depend on the rest of its batch
    assert np.array_equal(q.predict(x[2:3]), got[2:3])


def test_masks_and_lengths_follow_the_float_layer() -> None:
    x = _x()
    lengths = np.array([9, 3, 7, 1, 5])
    for kind in (rk.LSTM, rk.GRU, rk.SimpleRNN):
        layer = kind(8, return_sequences=True, seed=13)
        model = rk.Sequential([layer]).build((None, 9, 6))
        qlayer = rk.quantize(model).layers[0]
        for backwards in (False, True):
            layer.go_backwards = qlayer.go_backwards = backwards
            for mask in ({"lengths": lengths}, {"mask": np.arange(9)[None, :] < lengths[:, None]}):
                f = layer.forward(x, rk.Ctx(False).set_mask(**mask))
                y = qlayer.forward(x, rk.Ctx(False).set_mask(**mask))
                with rk.kernels.use("reference"):
                    assert np.array_equal(y, qlayer.forward(x, rk.Ctx(False).set_mask(**mask)))
                assert np.abs(y - f).max() < 0.03 * STEP
                for b, n in enumerate(lengths):
                    if "lengths" in mask:
                        assert not y[b, n:].any()                    # zeros past the end
                    else:
                        assert (y[b, n:] == y[b, n - 1]).all()       # the last output repeated


@pytest.mark.parametrize("kind", ["lstm", "gru", "gru_before", "simple"])
def test_int8_row_blocks_on_the_cores_give_the_bits_of_one_block(kind: str, monkeypatch: Any) -> None:
    """The compiled int8 loops run on blocks of the batch's rows, one per core: with 1, 2 or 3
    cores (blocks of at least 4 rows here), under a lengths mask, a 0/1 mask, go_backwards and
    an initial state, every output and final state has the bits of one block and of the
    reference."""
    compiled()
    from rnnkit.kernels import _threads

    make = {"lstm": lambda: rk.LSTM(10, seed=17, return_sequences=True),
            "gru": lambda: rk.GRU(9, seed=18, return_sequences=True),
            "gru_before": lambda: rk.GRU(9, seed=19, reset_after=False, return_sequences=True),
            "simple": lambda: rk.SimpleRNN(8, seed=20, return_sequences=True)}[kind]
    layer = make()
    qlayer = rk.quant.quantize_layer(rk.Sequential([layer]).build((None, 11, 7)).layers[0])
    qlayer.return_state = True
    rng = np.random.default_rng(6)
    x = rng.normal(size=(29, 11, 7)).astype(F32)
    lengths = rng.integers(1, 12, 29)
    init = [rng.normal(size=(29, n)).astype(F32) for n in layer.cell.state_sizes()]
    monkeypatch.setattr(_threads, "MIN_ROWS", 4)
    for backwards in (False, True):
        qlayer.go_backwards = backwards
        for mask in ({}, {"lengths": lengths}, {"mask": np.arange(11)[None, :] < lengths[:, None]}):
            got = []
            for cores in (1, 2, 3):
                monkeypatch.setattr(_threads, "CORES", cores)
                got.append(qlayer.forward([x, *init], rk.Ctx(False).set_mask(**mask)))
            with rk.kernels.use("reference"):
                want = qlayer.forward([x, *init], rk.Ctx(False).set_mask(**mask))
            for g in got:
                for a, b in zip(g, want, strict=True):
                    np.testing.assert_array_equal(a, b)


def test_initial_and_carried_states() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 9, 6)).astype(F32)
    layer = rk.LSTM(8, return_state=True, seed=14)
    qlayer = rk.quant.quantize_layer(rk.Sequential([rk.LSTM(8, seed=14)]).build((None, None, 6)).layers[0])
    qlayer.return_state = True
    h0, c0 = rng.normal(size=(3, 8)).astype(F32), rng.normal(size=(3, 8)).astype(F32)
    layer.build(rk.Shape((None, None, 6)))
    out, h, c = qlayer.forward([x, h0, c0], rk.Ctx(False))
    fo, fh, fc = layer.forward([x, h0, c0], rk.Ctx(False))
    assert np.abs(out - fo).max() < 0.03 * STEP and np.abs(c - fc).max() < 0.05 * STEP
    # two halves with the state handed over = the whole sequence
    first = qlayer.forward([x[:, :4], h0, c0], rk.Ctx(False))
    second = qlayer.forward([x[:, 4:], first[1], first[2]], rk.Ctx(False))
    assert np.array_equal(second[0], out) and np.array_equal(second[2], c)


def _torch_lstms(model: rk.Sequential) -> tuple[Any, Any]:
    """(PyTorch float64 LSTM, PyTorch ``quantize_dynamic`` int8 LSTM) with the weights of the
    model's first layer (an LSTM)."""
    torch = pytest.importorskip("torch")
    layer = model.layers[0]
    F, H = layer.input_dim, layer.units
    lstm = torch.nn.LSTM(F, H, batch_first=True)
    w = {n: np.array(v) for n, v in layer.weights()}
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(np.ascontiguousarray(w["kernel"].T)))
        lstm.weight_hh_l0.copy_(torch.from_numpy(np.ascontiguousarray(w["recurrent_kernel"].T)))
        lstm.bias_ih_l0.copy_(torch.from_numpy(w["bias"][0]))
        lstm.bias_hh_l0.zero_()
    holder = torch.nn.ModuleDict({"rnn": lstm})
    with warnings.catch_warnings():   # torch.ao.quantization's deprecation notices
        warnings.simplefilter("ignore")
        qlstm = torch.ao.quantization.quantize_dynamic(holder, {torch.nn.LSTM}, dtype=torch.qint8)["rnn"]
    return lstm.double(), qlstm


@pytest.mark.parametrize("B,T,F,H", [(4, 50, 32, 64), (8, 30, 64, 128), (16, 40, 128, 256)])
def test_error_no_worse_than_torch_quantize_dynamic(B: int, T: int, F: int, H: int) -> None:
    """rnnkit's int8 LSTM and PyTorch's ``quantize_dynamic`` int8 LSTM, from the same float32
    weights on the same input, both against the float64 LSTM: rnnkit's largest error is no
    larger than PyTorch's (measured at these shapes: the AVX2 tile's 7-bit activations 0.019 /
    0.025 / 0.032, 8-bit activations 0.014 / 0.016 / 0.020, PyTorch 0.026 / 0.035 / 0.046).
    The float32 model is the float64 one to 1e-5 (float32 rounding over these sequences), so
    the quantization errors, near 1e-2, are what is compared."""
    torch = pytest.importorskip("torch")
    model = rk.Sequential([rk.LSTM(H, return_sequences=True, seed=15)]).build((None, T, F))
    x = np.random.default_rng(5).normal(size=(B, T, F)).astype(F32)
    lstm64, qlstm = _torch_lstms(model)
    with torch.no_grad():
        exact = lstm64(torch.from_numpy(x).double())[0].numpy()
        torch_i8 = qlstm(torch.from_numpy(x))[0].numpy()
    assert np.abs(model.predict(x) - exact).max() < 1e-5      # the same model
    torch_err = float(np.abs(torch_i8 - exact).max())
    ours = float(np.abs(rk.quantize(model).predict(x) - exact).max())
    assert 0 < ours <= torch_err, (ours, torch_err)


@pytest.mark.parametrize("kind", ["LSTM", "SimpleRNN"])
def test_pytorch_bias_layout_adds_both_rows(kind: str) -> None:
    """A layer with PyTorch's two biases (``bias_layout="torch"``) adds both rows to every
    pre-activation: its int8 form equals, bit for bit, the int8 form of the same layer with the
    rows' sum in one bias row (the same int8 kernels, the same float32 bias), on both paths,
    and stays near the float layer."""
    compiled()
    x = _x()
    torch_layer = getattr(rk, kind)(6, bias_layout="torch", seed=3, return_sequences=True)
    torch_model = rk.Sequential([torch_layer]).build((None, 9, 6))
    b = np.random.default_rng(5).normal(size=torch_layer.weight("bias").shape).astype(F32)
    torch_layer.set_weight("bias", b)
    fused_layer = getattr(rk, kind)(6, seed=3, return_sequences=True)
    fused_model = rk.Sequential([fused_layer]).build((None, 9, 6))
    for name in ("kernel", "recurrent_kernel"):
        fused_layer.set_weight(name, torch_layer.weight(name))
    fused_layer.set_weight("bias", (b[0] + b[1])[None])
    for mode in ("fast", "reference"):
        with rk.kernels.use(mode):
            got = rk.quantize(torch_model).predict(x)
            assert np.array_equal(got, rk.quantize(fused_model).predict(x)), mode
            assert np.abs(got - torch_model.predict(x)).max() < 0.05 * STEP
