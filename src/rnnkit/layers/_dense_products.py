"""``Dense``'s own products: the forward ``x @ W + b`` and the weight gradients ``x^T @ g`` and
``sum(g)``, each in as few passes over memory as the product allows.

Both run on :mod:`rnnkit.layers._product`'s compiled packed product in the ``"fast"`` kernel
mode, with the same values, bit for bit, as :func:`~rnnkit.layers._product.matmul` followed by
``+ b`` and as :func:`~rnnkit.layers._product.matmul_tn` with ``g.sum(axis=0)``:

- :func:`affine` computes a wide product (many output columns, more rows than one block of the
  packed product) a slice of :data:`CHUNK_PANELS` panels of columns at a time and adds the
  bias to that slice while it is still in the cache; the whole packed kernel is then read
  once instead of once per block of rows, and the bias costs no pass over the output of its
  own. Each element is still one chain of multiply-adds over ``k`` in increasing order, then
  ``+ b``: a row does not depend on the other rows (``predict`` gives the same bits under every
  ``batch_size``).
- :func:`weight_grads` multiplies ``x^T`` (copied once, small: features x rows) by ``g``, a
  slice of columns of ``g`` at a time, and takes the bias gradient from the same product: a row
  of ones appended to ``x^T`` makes the last row of the result ``sum over rows of g``, each
  column summed in increasing row order (what ``g.sum(axis=0)`` gives, bit for bit, without a
  pass over ``g`` of its own).

In the ``"reference"`` mode, or without numba, both are numpy's (``x @ W + b``, ``x.T @ g``,
``g.sum(axis=0)``).
"""

from __future__ import annotations

import numpy as np

from rnnkit.kernels._threads import CORES, run_parts
from rnnkit.layers._product import PARALLEL_PRODUCT, _operand, _packed, _panels, matmul

#: the columns of one slice, in panels of the packed product (8 panels: 128 float32 or 64
#: float64 columns, 512 bytes of each row): a slice of the output and of the packed kernel
#: stay in the second-level cache while the slice is computed and its bias added
CHUNK_PANELS = 8
#: a product is computed in slices from this many rows on (the packed product reads its whole
#: right-hand side once per block of 96 rows; with fewer rows slicing gains nothing)
CHUNK_ROWS = 97


def affine(x2: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """``x2 @ w + b`` (``+ b`` only when ``b`` is given) for ``x2`` (M, K) and ``w`` (K, N) of
    one float dtype; a new C-contiguous (M, N) array with the values of ``matmul(x2, w) + b``.
    ``w`` read-only (a layer's weight) is packed once while it lives (see
    :func:`~rnnkit.layers._product.matmul`)."""
    pk = _packed()
    M, K = x2.shape
    N = w.shape[1]
    if pk is None or w.flags.writeable or M < CHUNK_ROWS or N < 2 * CHUNK_PANELS * pk.nr_of(x2.dtype):
        out = matmul(x2, w)
        if b is not None:
            out += b
        return out
    A = _operand(x2, True)
    pk.ready(A.dtype)
    P = _panels(pk, w)
    nr = pk.nr_of(A.dtype)
    out = np.empty((M, N), A.dtype)
    npan = P.shape[0]

    def rows(r0: int, r1: int) -> None:
        for p0 in range(0, npan, CHUNK_PANELS):
            p1 = min(p0 + CHUNK_PANELS, npan)
            c0, c1 = p0 * nr, min(p1 * nr, N)
            part = out[r0:r1, c0:c1]
            pk.rgemm(A[r0:r1], P[p0:p1], part, 0.0)
            if b is not None:
                part += b[c0:c1]

    if M * K * N >= PARALLEL_PRODUCT and CORES > 1 and M >= 4 * CORES:
        run_parts(M, rows)          # rows never interact: any split gives the same bits
    else:
        rows(0, M)
    return out


def weight_grads(x2: np.ndarray, g2: np.ndarray, bias: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """``(x2^T @ g2, g2.sum(axis=0) or None)`` for ``x2`` (M, K) and ``g2`` (M, N) of one float
    dtype: the kernel gradient (K, N), C-contiguous, and when ``bias`` the bias gradient (N,),
    with the values of :func:`~rnnkit.layers._product.matmul_tn` and of ``g2.sum(axis=0)``
    (both summed over the rows in increasing order on the compiled path). The two may be views
    of one array."""
    pk = _packed()
    M, K = x2.shape
    N = g2.shape[1]
    if pk is None or M == 0 or K == 0 or N == 0:
        dw = x2.T @ g2 if pk is None else np.zeros((K, N), x2.dtype)
        return np.ascontiguousarray(dw), (g2.sum(axis=0) if bias else None)
    pk.ready(x2.dtype)
    rows = K + 1 if bias else K
    at = np.empty((rows, M), x2.dtype)      # x^T (and a row of ones): small, rows contiguous
    at[:K] = x2.T
    if bias:
        at[K] = 1
    # g read-only: the argument types of Dense's input-gradient product (one compiled version)
    G = np.ascontiguousarray(g2).view()
    G.flags.writeable = False
    out = np.empty((rows, N), x2.dtype)
    nr = pk.nr_of(x2.dtype)
    npan = -(-N // nr)

    def panels(lo: int, hi: int) -> None:
        for p0 in range(lo, hi, CHUNK_PANELS):
            pk.gemm(at, G, False, out, False, p0 * nr, min(min(p0 + CHUNK_PANELS, hi) * nr, N))

    if M * K * N >= PARALLEL_PRODUCT and CORES > 1:
        run_parts(npan, panels)     # a column's value does not depend on the split
    else:
        panels(0, npan)
    return out[:K], (out[K] if bias else None)
