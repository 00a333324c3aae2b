"""``Attention`` and ``AdditiveAttention`` against Keras 3 (torch backend) with copied weights:
forward (float32, 1e-6), gradients (Keras-on-torch autograd, float32, 1e-5 relative), masks,
causal masks, returned scores; the shared layer harness (float64 central differences); the
functional API, the tape, files.

Tolerances: a float32 forward is a few dozen roundings of values of magnitude ~1 (scores,
softmax, a weighted sum of Tv <= 6 values), so outputs agree to ~1e-7 absolute: 1e-6 bounds
it. The gradients run through about twice as many float32 roundings (~6e-8 each) of values of
magnitude <= ~10: ~1e-6 relative to the largest entry, bounded by 1e-5. (Keras' float64 layer
is no float64 oracle: its torch ``matmul`` promotes float64 operands to float32.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer, keras_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

B, TQ, TV, D, DV = 2, 4, 5, 3, 2

CONFIGS = [
    ("Attention", {}),
    ("Attention", {"use_scale": True}),
    ("Attention", {"score_mode": "concat"}),
    ("Attention", {"score_mode": "concat", "use_scale": True}),
    ("AdditiveAttention", {}),
    ("AdditiveAttention", {"use_scale": False}),
]


@pytest.fixture(scope="module")
def keras() -> Any:
    return keras_or_skip()


def _data(dtype: str, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """query, value, key and [query_mask, value_mask] (each value row keeps a real step)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, TQ, D)).astype(dtype)
    v = rng.standard_normal((B, TV, DV)).astype(dtype)
    k = rng.standard_normal((B, TV, D)).astype(dtype)
    qm = np.array([[True, False, True, True], [True, True, True, False]])
    vm = np.array([[True, True, False, True, False], [False, True, True, True, True]])
    return [q, v, k], [qm, vm]


def _pair(keras: Any, cls: str, kw: dict[str, Any], dtype: str, causal: bool = False,
          scores: bool = False, seed: int = 1) -> tuple[Any, Any]:
    """A Keras layer with random weights and ours with them copied."""
    kl = getattr(keras.layers, cls)(**kw, dtype=dtype)
    kl.build([(None, TQ, D), (None, TV, DV), (None, TV, D)])
    rng = np.random.default_rng(seed)
    kl.set_weights([rng.uniform(0.5, 1.5, w.shape).astype(dtype) for w in kl.get_weights()])
    ours = getattr(rk, cls)(**kw, use_causal_mask=causal, return_attention_scores=scores, dtype=dtype)
    ours.build([(None, TQ, D), (None, TV, DV), (None, TV, D)])
    assert ours.weight_names == [w.path.split("/")[-1] for w in kl.weights]
    for name, w in zip(ours.weight_names, kl.get_weights(), strict=True):
        ours.set_weight(name, w)
    return kl, ours


@pytest.mark.parametrize(("cls", "kw"), CONFIGS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_key", [False, True])
def test_forward_equals_keras(keras: Any, cls: str, kw: dict[str, Any], causal: bool,
                              with_key: bool) -> None:
    (q, v, k), masks = _data("float32")
    if not with_key:   # key defaults to value: one width for all three
        v = np.random.default_rng(5).standard_normal((B, TV, D)).astype("float32")
    kl, ours = _pair(keras, cls, kw, "float32", causal, scores=True)
    ins = [q, v, k] if with_key else [q, v]
    for mask in (None, masks):
        want = kl(ins, mask=mask, use_causal_mask=causal, return_attention_scores=True)
        got = ours(ins, mask=mask)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g, w.detach().numpy(), rtol=0, atol=1e-6)
    # masked query steps are 0, masked value steps get no weight (the check can fail)
    out, weights = ours(ins, mask=masks)
    assert np.all(out[~masks[0]] == 0) and np.all(weights[:, :, ~masks[1][0]][0] < 1e-30)


@pytest.mark.parametrize(("cls", "kw"), CONFIGS)
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_equal_keras_on_torch(keras: Any, cls: str, kw: dict[str, Any], causal: bool) -> None:
    torch = pytest.importorskip("torch")
    (q, v, k), masks = _data("float32")
    kl, ours = _pair(keras, cls, kw, "float32", causal, scores=True)
    rng = np.random.default_rng(3)
    G = [rng.standard_normal((B, TQ, DV)).astype("float32"),
         rng.standard_normal((B, TQ, TV)).astype("float32")]
    ts = [torch.tensor(a, requires_grad=True) for a in (q, v, k)]
    out, w = kl(ts, mask=[torch.tensor(m) for m in masks], use_causal_mask=causal,
                return_attention_scores=True)
    (out * torch.tensor(G[0])).sum().add((w * torch.tensor(G[1])).sum()).backward()
    ctx = rk.Ctx.training()
    ours.forward_masked([q, v, k], masks, ctx)
    dq, dv, dk = ours.backward(G, ctx)
    for ours_g, t in zip((dq, dv, dk), ts, strict=True):
        want = t.grad.numpy()
        assert np.max(np.abs(ours_g - want)) <= 1e-5 * np.max(np.abs(want))
    for name, var in zip(ours.weight_names, kl.weights, strict=True):
        want = var.value.grad.numpy()
        assert np.max(np.abs(ctx.grad(ours, name) - want)) <= 1e-5 * np.max(np.abs(want))


