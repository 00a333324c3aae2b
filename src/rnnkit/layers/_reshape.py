"""``RepeatVector`` and ``Reverse``: weightless layers that rearrange the time axis."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._budget import bound, check_array
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer, check_positive_int
from rnnkit._mask import Mask
from rnnkit._numbers import check_int
from rnnkit._shape import Shape
from rnnkit.layers._common import normalize_axis
from rnnkit.layers._masking import reverse_mask


class RepeatVector(Layer):
    """Repeat a state ``n`` times along a new time axis: (B, F) -> (B, n, F).

    Every step holds the same vector (the encoder-decoder pattern: a constant context seeds
    the decoder). Only rank-2 inputs. Backward sums the gradient over the n steps. A masked
    input is refused (as in Keras: a (batch, features) input has no steps to mask).

    Built from a file (``load_model``, ``load_keras``), ``n * features`` numbers per sample
    must fit the file's allocation budget (:func:`rnnkit._budget.bound`): FileFormatError at
    load otherwise.
    """

    def __init__(self, n: int, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.n = check_positive_int(n, "n", self.name)

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank != 2:
            raise InvalidInputError(
                f"{self.name}: expected a rank-2 input (batch, features), got {shape} "
                f"(rank {shape.rank})"
            )
        if shape[1] is not None:  # a model built from a file: n copies bounded by its budget
            bound((self.n, int(shape[1])), f"{self.name}: RepeatVector({self.n})")

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return Shape((shp[0], self.n, shp[1]))

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        self._check_build_shape(Shape(arr.shape))
        check_array((arr.shape[0], self.n, arr.shape[1]), arr.itemsize,
                    f"{self.name}: RepeatVector({self.n}) of a {arr.shape} input")
        ctx.save(self, arr.shape)
        return np.repeat(arr[:, None, :], self.n, axis=1)

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shp = ctx.peek(self)
        g = self._as_grad(grad, (shp[0], self.n, shp[1]))
        ctx.load(self)  # consumed only once the gradient fits
        return g.sum(axis=1)

    def get_config(self) -> dict[str, Any]:
        return {"n": self.n, "dtype": self.dtype.name, "name": self.name}


class Reverse(Layer):
    """Reverse the order along ``axis`` (``Reverse(1)``: the time axis of (B, T, F)).

    The input must have rank >= 3 (batch, timesteps, features, ...): a rank-2 (batch, units)
    state has no time axis, and Reverse refuses it with :class:`InvalidInputError` (a
    recurrent layer with ``return_sequences=False`` returns one state that already consumed
    timestep 0, so there is nothing to put back in order). Axis 0 (the batch) is refused.
    Negative axes count from the end. Backward reverses the gradient the same way.

    Masks: along the time axis (1) the mask is reversed too (so the padding of a padded batch
    comes first); along any other axis it passes through.
    """

    supports_masking = True

    def compute_mask(self, x: Any, mask: Any) -> Mask | None:
        if mask is None:
            return None
        shape = np.shape(x)
        if self._axis_for(shape) != 1:
            return mask  # type: ignore[no-any-return]
        return reverse_mask(mask, int(shape[1]))

    def __init__(self, axis: int = 1, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.axis = check_int(axis, "axis", self.name)

    def _axis_for(self, shape: Shape | tuple[Any, ...]) -> int:
        rank = len(shape)
        if rank < 3:
            raise InvalidInputError(
                f"{self.name}: expected an input of rank >= 3 (batch, timesteps, features), got "
                f"shape {shape} (rank {rank}); a (batch, units) state has no time axis to reverse "
                f"(a recurrent layer with return_sequences=False needs no Reverse)"
            )
        return normalize_axis(self.axis, rank, self.name, shape)

    def _check_build_shape(self, shape: Shape) -> None:
        self._axis_for(shape)

    def _check_rebuild(self, shape: Shape) -> None:
        """Weightless: any valid shape is accepted again."""

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._axis_for(shp)
        return shp

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        ax = self._axis_for(arr.shape)
        ctx.save(self, arr.shape)
        return np.flip(arr, axis=ax).copy()

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shp = ctx.peek(self)
        g = self._as_grad(grad, shp)
        ctx.load(self)  # consumed only once the gradient fits
        return np.flip(g, axis=self._axis_for(shp)).copy()

    def get_config(self) -> dict[str, Any]:
        return {"axis": self.axis, "dtype": self.dtype.name, "name": self.name}
