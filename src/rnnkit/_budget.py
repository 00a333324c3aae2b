"""An allocation budget for building a model from a file's config: a loader states how many
weight numbers the file holds, and every initializer reserves its array's size before drawing
it. A config declaring far more weights than its file holds fails before the memory is spent
(strict loading would refuse it afterwards anyway).

The budget is ``2 * numbers + SLACK``, not ``numbers``: some initializers draw a little more
than they keep (an LSTM with ``proj_size`` draws square recurrent blocks and keeps a slice).
The attacks it stops are orders of magnitude larger (``Embedding(200_000_000, 1)`` in a
340-byte file).

Weightless layers whose output size a config states (``RepeatVector(n)``: ``n`` copies of each
sample) are bounded by the same budget per sample with :func:`bound`, which spends nothing: a
file declaring ``RepeatVector(10**9)`` is refused when it is loaded, not when it predicts."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextvars import ContextVar

from rnnkit._errors import FileFormatError, MemoryBudgetError
from rnnkit._limits import LIMITS

#: weight numbers a build may draw beyond twice the file's (4 Mi numbers, 32 MiB as float64)
SLACK = 1 << 22

_BUDGET: ContextVar[list[int] | None] = ContextVar("rnnkit_alloc_budget", default=None)
_SOURCE: ContextVar[str] = ContextVar("rnnkit_alloc_source", default="")


@contextlib.contextmanager
def allocation_budget(numbers: int, source: str) -> Iterator[None]:
    """Within the block, initializers may draw at most ``2 * numbers + SLACK`` weight numbers."""
    total = 2 * int(numbers) + SLACK
    tok, tok_src = _BUDGET.set([int(numbers), total]), _SOURCE.set(source)
    try:
        yield
    finally:
        _BUDGET.reset(tok)
        _SOURCE.reset(tok_src)


def check_array(shape: tuple[int, ...], itemsize: int, what: str) -> None:
    """Refuse, before it is allocated, an array of ``shape`` with ``itemsize``-byte elements
    larger than the memory budget ``LIMITS.max_array_bytes``: MemoryBudgetError naming
    ``what``, the shape, its bytes, the budget and how to raise it. Sizes are Python ints (no
    overflow)."""
    n = math.prod(int(d) for d in shape)
    size = n * int(itemsize)
    if size > LIMITS.max_array_bytes:
        raise MemoryBudgetError(
            f"{what}: an array of shape {tuple(int(d) for d in shape)} ({n} numbers, {size} bytes) is "
            f"over the memory budget of {LIMITS.max_array_bytes} bytes per array; expected at most "
            f"that. Raise it with rnnkit.io.set_limits(max_array_bytes=...) if the machine has the "
            f"memory")


def _active(shape: tuple[int, ...]) -> tuple[list[int] | None, int]:
    """The active budget ``[file numbers, draws left]`` (None without one) and ``shape``'s size."""
    budget = _BUDGET.get()
    return budget, (0 if budget is None else math.prod(int(d) for d in shape))


def reserve(shape: tuple[int, ...]) -> None:
    """Count ``shape``'s elements against the active budget (no-op without one)."""
    budget, n = _active(shape)
    if budget is None:
        return
    if n > budget[1]:
        raise FileFormatError(
            f"{_SOURCE.get()}: the architecture declares a weight of shape {tuple(shape)} ({n} numbers) "
            f"but the file holds only {budget[0]} weight numbers in all ({budget[1]} of the draws "
            f"allowed for them left); refused before allocating")
    budget[1] -= n


def bound(shape: tuple[int, ...], what: str) -> None:
    """Refuse, under an active budget, an array of ``shape`` per sample that is larger than
    the draws still allowed (nothing is spent: it is not a weight); no-op without one."""
    budget, n = _active(shape)
    if budget is None:
        return
    if n > budget[1]:
        raise FileFormatError(
            f"{_SOURCE.get()}: {what} makes {n} numbers per sample (shape {tuple(shape)}), but the "
            f"file holds only {budget[0]} weight numbers ({budget[1]} allowed); refused before "
            f"allocating")
