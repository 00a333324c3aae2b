"""Where a compiled loop beats BLAS for the per-step products, measured on THIS machine.

A recurrent step multiplies a few rows (a block of the batch) by the recurrent kernel. BLAS
libraries differ in what such a small call costs: OpenBLAS has small-matrix kernels on AVX-512
(a call of 1 x 32 x 128 ~0.2 us) but not on AVX2, where the same call costs 2-4 us and a
1 x 256 x 1024 one ~190 us (it packs the whole kernel on every call), against ~20 us for a
compiled loop. So the crossover is measured, never hard-coded: for each class of product width
``K * N`` the largest row count ``M`` at which :func:`~rnnkit.kernels._gemm.loop_gemm` is faster
than BLAS (single-threaded, as inside the kernels).

The table is measured once per machine (about a second) and kept as JSON in the user's cache
folder (``$XDG_CACHE_HOME/rnnkit`` or ``~/.cache/rnnkit``), keyed by the CPU, its instruction
sets, the library versions and the environment variables that select BLAS or Numba code paths;
a change of any of them measures again. ``RNNKIT_LOOP_GEMM_MAX_M=<int>`` overrides the table for
every shape (0: always BLAS).
"""

from __future__ import annotations

import json
import math
import os
import platform
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ENV = "RNNKIT_LOOP_GEMM_MAX_M"
#: (K, N) of the measured classes (K * N from 2**10 to 2**20) and the row counts tried
CLASSES = ((16, 64), (32, 128), (64, 256), (128, 512), (256, 1024), (512, 2048))
ROWS = (1, 2, 4, 8, 16, 32, 64)

_lock = threading.Lock()
_tables: dict[str, list[tuple[int, int]]] = {}


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rnnkit" / "gemm-crossover.json"


def machine_key(dtype: str) -> str:
    """What the measurement depends on: CPU, instruction sets, libraries, code-path switches."""
    import numba
    import scipy

    cpu, flags = platform.processor() or "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not cpu:
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                flags = ",".join(f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl") if f in have)
                break
    except OSError:
        pass
    from rnnkit import __version__

    env = ",".join(f"{k}={os.environ.get(k, '')}" for k in ("OPENBLAS_CORETYPE", "NUMBA_CPU_NAME",
                                                             "NUMBA_CPU_FEATURES"))
    return (f"{cpu}|{flags}|{platform.machine()}|numpy {np.__version__}|scipy {scipy.__version__}|"
            f"numba {numba.__version__}|rnnkit {__version__}|{env}|{dtype}")


def measure(dtype: str, budget_s: float = 0.004) -> list[tuple[int, int]]:
    """[(K * N, largest M where the loop wins)] for every class (0: BLAS always wins)."""
    from rnnkit.kernels._gemm import time_gemms

    rng = np.random.default_rng(0)
    table = []
    for K, N in CLASSES:
        Bm = rng.standard_normal((K, N)).astype(dtype)
        best_m, losses = 0, 0
        for M in ROWS:
            A = rng.standard_normal((M, K)).astype(dtype)
            C = np.zeros((M, N), dtype)
            t = {}
            for loop in (True, False):
                time_gemms(A, Bm, C, 1, loop)
                t0 = time.perf_counter()
                time_gemms(A, Bm, C, 1, loop)
                reps = max(1, min(20000, int(budget_s / max(time.perf_counter() - t0, 1e-7))))
                best = math.inf
                for _ in range(3):
                    t0 = time.perf_counter()
                    time_gemms(A, Bm, C, reps, loop)
                    best = min(best, (time.perf_counter() - t0) / reps)
                t[loop] = best
            if t[True] < 0.9 * t[False]:
                best_m, losses = M, 0
            else:
                losses += 1
                if losses == 2:
                    break
        table.append((K * N, best_m))
    return table


def _load_or_measure(dtype: str, measure_fn: Callable[[str], list[tuple[int, int]]]) -> list[tuple[int, int]]:
    key = machine_key(dtype)
    path = cache_path()
    data: dict[str, Any] = {}
    try:
        data = json.loads(path.read_text())
        got = data.get(key)
        if isinstance(got, list) and all(isinstance(r, list) and len(r) == 2 for r in got):
            return [(int(a), int(b)) for a, b in got]
    except (OSError, ValueError):
        data = {}
    table = measure_fn(dtype)
    data = {k: v for k, v in data.items() if isinstance(k, str)}
    data[key] = [list(r) for r in table]
    try:   # atomically; a cache folder that cannot be written only costs a measurement next time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass
    return table


Table = list[tuple[int, int]]


def loop_max_m(K: int, N: int, dtype: Any, measure_fn: Callable[[str], Table] = measure) -> int:
    """The most rows for which the compiled loop does a (M x K) @ (K x N) product here."""
    env = os.environ.get(ENV, "").strip()
    if env:
        if env.isdigit():
            return int(env)
        from rnnkit._errors import InvalidParameterError

        raise InvalidParameterError(f"{ENV} must be a non-negative int, got {env!r}")
    name = np.dtype(dtype).name
    with _lock:
        table = _tables.get(name)
        if table is None:
            table = _tables[name] = _load_or_measure(name, measure_fn)
    width = math.log2(max(1, K * N))
    return min(table, key=lambda r: abs(math.log2(r[0]) - width))[1]
