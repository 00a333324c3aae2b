"""Masks at build time: which layer's mask reaches a layer, so that a layer that cannot take a
mask is refused when the model is built, not at its first masked call.

Two layers always make a mask, whatever their input: ``Masking`` and
``Embedding(mask_zero=True)``. :func:`mask_after` follows such a mask through the layers that
pass it on unchanged (a layer with ``supports_masking`` and the base
:meth:`rnnkit.Layer.compute_mask`, ``Reverse``) and through the recurrent layers under
``return_sequences`` (output 0); any other layer ends the trail (it consumes the mask, or its
mask depends on the values: the masked call still checks it). So the build refuses only what
every masked call would refuse.
"""

from __future__ import annotations

from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer
from rnnkit.layers import Bidirectional, Embedding, Masking, Reverse
from rnnkit.recurrent import RecurrentLayer

__all__ = ["check_mask_taken", "mask_after"]


def mask_after(layer: Layer, source: Layer | None) -> Layer | None:
    """The layer whose mask ``layer``'s output (output 0) carries for an input carrying the mask
    of ``source`` (None: no mask), as far as the build can tell (see the module docstring)."""
    if isinstance(layer, Masking) or (isinstance(layer, Embedding) and layer.mask_zero):
        return layer
    if source is None or not layer.supports_masking:
        return None
    if type(layer).compute_mask is Layer.compute_mask or isinstance(layer, Reverse):
        return source
    if isinstance(layer, (RecurrentLayer, Bidirectional)):
        return source if layer.return_sequences else None
    return None


def check_mask_taken(layer: Layer, source: Layer | None, where: str) -> None:
    """InvalidInputError when the mask of ``source`` reaches ``layer``, which cannot take one;
    ``where`` names the call in the model (``"sequential: layer 2"``)."""
    if source is not None and not layer.supports_masking:
        raise InvalidInputError(
            f"{where}: {layer.name} ({type(layer).__name__}) cannot take a masked input, and the mask "
            f"made by {source.name} ({type(source).__name__}) reaches it; expected a layer that takes "
            f"masks there, or one that consumes the mask between them (a recurrent layer without "
            f"return_sequences, a pooling layer), or no mask")
