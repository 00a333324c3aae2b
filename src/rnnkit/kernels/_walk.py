"""The compiled walker: ONE time loop, forward and backward, for every cell with a compiled step.

The walker owns everything but the gate arithmetic: the time loop, the products (the recurrent
products of each group of :meth:`rnnkit.Cell.rec_groups` on packed panels, the output
projection, the inference projection of the inputs a chunk at a time), the masks (a masked row
carries every state part over; backward, its gradient passes straight through), recurrent
dropout (the state part 0 times the pass's mask where it enters the products: ``fed``), and
the row block ``[lo, hi)`` of the batch it runs on (the caller's arrays are whole; one compiled
version serves the whole batch and a block of it). The cell's step (``step``, a
:class:`._steps.Handle`) runs after each group's product, forward, and before it, backward
(its phase ``k``); what it receives is specified in :mod:`rnnkit.kernels`.

Arguments shared by the loops: ``PU`` / ``PUT`` the packed column blocks of U (U^T) per group,
``srcs`` each group's source (-1: the fed state part 0, else a park index), ``cols`` its columns
``(c0, c1)``, ``apart`` whether the products go to ``rec`` instead of adding into the step
input, ``b1`` the row added to ``rec`` first (bias row 1, or zeros), ``proj`` the park the
output projection ``PWp`` multiplies into state part 0 (-1: none). ``pk``, ``own`` and
``gown`` end with one empty array, so that an index into them always types.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._gemm import project
from rnnkit.kernels._jit import (
    INNER,
    OPTS,
    add_mul_rows,
    add_upstream,
    carry,
    copy_rows,
    hold,
    mul_rows,
    njit,
    release,
    row,
)
from rnnkit.kernels._packed import rgemm, rgemm1
from rnnkit.kernels._steps import (
    cols_block,
    keep,
    rows_block,
    scratch_rows,
    step_backward,
    step_forward,
    unmanaged,
    unmanaged_all,
)


@njit(inline="always", **OPTS)
def _fill_rows(dst: Any, v: Any) -> None:
    """Every row of ``dst`` = ``v``."""
    for b in range(dst.shape[0]):
        d = row(dst, b)
        for j in range(d.shape[0]):
            d[j] = v[j]


@njit(inline="always", **OPTS)
def _zero_rows(dst: Any) -> None:
    for b in range(dst.shape[0]):
        d = row(dst, b)
        for j in range(d.shape[0]):
            d[j] = 0


@njit(inline="always", **OPTS)
def _add_rows(acc: Any, a: Any) -> None:
    for b in range(a.shape[0]):
        r, ar = row(acc, b), row(a, b)
        for j in range(ar.shape[0]):
            r[j] += ar[j]


@njit(forceinline=True, **{**INNER, "cache": False})
def _one_step(step: Any, a: Any, rec: Any, fedbuf: Any, st: Any, i0: int, i1: int, pk: Any, j: int,
              rm: Any, rdrop: bool, PU: Any, srcs: Any, cols: Any, apart: bool, b1: Any, proj: int,
              PWp: Any, own: Any, tmp: Any, opts: Any) -> None:
    """Step ``i0 -> i1`` of the state arrays ``st`` on the step input ``a`` (parks at ``j``).

    Compiled once for both forward walks (the same argument types from each: no literal
    arguments) and inlined by LLVM (``forceinline``), not by Numba: Numba typed and lowered it
    again inside each walk (measured on an empty cache: about 2 CPU s more for the demo's two
    forward walks). LLVM inlining keeps the one-row inference step free of a call. Not cached on
    its own: it is compiled only while a walk is, whose cached code holds it (and a step run by
    ``exec`` may pass through it)."""
    fed = st[0][i0]
    if rdrop:
        mul_rows(st[0][i0], rm, fedbuf)
        fed = fedbuf
    if apart:
        _fill_rows(rec, b1)
    for k in range(len(PU)):
        c0, c1 = cols[k]
        src = fed if srcs[k] < 0 else pk[srcs[k]][j]
        dst = rec[:, c0:c1] if apart else a[:, c0:c1]
        if src.shape[0] == 1:
            rgemm1(src, PU[k], dst, 1.0)
        else:
            rgemm(src, PU[k], dst, 1.0)
        step_forward(step, k, a, rec, fed, st, i0, i1, pk, j, own, tmp, opts)
    if proj >= 0:
        if st[0].shape[1] == 1:
            rgemm1(pk[proj][j], PWp, st[0][i1], 0.0)
        else:
            rgemm(pk[proj][j], PWp, st[0][i1], 0.0)


@njit(**OPTS)
def walk_train(step: Any, x_tm: Any, PW: Any, b0: Any, xw: Any, hist: Any, parks: Any, mask: Any,
               masked: bool, rm: Any, rdrop: bool, PU: Any, srcs: Any, cols: Any, apart: bool, b1: Any,
               proj: int, PWp: Any, own: Any, opts: Any, lo: int, hi: int) -> None:
    """Training forward over rows ``[lo, hi)``: each step first projects its inputs, ``xw[s] =
    x_tm[s] @ W + b0`` (``W`` packed in ``PW``; these rows only, so the projection runs in the
    blocks too), then steps; ``xw`` (T, B, N) holds the step input of each step, as the step
    leaves it, on exit; ``hist`` the state parts (T+1, B, w) with row 0 set; ``parks`` (T, B, w)
    receive what each step parks. When the block is the whole batch, every step's projection is
    made before the time loop as one product over the ``T*B`` rows (``x_tm`` and ``xw``
    C-contiguous): each element is the same chain ``b0 + sum over k in increasing order`` as
    the per-step product gives it, so the bits do not depend on the blocks."""
    x_all, xw_all = unmanaged(x_tm), unmanaged(xw)
    whole = lo == 0 and hi == xw_all.shape[1]
    if whole:
        Ta, Ba, Fa = x_all.shape
        project(x_all.reshape((Ta * Ba, Fa)), unmanaged(PW), unmanaged(b0),
                xw_all.reshape((Ta * Ba, xw_all.shape[2])))
    x_tm, xw, mask, rm = (unmanaged(x_tm)[:, lo:hi], unmanaged(xw)[:, lo:hi], unmanaged(mask)[:, lo:hi],
                          unmanaged(rm)[lo:hi])
    st, pk = cols_block(unmanaged_all(hist), lo, hi), cols_block(unmanaged_all(parks), lo, hi)
    PW, b0, PU, b1 = unmanaged(PW), unmanaged(b0), unmanaged_all(PU), unmanaged(b1)
    PWp, own = unmanaged(PWp), unmanaged_all(own)
    T, B, N = xw.shape
    dt = xw.dtype
    S = st[0].shape[2]
    nr = N if apart else 0
    held = (np.empty((B, S), dt), np.empty((B, nr), dt), np.empty((B, N), dt))
    fedbuf, rec, tmp = (unmanaged(held[0])[:, 0:S], unmanaged(held[1])[:, 0:nr],
                        unmanaged(held[2])[:, 0:N])
    for s in range(T):
        if not whole:
            _fill_rows(xw[s], b0)
            rgemm(x_tm[s], PW, xw[s], 1.0)
        _one_step(step, xw[s], rec, fedbuf, st, s, s + 1, pk, s, rm, rdrop, PU, srcs, cols, apart, b1, proj,
                  PWp, own, tmp, opts)
        if masked:                                  # a masked step carries every state part over
            for p in range(len(st)):
                carry(st[p][s], st[p][s + 1], mask[s])
    keep(held)


@njit(inline="always", **OPTS)
def _live_rows(m: Any) -> int:
    """One more than the last row with ``m[b] != 0`` (0 when none): the rows a masked step
    computes (the rest are all masked: their state is carried)."""
    k = m.shape[0]
    while k > 0 and m[k - 1] == 0:
        k -= 1
    return k


@njit(**OPTS)
def walk_infer(step: Any, x_tm: Any, PW: Any, b0: Any, ring: Any, parks: Any, seq: Any, keep_seq: bool,
               buf: Any, mask: Any, masked: bool, PU: Any, srcs: Any, cols: Any, apart: bool, b1: Any,
               proj: int, PWp: Any, own: Any, opts: Any, lo: int, hi: int) -> None:
    """Inference over rows ``[lo, hi)`` of ``ring`` (2, B, w) per state part (row 0 the initial
    state on entry; the final state is row ``T % 2`` on exit), ``parks`` (1, B, w), ``seq`` and
    ``mask``; ``x_tm`` holds these rows only. The inputs are projected ``chunk`` steps at a time into ``buf``
    (chunk*B, N); with ``keep_seq`` step ``s`` writes state part 0 into ``seq[:, s]`` (``seq``: a
    C-contiguous (B, T, w) array, (B, 1, w) unused without ``keep_seq``: one compiled version).
    A masked step projects and computes only the rows up to its last real one (the rows after
    it are all masked: carried; a row's values never depend on the rows beside it), so a batch
    whose rows are in decreasing order of length computes fewer rows as its sequences end."""
    st, pk = cols_block(unmanaged_all(ring), lo, hi), cols_block(unmanaged_all(parks), lo, hi)
    seq, mask = unmanaged(seq)[lo:hi], unmanaged(mask)[:, lo:hi]
    x_tm, PW, b0, buf, PU = unmanaged(x_tm), unmanaged(PW), unmanaged(b0), unmanaged(buf), unmanaged_all(PU)
    b1, PWp, own = unmanaged(b1), unmanaged(PWp), unmanaged_all(own)
    T, B, F = x_tm.shape
    N = buf.shape[1]
    dt = x_tm.dtype
    S = st[0].shape[2]
    chunk = max(1, buf.shape[0] // max(B, 1))   # (an empty batch: any chunk)
    nr = N if apart else 0
    held = (np.empty((B, S), dt), np.empty((B, nr), dt), np.empty((B, N), dt))
    fedbuf, rec, tmp = (unmanaged(held[0])[:, 0:S], unmanaged(held[1])[:, 0:nr],
                        unmanaged(held[2])[:, 0:N])
    rm = unmanaged(held[0])[0:0]                # (C-contiguous as the training walk's: one _one_step)
    live = np.full(chunk, B, np.int64)          # per step of a chunk: the rows it computes
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        xp = buf[:n * B]
        whole = True                                # every row of every step of the chunk computed
        if masked:
            for s in range(n):
                live[s] = _live_rows(mask[t0 + s])
                if live[s] < B:
                    whole = False
        if whole:
            project(x_tm[t0:t0 + n].reshape((n * B, F)), PW, b0, xp)
        else:                                       # each step's rows up to its last real one
            for s in range(n):
                if live[s] > 0:
                    project(x_tm[t0 + s, 0:live[s]], PW, b0, xp[s * B:s * B + live[s]])
        for s in range(n):
            i0 = (t0 + s) & 1
            i1 = 1 - i0
            a, stk, pkk, reck, fedk, tmpk = xp[s * B:(s + 1) * B, 0:N], st, pk, rec, fedbuf, tmp
            k = live[s]
            if k < B:                               # the rows from the last real one on: carried only
                stk, pkk = cols_block(st, 0, k), cols_block(pk, 0, k)
                a, reck, fedk, tmpk = a[0:k], rec[0:k], fedbuf[0:k], tmp[0:k]
            _one_step(step, a, reck, fedk, stk, i0, i1, pkk, np.int64(0), rm, np.bool_(False), PU, srcs, cols,
                      apart, b1, proj, PWp, own, tmpk, opts)
            if masked:
                for p in range(len(st)):
                    carry(st[p][i0], st[p][i1], mask[t0 + s])
            if keep_seq:
                copy_rows(st[0][i1], seq[:, t0 + s])
    keep(held)


@njit(**OPTS)
def walk_back(step: Any, g3: Any, full: bool, hist: Any, parks: Any, gates: Any, dxw: Any, drec: Any,
              d_init: Any, mask: Any, masked: bool, rm: Any, rdrop: bool, PUT: Any, srcs: Any, cols: Any,
              apart: bool, proj: int, PWpT: Any, dh_seq: Any, own: Any, gowns: Any, opts: Any, lo: int,
              hi: int) -> None:
    """The backward walk over rows ``[lo, hi)``: fills ``dxw`` (T, B, N) with dL/d(step input)
    and, with ``apart``, ``drec`` with dL/d(recurrent product); ``gowns`` (B, w), zeros on
    entry, accumulate each row's contributions to the gradients of the step's own parameters.
    ``g3`` is the upstream gradient (B, T, out) when ``full`` (return_sequences), else
    (B, 1, out); ``d_init`` (B, w) per state part holds dL/d(final state) on entry and
    dL/d(initial state) on exit. With an output projection ``dh_seq`` (T, B, out) receives
    dL/d(state part 0) of every step."""
    st, pk = cols_block(unmanaged_all(hist), lo, hi), cols_block(unmanaged_all(parks), lo, hi)
    gown, dst = rows_block(unmanaged_all(gowns), lo, hi), rows_block(unmanaged_all(d_init), lo, hi)
    g3, gates, dxw, drec = unmanaged(g3)[lo:hi], unmanaged(gates)[:, lo:hi], unmanaged(dxw)[:, lo:hi], \
        unmanaged(drec)[:, lo:hi]
    dh_seq, mask, rm = unmanaged(dh_seq)[:, lo:hi], unmanaged(mask)[:, lo:hi], unmanaged(rm)[lo:hi]
    PUT, PWpT, own = unmanaged_all(PUT), unmanaged(PWpT), unmanaged_all(own)
    T, B, N = dxw.shape
    dt = dxw.dtype
    S = st[0].shape[2]
    held = (np.empty((B, S), dt), np.empty((B, S), dt), np.empty((B, N), dt))
    fedbuf, dfed, tmp = (unmanaged(held[0])[:, 0:S], unmanaged(held[1])[:, 0:S],
                         unmanaged(held[2])[:, 0:N])
    held_pk, held_st = scratch_rows(pk, B), scratch_rows(st, B)
    dpk, save = unmanaged_all(held_pk), unmanaged_all(held_st)
    for s in range(T - 1, -1, -1):
        if full or s == T - 1:
            add_upstream(dst[0], g3, s if full else 0)
        if masked:                               # masked rows: the gradient passes straight through
            for p in range(len(dst)):
                hold(dst[p], save[p], mask[s])
        fed = st[0][s]
        if rdrop:
            mul_rows(st[0][s], rm, fedbuf)
            fed = fedbuf
        if proj >= 0:                            # the output projection, undone first
            copy_rows(dst[0], dh_seq[s])
            rgemm(dst[0], PWpT, dpk[proj], 0.0)
        _zero_rows(dfed)
        d, dr = dxw[s], drec[s]
        for k in range(len(PUT) - 1, -1, -1):
            step_backward(step, k, gates[s], d, dr, dfed, fed, dst, dpk, st, s, s + 1, pk, s, own, gown,
                          tmp, opts)
            c0, c1 = cols[k]
            dcols = dr[:, c0:c1] if apart else d[:, c0:c1]
            if srcs[k] < 0:
                rgemm(dcols, PUT[k], dfed, 1.0)
            else:
                rgemm(dcols, PUT[k], dpk[srcs[k]], 0.0)
        if rdrop:
            add_mul_rows(dst[0], dfed, rm)
        else:
            _add_rows(dst[0], dfed)
        if masked:
            for p in range(len(dst)):
                release(dst[p], save[p], mask[s])
    keep(held)
    keep(held_pk)
    keep(held_st)


#: the same loops without the on-disk cache, for steps whose module cannot be imported by a later
#: process (code run by ``exec``): a cached walker names the module of every function it calls
UNCACHED = {f.__name__: njit(**{k: v for k, v in OPTS.items() if k != "cache"})(f.py_func)
            for f in (walk_train, walk_infer, walk_back)}
