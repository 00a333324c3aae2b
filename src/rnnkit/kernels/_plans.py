"""The plans of the compiled walker's passes: what a pass of one cell needs besides its data.

A plan holds a cell's layout (read once per cell object, input width and options: the step's
handle and loops, the parks, the groups, the projection), the weights as read-only views (no
copies: one compiled version whatever the caller) and, made on first use, their packed panels.
:func:`_plan` keeps one per cell while the weights it read are the very same arrays and cannot
have changed, so the panels are laid out once for every later pass.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from rnnkit.kernels import _walk
from rnnkit.kernels._packed import nr_of, pack
from rnnkit.kernels._step import Step
from rnnkit.kernels._steps import handle


def _ro(a: np.ndarray) -> np.ndarray:
    """A read-only view (no copy): every weight reaches the compiled code as one array type."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v



@functools.cache
def _zeros(n: int, dt: np.dtype) -> np.ndarray:
    """A read-only zero row (bias rows of a cell without a bias)."""
    return _ro(np.zeros(n, dt))


@functools.cache
def _empty_own(dt: np.dtype) -> np.ndarray:
    return _ro(np.zeros(0, dt))


@functools.cache
def _no_panels(dt: np.dtype) -> np.ndarray:
    """The packed placeholder of a cell without an output projection."""
    return np.zeros((1, 1, nr_of(dt)), dt)


class _Layout:
    """What the compiled loops need of a cell's declarations (the step's handle and loops, the
    parks, the groups, the projection): read once per cell object, input width and options."""

    def __init__(self, cell: Any, step: Step, N: int, opts: tuple[int, ...]) -> None:
        fwd, bwd = step.functions()
        self.handle = handle(fwd, bwd)
        loops = _walk.__dict__ if self.handle.cacheable else _walk.UNCACHED
        self.train, self.infer, self.back = loops["walk_train"], loops["walk_infer"], loops["walk_back"]
        self.park_sizes = step.parks(cell)
        self.park_names = tuple(self.park_sizes)
        self.groups = cell.rec_groups(N)
        state0 = cell.state_names[0]
        self.srcs = tuple(-1 if src == state0 else self.park_names.index(src) for src, _, _ in self.groups)
        self.cols = tuple((c0, c1) for _, c0, c1 in self.groups)
        self.proj_name = getattr(cell, "projection", None)
        self.proj = self.park_names.index(step.projects) if self.proj_name else -1
        self.opts = opts


_layouts: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], _Layout]] = weakref.WeakKeyDictionary()


def _layout(cell: Any, step: Step, N: int) -> _Layout:
    opts = step.options(cell)
    assert opts is not None, "the walker runs only cells that kernels.find accepted"
    key = (step, N, tuple(int(v) for v in opts), getattr(cell, "projection", None))
    try:
        per = _layouts[cell]
    except (KeyError, TypeError):   # (TypeError: a cell that cannot be weakly referenced)
        per = {}
        with contextlib.suppress(TypeError):
            _layouts[cell] = per
    got = per.get(key)
    if got is None:
        got = per[key] = _Layout(cell, step, N, key[2])
    return got


