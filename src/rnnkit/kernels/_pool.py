"""Big work arrays reused from pass to pass instead of fresh pages every time.

A pass allocates arrays of T*B rows (the projections, the state history, the gradients of the
step inputs, the layout copies). From 32 MB on glibc's ``malloc`` maps every such array afresh
and unmaps it when freed, so each pass pays the kernel for new zeroed pages: measured at S4
(128 x 200 x 256 -> 512) LSTM training on one thread, 680 ms of system time in a 3.1 s step
(22 %; S3 training 7 %, S4 inference 8 %), against about 10 ms when freed memory is reused.

:func:`empty` hands out such arrays as views of byte buffers that this module keeps: a buffer is
handed out again only when nothing references it any more (no array is a view of it: NumPy's
views all hold the buffer itself as their ``base``, so its reference count says so exactly). The
values of a fresh array are undefined, as ``np.empty``'s. The pool keeps at most ``CAP`` bytes
(``RNNKIT_POOL_BYTES``, read at import; 0 turns it off), dropping idle buffers, the longest unused
first, to make room; arrays below ``MIN_BYTES`` come from ``np.empty``.

Smaller arrays pay the same: glibc serves them from the top of its heap and gives the top back
to the operating system when they are freed (its trim threshold), so the next pass faults that
memory in again. Measured at S2 (32 x 50 x 32 -> 64, arrays of 0.1-1.6 MB) training on one thread, load
~13 on 2 cores, CPU time of one step (median of 40): LSTM 4.95-6.94 ms with the pool from 4 MB
on, 3.20 ms from 64 KB on; GRU 4.69-5.20 against 2.86 (the system time of 40 steps 60-140 ms
against 0-20).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

#: arrays from this many bytes on come from the pool
MIN_BYTES = 1 << 16


def _cap() -> int:
    env = os.environ.get("RNNKIT_POOL_BYTES", "")
    return int(env) if env.isdigit() else 1 << 30


CAP = _cap()

_bufs: list[np.ndarray] = []       # uint8 owners, the least recently handed out first
_lock = threading.Lock()


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _refs(bufs: list[np.ndarray], i: int) -> int:
    return sys.getrefcount(bufs[i])


#: what :func:`_refs` counts for an array that only a list holds (2 where the argument is
#: counted; interpreters that pass borrowed references count fewer, so it is measured)
_IDLE_REFS = _refs([np.empty(1, np.uint8)], 0)


def _idle(i: int) -> bool:
    """Whether nothing but the pool references buffer ``i``."""
    return _refs(_bufs, i) == _IDLE_REFS


def held() -> int:
    """Bytes the pool keeps now (buffers in use and idle)."""
    with _lock:
        return sum(b.nbytes for b in _bufs)


def clear() -> None:
    """Drop every idle buffer (those in use are dropped by the pool, not freed: their arrays keep
    them)."""
    with _lock:
        _bufs[:] = [b for i, b in enumerate(_bufs) if not _idle(i)]


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, C-contiguous, from an idle buffer of the pool when it is big."""
    dt = np.dtype(dtype)
    n = dt.itemsize
    for s in shape:
        n *= int(s)
    if n < MIN_BYTES or n > CAP:
        return np.empty(shape, dt)
    with _lock:
        got = -1
        for i in range(len(_bufs)):
            if _bufs[i].nbytes == n and _idle(i):
                got = i
                break
        if got >= 0:
            buf = _bufs.pop(got)
        else:
            total = sum(b.nbytes for b in _bufs)
            i = 0
            while total + n > CAP and i < len(_bufs):
                if _idle(i):
                    total -= _bufs.pop(i).nbytes
                else:
                    i += 1
            if total + n > CAP:
                return np.empty(shape, dt)
            buf = np.empty(n, np.uint8)
        _bufs.append(buf)                  # (the most recently handed out last)
        return buf.view(dt).reshape(shape)


def aligned(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, C-contiguous, its first element on a 64-byte boundary (NumPy
    aligns to 16 bytes): for the scratch arrays a pass keeps, whose rows the products load and
    store as 64-byte vectors. (Measured at S1, one thread, Intel Xeon: the inference walk 22.5 us
    with its projection chunk aligned, 23.7 us with it 16 bytes off.)"""
    dt = np.dtype(dtype)
    n = dt.itemsize
    for s in shape:
        n *= int(s)
    buf = np.empty(n + 64, np.uint8)
    off = -buf.ctypes.data % 64
    return buf[off:off + n].view(dt).reshape(shape)

