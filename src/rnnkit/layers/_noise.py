"""``SpatialDropout1D`` and ``GaussianNoise``: regularizing noise, active only in a Ctx that
drops (a training pass), the identity otherwise (Keras 3's).

The noise of a pass is drawn from ``ctx.rng`` (a Ctx made with a seed, or the seeds a model's
pass gives its calls, draws the same noise again) and kept in the Ctx for ``backward``: the
layers hold no state of a pass. Both pass a mask on unchanged, as Keras' do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer, check_float
from rnnkit._random import check_seed
from rnnkit._shape import Shape


class _Noise(Layer):
    supports_masking = True

    def _check_rebuild(self, shape: Shape) -> None:
        """Weightless: any valid shape is accepted again."""

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return shp


class SpatialDropout1D(_Noise):
    """Dropout of whole feature channels (Keras' ``SpatialDropout1D(rate, seed=None)``): for a
    (B, T, C) input, one keep/drop draw per (sample, channel), shared by every step.

    In a Ctx that drops: ``keep = (u >= rate) / (1 - rate)`` with ``u ~ U[0, 1)`` of shape
    (B, 1, C) from ``ctx.rng``, ``y = x * keep``, and backward returns ``g * keep`` (the draw is
    kept in the Ctx). Otherwise ``y = x``. ``0 <= rate < 1``; only rank-3 inputs (as Keras).
    ``seed`` is Keras' argument, kept in the config; the draws come from the pass's Ctx.
    """

    def __init__(self, rate: float, seed: int | None = None, *, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.rate = check_float(rate, "rate", self.name, lo=0.0, hi=1.0, hi_open=True)
        self.noise_seed = check_seed(seed, self.name)

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank != 3:
            raise InvalidInputError(f"{self.name}: expected a rank-3 input (batch, steps, channels), got "
                                    f"{shape} (rank {shape.rank})")

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        self._check_build_shape(Shape(arr.shape))
        keep = None
        if ctx.drops and self.rate > 0.0:
            keep = (ctx.rng.random((arr.shape[0], 1, arr.shape[2])) >= self.rate).astype(self.dtype)
            keep /= self.dtype.type(1.0 - self.rate)
        ctx.save(self, (arr.shape, keep))
        return arr.copy() if keep is None else arr * keep

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape, keep = ctx.peek(self)
        g = self._as_grad(grad, shape)
        ctx.load(self)  # consumed only once the gradient fits
        return g.copy() if keep is None else g * keep

    def get_config(self) -> dict[str, Any]:
        return {"rate": self.rate, "seed": self.noise_seed, "dtype": self.dtype.name, "name": self.name}


class GaussianNoise(_Noise):
    """Additive zero-centred Gaussian noise (Keras' ``GaussianNoise(stddev, seed=None)``).

    In a Ctx that drops: ``y = x + n``, ``n ~ N(0, stddev**2)`` elementwise from ``ctx.rng``;
    otherwise ``y = x``. Backward is the identity in both (``dy/dx = 1``: the noise does not
    depend on ``x``). ``stddev >= 0``; any rank. ``seed`` as :class:`SpatialDropout1D`'s.
    """

    def __init__(self, stddev: float, seed: int | None = None, *, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.stddev = check_float(stddev, "stddev", self.name, lo=0.0)
        self.noise_seed = check_seed(seed, self.name)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        if arr.ndim < 1:
            raise InvalidInputError(f"{self.name}: expected an array input, got a scalar")
        ctx.save(self, arr.shape)
        if not ctx.drops or self.stddev == 0.0:
            return arr.copy()
        noise = ctx.rng.normal(0.0, self.stddev, arr.shape).astype(self.dtype)
        return arr + noise

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape = ctx.peek(self)
        g = self._as_grad(grad, shape)
        ctx.load(self)  # consumed only once the gradient fits
        return g.copy()

    def get_config(self) -> dict[str, Any]:
        return {"stddev": self.stddev, "seed": self.noise_seed, "dtype": self.dtype.name, "name": self.name}
