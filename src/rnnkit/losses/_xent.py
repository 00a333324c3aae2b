"""Softmax cross-entropy on logits, fused: the log-softmax, the loss and its gradient in one sweep
over the rows.

For a row ``z`` (C classes), with ``m = max(z)`` and ``s = sum(exp(z - m))``::

    log_softmax(z) = z - m - log(s)
    integer label l:   v = log(s) - (z_l - m)             dv/dz = softmax(z) - onehot(l)
    targets y:         v = (m + log(s)) sum(y) - y . z     dv/dz = softmax(z) sum(y) - y

The rows are taken a few at a time (about :data:`BLOCK_BYTES` of each operand), so the maximum,
the exponentials, their sum and the scaled gradient of a block are computed while it sits in
the cache; the gradient of a block is written once, into the output array, as
``coef * (exp(z - m) / s)`` with the label's ``coef`` subtracted (``coef``: each row's factor of
the gradient, the loss weight of its position over the number of positions). Nothing is
converted to a wider type: float32 logits are computed in float32 throughout (numpy's sums are
pairwise, so a sum over 8,606 classes keeps about seven digits), float64 logits in float64.
"""

from __future__ import annotations

import numpy as np

#: the bytes of each operand's block of rows (a block of logits and of the gradient together
#: stay well inside a 1 MB second-level cache)
BLOCK_BYTES = 1 << 18


def compute_dtype(z: np.ndarray) -> np.dtype:
    """The type the arithmetic runs in: float32 for float32 logits, float64 otherwise."""
    return np.dtype(np.float32) if z.dtype == np.float32 else np.dtype(np.float64)


def block_rows(n_classes: int, itemsize: int) -> int:
    """How many rows of ``n_classes`` make one block (at least 1)."""
    return max(1, BLOCK_BYTES // max(1, n_classes * itemsize))


def softmax_xent(z: np.ndarray, target: np.ndarray, sparse: bool, coef: np.ndarray | None,
                 out: np.ndarray | None) -> np.ndarray:
    """The per-row losses of the logits ``z`` (N, C), and their gradient written into ``out``.

    ``target``: int64 labels (N,) in ``0..C-1`` when ``sparse``, else targets (N, C) in ``z``'s
    type. ``coef`` (N,) in z's type: the factor of each row's gradient; ``out`` (N, C),
    C-contiguous, of z's type, receives ``coef[:, None] * dv/dz``; with ``out=None`` nothing but
    the losses is computed (``coef`` is then unused). ``z`` is C-contiguous. Returns the losses
    (N,) in float64 (each computed in z's type). No value is checked here: a NaN or Inf logit
    gives a NaN or Inf loss and gradient of its row.

    Per block of rows only what needs the block in the cache runs (the maximum, ``exp(z - m)``,
    its sum, the scaling); the per-row arithmetic (logarithms, the labels' logits, the labels'
    ``- coef``) runs once over all rows afterwards, so the number of numpy calls per block stays
    small.
    """
    N, C = z.shape
    rows = block_rows(C, z.itemsize)
    m = np.empty(N, z.dtype)
    s = np.empty(N, z.dtype)
    scratch = np.empty((min(rows, N), C), z.dtype) if out is None else None
    r = np.array(coef, dtype=z.dtype) if out is not None else m  # each row's gradient factor
    for lo in range(0, N, rows):
        hi = min(lo + rows, N)
        zb = z[lo:hi]
        eb = out[lo:hi] if out is not None else scratch[:hi - lo]  # type: ignore[index]
        mb = m[lo:hi]
        np.maximum.reduce(zb, axis=1, out=mb)
        np.subtract(zb, mb[:, None], out=eb)
        np.exp(eb, out=eb)
        sb = s[lo:hi]
        np.add.reduce(eb, axis=1, out=sb)
        if out is None:
            continue
        rb = r[lo:hi]
        if sparse:
            rb /= sb
        else:
            rb *= target[lo:hi].sum(axis=1)
            rb /= sb
        eb *= rb[:, None]
        if not sparse:
            eb -= coef[lo:hi, None] * target[lo:hi]  # type: ignore[index]
    log_s = np.log(s)
    if sparse:
        at = np.arange(N)
        if out is not None:
            out[at, target] -= coef  # type: ignore[operator]
        return (log_s - (z[at, target] - m)).astype(np.float64)
    ty = target.sum(axis=1)
    return ((m + log_s) * ty - np.einsum("ij,ij->i", target, z)).astype(np.float64)


class LogitsGradient(np.ndarray):
    """A loss gradient with respect to the LOGITS ``a`` of a softmax output ``y = softmax(a)``
    (over the last axis), not with respect to ``y``: what a model's objective hands to its
    ``Dense(..., activation="softmax")`` output layer when the loss is a cross-entropy on
    probabilities, so the layer skips its softmax vjp (:func:`softmax_xent_probs`). Any other
    consumer sees a plain array (``np.asarray`` drops the type)."""


def softmax_xent_probs(p: np.ndarray, target: np.ndarray, sparse: bool, coef: np.ndarray,
                       out: np.ndarray, eps: float) -> np.ndarray:
    """The probability cross-entropies (Keras' clip: ``q = clip(p / sum(p), eps, 1 - eps)``) of
    softmax outputs ``p`` (N, C), and their gradient with respect to the softmax's LOGITS written
    into ``out`` (times ``coef`` per row), in one blocked sweep (arguments as
    :func:`softmax_xent`). Through ``p = softmax(a)`` (whose rows sum to 1 for every ``a``) and
    straight through the clip::

        label l:    v = -log(q_l)               dv/da = (p_l / q_l) (p - onehot(l))
        targets y:  v = -sum_c y_c log(q_c)     dv/da = p (sum_c y_c p_c / q_c) - p y / q

    (``-onehot(l) + p`` and ``p sum(y) - y`` wherever nothing is clipped): the composition of
    the loss's gradient with respect to ``p`` and the softmax's vjp, to float rounding."""
    N, C = p.shape
    rows = block_rows(C, p.itemsize)
    v = np.empty(N, np.float64)
    lo_c, hi_c = p.dtype.type(eps), p.dtype.type(1.0 - eps)
    for lo in range(0, N, rows):
        hi = min(lo + rows, N)
        pb, gb, cb = p[lo:hi], out[lo:hi], coef[lo:hi]
        s = pb.sum(axis=1)
        if sparse:
            at, lab = np.arange(hi - lo), target[lo:hi]
            p_l = pb[at, lab]
            q_l = np.clip(p_l / s, lo_c, hi_c)
            v[lo:hi] = -np.log(q_l)
            r = cb * (p_l / q_l)
            np.multiply(pb, r[:, None], out=gb)
            gb[at, lab] -= r
        else:
            tb = target[lo:hi]
            np.divide(pb, s[:, None], out=gb)
            np.clip(gb, lo_c, hi_c, out=gb)
            v[lo:hi] = -np.einsum("ij,ij->i", tb, np.log(gb))
            np.divide(tb, gb, out=gb)                           # y / q
            c = np.einsum("ij,ij->i", gb, pb)                   # sum_c y_c p_c / q_c
            np.subtract(c[:, None], gb, out=gb)
            gb *= pb
            gb *= cb[:, None]
    return v
