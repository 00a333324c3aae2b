"""``rnnkit compile``: fill the kernels' on-disk cache now, so that the first fit compiles nothing.

The configurations (``--cells``; ``all``, the default, is every one): ``rnn`` (SimpleRNN),
``lstm``, ``lstm-proj`` (an LSTM with ``proj_size``), ``gru`` (``reset_after=False``, the
default of ``rnnkit.GRU`` and ``rnnkit train --cell gru``) and ``gru-after`` (``reset_after=True``,
Keras' and PyTorch's form); for each and each dtype
(``--dtype``: ``float32``, ``float64``, ``int8``, or ``all``, the default) the kernels of a fit
and of ``predict`` — the training forward walk, the backward walk with its reductions, the
inference walk, the feed-forward layers' products — or, for ``int8``, the int8 inference loops
of the quantized cell and of ``QuantizedDense`` (``rnnkit.quantize``; ``lstm-proj`` has no int8
form) are compiled by child processes (``python -m rnnkit.kernels._warm``, ``python -m
rnnkit.quant._warm``), at most ``--jobs`` at a time (default: the cores this process may use).
Either direction (``go_backwards``, ``Bidirectional``) runs the same kernels.
They compile into the cache the runtime reads (the one ``NUMBA_CACHE_DIR`` names, else Numba's
own place next to the sources or in the user's cache directory), keyed on the kernel sources:
after an edit of them, or another Numba, the next run compiles again. The kernels do not depend
on the sizes (units, window, features) nor on the activations: one compilation serves them all.

A part a previous run already compiled into the same cache (its marker) is skipped. The command
exits with 0 when every part compiled, 1 when some child failed (its last line of error said).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit.cli._common import CliError
from rnnkit.kernels import _warm
from rnnkit.quant import _warm as _warm8
from rnnkit.recurrent import Cell, GRUCell, LSTMCell, SimpleRNNCell

#: the parts of one float cell, one child each (the inference walk after the training forward
#: walk: they share the cell's step functions, compiled once)
JOBS = (("back", "wide"), ("train", "infer"))
#: every configuration of the built-in cells that compiles kernels of its own, as a cell of 8 units
#: (the kernels serve every size and activation); the commonest first: an install that runs out
#: of time keeps those
CONFIGS: dict[str, Callable[[], Cell]] = {
    "lstm": lambda: LSTMCell(8),
    "gru": lambda: GRUCell(8, reset_after=False),
    "rnn": lambda: SimpleRNNCell(8),
    "gru-after": lambda: GRUCell(8, reset_after=True),
    "lstm-proj": lambda: LSTMCell(8, proj_size=4),
}
#: the configurations that have an int8 form (``rnnkit.quantize``)
INT8 = ("lstm", "gru", "rnn", "gru-after")
DTYPES = ("float32", "float64", "int8")
#: the order they compile in (float32, the layers' own, first; then int8, which quantizes float32 models)
ORDER = ("float32", "int8", "float64")


def add_parser(sub: Any) -> None:
    """Add the ``compile`` subcommand to ``sub`` (argparse sub-parsers)."""
    c = sub.add_parser("compile", help="compile the kernels into the on-disk cache now (the first fit "
                                       "then starts at once)")
    c.add_argument("--cells", default="all", metavar="A,B,...",
                   help=f"comma-separated configurations: {', '.join(CONFIGS)}, or all (the default)")
    c.add_argument("--dtype", default="all", metavar="D,...",
                   help=f"comma-separated dtypes: {', '.join(DTYPES)}, or all (the default)")
    c.add_argument("--jobs", type=int, default=0, help="child processes at a time (default: the cores)")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    got = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in got if t not in known and t != "all"]
    if bad or not got:
        raise CliError(f"--{what}: expected a comma-separated list of {', '.join(known)}, or all, "
                       f"got {text!r}")
    return list(known) if "all" in got else [k for k in known if k in got]


#: one child: (the module it runs, the cell's description, its parts)
Job = tuple[str, str, tuple[str, ...]]


def plan(cells: list[str], dtypes: list[str]) -> list[Job]:
    """The children to run: (module, the cell's description, its parts), the dense products once
    per float dtype (after the first cell's backward part); ``int8`` one child per configuration
    that has an int8 form; parts already in the cache left out."""
    todo: list[Job] = []
    for dt in (d for d in ORDER if d in dtypes):
        first = True
        for name in cells:
            if dt == "int8" and name not in INT8:
                continue
            cell = CONFIGS[name]()
            desc = _warm.describe(cell, 1, np.dtype("float32" if dt == "int8" else dt))   # (one
            # feature: the part "wide" compiles what more features need)
            if desc is None:   # pragma: no cover - the built-in cells are always described
                continue
            if dt == "int8":
                groups: tuple[tuple[str, ...], ...] = _warm8.PARTS,
                module = _warm8.__name__
            else:
                groups = ((*JOBS[0], "dense"), JOBS[1]) if first else JOBS   # (dense: once, after
                # the backward part, which compiles the products already: LSTM, one core each,
                # back + wide + dense 11.9 CPU s, train + infer 13.1, + dense 15.9)
                module = _warm.__name__
            first = False
            for parts in groups:
                left = tuple(p for p in parts if not _warm.done(desc, p))
                if left:
                    todo.append((module, desc, left))
    return todo


def compile_command(args: argparse.Namespace) -> int:
    cells = _names(args.cells, tuple(CONFIGS), "cells")
    dtypes = _names(args.dtype, DTYPES, "dtype")
    if args.jobs < 0:
        raise CliError(f"--jobs: expected an integer >= 0, got {args.jobs}")
    if not kernels.available():
        raise CliError("the compiled kernels need numba (pip install numba); nothing to compile")
    jobs = args.jobs or _cores()
    todo = deque(plan(cells, dtypes))
    if not todo:
        print("rnnkit: the kernels are already in the cache; nothing to compile")
        return 0
    n, t0 = len(todo), time.perf_counter()
    print(f"rnnkit: compiling {n} groups of kernels ({', '.join(cells)}; {', '.join(dtypes)}), "
          f"{min(jobs, n)} at a time", flush=True)
    running: list[tuple[subprocess.Popen[bytes], str, Any]] = []
    failed: list[str] = []
    while todo or running:
        while todo and len(running) < jobs:
            module, desc, parts = todo.popleft()
            log = tempfile.TemporaryFile()
            known = _warm8.PARTS if module == _warm8.__name__ else _warm.PARTS
            running.append((_warm.spawn(desc, parts, stderr=log, module=module, known=known),
                            ",".join(parts), log))
        time.sleep(0.05)
        for item in [r for r in running if r[0].poll() is not None]:
            proc, what, log = item
            running.remove(item)
            if proc.returncode != 0:
                log.seek(0)
                last = log.read().decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
                failed.append(f"{what}: {last[0]}")
            log.close()
    secs = time.perf_counter() - t0
    if failed:
        print(f"rnnkit: error: {len(failed)} of {n} groups failed to compile: {'; '.join(failed)}",
              file=sys.stderr)
        return 1
    print(f"rnnkit: compiled in {secs:.1f} s; later runs load the kernels from the cache")
    return 0
