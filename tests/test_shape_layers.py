"""The shape layers and wrappers — Flatten, Reshape, Permute, SpatialDropout1D, GaussianNoise,
Subtract, Maximum, Minimum, Dot, TimeDistributed, Lambda — each against Keras 3 itself (torch
backend) and the shared layer harness.

For every layer: the harness (build, forward, backward, float64 gradcheck, round trip); the
forward equal to the Keras layer with copied weights and the gradients (input and every weight)
equal to torch autograd through the Keras layer; Sequential, functional and subclassed models;
``.keras`` files both ways; rnnkit's own files and ``model_from_config``; ONNX through
onnxruntime where ONNX has the operators.

Tolerances, from the arithmetic: the rearranging layers (Flatten, Reshape, Permute) and the
elementwise merges move or pick float32 values without rounding, so they agree exactly with
Keras (checked to 1e-6 anyway, the brief's bound); a Dense or Dot output is a sum of at most 8
products of values ~1, so float32's eps 6e-8 times 8 stays below 1e-6; gradients (sums of up to
~30 such products) to 1e-5. ONNX outputs agree to 1e-5 (float32, other kernels' summation order).
The gradcheck is float64 central differences with h = 1e-6 (truncation ~h^2, rounding ~1e-16/h).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer, keras_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def keras() -> Any:
    return keras_or_skip()


@dataclass(frozen=True)
class Case:
    """One single-input layer: rnnkit's and Keras' constructors with the same arguments, the
    input's shape (batch first); ``onnx``: whether ONNX export applies; ``seq``: usable between
    an LSTM(return_sequences) and a Dense (its output is (B, T', F'))."""

    id: str
    ours: Callable[..., Any]
    theirs: Callable[[Any], Any]
    shape: tuple[int, ...]
    onnx: bool = True
    seq: bool = True
    #: whether the harness applies (its training pass must equal inference: not for the noise
    #: layers, which have their own statistical and exact-gradient tests below)
    harness: bool = True


CASES = [
    Case("flatten", lambda **kw: rk.Flatten(**kw), lambda L: L.Flatten(), (2, 5, 4), seq=False),
    Case("flatten_channels_first", lambda **kw: rk.Flatten("channels_first", **kw),
         lambda L: L.Flatten("channels_first"), (2, 5, 4), seq=False),
    Case("reshape", lambda **kw: rk.Reshape((10, 2), **kw), lambda L: L.Reshape((10, 2)), (2, 5, 4)),
    Case("reshape_infer", lambda **kw: rk.Reshape((-1, 5), **kw), lambda L: L.Reshape((-1, 5)), (2, 5, 4)),
    Case("permute", lambda **kw: rk.Permute((2, 1), **kw), lambda L: L.Permute((2, 1)), (2, 5, 4)),
    Case("time_distributed_dense", lambda **kw: rk.TimeDistributed(rk.Dense(3, "tanh", seed=1, **kw)),
         lambda L: L.TimeDistributed(L.Dense(3, "tanh")), (2, 5, 4)),
    Case("spatial_dropout", lambda **kw: rk.SpatialDropout1D(0.3, **kw),
         lambda L: L.SpatialDropout1D(0.3), (2, 5, 4), harness=False),
    Case("gaussian_noise", lambda **kw: rk.GaussianNoise(0.5, **kw), lambda L: L.GaussianNoise(0.5),
         (2, 5, 4), harness=False),
]
IDS = [c.id for c in CASES]
SEQ = [c for c in CASES if c.seq]


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape)


def _randomise(layer: Any, seed: int) -> None:
    g = np.random.default_rng(seed)
    for n in layer.weight_names:
        layer.set_weight(n, g.normal(0.0, 0.5, layer.weight(n).shape))


def _make(case: Case, dtype: str) -> Any:
    layer = case.ours(dtype=dtype)
    layer.build((None, *case.shape[1:]))
    _randomise(layer, 5)
    return layer


@pytest.mark.parametrize("case", [c for c in CASES if c.harness], ids=[c.id for c in CASES if c.harness])
def test_harness(case: Case) -> None:
    check_layer(lambda dtype: _make(case, dtype), lambda rng: rng.normal(size=case.shape))


def _keras_pair(case: Case, dtype: str) -> tuple[Any, Any]:
    k = keras()
    kl = case.theirs(k.layers)
    kl.build(case.shape)
    ours = _make(case, dtype)
    assert [w.path.rsplit("/", 1)[-1] for w in kl.weights] == ours.weight_names   # names and order
    for w, n in zip(kl.weights, ours.weight_names, strict=True):
        w.assign(np.asarray(ours.weight(n)))
    return kl, ours


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_and_gradients_equal_keras(case: Case) -> None:
    """float32, an inference pass (the noise layers are the identity there, in both): the Keras
    layer's forward (1e-6) and torch autograd through it (1e-5); then rnnkit's training-Ctx
    gradient of the deterministic layers too."""
    import torch

    kl, ours = _keras_pair(case, "float32")
    x = _x(case.shape).astype("float32")
    tx = torch.tensor(x, requires_grad=True)
    ty = kl(tx, training=False)
    noisy = case.id in ("spatial_dropout", "gaussian_noise")
    ctx = rk.Ctx(True) if not noisy else _no_drop_ctx()
    y = ours.forward(x, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=1e-6, rtol=0)
    G = np.random.default_rng(1).normal(size=y.shape).astype("float32")
    ty.backward(torch.tensor(G))
    np.testing.assert_allclose(ours.backward(G, ctx), tx.grad.numpy(), atol=1e-5, rtol=1e-5)
    for w, n in zip(kl.trainable_weights, ours.trainable_names, strict=True):
        np.testing.assert_allclose(ctx.grad(ours, n), w.value.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=n)


def _no_drop_ctx() -> rk.Ctx:
    """A context that records caches and drops nothing (a tape's context for training=False)."""
    from rnnkit._tape import _TapeCtx
    return _TapeCtx(False)


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
            w.assign(g.normal(0.0, 0.4, tuple(w.shape)).astype("float32"))
    return km, kf


@pytest.mark.parametrize("case", CASES, ids=IDS)
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


def _rk_model(case: Case) -> Any:
    """Dense(F) -> the layer -> Dense(2), its weights randomised."""
    F = case.shape[-1]
    model = rk.Sequential([rk.Dense(F, "tanh", seed=1), case.ours(), rk.Dense(2, seed=2)],
                          input_shape=(None, *case.shape[1:]))
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


@pytest.mark.parametrize("case", [c for c in CASES if c.onnx], ids=[c.id for c in CASES if c.onnx])
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


# -- the merges of two inputs: Subtract, Maximum, Minimum, Dot ------------------------------------
@dataclass(frozen=True)
class Merge:
    id: str
    ours: Callable[..., Any]
    theirs: Callable[[Any], Any]
    shapes: tuple[tuple[int, ...], ...]


MERGES = [
    Merge("subtract", lambda **kw: rk.Subtract(**kw), lambda L: L.Subtract(), ((2, 5, 4), (2, 5, 4))),
    Merge("maximum", lambda **kw: rk.Maximum(**kw), lambda L: L.Maximum(), ((2, 5, 4), (2, 5, 4))),
    Merge("maximum3", lambda **kw: rk.Maximum(**kw), lambda L: L.Maximum(), ((2, 5, 4),) * 3),
    Merge("minimum", lambda **kw: rk.Minimum(**kw), lambda L: L.Minimum(), ((2, 5, 4), (2, 5, 4))),
    Merge("dot_features", lambda **kw: rk.Dot(2, **kw), lambda L: L.Dot(2), ((2, 5, 4), (2, 6, 4))),
    Merge("dot_time_pair", lambda **kw: rk.Dot((1, 1), **kw), lambda L: L.Dot((1, 1)),
          ((2, 5, 4), (2, 5, 3))),
    Merge("dot_normalize", lambda **kw: rk.Dot(-1, normalize=True, **kw), lambda L: L.Dot(-1, normalize=True),
          ((2, 5, 4), (2, 6, 4))),
    Merge("dot_vectors", lambda **kw: rk.Dot(1, **kw), lambda L: L.Dot(1), ((3, 4), (3, 4))),
    Merge("dot_matrix_vector", lambda **kw: rk.Dot((2, 1), **kw), lambda L: L.Dot((2, 1)),
          ((3, 5, 4), (3, 4))),
]
MERGE_IDS = [m.id for m in MERGES]


def _xs(m: Merge, seed: int = 0) -> list[np.ndarray]:
    return [_x(s, seed + i) for i, s in enumerate(m.shapes)]


@pytest.mark.parametrize("m", MERGES, ids=MERGE_IDS)
def test_merge_harness(m: Merge) -> None:
    check_layer(lambda dtype: m.ours(dtype=dtype), lambda rng: [rng.normal(size=s) for s in m.shapes])


@pytest.mark.parametrize("m", MERGES, ids=MERGE_IDS)
def test_merge_forward_and_gradients_equal_keras(m: Merge) -> None:
    """float32: forward 1e-6 and every input's gradient 1e-5 against torch autograd through the
    Keras layer."""
    import torch

    k = keras()
    kl = m.theirs(k.layers)
    xs = [a.astype("float32") for a in _xs(m)]
    txs = [torch.tensor(a, requires_grad=True) for a in xs]
    ty = kl(txs)
    ours = m.ours()
    ours.build([(None, *s[1:]) for s in m.shapes])
    ctx = rk.Ctx.training()
    y = ours.forward(xs, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=1e-6, rtol=0)
    assert ours.compute_output_shape([(None, *s[1:]) for s in m.shapes]).dims[1:] == tuple(ty.shape)[1:]
    G = np.random.default_rng(1).normal(size=y.shape).astype("float32")
    ty.backward(torch.tensor(G))
    for d, t in zip(ours.backward(G, ctx), txs, strict=True):
        np.testing.assert_allclose(d, t.grad.numpy(), atol=1e-5, rtol=1e-5)


def test_maximum_ties_split_the_gradient_as_torch() -> None:
    """Equal operands: torch's maximum (Keras on torch) gives each half the gradient; so does
    rnnkit's (exact: halves of float32 values)."""
    import torch

    a = np.array([[1.0, 2.0, 3.0]], "float32")
    b = np.array([[1.0, 5.0, 3.0]], "float32")
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.maximum(ta, tb).backward(torch.ones(1, 3))
    layer = rk.Maximum()
    ctx = rk.Ctx.training()
    layer.forward([a, b], ctx)
    da, db = layer.backward(np.ones((1, 3), "float32"), ctx)
    np.testing.assert_array_equal(da, ta.grad.numpy())
    np.testing.assert_array_equal(db, tb.grad.numpy())


def _merge_models(m: Merge) -> tuple[Any, Any]:
    """A Keras functional model: each input through a Dense, the merge, a Dense(2)."""
    k = keras()
    L = k.layers
    ins = [k.Input(s[1:]) for s in m.shapes]
    y = m.theirs(L)([L.Dense(s[-1])(i) for s, i in zip(m.shapes, ins, strict=True)])
    km = k.Model(ins, L.Dense(2)(y))
    g = np.random.default_rng(3)
    for w in km.weights:
        w.assign(g.normal(0.0, 0.4, tuple(w.shape)).astype("float32"))
    return km, ins


@pytest.mark.parametrize("m", MERGES, ids=MERGE_IDS)
def test_merge_keras_files_rnnkit_files_and_onnx(m: Merge, tmp_path: Path) -> None:
    """The functional model: Keras' file loaded by rnnkit predicts Keras' outputs (2e-6); rnnkit
    writes it back and Keras predicts the same; rnnkit's own file and model_from_config give
    the same outputs exactly; ONNX through onnxruntime to 1e-5."""
    k = keras()
    km, _ = _merge_models(m)
    xs = [a.astype("float32") for a in _xs(m, 5)]
    want = np.asarray(km.predict(xs, verbose=0))
    km.save(tmp_path / "k.keras")
    model = rk.load_keras(tmp_path / "k.keras")
    np.testing.assert_allclose(model.predict(xs), want, atol=2e-6, rtol=0)
    rk.save_keras(model, tmp_path / "r.keras")
    back = k.saving.load_model(str(tmp_path / "r.keras"))
    np.testing.assert_allclose(np.asarray(back.predict(xs, verbose=0)), want, atol=2e-6, rtol=0)
    rk.save_model(model, tmp_path / "m.rnnkit")
    np.testing.assert_array_equal(rk.load_model(tmp_path / "m.rnnkit").predict(xs), model.predict(xs))
    again = rk.model_from_config(model.get_config())
    again.set_weights(model.get_weights())
    np.testing.assert_array_equal(again.predict(xs), model.predict(xs))
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    rk.save_onnx(model, tmp_path / "m.onnx")
    onnx.checker.check_model(onnx.load(str(tmp_path / "m.onnx")), full_check=True)
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"))
    feeds = {i.name: a for i, a in zip(sess.get_inputs(), xs, strict=True)}
    np.testing.assert_allclose(sess.run(None, feeds)[0], model.predict(xs), atol=1e-5, rtol=0)


# -- the noise layers: statistics of the draw, exact gradient through it ---------------------------
def test_spatial_dropout_draws_whole_channels_at_the_rate() -> None:
    """rate 0.3 on (400, 6, 50): every (sample, channel) is kept on all its steps (scaled by
    1/0.7) or dropped on all. The kept fraction of the 20000 draws is Binomial(20000, 0.7) / 20000:
    standard deviation sqrt(0.21 / 20000) = 0.0032; the bound is 5 of them (0.016)."""
    layer = rk.SpatialDropout1D(0.3, dtype="float64")
    x = np.abs(_x((400, 6, 50), 1)) + 0.5   # never 0, so a dropped value is told from a kept one
    ctx = rk.Ctx.training(seed=7)
    y = layer.forward(x, ctx)
    kept = y != 0
    np.testing.assert_array_equal(kept, np.broadcast_to(kept[:, :1], kept.shape))   # one draw per channel
    keep = np.where(kept, 1.0 / (1.0 - 0.3), 0.0)
    np.testing.assert_array_equal(y, x * keep)   # kept values scaled by 1 / (1 - rate), exactly
    assert abs(kept[:, 0].mean() - 0.7) <= 5 * np.sqrt(0.21 / 20000)
    G = _x(x.shape, 2)
    np.testing.assert_allclose(layer.backward(G, ctx), G * keep, rtol=1e-15, atol=0)   # dy/dx = keep
    again = layer.forward(x, rk.Ctx.training(seed=7))   # the Ctx's seed repeats the draw
    np.testing.assert_array_equal(again, y)
    np.testing.assert_array_equal(layer.forward(x, rk.Ctx.inference()), x)


def test_spatial_dropout_gradient_equals_torch_through_the_drawn_mask() -> None:
    """The drawn keep mask copied into torch: y = x * keep there; the gradients are equal."""
    th = pytest.importorskip("torch")
    layer = rk.SpatialDropout1D(0.5, dtype="float64")
    x = np.abs(_x((3, 4, 5), 3)) + 0.5
    ctx = rk.Ctx.training(seed=1)
    y = layer.forward(x, ctx)
    keep = th.tensor(np.where(y != 0, 1.0 / (1.0 - 0.5), 0.0))
    tx = th.tensor(x, requires_grad=True)
    G = _x(x.shape, 4)
    (tx * keep).backward(th.tensor(G))
    np.testing.assert_allclose(layer.backward(G, ctx), tx.grad.numpy(), rtol=1e-15, atol=0)


def test_gaussian_noise_is_normal_with_its_stddev() -> None:
    """stddev 0.5 on 120000 values: the noise's mean is within 5 standard errors (5 * 0.5 /
    sqrt(N) = 0.0072) of 0; its variance within 5 standard errors of the variance estimate
    (5 * 0.25 * sqrt(2 / N) = 0.0051) of 0.25. Backward is the identity, exactly."""
    layer = rk.GaussianNoise(0.5, dtype="float64")
    x = _x((100, 40, 30), 5)
    N = x.size
    ctx = rk.Ctx.training(seed=3)
    n = layer.forward(x, ctx) - x
    assert abs(n.mean()) <= 5 * 0.5 / np.sqrt(N)
    assert abs(n.var() - 0.25) <= 5 * 0.25 * np.sqrt(2 / N)
    G = _x(x.shape, 6)
    np.testing.assert_array_equal(layer.backward(G, ctx), G)
    np.testing.assert_array_equal(layer.forward(x, rk.Ctx.inference()), x)


@pytest.mark.parametrize("layer", [rk.SpatialDropout1D(0.2), rk.GaussianNoise(0.1)], ids=lambda lay: lay.name)
def test_noise_layers_pass_a_mask_on_as_keras(layer: Any, tmp_path: Path) -> None:
    """Masking -> the layer -> LSTM: the mask reaches the LSTM (Keras' noise layers support
    masking); at inference equal to Keras' model read from its file."""
    k = keras()
    L = k.layers
    kl = L.SpatialDropout1D(0.2) if isinstance(layer, rk.SpatialDropout1D) else L.GaussianNoise(0.1)
    km = k.Sequential([k.Input((6, 3)), L.Masking(0.0), kl, L.LSTM(4)])
    g = np.random.default_rng(1)
    for w in km.weights:
        w.assign(g.normal(0.0, 0.5, tuple(w.shape)).astype("float32"))
    x = _x((2, 6, 3), 9).astype("float32")
    x[0, 4:] = 0.0
    km.save(tmp_path / "k.keras")
    model = rk.load_keras(tmp_path / "k.keras")
    np.testing.assert_allclose(model.predict(x), np.asarray(km.predict(x, verbose=0)), atol=2e-6, rtol=0)
    assert model.layers[1].compute_mask(x, rk.Mask(x[..., 0] != 0)) is not None


# -- TimeDistributed --------------------------------------------------------------------------------
def test_time_distributed_passes_the_mask_on_as_keras(tmp_path: Path) -> None:
    """Masking -> TimeDistributed(Dense) -> LSTM: the LSTM skips the masked steps (the mask
    passed on), equal to Keras."""
    k = keras()
    L = k.layers
    km = k.Sequential([k.Input((6, 3)), L.Masking(0.0), L.TimeDistributed(L.Dense(4, activation="tanh")),
                       L.LSTM(3)])
    g = np.random.default_rng(2)
    for w in km.weights:
        w.assign(g.normal(0.0, 0.5, tuple(w.shape)).astype("float32"))
    x = _x((3, 6, 3), 4).astype("float32")
    x[0, 3:] = 0.0
    x[2, 1:] = 0.0
    km.save(tmp_path / "k.keras")
    model = rk.load_keras(tmp_path / "k.keras")
    assert type(model.layers[1]) is rk.TimeDistributed
    np.testing.assert_allclose(model.predict(x), np.asarray(km.predict(x, verbose=0)), atol=2e-6, rtol=0)


def test_time_distributed_batchnorm_normalizes_each_step_alone_as_keras() -> None:
    """Keras calls the wrapped layer step by step: a training BatchNormalization takes each
    step's batch statistics and moves its moving statistics once per step. rnnkit's equal:
    outputs 1e-6, input gradient 1e-5 (torch autograd through Keras), moving statistics 1e-6."""
    import torch

    k = keras()
    kl = k.layers.TimeDistributed(k.layers.BatchNormalization(momentum=0.8))
    kl.build((4, 3, 5))
    ours = rk.TimeDistributed(rk.BatchNormalization(momentum=0.8))
    ours.build((None, 3, 5))
    x = (_x((4, 3, 5), 1) * 2 + 1).astype("float32")
    tx = torch.tensor(x, requires_grad=True)
    ty = kl(tx, training=True)
    ctx = rk.Ctx.training()
    y = ours.forward(x, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=1e-6, rtol=0)
    G = _x(y.shape, 2).astype("float32")
    ty.backward(torch.tensor(G))
    np.testing.assert_allclose(ours.backward(G, ctx), tx.grad.numpy(), atol=1e-5, rtol=0)
    for w, n in zip(kl.weights, ours.weight_names, strict=True):
        np.testing.assert_allclose(ours.weight(n), np.asarray(w.value.detach()), atol=1e-6, rtol=0, err_msg=n)


class _Sub(rk.Model):
    """A subclassed model: LSTM(sequences) -> the layer -> Dense(2)."""

    def __init__(self, make: Callable[[], Any], F: int) -> None:
        super().__init__()
        self.rnn = rk.LSTM(F, return_sequences=True, seed=1)
        self.mid = make()
        self.head = rk.Dense(2, seed=2)

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.head(self.mid(self.rnn(inputs)))


@pytest.mark.parametrize("case", [c for c in CASES if c.harness], ids=[c.id for c in CASES if c.harness])
def test_subclassed_model_equals_sequential(case: Case) -> None:
    """In a subclassed model the layer's pass is recorded on the model's tape: its weight
    gradients (through the layer) equal the Sequential twin's to the bit."""
    x = _x(case.shape, 8).astype("float32")
    sub = _Sub(case.ours, case.shape[-1])
    seq = rk.Sequential([rk.LSTM(case.shape[-1], return_sequences=True, seed=1), case.ours(),
                         rk.Dense(2, seed=2)])
    seq.build((None, *case.shape[1:]))
    sub.build((None, *case.shape[1:]))
    seq.set_weights(sub.get_weights())
    np.testing.assert_array_equal(sub.predict(x), seq.predict(x))
    out = seq.predict(x)
    target = np.random.default_rng(9).normal(size=out.shape).astype("float32")
    for m in (sub, seq):
        m.compile(rk.optimizers.SGD(0.1), "mse")
    h1 = sub.fit(x, target, epochs=2, batch_size=2, seed=3, shuffle=False)
    h2 = seq.fit(x, target, epochs=2, batch_size=2, seed=3, shuffle=False)
    assert h1.history["loss"] == h2.history["loss"]
    for a, b in zip(sub.get_weights(), seq.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


# -- Lambda -----------------------------------------------------------------------------------------
def _lam(x: Any) -> Any:
    return rk.ops.multiply(rk.ops.tanh(x), rk.ops.sum(rk.ops.square(x), axis=-1, keepdims=True))


def test_lambda_forward_and_gradient_equal_keras_lambda() -> None:
    """Lambda over rk.ops, differentiated by the tape: forward 1e-6 and input gradient 1e-5
    against torch autograd through Keras' Lambda of the same keras.ops formula (float32)."""
    import torch

    k = keras()
    kl = k.layers.Lambda(lambda x: k.ops.tanh(x) * k.ops.sum(k.ops.square(x), axis=-1, keepdims=True))
    x = _x((2, 5, 4), 1).astype("float32")
    tx = torch.tensor(x, requires_grad=True)
    ty = kl(tx)
    layer = rk.Lambda(_lam)
    ctx = rk.Ctx.training()
    y = layer.forward(x, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=1e-6, rtol=0)
    G = _x(y.shape, 2).astype("float32")
    ty.backward(torch.tensor(G))
    np.testing.assert_allclose(layer.backward(G, ctx), tx.grad.numpy(), atol=1e-5, rtol=1e-5)
    assert layer.compute_output_shape((None, None, 4)) == rk.Shape((None, None, 4))


def test_lambda_harness_and_several_inputs() -> None:
    check_layer(lambda dtype: rk.Lambda(_lam, dtype=dtype), lambda rng: rng.normal(size=(2, 5, 4)),
                round_trip=False)
    check_layer(lambda dtype: rk.Lambda(lambda xs: rk.ops.multiply(xs[0], rk.ops.exp(xs[1])), dtype=dtype),
                lambda rng: [rng.normal(size=(2, 3)), rng.normal(size=(2, 3))], round_trip=False)


def test_lambda_in_sequential_functional_and_subclassed_models_trains_as_the_ops() -> None:
    """The three models around one Lambda, weights shared: the same predictions and the same
    loss gradients (the tape through the Lambda's ops)."""
    x = _x((4, 5, 3), 3).astype("float32")
    seq = rk.Sequential([rk.Dense(4, "tanh", seed=1), rk.Lambda(_lam), rk.Dense(2, seed=2)])
    seq.build((None, 5, 3))
    inp = rk.Input((5, 3))
    fun = rk.Model(inp, rk.Dense(2, seed=2)(rk.Lambda(_lam)(rk.Dense(4, "tanh", seed=1)(inp))))
    sub = _Sub(lambda: rk.Lambda(_lam), 4)
    sub.rnn = rk.Dense(4, "tanh", seed=1)
    sub.build((None, 5, 3))
    for m in (fun, sub):
        m.set_weights(seq.get_weights())
        np.testing.assert_array_equal(m.predict(x), seq.predict(x))
    target = _x((4, 5, 2), 4).astype("float32")
    losses = []
    for m in (seq, fun, sub):
        m.compile(rk.optimizers.SGD(0.05), "mse")
        losses.append(m.fit(x, target, epochs=2, batch_size=2, seed=1, shuffle=False).history["loss"])
    assert losses[0] == losses[1] == losses[2]
    assert losses[0][1] < losses[0][0]


def test_lambda_of_numpy_code_has_no_gradient_and_says_so() -> None:
    layer = rk.Lambda(lambda x: np.tanh(x))
    ctx = rk.Ctx.training()
    y = layer.forward(np.ones((2, 3), "float32"), ctx)
    with pytest.raises(rk.InvalidInputError, match="rnnkit.ops"):
        layer.backward(np.ones_like(y), ctx)


def test_lambda_is_never_written_to_a_file_nor_read_from_one(tmp_path: Path) -> None:
    """rnnkit writes no code: get_config, save_model and save_keras refuse a Lambda with a typed
    error naming it; a Keras file holding a Lambda is refused naming the layer."""
    model = rk.Sequential([rk.Lambda(_lam, name="my_lambda"), rk.Dense(2)], input_shape=(None, 5, 3))
    for save in (lambda: rk.save_model(model, tmp_path / "m.rnnkit"),
                 lambda: rk.save_keras(model, tmp_path / "m.keras"), model.get_config):
        with pytest.raises(rk.InvalidParameterError, match="my_lambda"):
            save()
    assert not list(tmp_path.iterdir())
    k = keras()
    km = k.Sequential([k.Input((5, 3)), k.layers.Lambda(lambda x: x * 2.0, name="doubler"),
                       k.layers.Dense(2)])
    km.save(tmp_path / "k.keras")
    with pytest.raises(rk.UnsupportedFeatureError, match="doubler.*Lambda"):
        rk.load_keras(tmp_path / "k.keras")


def test_lambda_masks_as_keras() -> None:
    """mask=None: a masked input is refused (typed, naming the layer) when the model is built,
    and by the layer itself when a mask reaches it; a mask function gives the output's mask."""
    with pytest.raises(rk.InvalidInputError, match="plain.*masked input"):
        rk.Sequential([rk.Masking(0.0), rk.Lambda(_lam, name="plain")], input_shape=(None, 4, 2))
    lone = rk.Lambda(_lam, name="lone")
    with pytest.raises(rk.InvalidInputError, match="lone.*mask"):
        lone.compute_mask(np.ones((1, 4, 2), "float32"), rk.Mask(np.ones((1, 4), bool)))
    first_half = rk.Lambda(_lam, mask=lambda x, m: m & (np.arange(m.shape[1]) < 2))
    x = np.ones((2, 4, 2), "float32")
    got = first_half.compute_mask(x, rk.Mask(np.array([[1, 1, 1, 0], [0, 1, 1, 1]], bool)))
    np.testing.assert_array_equal(got.valid(4), [[1, 1, 0, 0], [0, 1, 0, 0]])


# -- masks refused, bad configurations --------------------------------------------------------------
@pytest.mark.parametrize("layer", [rk.Flatten(), rk.Reshape((8,)), rk.Permute((2, 1))],
                         ids=lambda lay: lay.name)
def test_layers_that_refuse_a_mask(layer: Any) -> None:
    """Keras' Flatten, Reshape and Permute support no mask (Keras drops it): rnnkit refuses a
    masked input, typed, naming the layer: when the model is built, and when a mask reaches the
    layer itself."""
    with pytest.raises(rk.InvalidInputError, match=f"{layer.name}.*masked input"):
        rk.Sequential([rk.Masking(0.0), layer], input_shape=(None, 4, 2))
    layer.build(rk.Shape((None, 4, 2)))
    with pytest.raises(rk.InvalidInputError, match=f"{layer.name}.*mask"):
        layer.compute_mask(np.ones((1, 4, 2), "float32"), rk.Mask(np.ones((1, 4), bool)))


def test_dot_consumes_the_masks() -> None:
    inp = rk.Input((4, 2))
    masked = rk.Masking(0.0)(inp)
    out = rk.Dot(2)([masked, masked])
    model = rk.Model(inp, out)
    x = _x((2, 4, 2), 1).astype("float32")
    x[0, 2:] = 0.0
    np.testing.assert_allclose(model.predict(x), np.einsum("btf,bsf->bts", x, x), rtol=1e-6, atol=1e-6)
    assert rk.Dot(2).compute_mask([x, x], [rk.Mask(x[..., 0] != 0)] * 2) is None


@pytest.mark.parametrize("layer,shape,match", [
    (rk.Reshape((7, 2)), (None, 5, 4), "target_shape .7, 2. holds 14 numbers per sample; the input of shape "
                                       ".batch, 5, 4. has 20"),
    (rk.Reshape((-1, 3)), (None, 5, 4), "not a multiple of 3"),
    (rk.Permute((2, 1)), (None, 5, 4, 3), "dims .2, 1. permute an input of rank 3"),
    (rk.TimeDistributed(rk.Dense(2)), (None, 5), "rank >= 3"),
    (rk.SpatialDropout1D(0.1), (None, 5), "rank-3"),
])
def test_bad_configurations_fail_at_build(layer: Any, shape: tuple[Any, ...], match: str) -> None:
    with pytest.raises(rk.InvalidInputError, match=match):
        rk.Sequential([layer], input_shape=shape)


def test_dot_with_mismatched_axes_fails_at_build() -> None:
    a, b = rk.Input((5, 4)), rk.Input((6, 3))
    with pytest.raises(rk.InvalidInputError, match=r"axes 2 pair axis 2 of size 4 with axis 2 of size 3"):
        rk.Dot(2)([a, b])
    with pytest.raises(rk.InvalidInputError, match="batch axis"):
        rk.Dot((0, 1)).build([(None, 5, 4), (None, 5, 4)])


@pytest.mark.parametrize("make,match", [
    (lambda: rk.Permute((1, 3)), "dims must be a permutation of .1, 2."),
    (lambda: rk.Permute((1, 1)), "dims must be a permutation"),
    (lambda: rk.Reshape((2, 0)), "target_shape"),
    (lambda: rk.Reshape((-1, -1)), "at most one -1"),
    (lambda: rk.Reshape(5), "target_shape"),
    (lambda: rk.Flatten("channels_middle"), "data_format"),
    (lambda: rk.Dot((1, 2, 3)), "axes"),
    (lambda: rk.Dot(1.5), "axes"),
    (lambda: rk.SpatialDropout1D(1.0), "rate"),
    (lambda: rk.GaussianNoise(-0.1), "stddev"),
    (lambda: rk.Lambda(3), "function must be callable"),
    (lambda: rk.Lambda(_lam, output_shape=(0,)), "output_shape"),
])
def test_bad_arguments_are_typed(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match=match):
        make()


def test_subtract_takes_exactly_two_inputs() -> None:
    with pytest.raises(rk.InvalidInputError, match="exactly 2 inputs"):
        rk.Subtract().build([(None, 3)] * 3)


# -- the tape watches a wrapper's weights (a sibling: Bidirectional had the same gap) --------------
@pytest.mark.parametrize("make,name", [
    (lambda: rk.TimeDistributed(rk.Dense(2, seed=1, dtype="float64")), "kernel"),
    (lambda: rk.Bidirectional(rk.SimpleRNN(2, seed=1, dtype="float64")), "forward.kernel"),
], ids=["time_distributed", "bidirectional"])
def test_tape_gradient_by_a_wrappers_live_weight_array(make: Callable[[], Any], name: str) -> None:
    """A weight given to ``tape.gradient`` as its live array (``layer.weight(name)``), as
    TensorFlow takes a variable: a wrapper keeps its weights in its parts, and the tape watches
    them there (it found none before, and answered None). Equal to the (layer, name) pair's
    gradient and to the layer's own backward."""
    layer = make()
    layer.build((None, 3, 4))
    x = _x((2, 3, 4), 1)
    with rk.GradientTape() as tape:
        y = layer(x)
    by_array, by_pair = tape.gradient(y, [layer.weight(name), (layer, name)])
    ctx = rk.Ctx.training()
    layer.backward(np.ones_like(layer.forward(x, ctx)), ctx)
    assert by_array is not None
    np.testing.assert_allclose(by_array, ctx.grad(layer, name), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(by_array, by_pair)
