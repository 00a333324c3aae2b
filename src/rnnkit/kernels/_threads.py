"""Batch-parallel execution of the compiled time loops.

The rows of a batch never interact: each block of rows can run the WHOLE time loop on its own,
so a batch is split into one contiguous block per core and the blocks run at once, with no
synchronisation inside the loop (the kernels release the GIL and call no BLAS, so nothing
else spawns threads under them). Set ``RNNKIT_KERNEL_THREADS`` to cap the number of blocks.
Results do not depend on it: every product computes a row the same way whatever rows share it
(:mod:`._packed`).

The blocks after the first run on persistent worker threads, one per extra core, each handed
its block through a sequence number that it spins on for a bounded time after its last block
(:mod:`._spin`, compiled, without the GIL) before it sleeps on a lock; the caller spins the same
way for the block's end: no task objects, no queue. The first block runs on the
calling thread. A call that finds the workers busy (another thread of the program is inside a
call, or a block itself splits again) runs its blocks one after the other on its own thread:
the same values, since they do not depend on the split.
"""

from __future__ import annotations

import contextvars
import importlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rnnkit.kernels import _pool

#: a block has at least this many batch rows (smaller blocks lose more than they gain)
MIN_ROWS = 8
#: :func:`swap01` copies in parts on the cores from this many bytes on
PARALLEL_COPY_BYTES = 1 << 20
#: what handing a block to a worker and waiting for it costs the call, in multiply-adds of the
#: caller's rows (:func:`blocks` gives the calling thread about half of it in extra rows). Measured
#: on a 2-core KVM guest (AMD EPYC, Zen 4; an idle vCPU halts at once): the worker starts ~26 us
#: after the caller, and the caller, done first and asleep, wakes ~36 us after the worker is done:
#: ~60 us, about 2M multiply-adds of the LSTM S2 step (T=50, 32 + 64 inputs, 256 columns) at the
#: ~37 G/s it runs. S2 (32 rows) inference: 17 + 15 rows, 633 us a call (median), against 693
#: for 16 + 16 and 694 for 18 + 14 (interleaved, quiet machine); larger rows shift nothing.
HANDOFF_WORK = 1 << 21
#: :func:`pairs_pay`: the multiply-adds from which a pass of fewer than ``2 * MIN_ROWS`` rows
#: pays for running beside another on a second thread
PAIR_WORK = 8 * HANDOFF_WORK


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

Job = Callable[[int, int], None]


class _NoSpin:
    """The hand-off's flags without numba (:mod:`._spin`'s interface): read and written under
    the GIL, and no spinning (every wait blocks on its lock)."""

    GO, DONE, SLEEPING = 0, 1, 2
    WORKER_SPIN_US = JOIN_SPIN_US = 0

    @staticmethod
    def flags() -> np.ndarray:
        return np.zeros(3, np.int64)

    @staticmethod
    def store(f: np.ndarray, i: int, v: int) -> None:
        f[i] = v

    @staticmethod
    def peek(f: np.ndarray, i: int) -> int:
        return int(f[i])

    @staticmethod
    def wait_until(f: np.ndarray, i: int, target: int, max_ticks: int) -> bool:
        return bool(f[i] >= target)

    @staticmethod
    def ticks_per_us() -> float:
        return 1.0


_SPIN: Any = None


def _spin() -> Any:
    """The spin waits: :mod:`._spin` (compiled), loaded when the first worker starts, not when
    rnnkit is imported (importing rnnkit loads no numba: a program that never splits a batch
    does not pay for it), or :class:`_NoSpin` without numba."""
    global _SPIN
    if _SPIN is None:
        try:
            _SPIN = importlib.import_module("rnnkit.kernels._spin")
        except (ImportError, OSError):      # numba (or llvmlite) missing, or failing to load
            _SPIN = _NoSpin
    return _SPIN


def warm_hand_off() -> None:
    """Compile (or load from the cache) the hand-off's spin waits now, as ``rnnkit compile``
    does, not at the first split of a fit's batch."""
    sp = _spin()
    f = sp.flags()
    sp.store(f, sp.GO, 1)
    sp.wait_until(f, sp.GO, sp.peek(f, sp.GO), 0)
    sp.ticks_per_us()