@pytest.mark.parametrize(("cls", "kw"), CONFIGS)
def test_harness(cls: str, kw: dict[str, Any]) -> None:
    def make(dtype: str) -> Any:
        layer = getattr(rk, cls)(**kw, seed=4, dtype=dtype)
        layer.build([(None, TQ, D), (None, TV, DV), (None, TV, D)])
        if layer.weight_names:   # weights away from their 1.0 start, so a wrong gradient shows
            for name in layer.weight_names:
                layer.set_weight(name, np.linspace(0.6, 1.3, layer.weight(name).size)
                                 .reshape(layer.weight(name).shape))
        return layer

    rep = check_layer(make, lambda r: [r.standard_normal((B, TQ, D)), r.standard_normal((B, TV, DV)),
                                       r.standard_normal((B, TV, D))])
    assert max(rep.grad_errors.values()) <= 1e-6 and set(rep.grad_errors) >= {"input0", "input1", "input2"}


def test_causal_self_attention_in_the_harness() -> None:
    check_layer(lambda dt: rk.Attention(use_scale=True, use_causal_mask=True, dtype=dt),
                lambda r: [r.standard_normal((B, TQ, D)), r.standard_normal((B, TQ, D))])


def test_dropout_drops_weights_in_training_only() -> None:
    (q, v, k), _ = _data("float64")
    layer = rk.Attention(dropout=0.5, return_attention_scores=True, dtype="float64")
    out, w = layer([q, v, k])
    assert np.allclose(w.sum(-1), 1.0)             # inference: no dropout
    ctx = rk.Ctx.training(seed=0)
    out_t, w_t = layer.forward([q, v, k], ctx)
    assert np.any(w_t == 0) and np.allclose(out_t, w_t @ v)
    kept = w_t != 0
    np.testing.assert_allclose(w_t[kept], 2.0 * w[kept], rtol=1e-12)


def test_bad_configurations_and_inputs_raise_typed_errors() -> None:
    with pytest.raises(rk.InvalidParameterError, match="score_mode"):
        rk.Attention(score_mode="general")
    with pytest.raises(rk.InvalidParameterError, match="dropout"):
        rk.AdditiveAttention(dropout=1.0)
    with pytest.raises(rk.InvalidInputError, match="query and key must have the same feature width"):
        rk.Attention().build([(None, 3, 4), (None, 5, 2)])
    layer = rk.Attention()
    (q, v, k), (qm, vm) = _data("float32")
    with pytest.raises(rk.InvalidInputError, match="value_mask"):
        layer([q, v, k], mask=[qm, vm[:, :3]])
    with pytest.raises(rk.InvalidInputError, match=r"list \[query, value\]"):
        layer.forward(q, rk.Ctx.inference())
    with pytest.raises(rk.InvalidInputError, match="mask must be a list"):
        layer.forward_masked([q, v, k], qm, rk.Ctx.inference())


def test_functional_keras_model_and_keras_file(keras: Any, tmp_path: Path) -> None:
    """An encoder-decoder with attention over the encoder's steps, Keras' program: weights
    copied through Keras' weights file, predictions equal; .keras both ways."""
    pytest.importorskip("h5py")
    L = keras.layers
    kq, kv = keras.Input((TQ, D)), keras.Input((TV, D))
    kenc = L.LSTM(D, return_sequences=True)(kv)
    katt = L.Attention(use_scale=True)([kq, kenc], use_causal_mask=False)
    kadd = L.AdditiveAttention()([kq, kenc])
    kmodel = keras.Model([kq, kv], L.Dense(2)(L.Concatenate()([katt, kadd])))
    q, v = rk.Input((TQ, D)), rk.Input((TV, D))
    enc = rk.LSTM(D, return_sequences=True)(v)
    out = rk.Dense(2)(rk.Concatenate()([rk.Attention(use_scale=True)([q, enc]),
                                        rk.AdditiveAttention()([q, enc])]))
    model = rk.Model([q, v], out)
    g = np.random.default_rng(0)
    for w in kmodel.weights:
        w.assign(g.uniform(0.3, 1.2, tuple(w.shape)).astype("float32"))
    kmodel.save_weights(tmp_path / "k.weights.h5")
    rk.load_keras_weights(model, tmp_path / "k.weights.h5")
    xs = [g.standard_normal((3, TQ, D)).astype("float32"), g.standard_normal((3, TV, D)).astype("float32")]
    want = kmodel.predict(xs, verbose=0)
    np.testing.assert_allclose(model.predict(xs), want, rtol=0, atol=1e-6)
    kmodel.save(tmp_path / "k.keras")
    loaded = rk.load_keras(tmp_path / "k.keras")
    np.testing.assert_allclose(loaded.predict(xs), want, rtol=0, atol=1e-6)
    rk.save_keras(model, tmp_path / "ours.keras")
    back = keras.models.load_model(tmp_path / "ours.keras")
    np.testing.assert_allclose(back.predict(xs, verbose=0), want, rtol=0, atol=1e-6)


