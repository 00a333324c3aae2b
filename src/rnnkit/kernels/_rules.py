"""The rules a compiled step must follow, checked when a layer is built (no numba needed)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from rnnkit._errors import InvalidParameterError


def _fail(cell: Any, where: str, rule: str, got: Any) -> None:
    raise InvalidParameterError(
        f"{where}: {type(cell).__name__}.compiled_step breaks a rule of the compiled step: {rule}; got {got}")


def _is_function(f: Any) -> bool:
    if isinstance(f, str):
        mod, sep, attr = f.partition(":")
        return bool(mod and sep and attr)
    return callable(getattr(f, "py_func", None))


def check_step(cell: Any, step: Any, where: str) -> None:
    """Raise :class:`~rnnkit.InvalidParameterError` when ``step`` (a ``Step``) cannot run
    ``cell``: it says which rule, what was expected and what was given."""
    for name in ("forward", "backward"):
        f = getattr(step, name)
        if not _is_function(f):
            _fail(cell, where, f"{name} must be a numba.njit function (or a 'module:attribute' string)",
                  repr(f))
    if cell.input_kernel is None or cell.recurrent_kernel is None:
        _fail(cell, where, "the cell must name an input_kernel and a recurrent_kernel",
              f"input_kernel={cell.input_kernel!r}, recurrent_kernel={cell.recurrent_kernel!r}")
    shapes = {p.name: tuple(p.shape) for p in cell.params(1)}
    for attr in ("input_kernel", "recurrent_kernel", "bias"):
        n = getattr(cell, attr)
        if n is not None and n not in shapes:
            _fail(cell, where, f"{attr} must name one of the cell's parameters {sorted(shapes)}", repr(n))
    N = shapes[cell.input_kernel][-1]
    sizes = tuple(cell.state_sizes())
    S = sizes[0]
    u = shapes[cell.recurrent_kernel]
    if u != (S, N):
        _fail(cell, where, f"recurrent_kernel must be (state part 0 width, N) = {(S, N)}", u)
    parks = step.parks(cell)
    if not isinstance(parks, dict) or not all(isinstance(k, str) and isinstance(v, int) and v >= 1
                                              for k, v in parks.items()):
        _fail(cell, where, "parks(cell) must return {name: width >= 1}", repr(parks))
    clash = [n for n in parks if n in cell.state_names or n == step.input_park]
    if clash:
        _fail(cell, where, "park names must differ from the state parts and input_park", clash)
    groups = list(cell.rec_groups(N))
    edges = [0] + [c1 for _, _, c1 in groups]
    if not 1 <= len(groups) <= 2 or [c0 for _, c0, _ in groups] != edges[:-1] or edges[-1] != N:
        _fail(cell, where, f"rec_groups must be one or two contiguous groups covering columns 0..{N}", groups)
    for src, _, _ in groups:
        if src != cell.state_names[0] and parks.get(src) != S:
            _fail(cell, where, f"each group's source must be state part 0 ({cell.state_names[0]!r}) or a "
                  f"park {S} wide (U has {S} rows)", f"{src!r} (parks {parks})")
    if cell.bias is not None:
        rows = shapes[cell.bias][0] if len(shapes[cell.bias]) == 2 else 0
        if shapes[cell.bias][-1] != N or rows not in (1, 2) or (rows == 2 and not step.rec_apart):
            _fail(cell, where, f"the bias must be (1, {N}), or (2, {N}) with rec_apart", shapes[cell.bias])
    proj = getattr(cell, "projection", None)
    if proj is not None:
        if step.projects not in parks or shapes.get(proj) != (parks[step.projects], S):
            _fail(cell, where, f"with an output projection, projects must name a park w wide and the "
                  f"projection parameter be (w, {S})",
                  f"projects={step.projects!r}, {proj}={shapes.get(proj)}")
    taken = {cell.input_kernel, cell.recurrent_kernel, cell.bias, proj}
    bad = [n for n in step.own if n not in shapes or n in taken]
    if bad:
        _fail(cell, where, "own must name parameters of the cell other than the input/recurrent kernel, the "
              "bias and the projection", bad)
    impl = step.implements
    if not isinstance(impl, Mapping) or not all(isinstance(k, str) and hasattr(v, "__contains__")
                                                for k, v in impl.items()):
        _fail(cell, where, "implements must map option names to the values the step computes (a tuple, "
              "or rnnkit.kernels.ANY)", repr(impl))
    config = cell.get_config()
    unsaid = [n for n in _constructor_options(cell) if n not in config]
    if unsaid:
        _fail(cell, where, "get_config() must return every argument of the cell's constructor (the "
              "compiled step runs only the options it implements, read from get_config)",
              f"{type(cell).__name__}.__init__ takes {unsaid}, which get_config() does not return (it "
              f"returns {sorted(config)})")
    if not step.runs(cell):   # (this configuration runs the reference: its options are never read)
        return
    opts = step.options(cell)
    if opts is not None and not (isinstance(opts, tuple) and all(isinstance(v, int) for v in opts)):
        _fail(cell, where, "options(cell) must return a tuple of ints, or None", repr(opts))


def _constructor_options(cell: Any) -> list[str]:
    """The named arguments of the cell's constructor (``*args`` / ``**kwargs`` left out, and the
    ``layer_options`` the cell's class names: they configure the layer holding its weights)."""
    try:
        sig = inspect.signature(type(cell).__init__)
    except (TypeError, ValueError):   # (no signature to read: a constructor written in C)
        return []
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    held = set(getattr(type(cell), "layer_options", ()))   # (the holding layer's, not the step's)
    return [p.name for p in list(sig.parameters.values())[1:] if p.kind in named and p.name not in held]
