"""ConvLSTM1D / ConvLSTM2D against Keras 3 itself (torch backend) and float64 finite differences.

For each configuration: the forward equal to the Keras layer with copied weights and the
gradients (input, initial state and every weight) equal to torch autograd through the Keras
layer; masks as Keras applies them; the shared harness (float64 central-difference gradcheck,
round trip, threads); dropout's gradient against finite differences through the same drawn
masks; stateful calls; ``.keras`` files both ways; rnnkit's own files and ``model_from_config``;
the tape; typed refusals of bad configurations (ONNX export: test_onnx_scan.py).

Tolerances, from the arithmetic: every pre-activation is a sum of at most
prod(kernel_size) * (C + F) = 9 * 7 = 63 float32 products of values ~1 (weights below 0.5),
accumulated in another order than torch's: rounding ~63 * 6e-8 ~ 4e-6 per step before the gates'
contraction (sigmoid' <= 1/4, tanh' <= 1), so outputs agree to 1e-6 well inside that bound for
the shapes here (T <= 4); gradients sum those errors over the steps and the output positions
(up to ~100 terms): 1e-5 (the brief's bound), relative 1e-5. The gradcheck is float64 central
differences with h = 1e-6 (truncation ~h^2 * f''' ~ 1e-12, rounding ~1e-16 / h = 1e-10).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
    id: str
    rank: int
    shape: tuple[int, ...]          # (B, T, *S, C)
    kw: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("1d_valid", 1, (2, 4, 9, 3), {"filters": 4, "kernel_size": 3}),
    Case("1d_same_stride_even_kernel_seq", 1, (2, 3, 9, 3),
         {"filters": 4, "kernel_size": 4, "padding": "same", "strides": 2, "return_sequences": True}),
    Case("1d_dilated_backwards_state", 1, (2, 3, 9, 2),
         {"filters": 3, "kernel_size": 3, "dilation_rate": 2, "go_backwards": True, "return_state": True}),
    Case("1d_relu_hard_sigmoid_no_bias", 1, (3, 3, 6, 2),
         {"filters": 3, "kernel_size": 2, "activation": "relu", "recurrent_activation": "hard_sigmoid",
          "use_bias": False, "return_sequences": True}),
    Case("2d_same_seq", 2, (2, 3, 5, 4, 3),
         {"filters": 4, "kernel_size": (3, 2), "padding": "same", "return_sequences": True}),
    Case("2d_valid_strided", 2, (2, 3, 7, 6, 2),
         {"filters": 3, "kernel_size": (2, 3), "strides": (2, 1)}),
    Case("2d_state_no_forget_bias", 2, (2, 2, 4, 4, 2),
         {"filters": 2, "kernel_size": 3, "padding": "same", "unit_forget_bias": False,
          "return_state": True, "return_sequences": True}),
]
IDS = [c.id for c in CASES]


def _ours(case: Case, dtype: str = "float32", **extra: Any) -> Any:
    cls = rk.ConvLSTM1D if case.rank == 1 else rk.ConvLSTM2D
    return cls(**case.kw, **extra, seed=5, dtype=dtype)


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _central(f: Callable[[np.ndarray], float], a: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of ``f`` at ``a`` (float64), one entry at a time."""
    out = np.empty_like(a)
    for i in np.ndindex(*a.shape):
        old = a[i]
        a[i] = old + h
        up = f(a)
        a[i] = old - h
        down = f(a)
        a[i] = old
        out[i] = (up - down) / (2 * h)
    return out


def _pair(case: Case, dtype: str = "float32") -> tuple[Any, Any]:
    """The Keras layer with random weights (|w| < 0.5) and rnnkit's with a copy of them."""
    k = keras()
    kcls = k.layers.ConvLSTM1D if case.rank == 1 else k.layers.ConvLSTM2D
    kl = kcls(**case.kw, dtype=dtype)
    kl.build((None, *case.shape[1:]))
    g = np.random.default_rng(11)
    for w in kl.weights:
        w.assign(g.uniform(-0.5, 0.5, tuple(w.shape)).astype(dtype))
    ours = _ours(case, dtype)
    ours.build((None, None, *case.shape[2:]))
    ours.set_weights([np.asarray(w.value.detach()) for w in kl.weights])
    return kl, ours


