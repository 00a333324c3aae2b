"""The walker: the time loop of every recurrent layer, over any :class:`~rnnkit.Cell`.

It owns the input projection of all timesteps in one GEMM (for a cell with an input kernel),
the walk along time, the per-step caches, the backward walk and the batched weight-gradient
GEMMs. It knows no parameter name: the cell names its input kernel, recurrent kernel and bias.
When the kernel mode is ``"fast"`` and the cell gives a compiled step (:func:`rnnkit.kernels.find`),
the compiled walker runs instead of the reference loop below; both produce the same
:class:`WalkCache`, so either backward can follow either forward. A cell with a parallel form
(:meth:`~rnnkit.Cell.sequence_forward`) runs it instead when :func:`sequence_form` says so
(also under a mask, for a cell whose parallel form takes one); its cache is marked
``form="sequence"`` and only the parallel backward follows it.

Everything here is time-major and in PROCESSING order: row ``s`` of ``x_tm`` (T, B, F) is the
input step ``s`` consumes. The cache of a training pass (:class:`WalkCache`)::

    x_tm     (T, B, F)             the input
    states   [(T+1, B, size_k)]    per state part: row s enters step s, row s+1 leaves it
                                   ((2, B, size_k), the first and the last, for a part
                                   other than the output (``Cell.output_part``) of a
                                   parallel form with ``Cell.sequence_last_states``)
    parks    {name: (T, B, w)}     what the cell parked at every step
    mask     (T, B) bool or None   which steps are real; a masked step carries every state
                                   part over unchanged (its backward passes the gradient
                                   straight through and contributes nothing else)
    rdrop    (B, S) or None        the pass's recurrent dropout mask: state part 0 times it
                                   is what the recurrent products see (``rdrop=`` of a step)

Backward, after the walk has filled ``dinp`` (T, B, N) and ``drec``::

    dW      = x_tm^T @ dinp                 one GEMM over (T*B) rows
    b[0]    = sum(dinp)                     (b[1] = sum(drec) when the bias has 2 rows)
    dU[:, group] = P^T @ drec[:, group]     one GEMM per group of Cell.rec_groups
    dx      = dinp @ W^T                    one GEMM
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rnnkit import kernels
from rnnkit._errors import InvalidParameterError
from rnnkit.recurrent._cell import Arrays, Cell


@dataclass(eq=False)
class WalkCache:
    """What a training walk keeps for its backward (see the module docstring)."""

    x_tm: np.ndarray
    states: list[np.ndarray]
    parks: dict[str, np.ndarray]
    mask: np.ndarray | None
    rdrop: np.ndarray | None
    #: which form of the cell filled it: ``"step"`` (the reference or compiled step walk) or
    #: ``"sequence"`` (the cell's parallel form; ``parks`` are then what it parked)
    form: str = "step"


@dataclass(eq=False)
class PassCache:
    """What a recurrent layer keeps of one training pass in the ``Ctx``: the walk's cache and
    how the layer arranged the pass (output shape, time order, masks, dropout, the API)."""

    walk: WalkCache
    out_shape: tuple[int, ...]
    in_shape: tuple[int, ...]
    idx: np.ndarray | None        # (T, B) input timestep of each processing step, or None
    zero_pad: bool                # outputs past each sequence's end are zeros (lengths)
    drop: np.ndarray | None       # the input dropout mask (B, 1, F)
    given: bool                   # the pass started from a given initial state
    api: str                      # "layer" (forward) or "seq" (seq / seq_init)


Walk = tuple[np.ndarray | None, Arrays, WalkCache | None]

_SEQUENCE_HOOKS = ("sequence_forward", "sequence_backward")
_by_type: dict[type, bool] = {}


def _owner(cls: type, name: str) -> type:
    return next(c for c in cls.__mro__ if name in c.__dict__)


def has_sequence_form(cell: Cell) -> bool:
    """Whether ``cell`` has a parallel form: its class (or a base) overrides both
    :meth:`~rnnkit.Cell.sequence_forward` and ``sequence_backward``, and neither ``step`` nor
    ``step_back`` is overridden below the class that does (such an override is a different
    recurrence, which the inherited parallel form does not compute)."""
    cls = type(cell)
    got = _by_type.get(cls)
    if got is None:
        owners = [_owner(cls, n) for n in _SEQUENCE_HOOKS]
        got = all(o is not Cell for o in owners) and all(
            issubclass(o, _owner(cls, n)) for o in owners for n in ("step", "step_back"))
        _by_type[cls] = got
    return got


def sequence_form(cell: Cell, steps: int, mask: np.ndarray | None, rdrop: np.ndarray | None) -> bool:
    """THE choice between a cell's two forms, for one pass: the parallel form runs when the cell
    has one (:func:`has_sequence_form`), the pass has at least two steps (a single step, as in
    streaming, serving one step or a cell called as a Keras cell, runs the step form), no mask
    unless the cell's parallel form takes one (:attr:`~rnnkit.Cell.sequence_takes_mask`: a
    masked step carries the state, which the step walk does) and no recurrent dropout (a mask
    on the state inside the recurrence). Otherwise the step form (compiled or reference)."""
    return (steps >= 2 and rdrop is None and (mask is None or cell.sequence_takes_mask)
            and has_sequence_form(cell))


def walk(cell: Cell, w: Mapping[str, np.ndarray], x_tm: np.ndarray, init: Arrays | None, record: bool,
         keep_seq: bool, mask: np.ndarray | None = None, rdrop: np.ndarray | None = None) -> Walk:
    """Run the recurrence on ``x_tm`` (T, B, F) from ``init`` (None: zeros), ``mask`` (T, B)
    marking the real steps (None: all), ``rdrop`` (B, S) the recurrent dropout mask (None:
    none). Returns (the output of every step (T, B, out) when ``keep_seq``, the final state
    parts (views: copy before changing them), the cache when ``record``). A given ``init``
    passes the cell's :meth:`~rnnkit.Cell.check_init` first."""
    if init is not None:
        cell.check_init(init, cell.name)
    if sequence_form(cell, x_tm.shape[0], mask, rdrop):
        return sequence_walk(cell, w, x_tm, init, record, keep_seq, mask)
    return step_walk(cell, w, x_tm, init, record, keep_seq, mask, rdrop)


