"""``LayerNormalization`` (each sample over chosen axes) and ``BatchNormalization`` (each channel
over the batch), Keras 3's layers."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._initializers import zeros
from rnnkit._layer import Layer, check_bool
from rnnkit._numbers import check_float, check_int
from rnnkit._shape import Shape
from rnnkit.layers._common import normalize_axis


class LayerNormalization(Layer):
    """Normalize every sample over ``axis`` (Keras 3's ``LayerNormalization``)::

        mean, var = mean(x), mean((x - mean)^2)      over the axes in ``axis``, per sample
        y = (x - mean) / sqrt(var + epsilon) * gamma + beta

    ``axis``: an int or a list of ints (negative counts from the end; the batch axis 0 is
    refused), default ``-1``; the variance is the biased one (divided by the number of values
    reduced), as Keras computes it. ``epsilon`` (> 0) defaults to ``1e-3`` (Keras' default).

    Weights, in Keras' order: ``gamma`` (ones; absent with ``scale=False``) and ``beta`` (zeros;
    absent with ``center=False``), each of the shape of the normalized axes (the input's sizes
    along ``axis``, sorted), so those sizes must be known at build.

    Masks: acts on each sample (each timestep, with ``axis=-1``) alone, so a mask passes through
    unchanged (Keras).

    The last axis alone is normalized by a compiled kernel (:mod:`rnnkit.kernels._norm`, one
    row at a time) in the ``"fast"`` kernel mode; other axes, and the ``"reference"`` mode, by
    NumPy.

    Backward, with ``xhat = (x - mean) / s``, ``s = sqrt(var + epsilon)``, ``d = g * gamma``::

        dx = (d - mean(d) - xhat * mean(d * xhat)) / s         (means over ``axis``)
        dgamma = sum(g * xhat),  dbeta = sum(g)                 (over every other axis)
    """

    supports_masking = True

    def __init__(self, axis: int | list[int] | tuple[int, ...] = -1, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, *, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        if isinstance(axis, (list, tuple)):
            if not axis:
                raise InvalidParameterError(f"{self.name}: axis must be an int or a non-empty list of "
                                            f"ints, got {axis!r}")
            self.axis: int | list[int] = [check_int(a, "axis", self.name) for a in axis]
        else:
            self.axis = check_int(axis, "axis", self.name)
        self.epsilon = check_float(epsilon, "epsilon", self.name, lo=0.0, lo_open=True)
        self.center = check_bool(center, "center", self.name)
        self.scale = check_bool(scale, "scale", self.name)

    def _axes(self, shape: Shape | tuple[Any, ...]) -> tuple[int, ...]:
        """The normalized axes of an input of ``shape``, sorted, each once."""
        rank = len(shape)
        given = self.axis if isinstance(self.axis, list) else [self.axis]
        axes = sorted(normalize_axis(a, rank, self.name, shape) for a in given)
        if len(set(axes)) != len(axes):
            raise InvalidParameterError(f"{self.name}: axis {self.axis} names an axis twice for an input "
                                        f"of rank {rank} (shape {shape})")
        return tuple(axes)

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank < 2:
            raise InvalidInputError(f"{self.name}: expected an input of rank >= 2 (batch, ...), got "
                                    f"{shape} (rank {shape.rank})")
        for a in self._axes(shape):
            size = shape[a]
            if size is None or size < 1:
                raise InvalidInputError(f"{self.name}: the normalized axis {a} of {shape} must have a "
                                        f"known size >= 1 (gamma and beta have its size)")

    def _param_shape(self, shape: Shape | tuple[Any, ...]) -> tuple[int, ...]:
        return tuple(int(shape[a] or 0) for a in self._axes(shape))

    def _check_rebuild(self, shape: Shape) -> None:
        built = self._param_shape(self.input_shape)
        if shape.rank != self.input_shape.rank or self._param_shape(shape) != built:
            raise InvalidInputError(f"{self.name}: built for {self.input_shape} (normalized sizes "
                                    f"{self._param_shape(self.input_shape)}), asked to build again for "
                                    f"{shape}")

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        p = self._param_shape(shape)
        if self.scale:
            self._add_weight("gamma", np.ones(p, self.dtype))
        if self.center:
            self._add_weight("beta", zeros(p, self.dtype))

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return shp

    def _check_input(self, x: Any) -> tuple[np.ndarray, tuple[int, ...], list[int]]:
        self._require_built()
        arr = self._as_input(x)
        built = self._param_shape(self.input_shape)
        if arr.ndim != self.input_shape.rank or self._param_shape(arr.shape) != built:
            raise InvalidInputError(f"{self.name}: expected an input like {self.input_shape} (normalized "
                                    f"sizes {self._param_shape(self.input_shape)}), got shape {arr.shape}")
        axes = self._axes(arr.shape)
        bshape = [arr.shape[a] if a in axes else 1 for a in range(arr.ndim)]
        return arr, axes, bshape

    def _kernel(self, axes: tuple[int, ...], rank: int) -> ModuleType | None:
        """The compiled kernels (:mod:`rnnkit.kernels._norm`) when they take this pass: the last
        axis alone, in the ``"fast"`` kernel mode with numba installed; else None (NumPy)."""
        if axes != (rank - 1,) or kernels.mode() != "fast" or not kernels.available():
            return None
        # compiled with numba, an optional dependency: loaded on first use, once available() said so
        from rnnkit.kernels import _norm
        return _norm

    def _gamma_beta(self) -> tuple[np.ndarray, np.ndarray]:
        """gamma and beta, or an empty array for the one the layer lacks (the kernels' "none")."""
        none = np.empty(0, self.dtype)
        gamma = self._weights["gamma"] if self.scale else none
        return gamma, (self._weights["beta"] if self.center else none)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr, axes, bshape = self._check_input(x)
        nk = self._kernel(axes, arr.ndim)
        if nk is not None:
            F = arr.shape[-1]
            X = np.ascontiguousarray(arr).reshape(-1, F)
            Y, H = np.empty_like(X), np.empty_like(X)
            inv_rows = np.empty(X.shape[0], self.dtype)
            nk.forward(X, *self._gamma_beta(), self.epsilon, Y, H, inv_rows)
            ctx.save(self, (H.reshape(arr.shape), inv_rows.reshape(*arr.shape[:-1], 1)))
            return Y.reshape(arr.shape)
        xhat = arr - arr.mean(axis=axes, keepdims=True)
        var = np.mean(np.square(xhat), axis=axes, keepdims=True)
        var += self.dtype.type(self.epsilon)
        inv = 1.0 / np.sqrt(var)
        xhat *= inv
        if self.scale:
            y = xhat * self._weights["gamma"].reshape(bshape)
        else:
            y = xhat.copy() if ctx.training_mode else xhat
        if self.center:
            y += self._weights["beta"].reshape(bshape)
        ctx.save(self, (xhat, inv))
        return y

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray | None:
        self._require_built("backward")
        xhat, inv = ctx.peek(self)
        g = self._as_grad(grad, xhat.shape)
        ctx.load(self)  # consumed only once the gradient fits
        axes = self._axes(xhat.shape)
        rest = tuple(a for a in range(xhat.ndim) if a not in axes)
        bshape = [xhat.shape[a] if a in axes else 1 for a in range(xhat.ndim)]
        p = self._param_shape(xhat.shape)
        nk = self._kernel(axes, xhat.ndim)
        if nk is not None:
            F = xhat.shape[-1]
            gamma, _ = self._gamma_beta()
            want = ctx.needs_input_grad(self)
            dgamma = np.empty(F if self.scale else 0, self.dtype)
            dbeta = np.empty(F if self.center else 0, self.dtype)
            dx = np.empty(xhat.shape if want else (0, F), self.dtype)
            nk.backward(np.ascontiguousarray(g).reshape(-1, F), xhat.reshape(-1, F), inv.reshape(-1), gamma,
                        dx.reshape(-1, F), dgamma, dbeta, want)
            if self.center:
                ctx.add_grad(self, "beta", dbeta)
            if self.scale:
                ctx.add_grad(self, "gamma", dgamma)
            return dx if want else None
        if self.center:
            ctx.add_grad(self, "beta", g.sum(axis=rest).reshape(p))
        if self.scale:
            ctx.add_grad(self, "gamma", (g * xhat).sum(axis=rest).reshape(p))
        if not ctx.needs_input_grad(self):
            return None
        d = g * self._weights["gamma"].reshape(bshape) if self.scale else g.copy()
        dx = d - d.mean(axis=axes, keepdims=True)
        dx -= xhat * np.mean(d * xhat, axis=axes, keepdims=True)
        dx *= inv
        return dx

    def get_config(self) -> dict[str, Any]:
        return {"axis": self.axis, "epsilon": self.epsilon, "center": self.center, "scale": self.scale,
                "dtype": self.dtype.name, "name": self.name}


#: Keras' ``backend.epsilon()``: added to the count of real values in a masked batch's moments
MASK_EPSILON = 1e-7


class BatchNormalization(Layer):
    """Normalize each channel over the batch (Keras 3's ``BatchNormalization``)::

        training:   y = (x - mean) / sqrt(var + epsilon) * gamma + beta
                    (mean, var: the batch's, over every axis but ``axis``; var biased)
        inference:  y = (x - moving_mean) / sqrt(moving_variance + epsilon) * gamma + beta

    ``axis`` (an int, default -1: the channels), ``momentum`` (0.99), ``epsilon`` (1e-3),
    ``center``, ``scale``: Keras'. A training pass (a training :class:`~rnnkit.Ctx`: ``fit``,
    ``training=True``) uses the batch's statistics and then moves the moving ones, as Keras::

        moving_mean = moving_mean * momentum + mean * (1 - momentum)     (the same for the variance)

    (one write of both, under :data:`rnnkit._consistency.WEIGHTS`); any other pass uses the
    moving statistics and changes nothing. A layer whose moving statistics change in a training
    pass is not "unchanged by a pass" there: it goes through the layer checks one by one.

    Weights, in Keras' order: ``gamma`` (ones; absent with ``scale=False``), ``beta`` (zeros;
    absent with ``center=False``), ``moving_mean`` (zeros), ``moving_variance`` (ones), each
    (channels,). Only gamma and beta are trained (:attr:`trainable_names`).

    Masks (Keras 3): passed on; in a training pass the batch's statistics are those of the real
    steps only, ``mean = sum(m * x) / (sum(m) + 1e-7)`` and ``var = sum(m * (x - mean)^2) /
    (sum(m) + 1e-7)`` (Keras' formulas, its ``epsilon()`` included); every step is normalized.

    Backward of a training pass, with weights ``w`` (``1 / n``, or ``m / (sum(m) + 1e-7)``),
    ``xhat = (x - mean) / s``, ``d = g * gamma``, sums over every axis but ``axis``::

        dx = (d - w * sum(d) - w * (xhat - sum(w * xhat)) * sum(d * xhat)) / s
    """

    supports_masking = True

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3, center: bool = True,
                 scale: bool = True, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.axis = check_int(axis, "axis", self.name)
        self.momentum = check_float(momentum, "momentum", self.name, lo=0.0, hi=1.0)
        self.epsilon = check_float(epsilon, "epsilon", self.name, lo=0.0, lo_open=True)
        self.center = check_bool(center, "center", self.name)
        self.scale = check_bool(scale, "scale", self.name)

    def _ax(self, shape: Shape | tuple[Any, ...]) -> int:
        return normalize_axis(self.axis, len(shape), self.name, shape)

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank < 2:
            raise InvalidInputError(f"{self.name}: expected an input of rank >= 2 (batch, ...), got "
                                    f"{shape} (rank {shape.rank})")
        size = shape[self._ax(shape)]
        if size is None or size < 1:
            raise InvalidInputError(f"{self.name}: axis {self.axis} of {shape} must have a known size >= 1 "
                                    f"(the statistics have its size)")

    def _check_rebuild(self, shape: Shape) -> None:
        if shape.rank != self.input_shape.rank or shape[self._ax(shape)] != self.input_shape[self.axis]:
            raise InvalidInputError(f"{self.name}: built for {self.input_shape}, asked to build again for "
                                    f"{shape}")

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        C = int(shape[self._ax(shape)] or 0)
        if self.scale:
            self._add_weight("gamma", np.ones(C, self.dtype))
        if self.center:
            self._add_weight("beta", zeros((C,), self.dtype))
        self._add_weight("moving_mean", zeros((C,), self.dtype))
        self._add_weight("moving_variance", np.ones(C, self.dtype))

    @property
    def trainable_names(self) -> list[str]:
        """gamma and beta (the moving statistics move in training passes, not by gradients)."""
        return [n for n in self._weights if not n.startswith("moving_")]

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return shp

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        self._require_built()
        arr = self._as_input(x)
        if arr.ndim != self.input_shape.rank or arr.shape[self._ax(arr.shape)] != self.input_shape[self.axis]:
            raise InvalidInputError(f"{self.name}: expected an input like {self.input_shape}, got shape "
                                    f"{arr.shape}")
        ax = self._ax(arr.shape)
        rest = tuple(a for a in range(arr.ndim) if a != ax)
        bshape = [arr.shape[a] if a == ax else 1 for a in range(arr.ndim)]
        one = self.dtype.type(1)
        w: np.ndarray | None = None
        if ctx.drops:                                   # a training pass: the batch's statistics
            mask = ctx.mask
            if mask is None:
                n = arr.size // arr.shape[ax]
                mean = arr.mean(axis=rest, keepdims=True)
                xc = arr - mean
                var = np.mean(np.square(xc), axis=rest, keepdims=True)
                w = np.full((1,) * arr.ndim, one / self.dtype.type(n), self.dtype)
            else:
                if arr.ndim != 3 or ax != 2:
                    raise InvalidInputError(f"{self.name}: a masked input must be (batch, steps, channels) "
                                            f"normalized over its last axis; got shape {arr.shape}, "
                                            f"axis {self.axis}")
                mask.check(arr.shape[0], arr.shape[1], self.name)
                m = mask.valid(arr.shape[1]).astype(self.dtype)[:, :, None]
                w = m / (m.sum() + self.dtype.type(MASK_EPSILON))
                mean = (w * arr).sum(axis=rest, keepdims=True)
                xc = arr - mean
                var = (w * np.square(xc)).sum(axis=rest, keepdims=True)
            self._move(mean.reshape(-1), var.reshape(-1))
        else:
            mean = self._weights["moving_mean"].reshape(bshape)
            var = self._weights["moving_variance"].reshape(bshape)
            xc = arr - mean
        inv = one / np.sqrt(var + self.dtype.type(self.epsilon))
        xhat = xc * inv
        y = xhat * self._weights["gamma"].reshape(bshape) if self.scale else xhat.copy()
        if self.center:
            y += self._weights["beta"].reshape(bshape)
        ctx.save(self, (xhat, inv, w))
        return y

    def _move(self, mean: np.ndarray, var: np.ndarray) -> None:
        """The moving statistics moved toward a training batch's (one write of both)."""
        mom = self.dtype.type(self.momentum)
        new_mean = self._weights["moving_mean"] * mom + mean * (self.dtype.type(1) - mom)
        new_var = self._weights["moving_variance"] * mom + var * (self.dtype.type(1) - mom)
        with WEIGHTS:
            self._install("moving_mean", np.ascontiguousarray(new_mean, self.dtype))
            self._install("moving_variance", np.ascontiguousarray(new_var, self.dtype))

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray | None:
        self._require_built("backward")
        xhat, inv, w = ctx.peek(self)
        g = self._as_grad(grad, xhat.shape)
        ctx.load(self)  # consumed only once the gradient fits
        ax = self._ax(xhat.shape)
        rest = tuple(a for a in range(xhat.ndim) if a != ax)
        bshape = [xhat.shape[a] if a == ax else 1 for a in range(xhat.ndim)]
        if self.center:
            ctx.add_grad(self, "beta", g.sum(axis=rest))
        if self.scale:
            ctx.add_grad(self, "gamma", (g * xhat).sum(axis=rest))
        if not ctx.needs_input_grad(self):
            return None
        d = g * self._weights["gamma"].reshape(bshape) if self.scale else g.copy()
        if w is None:                                   # the moving statistics: constants
            return d * inv
        sd = d.sum(axis=rest, keepdims=True)
        sdx = (d * xhat).sum(axis=rest, keepdims=True)
        swx = (w * xhat).sum(axis=rest, keepdims=True)
        dx = d - w * sd
        dx -= w * (xhat - swx) * sdx
        dx *= inv
        return dx

    def get_config(self) -> dict[str, Any]:
        return {"axis": self.axis, "momentum": self.momentum, "epsilon": self.epsilon, "center": self.center,
                "scale": self.scale, "dtype": self.dtype.name, "name": self.name}
