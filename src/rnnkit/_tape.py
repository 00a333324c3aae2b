"""The gradient tape: automatic gradients composed from whole operations, never from scalars.

While a :class:`GradientTape` is active, every :mod:`rnnkit.ops` call and every layer call whose
inputs the tape tracks records ONE entry: the ids of its inputs and outputs and a backward
closure (an op's vector-Jacobian product, written beside its value; a layer's own ``backward``
on the :class:`~rnnkit.Ctx` the entry owns, so a recurrent layer keeps its compiled BPTT).
:meth:`GradientTape.gradient` walks the entries in reverse, summing the gradient of each value
over every entry that read it; a layer's weight gradients sum into one buffer per weight that
the tape owns, so a layer called twice (a shared encoder) gets the sum of both calls.

Tracking. Values are plain NumPy arrays, tracked by ``id()``: the tape keeps a reference to every
array it tracks, so an id cannot be reused while the tape lives. A value is tracked when it is
watched (:meth:`GradientTape.watch`), is the live array of a weight of a layer called on the tape
(weights are watched on their first use, as TensorFlow watches trainable variables), or is the
output of a recorded entry. Anything else (a NumPy function's result, ``np.asarray`` of a
non-array) is a constant to the tape, as a ``.numpy()`` value is to TensorFlow's. A tracked array
must not be changed in place while the tape lives.

With no tape active, recording costs one check of a thread-local list (:func:`recording`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import Error, InvalidInputError, InvalidParameterError

#: an entry's backward: (output gradient(s), which inputs need one) -> a gradient per input (or None)
Vjp = Callable[[Any, tuple[bool, ...]], Sequence[Any]]


class TapeError(Error, RuntimeError):
    """A gradient tape used against its rules: ``gradient`` called twice on a non-persistent tape,
    a source or target that is not an array or a weight."""


class TapeLayer(Protocol):
    """What the tape reads of a layer (or a model): its name and its two passes; its weights
    are read as a layer's ``_weights`` / ``trainable_names`` or a model's
    ``trainable_weights()``."""

    name: str

    def forward(self, x: Any, ctx: Ctx) -> Any: ...

    def backward(self, grad: Any, ctx: Ctx) -> Any: ...


class _Stack(threading.local):
    def __init__(self) -> None:
        self.tapes: list[GradientTape] = []
        self.paused = 0
        #: the ``training`` a layer call that does not say gets (Keras' call context: a model
        #: called with ``training=True`` passes it to the layers its ``call`` runs); None: False
        self.training: bool | None = None
        #: the seeds of the recorded layer calls' contexts (dropout), while a model's pass
        #: gives them; None: entropy
        self.seeds: Iterator[int] | None = None


_LOCAL = _Stack()
#: this thread's recording tapes as an attribute, ``ACTIVE.tapes`` (an empty list when none): the
#: check a hot path makes without a function call
ACTIVE = _LOCAL


def recording() -> list[GradientTape]:
    """The tapes recording in this thread (an empty list, which is false, when none is)."""
    return _LOCAL.tapes


class _Entry:
    """One recorded call: its inputs' ids (None: not tracked), its outputs' ids, its backward,
    whether it has several outputs, and (a layer's call) the Ctx its weight gradients go to."""

    __slots__ = ("ins", "outs", "vjp", "multi", "ctx")

    def __init__(self, ins: tuple[int | None, ...], outs: tuple[int, ...], vjp: Vjp, multi: bool,
                 ctx: Ctx | None = None) -> None:
        self.ins = ins
        self.outs = outs
        self.vjp = vjp
        self.multi = multi
        self.ctx = ctx


class _TapeCtx(Ctx):
    """A training context (it records the caches ``backward`` needs) whose passes apply dropout
    only when the call said ``training=True``."""

    __slots__ = ("_drops",)

    def __init__(self, drops: bool, seed: int | None = None) -> None:
        super().__init__(True, seed)
        self._drops = drops

    @property
    def drops(self) -> bool:
        return self._drops


def fresh(out: Any, ins: Sequence[Any]) -> np.ndarray:
    """``out`` as an ndarray object distinct from every input (a 0-d result of a reduction is a
    NumPy scalar; an op that returns its input unchanged must not give it a second producer)."""
    if not isinstance(out, np.ndarray):
        return np.asarray(out)
    for a in ins:
        if a is out:
            return out.view()
    return out


def record(outs: Sequence[np.ndarray], ins: Sequence[Any], vjp: Vjp, multi: bool = False) -> None:
    """Record one op on every active tape that tracks one of ``ins`` (arrays or anything else;
    only tracked arrays matter). ``outs`` are the op's result arrays, each a new object (see
    :func:`fresh`). ``vjp(g, needs)`` gets the output's gradient (the list of them, None for
    an output nobody reached, when ``multi``) and returns one gradient (or None) per input."""
    if _LOCAL.paused:
        return
    for tape in _LOCAL.tapes:
        tape._add(outs, ins, vjp, multi)



@contextmanager
def call_scope(training: bool | None, seed: int | None = None) -> Iterator[None]:
    """Inside this block a layer call that gives no ``training`` takes ``training`` (Keras'
    call context), and the recorded calls' contexts draw their seeds (dropout masks) from
    ``seed``: the k-th call's is ``seed * 1_000_003 + k`` (mod 2**63), so a pass is repeatable
    from its seed; ``seed=None`` leaves the seeds as they were. Nests; restores on exit."""
    saved = (_LOCAL.training, _LOCAL.seeds)
    _LOCAL.training = training
    if seed is not None:
        _LOCAL.seeds = ((seed * 1_000_003 + k) % 2**63 for k in itertools.count())
    try:
        yield
    finally:
        _LOCAL.training, _LOCAL.seeds = saved


@contextmanager
def recording_alone(tape: GradientTape) -> Iterator[None]:
    """Record on ``tape`` only: the tapes recording in this thread (and a paused recording)
    are set aside until the block ends (a model whose pass is its own tape's: its backward is
    one entry on those tapes, and its layers' calls must not be recorded there twice)."""
    saved = (_LOCAL.tapes, _LOCAL.paused)
    _LOCAL.tapes, _LOCAL.paused = [], 0
    try:
        with tape:
            yield
    finally:
        _LOCAL.tapes, _LOCAL.paused = saved


def _is_weight_ref(x: Any) -> bool:
    return (type(x) is tuple and len(x) == 2 and isinstance(x[1], str) and hasattr(x[0], "_weights")
            and hasattr(x[0], "backward"))


class GradientTape:
    """``with rk.GradientTape() as tape: ...; tape.gradient(loss, sources)`` (TensorFlow's).

    Args:
        persistent: allow several :meth:`gradient` calls (the tape keeps its entries and every
            layer call's caches until it is dropped); otherwise the first call releases them and
            a second raises :class:`TapeError`.
        watch_accessed_variables: watch the weights of every layer called on the tape (True, as
            TensorFlow watches trainable variables); False: only what :meth:`watch` names.

    Sources and targets are arrays the tape tracks, or weights named as ``(layer, "kernel")``
    pairs (``model.trainable_weights()`` is a list of them), or a weight's live array
    (``layer.weight("kernel")``), in any nesting of lists, tuples and dicts. There are no
    higher-order gradients: the backward walk itself is not recorded.
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        if not isinstance(persistent, bool) or not isinstance(watch_accessed_variables, bool):
            raise InvalidParameterError(f"GradientTape: persistent and watch_accessed_variables must be "
                                        f"bools, got {persistent!r}, {watch_accessed_variables!r}")
        self.persistent = persistent
        self.watch_accessed_variables = watch_accessed_variables
        self._entries: list[_Entry] = []
        self._tracked: dict[int, Any] = {}            # id -> the array (keeps the id unique)
        self._weight_of: dict[int, tuple[Any, str]] = {}   # id of a weight's live array -> (layer, name)
        self._weight_ids: dict[tuple[int, str], list[int]] = {}
        self._used = False

    # -- recording ---------------------------------------------------------------------------
    def __enter__(self) -> GradientTape:
        if self in _LOCAL.tapes:
            raise TapeError("GradientTape: this tape is already recording; a tape is entered once")
        _LOCAL.tapes.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _LOCAL.tapes.remove(self)

    @contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Inside this block nothing is recorded on any tape of this thread (TensorFlow's)."""
        _LOCAL.paused += 1
        try:
            yield
        finally:
            _LOCAL.paused -= 1

    def reset(self) -> None:
        """Forget every entry and watched value (the tape may then record anew)."""
        self._entries.clear()
        self._tracked.clear()
        self._weight_of.clear()
        self._weight_ids.clear()
        self._used = False

    def watch(self, tensor: Any) -> None:
        """Track ``tensor`` (an array of floats, a ``(layer, name)`` weight, a layer: all its
        trainable weights; or a nesting of them) so that gradients with respect to it exist."""
        for x in _flatten(tensor):
            if _is_weight_ref(x):
                self._watch_weight(x[0], x[1])
            elif hasattr(x, "_weights") and hasattr(x, "trainable_names"):
                for n in x.trainable_names:
                    self._watch_weight(x, n)
            elif isinstance(x, np.ndarray):
                if x.dtype.kind != "f":
                    raise InvalidInputError(f"GradientTape.watch: gradients exist for arrays of floats; "
                                            f"expected a float array, got dtype {x.dtype}")
                self._tracked[id(x)] = x
            else:
                raise InvalidInputError(f"GradientTape.watch: expected an array of floats, a (layer, "
                                        f"weight name) pair or a layer, got {type(x).__name__}")

    def _watch_weight(self, layer: Any, name: str) -> None:
        arr = layer.weight(name)
        key = id(arr)
        if key not in self._weight_of:
            self._tracked[key] = arr
            self._weight_of[key] = (layer, name)
            self._weight_ids.setdefault((id(layer), name), []).append(key)

    def _watch_layer(self, layer: Any) -> None:
        seen = self._weight_of
        if not hasattr(layer, "_weights"):         # a model: the weights of its layers
            for lay, n in layer.trainable_weights():
                self._watch_weight(lay, n)
            return
        for entry in layer.weights():             # (a wrapper's are its parts', under its names)
            if id(entry.value) not in seen:       # (a new layer, or weights an optimizer replaced)
                for n in layer.trainable_names:
                    self._watch_weight(layer, n)
                return

    def _add(self, outs: Sequence[np.ndarray], ins: Sequence[Any], vjp: Vjp, multi: bool,
             ctx: Ctx | None = None) -> None:
        tracked = self._tracked
        keys = tuple(id(a) if id(a) in tracked else None for a in ins)
        if ctx is None and not any(k is not None for k in keys):
            return                                # (a layer's call is kept: its weights train)
        out_ids = []
        for o in outs:
            tracked[id(o)] = o
            out_ids.append(id(o))
        self._entries.append(_Entry(keys, tuple(out_ids), vjp, multi, ctx))

    def tracks(self, x: Any) -> bool:
        """Whether ``x`` is an array this tape tracks."""
        return id(x) in self._tracked

    # -- the backward walk -------------------------------------------------------------------
    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: str = "none") -> Any:
        """The gradient of ``target`` (the sum of its elements, as TensorFlow; or of several
        targets' sums, given as a list) with respect to each source, in the nesting of
        ``sources``. ``output_gradients`` (of the targets' shapes) weights the targets instead of
        ones. A source the target does not depend on gets None (``unconnected_gradients="zero"``:
        zeros). A gradient has its source's dtype."""
        if self._used and not self.persistent:
            raise TapeError("GradientTape.gradient: a non-persistent tape computes gradients once and "
                            "then releases what it recorded; this is its second call. Use "
                            "GradientTape(persistent=True) for several")
        if unconnected_gradients not in ("none", "zero"):
            raise InvalidInputError(f"GradientTape.gradient: unconnected_gradients must be 'none' or "
                                    f"'zero', got {unconnected_gradients!r}")
        targets = _flatten(target)
        seeds = [None] * len(targets) if output_gradients is None else _flatten(output_gradients)
        if len(seeds) != len(targets):
            raise InvalidInputError(f"GradientTape.gradient: {len(targets)} target(s) but "
                                    f"{len(seeds)} output_gradients")
        grads: dict[int, Any] = {}
        for t, s in zip(targets, seeds, strict=True):
            if not isinstance(t, np.ndarray):
                raise TapeError(f"GradientTape.gradient: a target must be an array the tape recorded, "
                                f"got {type(t).__name__}")
            if id(t) not in self._tracked or t.dtype.kind != "f":
                continue
            if s is None:
                g = np.ones(t.shape, t.dtype)
            else:
                g = np.asarray(s, dtype=t.dtype)
                if g.shape != t.shape:
                    raise InvalidInputError(f"GradientTape.gradient: output_gradients must have the "
                                            f"target's shape {t.shape}, got {g.shape}")
            _acc(grads, id(t), g)
        wgrads: dict[tuple[int, str], np.ndarray] = {}
        self._used = True
        try:
            self._walk(grads, wgrads)
            flat = _flatten(sources)
            given: set[int] = set()
            out = [self._result(s, grads, wgrads, unconnected_gradients == "zero", given) for s in flat]
        finally:
            if not self.persistent:
                self.reset()
                self._used = True
        return _unflatten(sources, iter(out))

    def _walk(self, grads: dict[int, Any], wgrads: dict[tuple[int, str], np.ndarray]) -> None:
        for e in reversed(self._entries):
            if e.multi:
                gs = [grads.get(o) for o in e.outs]
                if all(g is None for g in gs):
                    continue
                g_in: Any = gs
            else:
                g_in = grads.get(e.outs[0])
                if g_in is None:
                    continue
            needs = tuple(k is not None for k in e.ins)
            back = e.vjp(g_in, needs)
            for k, gi in zip(e.ins, back, strict=True):
                if k is not None and gi is not None:
                    _acc(grads, k, gi)
            if e.ctx is not None:
                # the entry's Ctx owns each of its weight gradients (GradStore: storage of its
                # own) and forgets them here, so the walk takes the first one of a weight as it
                # is and adds the later ones into it in place (no new array per call)
                for (lay, name), g in e.ctx.grads.items():
                    key = (id(lay), name)
                    have = wgrads.get(key)
                    if have is None:
                        wgrads[key] = g
                    else:
                        np.add(have, g, out=have)
                e.ctx.grads.clear()

    def _result(self, s: Any, grads: dict[int, Any], wgrads: dict[tuple[int, str], np.ndarray],
                zero: bool, given: set[int]) -> Any:
        """The gradient of source ``s``; ``given`` holds the ids of the walk's own weight-gradient
        arrays already handed out (each is handed out once as it is, later as copies)."""
        if _is_weight_ref(s):
            layer, name = s
            like = layer.weight(name)
            key = (id(layer), name)
            got = wgrads.get(key)
            for k in self._weight_ids.get(key, []):
                if k in grads:
                    got = grads[k] if got is None else got + grads[k]
            if got is not None and got is wgrads.get(key) and id(got) not in given \
                    and got.dtype == like.dtype:
                given.add(id(got))   # the walk's own sum, nobody else holds it: no copy
                return got
        elif isinstance(s, np.ndarray):
            like = s
            ref = self._weight_of.get(id(s))
            if ref is not None:
                return self._result(ref, grads, wgrads, zero, given)
            got = grads.get(id(s))
        else:
            raise TapeError(f"GradientTape.gradient: a source must be an array, a (layer, weight name) "
                            f"pair or a nesting of them, got {type(s).__name__}")
        if got is None:
            return np.zeros(like.shape, like.dtype) if zero and like.dtype.kind == "f" else None
        # a gradient of its own: during the walk one array may stand for several gradients
        # (the two operands of an add share their output's), and a caller may change it in place
        return np.array(got, dtype=like.dtype, copy=True)


