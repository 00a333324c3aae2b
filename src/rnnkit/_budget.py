"""An allocation budget for building a model from a file's config: a loader states how many
weight numbers the file holds, and every initializer reserves its array's size before drawing
it. A config declaring more weights than its file holds fails before the memory is spent
(strict loading would refuse it afterwards anyway)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextvars import ContextVar

from rnnkit._errors import FileFormatError

_BUDGET: ContextVar[list[int] | None] = ContextVar("rnnkit_alloc_budget", default=None)
_SOURCE: ContextVar[str] = ContextVar("rnnkit_alloc_source", default="")


@contextlib.contextmanager
def allocation_budget(numbers: int, source: str) -> Iterator[None]:
    """Within the block, initializers may draw at most ``numbers`` weight numbers in all."""
    tok, tok_src = _BUDGET.set([int(numbers), int(numbers)]), _SOURCE.set(source)
    try:
        yield
    finally:
        _BUDGET.reset(tok)
        _SOURCE.reset(tok_src)


def reserve(shape: tuple[int, ...]) -> None:
    """Count ``shape``'s elements against the active budget (no-op without one)."""
    budget = _BUDGET.get()
    if budget is None:
        return
    n = math.prod(int(d) for d in shape)
    if n > budget[1]:
        raise FileFormatError(
            f"{_SOURCE.get()}: the architecture declares a weight of shape {tuple(shape)} ({n} numbers) "
            f"but the file holds {budget[0]} weight numbers in all ({budget[1]} not yet claimed); "
            f"refused before allocating")
    budget[1] -= n
