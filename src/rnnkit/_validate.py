"""The argument checks every layer shares: a dtype, a bool, a weight array (and that it is
finite), a ``Ctx`` (numbers: :mod:`rnnkit._numbers`). Each returns the checked value or raises the
typed error naming the argument, the place, what was expected and what was given."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError

_DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def resolve_dtype(dtype: Any, where: str) -> np.dtype:
    """``"float32"`` / ``"float64"`` (or the numpy types) to a numpy dtype. ``None`` is refused
    (numpy would read it as float64)."""
    try:
        dt = None if dtype is None else np.dtype(dtype)
    except (TypeError, ValueError):
        dt = None
    if dt is None or dt.name not in _DTYPES:
        raise InvalidParameterError(f"{where}: dtype must be 'float32' or 'float64', got {dtype!r}")
    return dt


def check_utf8(text: str, what: str, where: str) -> str:
    """``text`` when UTF-8 can write it (every file format rnnkit saves stores names as UTF-8),
    else InvalidParameterError naming the first lone surrogate and its position: refused where
    the name is given, not when a save fails later."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidParameterError(f"{where}: {what} {text!r} holds the lone surrogate "
                                    f"{text[e.start]!r} at index {e.start}; expected text UTF-8 can "
                                    f"encode (names are saved as UTF-8)") from None
    return text


def check_bool(value: object, what: str, where: str) -> bool:
    """A bool (Python or numpy) or TypeError naming the argument: no truthy strings."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{where}: {what} must be a bool (True or False), got {value!r}")
    return bool(value)


def as_weight_array(value: Any, where: str) -> np.ndarray:
    """``value`` as an array (``np.asarray``), or InvalidInputError naming ``where`` when numpy
    cannot make one (a ragged list, a tensor that requires grad)."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError, RuntimeError) as e:
        raise InvalidInputError(f"{where}: not an array ({type(value).__name__}: {e})") from None


def weight_problem(value: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, str | None]:
    """``value`` in ``dtype``, and what is wrong with it there (None: nothing): a NaN or Inf it
    holds, or a finite value beyond ``dtype``'s range, which the cast made Inf (1e300 in a
    float32 weight). Each names the first such position and the value as given. The check runs
    on the cast array, so a value that rounds to the largest finite number passes. An array of
    anything but booleans, integers and floats is refused as it is."""
    if value.dtype.kind not in "biuf":
        return value, f"weights must be real numbers, got dtype {value.dtype}"
    if value.dtype.kind == "f" and not np.isfinite(value).all():
        pos = tuple(int(i) for i in np.argwhere(~np.isfinite(value))[0])
        return value, f"the weight holds {value[pos]} at {pos}; expected finite numbers"
    if value.dtype == dtype:
        return value, None
    with np.errstate(over="ignore"):
        out = value.astype(dtype)
    if value.dtype.kind == "f" and out.dtype.kind == "f" and not np.isfinite(out).all():
        pos = tuple(int(i) for i in np.argwhere(~np.isfinite(out))[0])
        return out, (f"the weight holds {value[pos]} at {pos}, beyond the largest {out.dtype.name} "
                     f"({float(np.finfo(out.dtype).max):.4g}); in the layer's dtype {out.dtype.name} it "
                     f"would be {out[pos]}")
    return out, None


def check_finite_weight(value: np.ndarray, where: str, dtype: np.dtype) -> np.ndarray:
    """``value`` cast to ``dtype`` (the layer's), or InvalidInputError naming ``where`` (the
    layer and weight, or the model's key), the value, its position and ``dtype`` when it holds
    NaN or Inf, or a finite value the cast would make Inf (:func:`weight_problem`): what the
    file loaders refuse. Finiteness is checked after the cast."""
    out, problem = weight_problem(value, dtype)
    if problem is not None:
        raise InvalidInputError(f"{where}: {problem} (nothing was changed)")
    return out


def check_ctx(ctx: Any, where: str) -> Ctx:
    """``ctx``, or a TypeError naming ``where`` when it is not an :class:`~rnnkit.Ctx`. The doors
    that take a caller's Ctx check it once (``layer(x, ctx)``, ``forward_mut``, a model's
    ``forward`` / ``backward``); a layer's own ``forward`` / ``backward`` is the raw pass, which
    expects a Ctx and checks nothing."""
    if not isinstance(ctx, Ctx):
        raise TypeError(f"{where}: ctx must be an rnnkit.Ctx (Ctx.inference() or Ctx.training(seed)), "
                        f"got {type(ctx).__name__}; layer(x) runs inference")
    return ctx


def keras_weight_list(value: Any, first_rank: int) -> list[Any] | None:
    """The arrays of Keras' ``layer.set_weights(weights)`` spelling, or None when ``value`` is
    not that spelling. ``value`` is Keras' one list when it is a list or tuple whose first item
    has ``first_rank`` axes, the rank of the layer's first weight: a first weight itself written
    as nested lists has items of one axis fewer (its rows), so the two never meet."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    try:
        rank = np.ndim(value[0])
    except (ValueError, TypeError):   # a ragged item: not an array of the first weight
        return None
    return list(value) if rank == first_rank else None
