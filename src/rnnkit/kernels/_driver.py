"""Python glue between the walker and the compiled loops of :mod:`._walk`, for every cell.

:func:`walk` / :func:`walk_back` take a cell and its compiled step (an
:class:`rnnkit.kernels.Step`); the cell is read through its public declarations only (the
names of its input kernel, recurrent kernel, bias and output projection, ``rec_groups``,
``state_sizes``), the weights arrive as a mapping and are read in place (read-only views: one
compiled version whatever the caller). ``walk`` returns exactly what the reference walker
returns (the same :class:`~rnnkit.recurrent._walker.WalkCache`), so either backward can follow
either forward; ``walk_back`` runs the backward walk, then the batched reductions in one
compiled call. Each entry point splits the batch into row blocks (:mod:`._threads`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from rnnkit.kernels import _cache, _pool, _threads, _walk
from rnnkit.kernels._packed import gemm, pack, rgemm
from rnnkit.kernels._plans import _Plan, _plan, _ro
from rnnkit.kernels._reduce import product_tn, reduce
from rnnkit.kernels._step import Step
from rnnkit.kernels._threads import run_blocks

Arrays = tuple[np.ndarray, ...]

#: inference projects a chunk of timesteps at a time into a buffer of at most about this many
#: bytes (a bound independent of T: inference keeps no per-step arrays; small enough to stay in
#: a core's L2 beside the weights: measured at S3, 256 KB against 4 MB, 6-12 % less time at one
#: thread and at two)
CHUNK_BYTES = 1 << 18

#: from this many multiply-adds ((T*B) * N * (F+S)) on, the reductions run as two halves of the
#: rows, on the cores (:mod:`._reduce`), instead of one call; likewise the output projection's
#: gradient
PARALLEL_REDUCTIONS = 1 << 24


def products(dt: np.dtype) -> None:
    """Run two of the feed-forward layers' packed products once on small arrays, with their
    argument types, so that each is compiled (or loaded) now: ``x @ W`` on a read-only weight's
    panels and ``g @ W^T`` (``rnnkit.layers``' ``matmul``; the second is also the batched
    reductions' ``dx``). (``x^T @ g``, ``matmul_tn``, is a third: ``rnnkit.kernels._warm``
    compiles it ahead with these.)"""
    x, g = np.zeros((3, 4), dt), np.zeros((3, 5), dt)
    W = _ro(np.zeros((4, 5), dt))
    rgemm(x, pack(W), np.empty((3, 5), dt), 0.0)
    gemm(g, W, True, np.empty((3, 4), dt), False, 0, 4)


#: called with (cell, input width, dtype) before each backward walk while a child process
#: compiles that walk ahead (set by ``rnnkit.kernels._warm.start``), else None
before_back: Callable[[Any, int, Any], None] | None = None


def cache_place() -> tuple[str, str] | None:
    """(the directory of the kernels' on-disk cache, a stamp of what it holds: the kernel
    sources' hash and Numba's version), or None when Numba keeps its cache elsewhere."""
    try:
        where = str(_walk.walk_back._cache._cache_path)
    except AttributeError:
        return None
    here = os.path.realpath(os.path.dirname(os.path.abspath(_walk.__file__)))
    return where, f"{_cache.sources_hash(here).hex()}-{numba.__version__}"


def _chunk(T: int, B: int, row_bytes: int) -> int:
    """Timesteps per projection chunk (at least 1, at most T)."""
    return max(1, min(T, CHUNK_BYTES // max(B * row_bytes, 1)))


_NO_MASK = np.ones((0, 0), np.uint8)


def _mask_arg(mask: np.ndarray | None, T: int, B: int) -> np.ndarray:
    """The (T, B) uint8 mask the compiled loops read (an empty one, never read, without a mask)."""
    if mask is None:
        return _NO_MASK
    if mask.dtype == np.bool_ and mask.flags.c_contiguous and mask.flags.writeable:
        return mask.view(np.uint8)           # the same bytes (True is 1): no copy
    return np.ascontiguousarray(mask, dtype=np.uint8)


def _layout_key(a: np.ndarray) -> tuple[Any, ...]:
    """What Numba's type of the array ``a`` is made of (dtype, dimensions, layout, flags)."""
    f = a.flags
    return a.dtype, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned


def _rdrop_arg(rdrop: np.ndarray | None, B: int, dt: np.dtype) -> tuple[np.ndarray, bool]:
    if rdrop is None:
        return np.empty((B, 0), dt), False
    return np.ascontiguousarray(rdrop, dtype=dt), True


