"""Batch-parallel execution of the compiled time loops.

The rows of a batch never interact: each block of rows can run the WHOLE time loop on its own,
so a batch is split into one contiguous block per core and the blocks run at once, with no
synchronisation inside the loop (the kernels release the GIL and call no BLAS, so nothing
else spawns threads under them). Set ``RNNKIT_KERNEL_THREADS`` to cap the number of blocks.
Results do not depend on it: every product computes a row the same way whatever rows share it
(:mod:`._packed`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

#: a block has at least this many batch rows (smaller blocks lose more than they gain)
MIN_ROWS = 8


def _usable_cores() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    env = os.environ.get("RNNKIT_KERNEL_THREADS", "")
    if env.isdigit() and int(env) >= 1:
        n = min(n, int(env))
    return max(1, n)


CORES = _usable_cores()
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def blocks(B: int) -> list[tuple[int, int]]:
    """Contiguous row blocks ``[lo, hi)`` covering ``range(B)``, one per core (at most)."""
    p = max(1, min(CORES, B // MIN_ROWS))
    edges = [B * k // p for k in range(p + 1)]
    return [(edges[k], edges[k + 1]) for k in range(p)]


def run_parts(n: int, job: Callable[[int, int], None]) -> None:
    """Split ``range(n)`` into one part per core (at least ``MIN_ROWS`` each) and run
    ``job(lo, hi)`` for each, like :func:`run_blocks` (for the batched reductions)."""
    run_blocks(n, job)


def run_blocks(B: int, job: Callable[[int, int], None]) -> None:
    """Run ``job(lo, hi)`` for every block: the first on this thread, the rest on the pool."""
    global _pool
    if B < 2 * MIN_ROWS or CORES == 1:          # the common small case, without the list
        job(0, B)
        return
    parts = blocks(B)
    if len(parts) == 1:
        job(0, B)
        return
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=CORES - 1, thread_name_prefix="rnnkit-kernel")
    futures = [_pool.submit(job, lo, hi) for lo, hi in parts[1:]]
    try:
        job(*parts[0])
    finally:
        for f in futures:
            f.result()