def _listed(y: Any) -> list[Any]:
    return list(y) if isinstance(y, (list, tuple)) else [y]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_and_gradients_equal_keras(case: Case) -> None:
    """float32: the forward equals Keras' (1e-6); the input's and every weight's gradient equal
    torch autograd through the Keras layer (1e-5), for a random weighting of every output."""
    import torch

    kl, ours = _pair(case)
    x = _x(case.shape).astype("float32")
    tx = torch.tensor(x, requires_grad=True)
    ty = _listed(kl(tx))
    ctx = rk.Ctx.training(0)
    y = _listed(ours.forward(x, ctx))
    assert len(y) == len(ty)
    for a, b in zip(y, ty, strict=True):
        assert float(np.abs(b.detach().numpy()).max()) > 0.05   # a real signal, not zeros
        np.testing.assert_allclose(a, b.detach().numpy(), atol=1e-6, rtol=0)
    G = [np.random.default_rng(i + 1).normal(size=a.shape).astype("float32") for i, a in enumerate(y)]
    loss = sum((t * torch.tensor(g)).sum() for t, g in zip(ty, G, strict=True))
    loss.backward()  # type: ignore[union-attr]
    dx = ours.backward(G if case.kw.get("return_state") else G[0], ctx)
    np.testing.assert_allclose(dx, tx.grad.numpy(), atol=1e-5, rtol=1e-5)
    for w, n in zip(kl.trainable_weights, ours.trainable_names, strict=True):
        np.testing.assert_allclose(ctx.grad(ours, n), w.value.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=n)


