"""Every gate reorder, transpose and bias fold between rnnkit's fused layout and PyTorch's.

PyTorch (``torch.nn.RNN`` / ``LSTM`` / ``GRU``, one layer and direction)::

    weight_ih (G*H, F)   weight_hh (G*H, S)   bias_ih (G*H,)   bias_hh (G*H,)   weight_hr (P, H)
    rnnkit kernel = reorder(weight_ih).T           (F, G*H)
           recurrent_kernel = reorder(weight_hh).T (S, G*H)     S = H, or P with a projection
           bias = (bias_ih + bias_hh)[None, :]      SimpleRNN / LSTM: one row, the sum
           bias = [reorder(bias_ih); reorder(bias_hh)]   GRU: two rows (reset_after=True);
                                                         SimpleRNN / LSTM with bias_layout="torch"
           projection_kernel = weight_hr.T         (H, P)  LSTM with proj_size only

``reorder``: the gate blocks of SimpleRNN (one) and LSTM (``i, f, g, o``) are in the same order
in both; GRU blocks are ``r, z, n`` in PyTorch and ``z, r, n`` here (swap the first two
H-blocks, an involution). PyTorch's GRU applies the reset gate after the recurrent matmul, which
is ``GRU(reset_after=True)`` here. PyTorch's LSTM and GRU use tanh and sigmoid gates, its RNN
tanh or relu. Exporting a one-row SimpleRNN / LSTM writes ``bias_ih = bias`` and ``bias_hh = 0``
(torch adds the two); the gradients of both PyTorch biases are then the gradient of the one row.
A two-row bias exports its rows. A
layer with ``use_bias=False`` corresponds to ``bias=False``.

ONNX (``LSTM`` / ``GRU`` / ``RNN`` operators, opset >= 14; one op per layer)::

    W (D, G*H, F) = onnx_reorder(kernel.T)          D = 1, or 2 for direction="bidirectional"
    R (D, G*H, H) = onnx_reorder(recurrent_kernel.T)
    B (D, 2*G*H)  = [Wb | Rb]: [bias row 0 | bias row 1] for a two-row bias (GRU with
                    reset_after, bias_layout="torch"), [bias | 0] otherwise (ONNX adds the
                    two); no B input with use_bias=False

ONNX's gate blocks are ``i, o, f, c`` for an LSTM (rnnkit: ``i, f, g, o``), ``z, r, h`` for a
GRU (the same as rnnkit's, with the same convention ``h = (1 - z) * n + z * h_prev``), one block
for the RNN. A GRU with ``reset_after=True`` is ``linear_before_reset=1``, ``False`` is ``0``
(the reset gate multiplies the state before the recurrent matmul; ``Rb`` is zero then, so its
place outside the reset does not matter). ``activations`` lists, per direction, the gate
activation then the candidate / output ones (LSTM ``[f, g, h]`` = ``[ra, act, act]``, GRU
``[f, g]`` = ``[ra, act]``, RNN ``[act]``); rnnkit's hard_sigmoid ``relu6(x + 3) / 6`` is ONNX
``HardSigmoid(alpha=1/6, beta=0.5)`` and linear is ``Affine(alpha=1, beta=0)``. ONNX's LSTM has
no projection (``proj_size``) and no softmax activation: both are refused.

Keras 3 (``kernel``, ``recurrent_kernel``, ``bias`` of ``layers/<group>/cell/vars/0..2``) uses
rnnkit's fused orders as they are: only the one-row bias is stored flat, ``(G*H,)``; a GRU's
``reset_after`` bias stays ``(2, 3H)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._kind import builtin_kind, describe_cell

#: ONNX operator per rnnkit cell kind
ONNX_OP = {"SimpleRNN": "RNN", "LSTM": "LSTM", "GRU": "GRU"}
#: ONNX gate block k is rnnkit block ONNX_ORDER[kind][k] (LSTM: i, o, f, c <- i, f, g, o)
ONNX_ORDER = {"SimpleRNN": (0,), "LSTM": (0, 3, 1, 2), "GRU": (0, 1, 2)}
#: rnnkit activation -> (ONNX activation, alpha, beta); None where the ONNX op takes no parameter
ONNX_ACTIVATIONS: dict[str, tuple[str, float | None, float | None]] = {
    "tanh": ("Tanh", None, None), "sigmoid": ("Sigmoid", None, None), "relu": ("Relu", None, None),
    "hard_sigmoid": ("HardSigmoid", 1.0 / 6.0, 0.5), "linear": ("Affine", 1.0, 0.0)}
#: PyTorch module per rnnkit cell kind
TORCH_MODULE = {"SimpleRNN": "RNN", "LSTM": "LSTM", "GRU": "GRU"}
#: PyTorch gate block k of each kind goes to rnnkit block ORDER[kind][k] (and back: involutions)
ORDER = {"SimpleRNN": (0,), "LSTM": (0, 1, 2, 3), "GRU": (1, 0, 2)}


def cell_kind(cell: Any, where: str) -> str:
    """``"SimpleRNN"``, ``"LSTM"`` or ``"GRU"``: the kind ``cell``'s class declares
    (:func:`rnnkit._kind.builtin_kind`); InvalidInputError for any other cell, a subclass of a
    built-in cell that does not declare a kind of its own included."""
    kind = builtin_kind(cell)
    if kind is None:
        raise InvalidInputError(
            f"{where}: expected a SimpleRNN, LSTM or GRU cell, got {describe_cell(cell)}")
    return kind


def reorder(a: np.ndarray, kind: str, H: int, axis: int = 0) -> np.ndarray:
    """Permute the gate blocks of ``a`` along ``axis`` between PyTorch's and rnnkit's order: ``a``
    itself when the order is the same, else a new array in ``a``'s memory order (C or Fortran),
    so a transposed matrix is permuted without being transposed too."""
    order = ORDER[kind]
    if order == tuple(range(len(order))):
        return a
    def block(k: int, arr: np.ndarray) -> tuple[slice, ...]:
        at: list[slice] = [slice(None)] * arr.ndim
        at[axis] = slice(k * H, (k + 1) * H)
        return tuple(at)
    out = np.empty_like(a)   # a's memory order kept: a transposed (Fortran-order) matrix stays one
    for j, k in enumerate(order):
        out[block(j, out)] = a[block(k, a)]
    return out


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


#: the rnnkit weight that each PyTorch parameter (name without the layer suffix) goes into
RK_WEIGHT_OF = {"weight_ih": "kernel", "weight_hh": "recurrent_kernel", "bias_ih": "bias", "bias_hh": "bias",
                "weight_hr": "projection_kernel"}


def from_torch(cell: Any, t: Mapping[str, np.ndarray], dtype: np.dtype) -> dict[str, np.ndarray]:
    """rnnkit weights ``{kernel, recurrent_kernel[, bias][, projection_kernel]}`` from PyTorch's
    ``{weight_ih, weight_hh[, bias_ih, bias_hh][, weight_hr]}`` (names without the layer suffix;
    shapes are checked by the caller), in the arrays' own dtype (``dtype``: that of a missing
    bias's zeros): the layer's ``set_weights`` casts them to its dtype, refusing a value the cast
    would make Inf. Each is :func:`from_torch_weight`'s."""
    names = ["kernel", "recurrent_kernel", *(["bias"] if cell.use_bias else []),
             *(["projection_kernel"] if getattr(cell, "proj_size", 0) else [])]
    return {n: from_torch_weight(cell, n, t, dtype) for n in names}


