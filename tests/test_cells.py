"""The cell as the one extension point: the cell options against PyTorch and finite differences,
``rnn.rnn``, ``RNNNet`` inside models, cells without the batched reductions, kernel dispatch.

Parity with torch 2.13.0 (copied weights): float32 outputs and final states <= 1e-5, every
gradient <= 1e-4 relative to the largest of its kind; float64 <= 1e-12 (gradients 1e-11)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import rnnkit as rk
from harness import assert_gradcheck, check_layer
from rnnkit import rnn

B, T, F, H = 2, 4, 3, 5


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


# -- PyTorch parity: proj_size and nn.RNN ---------------------------------------------------------

CASES = [("lstm", {"proj_size": 3}, 1, False), ("lstm", {"proj_size": 3}, 2, True),
         ("lstm", {"proj_size": 2}, 2, False), ("rnn", {"nonlinearity": "tanh"}, 2, True),
         ("rnn", {"nonlinearity": "relu"}, 2, True), ("rnn", {"nonlinearity": "relu"}, 1, False)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode,opts,layers,bidi", CASES,
                         ids=[f"{m}-{o}-{n}L-{'bi' if b else 'uni'}" for m, o, n, b in CASES])
def test_torch_parity(mode: str, opts: dict[str, Any], layers: int, bidi: bool, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.RNN
    ref = cls(F, H, num_layers=layers, bidirectional=bidi, batch_first=True, **opts)
    ref = ref.double() if dtype == "float64" else ref.float()
    net = getattr(rnn, mode)(F, H, rnn.RNNConfig(num_layers=layers, bidirectional=bidi, **opts), dtype=dtype)
    assert sorted(net.state_dict()) == sorted(ref.state_dict())
    net.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    x = _x((3, 6, F)).astype(dtype)
    tx = torch.tensor(x, requires_grad=True)
    t_out, t_state = ref(tx)
    out, state = net.seq(x)
    atol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(out, t_out.detach().numpy(), atol=atol)
    for ours, theirs in zip(state, t_state if isinstance(t_state, tuple) else (t_state,), strict=True):
        np.testing.assert_allclose(ours, theirs.detach().numpy(), atol=atol)
    g = _x(out.shape, 1).astype(dtype)
    (t_out * torch.tensor(g)).sum().backward()
    ctx = rk.Ctx.training()
    np.testing.assert_allclose(net.forward(x, ctx), out, atol=atol)
    dx = net.backward(g, ctx)
    rtol = 1e-11 if dtype == "float64" else 1e-4
    for ours, theirs, name in [(dx, tx.grad, "input")] + [(ctx.grad(net, n), p.grad, n)
                                                           for n, p in ref.named_parameters()]:
        want = theirs.numpy()
        err = np.abs(ours - want).max() / max(np.abs(want).max(), 1e-30)
        assert err <= rtol, f"{name}: relative error {err:.2e}"


def test_lstm_layer_with_projection_is_torchs_lstmp() -> None:
    """The LSTM layer option: ``LSTM(H, proj_size=P)`` with weights from ``torch.nn.LSTM``."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    ref = torch.nn.LSTM(F, H, proj_size=2, batch_first=True).double()
    layer = rk.LSTM(H, proj_size=2, return_sequences=True, dtype="float64")
    rk.io.from_torch_state(layer, {k: v.detach().numpy() for k, v in ref.state_dict().items()})
    assert layer.weight("projection_kernel").shape == (H, 2) and layer.param_count() == sum(
        p.numel() for p in ref.parameters()) - 4 * H     # torch keeps two biases, rnnkit their sum
    x = _x((3, 6, F))
    np.testing.assert_allclose(layer.predict(x), ref(torch.tensor(x))[0].detach().numpy(), atol=1e-12)
    back = rk.io.to_torch_state(layer)
    assert sorted(back) == sorted(ref.state_dict())
    ref2 = torch.nn.LSTM(F, H, proj_size=2, batch_first=True).double()
    ref2.load_state_dict({k: torch.from_numpy(v) for k, v in back.items()})
    np.testing.assert_allclose(ref2(torch.tensor(x))[0].detach().numpy(), layer.predict(x), atol=1e-12)


# -- float64 gradient checks of every option -------------------------------------------------------