def walk(cell: Any, step: Step, w: Any, x_tm: np.ndarray, init: Arrays | None, record: bool, keep_seq: bool,
         mask: np.ndarray | None = None, rdrop: np.ndarray | None = None, opts: Any = None
         ) -> tuple[np.ndarray | None, Arrays, tuple[list[np.ndarray], dict[str, np.ndarray]] | None]:
    """The forward walk (see :func:`rnnkit.recurrent._walker.walk`); returns (seq, final,
    (states, parks) when ``record``). ``opts``: the step's options for ``cell``, when known."""
    T, B, F = x_tm.shape
    dt = x_tm.dtype
    pl = _plan(cell, step, w, dt, opts)
    N = pl.N
    mk = _mask_arg(mask, T, B)
    PW, PU, PWp = pl.forward_panels()         # laid out once for every step's product
    sizes = pl.sizes
    if record:
        rm, rd = _rdrop_arg(rdrop, B, dt)
        xw = _pool.empty((T, B, N), dt)            # projected in the row blocks, step by step
        hist = [_pool.empty((T + 1, B, n), dt) for n in sizes]
        for k, a in enumerate(hist):
            a[0] = 0.0 if init is None else init[k]
        parks = {n: _pool.empty((T, B, wd), dt) for n, wd in pl.park_sizes.items()}
        pk = (*parks.values(), np.empty((T, B, 0), dt))
        ht = tuple(hist)
        run_blocks(B, lambda lo, hi: pl.train(
            pl.handle, x_tm, PW, pl.b0, xw, ht, pk, mk, mask is not None, rm, rd, PU, pl.srcs, pl.cols,
            pl.apart, pl.b1, pl.proj, PWp, pl.own, pl.opts, lo, hi))
        if step.input_park is not None:
            parks = {step.input_park: xw, **parks}
        return (hist[0][1:] if keep_seq else None), tuple(a[T] for a in hist), (hist, parks)
    if B < 2 * _threads.MIN_ROWS or _threads.CORES == 1:     # one row block: no closure, no split
        return _infer_whole(pl, x_tm, init, keep_seq, mk, mask is not None)
    # inference: the state in a ring of two rows, one chunk of projections; the output in (B, T, out)
    ring = _ring(sizes, B, dt, init)
    out = _pool.empty((B, T if keep_seq else 1, sizes[0]), dt)
    seq_view = out.transpose(1, 0, 2)
    # (each kind of scratch under a key of its own: a block of all B rows asks for a chunk too)
    skey = ("parks", B, T, N)
    pk1 = pl.scratch(skey, lambda: _parks1(pl, B, dt))
    # every argument's type but the input's and the mask's is the plan's: their layouts complete the key
    ekey = (_layout_key(x_tm), keep_seq, None if mask is None else _layout_key(mk))

    def infer(lo: int, hi: int) -> None:
        xb = x_tm if hi - lo == B else np.ascontiguousarray(x_tm[:, lo:hi])
        bkey = ("chunk", hi - lo, T, N)
        buf = pl.scratch(bkey, lambda: _chunk_buf(pl, hi - lo, T, dt))
        pl.entry(ekey if hi - lo == B else None, pl.infer, (
            pl.handle, xb, PW, pl.b0, ring, pk1, out, keep_seq, buf, mk, mask is not None, PU, pl.srcs,
            pl.cols, pl.apart, pl.b1, pl.proj, PWp, pl.own, pl.opts, lo, hi))
        pl.spare(bkey, buf)

    step_work = N * (F + pl.U.shape[0])        # multiply-adds of one row's step
    # (the caller's block a little longer; under a mask, rows that end early cost less: the rows
    # of a step are computed up to the last real one, so blocks of sorted rows balance their steps)
    work = None if mask is None else mk.sum(axis=0, dtype=np.int64) * step_work
    run_blocks(B, infer, T * step_work, work)
    pl.spare(skey, pk1)
    return (seq_view if keep_seq else None), tuple(r[T % 2] for r in ring), None


def _ring(sizes: tuple[int, ...], B: int, dt: np.dtype, init: Arrays | None) -> Arrays:
    """The inference state: per state part a ring of two (B, width) rows, row 0 the initial
    state (``init``, or zeros)."""
    ring = tuple([np.zeros((2, B, n), dt) for n in sizes])
    if init is not None:
        for k, r in enumerate(ring):
            r[0] = init[k]
    return ring


def _parks1(pl: _Plan, B: int, dt: np.dtype) -> Arrays:
    """One step's parks (1, B, width) per parked name, then the empty one an inference step
    writes when it parks nothing."""
    return (*(np.empty((1, B, wd), dt) for wd in pl.park_sizes.values()), np.empty((1, B, 0), dt))


