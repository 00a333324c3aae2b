"""Keras' ``input_shape`` convention (no batch axis) beside rnnkit's (batch axis first, made free).

``Sequential(layers, input_shape=s)`` reads ``s`` as Keras' — the shape of ONE sample, a batch
axis ``None`` is put in front — when either

- its first axis is an int: ``(8, 8)`` is (timesteps, features), built as ``(None, 8, 8)``
  (rnnkit frees the batch axis of a build shape anyway, so an int there never meant a batch
  size the model keeps); or
- it is one axis short of what the first layer takes: ``(None, 8)`` before a recurrent layer
  (which takes (batch, timesteps, features)) is Keras' free time axis, built as
  ``(None, None, 8)``; ``(None,)`` before an Embedding is ``(None, None)``.

Anything else is rnnkit's convention, as before: ``(None, 8, 8)`` stays as it is.
"""

from __future__ import annotations

from typing import Any

from rnnkit._layer import Layer
from rnnkit._shape import Shape


def _first_rank(layers: list[Layer]) -> int | None:
    """The input rank the first layer needs, where it is fixed (recurrent: 3; Embedding of a
    sequence model: 2); None when any rank >= 2 is fine (Dense)."""
    from rnnkit.layers import Embedding
    from rnnkit.recurrent import RecurrentLayer

    if not layers:
        return None
    first = layers[0]
    if isinstance(first, RecurrentLayer):
        return 3
    if isinstance(first, Embedding) and len(layers) > 1 and isinstance(layers[1], RecurrentLayer):
        return 2
    return None


def with_batch_axis(layers: list[Layer], shape: Any) -> Shape:
    """``shape`` as a build shape with its batch axis (see the module docstring)."""
    shp = Shape.of(shape)
    dims = list(shp.dims)
    if dims and dims[0] is not None:
        return Shape([None, *dims])
    need = _first_rank(layers)
    if need is not None and len(dims) == need - 1:
        return Shape([None, *dims])
    return shp
