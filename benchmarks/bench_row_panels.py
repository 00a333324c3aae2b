"""One row's per-step product, ``h (1, 32) @ U (32, 128)`` (S1's LSTM), in one micro-kernel call
over all 8 panels against 6 + 2 calls (run by hand, never a test).

The kernels take ``rnnkit.kernels._packed.ROW_PANELS`` panels per call for one row: 8 under
AVX-512 (8 one-register accumulators of the 32 zmm), 6 under AVX2 (12 of the 16 ymm). This
script times both blockings on the ISA Numba compiles for, in one process, interleaved, and
checks they give the same bits. Under AVX2::

    NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES= python benchmarks/bench_row_panels.py

(``NUMBA_CPU_NAME`` alone keeps the host's features, AVX-512 included.)
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numba
import numpy as np

from rnnkit.kernels._isa import has_avx512
from rnnkit.kernels._micro import micro
from rnnkit.kernels._packed import ROW_PANELS, addr, pack

_K6, _K2, _K8 = micro(1, 16, 32, 6), micro(1, 16, 32, 2), micro(1, 16, 32, 8)


@numba.njit(cache=False)
def _six_two(h: Any, P: Any, c: Any, T: int) -> None:
    pst, K = P.shape[1] * P.shape[2], P.shape[1]
    for _ in range(T):
        _K6(addr(h), 32, 1, addr(P), pst, addr(c), 128, K, 1, 128)
        _K2(addr(h), 32, 1, addr(P) + 6 * pst * 4, pst, addr(c) + 6 * 16 * 4, 128, K, 1, 32)


@numba.njit(cache=False)
def _eight(h: Any, P: Any, c: Any, T: int) -> None:
    pst, K = P.shape[1] * P.shape[2], P.shape[1]
    for _ in range(T):
        _K8(addr(h), 32, 1, addr(P), pst, addr(c), 128, K, 1, 128)


def main(steps: int = 10000, rounds: int = 15) -> int:
    rng = np.random.default_rng(0)
    P = pack(rng.standard_normal((32, 128)).astype(np.float32))
    h = rng.standard_normal((1, 32)).astype(np.float32)
    c1, c2 = np.zeros((1, 128), np.float32), np.zeros((1, 128), np.float32)
    _six_two(h, P, c1, 1)
    _eight(h, P, c2, 1)
    np.testing.assert_array_equal(c1, c2)
    got: dict[str, list[float]] = {"6+2": [], "8": []}
    fns = {"6+2": _six_two, "8": _eight}
    for r in range(rounds):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t0 = time.perf_counter()
            fns[name](h, P, c1, steps)
            got[name].append((time.perf_counter() - t0) / steps * 1e9)
    a, b = statistics.median(got["6+2"]), statistics.median(got["8"])
    print(f"AVX-512: {has_avx512()}, ROW_PANELS = {ROW_PANELS}")
    print(f"ns per step: 6+2 panels {a:.1f}, 8 panels {b:.1f}; 8 / (6+2) = {b / a:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