def _whole_scratch(pl: _Plan, B: int, T: int, dt: np.dtype) -> tuple[Arrays, np.ndarray]:
    """(the parks (1, B, w) and the empty one, the projection chunk) of an inference pass over
    a whole batch of B rows and T steps."""
    return _parks1(pl, B, dt), _chunk_buf(pl, B, T, dt)


def _chunk_buf(pl: _Plan, B: int, T: int, dt: np.dtype) -> np.ndarray:
    """The projection chunk of an inference pass over B rows: (steps of a chunk * B, N), on a
    64-byte boundary (its rows are the products' C)."""
    return _pool.aligned((_chunk(T, B, pl.N * dt.itemsize) * B, pl.N), dt)


def _infer_whole(pl: _Plan, x_tm: np.ndarray, init: Arrays | None, keep_seq: bool, mk: np.ndarray,
                 masked: bool) -> tuple[np.ndarray | None, Arrays, None]:
    """The inference walk of :func:`walk` over the whole batch in one compiled call (what
    :func:`walk` does when the batch is one row block): the same arrays and the same compiled
    loop, with the per-call Python cut to the allocations of the results. The parks and the
    projection chunk come as one pair of scratch arrays keyed by (B, T); the compiled entry
    point by the layouts of the input and the mask (:meth:`_Plan.entry`)."""
    T, B, _ = x_tm.shape
    dt = x_tm.dtype
    sizes = pl.sizes
    ring = _ring(sizes, B, dt, init)
    out = _pool.empty((B, T if keep_seq else 1, sizes[0]), dt)
    skey = (B, T)
    got = pl.scratch(skey, lambda: _whole_scratch(pl, B, T, dt))
    pk1, buf = got
    ekey = (_layout_key(x_tm), keep_seq, _layout_key(mk) if masked else None)   # as walk's
    PW, PU, PWp = pl.forward_panels()
    pl.entry(ekey, pl.infer, (pl.handle, x_tm, PW, pl.b0, ring, pk1, out, keep_seq, buf, mk, masked, PU,
                              pl.srcs, pl.cols, pl.apart, pl.b1, pl.proj, PWp, pl.own, pl.opts, 0, B))
    pl.spare(skey, got)
    r = T % 2
    return (out.transpose(1, 0, 2) if keep_seq else None), tuple([a[r] for a in ring]), None


class _Quick:
    """The prepared call of :func:`infer` for one plan and ``keep_seq``: the compiled version's
    entry point and the arguments that are the plan's (the same for every call)."""

    __slots__ = ("fn", "tail")

    def __init__(self, fn: Any, tail: tuple[Any, ...]) -> None:
        self.fn, self.tail = fn, tail


def infer(cell: Any, step: Step, w: Any, x_tm: np.ndarray, keep_seq: bool, opts: Any = None
          ) -> np.ndarray | None:
    """The inference walk of :func:`walk` from a zero state, without a mask, when the batch is
    one row block and ``x_tm`` is C-contiguous, writeable and aligned; else None (nothing run:
    :func:`walk` takes the call). Returns a new array: the output of every step, batch-major
    (B, T, out), with ``keep_seq``, else the final state part 0 (B, out). The same compiled
    loop on the same arrays as :func:`_infer_whole`, so the same values; the per-call Python
    is the plan's lookup, the allocation of the results and one call of the compiled
    version's entry point (found on the first call, per plan and ``keep_seq``)."""
    T, B, _ = x_tm.shape
    f = x_tm.flags
    if (B >= 2 * _threads.MIN_ROWS and _threads.CORES > 1) or B == 0 or not (
            f.c_contiguous and f.writeable and f.aligned):
        return None
    dt = x_tm.dtype
    pl = _plan(cell, step, w, dt, opts)
    sizes = pl.sizes
    ring = tuple([np.zeros((2, B, n), dt) for n in sizes])
    out = _pool.empty((B, T if keep_seq else 1, sizes[0]), dt)
    skey = (B, T)
    got = pl.scratch(skey, lambda: _whole_scratch(pl, B, T, dt))
    q = pl.quick.get(keep_seq)
    if q is not None:
        tail = q.tail
    else:
        PW, PU, PWp = pl.forward_panels()
        tail = (PW, PU, pl.srcs, pl.cols, pl.apart, pl.b1, pl.proj, PWp, pl.own, pl.opts)
    args = (pl.handle, x_tm, tail[0], pl.b0, ring, got[0], out, keep_seq, got[1], _NO_MASK, False, *tail[1:],
            0, B)
    if q is not None:
        q.fn(*args)
    else:                                      # the first call: through the dispatcher
        pl.infer(*args)
        ov = pl.infer.overloads.get(tuple(numba.typeof(a) for a in args))
        if ov is not None:
            pl.quick[keep_seq] = _Quick(ov.entry_point, tail)
    pl.spare(skey, got)
    return out if keep_seq else ring[0][T % 2]


