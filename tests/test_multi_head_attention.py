"""``MultiHeadAttention`` against Keras 3 (torch backend) with copied weights (forward, float32,
1e-6; gradients, Keras-on-torch autograd, float32, 1e-5 relative), against
``torch.nn.MultiheadAttention`` with mapped weights (float64 autograd), the shared layer harness,
the functional API, the tape, .keras / rnnkit / ONNX files, and bad configurations.

Tolerances: a float32 forward is a few dozen roundings (~6e-8 each) of values of magnitude ~1:
outputs agree to ~2e-7 absolute, bounded by 1e-6. Float32 gradients take about twice as many,
~1e-6 of the largest entry, bounded by 1e-5 (relative to it). Against torch in float64 both
sides round at ~1e-16: 1e-10 (relative to the largest entry) bounds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import analytic_grads, assert_gradcheck, check_layer, keras_or_skip, numeric_grad

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

B, T, S, DQ, DV, DK = 2, 4, 5, 6, 7, 5
CONFIGS = [
    {"num_heads": 2, "key_dim": 3},
    {"num_heads": 3, "key_dim": 2, "value_dim": 4, "output_shape": 7},
    {"num_heads": 2, "key_dim": 3, "use_bias": False},
    {"num_heads": 2, "key_dim": 3, "dropout": 0.25},   # Keras' explicit path, at inference
]


@pytest.fixture(scope="module")
def keras() -> Any:
    return keras_or_skip()


def _data(dtype: str = "float32", seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """query, value, key; query, value, key and attention masks (query step 1 of sample 0 is
    masked everywhere)."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((B, T, DQ)), rng.standard_normal((B, S, DV)), rng.standard_normal((B, S, DK))]
    qm = np.array([[1, 0, 1, 1], [1, 1, 1, 1]], bool)
    vm = np.array([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1]], bool)
    km = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 1, 1]], bool)
    am = rng.random((B, T, S)) > 0.3
    return [x.astype(dtype) for x in xs], [qm, vm, km, am]


def _pair(keras: Any, kw: dict[str, Any], causal: bool = False, scores: bool = False,
          dtype: str = "float32", seed: int = 1) -> tuple[Any, rk.MultiHeadAttention]:
    kl = keras.layers.MultiHeadAttention(**kw, dtype=dtype)
    kl.build((None, T, DQ), (None, S, DV), (None, S, DK))
    rng = np.random.default_rng(seed)
    kl.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(dtype) for w in kl.get_weights()])
    ours = rk.MultiHeadAttention(**kw, use_causal_mask=causal, return_attention_scores=scores, dtype=dtype)
    ours.build([(None, T, DQ), (None, S, DV), (None, S, DK)])
    assert [tuple(w.shape) for w in kl.weights] == [ours.weight(n).shape for n in ours.weight_names]
    assert [w.path.split("/", 1)[1].replace("/", "_") for w in kl.weights] == ours.weight_names
    for name, w in zip(ours.weight_names, kl.get_weights(), strict=True):
        ours.set_weight(name, w)
    return kl, ours