def step_walk(cell: Cell, w: Mapping[str, np.ndarray], x_tm: np.ndarray, init: Arrays | None, record: bool,
              keep_seq: bool, mask: np.ndarray | None = None, rdrop: np.ndarray | None = None) -> Walk:
    """:func:`walk` by the step form: compiled when :func:`rnnkit.kernels.find_options` gives the
    cell (or its compiled view) a step, the reference loop otherwise."""
    found = None if cell.output_part else kernels.find_options(cell)   # (compiled: the output is part 0)
    if found is None:
        view = None if cell.output_part else cell.compiled_view(w)
        found = None if view is None else kernels.find_options(view[0])
        if view is None or found is None:
            return reference_walk(cell, w, x_tm, init, record, keep_seq, mask, rdrop)
        cell, w = view
    seq, final, kept = kernels.driver().walk(cell, found[0], w, x_tm, init, record, keep_seq, mask, rdrop,
                                             found[1])
    return seq, final, None if kept is None else WalkCache(x_tm, kept[0], kept[1], mask, rdrop)


def infer(cell: Cell, w: Mapping[str, np.ndarray], x_tm: np.ndarray, keep_seq: bool) -> np.ndarray | None:
    """The inference walk of :func:`walk` from a zero state without a mask, by the compiled
    walker's prepared call (:func:`rnnkit.kernels._driver.infer`): a new array, the output of
    every step batch-major (B, T, out) with ``keep_seq``, else the final state part 0 (B, out);
    None (nothing run) when that path does not take the call (:func:`walk` then)."""
    found = None if cell.output_part else kernels.find_options(cell)
    if found is None:
        return None
    return kernels.driver().infer(cell, found[0], w, x_tm, keep_seq, found[1])  # type: ignore[no-any-return]


