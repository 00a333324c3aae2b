"""Batch-parallel execution of the compiled time loops.

The rows of a batch never interact: each block of rows can run the WHOLE time loop on its own,
so a batch is split into one contiguous block per core and the blocks run at once, with no
synchronisation inside the loop (the kernels release the GIL). Inside a block the BLAS calls are
made single-threaded (OpenBLAS's thread-local setting, found in the process's own mappings), so
the cores are not oversubscribed. Set ``RNNKIT_KERNEL_THREADS`` to cap the number of blocks.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: a block has at least this many batch rows (smaller blocks lose more than they gain)
MIN_ROWS = 8
#: from this many multiply-adds per step (B*H*G*H) on, use one block and OpenBLAS's own threads
#: instead (disabled: on a quiet machine that was ~1.3x faster at S3/S4, since OpenBLAS splits U's
#: columns and each thread packs half of U, but its per-step barrier collapses as soon as another
#: process or library (PyTorch's OpenMP threads in the benchmark) holds a core: measured 2x slower
#: at S4 LSTM inference in the interleaved benchmark; the blocks never wait for each other)
BIG_STEP = 1 << 62


def _usable_cores() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    env = os.environ.get("RNNKIT_KERNEL_THREADS", "")
    if env.isdigit() and int(env) >= 1:
        n = min(n, int(env))
    return max(1, n)


def _openblas_local() -> Any:
    """``openblas_set_num_threads_local`` of the OpenBLAS scipy loaded (the one the kernels
    call), or None (another BLAS, an older OpenBLAS, not Linux)."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {ln.split()[-1] for ln in fh if "openblas" in ln.lower() and "/" in ln}
    except OSError:
        return None
    for p in sorted(paths):
        if "scipy" not in p or "64_" in os.path.basename(p):   # numpy's ILP64 copy is not ours
            continue
        try:
            fn = ctypes.CDLL(p).openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    return None


CORES = _usable_cores()
_set_local = _openblas_local()
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _init_worker() -> None:
    if _set_local is not None:
        _set_local(1)


def blocks(B: int, step_macs: int = 0) -> list[tuple[int, int]]:
    """Contiguous row blocks ``[lo, hi)`` covering ``range(B)`` (one when ``step_macs``, the
    multiply-adds of one step's recurrent GEMM, reach :data:`BIG_STEP`)."""
    p = 1 if step_macs >= BIG_STEP else max(1, min(CORES, B // MIN_ROWS))
    edges = [B * k // p for k in range(p + 1)]
    return [(edges[k], edges[k + 1]) for k in range(p)]


def run_parts(n: int, job: Callable[[int, int], None]) -> None:
    """Split ``range(n)`` into one part per core (at least ``MIN_ROWS`` each) and run
    ``job(lo, hi)`` for each, like :func:`run_blocks` (for the batched reductions)."""
    run_blocks(n, 0, job)


def run_blocks(B: int, step_macs: int, job: Callable[[int, int], None]) -> None:
    """Run ``job(lo, hi)`` for every block: the first on this thread, the rest on the pool."""
    global _pool
    if B < 2 * MIN_ROWS or CORES == 1:          # the common small case, without the list
        job(0, B)
        return
    parts = blocks(B, step_macs)
    if len(parts) == 1:
        job(0, B)
        return
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=CORES - 1, thread_name_prefix="rnnkit-kernel",
                                       initializer=_init_worker)
    futures = [_pool.submit(job, lo, hi) for lo, hi in parts[1:]]
    old = _set_local(1) if _set_local is not None else None
    try:
        job(*parts[0])
    finally:
        if _set_local is not None:
            _set_local(old)
        for f in futures:
            f.result()
