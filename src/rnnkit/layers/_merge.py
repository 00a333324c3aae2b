"""``Concatenate``: the merge layer of graph models (several inputs, one output)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer
from rnnkit._shape import Shape
from rnnkit.layers._common import check_int, normalize_axis


class MergeLayer(Layer):
    """Base of layers that take a LIST of inputs: ``forward([x1, x2, ...], ctx)`` and
    ``backward(grad, ctx) -> [g1, g2, ...]``; ``build`` takes a list of shapes."""

    multi_input = True

    def build(self, shape: Any) -> None:  # a list of shapes
        shapes = self._shapes(shape)
        self._merged_shape(shapes)
        if self._input_shape is None:
            self._input_shape = shapes[0]

    def _shapes(self, shapes: Any) -> list[Shape]:
        if isinstance(shapes, Shape) or not isinstance(shapes, (list, tuple)) or not shapes \
                or not all(isinstance(s, (Shape, list, tuple)) for s in shapes):
            raise InvalidInputError(f"{self.name}: expected a list of >= 2 input shapes, got {shapes!r}")
        out = [Shape.of(s) for s in shapes]
        if len(out) < 2:
            raise InvalidInputError(f"{self.name}: expected a list of >= 2 input shapes, got {len(out)}")
        return out

    def _merged_shape(self, shapes: list[Shape]) -> Shape:
        raise NotImplementedError

    def compute_output_shape(self, shape: Any) -> Shape:
        return self._merged_shape(self._shapes(shape))


class Concatenate(MergeLayer):
    """Join the inputs along ``axis`` (default -1, the features).

    All inputs have the same rank and agree on every other axis (a free ``None`` axis matches
    anything). Axis 0 (the batch) is refused. Backward splits the gradient back into one piece
    per input, in input order.
    """

    def __init__(self, axis: int = -1, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.axis = check_int(axis, "axis", self.name)

    def _merged_shape(self, shapes: list[Shape]) -> Shape:
        rank = shapes[0].rank
        if any(s.rank != rank for s in shapes):
            raise InvalidInputError(
                f"{self.name}: every input must have the same rank, got shapes "
                f"{[str(s) for s in shapes]}"
            )
        ax = normalize_axis(self.axis, rank, self.name, shapes[0])
        dims: list[int | None] = []
        for k in range(rank):
            col = [s[k] for s in shapes]
            if k == ax:
                widths = [d for d in col if d is not None]
                dims.append(sum(widths) if len(widths) == len(col) else None)
                continue
            known = {d for d in col if d is not None}
            if len(known) > 1:
                raise InvalidInputError(
                    f"{self.name}: inputs must agree on every axis but {self.axis}; axis {k} "
                    f"differs in shapes {[str(s) for s in shapes]}"
                )
            dims.append(known.pop() if known else None)
        return Shape(dims)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:  # type: ignore[override]
        if not isinstance(x, (list, tuple)):
            raise InvalidInputError(f"{self.name}: expected a list of input arrays, got {type(x).__name__}")
        arrs = [self._as_input(a) for a in x]
        self._merged_shape(self._shapes([a.shape for a in arrs]))  # ranks, axis, other axes
        ax = normalize_axis(self.axis, arrs[0].ndim, self.name, arrs[0].shape)
        ctx.save(self, ([a.shape[ax] for a in arrs], ax))
        return np.concatenate(arrs, axis=ax)

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        widths, ax = ctx.peek(self)
        g = self._as_input(grad, "upstream gradient")
        if g.ndim <= ax or g.shape[ax] != sum(widths):
            raise InvalidInputError(
                f"{self.name}: backward expected an upstream gradient of width {sum(widths)} on axis "
                f"{ax}, got shape {g.shape}"
            )
        ctx.load(self)  # consumed only once the gradient fits
        cuts = np.cumsum(widths)[:-1]
        return [np.ascontiguousarray(p) for p in np.split(g, cuts, axis=ax)]

    def get_config(self) -> dict[str, Any]:
        return {"axis": self.axis, "dtype": self.dtype.name, "name": self.name}
