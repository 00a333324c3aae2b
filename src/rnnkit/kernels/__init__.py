"""Fast paths of the recurrent layers: one compiled walker over each cell's compiled step.

The cells stay the readable reference (:meth:`rnnkit.Cell.step` / ``step_back``). A cell may
also give its step's gate arithmetic as compiled functions over rows (:class:`Step`, the class
attribute :attr:`rnnkit.Cell.compiled_step`); then, when the mode is ``"fast"`` (the default),
ONE compiled walker runs the time loop of every such cell: the input projection, the recurrent
product of each group of :meth:`~rnnkit.Cell.rec_groups` on packed weights, the output
projection, direction, masks, recurrent dropout, initial and final states, batch-block
threading, the cache, and the batched weight-gradient reductions; the cell's functions only
compute what happens between the products. SimpleRNN, LSTM (with ``proj_size``) and GRU (both
forms) are such cells. A compiled path runs exactly what the reference runs, or does not run:
a step declares in :attr:`Step.implements` the values it computes of every option of the cell
(every key of ``cell.get_config()`` but ``units``: ``activation``, ``use_bias``, ...), and a
cell with an option undeclared or a value outside the declared ones runs the reference, as
does a cell without a compiled step, or whose :meth:`Step.options` returns None, with no
warning (e.g. a softmax activation: no compiled step implements it).
:func:`find` decides; it never looks at the cell's type: a subclass that overrides ``step``,
``step_back`` or ``rec_groups`` below the class that declares ``compiled_step`` runs the
reference until it declares a compiled step of its own.

The compiled step
-----------------

``forward(k, a, rec, fed, st, i0, i1, pk, j, own, tmp, opts)`` runs after the product of group
``k`` (for ``k`` = 0, 1, ... in order) of each step; ``backward(k, g, d, dr, dfed, fed, dst,
dpk, st, i0, i1, pk, j, own, gown, tmp, opts)`` runs before the gradient goes back through
that product (``k`` = ..., 1, 0). Both are ``numba.njit`` functions (``rnnkit.kernels.ops``
has the options and helpers of the built-in ones); every 2D array below is (B, width) with
contiguous rows (any row stride: a block of the batch), B the rows of the block:

- ``a`` (B, N): the step input ``x_s @ W + b[0]``, to which the products of the groups up to
  ``k`` are added (unless ``rec_apart``); the step may overwrite it (it is parked under
  ``input_park`` as the step leaves it). ``rec`` (B, N): with ``rec_apart``, the products go
  here instead, onto row 1 of the bias (zeros without one); (B, 0) otherwise.
- ``fed`` (B, S): state part 0 as the products see it (times the recurrent dropout mask).
- ``st``: the state parts, 3D arrays; the step reads ``st[p][i0]`` (entering) and writes
  ``st[p][i1]`` (leaving) for every part, except part 0 under an output projection, which the
  walker writes as ``pk[projects][j] @ P`` after the last group.
- ``pk``: the parks, 3D arrays in :meth:`Step.parks` order; the step writes ``pk[q][j]``. A
  group whose source is a park reads the park written by an earlier group's step.
- ``own``: the parameters named by :attr:`Step.own`, flattened (read-only). ``opts``: the ints
  of :meth:`Step.options`. ``tmp`` (B, N): scratch for this call only.
- backward: ``g`` = the parked step input (B, N); ``d`` (B, N) receives dL/d(step input)
  (every column of group ``k`` by the end of phase ``k``), ``dr`` dL/d(rec) with ``rec_apart``.
  ``dst`` (B, w) per state part holds dL/d(state leaving) on entry to the first phase; by the
  end of phase 0 it must hold the part of dL/d(state entering) that does not pass through the
  products (zero if none). ``dfed`` (B, S) accumulates dL/d(fed) (the walker adds the products'
  share and then applies the dropout mask); ``dpk[q]`` (B, w) holds dL/d(park q) from the
  product that read it (or from the output projection). ``gown[n]`` (B, size) accumulates each
  row's contributions to the gradient of ``own[n]`` over the steps (the walker sums the rows).

Rules (checked when a layer is built, an :class:`~rnnkit.InvalidParameterError` naming the
rule otherwise): the cell names an ``input_kernel`` and a ``recurrent_kernel``; one or two
groups, contiguous from column 0 to N, each from state part 0 or a park as wide as U has
rows; a bias has 1 row, or 2 with ``rec_apart``; ``own`` names parameters that are none of
those; parks have distinct names, none a state part's or ``input_park``; ``implements`` maps
option names to containers of values; ``cell.get_config()`` returns every argument of the cell's
constructor (so no option escapes :meth:`Step.missing`). On masked rows the step
runs on whatever the state holds and the walker puts the carried state back afterwards;
backward, those rows arrive with a zero gradient and what the step returns for them is
discarded, so the step must stay finite there. The step must write only what it is given to
write (``a``, ``rec``, ``st[.][i1]``, ``pk[.][j]``, ``tmp``; ``d``, ``dr``, ``dfed``, ``dst``,
``gown``, ``tmp``, and ``dpk`` of the parks it reads back), and nothing across rows.

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
size: a row's result is computed the same way whatever rows share its block. A padded batch under
``lengths`` (its rows longest first at inference) is split where the rows' real steps balance;
the two directions of a ``Bidirectional`` inference run side by side, one per thread, where that
pays (:func:`rnnkit.kernels._threads.pairs_pay`).

Memory: a pass's big arrays (from 4 MB: the projections, the state history, the gradients of
the step inputs, the layout copies, the outputs) come from a pool of buffers that are handed out
again once nothing references them (:mod:`rnnkit.kernels._pool`), instead of fresh pages from the
kernel every pass; it keeps at most ``RNNKIT_POOL_BYTES`` (read at import, default 1 GiB; 0: none).

Numba is imported on the first call that needs a kernel, never by ``import rnnkit``; if it is
missing, one ``RuntimeWarning`` says so and every layer runs the reference.

Compilation: the walker is compiled once per compiled step and dtype that a process uses (a
model compiles only its own cells), and stored in Numba's on-disk cache keyed on the step's
source files; later processes load it (well under a second). The first compilation of a
process says so once on stderr; :func:`compile_seconds` counts the time spent compiling, which
the training progress bar leaves out of its rate and time estimates. ``rnnkit demo`` on an empty
cache has a second process compile the backward kernels into the cache meanwhile (the fit
loads them from there: the same machine code, the same bits; ``RNNKIT_COMPILE_AHEAD=0`` turns
it off).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Protocol

from rnnkit._errors import InvalidParameterError
from rnnkit.kernels._rules import check_step
from rnnkit.kernels._step import ANY, Step

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
    from rnnkit.kernels._numba_private import event  # (here: importing rnnkit.kernels imports no numba)

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            with _compile_lock:
                st = _compile_state
                if st["depth"] == 0:
                    st["start"] = time.perf_counter()
                    if not st["announced"]:
                        st["announced"] = True
                        from tqdm import tqdm  # (writes above an active progress bar)

                        tqdm.write("rnnkit: compiling the kernels for this machine, once (about 10-20 s "
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


def int8() -> ModuleType | None:
    """The compiled int8 inference loops (:mod:`rnnkit.kernels._int8`), or None in the
    ``"reference"`` mode or without numba (then the NumPy twin, :mod:`rnnkit.quant._reference`,
    runs)."""
    if mode() == "reference" or _load() is None:
        return None
    import rnnkit.kernels._int8 as int8_loops  # needs numba, as the driver does

    return int8_loops


def int8_levels() -> int:
    """The largest quantized activation of the int8 arithmetic on this machine, in either mode:
    the compiled loops' ``QMAX`` (127 where their products run the AVX2 tile, whose
    ``vpmaddubsw`` pair sums are exact only below 128; 255 elsewhere), 255 without numba. The
    NumPy reference (:mod:`rnnkit.quant._reference`) quantizes to the same levels, so the two
    agree to the bit."""
    if _load() is None:
        return 255
    import rnnkit.kernels._int8_gemm as int8_products  # needs numba, as the driver does

    return int(int8_products.QMAX)


#: the activation codes of the compiled steps (``rnnkit.kernels.ops.act`` and friends)
ACTIVATION_CODES = {"tanh": 0, "sigmoid": 1, "relu": 2, "linear": 3, "hard_sigmoid": 4}
#: the activations that have a code: a step that maps an option through ``ops.act`` implements these
ACTIVATIONS = tuple(ACTIVATION_CODES)


def activation_code(fn: Any) -> int | None:
    """The code of an activation (anything with a ``name``) for the compiled steps, or None."""
    return ACTIVATION_CODES.get(getattr(fn, "name", None))  # type: ignore[arg-type]


class KernelCell(Protocol):
    """Everything the compiled walker reads of a cell: its public declarations."""

    units: int
    state_names: tuple[str, ...]
    input_kernel: str | None
    recurrent_kernel: str | None
    bias: str | None
    compiled_step: Step | None

    def state_sizes(self) -> tuple[int, ...]: ...

    @property
    def output_size(self) -> int: ...

    def rec_groups(self, width: int) -> list[tuple[str, int, int]]: ...

    def params(self, input_dim: int) -> list[Any]: ...


_OVERRIDABLE = ("step", "step_back", "rec_groups")
_by_type: dict[type, Step | None] = {}


def _owner(cls: type, name: str) -> type | None:
    return next((c for c in cls.__mro__ if name in c.__dict__), None)


def compiled_step(cell: Any) -> Step | None:
    """The cell's compiled step, or None: none declared, or ``step`` / ``step_back`` /
    ``rec_groups`` overridden below the class that declares it (the override is not compiled)."""
    cls = type(cell)
    if cls in _by_type:
        return _by_type[cls]
    step = getattr(cls, "compiled_step", None)
    got: Step | None = None
    if isinstance(step, Step):
        where = _owner(cls, "compiled_step")
        assert where is not None
        if all((o := _owner(cls, n)) is None or issubclass(where, o) for n in _OVERRIDABLE):
            got = step
    _by_type[cls] = got
    return got


def driver() -> ModuleType:
    """The compiled walker's glue (:mod:`._driver`); only after :func:`find` returned a step."""
    drv = _load()
    assert drv is not None, "kernels.driver() without numba"
    return drv


