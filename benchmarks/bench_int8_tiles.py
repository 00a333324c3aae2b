"""What bounds the AVX2 int8 product: the ``vpmaddubsw`` tile in other shapes, and without its
``vpmaddwd``.

Run under ``tools/avx2.sh`` (the tiles are AVX2's). The S3 recurrent product (64 rows of 256
7-bit activations by 1024 int8 outputs, 100 times) with the tile of
:mod:`rnnkit.kernels._int8_gemm` as it is (4 rows x 16 outputs), in other shapes (rows x
outputs: 4 x 24, 6 x 16, 2 x 32, 3 x 32; random packed weights of each block width, timing
only), and with ``vpmaddwd`` left out (the int16 pair sums added as if int32: a wrong result,
the cost of ``vpmaddubsw`` alone). Medians of 9 interleaved rounds, CPU time, G multiply-adds a
second.

    tools/avx2.sh python benchmarks/bench_int8_tiles.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
from numba import njit

from rnnkit.kernels import _int8_gemm as g
from rnnkit.kernels._numba_private import cgutils, ir


def _no_wd(builder: Any, acc: Any, x: Any, w: Any) -> Any:
    """``vpmaddubsw`` and ``vpaddd`` alone (the pair sums' bits added as int32: timing only)."""
    b32, h16 = ir.VectorType(ir.IntType(8), 32), ir.VectorType(ir.IntType(16), 16)
    ubsw = cgutils.get_or_insert_function(builder.module, ir.FunctionType(h16, [b32, b32]),
                                          "llvm.x86.avx2.pmadd.ub.sw")
    pairs = builder.call(ubsw, [builder.bitcast(x, b32), builder.bitcast(w, b32)])
    return builder.add(acc, builder.bitcast(pairs, acc.type))


def _loop(rows: int, vecs: int, mac: Any) -> Any:
    """A compiled ``loop(T, q, wp, out)``: T products of ``q`` by the blocks of ``wp``, tiles of
    ``rows`` rows x ``vecs`` vectors of 8 outputs."""
    tile = g._tile(rows, 8, vecs, mac)

    @njit
    def gemm(q: Any, wp: Any, out: Any) -> None:
        M, kp = q.shape
        nb, groups, width = wp.shape[0], wp.shape[1], wp.shape[2]
        no = out.shape[1]
        qa, wa, oa = q.ctypes.data, wp.ctypes.data, out.ctypes.data
        for b in range(nb):
            wb = wa + b * groups * width * 4
            for m in range(0, M - rows + 1, rows):
                tile(qa + m * kp, kp, wb, groups, oa + (m * no + b * width) * 4, no * 4)

    @njit
    def loop(T: int, q: Any, wp: Any, out: Any) -> None:
        for _t in range(T):
            gemm(q, wp, out)
    return loop


def main() -> int:
    B, H, N, T = 64, 256, 1024, 100
    rng = np.random.default_rng(0)
    shapes = [("4x16 (rnnkit)", 4, 2, g._vpmaddubsw), ("4x16 no vpmaddwd", 4, 2, _no_wd),
              ("4x24", 4, 3, g._vpmaddubsw), ("6x16", 6, 2, g._vpmaddubsw), ("2x32", 2, 4, g._vpmaddubsw),
              ("3x32", 3, 4, g._vpmaddubsw)]
    runs: dict[str, tuple[Any, tuple[Any, ...], int]] = {}
    for name, rows, vecs, mac in shapes:
        width = 8 * vecs
        q = rng.integers(0, 128, (B, H), dtype=np.uint8)
        wp = rng.integers(-127, 128, (-(-N // width), H // 4, width, 4), dtype=np.int8)
        out = np.zeros((B, wp.shape[0] * width), np.int32)
        f = _loop(rows, vecs, mac)
        f(1, q, wp, out)
        runs[name] = (f, (q, wp, out), T * (B // rows * rows) * wp.shape[0] * width * H)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(9):
        for k, (f, args, _macs) in runs.items():
            t0 = time.process_time()
            f(T, *args)
            times[k].append(time.process_time() - t0)
    for k, v in times.items():
        m = statistics.median(v)
        print(f"{k:18s} {m * 1e3:7.2f} ms {runs[k][2] / m / 1e9:6.1f} G multiply-adds/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