def walk_back(cell: Cell, w: Mapping[str, np.ndarray], cache: WalkCache, g: np.ndarray,
              full: bool, d_final: Arrays | None = None,
              need_dx: bool = True) -> tuple[np.ndarray | None, dict[str, np.ndarray], Arrays]:
    """BPTT from the upstream gradient ``g`` ((B, T, out) when ``full``, else (B, out) of the
    last step) and ``d_final``, the gradient of the final state parts (None: zero). Returns
    (dL/dx_tm (T, B, F), {parameter name: gradient}, dL/d(initial state)); without
    ``need_dx``, dL/dx_tm is not computed and is None."""
    if cache.form == "sequence":
        return sequence_walk_back(cell, w, cache, g, full, d_final, need_dx)
    found = None if cell.output_part else kernels.find_options(cell)   # (compiled: the output is part 0)
    run = cell
    if found is None:                          # (the walk ran the cell's compiled view, if any)
        view = None if cell.output_part else cell.compiled_view(w)
        found = None if view is None else kernels.find_options(view[0])
        if view is None or found is None:
            return reference_walk_back(cell, w, cache, g, full, d_final, need_dx)
        run, w = view
    dx, grads, d_init = kernels.driver().walk_back(
        run, found[0], w, cache.x_tm, cache.states, cache.parks, cache.mask, cache.rdrop, g, full, d_final,
        need_dx, found[1])
    return dx, (grads if run is cell else cell.grads_from_view(grads)), d_init


def project(cell: Cell, w: Mapping[str, np.ndarray], x_tm: np.ndarray) -> np.ndarray:
    """The step inputs: ``x @ W + b[0]`` for every step in one GEMM, or ``x_tm`` itself."""
    if cell.input_kernel is None:
        return x_tm
    T, B, F = x_tm.shape
    W = w[cell.input_kernel]
    xw = x_tm.reshape(T * B, F) @ W
    if cell.bias is not None:
        xw += w[cell.bias][0]
    return xw.reshape(T, B, W.shape[1])


def _check_new(cell: Cell, new: Arrays, B: int) -> None:
    want = [(B, n) for n in cell.state_sizes()]
    got = [getattr(a, "shape", None) for a in new] if isinstance(new, tuple) else [type(new).__name__]
    if got != want:
        raise InvalidParameterError(
            f"{type(cell).__name__}.step must return a tuple of state parts of shapes {want}, got {got}")


def _carry(new: Arrays, prev: Arrays, m: np.ndarray | None) -> Arrays:
    """The state leaving a step: ``new`` where the step is real, ``prev`` where it is masked."""
    if m is None:
        return new
    return tuple(np.where(m[:, None], a, p) for a, p in zip(new, prev, strict=True))


def reference_walk(cell: Cell, w: Mapping[str, np.ndarray], x_tm: np.ndarray, init: Arrays | None,
                   record: bool, keep_seq: bool, mask: np.ndarray | None = None,
                   rdrop: np.ndarray | None = None) -> Walk:
    """The plain NumPy time loop (see :func:`walk`)."""
    kw = {} if rdrop is None else {"rdrop": rdrop}
    T, B, _ = x_tm.shape
    dt = x_tm.dtype
    sizes = cell.state_sizes()
    inp = project(cell, w, x_tm)
    start = tuple(np.zeros((B, n), dt) if init is None else np.array(init[k], dt)
                  for k, n in enumerate(sizes))
    if record:
        hist = [np.empty((T + 1, B, n), dt) for n in sizes]
        for k, a in enumerate(start):
            hist[k][0] = a
        parks: dict[str, np.ndarray] = {}
        for s in range(T):
            park: dict[str, np.ndarray] = {}
            prev = tuple(a[s] for a in hist)
            new = cell.step(w, inp[s], prev, park, **kw)
            if s == 0:
                _check_new(cell, new, B)
            for k, a in enumerate(_carry(new, prev, None if mask is None else mask[s])):
                hist[k][s + 1] = a
            for name, v in park.items():
                if name not in parks:
                    parks[name] = np.empty((T, *v.shape), dt)
                parks[name][s] = v
        cache = WalkCache(x_tm, hist, parks, mask, rdrop)
        return (hist[cell.output_part][1:] if keep_seq else None), tuple(a[T] for a in hist), cache
    # inference: O(B * width) state; the sequence only when it is the output
    o = cell.output_part
    seq = np.empty((T, B, sizes[o]), dt) if keep_seq else None
    state = start
    for s in range(T):
        new = cell.step(w, inp[s], state, None, **kw)
        if s == 0:
            _check_new(cell, new, B)
        state = _carry(new, state, None if mask is None else mask[s])
        if seq is not None:
            seq[s] = state[o]
    return seq, tuple(np.asarray(a, dt) for a in state), None


