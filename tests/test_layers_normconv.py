"""Normalization, convolution and pooling over time, each against Keras 3 itself (torch backend)
and the shared layer harness.

For every layer in :data:`CASES`: the harness (build, forward, backward, float64 gradcheck,
save/load of the weights, layer unchanged by a pass); the forward equal to the Keras layer with
copied weights and the gradients (input and every weight) equal to torch autograd through the
Keras layer; the layer in a Sequential and a functional model, saved to ``.keras`` by Keras and
loaded by rnnkit and back; rnnkit's own files and ``model_from_config``; the tape; ONNX through
onnxruntime.

Tolerances, from the arithmetic: float32 forwards agree to 1e-6 absolute on outputs of size
~1 (each output is a sum of at most ~60 products or a normalization over ~16 values: float32's
eps 6e-8 times that count and the values' size stays near 1e-6; reductions whose summation order
differs between NumPy and torch set the bound). Gradients compare float64 rnnkit with float64
Keras-on-torch to 1e-9 (the same formulas up to summation order), and the float32 path to 1e-5.
ONNX outputs agree to 1e-5 (float32, other kernels' summation order). The gradcheck is float64
central differences with h = 1e-6 (truncation ~h^2, rounding ~1e-16 / h: below 1e-6 relative).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer, keras_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


@dataclass(frozen=True)
class Case:
    """One layer configuration: rnnkit's and Keras' constructors with the same arguments, the
    input's shape (batch first), and Keras weight arrays -> rnnkit weights (None: the same
    arrays in the same order)."""

    id: str
    ours: Callable[..., Any]
    theirs: Callable[[Any], Any]
    shape: tuple[int, ...]
    #: the layer in PyTorch: (torch, rnnkit layer, x tensor, {weight name: tensor}) -> y
    torch_fn: Callable[..., Any]
    seq_model: bool = True   # usable between an LSTM(return_sequences) and a Dense
    #: whether Keras-on-torch computes it (its LayerNormalization passes a single non-last axis
    #: to torch's layer_norm, which takes trailing axes only, and fails)
    keras_ok: bool = True
    #: whether the whole harness applies (a layer whose training pass moves weights of its own,
    #: BatchNormalization, goes through the single checks instead)
    harness: bool = True


def t_batchnorm(th: Any, layer: Any, x: Any, w: dict[str, Any], mask: Any = None) -> Any:
    """The training pass: the batch's statistics (Keras' masked formulas with a mask)."""
    if mask is None:
        wt = th.full((1, 1, 1), 1.0 / (x.shape[0] * x.shape[1]), dtype=x.dtype)
    else:
        m = th.tensor(mask, dtype=x.dtype)[:, :, None]
        wt = m / (m.sum() + 1e-7)
    mean = (wt * x).sum(dim=(0, 1), keepdim=True)
    var = (wt * (x - mean) ** 2).sum(dim=(0, 1), keepdim=True)
    y = (x - mean) / th.sqrt(var + layer.epsilon)
    if "gamma" in w:
        y = y * w["gamma"]
    return y + w["beta"] if "beta" in w else y


def t_layernorm(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    axes = sorted(a % x.ndim for a in (layer.axis if isinstance(layer.axis, list) else [layer.axis]))
    bshape = [x.shape[a] if a in axes else 1 for a in range(x.ndim)]
    mean = x.mean(dim=axes, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=axes, keepdim=True)
    y = (x - mean) / th.sqrt(var + layer.epsilon)
    if "gamma" in w:
        y = y * w["gamma"].reshape(bshape)
    return y + w["beta"].reshape(bshape) if "beta" in w else y


def _tpads(layer: Any, T: int, span: int, stride: int) -> tuple[int, int]:
    from rnnkit.layers._conv import pads
    return pads(T, span, stride, layer.padding)


def t_conv(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    F = th.nn.functional
    left, right = _tpads(layer, x.shape[1], layer.span, layer.strides)
    xp = F.pad(x.permute(0, 2, 1), (left, right))
    y = F.conv1d(xp, w["kernel"].permute(2, 1, 0), w.get("bias"), stride=layer.strides,
                 dilation=layer.dilation_rate, groups=layer.groups).permute(0, 2, 1)
    return y if layer.activation.name == "linear" else getattr(th, layer.activation.name)(y)


def t_maxpool(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    F = th.nn.functional
    left, right = _tpads(layer, x.shape[1], layer.pool_size, layer.strides)
    xp = F.pad(x.permute(0, 2, 1), (left, right), value=-float("inf"))
    return F.max_pool1d(xp, layer.pool_size, layer.strides).permute(0, 2, 1)


def t_avgpool(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    """The window sums over the counts of real steps (padding never counted)."""
    F = th.nn.functional
    left, right = _tpads(layer, x.shape[1], layer.pool_size, layer.strides)
    xc = x.permute(0, 2, 1)
    total = F.avg_pool1d(F.pad(xc, (left, right)), layer.pool_size, layer.strides)
    count = F.avg_pool1d(F.pad(th.ones_like(xc[:1, :1]), (left, right)), layer.pool_size, layer.strides)
    return (total / count).permute(0, 2, 1)


def t_gavg(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    return x.mean(dim=1, keepdim=layer.keepdims)


def t_gmax(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    return x.max(dim=1, keepdim=layer.keepdims).values


def t_zeropad(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    return th.nn.functional.pad(x, (0, 0, *layer.padding))


def t_crop(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    return x[:, layer.cropping[0]:x.shape[1] - layer.cropping[1]]


def t_upsample(th: Any, layer: Any, x: Any, w: dict[str, Any]) -> Any:
    return x.repeat_interleave(layer.size, dim=1)


CASES = [
    Case("layernorm", lambda **kw: rk.LayerNormalization(**kw),
         lambda L: L.LayerNormalization(), (3, 5, 6), t_layernorm),
    Case("layernorm_eps_axis12", lambda **kw: rk.LayerNormalization([1, 2], epsilon=0.01, **kw),
         lambda L: L.LayerNormalization([1, 2], epsilon=0.01), (3, 5, 6), t_layernorm),
    Case("layernorm_no_center", lambda **kw: rk.LayerNormalization(center=False, **kw),
         lambda L: L.LayerNormalization(center=False), (3, 5, 6), t_layernorm),
    Case("layernorm_no_scale_axis1", lambda **kw: rk.LayerNormalization(1, scale=False, **kw),
         lambda L: L.LayerNormalization(1, scale=False), (3, 5, 6), t_layernorm, keras_ok=False),
    Case("layernorm_no_scale", lambda **kw: rk.LayerNormalization(scale=False, **kw),
         lambda L: L.LayerNormalization(scale=False), (3, 5, 6), t_layernorm),
    Case("batchnorm", lambda **kw: rk.BatchNormalization(momentum=0.9, **kw),
         lambda L: L.BatchNormalization(momentum=0.9), (3, 5, 6), t_batchnorm, harness=False),
    Case("batchnorm_no_center", lambda **kw: rk.BatchNormalization(center=False, epsilon=0.01, **kw),
         lambda L: L.BatchNormalization(center=False, epsilon=0.01), (3, 5, 6), t_batchnorm, harness=False),
    Case("conv_valid", lambda **kw: rk.Conv1D(3, 3, seed=1, **kw), lambda L: L.Conv1D(3, 3), (2, 9, 4),
         t_conv),
    Case("conv_same_stride2_tanh", lambda **kw: rk.Conv1D(4, 3, strides=2, padding="same", activation="tanh",
                                                          seed=1, **kw),
         lambda L: L.Conv1D(4, 3, strides=2, padding="same", activation="tanh"), (2, 9, 4), t_conv),
    Case("conv_same_even_kernel", lambda **kw: rk.Conv1D(3, 4, padding="same", seed=1, **kw),
         lambda L: L.Conv1D(3, 4, padding="same"), (2, 9, 4), t_conv),
    Case("conv_causal_dilated", lambda **kw: rk.Conv1D(3, 2, padding="causal", dilation_rate=2, seed=1, **kw),
         lambda L: L.Conv1D(3, 2, padding="causal", dilation_rate=2), (2, 9, 4), t_conv),
    Case("conv_groups_no_bias", lambda **kw: rk.Conv1D(4, 3, groups=2, use_bias=False, seed=1, **kw),
         lambda L: L.Conv1D(4, 3, groups=2, use_bias=False), (2, 9, 4), t_conv),
    Case("maxpool", lambda **kw: rk.MaxPooling1D(2, **kw), lambda L: L.MaxPooling1D(2), (2, 9, 4), t_maxpool),
    Case("maxpool_same_stride1", lambda **kw: rk.MaxPooling1D(3, 1, "same", **kw),
         lambda L: L.MaxPooling1D(3, 1, "same"), (2, 9, 4), t_maxpool),
    Case("maxpool_same_stride2", lambda **kw: rk.MaxPooling1D(2, 2, "same", **kw),
         lambda L: L.MaxPooling1D(2, 2, "same"), (2, 9, 4), t_maxpool),
    Case("avgpool_stride2", lambda **kw: rk.AveragePooling1D(3, 2, **kw),
         lambda L: L.AveragePooling1D(3, 2), (2, 9, 4), t_avgpool),
    Case("avgpool_same_even", lambda **kw: rk.AveragePooling1D(3, 1, "same", **kw),
         lambda L: L.AveragePooling1D(3, 1, "same"), (2, 9, 4), t_avgpool),
    # Keras on torch pads an uneven "same" window by repeating the edge step and counts it; Keras'
    # documented rule (and TensorFlow's) counts only the real steps, as rnnkit and ONNX do
    Case("avgpool_same_uneven", lambda **kw: rk.AveragePooling1D(2, 1, "same", **kw),
         lambda L: L.AveragePooling1D(2, 1, "same"), (2, 9, 4), t_avgpool, keras_ok=False),
    Case("global_avg", lambda **kw: rk.GlobalAveragePooling1D(**kw), lambda L: L.GlobalAveragePooling1D(),
         (2, 9, 4), t_gavg),
    Case("global_avg_keepdims", lambda **kw: rk.GlobalAveragePooling1D(keepdims=True, **kw),
         lambda L: L.GlobalAveragePooling1D(keepdims=True), (2, 9, 4), t_gavg),
    Case("global_max", lambda **kw: rk.GlobalMaxPooling1D(**kw), lambda L: L.GlobalMaxPooling1D(),
         (2, 9, 4), t_gmax),
    Case("zero_padding", lambda **kw: rk.ZeroPadding1D((1, 2), **kw), lambda L: L.ZeroPadding1D((1, 2)),
         (2, 9, 4), t_zeropad),
    Case("cropping", lambda **kw: rk.Cropping1D((2, 1), **kw), lambda L: L.Cropping1D((2, 1)),
         (2, 9, 4), t_crop),
    Case("up_sampling", lambda **kw: rk.UpSampling1D(3, **kw), lambda L: L.UpSampling1D(3), (2, 9, 4),
         t_upsample),
]
IDS = [c.id for c in CASES]
KERAS_CASES = [c for c in CASES if c.keras_ok]
KERAS_IDS = [c.id for c in KERAS_CASES]
SEQ_CASES = [c for c in KERAS_CASES if c.seq_model]


def keras() -> Any:
    return keras_or_skip()


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape)


def _randomise(layer: Any, seed: int) -> None:
    """Every weight of an rnnkit layer redrawn (gamma near 1, the others near 0)."""
    g = np.random.default_rng(seed)
    for n in layer.weight_names:
        w = layer.weight(n)
        if n == "moving_variance":
            layer.set_weight(n, 0.5 + np.abs(g.normal(0.0, 0.4, w.shape)))
        else:
            layer.set_weight(n, (1.0 if n == "gamma" else 0.0) + g.normal(0.0, 0.4, w.shape))


def _make(case: Case, dtype: str) -> Any:
    layer = case.ours(dtype=dtype)
    layer.build((None, *case.shape[1:]))
    _randomise(layer, 5)
    return layer


@pytest.mark.parametrize("case", [c for c in CASES if c.harness], ids=[c.id for c in CASES if c.harness])
def test_harness(case: Case) -> None:
    check_layer(lambda dtype: _make(case, dtype), lambda rng: rng.normal(size=case.shape))


def _keras_layer(case: Case, dtype: str) -> Any:
    """The Keras layer built for the case's shape, with rnnkit's randomised weights copied in."""
    k = keras()
    proto = case.theirs(k.layers)
    kl = type(proto).from_config({**proto.get_config(), "dtype": dtype})
    kl.build(case.shape)
    ours = _make(case, dtype)
    assert [w.path.rsplit("/", 1)[-1] for w in kl.weights] == ours.weight_names   # names and order
    for w, n in zip(kl.weights, ours.weight_names, strict=True):
        w.assign(np.asarray(ours.weight(n)))
    return kl, ours


@pytest.mark.parametrize("case", KERAS_CASES, ids=KERAS_IDS)
def test_forward_and_gradients_equal_keras(case: Case) -> None:
    """float32: the Keras layer's forward (1e-6) and torch autograd through it (1e-5)."""
    import torch

    dtype, atol, gtol = "float32", 1e-6, 1e-5
    kl, ours = _keras_layer(case, dtype)
    x = _x(case.shape).astype(dtype)
    tx = torch.tensor(x, requires_grad=True)
    ty = kl(tx, training=True)
    ctx = rk.Ctx.training()
    y = ours.forward(x, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=atol, rtol=0)
    G = np.random.default_rng(1).normal(size=y.shape).astype(dtype)
    ty.backward(torch.tensor(G))
    dx = ours.backward(G, ctx)
    np.testing.assert_allclose(dx, tx.grad.numpy(), atol=gtol, rtol=gtol)
    for w, n in zip(kl.trainable_weights, ours.trainable_names, strict=True):
        np.testing.assert_allclose(ctx.grad(ours, n), w.value.grad.numpy(), atol=gtol, rtol=gtol, err_msg=n)
    for w, n in zip(kl.weights, ours.weight_names, strict=True):   # BatchNormalization's moving statistics
        np.testing.assert_allclose(ours.weight(n), np.asarray(w.value.detach()), atol=atol, rtol=0, err_msg=n)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_float64_gradients_equal_torch_autograd(case: Case) -> None:
    """float64: the output and every gradient equal PyTorch autograd on the same formula."""
    th = pytest.importorskip("torch")
    ours = _make(case, "float64")
    x = _x(case.shape, 3)
    tx = th.tensor(x, requires_grad=True)
    tw = {n: th.tensor(np.asarray(ours.weight(n)), requires_grad=True) for n in ours.trainable_names}
    ty = case.torch_fn(th, ours, tx, tw)
    ctx = rk.Ctx.training()
    y = ours.forward(x, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=1e-12, rtol=1e-12)
    G = np.random.default_rng(1).normal(size=y.shape)
    ty.backward(th.tensor(G))
    np.testing.assert_allclose(ours.backward(G, ctx), tx.grad.numpy(), atol=1e-10, rtol=1e-10)
    for n in ours.trainable_names:
        np.testing.assert_allclose(ctx.grad(ours, n), tw[n].grad.numpy(), atol=1e-10, rtol=1e-10, err_msg=n)


