"""``Step``: what a cell declares of its compiled step (re-exported as
:class:`rnnkit.kernels.Step`; the functions' arguments are in :mod:`rnnkit.kernels`' docstring).
Here, below the driver, so that the driver (imported on first use, it needs numba) reads it
without importing the package that loads it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


def _no_parks(cell: Any) -> dict[str, int]:
    return {}


def _no_options(cell: Any) -> tuple[int, ...]:
    return ()


class _AnyValue:
    """:data:`ANY`: an :attr:`Step.implements` entry that holds every value."""

    def __contains__(self, value: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "rnnkit.kernels.ANY"


#: the :attr:`Step.implements` entry of an option whose every value the compiled step computes
ANY: Container[Any] = _AnyValue()

#: the configuration keys every compiled step implements: ``units`` reaches it as the arrays' widths
IMPLICIT = ("units",)


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
    this configuration has no compiled step (the reference runs).

    ``implements``: ``{option: the values the step computes}`` for every option of the cell,
    i.e. every key of ``cell.get_config()`` but ``units`` (a tuple of values, or :data:`ANY`).
    The compiled step runs a cell only when each of its options is declared here with its
    value among the declared ones (:meth:`missing` is empty); any other configuration runs the
    reference. So an option that a step does not read (an ``activation`` that its functions
    hard-code as tanh) never runs compiled with another value: the default, ``{}``, runs no cell
    that has options, and every cell has ``activation``."""

    forward: Any
    backward: Any
    parks: Callable[[Any], dict[str, int]] = _no_parks
    input_park: str | None = None
    rec_apart: bool = False
    projects: str | None = None
    own: tuple[str, ...] = ()
    options: Callable[[Any], tuple[int, ...] | None] = _no_options
    implements: Mapping[str, Container[Any]] = field(default_factory=dict)

    def functions(self) -> tuple[Any, Any]:
        """(forward, backward) as compiled functions (imports them on first use)."""
        return _resolve_fn(self.forward), _resolve_fn(self.backward)

    def missing(self, cell: Any) -> list[str]:
        """The options of ``cell`` (its ``get_config()`` but ``units``) that this step does
        not compute, as ``"name=value"``: an option not declared in :attr:`implements`, or a
        value outside the declared ones. Empty: the step computes exactly this configuration."""
        return list(self._unimplemented(cell))

    def runs(self, cell: Any) -> bool:
        """Whether this step computes ``cell``'s configuration (:meth:`missing` is empty); stops
        at the first option it does not compute (read on every pass)."""
        return next(self._unimplemented(cell), None) is None

    def _unimplemented(self, cell: Any) -> Iterator[str]:
        impl = self.implements
        for name, value in cell.get_config().items():
            if name in IMPLICIT:
                continue
            vals = impl.get(name)
            try:
                ok = vals is not None and value in vals
            except TypeError:   # (an unhashable value asked of a set): not declared
                ok = False
            if not ok:
                yield f"{name}={value!r}"
