"""``Dropout``: inverted dropout, active only in a training ``Ctx``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidParameterError
from rnnkit._layer import Layer, check_float
from rnnkit._shape import Shape


class Dropout(Layer):
    """Inverted dropout with drop probability ``rate`` (0 <= rate < 1).

    In a training Ctx: ``mask = (u >= rate) / (1 - rate)`` with ``u ~ U[0, 1)`` drawn from
    ``ctx.rng`` (so a Ctx seeded the same way draws the same mask), ``y = x * mask``; the mask
    is parked in the Ctx and backward returns ``g * mask``. In an inference Ctx: ``y = x``.
    Expected value is unchanged in both modes. No weights. A mask passes through.
    """

    supports_masking = True

    def __init__(self, rate: float, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        r = check_float(rate, "rate", self.name)
        if not 0.0 <= r < 1.0:
            raise InvalidParameterError(f"{self.name}: rate must be a number in [0, 1), got {rate!r}")
        self.rate = r

    def _check_rebuild(self, shape: Shape) -> None:
        """Weightless: any shape is accepted again."""

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        return Shape.of(shape)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        if not ctx.drops or self.rate == 0.0:
            if ctx.training_mode:
                ctx.save(self, (arr.shape, None))
            return arr.copy()
        mask = (ctx.rng.random(arr.shape) >= self.rate).astype(self.dtype)
        mask /= self.dtype.type(1.0 - self.rate)
        ctx.save(self, (arr.shape, mask))
        return arr * mask

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape, mask = ctx.peek(self)
        g = self._as_grad(grad, shape)
        ctx.load(self)  # consumed only once the gradient fits
        return g.copy() if mask is None else g * mask

    def get_config(self) -> dict[str, Any]:
        return {"rate": self.rate, "dtype": self.dtype.name, "name": self.name}