def find(cell: Any) -> Step | None:
    """The compiled step that runs ``cell`` here, or None (the reference)."""
    found = find_options(cell)
    return None if found is None else found[0]


def find_options(cell: Any) -> tuple[Step, tuple[int, ...]] | None:
    """:func:`find` and the step's options for ``cell`` read once: ``(step, options)``, or None
    (the reference): the mode is ``"reference"``, the cell has no compiled step, the step does
    not implement one of the cell's options (:meth:`Step.missing`), its ``options`` are None,
    or numba is missing. The walker hands the options on, so a pass reads them once. Read per
    cell once while its attributes stay the same objects (or equal values): a pass then pays a
    weak-dictionary get and one comparison of the attributes, not ``get_config()``; assigning
    an attribute (``cell.activation = "relu"``) makes the next pass read them afresh."""
    if mode() != "fast":
        return None
    try:
        kept = _found.get(cell)
    except TypeError:                         # a cell that cannot be weakly referenced
        kept = None
    attrs = getattr(cell, "__dict__", None)
    if kept is not None and kept[0] is type(cell) and _same_attrs(attrs, kept[1]):
        found = kept[2]
    else:
        found = _find_options(cell)
        if attrs is not None:
            with contextlib.suppress(TypeError):
                _found[cell] = (type(cell), dict(attrs), found)
    if found is None or _load() is None:
        return None
    return found


