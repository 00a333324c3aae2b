"""``rk.RNN``: Keras' ``RNN`` over one cell. A built-in cell computes exactly what its
dedicated layer computes (the compiled walk, outputs and gradients bit for bit), a user's
cell runs its reference arithmetic (finite differences through the harness), the config is
Keras' and round-trips, and the arguments rnnkit does not compute are refused, typed. Also
the audit of ``supports_masking`` against Keras 3.15.1."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer, keras_or_skip
from rnnkit import initializers

B, T, F, H = 3, 5, 4, 6


@rk.register_cell
class MinimalCell(rk.Cell):
    """Keras' documentation cell: ``h_t = tanh(x_t @ W + h_{t-1} @ U)``, written out in NumPy
    (no input kernel declared: the walker hands it ``x_t`` and it computes every gradient)."""

    name = "MinimalCell"

    def __init__(self, units: int) -> None:
        super().__init__(units)

    def get_config(self) -> dict[str, Any]:
        return {"units": self.units}

    def params(self, input_dim: int) -> list[rk.Param]:
        H = self.units
        return [rk.Param("w", (input_dim, H),
                         lambda rng, s, dt: initializers.glorot_uniform(rng, s, input_dim, H, dt)),
                rk.Param("u", (H, H), lambda rng, s, dt: rng.uniform(-0.5, 0.5, s).astype(dt))]

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Any, park: Any) -> Any:
        h = np.tanh(inp @ w["w"] + prev[0] @ w["u"])
        return (h,)

    def step_back(self, w: Mapping[str, np.ndarray], d: Any, inp: Any, prev: Any, new: Any,
                  park: Any) -> rk.StepBack:
        dz = d[0] * (1.0 - new[0] ** 2)
        return rk.StepBack(d_prev=(dz @ w["u"].T,), d_inp=dz @ w["w"].T,
                           params={"w": inp.T @ dz, "u": prev[0].T @ dz})


@pytest.mark.parametrize("kw", [{}, {"return_sequences": True},
                                {"go_backwards": True, "return_sequences": True}],
                         ids=["last", "seq", "backwards"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN"])
def test_a_builtin_cell_computes_what_its_layer_computes(kind: str, kw: dict[str, Any]) -> None:
    """``RNN(LSTMCell(H))`` and ``LSTM(H)`` from one seed: the same weights, the same compiled
    walk, so outputs, weight gradients and the input gradient are identical (exact equality:
    one arithmetic)."""
    cell = {"LSTM": rk.LSTMCell, "GRU": rk.GRUCell, "SimpleRNN": rk.SimpleRNNCell}[kind](H)
    same = {"reset_after": cell.reset_after} if kind == "GRU" else {}   # (GRUCell's default: Keras')
    dedicated = getattr(rk, kind)(H, seed=7, input_dim=F, **same, **kw)
    layer = rk.RNN(cell, seed=7, input_dim=F, **kw)
    assert rk.kernels.find(layer.cell) is not None      # the compiled step runs
    x = np.random.default_rng(1).standard_normal((B, T, F)).astype(np.float32)
    runs = []
    for la in (dedicated, layer):
        ctx = rk.Ctx.training(seed=0)
        y = la.forward(x, ctx)
        g = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
        dx = la.backward(g, ctx)
        runs.append((y, dx, {n: ctx.grad(la, n) for n in la.trainable_names}))
    (y0, dx0, g0), (y1, dx1, g1) = runs
    np.testing.assert_array_equal(y1, y0)
    np.testing.assert_array_equal(dx1, dx0)
    assert g0.keys() == g1.keys()
    for n in g0:
        np.testing.assert_array_equal(g1[n], g0[n])


def test_a_user_cell_runs_its_reference_through_the_harness() -> None:
    """A user's cell: gradients against float64 finite differences, fast vs reference, the
    save/load round trip and threads, by the shared harness; the forward against the
    recurrence written out here (float64, summation order only: 1e-12)."""
    check_layer(lambda dtype: rk.RNN(MinimalCell(H), return_sequences=True, seed=3, dtype=dtype),
                lambda rng: rng.standard_normal((B, T, F)))
    layer = rk.RNN(MinimalCell(H), seed=3, dtype="float64", input_dim=F)
    assert rk.kernels.find(layer.cell) is None
    x = np.random.default_rng(5).standard_normal((B, T, F))
    h = np.zeros((B, H))
    for t in range(T):
        h = np.tanh(x[:, t] @ layer.weight("w") + h @ layer.weight("u"))
    np.testing.assert_allclose(layer.predict(x), h, rtol=0, atol=1e-12)


def test_builtin_cell_through_the_harness() -> None:
    check_layer(lambda dtype: rk.RNN(rk.GRUCell(H), return_sequences=True, seed=3, dtype=dtype),
                lambda rng: rng.standard_normal((B, T, F)))


def test_config_is_keras_and_round_trips() -> None:
    """Keras' keys (``cell`` as ``{"class_name", "config"}``), loaded back by the registry
    into an ``RNN`` with the same cell, and the same outputs once the weights are copied."""
    layer = rk.RNN(rk.LSTMCell(H), return_sequences=True, go_backwards=True, unroll=True, seed=2,
                   input_dim=F)
    saved = rk.layers.layer_to_config(layer)
    assert saved["class_name"] == "RNN"
    assert saved["config"]["cell"]["class_name"] == "LSTMCell"
    assert saved["config"]["unroll"] is True and saved["config"]["go_backwards"] is True
    back = rk.layers.layer_from_config(saved)
    assert type(back) is rk.RNN and type(back.cell) is rk.LSTMCell and back.unroll
    x = np.random.default_rng(3).standard_normal((B, T, F)).astype(np.float32)
    back.build((None, T, F))
    back.set_weights(layer.get_weights())
    np.testing.assert_array_equal(back.predict(x), layer.predict(x))


def test_refusals_are_typed_and_name_the_argument() -> None:
    with pytest.raises(rk.InvalidParameterError, match="StackedRNNCells: cell 1 must be an rnnkit.Cell"):
        rk.RNN([rk.LSTMCell(H), "lstm"])
    with pytest.raises(rk.InvalidParameterError, match="zero_output_for_mask"):
        rk.RNN(rk.LSTMCell(H), zero_output_for_mask=True)
    with pytest.raises(TypeError, match="unroll"):
        rk.RNN(rk.LSTMCell(H), unroll="yes")
    with pytest.raises(TypeError, match="cell"):
        rk.RNN("lstm")


def test_keras_rnn_over_lstmcell_with_copied_weights() -> None:
    """Keras 3.15.1's ``RNN(LSTMCell(H), return_sequences=True)`` with rnnkit's weights
    copied in: outputs equal to float32 rounding over T steps (bound 1e-6 absolute, the
    outputs are O(1))."""
    keras = keras_or_skip()
    layer = rk.RNN(rk.LSTMCell(H), return_sequences=True, seed=4, input_dim=F)
    x = np.random.default_rng(6).standard_normal((B, T, F)).astype(np.float32)
    theirs = keras.layers.RNN(keras.layers.LSTMCell(H), return_sequences=True)
    theirs.build((None, T, F))
    theirs.set_weights([layer.weight("kernel"), layer.weight("recurrent_kernel"), layer.weight("bias")[0]])
    np.testing.assert_allclose(layer.predict(x), np.asarray(theirs(x).detach()), rtol=0, atol=1e-6)


#: Keras 3.15.1's ``supports_masking`` of the layers added last round (read from the
#: layer objects; the test below reads them again when Keras is installed)
KERAS_MASKING = {"Attention": True, "AdditiveAttention": True, "MultiHeadAttention": True,
                 "LayerNormalization": True, "BatchNormalization": True, "Conv1D": False,
                 "MaxPooling1D": False, "AveragePooling1D": False, "GlobalAveragePooling1D": True,
                 "GlobalMaxPooling1D": False, "ZeroPadding1D": False, "Cropping1D": False,
                 "UpSampling1D": False, "RepeatVector": False, "RNN": True}


def test_supports_masking_matches_keras() -> None:
    """Every layer of the table accepts a mask exactly when Keras 3.15.1's does."""
    for name, accepts in KERAS_MASKING.items():
        assert getattr(rk.layers, name, getattr(rk, name, None)).supports_masking is accepts, name
    keras = keras_or_skip()
    L = keras.layers
    made = {"Attention": L.Attention(), "AdditiveAttention": L.AdditiveAttention(),
            "MultiHeadAttention": L.MultiHeadAttention(2, 2), "LayerNormalization": L.LayerNormalization(),
            "BatchNormalization": L.BatchNormalization(), "Conv1D": L.Conv1D(2, 2),
            "MaxPooling1D": L.MaxPooling1D(2), "AveragePooling1D": L.AveragePooling1D(2),
            "GlobalAveragePooling1D": L.GlobalAveragePooling1D(),
            "GlobalMaxPooling1D": L.GlobalMaxPooling1D(), "ZeroPadding1D": L.ZeroPadding1D(),
            "Cropping1D": L.Cropping1D(), "UpSampling1D": L.UpSampling1D(),
            "RepeatVector": L.RepeatVector(2), "RNN": L.RNN(L.LSTMCell(2))}
    assert {k: bool(v.supports_masking) for k, v in made.items()} == KERAS_MASKING