def from_torch_weight(cell: Any, name: str, t: Mapping[str, np.ndarray], dtype: np.dtype) -> np.ndarray:
    """The rnnkit weight ``name`` of ``cell`` from the PyTorch parameters it is made of (``t``,
    as :func:`from_torch` takes them; only those read: ``kernel`` reads ``weight_ih``, ``bias``
    the two biases ...), uncast (a view where no arithmetic is needed)."""
    kind = cell_kind(cell, "from_torch")
    H = cell.units
    if name == "kernel":
        return np.asarray(reorder(t["weight_ih"], kind, H).T)
    if name == "recurrent_kernel":
        return np.asarray(reorder(t["weight_hh"], kind, H).T)
    if name == "projection_kernel":
        return np.asarray(t["weight_hr"]).T
    GH = len(ORDER[kind]) * H
    b_ih = reorder(t["bias_ih"], kind, H) if "bias_ih" in t else np.zeros(GH, dtype)
    b_hh = reorder(t["bias_hh"], kind, H) if "bias_hh" in t else np.zeros(GH, dtype)
    if kind == "GRU" or cell.bias_rows == 2:   # reset_after, or bias_layout="torch"
        return np.stack([b_ih, b_hh])
    return (np.asarray(b_ih, np.float64) + np.asarray(b_hh, np.float64))[None, :]


def _to_torch_layout(cell: Any, w: Mapping[str, np.ndarray], where: str,
                     bias_hh: Any) -> dict[str, np.ndarray]:
    """rnnkit arrays of ``cell`` (weights or their gradients) in PyTorch's names and layout;
    ``bias_hh(row0)`` gives PyTorch's ``bias_hh`` of a one-row (SimpleRNN/LSTM) bias; a two-row
    bias gives its rows."""
    kind = cell_kind(cell, where)
    H = cell.units
    out = {"weight_ih": reorder(w["kernel"].T, kind, H),
           "weight_hh": reorder(w["recurrent_kernel"].T, kind, H)}
    if cell.use_bias:
        b = w["bias"]
        out["bias_ih"] = reorder(b[0], kind, H)
        out["bias_hh"] = reorder(b[1], kind, H) if b.shape[0] == 2 else bias_hh(b[0])
    if getattr(cell, "proj_size", 0):
        out["weight_hr"] = w["projection_kernel"].T
    return out


