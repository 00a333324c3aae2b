"""Elementwise arithmetic, activations and reductions, each with its vector-Jacobian product
beside its value. Names, arguments and dtypes are Keras 3's ``keras.ops``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rnnkit._budget import check_array
from rnnkit._errors import InvalidInputError
from rnnkit._numbers import check_float, check_int, show
from rnnkit._validate import check_bool
from rnnkit.ops._core import (
    FLOATX,
    INTX,
    as_array,
    as_operand,
    check_same_shape_or_broadcast,
    done,
    float_of,
    grad_of,
    keep_dims,
    normalize_axis,
    one_axis,
    result_dtype,
    unary,
)

Needs = tuple[bool, ...]


def _binary(op: str, x1: Any, x2: Any, force_float: bool = False) -> tuple[Any, Any, np.dtype]:
    if type(x1) is np.ndarray and type(x2) is np.ndarray and x1.dtype == x2.dtype \
            and x1.dtype.kind == "f" and x1.shape == x2.shape:     # the common case, checked quickly
        return x1, x2, x1.dtype
    a, b = as_operand(x1, op, "x1"), as_operand(x2, op, "x2")
    for arg, n, other in (("x1", a, b), ("x2", b, a)):   # a Python int is typed by the other operand
        if type(n) is int and not isinstance(other, float) \
                and not (isinstance(other, np.ndarray) and other.dtype.kind == "f"):
            dt = other.dtype if isinstance(other, np.ndarray) and other.dtype.kind in "iu" \
                else np.dtype(np.int64)
            if not np.iinfo(dt).min <= n <= np.iinfo(dt).max:
                raise InvalidInputError(f"ops.{op}: {arg} = {show(n)} does not fit the dtype {dt} it takes; "
                                        f"expected an int in [{np.iinfo(dt).min}, {np.iinfo(dt).max}]")
    check_same_shape_or_broadcast(op, a, b)
    dt = result_dtype(a, b)
    if force_float and dt.kind != "f":
        dt = FLOATX
    if isinstance(a, np.ndarray) and a.dtype != dt:
        a = a.astype(dt)
    if isinstance(b, np.ndarray) and b.dtype != dt:
        b = b.astype(dt)
    return a, b, dt


def _typed(out: Any, dt: np.dtype) -> np.ndarray:
    out = np.asarray(out)
    return out if out.dtype == dt else out.astype(dt)


# -- arithmetic ------------------------------------------------------------------------------------
def add(x1: Any, x2: Any) -> np.ndarray:
    """``x1 + x2`` with broadcasting."""
    a, b, dt = _binary("add", x1, x2)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x1, g) if needs[0] else None, grad_of(x2, g) if needs[1] else None)
    return done(_typed(np.add(a, b), dt), (x1, x2), back)


def subtract(x1: Any, x2: Any) -> np.ndarray:
    """``x1 - x2`` with broadcasting."""
    a, b, dt = _binary("subtract", x1, x2)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x1, g) if needs[0] else None, grad_of(x2, -g) if needs[1] else None)
    return done(_typed(np.subtract(a, b), dt), (x1, x2), back)


def multiply(x1: Any, x2: Any) -> np.ndarray:
    """``x1 * x2`` with broadcasting."""
    a, b, dt = _binary("multiply", x1, x2)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x1, g * b) if needs[0] else None, grad_of(x2, g * a) if needs[1] else None)
    return done(_typed(np.multiply(a, b), dt), (x1, x2), back)


def divide(x1: Any, x2: Any) -> np.ndarray:
    """``x1 / x2`` with broadcasting (true division: integers give float32, as Keras)."""
    a, b, dt = _binary("divide", x1, x2, force_float=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _typed(np.divide(a, b), dt)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (grad_of(x1, g / b) if needs[0] else None,
                    grad_of(x2, -g * out / b) if needs[1] else None)
    return done(out, (x1, x2), back)


def negative(x: Any) -> np.ndarray:
    """``-x``."""
    return unary("negative", x, np.negative, lambda g, a, o: -g, float_result=False)


def power(x1: Any, x2: Any) -> np.ndarray:
    """``x1 ** x2`` with broadcasting. The gradient for the exponent is ``g * out * log(x1)``,
    taken as 0 where ``x1 == 0`` (as PyTorch)."""
    a, b, dt = _binary("power", x1, x2)
    with np.errstate(all="ignore"):
        out = _typed(np.power(a, b), dt)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        with np.errstate(all="ignore"):
            g1 = grad_of(x1, np.where(b == 0, 0.0, g * b * np.power(a, b - 1))) if needs[0] else None
            g2 = None
            if needs[1]:
                g2 = grad_of(x2, np.where(a == 0, 0.0, g * out * np.log(np.where(a == 0, 1, a))))
        return (g1, g2)
    return done(out, (x1, x2), back)


def maximum(x1: Any, x2: Any) -> np.ndarray:
    """The larger of ``x1`` and ``x2`` elementwise; at a tie each gets half the gradient (as
    PyTorch)."""
    return _extreme("maximum", np.maximum, np.greater, x1, x2)


def minimum(x1: Any, x2: Any) -> np.ndarray:
    """The smaller of ``x1`` and ``x2`` elementwise; at a tie each gets half the gradient."""
    return _extreme("minimum", np.minimum, np.less, x1, x2)


def _extreme(op: str, fn: Any, wins: Any, x1: Any, x2: Any) -> np.ndarray:
    a, b, dt = _binary(op, x1, x2)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        share = np.where(wins(a, b), 1.0, np.where(a == b, 0.5, 0.0)).astype(g.dtype)
        return (grad_of(x1, g * share) if needs[0] else None,
                grad_of(x2, g * (1 - share)) if needs[1] else None)
    return done(_typed(fn(a, b), dt), (x1, x2), back)


def clip(x: Any, x_min: Any, x_max: Any) -> np.ndarray:
    """``x`` limited to ``[x_min, x_max]``; the gradient passes where ``x_min <= x <= x_max``."""
    arr = as_array(x, "clip")
    for n, v in (("x_min", x_min), ("x_max", x_max)):
        if np.ndim(v) != 0:
            raise InvalidInputError(f"ops.clip: {n} must be a number (Keras' clip takes scalars), got "
                                    f"an array of shape {np.shape(v)}")
    out = np.clip(arr, x_min, x_max)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x, g * ((arr >= x_min) & (arr <= x_max))),)
    return done(out.astype(arr.dtype, copy=False), (x,), back)


def where(condition: Any, x1: Any = None, x2: Any = None) -> Any:
    """``x1`` where ``condition`` holds, else ``x2`` (broadcast); with neither, the indices of
    the true elements (NumPy's ``nonzero``, no gradient)."""
    cond = as_array(condition, "where", "condition")
    if x1 is None and x2 is None:
        if cond.ndim == 0:
            raise InvalidInputError("ops.where: condition is a scalar (rank 0) and neither x1 nor x2 was "
                                    "given; the indices of the true elements need a condition of rank >= 1")
        return np.nonzero(cond)
    if x1 is None or x2 is None:
        raise InvalidInputError("ops.where: give both x1 and x2, or neither")
    a, b, dt = _binary("where", x1, x2)
    try:
        out = np.where(cond.astype(bool), a, b)
    except ValueError:
        raise InvalidInputError(f"ops.where: condition {cond.shape} does not broadcast with x1 "
                                f"{np.shape(a)} and x2 {np.shape(b)}") from None

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        c = cond.astype(bool)
        return (None, grad_of(x1, np.where(c, g, 0)) if needs[1] else None,
                grad_of(x2, np.where(c, 0, g)) if needs[2] else None)
    return done(_typed(out, dt), (condition, x1, x2), back)


# -- elementwise functions -------------------------------------------------------------------------
def abs(x: Any) -> np.ndarray:
    """``|x|``; the gradient at 0 is 0 (as PyTorch)."""
    return unary("abs", x, np.abs, lambda g, a, o: g * np.sign(a), float_result=False)


def exp(x: Any) -> np.ndarray:
    """``e ** x``."""
    return unary("exp", x, np.exp, lambda g, a, o: g * o)


def log(x: Any) -> np.ndarray:
    """The natural logarithm."""
    return unary("log", x, np.log, lambda g, a, o: g / a)


def sqrt(x: Any) -> np.ndarray:
    """The square root."""
    return unary("sqrt", x, np.sqrt, lambda g, a, o: g / (2 * o))


def square(x: Any) -> np.ndarray:
    """``x * x``."""
    return unary("square", x, np.square, lambda g, a, o: 2 * g * a, float_result=False)


def tanh(x: Any) -> np.ndarray:
    """The hyperbolic tangent."""
    return unary("tanh", x, np.tanh, lambda g, a, o: g * (1 - o * o))


def _sigmoid(a: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1 / (1 + e), e / (1 + e)).astype(a.dtype, copy=False)


def sigmoid(x: Any) -> np.ndarray:
    """``1 / (1 + e ** -x)`` (computed without overflow)."""
    return unary("sigmoid", x, _sigmoid, lambda g, a, o: g * o * (1 - o))


def relu(x: Any) -> np.ndarray:
    """``max(x, 0)``; the gradient at 0 is 0."""
    return unary("relu", x, lambda a: np.maximum(a, 0).astype(a.dtype, copy=False),
                 lambda g, a, o: g * (a > 0))


def softplus(x: Any) -> np.ndarray:
    """``log(1 + e ** x)`` (computed without overflow)."""
    return unary("softplus", x, lambda a: np.logaddexp(a.dtype.type(0), a), lambda g, a, o: g * _sigmoid(a))


# -- along an axis ---------------------------------------------------------------------------------
def _axes(op: str, arr: np.ndarray, axis: Any) -> tuple[int, ...] | None:
    """``axis`` of a reduction or a softmax over ``arr``: :func:`normalize_axis`, and a scalar
    (rank 0) has no axis to name (InvalidInputError, not NumPy's AxisError)."""
    axes = normalize_axis(axis, arr.ndim, op)
    if arr.ndim == 0 and axes:
        raise InvalidInputError(f"ops.{op}: x is a scalar (rank 0), which has no axis; expected axis=None "
                                f"or (), got {show(axis)}")
    return axes


def _empty_axis(op: str, arr: np.ndarray, ax: tuple[int, ...] | None, hint: str = "") -> None:
    """InvalidInputError naming ``op`` and the axis, when ``ax`` (None: all) of ``arr`` holds an
    axis of length 0: a reduction with no identity (max, min, the max inside softmax) has no value
    over no elements (NumPy raises ValueError, Keras too); an empty result is fine."""
    for a in range(arr.ndim) if ax is None else ax:
        if arr.shape[a] == 0:
            raise InvalidInputError(f"ops.{op}: axis {a} of the input (shape {arr.shape}) is empty; a {op} "
                                    f"over no elements has no value; expected at least one element on "
                                    f"the reduced axes{hint}")


def softmax(x: Any, axis: Any = -1) -> np.ndarray:
    """``exp(x) / sum(exp(x))`` along ``axis`` (an int or a tuple of them)."""
    arr = float_of(as_array(x, "softmax"))
    ax = _axes("softmax", arr, axis)
    _empty_axis("softmax", arr, ax)
    e = np.exp(arr - arr.max(axis=ax, keepdims=True))
    out = e / e.sum(axis=ax, keepdims=True)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x, out * (g - (g * out).sum(axis=ax, keepdims=True))),)
    return done(out, (x,), back)