REFUSING = {"Conv1D": lambda: rk.Conv1D(2, 2), "MaxPooling1D": lambda: rk.MaxPooling1D(2),
            "AveragePooling1D": lambda: rk.AveragePooling1D(2), "GlobalMaxPooling1D": rk.GlobalMaxPooling1D,
            "ZeroPadding1D": rk.ZeroPadding1D, "Cropping1D": rk.Cropping1D, "UpSampling1D": rk.UpSampling1D}


@pytest.mark.parametrize("make", list(REFUSING.values()), ids=list(REFUSING))
def test_a_layer_refusing_masks_names_itself_at_the_first_call(make: Any) -> None:
    """Keras warns and drops the mask; here the model's build (at the first call) raises
    InvalidInputError naming the layer (a mask is never silently dropped)."""
    layer = make()
    model = rk.Sequential([rk.Masking(), layer])
    x = np.ones((2, 6, 3), np.float32)
    x[0, 4:] = 0.0
    with pytest.raises(rk.InvalidInputError, match=f"{type(layer).__name__}.*cannot take a masked input"):
        model.predict(x)


@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell", "SimpleRNNCell"])
def test_a_keras_file_with_rnn_over_a_cell_loads(cell: str, tmp_path: Any) -> None:
    """A ``.keras`` file Keras 3.15.1 writes with ``RNN(<cell>(H), return_sequences=True)``:
    loaded as an ``rk.RNN`` over that cell, outputs equal (float32 over T steps: 1e-6
    absolute on O(1) outputs), and the gradients of the loaded layer equal PyTorch autograd
    through Keras' torch backend (1e-5 relative)."""
    keras = keras_or_skip()
    torch = pytest.importorskip("torch")
    theirs = keras.Sequential([keras.Input((T, F)), keras.layers.RNN(getattr(keras.layers, cell)(H),
                                                                      return_sequences=True)])
    rng = np.random.default_rng(8)
    for w in theirs.weights:
        w.assign(rng.normal(0.0, 0.4, tuple(w.shape)).astype("float32"))
    theirs.save(tmp_path / "m.keras")
    ours = rk.load_keras(tmp_path / "m.keras")
    layer = ours.layers[0]
    assert type(layer) is rk.RNN and type(layer.cell).__name__.startswith(cell[:-4])
    x = np.random.default_rng(9).standard_normal((B, T, F)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx)
    np.testing.assert_allclose(ours.predict(x), ty.detach().numpy(), rtol=0, atol=1e-6)
    g = np.random.default_rng(10).standard_normal(ty.shape).astype(np.float32)
    (ty * torch.tensor(g)).sum().backward()
    ctx = rk.Ctx.training(seed=0)
    layer.forward(x, ctx)
    dx = layer.backward(g, ctx)
    err = np.abs(dx - tx.grad.numpy()).max() / np.abs(tx.grad.numpy()).max()
    assert err <= 1e-5, err
    for w, n in zip(theirs.layers[0].weights, layer.weight_names, strict=True):
        want = w.value.grad.numpy()
        got = ctx.grad(layer, n).reshape(want.shape)
        assert np.abs(got - want).max() / np.abs(want).max() <= 1e-5, n