def _seq_models(case: Case) -> tuple[Any, Any]:
    k = keras()
    L = k.layers
    F = case.shape[-1]
    km = k.Sequential([k.Input(case.shape[1:]), L.LSTM(F, return_sequences=True), case.theirs(L),
                       L.Dense(2)])
    ki = k.Input(case.shape[1:])
    kf = k.Model(ki, L.Dense(2)(case.theirs(L)(L.LSTM(F, return_sequences=True)(ki))))
    g = np.random.default_rng(3)
    for m in (km, kf):
        for w in m.weights:
            value = g.normal(1.0 if w.path.endswith("gamma") else 0.0, 0.4, tuple(w.shape))
            w.assign((0.5 + np.abs(value) if w.path.endswith("moving_variance") else value).astype("float32"))
    return km, kf


@pytest.mark.parametrize("case", SEQ_CASES, ids=[c.id for c in SEQ_CASES])
def test_keras_files_both_ways(case: Case, tmp_path: Path) -> None:
    """Keras writes a Sequential and a functional model holding the layer; rnnkit loads both and
    predicts Keras' outputs; rnnkit writes them back and Keras predicts the same again."""
    k = keras()
    x = _x(case.shape, 2).astype("float32")
    for km in _seq_models(case):
        km.save(tmp_path / "k.keras")
        model = rk.load_keras(tmp_path / "k.keras")
        want = np.asarray(km.predict(x, verbose=0))
        np.testing.assert_allclose(model.predict(x), want, atol=2e-6, rtol=0)
        rk.save_keras(model, tmp_path / "r.keras")
        back = k.saving.load_model(str(tmp_path / "r.keras"))
        np.testing.assert_allclose(np.asarray(back.predict(x, verbose=0)), want, atol=2e-6, rtol=0)