def sequence_walk(cell: Cell, w: Mapping[str, np.ndarray], x_tm: np.ndarray, init: Arrays | None,
                  record: bool, keep_seq: bool, mask: np.ndarray | None = None) -> Walk:
    """:func:`walk` by the cell's parallel form (no recurrent dropout; a ``mask`` only for a
    cell with :attr:`~rnnkit.Cell.sequence_takes_mask`)."""
    T, B, _ = x_tm.shape
    dt = x_tm.dtype
    sizes = cell.state_sizes()
    start = tuple(np.zeros((B, n), dt) if init is None else np.array(init[k], dt)
                  for k, n in enumerate(sizes))
    park: dict[str, np.ndarray] | None = {} if record else None
    kw = {} if mask is None else {"mask": mask}
    got = cell.sequence_forward(w, project(cell, w, x_tm), start, park, **kw)
    want = [(_sequence_rows(cell, k, T), B, n) for k, n in enumerate(sizes)]
    shapes = [getattr(a, "shape", None) for a in got] if isinstance(got, tuple) else [type(got).__name__]
    if shapes != want:
        raise InvalidParameterError(
            f"{type(cell).__name__}.sequence_forward must return a tuple of state parts of shapes {want}, "
            f"got {shapes}")
    final = tuple(np.asarray(a[-1], dt) for a in got)
    o = cell.output_part
    if not record:
        return (np.asarray(got[o], dt) if keep_seq else None), final, None
    hist = [np.concatenate([s0[None], np.asarray(a, dt)]) for s0, a in zip(start, got, strict=True)]
    assert park is not None
    cache = WalkCache(x_tm, hist, park, mask, None, "sequence")
    return (hist[o][1:] if keep_seq else None), tuple(a[-1] for a in hist), cache


def _sequence_rows(cell: Cell, part: int, steps: int) -> int:
    """How many steps' states of state part ``part`` the parallel form returns: every step's,
    or only the last one's for a part other than the output (:attr:`~rnnkit.Cell.output_part`)
    of a cell with :attr:`~rnnkit.Cell.sequence_last_states`."""
    return 1 if part != cell.output_part and cell.sequence_last_states else steps


def sequence_walk_back(cell: Cell, w: Mapping[str, np.ndarray], cache: WalkCache, g: np.ndarray,
                       full: bool, d_final: Arrays | None = None, need_dx: bool = True
                       ) -> tuple[np.ndarray | None, dict[str, np.ndarray], Arrays]:
    """:func:`walk_back` by the cell's parallel form, after :func:`sequence_walk`."""
    x_tm, hist = cache.x_tm, cache.states
    T, B, _ = x_tm.shape
    dt = x_tm.dtype
    d = [np.zeros((_sequence_rows(cell, k, T), B, n), dt) for k, n in enumerate(cell.state_sizes())]
    o = cell.output_part
    if full:
        d[o] += g.transpose(1, 0, 2)
    else:
        d[o][T - 1] += g
    if d_final is not None:
        for k, a in enumerate(d_final):
            d[k][-1] += a
    kw = {} if cache.mask is None else {"mask": cache.mask}
    r = cell.sequence_backward(w, tuple(d), x_tm if cell.input_kernel is None else None,
                               tuple(a[0] for a in hist), tuple(a[1:] for a in hist), cache.parks, **kw)
    grads, dx_tm = batched_grads(cell, w, cache, r.d_inp, r.d_inp if r.d_rec is None else r.d_rec, need_dx)
    grads.update({n: np.asarray(v, dt) for n, v in (r.params or {}).items()})
    return dx_tm, grads, tuple(r.d_init)


