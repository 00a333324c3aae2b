"""PyTorch's two recurrent biases: ``bias_layout="torch"`` keeps ``bias_ih`` and ``bias_hh`` as
two trained rows, so a model loaded from a torch state dict trains as torch trains it (25
float64 Adam steps, loss and weights at every step), and a one-row layer is warned about when it
takes a torch state dict (its training would part from torch's at the first step, shown here).
GRU(reset_after=True) keeps both biases always. Export to torch, Keras and the layer config."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._errors import InvalidParameterError
from rnnkit.io import from_keras_weights, from_torch_state, to_keras_weights, to_torch_state
from rnnkit.layers import layer_from_config

torch = pytest.importorskip("torch")

B, T, F, H, OUT, STEPS = 6, 5, 3, 4, 2, 25
TORCH_MODULES = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "SimpleRNN": torch.nn.RNN}


def _torch_net(kind: str, seed: int) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    rnn = TORCH_MODULES[kind](F, H, batch_first=True).double()
    with torch.no_grad():   # biases of their own, far from each other
        for name, p in rnn.named_parameters():
            if name.startswith("bias"):
                p.copy_(torch.randn_like(p))
    return rnn, torch.nn.Linear(H, OUT).double()


def _rnnkit_net(kind: str, rnn: Any, lin: Any, bias_layout: str) -> rk.Sequential:
    kw: dict[str, Any] = {"reset_after": True} if kind == "GRU" else {"bias_layout": bias_layout}
    layer = getattr(rk, kind)(H, dtype="float64", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_torch_state(layer, rnn.state_dict())
    dense = rk.Dense(OUT, dtype="float64")
    dense.set_weights(lin.weight.detach().numpy().T.copy(), lin.bias.detach().numpy().copy())
    model = rk.Sequential([layer, dense], input_shape=(None, T, F))
    return model.compile(rk.Adam(0.02, epsilon=1e-8, formula="torch"), "mse")


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    return rng.standard_normal((B, T, F)), rng.standard_normal((B, OUT))


def _torch_losses(rnn: Any, lin: Any, x: np.ndarray, y: np.ndarray) -> list[float]:
    opt = torch.optim.Adam([*rnn.parameters(), *lin.parameters()], lr=0.02, eps=1e-8)
    tx, ty = torch.tensor(x), torch.tensor(y)
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(lin(rnn(tx)[0][:, -1]), ty)
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out


@pytest.mark.parametrize("kind", ["LSTM", "SimpleRNN", "GRU"])
def test_training_from_a_torch_state_dict_equals_torch_step_for_step(kind: str) -> None:
    rnn, lin = _torch_net(kind, 0)
    model = _rnnkit_net(kind, rnn, lin, "torch")
    x, y = _data()
    ours = model.fit(x, y, epochs=STEPS, shuffle=False).history["loss"]   # one full-batch step each
    theirs = _torch_losses(rnn, lin, x, y)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    state = to_torch_state(model.layers[0])
    for name, p in rnn.state_dict().items():
        np.testing.assert_allclose(state[name + "_l0"] if not name.endswith("_l0") else state[name],
                                   p.numpy(), rtol=1e-9, atol=1e-11, err_msg=name)


@pytest.mark.parametrize("kind", ["LSTM", "SimpleRNN"])
def test_one_summed_bias_row_trains_differently_and_says_so(kind: str) -> None:
    rnn, lin = _torch_net(kind, 1)
    layer = getattr(rk, kind)(H, dtype="float64")
    with pytest.warns(UserWarning, match=rf"bias_ih and bias_hh are summed into this {kind}'s one bias "
                                         rf"row.*training is not.*bias_layout='torch'"):
        from_torch_state(layer, rnn.state_dict())
    model = _rnnkit_net(kind, rnn, lin, "fused")
    x, y = _data()
    ours = model.fit(x, y, epochs=3, shuffle=False).history["loss"]
    theirs = _torch_losses(rnn, lin, x, y)[:3]
    assert ours[0] == pytest.approx(theirs[0], rel=1e-12)       # the same model ...
    assert abs(ours[2] - theirs[2]) > 1e-6 * abs(theirs[2])      # ... trained differently


def test_gru_and_torch_layout_take_a_torch_state_dict_without_a_warning() -> None:
    for kind, kw in (("GRU", {"reset_after": True}), ("LSTM", {"bias_layout": "torch"})):
        rnn, _ = _torch_net(kind, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            from_torch_state(getattr(rk, kind)(H, dtype="float64", **kw), rnn.state_dict())


def test_torch_layout_rows_config_keras_and_defaults() -> None:
    rnn, _ = _torch_net("LSTM", 3)
    layer = rk.LSTM(H, dtype="float64", bias_layout="torch")
    from_torch_state(layer, rnn.state_dict())
    b = layer.weight("bias")
    assert b.shape == (2, 4 * H)
    np.testing.assert_array_equal(b[0], rnn.bias_ih_l0.detach().numpy())
    np.testing.assert_array_equal(b[1], rnn.bias_hh_l0.detach().numpy())
    # the config rebuilds the layout; the weights copy over
    cfg = layer.get_config()
    assert cfg["bias_layout"] == "torch"
    again = layer_from_config({"class_name": "LSTM", "config": cfg})
    again.build(layer.input_shape)
    again.set_weights(*layer.get_weights())
    x = _data()[0]
    np.testing.assert_allclose(again.predict(x), layer.predict(x), rtol=0, atol=0)
    # the same outputs as one summed row; Keras gets the sum, and gives it back as row 0
    fused = rk.LSTM(H, dtype="float64")
    from_keras_weights(fused, to_keras_weights(layer))
    np.testing.assert_allclose(fused.predict(x), layer.predict(x), rtol=1e-13, atol=1e-14)
    back = rk.LSTM(H, dtype="float64", bias_layout="torch")
    from_keras_weights(back, to_keras_weights(fused))
    np.testing.assert_allclose(back.weight("bias"), np.stack([b.sum(axis=0), np.zeros(4 * H)]), atol=1e-15)
    assert "bias_layout" not in rk.LSTM(H).get_config()
    init = rk.LSTM(H, bias_layout="torch", dtype="float64")
    init.build((None, T, F))
    assert init.weight("bias").sum(axis=0)[H:2 * H].tolist() == [1.0] * H   # forget gate open


@pytest.mark.parametrize(("make", "match"), [
    (lambda: rk.LSTM(3, bias_layout="keras"), r"bias_layout must be one of \['fused', 'torch'\].*'keras'"),
    (lambda: rk.SimpleRNN(3, bias_layout=2), r"bias_layout must be one of"),
    (lambda: rk.LSTM(3, bias_layout="torch", use_bias=False), r"needs use_bias=True"),
])
def test_bad_bias_layout(make: Any, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        make()


def test_onnx_export_of_two_bias_rows(tmp_path: Any) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    rnn, _ = _torch_net("LSTM", 4)
    layer = rk.LSTM(H, dtype="float32", bias_layout="torch", return_sequences=True)
    from_torch_state(layer, rnn.float().state_dict())
    model = rk.Sequential([layer], input_shape=(None, T, F))
    path = str(tmp_path / "two_rows.onnx")
    rk.save_onnx(model, path)
    x = _data()[0].astype(np.float32)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    want = rnn(torch.tensor(x))[0].detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["LSTM", "SimpleRNN"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_two_bias_rows_run_the_compiled_walker_and_equal_torch_autograd(
        kind: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``bias_layout="torch"`` runs the compiled walker (the plain cell with the two rows summed;
    the reference walker is made to raise here) from a given initial state, and its output and
    every gradient (both bias rows, the inputs, the initial state) equal torch autograd's: float64
    to 1e-10 (rounding of a few hundred operations), float32 to 2e-5 (T = 5 steps of float32
    gate arithmetic on values of order 1, about 1e-6 each, summed over the batch)."""
    if rk.kernels.mode() != "fast" or not rk.kernels.available():
        pytest.skip("the compiled kernels are not in use here")
    from rnnkit.recurrent import _walker

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the reference walker ran")

    monkeypatch.setattr(_walker, "reference_walk", refuse)
    monkeypatch.setattr(_walker, "reference_walk_back", refuse)
    rnn, _ = _torch_net(kind, 3)
    rnn = rnn.to(getattr(torch, dtype))
    layer = getattr(rk, kind)(H, dtype=dtype, bias_layout="torch", return_sequences=True,
                              return_state=True)
    from_torch_state(layer, rnn.state_dict())
    rng = np.random.default_rng(4)
    x = rng.standard_normal((B, T, F)).astype(dtype)
    parts = 2 if kind == "LSTM" else 1
    init = [rng.standard_normal((B, H)).astype(dtype) for _ in range(parts)]
    g_out = rng.standard_normal((B, T, H)).astype(dtype)
    with rk.GradientTape() as tape:
        tape.watch([x, *init])
        out = layer(x, initial_state=init)[0]
        loss = rk.ops.sum(rk.ops.multiply(out, g_out))
    grads = tape.gradient(loss, [(layer, "kernel"), (layer, "recurrent_kernel"), (layer, "bias"), x, *init])
    tx = torch.tensor(x, requires_grad=True)
    t_init = [torch.tensor(s[None], requires_grad=True) for s in init]
    t_out, _ = rnn(tx, tuple(t_init) if parts == 2 else t_init[0])
    (t_out * torch.tensor(g_out)).sum().backward()
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == "float64" else {"rtol": 2e-5, "atol": 2e-5}
    np.testing.assert_allclose(out, t_out.detach().numpy(), **tol)
    want = to_torch_state(layer)   # the layout's names, filled with torch's gradients below
    got = dict(zip(["weight_ih_l0", "weight_hh_l0"], [grads[0].T, grads[1].T], strict=True))
    got["bias_ih_l0"], got["bias_hh_l0"] = grads[2][0], grads[2][1]
    params = dict(rnn.named_parameters())
    assert set(got) == set(want)
    for name, g in got.items():
        np.testing.assert_allclose(g, params[name].grad.numpy(), **tol, err_msg=name)   # (gates i f g o)
    np.testing.assert_allclose(grads[3], tx.grad.numpy(), **tol)
    for g, t in zip(grads[4:], t_init, strict=True):
        np.testing.assert_allclose(g, t.grad.numpy()[0], **tol)
    # the summed bias is kept read-only with the weights, so the compiled walker keeps its plan
    # (the packed panels of W and U): another pass on the same weights lays out nothing anew
    from rnnkit.kernels import _plans
    made: list[object] = []
    real_init = _plans._Plan.__init__

    def counting(self: Any, *a: Any, **k: Any) -> None:
        made.append(self)
        real_init(self, *a, **k)

    monkeypatch.setattr(_plans._Plan, "__init__", counting)
    with rk.GradientTape() as tape:
        again = layer(x, initial_state=init)[0]
    tape.gradient(again, [(layer, "kernel")])
    assert made == []
