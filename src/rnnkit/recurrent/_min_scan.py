"""The arithmetic that minGRU and minLSTM share (Feng et al., 2024, "Were RNNs All We Needed?",
arXiv:2410.01201): the positive activation ``g``, the gated blend, and its whole-sequence
(parallel) form as a log-space scan.

Both cells compute, for every unit, from a gate logit ``u`` and a candidate logit ``v``::

    z_t   = sigmoid(u_t)                    (minGRU: u = k_z; minLSTM: u = softplus(-k_f) - softplus(-k_i),
                                             so z = i / (f + i) and 1 - z = f / (f + i))
    h~_t  = g(v_t),   g(x) = x + 0.5 (x >= 0), sigmoid(x) (x < 0)     (g > 0: h stays positive)
    h_t   = (1 - z_t) * h_{t-1} + z_t * h~_t      =  a_t * h_{t-1} + b_t

The parallel form (Heinsen's scan) takes every step at once, in log space::

    log a_t = -softplus(u_t)                  log b_t = -softplus(-u_t) + log g(v_t)
    log g(x) = log(x + 0.5) (x >= 0), -softplus(-x) (x < 0)
    A_t     = cumsum_{s<=t} log a_s
    log h_t = A_t + logcumsumexp([log h_0, log b_1 - A_1, ..., log b_t - A_t])

A masked step (``mask`` False) carries the state: ``a = 1``, ``b = 0`` (log a = 0, log b = -inf).
``h_0`` must be >= 0 (``log 0 = -inf`` is the zero state). Float32 error of ``log h_t``: a few
ulps of ``|A_t|`` (it is the sum of two terms of that size), so a relative error in ``h_t`` of
about ``T * eps * max|log a|``.

The backward pass is the adjoint of the linear recurrence ``h_t = a_t h_{t-1} + b_t``, one
reverse sweep over the steps (``G`` = dL/dh_t in total)::

    G_t   = dh_t + a_{t+1} * G_{t+1}          (G_T = dh_T)
    du_t  = G_t * (h~_t - h_{t-1}) * z_t * (1 - z_t)
    dv_t  = G_t * z_t * g'(v_t),  g'(x) = 1 (x >= 0), sigmoid(x) (1 - sigmoid(x)) (x < 0)
    dh_0  = a_1 * G_1

Arrays are time-major (T, B, ·), in processing order, as the walker's. :class:`MinCell` puts
this parallel form on the cell contract's hook (``sequence_forward`` / ``sequence_backward``,
masks included), where the walker alone chooses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from rnnkit import kernels
from rnnkit._errors import InvalidInputError
from rnnkit._initializers import glorot_uniform
from rnnkit.recurrent._cell import Arrays, Cell, Param, SequenceBack


def compiled() -> ModuleType | None:
    """The compiled whole-sequence form (:mod:`rnnkit.kernels._min`: the same recurrence walked
    in linear space over vectorised units, one pass each way) in the ``"fast"`` kernel mode
    with numba installed; else None (the NumPy log-space form here)."""
    if kernels.mode() != "fast" or not kernels.available():
        return None
    # compiled with numba, an optional dependency: loaded on first use, once available() said so
    from rnnkit.kernels import _min
    return _min


def mask_u8(mask: np.ndarray | None) -> np.ndarray:
    """The compiled scan's mask: (T, B) uint8, or (0, 0) for none."""
    return np.zeros((0, 0), np.uint8) if mask is None else np.ascontiguousarray(mask, np.uint8)


def softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))``, without overflow."""
    return np.logaddexp(x.dtype.type(0.0), x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` as ``exp(-softplus(-x))``: accurate to rounding relative to its
    value, also far in the tails (where ``0.5 + 0.5 tanh(x / 2)`` loses every digit)."""
    return np.exp(-softplus(-x))


def g(x: np.ndarray) -> np.ndarray:
    """The positive activation: ``x + 0.5`` for x >= 0, ``sigmoid(x)`` otherwise."""
    return np.where(x >= 0, x + x.dtype.type(0.5), sigmoid(np.minimum(x, 0)))