def to_torch(cell: Any, w: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """PyTorch's ``{weight_ih, weight_hh[, bias_ih, bias_hh][, weight_hr]}`` (new C-contiguous
    arrays) from the rnnkit weights ``w`` of ``cell`` (a summed bias goes to ``bias_ih``,
    ``bias_hh`` is zero)."""
    out = _to_torch_layout(cell, w, "to_torch", np.zeros_like)
    return {k: v.copy() for k, v in out.items()}


def grads_to_torch(cell: Any, g: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The gradients of PyTorch's parameters from those of the rnnkit weights (a summed bias
    passes its gradient to both PyTorch biases: ``bias_hh`` is then a copy of the row, so no two
    results share memory; a result may be a view of an array of ``g``: a matrix's is its
    transpose, Fortran-ordered, copied only to permute GRU gate blocks)."""
    return _to_torch_layout(cell, g, "grads_to_torch", np.copy)


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


# -- ONNX ----------------------------------------------------------------------------------------
def _permute(a: np.ndarray, order: tuple[int, ...], H: int, axis: int = 0) -> np.ndarray:
    def block(k: int) -> np.ndarray:   # a view: the one copy is the concatenation's
        at: list[slice] = [slice(None)] * a.ndim
        at[axis] = slice(k * H, (k + 1) * H)
        return a[tuple(at)]
    return np.concatenate([block(k) for k in order], axis=axis)


def onnx_activations(cell: Any, where: str) -> tuple[list[str], list[float], list[float]]:
    """``(activations, activation_alpha, activation_beta)`` of one direction of ``cell``'s ONNX
    op; the parameters are listed in the order of the activations that take them."""
    kind = cell_kind(cell, where)
    fns = [cell.activation] if kind == "SimpleRNN" else [cell.recurrent_activation, cell.activation]
    if kind == "LSTM":
        fns.append(cell.activation)
    names: list[str] = []
    alpha: list[float] = []
    beta: list[float] = []
    for fn in fns:
        if fn.name not in ONNX_ACTIVATIONS:
            raise InvalidParameterError(
                f"{where}: ONNX's {ONNX_OP[kind]} takes the activations "
                f"{', '.join(ONNX_ACTIVATIONS)}; this {kind} has {fn.name!r}, which it cannot express")
        op, a, b = ONNX_ACTIVATIONS[fn.name]
        names.append(op)
        if a is not None:
            alpha.append(a)
        if b is not None:
            beta.append(b)
    return names, alpha, beta


def check_onnx_compatible(cell: Any, where: str) -> str:
    """The cell's kind, after checking that an ONNX operator computes exactly what it does."""
    kind = cell_kind(cell, where)
    if getattr(cell, "proj_size", 0):
        raise InvalidParameterError(
            f"{where}: ONNX's LSTM has no projection; this LSTM has proj_size={cell.proj_size}")
    onnx_activations(cell, where)
    return kind


def to_onnx(cell: Any, w: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(W (G*H, F), R (G*H, H), B (2*G*H,) or None)`` of ONE direction of an ONNX op from the
    rnnkit weights ``w`` of ``cell`` (stack directions on a new axis 0)."""
    kind = check_onnx_compatible(cell, "to_onnx")
    H, order = cell.units, ONNX_ORDER[kind]
    W = _permute(np.asarray(w["kernel"]).T, order, H)
    R = _permute(np.asarray(w["recurrent_kernel"]).T, order, H)
    B = None
    if cell.use_bias:
        bias = np.asarray(w["bias"])
        rb = bias[1] if bias.shape[0] == 2 else np.zeros_like(bias[0])
        B = np.concatenate([_permute(bias[0], order, H), _permute(rb, order, H)])
    return (np.ascontiguousarray(W), np.ascontiguousarray(R), B)


# -- Keras ---------------------------------------------------------------------------------------
def to_keras(cell: Any, w: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The Keras 3 cell variables ``[kernel, recurrent_kernel(, bias)]`` (``cell/vars/0..``) from
    rnnkit weights: the orders are Keras' already; a one-row bias is stored flat."""
    out = [np.array(w["kernel"]), np.array(w["recurrent_kernel"])]
    if cell.use_bias:
        b = np.array(w["bias"])
        if b.shape[0] == 2 and not getattr(cell, "reset_after", False):
            b = b.sum(axis=0, keepdims=True)   # PyTorch's two biases (bias_layout="torch"): Keras' one
        out.append(b.reshape(-1) if b.shape[0] == 1 else b)
    return out