def log_softmax(x: Any, axis: Any = -1) -> np.ndarray:
    """``x - logsumexp(x)`` along ``axis``."""
    arr = float_of(as_array(x, "log_softmax"))
    ax = _axes("log_softmax", arr, axis)
    _empty_axis("log_softmax", arr, ax)
    m = arr.max(axis=ax, keepdims=True)
    out = arr - (m + np.log(np.exp(arr - m).sum(axis=ax, keepdims=True)))

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x, g - np.exp(out) * g.sum(axis=ax, keepdims=True)),)
    return done(out, (x,), back)


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """``log(sum(exp(x)))`` over ``axis`` (all axes when None), computed without overflow."""
    keepdims = check_bool(keepdims, "keepdims", "ops.logsumexp")
    arr = float_of(as_array(x, "logsumexp"))
    ax = _axes("logsumexp", arr, axis)
    m = arr.max(axis=ax, keepdims=True) if arr.size else np.zeros((1,) * arr.ndim, arr.dtype)
    m = np.where(np.isfinite(m), m, 0)
    kept = m + np.log(np.exp(arr - m).sum(axis=ax, keepdims=True))
    out = kept if keepdims else (kept.reshape(()) if ax is None else np.squeeze(kept, ax))

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x, keep_dims(g, arr.shape, ax, keepdims) * np.exp(arr - kept)),)
    return done(out.astype(arr.dtype, copy=False), (x,), back)