OPTIONS: list[tuple[str, Any]] = [
    ("SimpleRNN-nobias", lambda **kw: rk.SimpleRNN(H, use_bias=False, **kw)),
    ("LSTM-nobias", lambda **kw: rk.LSTM(H, use_bias=False, **kw)),
    ("GRU-nobias", lambda **kw: rk.GRU(H, use_bias=False, **kw)),
    ("GRU_ra-nobias", lambda **kw: rk.GRU(H, reset_after=True, use_bias=False, **kw)),
    ("LSTM-proj", lambda **kw: rk.LSTM(H, proj_size=2, **kw)),
    ("LSTM-proj-nobias", lambda **kw: rk.LSTM(H, proj_size=3, use_bias=False, **kw)),
    *[(f"LSTM-{a}", lambda a=a, **kw: rk.LSTM(H, recurrent_activation=a, **kw))
      for a in ("hard_sigmoid", "tanh", "relu", "linear")],
    *[(f"GRU-{a}", lambda a=a, **kw: rk.GRU(H, recurrent_activation=a, **kw))
      for a in ("hard_sigmoid", "tanh")],
    ("GRU_ra-hard_sigmoid",
     lambda **kw: rk.GRU(H, reset_after=True, recurrent_activation="hard_sigmoid", **kw)),
    ("SimpleRNN-hard_sigmoid", lambda **kw: rk.SimpleRNN(H, "hard_sigmoid", **kw)),
]


@pytest.mark.parametrize("kernels", ["fast", "reference"])
@pytest.mark.parametrize("name,factory", OPTIONS, ids=[n for n, _ in OPTIONS])
def test_gradcheck_options(name: str, factory: Any, kernels: str) -> None:
    """Through the shared harness (gradcheck, store sums, threads, float32, round trip), for
    both the compiled path and the reference."""
    def make(dtype: str) -> Any:
        layer = factory(return_sequences=True, go_backwards=True, seed=4, dtype=dtype)
        layer.build(rk.Shape.with_free_batch((B, T, F)))
        if "bias" in layer.weight_names:
            b = layer.weight("bias")
            layer.set_weight("bias", b + np.random.default_rng(2).uniform(-0.3, 0.3, b.shape))
        return layer

    # inputs scaled so no hard_sigmoid / relu pre-activation sits at a kink; the mode is set
    # process-wide because the harness runs the layer on threads too
    rk.kernels.set_mode(kernels)
    try:
        report = check_layer(make, lambda rng: 0.5 * rng.standard_normal((B, T, F)), rtol=1e-6)
    finally:
        rk.kernels.set_mode("fast")
    assert set(report.grad_errors) == {"input", *make("float64").weight_names}
    assert ("bias" in report.grad_errors) != ("nobias" in name)


def test_hard_sigmoid_is_keras_3s() -> None:
    a = np.linspace(-4, 4, 81)
    np.testing.assert_array_equal(rk.HardSigmoid().to_fn()(a), np.clip(a + 3, 0, 6) / 6)
    g = np.ones_like(a)
    y = np.clip(a + 3, 0, 6) / 6
    np.testing.assert_array_equal(rk.HardSigmoid().to_fn().vjp(y, g), ((a > -3) & (a < 3)) / 6)


def test_use_bias_false_has_no_bias_parameter() -> None:
    for layer in (rk.SimpleRNN(H, use_bias=False), rk.LSTM(H, use_bias=False), rk.GRU(H, use_bias=False),
                  rk.GRU(H, reset_after=True, use_bias=False)):
        layer.build(rk.Shape.with_free_batch((B, T, F)))
        G = layer.gate_width
        assert layer.weight_names == ["kernel", "recurrent_kernel"]
        assert layer.param_count() == F * G + H * G
        ctx = rk.Ctx.training()
        layer.backward(np.ones_like(layer.forward(_x((B, T, F)), ctx)), ctx)
        assert {n for (lay, n) in ctx.grads if lay is layer} == {"kernel", "recurrent_kernel"}
        with pytest.raises(rk.UnknownWeightError):
            layer.weight("bias")


