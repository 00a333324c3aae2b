"""Compiling a recurrent cell's kernels ahead, in another process, while this one works.

On an empty on-disk cache a fit compiles, one after the other, the training forward walk, the
backward walk with its reductions and the feed-forward products, and the inference walk (for
validation); Numba compiles one function at a time per process. :func:`start` splits that work
over two processes: a child (``python -m rnnkit.kernels._warm``) compiles the backward part
into the on-disk cache while this process compiles the forward part, and this process's
backward walk waits for the child (:func:`wait`, called by the walker's glue) and then loads
what the child compiled instead of compiling it again. While it waits, this process compiles
the inference walk (the parts listed as ``here``).

Nothing runs on another code path: the child compiles the very functions, for the very
argument types, that this process then loads, and loaded code is the compiled code, so the
results are the same bits as a run on a warm cache. The child runs each pass on small zero
arrays (2 steps, 2 rows) built as the walker builds them.

A marker file next to the cache (named by what of the cell decides its kernels, :func:`kernel_key`,
the kernel sources' hash and Numba's version) records a finished child: a later process with the
same cache starts none (``rnnkit compile`` leaves the same markers).
``RNNKIT_COMPILE_AHEAD=0`` turns the mechanism off; it is off on a single core.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import IO, Any

import numpy as np

from rnnkit import kernels
from rnnkit._errors import InvalidParameterError
from rnnkit.kernels import _threads

#: the parts :func:`exercise` knows: the backward walk with its reductions and the feed-forward
#: layers' products, the weight gradient ``x^T @ g`` included (``back``), the inference walk
#: (``infer``), the training forward walk (``train``), the feed-forward layers' products alone
#: (``dense``), the backward part again for inputs of two features (``wide``: the reductions' ``x^T`` of one
#: feature is both C- and Fortran-ordered and compiles as C, of more features as Fortran)
PARTS = ("back", "infer", "train", "dense", "wide")
_ENV = "RNNKIT_COMPILE_AHEAD"
#: how long a backward walk waits for the child before compiling on its own (seconds)
WAIT_LIMIT = 600.0

_lock = threading.Lock()
#: (description, part) -> the child compiling it
_away: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
#: description -> (cell, input width, dtype, parts to compile here while waiting)
_here: dict[str, tuple[Any, int, np.dtype, tuple[str, ...]]] = {}


def enabled() -> bool:
    """Whether compiling ahead is on: ``RNNKIT_COMPILE_AHEAD`` is not ``0`` and this process may
    use more than one core."""
    if os.environ.get(_ENV, "1").strip() == "0":
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores > 1


def describe(cell: Any, input_dim: int, dtype: Any) -> str | None:
    """A JSON description that rebuilds ``cell`` in another process (its class by module and
    name, its ``get_config()``), with the input width and dtype; None when the cell has no
    compiled step or its class or configuration cannot be named so."""
    cls = type(cell)
    if kernels.compiled_step(cell) is None or "<" in cls.__qualname__:
        return None
    try:
        cfg = cell.get_config()
        return json.dumps({"cell": f"{cls.__module__}:{cls.__qualname__}", "config": cfg,
                           "input_dim": int(input_dim), "dtype": np.dtype(dtype).name}, sort_keys=True)
    except (TypeError, ValueError, AttributeError):
        return None


def rebuild(desc: str) -> tuple[Any, int, np.dtype]:
    """(cell, input width, dtype) from :func:`describe`'s description."""
    d = json.loads(desc)
    mod, _, name = d["cell"].partition(":")
    obj: Any = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj.from_config(d["config"]), int(d["input_dim"]), np.dtype(d["dtype"])


def exercise(cell: Any, input_dim: int, dtype: Any, part: str) -> None:
    """Run one part of a fit's kernels on small zero arrays (2 steps, 2 rows), with the argument
    types of a real pass, so that each is compiled (or loaded) now."""
    if part not in PARTS:
        raise InvalidParameterError(f"rnnkit.kernels._warm.exercise: part must be one of {PARTS}, "
                                    f"got {part!r}")
    drv = kernels.driver()
    step = kernels.find(cell)
    if step is None:
        return
    dt = np.dtype(dtype)
    if part == "dense":
        _dense(drv, dt)
        return
    T, B, F = 2, 2, int(input_dim) if part != "wide" else 2
    w = {p.name: np.zeros(p.shape, dt) for p in cell.params(F)}
    for a in w.values():
        a.flags.writeable = False   # (the layers' weights are read-only)
    x = np.zeros((T, B, F), dt)
    if part in ("infer", "train"):
        _threads.warm_hand_off()    # (a pass of 2 rows does not split: its waits would compile later)
        drv.walk(cell, step, w, x, None, part == "train", True)
        return
    _dense(drv, dt)   # (first: the fitting process needs them right after its forward)
    S = cell.state_sizes()
    states = [np.zeros((T + 1, B, n), dt) for n in S]
    parks = {n: np.zeros((T, B, wd), dt) for n, wd in step.parks(cell).items()}
    if step.input_park is not None:
        parks[step.input_park] = np.zeros((T, B, w[cell.input_kernel].shape[1]), dt)
    g = np.zeros((B, T, cell.output_size), dt)
    drv.walk_back(cell, step, w, x, states, parks, None, None, g, True)


