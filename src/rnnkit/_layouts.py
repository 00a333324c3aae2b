"""Every gate reorder, transpose and bias fold between rnnkit's fused layout and PyTorch's.

PyTorch (``torch.nn.RNN`` / ``LSTM`` / ``GRU``, one layer and direction)::

    weight_ih (G*H, F)   weight_hh (G*H, S)   bias_ih (G*H,)   bias_hh (G*H,)   weight_hr (P, H)
    rnnkit kernel = reorder(weight_ih).T           (F, G*H)
           recurrent_kernel = reorder(weight_hh).T (S, G*H)     S = H, or P with a projection
           bias = (bias_ih + bias_hh)[None, :]      SimpleRNN / LSTM: one row, the sum
           bias = [reorder(bias_ih); reorder(bias_hh)]   GRU: two rows (reset_after=True)
           projection_kernel = weight_hr.T         (H, P)  LSTM with proj_size only

``reorder``: the gate blocks of SimpleRNN (one) and LSTM (``i, f, g, o``) are in the same order
in both; GRU blocks are ``r, z, n`` in PyTorch and ``z, r, n`` here (swap the first two
H-blocks, an involution). PyTorch's GRU applies the reset gate after the recurrent matmul, which
is ``GRU(reset_after=True)`` here. PyTorch's LSTM and GRU use tanh and sigmoid gates, its RNN
tanh or relu. Exporting a SimpleRNN / LSTM writes ``bias_ih = bias`` and ``bias_hh = 0`` (torch
adds the two); the gradients of both PyTorch biases are then the gradient of the one row. A
layer with ``use_bias=False`` corresponds to ``bias=False``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError

#: PyTorch module per rnnkit cell kind
TORCH_MODULE = {"SimpleRNN": "RNN", "LSTM": "LSTM", "GRU": "GRU"}
#: PyTorch gate block k of each kind goes to rnnkit block ORDER[kind][k] (and back: involutions)
ORDER = {"SimpleRNN": (0,), "LSTM": (0, 1, 2, 3), "GRU": (1, 0, 2)}


def cell_kind(cell: Any, where: str) -> str:
    """``"SimpleRNN"``, ``"LSTM"`` or ``"GRU"`` for a built-in cell (InvalidInputError otherwise)."""
    from rnnkit.recurrent import GRUCell, LSTMCell, SimpleRNNCell

    for cls, name in ((LSTMCell, "LSTM"), (GRUCell, "GRU"), (SimpleRNNCell, "SimpleRNN")):
        if type(cell) is cls or (cls is GRUCell and isinstance(cell, GRUCell)):
            return name
    raise InvalidInputError(
        f"{where}: expected a SimpleRNN, LSTM or GRU (a built-in cell), got {type(cell).__name__}")


def reorder(a: np.ndarray, kind: str, H: int, axis: int = 0) -> np.ndarray:
    """Permute the gate blocks of ``a`` along ``axis`` between PyTorch's and rnnkit's order."""
    order = ORDER[kind]
    if order == tuple(range(len(order))):
        return a
    blocks = [np.take(a, range(k * H, (k + 1) * H), axis=axis) for k in range(len(order))]
    return np.concatenate([blocks[k] for k in order], axis=axis)


def check_torch_compatible(cell: Any, where: str) -> str:
    """The cell's kind, after checking that PyTorch has a module computing exactly what it does."""
    kind = cell_kind(cell, where)
    if kind == "GRU" and not cell.reset_after:
        raise InvalidParameterError(
            f"{where}: PyTorch's GRU applies the reset gate after the recurrent matmul; its weights "
            f"need GRU(..., reset_after=True), this layer has reset_after=False")
    allowed = ("tanh", "relu") if kind == "SimpleRNN" else ("tanh",)
    if cell.activation.name not in allowed:
        raise InvalidParameterError(
            f"{where}: torch.nn.{TORCH_MODULE[kind]} uses {' or '.join(allowed)}; this {kind} has "
            f"activation {cell.activation.name!r}, so the outputs would differ")
    rec = getattr(cell, "recurrent_activation", None)
    if rec is not None and rec.name != "sigmoid":
        raise InvalidParameterError(
            f"{where}: torch.nn.{TORCH_MODULE[kind]} gates are sigmoid; this {kind} has "
            f"recurrent_activation {rec.name!r}, so the outputs would differ")
    return kind