def sum(x: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """The sum over ``axis`` (all axes when None)."""
    arr = as_array(x, "sum")
    ax = _axes("sum", arr, axis)
    dt = INTX if arr.dtype.kind == "b" else arr.dtype

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x, np.broadcast_to(keep_dims(g, arr.shape, ax, keepdims), arr.shape)),)
    return done(np.sum(arr, axis=ax, keepdims=keepdims, dtype=dt), (x,), back)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """The mean over ``axis`` (all axes when None); integers give float32 (Keras)."""
    arr = float_of(as_array(x, "mean"))
    ax = _axes("mean", arr, axis)
    n = arr.size if ax is None else int(np.prod([arr.shape[a] for a in ax]))

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x, np.broadcast_to(keep_dims(g, arr.shape, ax, keepdims) / n, arr.shape)),)
    return done(np.mean(arr, axis=ax, keepdims=keepdims), (x,), back)


def max(x: Any, axis: Any = None, keepdims: bool = False, initial: Any = None) -> np.ndarray:
    """The largest element over ``axis``; tied maxima share the gradient equally (as PyTorch's
    ``amax``)."""
    return _reduce_extreme("max", np.max, x, axis, keepdims, initial)


def min(x: Any, axis: Any = None, keepdims: bool = False, initial: Any = None) -> np.ndarray:
    """The smallest element over ``axis``; tied minima share the gradient equally."""
    return _reduce_extreme("min", np.min, x, axis, keepdims, initial)


