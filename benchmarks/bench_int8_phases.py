"""Where an int8 LSTM call's time goes, phase by phase, on this process's int8 product.

One ``QuantizedRecurrent`` LSTM (``rk.quantize`` of ``rk.LSTM(H, return_sequences=True, seed=0)``)
at S3 (B, T, F, H) = (64, 100, 128, 256) by default; one thread. Each phase of
:func:`rnnkit.kernels._int8.walk_lstm` runs alone, T steps of it in one compiled loop on the
same buffers the call uses (the layer's packed weights, a real input, a real state):

- ``x_quant``: the input rows quantized (``_quant_steps``, in its chunks of steps);
- ``x_gemm``: the input product, one step's B rows at a time (``gemm``);
- ``h_quant``: the state rows quantized (``quant_rows`` of h, B x H);
- ``h_gemm``: the recurrent product (``gemm``, B x H by 4H);
- ``rows``: the rest of a step, row by row: both products dequantized plus the bias, the
  gates' activations (B x 5H), the cell and state update, as the walk runs them
  (``_lstm_rows``); ``x_dequant``, the input product's dequantization alone, is a part of it;

beside the whole call (``forward``) and rnnkit float32's on the same weights, interleaved,
medians of ``--repeats`` rounds (CPU time). ``sum`` is the phases' total; ``forward - sum`` is
what the call costs beyond them (the layer's Python, the output's copy, the split of the loop).

    python benchmarks/bench_int8_phases.py                 # this CPU's product
    tools/avx2.sh python benchmarks/bench_int8_phases.py   # the AVX2 tile
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")

import numpy as np  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit.kernels import _int8 as k8  # noqa: E402
from rnnkit.kernels._int8_gemm import LAYOUT, OPTS8, gemm  # noqa: E402
from rnnkit.kernels._jit import njit, row  # noqa: E402

SHAPES = {"S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256), "S4": (128, 200, 256, 512)}


@njit(**OPTS8)
def _x_quant(x: Any, qx: Any, sx: Any, zpx: Any) -> None:
    T, B, F = x.shape
    per = k8.walks_chunk(T, B, F)
    for t in range(0, T, per):
        k8._quant_steps(x, t, min(per, T - t), qx, sx, zpx)


@njit(**OPTS8)
def _x_gemm(T: int, qx: Any, wp: Any, accx: Any) -> None:
    B = accx.shape[0]
    for _t in range(T):
        gemm(qx[:B], wp, accx)


@njit(**OPTS8)
def _h_quant(T: int, h: Any, q: Any, s: Any, zp: Any) -> None:
    for _t in range(T):
        k8.quant_rows(h, q, s, zp)


@njit(**OPTS8)
def _h_gemm(T: int, q: Any, up: Any, acc: Any) -> None:
    for _t in range(T):
        gemm(q, up, acc)


@njit(**OPTS8)
def _rows_walk(T: int, accx: Any, zpx: Any, sx: Any, wcol: Any, ws: Any, bias: Any, acc: Any, zp: Any,
               s: Any, col: Any, us: Any, h: Any, c: Any, mask: Any, xr: Any, ar: Any, tmp: Any) -> None:
    """The walk's own rows, step after step (``_lstm_rows``)."""
    for t in range(T):
        k8._lstm_rows(t, 0, accx, zpx, sx, wcol, ws, bias, acc, zp, s, col, us, h, c, mask, 0, 1, xr, ar, tmp)


@njit(**OPTS8)
def _x_dequant(T: int, accx: Any, zpx: Any, sx: Any, wcol: Any, ws: Any, bias: Any, xr: Any) -> None:
    B = accx.shape[0]
    for _t in range(T):
        for b in range(B):
            k8.dequant_row(row(accx, b), zpx[b], sx[b], wcol, ws, bias, xr)


def _cpu(f: Callable[[], Any]) -> float:
    t0 = time.process_time()
    f()
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="S3", choices=sorted(SHAPES))
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args(argv)
    B, T, F, H = SHAPES[a.shape]
    G = 4 * H
    x = np.random.default_rng(7).standard_normal((B, T, F)).astype(np.float32)
    layer = rk.LSTM(H, return_sequences=True, seed=0)
    q: Any = rk.quantize(rk.Sequential([layer]).build((None, T, F))).layers[0]
    ctx = rk.Ctx(False)
    mod = k8
    wp, wcol, ws = q._product("kernel", mod)
    up, col, us = q._product("recurrent_kernel", mod)
    bias = np.ascontiguousarray(q._weights["bias"][0])
    seq = np.asarray(layer.forward(x, ctx))
    h = np.ascontiguousarray(seq[:, T // 2])                # a real state
    c = np.ascontiguousarray(np.tanh(h) * 2).astype(np.float32)
    x_tm = np.ascontiguousarray(x.transpose(1, 0, 2))
    qx, sx, zpx, accx = k8._in_bufs(x.transpose(1, 0, 2), G, wp)
    qh, sh, zph, acc, _ = k8._bufs(B, H, 0, accx.shape[1])
    k8._quant_steps(x.transpose(1, 0, 2), 0, 1, qx, sx, zpx)
    k8.quant_rows(h, qh, sh, zph)
    gemm(qx[:B], wp, accx)
    gemm(qh, up, acc)
    xr, ar, tmp = np.empty(G, np.float32), np.empty(G, np.float32), np.empty(H, np.float32)
    hh, cc = h.copy(), c.copy()
    no_mask = np.zeros((0, 0), np.uint8)
    jobs: dict[str, Callable[[], Any]] = {
        "x_quant": lambda: _x_quant(x.transpose(1, 0, 2), qx, sx, zpx),
        "x_gemm": lambda: _x_gemm(T, qx, wp, accx),
        "h_quant": lambda: _h_quant(T, h, qh, sh, zph),
        "h_gemm": lambda: _h_gemm(T, qh, up, acc),
    }
    jobs["rows"] = lambda: _rows_walk(T, accx, zpx, sx, wcol, ws, bias, acc, zph, sh, col, us, hh, cc,
                                      no_mask, xr, ar, tmp)
    jobs["x_dequant"] = lambda: _x_dequant(T, accx, zpx, sx, wcol, ws, bias, xr)
    jobs["forward"] = lambda: q.forward(x, ctx)
    jobs["float32"] = lambda: layer.forward(x, ctx)
    del x_tm
    for f in jobs.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(a.repeats):
        for k, f in jobs.items():
            times[k].append(_cpu(f))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    phases = [k for k in jobs if k not in ("x_dequant", "forward", "float32")]
    total = sum(med[k] for k in phases)
    print(f"# {a.shape} (B, T, F, H) = {(B, T, F, H)}, layout={LAYOUT}, load average "
          f"{os.getloadavg()[0]:.2f}, medians of {a.repeats} (CPU ms)")
    for k in phases:
        print(f"{k:8s} {med[k]:8.3f} ms {100 * med[k] / med['forward']:5.1f} %")
    print(f"  (of rows: x_dequant {med['x_dequant']:.3f} ms)")
    print(f"{'sum':8s} {total:8.3f} ms {100 * total / med['forward']:5.1f} %")
    print(f"{'forward':8s} {med['forward']:8.3f} ms  (forward - sum {med['forward'] - total:.3f} ms)")
    print(f"{'float32':8s} {med['float32']:8.3f} ms  float32 / int8 = {med['float32'] / med['forward']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
