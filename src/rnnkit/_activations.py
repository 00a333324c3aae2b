"""Activations: accepted as a string, an :class:`Activation` member or a wrapper object.

Every activation here is written with its derivative in terms of its OUTPUT ``y``, which is
what the recurrent cells park for backward:

=========  =============================  ==========================================
name       y = f(a)                       vjp(y, g) = dL/da given g = dL/dy
=========  =============================  ==========================================
tanh       tanh(a)                        g * (1 - y**2)
sigmoid    1 / (1 + exp(-a))              g * y * (1 - y)
relu       max(a, 0)                      g * (y > 0)
linear     a                              g
softmax    exp(a) / sum(exp(a), axis)     y * (g - sum(g * y, axis))
hard_sig.  relu6(a + 3) / 6               g / 6 where 0 < y < 1, else 0
=========  =============================  ==========================================

``hard_sigmoid`` is Keras 3's (``min(max(a + 3, 0), 6) / 6``, saturating at a = -3 and 3;
its derivative at the two kinks is taken as 0, as ``relu6``'s is in Keras and PyTorch).
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._numbers import show


class _Catalogue(enum.EnumMeta):
    """``Activation(value)`` looks a member up by its name string (a member gives itself); any
    other value, or more arguments (Enum's functional API, which cannot extend a class that has
    members), is an InvalidParameterError naming the members and what was given, not Enum's
    ValueError (an array's truth value is ambiguous), AttributeError or TypeError."""

    def __call__(cls, value: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if args or kwargs or not isinstance(value, (str, cls)):
            members: list[Any] = list(cls.__members__.values())
            names = [m.value for m in members]
            raise InvalidParameterError(
                f"{cls.__name__}: expected one of {names} (one value), got {show(value)} "
                f"({type(value).__name__}){' and more arguments' if args or kwargs else ''}")
        return super().__call__(value)


class Activation(enum.Enum, metaclass=_Catalogue):
    """The activation catalogue. ``Activation.TANH`` etc.; the value is the string name."""

    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    LINEAR = "linear"
    SOFTMAX = "softmax"
    HARD_SIGMOID = "hard_sigmoid"

    @classmethod
    def _missing_(cls, value: object) -> Activation:
        """``Activation(value)`` of a value that is no member's: InvalidParameterError naming
        the values there are and the one given (Enum's own ValueError otherwise)."""
        raise InvalidParameterError(f"Activation: expected one of {[m.value for m in cls]}, got "
                                    f"{show(value)} ({type(value).__name__})")


def sigmoid(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Overflow-free logistic function, ``0.5 * (1 + tanh(a / 2))``."""
    r = np.multiply(a, 0.5, out=out)
    np.tanh(r, out=r)
    r += 1.0
    r *= 0.5
    return r


class ActivationFn:
    """A resolved activation: ``__call__`` maps pre-activations, ``vjp`` maps gradients back."""

    __slots__ = ("kind", "axis")

    def __init__(self, kind: Activation, axis: int = -1) -> None:
        self.kind = kind
        self.axis = axis

    @property
    def name(self) -> str:
        return self.kind.value

    def __call__(self, a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        k = self.kind
        if k is Activation.TANH:
            return np.tanh(a, out=out)
        if k is Activation.SIGMOID:
            return sigmoid(a, out=out)
        if k is Activation.RELU:
            return np.maximum(a, 0, out=out)
        if k is Activation.LINEAR:
            if out is None:
                return a.copy()
            out[...] = a
            return out
        if k is Activation.HARD_SIGMOID:
            r = np.add(a, 3.0, out=out)
            np.clip(r, 0.0, 6.0, out=r)
            r /= 6.0
            return r
        if not -a.ndim <= self.axis < a.ndim:
            raise InvalidInputError(f"softmax: axis {self.axis} is out of range for an array of shape "
                                    f"{a.shape} (expected -{a.ndim}..{a.ndim - 1})")
        if a.shape[self.axis] == 0:
            if a.size == 0 and any(d == 0 for i, d in enumerate(a.shape) if i != self.axis % a.ndim):
                return np.empty_like(a) if out is None else out  # nothing to normalise
            raise InvalidInputError(f"softmax: axis {self.axis} of shape {a.shape} has length 0; a "
                                    f"softmax needs at least one entry to normalise over")
        z = a - np.max(a, axis=self.axis, keepdims=True)
        e = np.exp(z, out=out)
        e /= np.sum(e, axis=self.axis, keepdims=True)
        return e

    def vjp(self, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        """dL/da from the output ``y`` and the upstream gradient ``g`` (a new array)."""
        k = self.kind
        if k is Activation.TANH:
            return g * (1.0 - y * y)
        if k is Activation.SIGMOID:
            return g * y * (1.0 - y)
        if k is Activation.RELU:
            return g * (y > 0)
        if k is Activation.LINEAR:
            return g.copy()
        if k is Activation.HARD_SIGMOID:
            return g * ((y > 0) & (y < 1)) / 6.0
        return y * (g - np.sum(g * y, axis=self.axis, keepdims=True))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActivationFn) and (self.kind, self.axis) == (other.kind, other.axis)

    def __hash__(self) -> int:
        return hash((self.kind, self.axis))

    def __repr__(self) -> str:
        return f"ActivationFn({self.kind.value!r}" + (f", axis={self.axis})" if self.axis != -1 else ")")


class _Wrapper:
    """Base of the thin wrapper objects (``Tanh()`` ...); each converts to one Activation."""

    kind: Activation = Activation.LINEAR

    def __init__(self) -> None:
        self.axis = -1

    def to_fn(self) -> ActivationFn:
        return ActivationFn(self.kind, self.axis)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Tanh(_Wrapper):
    kind = Activation.TANH


class Sigmoid(_Wrapper):
    kind = Activation.SIGMOID


class ReLU(_Wrapper):
    kind = Activation.RELU


class Linear(_Wrapper):
    kind = Activation.LINEAR


class HardSigmoid(_Wrapper):
    """Keras 3's ``hard_sigmoid``: ``relu6(a + 3) / 6``."""

    kind = Activation.HARD_SIGMOID


class Softmax(_Wrapper):
    """Softmax over ``axis`` (default -1). Recurrent layers accept only ``axis=-1``."""

    kind = Activation.SOFTMAX

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise InvalidParameterError(f"Softmax: axis must be an int, got {axis!r}")
        self.axis = axis

    def with_axis(self, axis: int) -> Softmax:
        return Softmax(axis)

    def __repr__(self) -> str:
        return f"Softmax(axis={self.axis})"


ActivationLike = str | Activation | _Wrapper | ActivationFn

_ALIASES = {"tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu", "linear": "linear",
            "identity": "linear", "softmax": "softmax", "none": "linear",
            "hard_sigmoid": "hard_sigmoid"}


def resolve_activation(act: ActivationLike | None, where: str = "layer") -> ActivationFn:
    """Turn any accepted activation spelling into an :class:`ActivationFn`."""
    if act is None:
        return ActivationFn(Activation.LINEAR)
    if isinstance(act, ActivationFn):
        return act
    if isinstance(act, Activation):
        return ActivationFn(act)
    if isinstance(act, _Wrapper):
        return act.to_fn()
    if isinstance(act, str):
        key = _ALIASES.get(act.lower())
        if key is not None:
            return ActivationFn(Activation(key))
    known = ", ".join(sorted({m.value for m in Activation}))
    raise InvalidParameterError(
        f"{where}: unknown activation {act!r}; expected one of {known}, an Activation member "
        f"or a wrapper such as Tanh()"
    )
