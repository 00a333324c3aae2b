"""Cells called one step at a time, as Keras 3's ``LSTMCell`` / ``GRUCell`` / ``SimpleRNNCell``:
values against Keras (torch backend, copied weights), gradients of decoder loops against
PyTorch autograd and float64 finite differences, typed errors, and the layer-held weights.

Tolerances: float32 outputs of one step are sums of F + H products of magnitude <= a few
units, pushed through sigmoid / tanh (slopes <= 1): the two implementations round differently
by a few float32 ulps (6e-8 of the value each) per sum, so 1e-6 of max(1, |value|) holds for
one step and for a 10-step loop (each step's rounding enters the next through slopes <= 1 and
weights of spectral norm about 1 -- entries N(0, 0.2^2) in matrices of 9 x 16 at most --, so
it does not grow; a linear or relu activation lets values pass 1, hence the relative part).
Gradients: 1e-5 of max(1, |gradient|) in float32 (a few ulps, 6e-8 each, per product, summed
over 6 steps x 3 rows x 4 units), 1e-9 in float64 (the same count of ulps of 1.1e-16).
"""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import ops
from rnnkit.recurrent._registry import cell_from_config, cell_to_config

os.environ.setdefault("KERAS_BACKEND", "torch")

B, F, H = 3, 5, 4

#: (rnnkit cell factory, keras cell factory) for every option of Keras' constructors that changes
#: a step's values (initializers, regularizers, constraints, dropout and seed are checked below)
OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("LSTMCell", {}),
    ("LSTMCell", {"activation": "relu", "recurrent_activation": "hard_sigmoid", "use_bias": False}),
    ("LSTMCell", {"activation": "linear", "recurrent_activation": "tanh"}),
    ("GRUCell", {}),
    ("GRUCell", {"reset_after": False}),
    ("GRUCell", {"reset_after": True, "use_bias": False, "activation": "relu"}),
    ("GRUCell", {"reset_after": False, "recurrent_activation": "hard_sigmoid", "use_bias": False}),
    ("SimpleRNNCell", {}),
    ("SimpleRNNCell", {"activation": "relu", "use_bias": False}),
    ("SimpleRNNCell", {"activation": "sigmoid"}),
]


def _keras() -> Any:
    return pytest.importorskip("keras")


def _randomize(kcell: Any, seed: int) -> list[np.ndarray]:
    g = np.random.default_rng(seed)
    ws = [g.normal(0.0, 0.2, tuple(w.shape)).astype("float32") for w in kcell.weights]
    kcell.set_weights(ws)
    return ws


def _np(t: Any) -> np.ndarray:
    return np.asarray(t.detach().cpu().numpy() if hasattr(t, "detach") else t)


@pytest.mark.parametrize(("kind", "opts"), OPTIONS, ids=lambda v: str(v))
def test_one_step_and_a_loop_equal_keras(kind: str, opts: dict[str, Any]) -> None:
    keras = _keras()
    kcell = getattr(keras.layers, kind)(H, **opts)
    cell = getattr(rk, kind)(H, **opts)
    g = np.random.default_rng(1)
    xs = g.normal(size=(10, B, F)).astype(np.float32)
    states = [g.normal(size=(B, H)).astype(np.float32) for _ in cell.state_names]
    kcell.build((B, F))
    cell.set_weights(_randomize(kcell, 2))
    for a, b in zip(cell.get_weights(), kcell.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)             # Keras' layout and order
    k_state = [keras.ops.convert_to_tensor(s) for s in states]
    r_state = list(states)
    for t in range(10):
        k_out, k_state = kcell(keras.ops.convert_to_tensor(xs[t]), k_state)
        r_out, r_state = cell(xs[t], r_state)
        np.testing.assert_allclose(r_out, _np(k_out), rtol=1e-6, atol=1e-6)
        assert len(r_state) == len(k_state)
        for a, b in zip(r_state, k_state, strict=True):
            np.testing.assert_allclose(a, _np(b), rtol=1e-6, atol=1e-6)


