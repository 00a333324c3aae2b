"""Weight initialisers, public: what a custom cell's :class:`~rnnkit.Param` draws with.

Each function draws from the generator it is given, in float64, and casts to ``dtype`` at the
end, so float32 and float64 layers built from one seed hold the same values (to float32
rounding). A :class:`~rnnkit.Param` takes ``init(rng, shape, dtype)``; wrap these with the
arguments of your weight, e.g. ``lambda rng, shape, dt: glorot_uniform(rng, shape, F, H, dt)``.

- ``glorot_uniform(rng, shape, fan_in, fan_out, dtype)``: U(-l, l), ``l = sqrt(6 / (fan_in + fan_out))``;
- ``orthogonal(rng, n, dtype, gain=1.0)``: an (n, n) orthogonal matrix (QR of a Gaussian
  draw, the signs of R's diagonal folded into Q), times ``gain``;
- ``semi_orthogonal(rng, rows, cols, dtype)``: orthonormal rows or columns, whichever are fewer;
- ``kaiming_uniform(rng, shape, fan_in, dtype, gain=sqrt(2))``: U(-l, l), ``l = gain * sqrt(3 / fan_in)``;
- ``uniform(rng, shape, low, high, dtype)``: U(low, high); ``zeros(shape, dtype)``: all 0.

A weight too large to allocate raises :class:`~rnnkit.InvalidParameterError` naming its shape.
"""

from rnnkit._initializers import glorot_uniform, kaiming_uniform, orthogonal, semi_orthogonal, uniform, zeros

__all__ = ["glorot_uniform", "kaiming_uniform", "orthogonal", "semi_orthogonal", "uniform", "zeros"]
