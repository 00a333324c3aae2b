"""The walker: the time loop of every recurrent layer, over any :class:`~rnnkit.Cell`.

It owns the input projection of all timesteps in one GEMM (for a cell with an input kernel),
the walk along time, the per-step caches, the backward walk and the batched weight-gradient
GEMMs. It knows no parameter name: the cell names its input kernel, recurrent kernel and bias.
A compiled kernel registered for the cell's type (:mod:`rnnkit.kernels`) runs instead of the
reference loop below when the kernel mode is ``"fast"``; both produce the same cache, so either
backward can follow either forward.

Everything here is time-major and in PROCESSING order: row ``s`` of ``x_tm`` (T, B, F) is the
input step ``s`` consumes. The cache of a training pass::

    x_tm     (T, B, F)             the input
    states   [(T+1, B, size_k)]    per state part: row s enters step s, row s+1 leaves it
    parks    {name: (T, B, w)}     what the cell parked at every step

Backward, after the walk has filled ``dinp`` (T, B, N) and ``drec``::

    dW      = x_tm^T @ dinp                 one GEMM over (T*B) rows
    b[0]    = sum(dinp)                     (b[1] = sum(drec) when the bias has 2 rows)
    dU[:, group] = P^T @ drec[:, group]     one GEMM per group of Cell.rec_groups
    dx      = dinp @ W^T                    one GEMM
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit._errors import InvalidParameterError
from rnnkit.recurrent._cell import Arrays, Cell

Walk = tuple[np.ndarray | None, Arrays, dict[str, Any] | None]


def walk(cell: Cell, w: Mapping[str, np.ndarray], x_tm: np.ndarray, init: Arrays | None, record: bool,
         keep_seq: bool) -> Walk:
    """Run the recurrence on ``x_tm`` (T, B, F) from ``init`` (None: zeros). Returns (the
    output of every step (T, B, out) when ``keep_seq``, the final state parts, the cache when
    ``record``)."""
    impl = kernels.find(cell)
    if impl is not None:
        return impl.walk(cell, w, x_tm, init, record, keep_seq)  # type: ignore[no-any-return]
    return reference_walk(cell, w, x_tm, init, record, keep_seq)


def walk_back(cell: Cell, w: Mapping[str, np.ndarray], cache: dict[str, Any], g: np.ndarray,
              full: bool) -> tuple[np.ndarray, dict[str, np.ndarray], Arrays]:
    """BPTT from the upstream gradient ``g`` ((B, T, out) when ``full``, else (B, out) of the
    last step). Returns (dL/dx_tm (T, B, F), {parameter name: gradient}, dL/d(initial state))."""
    impl = kernels.find(cell)
    if impl is not None:
        return impl.walk_back(cell, w, cache, g, full)  # type: ignore[no-any-return]
    return reference_walk_back(cell, w, cache, g, full)


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


def reference_walk(cell: Cell, w: Mapping[str, np.ndarray], x_tm: np.ndarray, init: Arrays | None,
                   record: bool, keep_seq: bool) -> Walk:
    """The plain NumPy time loop (see :func:`walk`)."""
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
            new = cell.step(w, inp[s], tuple(a[s] for a in hist), park)
            if s == 0:
                _check_new(cell, new, B)
            for k, a in enumerate(new):
                hist[k][s + 1] = a
            for name, v in park.items():
                if name not in parks:
                    parks[name] = np.empty((T, *v.shape), dt)
                parks[name][s] = v
        cache = {"x_tm": x_tm, "states": hist, "parks": parks}
        return (hist[0][1:] if keep_seq else None), tuple(a[T] for a in hist), cache
    # inference: O(B * width) state; the sequence only when it is the output
    seq = np.empty((T, B, sizes[0]), dt) if keep_seq else None
    state = start
    for s in range(T):
        state = cell.step(w, inp[s], state, None)
        if s == 0:
            _check_new(cell, state, B)
        if seq is not None:
            seq[s] = state[0]
    return seq, tuple(np.array(a, dt) for a in state), None


def reference_walk_back(cell: Cell, w: Mapping[str, np.ndarray], cache: dict[str, Any], g: np.ndarray,
                        full: bool) -> tuple[np.ndarray, dict[str, np.ndarray], Arrays]:
    """The plain NumPy backward walk (see :func:`walk_back`)."""
    x_tm, hist, parks = cache["x_tm"], cache["states"], cache["parks"]
    T, B, _ = x_tm.shape
    dt = x_tm.dtype
    raw_inp = cell.input_kernel is None
    d: Arrays = tuple(np.zeros((B, n), dt) for n in cell.state_sizes())
    g_tm = g.transpose(1, 0, 2) if full else None
    dinp: np.ndarray | None = None
    drec: np.ndarray | None = None
    own: dict[str, np.ndarray] = {}
    for s in range(T - 1, -1, -1):
        dh = d[0] + g_tm[s] if g_tm is not None else (d[0] + g if s == T - 1 else d[0])
        r = cell.step_back(w, (dh, *d[1:]), x_tm[s] if raw_inp else None, tuple(a[s] for a in hist),
                           tuple(a[s + 1] for a in hist), {n: p[s] for n, p in parks.items()})
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
    assert dinp is not None
    grads, dx_tm = batched_grads(cell, w, cache, dinp, dinp if drec is None else drec)
    grads.update(own)
    return dx_tm, grads, d


def batched_grads(cell: Cell, w: Mapping[str, np.ndarray], cache: dict[str, Any], dinp: np.ndarray,
                  drec: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The walker's reductions for the parameters the cell named: (gradients, dL/dx_tm)."""
    x_tm, hist, parks = cache["x_tm"], cache["states"], cache["parks"]
    T, B, F = x_tm.shape
    N = dinp.shape[2]
    d2 = dinp.reshape(T * B, N)
    grads: dict[str, np.ndarray] = {}
    if cell.input_kernel is not None:
        grads[cell.input_kernel] = x_tm.reshape(T * B, F).T @ d2
        dx_tm = (d2 @ w[cell.input_kernel].T).reshape(T, B, F)
    else:
        dx_tm = dinp
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
        for src, c0, c1 in cell.rec_groups(U.shape[1]):
            P = hist[cell.state_names.index(src)][:T] if src in cell.state_names else parks[src]
            dU[:, c0:c1] = P.reshape(T * B, P.shape[-1]).T @ r2[:, c0:c1]
        grads[cell.recurrent_kernel] = dU
    return grads, dx_tm
