"""``Masking`` and the helpers that combine masks (Keras' rules)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer
from rnnkit._mask import Mask
from rnnkit._shape import Shape


def mask_or(masks: list[Mask], T: int) -> Mask:
    """The step-wise OR of ``masks`` (each fitting T timesteps). Lengths masks stay lengths
    (the longest per sequence); any boolean mask makes the result a boolean mask."""
    if all(m.kind == "lengths" for m in masks):
        return Mask(lengths=np.max(np.stack([m.ends(T) for m in masks]), axis=0))
    out = masks[0].valid(T).copy()
    for m in masks[1:]:
        out |= m.valid(T)
    return Mask(out)


def reverse_mask(mask: Mask, T: int) -> Mask:
    """The mask of a sequence flipped along its time axis (padding then comes first, so the
    result is always a boolean mask)."""
    return Mask(mask.valid(T)[:, ::-1].copy())


class Masking(Layer):
    """Mark padded timesteps (Keras' ``Masking``): a step of a (B, T, F) input whose features
    ALL equal ``mask_value`` is masked.

    Output: the input with masked steps set to 0 (real steps unchanged). The output mask
    (:meth:`compute_mask`) is ``Mask(any(x != mask_value, axis=-1))``, a boolean (Keras) mask,
    which the model hands to the layers after it. An incoming mask is replaced, as in Keras.
    Backward: the gradient of the masked steps is 0. No weights.
    """

    supports_masking = True

    def __init__(self, mask_value: float = 0.0, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        if isinstance(mask_value, bool) or not isinstance(mask_value, (int, float, np.number)):
            raise InvalidParameterError(f"{self.name}: mask_value must be a number, got {mask_value!r}")
        self.mask_value = float(mask_value)

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank != 3:
            raise InvalidInputError(f"{self.name}: expected a 3D input shape (batch, timesteps, "
                                    f"features), got {shape} (rank {shape.rank})")

    def _check_rebuild(self, shape: Shape) -> None:
        """Weightless: any 3D shape is accepted again."""

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return shp

    def _keep(self, x: Any) -> np.ndarray:
        arr = self._as_input(x)
        if arr.ndim != 3:
            raise InvalidInputError(f"{self.name}: expected a 3D input (batch, timesteps, features), "
                                    f"got shape {arr.shape}")
        return np.any(arr != self.dtype.type(self.mask_value), axis=-1)

    def compute_mask(self, x: Any, mask: Any) -> Mask:
        return Mask(self._keep(x))

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        keep = self._keep(arr)
        ctx.save(self, keep)
        return arr * keep[..., None]

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        keep = ctx.peek(self)
        g = self._as_input(grad, "upstream gradient")
        if g.shape[:2] != keep.shape or g.ndim != 3:
            raise InvalidInputError(f"{self.name}: backward expected an upstream gradient of shape "
                                    f"{keep.shape} + (features,), got {g.shape}")
        ctx.load(self)  # consumed only once the gradient fits
        return g * keep[..., None]

    def get_config(self) -> dict[str, Any]:
        return {"mask_value": self.mask_value, "dtype": self.dtype.name, "name": self.name}
