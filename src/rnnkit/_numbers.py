"""The one integer and float argument check of the library (every constructor, function and
file field that takes a count, an index, a seed or a rate goes through it), and :func:`show`,
the value as an error message writes it.

- :func:`check_int`: a Python ``int`` or a NumPy integer, never a ``bool``, never anything else
  with ``__index__``; read exactly once; inside ``[lo, hi]`` (``hi`` is :data:`INT_MAX` unless
  the caller narrows it), else :class:`~rnnkit.InvalidParameterError`.
- :func:`check_float`: a Python ``int`` / ``float`` or a NumPy integer / floating scalar, never
  a ``bool``; finite; inside the bounds given, else :class:`~rnnkit.InvalidParameterError`.

Each message names the place, the argument, the range expected and the value given.
"""

from __future__ import annotations

import math
from typing import Literal, overload

import numpy as np

from rnnkit._errors import InvalidParameterError

#: the largest int any argument may take unless its check says otherwise: NumPy's int64, the
#: widest integer an array index, a shape or a generator's seed is computed in
INT_MAX = 2**63 - 1
#: the least int any argument may take unless its check says otherwise (NumPy's int64)
INT_MIN = -(2**63)


def _range_text(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo!r}, {hi!r}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo!r}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {hi!r}"
    return ""


def show(value: object) -> str:
    """``repr(value)`` for an error message, short and never raising: an int of more than 40
    digits as its sign and bit length (``repr`` refuses ints beyond 4300 digits), anything
    longer than 200 characters cut with ``...``, an object whose ``repr`` raises as its type."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(int.__index__(value)) >= 10**40:
        return f"{'a negative' if value < 0 else 'an'} int of {abs(int.__index__(value)).bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not replace the error being reported
        return f"<{type(value).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."


@overload
def check_int(value: object, what: str, where: str, *, lo: int | None = ..., hi: int | None = ...,
              none_ok: Literal[False] = ..., error: type[Exception] = ...) -> int: ...
@overload
def check_int(value: object, what: str, where: str, *, lo: int | None = ..., hi: int | None = ...,
              none_ok: bool, error: type[Exception] = ...) -> int | None: ...
def check_int(value: object, what: str, where: str, *, lo: int | None = INT_MIN, hi: int | None = INT_MAX,
              none_ok: bool = False, error: type[Exception] = InvalidParameterError) -> int | None:
    """``value`` as a Python int, or ``error`` (InvalidParameterError unless the caller names
    another rnnkit error: InvalidInputError for a shape's axis) naming ``where``, the argument
    ``what``, the range expected and the value given.

    Accepted: a Python ``int`` or a NumPy integer; ``bool`` / ``np.bool_`` are refused, and so is
    anything else with ``__index__`` (a 0-d array, a tensor, ...). An int subclass is read once
    through ``int.__index__`` (its own ``__index__`` / ``__int__`` are not called), so the value
    checked is the value used. ``lo`` / ``hi`` are inclusive bounds (None: unbounded); they default
    to :data:`INT_MIN` / :data:`INT_MAX` (NumPy's int64), so no value NumPy cannot hold gets through.
    ``none_ok``: None is accepted and returned."""
    if value is None and none_ok:
        return None
    rng = _range_text(None if lo == INT_MIN else lo, None if hi == INT_MAX else hi)
    expected = f"an int{' ' + rng if rng else ''}{' or None' if none_ok else ''}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise error(f"{where}: {what} must be {expected}, got {show(value)} ({type(value).__name__})")
    v = int.__index__(value) if isinstance(value, int) else int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        cap = (", at most 2**63 - 1 (NumPy's int64)" if hi == INT_MAX and v > hi
               else ", at least -2**63 (NumPy's int64)" if lo == INT_MIN and v < lo else "")
        raise error(f"{where}: {what} must be {expected}{cap}, got {show(v)}")
    return v


def check_positive_int(value: object, what: str, where: str) -> int:
    """An int in ``1..INT_MAX`` (:func:`check_int` with ``lo=1``)."""
    return check_int(value, what, where, lo=1)


def check_float(value: object, what: str, where: str, *, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hi_open: bool = False) -> float:
    """``value`` as a finite float inside the given bounds, or InvalidParameterError naming
    ``where``, the argument ``what``, the range expected and the value given.

    Accepted: a Python ``int`` / ``float`` or a NumPy integer / floating scalar (``bool`` refused,
    nothing else with ``__float__``). An int too large for a float (``10**400``) is refused as
    not finite, not raised as OverflowError."""
    rng = _range_text(lo, hi, lo_open, hi_open)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidParameterError(f"{where}: {what} must be a real number{' ' + rng if rng else ''}, "
                                    f"got {show(value)} ({type(value).__name__})")
    if isinstance(value, int):
        value = int.__index__(value)  # an int subclass read once, its own __float__ not called
    try:
        v = float(value)
    except OverflowError:  # an int beyond the largest float
        v = math.inf if value > 0 else -math.inf
    if not math.isfinite(v) or ((lo is not None and (v < lo or (lo_open and v == lo)))
                                or (hi is not None and (v > hi or (hi_open and v == hi)))):
        raise InvalidParameterError(f"{where}: {what} must be a finite number{' ' + rng if rng else ''}, "
                                    f"got {show(value)}")
    return v