def g_grad(x: np.ndarray) -> np.ndarray:
    """``g'(x)``: 1 for x >= 0, ``sigmoid(x) (1 - sigmoid(x))`` otherwise."""
    s = sigmoid(np.minimum(x, 0))
    return np.where(x >= 0, x.dtype.type(1.0), s * (1 - s))


def log_g(x: np.ndarray) -> np.ndarray:
    """``log g(x)``: ``log(x + 0.5)`` for x >= 0, ``-softplus(-x)`` otherwise."""
    return np.where(x >= 0, np.log(np.maximum(x, 0) + x.dtype.type(0.5)), -softplus(-np.minimum(x, 0)))


def check_state(h0: np.ndarray, where: str) -> None:
    """The state of a minGRU / minLSTM lives in ``g``'s range: refuse a negative or non-finite one."""
    bad = ~(np.isfinite(h0) & (h0 >= 0))
    if bad.any():
        raise InvalidInputError(
            f"{where}: the state h of a min cell is >= 0 (a blend of g(x) > 0 and the state before it, "
            f"which the log-space scan takes the log of); the initial state has {int(bad.sum())} "
            f"negative or non-finite entries (min {np.nanmin(h0)!r})")


def scan_forward(u: np.ndarray, v: np.ndarray, h0: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The log-space scan (module docstring): ``u``, ``v`` (T, B, H), ``h0`` (B, H) >= 0,
    ``mask`` (T, B) or None. Returns the states (T+1, B, H): row 0 is ``h0``, row t+1 leaves step t."""
    log_a = -softplus(u)
    log_b = log_g(v) - softplus(-u)
    if mask is not None:
        m = mask[:, :, None]
        log_a = np.where(m, log_a, log_a.dtype.type(0.0))
        log_b = np.where(m, log_b, log_b.dtype.type(-np.inf))
    A = np.cumsum(log_a, axis=0)
    T, B, H = u.shape
    terms = np.empty((T + 1, B, H), u.dtype)
    with np.errstate(divide="ignore"):   # log 0 = -inf: the zero state adds nothing
        terms[0] = np.log(h0)
    np.subtract(log_b, A, out=terms[1:])
    np.logaddexp.accumulate(terms, axis=0, out=terms)
    hist = np.empty((T + 1, B, H), u.dtype)
    hist[0] = h0
    np.exp(terms[1:] + A, out=hist[1:])
    return hist


def scan_backward(u: np.ndarray, v: np.ndarray, hist: np.ndarray, dh: np.ndarray,
                  mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The adjoint of :func:`scan_forward` (module docstring): from ``dh`` (T, B, H), the
    gradient reaching each step's output from outside the recurrence, returns (du, dv, dh0)."""
    z = sigmoid(u)
    a = 1 - z
    if mask is not None:
        a = np.where(mask[:, :, None], a, a.dtype.type(1.0))
    T = u.shape[0]
    G = np.empty_like(dh)
    G[T - 1] = dh[T - 1]
    for t in range(T - 2, -1, -1):
        np.multiply(a[t + 1], G[t + 1], out=G[t])
        G[t] += dh[t]
    dh0 = a[0] * G[0]
    du = G * (g(v) - hist[:-1]) * z * a
    dv = G * z * g_grad(v)
    if mask is not None:
        m = mask[:, :, None]
        du = np.where(m, du, du.dtype.type(0.0))
        dv = np.where(m, dv, dv.dtype.type(0.0))
    return du, dv, dh0


class MinCell(Cell):
    """What :class:`~rnnkit.recurrent._min_gru.MinGRUCell` and
    :class:`~rnnkit.recurrent._min_lstm.MinLSTMCell` share: the input kernel ``kernel`` (F, k*H)
    (the walker projects ``x @ kernel``; the cell adds its (k*H,) ``bias``), the state ``h`` >= 0
    (:meth:`check_init`), and the parallel form (the scan above; in the ``"fast"`` kernel mode
    the compiled recurrence of :mod:`rnnkit.kernels._min`): :meth:`parallel_forward` /
    :meth:`parallel_backward`, masks included
    (:attr:`~rnnkit.Cell.sequence_takes_mask`: a masked step is ``a = 1``, ``b = 0``). Both
    forms park ``k = inp + bias`` (T, B, k*H), so either backward can follow either forward.
    A subclass gives its step, :attr:`scan_kind`, :meth:`logit` and :meth:`dk`, and names the
    parallel form its ``sequence_forward`` / ``sequence_backward`` in its own body, beside its
    step (a parallel form counts only for the class that declares it with its step:
    :func:`rnnkit.recurrent._walker.has_sequence_form`)."""

    input_kernel = "kernel"
    sequence_takes_mask = True
    #: the compiled scan's ``kind`` (:mod:`rnnkit.kernels._min`): 0 minGRU, 1 minLSTM
    scan_kind: ClassVar[int]
    #: the kernel's column blocks (minGRU ``[z | h~]``: 2, minLSTM ``[f | i | h~]``: 3)
    blocks: ClassVar[int]

    def __init__(self, units: int) -> None:
        super().__init__(units)

    def params(self, input_dim: int) -> list[Param]:
        """``kernel`` (F, blocks*H), Glorot-uniform with the fan of one block (F + H); ``bias``
        (blocks*H,), zeros."""
        H, n = self.units, self.blocks
        return [Param("kernel", (input_dim, n * H),
                      lambda rng, shape, dt: glorot_uniform(rng, shape, input_dim, H, dt)),
                Param("bias", (n * H,), lambda rng, shape, dt: np.zeros(shape, dt))]

    def get_config(self) -> dict[str, Any]:
        return {"units": self.units}

    def check_init(self, init: Arrays, where: str) -> None:
        check_state(init[0], where)

    def logit(self, k: np.ndarray) -> np.ndarray:
        """The gate logit ``u`` (T, B, H) from ``k`` (T, B, k*H)."""
        raise NotImplementedError(f"{type(self).__name__}.logit")

    def dk(self, k: np.ndarray, du: np.ndarray, dv: np.ndarray) -> np.ndarray:
        """dL/dk (T, B, k*H) from dL/du and dL/dv (T, B, H)."""
        raise NotImplementedError(f"{type(self).__name__}.dk")

    def parallel_forward(self, w: Mapping[str, np.ndarray], inp: np.ndarray, init: Arrays,
                         park: dict[str, np.ndarray] | None, mask: np.ndarray | None = None) -> Arrays:
        """``sequence_forward`` (:meth:`rnnkit.Cell.sequence_forward`) of the min cells."""
        H = self.units
        k = inp + w["bias"]
        (h0,) = init
        kern = compiled()
        if kern is not None:
            hist = np.empty((k.shape[0] + 1, k.shape[1], H), k.dtype)
            kern.scan_forward(k, self.scan_kind, np.ascontiguousarray(h0, k.dtype), mask_u8(mask), hist)
        else:
            hist = scan_forward(self.logit(k), k[:, :, -H:], h0, mask)
        if park is not None:
            park["k"] = k
        return (hist[1:],)

    def parallel_backward(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None,
                          init: Arrays, states: Arrays, park: Mapping[str, np.ndarray],
                          mask: np.ndarray | None = None) -> SequenceBack:
        """``sequence_backward`` (:meth:`rnnkit.Cell.sequence_backward`) of the min cells."""
        H = self.units
        k = park["k"]
        (dh,) = d
        kern = compiled()
        if kern is not None:
            dk, dh0 = np.empty_like(k), np.empty((k.shape[1], H), k.dtype)
            kern.scan_backward(k, self.scan_kind, np.ascontiguousarray(init[0], k.dtype),
                               np.ascontiguousarray(states[0], k.dtype), np.ascontiguousarray(dh, k.dtype),
                               mask_u8(mask), dk, dh0)
        else:
            hist = np.concatenate([init[0][None], states[0]])     # row t enters step t
            du, dv, dh0 = scan_backward(self.logit(k), k[:, :, -H:], hist, dh, mask)
            dk = self.dk(k, du, dv)
        return SequenceBack(d_init=(dh0,), d_inp=dk, params={"bias": dk.reshape(-1, dk.shape[2]).sum(axis=0)})
