"""``Step``: what a cell declares of its compiled step (re-exported as
:class:`rnnkit.kernels.Step`; the functions' arguments are in :mod:`rnnkit.kernels`' docstring).
Here, below the driver, so that the driver (imported on first use, it needs numba) reads it
without importing the package that loads it."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rnnkit._errors import InvalidParameterError

#: THE compiled step's interface (the one declaration: the walker calls exactly these, in this
#: order; :class:`Step` checks a cell's functions against it when it is made). Each argument's
#: type as the walker passes it (``B`` rows of the block, ``N`` the step input's width, ``S``
#: state part 0's, ``w`` a part's or park's; float is the layer's dtype, float32 or float64):
ARG_TYPES: Mapping[str, str] = {
    "k": "int64: the group of the recurrent product just done (forward) / about to be undone",
    "a": "float (B, N): the step input, plus the products unless rec_apart",
    "rec": "float (B, N): the products with rec_apart, else (B, 0)",
    "fed": "float (B, S): state part 0 as the products see it",
    "st": "tuple of float (T+1, B, w): the state parts; read [i0], write [i1]",
    "i0": "int64: the row of st entering the step",
    "i1": "int64: the row of st leaving the step",
    "pk": "tuple of float (T, B, w): the parks, in Step.parks order; write [j]",
    "j": "int64: the row of pk of this step",
    "own": "tuple of float 1D: the parameters named by Step.own, flattened",
    "tmp": "float (B, N): scratch",
    "opts": "tuple of int64: Step.options(cell)",
    "g": "float (B, N): the parked step input",
    "d": "float (B, N): receives dL/d(step input)",
    "dr": "float (B, N): receives dL/d(rec) with rec_apart, else (B, 0)",
    "dfed": "float (B, S): accumulates dL/d(fed)",
    "dst": "tuple of float (B, w): dL/d(state leaving) in, dL/d(state entering) out",
    "dpk": "tuple of float (B, w): dL/d(each park)",
    "gown": "tuple of float (B, size): accumulates each row's gradient of own[n]",
}
#: the forward step's parameters, in order
FORWARD_ARGS: tuple[str, ...] = ("k", "a", "rec", "fed", "st", "i0", "i1", "pk", "j", "own", "tmp", "opts")
#: the backward step's parameters, in order
BACKWARD_ARGS: tuple[str, ...] = ("k", "g", "d", "dr", "dfed", "fed", "dst", "dpk", "st", "i0", "i1", "pk",
                                  "j", "own", "gown", "tmp", "opts")
_ARGS = {"forward": FORWARD_ARGS, "backward": BACKWARD_ARGS}


def signature_text(which: str) -> str:
    """``"forward(k, a, ..., opts)"``: the declared signature of the ``which`` step."""
    return f"{which}({', '.join(_ARGS[which])})"


def check_signature(f: Any, which: str, where: str = "rnnkit.kernels.Step") -> None:
    """Raise :class:`~rnnkit.InvalidParameterError` unless ``f`` is a ``numba.njit`` function
    whose Python function takes exactly the declared parameters of the ``which`` (``"forward"``
    / ``"backward"``) step, by name and in order, none with a default, ``*args`` or ``**kwargs``.
    Reads the Python signature only: nothing is compiled."""
    want = _ARGS[which]
    py = getattr(f, "py_func", None)
    if py is None or not callable(py):
        raise InvalidParameterError(
            f"{where}: {which} must be a numba.njit function {signature_text(which)} ({len(want)} "
            f"parameters), or a 'module:attribute' string naming one; got {f!r}")
    try:
        params = list(inspect.signature(py).parameters.values())
    except (TypeError, ValueError):   # (no Python signature to read)
        params = []
    plain = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is inspect.Parameter.empty
                for p in params)
    got = tuple(p.name for p in params)
    if got != want or not plain:
        raise InvalidParameterError(
            f"{where}: the {which} step must be {signature_text(which)}: {len(want)} positional "
            f"parameters with these names, in this order, no defaults; got "
            f"{getattr(py, '__qualname__', py)}{inspect.signature(py) if params else '(?)'} "
            f"({len(params)} parameters)")


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

    def __post_init__(self) -> None:
        for which in ("forward", "backward"):
            f = getattr(self, which)
            if not isinstance(f, str):          # (a string is checked when it is imported)
                check_signature(f, which)
            elif not all(f.partition(":")):
                raise InvalidParameterError(
                    f"rnnkit.kernels.Step: {which} must be a numba.njit function {signature_text(which)} "
                    f"or a 'module:attribute' string; got {f!r}")

    def functions(self) -> tuple[Any, Any]:
        """(forward, backward) as compiled functions (imports them on first use, and checks
        their signatures, before anything compiles)."""
        fns = _resolve_fn(self.forward), _resolve_fn(self.backward)
        for f, which in zip(fns, ("forward", "backward"), strict=True):
            check_signature(f, which)
        return fns

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
