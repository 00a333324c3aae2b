"""The walker's own products: the input projection of every step and the batched
weight-gradient reductions, on the packed products of :mod:`._packed`."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.kernels._jit import OPTS, njit, row
from rnnkit.kernels._packed import gemm, gemm2, rgemm


@njit(**OPTS)
def project(x2: Any, PW: Any, b0: Any, out: Any) -> None:
    """``out = x2 @ W + b0`` (the input projection of every step, one product; ``W`` packed in
    ``PW``)."""
    for r in range(out.shape[0]):
        o = row(out, r)
        for j in range(o.shape[0]):
            o[j] = b0[j]
    rgemm(x2, PW, out, 1.0)


@njit(inline="always", **OPTS)
def _col_sums(a: Any, out: Any, c0: int, c1: int) -> None:
    """``out[:] = sum over the rows of a[:, c0:c1]``, in increasing row order from 0 (a loop
    from 0 over a fresh accumulator, which LLVM vectorises: measured 5x faster than adding into
    ``out`` from ``c0`` on)."""
    n = c1 - c0
    acc = np.zeros(n, a.dtype)
    for r in range(a.shape[0]):
        ar = row(a, r)[c0:c1]
        for j in range(n):
            acc[j] += ar[j]
    for j in range(n):
        out[c0 + j] = acc[j]


@njit(**OPTS)
def bias_sums(dxw2: Any, drec2: Any, db: Any, c0: int, c1: int) -> None:
    """``db[0, c0:c1] = sum(dxw)`` (and ``db[1, c0:c1] = sum(drec)`` when ``db`` has 2 rows),
    summed over the rows in increasing order."""
    _col_sums(dxw2, db[0], c0, c1)
    if db.shape[0] == 2:
        _col_sums(drec2, db[1], c0, c1)


def _readonly(a: np.ndarray) -> np.ndarray:
    """``a``, or a read-only view of it (no copy): the packing of a product's right-hand side
    then has the argument type of a read-only weight's, one compiled version for both (measured
    on an empty cache, the demo's LSTM: one specialisation and about 0.5 CPU s fewer)."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def reductions(x2: Any, dxw2: Any, drec2: Any, shared: bool, P1: Any, P2: Any, split: int, W: Any, dW: Any,
               db: Any, dU: Any, dx2: Any, c0: int, c1: int, r0: int, r1: int) -> None:
    """The walker's batched weight-gradient reductions (see its docstring) for the gate columns
    ``[c0, c1)`` and the input-gradient rows ``[r0, r1)`` (so parts can run on several threads;
    every element comes out the same whatever the parts are): ``dW = x^T dxw``,
    ``db[0] = sum(dxw)`` (``db[1] = sum(drec)`` when 2 rows), ``dU[:, :split] = P1^T
    drec[:, :split]``, ``dU[:, split:] = P2^T drec[:, split:]``, ``dx = dxw W^T``.

    Python glue over compiled products: every :func:`gemm` call here has the argument types of
    the feed-forward layers' products (a transposed C array times a C array; a C array times a
    read-only weight, transposed), so a process compiles each version once for both, and no
    compiled caller links (and compiles again) a copy of it. (Measured on an empty cache, the
    demo's LSTM: about 3.4 s less compilation than one compiled function holding these calls,
    which compiled two more versions of ``gemm`` for its constant flags; the price is two more
    calls from Python per backward pass.)"""
    if c1 > c0:
        if shared and split >= c1:         # dU's columns all from P1, against the same dxw: one packing
            gemm2(x2.T, dW, P1.T, dU, _readonly(dxw2), c0, c1)
        else:
            gemm(x2.T, dxw2, False, dW, False, c0, c1)
        bias_sums(dxw2, drec2, db, c0, c1)
        a, b = (c1, c1) if shared and split >= c1 else (c0, min(c1, split))
        if b > a:
            gemm(P1.T, drec2, False, dU, False, a, b)
        a, b = max(c0, split), c1
        if b > a:
            gemm(P2.T, drec2, False, dU, False, a, b)
    if r1 > r0:
        gemm(dxw2[r0:r1], W, True, dx2[r0:r1], False, 0, dx2.shape[1])
