"""Live parity with PyTorch: torch.nn.RNN / LSTM / GRU with random weights copied in.

Outputs (float32, max abs <= 1e-5), the input gradient and every weight gradient (relative
``max|ours - torch| / max|torch|`` <= 1e-4), for ``return_sequences`` True/False and
``go_backwards`` (torch runs on ``torch.flip``-ped input; rnnkit's outputs stay in processing
order, which is exactly torch's output order on the flipped input). The layout mapping (gate
reorder r,z,n -> z,r,n, transposes, summed LSTM/RNN biases) is in ``tests/torch_layout.py``.

GRU ``reset_after=False`` (which torch lacks) is checked against a plain float64 loop written
here from the GRU equations (``rnnkit.recurrent._gru``), and its gradients against torch
autograd on that loop.
"""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from torch_layout import TORCH_CELLS, max_abs, max_rel, ours_run, random_params, torch_run

torch = pytest.importorskip("torch")

B, T, F, H = 3, 6, 4, 5


def _case(cell: str, rs: bool, seed: int) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    params = random_params(cell, F, H, rng)
    x = rng.standard_normal((B, T, F))
    G = rng.standard_normal((B, T, H) if rs else (B, H))
    return params, x, G


@pytest.mark.parametrize("go_backwards", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("return_sequences", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("cell", list(TORCH_CELLS))
def test_float32_parity_outputs_and_gradients(cell: str, return_sequences: bool, go_backwards: bool) -> None:
    params, x, G = _case(cell, return_sequences, 1)
    ty, tdx, tg = torch_run(cell, params, x, G, return_sequences, go_backwards, "float32")
    y, dx, g = ours_run(cell, params, x, G, return_sequences, go_backwards, "float32")
    assert y.dtype == np.float32 and y.shape == ty.shape
    assert max_abs(y, ty) <= 1e-5
    assert max_rel(dx, tdx) <= 1e-4
    for name, a, b in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), g, tg, strict=True):
        assert a.shape == b.shape, name
        assert max_rel(a, b) <= 1e-4, (name, max_rel(a, b))