class _Worker:
    """A daemon thread that runs one ``job(lo, hi)`` each time :meth:`start` posts one, and tells
    :meth:`wait` when the job has returned (or raised: :meth:`wait` re-raises it in the caller).

    A post is a sequence number in the shared flags (:mod:`._spin`): after each job the worker
    spins on it for up to ``WORKER_SPIN_US``, then announces that it sleeps and blocks on its
    ``go`` lock, which :meth:`start` releases only when the worker said so (the flag written
    before the sleep is announced and read after: one of the two threads always sees the other's
    write). The caller likewise spins for the job's end before it blocks on ``done``, which the
    worker releases before it writes the end."""

    def __init__(self) -> None:
        self.go = threading.Lock()
        self.go.acquire()
        self.done = threading.Lock()
        self.done.acquire()
        self.sp = sp = _spin()
        self.flags = sp.flags()
        self.posted = 0
        tpu = sp.ticks_per_us()
        self.spin, self.join_spin = int(sp.WORKER_SPIN_US * tpu), int(sp.JOIN_SPIN_US * tpu)
        self.job: Job | None = None
        self.lo = self.hi = 0
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, name="rnnkit-kernel", daemon=True).start()

    def _loop(self) -> None:
        sp, f, seen = self.sp, self.flags, 0
        while True:
            if not sp.wait_until(f, sp.GO, seen + 1, self.spin):
                sp.store(f, sp.SLEEPING, 1)
                if sp.peek(f, sp.GO) <= seen:
                    self.go.acquire()
                sp.store(f, sp.SLEEPING, 0)
                continue
            seen += 1
            job = self.job
            try:
                if job is not None:
                    job(self.lo, self.hi)
            except BaseException as e:  # noqa: BLE001 - handed to the caller by wait()
                self.error = e
            finally:
                self.job = None
                self.done.release()
                sp.store(f, sp.DONE, seen)

    def start(self, job: Job, lo: int, hi: int) -> None:
        self.job, self.lo, self.hi = job, lo, hi
        self.posted += 1
        self.sp.store(self.flags, self.sp.GO, self.posted)
        if self.sp.peek(self.flags, self.sp.SLEEPING):
            try:
                self.go.release()
            except RuntimeError:        # (already released: the worker has not taken it yet)
                pass

    def wait(self) -> None:
        self.sp.wait_until(self.flags, self.sp.DONE, self.posted, self.join_spin)
        self.done.acquire()
        err, self.error = self.error, None
        if err is not None:
            raise err


_workers: list[_Worker] = []
#: held while a call's blocks run on the workers (a second caller meanwhile runs its blocks itself)
_busy = threading.Lock()


def _after_fork() -> None:
    """A forked child has none of its parent's threads: it starts workers of its own."""
    global _busy
    _workers.clear()
    _busy = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


#: the cost of a block of ``n`` rows in the kernels' products, in any unit (set by
#: :mod:`._packed` when it loads, from its register blocking; None: every row costs the same)
block_cost: Callable[[int], float] | None = None
#: rows per register block of the products (:data:`._packed.MR`, set with ``block_cost``)
block_rows = 1


