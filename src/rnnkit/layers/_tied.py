"""Weight tying between an :class:`~rnnkit.layers.Embedding` and an output ``Dense``.

``Dense(V, tie_to=embedding)`` has no kernel of its own: its kernel is the embedding table
``E`` (V, D) transposed, the same array (the word-language-model "tied" decoder)::

    forward     y = act(x @ E^T + b)                x (..., D) -> y (..., V)
    backward    dE += da^T @ x   (summed with the Embedding's own scatter-add gradient)
                dx  = da @ E

The table is one weight of the model: counted, trained, saved and loaded once (with the
Embedding). In a saved config the Dense names its Embedding (``"tie_to": name``); a model
rebuilt from a config resolves the name among its layers (:func:`resolve_ties`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer
from rnnkit.layers._embedding import Embedding


def check_tie(tie_to: Any, where: str) -> Embedding | str | None:
    """``tie_to`` if it is None, an Embedding or an Embedding's name; else InvalidParameterError."""
    if tie_to is None or isinstance(tie_to, (Embedding, str)):
        return tie_to
    raise InvalidParameterError(f"{where}: tie_to must be an Embedding layer (or, in a saved config, its "
                                f"name), got {type(tie_to).__name__}")


def tied_embedding(layer: Any) -> Embedding:
    """The built Embedding a tied Dense reads its kernel from; InvalidInputError when the tie is
    still a name or the Embedding is not built."""
    tie = layer.tie_to
    if isinstance(tie, str):
        raise InvalidInputError(f"{layer.name}: tie_to={tie!r} names a layer that was never resolved; give "
                                f"the Embedding itself (Dense(..., tie_to=embedding))")
    assert isinstance(tie, Embedding)
    if not tie.built:
        raise InvalidInputError(f"{layer.name}: the tied Embedding {tie.name!r} must be built before this "
                                f"Dense (place it earlier in the model)")
    return tie


def check_tied_build(layer: Any, features: int) -> None:
    """InvalidInputError unless a tied Dense of ``layer.units`` outputs fed ``features`` fits its
    Embedding's table (V, D): ``units == V`` and ``features == D``."""
    emb = tied_embedding(layer)
    if (layer.units, features) != (emb.input_dim, emb.output_dim):
        raise InvalidInputError(
            f"{layer.name}: tied to {emb.name!r}, whose table is ({emb.input_dim}, {emb.output_dim}), so "
            f"it needs units={emb.input_dim} and {emb.output_dim} input features; got units="
            f"{layer.units} and {features} features")
    if emb.dtype != layer.dtype:
        raise InvalidInputError(f"{layer.name}: dtype {layer.dtype} differs from the tied Embedding's "
                                f"{emb.dtype}")


def table(layer: Any) -> np.ndarray:
    """The tied Embedding's table (V, D), the kernel transposed."""
    return tied_embedding(layer)._weights["embeddings"]


def resolve_ties(layers: list[Layer]) -> None:
    """Replace each ``tie_to`` name among ``layers`` by the Embedding of that name (in place);
    InvalidInputError when no Embedding, or more than one, has the name."""
    for layer in layers:
        name = getattr(layer, "tie_to", None)
        if not isinstance(name, str):
            continue
        found = [e for e in layers if isinstance(e, Embedding) and e.name == name]
        if len(found) != 1:
            raise InvalidInputError(f"{layer.name}: tie_to={name!r} must name exactly one Embedding of the "
                                    f"model, found {len(found)}")
        layer.tie_to = found[0]  # type: ignore[attr-defined]
