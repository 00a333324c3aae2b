"""Weight and activity regularizers with Keras' definitions: :class:`L1`, :class:`L2`,
:class:`L1L2`.

A regularizer maps a weight (or a layer's output) ``w`` to a penalty added to the loss::

    L1(l1)        penalty = l1 * sum(|w|)                    grad = l1 * sign(w)
    L2(l2)        penalty = l2 * sum(w ** 2)                 grad = 2 * l2 * w
    L1L2(l1, l2)  the sum of both

(Keras' defaults: ``L1(0.01)``, ``L2(0.01)``, ``L1L2(0.0, 0.0)``). Attach them to a layer with
the layer's keywords (``Dense(kernel_regularizer=...)``) or :func:`attach` for any layer; see
:mod:`rnnkit._penalties` for where the penalty enters training. ``get`` resolves
``"l1" | "l2" | "l1_l2"``, a ``{"class_name", "config"}`` dict (Keras' serialized form too),
an instance or None.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._config import ConfigValue
from rnnkit._errors import InvalidParameterError
from rnnkit._numbers import check_float


class Regularizer(ConfigValue):
    """Base class: ``penalty(w) -> float`` and ``grad(w) -> array`` of ``w``'s shape."""

    def __call__(self, w: np.ndarray) -> float:
        return self.penalty(w)

    def penalty(self, w: np.ndarray) -> float:
        raise NotImplementedError

    def grad(self, w: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError


def _factor(value: Any, arg: str, where: str) -> float:
    v = check_float(value, arg, where)
    if v < 0:
        raise InvalidParameterError(f"{where}: {arg} must be >= 0, got {value!r}")
    return v


class L1L2(Regularizer):
    """``l1 * sum(|w|) + l2 * sum(w ** 2)`` (both >= 0)."""

    def __init__(self, l1: float = 0.0, l2: float = 0.0) -> None:
        self.l1 = _factor(l1, "l1", type(self).__name__)
        self.l2 = _factor(l2, "l2", type(self).__name__)

    def penalty(self, w: np.ndarray) -> float:
        a = np.asarray(w, dtype=np.float64)
        out = 0.0
        if self.l1:
            out += self.l1 * float(np.abs(a).sum())
        if self.l2:
            out += self.l2 * float(np.square(a).sum())
        return out

    def grad(self, w: np.ndarray) -> np.ndarray:
        a = np.asarray(w)
        g = np.zeros_like(a)
        if self.l1:
            g += self.l1 * np.sign(a)
        if self.l2:
            g += (2.0 * self.l2) * a
        return g

    def get_config(self) -> dict[str, Any]:
        return {"l1": self.l1, "l2": self.l2}


class L1(L1L2):
    """``l1 * sum(|w|)``; the gradient at 0 is 0 (``sign``)."""

    def __init__(self, l1: float = 0.01) -> None:
        super().__init__(l1=l1)

    def get_config(self) -> dict[str, Any]:
        return {"l1": self.l1}


class L2(L1L2):
    """``l2 * sum(w ** 2)``."""

    def __init__(self, l2: float = 0.01) -> None:
        super().__init__(l2=l2)

    def get_config(self) -> dict[str, Any]:
        return {"l2": self.l2}


_CLASSES: dict[str, type[Regularizer]] = {"l1": L1, "l2": L2, "l1l2": L1L2, "l1_l2": L1L2}


def serialize(reg: Regularizer | None) -> dict[str, Any] | None:
    """``{"class_name": "L2", "config": {"l2": 0.01}}`` (None stays None)."""
    if reg is None:
        return None
    if not isinstance(reg, Regularizer):
        raise InvalidParameterError(f"regularizers.serialize: expected a Regularizer, "
                                    f"got {type(reg).__name__}")
    return {"class_name": type(reg).__name__, "config": reg.get_config()}


def get(identifier: Any) -> Regularizer | None:
    """A regularizer from a name, a serialized dict, an instance, or None."""
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    if isinstance(identifier, str):
        cls = _CLASSES.get(identifier.lower())
        if cls is None:
            raise InvalidParameterError(f"regularizers.get: unknown regularizer {identifier!r}; "
                                        f"known: ['l1', 'l1_l2', 'l2']")
        return cls()
    if isinstance(identifier, dict) and "class_name" in identifier:
        name = str(identifier["class_name"])
        cls = _CLASSES.get(name.lower().replace("_", "")) or _CLASSES.get(name.lower())
        cfg = identifier.get("config") or {}
        if cls is None or not isinstance(cfg, dict):
            raise InvalidParameterError(f"regularizers.get: unknown regularizer {identifier!r}; "
                                        f"known: ['L1', 'L1L2', 'L2']")
        allowed = {"l1", "l2"}
        try:
            return cls(**{k: v for k, v in cfg.items() if k in allowed})
        except TypeError as e:
            raise InvalidParameterError(f"regularizers.get: bad config for {name}: {e}") from None
    raise InvalidParameterError(f"regularizers.get: expected a name, a serialized dict, a Regularizer or "
                                f"None, got {type(identifier).__name__}")


__all__ = ["L1", "L1L2", "L2", "Regularizer", "get", "serialize"]
