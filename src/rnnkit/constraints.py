"""Weight constraints with Keras' definitions, applied to a weight after every optimizer step:
:class:`MaxNorm`, :class:`NonNeg`, :class:`UnitNorm`, :class:`MinMaxNorm`.

With ``norms = sqrt(sum(w ** 2, axis, keepdims=True))`` and ``eps = 1e-7`` (Keras' epsilon)::

    MaxNorm(max_value=2, axis=0)                 w * clip(norms, 0, max_value) / (eps + norms)
    NonNeg()                                     max(w, 0)
    UnitNorm(axis=0)                             w / (eps + norms)
    MinMaxNorm(min_value=0, max_value=1,         w * (rate * clip(norms, min, max)
               rate=1, axis=0)                         + (1 - rate) * norms) / (eps + norms)

``axis=0`` on a (inputs, units) kernel constrains each unit's incoming vector. A recurrent
layer's bias is constrained in Keras' shape (its flat ``(G*H,)`` vector, or ``(2, 3H)`` for a
reset-after GRU). ``get`` resolves a name (``"max_norm"``, ``"non_neg"``, ``"unit_norm"``,
``"min_max_norm"``), a ``{"class_name", "config"}`` dict, an instance or None.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._config import ConfigValue
from rnnkit._errors import InvalidParameterError, MethodNotImplementedError
from rnnkit._numbers import check_float

EPSILON = 1e-7


class Constraint(ConfigValue):
    """Base class: ``constraint(w)`` returns the projected weight (same shape and dtype)."""

    def __call__(self, w: np.ndarray) -> np.ndarray:
        raise MethodNotImplementedError(f"{type(self).__name__}.__call__ is not implemented; a "
                                        f"subclass provides it")

    def get_config(self) -> dict[str, Any]:
        return {}


def _axis(axis: Any, where: str) -> int | list[int]:
    if isinstance(axis, (list, tuple)) and all(isinstance(a, int) and not isinstance(a, bool) for a in axis):
        return [int(a) for a in axis]
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise InvalidParameterError(f"{where}: axis must be an int or a list of ints, got {axis!r}")
    return int(axis)


def _norms(w: np.ndarray, axis: int | list[int]) -> np.ndarray:
    ax = tuple(axis) if isinstance(axis, list) else axis
    if any(a >= w.ndim or a < -w.ndim for a in (ax if isinstance(ax, tuple) else (ax,))):
        raise InvalidParameterError(f"constraint axis {axis} is out of range for a weight of shape {w.shape}")
    return np.sqrt(np.sum(np.square(w), axis=ax, keepdims=True))


class MaxNorm(Constraint):
    """Each slice along ``axis`` gets norm at most ``max_value``."""

    def __init__(self, max_value: float = 2.0, axis: int | list[int] = 0) -> None:
        self.max_value = check_float(max_value, "max_value", "MaxNorm")
        self.axis = _axis(axis, "MaxNorm")

    def __call__(self, w: np.ndarray) -> np.ndarray:
        norms = _norms(w, self.axis)
        return (w * (np.clip(norms, 0, self.max_value) / (EPSILON + norms))).astype(w.dtype)

    def get_config(self) -> dict[str, Any]:
        return {"max_value": self.max_value, "axis": self.axis}


class NonNeg(Constraint):
    """``max(w, 0)``."""

    def __call__(self, w: np.ndarray) -> np.ndarray:
        return np.maximum(w, 0).astype(w.dtype)


class UnitNorm(Constraint):
    """Each slice along ``axis`` scaled to norm 1 (``w / (eps + norms)``)."""

    def __init__(self, axis: int | list[int] = 0) -> None:
        self.axis = _axis(axis, "UnitNorm")

    def __call__(self, w: np.ndarray) -> np.ndarray:
        return (w / (EPSILON + _norms(w, self.axis))).astype(w.dtype)

    def get_config(self) -> dict[str, Any]:
        return {"axis": self.axis}


class MinMaxNorm(Constraint):
    """Each slice's norm moved into [min_value, max_value], by ``rate`` of the way."""

    def __init__(self, min_value: float = 0.0, max_value: float = 1.0, rate: float = 1.0,
                 axis: int | list[int] = 0) -> None:
        self.min_value = check_float(min_value, "min_value", "MinMaxNorm")
        self.max_value = check_float(max_value, "max_value", "MinMaxNorm")
        self.rate = check_float(rate, "rate", "MinMaxNorm")
        if self.min_value > self.max_value:
            raise InvalidParameterError(f"MinMaxNorm: min_value {min_value} exceeds max_value {max_value}")
        self.axis = _axis(axis, "MinMaxNorm")

    def __call__(self, w: np.ndarray) -> np.ndarray:
        norms = _norms(w, self.axis)
        desired = self.rate * np.clip(norms, self.min_value, self.max_value) + (1 - self.rate) * norms
        return (w * (desired / (EPSILON + norms))).astype(w.dtype)

    def get_config(self) -> dict[str, Any]:
        return {"min_value": self.min_value, "max_value": self.max_value, "rate": self.rate,
                "axis": self.axis}


_CLASSES: dict[str, type[Constraint]] = {
    "maxnorm": MaxNorm, "max_norm": MaxNorm, "nonneg": NonNeg, "non_neg": NonNeg,
    "unitnorm": UnitNorm, "unit_norm": UnitNorm, "minmaxnorm": MinMaxNorm, "min_max_norm": MinMaxNorm,
}
_KEYS = {MaxNorm: {"max_value", "axis"}, NonNeg: set(), UnitNorm: {"axis"},
         MinMaxNorm: {"min_value", "max_value", "rate", "axis"}}


def serialize(c: Constraint | None) -> dict[str, Any] | None:
    """``{"class_name": "MaxNorm", "config": {...}}`` (None stays None)."""
    if c is None:
        return None
    if not isinstance(c, Constraint):
        raise InvalidParameterError(f"constraints.serialize: expected a Constraint, got {type(c).__name__}")
    return {"class_name": type(c).__name__, "config": c.get_config()}


def get(identifier: Any) -> Constraint | None:
    """A constraint from a name, a serialized dict, an instance, or None."""
    if identifier is None or isinstance(identifier, Constraint):
        return identifier
    name: str | None = None
    cfg: Any = {}
    if isinstance(identifier, str):
        name = identifier
    elif isinstance(identifier, dict) and "class_name" in identifier:
        name, cfg = str(identifier["class_name"]), identifier.get("config") or {}
    cls = _CLASSES.get(name.lower()) if name is not None else None
    if cls is None or not isinstance(cfg, dict):
        raise InvalidParameterError(f"constraints.get: expected one of MaxNorm, NonNeg, UnitNorm, MinMaxNorm "
                                    f"(a name, a serialized dict or an instance) or None, got {identifier!r}")
    try:
        return cls(**{k: v for k, v in cfg.items() if k in _KEYS[cls]})
    except TypeError as e:
        raise InvalidParameterError(f"constraints.get: bad config for {name}: {e}") from None


__all__ = ["Constraint", "MaxNorm", "MinMaxNorm", "NonNeg", "UnitNorm", "get", "serialize"]