@pytest.mark.parametrize("go_backwards", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("cell", list(TORCH_CELLS))
def test_float64_parity_is_exact_to_rounding(cell: str, go_backwards: bool) -> None:
    params, x, G = _case(cell, True, 2)
    ty, tdx, tg = torch_run(cell, params, x, G, True, go_backwards, "float64")
    y, dx, g = ours_run(cell, params, x, G, True, go_backwards, "float64")
    assert max_abs(y, ty) <= 1e-13
    assert max_rel(dx, tdx) <= 1e-12
    for a, b in zip(g, tg, strict=True):
        assert max_rel(a, b) <= 1e-12


def test_simple_rnn_relu_parity() -> None:
    params, x, G = _case("SimpleRNN", True, 3)
    ty, tdx, tg = torch_run("SimpleRNN", params, x, G, True, False, "float64", nonlinearity="relu")
    y, dx, g = ours_run("SimpleRNN", params, x, G, True, False, "float64", nonlinearity="relu")
    assert np.mean(y > 0) > 0.2 and np.mean(y == 0) > 0.1  # both relu branches are exercised
    assert max_abs(y, ty) <= 1e-13 and max_rel(dx, tdx) <= 1e-12
    for a, b in zip(g, tg, strict=True):
        assert max_rel(a, b) <= 1e-12


def test_go_backwards_last_state_is_torch_final_state_on_flipped_input() -> None:
    """Without return_sequences the go_backwards output is the state after input step 0."""
    params, x, _ = _case("LSTM", False, 4)
    mod = torch.nn.LSTM(F, H, batch_first=True).double()
    with torch.no_grad():
        for p, v in zip(mod.parameters(), params, strict=True):
            p.copy_(torch.from_numpy(v))
    _, (h_n, _) = mod(torch.flip(torch.from_numpy(x), [1]))
    y, _, _ = ours_run("LSTM", params, x, np.zeros((B, H)), False, True, "float64")
    np.testing.assert_allclose(y, h_n[0].detach().numpy(), atol=1e-13)


# -- GRU reset_after=False: no torch module; a loop from the GRU equations --------------------

def _sig(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def gru_reference(x: np.ndarray, W: np.ndarray, U: np.ndarray, b: np.ndarray, go_backwards: bool,
                  ) -> np.ndarray:
    """Plain float64 loop, one sample and one step at a time, fused order [z | r | h]::

        z = sig(x W_z + h U_z + b_z);  r = sig(x W_r + h U_r + b_r)
        n = tanh(x W_h + (r * h) U_h + b_h);  h = z * h + (1 - z) * n
    Returns every state in processing order (B, T, H)."""
    Bn, Tn, _ = x.shape
    Hn = U.shape[0]
    Wz, Wr, Wh = W[:, :Hn], W[:, Hn:2 * Hn], W[:, 2 * Hn:]
    Uz, Ur, Uh = U[:, :Hn], U[:, Hn:2 * Hn], U[:, 2 * Hn:]
    bz, br, bh = b[0, :Hn], b[0, Hn:2 * Hn], b[0, 2 * Hn:]
    out = np.zeros((Bn, Tn, Hn))
    for n in range(Bn):
        h = np.zeros(Hn)
        for s in range(Tn):
            xt = x[n, Tn - 1 - s] if go_backwards else x[n, s]
            z = _sig(xt @ Wz + h @ Uz + bz)
            r = _sig(xt @ Wr + h @ Ur + br)
            cand = np.tanh(xt @ Wh + (r * h) @ Uh + bh)
            h = z * h + (1 - z) * cand
            out[n, s] = h
    return out


def _gru_plain_params(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-0.6, 0.6, (F, 3 * H)), rng.uniform(-0.6, 0.6, (H, 3 * H)),
            rng.uniform(-0.6, 0.6, (1, 3 * H)), rng.standard_normal((B, T, F)))


@pytest.mark.parametrize("go_backwards", [False, True], ids=["fwd", "bwd"])
def test_gru_reset_before_matches_the_equation_loop(go_backwards: bool) -> None:
    W, U, b, x = _gru_plain_params(5)
    ref = gru_reference(x, W, U, b, go_backwards)
    for dtype, tol in (("float64", 1e-13), ("float32", 1e-5)):
        layer = rk.GRU(H, return_sequences=True, go_backwards=go_backwards, dtype=dtype)
        layer.set_weights(W, U, b)
        assert max_abs(layer.predict(x), ref) <= tol, dtype
        last = rk.GRU(H, go_backwards=go_backwards, dtype=dtype)
        last.set_weights(W, U, b)
        assert max_abs(last.predict(x), ref[:, -1]) <= tol, dtype
    # the reset acts BEFORE the matmul: the reset_after form with the same weights differs
    after = rk.GRU(H, reset_after=True, return_sequences=True, go_backwards=go_backwards, dtype="float64")
    after.set_weights(W, U, np.concatenate([b, np.zeros_like(b)]))
    assert max_abs(after.predict(x), ref) > 1e-3


@pytest.mark.parametrize("go_backwards", [False, True], ids=["fwd", "bwd"])
def test_gru_reset_before_gradients_match_autograd_of_the_equation_loop(go_backwards: bool) -> None:
    W, U, b, x = _gru_plain_params(6)
    G = np.random.default_rng(7).standard_normal((B, T, H))
    tW, tU, tb, tx = (torch.tensor(a, requires_grad=True) for a in (W, U, b, x))
    h = torch.zeros(B, H, dtype=torch.float64)
    outs = []
    for s in range(T):
        xt = tx[:, T - 1 - s] if go_backwards else tx[:, s]
        xw = xt @ tW + tb[0]
        z = torch.sigmoid(xw[:, :H] + h @ tU[:, :H])
        r = torch.sigmoid(xw[:, H:2 * H] + h @ tU[:, H:2 * H])
        cand = torch.tanh(xw[:, 2 * H:] + (r * h) @ tU[:, 2 * H:])
        h = z * h + (1 - z) * cand
        outs.append(h)
    ty = torch.stack(outs, 1)
    (ty * torch.from_numpy(G)).sum().backward()
    layer = rk.GRU(H, return_sequences=True, go_backwards=go_backwards, dtype="float64")
    layer.set_weights(W, U, b)
    ctx = rk.Ctx.training()
    y = layer.forward(x, ctx)
    dx = layer.backward(G, ctx)
    assert max_abs(y, ty.detach().numpy()) <= 1e-13
    assert max_rel(dx, tx.grad.numpy()) <= 1e-12
    for name, tp in (("kernel", tW), ("recurrent_kernel", tU), ("bias", tb)):
        assert max_rel(ctx.grad(layer, name), tp.grad.numpy()) <= 1e-12, name


def test_gru_gate_reorder_matters() -> None:
    """The parity above is not vacuous: skipping the r,z,n -> z,r,n reorder breaks it."""
    params, x, G = _case("GRU", True, 8)
    ty, _, _ = torch_run("GRU", params, x, G, True, False, "float64")
    Hn = params[1].shape[1]
    layer = rk.GRU(Hn, reset_after=True, return_sequences=True, dtype="float64")
    w_ih, w_hh, b_ih, b_hh = params
    layer.set_weights(w_ih.T, w_hh.T, np.stack([b_ih, b_hh]))  # torch order kept: wrong
    assert max_abs(layer.predict(x), ty) > 1e-2
