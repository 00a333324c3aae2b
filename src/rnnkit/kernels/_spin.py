"""Bounded spin waits for the worker hand-off of :mod:`._threads`, compiled, holding no GIL.

A thread that blocks on a lock gives its core back; on a virtual machine an idle vCPU halts, and
waking it costs the host a round trip. Measured on a 2-core KVM guest (Intel Xeon): a worker
started 115 us after the hand-off, ran its first 150 us of products 40 % slower than a warm core,
and the caller, asleep on the worker's lock, woke 80 us after the worker was done, so two blocks
of the S2 LSTM (32 rows) took 0.76 ms on two threads against 0.85 ms on one. The waits here
instead read a flag in a loop, with the CPU's pause hint between reads, for a bounded time
(:data:`WORKER_SPIN_US` after each block, :data:`JOIN_SPIN_US` for the caller), then give up
and the caller of the wait blocks on its lock as before: a program that calls rarely keeps its
cores idle, and unlike an unbounded spin (OpenMP's) a busy core is never held for long.

Flags are int64 sequence numbers in a small array shared by the two threads, read and written
with sequentially consistent atomics.
"""

from __future__ import annotations

import platform
import time
from typing import Any

import numpy as np
from numba import types
from numba.extending import intrinsic

from rnnkit.kernels._jit import njit
from rnnkit.kernels._numba_private import cgutils, ir

#: how long a worker waits, spinning, for its next block before it sleeps on its lock
WORKER_SPIN_US = 500
#: how long the caller waits, spinning, for a worker's block before it sleeps on its lock
JOIN_SPIN_US = 2000
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
#: the waits release the GIL; the one-load and one-store calls keep it (releasing it there would
#: hand it to a thread waiting for it, measured 15 us before the caller got it back)
_OPTS: dict[str, Any] = {"cache": True}
_WAIT: dict[str, Any] = {"cache": True, "nogil": True}


def _element(context: Any, builder: Any, sig: Any, args: Any) -> Any:
    ary = context.make_array(sig.args[0])(context, builder, args[0])
    idx = context.cast(builder, args[1], sig.args[1], types.intp)
    return builder.gep(ary.data, [idx])


def _load_typer(typingctx: Any, flags: Any, i: Any) -> Any:
    """``flags[i]`` (an int64 array), read with a sequentially consistent atomic load."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.load_atomic(_element(context, builder, sig, args), "seq_cst", 8)
    return types.int64(flags, i), codegen


def _store_typer(typingctx: Any, flags: Any, i: Any, v: Any) -> Any:
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        val = context.cast(builder, args[2], sig.args[2], types.int64)
        builder.store_atomic(val, _element(context, builder, sig, args), "seq_cst", 8)
        return context.get_dummy_value()
    return types.void(flags, i, v), codegen


def _ticks_typer(typingctx: Any) -> Any:
    """The CPU's time-stamp counter on x86 (``llvm.readcyclecounter``); 0 elsewhere (on AArch64
    the same intrinsic reads a counter that user code may not be allowed to read)."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        if not _X86:
            return ir.Constant(ir.IntType(64), 0)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.int64(), codegen


def _pause_typer(typingctx: Any) -> Any:
    """The spin-wait hint (``pause`` on x86; nothing elsewhere)."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        if _X86:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


load: Any = intrinsic(_load_typer)
_store: Any = intrinsic(_store_typer)
_ticks: Any = intrinsic(_ticks_typer)
_pause: Any = intrinsic(_pause_typer)


@njit(**_OPTS)
def store(flags: Any, i: int, v: int) -> None:
    """``flags[i] = v`` with a sequentially consistent atomic store."""
    _store(flags, i, v)


@njit(**_OPTS)
def peek(flags: Any, i: int) -> int:
    """``flags[i]``, read atomically (from Python)."""
    return load(flags, i)


@njit(**_OPTS)
def ticks() -> int:
    """The time-stamp counter (from Python, to calibrate :func:`wait_until`'s bound)."""
    return _ticks()


@njit(**_WAIT)
def wait_until(flags: Any, i: int, target: int, max_ticks: int) -> bool:
    """Spin until ``flags[i] >= target`` (True), or for about ``max_ticks`` of the time-stamp
    counter (False), the GIL released. It also stops after ``max_ticks`` reads, which only a
    counter that does not advance lets it reach (a read with its pause takes tens of ticks)."""
    t0 = _ticks()
    n = 0
    while load(flags, i) < target:
        n += 1
        if (n & 31) == 0 and (_ticks() - t0 > max_ticks or n > max_ticks):
            return load(flags, i) >= target
        _pause()
    return True


def ticks_per_us() -> float:
    """Time-stamp counter ticks per microsecond, measured once over 2 ms (at least 1: without a
    counter the bounds are counts of reads, so the waits spin for a few microseconds at most)."""
    global _TPU
    if _TPU is None:
        t0, c0 = time.perf_counter(), ticks()
        time.sleep(0.002)
        t1, c1 = time.perf_counter(), ticks()
        _TPU = max(1.0, (c1 - c0) / max((t1 - t0) * 1e6, 1.0))
    return _TPU


_TPU: float | None = None


def flags() -> np.ndarray:
    """A fresh flag array: ``[go, done, sleeping]``, all 0."""
    return np.zeros(3, np.int64)


GO, DONE, SLEEPING = 0, 1, 2