def _rk_model(case: Case, dtype: str = "float32") -> Any:
    """Dense(F) -> the layer -> Dense(2), its weights randomised."""
    F = case.shape[-1]
    model = rk.Sequential([rk.Dense(F, "tanh", seed=1, dtype=dtype), case.ours(dtype=dtype),
                           rk.Dense(2, seed=2, dtype=dtype)], input_shape=(None, *case.shape[1:]))
    _randomise(model.layers[1], 6)
    return model


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rnnkit_files_and_config(case: Case, tmp_path: Path) -> None:
    model = _rk_model(case)
    x = _x(case.shape, 4).astype("float32")
    want = model.predict(x)
    rk.save_model(model, tmp_path / "m.rnnkit")
    np.testing.assert_array_equal(rk.load_model(tmp_path / "m.rnnkit").predict(x), want)
    again = rk.model_from_config(model.get_config())
    assert [type(a) for a in again.layers] == [type(b) for b in model.layers]
    assert again.layers[1].get_config() == model.layers[1].get_config()
    again.set_weights(model.get_weights())
    np.testing.assert_array_equal(again.predict(x), want)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_tape_gives_the_layers_gradients(case: Case) -> None:
    """On the tape, the layer's call is one entry: its gradients equal its own backward's (and
    those equal Keras-on-torch above)."""
    layer = _make(case, "float64")
    x = _x(case.shape, 7)
    G = np.random.default_rng(8).normal(size=layer.compute_output_shape(case.shape).dims)
    with rk.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = rk.ops.sum(rk.ops.multiply(y, G))
    got = tape.gradient(loss, [x, *((layer, n) for n in layer.trainable_names)])
    ctx = rk.Ctx.training()
    layer.forward(x, ctx)
    np.testing.assert_allclose(got[0], layer.backward(G, ctx), rtol=1e-12, atol=1e-12)
    for g, n in zip(got[1:], layer.trainable_names, strict=True):
        np.testing.assert_allclose(g, ctx.grad(layer, n), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_onnx_equals_rnnkit(case: Case, tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    model = _rk_model(case)
    for opset in (14, 18):
        rk.save_onnx(model, tmp_path / "m.onnx", opset=opset)
        onnx.checker.check_model(onnx.load(str(tmp_path / "m.onnx")), full_check=True)
        sess = ort.InferenceSession(str(tmp_path / "m.onnx"))
        for B in (2, 5):
            x = _x((B, *case.shape[1:]), B).astype("float32")
            np.testing.assert_allclose(sess.run(None, {"input": x})[0], model.predict(x), atol=1e-5, rtol=0)


# -- LayerNormalization's own behaviour -----------------------------------------------------------
def test_layernorm_passes_a_mask_on_as_keras() -> None:
    """Masking -> LayerNormalization -> LSTM: the mask reaches the LSTM (Keras' rule), which
    carries its state over the masked steps; equal to Keras."""
    k = keras()
    L = k.layers
    km = k.Sequential([k.Input((6, 3)), L.Masking(0.0), L.LayerNormalization(), L.LSTM(4)])
    x = _x((2, 6, 3), 9).astype("float32")
    x[0, 4:] = 0.0
    x[1, 2:] = 0.0
    g = np.random.default_rng(1)
    for w in km.weights:
        w.assign(g.normal(1.0 if w.path.endswith("gamma") else 0.0, 0.4, tuple(w.shape)).astype("float32"))
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"ln_mask_{os.getpid()}.keras"
    km.save(path)
    try:
        model = rk.load_keras(path)
    finally:
        path.unlink()
    np.testing.assert_allclose(model.predict(x), np.asarray(km.predict(x, verbose=0)), atol=2e-6, rtol=0)


@pytest.mark.parametrize("kwargs", [{}, {"center": False}, {"scale": False},
                                    {"center": False, "scale": False}])
def test_layernorm_kernel_equals_numpy_and_torch(kwargs: dict[str, Any]) -> None:
    """The compiled last-axis kernel (8-lane row sums: a width of 37 covers the lanes and the
    tail) equals the NumPy reference to 1e-12 in float64, and torch's layer_norm to 1e-6 (output)
    and 1e-5 (gradients) in float32 at (8, 20, 256)."""
    from harness import assert_fast_matches_reference

    layer = rk.LayerNormalization(**kwargs, dtype="float64")
    layer.build((None, 7, 37))
    _randomise(layer, 2)
    x = _x((4, 7, 37), 3) * 3.0 + 1.0
    assert_fast_matches_reference(layer, x, _x((4, 7, 37), 4), rtol=1e-12)
    th = pytest.importorskip("torch")
    ln = rk.LayerNormalization(**kwargs)
    ln.build((None, 20, 256))
    _randomise(ln, 3)
    x32 = _x((8, 20, 256), 5).astype("float32")
    tx = th.tensor(x32, requires_grad=True)
    tw = {n: th.tensor(np.asarray(ln.weight(n)), requires_grad=True) for n in ln.weight_names}
    ty = th.nn.functional.layer_norm(tx, (256,), tw.get("gamma"), tw.get("beta"), eps=1e-3)
    ctx = rk.Ctx.training()
    np.testing.assert_allclose(ln.forward(x32, ctx), ty.detach().numpy(), atol=1e-6, rtol=0)
    G = _x((8, 20, 256), 6).astype("float32")
    ty.backward(th.tensor(G))
    np.testing.assert_allclose(ln.backward(G, ctx), tx.grad.numpy(), atol=1e-5, rtol=0)
    for n in ln.weight_names:   # sums over 160 rows of values ~1: float32 rounding ~1e-5 relative
        np.testing.assert_allclose(ctx.grad(ln, n), tw[n].grad.numpy(), atol=1e-4, rtol=1e-5, err_msg=n)


@pytest.mark.parametrize("kwargs,match", [
    ({"axis": 0}, "batch axis"),
    ({"axis": 3}, "out of range"),
    ({"axis": [2, -1]}, "twice"),
])
def test_layernorm_bad_axes_fail_at_build(kwargs: dict[str, Any], match: str) -> None:
    layer = rk.LayerNormalization(**kwargs)
    with pytest.raises(rk.Error, match=match):
        layer.build((None, 5, 6))


@pytest.mark.parametrize("kwargs,match", [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"), ({"axis": 1.5}, "axis"),
    ({"axis": []}, "axis"),
])
def test_layernorm_bad_arguments_are_typed(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match=match):
        rk.LayerNormalization(**kwargs)
    with pytest.raises(TypeError, match="center"):   # the bool checks' convention (check_bool)
        rk.LayerNormalization(center=1)


# -- masks and bad configurations -------------------------------------------------------------------
def test_global_average_pooling_takes_a_mask_as_keras(tmp_path: Path) -> None:
    """Masking -> LSTM(sequences) -> GlobalAveragePooling1D -> Dense: the mean over the real steps
    only, equal to Keras (whose pooling consumes the mask)."""
    k = keras()
    L = k.layers
    km = k.Sequential([k.Input((7, 3)), L.Masking(0.0), L.LSTM(4, return_sequences=True),
                       L.GlobalAveragePooling1D(), L.Dense(2)])
    g = np.random.default_rng(2)
    for w in km.weights:
        w.assign(g.normal(0.0, 0.5, tuple(w.shape)).astype("float32"))
    x = _x((3, 7, 3), 5).astype("float32")
    x[0, 5:] = 0.0
    x[1, 1:] = 0.0
    km.save(tmp_path / "k.keras")
    model = rk.load_keras(tmp_path / "k.keras")
    want = np.asarray(km.predict(x, verbose=0))
    np.testing.assert_allclose(model.predict(x), want, atol=2e-6, rtol=0)


def test_global_average_pooling_masked_mean_and_gradient() -> None:
    layer = rk.GlobalAveragePooling1D(dtype="float64")
    x = _x((2, 4, 3), 1)
    mask = np.array([[True, True, False, False], [True, False, True, True]])
    ctx = rk.Ctx.training().set_mask(mask)
    y = layer.forward(x, ctx)
    np.testing.assert_allclose(y[0], x[0, :2].mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(y[1], x[1, [0, 2, 3]].mean(axis=0), rtol=1e-14)
    dx = layer.backward(np.ones((2, 3)), ctx)
    np.testing.assert_allclose(dx[0], np.array([0.5, 0.5, 0, 0])[:, None] * np.ones(3), rtol=1e-14)
    with pytest.raises(rk.InvalidInputError, match="every step masked"):
        layer.forward(x, rk.Ctx.inference().set_mask(np.array([[True] * 4, [False] * 4])))


@pytest.mark.parametrize("layer", [rk.Conv1D(2, 2), rk.MaxPooling1D(), rk.GlobalMaxPooling1D(),
                                   rk.ZeroPadding1D(), rk.UpSampling1D()], ids=lambda lay: lay.name)
def test_layers_that_refuse_a_mask(layer: Any) -> None:
    """Keras' Conv1D, local pooling, global max pooling and the padding layers support no mask:
    a masked input is refused, typed, naming the layer: when the model is built, and when a
    mask reaches the layer itself."""
    with pytest.raises(rk.InvalidInputError, match=f"{layer.name}.*masked input"):
        rk.Sequential([rk.Masking(0.0), layer], input_shape=(None, 6, 2))
    layer.build(rk.Shape((None, 6, 2)))
    with pytest.raises(rk.InvalidInputError, match=f"{layer.name}.*mask"):
        layer.compute_mask(np.ones((1, 6, 2), "float32"), rk.Mask(np.ones((1, 6), bool)))


@pytest.mark.parametrize("layer,shape,match", [
    (rk.Conv1D(3, 6), (None, 5, 2), "kernel_size=6"),
    (rk.Conv1D(3, 3, dilation_rate=3), (None, 6, 2), "kernel_size=3 .dilation_rate=3, 7 steps"),
    (rk.Conv1D(4, 3, groups=2), (None, 6, 3), "groups=2"),
    (rk.MaxPooling1D(4), (None, 3, 2), "pool_size=4"),
    (rk.Cropping1D((2, 2)), (None, 4, 2), "cropping"),
    (rk.Conv1D(3, 2), (None, 6), "rank-3"),
])
def test_bad_configurations_fail_at_build(layer: Any, shape: tuple[Any, ...], match: str) -> None:
    with pytest.raises(rk.InvalidInputError, match=match):
        rk.Sequential([layer], input_shape=shape)


@pytest.mark.parametrize("make,match", [
    (lambda: rk.Conv1D(3, 2, strides=2, dilation_rate=2), "strides > 1 with dilation_rate > 1"),
    (lambda: rk.Conv1D(3, 2, padding="full"), "padding"),
    (lambda: rk.Conv1D(3, 2, groups=2), "filters .3. must be divisible by groups"),
    (lambda: rk.Conv1D(3, 0), "kernel_size"),
    (lambda: rk.AveragePooling1D(2, padding="causal"), "padding"),
    (lambda: rk.ZeroPadding1D((1, -1)), "padding"),
    (lambda: rk.Cropping1D((1, 2, 3)), "cropping"),
])
def test_bad_arguments_are_typed(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match=match):
        make()


def test_conv_kernel_longer_than_a_free_length_input_fails_at_forward() -> None:
    layer = rk.Conv1D(2, 4)
    layer.build((None, None, 3))
    with pytest.raises(rk.InvalidInputError, match="kernel_size=4"):
        layer.predict(np.ones((1, 3, 3), "float32"))


# -- BatchNormalization's own behaviour ----------------------------------------------------------
def _bn_pair(momentum: float = 0.8) -> tuple[Any, Any]:
    case = Case("bn", lambda **kw: rk.BatchNormalization(momentum=momentum, **kw),
                lambda L: L.BatchNormalization(momentum=momentum), (4, 6, 5), t_batchnorm)
    return _keras_layer(case, "float32")


def test_batchnorm_masked_training_pass_equals_keras() -> None:
    """A masked training pass: Keras' masked moments (the real steps only, 1e-7 in the count),
    every step normalized, the moving statistics moved by the masked moments; outputs 1e-6,
    gradients 1e-5 against torch autograd through the Keras layer."""
    import torch

    kl, ours = _bn_pair()
    x = _x((4, 6, 5), 11).astype("float32") * 2.0 + 0.5
    mask = np.ones((4, 6), bool)
    mask[0, 3:] = False
    mask[2, 1:] = False
    tx = torch.tensor(x, requires_grad=True)
    ty = kl(tx, training=True, mask=torch.tensor(mask))
    ctx = rk.Ctx.training().set_mask(mask)
    y = ours.forward(x, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=1e-6, rtol=0)
    G = _x((4, 6, 5), 12).astype("float32")
    ty.backward(torch.tensor(G))
    np.testing.assert_allclose(ours.backward(G, ctx), tx.grad.numpy(), atol=1e-5, rtol=0)
    for w, n in zip(kl.trainable_weights, ours.trainable_names, strict=True):
        np.testing.assert_allclose(ctx.grad(ours, n), w.value.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=n)
    for w, n in zip(kl.weights, ours.weight_names, strict=True):
        np.testing.assert_allclose(ours.weight(n), np.asarray(w.value.detach()), atol=1e-6, rtol=0, err_msg=n)


def test_batchnorm_masked_float64_gradients_equal_torch_autograd() -> None:
    th = pytest.importorskip("torch")
    ours = _make(CASES[IDS.index("batchnorm")], "float64")
    x = _x((3, 5, 6), 13)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], bool)
    tx = th.tensor(x, requires_grad=True)
    tw = {n: th.tensor(np.asarray(ours.weight(n)), requires_grad=True) for n in ours.trainable_names}
    ty = t_batchnorm(th, ours, tx, tw, mask)
    ctx = rk.Ctx.training().set_mask(mask)
    np.testing.assert_allclose(ours.forward(x, ctx), ty.detach().numpy(), atol=1e-12, rtol=1e-12)
    G = _x((3, 5, 6), 14)
    ty.backward(th.tensor(G))
    np.testing.assert_allclose(ours.backward(G, ctx), tx.grad.numpy(), atol=1e-10, rtol=1e-10)
    for n in ours.trainable_names:
        np.testing.assert_allclose(ctx.grad(ours, n), tw[n].grad.numpy(), atol=1e-10, rtol=1e-10, err_msg=n)


def test_batchnorm_training_moves_the_statistics_inference_reads_them() -> None:
    """Two training passes move the moving statistics as Keras' momentum rule (checked by hand
    here); an inference pass uses them and changes nothing; its gradient is the affine map's."""
    layer = rk.BatchNormalization(momentum=0.75, dtype="float64")
    layer.build((None, 4, 3))
    x1, x2 = _x((5, 4, 3), 1) + 2.0, _x((5, 4, 3), 2) * 3.0
    mm, mv = np.zeros(3), np.ones(3)
    for x in (x1, x2):
        layer.forward(x, rk.Ctx.training())
        mm = mm * 0.75 + x.mean(axis=(0, 1)) * 0.25
        mv = mv * 0.75 + x.var(axis=(0, 1)) * 0.25
    np.testing.assert_allclose(layer.weight("moving_mean"), mm, rtol=1e-14)
    np.testing.assert_allclose(layer.weight("moving_variance"), mv, rtol=1e-14)
    ctx = rk.Ctx(False)
    y = layer.forward(x1, ctx)
    np.testing.assert_allclose(y, (x1 - mm) / np.sqrt(mv + 1e-3), rtol=1e-13)
    np.testing.assert_array_equal(layer.weight("moving_mean"), mm)
    with rk.GradientTape() as tape:
        tape.watch(x1)
        out = layer(x1)
    np.testing.assert_allclose(tape.gradient(out, x1), np.broadcast_to(1 / np.sqrt(mv + 1e-3), x1.shape),
                               rtol=1e-13)
    np.testing.assert_array_equal(layer.weight("moving_mean"), mm)
    assert layer.trainable_names == ["gamma", "beta"]


def test_batchnorm_call_with_training_moves_the_statistics_once() -> None:
    """``layer(x, training=True)`` is one training pass: one move of the statistics (the pass's
    own write must not make it run again)."""
    layer = rk.BatchNormalization(momentum=0.9)
    layer.build((None, 20, 3))
    x = _x((8, 20, 3), 1).astype("float32") + 2.0
    layer(x, training=True)
    np.testing.assert_allclose(layer.weight("moving_mean"), 0.1 * x.mean(axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(layer.weight("moving_variance"), 0.9 + 0.1 * x.var(axis=(0, 1)), rtol=1e-5)


def test_batchnorm_in_fit_equals_keras_fit() -> None:
    """One ``fit`` step of Dense -> BatchNormalization -> Dense in both (SGD, MSE): the moving
    statistics and the trained weights agree (float32, 1e-5)."""
    k = keras()
    L = k.layers
    km = k.Sequential([k.Input((4, 3)), L.Dense(5), L.BatchNormalization(momentum=0.5), L.Dense(1)])
    model = rk.Sequential([rk.Dense(5), rk.BatchNormalization(momentum=0.5), rk.Dense(1)],
                          input_shape=(None, 4, 3))
    g = np.random.default_rng(4)
    values = [g.normal(0.0, 0.5, tuple(w.shape)).astype("float32") for w in km.weights]
    values[5] = 0.5 + np.abs(values[5])     # moving_variance
    for w, v in zip(km.weights, values, strict=True):
        w.assign(v)
    model.set_weights(values)
    km.compile(optimizer=k.optimizers.SGD(0.1), loss="mse")
    model.compile(optimizer=rk.optimizers.SGD(0.1), loss="mse")
    x, y = _x((8, 4, 3), 5).astype("float32"), _x((8, 4, 1), 6).astype("float32")
    km.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    for want, got in zip(km.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(model.predict(x), np.asarray(km.predict(x, verbose=0)), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kwargs,match", [({"momentum": 1.5}, "momentum"), ({"epsilon": 0.0}, "epsilon"),
                                          ({"axis": 1.0}, "axis")])
def test_batchnorm_bad_arguments_are_typed(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match=match):
        rk.BatchNormalization(**kwargs)


def test_maskless_models_of_these_layers_take_the_inference_chain() -> None:
    """None of these layers makes a mask out of none, so a maskless model of them runs on the
    inference chain (GlobalAveragePooling1D's own compute_mask is declared so)."""
    from rnnkit.models._inference import chain_plan

    ids = ("conv_valid", "batchnorm", "layernorm", "global_avg")
    layers = [case.ours() for case in CASES if case.id in ids]
    model = rk.Sequential(layers, input_shape=(None, 9, 4))
    assert chain_plan(model.layers, model.input_shapes()[0]) is not None
