"""``model_from_config``: rebuild a model (fresh weights) from ``model.get_config()``."""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidInputError
from rnnkit.models._base import Model
from rnnkit.models._graph import GraphModel
from rnnkit.models._sequential import Sequential


def model_from_config(cfg: dict[str, Any]) -> Model:
    """``Sequential`` or ``GraphModel`` from ``{"class_name": ..., "config": {...}}``."""
    if not isinstance(cfg, dict) or "class_name" not in cfg or not isinstance(cfg.get("config"), dict):
        raise InvalidInputError(
            f"model_from_config: expected {{'class_name': ..., 'config': {{...}}}}, got {cfg!r}"
        )
    kinds: dict[str, Any] = {"Sequential": Sequential, "GraphModel": GraphModel}
    cls = kinds.get(cfg["class_name"])
    if cls is None:
        raise InvalidInputError(f"model_from_config: unknown model class {cfg['class_name']!r}; "
                                f"known: {sorted(kinds)}")
    try:
        model: Model = cls.from_config(cfg["config"])
    except (KeyError, TypeError, IndexError) as e:
        raise InvalidInputError(f"model_from_config: malformed {cfg['class_name']} config: {e!r}") from None
    return model
