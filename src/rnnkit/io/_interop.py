"""Weights of ONE recurrent layer to and from PyTorch and Keras.

PyTorch (``torch.nn.RNN`` / ``LSTM`` / ``GRU``, layer ``k`` -> ``suffix="_l{k}"``): the
transposes, the GRU gate reorder (``r, z, n`` there, ``z, r, n`` here) and the bias fold are
those of :mod:`rnnkit._layouts` (the one module that does them). PyTorch's GRU is
``GRU(reset_after=True)`` here; importing into or exporting from a ``reset_after=False`` GRU
raises InvalidParameterError, as does an activation or gate activation PyTorch does not have.
A state dict without biases (``bias=False``) imports into a layer with a bias as a zero bias,
and into a ``use_bias=False`` layer as it is. An LSTM with ``proj_size`` has ``weight_hr``.

Keras (``layer.get_weights()`` = ``[kernel, recurrent_kernel, bias]``): kernel and recurrent
kernel as they are (same gate orders); bias ``(G*H,)`` reshaped to ``(1, G*H)``, a GRU
``reset_after=True`` bias ``(2, 3H)`` kept; two arrays come from ``use_bias=False``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError, WeightShapeError
from rnnkit._kind import builtin_kind, describe_cell
from rnnkit._layouts import check_torch_compatible, from_torch, to_torch, torch_shapes
from rnnkit._validate import weight_problem
from rnnkit.recurrent import RecurrentLayer
from rnnkit.recurrent._weights import keras_bias


def _check_finite(arrays: Mapping[str, Any], where: str, dtype: np.dtype) -> dict[str, np.ndarray]:
    """The arrays cast to ``dtype`` (the layer's); InvalidInputError naming the first weight
    holding NaN or Inf, or a finite value the cast would make Inf, with its value and position
    (nothing is installed)."""
    out: dict[str, np.ndarray] = {}
    for name, a in arrays.items():
        cast, problem = weight_problem(np.asarray(a), dtype)
        if problem is not None:
            raise InvalidInputError(f"{where}: {name} {problem.removeprefix('the weight ')} "
                                    f"(nothing was loaded)")
        out[name] = cast
    return out


def _kind(layer: Any, where: str) -> str:
    """The built-in kind of ``layer``'s cell (:func:`rnnkit._kind.builtin_kind`), the same for
    ``rk.LSTM(...)`` and ``RecurrentLayer(LSTMCell(...))``; InvalidInputError naming the layer
    for anything else (a cell subclass that declares no kind of its own included)."""
    kind = builtin_kind(getattr(layer, "cell", None))
    if kind is None:
        what = describe_cell(layer.cell) if isinstance(layer, RecurrentLayer) else type(layer).__name__
        raise InvalidInputError(f"{where}: expected a SimpleRNN, LSTM or GRU layer, got layer "
                                f"{getattr(layer, 'name', '?')!r} with {what}")
    return kind


def _to_numpy(v: Any) -> np.ndarray:
    if hasattr(v, "detach"):  # a torch tensor (torch itself is never imported here)
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def from_torch_state(layer: RecurrentLayer, state_dict: Mapping[str, Any], suffix: str = "_l0", *,
                     prefix: str = "") -> None:
    """Install the PyTorch weights ``{prefix}weight_ih{suffix}`` ... into ``layer`` (built from
    ``weight_ih``'s width if unbuilt). Every name and shape is checked before anything changes:
    WeightShapeError lists each missing or mis-shaped name. See the module doc for the layout.
    Into a SimpleRNN / LSTM with one bias row (``bias_layout="fused"``, the default) the two
    PyTorch biases are summed, with a UserWarning that training then differs from PyTorch's;
    ``bias_layout="torch"`` keeps both as the bias rows."""
    where = "from_torch_state"
    kind = _kind(layer, where)
    cell = layer.cell
    check_torch_compatible(cell, where)
    keys = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
    names = {k: f"{prefix}{k}{suffix}" for k in keys}
    arrs = {k: _to_numpy(state_dict[n]) for k, n in names.items() if n in state_dict}
    F = layer.input_dim if layer.built else None
    if F is None and "weight_ih" in arrs and arrs["weight_ih"].ndim == 2 and arrs["weight_ih"].shape[1] >= 1:
        F = int(arrs["weight_ih"].shape[1])
    want = torch_shapes(cell, F if F is not None else "input_dim")
    has_bias = "bias_ih" in arrs or "bias_hh" in arrs
    need = [k for k in want if k not in ("bias_ih", "bias_hh")] + (["bias_ih", "bias_hh"] if has_bias else [])
    problems: list[tuple[str, Any, Any]] = []
    if has_bias and not layer.cell.use_bias:  # type: ignore[attr-defined]
        problems.append((names["bias_ih"], "absent (the layer has use_bias=False)", arrs.get("bias_ih", "-")))
    for k in need:
        if k not in want:
            continue
        if k not in arrs:
            problems.append((names[k], want[k], "missing"))
        elif arrs[k].shape != want[k]:
            problems.append((names[k], want[k], arrs[k].shape))
    if problems:
        listing = "; ".join(f"{n!r}: expected {e}, got {getattr(g, 'shape', g)}" for n, e, g in problems)
        near = sorted(k for k in state_dict if k.endswith(suffix))
        raise WeightShapeError(problems[0][0], problems[0][1], problems[0][2],
                               f"{where} into {kind}(units={layer.units}): {listing}; names ending "
                               f"{suffix!r} in the state dict: {near}")
    layer.set_weights(**_check_finite(from_torch(cell, arrs, layer.dtype), "from_torch_state", layer.dtype))
    if has_bias and kind != "GRU" and cell.bias_rows == 1:  # type: ignore[attr-defined]
        warnings.warn(
            f"{where}: PyTorch's bias_ih and bias_hh are summed into this {kind}'s one bias row: "
            f"the outputs are PyTorch's, the training is not (PyTorch's optimizer moves each of "
            f"the two biases, so their sum moves differently); build {kind}(..., "
            f"bias_layout='torch') to keep both", UserWarning, stacklevel=2)


def to_torch_state(layer: RecurrentLayer, suffix: str = "_l0") -> dict[str, np.ndarray]:
    """``{"weight_ih_l0": ..., "weight_hh_l0": ..., "bias_ih_l0": ..., "bias_hh_l0": ...}`` (new
    arrays in the layer's dtype; ``weight_hr_l0`` for a projected LSTM, no biases for
    ``use_bias=False``) that ``torch.nn.RNN/LSTM/GRU.load_state_dict`` accepts (convert with
    ``torch.from_numpy``); the torch module then computes this layer's outputs."""
    where = "to_torch_state"
    _kind(layer, where)
    check_torch_compatible(layer.cell, where)
    layer._require_built(where)
    w = {e.name: e.value for e in layer.weights()}
    return {k + suffix: v for k, v in to_torch(layer.cell, w).items()}


def from_keras_weights(layer: RecurrentLayer, weights: Sequence[Any]) -> None:
    """Install a Keras ``SimpleRNN/LSTM/GRU.get_weights()`` list ``[kernel, recurrent_kernel,
    bias]`` (``[kernel, recurrent_kernel]`` for a Keras layer with ``use_bias=False``: into a
    layer with a bias that is an exact zero bias; a ``use_bias=False`` layer takes exactly two
    arrays). The bias ``(G*H,)`` is reshaped to ``(1, G*H)``; a
    ``(2, 3H)`` bias (Keras GRU ``reset_after=True``, its default) needs
    ``GRU(reset_after=True)`` here, a ``(3H,)`` one ``reset_after=False``; into a layer with
    ``bias_layout="torch"`` Keras' bias becomes row 0 and row 1 is zero."""
    where = "from_keras_weights"
    kind = _kind(layer, where)
    want = 3 if layer.cell.use_bias else 2  # type: ignore[attr-defined]
    if want == 3 and len(weights) == 2:
        rows, GH = layer.cell.bias_rows, layer.cell.gate_width  # type: ignore[attr-defined]
        weights = [*weights, np.zeros((rows, GH) if rows == 2 else (GH,))]
    if len(weights) != want:
        raise InvalidInputError(
            f"{where}: expected {want} arrays ([kernel, recurrent_kernel{', bias' if want == 3 else ''}]"
            f"{'' if want == 3 else ': this layer has use_bias=False'}), got {len(weights)} arrays")
    arrays = [_to_numpy(a) for a in weights]
    if want == 3:
        GH, rows = layer.cell.gate_width, layer.cell.bias_rows  # type: ignore[attr-defined]
        bias = arrays[2]
        if kind == "GRU" and bias.shape in ((2, GH), (GH,)) and (bias.ndim == 2) != (rows == 2):
            need = "reset_after=True" if bias.ndim == 2 else "reset_after=False"
            raise InvalidParameterError(
                f"{where}: a Keras GRU bias of shape {bias.shape} comes from a Keras GRU with {need}; "
                f"this GRU has reset_after={rows == 2}; build GRU(..., {need})"
            )
        if rows == 1:
            arrays[2] = keras_bias("bias", bias, (1, GH))
        elif kind != "GRU" and rows == 2 and bias.shape == (GH,):   # bias_layout="torch"
            arrays[2] = np.stack([bias, np.zeros_like(bias)])
    names = ("kernel", "recurrent_kernel", "bias")
    layer.set_weights(*_check_finite(dict(zip(names, arrays, strict=False)), "from_keras_weights",
                                     layer.dtype).values())


def to_keras_weights(layer: RecurrentLayer) -> list[np.ndarray]:
    """``[kernel, recurrent_kernel, bias]`` (copies; no bias for ``use_bias=False``) for a Keras
    layer's ``set_weights``: bias ``(G*H,)`` (the sum of the rows with ``bias_layout="torch"``),
    or ``(2, 3H)`` for ``GRU(reset_after=True)`` (build the Keras GRU alike)."""
    _kind(layer, "to_keras_weights")
    layer._require_built("to_keras_weights")
    if getattr(layer.cell, "proj_size", 0):
        raise InvalidParameterError("to_keras_weights: Keras' LSTM has no projection (proj_size)")
    out = [np.array(layer.weight("kernel")), np.array(layer.weight("recurrent_kernel"))]
    if layer.cell.use_bias:  # type: ignore[attr-defined]
        bias = np.array(layer.weight("bias"))
        if getattr(layer.cell, "bias_layout", "fused") == "torch":
            bias = bias.sum(axis=0, keepdims=True)   # PyTorch's two biases: Keras' one is their sum
        out.append(bias.reshape(-1) if bias.shape[0] == 1 else bias)
    return out