def from_torch(cell: Any, t: Mapping[str, np.ndarray], dtype: np.dtype) -> dict[str, np.ndarray]:
    """rnnkit weights ``{kernel, recurrent_kernel[, bias][, projection_kernel]}`` from PyTorch's
    ``{weight_ih, weight_hh[, bias_ih, bias_hh][, weight_hr]}`` (names without the layer suffix;
    shapes are checked by the caller)."""
    kind = cell_kind(cell, "from_torch")
    H = cell.units
    out = {"kernel": reorder(t["weight_ih"], kind, H).T,
           "recurrent_kernel": reorder(t["weight_hh"], kind, H).T}
    if cell.use_bias:
        GH = len(ORDER[kind]) * H
        b_ih = reorder(t["bias_ih"], kind, H) if "bias_ih" in t else np.zeros(GH, dtype)
        b_hh = reorder(t["bias_hh"], kind, H) if "bias_hh" in t else np.zeros(GH, dtype)
        if kind == "GRU":
            out["bias"] = np.stack([b_ih, b_hh])
        else:
            out["bias"] = (np.asarray(b_ih, np.float64) + np.asarray(b_hh, np.float64))[None, :]
    if getattr(cell, "proj_size", 0):
        out["projection_kernel"] = np.asarray(t["weight_hr"]).T
    return {k: np.asarray(v).astype(dtype) for k, v in out.items()}


def to_torch(cell: Any, w: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """PyTorch's ``{weight_ih, weight_hh[, bias_ih, bias_hh][, weight_hr]}`` (new contiguous
    arrays) from the rnnkit weights ``w`` of ``cell``."""
    kind = cell_kind(cell, "to_torch")
    H = cell.units
    out = {"weight_ih": reorder(w["kernel"].T, kind, H),
           "weight_hh": reorder(w["recurrent_kernel"].T, kind, H)}
    if cell.use_bias:
        bias = w["bias"]
        if kind == "GRU":
            out["bias_ih"], out["bias_hh"] = reorder(bias[0], kind, H), reorder(bias[1], kind, H)
        else:
            out["bias_ih"], out["bias_hh"] = bias[0], np.zeros_like(bias[0])
    if getattr(cell, "proj_size", 0):
        out["weight_hr"] = w["projection_kernel"].T
    return {k: np.ascontiguousarray(v).copy() for k, v in out.items()}


def grads_to_torch(cell: Any, g: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The gradients of PyTorch's parameters from those of the rnnkit weights (a summed bias
    passes its gradient to both PyTorch biases)."""
    kind = cell_kind(cell, "grads_to_torch")
    H = cell.units
    out = {"weight_ih": reorder(g["kernel"].T, kind, H),
           "weight_hh": reorder(g["recurrent_kernel"].T, kind, H)}
    if cell.use_bias:
        db = g["bias"]
        out["bias_ih"] = reorder(db[0], kind, H)
        out["bias_hh"] = reorder(db[-1], kind, H)
    if getattr(cell, "proj_size", 0):
        out["weight_hr"] = g["projection_kernel"].T
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def torch_shapes(cell: Any, in_dim: int | str) -> dict[str, tuple[Any, ...]]:
    """The PyTorch parameter shapes for ``cell`` fed ``in_dim`` features."""
    kind = cell_kind(cell, "torch_shapes")
    H, G = cell.units, len(ORDER[kind])
    P = getattr(cell, "proj_size", 0)
    out: dict[str, tuple[Any, ...]] = {"weight_ih": (G * H, in_dim), "weight_hh": (G * H, P or H)}
    if cell.use_bias:
        out["bias_ih"] = out["bias_hh"] = (G * H,)
    if P:
        out["weight_hr"] = (P, H)
    return out
