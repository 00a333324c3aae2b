"""ONNX export of MinGRU / MinLSTM (a Scan over the linear recurrence) and SLSTM / MLSTM (a Scan
over the stabilized step): onnxruntime's outputs equal rnnkit's, float32, for every option the
exporter accepts (go_backwards, return_sequences, return_state, initial state, lengths,
Bidirectional with each merge mode, a MinGRU beside a GRU; xLSTM's forget gates, heads and
mLSTM's qkv_blocksize), at two batch sizes and lengths; stateful is refused naming the option.

xLSTM tolerance: as tests/test_xlstm.py states for float32 (T <= 12 steps of tens of operations,
a few ulps each, relative to the largest entry): 1e-5 of the largest entry of each output.

Min cells' tolerance:
(relative, element by element; every output is h > 0 or a sum / product / mean of
such, so relative is meaningful): rnnkit's float32 pass is the log-space scan, whose error in h_t
is a few ulps of |A_t| = sum_{s<=t} |log a_s| (rnnkit.recurrent._min_scan), <= T * L * eps with
L = max |log a| = max softplus(u) over the data; onnxruntime's is the step recurrence, a convex
blend per step whose inputs (sigmoid as exp(-softplus(-x)): <= 9 ulps measured, g, the product)
carry <= ~16 ulps each, <= 16 * T * eps in all. So rtol = 2 * T * eps * (L + 16) (2: margin for
the order of roundings); zeros past each length must be exact (atol 0).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
ort.set_default_logger_severity(3)

LAYERS = [rk.MinGRU, rk.MinLSTM]
F, H = 3, 5
SIZES = [(2, 5), (4, 9)]   # (batch, time): neither is fixed by the export
EPS32 = float(np.finfo(np.float32).eps)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _randomise(layer: Any, seed: int) -> None:
    """Weights drawn so that both branches of g (x >= 0, x < 0) and gates near 0 and 1 occur."""
    rng = np.random.default_rng(seed)
    layer.set_weight("kernel", 1.5 * rng.standard_normal(layer.weight("kernel").shape))
    layer.set_weight("bias", rng.standard_normal(layer.weight("bias").shape))


def _max_log_a(layer: Any, x: np.ndarray) -> float:
    """L = max |log a| = max softplus(u) of ``layer`` on ``x`` (module docstring)."""
    k = x.astype(np.float64) @ layer.weight("kernel").astype(np.float64) + layer.weight("bias")
    if isinstance(layer.cell, rk.MinGRUCell):
        u = k[..., :H]
    else:
        u = _softplus(-k[..., :H]) - _softplus(-k[..., H:2 * H])
    return float(_softplus(u).max())


def _rtol(T: int, L: float) -> float:
    return 2 * T * EPS32 * (L + 16)


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _export(model: Any, tmp_path: Path, **kw: Any) -> Path:
    path = tmp_path / "m.onnx"
    rk.save_onnx(model, path, **kw)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    return path


def _compare(got: list[np.ndarray], want: Any, rtol: float, what: str) -> None:
    want = want if isinstance(want, list) else [want]
    assert len(got) == len(want), what
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=rtol, atol=0, err_msg=what)


@pytest.mark.parametrize("cls", LAYERS)
def test_every_option_of_the_layer(cls: Any, tmp_path: Path) -> None:
    """go_backwards x return_sequences x return_state x initial_state x lengths, the layer alone."""
    rng = np.random.default_rng(3)
    for gb, seqs, st, init, lengths in itertools.product([False, True], repeat=5):
        layer = cls(H, go_backwards=gb, return_sequences=seqs, return_state=st)
        layer.build(rk.Shape((None, None, F)))
        _randomise(layer, 7)
        path = _export(layer, tmp_path, lengths=lengths, initial_state=init)
        for B, T in SIZES:
            x = rng.standard_normal((B, T, F)).astype(np.float32)
            feeds: dict[str, np.ndarray] = {"input": x}
            arg: Any = x
            ctx = rk.Ctx.inference()
            if init:
                h0 = rng.uniform(0, 2, (B, H)).astype(np.float32)   # the state of a min cell is >= 0
                feeds["initial_h"], arg = h0, [x, h0]
            if lengths:
                n = rng.integers(1, T + 1, B)
                n[0] = T
                feeds["lengths"] = n.astype(np.int64)
                ctx = ctx.set_mask(lengths=n)
            _compare(_run(path, feeds), layer.forward(arg, ctx), _rtol(T, _max_log_a(layer, x)),
                     f"go_backwards={gb} return_sequences={seqs} return_state={st} initial={init} "
                     f"lengths={lengths} B={B} T={T}")


@pytest.mark.parametrize("cls", LAYERS)
def test_bidirectional_each_merge_mode(cls: Any, tmp_path: Path) -> None:
    """Both directions as Scan passes, the backward one put back in input order (within each
    length), in a Sequential, with and without lengths."""
    rng = np.random.default_rng(4)
    modes = ["concat", "sum", "mul", "ave"]
    for seqs, mode, lengths in itertools.product([False, True], modes, [False, True]):
        bi = rk.Bidirectional(cls(H, return_sequences=seqs), merge_mode=mode)
        model = rk.Sequential([bi], input_shape=(None, None, F))
        _randomise(bi.forward_layer, 8)
        _randomise(bi.backward_layer, 9)
        path = _export(model, tmp_path, lengths=lengths)
        for B, T in SIZES:
            x = rng.standard_normal((B, T, F)).astype(np.float32)
            feeds = {"input": x}
            ctx = rk.Ctx.inference()
            if lengths:
                n = rng.integers(1, T + 1, B)
                n[0] = T
                feeds["lengths"] = n.astype(np.int64)
                ctx = ctx.set_mask(lengths=n)
            L = max(_max_log_a(bi.forward_layer, x), _max_log_a(bi.backward_layer, x))
            _compare(_run(path, feeds), model.forward(x, ctx), _rtol(T, L),
                     f"return_sequences={seqs} merge_mode={mode} lengths={lengths} B={B} T={T}")


def test_bidirectional_states_and_a_gru_beside_a_min_gru(tmp_path: Path) -> None:
    """Bidirectional(return_state=True, merge_mode=None) in a graph model, and a pair of a
    MinGRU (a Scan) and a GRU (ONNX's GRU op) with lengths."""
    rng = np.random.default_rng(5)
    b = rk.GraphBuilder()
    x_in = b.input((None, None, F), name="input")
    bi = rk.Bidirectional(rk.MinLSTM(H, return_sequences=True, return_state=True), merge_mode=None)
    yf, yb, hf, hb = b.add(bi, x_in)
    model = b.build([yf, yb, hf, hb])
    _randomise(bi.forward_layer, 10)
    _randomise(bi.backward_layer, 11)
    path = _export(model, tmp_path)
    x = rng.standard_normal((3, 7, F)).astype(np.float32)
    L = max(_max_log_a(bi.forward_layer, x), _max_log_a(bi.backward_layer, x))
    _compare(_run(path, {"input": x}), model.predict(x), _rtol(7, L), "Bidirectional states")

    mixed = rk.Bidirectional(rk.MinGRU(H, return_sequences=True),
                             backward_layer=rk.GRU(H, return_sequences=True, go_backwards=True))
    seq = rk.Sequential([mixed], input_shape=(None, None, F))
    _randomise(mixed.forward_layer, 12)
    path = _export(seq, tmp_path, lengths=True)
    for B, T in SIZES:
        x = rng.standard_normal((B, T, F)).astype(np.float32)
        n = rng.integers(1, T + 1, B)
        n[0] = T
        got = _run(path, {"input": x, "lengths": n.astype(np.int64)})[0]
        want = seq.forward(x, rk.Ctx.inference().set_mask(lengths=n))
        # the GRU half may be negative: its error is absolute, 1e-5 as in test_onnx_export.py
        rtol = _rtol(T, _max_log_a(mixed.forward_layer, x))
        np.testing.assert_allclose(got[..., :H], want[..., :H], rtol=rtol, atol=0)
        np.testing.assert_allclose(got[..., H:], want[..., H:], atol=1e-5, rtol=0)


@pytest.mark.parametrize("cls", LAYERS)
def test_stateful_is_refused_naming_the_option(cls: Any, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    shape = rk.Shape((2, 5, F))
    for model in (rk.Sequential([cls(H, stateful=True, name="st")]).build(shape),
                  rk.Sequential([rk.Bidirectional(cls(H, stateful=True), name="st")]).build(shape)):
        with pytest.raises(rk.UnsupportedFeatureError, match="layer 'st': stateful: a stateful layer") as e:
            rk.save_onnx(model, path)
        assert (e.value.layer, e.value.option) == ("st", "stateful")
        assert not path.exists()


# -- xLSTM ---------------------------------------------------------------------------------------
XLSTM = [("SLSTM", {}), ("SLSTM", {"forget_gate": "exp"}), ("MLSTM", {}),
         ("MLSTM", {"forget_gate": "exp", "chunk_size": 4}), ("MLSTM", {"chunk_size": None})]
XH = 8   # two heads of 4


def _xlstm(kind: str, kw: dict[str, Any], seed: int, F_in: int = F, **opts: Any) -> Any:
    layer = getattr(rk, kind)(XH, 2, seed=seed, **kw, **opts)
    layer.build(rk.Shape((None, None, F_in)))
    rng = np.random.default_rng(seed)
    for name, w in layer.weights():   # every weight drawn (the gates' zero columns too)
        layer.set_weight(name, 0.7 * rng.standard_normal(w.shape) + (w if name == "bias" else 0))
    return layer


def _close_to_scale(got: list[np.ndarray], want: Any, what: str) -> None:
    want = want if isinstance(want, list) else [want]
    assert len(got) == len(want), what
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape, what
        tol = 1e-5 * max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=0, atol=tol, err_msg=what)


@pytest.mark.parametrize("kind,kw", XLSTM, ids=[k + "".join(f"-{v}" for v in c.values()) for k, c in XLSTM])
def test_xlstm_every_option_of_the_layer(kind: str, kw: dict[str, Any], tmp_path: Path) -> None:
    """go_backwards x return_sequences x return_state x initial_state x lengths, the layer alone
    (MLSTM: a plain pass runs rnnkit's chunkwise or parallel form, any other its recurrent one)."""
    rng = np.random.default_rng(6)
    twin = _xlstm(kind, kw, 13, return_state=True)   # the same weights: initial states a layer reaches
    for gb, seqs, st, init, lengths in itertools.product([False, True], repeat=5):
        layer = _xlstm(kind, kw, 13, go_backwards=gb, return_sequences=seqs, return_state=st)
        path = _export(layer, tmp_path, lengths=lengths, initial_state=init)
        for B, T in SIZES:
            x = rng.standard_normal((B, T, F)).astype(np.float32)
            feeds: dict[str, np.ndarray] = {"input": x}
            arg: Any = x
            ctx = rk.Ctx.inference()
            if init:
                parts = twin.predict(rng.standard_normal((B, 4, F)).astype(np.float32))[1:]
                names = [f"initial_{nm}" for nm in layer.cell.state_names]
                feeds.update(zip(names, parts, strict=True))
                arg = [x, *parts]
            if lengths:
                n = rng.integers(1, T + 1, B)
                n[0] = T
                feeds["lengths"] = n.astype(np.int64)
                ctx = ctx.set_mask(lengths=n)
            _close_to_scale(_run(path, feeds), layer.forward(arg, ctx),
                            f"go_backwards={gb} return_sequences={seqs} return_state={st} initial={init} "
                            f"lengths={lengths} B={B} T={T}")


def test_xlstm_bidirectional_and_qkv_blocks(tmp_path: Path) -> None:
    """Bidirectional SLSTM / MLSTM (both merge kinds: side by side, averaged) with and without
    lengths, in a Sequential; an MLSTM with block-diagonal q, k, v projections."""
    rng = np.random.default_rng(7)
    for kind, mode, lengths in itertools.product(["SLSTM", "MLSTM"], ["concat", "ave"], [False, True]):
        bi = rk.Bidirectional(getattr(rk, kind)(XH, 2, return_sequences=True, seed=3), merge_mode=mode)
        model = rk.Sequential([bi], input_shape=(None, None, F))
        for k, lay in enumerate((bi.forward_layer, bi.backward_layer)):
            r = np.random.default_rng(20 + k)
            for name, w in lay.weights():
                lay.set_weight(name, 0.7 * r.standard_normal(w.shape) + (w if name == "bias" else 0))
        path = _export(model, tmp_path, lengths=lengths)
        for B, T in SIZES:
            x = rng.standard_normal((B, T, F)).astype(np.float32)
            feeds = {"input": x}
            ctx = rk.Ctx.inference()
            if lengths:
                n = rng.integers(1, T + 1, B)
                n[0] = T
                feeds["lengths"] = n.astype(np.int64)
                ctx = ctx.set_mask(lengths=n)
            _close_to_scale(_run(path, feeds), model.forward(x, ctx), f"{kind} {mode} lengths={lengths}")
    blocks = _xlstm("MLSTM", {"qkv_blocksize": 4}, 14, F_in=XH, return_sequences=True)
    path = _export(blocks, tmp_path)
    for B, T in SIZES:
        x = rng.standard_normal((B, T, XH)).astype(np.float32)
        _close_to_scale(_run(path, {"input": x}), blocks.predict(x), "qkv_blocksize=4")


@pytest.mark.parametrize("kind", ["SLSTM", "MLSTM"])
def test_xlstm_stateful_is_refused_naming_the_option(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    model = rk.Sequential([getattr(rk, kind)(XH, 2, stateful=True, name="st")]).build(rk.Shape((2, 5, F)))
    with pytest.raises(rk.UnsupportedFeatureError, match="layer 'st': stateful: a stateful layer") as e:
        rk.save_onnx(model, path)
    assert (e.value.layer, e.value.option) == ("st", "stateful")
    assert not path.exists()


# -- ConvLSTM ------------------------------------------------------------------------------------
# tolerance: as xLSTM's above (float32, T <= 9 steps of tens of operations, each a few ulps, and
# the Conv sums in another order): 1e-5 of the largest entry of each output.
CONVS = [
    (lambda **k: rk.ConvLSTM1D(4, 3, padding="same", **k), (7, 2)),
    (lambda **k: rk.ConvLSTM1D(4, 2, strides=2, recurrent_activation="hard_sigmoid", **k), (7, 2)),
    (lambda **k: rk.ConvLSTM2D(3, (3, 2), padding="same", **k), (5, 4, 2)),
    (lambda **k: rk.ConvLSTM2D(3, (2, 2), dilation_rate=2, activation="relu", use_bias=False, **k),
     (5, 6, 2)),
]


def _conv_randomise(layer: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for name, w in layer.weights():
        layer.set_weight(name, 0.5 * rng.standard_normal(w.shape))


@pytest.mark.parametrize("k", range(len(CONVS)), ids=["1d-same", "1d-strides", "2d-same", "2d-dilated"])
def test_conv_lstm_every_option(k: int, tmp_path: Path) -> None:
    """go_backwards x return_sequences x lengths (Keras' rules: the whole time axis reversed,
    the padding first; masked steps' outputs zero) in a Sequential."""
    make, shape = CONVS[k]
    rng = np.random.default_rng(8)
    for gb, seqs, lengths in itertools.product([False, True], repeat=3):
        layer = make(go_backwards=gb, return_sequences=seqs)
        model = rk.Sequential([layer], input_shape=(None, None, *shape))
        _conv_randomise(layer, 15)
        path = _export(model, tmp_path, lengths=lengths)
        for B, T in SIZES:
            x = rng.standard_normal((B, T, *shape)).astype(np.float32)
            feeds = {"input": x}
            ctx = rk.Ctx.inference()
            if lengths:
                n = rng.integers(1, T + 1, B)
                n[0] = T
                feeds["lengths"] = n.astype(np.int64)
                ctx = ctx.set_mask(lengths=n)
            _close_to_scale(_run(path, feeds), model.forward(x, ctx),
                            f"go_backwards={gb} return_sequences={seqs} lengths={lengths} B={B} T={T}")


def test_conv_lstm_final_states(tmp_path: Path) -> None:
    """A graph model x -> [output, h, c] (return_state), both directions, with lengths."""
    rng = np.random.default_rng(9)
    for gb in (False, True):
        b = rk.GraphBuilder()
        x_in = b.input((None, None, 5, 4, 2), name="input")
        layer = rk.ConvLSTM2D(3, (3, 3), padding="same", return_sequences=True, return_state=True,
                              go_backwards=gb)
        y, h, c = b.add(layer, x_in)
        model = b.build([y, h, c])
        _conv_randomise(layer, 16)
        path = _export(model, tmp_path, lengths=True)
        for B, T in SIZES:
            x = rng.standard_normal((B, T, 5, 4, 2)).astype(np.float32)
            n = rng.integers(1, T + 1, B)
            got = _run(path, {"input": x, "lengths": n.astype(np.int64)})
            _close_to_scale(got, model.forward(x, rk.Ctx.inference().set_mask(lengths=n)),
                            f"go_backwards={gb} B={B} T={T}")


def test_conv_lstm_stateful_is_refused_naming_the_option(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    model = rk.Sequential([rk.ConvLSTM1D(2, 2, stateful=True, name="st"), rk.Flatten()],
                          input_shape=(2, 3, 4, 2))
    with pytest.raises(rk.UnsupportedFeatureError, match="layer 'st': stateful: a stateful layer") as e:
        rk.save_onnx(model, path)
    assert (e.value.layer, e.value.option) == ("st", "stateful")
    assert not path.exists()
