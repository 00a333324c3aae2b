"""PyTorch <-> rnnkit weight layouts (NumPy only; shared by the live torch tests, the fixture
tests and ``tools/``). The layouts are written out in rnnkit/_layouts.py.

torch keeps ``weight_ih`` (G*H, F), ``weight_hh`` (G*H, H), ``bias_ih`` and ``bias_hh`` (G*H,),
rows in gate order ``r, z, n`` for GRU and ``i, f, g, o`` for LSTM; rnnkit keeps
``kernel`` (F, G*H), ``recurrent_kernel`` (H, G*H) and ``bias`` (1, G*H) with columns in
``z, r, h`` (GRU) / ``i, f, g, o`` (LSTM) order. SimpleRNN and LSTM take
``bias = bias_ih + bias_hh``; GRU (``reset_after=True``) takes ``bias = [bias_ih; bias_hh]``.
"""

from __future__ import annotations

import numpy as np

#: torch module name and gate count per rnnkit cell (GRU here = reset_after=True)
TORCH_CELLS = {"SimpleRNN": ("RNN", 1), "LSTM": ("LSTM", 4), "GRU": ("GRU", 3)}


def gate_perm(cell: str, H: int) -> np.ndarray:
    """Row indices that reorder torch gate blocks into rnnkit's order (GRU: r,z,n -> z,r,n)."""
    if cell == "GRU":
        return np.concatenate([np.arange(H, 2 * H), np.arange(0, H), np.arange(2 * H, 3 * H)])
    return np.arange(TORCH_CELLS[cell][1] * H)


def to_ours(cell: str, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray,
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch parameters -> rnnkit (kernel, recurrent_kernel, bias)."""
    H = w_hh.shape[1]
    p = gate_perm(cell, H)
    kernel = np.ascontiguousarray(w_ih[p].T)
    rec = np.ascontiguousarray(w_hh[p].T)
    bias = np.stack([b_ih[p], b_hh[p]]) if cell == "GRU" else (b_ih + b_hh)[None, :]
    return kernel, rec, bias


def grads_to_torch(cell: str, d_kernel: np.ndarray, d_rec: np.ndarray, d_bias: np.ndarray,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """rnnkit gradients -> torch layout (d_w_ih, d_w_hh, d_b_ih, d_b_hh).

    For SimpleRNN and LSTM both torch biases enter as their sum, so each receives the gradient
    of rnnkit's single bias row."""
    H = d_rec.shape[0]
    inv = np.argsort(gate_perm(cell, H))
    dw_ih = d_kernel.T[inv]
    dw_hh = d_rec.T[inv]
    if cell == "GRU":
        return dw_ih, dw_hh, d_bias[0][inv], d_bias[1][inv]
    return dw_ih, dw_hh, d_bias[0][inv], d_bias[0][inv]


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def max_rel(a: np.ndarray, ref: np.ndarray) -> float:
    """``max|a - ref| / max|ref|``: the error relative to the reference array's magnitude."""
    scale = float(np.max(np.abs(np.asarray(ref, np.float64))))
    return max_abs(a, ref) / max(scale, 1e-30)


Run = tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]


def torch_run(cell: str, params: tuple[np.ndarray, ...], x: np.ndarray, G: np.ndarray,
              return_sequences: bool, go_backwards: bool, dtype: str = "float32",
              nonlinearity: str = "tanh") -> Run:
    """The torch oracle: (output, dL/dx, (d_w_ih, d_w_hh, d_b_ih, d_b_hh)) for
    ``L = sum(output * G)``. torch has no go_backwards: the input is flipped on the time axis
    with ``torch.flip`` inside the graph, so the outputs are in processing order and dL/dx is
    in input order, as rnnkit's are. Imports torch (only here)."""
    import torch

    tdt = getattr(torch, dtype)
    name, _ = TORCH_CELLS[cell]
    F, H = params[0].shape[1], params[1].shape[1]
    extra = {"nonlinearity": nonlinearity} if name == "RNN" else {}
    mod = getattr(torch.nn, name)(F, H, batch_first=True, **extra).to(tdt)
    with torch.no_grad():
        for p, v in zip((mod.weight_ih_l0, mod.weight_hh_l0, mod.bias_ih_l0, mod.bias_hh_l0),
                        params, strict=True):
            p.copy_(torch.from_numpy(np.asarray(v, dtype)))
    tx = torch.tensor(np.asarray(x, dtype), requires_grad=True)
    inp = torch.flip(tx, [1]) if go_backwards else tx
    out, _ = mod(inp)
    y = out if return_sequences else out[:, -1]
    (y * torch.from_numpy(np.asarray(G, dtype))).sum().backward()
    grads = tuple(p.grad.detach().numpy().copy() for p in
                  (mod.weight_ih_l0, mod.weight_hh_l0, mod.bias_ih_l0, mod.bias_hh_l0))
    return y.detach().numpy().copy(), tx.grad.detach().numpy().copy(), grads  # type: ignore[return-value]


def ours_run(cell: str, params: tuple[np.ndarray, ...], x: np.ndarray, G: np.ndarray,
             return_sequences: bool, go_backwards: bool, dtype: str = "float32",
             nonlinearity: str = "tanh") -> Run:
    """rnnkit with the torch parameters copied in; the same triple as :func:`torch_run`, with
    the weight gradients mapped to the torch layout."""
    import rnnkit as rk

    H = params[1].shape[1]
    kw = {"return_sequences": return_sequences, "go_backwards": go_backwards, "dtype": dtype}
    layer: rk.RecurrentLayer
    if cell == "GRU":
        layer = rk.GRU(H, reset_after=True, **kw)  # type: ignore[arg-type]
    else:
        layer = getattr(rk, cell)(H, nonlinearity if cell == "SimpleRNN" else "tanh", **kw)
    layer.set_weights(*to_ours(cell, *(np.asarray(p, dtype) for p in params)))
    ctx = rk.Ctx.training()
    y = layer.forward(np.asarray(x, dtype), ctx)
    dx = layer.backward(np.asarray(G, dtype), ctx)
    g = grads_to_torch(cell, ctx.grad(layer, "kernel"), ctx.grad(layer, "recurrent_kernel"),
                       ctx.grad(layer, "bias"))
    return y, dx, g


def random_params(cell: str, F: int, H: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """torch-layout parameters drawn U(-0.6, 0.6) (wider than torch's default so the gates
    leave their linear region)."""
    G = TORCH_CELLS[cell][1]
    shapes = ((G * H, F), (G * H, H), (G * H,), (G * H,))
    return tuple(rng.uniform(-0.6, 0.6, s) for s in shapes)