@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell", "SimpleRNNCell"])
def test_rnn_over_a_cell_is_written_as_keras_rnn(cell: str, tmp_path: Any) -> None:
    """``save_keras`` writes an ``rk.RNN`` over a built-in cell as Keras' ``RNN`` over that cell
    (not the dedicated layer): Keras 3.15.1 loads it as one and predicts ours (float32 over T
    steps: 1e-6 absolute on O(1) outputs); rnnkit loads it back as an ``rk.RNN``."""
    keras = keras_or_skip()
    ours = rk.Sequential([rk.RNN(getattr(rk, cell)(H), return_sequences=True, seed=4)]).build((None, T, F))
    rk.save_keras(ours, tmp_path / "ours.keras")
    theirs = keras.saving.load_model(tmp_path / "ours.keras")
    assert type(theirs.layers[0]) is keras.layers.RNN
    assert type(theirs.layers[0].cell).__name__ == cell
    x = np.random.default_rng(11).standard_normal((B, T, F)).astype(np.float32)
    want = ours.predict(x)
    np.testing.assert_allclose(np.asarray(theirs(x).detach()), want, rtol=0, atol=1e-6)
    back = rk.load_keras(tmp_path / "ours.keras")
    assert type(back.layers[0]) is rk.RNN
    np.testing.assert_array_equal(back.predict(x), want)
