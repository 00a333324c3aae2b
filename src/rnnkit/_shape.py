"""``Shape``: a tensor shape whose axes may be free (``None``), usually the batch axis."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import overload

from rnnkit._errors import InvalidInputError

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
            if isinstance(d, bool) or not isinstance(d, (int,)) and not hasattr(d, "__index__"):
                raise InvalidInputError(f"Shape: each axis must be an int >= 0 or None, got {d!r}")
            di = int(d)  # numpy integers
            if di < 0:
                raise InvalidInputError(f"Shape: each axis must be an int >= 0 or None, got {d!r}")
            out.append(di)
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