def blocks(B: int, row_work: int = 0) -> list[tuple[int, int]]:
    """Contiguous row blocks ``[lo, hi)`` covering ``range(B)``, one per core (at most). Two
    blocks split at ``B // 2`` or at the multiple of ``block_rows`` just below or above it
    within 1/16 of ``B // 2`` (the rest of a step costs by the row), whichever makes the costlier
    block cheapest (:data:`block_cost`; the even split on a tie). (Measured at S2, 32 rows: 18
    + 14 against 16 + 16, 1-6 % more CPU on the longer block.) Given ``row_work``, the
    multiply-adds of one row over the whole pass, the first block (the calling thread's) then
    takes ``HANDOFF_WORK / (2 * row_work)`` rows more, rounded (none once a row outweighs
    ``HANDOFF_WORK``), leaving the other at least ``MIN_ROWS``: the worker starts late, and the
    caller, done first, sleeps until it is done."""
    p = max(1, min(CORES, B // MIN_ROWS))
    edges = [B * k // p for k in range(p + 1)]
    cost = block_cost
    if p == 2 and cost is not None:
        m, r = B // 2, block_rows
        cands = [e for e in (m, m // r * r, -(-m // r) * r)
                 if MIN_ROWS <= e <= B - MIN_ROWS and 16 * abs(e - m) <= m]
        edges[1] = min(cands, key=lambda e: max(cost(e), cost(B - e)))
    if p == 2 and row_work > 0:
        edges[1] = max(edges[1], min(B - MIN_ROWS, edges[1] + (HANDOFF_WORK + row_work) // (2 * row_work)))
    return [(edges[k], edges[k + 1]) for k in range(p)]


def weighted_blocks(work: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous row blocks ``[lo, hi)`` covering the ``B = len(work)`` rows, one per core (at
    most, each of at least ``MIN_ROWS`` rows, as :func:`blocks`), whose rows' ``work`` (the
    multiply-adds of each row over the pass) sums to about the same in every block, the first
    (the calling thread's) ``HANDOFF_WORK / 2`` more: a padded batch under ``lengths``, its rows
    longest first, costs by the row's real steps, not by the row."""
    B = len(work)
    p = max(1, min(CORES, B // MIN_ROWS))
    c = np.cumsum(work, dtype=np.float64)
    total = float(c[-1]) if B else 0.0
    if p == 1 or total <= 0.0:
        return blocks(B)
    edges = [0]
    for k in range(1, p):
        target = total * k / p + HANDOFF_WORK / 2
        e = int(np.searchsorted(c, target)) + 1          # the rows [0, e) reach the target
        edges.append(min(max(e, edges[-1] + MIN_ROWS), B - (p - k) * MIN_ROWS))
    edges.append(B)
    return [(edges[k], edges[k + 1]) for k in range(p)]


def run_parts(n: int, job: Job) -> None:
    """Split ``range(n)`` into one part per core (at least ``MIN_ROWS`` each) and run
    ``job(lo, hi)`` for each, like :func:`run_blocks` (for the batched reductions)."""
    run_blocks(n, job)


def run_blocks(B: int, job: Job, row_work: int = 0, work: np.ndarray | None = None) -> None:
    """Run ``job(lo, hi)`` for every block of :func:`blocks` (``row_work``: see there; of
    :func:`weighted_blocks` given each row's ``work``): the first on this thread, the rest on
    the workers, and return when all have (the first exception raised, if any, once every block
    is over). When the workers are busy (another pass holds them: :func:`run_each`'s jobs,
    another thread of the program), ``job(0, B)`` on this thread: one block of every row, which
    computes each row as the blocks would."""
    if B < 2 * MIN_ROWS or CORES == 1 or _busy.locked():   # the common small case, without the
        job(0, B)       # list; or the workers are busy: one block here (not its parts in a row)
        return
    parts = blocks(B, row_work) if work is None else weighted_blocks(work)
    if len(parts) == 1:
        job(0, B)
        return
    run_split(parts, job)


def run_split(parts: list[tuple[int, int]], job: Job) -> None:
    """Run ``job(lo, hi)`` for every part ``(lo, hi)`` at once: the first on this thread, the
    rest on the workers (one after the other here when they are busy)."""
    if not _busy.acquire(blocking=False):
        for lo, hi in parts:
            job(lo, hi)
        return
    _on_workers(parts, job)


def pairs_pay(B: int, work: int) -> bool:
    """Whether two independent passes over a batch of ``B`` rows, ``work`` multiply-adds each
    (the two directions of a bidirectional layer), run faster side by side, one per thread
    (:func:`run_each`), than one after the other with the rows of each split over the cores:
    two or more cores, the row split would use at most two, and either it would split (``B``
    of ``2 * MIN_ROWS`` rows or more: then one hand-off instead of two, and each thread's
    products see all the rows) or each pass is worth ``PAIR_WORK`` (the hand-off and the
    threads' turns at the GIL cost about as much as a small pass). Measured, LSTM and GRU,
    AMD EPYC, two cores (one after the other / side by side): (B, T, F, H) = (1, 100, 16, 32)
    x0.35-0.43, (8, 100, 16, 32) x0.78-0.88, (32, 50, 32, 64) x1.20-1.42, (64, 100, 128, 256)
    x1.06-1.12."""
    return CORES >= 2 and min(CORES, B // MIN_ROWS) <= 2 and (B >= 2 * MIN_ROWS or work >= PAIR_WORK)


def run_each(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each of ``jobs`` called with no arguments, at once, one per core (the first on this
    thread, the others on the workers); their results, in order, once every job is over (the
    first exception raised, if any, then). Every job runs in a copy of this thread's context
    (``contextvars``: the kernel mode of :func:`rnnkit.kernels.use` goes with it); a split
    inside a job finds the workers busy and runs its parts on the job's own thread. On one core,
    or when the workers are busy, the jobs run one after the other here."""
    got: list[Any] = [None] * len(jobs)
    if CORES == 1 or len(jobs) < 2:
        for k, f in enumerate(jobs):
            got[k] = f()
        return got
    ctxs = [contextvars.copy_context() for _ in jobs]

    def part(lo: int, hi: int) -> None:
        for k in range(lo, hi):
            got[k] = ctxs[k].run(jobs[k])

    n = len(jobs)
    step = -(-n // CORES)                       # jobs per thread (consecutive ones, when more than cores)
    run_split([(lo, min(lo + step, n)) for lo in range(0, n, step)], part)
    return got


def run_phases(parts: list[tuple[int, int]], first: Job, then: Job) -> None:
    """``first(lo, hi)`` for every part, then, once every ``first`` has returned, ``then(lo, hi)``
    for every part: each part's two phases on one thread (the first part on this one), with ONE
    barrier between the phases instead of a return to this thread and a second hand-off. On one
    core, or when the workers are busy, this thread runs every ``first`` and then every ``then``. The first
    exception raised is re-raised here once every part is over (after a failed ``first`` no
    part runs ``then``)."""
    if len(parts) < 2 or CORES == 1 or not _busy.acquire(blocking=False):
        for lo, hi in parts:
            first(lo, hi)
        for lo, hi in parts:
            then(lo, hi)
        return
    bar = threading.Barrier(len(parts))

    def job(lo: int, hi: int) -> None:
        try:
            first(lo, hi)
        except BaseException:
            bar.abort()                 # the other parts leave the barrier at once
            raise
        try:
            bar.wait()
        except threading.BrokenBarrierError:
            return                      # another part's ``first`` failed: its error is raised
        except BaseException:           # (a KeyboardInterrupt here: release the others)
            bar.abort()
            raise
        then(lo, hi)

    _on_workers(parts, job)


def _on_workers(parts: list[tuple[int, int]], job: Job) -> None:
    """:func:`run_split`'s hand-off, with ``_busy`` held by the caller (released here)."""
    started: list[_Worker] = []
    interrupted = True
    try:
        while len(_workers) < len(parts) - 1:
            _workers.append(_Worker())
        for w, (lo, hi) in zip(_workers, parts[1:], strict=False):
            w.start(job, lo, hi)
            started.append(w)
        try:
            job(*parts[0])
        finally:
            errors: list[BaseException] = []
            for w in started:
                try:
                    w.wait()
                except Exception as e:  # noqa: BLE001 - every worker is waited for first
                    errors.append(e)
            interrupted = False
        if errors:
            raise errors[0]
    finally:
        if interrupted:      # (a KeyboardInterrupt while a worker may still run: new workers)
            del _workers[:len(started)]
        _busy.release()


def swap01(a: np.ndarray) -> np.ndarray:
    """``np.ascontiguousarray(a.transpose(1, 0, 2))`` for a 3D ``a`` (any strides): the layout
    change between batch-major and time-major, copied in parts of the first axis of the result on
    the cores when it is big (NumPy's copy releases the GIL), into an array of :mod:`._pool`."""
    out = _pool.empty((a.shape[1], a.shape[0], a.shape[2]), a.dtype)
    t = a.transpose(1, 0, 2)
    n = out.shape[0]
    if out.nbytes < PARALLEL_COPY_BYTES or CORES == 1 or n < 2:
        out[...] = t
        return out
    p = min(CORES, n)

    def part(lo: int, hi: int) -> None:
        out[lo:hi] = t[lo:hi]

    run_split([(n * k // p, n * (k + 1) // p) for k in range(p)], part)
    return out
