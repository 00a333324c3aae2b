"""``GroupNormalization`` against Keras 3.15.1 (forward, copied weights), PyTorch's
``F.group_norm`` (forward and every gradient), the shared harness (float64 finite
differences, round trip, threads) and its refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer, keras_or_skip

B, T, C = 3, 5, 6


@pytest.mark.parametrize("kw", [{"groups": 2}, {"groups": 3, "center": False}, {"groups": -1, "scale": False},
                                {"groups": 2, "axis": 1}], ids=["g2", "g3-nocenter", "per-channel-noscale",
                                                                  "axis1"])
def test_contract(kw: dict[str, Any]) -> None:
    check_layer(lambda dtype: rk.GroupNormalization(**kw, dtype=dtype),
                lambda rng: rng.standard_normal((B, C, C) if kw.get("axis") == 1 else (B, T, C)))


def _weights(layer: rk.GroupNormalization, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in layer.weight_names:
        layer.set_weight(n, rng.uniform(0.5, 1.5, layer.weight(n).shape))


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_forward_and_gradients_against_torch_group_norm(groups: int) -> None:
    """``F.group_norm`` takes (N, C, *) channels first: the input (B, T, C) transposed. float64
    on both sides, the same formulas in other summation orders: bound 1e-10 relative (the
    issue's 1e-5 is far above what the arithmetic allows)."""
    torch = pytest.importorskip("torch")
    layer = rk.GroupNormalization(groups, epsilon=1e-3, dtype="float64")
    x = np.random.default_rng(1).standard_normal((B, T, C)) * 3 + 1
    layer.build((None, T, C))
    _weights(layer, 2)
    ctx = rk.Ctx.training(seed=0)
    y = layer.forward(x, ctx)
    g = np.random.default_rng(3).standard_normal(y.shape)
    dx = layer.backward(g, ctx)
    tx = torch.tensor(x.transpose(0, 2, 1), requires_grad=True)
    tw = torch.tensor(layer.weight("gamma"), requires_grad=True)
    tb = torch.tensor(layer.weight("beta"), requires_grad=True)
    ty = torch.nn.functional.group_norm(tx, groups, tw, tb, eps=1e-3)
    (ty * torch.tensor(g.transpose(0, 2, 1))).sum().backward()
    for ours, theirs, what in [(y, ty.detach().numpy().transpose(0, 2, 1), "output"),
                               (dx, tx.grad.numpy().transpose(0, 2, 1), "dx"),
                               (ctx.grad(layer, "gamma"), tw.grad.numpy(), "gamma"),
                               (ctx.grad(layer, "beta"), tb.grad.numpy(), "beta")]:
        err = np.abs(ours - theirs).max() / np.abs(theirs).max()
        assert err <= 1e-10, f"{what}: {err:.2e}"


@pytest.mark.parametrize("kw", [{"groups": 3}, {"groups": 2, "axis": 1}, {"groups": -1, "center": False}])
def test_equal_to_keras(kw: dict[str, Any]) -> None:
    """Keras 3.15.1's layer with the same weights (float32): |diff| <= 1e-5 on outputs of
    magnitude ~3 (float32 rounding of the moments over <= 30 values: a few ulp of 3, ~1e-6)."""
    keras = keras_or_skip()
    shape = (B, C, T) if kw.get("axis") == 1 else (B, T, C)
    x = (np.random.default_rng(4).standard_normal(shape) * 2).astype(np.float32)
    ours = rk.GroupNormalization(**kw)
    ours.build((None, *shape[1:]))
    _weights(ours, 5)
    theirs = keras.layers.GroupNormalization(**kw)
    theirs.build((None, *shape[1:]))
    theirs.set_weights(ours.get_weights())
    assert [w.path.split("/")[-1] for w in theirs.weights] == ours.weight_names
    assert theirs.get_config()["groups"] == ours.get_config()["groups"]
    np.testing.assert_allclose(ours.predict(x), np.asarray(theirs(x).detach().cpu()), rtol=0, atol=1e-5)


def test_config_round_trip_and_mask_passes() -> None:
    layer = rk.GroupNormalization(3, axis=-1, epsilon=1e-4, center=False)
    back = rk.layers.layer_from_config(rk.layers.layer_to_config(layer))
    assert type(back) is rk.GroupNormalization and back.get_config() == layer.get_config()
    assert back.compute_mask(None, "m") == "m"     # Keras: supports_masking, the mask passes on


def test_refusals() -> None:
    with pytest.raises(rk.InvalidParameterError, match="groups"):
        rk.GroupNormalization(0)
    with pytest.raises(rk.InvalidParameterError, match="groups must divide the 6 channels"):
        rk.GroupNormalization(4).build((None, T, C))
    with pytest.raises(rk.InvalidInputError, match="batch axis"):
        rk.GroupNormalization(2, axis=0).build((None, T, C))
    layer = rk.GroupNormalization(2)
    layer.build((None, T, C))
    with pytest.raises(rk.InvalidInputError, match="expected an input like"):
        layer.predict(np.ones((2, T, 4), np.float32))


def test_keras_files_both_ways(tmp_path: Any) -> None:
    """A ``.keras`` file Keras 3.15.1 writes loads here with equal outputs, and the file
    rnnkit writes loads in Keras with equal outputs (float32: 1e-5 as above)."""
    keras = keras_or_skip()
    x = (np.random.default_rng(6).standard_normal((B, T, C)) * 2).astype(np.float32)
    theirs = keras.Sequential([keras.Input((T, C)), keras.layers.GroupNormalization(3, epsilon=1e-4),
                               keras.layers.Dense(2)])
    rng = np.random.default_rng(7)
    for w in theirs.weights:
        w.assign(rng.uniform(0.5, 1.5, tuple(w.shape)).astype("float32"))
    theirs.save(tmp_path / "k.keras")
    ours = rk.load_keras(tmp_path / "k.keras")
    want = np.asarray(theirs.predict(x, verbose=0))
    np.testing.assert_allclose(ours.predict(x), want, rtol=0, atol=1e-5)
    rk.io.save_keras(ours, tmp_path / "r.keras")
    back = keras.saving.load_model(tmp_path / "r.keras")
    np.testing.assert_allclose(np.asarray(back.predict(x, verbose=0)), want, rtol=0, atol=1e-5)


def test_onnx_export_is_refused_typed(tmp_path: Any) -> None:
    """No ONNX mapping is written for GroupNormalization: the export raises a typed error
    naming the layer rather than writing a wrong graph."""
    pytest.importorskip("onnx")
    model = rk.Sequential([rk.GroupNormalization(2)], input_shape=(None, T, C))
    with pytest.raises(rk.Error, match="GroupNormalization"):
        rk.io.save_onnx(model, tmp_path / "m.onnx")