def test_option_errors_name_the_argument() -> None:
    with pytest.raises(rk.InvalidParameterError, match="recurrent_activation.*softmax"):
        rk.LSTM(3, recurrent_activation="softmax")
    with pytest.raises(rk.InvalidParameterError, match=r"proj_size.*below units=3.*\[0, 2\], got 5"):
        rk.LSTM(3, proj_size=5)
    with pytest.raises(rk.InvalidParameterError, match="proj_size"):
        rnn.gru(2, 4, rnn.RNNConfig(proj_size=2))
    with pytest.raises(rk.InvalidParameterError, match="nonlinearity"):
        rnn.RNNConfig(nonlinearity="sigmoid")
    with pytest.raises(rk.InvalidParameterError, match="set_weights"):
        rk.LSTM(4, proj_size=2, input_dim=2).set_gate_weights(*[np.zeros((2, 4))] * 12)


# -- RNNNet inside models -------------------------------------------------------------------------

@pytest.mark.parametrize("mode,cfg", [("lstm", {"proj_size": 2, "bidirectional": True}),
                                      ("gru", {"num_layers": 2}), ("rnn", {"nonlinearity": "relu"})])
def test_rnnnet_saves_and_loads_inside_models(tmp_path: Path, mode: str, cfg: dict[str, Any]) -> None:
    net = getattr(rnn, mode)(F, 4, rnn.RNNConfig(**cfg), seed=1)
    model = (rk.SequentialBuilder().add(net).add(rk.Dense(1, seed=2))
             .build(rk.Shape.with_free_batch((B, T, F))))
    model.compile(rk.Adam(0.01), "mse")
    x, y = _x((8, T, F)).astype(np.float32), _x((8, T, 1), 3).astype(np.float32)
    model.fit(x, y, 3, verbose=0)
    model.save(tmp_path / "m.rnnkit")
    again = rk.load_model(tmp_path / "m.rnnkit")
    np.testing.assert_array_equal(again.predict(x), model.predict(x))
    assert again.layers[0].config == net.config
    b = rk.GraphBuilder()
    inp = b.input(rk.Shape.with_free_batch((B, T, F)))
    node = b.add(getattr(rnn, mode)(F, 4, rnn.RNNConfig(**cfg), seed=1), [inp])
    g = b.build(b.add(rk.Dense(2, seed=3), [node]))
    g.save(tmp_path / "g.rnnkit")
    np.testing.assert_array_equal(rk.load_model(tmp_path / "g.rnnkit").predict(x), g.predict(x))


# -- a cell with its own parameter gradients (no batched reductions), the registry -----------------

@rk.register_cell
class ScaledElman(rk.Cell):
    """``h = tanh(x @ V + a * h_prev)`` with a scalar-per-unit ``a``; no batched reductions:
    step_back returns every parameter gradient itself and dL/dx_s."""

    name: ClassVar[str] = "ScaledElman"

    def params(self, input_dim: int) -> list[rk.Param]:
        return [rk.Param("V", (input_dim, self.units), lambda rng, s, dt: rng.uniform(-1, 1, s).astype(dt)),
                rk.Param("a", (self.units,), lambda rng, s, dt: np.full(s, 0.5, dt)),
                rk.Param("frozen", (1,), lambda rng, s, dt: np.ones(s, dt), trainable=False)]

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: tuple[np.ndarray, ...],
             park: dict[str, np.ndarray] | None) -> tuple[np.ndarray, ...]:
        return (np.tanh(inp @ w["V"] + w["a"] * prev[0] * w["frozen"]),)

    def step_back(self, w: Mapping[str, np.ndarray], d: tuple[np.ndarray, ...], inp: np.ndarray | None,
                  prev: tuple[np.ndarray, ...], new: tuple[np.ndarray, ...],
                  park: Mapping[str, np.ndarray]) -> rk.StepBack:
        assert inp is not None
        da = d[0] * (1 - new[0] ** 2)
        return rk.StepBack((da * w["a"] * w["frozen"],), da @ w["V"].T, None,
                           {"V": inp.T @ da, "a": (da * prev[0] * w["frozen"]).sum(axis=0)})


def test_a_cell_without_batched_reductions() -> None:
    def make(dtype: str) -> Any:
        return rk.RecurrentLayer(ScaledElman(4), return_sequences=True, seed=3, dtype=dtype)

    report = check_layer(make, lambda rng: rng.standard_normal((B, T, F)), rtol=1e-6)
    assert set(report.grad_errors) == {"input", "V", "a"}          # "frozen" is not trained
    layer = make("float64")
    layer.build(rk.Shape.with_free_batch((B, T, F)))
    assert rk.kernels.find(layer.cell) is None                     # no kernel: the reference, silently
    assert type(layer.zero_state(2)).__name__ == "ScaledElmanState"


