"""``rnnkit compile``: fill the kernels' on-disk cache now, so that the first fit compiles nothing.

For each cell the command line trains (``lstm``, ``gru``, ``rnn``: the layers ``rnnkit train``
and ``rnnkit demo`` build) and each dtype, the kernels of a fit and of ``predict`` — the
training forward walk, the backward walk with its reductions, the inference walk, the
feed-forward layers' products — are compiled by child processes (``python -m
rnnkit.kernels._warm``), at most ``--jobs`` at a time (default: the cores this process may use).
They compile into the cache the runtime reads (the one ``NUMBA_CACHE_DIR`` names, else Numba's
own place next to the sources or in the user's cache directory), keyed on the kernel sources:
after an edit of them, or another Numba, the next run compiles again. The kernels do not depend
on the sizes (units, window, features): one compilation serves every size.

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
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit.cli._common import CliError
from rnnkit.cli._model import CELLS, TrainConfig, build_network
from rnnkit.kernels import _warm

#: the parts of one cell, one child each (the inference walk after the training forward walk: they
#: share the cell's step functions, compiled once)
JOBS = (("back", "wide"), ("train", "infer"))
DTYPES = ("float32", "float64")


def add_parser(sub: Any) -> None:
    """Add the ``compile`` subcommand to ``sub`` (argparse sub-parsers)."""
    c = sub.add_parser("compile", help="compile the kernels into the on-disk cache now (the first fit "
                                       "then starts at once)")
    c.add_argument("--cells", default="lstm,gru,rnn", metavar="A,B,...",
                   help="comma-separated cells: lstm, gru, rnn (default all three)")
    c.add_argument("--dtype", default="float32", metavar="D,...",
                   help="comma-separated dtypes: float32, float64 (default float32, the layers' own)")
    c.add_argument("--jobs", type=int, default=0, help="child processes at a time (default: the cores)")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    got = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in got if t not in known]
    if bad or not got:
        raise CliError(f"--{what}: expected a comma-separated list of {', '.join(known)}, got {text!r}")
    return got


def plan(cells: list[str], dtypes: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The children to run: (the cell's description, its parts), the dense products once per dtype
    (after the first cell's forward walks); parts already in the cache left out."""
    todo: list[tuple[str, tuple[str, ...]]] = []
    for dt in dtypes:
        for k, name in enumerate(cells):
            layer = build_network(TrainConfig(cell=name, units=8), 2, 1).layers[0]   # (one feature:
            # the part "wide" compiles what more features need)
            desc = _warm.describe(layer.cell, layer.input_dim, np.dtype(dt))
            if desc is None:   # pragma: no cover - the built-in cells are always described
                continue
            for parts in JOBS if k else ((*JOBS[0], "dense"), JOBS[1]):   # (dense: once, after
                # the backward part, which compiles the products already: LSTM, one core each,
                # back + wide + dense 11.9 CPU s, train + infer 13.1, + dense 15.9)
                left = tuple(p for p in parts if not _warm.done(desc, p))
                if left:
                    todo.append((desc, left))
    return todo


def compile_command(args: argparse.Namespace) -> int:
    cells = _names(args.cells, tuple(CELLS), "cells")
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
            desc, parts = todo.popleft()
            log = tempfile.TemporaryFile()
            running.append((_warm.spawn(desc, parts, stderr=log), ",".join(parts), log))
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