@pytest.mark.parametrize("case", [CASES[0], CASES[4]], ids=[CASES[0].id, CASES[4].id])
def test_initial_state_gradients_equal_keras(case: Case) -> None:
    """``[x, h0, c0]`` in: the output and the gradients of x, h0 and c0 equal Keras'
    ``initial_state=`` through torch autograd."""
    import torch

    kl, ours = _pair(case)
    x = _x(case.shape).astype("float32")
    st = ours.compute_output_shape((case.shape[0], *case.shape[1:]))
    st_shape = tuple(st.dims) if not case.kw.get("return_sequences") else (case.shape[0], *st.dims[2:])
    h0, c0 = (_x(st_shape, s).astype("float32") * 0.5 for s in (3, 4))
    tx, th, tc = (torch.tensor(a, requires_grad=True) for a in (x, h0, c0))
    ty = kl(tx, initial_state=[th, tc])
    ctx = rk.Ctx.training(0)
    y = ours.forward([x, h0, c0], ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=1e-6, rtol=0)
    G = np.random.default_rng(2).normal(size=y.shape).astype("float32")
    (ty * torch.tensor(G)).sum().backward()
    dx, dh, dc = ours.backward(G, ctx)
    for ours_g, t in ((dx, tx), (dh, th), (dc, tc)):
        np.testing.assert_allclose(ours_g, t.grad.numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("seq", [False, True])
def test_masks_equal_keras(seq: bool, backwards: bool) -> None:
    """A boolean mask with gaps and a fully masked start: outputs and gradients equal Keras'
    (a masked step keeps the state and repeats the previous output; zeros before the first real
    step; under go_backwards the mask turns with the time axis)."""
    import torch

    case = Case("m", 1, (3, 5, 6, 2), {"filters": 3, "kernel_size": 3, "padding": "same",
                                      "return_sequences": seq, "go_backwards": backwards})
    kl, ours = _pair(case)
    x = _x(case.shape).astype("float32")
    mask = np.array([[1, 1, 0, 1, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    tx = torch.tensor(x, requires_grad=True)
    try:
        ty = kl(tx, mask=torch.tensor(mask))
    except Exception as e:  # pragma: no cover - a Keras backend without this combination
        pytest.skip(f"Keras' torch backend cannot run it: {e!r}")
    ctx = rk.Ctx.training(0)
    ctx.set_mask(mask)
    y = ours.forward(x, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=1e-6, rtol=0)
    G = np.random.default_rng(2).normal(size=y.shape).astype("float32")
    (ty * torch.tensor(G)).sum().backward()
    np.testing.assert_allclose(ours.backward(G, ctx), tx.grad.numpy(), atol=1e-5, rtol=1e-5)
    for w, n in zip(kl.trainable_weights, ours.trainable_names, strict=True):
        np.testing.assert_allclose(ctx.grad(ours, n), w.value.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=n)


def test_lengths_mask_zeroes_the_outputs_past_each_end() -> None:
    """A ``lengths`` mask (PyTorch's packed sequences): the real steps equal Keras' output under
    the equivalent boolean mask, the steps past each end are zeros, and no gradient flows from
    them (the same weights' gradients as Keras' with the upstream gradient zeroed there)."""
    import torch

    case = Case("l", 1, (2, 4, 5, 2), {"filters": 3, "kernel_size": 2, "padding": "same",
                                      "return_sequences": True})
    kl, ours = _pair(case)
    x = _x(case.shape).astype("float32")
    valid = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    tx = torch.tensor(x, requires_grad=True)
    ty = kl(tx, mask=torch.tensor(valid))
    ctx = rk.Ctx.training(0)
    ctx.set_mask(rk.Mask(lengths=[3, 2]))
    y = ours.forward(x, ctx)
    np.testing.assert_allclose(y, ty.detach().numpy() * valid[:, :, None, None], atol=1e-6, rtol=0)
    G = np.random.default_rng(2).normal(size=y.shape).astype("float32")
    (ty * torch.tensor(G * valid[:, :, None, None])).sum().backward()
    np.testing.assert_allclose(ours.backward(G, ctx), tx.grad.numpy(), atol=1e-5, rtol=1e-5)
    for w, n in zip(kl.trainable_weights, ours.trainable_names, strict=True):
        np.testing.assert_allclose(ctx.grad(ours, n), w.value.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=n)


def test_mask_passes_on_under_return_sequences_only() -> None:
    mask = rk.Mask(np.array([[True, False]]))
    seq = rk.ConvLSTM1D(2, 2, return_sequences=True)
    assert seq.compute_mask(None, mask) is mask
    assert rk.ConvLSTM1D(2, 2).compute_mask(None, mask) is None
    assert rk.ConvLSTM1D(2, 2, return_state=True).compute_mask(None, mask) == [None, None, None]


@pytest.mark.parametrize("case", [CASES[1], CASES[3], CASES[5]], ids=[CASES[1].id, CASES[3].id, CASES[5].id])
def test_harness(case: Case) -> None:
    """The shared contract: float64 gradcheck of the input and every weight, round trip, threads."""
    check_layer(lambda dtype: _ours(case, dtype), lambda rng: rng.standard_normal(case.shape) * 0.8)


@pytest.mark.parametrize("rank", [1, 2])
def test_dropout_gradient_equals_finite_differences_through_the_drawn_masks(rank: int) -> None:
    """float64, dropout and recurrent_dropout on: a seeded training Ctx draws the same four
    masks per gate each pass, so the pass is a fixed function; its analytic gradients equal
    central differences. The masks also change the output (they act)."""
    shape = (2, 3, 5, 2) if rank == 1 else (2, 3, 4, 3, 2)
    cls = rk.ConvLSTM1D if rank == 1 else rk.ConvLSTM2D
    layer = cls(3, 2, padding="same", dropout=0.3, recurrent_dropout=0.4, return_sequences=True, seed=1,
                dtype="float64")
    x = _x(shape)
    layer.build((None, *shape[1:]))
    G = np.random.default_rng(3).normal(size=layer.compute_output_shape(shape).dims)

    def loss(xx: np.ndarray) -> float:
        return float((layer.forward(xx, rk.Ctx.training(7)) * G).sum())

    ctx = rk.Ctx.training(7)
    y = layer.forward(x, ctx)
    assert np.abs(y - layer.forward(x, rk.Ctx.inference())).max() > 1e-3
    dx = layer.backward(G, ctx)
    np.testing.assert_allclose(dx, _central(loss, x.copy()), atol=1e-8, rtol=1e-6)
    for n in layer.weight_names:
        w0 = np.array(layer.weight(n))

        def wl(w: np.ndarray, n: str = n) -> float:
            layer.set_weight(n, w)
            return loss(x)
        num = _central(wl, w0.copy())
        layer.set_weight(n, w0)
        np.testing.assert_allclose(ctx.grad(layer, n), num, atol=1e-8, rtol=1e-6, err_msg=n)


def test_stateful_calls_continue_the_sequence_as_keras() -> None:
    """Two stateful calls on the halves of a sequence give the last half of one call on the whole
    (and Keras' stateful layer's outputs); reset_state starts again from zeros."""
    k = keras()
    case = Case("s", 2, (2, 4, 4, 3, 2), {"filters": 2, "kernel_size": 2, "padding": "same",
                                         "return_sequences": True})
    kl, whole = _pair(case)
    x = _x(case.shape).astype("float32")
    want = whole.predict(x)
    np.testing.assert_allclose(want, np.asarray(kl(x).detach()), atol=1e-6, rtol=0)
    st = rk.ConvLSTM2D(**case.kw, stateful=True)
    st.build((None, None, *case.shape[2:]))
    st.set_weights(whole.get_weights())
    ks = k.layers.ConvLSTM2D(**case.kw, stateful=True)
    ks.build((2, 2, *case.shape[2:]))
    ks.set_weights(whole.get_weights())
    for half in (slice(0, 2), slice(2, 4)):
        got = st.predict(x[:, half])
        np.testing.assert_allclose(got, want[:, half], atol=1e-6, rtol=0)
        np.testing.assert_allclose(got, np.asarray(ks(x[:, half]).detach()), atol=1e-6, rtol=0)
    st.reset_state()
    np.testing.assert_allclose(st.predict(x[:, 2:]), whole.predict(x[:, 2:]), atol=1e-6, rtol=0)
    with pytest.raises(rk.InvalidInputError, match="batch size"):
        st.predict(x[:1, :2])


def test_tape_gradient_equals_backward() -> None:
    layer = rk.ConvLSTM1D(3, 2, padding="same", seed=2, dtype="float64")
    x = _x((2, 3, 5, 2))
    layer.build((None, 3, 5, 2))
    with rk.GradientTape() as tape:
        y = layer(x)
    grads = tape.gradient(y, [(layer, n) for n in layer.weight_names])
    ctx = rk.Ctx.training()
    layer.backward(np.ones_like(layer.forward(x, ctx)), ctx)
    for g, n in zip(grads, layer.weight_names, strict=True):
        np.testing.assert_allclose(g, ctx.grad(layer, n), rtol=1e-12, atol=1e-12)


def _keras_models(rank: int) -> tuple[Any, Any, tuple[int, ...]]:
    k = keras()
    L = k.layers
    if rank == 1:
        shape, conv = (4, 8, 3), (lambda: L.ConvLSTM1D(3, 3, padding="same", return_sequences=True))
    else:
        shape, conv = (3, 5, 4, 2), (lambda: L.ConvLSTM2D(3, (2, 3), strides=(2, 1)))
    km = k.Sequential([k.Input(shape), conv(), L.Flatten(), L.Dense(2)])
    ki = k.Input(shape)
    kf = k.Model(ki, L.Dense(2)(L.Flatten()(conv()(ki))))
    g = np.random.default_rng(3)
    for m in (km, kf):
        for w in m.weights:
            w.assign(g.uniform(-0.5, 0.5, tuple(w.shape)).astype("float32"))
    return km, kf, shape


@pytest.mark.parametrize("rank", [1, 2])
def test_keras_files_both_ways(rank: int, tmp_path: Path) -> None:
    """Keras writes a Sequential and a functional model holding the layer; rnnkit loads both and
    predicts Keras' outputs; rnnkit writes them back and Keras predicts the same again."""
    k = keras()
    km_seq, km_fun, shape = _keras_models(rank)
    x = _x((3, *shape), 2).astype("float32")
    for km in (km_seq, km_fun):
        km.save(tmp_path / "k.keras")
        model = rk.load_keras(tmp_path / "k.keras")
        want = np.asarray(km.predict(x, verbose=0))
        np.testing.assert_allclose(model.predict(x), want, atol=2e-6, rtol=0)
        rk.save_keras(model, tmp_path / "r.keras")
        back = k.saving.load_model(str(tmp_path / "r.keras"))
        np.testing.assert_allclose(np.asarray(back.predict(x, verbose=0)), want, atol=2e-6, rtol=0)


def _rk_model(rank: int) -> tuple[Any, tuple[int, ...]]:
    shape = (4, 8, 3) if rank == 1 else (3, 5, 4, 2)
    conv = rk.ConvLSTM1D(3, 3, padding="same", return_sequences=True, seed=1,
                         kernel_regularizer=rk.regularizers.L2(0.01)) if rank == 1 else \
        rk.ConvLSTM2D(3, (2, 3), strides=(2, 1), seed=1, recurrent_dropout=0.1)
    model = rk.Sequential([conv, rk.Flatten(), rk.Dense(2, seed=2)], input_shape=(None, *shape))
    return model, shape


@pytest.mark.parametrize("rank", [1, 2])
def test_rnnkit_files_config_and_fit(rank: int, tmp_path: Path) -> None:
    """rnnkit's model file and ``model_from_config`` give the same predictions; fit lowers the
    loss of a small regression (the gradients reach the ConvLSTM's weights)."""
    model, shape = _rk_model(rank)
    x = _x((4, *shape), 4).astype("float32")
    want = model.predict(x)
    rk.save_model(model, tmp_path / "m.rnnkit")
    np.testing.assert_array_equal(rk.load_model(tmp_path / "m.rnnkit").predict(x), want)
    again = rk.model_from_config(model.get_config())
    assert again.layers[0].get_config() == model.layers[0].get_config()
    again.set_weights(model.get_weights())
    np.testing.assert_array_equal(again.predict(x), want)
    y = np.random.default_rng(9).normal(size=(4, 2)).astype("float32")
    model.compile(optimizer=rk.optimizers.Adam(0.01), loss="mse")
    before = np.array(model.layers[0].weight("kernel"))
    h = model.fit(x, y, epochs=15, batch_size=4, verbose=0)
    assert h.history["loss"][-1] < 0.7 * h.history["loss"][0]
    assert np.abs(np.array(model.layers[0].weight("kernel")) - before).max() > 1e-4


def test_a_stateful_keras_export_is_a_typed_refusal(tmp_path: Path) -> None:
    st = rk.Sequential([rk.ConvLSTM1D(2, 2, stateful=True), rk.Flatten()], input_shape=(None, 3, 4, 2))
    with pytest.raises(rk.UnsupportedFeatureError, match="stateful"):
        rk.save_keras(st, tmp_path / "s.keras")
    assert not (tmp_path / "s.keras").exists()


@pytest.mark.parametrize(("make", "shape", "match"), [
    (lambda: rk.ConvLSTM1D(2, 5), (None, 3, 4, 2), "kernel_size"),
    (lambda: rk.ConvLSTM2D(2, (2, 4), dilation_rate=(1, 2)), (None, 3, 6, 6, 2), "kernel_size"),
    (lambda: rk.ConvLSTM1D(2, 3), (None, 3, 8), "rank-4"),
    (lambda: rk.ConvLSTM2D(2, 3), (None, 3, 8, 2), "rank-5"),
    (lambda: rk.ConvLSTM2D(2, 3), (None, 3, None, 8, 2), "known sizes"),
])
def test_bad_inputs_fail_at_build(make: Callable[[], Any], shape: tuple[Any, ...], match: str) -> None:
    with pytest.raises(rk.InvalidInputError, match=match):
        make().build(shape)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: rk.ConvLSTM2D(2, 3, data_format="channels_first"), "data_format"),
    (lambda: rk.ConvLSTM2D(2, 3, strides=2, dilation_rate=2), "dilation_rate"),
    (lambda: rk.ConvLSTM2D(2, (3, 3, 3)), "kernel_size"),
    (lambda: rk.ConvLSTM1D(0, 3), "filters"),
    (lambda: rk.ConvLSTM1D(2, 3, padding="causal"), "padding"),
    (lambda: rk.ConvLSTM1D(2, 3, recurrent_activation="softmax"), "recurrent_activation"),
    (lambda: rk.ConvLSTM1D(2, 3, kernel_initializer="he_normal"), "kernel_initializer"),
    (lambda: rk.ConvLSTM1D(2, 3, dropout=1.0), "dropout"),
])
def test_bad_arguments_are_typed(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match=match):
        make()


def test_wrong_input_at_forward_is_typed() -> None:
    layer = rk.ConvLSTM1D(2, 3)
    layer.build((None, None, 6, 2))
    with pytest.raises(rk.InvalidInputError, match="expected an input"):
        layer.predict(np.zeros((1, 2, 7, 2), "float32"))
    with pytest.raises(rk.InvalidInputError, match="initial state h"):
        layer.forward([np.zeros((1, 2, 6, 2)), np.zeros((1, 3, 2)), np.zeros((1, 4, 2))], rk.Ctx.inference())


def test_initializers_follow_keras_fans_and_unit_forget_bias() -> None:
    """glorot_uniform's limit uses Keras' conv fans (prod(k) * C, prod(k) * 4F); orthogonal makes
    the flattened (prod(k) * F, 4F) = (72, 32) recurrent kernel's columns orthonormal; the
    forget block of the bias starts at 1."""
    layer = rk.ConvLSTM2D(8, (3, 3), seed=0)
    layer.build((None, 2, 6, 6, 4))
    W, U, b = (np.array(layer.weight(n), np.float64) for n in ("kernel", "recurrent_kernel", "bias"))
    limit = np.sqrt(6.0 / (9 * 4 + 9 * 32))
    assert W.shape == (3, 3, 4, 32) and np.abs(W).max() <= limit and np.abs(W).max() > 0.9 * limit
    U2 = U.reshape(72, 32)
    np.testing.assert_allclose(U2.T @ U2, np.eye(32), atol=1e-5)
    np.testing.assert_array_equal(b, np.r_[np.zeros(8), np.ones(8), np.zeros(16)])
