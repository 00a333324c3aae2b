"""Keras' ``input_shape`` convention (no batch axis) beside rnnkit's (batch axis first, made free).

``Sequential(layers, input_shape=s)`` reads ``s`` as Keras' — the shape of ONE sample, a batch
axis ``None`` is put in front — when it is one axis short of what the first layer takes:
``(8, 8)`` or ``(None, 8)`` before a recurrent layer (which takes (batch, timesteps,
features)) build ``(None, 8, 8)`` / ``(None, None, 8)``; ``(None,)`` before an Embedding that
feeds a recurrent layer builds ``(None, None)``; ``(3,)`` before a Dense builds ``(None, 3)``.

A first layer that states its own ``input_layout`` (an ``rnnkit.rnn`` net: ``"batch_first"``
or ``"time_major"``) takes 3D inputs, and the batch axis goes where its layout puts it:
``(T, F)`` builds ``(None, T, F)`` or ``(T, None, F)``; ``(None, 1)`` builds ``(None, None, 1)``.
The same holds after an Embedding that feeds one.

Anything else is rnnkit's convention, as before: ``(None, 8, 8)`` stays, and so does a fixed
batch such as ``(1, None, 1)`` for a stateful layer.
"""

from __future__ import annotations

from typing import Any

from rnnkit._layer import Layer
from rnnkit._shape import Shape
from rnnkit.layers import Dense, Embedding
from rnnkit.recurrent import RecurrentLayer


def _layout(layer: Layer) -> str | None:
    """The input layout a layer states itself (``"batch_first"`` / ``"time_major"``), or None."""
    layout = getattr(layer, "input_layout", None)
    return layout if layout in ("batch_first", "time_major") else None


def _sequence(layer: Layer) -> bool:
    return isinstance(layer, RecurrentLayer) or _layout(layer) is not None


def _first_rank(layers: list[Layer]) -> int | None:
    """The input rank the first layer needs at least (recurrent or a net with a stated layout:
    3; Embedding of a sequence model: 2; Dense: 2); None when unknown."""
    if not layers:
        return None
    first = layers[0]
    if _sequence(first):
        return 3
    if isinstance(first, Embedding) and len(layers) > 1 and _sequence(layers[1]):
        return 2
    if isinstance(first, Dense):
        return 2
    return None


def with_batch_axis(layers: list[Layer], shape: Any) -> Shape:
    """``shape`` as a build shape with its batch axis (see the module docstring)."""
    shp = Shape.of(shape)
    dims = list(shp.dims)
    need = _first_rank(layers)
    if need is not None and len(dims) == need - 1:
        if need == 3 and _layout(layers[0]) == "time_major":
            return Shape([dims[0], None, dims[1]])
        return Shape([None, *dims])
    return shp
