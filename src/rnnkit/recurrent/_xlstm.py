"""xLSTM's two cells, sLSTM and mLSTM (Beck et al., 2024, "xLSTM: Extended Long Short-Term
Memory", arXiv:2405.04517), on the cell contract, and mLSTM's parallel and chunkwise forms.

Both cells have an exponential input gate and a forget gate that is a sigmoid or an
exponential (``forget_gate="sigmoid" | "exp"``), kept in range by a stabilizer state ``m``
(the log of a common scale of the cell and normalizer states: it never changes the output).
``log f`` is ``log(sigmoid(f~))`` or ``f~``. From zero states (``m_0 = 0``), each step::

    m_t  = max(log f_t + m_{t-1}, i~_t)
    i'_t = exp(i~_t - m_t)                f'_t = exp(log f_t + m_{t-1} - m_t)

sLSTM (per unit; H units in ``num_heads`` heads of ``dh = H / num_heads``; the recurrent
matrices are block-diagonal, one (dh, dh) block per head and gate)::

    [i~ | f~ | z~ | o~] = x_t W + b + h_{t-1} R        (R block-diagonal)
    c_t = f'_t c_{t-1} + i'_t tanh(z~)   n_t = f'_t n_{t-1} + i'_t   h_t = sigmoid(o~) c_t / n_t

mLSTM (per head: a (dh, dh) matrix memory C, a normalizer n (dh), one i~, f~, m per head; no
recurrent weights)::

    [q | k | v | o~ | i~ | f~] = x_t W + b,  k scaled by 1/sqrt(dh)
    C_t = f'_t C_{t-1} + i'_t v_t k_t^T      n_t = f'_t n_{t-1} + i'_t k_t
    h_t = sigmoid(o~) * C_t q_t / max(|n_t^T q_t|, exp(-m_t))

The unstabilized states are ``C_t exp(m_t)``, ``n_t exp(m_t)``; in those terms the mLSTM
denominator is the paper's ``max(|n^T q|, 1)``, and h is the same for every choice of the
stabilizer. Hence the parallel form's backward treats its row maxima as constants: it is the
exact gradient.

Parallel form (whole sequence from C_0, n_0, m_0; per head, ``F_t = sum_{j<=t} log f_j``)::

    log D_ts = F_t - F_s + i~_s  (s <= t; -inf above the diagonal)
    m_t = max(F_t + m_0, max_s log D_ts)        g_t = exp(F_t + m_0 - m_t)     (the recurrent m_t)
    C~ = (Q K^T) * exp(log D - m)     b_t = sum_s C~_ts + g_t n_0 . q_t
    H_t = (C~ V + g_t C_0 q_t)_t / max(|b_t|, exp(-m_t))
    C_T = g_T C_0 + sum_s exp(log D_Ts - m_T) v_s k_s^T    (n_T alike)

Chunkwise form: chunks of ``chunk_size`` steps, the parallel form inside a chunk plus the
state carried from the chunk before (stabilized the same way); it ends with the same state as
the recurrent form.

The functions :func:`mlstm_parallel`, :func:`mlstm_parallel_back` and :func:`mlstm_chunkwise`
are :class:`MLSTMCell`'s parallel form on the cell contract's hook (``sequence_forward`` /
``sequence_backward``), which the walker chooses for a pass of two steps or more without a
mask (from zeros or a given state); any other pass runs the recurrent form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnkit._budget import check_array
from rnnkit._errors import InvalidParameterError
from rnnkit._initializers import glorot_uniform
from rnnkit._layer import check_positive_int
from rnnkit.recurrent._base import RecurrentLayer
from rnnkit.recurrent._cell import Arrays, Cell, Param, SequenceBack, StepBack
from rnnkit.recurrent._registry import register_cell

#: the forget-gate activations: ``"sigmoid"`` (log f = log sigmoid(f~), the paper's reference
#: code) or ``"exp"`` (log f = f~)
FORGET_GATES = ("sigmoid", "exp")
#: the paper's default number of heads
PAPER_HEADS = 4


def _sig(v: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.tanh(0.5 * v)  # type: ignore[no-any-return]


def _check_heads(num_heads: Any, units: int, where: str) -> int:
    nh = check_positive_int(num_heads, "num_heads", where)
    if units % nh:
        raise InvalidParameterError(
            f"{where}: units must be a multiple of num_heads (each head gets units / num_heads "
            f"units), got units={units}, num_heads={nh}")
    return nh


def _check_forget(forget_gate: Any, where: str) -> str:
    if not isinstance(forget_gate, str) or forget_gate not in FORGET_GATES:
        raise InvalidParameterError(f"{where}: forget_gate must be one of {list(FORGET_GATES)}, "
                                    f"got {forget_gate!r}")
    return forget_gate


def _forget_bias(n: int, forget_gate: str) -> np.ndarray:
    """The forget-gate bias at init: f = sigmoid(linspace(3, 6)) (0.95 .. 0.998) for either
    activation (``"exp"``: the bias log sigmoid(linspace(3, 6)) gives the same f)."""
    b = np.linspace(3.0, 6.0, n)
    return b if forget_gate == "sigmoid" else -np.logaddexp(0.0, -b)  # type: ignore[no-any-return]


class _XCell(Cell):
    """What sLSTM and mLSTM share: heads, the forget gate, the stabilized gates."""

    input_kernel: str | None = "kernel"
    bias: str | None = "bias"

    def __init__(self, units: int, num_heads: int = PAPER_HEADS, *, forget_gate: str = "sigmoid") -> None:
        super().__init__(units, "tanh")
        self.num_heads = _check_heads(num_heads, self.units, self.name)
        self.forget_gate = _check_forget(forget_gate, self.name)

    @property
    def head_size(self) -> int:
        return self.units // self.num_heads

    def get_config(self) -> dict[str, Any]:
        return {"units": self.units, "num_heads": self.num_heads, "forget_gate": self.forget_gate}

    def log_forget(self, af: np.ndarray) -> np.ndarray:
        """log f from the forget pre-activation ``af``."""
        return af if self.forget_gate == "exp" else -np.logaddexp(0.0, -af)  # type: ignore[no-any-return]

    def dlog_forget(self, af: np.ndarray, g: np.ndarray) -> np.ndarray:
        """dL/d(af) from ``g`` = dL/d(log f)."""
        return g if self.forget_gate == "exp" else g * _sig(-af)

    def gates(self, ai: np.ndarray, af: np.ndarray, m_prev: np.ndarray) -> Arrays:
        """(log f + m_prev, m, i', f') of the stabilized gates."""
        lfm = self.log_forget(af) + m_prev
        m = np.maximum(lfm, ai)
        return lfm, m, np.exp(ai - m), np.exp(lfm - m)

    def gates_back(self, ai: np.ndarray, af: np.ndarray, lfm: np.ndarray, ip: np.ndarray, fp: np.ndarray,
                   dip: np.ndarray, dfp: np.ndarray, dm: np.ndarray) -> Arrays:
        """(dL/d(ai), dL/d(af), dL/d(m_prev)) from dL/d(i'), dL/d(f'), dL/d(m) (the max routes
        dm to ``log f + m_prev`` where it is >= ``ai``)."""
        gi, gf = dip * ip, dfp * fp
        dm_tot = dm - gi - gf
        to_f = lfm >= ai
        dlfm = gf + np.where(to_f, dm_tot, 0.0)
        dai = gi + np.where(to_f, 0.0, dm_tot)
        return dai, self.dlog_forget(af, dlfm), dlfm


class SLSTMCell(_XCell):
    """The sLSTM cell (see the module docstring for the equations).

    ``SLSTMCell(units, num_heads=4, *, forget_gate="sigmoid")``: ``units`` H a multiple of
    ``num_heads`` (the paper's 4 heads by default). State ``SLSTMState(h, c, n, m)``, each
    (B, H); part 0, h, is the output.

    Weights: ``kernel`` W (F, 4H), gates ``[i | f | z | o]`` each H wide (heads contiguous
    inside a gate), Glorot-uniform (per-gate fan F + H); ``recurrent_kernel`` R
    (num_heads, dh, 4 dh), per head the columns ``[i | f | z | o]`` each dh wide,
    Glorot-uniform (fan dh + dh); ``bias`` (1, 4H) zeros but the forget gate's, which starts
    at f = sigmoid(linspace(3, 6)). ``param_count = 4 (F H + H dh + H)``.
    """

    name = "SLSTM"
    state_names = ("h", "c", "n", "m")

    def params(self, input_dim: int) -> list[Param]:
        H, nh, dh = self.units, self.num_heads, self.head_size

        def bias(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
            b = np.zeros(shape, dt)
            b[0, H:2 * H] = _forget_bias(H, self.forget_gate)
            return b

        return [
            Param("kernel", (input_dim, 4 * H),
                  lambda rng, shape, dt: glorot_uniform(rng, shape, input_dim, H, dt)),
            Param("recurrent_kernel", (nh, dh, 4 * dh),
                  lambda rng, shape, dt: glorot_uniform(rng, shape, dh, dh, dt)),
            Param("bias", (1, 4 * H), bias),
        ]

    def recurrent(self, R: np.ndarray, h: np.ndarray) -> np.ndarray:
        """h @ blockdiag(R) in the gate layout: (B, H) -> (B, 4H)."""
        B, (nh, dh, _) = h.shape[0], R.shape
        r = np.matmul(h.reshape(B, nh, dh).transpose(1, 0, 2), R)          # (nh, B, 4 dh)
        return r.reshape(nh, B, 4, dh).transpose(1, 2, 0, 3).reshape(B, 4 * nh * dh)

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        H = self.units
        h_prev, c_prev, n_prev, m_prev = prev
        a = inp + self.recurrent(w["recurrent_kernel"], h_prev)
        _, m, ip, fp = self.gates(a[:, :H], a[:, H:2 * H], m_prev)
        c = fp * c_prev + ip * np.tanh(a[:, 2 * H:3 * H])
        n = fp * n_prev + ip
        if park is not None:
            park["gates"] = a
        return (_sig(a[:, 3 * H:]) * (c / n), c, n, m)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> StepBack:
        H, R = self.units, w["recurrent_kernel"]
        dh, dc, dn, dm = d
        h_prev, c_prev, n_prev, m_prev = prev
        _, c, n, m = new
        a = park["gates"]
        ai, af = a[:, :H], a[:, H:2 * H]
        lfm = self.log_forget(af) + m_prev
        ip, fp = np.exp(ai - m), np.exp(lfm - m)
        z, o = np.tanh(a[:, 2 * H:3 * H]), _sig(a[:, 3 * H:])
        ht = c / n
        dao = dh * ht * o * (1.0 - o)
        dht = dh * o
        dc = dc + dht / n
        dn = dn - dht * ht / n
        daz = dc * ip * (1.0 - z * z)
        dai, daf, dm_prev = self.gates_back(ai, af, lfm, ip, fp, dc * z + dn, dc * c_prev + dn * n_prev, dm)
        da = np.concatenate([dai, daf, daz, dao], axis=1)
        B, (nh, dh_, _) = da.shape[0], R.shape
        dar = da.reshape(B, 4, nh, dh_).transpose(2, 0, 1, 3).reshape(nh, B, 4 * dh_)
        hr = h_prev.reshape(B, nh, dh_).transpose(1, 0, 2)
        dh_prev = np.matmul(dar, R.transpose(0, 2, 1)).transpose(1, 0, 2).reshape(B, H)
        dR = np.matmul(hr.transpose(0, 2, 1), dar)
        return StepBack(d_prev=(dh_prev, dc * fp, dn * fp, dm_prev), d_inp=da,
                        params={"recurrent_kernel": dR})


class MLSTMCell(_XCell):
    """The mLSTM cell (see the module docstring for the equations).

    ``MLSTMCell(units, num_heads=4, *, forget_gate="sigmoid")``: ``units`` H a multiple of
    ``num_heads`` (the paper's 4 heads by default), head size dh = H / num_heads. State
    ``MLSTMState(h, C, n, m)``: h (B, H) the output, C (B, num_heads * dh * dh) the matrix
    memories (head-major, each row-major: ``C[b].reshape(num_heads, dh, dh)[k, i, j]`` multiplies
    ``q_j`` into ``h_i``), n (B, H), m (B, num_heads).

    Weights: ``kernel`` W (F, 4H + 2 num_heads), columns ``[q | k | v | o | i | f]`` (q, k, v,
    o each H wide, heads contiguous; i and f one column per head); q, k, v, o Glorot-uniform
    (fan F + H), i and f zeros; ``bias`` (1, 4H + 2 num_heads): zeros, but i's normal
    (std 0.1) and f's at f = sigmoid(linspace(3, 6)) across the heads (the paper's reference
    code). ``param_count = (F + 1)(4H + 2 num_heads)``.

    ``qkv_blocksize=s`` (default None: dense q, k, v): q, k and v come from block-diagonal
    projections of the input, as in the paper's mLSTM block (which uses s = 4): the input
    width F must equal H, and ``qkv_kernel`` (3, H / s, s, s) holds the blocks (Glorot-uniform,
    fan s + s; ``q[..., j*s:(j+1)*s] = x[..., j*s:(j+1)*s] @ qkv_kernel[0, j]``); ``kernel`` is
    then (F, H + 2 num_heads), columns ``[o | i | f]``, and the bias keeps its layout. Such a
    cell projects its input itself (the walker hands it the raw step input).
    ``param_count = 3 H s + (F + 1)(H + 2 num_heads) + 3H``.
    """

    name = "MLSTM"
    state_names = ("h", "C", "n", "m")
    #: the parallel form returns the matrix memory C, n and m of the last step only
    sequence_last_states = True

    def __init__(self, units: int, num_heads: int = PAPER_HEADS, *, forget_gate: str = "sigmoid",
                 qkv_blocksize: int | None = None, chunk_size: int | None = 64) -> None:
        super().__init__(units, num_heads, forget_gate=forget_gate)
        self.chunk_size = (None if chunk_size is None
                           else check_positive_int(chunk_size, "chunk_size", self.name))
        self.qkv_blocksize = None
        if qkv_blocksize is not None:
            s = check_positive_int(qkv_blocksize, "qkv_blocksize", self.name)
            if self.units % s:
                raise InvalidParameterError(
                    f"{self.name}: units must be a multiple of qkv_blocksize (the q, k, v projections "
                    f"are blocks of qkv_blocksize), got units={self.units}, qkv_blocksize={s}")
            self.qkv_blocksize = s
            self.input_kernel = None      # the cell projects its raw step input itself
            self.bias = None

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "qkv_blocksize": self.qkv_blocksize, "chunk_size": self.chunk_size}

    def project(self, w: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """The step inputs ``[q | k | v | o | i | f]`` (..., N) of inputs ``x`` (..., F)."""
        b = w["bias"][0]
        s = self.qkv_blocksize
        if s is None:
            return x @ w["kernel"] + b  # type: ignore[no-any-return]
        lead, H = x.shape[:-1], self.units
        xb = x.reshape(-1, H // s, s)
        qkv = np.matmul(xb.transpose(1, 0, 2)[None], w["qkv_kernel"])          # (3, H/s, R, s)
        qkv = qkv.transpose(0, 2, 1, 3).reshape(3, -1, H)
        rest = x.reshape(-1, x.shape[-1]) @ w["kernel"]
        out = np.concatenate([qkv[0], qkv[1], qkv[2], rest], axis=-1) + b
        return out.reshape(*lead, -1)  # type: ignore[no-any-return]

    def project_back(self, w: Mapping[str, np.ndarray], x: np.ndarray, d: np.ndarray,
                     need_dx: bool = True) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """(dL/dx, {weight: gradient}) of :meth:`project` from ``d`` = dL/d(step inputs)."""
        F, N = x.shape[-1], d.shape[-1]
        x2, d2 = x.reshape(-1, F), d.reshape(-1, N)
        grads = {"bias": d2.sum(axis=0, keepdims=True)}
        s = self.qkv_blocksize
        if s is None:
            grads["kernel"] = x2.T @ d2
            return (d2 @ w["kernel"].T).reshape(x.shape) if need_dx else None, grads
        H = self.units
        xb = x2.reshape(-1, H // s, s).transpose(1, 0, 2)                        # (H/s, R, s)
        dqkv = d2[:, :3 * H].reshape(-1, 3, H // s, s).transpose(1, 2, 0, 3)      # (3, H/s, R, s)
        grads["qkv_kernel"] = np.matmul(xb.transpose(0, 2, 1)[None], dqkv)
        grads["kernel"] = x2.T @ d2[:, 3 * H:]
        if not need_dx:
            return None, grads
        dx = np.matmul(dqkv, w["qkv_kernel"].transpose(0, 1, 3, 2)).sum(axis=0)   # (H/s, R, s)
        dx = dx.transpose(1, 0, 2).reshape(-1, F) + d2[:, 3 * H:] @ w["kernel"].T
        return dx.reshape(x.shape), grads

    def state_sizes(self) -> tuple[int, ...]:
        H, nh, dh = self.units, self.num_heads, self.head_size
        return (H, nh * dh * dh, H, nh)

    @property
    def width(self) -> int:
        """The step input's width, 4H + 2 num_heads."""
        return 4 * self.units + 2 * self.num_heads

    def params(self, input_dim: int) -> list[Param]:
        H, nh, s = self.units, self.num_heads, self.qkv_blocksize
        if s is not None and input_dim != H:
            raise InvalidParameterError(
                f"{self.name}: block-diagonal q, k, v projections (qkv_blocksize={s}) keep the width: "
                f"the input must have units={H} features, got {input_dim}")
        dense = 4 * H if s is None else H

        def kernel(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
            k = np.zeros(shape, dt)
            k[:, :dense] = glorot_uniform(rng, (input_dim, dense), input_dim, H, dt)
            return k

        if s is not None:
            return [Param("qkv_kernel", (3, H // s, s, s),
                          lambda rng, shape, dt: glorot_uniform(rng, shape, s, s, dt)),
                    Param("kernel", (input_dim, H + 2 * nh), kernel),
                    Param("bias", (1, self.width), self._bias)]
        return [Param("kernel", (input_dim, self.width), kernel), Param("bias", (1, self.width), self._bias)]

    def _bias(self, rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        H, nh = self.units, self.num_heads
        b = np.zeros(shape, dt)
        b[0, 4 * H:4 * H + nh] = rng.normal(0.0, 0.1, nh)
        b[0, 4 * H + nh:] = _forget_bias(nh, self.forget_gate)
        return b

    def split(self, inp: np.ndarray) -> Arrays:
        """(q, k scaled, v) (..., nh, dh), o~ (..., H), i~, f~ (..., nh) of a step input (..., N)."""
        H, nh, dh = self.units, self.num_heads, self.head_size
        lead = inp.shape[:-1]
        q = inp[..., :H].reshape(*lead, nh, dh)
        k = inp[..., H:2 * H].reshape(*lead, nh, dh) * (1.0 / math.sqrt(dh))
        v = inp[..., 2 * H:3 * H].reshape(*lead, nh, dh)
        return q, k, v, inp[..., 3 * H:4 * H], inp[..., 4 * H:4 * H + nh], inp[..., 4 * H + nh:]

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        if self.qkv_blocksize is not None:   # the raw step input: project it here
            inp = self.project(w, inp)
        B, nh, dh = inp.shape[0], self.num_heads, self.head_size
        _, C_prev, n_prev, m_prev = prev
        q, k, v, ao, ai, af = self.split(inp)
        _, m, ip, fp = self.gates(ai, af, m_prev)
        C = (fp[:, :, None, None] * C_prev.reshape(B, nh, dh, dh)
             + ip[:, :, None, None] * (v[..., :, None] * k[..., None, :]))
        n = fp[:, :, None] * n_prev.reshape(B, nh, dh) + ip[:, :, None] * k
        num = np.matmul(C, q[..., None])[..., 0]
        den = np.maximum(np.abs(np.sum(n * q, axis=-1)), np.exp(-m))
        if park is not None:
            park["inp"] = inp
        h = _sig(ao) * (num / den[..., None]).reshape(B, -1)
        return (h, C.reshape(B, -1), n.reshape(B, -1), m)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> StepBack:
        x = park["inp"]       # the projected step input
        B, nh, dh = x.shape[0], self.num_heads, self.head_size
        dh_out, dC, dn, dm = d
        _, C_prev, n_prev, m_prev = prev
        _, C, n, m = new
        C_prev, n_prev = C_prev.reshape(B, nh, dh, dh), n_prev.reshape(B, nh, dh)
        C, n = C.reshape(B, nh, dh, dh), n.reshape(B, nh, dh)
        q, k, v, ao, ai, af = self.split(x)
        lfm = self.log_forget(af) + m_prev
        ip, fp = np.exp(ai - m), np.exp(lfm - m)
        num = np.matmul(C, q[..., None])[..., 0]
        dot = np.sum(n * q, axis=-1)
        em = np.exp(-m)
        den = np.maximum(np.abs(dot), em)
        ht = num / den[..., None]
        o = _sig(ao)
        dao = dh_out * ht.reshape(B, -1) * o * (1.0 - o)
        dht = (dh_out * o).reshape(B, nh, dh)
        dnum = dht / den[..., None]
        dden = -np.sum(dht * ht, axis=-1) / den
        use_dot = np.abs(dot) >= em
        ddot = np.where(use_dot, dden * np.sign(dot), 0.0)
        dm = dm + np.where(use_dot, 0.0, -dden * em)
        dCt = dC.reshape(B, nh, dh, dh) + dnum[..., :, None] * q[..., None, :]
        dq = np.matmul(dnum[..., None, :], C)[..., 0, :] + ddot[..., None] * n
        dnt = dn.reshape(B, nh, dh) + ddot[..., None] * q
        dCk = np.matmul(dCt, k[..., None])[..., 0]                          # sum_j dC_ij k_j
        dCv = np.matmul(v[..., None, :], dCt)[..., 0, :]                    # sum_i v_i dC_ij
        dip = np.sum(v * dCk, axis=-1) + np.sum(dnt * k, axis=-1)
        dfp = np.sum(dCt * C_prev, axis=(-2, -1)) + np.sum(dnt * n_prev, axis=-1)
        dai, daf, dm_prev = self.gates_back(ai, af, lfm, ip, fp, dip, dfp, dm)
        dv = ip[..., None] * dCk
        dk = ip[..., None] * (dCv + dnt) * (1.0 / math.sqrt(dh))
        d_inp = np.concatenate([dq.reshape(B, -1), dk.reshape(B, -1), dv.reshape(B, -1), dao, dai, daf],
                               axis=1)
        d_prev = (np.zeros_like(dh_out), (fp[..., None, None] * dCt).reshape(B, -1),
                  (fp[..., None] * dnt).reshape(B, -1), dm_prev)
        if self.qkv_blocksize is None:
            return StepBack(d_prev=d_prev, d_inp=d_inp)
        assert inp is not None
        dx, grads = self.project_back(w, inp, d_inp)
        assert dx is not None
        return StepBack(d_prev=d_prev, d_inp=dx, params=grads)


    # -- the parallel form, on the cell contract's hook -------------------------------------------
    def sequence_forward(self, w: Mapping[str, np.ndarray], inp: np.ndarray, init: Arrays,
                         park: dict[str, np.ndarray] | None) -> Arrays:
        """Every step at once (time-major, processing order): h of every step (T, B, H) and the
        final C, n, m (1, B, size) (:attr:`sequence_last_states`). A recorded pass (``park``)
        runs :func:`mlstm_parallel` (T x T per head), an inference pass :func:`mlstm_chunkwise`
        with :attr:`chunk_size` steps a chunk (None: the parallel form)."""
        x = inp.transpose(1, 0, 2)
        xb = self.project(w, x) if self.qkv_blocksize is not None else x
        start = init[1:]
        if park is None and self.chunk_size is not None:
            h, final = mlstm_chunkwise(self, xb, self.chunk_size, start)
        else:
            h, final, cache = mlstm_parallel(self, xb, start, record=park is not None)
            if park is not None:
                assert cache is not None
                park.update(vars(cache))
        return (h.transpose(1, 0, 2), *(a[None] for a in final))

    def sequence_backward(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None,
                          init: Arrays, states: Arrays, park: Mapping[str, np.ndarray]) -> SequenceBack:
        """The backward of :meth:`sequence_forward`'s recorded pass: :func:`mlstm_parallel_back`
        (and, for block-diagonal q, k, v, the projection's backward)."""
        cache = ParallelCache(**park)
        d_inp, d_init = mlstm_parallel_back(self, cache, d[0].transpose(1, 0, 2), tuple(a[0] for a in d[1:]))
        d_init = (np.zeros_like(init[0]), *d_init)
        d_tm = d_inp.transpose(1, 0, 2)
        if self.qkv_blocksize is None:
            return SequenceBack(d_init=d_init, d_inp=d_tm)
        assert inp is not None
        dx, grads = self.project_back(w, inp, d_tm)
        assert dx is not None
        return SequenceBack(d_init=d_init, d_inp=dx, params=grads)


for _c in (SLSTMCell, MLSTMCell):
    register_cell(_c)


# -- mLSTM's parallel and chunkwise forms ------------------------------------------------------

@dataclass(eq=False)
class ParallelCache:
    """What :func:`mlstm_parallel` keeps for :func:`mlstm_parallel_back` (per head: (B, nh, ...))."""

    inp: np.ndarray        # (B, T, N) the step inputs
    Ct: np.ndarray         # (B, nh, T, T) (Q K^T) * D
    D: np.ndarray          # (B, nh, T, T) exp(log D - m)
    S: np.ndarray          # (B, nh, T, T) Q K^T
    Hn: np.ndarray         # (B, nh, T, dh) the normalized heads
    den: np.ndarray        # (B, nh, T)
    use_b: np.ndarray      # (B, nh, T) bool: |b| >= exp(-m)
    b: np.ndarray          # (B, nh, T)
    gC: np.ndarray         # (B, nh, T) exp(F_t + m_0 - m_t): the initial state's weight at step t
    u: np.ndarray          # (B, nh, T, dh) C_0 q_t
    r: np.ndarray          # (B, nh, T) n_0 . q_t
    C0: np.ndarray         # (B, nh, dh, dh) the initial state
    n0: np.ndarray         # (B, nh, dh)
    wS: np.ndarray         # (B, nh, T) exp(F_T - F_s + i~_s - m_T): step s's weight in the final state
    last: np.ndarray       # (B, nh) int: argmax of m_T's terms (T: the initial state's, F_T + m_0)


def _heads(a: np.ndarray) -> np.ndarray:
    """(B, T, nh, dh) -> (B, nh, T, dh)."""
    return a.transpose(0, 2, 1, 3)


def _init_heads(cell: MLSTMCell, init: Arrays | None, B: int, dt: np.dtype) -> Arrays:
    """(C (B, nh, dh, dh), n (B, nh, dh), m (B, nh)) of ``init`` = (C, n, m) in the state layout
    of :class:`MLSTMCell` (None: zeros)."""
    nh, dh = cell.num_heads, cell.head_size
    if init is None:
        return np.zeros((B, nh, dh, dh), dt), np.zeros((B, nh, dh), dt), np.zeros((B, nh), dt)
    return (np.asarray(init[0], dt).reshape(B, nh, dh, dh), np.asarray(init[1], dt).reshape(B, nh, dh),
            np.asarray(init[2], dt).reshape(B, nh))


def mlstm_parallel(cell: MLSTMCell, inp: np.ndarray, init: Arrays | None = None, record: bool = False
                   ) -> tuple[np.ndarray, Arrays, ParallelCache | None]:
    """mLSTM over a whole sequence by the parallel form from ``init`` = (C, n, m) in the state
    layout of :class:`MLSTMCell` (None: zeros): ``inp`` (B, T, N) the step inputs ``x W + b``;
    returns (h (B, T, H), the final (C, n, m), equal to the recurrent form's, and the cache when
    ``record``). With ``F_t = sum_{j<=t} log f_j``, the stabilizer of step ``t`` is the
    recurrent form's, ``m_t = max(F_t + m_0, max_{s<=t} log D_ts)``; the initial state enters
    step ``t`` with the weight ``exp(F_t + m_0 - m_t)``. Its (B, num_heads, T, T) arrays are
    refused (MemoryBudgetError) over the memory budget per array
    (``rnnkit.io.set_limits(max_array_bytes=...)``)."""
    B, T, _ = inp.shape
    check_array((B, cell.num_heads, T, T), inp.itemsize, "MLSTM's parallel form, its decay matrix")
    C0, n0, m0 = _init_heads(cell, init, B, inp.dtype)
    q, k, v, ao, ai, af = cell.split(inp)
    q, k, v = _heads(q), _heads(k), _heads(v)                                  # (B, nh, T, dh)
    ai, F = ai.transpose(0, 2, 1), np.cumsum(cell.log_forget(af).transpose(0, 2, 1), axis=-1)
    logD = F[..., :, None] - F[..., None, :] + ai[..., None, :]
    logD[..., ~np.tri(T, dtype=bool)] = -np.inf
    carry = F + m0[..., None]                                                   # (B, nh, T)
    m = np.maximum(logD.max(axis=-1), carry)
    last = np.where(carry[..., -1] >= logD[..., -1, :].max(axis=-1), T, logD[..., -1, :].argmax(axis=-1))
    D = np.exp(logD - m[..., None], out=logD)
    gC = np.exp(carry - m)
    S = np.matmul(q, k.swapaxes(-1, -2))
    Ct = S * D
    u = np.matmul(q, C0.swapaxes(-1, -2))                                       # C_0 q_t
    r = np.sum(q * n0[..., None, :], axis=-1)                                   # n_0 . q_t
    b = Ct.sum(axis=-1) + gC * r
    em = np.exp(-m)
    den = np.maximum(np.abs(b), em)
    Hn = (np.matmul(Ct, v) + gC[..., None] * u) / den[..., None]
    h = _sig(ao) * Hn.transpose(0, 2, 1, 3).reshape(B, T, -1)
    wS = np.exp(F[..., -1:] - F + ai - m[..., -1:])
    w0 = gC[..., -1]
    CT = w0[..., None, None] * C0 + np.matmul((v * wS[..., None]).swapaxes(-1, -2), k)
    nT = w0[..., None] * n0 + np.sum(k * wS[..., None], axis=-2)
    final = (CT.reshape(B, -1), nT.reshape(B, -1), np.array(m[..., -1]))
    if not record:
        return h, final, None
    return h, final, ParallelCache(inp, Ct, D, S, Hn, den, np.abs(b) >= em, b, gC, u, r, C0, n0, wS, last)


def mlstm_parallel_back(cell: MLSTMCell, cache: ParallelCache, g: np.ndarray,
                        d_final: Arrays | None = None) -> tuple[np.ndarray, Arrays]:
    """(dL/d(inp) (B, T, N), dL/d(init) (C, n, m) in the state layout) from ``g`` = dL/dh
    (B, T, H) and ``d_final`` = dL/d(the final (C, n, m)) (None: zero) of
    :func:`mlstm_parallel`. h does not depend on the stabilizers (see the module docstring),
    so its part holds them constant; the final state's part differentiates ``m_T`` (a max:
    the gradient goes to its largest term)."""
    B, T, _ = g.shape
    nh, dh = cell.num_heads, cell.head_size
    q, k, v, ao, _, af = cell.split(cache.inp)
    q, k, v = _heads(q), _heads(k), _heads(v)
    o = _sig(ao)
    dao = g * cache.Hn.transpose(0, 2, 1, 3).reshape(B, T, -1) * o * (1.0 - o)
    dHn = _heads((g * o).reshape(B, T, nh, dh))
    den, gC = cache.den, cache.gC
    dnum = dHn / den[..., None]
    dden = -np.sum(dHn * cache.Hn, axis=-1) / den
    db = np.where(cache.use_b, dden * np.sign(cache.b), 0.0)
    dCt = np.matmul(dnum, v.swapaxes(-1, -2)) + db[..., None]
    dv = np.matmul(cache.Ct.swapaxes(-1, -2), dnum)
    du = dnum * gC[..., None]
    dr = db * gC
    dS = dCt * cache.D
    dlogD = dS * cache.S                                  # d exp(u)/du = exp(u) = D
    dq = np.matmul(dS, k) + np.matmul(du, cache.C0) + dr[..., None] * cache.n0[..., None, :]
    dk = np.matmul(dS.swapaxes(-1, -2), q)
    dai = dlogD.sum(axis=-2)                              # (B, nh, T): over t
    dF = dlogD.sum(axis=-1) - dai
    dlog_gC = (np.sum(dnum * cache.u, axis=-1) + db * cache.r) * gC
    dF += dlog_gC
    dm0 = dlog_gC.sum(axis=-1)
    dC0 = np.matmul(du.swapaxes(-1, -2), q)
    dn0 = np.sum(dr[..., None] * q, axis=-2)
    if d_final is not None:                               # C_T = w0 C_0 + sum_s wS_s v_s k_s^T, n_T alike
        GC = np.asarray(d_final[0]).reshape(B, nh, dh, dh)
        Gn = np.asarray(d_final[1]).reshape(B, nh, dh)
        Gm = np.asarray(d_final[2]).reshape(B, nh)
        wS, w0 = cache.wS, gC[..., -1]
        GCk = np.matmul(k, GC.swapaxes(-1, -2))           # GC k_s
        E = np.sum(v * GCk, axis=-1) + np.sum(k * Gn[..., None, :], axis=-1)
        E0 = np.sum(GC * cache.C0, axis=(-2, -1)) + np.sum(Gn * cache.n0, axis=-1)
        dv += wS[..., None] * GCk
        dk += wS[..., None] * (np.matmul(v, GC) + Gn[..., None, :])
        dC0 += w0[..., None, None] * GC
        dn0 += w0[..., None] * Gn
        da, da0 = wS * E, w0 * E0                         # dL/d(log weight)
        dai += da
        dF -= da
        dF[..., -1] += da.sum(axis=-1) + da0
        dm0 += da0
        dmT = Gm - da.sum(axis=-1) - da0                  # every log weight has -m_T
        dF[..., -1] += dmT                                # (both kinds of terms hold F_T)
        init_wins = cache.last == T
        dm0 += np.where(init_wins, dmT, 0.0)
        s = np.minimum(cache.last, T - 1)[..., None]
        hit = np.where(init_wins, 0.0, dmT)[..., None]
        np.put_along_axis(dai, s, np.take_along_axis(dai, s, axis=-1) + hit, axis=-1)
        np.put_along_axis(dF, s, np.take_along_axis(dF, s, axis=-1) - hit, axis=-1)
    dk *= 1.0 / math.sqrt(dh)
    dlogf = np.cumsum(dF[..., ::-1], axis=-1)[..., ::-1]
    daf = cell.dlog_forget(af, dlogf.transpose(0, 2, 1))
    d = [a.transpose(0, 2, 1, 3).reshape(B, T, -1) for a in (dq, dk, dv)]
    d_inp = np.concatenate([*d, dao, dai.transpose(0, 2, 1), daf], axis=-1)
    return d_inp, (dC0.reshape(B, -1), dn0.reshape(B, -1), dm0)


def mlstm_chunkwise(cell: MLSTMCell, inp: np.ndarray, chunk_size: int,
                    init: Arrays | None = None) -> tuple[np.ndarray, Arrays]:
    """mLSTM over a sequence in chunks of ``chunk_size`` steps (the last may be shorter) from
    ``init`` = (C, n, m) in the state layout of :class:`MLSTMCell` (None: zeros); returns
    (h (B, T, H), the final (C, n, m), equal to the recurrent form's)."""
    B, T, _ = inp.shape
    nh, dh = cell.num_heads, cell.head_size
    dt = inp.dtype
    L = min(chunk_size, T)
    check_array((B, nh, L, L), inp.itemsize, "MLSTM's chunkwise form, its decay matrix of a chunk")
    if init is None:
        C, n, m = np.zeros((B, nh, dh, dh), dt), np.zeros((B, nh, dh), dt), np.zeros((B, nh), dt)
    else:
        C, n, m = (np.array(init[0], dt).reshape(B, nh, dh, dh), np.array(init[1], dt).reshape(B, nh, dh),
                   np.array(init[2], dt).reshape(B, nh))
    q, k, v, ao, ai, af = cell.split(inp)
    q, k, v = _heads(q), _heads(k), _heads(v)
    ai, lf = ai.transpose(0, 2, 1), cell.log_forget(af).transpose(0, 2, 1)    # (B, nh, T)
    out = np.empty((B, nh, T, dh), dt)
    for t0 in range(0, T, chunk_size):
        t1 = min(t0 + chunk_size, T)
        L = t1 - t0
        qc, kc, vc, ic = q[:, :, t0:t1], k[:, :, t0:t1], v[:, :, t0:t1], ai[:, :, t0:t1]
        F = np.cumsum(lf[:, :, t0:t1], axis=-1)                                 # (B, nh, L)
        logD = F[..., :, None] - F[..., None, :] + ic[..., None, :]
        logD[..., ~np.tri(L, dtype=bool)] = -np.inf
        carry = F + m[..., None]                                                # log weight of the state
        mt = np.maximum(logD.max(axis=-1), carry)
        D = np.exp(logD - mt[..., None])
        gC = np.exp(carry - mt)                                                 # (B, nh, L)
        Ct = np.matmul(qc, kc.swapaxes(-1, -2)) * D
        num = np.matmul(Ct, vc) + gC[..., None] * np.matmul(qc, C.swapaxes(-1, -2))
        b = Ct.sum(axis=-1) + gC * np.sum(qc * n[..., None, :], axis=-1)
        den = np.maximum(np.abs(b), np.exp(-mt))
        out[:, :, t0:t1] = num / den[..., None]
        m_new = mt[..., -1]
        wS = np.exp(F[..., -1:] - F + ic - m_new[..., None])                    # (B, nh, L)
        decay = np.exp(carry[..., -1] - m_new)
        C = decay[..., None, None] * C + np.matmul((vc * wS[..., None]).swapaxes(-1, -2), kc)
        n = decay[..., None] * n + np.sum(kc * wS[..., None], axis=-2)
        m = m_new
    h = _sig(ao) * out.transpose(0, 2, 1, 3).reshape(B, T, -1)
    return h, (C.reshape(B, -1), n.reshape(B, -1), m)


# -- the layers --------------------------------------------------------------------------------

class SLSTM(RecurrentLayer):
    """sLSTM layer (Beck et al., 2024, arXiv:2405.04517): :class:`SLSTMCell` walked over time.

    ``SLSTM(units, num_heads=4, *, forget_gate="sigmoid", return_sequences=False,
    go_backwards=False, return_state=False, stateful=False, dropout=0.0, seed=None,
    dtype="float32", input_dim=None, name=None)``. Input (B, T, F); output (B, H) = h_T, or
    (B, T, H) with ``return_sequences``. Equations, weights and initialisation:
    :class:`SLSTMCell` and :mod:`rnnkit.recurrent._xlstm`. State ``(h, c, n, m)``, each
    (B, H), from zeros. Runs the NumPy reference walk (no compiled step).
    """

    cell: SLSTMCell

    def __init__(self, units: int, num_heads: int = PAPER_HEADS, *, forget_gate: str = "sigmoid",
                 **kwargs: Any) -> None:
        super().__init__(SLSTMCell(units, num_heads, forget_gate=forget_gate), **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**self.cell.get_config(), **self._walk_config()}


class MLSTM(RecurrentLayer):
    """mLSTM layer (Beck et al., 2024, arXiv:2405.04517): :class:`MLSTMCell` over a sequence.

    ``MLSTM(units, num_heads=4, *, forget_gate="sigmoid", qkv_blocksize=None, chunk_size=64,
    return_sequences=False, go_backwards=False, return_state=False, stateful=False,
    dropout=0.0, seed=None, dtype="float32", input_dim=None, name=None)``. Input (B, T, F);
    output (B, H) = h_T, or (B, T, H) with ``return_sequences``. Equations, weights and
    initialisation: :class:`MLSTMCell` and :mod:`rnnkit.recurrent._xlstm`. State
    ``(h, C, n, m)`` from zeros.

    The forms are the cell's (:class:`MLSTMCell`, on the cell contract's hook, chosen by the
    walker as for every cell): a pass of two steps or more without a mask runs the
    whole-sequence forms, from zeros or a given or carried state: training by the parallel
    form (T x T per head) and its backward; inference by the chunkwise form with
    ``chunk_size`` steps a chunk (None: the parallel form). A masked pass, recurrent
    streaming one step at a time and a single step run the recurrent form. All three compute
    the same h and final state.
    """

    cell: MLSTMCell

    def __init__(self, units: int, num_heads: int = PAPER_HEADS, *, forget_gate: str = "sigmoid",
                 qkv_blocksize: int | None = None, chunk_size: int | None = 64, **kwargs: Any) -> None:
        super().__init__(MLSTMCell(units, num_heads, forget_gate=forget_gate, qkv_blocksize=qkv_blocksize,
                                   chunk_size=chunk_size), **kwargs)

    @property
    def chunk_size(self) -> int | None:
        """The chunkwise form's steps a chunk (the cell's; None: the parallel form)."""
        return self.cell.chunk_size

    def get_config(self) -> dict[str, Any]:
        return {**self.cell.get_config(), **self._walk_config()}