def reference_walk_back(cell: Cell, w: Mapping[str, np.ndarray], cache: WalkCache, g: np.ndarray,
                        full: bool, d_final: Arrays | None = None, need_dx: bool = True
                        ) -> tuple[np.ndarray | None, dict[str, np.ndarray], Arrays]:
    """The plain NumPy backward walk (see :func:`walk_back`). A masked row of a step goes into
    the cell's ``step_back`` with a zero gradient (so it contributes nothing, to any parameter)
    and its gradient passes straight to the step before."""
    x_tm, hist, parks, mask = cache.x_tm, cache.states, cache.parks, cache.mask
    kw = {} if cache.rdrop is None else {"rdrop": cache.rdrop}
    T, B, _ = x_tm.shape
    dt = x_tm.dtype
    raw_inp = cell.input_kernel is None
    d: Arrays = tuple(np.zeros((B, n), dt) if d_final is None else np.array(d_final[k], dt)
                      for k, n in enumerate(cell.state_sizes()))
    g_tm = g.transpose(1, 0, 2) if full else None
    dinp: np.ndarray | None = None
    drec: np.ndarray | None = None
    own: dict[str, np.ndarray] = {}
    o = cell.output_part
    for s in range(T - 1, -1, -1):
        dh = d[o] + g_tm[s] if g_tm is not None else (d[o] + g if s == T - 1 else d[o])
        d_raw: Arrays = (*d[:o], dh, *d[o + 1:])
        m = None if mask is None else mask[s][:, None]
        d_in = d_raw if m is None else tuple(np.where(m, a, 0.0) for a in d_raw)
        r = cell.step_back(w, d_in, x_tm[s] if raw_inp else None, tuple(a[s] for a in hist),
                           tuple(a[s + 1] for a in hist), {n: p[s] for n, p in parks.items()}, **kw)
        if dinp is None:
            dinp = np.empty((T, *r.d_inp.shape), dt)
            if r.d_rec is not None:
                drec = np.empty((T, *r.d_rec.shape), dt)
        dinp[s] = r.d_inp
        if drec is not None:
            drec[s] = r.d_inp if r.d_rec is None else r.d_rec
        for name, v in (r.params or {}).items():
            if name in own:
                own[name] += v
            else:
                own[name] = np.array(v, dt)
        d = tuple(r.d_prev)
        if m is not None:   # a masked row: the carried state's gradient passes straight through
            d = tuple(a + np.where(m, 0.0, b) for a, b in zip(d, d_raw, strict=True))
    assert dinp is not None
    grads, dx_tm = batched_grads(cell, w, cache, dinp, dinp if drec is None else drec, need_dx)
    grads.update(own)
    return dx_tm, grads, d


def batched_grads(cell: Cell, w: Mapping[str, np.ndarray], cache: WalkCache, dinp: np.ndarray,
                  drec: np.ndarray, need_dx: bool = True) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The walker's reductions for the parameters the cell named: (gradients, dL/dx_tm; None
    without ``need_dx``)."""
    x_tm, hist, parks = cache.x_tm, cache.states, cache.parks
    T, B, F = x_tm.shape
    N = dinp.shape[2]
    d2 = dinp.reshape(T * B, N)
    grads: dict[str, np.ndarray] = {}
    dx_tm: np.ndarray | None = dinp
    if cell.input_kernel is not None:
        grads[cell.input_kernel] = x_tm.reshape(T * B, F).T @ d2
        dx_tm = (d2 @ w[cell.input_kernel].T).reshape(T, B, F) if need_dx else None
    r2 = drec.reshape(T * B, N)
    if cell.bias is not None:
        db = np.empty(w[cell.bias].shape, dinp.dtype)
        db[0] = d2.sum(axis=0)
        if db.shape[0] == 2:
            db[1] = r2.sum(axis=0)
        grads[cell.bias] = db
    if cell.recurrent_kernel is not None:
        U = w[cell.recurrent_kernel]
        dU = np.empty(U.shape, dinp.dtype)
        rm = cache.rdrop   # the products saw the state times this mask
        for src, c0, c1 in cell.rec_groups(U.shape[1]):
            if src in cell.state_names:
                P = hist[cell.state_names.index(src)][:T]
                P = P if rm is None else P * rm
            else:
                P = parks[src]
            dU[:, c0:c1] = P.reshape(T * B, P.shape[-1]).T @ r2[:, c0:c1]
        grads[cell.recurrent_kernel] = dU
    return grads, dx_tm
