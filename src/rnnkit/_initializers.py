"""Weight initializers. Every function draws from the generator it is given, in float64,
and casts to ``dtype`` at the end, so float32 and float64 layers built from one seed agree.

- ``glorot_uniform``: U(-l, l), ``l = sqrt(6 / (fan_in + fan_out))``.
- ``orthogonal``: a square orthogonal matrix; Gram-Schmidt on a Gaussian draw, computed as a
  QR decomposition with the signs of R's diagonal folded into Q (so the draw is uniform over
  the orthogonal group and deterministic for a seed).
- ``semi_orthogonal``: the same for a non-square (rows, cols) matrix (orthonormal columns when
  rows > cols, rows otherwise), as Keras' ``Orthogonal``.
- ``kaiming_uniform``: U(-l, l), ``l = gain * sqrt(3 / fan_in)``, ``gain = sqrt(2)`` (ReLU),
  ``torch.nn.init.kaiming_uniform_(w, a=0)``.
- ``uniform``: U(low, high). ``zeros``: all 0.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import DTypeLike

from rnnkit._budget import check_array
from rnnkit._budget import reserve as _reserve
from rnnkit._errors import InvalidParameterError
from rnnkit._numbers import check_float, check_int, show
from rnnkit._validate import resolve_dtype


def _args(rng: object, shape: object, dtype: object, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """The checks every initialiser makes on its arguments before drawing: ``rng`` a NumPy
    ``Generator``, then :func:`_shape_dtype`."""
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError(f"{where}: rng must be a numpy.random.Generator, got {show(rng)} "
                                    f"({type(rng).__name__})")
    return _shape_dtype(shape, dtype, where)


def _shape_dtype(shape: object, dtype: object, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """``shape`` a tuple of ints >= 0 and ``dtype`` float32 / float64: the shape as a tuple of
    Python ints and the dtype, or InvalidParameterError naming ``where``."""
    if not isinstance(shape, tuple):
        raise InvalidParameterError(f"{where}: shape must be a tuple of ints >= 0, got {show(shape)} "
                                    f"({type(shape).__name__})")
    # (no int64 cap here: a size NumPy cannot hold is refused by :func:`reserve`, against the
    # loader's and the memory budget, with the message naming the weight)
    dims = tuple(check_int(d, f"shape[{k}]", where, lo=0, hi=None) for k, d in enumerate(shape))
    return dims, resolve_dtype(dtype, where)


def reserve(shape: tuple[int, ...]) -> None:
    """Before a weight is drawn: count it against a loader's budget (``rnnkit._budget``), and
    refuse a shape numpy cannot allocate with a typed error naming it (numpy would raise
    MemoryError or "Maximum allowed dimension exceeded")."""
    _reserve(shape)
    n = math.prod(int(d) for d in shape)
    if any(int(d) < 0 for d in shape):
        raise InvalidParameterError(f"a weight of shape {tuple(shape)} ({n} numbers) cannot be allocated")
    check_array(shape, 8, "a weight drawn in float64")


def _alloc(shape: tuple[int, ...], draw: object) -> np.ndarray:
    """Run ``draw()``; numpy's allocation failures become InvalidParameterError naming the shape."""
    try:
        return draw()  # type: ignore[operator,no-any-return]
    except (MemoryError, ValueError) as e:
        n = math.prod(int(d) for d in shape)
        raise InvalidParameterError(f"a weight of shape {tuple(shape)} ({n} numbers, {8 * n / 2**30:.3g} GiB "
                                    f"while drawn) cannot be allocated: {type(e).__name__}: {e}") from None


def glorot_uniform(
    rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, fan_out: int, dtype: DTypeLike
) -> np.ndarray:
    shape, dtype = _args(rng, shape, dtype, "glorot_uniform")
    fan = (check_int(fan_in, "fan_in", "glorot_uniform", lo=0, hi=None)
           + check_int(fan_out, "fan_out", "glorot_uniform", lo=0, hi=None))
    if fan == 0:
        raise InvalidParameterError("glorot_uniform: fan_in + fan_out must be >= 1, got 0")
    reserve(shape)
    limit = math.sqrt(6.0 / fan)
    return _alloc(shape, lambda: rng.uniform(-limit, limit, size=shape).astype(dtype))


def orthogonal(rng: np.random.Generator, n: int, dtype: DTypeLike, gain: float = 1.0) -> np.ndarray:
    (n, _), dtype = _args(rng, (n, n), dtype, "orthogonal")
    gain = check_float(gain, "gain", "orthogonal")
    reserve((n, n))
    a = _alloc((n, n), lambda: rng.standard_normal((n, n)))
    q, r = _alloc((n, n), lambda: np.linalg.qr(a))
    d = np.sign(np.diag(r))
    d[d == 0] = 1.0
    return (gain * q * d).astype(dtype)


def semi_orthogonal(rng: np.random.Generator, rows: int, cols: int, dtype: DTypeLike) -> np.ndarray:
    """A (rows, cols) matrix with orthonormal rows or columns (whichever are fewer); the square
    case draws exactly what :func:`orthogonal` draws."""
    (rows, cols), dtype = _args(rng, (rows, cols), dtype, "semi_orthogonal")
    if rows == cols:
        return orthogonal(rng, rows, dtype)
    shape = (max(rows, cols), min(rows, cols))
    reserve(shape)  # the draw is the size of the result: counted before it and its QR happen
    a = _alloc(shape, lambda: rng.standard_normal(shape))
    q, r = _alloc(shape, lambda: np.linalg.qr(a))
    d = np.sign(np.diag(r))
    d[d == 0] = 1.0
    q = q * d
    return (q if rows > cols else q.T).astype(dtype)


def kaiming_uniform(
    rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, dtype: DTypeLike,
    gain: float = math.sqrt(2.0),
) -> np.ndarray:
    shape, dtype = _args(rng, shape, dtype, "kaiming_uniform")
    limit = check_float(gain, "gain", "kaiming_uniform") * math.sqrt(
        3.0 / max(check_int(fan_in, "fan_in", "kaiming_uniform", lo=0, hi=None), 1))
    reserve(shape)
    return _alloc(shape, lambda: rng.uniform(-limit, limit, size=shape).astype(dtype))


def uniform(
    rng: np.random.Generator, shape: tuple[int, ...], low: float, high: float, dtype: DTypeLike
) -> np.ndarray:
    shape, dtype = _args(rng, shape, dtype, "uniform")
    low, high = check_float(low, "low", "uniform"), check_float(high, "high", "uniform")
    if not low <= high:
        raise InvalidParameterError(f"uniform: expected low <= high, got low={low}, high={high}")
    reserve(shape)
    return _alloc(shape, lambda: rng.uniform(low, high, size=shape).astype(dtype))


def zeros(shape: tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    shape, dtype = _shape_dtype(shape, dtype, "zeros")
    reserve(shape)
    return _alloc(shape, lambda: np.zeros(shape, dtype=dtype))