def test_causal_mask_and_scores_survive_keras_files(keras: Any, tmp_path: Path) -> None:
    """use_causal_mask and return_attention_scores are Keras call arguments: read from and
    written to the call of the .keras graph."""
    pytest.importorskip("h5py")
    ki = keras.Input((TQ, D))
    kout, kw = keras.layers.Attention()([ki, ki], use_causal_mask=True, return_attention_scores=True)
    kmodel = keras.Model(ki, [kout, kw])
    kmodel.save(tmp_path / "k.keras")
    ours = rk.load_keras(tmp_path / "k.keras")
    layer = next(la for la in ours.layers if isinstance(la, rk.Attention))
    assert layer.use_causal_mask and layer.return_attention_scores
    x = np.random.default_rng(1).standard_normal((2, TQ, D)).astype("float32")
    want = kmodel.predict(x, verbose=0)
    for w, g in zip(want, ours.predict(x), strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)
    rk.save_keras(ours, tmp_path / "ours.keras")
    back = keras.models.load_model(tmp_path / "ours.keras")
    for w, g in zip(want, back.predict(x, verbose=0), strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)


def test_rnnkit_file_and_model_from_config(tmp_path: Path) -> None:
    q, v = rk.Input((TQ, D)), rk.Input((TV, D))
    out = rk.Attention(score_mode="concat", use_scale=True, use_causal_mask=True, seed=2)([q, v])
    out = rk.AdditiveAttention(seed=3, name="add")([out, v])
    model = rk.Model([q, v], rk.Dense(2, seed=1)(out))
    (xq, _, _), _ = _data("float32")
    xv = np.random.default_rng(2).standard_normal((B, TV, D)).astype("float32")
    want = model.predict([xq, xv])
    model.save(tmp_path / "m.rnnkit")
    back = rk.load_model(tmp_path / "m.rnnkit")
    np.testing.assert_array_equal(back.predict([xq, xv]), want)
    again = rk.model_from_config(model.get_config())
    assert [type(la).__name__ for la in again.layers] == [type(la).__name__ for la in model.layers]
    att = next(la for la in again.layers if isinstance(la, rk.Attention))
    assert att.use_causal_mask and att.score_mode == "concat" and att.use_scale


def test_tape_gradients_equal_the_layer_backward() -> None:
    """On the tape (masks given as the call's mask= list): the inputs' and weights' gradients
    are the layer's own backward, which the Keras comparison above pins."""
    (q, v, k), masks = _data("float64")
    layer = rk.AdditiveAttention(seed=0, dtype="float64")
    layer.build([(None, TQ, D), (None, TV, DV), (None, TV, D)])
    G = np.random.default_rng(9).standard_normal((B, TQ, DV))
    with rk.GradientTape() as tape:
        tape.watch(q)
        tape.watch(v)
        y = layer([q, v, k], mask=masks)
        loss = rk.ops.sum(rk.ops.multiply(y, G))
    gq, gv, gs = tape.gradient(loss, [q, v, (layer, "scale")])
    ctx = rk.Ctx.training()
    layer.forward_masked([q, v, k], masks, ctx)
    dq, dv, _ = layer.backward(G, ctx)
    np.testing.assert_allclose(gq, dq, rtol=1e-12)
    np.testing.assert_allclose(gv, dv, rtol=1e-12)
    np.testing.assert_allclose(gs, ctx.grad(layer, "scale"), rtol=1e-12)


@pytest.mark.parametrize(("cls", "kw"), CONFIGS)
@pytest.mark.parametrize("causal", [False, True])
def test_onnx_export_equals_rnnkit(cls: str, kw: dict[str, Any], causal: bool, tmp_path: Path) -> None:
    """onnxruntime on the exported graph gives rnnkit's outputs and scores (float32: 1e-5, a
    handful of roundings on values of magnitude ~1)."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    q, v = rk.Input((TQ, D)), rk.Input((TV, D))
    layer = getattr(rk, cls)(**kw, use_causal_mask=causal, return_attention_scores=True, seed=3)
    out, w = layer([q, v, rk.Dense(D, seed=2)(v)])
    model = rk.Model([q, v], [out, w])
    for name in layer.weight_names:
        shape = layer.weight(name).shape
        layer.set_weight(name, np.linspace(0.6, 1.3, int(np.prod(shape))).reshape(shape))
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((3, TQ, D)).astype("float32"),
          rng.standard_normal((3, TV, D)).astype("float32")]
    rk.save_onnx(model, tmp_path / "m.onnx")
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs, strict=True)})
    for want, g in zip(model.predict(xs), got, strict=True):
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-5)