def _dense(drv: Any, dt: np.dtype) -> None:
    """The feed-forward layers' products with the argument types of ``rnnkit.layers``' ``matmul``
    and ``matmul_tn``: ``x @ W``, ``g @ W^T`` (:func:`._driver.products`) and ``x^T @ g``. (Part
    of ``back``: the fitting process compiles the forward walks, the heavier share, and meets
    these products in its first backward, after the child has compiled them.)"""
    drv.products(dt)
    a, g = np.zeros((3, 4), dt), np.zeros((3, 5), dt)
    drv.gemm(a.T, g, False, np.empty((4, 5), dt), False, 0, 5)


#: configuration entries that change no kernel: sizes are run-time values, activations run-time codes
_SIZES = ("units", "input_dim")
_CODES = ("activation", "recurrent_activation")


def kernel_key(desc: str) -> str:
    """What of :func:`describe`'s description decides which kernels a cell compiles: the cell's
    class, dtype and configuration without its sizes (units, input width) and activations, and
    with ``proj_size`` only as "some" or "none": the walkers are the same for every size and
    every activation the compiled step takes, so one child's marker serves both cells. (The
    reductions of inputs of several features use one more version of a product than those of
    one feature, the part ``wide``; a process whose marker came from a one-feature child
    compiles it itself.)"""
    d = json.loads(desc)
    cfg = {k: v for k, v in d["config"].items() if k not in _SIZES and k not in _CODES}
    if "proj_size" in cfg:
        cfg["proj_size"] = bool(cfg["proj_size"])
    return json.dumps({"cell": d["cell"], "config": cfg, "dtype": d["dtype"]}, sort_keys=True)


def _marker(desc: str, part: str) -> str | None:
    """The marker file of a finished child for ``desc`` / ``part`` (next to the kernels' cache,
    named by the description's :func:`kernel_key`, the part, the kernel sources' hash and
    Numba's version), or None when the cache's directory is unknown."""
    place = kernels.driver().cache_place()
    if place is None:
        return None
    where, stamp = place
    h = hashlib.sha256(f"{kernel_key(desc)}\0{part}\0{stamp}".encode()).hexdigest()[:24]
    return os.path.join(where, f"rnnkit-ahead-{h}.done")


def _write_marker(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".rnnkit-ahead-")
    with os.fdopen(fd, "w") as fh:
        fh.write("compiled\n")
    os.replace(tmp, path)


def start(cell: Any, input_dim: int, dtype: Any, away: tuple[str, ...] = ("back",),
          here: tuple[str, ...] = ("infer",)) -> bool:
    """Start a child compiling the parts ``away`` of ``cell``'s kernels (for inputs of width
    ``input_dim`` and ``dtype``) into the on-disk cache; this process compiles the parts
    ``here`` while it waits for them. Returns whether a child started (not when compiling
    ahead is off, the kernels are not in use, the cell cannot be described, or a child already
    finished this for the same cache)."""
    if not enabled() or kernels.find(cell) is None:
        return False
    desc = describe(cell, input_dim, dtype)
    if desc is None:
        return False
    todo = [p for p in away if not done(desc, p)]
    if not todo:
        return False
    with _lock:
        for part in todo:
            if (desc, part) in _away:
                continue
            try:
                _away[desc, part] = spawn(desc, (part,))
            except OSError:   # (no interpreter to start: compile here, as without children)
                continue
        started = any(d == desc for d, _ in _away)
        if started:
            _here[desc] = (cell, input_dim, np.dtype(dtype), tuple(here))
            kernels.driver().before_back = _before_back  # type: ignore[attr-defined]
    return started


def spawn(desc: str, parts: tuple[str, ...], stderr: Any = subprocess.DEVNULL,
          module: str = __name__, known: tuple[str, ...] = PARTS) -> subprocess.Popen[bytes]:
    """A child process (``python -m MODULE DESCRIPTION PART,PART...``; ``module`` is this one
    by default) that compiles ``parts`` (some of ``known``, which ``module`` runs: :data:`PARTS`
    for this one) of the kernels of :func:`describe`'s ``desc``, in that order, into the
    on-disk cache (the marker of each part written when it is done); it imports this rnnkit.
    Raises :class:`OSError` when no process can be started."""
    bad = [p for p in parts if p not in known]
    if bad or not parts:
        raise InvalidParameterError(f"rnnkit.kernels._warm.spawn: parts must be some of {known}, "
                                    f"got {parts!r}")
    return subprocess.Popen([sys.executable, "-m", module, desc, ",".join(parts)], env=_child_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)


