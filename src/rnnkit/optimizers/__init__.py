"""Optimizers: :class:`SGD`, :class:`Adam`, :class:`AdamW`, :class:`RMSprop` on one
:class:`Optimizer` base (learning rate, time-based decay, clipping, per-parameter slots).

``get(x)`` resolves ``"sgd" | "adam" | "adamw" | "rmsprop"`` (default hyperparameters), a
``serialize`` dict ``{"class_name": "Adam", "config": {...}}``, or an :class:`Optimizer`
instance (returned as is).
"""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidParameterError
from rnnkit.optimizers._base import Optimizer
from rnnkit.optimizers._rules import SGD, Adam, AdamW, RMSprop

_CLASSES: dict[str, type[Optimizer]] = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop}


def serialize(optimizer: Optimizer) -> dict[str, Any]:
    """``{"class_name": "Adam", "config": optimizer.get_config()}`` (JSON-serialisable)."""
    if not isinstance(optimizer, Optimizer):
        raise InvalidParameterError(f"serialize: expected an Optimizer, got {type(optimizer).__name__}")
    return {"class_name": type(optimizer).__name__, "config": optimizer.get_config()}


def deserialize(data: dict[str, Any]) -> Optimizer:
    """The inverse of :func:`serialize`: a fresh optimizer (no slots)."""
    try:
        if not isinstance(data, dict):
            raise TypeError(type(data).__name__)
        name, config = data["class_name"], data.get("config", {})
    except (KeyError, TypeError, AttributeError):
        raise InvalidParameterError(
            f"optimizers.deserialize: expected {{'class_name': ..., 'config': {{...}}}}, got {data!r}"
        ) from None
    cls = _CLASSES.get(str(name).lower())
    if cls is None:
        raise InvalidParameterError(f"optimizers.deserialize: unknown optimizer {name!r}; "
                                    f"known: {sorted(c.__name__ for c in _CLASSES.values())}")
    try:
        return cls.from_config(dict(config))
    except (TypeError, ValueError) as e:
        raise InvalidParameterError(f"optimizers.deserialize: bad config for {name}: {e}") from None


def get(identifier: str | Optimizer | dict[str, Any]) -> Optimizer:
    """An optimizer from a name (``"adam"``, case-insensitive), a serialized dict or an instance."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str):
        cls = _CLASSES.get(identifier.lower())
        if cls is not None:
            return cls()
        raise InvalidParameterError(f"optimizers.get: unknown optimizer {identifier!r}; "
                                    f"known: {sorted(_CLASSES)}")
    raise InvalidParameterError(
        f"optimizers.get: expected a name, a serialized dict or an Optimizer, got {type(identifier).__name__}"
    )


__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "deserialize", "get", "serialize"]