def _keras_call(keras: Any, kl: Any, xs: list[np.ndarray], masks: list[Any] | None, causal: bool,
                scores: bool, grad: bool = False) -> tuple[Any, list[Any]]:
    """Keras' call, the query mask set as the query tensor's Keras mask (how Keras reads it)."""
    torch = pytest.importorskip("torch")
    from keras.src import backend as keras_backend

    ts = [torch.tensor(x, requires_grad=grad) for x in xs]
    kw: dict[str, Any] = {}
    if masks is not None:
        keras_backend.set_keras_mask(ts[0], torch.tensor(masks[0]))
        kw = {"value_mask": torch.tensor(masks[1]), "key_mask": torch.tensor(masks[2]),
              "attention_mask": torch.tensor(masks[3])}
    out = kl(ts[0], ts[1], ts[2], use_causal_mask=causal, return_attention_scores=scores, **kw)
    return out, ts


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scores", [False, True])
def test_forward_equals_keras(keras: Any, kw: dict[str, Any], causal: bool, scores: bool) -> None:
    xs, masks = _data()
    kl, ours = _pair(keras, kw, causal, scores)
    for m in (None, masks):
        want, _ = _keras_call(keras, kl, xs, m, causal, scores)
        got = ours(xs, mask=m)
        for w, g in zip(want if scores else [want], got if scores else [got], strict=True):
            np.testing.assert_allclose(g, w.detach().numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kw", CONFIGS[:3])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_equal_keras_on_torch(keras: Any, kw: dict[str, Any], causal: bool) -> None:
    torch = pytest.importorskip("torch")
    xs, masks = _data()
    kl, ours = _pair(keras, kw, causal, scores=True)
    rng = np.random.default_rng(3)
    (out, p), ts = _keras_call(keras, kl, xs, masks, causal, True, grad=True)
    G = [rng.standard_normal(tuple(out.shape)).astype("float32"),
         rng.standard_normal(tuple(p.shape)).astype("float32")]
    (out * torch.tensor(G[0])).sum().add((p * torch.tensor(G[1])).sum()).backward()
    ctx = rk.Ctx.training()
    ours.forward_masked(xs, masks, ctx)
    dxs = ours.backward(G, ctx)
    for d, t in zip(dxs, ts, strict=True):
        want = t.grad.numpy()
        assert np.max(np.abs(d - want)) <= 1e-5 * np.max(np.abs(want))
    top = max(float(np.max(np.abs(var.value.grad.numpy()))) for var in kl.weights)
    for name, var in zip(ours.weight_names, kl.weights, strict=True):
        want = var.value.grad.numpy()
        # the key bias adds one constant to a softmax row: its gradient is 0 but for rounding
        # of the terms of the other gradients' size, so it is measured against those
        scale = top if name == "key_bias" else np.max(np.abs(want))
        assert np.max(np.abs(ctx.grad(ours, name) - want)) <= 1e-5 * scale, name


def test_equals_torch_multihead_attention_with_mapped_weights() -> None:
    """torch.nn.MultiheadAttention(E, H, kdim, vdim, batch_first) is the same computation:
    in_proj rows of head h are Keras' kernel[:, h, :]^T; out_proj.weight (E, E) is
    output_kernel reshaped (H * head_dim, E) transposed. Forward and every gradient, float64."""
    torch = pytest.importorskip("torch")
    E, H, Dk, Dv = 8, 2, 5, 6
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((B, T, E)), rng.standard_normal((B, S, Dk)), rng.standard_normal((B, S, Dv))
    causal = np.triu(np.ones((T, S), bool), 1)
    tm = torch.nn.MultiheadAttention(E, H, kdim=Dk, vdim=Dv, batch_first=True, dtype=torch.float64)
    ours = rk.MultiHeadAttention(H, E // H, use_causal_mask=True, seed=0, dtype="float64")
    ours.build([(None, T, E), (None, S, Dv), (None, S, Dk)])
    with torch.no_grad():
        for part, w in (("query", tm.q_proj_weight), ("key", tm.k_proj_weight), ("value", tm.v_proj_weight)):
            w.copy_(torch.tensor(ours.weight(f"{part}_kernel").reshape(w.shape[1], -1).T))
        ib = rng.uniform(-0.3, 0.3, 3 * E)
        tm.in_proj_bias.copy_(torch.tensor(ib))
        for i, part in enumerate(("query", "key", "value")):
            ours.set_weight(f"{part}_bias", ib[i * E:(i + 1) * E].reshape(H, E // H))
        ob = rng.uniform(-0.3, 0.3, E)
        tm.out_proj.bias.copy_(torch.tensor(ob))
        ours.set_weight("attention_output_bias", ob)
        tm.out_proj.weight.copy_(torch.tensor(ours.weight("attention_output_kernel").reshape(E, E).T))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    want, _ = tm(tq, tk, tv, attn_mask=torch.tensor(causal), need_weights=False)
    G = rng.standard_normal((B, T, E))
    (want * torch.tensor(G)).sum().backward()
    ctx = rk.Ctx.training()
    got = ours.forward([q, v, k], ctx)
    dq, dv, dk = ours.backward(G, ctx)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=0, atol=1e-12)
    pairs = [(dq, tq.grad), (dk, tk.grad), (dv, tv.grad),
             (ctx.grad(ours, "attention_output_bias"), tm.out_proj.bias.grad),
             (ctx.grad(ours, "attention_output_kernel").reshape(E, E).T, tm.out_proj.weight.grad),
             (ctx.grad(ours, "query_kernel").reshape(E, E).T, tm.q_proj_weight.grad),
             (ctx.grad(ours, "value_kernel").reshape(Dv, E).T, tm.v_proj_weight.grad),
             (np.concatenate([ctx.grad(ours, f"{p}_bias").reshape(-1) for p in ("query", "key", "value")]),
              tm.in_proj_bias.grad)]
    for ours_g, t in pairs:
        want_g = t.numpy()
        assert np.max(np.abs(ours_g - want_g)) <= 1e-10 * np.max(np.abs(want_g))


def _make(kw: dict[str, Any]) -> Any:
    def make(dtype: str) -> rk.MultiHeadAttention:
        layer = rk.MultiHeadAttention(**kw, seed=4, dtype=dtype)
        layer.build([(None, T, DQ), (None, S, DV), (None, S, DK)])
        for name in layer.weight_names:   # biases away from their zero start
            if name.endswith("bias"):
                shape = layer.weight(name).shape
                layer.set_weight(name, np.linspace(-0.4, 0.5, int(np.prod(shape))).reshape(shape))
        return layer
    return make


def _inputs(r: np.random.Generator) -> list[np.ndarray]:
    return [r.standard_normal((B, T, DQ)), r.standard_normal((B, S, DV)), r.standard_normal((B, S, DK))]


@pytest.mark.parametrize("kw", [CONFIGS[2], {**CONFIGS[1], "use_bias": False}])
def test_harness(kw: dict[str, Any]) -> None:
    """The whole harness, without biases: the key bias's gradient is exactly 0 (it adds one
    constant to each softmax row), which no relative error can measure; the biases are checked
    below."""
    rep = check_layer(_make(kw), _inputs)
    assert set(rep.grad_errors) >= {"input0", "input1", "input2", "query_kernel", "attention_output_kernel"}


@pytest.mark.parametrize("kw", CONFIGS[:2])
def test_gradcheck_with_biases(kw: dict[str, Any]) -> None:
    """Every gradient but the key bias's against float64 central differences (1e-6 relative);
    the key bias's is 0 on both sides: the analytic one within rounding (1e-12 of the largest
    gradient), the numeric one within the differences' noise (1e-8 absolute: ~1e-16 * |L| ~ 10
    over eps = 1e-6, with margin)."""
    layer = _make(kw)("float64")
    xs = _inputs(np.random.default_rng(0))
    names = ["input0", "input1", "input2"] + [n for n in layer.weight_names if n != "key_bias"]
    assert_gradcheck(layer, xs, wrt=names)
    G = np.random.default_rng(1).standard_normal((B, T, layer.output_shape or DQ))
    _, _, grads = analytic_grads(layer, xs, G)
    top = max(float(np.max(np.abs(g))) for g in grads.values())
    assert np.max(np.abs(grads["key_bias"])) <= 1e-12 * top
    assert np.max(np.abs(numeric_grad(layer, xs, G, "key_bias"))) <= 1e-8


def test_causal_self_attention_in_the_harness() -> None:
    check_layer(lambda dt: rk.MultiHeadAttention(2, 2, use_bias=False, use_causal_mask=True, seed=1,
                                                 dtype=dt),
                lambda r: [r.standard_normal((B, T, DQ)), r.standard_normal((B, T, DQ))])


def test_bad_configurations_name_the_argument() -> None:
    for kw, what in (({"num_heads": 0, "key_dim": 2}, "num_heads"),
                     ({"num_heads": 2, "key_dim": 0}, "key_dim"),
                     ({"num_heads": 2, "key_dim": 2, "value_dim": -1}, "value_dim"),
                     ({"num_heads": 2, "key_dim": 2, "output_shape": (3, 4)}, "output_shape"),
                     ({"num_heads": 2, "key_dim": 2, "attention_axes": (1, 2)}, "attention_axes"),
                     ({"num_heads": 2, "key_dim": 2, "dropout": 1.5}, "dropout")):
        with pytest.raises(rk.InvalidParameterError, match=what):
            rk.MultiHeadAttention(**kw)
    layer = rk.MultiHeadAttention(2, 3)
    xs, (qm, vm, km, am) = _data()
    with pytest.raises(rk.InvalidInputError, match="value_mask"):
        layer(xs, mask=[qm, vm[:, :2]])
    with pytest.raises(rk.InvalidInputError, match="attention_mask"):
        layer(xs, attention_mask=am[:, :, :3])
    with pytest.raises(rk.InvalidInputError, match="query has 5 features"):
        layer([xs[0][..., :5], xs[1], xs[2]])


def test_attention_mask_keyword_is_the_fourth_mask() -> None:
    xs, (_, vm, _, am) = _data("float64")
    layer = rk.MultiHeadAttention(2, 3, seed=0, dtype="float64")
    a = layer(xs, attention_mask=am)
    np.testing.assert_array_equal(a, layer(xs, mask=[None, None, None, am]))
    assert not np.allclose(a, layer(xs))
    np.testing.assert_array_equal(layer(xs, mask=[None, vm], attention_mask=am),
                                  layer(xs, mask=[None, vm, None, am]))


def test_tape_and_functional_training() -> None:
    """On the tape (gradients = the layer's backward) and in a functional model trained with fit:
    the loss falls."""
    xs, masks = _data("float64")
    layer = rk.MultiHeadAttention(2, 3, seed=0, dtype="float64")
    layer.build([(None, T, DQ), (None, S, DV), (None, S, DK)])
    G = np.random.default_rng(9).standard_normal((B, T, DQ))
    with rk.GradientTape() as tape:
        tape.watch(xs[0])
        y = layer(xs, mask=masks[:2])
        loss = rk.ops.sum(rk.ops.multiply(y, G))
    gq, gk = tape.gradient(loss, [xs[0], (layer, "key_kernel")])
    ctx = rk.Ctx.training()
    layer.forward_masked(xs, masks[:2], ctx)
    dq = layer.backward(G, ctx)[0]
    np.testing.assert_allclose(gq, dq, rtol=1e-12)
    np.testing.assert_allclose(gk, ctx.grad(layer, "key_kernel"), rtol=1e-12)
    x = rk.Input((T, 4))
    h = rk.MultiHeadAttention(2, 4, use_causal_mask=True, seed=1)([x, x])
    model = rk.Model(x, rk.Dense(1, seed=2)(h))
    model.compile(optimizer=rk.Adam(1e-2), loss="mse")
    rng = np.random.default_rng(0)
    data = rng.standard_normal((32, T, 4)).astype("float32")
    target = np.cumsum(data[..., :1], axis=1)   # causal: step t sees steps <= t
    hist = model.fit(data, target, epochs=30, batch_size=16, verbose=0)
    assert hist.history["loss"][-1] < 0.5 * hist.history["loss"][0]


def test_keras_files_both_ways(keras: Any, tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    L = keras.layers
    kq, kv = keras.Input((T, DQ)), keras.Input((S, DV))
    kmha = L.MultiHeadAttention(3, 2, value_dim=4, output_shape=5)
    kout, kscores = kmha(kq, kv, use_causal_mask=True, return_attention_scores=True)
    kmodel = keras.Model([kq, kv], [L.Dense(2)(kout), kscores])
    g = np.random.default_rng(0)
    for w in kmodel.weights:
        w.assign(g.uniform(-0.5, 0.5, tuple(w.shape)).astype("float32"))
    kmodel.save(tmp_path / "k.keras")
    xs = [g.standard_normal((3, T, DQ)).astype("float32"), g.standard_normal((3, S, DV)).astype("float32")]
    want = kmodel.predict(xs, verbose=0)
    ours = rk.load_keras(tmp_path / "k.keras")
    layer = next(la for la in ours.layers if isinstance(la, rk.MultiHeadAttention))
    assert layer.use_causal_mask and layer.return_attention_scores and layer.output_shape == 5
    for w, o in zip(want, ours.predict(xs), strict=True):
        np.testing.assert_allclose(o, w, rtol=0, atol=1e-6)
    rk.save_keras(ours, tmp_path / "ours.keras")
    back = keras.models.load_model(tmp_path / "ours.keras")
    for w, o in zip(want, back.predict(xs, verbose=0), strict=True):
        np.testing.assert_allclose(o, w, rtol=0, atol=1e-6)


def test_rnnkit_file_and_model_from_config(tmp_path: Path) -> None:
    q, v = rk.Input((T, DQ)), rk.Input((S, DV))
    out = rk.MultiHeadAttention(2, 3, value_dim=2, output_shape=4, seed=2, use_bias=False)([q, v])
    model = rk.Model([q, v], out)
    xs, _ = _data()
    want = model.predict(xs[:2])
    model.save(tmp_path / "m.rnnkit")
    np.testing.assert_array_equal(rk.load_model(tmp_path / "m.rnnkit").predict(xs[:2]), want)
    again = rk.model_from_config(model.get_config())
    mha = next(la for la in again.layers if isinstance(la, rk.MultiHeadAttention))
    assert (mha.num_heads, mha.key_dim, mha.value_dim, mha.output_shape, mha.use_bias) == (2, 3, 2, 4, False)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kw", CONFIGS[:3])
def test_onnx_export_equals_rnnkit(kw: dict[str, Any], causal: bool, tmp_path: Path) -> None:
    """onnxruntime gives rnnkit's outputs and scores (float32, 1e-5)."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    q, v, k = rk.Input((T, DQ)), rk.Input((S, DV)), rk.Input((S, DK))
    layer = rk.MultiHeadAttention(**kw, use_causal_mask=causal, return_attention_scores=True, seed=3)
    out, p = layer([q, v, k])
    model = rk.Model([q, v, k], [out, p])
    for name in layer.weight_names:
        shape = layer.weight(name).shape
        layer.set_weight(name, np.random.default_rng(1).uniform(-0.5, 0.5, shape))
    xs, _ = _data()
    rk.save_onnx(model, tmp_path / "m.onnx")
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs, strict=True)})
    for want, g in zip(model.predict(xs), got, strict=True):
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-5)


def test_masks_propagated_in_a_functional_model_equal_keras(keras: Any, tmp_path: Path) -> None:
    """Masking on both inputs: Keras hands MultiHeadAttention and Attention the query's and the
    value's masks, rnnkit's graph the same (weights through Keras' file; 1e-6, float32). Each
    layer reads Masking outputs of its own: Keras' MultiHeadAttention clears the masks of the
    tensors it is called on, so an Attention called on the same tensors after it gets none."""
    pytest.importorskip("h5py")
    L = keras.layers
    kq, kv = keras.Input((T, DQ)), keras.Input((S, DQ))
    mha = L.MultiHeadAttention(2, 3)(L.Masking(0.0)(kq), L.Masking(0.0)(kv))
    kout = L.Concatenate()([mha, L.Attention(use_scale=True)([L.Masking(0.0)(kq), L.Masking(0.0)(kv)])])
    kmodel = keras.Model([kq, kv], L.Dense(2)(kout))
    q, v = rk.Input((T, DQ)), rk.Input((S, DQ))
    ours = rk.MultiHeadAttention(2, 3)([rk.Masking(0.0)(q), rk.Masking(0.0)(v)])
    out = rk.Concatenate()([ours, rk.Attention(use_scale=True)([rk.Masking(0.0)(q), rk.Masking(0.0)(v)])])
    model = rk.Model([q, v], rk.Dense(2)(out))
    g = np.random.default_rng(0)
    for w in kmodel.weights:
        w.assign(g.uniform(-0.5, 0.5, tuple(w.shape)).astype("float32"))
    kmodel.save_weights(tmp_path / "k.weights.h5")
    rk.load_keras_weights(model, tmp_path / "k.weights.h5")
    xs, (qm, vm, _, _) = _data()
    xs = [xs[0] * qm[..., None], g.standard_normal((B, S, DQ)).astype("float32") * vm[..., None]]
    np.testing.assert_allclose(model.predict(xs), kmodel.predict(xs, verbose=0), rtol=0, atol=1e-6)
