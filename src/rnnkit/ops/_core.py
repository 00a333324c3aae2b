"""What every op shares: converting arguments (Keras' dtypes), checking them, broadcasting's
reverse, and recording on the tape."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError
from rnnkit._numbers import check_int, show
from rnnkit._tape import Vjp, fresh, record, recording

#: the float dtype of values made from Python floats and of float results of integer inputs
FLOATX = np.dtype("float32")
INTX = np.dtype("int32")


def convert_to_tensor(x: Any, dtype: Any = None, sparse: Any = None, ragged: Any = None) -> np.ndarray:
    """``x`` as a NumPy array (Keras' ``convert_to_tensor``): an array stays the same object
    (so the tape keeps tracking it) unless ``dtype`` differs, which casts (recorded, as
    :func:`cast`); Python floats and lists of them become float32, ints int32, bools bool.
    ``sparse`` / ``ragged`` must be falsy (dense arrays only)."""
    for what, flag in (("sparse", sparse), ("ragged", ragged)):
        if flag is not None and not isinstance(flag, (bool, np.bool_)):
            raise InvalidInputError(f"ops.convert_to_tensor: {what} must be None or a bool, got {show(flag)} "
                                    f"({type(flag).__name__})")
    if sparse or ragged:
        raise InvalidInputError(f"ops.convert_to_tensor: rnnkit's arrays are dense; expected "
                                f"sparse=None/False and ragged=None/False, got {sparse!r}, {ragged!r}")
    if isinstance(x, np.ndarray):
        arr = x
    else:
        arr = _from_python(x, "convert_to_tensor", "x")
    check_numeric(arr, "convert_to_tensor", "x")
    if dtype is None:
        return arr
    return cast(arr, dtype)


def _from_python(x: Any, op: str, arg: str) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"ops.{op}: {arg} must be an array or a nesting of numbers, got "
                                f"{type(x).__name__} ({e})") from None
    if isinstance(x, np.generic):
        return arr
    if arr.dtype.kind == "f" and arr.dtype != FLOATX:
        return arr.astype(FLOATX)
    if arr.dtype.kind in "iu" and arr.dtype != INTX:
        return arr.astype(INTX)
    return arr


def check_numeric(arr: np.ndarray, op: str, arg: str) -> None:
    if arr.dtype.kind not in "biuf":
        raise InvalidInputError(f"ops.{op}: {arg} must hold real numbers (bool, int or float), got "
                                f"dtype {arr.dtype}")


def as_array(x: Any, op: str, arg: str = "x") -> np.ndarray:
    """``x`` as an array of real numbers (an ndarray as it is; anything else by Keras' rules)."""
    if type(x) is np.ndarray:
        if x.dtype.kind not in "biuf":
            check_numeric(x, op, arg)
        return x
    if isinstance(x, np.ndarray):
        return x
    arr = _from_python(x, op, arg)
    check_numeric(arr, op, arg)
    return arr


def as_operand(x: Any, op: str, arg: str) -> np.ndarray | int | float | bool:
    """An argument of an elementwise op: a Python number stays one (weakly typed: it takes the
    other argument's dtype, as in Keras and NumPy 2), anything else as :func:`as_array`."""
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return x
    return as_array(x, op, arg)


def result_dtype(a: Any, b: Any) -> np.dtype:
    """Keras' promotion of two operands: an integer (or bool) with a float gives the float's
    dtype; a Python float with an integer array gives float32; otherwise NumPy's."""
    da = a.dtype if isinstance(a, np.ndarray) else None
    db = b.dtype if isinstance(b, np.ndarray) else None
    if da is not None and db is not None:
        fa, fb = da.kind == "f", db.kind == "f"
        if fa != fb:
            return da if fa else db
        return np.result_type(da, db)
    arr, py = (a, b) if da is not None else (b, a)
    if arr is None or not isinstance(arr, np.ndarray):
        return np.result_type(a, b)
    if isinstance(py, float) and arr.dtype.kind != "f":
        return FLOATX
    if isinstance(py, int) and not isinstance(py, bool) and arr.dtype.kind == "b":
        return INTX
    return arr.dtype


def float_of(x: np.ndarray) -> np.ndarray:
    """``x`` itself if it holds floats, else cast to float32 (Keras: float results of integers)."""
    return x if x.dtype.kind == "f" else x.astype(FLOATX)


def shape_of(x: Any) -> tuple[int, ...]:
    return x.shape if isinstance(x, np.ndarray) else ()


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` over the axes that broadcasting added or stretched to reach ``g.shape`` from
    ``shape`` (the reverse of broadcasting)."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


def grad_of(x: Any, g: np.ndarray) -> np.ndarray | None:
    """The gradient ``g`` handed to input ``x``: reduced to its shape, in its dtype; None for an
    input that is not an array of floats."""
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        return None
    g = unbroadcast(g, x.shape)
    return g if g.dtype == x.dtype else g.astype(x.dtype)


def check_same_shape_or_broadcast(op: str, a: Any, b: Any) -> tuple[int, ...]:
    sa, sb = shape_of(a), shape_of(b)
    try:
        return np.broadcast_shapes(sa, sb)
    except ValueError:
        raise InvalidInputError(f"ops.{op}: the shapes of x1 {sa} and x2 {sb} do not broadcast (expected "
                                f"equal sizes or 1 on each axis, counted from the last)") from None


def normalize_axis(axis: Any, ndim: int, op: str) -> tuple[int, ...] | None:
    """``axis`` (None, an int or a list / tuple of ints) as a tuple of non-negative axes; each
    goes through :func:`~rnnkit._numbers.check_int`, so a bool, a float, an object with
    ``__index__`` or an axis outside ``[-ndim, ndim)`` is an InvalidInputError naming the op."""
    if axis is None:
        return None
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    top = max(ndim, 1)
    out = [check_int(a, f"axis (of an input of rank {ndim})", f"ops.{op}", lo=-ndim, hi=top - 1,
                     error=InvalidInputError) % top for a in axes]
    if len(set(out)) != len(out):
        raise InvalidInputError(f"ops.{op}: axis names an axis twice: {show(axis)}")
    return tuple(out)


def one_axis(axis: Any, ndim: int, op: str, default: int) -> int:
    """One ``axis`` (an int in ``[-ndim, ndim)``, or None for ``default``) as a non-negative
    axis: :func:`normalize_axis` for an op that works along a single axis, so a list of axes is
    an InvalidInputError naming the op, not an unpacking ValueError; so is an input of rank 0,
    which has no axis to work along (NumPy's IndexError otherwise)."""
    if ndim == 0:
        raise InvalidInputError(f"ops.{op}: x is a scalar (rank 0), which has no axis; expected an input "
                                f"of rank >= 1")
    if axis is None:
        return default
    if isinstance(axis, (list, tuple)):
        raise InvalidInputError(f"ops.{op}: axis must be one int, got {show(axis)}")
    (ax,) = normalize_axis(axis, ndim, op) or (default,)
    return ax


def keep_dims(g: np.ndarray, shape: tuple[int, ...], axes: tuple[int, ...] | None,
              keepdims: bool) -> np.ndarray:
    """``g`` of a reduction's output reshaped so that it broadcasts against the input ``shape``."""
    if keepdims:
        return g
    if axes is None:
        return g.reshape((1,) * len(shape))
    return np.expand_dims(g, axes)


def unary(op: str, x: Any, value: Callable[[np.ndarray], np.ndarray],
          vjp: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
          float_result: bool = True) -> np.ndarray:
    """A one-argument elementwise op: ``value(x)``, recorded with ``vjp(g, x, out)``."""
    arr = as_array(x, op)
    if float_result:
        arr = float_of(arr)
    with np.errstate(all="ignore"):
        out = fresh(value(arr), (x,))
    if recording() and arr.dtype.kind == "f":
        def back(g: np.ndarray, needs: tuple[bool, ...]) -> Sequence[Any]:
            with np.errstate(all="ignore"):
                return (grad_of(x, vjp(g, arr, out)),)
        record((out,), (x,), back)
    return out


def done(out: Any, ins: Sequence[Any], vjp: Vjp, multi: bool = False) -> Any:
    """Finish an op: its result(s) as new arrays, recorded when a tape is active."""
    if multi:
        outs = [fresh(o, ins) for o in out]
        if recording():
            record(outs, ins, vjp, True)
        return outs
    if type(out) is not np.ndarray or any(out is a for a in ins):
        out = fresh(out, ins)
    if recording():
        record((out,), ins, vjp)
    return out


def cast(x: Any, dtype: Any) -> np.ndarray:
    """``x`` in ``dtype`` (Keras' ``cast``); the gradient flows back between float dtypes."""
    arr = as_array(x, "cast")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise InvalidInputError(f"ops.cast: dtype must name a NumPy dtype ('float32', 'int32', ...), got "
                                f"{dtype!r}") from None
    check_numeric(np.empty(0, dt), "cast", "dtype")

    def back(g: np.ndarray, needs: tuple[bool, ...]) -> Sequence[Any]:
        return (grad_of(x, g) if dt.kind == "f" else None,)
    return done(arr.astype(dt), (x,), back)