def _acc(store: dict[Any, Any], key: Any, g: Any) -> None:
    have = store.get(key)
    store[key] = g if have is None else have + g     # never in place: an array may be shared


def _flatten(x: Any) -> list[Any]:
    if _is_weight_ref(x):
        return [x]
    if isinstance(x, dict):
        return [y for k in x for y in _flatten(x[k])]
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flatten(v)]
    return [x]


def _unflatten(like: Any, it: Iterator[Any]) -> Any:
    if _is_weight_ref(like):
        return next(it)
    if isinstance(like, dict):
        return {k: _unflatten(v, it) for k, v in like.items()}
    if isinstance(like, (list, tuple)):
        vals = [_unflatten(v, it) for v in like]
        return vals if isinstance(like, list) else tuple(vals)
    return next(it)


def forward_with_mask(layer: Any, x: Any, mask: Any, ctx: Ctx) -> Any:
    """``layer``'s forward in ``ctx`` under a call's ``mask=``: for a layer of several inputs
    that takes one mask per input (it has ``forward_masked``, as a graph model calls it) a list
    of masks (each a boolean (B, T) array, a :class:`~rnnkit.Mask` or None; the layer's
    ``forward_masked`` reads and checks them) goes there; any other mask becomes ``ctx.mask``."""
    if isinstance(mask, (list, tuple)) and isinstance(x, (list, tuple)) and hasattr(layer, "forward_masked"):
        return layer.forward_masked(x, list(mask), ctx)
    if mask is not None:
        ctx.set_mask(mask)
    return layer.forward(x, ctx)