#: per cell: (its class, a copy of its attributes, what :func:`_find_options` gave for them)
_found: weakref.WeakKeyDictionary[Any, tuple[type, dict[str, Any], tuple[Step, tuple[int, ...]] | None]] = \
    weakref.WeakKeyDictionary()


def _same_attrs(attrs: dict[str, Any] | None, kept: dict[str, Any]) -> bool:
    """Whether a cell's attributes are those :func:`find_options` read its step and options
    under: every one the same object or an equal value (an option is changed by assigning the
    attribute, ``cell.activation = ...``; the option values of a cell are never changed in
    place). An attribute whose comparison has no truth value (an array) counts as changed."""
    if attrs is None:
        return False
    try:
        return attrs == kept
    except (ValueError, TypeError):
        return False


def _find_options(cell: Any) -> tuple[Step, tuple[int, ...]] | None:
    """:func:`find_options` read afresh (no cache, no numba check)."""
    step = compiled_step(cell)
    if step is None or not step.runs(cell):
        return None
    opts = step.options(cell)
    return None if opts is None else (step, opts)


def check(cell: Any, where: str) -> None:
    """Raise :class:`~rnnkit.InvalidParameterError` when the cell's compiled step (if it gives
    one) breaks a rule (the module docstring lists them); called when a layer is built."""
    step = compiled_step(cell)
    if step is not None:
        check_step(cell, step, where)


__all__ = ["ACTIVATION_CODES", "ACTIVATIONS", "ANY", "MODES", "KernelCell", "Step", "activation_code",
           "available", "check", "compile_seconds", "compiled_step", "find", "find_options", "int8", "mode",
           "set_mode", "use"]