def spawn_worker(stderr: Any = subprocess.DEVNULL) -> subprocess.Popen[str]:
    """A worker process (``python -m rnnkit.kernels._warm --serve``, :func:`serve`) that imports
    this rnnkit, with text pipes to its requests (stdin) and replies (stdout). Raises
    :class:`OSError` when no process can be started."""
    return subprocess.Popen([sys.executable, "-m", WORKER_MODULES[0], SERVE], env=_child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            text=True, bufsize=1)


def _child_env() -> dict[str, str]:
    """This environment with the ``src`` directory of this rnnkit first on ``PYTHONPATH``."""
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(kernels.__file__))))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])}


def done(desc: str, part: str) -> bool:
    """Whether a child already compiled ``part`` of ``desc``'s kernels into this cache (its marker)."""
    m = _marker(desc, part)
    return m is not None and os.path.exists(m)


def _before_back(cell: Any, input_dim: int, dtype: Any) -> None:
    """The driver's hook before a backward walk: wait for a child compiling it (if any)."""
    if pending():
        wait(cell, input_dim, dtype, "back")


def pending() -> bool:
    """Whether a child started here may still be compiling (cheap: the walker asks every pass)."""
    return bool(_away)


def wait(cell: Any, input_dim: int, dtype: Any, part: str) -> None:
    """Before a pass of ``part``: if a child is compiling it for this cell, compile this
    process's own parts first (once), then wait for the child (at most :data:`WAIT_LIMIT`
    seconds; then it is stopped and this process compiles on its own)."""
    desc = describe(cell, input_dim, dtype)
    if desc is None:
        return
    with _lock:
        proc = _away.get((desc, part))
        mine = _here.pop(desc, None) if proc is not None else None
    if proc is None:
        return
    if mine is not None and proc.poll() is None:
        for p in mine[3]:
            exercise(mine[0], mine[1], mine[2], p)
    try:
        proc.wait(WAIT_LIMIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with _lock:
        _away.pop((desc, part), None)


@atexit.register
def _stop_children() -> None:
    """A process that ends before its children do stops them (what they wrote stays valid)."""
    for proc in list(_away.values()):
        with contextlib.suppress(OSError):
            proc.kill()


def mark(desc: str, part: str) -> None:
    """Record that ``part`` of ``desc``'s kernels is now in this cache (its marker; nothing when
    the cache's directory is unknown)."""
    m = _marker(desc, part)
    if m is not None:
        _write_marker(m)


def run(desc: str, parts: tuple[str, ...]) -> None:
    """Compile ``parts`` (some of :data:`PARTS`, in that order) of :func:`describe`'s ``desc``'s
    kernels into the on-disk cache, each part's marker written when it is done."""
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise InvalidParameterError(f"rnnkit.kernels._warm.run: parts must be some of {PARTS}, got {parts!r}")
    cell, input_dim, dt = rebuild(desc)
    for part in parts:
        exercise(cell, input_dim, dt, part)
        mark(desc, part)


#: the modules whose ``run(desc, parts)`` a worker (:func:`serve`) runs: this one (the float
#: cells' parts) and ``rnnkit.quant._warm`` (the int8 loops)
WORKER_MODULES = ("rnnkit.kernels._warm", "rnnkit.quant._warm")   # (by name: a worker runs as __main__)
#: the first argument that makes ``python -m rnnkit.kernels._warm`` a worker (:func:`serve`)
SERVE = "--serve"


def serve(requests: IO[str], replies: IO[str]) -> int:
    """A worker of ``rnnkit compile``: for each line of ``requests``, a JSON object ``{"module":
    M, "desc": D, "parts": [P, ...]}`` (``M`` one of :data:`WORKER_MODULES`), run ``M.run(D,
    parts)`` and answer one line on ``replies``: ``ok``, or ``failed: `` and the error's type and
    message (on one line); then the next request, until ``requests`` ends. One process compiles
    many groups: it imports NumPy, Numba and rnnkit once (about 1.5 CPU s a process), and what
    one group compiled serves the later ones from memory, not from the on-disk cache."""
    for line in requests:
        if not line.strip():
            continue
        try:
            job = json.loads(line)
            module = job["module"]
            if module not in WORKER_MODULES:
                raise InvalidParameterError(f"rnnkit.kernels._warm.serve: the module must be one of "
                                            f"{WORKER_MODULES}, got {module!r}")
            importlib.import_module(module).run(str(job["desc"]), tuple(job["parts"]))
        except Exception as e:   # (any failure of one group is reported; the next group still runs)
            text = " ".join(f"{type(e).__name__}: {e}".split())
            replies.write(f"failed: {text}\n")
        else:
            replies.write("ok\n")
        replies.flush()
    return 0


def main(argv: list[str]) -> int:
    """The child: ``python -m rnnkit.kernels._warm DESCRIPTION PART[,PART...]`` (the parts in
    order), or ``python -m rnnkit.kernels._warm --serve``, a worker (:func:`serve`) answering on
    the stdout it was started with (what anything else prints goes to stderr)."""
    if argv == [SERVE]:
        replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
        sys.stdout.flush()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        return serve(sys.stdin, replies)
    desc, parts = argv
    run(desc, tuple(parts.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