def walk_back(cell: Any, step: Step, w: Any, x_tm: np.ndarray, states: list[np.ndarray],
              parks: dict[str, np.ndarray], mask: np.ndarray | None, rdrop: np.ndarray | None, g: np.ndarray,
              full: bool, d_final: Arrays | None = None, need_dx: bool = True, opts: Any = None
              ) -> tuple[np.ndarray | None, dict[str, np.ndarray], Arrays]:
    """The backward walk and the batched reductions (see ``rnnkit.recurrent._walker.walk_back``);
    without ``need_dx`` the reductions compute no dL/dx rows and None is returned for it;
    ``opts``: the step's options for ``cell``, when known."""
    T, B, F = x_tm.shape
    dt = x_tm.dtype
    if before_back is not None:               # a child compiling this backward: load, not compile
        before_back(cell, F, dt)
    pl = _plan(cell, step, w, dt, opts)
    N = pl.N
    PUT = pl.packed_ut()                      # U^T (or its blocks), laid out once
    PWpT = pl.packed("pt")
    dxw = _pool.empty((T, B, N), dt)
    drec = _pool.empty((T, B, N), dt) if pl.apart else dxw
    d_init = tuple(np.zeros((B, n), dt) if d_final is None else np.array(d_final[k], dt, order="C")
                   for k, n in enumerate(cell.state_sizes()))
    mk = _mask_arg(mask, T, B)
    rm, rd = _rdrop_arg(rdrop, B, dt)
    g3 = np.ascontiguousarray(g).reshape(B, T if full else 1, cell.output_size)
    names = pl.park_names
    pk = (*(parks[n] for n in names), np.empty((T, B, 0), dt))
    gates = parks[step.input_park] if step.input_park is not None else np.empty((T, B, 0), dt)
    dh_seq = _pool.empty((T, B, cell.output_size if pl.proj >= 0 else 0), dt)
    gown = (*(np.zeros((B, w[n].size), dt) for n in step.own), np.zeros((B, 0), dt))
    ht = tuple(states)
    run_blocks(B, lambda lo, hi: pl.back(
        pl.handle, g3, full, ht, pk, gates, dxw, drec, d_init, mk, mask is not None, rm, rd, PUT, pl.srcs,
        pl.cols, pl.apart, pl.proj, PWpT, dh_seq, pl.own, gown, pl.opts, lo, hi))
    state0 = cell.state_names[0]
    P = [(states[0][:T] * rm if rd else states[0][:T]) if src == state0 else parks[src]
         for src, _, _ in pl.groups]
    P = [p.reshape(T * B, p.shape[-1]) for p in P]
    dW = _pool.empty((F, N), dt)
    db = np.empty((max(pl.bias_rows, 1), N), dt)
    dU = _pool.empty(pl.U.shape, dt)
    dx_tm = _pool.empty((T, B, F) if need_dx else (T, B, 0), dt)
    args = (x_tm.reshape(T * B, F), dxw.reshape(T * B, N), drec.reshape(T * B, N), drec is dxw,
            P[0], P[-1], pl.groups[0][2], pl.W, dW, db, dU, dx_tm.reshape(T * B, dx_tm.shape[2]))
    reduce(*args, need_dx, T * B * N * (F + pl.U.shape[0]) >= PARALLEL_REDUCTIONS)   # (in two halves)
    grads = {cell.input_kernel: dW, cell.recurrent_kernel: dU}
    if cell.bias is not None:
        grads[cell.bias] = db
    if pl.proj >= 0:                           # dWp = m^T @ dh over every step, one product
        assert step.projects is not None
        m = parks[step.projects]
        dWp = np.empty(pl.Wp.shape, dt)        # type: ignore[union-attr]
        product_tn(m.reshape(T * B, m.shape[2]), dh_seq.reshape(T * B, dh_seq.shape[2]), dWp,
                   T * B * dWp.size >= PARALLEL_REDUCTIONS)
        grads[pl.proj_name] = dWp
    for n, a in zip(step.own, gown, strict=False):
        grads[n] = a.sum(axis=0).reshape(w[n].shape)   # over the rows, in one fixed order
    return (dx_tm if need_dx else None), grads, d_init
