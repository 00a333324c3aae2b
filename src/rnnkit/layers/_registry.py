"""The layer registry: ``{"class_name": ..., "config": {...}}`` <-> layer objects.

It imports no layer class; :mod:`rnnkit.layers` registers the built-in ones (so a layer that
holds other layers, like ``Bidirectional``, can use the registry at module level)."""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._kind import builtin_kind
from rnnkit._layer import Layer
from rnnkit._penalties import attach, config_of
from rnnkit.recurrent import RecurrentLayer

#: class name -> layer class; the built-in layers are registered by :mod:`rnnkit.layers`
_REGISTRY: dict[str, type[Layer]] = {}


def register_layer(cls: type[Layer]) -> type[Layer]:
    """Make a custom Layer subclass loadable by :func:`layer_from_config` (usable as decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Layer)):
        raise InvalidInputError(f"register_layer: expected a Layer subclass, got {cls!r}")
    _REGISTRY[cls.__name__] = cls
    return cls


def layer_to_config(layer: Layer) -> dict[str, Any]:
    """``{"class_name": type name, "config": layer.get_config()}`` (JSON-serialisable); a plain
    ``RecurrentLayer`` over a built-in cell is written as the layer of that kind (``LSTM``, ...)."""
    name = type(layer).__name__
    if type(layer) is RecurrentLayer:
        name = builtin_kind(layer.cell) or name
    if _REGISTRY.get(name) is not type(layer) and type(layer) is not RecurrentLayer:
        raise InvalidInputError(
            f"layer_to_config: {name} is not a registered layer class; call "
            f"rnnkit.layers.register_layer({name}) first"
        )
    config = layer.get_config()
    # regularizers / constraints the layer's own config does not carry: in the config of the
    # built-in kind a plain RecurrentLayer is written as (its constructor takes them), else beside it
    extra = {k: v for k, v in config_of(layer).items() if k not in config}
    if name != type(layer).__name__:
        config, extra = {**config, **extra}, {}
    return {"class_name": name, "config": config, **({"regularization": extra} if extra else {})}


def layer_from_config(cfg: dict[str, Any]) -> Layer:
    """A new, unbuilt layer from ``{"class_name": ..., "config": {...}}``."""
    if not isinstance(cfg, dict) or "class_name" not in cfg:
        raise InvalidInputError(
            f"layer_from_config: expected a dict with 'class_name' and 'config', got {cfg!r}"
        )
    name = cfg["class_name"]
    cls = _REGISTRY.get(name)
    if cls is None:
        raise InvalidInputError(
            f"layer_from_config: unknown layer class {name!r}; known: {sorted(_REGISTRY)}"
        )
    kwargs = cfg.get("config", {})
    if not isinstance(kwargs, dict):
        raise InvalidInputError(f"layer_from_config: 'config' of {name} must be a dict, got {kwargs!r}")
    try:
        layer = cls(**kwargs)
    except TypeError as e:
        raise InvalidInputError(f"layer_from_config: bad config for {name}: {e}") from None
    extra = cfg.get("regularization")
    if extra is not None:
        if not isinstance(extra, dict):
            raise InvalidInputError(f"layer_from_config: 'regularization' of {name} must be a dict, "
                                    f"got {extra!r}")
        try:
            attach(layer, **extra)
        except (TypeError, InvalidParameterError) as e:
            raise InvalidInputError(f"layer_from_config: bad regularization for {name}: {e}") from None
    return layer
