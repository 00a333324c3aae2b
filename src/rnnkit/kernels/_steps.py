"""A cell's compiled step as a Numba type, and the tuple helpers of the compiled walker.

The walker (:mod:`._walk`) is ONE set of compiled loops for every cell. What it calls at each
step is named by its first argument, a :class:`Handle`: its Numba type :class:`StepType` holds
only a key string (the step functions' qualified names and a hash of their source files), so a
compiled walker is cached on disk per step like any kernel, and a new process that finds it in
the cache compiles nothing. At compile time :func:`step_forward` / :func:`step_backward` look the
key up and call that cell's functions (compiled on their own and linked into the walker, as
a call of any jitted function is).

The handle reaches the dispatcher through ``_numba_type_`` (the fast path for a Python object,
about a microsecond a call).
"""

from __future__ import annotations

import hashlib
import inspect
import marshal
import sys
import threading
from typing import Any

import numpy as np
from numba import types
from numba.extending import NativeValue, intrinsic, models, overload, register_model, unbox

from rnnkit.kernels._numba_private import cgutils, impl_ret_untracked
from rnnkit.kernels._numba_private import ir as llir

_HANDLES: dict[str, Handle] = {}
_lock = threading.Lock()


class StepType(types.Opaque):
    """The Numba type of a :class:`Handle`: equal for equal keys, in any process."""

    def __init__(self, skey: str) -> None:
        self.skey = skey
        super().__init__(name=f"rnnkit.Step[{skey}]")


register_model(StepType)(models.OpaqueModel)


@unbox(StepType)
def _unbox(typ: Any, obj: Any, c: Any) -> Any:
    return NativeValue(c.context.get_constant_null(types.voidptr))


def _source_hash(*fns: Any) -> str:
    """The first 16 hex digits of SHA-256 over the code of ``fns`` and the source files that
    define them (so a walker compiled for an older version of a step is not loaded)."""
    h = hashlib.sha256()
    for f in fns:
        py = getattr(f, "py_func", f)
        h.update(f"{py.__module__}.{py.__qualname__}\0".encode())
        h.update(marshal.dumps(py.__code__))
        try:
            path = inspect.getsourcefile(py)
            if path is not None:
                with open(path, "rb") as fh:
                    h.update(fh.read())
        except (OSError, TypeError):   # no file (an interactive session): the names only
            pass
    return h.hexdigest()[:16]


class Handle:
    """One cell's compiled step functions, as the walker's first argument."""

    __slots__ = ("forward", "backward", "key", "cacheable", "_numba_type_")

    def __init__(self, forward: Any, backward: Any) -> None:
        self.forward, self.backward = forward, backward
        #: whether a later process can import the functions' modules (a walker loaded from the
        #: disk cache imports them); code run by ``exec`` in a namespace of its own cannot
        self.cacheable = all(getattr(sys.modules.get(f.py_func.__module__), "__dict__", None)
                             is f.py_func.__globals__ for f in (forward, backward))
        names = "/".join(f"{f.py_func.__module__}.{f.py_func.__qualname__}" for f in (forward, backward))
        self.key = f"{names}#{_source_hash(forward, backward)}"
        self._numba_type_ = StepType(self.key)


def handle(forward: Any, backward: Any) -> Handle:
    """The handle of the step functions ``forward`` / ``backward`` (made once per pair)."""
    k = (id(forward), id(backward))
    with _lock:
        got = _BY_ID.get(k)
        if got is None or got.forward is not forward or got.backward is not backward:
            got = _BY_ID[k] = Handle(forward, backward)
            _HANDLES[got.key] = got
        return got


_BY_ID: dict[tuple[int, int], Handle] = {}


def _call_step(typingctx: Any, step: Any, args: tuple[Any, ...], which: str) -> Any:
    """Type a call of the handle's ``which`` function on ``args`` and lower it as a direct
    call (the function compiled on its own and linked, as for any call of a jitted global)."""
    if not isinstance(step, StepType):
        return None
    f = getattr(_HANDLES[step.skey], which)
    fnty = typingctx.resolve_value_type(f)
    inner = typingctx.resolve_function_type(fnty, args, {})

    def codegen(context: Any, builder: Any, signature: Any, llargs: Any) -> Any:
        impl = context.get_function(fnty, inner)
        block, n0 = builder.block, len(builder.block.instructions)
        impl(builder, llargs[1:])
        # the step stays a call of its own: LLVM would otherwise inline it into the walks' loops
        # through _walk._one_step (measured at S1, one thread: the one-row LSTM inference step about
        # 15 % slower inlined, interleaved A/B on a shared machine)
        for ins in block.instructions[n0:]:
            if isinstance(ins, llir.CallInstr):
                ins.attributes.add("noinline")
        return context.get_dummy_value()

    return types.void(step, *args), codegen