def _reduce_extreme(op: str, fn: Any, x: Any, axis: Any, keepdims: bool, initial: Any) -> np.ndarray:
    arr = as_array(x, op)
    ax = _axes(op, arr, axis)
    if initial is None:
        _empty_axis(op, arr, ax, ", or initial=")
    kw = {} if initial is None else {"initial": check_float(initial, "initial", f"ops.{op}")}
    out = fn(arr, axis=ax, keepdims=keepdims, **kw)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        o = keep_dims(np.asarray(out), arr.shape, ax, keepdims)
        hit = (arr == o).astype(g.dtype)
        count = hit.sum(axis=ax, keepdims=True)
        return (grad_of(x, keep_dims(g, arr.shape, ax, keepdims) * hit / count),)
    return done(out, (x,), back)


def argmax(x: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """The index of the largest element over ``axis`` (of the flattened input when None), int32."""
    arr = as_array(x, "argmax")
    axis = None if axis is None else one_axis(axis, arr.ndim, "argmax", 0)
    keepdims = check_bool(keepdims, "keepdims", "ops.argmax")
    _empty_axis("argmax", arr, None if axis is None else (axis,))
    return np.asarray(np.argmax(arr, axis=axis, keepdims=keepdims)).astype(INTX)


def cumsum(x: Any, axis: Any = None, dtype: Any = None) -> np.ndarray:
    """The running sum along ``axis`` (of the flattened input when None)."""
    arr = as_array(x, "cumsum")
    if axis is not None:
        axis = one_axis(axis, arr.ndim, "cumsum", 0)
    dt = np.dtype(dtype) if dtype is not None else (INTX if arr.dtype.kind == "b" else arr.dtype)
    out = np.cumsum(arr, axis=axis, dtype=dt)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        if axis is None:
            return (grad_of(x, np.flip(np.cumsum(np.flip(g.ravel()))).reshape(arr.shape)),)
        return (grad_of(x, np.flip(np.cumsum(np.flip(g, axis), axis=axis), axis)),)
    return done(out, (x,), back)


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """The vector or matrix norm (NumPy's ``linalg.norm``): ``ord`` None (2 for vectors, Frobenius
    for matrices), 1, 2, ``inf`` for vectors, ``"fro"`` for matrices. The gradient of a 2-norm
    at zero is 0 (as PyTorch)."""
    keepdims = check_bool(keepdims, "keepdims", "ops.norm")
    arr = float_of(as_array(x, "norm"))
    ax = _axes("norm", arr, axis)
    flat = ax is None
    red = tuple(range(arr.ndim)) if flat else ax
    assert red is not None
    if flat and arr.ndim > 2 and ord is not None:
        raise InvalidInputError(f"ops.norm: ord={ord!r} needs axis= for an input of rank {arr.ndim}")
    if isinstance(ord, (bool, np.bool_)) or not isinstance(ord, (str, int, float, type(None))):
        raise InvalidInputError(f"ops.norm: ord must be None, 'fro', 1, 2 or inf, got {show(ord)} "
                                f"({type(ord).__name__})")
    is_matrix = len(red) == 2
    two = ord is None or (ord == "fro" and is_matrix) or (ord == 2 and not is_matrix)
    if not (two or (not is_matrix and ord in (1, np.inf))):
        raise InvalidInputError(f"ops.norm: ord must be None, 'fro' (matrices), or 1, 2, inf (vectors); "
                                f"got ord={ord!r} over {len(red)} axes")
    if two:
        out = np.sqrt(np.sum(arr * arr, axis=red, keepdims=keepdims))
    elif ord == 1:
        out = np.sum(np.abs(arr), axis=red, keepdims=keepdims)
    else:
        out = np.max(np.abs(arr), axis=red, keepdims=keepdims)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        gk = keep_dims(g, arr.shape, red, keepdims)
        ok = keep_dims(np.asarray(out), arr.shape, red, keepdims)
        if two:
            with np.errstate(all="ignore"):
                d = np.where(ok == 0, 0.0, arr / ok)
        elif ord == 1:
            d = np.sign(arr)
        else:
            hit = (np.abs(arr) == ok).astype(arr.dtype)
            d = np.sign(arr) * hit / hit.sum(axis=red, keepdims=True)
        return (grad_of(x, gk * d),)
    return done(np.asarray(out).astype(arr.dtype, copy=False), (x,), back)


def stop_gradient(variable: Any) -> np.ndarray:
    """``variable``'s values as a new array the tape does not track (no gradient flows back)."""
    arr = as_array(variable, "stop_gradient")
    return arr.view()


def one_hot(x: Any, num_classes: int, axis: int = -1, dtype: Any = None, sparse: bool = False) -> np.ndarray:
    """Integer labels as one-hot vectors along a new ``axis`` (float32 unless ``dtype``); a
    negative label gives a row of zeros (as Keras); a label ``>= num_classes`` raises."""
    if check_bool(sparse, "sparse", "ops.one_hot"):
        raise InvalidInputError("ops.one_hot: rnnkit's arrays are dense; expected sparse=False")
    arr = as_array(x, "one_hot")
    if arr.dtype.kind not in "iub":
        raise InvalidInputError(f"ops.one_hot: x must hold integer labels, got dtype {arr.dtype}")
    num_classes = check_int(num_classes, "num_classes", "ops.one_hot", lo=1, error=InvalidInputError)
    check_array((*arr.shape, num_classes), np.dtype(dtype or FLOATX).itemsize, "ops.one_hot")
    if arr.size and int(arr.max()) >= num_classes:
        raise InvalidInputError(f"ops.one_hot: labels must be smaller than num_classes={num_classes}, got "
                                f"{int(arr.max())}")
    out = (arr[..., None] == np.arange(num_classes)).astype(dtype or FLOATX)
    ax = one_axis(axis, out.ndim, "one_hot", out.ndim - 1)
    return np.moveaxis(out, -1, ax) if ax != out.ndim - 1 else out