def test_a_single_state_cell_takes_and_returns_h_itself_as_keras() -> None:
    keras = _keras()
    for kind in ("GRUCell", "SimpleRNNCell"):
        kcell, cell = getattr(keras.layers, kind)(H), getattr(rk, kind)(H)
        x = np.random.default_rng(3).normal(size=(B, F)).astype(np.float32)
        h = np.full((B, H), 0.3, np.float32)
        kcell.build((B, F))
        cell.set_weights(_randomize(kcell, 4))
        k_out, k_new = kcell(keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(h))
        out, new = cell(x, h)
        assert isinstance(new, np.ndarray)
        np.testing.assert_allclose(new, _np(k_new), rtol=0, atol=1e-6)
        np.testing.assert_allclose(out, _np(k_out), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "SimpleRNNCell"])
@pytest.mark.parametrize("inits", [
    {"kernel_initializer": "ones", "recurrent_initializer": "zeros", "bias_initializer": "ones"},
    {"kernel_initializer": "zeros", "recurrent_initializer": "ones", "bias_initializer": "zeros",
     "unit_forget_bias": False},
    {"bias_initializer": "zeros", "unit_forget_bias": True},
])
def test_initializers_and_unit_forget_bias_draw_keras_weights(kind: str, inits: dict[str, Any]) -> None:
    keras = _keras()
    if kind != "LSTMCell":
        inits = {k: v for k, v in inits.items() if k != "unit_forget_bias"}
    kcell, cell = getattr(keras.layers, kind)(H, **inits), getattr(rk, kind)(H, **inits)
    kcell.build((B, F))
    cell.build((B, F))
    for name, a, b in zip(["kernel", "recurrent_kernel", "bias"], cell.get_weights(), kcell.get_weights(),
                          strict=True):
        if name in ("kernel", "recurrent_kernel") and f"{name}_initializer" not in inits:
            continue                                   # (random draws: only constants compare)
        np.testing.assert_array_equal(a, _np(b), err_msg=name)