class _Plan:
    """What a pass of one cell needs besides the data: its layout, the weights (read-only
    views, no copies) and, made on first use, their packed panels (see :func:`_plan`)."""

    def __init__(self, cell: Any, step: Step, w: Any, dt: np.dtype) -> None:
        self.step = step
        self._packs: dict[str, Any] = {}
        self.W = _ro(np.asarray(w[cell.input_kernel]))
        self.U = _ro(np.asarray(w[cell.recurrent_kernel]))
        self.N = N = self.W.shape[1]
        lay = _layout(cell, step, N)
        self.handle, self.train, self.infer, self.back = lay.handle, lay.train, lay.infer, lay.back
        self.park_sizes, self.park_names, self.groups = lay.park_sizes, lay.park_names, lay.groups
        self.srcs, self.cols, self.proj, self.opts = lay.srcs, lay.cols, lay.proj, lay.opts
        self.proj_name = lay.proj_name
        bias = None if cell.bias is None else _ro(np.asarray(w[cell.bias]))
        self.bias_rows = 0 if bias is None else bias.shape[0]
        self.b0 = _zeros(N, dt) if bias is None else bias[0]
        self.apart = step.rec_apart
        self.b1 = bias[1] if bias is not None and bias.shape[0] == 2 else _zeros(N, dt)
        self.Wp = _ro(np.asarray(w[self.proj_name])) if self.proj_name else None
        self.own = (*(_ro(np.ascontiguousarray(w[n]).reshape(-1)) for n in step.own), _empty_own(dt))
        self.sizes: tuple[int, ...] = tuple(cell.state_sizes())
        self._spares: list[tuple[Any, Any]] = []
        self._entries: dict[Any, Any] = {}
        #: the prepared calls of :func:`rnnkit.kernels._driver.infer`, by ``keep_seq``
        self.quick: dict[Any, Any] = {}

    def scratch(self, key: Any, make: Callable[[], Any]) -> Any:
        """Arrays a pass writes and reads within the call only (the inference parks and
        projection chunk), for ``key`` (what they are and their shapes: two kinds of scratch never
        share a key, or a thread could take one for the other): a spare one given back by an earlier pass
        (:meth:`spare`), else ``make()``. (``list.pop`` / ``append`` are atomic: two threads
        never get the same arrays.)"""
        try:
            k, got = self._spares.pop()
        except IndexError:
            return make()
        return got if k == key else make()

    def spare(self, key: Any, arrays: Any) -> None:
        """Give back what :meth:`scratch` handed out, for a later pass (at most two kept)."""
        if len(self._spares) < 2:
            self._spares.append((key, arrays))

    def entry(self, key: Any, loop: Any, args: tuple[Any, ...]) -> Any:
        """``loop`` (a compiled dispatcher) called on ``args``, through the compiled version for
        ``key`` once one is known: a key names every argument's type, so that version's entry
        point is called directly (the dispatcher's own type matching costs about as much as
        the rest of a small call). The first call of a key, and every call without one (None),
        goes through the dispatcher."""
        if key is None:
            return loop(*args)
        fn = self._entries.get(key)
        if fn is not None:
            return fn(*args)
        got = loop(*args)
        sig = tuple(numba.typeof(a) for a in args)
        ov = loop.overloads.get(sig)
        if ov is not None:
            self._entries[key] = ov.entry_point
        return got

    def forward_panels(self) -> tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray]:
        """``(packed("w"), packed_u(), packed("p"))``, made once per plan."""
        got = self._packs.get("fwd")
        if got is None:
            got = self._packs["fwd"] = (self.packed("w"), self.packed_u(), self.packed("p"))
        return got  # type: ignore[no-any-return]

    def packed_u(self) -> tuple[np.ndarray, ...]:
        """U as panels, one set per group of columns (made once per plan)."""
        got = self._packs.get("u")
        if got is None:
            got = self._packs["u"] = (pack(self.U),) if len(self.cols) == 1 else \
                tuple(pack(self.U, cols=c) for c in self.cols)
        return got  # type: ignore[no-any-return]

    def packed_ut(self) -> tuple[np.ndarray, ...]:
        """U^T as panels, one set per group (made once per plan)."""
        got = self._packs.get("ut")
        if got is None:
            if len(self.cols) == 1:
                got = (pack(self.U, trans=True),)
            else:
                UT = _ro(np.ascontiguousarray(self.U.T))
                got = tuple(pack(UT[c0:c1]) for c0, c1 in self.cols)
            self._packs["ut"] = got
        return got  # type: ignore[no-any-return]

    def packed(self, name: str) -> np.ndarray:
        """``"w"``: W as panels; ``"p"`` / ``"pt"``: the output projection (or its transpose) as
        panels, or the empty placeholder without one (each made once per plan)."""
        got = self._packs.get(name)
        if got is None:
            if name == "w":
                got = pack(self.W)
            elif self.Wp is None:
                got = _no_panels(self.W.dtype)
            else:
                got = pack(self.Wp, trans=name == "pt")
            self._packs[name] = got
        return got  # type: ignore[no-any-return]


