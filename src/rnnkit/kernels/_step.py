"""``Step``: what a cell declares of its compiled step (re-exported as
:class:`rnnkit.kernels.Step`; the functions' arguments are in :mod:`rnnkit.kernels`' docstring).
Here, below the driver, so that the driver (imported on first use, it needs numba) reads it
without importing the package that loads it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _no_parks(cell: Any) -> dict[str, int]:
    return {}


def _no_options(cell: Any) -> tuple[int, ...]:
    return ()


def _resolve_fn(f: Any) -> Any:
    if isinstance(f, str):
        mod, _, attr = f.partition(":")
        return getattr(importlib.import_module(mod), attr)
    return f


@dataclass(frozen=True, eq=False)
class Step:
    """A cell's compiled step (see the module docstring for the functions' arguments).

    ``forward`` / ``backward``: ``numba.njit`` functions, or ``"module:attribute"`` strings
    imported on first use. ``parks(cell)``: ``{name: width}`` of what the step parks, in order.
    ``input_park``: the name the step input is parked under (None: not parked). ``rec_apart``:
    the products go to ``rec``, not onto the step input. ``projects``: the park that the
    cell's output projection (its ``projection`` attribute names the parameter, (width, S))
    multiplies into state part 0. ``own``: parameters the step reads, whose gradients it writes
    per row. ``options(cell)``: the ints handed to the step (activation codes...), or None when
    this configuration has no compiled step (the reference runs)."""

    forward: Any
    backward: Any
    parks: Callable[[Any], dict[str, int]] = _no_parks
    input_park: str | None = None
    rec_apart: bool = False
    projects: str | None = None
    own: tuple[str, ...] = ()
    options: Callable[[Any], tuple[int, ...] | None] = _no_options

    def functions(self) -> tuple[Any, Any]:
        """(forward, backward) as compiled functions (imports them on first use)."""
        return _resolve_fn(self.forward), _resolve_fn(self.backward)
