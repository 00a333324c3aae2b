"""The public surface: one way per task, the other spellings thin aliases that compute the same;
public ``rnnkit.activations`` / ``rnnkit.initializers`` / ``rnnkit.testing``, enough to write and
check a cell without a private module; one ``Windows`` class."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from collections.abc import Mapping

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import activations, initializers, testing

Arrays = tuple[np.ndarray, ...]


def test_every_public_name_resolves_once() -> None:
    assert len(rk.__all__) == len(set(rk.__all__)) == 163  # 113 before: + Input, InputLayer, Model,
    # callbacks, FullBatchWarning, quant, quantize, ..., Layer- and BatchNormalization, Conv1D, 7 pooling,
    # Attention, AdditiveAttention, MultiHeadAttention, MemoryBudgetError (137); + Dot, Flatten,
    # GaussianNoise, Lambda, Maximum, Minimum, Permute, Reshape, SpatialDropout1D, Subtract,
    # TimeDistributed (148); + SLSTM, MLSTM, SLSTMCell, MLSTMCell (152); + RNN, GroupNormalization (154);
    # + SequenceBack (155); + ConvLSTM1D, ConvLSTM2D (157);
    # + MinGRU, MinLSTM, MinGRUCell, MinLSTMCell (161); + StackedRNNCells (162);
    # + MethodNotImplementedError (163)
    for name in rk.__all__:
        assert getattr(rk, name) is not None, name
    assert rk.__version__ == "0.1.0"


def test_keras_loss_spellings_are_canonical_and_the_others_the_same_classes() -> None:
    pairs = [(rk.BinaryCrossentropy, rk.BinaryCrossEntropy),
             (rk.CategoricalCrossentropy, rk.CategoricalCrossEntropy),
             (rk.SparseCategoricalCrossentropy, rk.SparseCategoricalCrossEntropy)]
    for keras_name, other in pairs:
        assert keras_name is other
        saved = rk.losses.serialize(other(from_logits=True))
        assert saved == {"class_name": keras_name.__name__, "config": {"from_logits": True}}
        old = {"class_name": keras_name.__name__.replace("Crossentropy", "CrossEntropy"), "config": {}}
        assert type(rk.losses.deserialize(old)) is keras_name
    y, p = np.array([[1.0], [0.0]]), np.array([[0.9], [0.2]])
    want = -np.mean([np.log(0.9), np.log(0.8)])
    assert abs(rk.losses.get("BinaryCrossEntropy").value_and_grad(y, p)[0] - want) < 1e-12


def _xy() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.normal(size=(12, 5, 3)).astype(np.float32), rng.normal(size=(12, 1)).astype(np.float32)


def test_builder_spellings_equal_the_keyword_spellings() -> None:
    x, y = _xy()
    built = (rk.SequentialBuilder().add(rk.LSTM(6).with_random_state(4).with_return_sequences(True))
             .add(rk.GRU(3).with_random_state(5).with_go_backwards(True)).add(rk.Dense(1).with_random_state(6))
             .build(rk.Shape.with_free_batch(x.shape)))
    keyed = rk.Sequential([rk.LSTM(6, seed=4, return_sequences=True), rk.GRU(3, seed=5, go_backwards=True),
                           rk.Dense(1, seed=6)]).build(rk.Shape((None, 5, 3)))
    assert rk.Shape.with_free_batch(x.shape) == rk.Shape((None, 5, 3))
    assert built.get_config() == keyed.get_config()
    assert np.array_equal(built.predict(x), keyed.predict(x))
    for m in (built, keyed):
        m.compile(rk.SGD(0.05), "mse")
    built.fit_with_batches(x, y, 2, 4, shuffle=False, verbose=0)
    keyed.fit(x, y, 2, batch_size=4, shuffle=False, verbose=0)
    names = list(keyed.named_weights())
    assert list(built.named_weights()) == names
    for n, a, b in zip(names, built.get_weights(), keyed.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=n)
    untrained = rk.Sequential([rk.LSTM(6, seed=4, return_sequences=True),
                               rk.GRU(3, seed=5, go_backwards=True), rk.Dense(1, seed=6)])
    untrained.build(rk.Shape((None, 5, 3)))
    assert np.abs(built.predict(x) - untrained.predict(x)).max() > 1e-4   # (the fits changed the weights)


def test_one_class_named_windows() -> None:
    found = set()
    for info in pkgutil.walk_packages(rk.__path__, "rnnkit."):
        if info.name.startswith("rnnkit.cli") or info.name == "rnnkit.__main__":
            continue
        mod = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if obj.__name__ == "Windows" and obj.__module__.startswith("rnnkit"):
                found.add(f"{obj.__module__}.{obj.__qualname__}")
    assert found == {"rnnkit.data._windows.Windows"}
    w = rk.timeseries.make_windows(np.arange(10.0)[:, None], np.arange(10.0), 3, 2)
    assert isinstance(w, rk.timeseries.WindowArrays)
    np.testing.assert_array_equal(w.x[0, :, 0], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(w.y[:, 0], np.arange(4.0, 10.0))


def test_public_activations() -> None:
    assert activations.Tanh is rk.Tanh and activations.Activation is rk.Activation
    a = np.linspace(-4, 4, 9)
    for spelling in ("tanh", rk.Activation.TANH, rk.Tanh(), activations.get("TANH")):
        fn = activations.get(spelling)
        np.testing.assert_allclose(fn(a), np.tanh(a), rtol=0, atol=1e-15)
    y = activations.get("hard_sigmoid")(a)
    np.testing.assert_allclose(y, np.clip(a + 3, 0, 6) / 6, rtol=0, atol=1e-15)
    g = np.ones_like(a)
    np.testing.assert_allclose(activations.get("sigmoid").vjp(1 / (1 + np.exp(-a)), g),
                               np.exp(-a) / (1 + np.exp(-a)) ** 2, rtol=1e-12)
    with pytest.raises(rk.InvalidParameterError, match="swish"):
        activations.get("swish")


def test_public_initializers() -> None:
    rng = np.random.default_rng(0)
    q = initializers.orthogonal(rng, 6, np.float64)
    np.testing.assert_allclose(q @ q.T, np.eye(6), atol=1e-12)
    s = initializers.semi_orthogonal(rng, 3, 7, np.float64)
    np.testing.assert_allclose(s @ s.T, np.eye(3), atol=1e-12)
    g = initializers.glorot_uniform(rng, (400, 500), 400, 100, np.float32)
    lim = np.sqrt(6 / 500)
    assert g.dtype == np.float32 and np.abs(g).max() <= lim and np.abs(g).max() > 0.99 * lim
    k = initializers.kaiming_uniform(rng, (300, 300), 50, np.float64)
    assert np.abs(k).max() <= np.sqrt(2) * np.sqrt(3 / 50) and np.abs(k).max() > 0.99 * np.sqrt(6 / 50)
    assert not initializers.zeros((2, 3), np.float64).any()
    with pytest.raises(rk.InvalidParameterError, match=r"\(10000000000000,\)"):
        initializers.uniform(rng, (10**13,), 0.0, 1.0, np.float64)


class ScaledRNNCell(rk.Cell):
    """h_t = act(x_t @ W + s * h_{t-1} @ U + b) with a scalar parameter s; only public names."""

    name = "ScaledRNN"
    input_kernel = "kernel"
    bias = "bias"
    wrong_grad = 1.0

    def params(self, input_dim: int) -> list[rk.Param]:
        H = self.units
        return [
            rk.Param("kernel", (input_dim, H),
                     lambda rng, shape, dt: initializers.glorot_uniform(rng, shape, input_dim, H, dt)),
            rk.Param("recurrent_kernel", (H, H), lambda rng, shape, dt: initializers.orthogonal(rng, H, dt)),
            rk.Param("scale", (1,), lambda rng, shape, dt: initializers.uniform(rng, shape, 0.5, 1.0, dt)),
            rk.Param("bias", (1, H), lambda rng, shape, dt: initializers.zeros(shape, dt)),
        ]

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        (h_prev,) = prev
        hu = h_prev @ w["recurrent_kernel"]
        if park is not None:
            park["hu"] = hu
        return (self.activation(inp + w["scale"][0] * hu),)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> rk.StepBack:
        (dh,), (h_prev,), (h,) = d, prev, new
        da = self.activation.vjp(h, dh) * self.wrong_grad
        s = w["scale"][0]
        grads = {"recurrent_kernel": s * h_prev.T @ da, "scale": np.array([(da * park["hu"]).sum()])}
        return rk.StepBack((s * da @ w["recurrent_kernel"].T,), da, None, grads)


def _make(cell_cls: type[rk.Cell]) -> testing.MakeLayer:
    return lambda dtype: rk.RecurrentLayer(cell_cls(3), return_sequences=True, seed=2, dtype=dtype)


def _inp(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((2, 4, 3))


def test_a_cell_from_public_modules_passes_the_checker() -> None:
    report = testing.check_layer(_make(ScaledRNNCell), _inp, threads=1)
    assert report.output_shape == (2, 4, 3)
    assert set(report.grad_errors) == {"input", "kernel", "recurrent_kernel", "scale", "bias"}
    assert max(report.grad_errors.values()) < 1e-7


def test_the_checker_fails_a_wrong_gradient() -> None:
    class Wrong(ScaledRNNCell):
        wrong_grad = 1.01

    with pytest.raises(AssertionError, match="gradient relative errors above"):
        testing.check_layer(_make(Wrong), _inp, threads=1)


def test_the_checker_fails_a_fast_path_that_differs() -> None:
    class ModeDependent(ScaledRNNCell):
        def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
                 park: dict[str, np.ndarray] | None) -> Arrays:
            (h,) = super().step(w, inp, prev, park)
            return (h * (1.0 if rk.kernels.mode() == "fast" else 1.001),)

    layer = _make(ModeDependent)("float64")
    x = _inp(np.random.default_rng(0))
    G = np.ones((2, 4, 3))
    layer.forward_mut(x, rk.Ctx.inference())
    with pytest.raises(AssertionError, match="fast vs reference output"):
        testing.assert_fast_matches_reference(layer, x, G)
    same = _make(ScaledRNNCell)("float64")
    same.forward_mut(x, rk.Ctx.inference())
    testing.assert_fast_matches_reference(same, x, G)


def test_the_checker_needs_no_pytest() -> None:
    code = "import sys, rnnkit.testing; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
