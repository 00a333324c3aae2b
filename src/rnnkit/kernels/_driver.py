"""The built-in kernels: Python glue between the walker and the compiled loops.

One object per cell type (:data:`SIMPLE`, :data:`LSTM`, :data:`GRU`, :data:`GRU_RESET_AFTER`),
registered by the cells themselves (``rnnkit.kernels.register``); this module never imports
them. The cell is read through its public attributes (the names of its input kernel, recurrent
kernel and bias; units; activations; options) and the weights arrive as a mapping.

``walk`` returns exactly what the reference walker returns (the same cache: ``x_tm``,
``states`` (T+1, B, size) per state part, ``parks`` by the cell's names), so either backward
can follow either forward; ``walk_back`` runs the backward walk (``_back``, filling ``dxw`` /
``drec``), then the batched reductions in one compiled call. Each entry point splits the batch
into row blocks (:mod:`._threads`). The training loops get the whole (C-contiguous) arrays and
their block's rows ``lo, hi``, and slice inside: one compiled version serves a whole batch and a
block of it alike (handing them the slices made two, compiled twice on a new machine).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from rnnkit.kernels import RECURRENT_DROPOUT, _gru, _lstm, _simple
from rnnkit.kernels._gemm import project, reductions
from rnnkit.kernels._jit import ACT_CODES
from rnnkit.kernels._packed import gemm, pack
from rnnkit.kernels._threads import blocks, run_blocks, run_parts

Arrays = tuple[np.ndarray, ...]

#: inference projects a chunk of timesteps at a time into a buffer of at most about this many
#: bytes (a bound independent of T: inference keeps no per-step arrays)
CHUNK_BYTES = 1 << 22

#: from this many multiply-adds ((T*B) * G*H * (F+H)) on, the reductions run in parts on the
#: cores (gate columns of dW/dU/db, rows of dx; one packed product each) instead of one call;
#: likewise the training projection (rows), from (T*B) * F * G*H
PARALLEL_REDUCTIONS = 1 << 24


def _chunk(T: int, B: int, row_bytes: int) -> int:
    """Timesteps per projection chunk (at least 1, at most T)."""
    return max(1, min(T, CHUNK_BYTES // max(B * row_bytes, 1)))


def _mask_arg(mask: np.ndarray | None, T: int, B: int) -> np.ndarray:
    """The (T, B) uint8 mask the compiled loops read (all ones, never read, without a mask)."""
    if mask is None:
        return np.ones((T, B), np.uint8)
    return np.ascontiguousarray(mask, dtype=np.uint8)


def _rdrop_arg(w: Any, B: int, dt: np.dtype) -> tuple[np.ndarray, bool]:
    """The recurrent dropout mask (B, S) of the pass and whether there is one."""
    rm = w.get(RECURRENT_DROPOUT) if hasattr(w, "get") else None
    if rm is None:
        return np.empty((B, 0), dt), False
    return np.ascontiguousarray(rm, dtype=dt), True


@functools.cache
def _no_projection(dt: np.dtype) -> np.ndarray:
    """The placeholder the LSTM loops get for the projection of a layer without one."""
    return pack(np.zeros((1, 1), dt))


def _codes(cell: Any) -> tuple[int, int]:
    rec = getattr(cell, "recurrent_activation", None)
    return ACT_CODES[cell.activation.name], ACT_CODES[rec.name if rec is not None else "sigmoid"]


class _Kernel:
    """Shared glue; subclasses run one cell type's compiled loops on a block of batch rows."""

    #: parked arrays besides ``gates`` (which is the projection buffer itself), each H wide
    parks: tuple[str, ...] = ()
    #: whether the gates (the projection buffer, overwritten in place) are parked
    park_gates = True

    def supports(self, cell: Any) -> bool:
        rec = getattr(cell, "recurrent_activation", None)
        return cell.activation.name in ACT_CODES and (rec is None or rec.name in ACT_CODES)

    def _arrays(self, cell: Any, w: Any, dt: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # writable copies (the layer's weights are read-only): packing reads them once per pass, and a
        # read-only array would be a second type, compiled a second time on a new machine
        W = np.array(w[cell.input_kernel])
        U = np.array(w[cell.recurrent_kernel])
        b = np.array(w[cell.bias]) if cell.bias is not None else np.zeros((cell.bias_rows, W.shape[1]), dt)
        return W, U, b

    def walk(self, cell: Any, w: Any, x_tm: np.ndarray, init: Arrays | None, record: bool,
             keep_seq: bool, mask: np.ndarray | None = None
             ) -> tuple[np.ndarray | None, Arrays, dict[str, Any] | None]:
        T, B, F = x_tm.shape
        dt = x_tm.dtype
        mk = _mask_arg(mask, T, B)
        rm, rdrop = _rdrop_arg(w, B, dt)
        W, U, bias = self._arrays(cell, w, dt)
        GH, H = W.shape[1], cell.units
        PW, PU = pack(W), self._pack(cell, U)    # laid out once for every step's product
        sizes = cell.state_sizes()
        ex = self._extra(cell, w)
        codes = _codes(cell)
        if record:
            xw = np.empty((T, B, GH), dt)
            x2, xw2, b0 = x_tm.reshape(T * B, F), xw.reshape(T * B, GH), bias[0]
            if T * B * F * GH >= PARALLEL_REDUCTIONS:   # rows in parts on the cores
                run_parts(T * B, lambda lo, hi: project(x2[lo:hi], PW, b0, xw2[lo:hi]))
            else:
                project(x2, PW, b0, xw2)
            hist = [np.empty((T + 1, B, n), dt) for n in sizes]
            for k, a in enumerate(hist):
                a[0] = 0.0 if init is None else init[k]
            parks = {n: np.empty((T, B, H), dt) for n in self._park_names(cell)}
            if self.park_gates:
                parks = {"gates": xw, **parks}
            run_blocks(B, lambda lo, hi: self._train(
                cell, xw, PU, bias, hist, parks, ex, codes, (mk, mask is not None, rm, rdrop, lo, hi)))
            cache = {"x_tm": x_tm, "states": hist, "parks": parks, "mask": mask}
            return (hist[0][1:] if keep_seq else None), tuple(a[T] for a in hist), cache
        # inference: the state and one chunk of projections; the output written in (B, T, out) order
        st = [np.zeros((B, n), dt) if init is None else np.array(init[k], dt, order="C")
              for k, n in enumerate(sizes)]
        out = np.empty((B, T if keep_seq else 1, sizes[0]), dt)
        seq_view = out.transpose(1, 0, 2)

        def infer(lo: int, hi: int) -> None:
            xb = x_tm if hi - lo == B else np.ascontiguousarray(x_tm[:, lo:hi])
            buf = np.empty((_chunk(T, hi - lo, GH * dt.itemsize) * (hi - lo), GH), dt)
            self._infer(cell, xb, PW, bias, PU, [a[lo:hi] for a in st], seq_view[:, lo:hi], keep_seq,
                        buf, ex, codes, (np.ascontiguousarray(mk[:, lo:hi]), mask is not None))

        run_blocks(B, infer)
        return (seq_view if keep_seq else None), tuple(st), None

    def walk_back(self, cell: Any, w: Any, cache: dict[str, Any], g: np.ndarray, full: bool,
                  d_final: Arrays | None = None) -> tuple[np.ndarray, dict[str, np.ndarray], Arrays]:
        x_tm, hist, parks = cache["x_tm"], cache["states"], cache["parks"]
        T, B, F = x_tm.shape
        dt = x_tm.dtype
        W, U = np.array(w[cell.input_kernel]), w[cell.recurrent_kernel]
        GH = W.shape[1]
        PUT = self._pack_back(cell, np.array(U))     # U^T (or its blocks), laid out once
        dxw = np.empty((T, B, GH), dt)
        drec = np.empty((T, B, GH), dt) if self.separate_rec else dxw
        d_init = [np.zeros((B, n), dt) if d_final is None else np.array(d_final[k], dt, order="C")
                  for k, n in enumerate(cell.state_sizes())]
        mask = cache.get("mask")
        mk = _mask_arg(mask, T, B)
        rm, rdrop = _rdrop_arg(w, B, dt)
        g3 = np.ascontiguousarray(g).reshape(B, T if full else 1, cell.output_size)
        ex = self._extra_back(cell, w, T, B, dt)
        codes = _codes(cell)
        run_blocks(B, lambda lo, hi: self._back(
            cell, g3, full, hist, parks, PUT, ex, codes, d_init, dxw, drec,
            (mk, mask is not None, rm, rdrop, lo, hi)))
        names, groups = cell.state_names, cell.rec_groups(GH)
        P = [(hist[names.index(src)][:T] * (rm if rdrop else 1)) if src in names else parks[src]
             for src, _, _ in groups]
        P = [p.reshape(T * B, p.shape[-1]) for p in P]
        dW = np.empty((F, GH), dt)
        db = np.empty((w[cell.bias].shape[0] if cell.bias is not None else 1, GH), dt)
        dU = np.empty(U.shape, dt)
        dx_tm = np.empty((T, B, F), dt)
        args = (x_tm.reshape(T * B, F), dxw.reshape(T * B, GH), drec.reshape(T * B, GH), drec is dxw,
                P[0], P[-1],
                groups[0][2], W, dW, db, dU, dx_tm.reshape(T * B, F))
        big = T * B * GH * (F + U.shape[0]) >= PARALLEL_REDUCTIONS
        starts = [lo for lo, _ in blocks(T * B)] if big else [0]
        n_parts = len(starts)

        def part(lo: int, hi: int) -> None:   # rows [lo, hi) of dx; the matching share of columns
            k = starts.index(lo)
            reductions(*args, GH * k // n_parts, GH * (k + 1) // n_parts, lo, hi)

        if n_parts == 1:
            reductions(*args, 0, GH, 0, T * B)
        else:
            run_parts(T * B, part)
        grads = {cell.input_kernel: dW, cell.recurrent_kernel: dU}
        if cell.bias is not None:
            grads[cell.bias] = db
        grads.update(self._extra_grads(cell, cache, ex))
        return dx_tm, grads, tuple(d_init)

    # -- per cell type ------------------------------------------------------------------------
    separate_rec = False

    def _pack(self, cell: Any, U: np.ndarray) -> Any:
        """The recurrent kernel as the forward loops read it (packed panels)."""
        return pack(U)

    def _pack_back(self, cell: Any, U: np.ndarray) -> Any:
        """U^T as the backward loops read it (packed panels)."""
        return pack(U, trans=True)

    def _park_names(self, cell: Any) -> tuple[str, ...]:
        return self.parks

    def _extra(self, cell: Any, w: Any) -> Any:
        return None

    def _extra_back(self, cell: Any, w: Any, T: int, B: int, dt: np.dtype) -> Any:
        return None

    def _extra_grads(self, cell: Any, cache: dict[str, Any], ex: Any) -> dict[str, np.ndarray]:
        return {}

    def _train(self, cell: Any, xw: Any, U: Any, bias: Any, hist: list[Any], parks: dict[str, Any],
               ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _infer(self, cell: Any, xb: Any, W: Any, bias: Any, U: Any, st: list[Any], seq: Any, keep: bool,
               buf: Any, ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _back(self, cell: Any, g3: Any, full: bool, hist: list[Any], parks: dict[str, Any], U: Any, ex: Any,
              codes: tuple[int, int], d_init: list[Any], dxw: Any, drec: Any,
              mm: tuple[Any, ...]) -> None:
        raise NotImplementedError


class _SimpleKernel(_Kernel):
    park_gates = False

    def _train(self, cell: Any, xw: Any, U: Any, bias: Any, hist: list[Any], parks: dict[str, Any],
               ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        _simple.simple_train(xw, U, hist[0], codes[0], *mm)

    def _infer(self, cell: Any, xb: Any, W: Any, bias: Any, U: Any, st: list[Any], seq: Any, keep: bool,
               buf: Any, ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        _simple.simple_infer(xb, W, bias[0], U, st[0], seq, keep, buf, codes[0], *mm)

    def _back(self, cell: Any, g3: Any, full: bool, hist: list[Any], parks: dict[str, Any], U: Any, ex: Any,
              codes: tuple[int, int], d_init: list[Any], dxw: Any, drec: Any,
              mm: tuple[Any, ...]) -> None:
        _simple.simple_back(g3, full, hist[0], U, codes[0], d_init[0], dxw, *mm)


class _LSTMKernel(_Kernel):
    """With ``proj_size``: parks ``m`` too, and ``projection_kernel``'s gradient is one GEMM
    ``m^T @ dh`` over every step after the walk."""

    def _park_names(self, cell: Any) -> tuple[str, ...]:
        return ("act_c", "m") if cell.proj_size else ("act_c",)

    def _extra(self, cell: Any, w: Any) -> Any:
        dt = w[cell.input_kernel].dtype
        return pack(np.array(w[cell.projection])) if cell.proj_size else _no_projection(dt)

    def _extra_back(self, cell: Any, w: Any, T: int, B: int, dt: np.dtype) -> Any:
        if not cell.proj_size:
            return _no_projection(dt), np.empty((T, B, 0), dt)
        return pack(np.array(w[cell.projection]), trans=True), np.empty((T, B, cell.proj_size), dt)

    def _extra_grads(self, cell: Any, cache: dict[str, Any], ex: Any) -> dict[str, np.ndarray]:
        if not cell.proj_size:
            return {}
        m, dh_seq = cache["parks"]["m"], ex[1]
        T, B, H = m.shape
        P = cell.proj_size
        dWp = np.empty((H, P), m.dtype)
        gemm(m.reshape(T * B, H).T, dh_seq.reshape(T * B, P), False, dWp, False, 0, P)
        return {cell.projection: dWp}

    def _train(self, cell: Any, xw: Any, U: Any, bias: Any, hist: list[Any], parks: dict[str, Any],
               ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        m = parks["m"] if cell.proj_size else parks["act_c"]   # (unused without a projection)
        _lstm.lstm_train(xw, U, hist[0], hist[1], parks["act_c"], bool(cell.proj_size), ex, m, *codes, *mm)

    def _infer(self, cell: Any, xb: Any, W: Any, bias: Any, U: Any, st: list[Any], seq: Any, keep: bool,
               buf: Any, ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        _lstm.lstm_infer(xb, W, bias[0], U, st[0], st[1], seq, keep, buf, bool(cell.proj_size), ex, *codes,
                         *mm)

    def _back(self, cell: Any, g3: Any, full: bool, hist: list[Any], parks: dict[str, Any], U: Any, ex: Any,
              codes: tuple[int, int], d_init: list[Any], dxw: Any, drec: Any,
              mm: tuple[Any, ...]) -> None:
        WpT, dh_seq = ex
        _lstm.lstm_back(g3, full, hist[1], parks["gates"], parks["act_c"], U,
                        bool(cell.proj_size), WpT, dh_seq, d_init[0], d_init[1], *codes, dxw, *mm)


class _GRUKernel(_Kernel):
    """reset_after=False multiplies by two blocks of U (``U_zr``, ``U_n``), each packed apart."""

    parks = ("rh",)

    def _pack(self, cell: Any, U: np.ndarray) -> Any:
        H = cell.units
        return pack(U, cols=(0, 2 * H)), pack(U, cols=(2 * H, 3 * H))

    def _pack_back(self, cell: Any, U: np.ndarray) -> Any:
        UT = np.ascontiguousarray(U.T)
        H = cell.units
        return pack(UT[2 * H:]), pack(UT[:2 * H])   # (U_n)^T, (U_zr)^T

    def _train(self, cell: Any, xw: Any, U: Any, bias: Any, hist: list[Any], parks: dict[str, Any],
               ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        _gru.gru_train(xw, U[0], U[1], hist[0], parks["rh"], *codes, *mm)

    def _infer(self, cell: Any, xb: Any, W: Any, bias: Any, U: Any, st: list[Any], seq: Any, keep: bool,
               buf: Any, ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        _gru.gru_infer(xb, W, bias[0], U[0], U[1], bias[0], False, st[0], seq, keep, buf,
                       *codes, *mm)

    def _back(self, cell: Any, g3: Any, full: bool, hist: list[Any], parks: dict[str, Any], U: Any, ex: Any,
              codes: tuple[int, int], d_init: list[Any], dxw: Any, drec: Any,
              mm: tuple[Any, ...]) -> None:
        _gru.gru_back(g3, full, hist[0], parks["gates"], parks["rh"], U[0], U[1], *codes, d_init[0], dxw, *mm)


class _GRUResetAfterKernel(_Kernel):
    parks = ("hu_n",)
    separate_rec = True

    def _train(self, cell: Any, xw: Any, U: Any, bias: Any, hist: list[Any], parks: dict[str, Any],
               ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        _gru.gru_ra_train(xw, U, bias[1], hist[0], parks["hu_n"], *codes, *mm)

    def _infer(self, cell: Any, xb: Any, W: Any, bias: Any, U: Any, st: list[Any], seq: Any, keep: bool,
               buf: Any, ex: Any, codes: tuple[int, int], mm: tuple[Any, ...]) -> None:
        _gru.gru_infer(xb, W, bias[0], U, U, bias[1], True, st[0], seq, keep, buf, *codes, *mm)

    def _back(self, cell: Any, g3: Any, full: bool, hist: list[Any], parks: dict[str, Any], U: Any, ex: Any,
              codes: tuple[int, int], d_init: list[Any], dxw: Any, drec: Any,
              mm: tuple[Any, ...]) -> None:
        _gru.gru_ra_back(g3, full, hist[0], parks["gates"], parks["hu_n"], U, *codes,
                         d_init[0], dxw, drec, *mm)


SIMPLE = _SimpleKernel()
LSTM = _LSTMKernel()
GRU = _GRUKernel()
GRU_RESET_AFTER = _GRUResetAfterKernel()
