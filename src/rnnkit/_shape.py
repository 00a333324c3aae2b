"""``Shape``: a tensor shape whose axes may be free (``None``), usually the batch axis."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Iterator
from typing import Any, overload

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._numbers import check_int, show

Dim = int | None


class Shape:
    """An immutable shape. ``None`` marks a free axis (any extent is accepted there).

    >>> Shape.with_free_batch((2, 5, 4))
    Shape((None, 5, 4))
    """

    __slots__ = ("_dims",)

    def __init__(self, dims: Iterable[Dim]) -> None:
        out: list[Dim] = []
        if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
            raise TypeError(f"Shape: dims must be a sequence of axes (ints >= 0 or None), e.g. "
                            f"Shape((None, 3)), got {dims!r}")
        for d in dims:
            if d is None:
                out.append(None)
                continue
            out.append(check_int(d, "each axis", "Shape", lo=0, none_ok=True, error=InvalidInputError))
        self._dims: tuple[Dim, ...] = tuple(out)

    @classmethod
    def with_free_batch(cls, dims: Iterable[Dim]) -> Shape:
        """The given dims with axis 0 (the batch) made free."""
        d = list(dims)
        if not d:
            raise InvalidInputError("Shape.with_free_batch: expected at least 1 axis, got 0")
        return cls([None, *d[1:]])

    @classmethod
    def known(cls, dims: Iterable[Dim]) -> Shape:
        """Exactly the given dims."""
        return cls(dims)

    @classmethod
    def of(cls, shape: Shape | Iterable[Dim]) -> Shape:
        """Coerce a tuple or list into a Shape (a Shape passes through)."""
        return shape if isinstance(shape, Shape) else cls(shape)

    @property
    def dims(self) -> tuple[Dim, ...]:
        return self._dims

    @property
    def rank(self) -> int:
        return len(self._dims)

    def __len__(self) -> int:
        return len(self._dims)

    def __iter__(self) -> Iterator[Dim]:
        return iter(self._dims)

    @overload
    def __getitem__(self, i: int) -> Dim: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Dim, ...]: ...
    def __getitem__(self, i: int | slice) -> Dim | tuple[Dim, ...]:
        return self._dims[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Shape):
            return self._dims == other._dims
        if isinstance(other, (tuple, list)):
            return self._dims == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._dims)

    def __repr__(self) -> str:
        return f"Shape({self._dims!r})"

    def __str__(self) -> str:
        inner = ", ".join("None" if d is None else str(d) for d in self._dims)
        return f"({inner},)" if len(self._dims) == 1 else f"({inner})"

    def accepts(self, shape: tuple[int, ...]) -> bool:
        """True when a concrete array shape fits (same rank, equal on every fixed axis)."""
        return len(shape) == len(self._dims) and all(
            d is None or d == s for d, s in zip(self._dims, shape, strict=True)
        )


def declared_input_shape(value: object, where: str) -> Shape:
    """Keras' ``input_shape=`` of a layer — the shape of ONE sample, without the batch axis,
    e.g. ``(8, 8)`` — as the build shape ``(None, 8, 8)``; a tuple or list of ints >= 1 or
    ``None`` (a free axis), else InvalidParameterError naming ``where``."""
    if not isinstance(value, (tuple, list)) or not value:
        raise InvalidParameterError(
            f"{where}: input_shape must be the shape of one sample without the batch axis, a tuple of "
            f"ints >= 1 or None (Keras' convention: input_shape=(timesteps, features)), got {show(value)}")
    return Shape((None, *(check_int(d, "each axis", f"{where}: input_shape {show(value)}", lo=1,
                                    none_ok=True)
                          for d in value)))


@functools.lru_cache(maxsize=1024)
def _accepts(cls: type, keyword: str) -> bool:
    """Whether ``cls(...)`` takes ``keyword`` itself: its ``__init__`` names it, or passes
    ``**kwargs`` on to a base class whose ``__init__`` does (the next in the MRO). Remembered
    per class (a config of many layers of one class inspects its signature once)."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(getattr(init, "__wrapped__", init)).parameters
        if keyword in params:
            return True
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return False
    return False


def pop_input_shape(cls: type, kwargs: dict[str, Any]) -> Shape | None:
    """Take Keras' ``input_shape=`` (and ``input_dim=n``, read as ``input_shape=(n,)``, where
    ``cls`` has no ``input_dim`` of its own) out of ``kwargs`` for constructing ``cls``: the
    declared build shape with a free batch axis (:func:`declared_input_shape`), None when neither
    is given. A class whose ``__init__`` takes ``input_shape`` itself keeps it."""
    if _accepts(cls, "input_shape"):
        return None
    shape = kwargs.pop("input_shape", None)
    dim = None if _accepts(cls, "input_dim") else kwargs.pop("input_dim", None)
    if shape is not None and dim is not None:
        raise InvalidParameterError(f"{cls.__name__}: give input_shape= or input_dim=, not both")
    if dim is not None:
        shape = (dim,)
    return None if shape is None else declared_input_shape(shape, cls.__name__)
