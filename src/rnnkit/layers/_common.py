"""Helpers the non-recurrent layers share: activation configs, axis normalisation."""

from __future__ import annotations

from typing import Any

from rnnkit._activations import Activation, ActivationFn, Softmax, resolve_activation
from rnnkit._errors import InvalidInputError
from rnnkit._numbers import check_int
from rnnkit._shape import Shape


def activation_from(spec: Any, where: str) -> ActivationFn:
    """Resolve an activation spelling, also the config form ``{"name": "softmax", "axis": k}``."""
    if isinstance(spec, dict):
        name = spec.get("name")
        if name == "softmax":
            return resolve_activation(Softmax(check_int(spec.get("axis", -1), "axis", where)), where)
        return resolve_activation(name, where)
    return resolve_activation(spec, where)


def check_activation_axis(act: ActivationFn, rank: int, where: str) -> None:
    """A softmax's axis must exist in outputs of ``rank`` (InvalidInputError otherwise)."""
    if act.kind is Activation.SOFTMAX and not -rank <= act.axis < rank:
        raise InvalidInputError(f"{where}: softmax axis {act.axis} is out of range for outputs of "
                                f"rank {rank} (expected -{rank}..{rank - 1})")


def activation_config(act: ActivationFn) -> str | dict[str, Any]:
    """The JSON form of an activation: its name, or ``{"name": "softmax", "axis": k}``."""
    if act.kind is Activation.SOFTMAX and act.axis != -1:
        return {"name": "softmax", "axis": act.axis}
    return act.name


def normalize_axis(axis: int, rank: int, where: str, shape: Shape | tuple[Any, ...]) -> int:
    """``axis`` (negative counts from the end) as an index in ``1..rank-1``.

    Axis 0 is the batch axis; no layer here operates along it.
    """
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise InvalidInputError(
            f"{where}: axis {axis} is out of range for an input of rank {rank} (shape {shape})"
        )
    if a == 0:
        raise InvalidInputError(
            f"{where}: axis {axis} is the batch axis of an input of shape {shape}; "
            f"expected an axis in 1..{rank - 1} (or -{rank - 1}..-1)"
        )
    return a