def test_kernels_dispatch_on_the_compiled_step_not_the_type() -> None:
    class MyLSTMCell(rk.LSTMCell):   # the LSTM's arithmetic, kept: its compiled step runs
        pass

    class MyGRUCell(rk.GRUResetAfterCell):   # changes step, declares no compiled step: the reference
        def step(self, w: Any, inp: Any, prev: Any, park: Any, *, rdrop: Any = None) -> Any:
            (h,) = super().step(w, inp, prev, park, rdrop=rdrop)
            return (np.tanh(h),)

    layer = rk.RecurrentLayer(MyLSTMCell(3), seed=1, input_dim=2, dtype="float64")
    assert (rk.kernels.find(layer.cell) is not None) == rk.kernels.available()
    assert rk.kernels.find(MyGRUCell(3)) is None
    ref = rk.LSTM(3, seed=1, input_dim=2, dtype="float64")
    x = _x((2, 5, 2))
    np.testing.assert_allclose(layer.predict(x), ref.predict(x), atol=1e-14)
    assert_gradcheck(layer, x)
    gru = rk.RecurrentLayer(MyGRUCell(3), seed=1, input_dim=2, dtype="float64")
    plain = rk.GRU(3, reset_after=True, seed=1, input_dim=2, dtype="float64")
    assert np.abs(gru.predict(x) - plain.predict(x)).max() > 1e-3   # its own arithmetic ran


def test_custom_cell_step_returning_a_wrong_shape_is_named() -> None:
    class Bad(ScaledElman):
        def step(self, w: Any, inp: Any, prev: Any, park: Any) -> Any:
            return (prev[0][:, :1],)

    layer = rk.RecurrentLayer(Bad(4), input_dim=F)
    with pytest.raises(rk.InvalidParameterError, match=r"Bad.step.*\(2, 4\)"):
        layer.predict(_x((B, T, F)))
    with pytest.raises(TypeError, match="cell must be an rnnkit.Cell"):
        rk.RecurrentLayer("lstm")  # type: ignore[arg-type]


def test_custom_cell_layer_saves_and_loads(tmp_path: Path) -> None:
    model = (rk.SequentialBuilder().add(rk.RecurrentLayer(ScaledElman(4), seed=2))
             .add(rk.Dense(1, seed=1)).build(rk.Shape.with_free_batch((B, T, F))))
    model.save(tmp_path / "c.rnnkit")
    x = _x((3, T, F)).astype(np.float32)
    np.testing.assert_array_equal(rk.load_model(tmp_path / "c.rnnkit").predict(x), model.predict(x))


def test_kernels_package_never_imports_the_cells() -> None:
    """The kernels package knows cells only through their declarations (the KernelCell protocol)."""
    root = Path(rk.__file__).parent / "kernels"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                assert not n.startswith("rnnkit.recurrent"), f"{path.name} imports {n}"
        assert "._weights" not in path.read_text(), f"{path.name} reads a layer's private weights"


def test_custom_cells_page_indrnn_gradcheck() -> None:
    """The IndRNN of docs/custom-cells.md, run from the page itself, through the shared harness."""
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "custom-cells.md").read_text()
    ns: dict[str, Any] = {"__name__": "docs_custom_cells"}
    exec(re.findall(r"^```python\n(.*?)^```$", page, re.S | re.M)[0], ns)
    cell_cls = ns["IndRNNCell"]

    def make(dtype: str) -> Any:
        layer = rk.RecurrentLayer(cell_cls(4), return_sequences=True, seed=3, dtype=dtype)
        layer.build(rk.Shape.with_free_batch((B, T, F)))
        layer.set_weight("bias", np.random.default_rng(1).uniform(-0.5, 0.5, (1, 4)))
        return layer

    report = check_layer(make, lambda rng: rng.standard_normal((B, T, F)), rtol=1e-6)
    assert set(report.grad_errors) == {"input", "kernel", "recurrent_kernel", "bias"}
    assert max(report.grad_errors.values()) < 1e-7
