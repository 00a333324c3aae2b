"""``Flatten``, ``Reshape`` and ``Permute``: weightless layers that rearrange the axes after the
batch axis (Keras 3's).

None of them takes a mask: Keras' three layers do not support masking (Keras drops the mask
with a warning); rnnkit refuses a masked input with :class:`InvalidInputError` naming the layer
(the base :meth:`~rnnkit.Layer.compute_mask`), so a mask is never lost silently.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer
from rnnkit._numbers import check_int
from rnnkit._shape import Shape


class _Weightless(Layer):
    """A weightless layer: the pass keeps the input's shape for ``backward``."""

    def _check_rebuild(self, shape: Shape) -> None:
        """Weightless: any valid shape is accepted again."""

    def _check_input_rank(self, shape: Shape | tuple[Any, ...], least: int) -> None:
        if len(shape) < least:
            raise InvalidInputError(f"{self.name}: expected an input of rank >= {least} (batch first), got "
                                    f"shape {tuple(shape)} (rank {len(shape)})")


class Flatten(_Weightless):
    """``(B, d1, d2, ...) -> (B, d1 * d2 * ...)`` (Keras' ``Flatten(data_format=None)``).

    ``data_format``: ``"channels_last"`` (None: the same) flattens in the input's order;
    ``"channels_first"`` moves axis 1 (the channels) last before flattening, as Keras does. A
    rank-2 input passes unchanged; a rank-1 (B,) input becomes (B, 1). Backward reshapes the
    gradient back (and undoes the move). No mask (refused).
    """

    def __init__(self, data_format: str | None = None, *, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        if data_format is not None and (not isinstance(data_format, str)
                                        or data_format not in ("channels_last", "channels_first")):
            raise InvalidParameterError(f"{self.name}: data_format must be 'channels_last', "
                                        f"'channels_first' or None, got {data_format!r}")
        self.data_format = data_format or "channels_last"

    def _check_build_shape(self, shape: Shape) -> None:
        self._check_input_rank(shape, 1)

    def _moved(self, rank: int) -> bool:
        return self.data_format == "channels_first" and rank > 2

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_input_rank(shp, 1)
        rest = [d for d in shp[1:] if d is not None]
        width = None if len(rest) < shp.rank - 1 else int(math.prod(rest))
        return Shape((shp[0], width))

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        self._check_input_rank(arr.shape, 1)
        ctx.save(self, arr.shape)
        if self._moved(arr.ndim):
            arr = np.moveaxis(arr, 1, -1)
        return np.ascontiguousarray(arr).reshape(arr.shape[0], -1)

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape = ctx.peek(self)
        g = self._as_grad(grad, (shape[0], math.prod(shape[1:])))
        ctx.load(self)  # consumed only once the gradient fits
        if self._moved(len(shape)):
            moved = (shape[0], *shape[2:], shape[1])
            return np.ascontiguousarray(np.moveaxis(g.reshape(moved), -1, 1))
        return g.reshape(shape).copy()

    def get_config(self) -> dict[str, Any]:
        return {"data_format": self.data_format, "dtype": self.dtype.name, "name": self.name}


class Reshape(_Weightless):
    """``(B, ...) -> (B, *target_shape)`` (Keras' ``Reshape(target_shape)``), in C order.

    ``target_shape`` is a tuple of positive ints without the batch axis; at most one entry may be
    -1 (inferred from the input's size). A target whose size differs from the input's (or a -1
    that does not divide it) raises InvalidInputError at build naming ``target_shape``, the input
    shape and both sizes. Backward reshapes the gradient back. No mask (refused).
    """

    def __init__(self, target_shape: Any, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        if not isinstance(target_shape, (list, tuple)) or not target_shape:
            raise InvalidParameterError(f"{self.name}: target_shape must be a non-empty tuple of ints "
                                        f"(batch axis excluded), got {target_shape!r}")
        dims = tuple(check_int(d, "target_shape", self.name, lo=-1) for d in target_shape)
        if 0 in dims or dims.count(-1) > 1:
            raise InvalidParameterError(f"{self.name}: target_shape must hold positive ints and at most "
                                        f"one -1, got {tuple(target_shape)}")
        self.target_shape = dims

    def _resolve(self, rest: tuple[Any, ...]) -> tuple[int | None, ...]:
        """The target with its -1 resolved for an input whose non-batch axes are ``rest``."""
        known = math.prod(d for d in self.target_shape if d != -1)
        if any(d is None for d in rest):
            return tuple(None if d == -1 else d for d in self.target_shape)
        size = math.prod(int(d) for d in rest)
        if -1 in self.target_shape:
            if size % known:
                raise InvalidInputError(
                    f"{self.name}: target_shape {self.target_shape} cannot hold an input of shape "
                    f"(batch, {', '.join(map(str, rest))}): its {size} numbers per sample are not a "
                    f"multiple of {known}")
            return tuple(size // known if d == -1 else d for d in self.target_shape)
        if size != known:
            raise InvalidInputError(
                f"{self.name}: target_shape {self.target_shape} holds {known} numbers per sample; the "
                f"input of shape (batch, {', '.join(map(str, rest))}) has {size}")
        return self.target_shape

    def _check_build_shape(self, shape: Shape) -> None:
        self._check_input_rank(shape, 2)
        self._resolve(shape[1:])

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return Shape((shp[0], *self._resolve(shp[1:])))

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        self._check_input_rank(arr.shape, 2)
        target = self._resolve(arr.shape[1:])
        ctx.save(self, (arr.shape, target))
        return arr.reshape((arr.shape[0], *target)).copy()   # type: ignore[arg-type]

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape, target = ctx.peek(self)
        g = self._as_grad(grad, (shape[0], *target))
        ctx.load(self)  # consumed only once the gradient fits
        return g.reshape(shape).copy()

    def get_config(self) -> dict[str, Any]:
        return {"target_shape": list(self.target_shape), "dtype": self.dtype.name, "name": self.name}


class Permute(_Weightless):
    """Permute the axes after the batch (Keras' ``Permute(dims)``): ``dims`` is a permutation of
    ``1..n`` (1-indexed; ``Permute((2, 1))`` swaps the time and feature axes of (B, T, F)).

    ``dims`` that are not a permutation of ``1..len(dims)`` raise InvalidParameterError at
    construction; an input whose rank is not ``len(dims) + 1`` raises InvalidInputError at
    build. Backward applies the inverse permutation. No mask (refused).
    """

    def __init__(self, dims: Any, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        if not isinstance(dims, (list, tuple)) or not dims:
            raise InvalidParameterError(f"{self.name}: dims must be a tuple permuting 1..n, got {dims!r}")
        d = tuple(check_int(a, "dims", self.name) for a in dims)
        if sorted(d) != list(range(1, len(d) + 1)):
            raise InvalidParameterError(f"{self.name}: dims must be a permutation of "
                                        f"{tuple(range(1, len(d) + 1))} (1-indexed, the batch axis "
                                        f"excluded), got {tuple(dims)}")
        self.dims = d

    def _check_build_shape(self, shape: Shape) -> None:
        if len(shape) != len(self.dims) + 1:
            raise InvalidInputError(f"{self.name}: dims {self.dims} permute an input of rank "
                                    f"{len(self.dims) + 1}, got shape {tuple(shape)} (rank {len(shape)})")

    @property
    def _perm(self) -> tuple[int, ...]:
        return (0, *self.dims)

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return Shape(tuple(shp[a] for a in self._perm))

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        self._check_build_shape(Shape(arr.shape))
        ctx.save(self, arr.shape)
        return np.ascontiguousarray(arr.transpose(self._perm))

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape = ctx.peek(self)
        g = self._as_grad(grad, tuple(shape[a] for a in self._perm))
        ctx.load(self)  # consumed only once the gradient fits
        return np.ascontiguousarray(g.transpose(np.argsort(self._perm)))

    def get_config(self) -> dict[str, Any]:
        return {"dims": list(self.dims), "dtype": self.dtype.name, "name": self.name}
