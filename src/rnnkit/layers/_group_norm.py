"""``GroupNormalization``: Keras 3's layer, each sample normalized within groups of channels."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._initializers import zeros
from rnnkit._layer import Layer, check_bool
from rnnkit._numbers import check_float, check_int
from rnnkit._shape import Shape
from rnnkit.layers._common import normalize_axis


class GroupNormalization(Layer):
    """``GroupNormalization(groups=32, axis=-1, epsilon=1e-3, center=True, scale=True, *,
    dtype="float32", name=None)``: Keras 3's layer. The ``C`` channels along ``axis`` are split
    into ``groups`` consecutive groups of ``C / groups``; each sample is normalized over every
    value of each group (its channels, and every other non-batch axis)::

        mean, var = mean(v), mean((v - mean)^2)   v: one sample's values of one group
        y = (x - mean) / sqrt(var + epsilon) * gamma[c] + beta[c]

    ``groups`` >= 1 dividing ``C`` (``-1``: one group per channel, as
    Keras; the build sets it to ``C``); ``axis`` an int
    (not the batch axis 0; negative counts from the end); the variance is the biased one, as
    Keras computes it; ``epsilon`` > 0. ``groups=1`` over (B, T, C) normalizes each sample over
    all its values; ``groups=C`` each channel over the time axis.

    Weights, in Keras' order: ``gamma`` (C,) ones (absent with ``scale=False``), ``beta`` (C,)
    zeros (absent with ``center=False``). ``C`` must be known at build.

    Masks: a mask passes through unchanged and the moments include every step, padded ones
    too: Keras 3.15.1's layer declares ``supports_masking`` and its ``call`` takes no mask.

    Backward, with ``xhat = (x - mean) / s``, ``s = sqrt(var + epsilon)``, ``d = g * gamma``,
    means over each sample's group::

        dx = (d - mean(d) - xhat * mean(d * xhat)) / s
        dgamma[c] = sum(g * xhat),  dbeta[c] = sum(g)          (over every axis but ``axis``)
    """

    supports_masking = True

    def __init__(self, groups: int = 32, axis: int = -1, epsilon: float = 1e-3, center: bool = True,
                 scale: bool = True, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.groups = check_int(groups, "groups", self.name)
        if self.groups == 0 or self.groups < -1:
            raise InvalidParameterError(f"{self.name}: groups must be >= 1 (or -1: one per channel), "
                                        f"got {groups}")
        self.axis = check_int(axis, "axis", self.name)
        self.epsilon = check_float(epsilon, "epsilon", self.name, lo=0.0, lo_open=True)
        self.center = check_bool(center, "center", self.name)
        self.scale = check_bool(scale, "scale", self.name)

    def _axis(self, shape: Shape | tuple[Any, ...]) -> int:
        return normalize_axis(self.axis, len(shape), self.name, shape)

    def _groups(self, channels: int) -> int:
        return channels if self.groups == -1 else self.groups

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank < 2:
            raise InvalidInputError(f"{self.name}: expected an input of rank >= 2 (batch, ...), got "
                                    f"{shape} (rank {shape.rank})")
        a = self._axis(shape)
        C = shape[a]
        if C is None or C < 1:
            raise InvalidInputError(f"{self.name}: the channel axis {a} of {shape} must have a known size "
                                    f">= 1 (gamma and beta have its size)")
        G = self._groups(C)
        if G > C or C % G:
            raise InvalidParameterError(f"{self.name}: groups must divide the {C} channels of axis {a} "
                                        f"(input {shape}), got groups={G}")

    def _check_rebuild(self, shape: Shape) -> None:
        a = self._axis(self.input_shape)
        if shape.rank != self.input_shape.rank or shape[a] != self.input_shape[a]:
            raise InvalidInputError(f"{self.name}: built for {self.input_shape}, asked to build again for "
                                    f"{shape}")

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        C = int(shape[self._axis(shape)])  # type: ignore[arg-type]
        self.groups = self._groups(C)   # Keras: -1 becomes the channel count at build (and in the config)
        if self.scale:
            self._add_weight("gamma", np.ones(C, self.dtype))
        if self.center:
            self._add_weight("beta", zeros((C,), self.dtype))

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return shp

    def _grouped(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], list[int]]:
        """(the shape with ``axis`` split into (G, C/G), the reduced axes of that shape, the
        broadcast shape of a per-channel weight in it)."""
        a = self._axis(shape)
        C = shape[a]
        G = self._groups(C)
        gshape = (*shape[:a], G, C // G, *shape[a + 1:])
        red = tuple(k for k in range(1, len(gshape)) if k != a)
        bshape = [1] * len(gshape)
        bshape[a], bshape[a + 1] = G, C // G
        return gshape, red, bshape

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        self._require_built()
        arr = self._as_input(x)
        a = self._axis(self.input_shape)
        if arr.ndim != self.input_shape.rank or arr.shape[a] != self.input_shape[a]:
            raise InvalidInputError(f"{self.name}: expected an input like {self.input_shape}, got shape "
                                    f"{arr.shape}")
        gshape, red, bshape = self._grouped(arr.shape)
        xs = arr.reshape(gshape)
        xhat = xs - xs.mean(axis=red, keepdims=True)
        var = np.mean(np.square(xhat), axis=red, keepdims=True)
        inv = 1.0 / np.sqrt(var + self.dtype.type(self.epsilon))
        xhat *= inv
        y = xhat * self._weights["gamma"].reshape(bshape) if self.scale else xhat.copy()
        if self.center:
            y += self._weights["beta"].reshape(bshape)
        ctx.save(self, (xhat, inv, arr.shape))
        return y.reshape(arr.shape)

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray | None:
        self._require_built("backward")
        xhat, inv, shape = ctx.peek(self)
        g = self._as_grad(grad, shape)
        ctx.load(self)  # consumed only once the gradient fits
        gshape, red, bshape = self._grouped(shape)
        g = g.reshape(gshape)
        a = self._axis(shape)
        rest = tuple(k for k in range(len(gshape)) if k not in (a, a + 1))
        C = shape[a]
        if self.scale:
            ctx.add_grad(self, "gamma", (g * xhat).sum(axis=rest).reshape(C))
        if self.center:
            ctx.add_grad(self, "beta", g.sum(axis=rest).reshape(C))
        if not ctx.needs_input_grad(self):
            return None
        d = g * self._weights["gamma"].reshape(bshape) if self.scale else g
        dx = d - d.mean(axis=red, keepdims=True)
        dx -= xhat * np.mean(d * xhat, axis=red, keepdims=True)
        dx *= inv
        return dx.reshape(shape)

    def get_config(self) -> dict[str, Any]:
        return {"groups": self.groups, "axis": self.axis, "epsilon": self.epsilon, "center": self.center,
                "scale": self.scale, "dtype": self.dtype.name, "name": self.name}