def test_keras_named_random_initializers_follow_keras_formulas() -> None:
    cell = rk.LSTMCell(64, kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", seed=3)
    cell.build((1, 32))
    kernel, rec, _ = cell.get_weights()
    limit = np.sqrt(6.0 / (32 + 4 * 64))              # the whole (F, 4H) shape's fans, as Keras
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.9 * limit
    np.testing.assert_allclose(rec @ rec.T, np.eye(64), atol=1e-5)   # orthonormal rows (64 of 256)
    with pytest.raises(rk.InvalidParameterError, match="kernel_initializer"):
        rk.LSTMCell(4, kernel_initializer="he_magic")


def test_regularizers_and_constraints_go_to_the_layer_holding_the_weights() -> None:
    cell = rk.GRUCell(H, kernel_regularizer=rk.regularizers.L2(0.01), bias_constraint="non_neg",
                      recurrent_regularizer="l1")
    cell.build((B, F))
    holder = cell.holder
    assert isinstance(holder, rk.RecurrentLayer)
    w = cell.weight("kernel")
    want = 0.01 * float(np.sum(w.astype(np.float64) ** 2))
    assert holder.regularizers["kernel"].penalty(w) == pytest.approx(want, rel=1e-6)
    assert set(holder.regularizers) == {"kernel", "recurrent_kernel"}
    assert set(holder.constraints) == {"bias"}
    layer = rk.RecurrentLayer(rk.LSTMCell(H, kernel_regularizer="l2", dropout=0.25, recurrent_dropout=0.5))
    assert set(layer.regularizers) == {"kernel"}
    assert (layer.dropout, layer.recurrent_dropout) == (0.25, 0.5)


def test_seed_draws_the_same_weights_and_dropout_is_inverted_dropout_of_the_input() -> None:
    a, b, c = rk.LSTMCell(H, seed=5), rk.LSTMCell(H, seed=5), rk.LSTMCell(H, seed=6)
    for cell in (a, b, c):
        cell.build((B, F))
    for wa, wb, wc in zip(a.get_weights()[:2], b.get_weights()[:2], c.get_weights()[:2], strict=True):
        np.testing.assert_array_equal(wa, wb)
        assert not np.array_equal(wa, wc)
    cell = rk.GRUCell(H, dropout=0.5, seed=1, dtype="float64")
    x = np.random.default_rng(2).normal(size=(8, F))
    h = np.zeros((8, H))
    with rk.GradientTape() as tape:
        tape.watch(x)
        out, _ = cell(x, [h], training=True)
    dx = tape.gradient(out, x)
    kept = dx != 0.0                                   # a dropped feature has no gradient
    assert 0 < kept.sum() < kept.size
    # the training step is the inference step on the input with the dropped features zeroed and
    # the kept ones scaled by 1 / (1 - rate): the same arithmetic, to float64 rounding
    want, _ = cell(np.where(kept, x / 0.5, 0.0), [h])
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(cell(x, [h])[0], cell(x, [h], training=False)[0])   # inference: none


# -- gradients of decoder loops -------------------------------------------------------------------
def _torch_cell(torch: Any, kind: str, cell: Any, dtype: Any) -> Any:
    """PyTorch's cell with ``cell``'s weights (Keras' gate orders mapped to PyTorch's)."""
    kernel, rec, bias = (np.asarray(w, np.float64) for w in cell.get_weights())
    if kind == "LSTMCell":
        tc = torch.nn.LSTMCell(F, H)
        perm = np.arange(4 * H)                              # [i|f|g|o] in both
        b_ih, b_hh = bias, np.zeros_like(bias)
    elif kind == "GRUCell":
        tc = torch.nn.GRUCell(F, H)
        perm = np.r_[H:2 * H, 0:H, 2 * H:3 * H]              # Keras [z|r|n] -> PyTorch [r|z|n]
        b_ih, b_hh = bias[0], bias[1]
    else:
        tc = torch.nn.RNNCell(F, H)
        perm = np.arange(H)
        b_ih, b_hh = bias, np.zeros_like(bias)
    tc = tc.to(dtype)
    with torch.no_grad():
        for p, v in ((tc.weight_ih, kernel[:, perm].T), (tc.weight_hh, rec[:, perm].T),
                     (tc.bias_ih, b_ih[perm]), (tc.bias_hh, b_hh[perm])):
            p.copy_(torch.tensor(np.ascontiguousarray(v), dtype=dtype))
    return tc, perm


def _decoder_rk(cell: Any, w_out: np.ndarray, h0: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> Any:
    """Teacher forcing: step t reads the target of step t-1 (``xs[t]``), the loss is the sum
    over the steps of the squared error of a linear read-out of h."""
    states = [h0] + [np.zeros_like(h0) for _ in cell.state_names[1:]]
    loss = None
    for t in range(xs.shape[0]):
        out, states = cell(xs[t], states)
        err = ops.subtract(ops.matmul(out, w_out), ys[t])
        term = ops.sum(ops.square(err))
        loss = term if loss is None else ops.add(loss, term)
    return loss


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "SimpleRNNCell"])
@pytest.mark.parametrize(("dtype", "tol"), [("float32", 1e-5), ("float64", 1e-9)])
def test_decoder_loop_gradients_equal_pytorch_autograd(kind: str, dtype: str, tol: float) -> None:
    torch = pytest.importorskip("torch")
    g = np.random.default_rng(5)
    cell = getattr(rk, kind)(H, dtype=dtype, seed=7)
    cell.build((B, F))
    cell.set_weights([g.normal(0.0, 0.5, w.shape).astype(dtype) for w in cell.get_weights()])
    T = 6
    xs, ys = g.normal(size=(T, B, F)).astype(dtype), g.normal(size=(T, B, 2)).astype(dtype)
    h0, w_out = g.normal(size=(B, H)).astype(dtype), g.normal(size=(H, 2)).astype(dtype)
    x_seq = [xs[t] for t in range(T)]
    with rk.GradientTape() as tape:
        tape.watch([h0, w_out, x_seq[0]])
        loss: Any = None
        states: list[Any] = [h0] + [np.zeros_like(h0) for _ in cell.state_names[1:]]
        for t in range(T):
            out, states = cell(x_seq[t], states)
            term = ops.sum(ops.square(ops.subtract(ops.matmul(out, w_out), ys[t])))
            loss = term if loss is None else ops.add(loss, term)
    weights = cell.trainable_weights()
    grads = tape.gradient(loss, [*weights, h0, w_out, x_seq[0]])

    tdt = torch.float32 if dtype == "float32" else torch.float64
    tc, perm = _torch_cell(torch, kind, cell, tdt)
    th0 = torch.tensor(h0, requires_grad=True)
    tw = torch.tensor(w_out, requires_grad=True)
    tx = [torch.tensor(x, requires_grad=(t == 0)) for t, x in enumerate(x_seq)]
    state: Any = (th0, torch.zeros_like(th0)) if kind == "LSTMCell" else th0
    tloss = torch.zeros((), dtype=tdt)
    for t in range(T):
        state = tc(tx[t], state)
        h = state[0] if kind == "LSTMCell" else state
        tloss = tloss + ((h @ tw - torch.tensor(ys[t])) ** 2).sum()
    tloss.backward()
    np.testing.assert_allclose(float(loss), float(tloss), rtol=tol)
    d_kernel, d_rec = grads[0], grads[1]
    inv = np.argsort(perm)
    np.testing.assert_allclose(d_kernel, tc.weight_ih.grad.numpy().T[:, inv], rtol=tol, atol=tol)
    np.testing.assert_allclose(d_rec, tc.weight_hh.grad.numpy().T[:, inv], rtol=tol, atol=tol)
    d_bias = grads[2]
    if kind == "GRUCell":   # (reset_after: rows b_in, b_rec = PyTorch's bias_ih, bias_hh)
        np.testing.assert_allclose(d_bias[0], tc.bias_ih.grad.numpy()[inv], rtol=tol, atol=tol)
        np.testing.assert_allclose(d_bias[1], tc.bias_hh.grad.numpy()[inv], rtol=tol, atol=tol)
    else:                   # (one row: both of PyTorch's biases move with it)
        np.testing.assert_allclose(d_bias[0], tc.bias_ih.grad.numpy()[inv], rtol=tol, atol=tol)
    np.testing.assert_allclose(grads[3], th0.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(grads[4], tw.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(grads[5], tx[0].grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "GRUCell-reset-before", "SimpleRNNCell"])
def test_decoder_loop_gradients_equal_float64_finite_differences(kind: str) -> None:
    opts = {"reset_after": False} if kind.endswith("-reset-before") else {}
    cell = getattr(rk, kind.split("-")[0])(H, dtype="float64", **opts)
    g = np.random.default_rng(9)
    cell.build((B, F))
    cell.set_weights([g.normal(0.0, 0.5, w.shape) for w in cell.get_weights()])
    T = 5
    xs, ys = g.normal(size=(T, B, F)), g.normal(size=(T, B, 2))
    h0, w_out = g.normal(size=(B, H)), g.normal(size=(H, 2))
    with rk.GradientTape() as tape:
        tape.watch(h0)
        loss = _decoder_rk(cell, w_out, h0, xs, ys)
    grads = tape.gradient(loss, [*cell.trainable_weights(), h0])
    base = cell.get_weights()
    eps = 1e-6   # central differences: truncation ~eps^2 * f''' ~ 1e-11, rounding ~1e-16 * |f| / eps
    for k in range(len(base)):
        flat = base[k].reshape(-1)
        for i in g.choice(flat.size, size=min(8, flat.size), replace=False):
            vals = []
            for sign in (1.0, -1.0):
                ws = [w.copy() for w in base]
                ws[k].reshape(-1)[i] += sign * eps
                cell.set_weights(ws)
                vals.append(float(_decoder_rk(cell, w_out, h0, xs, ys)))
            num = (vals[0] - vals[1]) / (2 * eps)
            got = grads[k].reshape(-1)[i] if grads[k].size == flat.size else None
            assert got is not None
            assert abs(got - num) <= 1e-7 * max(1.0, abs(num)), (k, i, got, num)
    cell.set_weights(base)
    for i in range(3):
        hp, hm = h0.copy(), h0.copy()
        hp.reshape(-1)[i] += eps
        hm.reshape(-1)[i] -= eps
        up, down = float(_decoder_rk(cell, w_out, hp, xs, ys)), float(_decoder_rk(cell, w_out, hm, xs, ys))
        num = (up - down) / (2 * eps)
        assert abs(grads[-1].reshape(-1)[i] - num) <= 1e-7 * max(1.0, abs(num))


def test_a_sampling_loop_feeds_outputs_back_and_optimizer_steps_apply() -> None:
    """Greedy feedback (the step's output is the next input): the gradient reaches the weights
    through every step, and ``apply_gradients`` over ``trainable_weights()`` moves them."""
    cell = rk.GRUCell(F, dtype="float64", seed=2)
    x = np.random.default_rng(0).normal(size=(B, F))
    with rk.GradientTape() as tape:
        h = np.zeros((B, F))
        inp = x
        for _ in range(4):
            inp, [h] = cell(inp, [h])
        loss = ops.sum(ops.square(h))
    weights = cell.trainable_weights()
    grads = tape.gradient(loss, weights)
    before = [np.array(cell.weight(n)) for _, n in weights]
    opt = rk.optimizers.SGD(learning_rate=0.1)
    opt.apply_gradients(zip(grads, weights, strict=True))
    for (_, n), b, gr in zip(weights, before, grads, strict=True):
        np.testing.assert_allclose(cell.weight(n), b - 0.1 * gr, rtol=0, atol=1e-12)


# -- errors ---------------------------------------------------------------------------------------
def test_wrong_number_or_shape_of_states_is_a_typed_error() -> None:
    cell = rk.LSTMCell(H)
    x = np.zeros((B, F), np.float32)
    h = np.zeros((B, H), np.float32)
    with pytest.raises(rk.InvalidInputError,
                       match=r"expected 2 state part\(s\), a list \[h, c\], got a list of 1"):
        cell(x, [h])
    with pytest.raises(rk.InvalidInputError, match=r"expected 2 state part\(s\).*got one ndarray"):
        cell(x, h)
    with pytest.raises(rk.InvalidInputError, match=r"got a list of 3"):
        cell(x, [h, h, h])
    with pytest.raises(rk.InvalidInputError, match=r"state 'c' must have shape \(3, 4\), got \(3, 5\)"):
        cell(x, [h, np.zeros((B, 5), np.float32)])
    with pytest.raises(rk.InvalidInputError, match=r"one timestep \(batch, 5\), got shape \(3, 6\)"):
        cell(np.zeros((B, 6), np.float32), [h, h])
    with pytest.raises(rk.InvalidInputError,
                       match=r"one timestep \(batch, features\), got shape \(3, 1, 5\)"):
        cell(np.zeros((B, 1, F), np.float32), [h, h])
    gru = rk.GRUCell(H)
    with pytest.raises(rk.InvalidInputError,
                       match=r"expected 1 state part\(s\), a list \[h\], got a list of 2"):
        gru(x, [h, h])
    with rk.GradientTape():   # the same checks on a tape
        with pytest.raises(rk.InvalidInputError, match=r"state 'h' must have shape \(3, 4\), got \(2, 4\)"):
            gru(x, [np.zeros((2, H), np.float32)])
    with pytest.raises(rk.NotBuiltError, match="call the cell on a step's input"):
        rk.SimpleRNNCell(2).get_weights()
    with pytest.raises(rk.WeightShapeError, match=r"'bias' expected shape \(12,\), got \(1, 12\)"):
        rk.GRUCell(H, reset_after=False).set_weights([np.zeros((F, 12)), np.zeros((H, 12)),
                                                      np.zeros((1, 12))])
    with pytest.raises(rk.InvalidParameterError,
                       match="GRUResetAfterCell computes the GRU with reset_after=True"):
        rk.GRUResetAfterCell(H, reset_after=False)


# -- the cell of a layer ---------------------------------------------------------------------------
def test_the_cell_of_a_layer_steps_with_the_layers_own_weights() -> None:
    layer = rk.LSTM(H, seed=3, input_dim=F, return_sequences=True)
    cell = layer.cell
    assert cell.holder is layer
    assert cell.weight("kernel") is layer.weight("kernel")
    g = np.random.default_rng(0)
    xs = g.normal(size=(B, 7, F)).astype(np.float32)
    seq = layer(xs)
    state = [np.zeros((B, H), np.float32)] * 2
    for t in range(7):
        out, state = cell(xs[:, t], state)
        np.testing.assert_allclose(out, seq[:, t], rtol=0, atol=1e-6)
    layer.set_weights(*(w * 0.5 for w in layer.get_weights()))   # a new weight: the cell sees it
    assert cell.weight("kernel") is layer.weight("kernel")
    np.testing.assert_allclose(cell(xs[:, 0], [np.zeros((B, H), np.float32)] * 2)[0], layer(xs[:, :1])[:, 0],
                               rtol=0, atol=1e-6)


def test_a_layer_over_a_cell_that_holds_weights_takes_them() -> None:
    cell = rk.GRUCell(H, seed=1)
    x = np.ones((B, F), np.float32)
    out, _ = cell(x, [np.zeros((B, H), np.float32)])
    layer = rk.RecurrentLayer(cell)
    assert cell.holder is layer
    np.testing.assert_array_equal(layer(x[:, None, :]), out)


def test_gru_cell_reset_after_default_is_keras_and_old_files_load() -> None:
    assert rk.GRUCell(H).reset_after is True and isinstance(rk.GRUCell(H), rk.GRUResetAfterCell)
    assert type(rk.GRUCell(H, reset_after=False)) is rk.GRUCell
    assert rk.GRU(H).reset_after is False                      # the layer's default stays
    old = cell_from_config({"class_name": "GRUCell", "config": {"units": 3}})   # written before reset_after
    assert type(old) is rk.GRUCell and old.reset_after is False
    for c in (rk.GRUCell(3), rk.GRUCell(3, reset_after=False), rk.GRUCell(units=3, reset_after=False)):
        assert type(cell_from_config(cell_to_config(c))) is type(c)
        assert type(copy.deepcopy(c)) is type(c)
    layer = rk.GRU(3, input_dim=2)
    twin = copy.deepcopy(layer)
    assert type(twin.cell) is rk.GRUCell and twin.cell.holder is twin


def test_the_cell_of_an_int8_layer_steps_with_its_int8_pass() -> None:
    model = rk.Sequential([rk.LSTM(H, input_dim=F, seed=1, return_sequences=True)])
    model.build((None, 6, F))
    q = rk.quantize(model).layers[0]
    xs = np.random.default_rng(0).normal(size=(B, 6, F)).astype(np.float32)
    seq = q(xs)
    state = [np.zeros((B, H), np.float32)] * 2
    for t in range(6):                                  # the same int8 arithmetic, step by step
        out, state = q.cell(xs[:, t], state)
        np.testing.assert_allclose(out, seq[:, t], rtol=0, atol=1e-6)
