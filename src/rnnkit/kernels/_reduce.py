"""The backward walk's batched weight-gradient reductions, on the cores.

Over the ``M = T*B`` rows of a pass: ``dW = x^T dxw``, ``dU = P^T drec``, the bias sums and
``dx = dxw W^T`` (:func:`rnnkit.kernels._gemm.reductions`), and the output projection's
``dWp = m^T dh`` (:func:`product_tn`). A big one runs as two halves of the rows, the sums over rows
``[0, M // 2)`` and ``[M // 2, M)`` each on a thread of its own (its columns split further when
there are more than two cores), then ``half 0 + half 1``: the order of every sum is fixed by the
shape alone, so the results do not depend on the thread count (one thread computes the same two
halves one after the other). Each half packs only its own rows of both operands; split by columns
instead, every part would pack all of ``x^T`` and ``P^T`` (measured 4-11 % more work than one
call, against 0-3 % for the halves).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rnnkit.kernels import _threads
from rnnkit.kernels._gemm import reductions
from rnnkit.kernels._packed import gemm


def _run(n: int, job: Callable[[int, int], None]) -> None:
    """``job(i, i + 1)`` for ``i < n`` (n at most the core count), at once on the cores."""
    if _threads.CORES == 1 or n == 1:
        for i in range(n):
            job(i, i + 1)
    else:
        _threads.run_split([(i, i + 1) for i in range(n)], job)


def reduce(x2: np.ndarray, dxw2: np.ndarray, drec2: np.ndarray, shared: bool, P1: np.ndarray,
           P2: np.ndarray, split: int, W: np.ndarray, dW: np.ndarray, db: np.ndarray, dU: np.ndarray,
           dx2: np.ndarray, need_dx: bool, halves: bool) -> None:
    """Fill ``dW``, ``db``, ``dU`` and (with ``need_dx``) ``dx2`` as
    :func:`~rnnkit.kernels._gemm.reductions` does for every column and row, in one call, or with
    ``halves`` as the two halves of the rows (see the module docstring)."""
    M, N = dxw2.shape
    if not halves:
        reductions(x2, dxw2, drec2, shared, P1, P2, split, W, dW, db, dU, dx2, 0, N, 0, M if need_dx else 0)
        return
    m = M // 2
    outs = ((dW, db, dU), (np.empty_like(dW), np.empty_like(db), np.empty_like(dU)))
    c = max(1, _threads.CORES // 2)          # column parts per half

    def part(i: int, _: int) -> None:
        h, j = divmod(i, c)
        lo, hi = (0, m) if h == 0 else (m, M)
        n = hi - lo if need_dx else 0
        gw, gb, gu = outs[h]
        reductions(x2[lo:hi], dxw2[lo:hi], drec2[lo:hi], shared, P1[lo:hi], P2[lo:hi], split, W, gw, gb, gu,
                   dx2[lo:hi], N * j // c, N * (j + 1) // c, n * j // c, n * (j + 1) // c)

    _run(2 * c, part)
    for a, b in zip(outs[0], outs[1], strict=True):
        a += b


def product_tn(A: np.ndarray, G: np.ndarray, out: np.ndarray, halves: bool) -> None:
    """``out = A^T @ G`` over the rows of ``A`` (M, K) and ``G`` (M, N), in one product or, with
    ``halves``, as the two halves of the rows (see the module docstring)."""
    M, N = G.shape
    if not halves:
        gemm(A.T, G, False, out, False, 0, N)
        return
    m = M // 2
    outs = (out, np.empty_like(out))
    c = max(1, _threads.CORES // 2)

    def part(i: int, _: int) -> None:
        h, j = divmod(i, c)
        lo, hi = (0, m) if h == 0 else (m, M)
        gemm(A[lo:hi].T, G[lo:hi], False, outs[h], False, N * j // c, N * (j + 1) // c)

    _run(2 * c, part)
    out += outs[1]
