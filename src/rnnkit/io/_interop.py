"""Weights of ONE recurrent layer to and from PyTorch and Keras (DESIGN.md §4).

PyTorch (``torch.nn.RNN`` / ``LSTM`` / ``GRU``, layer ``k`` -> ``suffix="_l{k}"``)::

    weight_ih (G*H, F)   weight_hh (G*H, H)   bias_ih (G*H,)   bias_hh (G*H,)
    rnnkit kernel = reorder(weight_ih).T          (F, G*H)
           recurrent_kernel = reorder(weight_hh).T (H, G*H)
           bias = (bias_ih + bias_hh)[None, :]     SimpleRNN / LSTM: one row, the sum
           bias = [reorder(bias_ih); reorder(bias_hh)]   GRU: two rows (reset_after=True)

``reorder``: LSTM blocks ``i, f, g, o`` are the same in both; GRU blocks are ``r, z, n`` in
PyTorch and ``z, r, n`` here (swap the first two H-blocks). PyTorch's GRU applies the reset gate
after the recurrent matmul, which is ``GRU(reset_after=True)`` here: importing into or exporting
from a ``reset_after=False`` GRU raises InvalidParameterError. PyTorch's LSTM and GRU use tanh,
its RNN tanh or relu; another activation raises too. Export writes ``bias_ih = bias`` and
``bias_hh = 0`` for SimpleRNN / LSTM (torch adds the two). A state dict without biases
(``bias=False``) imports as a zero bias.

Keras (``layer.get_weights()`` = ``[kernel, recurrent_kernel, bias]``): kernel and recurrent
kernel as they are (same gate orders); bias ``(G*H,)`` reshaped to ``(1, G*H)``, a GRU
``reset_after=True`` bias ``(2, 3H)`` kept; two arrays (``use_bias=False``) give a zero bias.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rnnkit._activations import Activation
from rnnkit._errors import InvalidInputError, InvalidParameterError, WeightShapeError
from rnnkit.recurrent import GRU, LSTM, RecurrentLayer, SimpleRNN


def _check_finite(arrays: Mapping[str, Any], where: str) -> None:
    """InvalidInputError naming the first weight holding NaN or Inf (nothing is installed)."""
    for name, a in arrays.items():
        arr = np.asarray(a)
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            pos = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
            raise InvalidInputError(f"{where}: {name} holds {arr[pos]} at {pos}; expected finite numbers "
                                    f"(nothing was loaded)")


def _kind(layer: Any, where: str) -> str:
    for cls, name in ((LSTM, "LSTM"), (GRU, "GRU"), (SimpleRNN, "SimpleRNN")):
        if isinstance(layer, cls):
            return name
    raise InvalidInputError(f"{where}: expected a SimpleRNN, LSTM or GRU layer, got {type(layer).__name__}")


def _check_torch_compatible(layer: RecurrentLayer, kind: str, where: str) -> None:
    if kind == "GRU" and not getattr(layer, "reset_after", False):
        raise InvalidParameterError(
            f"{where}: PyTorch's GRU applies the reset gate after the recurrent matmul; its weights "
            f"need GRU(..., reset_after=True), this layer has reset_after=False"
        )
    allowed = (Activation.TANH, Activation.RELU) if kind == "SimpleRNN" else (Activation.TANH,)
    if layer.activation.kind not in allowed:
        torch_name = {"SimpleRNN": "RNN", "LSTM": "LSTM", "GRU": "GRU"}[kind]
        raise InvalidParameterError(
            f"{where}: torch.nn.{torch_name} uses {' or '.join(a.value for a in allowed)}; this "
            f"{kind} has activation {layer.activation.name!r}, so the outputs would differ"
        )


def _reorder(a: np.ndarray, kind: str, H: int) -> np.ndarray:
    """PyTorch GRU ``[r|z|n]`` <-> rnnkit ``[z|r|n]`` along axis 0 (an involution)."""
    if kind != "GRU":
        return a
    return np.concatenate([a[H:2 * H], a[:H], a[2 * H:]], axis=0)


def _to_numpy(v: Any) -> np.ndarray:
    if hasattr(v, "detach"):  # a torch tensor (torch itself is never imported here)
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def from_torch_state(layer: RecurrentLayer, state_dict: Mapping[str, Any], suffix: str = "_l0", *,
                     prefix: str = "") -> None:
    """Install the PyTorch weights ``{prefix}weight_ih{suffix}`` ... into ``layer`` (built from
    ``weight_ih``'s width if unbuilt). Every name and shape is checked before anything changes:
    WeightShapeError lists each missing or mis-shaped name. See the module doc for the layout."""
    where = "from_torch_state"
    kind = _kind(layer, where)
    _check_torch_compatible(layer, kind, where)
    H, G = layer.units, layer.cell.gates
    names = {k: f"{prefix}{k}{suffix}" for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    arrs = {k: _to_numpy(state_dict[n]) for k, n in names.items() if n in state_dict}
    F = layer.input_dim if layer.built else None
    if F is None and "weight_ih" in arrs and arrs["weight_ih"].ndim == 2 and arrs["weight_ih"].shape[1] >= 1:
        F = int(arrs["weight_ih"].shape[1])
    want = {"weight_ih": (G * H, F if F is not None else "input_dim"), "weight_hh": (G * H, H),
            "bias_ih": (G * H,), "bias_hh": (G * H,)}
    has_bias = "bias_ih" in arrs or "bias_hh" in arrs
    problems: list[tuple[str, Any, Any]] = []
    for k in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if has_bias else ()):
        if k not in arrs:
            problems.append((names[k], want[k], "missing"))
        elif arrs[k].shape != want[k]:
            problems.append((names[k], want[k], arrs[k].shape))
    if problems:
        listing = "; ".join(f"{n!r}: expected {e}, got {g}" for n, e, g in problems)
        near = sorted(k for k in state_dict if k.endswith(suffix))
        raise WeightShapeError(problems[0][0], problems[0][1], problems[0][2],
                               f"{where} into {kind}(units={H}): {listing}; names ending {suffix!r} "
                               f"in the state dict: {near}")
    kernel = _reorder(arrs["weight_ih"], kind, H).T
    rec = _reorder(arrs["weight_hh"], kind, H).T
    if has_bias:
        b_ih, b_hh = _reorder(arrs["bias_ih"], kind, H), _reorder(arrs["bias_hh"], kind, H)
    else:
        b_ih = b_hh = np.zeros(G * H, layer.dtype)
    if kind == "GRU":
        bias = np.stack([b_ih, b_hh])
    else:
        bias = (b_ih.astype(np.float64) + b_hh.astype(np.float64))[None, :]
    _check_finite({"kernel": kernel, "recurrent_kernel": rec, "bias": bias}, "from_torch_state")
    layer.set_weights(kernel, rec, bias)


def to_torch_state(layer: RecurrentLayer, suffix: str = "_l0") -> dict[str, np.ndarray]:
    """``{"weight_ih_l0": ..., "weight_hh_l0": ..., "bias_ih_l0": ..., "bias_hh_l0": ...}`` (new
    arrays in the layer's dtype) that ``torch.nn.RNN/LSTM/GRU.load_state_dict`` accepts (convert
    with ``torch.from_numpy``); the torch module then computes this layer's outputs."""
    where = "to_torch_state"
    kind = _kind(layer, where)
    _check_torch_compatible(layer, kind, where)
    layer._require_built(where)
    H = layer.units
    kernel, rec, bias = (layer.weight(n) for n in ("kernel", "recurrent_kernel", "bias"))
    out = {"weight_ih": _reorder(kernel.T, kind, H), "weight_hh": _reorder(rec.T, kind, H)}
    if kind == "GRU":
        out["bias_ih"], out["bias_hh"] = _reorder(bias[0], kind, H), _reorder(bias[1], kind, H)
    else:
        out["bias_ih"], out["bias_hh"] = bias[0], np.zeros_like(bias[0])
    return {k + suffix: np.ascontiguousarray(v).copy() for k, v in out.items()}


def from_keras_weights(layer: RecurrentLayer, weights: Sequence[Any]) -> None:
    """Install a Keras ``SimpleRNN/LSTM/GRU.get_weights()`` list ``[kernel, recurrent_kernel,
    bias]`` (or ``[kernel, recurrent_kernel]`` for ``use_bias=False``). The bias ``(G*H,)`` is
    reshaped to ``(1, G*H)``; a ``(2, 3H)`` bias (Keras GRU ``reset_after=True``, its default)
    needs ``GRU(reset_after=True)`` here, a ``(3H,)`` one ``reset_after=False``."""
    where = "from_keras_weights"
    kind = _kind(layer, where)
    if len(weights) not in (2, 3):
        raise InvalidInputError(f"{where}: expected [kernel, recurrent_kernel, bias] (or 2 arrays "
                                f"without bias), got {len(weights)} arrays")
    kernel, rec = _to_numpy(weights[0]), _to_numpy(weights[1])
    GH = layer.gate_width
    rows = layer.cell.bias_rows
    if len(weights) == 2:
        bias = np.zeros((rows, GH), layer.dtype)
    else:
        bias = _to_numpy(weights[2])
        if kind == "GRU" and bias.shape in ((2, GH), (GH,)) and (bias.ndim == 2) != (rows == 2):
            need = "reset_after=True" if bias.ndim == 2 else "reset_after=False"
            raise InvalidParameterError(
                f"{where}: a Keras GRU bias of shape {bias.shape} comes from a Keras GRU with {need}; "
                f"this GRU has reset_after={rows == 2}; build GRU(..., {need})"
            )
        if rows == 1 and bias.shape == (GH,):
            bias = bias.reshape(1, GH)
    _check_finite({"kernel": kernel, "recurrent_kernel": rec, "bias": bias}, "from_keras_weights")
    layer.set_weights(kernel, rec, bias)


def to_keras_weights(layer: RecurrentLayer) -> list[np.ndarray]:
    """``[kernel, recurrent_kernel, bias]`` (copies) for a Keras layer's ``set_weights``: bias
    ``(G*H,)``, or ``(2, 3H)`` for ``GRU(reset_after=True)`` (build the Keras GRU alike)."""
    _kind(layer, "to_keras_weights")
    layer._require_built("to_keras_weights")
    bias = np.array(layer.weight("bias"))
    if layer.cell.bias_rows == 1:
        bias = bias.reshape(-1)
    return [np.array(layer.weight("kernel")), np.array(layer.weight("recurrent_kernel")), bias]