# -- layers on the tape ----------------------------------------------------------------------------
def call_layer(layer: TapeLayer, x: Any, initial_state: Any, mask: Any, training: bool | None,
               passes: tuple[Callable[[Any, Ctx], Any], Callable[[Any, Ctx], Any]] | None = None) -> Any:
    """``layer(x, initial_state=..., mask=..., training=...)`` while a tape records: the layer's
    ``forward`` in a context of its own (recording its caches; dropout only when ``training``,
    which defaults to the :func:`call_scope`'s; seeded from it),
    recorded as one entry whose backward is the layer's ``backward`` on that context. The
    layer's weights are watched (unless a tape says ``watch_accessed_variables=False``).
    ``passes``: another ``(forward, backward)`` pair of the layer's, run in their place with the
    same arguments (a cell's one-step call: the step of the layer that holds the cell's
    weights); it keeps its caches and gradients under ``layer`` as the layer's own passes do."""
    forward, backward = (layer.forward, layer.backward) if passes is None else passes
    tapes = [t for t in _LOCAL.tapes] if not _LOCAL.paused else []
    if training is None:
        training = _LOCAL.training
    seeds = _LOCAL.seeds
    seed = None if seeds is None else next(seeds)
    ctx = _TapeCtx(bool(training), seed) if tapes else Ctx(bool(training), seed)
    if initial_state is not None:
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        inputs: Any = [x, *states]
    else:
        inputs = x
    flat = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if not tapes:
        return forward_with_mask(layer, inputs, mask, ctx) if passes is None else forward(inputs, ctx)
    for t in tapes:
        if t.watch_accessed_variables:
            t._watch_layer(layer)
    if not any(t.tracks(a) for t in tapes for a in flat):
        ctx.skip_input_grad(layer)
    out = forward_with_mask(layer, inputs, mask, ctx) if passes is None else forward(inputs, ctx)
    multi = isinstance(out, list)
    outs = [fresh(o, flat) for o in (out if multi else [out])]
    keep = ctx.peek(layer) if len(tapes) > 1 or tapes[0].persistent else None   # walked again
    as_list = isinstance(inputs, (list, tuple))

    def vjp(g: Any, needs: tuple[bool, ...]) -> Sequence[Any]:
        if multi:   # (an output nobody reached: zeros, which every backward takes)
            g = [np.zeros(o.shape, o.dtype) if gi is None else np.array(gi, dtype=o.dtype)
                 for gi, o in zip(g, outs, strict=True)]
        else:
            g = np.array(g, dtype=outs[0].dtype)   # the layer may write into what it is handed
        back = backward(g, ctx)
        if keep is not None:
            ctx.save(layer, keep)                   # a persistent tape may walk again
        if back is None:
            return [None] * len(flat)
        return list(back) if as_list else [back]

    for t in tapes:
        t._add(outs, flat, vjp, multi, ctx)
    return outs if multi else outs[0]