def _frozen(a: Any) -> bool:
    """True when nothing can change ``a``'s values in place: it and every array under it
    (``.base``) are read-only, down to an array that owns its memory. (A layer's weights are
    such arrays, replaced, never written, when they change.)"""
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        if a.base is None:
            return True
        a = a.base
    return False   # memory of another object (a buffer, a memory map): it may change


def _chain(a: np.ndarray) -> tuple[np.ndarray, ...]:
    """``a`` and every array under it (``.base``), down to the one that owns the memory (of a
    :func:`_frozen` array: ``.base`` never changes, so only these arrays' flags can)."""
    got = [a]
    while a.base is not None:
        a = a.base
        got.append(a)
    return tuple(got)


class _Kept:
    """A cell's kept plan and what it was made from: the step, dtype and options, the names of
    the weights it read and those arrays themselves (compared by identity), and every array of
    their read-only chains (:func:`_chain`), whose flags say whether they are still frozen."""

    __slots__ = ("arrays", "chains", "dt", "names", "opts", "plan", "step")

    def __init__(self, step: Step, dt: np.dtype, opts: Any, names: tuple[str, ...],
                 arrays: tuple[np.ndarray, ...], plan: _Plan) -> None:
        self.step, self.dt, self.opts = step, dt, opts
        self.names, self.arrays, self.plan = names, arrays, plan
        self.chains = tuple(c for a in arrays for c in _chain(a))


_plans: weakref.WeakKeyDictionary[Any, _Kept] = weakref.WeakKeyDictionary()


def _names(cell: Any, step: Step) -> tuple[str, ...]:
    """The names of the weights a plan of ``cell`` reads."""
    return tuple(n for n in (cell.input_kernel, cell.recurrent_kernel, cell.bias,
                             getattr(cell, "projection", None), *step.own) if n)


def _plan(cell: Any, step: Step, w: Any, dt: np.dtype, opts: Any = None) -> _Plan:
    """The plan of a pass, kept per cell while the weights it read are the very same arrays and
    cannot have changed (:func:`_frozen`): then the packed panels of W, U and the projection are
    laid out once for every later pass (forward and backward), not once per pass. A weight
    replaced (``set_weight``, an optimizer step), another dtype, step or options: a new plan.
    ``opts``: the step's options for ``cell`` when the caller has them (else read here).

    The lookup is the per-call cost of every pass: one weak-dictionary get, three identity
    comparisons, per weight its name looked up and an identity comparison, then one flag per
    array of the kept read-only chains."""
    if opts is None:
        opts = step.options(cell)
    try:
        kept = _plans.get(cell)
    except TypeError:   # a cell that cannot be weakly referenced: no reuse
        return _Plan(cell, step, w, dt)
    if kept is not None and kept.step is step and kept.dt == dt and kept.opts == opts:
        for n, a in zip(kept.names, kept.arrays, strict=True):
            if w[n] is not a:
                break
        else:
            for c in kept.chains:              # (what _frozen reads of the same arrays)
                if c.flags.writeable:
                    break
            else:
                if kept.names == _names(cell, step):
                    return kept.plan
    names = _names(cell, step)
    arrays = tuple(w[n] for n in names)
    plan = _Plan(cell, step, w, dt)
    if all(_frozen(a) for a in arrays):
        _plans[cell] = _Kept(step, dt, opts, names, arrays, plan)
    else:
        _plans.pop(cell, None)
    return plan