def _forward_typing(typingctx: Any, step: Any, k: Any, a: Any, rec: Any, fed: Any, st: Any, i0: Any,
                    i1: Any, pk: Any, j: Any, own: Any, tmp: Any, opts: Any) -> Any:
    """``forward(k, a, rec, fed, st, i0, i1, pk, j, own, tmp, opts)`` of the step ``step``."""
    return _call_step(typingctx, step, (k, a, rec, fed, st, i0, i1, pk, j, own, tmp, opts), "forward")


def _backward_typing(typingctx: Any, step: Any, k: Any, g: Any, d: Any, dr: Any, dfed: Any, fed: Any,
                     dst: Any, dpk: Any, st: Any, i0: Any, i1: Any, pk: Any, j: Any, own: Any, gown: Any,
                     tmp: Any, opts: Any) -> Any:
    """``backward(k, g, d, dr, dfed, fed, dst, dpk, st, i0, i1, pk, j, own, gown, tmp, opts)``."""
    return _call_step(typingctx, step, (k, g, d, dr, dfed, fed, dst, dpk, st, i0, i1, pk, j, own, gown, tmp,
                                        opts), "backward")


step_forward: Any = intrinsic(_forward_typing)
step_backward: Any = intrinsic(_backward_typing)


# -- tuples of arrays, whatever their length (the source written out once per length) -----------
def _generated(name: str, n: int, item: str, args: str) -> Any:
    """``def impl(<args>): return (<item with {i}>, ...)`` for ``n`` items."""
    body = ", ".join(item.format(i=i) for i in range(n)) + ("," if n == 1 else "")
    params = ", ".join(f"{a.strip()}: Any" for a in args.split(","))   # (the overload's own annotations)
    src = f"from __future__ import annotations\ndef impl({params}) -> Any:\n    return ({body})\n"
    scope: dict[str, Any] = {"np": np, "Any": Any}
    exec(src, scope)   # noqa: S102 - built from constants only
    return scope["impl"]


def cols_block(t: Any, lo: Any, hi: Any) -> Any:  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(cols_block)
def _cols_block_ov(t: Any, lo: Any, hi: Any) -> Any:
    """``tuple(a[:, lo:hi] for a in t)``: batch rows ``[lo, hi)`` of (steps, B, w) arrays."""
    return _generated("cols_block", len(t), "t[{i}][:, lo:hi]", "t, lo, hi")


def rows_block(t: Any, lo: Any, hi: Any) -> Any:  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(rows_block)
def _rows_block_ov(t: Any, lo: Any, hi: Any) -> Any:
    """``tuple(a[lo:hi, 0:w] for a in t)``: batch rows ``[lo, hi)`` of (B, w) arrays."""
    return _generated("rows_block", len(t), "t[{i}][lo:hi, 0:t[{i}].shape[1]]", "t, lo, hi")


def scratch_rows(t: Any, B: Any) -> Any:  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(scratch_rows)
def _scratch_rows_ov(t: Any, B: Any) -> Any:
    """A (B, w) scratch array for each (steps, B', w) array of ``t``."""
    return _generated("scratch_rows", len(t),
                      "np.empty((B, t[{i}].shape[2]), t[{i}].dtype)[:, 0:t[{i}].shape[2]]", "t, B")


def _unmanaged(typingctx: Any, a: Any) -> Any:
    """``unmanaged(a)``: the same array (data, shape, strides) without its memory's owner, so
    that the views taken of it, and the calls that pass them, count no references (each count
    is an atomic add: measured a quarter of a one-row inference step). Only for arrays that
    outlive every use of the result: the caller's arguments, or arrays kept alive by a later
    use (:func:`keep`)."""
    if not isinstance(a, types.Array):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        src = context.make_array(sig.args[0])(context, builder, args[0])
        dst = context.make_array(sig.return_type)(context, builder)
        for f in ("nitems", "itemsize", "data", "shape", "strides"):
            setattr(dst, f, getattr(src, f))
        dst.meminfo = cgutils.get_null_value(dst.meminfo.type)
        dst.parent = cgutils.get_null_value(dst.parent.type)
        return impl_ret_untracked(context, builder, sig.return_type, dst._getvalue())

    return a(a), codegen


unmanaged: Any = intrinsic(_unmanaged)


def _keep(typingctx: Any, a: Any) -> Any:
    """``keep(a)``: a use of ``a`` that does nothing (so ``a`` lives at least until here)."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return context.get_dummy_value()

    return types.void(a), codegen


keep: Any = intrinsic(_keep)


def unmanaged_all(t: Any) -> Any:  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(unmanaged_all)
def _unmanaged_all_ov(t: Any) -> Any:
    """``tuple(unmanaged(a) for a in t)``."""
    body = ", ".join(f"um(t[{i}])" for i in range(len(t))) + ("," if len(t) == 1 else "")
    scope: dict[str, Any] = {"um": unmanaged, "Any": Any}
    exec(f"def impl(t: Any) -> Any:\n    return ({body})\n", scope)   # noqa: S102 - constants only
    return scope["impl"]
