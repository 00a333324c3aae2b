"""Per-call cost of the kernels' products against BLAS, on this machine (run by hand).

For the per-step recurrent shapes (M rows of the batch block x K x N = U's shape) and every row
count around the micro-kernel's 6-row blocking: rnnkit's packed product (U packed once, outside
the timing, as the kernels do once per pass) against scipy's OpenBLAS ``sgemm``/``dgemm`` called
from compiled code (one thread, as a kernel would call it; it packs U on every call). Both run in
one compiled loop, so neither pays Python overhead. Prints microseconds per call, GFLOP/s and the
ratio packed/BLAS (below 1: packed faster). Run it again under
``OPENBLAS_CORETYPE=Haswell NUMBA_CPU_NAME=haswell`` for the AVX2 picture.

    python benchmarks/bench_gemm.py [--dtype float32|float64]

Needs numba and scipy (scipy only for the BLAS side; rnnkit itself does not use it).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from numba import njit, types  # noqa: E402
from numba.np.linalg import ensure_blas  # noqa: E402

from rnnkit.kernels._packed import pack, rgemm  # noqa: E402

ensure_blas()
_xxgemm: Any = types.ExternalFunction("numba_xxgemm", types.intc(
    types.char, types.char, types.char, types.intp, types.intp, types.intp, types.voidptr,
    types.voidptr, types.intp, types.voidptr, types.intp, types.voidptr, types.voidptr, types.intp))

SHAPES = ((32, 128), (64, 256), (256, 1024), (512, 2048))   # (K, N): S1..S4 LSTM recurrent kernels
ROWS = (1, 2, 4, 5, 6, 7, 8, 12, 13, 16, 32, 64)


@njit
def blas_calls(A: Any, Bm: Any, C: Any, reps: int) -> None:
    M, K = A.shape
    N = C.shape[1]
    sc = np.ones(2, A.dtype)
    kind = ord("s") if A.itemsize == 4 else ord("d")
    for _ in range(reps):
        _xxgemm(kind, ord("N"), ord("N"), N, M, K, sc[0:].ctypes, Bm.ctypes, N, A.ctypes, K,
                sc[1:].ctypes, C.ctypes, N)


@njit
def packed_calls(A: Any, P: Any, C: Any, reps: int) -> None:
    for _ in range(reps):
        rgemm(A, P, C, 1.0)


def per_call_us(f: Callable[..., None], *args: Any, budget: float = 0.05) -> float:
    f(*args, 1)
    best = float("inf")
    for _ in range(3):
        reps = 1
        while True:
            t0 = time.perf_counter()
            f(*args, reps)
            dt = time.perf_counter() - t0
            if dt > budget:
                break
            reps *= 4
        best = min(best, dt / reps)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = ap.parse_args()
    dt = np.dtype(args.dtype)
    rng = np.random.default_rng(0)
    head = ("M x K x N", "BLAS us", "packed us", "BLAS GF/s", "packed GF/s", "ratio")
    print(" ".join(f"{h:>11}" for h in head))
    for K, N in SHAPES:
        Bm = rng.standard_normal((K, N)).astype(dt)
        P = pack(Bm)
        for M in ROWS:
            A = rng.standard_normal((M, K)).astype(dt)
            C = np.zeros((M, N), dt)
            tb = per_call_us(blas_calls, A, Bm, C)
            tp = per_call_us(packed_calls, A, P, C)
            fl = 2 * M * K * N / 1e3
            row = (f"{M} x {K} x {N}", f"{tb:.2f}", f"{tp:.2f}", f"{fl / tb:.1f}", f"{fl / tp:.1f}",
                   f"{tp / tb:.2f}")
            print(" ".join(f"{v:>11}" for v in row))


if __name__ == "__main__":
    main()
