"""Merge layers of graph models (several inputs, one output): ``Concatenate``, ``Add``,
``Multiply``, ``Average``, ``Subtract``, ``Maximum``, ``Minimum`` and ``Dot``.

Masks (Keras' rules): a merge layer receives the list of its inputs' masks. ``Add``,
``Multiply``, ``Average``, ``Subtract``, ``Maximum`` and ``Minimum`` give the step-wise OR of the
masks (None when any input has none); ``Concatenate`` along the time axis joins the masks, along
another axis a step is valid where any input's step is (an input without a mask counts as all
valid); ``Dot`` consumes the masks (its output has none).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, MethodNotImplementedError
from rnnkit._layer import Layer, check_bool
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
        raise MethodNotImplementedError(f"{type(self).__name__}._merged_shape is not implemented; a "
                                        f"subclass provides it")

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


class Subtract(_Elementwise):
    """``y = x1 - x2`` (exactly two inputs, Keras'); backward: ``[g, -g]``."""

    def _inputs(self, x: Any) -> list[np.ndarray]:
        arrs = super()._inputs(x)
        if len(arrs) != 2:
            raise InvalidInputError(f"{self.name}: Subtract takes exactly 2 inputs, got {len(arrs)}")
        return arrs

    def _merged_shape(self, shapes: list[Shape]) -> Shape:
        if len(shapes) != 2:
            raise InvalidInputError(f"{self.name}: Subtract takes exactly 2 inputs, got {len(shapes)} shapes")
        return super()._merged_shape(shapes)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:  # type: ignore[override]
        a, b = self._inputs(x)
        ctx.save(self, (a.shape,))
        return a - b

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        g, _ = self._check_grad(grad, ctx)
        return [g.copy(), -g]


class _Extreme(_Elementwise):
    """The elementwise maximum / minimum, folded left to right as Keras folds it
    (``y = op(op(x1, x2), x3) ...``). Backward through each pairwise step gives the gradient to
    the larger (smaller) operand and splits it in halves where the two are equal (torch's rule,
    which Keras on torch follows)."""

    _take_first: Any = None   # np.greater (Maximum) or np.less (Minimum)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:  # type: ignore[override]
        arrs = self._inputs(x)
        acc = arrs[0]
        partial = [acc]
        for a in arrs[1:]:
            acc = np.where(type(self)._take_first(acc, a), acc, a)
            partial.append(acc)
        ctx.save(self, (arrs[0].shape, arrs, partial))
        return acc.copy() if acc is arrs[0] else acc

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        g, (_, arrs, partial) = self._check_grad(grad, ctx)
        half = self.dtype.type(0.5)
        out: list[np.ndarray] = [g] * len(arrs)
        for i in range(len(arrs) - 1, 0, -1):   # y_i = op(y_{i-1}, x_i)
            prev, a = partial[i - 1], arrs[i]
            first = type(self)._take_first(prev, a)
            tie = prev == a
            w_prev = np.where(tie, half, first.astype(self.dtype))
            out[i] = g * (np.where(tie, half, (~first).astype(self.dtype)))
            g = g * w_prev
        out[0] = g
        return [np.ascontiguousarray(o) for o in out]


class Maximum(_Extreme):
    """``y = max(x1, x2, ...)`` elementwise (see :class:`_Extreme` for the gradient)."""

    _take_first = np.greater


class Minimum(_Extreme):
    """``y = min(x1, x2, ...)`` elementwise (see :class:`_Extreme` for the gradient)."""

    _take_first = np.less


class Dot(MergeLayer):
    """The dot product of two inputs along one axis of each, sample by sample (Keras'
    ``Dot(axes, normalize=False)``).

    ``axes``: an int (the same axis of both) or a pair ``(a1, a2)``; negative axes count from
    the end; the batch axis is refused. The output's axes are the first input's other axes, then
    the second's (the batch once): (B, T, F) . (B, S, F) with ``axes=2`` gives (B, T, S); two
    (B, F) give (B, 1). ``normalize=True`` first L2-normalizes each input along its axis as
    Keras does: ``x * min(1 / sqrt(sum x**2), 1e7)``. Sizes of the two axes that differ raise
    InvalidInputError at build naming ``axes`` and both sizes. Backward: the products' gradients
    (through the normalization). Masks: accepted and consumed; the output has none (Keras).
    """

    #: Keras' backend epsilon: the norm's floor in ``normalize``
    EPSILON = 1e-7

    def __init__(self, axes: Any, normalize: bool = False, *, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        if isinstance(axes, (list, tuple)):
            if len(axes) != 2:
                raise InvalidParameterError(f"{self.name}: axes must be an int or a pair of ints, got "
                                            f"{tuple(axes)}")
            self.axes: int | tuple[int, int] = (check_int(axes[0], "axes", self.name),
                                                check_int(axes[1], "axes", self.name))
        else:
            self.axes = check_int(axes, "axes", self.name)
        self.normalize = check_bool(normalize, "normalize", self.name)

    def compute_mask(self, x: Any, mask: Any) -> Mask | None:
        self._masks(x, mask)   # (checked, then consumed)
        return None

    def _axes_for(self, shapes: list[Any]) -> tuple[int, int]:
        if len(shapes) != 2:
            raise InvalidInputError(f"{self.name}: Dot takes exactly 2 inputs, got {len(shapes)}")
        pair = self.axes if isinstance(self.axes, tuple) else (self.axes, self.axes)
        return (normalize_axis(pair[0], len(shapes[0]), self.name, tuple(shapes[0])),
                normalize_axis(pair[1], len(shapes[1]), self.name, tuple(shapes[1])))

    def _merged_shape(self, shapes: list[Shape]) -> Shape:
        a0, a1 = self._axes_for(shapes)
        s0, s1 = shapes
        if s0[a0] is not None and s1[a1] is not None and s0[a0] != s1[a1]:
            raise InvalidInputError(f"{self.name}: axes {self.axes} pair axis {a0} of size {s0[a0]} with "
                                    f"axis {a1} of size {s1[a1]}; the sizes must be equal (input shapes "
                                    f"{s0}, {s1})")
        if s0[0] is not None and s1[0] is not None and s0[0] != s1[0]:
            raise InvalidInputError(f"{self.name}: the two inputs' batch sizes differ: {s0}, {s1}")
        rest = [d for k, d in enumerate(s0.dims) if k not in (0, a0)] + \
            [d for k, d in enumerate(s1.dims) if k not in (0, a1)]
        return Shape((s0[0], *(rest or [1])))

    def _normalized(self, x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
        inv = np.minimum(1.0 / np.sqrt(np.sum(x * x, axis=axis, keepdims=True)),
                         self.dtype.type(1.0 / self.EPSILON)).astype(self.dtype)
        return x * inv, inv

    def _normalized_grad(self, g: np.ndarray, y: np.ndarray, inv: np.ndarray, axis: int) -> np.ndarray:
        """The gradient through ``y = x * inv``; where the floor holds, ``inv`` is a constant."""
        floor = inv >= self.dtype.type(1.0 / self.EPSILON)
        proj = np.where(floor, 0.0, np.sum(g * y, axis=axis, keepdims=True)).astype(self.dtype)
        return (g - y * proj) * inv

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:  # type: ignore[override]
        return self.forward_masked(x, None, ctx)

    def forward_masked(self, x: Any, masks: list[Any] | None, ctx: Ctx) -> np.ndarray:
        """The product; the inputs' masks (one Mask or None per input) are checked and
        consumed (Keras' Dot reads no mask)."""
        if not isinstance(x, (list, tuple)) or len(x) != 2:
            raise InvalidInputError(f"{self.name}: expected a list of exactly 2 input arrays, got "
                                    f"{type(x).__name__ if not isinstance(x, (list, tuple)) else len(x)}")
        a, b = (self._as_input(v) for v in x)
        self._merged_shape([Shape(a.shape), Shape(b.shape)])
        if a.shape[0] != b.shape[0]:
            raise InvalidInputError(f"{self.name}: the two inputs' batch sizes differ: {a.shape}, {b.shape}")
        if masks is not None:
            self._masks([a, b], masks)
        a0, a1 = self._axes_for([a.shape, b.shape])
        na = nb = None
        if self.normalize:
            (a, na), (b, nb) = self._normalized(a, a0), self._normalized(b, a1)
        # a as (B, P, n) with its axis last, b as (B, n, Q) with its axis second: one batched matmul
        am, bm = np.moveaxis(a, a0, -1), np.moveaxis(b, a1, 1)
        B, n = a.shape[0], a.shape[a0]
        y = np.matmul(am.reshape(B, -1, n), bm.reshape(B, n, -1))
        ctx.save(self, (a, b, na, nb, a0, a1, y.shape))
        out_shape = self._merged_shape([Shape(a.shape), Shape(b.shape)]).dims
        return y.reshape((B, *out_shape[1:]))   # type: ignore[arg-type]

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        a, b, na, nb, a0, a1, yshape = ctx.peek(self)
        out_shape = self._merged_shape([Shape(a.shape), Shape(b.shape)]).dims
        g = self._as_grad(grad, (a.shape[0], *out_shape[1:]))   # type: ignore[arg-type]
        ctx.load(self)  # consumed only once the gradient fits
        B, n = a.shape[0], a.shape[a0]
        am, bm = np.moveaxis(a, a0, -1), np.moveaxis(b, a1, 1)
        gm = g.reshape(yshape)
        ga = np.matmul(gm, bm.reshape(B, n, -1).transpose(0, 2, 1)).reshape(am.shape)
        gb = np.matmul(am.reshape(B, -1, n).transpose(0, 2, 1), gm).reshape(bm.shape)
        ga, gb = np.moveaxis(ga, -1, a0), np.moveaxis(gb, 1, a1)
        if self.normalize:
            ga, gb = self._normalized_grad(ga, a, na, a0), self._normalized_grad(gb, b, nb, a1)
        return [np.ascontiguousarray(ga), np.ascontiguousarray(gb)]

    def get_config(self) -> dict[str, Any]:
        return {"axes": list(self.axes) if isinstance(self.axes, tuple) else self.axes,
                "normalize": self.normalize, "dtype": self.dtype.name, "name": self.name}
