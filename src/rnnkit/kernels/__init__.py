"""Fast paths of the recurrent layers: compiled time loops beside the NumPy reference.

The cells stay the readable reference. Compiled loops are REGISTERED for a cell type
(:func:`register`: ``{cell type -> kernel}``); this package never imports the cells. When the
mode is ``"fast"`` (the default) and the kernel's :meth:`supports` accepts the cell, the walker
hands it the whole time loop (:func:`find`); a cell without a kernel (a user's own, or a
built-in one with a softmax activation) runs the reference, with no warning. The built-in
kernels cover SimpleRNN, LSTM (with or without projection) and GRU (either ``reset_after``)
with activations tanh, sigmoid, hard_sigmoid, relu or linear, with or without bias. A kernel
produces the reference's caches, so either backward can follow either forward.

A kernel is any object with::

    supports(cell) -> bool
    walk(cell, weights, x_tm, init, record, keep_seq) -> (seq | None, final states, cache | None)
    walk_back(cell, weights, cache, grad, full) -> (dx_tm, {weight name: gradient}, d_init)

with the meaning of :func:`rnnkit.recurrent._walker.walk` / ``walk_back``; the cell's options
are read from its public attributes (:class:`KernelCell`) and the weights arrive as a mapping.

Select the path::

    RNNKIT_KERNELS=reference python train.py         # environment, read at import
    rnnkit.kernels.set_mode("reference")              # process-wide default
    with rnnkit.kernels.use("reference"): ...         # this thread / async context only

Numerics: float64 equals the reference to rounding (~1e-15 relative per step). float32 uses a
rational tanh (max abs error 2.6e-7; sigmoid 1.6e-7) instead of libm's, so float32 results
differ from the reference by a few 1e-7 per step.

Threads: a batch of at least 16 rows is split into one block of rows per core, each block running
the whole time loop on its own thread (rows never interact; no BLAS inside a block: the products
are rnnkit's own packed ones). ``RNNKIT_KERNEL_THREADS=1`` keeps everything on the calling thread
(read at the first kernel call). Results do not depend on the number of threads nor on the batch
size: a row's result is computed the same way whatever rows share its block.

Numba is imported on the first call that needs a kernel, never by ``import rnnkit``; if it is
missing, one ``RuntimeWarning`` says so and every layer runs the reference.

Compilation: the first call of a kernel for a dtype compiles it for this machine (Numba) and
stores it in Numba's on-disk cache; later processes load it (well under a second). The first
compilation of a process says so once on stderr; :func:`compile_seconds` counts the time spent
compiling, which the training progress bar leaves out of its rate and time estimates.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Protocol

from rnnkit._errors import InvalidParameterError

MODES = ("fast", "reference")
_ENV = "RNNKIT_KERNELS"


def _check(mode: Any, where: str) -> str:
    if not isinstance(mode, str) or mode.lower() not in MODES:
        raise InvalidParameterError(f"{where}: kernel mode must be one of {MODES}, got {mode!r}")
    return mode.lower()


def _from_env() -> str:
    raw = os.environ.get(_ENV, "fast")
    try:
        return _check(raw, _ENV)
    except InvalidParameterError as e:
        warnings.warn(f"{e}; using 'fast'", RuntimeWarning, stacklevel=2)
        return "fast"


_default: str = _from_env()
_local: contextvars.ContextVar[str | None] = contextvars.ContextVar("rnnkit_kernels", default=None)
_drv: ModuleType | None = None
_unavailable: str | None = None


def mode() -> str:
    """The kernel mode in force here: ``"fast"`` or ``"reference"``."""
    m = _local.get()
    return _default if m is None else m


def set_mode(mode: str) -> None:
    """Set the process-wide default mode (``use`` overrides it locally)."""
    global _default
    _default = _check(mode, "rnnkit.kernels.set_mode")


@contextlib.contextmanager
def use(mode: str) -> Iterator[None]:
    """Run the block with ``mode`` (``"fast"`` / ``"reference"``) in this context only."""
    token = _local.set(_check(mode, "rnnkit.kernels.use"))
    try:
        yield
    finally:
        _local.reset(token)


def available() -> bool:
    """True when the compiled kernels can be loaded (imports numba on first call)."""
    return _load() is not None


_compile_lock = threading.Lock()
_compile_state = {"depth": 0, "start": 0.0, "total": 0.0, "announced": False}


def compile_seconds() -> float:
    """Seconds this process has spent compiling kernels so far (0.0 when all came from the cache)."""
    with _compile_lock:
        st = _compile_state
        return float(st["total"]) + (time.perf_counter() - float(st["start"]) if st["depth"] else 0.0)


def _watch_compiles() -> None:
    """Announce the first compilation on stderr and time every compilation (Numba's events)."""
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            with _compile_lock:
                st = _compile_state
                if st["depth"] == 0:
                    st["start"] = time.perf_counter()
                    if not st["announced"]:
                        st["announced"] = True
                        from tqdm import tqdm  # (writes above an active progress bar)

                        tqdm.write("rnnkit: compiling the kernels for this machine, once (about 30 s "
                                   "on an idle 2-core machine; later runs load them from the cache)",
                                   file=sys.stderr)
                st["depth"] = int(st["depth"]) + 1

        def on_end(self, ev: Any) -> None:
            with _compile_lock:
                st = _compile_state
                st["depth"] = max(0, int(st["depth"]) - 1)
                if st["depth"] == 0:
                    st["total"] = float(st["total"]) + time.perf_counter() - float(st["start"])

    event.register("numba:compile", _Listener())


def _load() -> ModuleType | None:
    global _drv, _unavailable
    if _drv is not None or _unavailable is not None:
        return _drv
    try:
        _watch_compiles()
        import rnnkit.kernels._driver as drv
    except (ImportError, OSError) as e:  # numba (or llvmlite) missing, or failing to load
        _unavailable = str(e)
        warnings.warn(
            f"rnnkit: the fast kernels need numba (pip install 'rnnkit[fast]'); "
            f"running the NumPy reference instead ({e})", RuntimeWarning, stacklevel=3)
        return None
    _drv = drv
    return drv


class KernelCell(Protocol):
    """What a kernel may read of a cell: its public configuration."""

    units: int
    state_names: tuple[str, ...]
    input_kernel: str | None
    recurrent_kernel: str | None
    bias: str | None

    def state_sizes(self) -> tuple[int, ...]: ...


#: the key under which the weights mapping a walk receives carries the pass's recurrent dropout
#: mask (B, S) (the state is multiplied by it where it enters the recurrent products)
RECURRENT_DROPOUT = "__recurrent_dropout__"

_REGISTRY: dict[type, Any] = {}
_resolved: dict[str, Any] = {}   # "module:attribute" -> the kernel it names, once imported


def register(cell_type: type, kernel: Any) -> None:
    """Run ``cell_type``'s time loops with ``kernel`` (an object, or ``"module:attribute"``,
    imported on first use). Exactly this type: a subclass of a registered cell runs the
    reference until it registers a kernel of its own."""
    if not isinstance(cell_type, type):
        raise InvalidParameterError(f"rnnkit.kernels.register: expected a cell class, got {cell_type!r}")
    _REGISTRY[cell_type] = kernel


def _resolve(cell_type: type) -> Any:
    impl = _REGISTRY.get(cell_type)
    if isinstance(impl, str):      # a built-in kernel: compiled with numba, imported lazily
        if _load() is None:        # numba missing: warned once
            return None
        import importlib

        got = _resolved.get(impl)
        if got is None:
            mod, _, attr = impl.partition(":")
            got = _resolved[impl] = getattr(importlib.import_module(mod), attr)
        return got
    return impl


def find(cell: Any) -> Any:
    """The registered kernel that runs ``cell`` here, or None (the reference)."""
    if mode() != "fast" or type(cell) not in _REGISTRY:
        return None
    impl = _resolve(type(cell))
    if impl is None or not impl.supports(cell):
        return None
    return impl


def registered() -> dict[type, Any]:
    """A copy of the registry ``{cell type: kernel or "module:attribute"}``."""
    return dict(_REGISTRY)


__all__ = ["MODES", "RECURRENT_DROPOUT", "KernelCell", "available", "compile_seconds", "find", "mode",
           "register", "registered", "set_mode", "use"]
