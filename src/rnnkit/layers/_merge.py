"""Merge layers of graph models (several inputs, one output): ``Concatenate``, ``Add``,
``Multiply``, ``Average``.

Masks (Keras' rules): a merge layer receives the list of its inputs' masks. ``Add``,
``Multiply`` and ``Average`` give the step-wise OR of the masks (None when any input has
none); ``Concatenate`` along the time axis joins the masks, along another axis a step is
valid where any input's step is (an input without a mask counts as all valid).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer
from rnnkit._mask import Mask
from rnnkit._numbers import check_int
from rnnkit._shape import Shape
from rnnkit.layers._common import normalize_axis
from rnnkit.layers._masking import mask_or


class MergeLayer(Layer):
    """Base of layers that take a LIST of inputs: ``forward([x1, x2, ...], ctx)`` and
    ``backward(grad, ctx) -> [g1, g2, ...]``; ``build`` takes a list of shapes."""

    multi_input = True
    supports_masking = True

    def compute_mask(self, x: Any, mask: Any) -> Mask | None:
        """Step-wise OR of the inputs' masks; None when any input has none (Keras)."""
        masks = self._masks(x, mask)
        if masks is None or any(m is None for m in masks):
            return None
        return mask_or(masks, int(np.shape(x[0])[1]))

    def _masks(self, x: Any, mask: Any) -> list[Any] | None:
        if mask is None:
            return None
        if not isinstance(mask, (list, tuple)) or not isinstance(x, (list, tuple)) or len(mask) != len(x):
            raise InvalidInputError(f"{self.name}: expected one mask (or None) per input, got {mask!r}")
        if all(m is None for m in mask):
            return None
        for a, m in zip(x, mask, strict=True):
            if m is not None:
                shape = np.shape(a)
                if len(shape) < 2:
                    raise InvalidInputError(f"{self.name}: a mask came with an input of shape {shape}, "
                                            f"which has no time axis")
                m.check(shape[0], shape[1], self.name)
        return list(mask)

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

    def compute_mask(self, x: Any, mask: Any) -> Mask | None:
        """Along the time axis the masks are joined; along another a step is valid where any
        input's step is (an input without a mask counts as all valid) — Keras' rule."""
        masks = self._masks(x, mask)
        if masks is None:
            return None
        shapes = [np.shape(a) for a in x]
        ax = normalize_axis(self.axis, len(shapes[0]), self.name, shapes[0])
        valid = [np.ones(s[:2], bool) if m is None else m.valid(s[1])
                 for m, s in zip(masks, shapes, strict=True)]
        if ax == 1:
            return Mask(np.concatenate(valid, axis=1))
        if all(m is not None for m in masks):
            return mask_or(masks, int(shapes[0][1]))
        return Mask(np.logical_or.reduce(valid))

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


class _Elementwise(MergeLayer):
    """Inputs of one shape (a free ``None`` axis matches anything), merged element by element."""

    def __init__(self, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)

    def _merged_shape(self, shapes: list[Shape]) -> Shape:
        rank = shapes[0].rank
        if any(s.rank != rank for s in shapes):
            raise InvalidInputError(f"{self.name}: every input must have the same shape, got "
                                    f"{[str(s) for s in shapes]}")
        dims: list[int | None] = []
        for k in range(rank):
            known = {s[k] for s in shapes if s[k] is not None}
            if len(known) > 1:
                raise InvalidInputError(f"{self.name}: every input must have the same shape (nothing is "
                                        f"broadcast), got {[str(s) for s in shapes]}")
            dims.append(known.pop() if known else None)
        return Shape(dims)

    def _inputs(self, x: Any) -> list[np.ndarray]:
        if not isinstance(x, (list, tuple)):
            raise InvalidInputError(f"{self.name}: expected a list of input arrays, got {type(x).__name__}")
        arrs = [self._as_input(a) for a in x]
        if len(arrs) < 2 or any(a.shape != arrs[0].shape for a in arrs):
            raise InvalidInputError(f"{self.name}: expected >= 2 inputs of one shape (nothing is "
                                    f"broadcast), got shapes {[a.shape for a in arrs]}")
        return arrs

    def _check_grad(self, grad: Any, ctx: Ctx) -> tuple[np.ndarray, Any]:
        cache = ctx.peek(self)
        shape = cache[0]
        g = self._as_grad(grad, shape)
        ctx.load(self)  # consumed only once the gradient fits
        return g, cache

    def get_config(self) -> dict[str, Any]:
        return {"dtype": self.dtype.name, "name": self.name}


class Add(_Elementwise):
    """``y = x1 + x2 + ...``; backward hands the gradient to every input."""

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:  # type: ignore[override]
        arrs = self._inputs(x)
        ctx.save(self, (arrs[0].shape, len(arrs)))
        return np.sum(arrs, axis=0).astype(self.dtype, copy=False)

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        g, (_, n) = self._check_grad(grad, ctx)
        return [g.copy() for _ in range(n)]


class Average(_Elementwise):
    """``y = (x1 + ... + xn) / n``; backward hands ``g / n`` to every input."""

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:  # type: ignore[override]
        arrs = self._inputs(x)
        ctx.save(self, (arrs[0].shape, len(arrs)))
        return (np.sum(arrs, axis=0) / len(arrs)).astype(self.dtype, copy=False)

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        g, (_, n) = self._check_grad(grad, ctx)
        return [g / self.dtype.type(n) for _ in range(n)]


class Multiply(_Elementwise):
    """``y = x1 * x2 * ...``; backward: ``dx_i = g * prod_{j != i} x_j``.

    With masked inputs (:meth:`forward_masked`, which graph models call) it is Keras': a masked
    step of an input counts as 1, and when every input has a mask the steps masked in all of
    them are 0.
    """

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:  # type: ignore[override]
        return self.forward_masked(x, None, ctx)

    def forward_masked(self, x: Any, masks: list[Any] | None, ctx: Ctx) -> np.ndarray:
        """The product under the inputs' masks (one Mask or None per input)."""
        arrs = self._inputs(x)
        keeps: list[np.ndarray | None] = [None] * len(arrs)
        out_keep = None
        if masks is not None and len(masks) != len(arrs):
            raise InvalidInputError(f"{self.name}: expected one mask (or None) per input, {len(arrs)}, "
                                    f"got {len(masks)}")
        if masks is not None and any(m is not None for m in masks):
            B, T = arrs[0].shape[:2]
            for i, m in enumerate(map(Mask.of, masks)):
                if m is not None:
                    m.check(B, T, self.name)
                    keep = m.valid(T).reshape((B, T) + (1,) * (arrs[0].ndim - 2))
                    keeps[i] = keep
                    arrs[i] = np.where(keep, arrs[i], self.dtype.type(1.0))
            present = [k for k in keeps if k is not None]
            if len(present) == len(keeps):
                out_keep = np.logical_or.reduce(present)
        y = np.prod(arrs, axis=0).astype(self.dtype, copy=False)
        if out_keep is not None:
            y = np.where(out_keep, y, self.dtype.type(0.0))
        ctx.save(self, (arrs[0].shape, arrs, keeps, out_keep))
        return y

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        g, (_, arrs, keeps, out_keep) = self._check_grad(grad, ctx)
        if out_keep is not None:
            g = g * out_keep
        out = []
        for i in range(len(arrs)):
            others = [a for j, a in enumerate(arrs) if j != i]
            gi = g * np.prod(others, axis=0)
            out.append(gi if keeps[i] is None else gi * keeps[i])
        return out
