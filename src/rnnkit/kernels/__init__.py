"""Fast paths of the recurrent layers: compiled time loops beside the NumPy reference.

The cells in :mod:`rnnkit.recurrent` stay the readable reference. When the mode is ``"fast"``
(the default) and Numba is installed (extra ``rnnkit[fast]``), the walker hands the whole time
loop of a SimpleRNN, LSTM or GRU (either ``reset_after``) with activation tanh, sigmoid, relu or
linear to one compiled function; anything else (softmax, a custom cell) runs the reference.
The fast path produces the same caches, so either backward can follow either forward.

Select the path::

    RNNKIT_KERNELS=reference python train.py         # environment, read at import
    rnnkit.kernels.set_mode("reference")              # process-wide default
    with rnnkit.kernels.use("reference"): ...         # this thread / async context only

Numerics: float64 equals the reference to rounding (~1e-15 relative per step). float32 uses a
rational tanh (max abs error 2.6e-7; sigmoid 1.6e-7) instead of libm's, so float32 results
differ from the reference by a few 1e-7 per step.

Threads: a batch of at least 16 rows is split into one block of rows per core, each block running
the whole time loop on its own thread (rows never interact; BLAS single-threaded inside a block).
``RNNKIT_KERNEL_THREADS=1`` keeps everything on the calling thread (read at the first kernel call).

Numba is imported on the first call that needs a kernel, never by ``import rnnkit``; if it is
missing, one ``RuntimeWarning`` says so and every layer runs the reference.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

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


def _load() -> ModuleType | None:
    global _drv, _unavailable
    if _drv is not None or _unavailable is not None:
        return _drv
    try:
        import rnnkit.kernels._driver as drv
    except ImportError as e:  # numba, or scipy (whose BLAS the kernels call), is missing
        if not isinstance(e, ModuleNotFoundError) and "scipy" not in str(e):
            raise
        _unavailable = str(e)
        warnings.warn(
            f"rnnkit: the fast kernels need numba and scipy (pip install 'rnnkit[fast]'); "
            f"running the NumPy reference instead ({e})", RuntimeWarning, stacklevel=3)
        return None
    _drv = drv
    return drv


def fast_walker(layer: Any) -> ModuleType | None:
    """The driver module to run ``layer``'s time loop, or None for the reference."""
    if mode() != "fast" or layer.activation.name not in ("tanh", "sigmoid", "relu", "linear"):
        return None
    drv = _load()
    if drv is None or not drv.supports(layer):
        return None
    return drv


__all__ = ["MODES", "available", "fast_walker", "mode", "set_mode", "use"]
