"""``rnnkit compile``: fill the kernels' on-disk cache now, so that the first fit compiles nothing.

The configurations (``--cells``; ``all``, the default, is every one): ``rnn`` (SimpleRNN),
``lstm``, ``lstm-proj`` (an LSTM with ``proj_size``), ``gru`` (``reset_after=False``, the
default of ``rnnkit.GRU`` and ``rnnkit train --cell gru``) and ``gru-after`` (``reset_after=True``,
Keras' and PyTorch's form); for each and each dtype
(``--dtype``: ``float32``, ``float64``, ``int8``, or ``all``, the default) the kernels of a fit
and of ``predict`` — the training forward walk, the backward walk with its reductions, the
inference walk, the feed-forward layers' products — or, for ``int8``, the int8 inference loops
of the quantized cell and of ``QuantizedDense`` (``rnnkit.quantize``; ``lstm-proj`` has no int8
form) are compiled by ``--jobs`` worker processes (default: the cores this process may use;
``python -m rnnkit.kernels._warm --serve``), each taking the next group (one configuration and
dtype) when it finishes one: a worker imports NumPy, Numba and rnnkit once, not once a group,
and the kernels a group shares with the next (the dtype's products, the cell's step functions)
are already in its memory.
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
import contextlib
import json
import os
import selectors
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

#: the parts of one float cell, in the order one worker compiles them (the inference walk after
#: the training forward walk: they share the cell's step functions, compiled once; the products
#: of the dense layers, ``dense``, with the first cell of each dtype)
PARTS = ("back", "wide", "train", "infer")
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
#: the order of the groups: per configuration (the commonest first: an install that runs out of
#: time keeps those) float32, the layers' own, then int8, which quantizes float32 models, then
#: float64. (Two workers that start on two float cells of one dtype at once both compile that
#: dtype's products; a float32 group beside an int8 one share none: measured, see plan().)
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
    """The groups to compile: (module, the cell's description, its parts), one group per
    configuration and dtype, configuration by configuration (:data:`ORDER` within each); the
    dense products in the first float group of each dtype; ``int8`` for each configuration
    that has an int8 form; parts already in the cache left out."""
    todo: list[Job] = []
    first = {dt: True for dt in dtypes}
    for name in cells:
        for dt in (d for d in ORDER if d in dtypes):
            if dt == "int8" and name not in INT8:
                continue
            cell = CONFIGS[name]()
            desc = _warm.describe(cell, 1, np.dtype("float32" if dt == "int8" else dt))   # (one
            # feature: the part "wide" compiles what more features need)
            if desc is None:   # pragma: no cover - the built-in cells are always described
                continue
            if dt == "int8":
                parts: tuple[str, ...] = _warm8.PARTS
                module = _warm8.__name__
            else:
                parts = (*PARTS[:2], "dense", *PARTS[2:]) if first[dt] else PARTS
                module = _warm.__name__
            first[dt] = False
            left = tuple(p for p in parts if not _warm.done(desc, p))
            if left:
                todo.append((module, desc, left))
    return todo


class _Worker:
    """One worker process (``python -m rnnkit.kernels._warm --serve``), its stderr kept in a
    temporary file (the last line of it names a crash), and the group it is compiling."""

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = _warm.spawn_worker(self.log)
        self.job: Job | None = None

    def give(self, job: Job) -> None:
        module, desc, parts = job
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"module": module, "desc": desc, "parts": list(parts)}) + "\n")
        self.proc.stdin.flush()
        self.job = job

    def last_error(self) -> str:
        self.log.seek(0)
        lines = self.log.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"the worker ended with exit status {self.proc.returncode}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        self.proc.wait()
        self.log.close()


def run_groups(todo: list[Job], jobs: int) -> list[str]:
    """Compile the groups ``todo`` on at most ``jobs`` workers, each given the next group as it
    finishes one; returns the failures (``"parts: error"``; empty when every group compiled).
    A worker that dies fails its group, and a new one takes the groups left."""
    queue = deque(todo)
    failed: list[str] = []
    busy: list[_Worker] = []
    sel = selectors.DefaultSelector()

    def feed(w: _Worker) -> bool:
        if not queue:
            return False
        w.give(queue.popleft())
        return True

    try:
        while queue or busy:
            while queue and len(busy) < jobs:
                w = _Worker()
                assert w.proc.stdout is not None
                sel.register(w.proc.stdout, selectors.EVENT_READ, w)
                feed(w)
                busy.append(w)
            for key, _ in sel.select():
                w = key.data
                line = w.proc.stdout.readline()
                assert w.job is not None
                what = ",".join(w.job[2])
                if line.startswith("ok"):
                    pass
                elif line.startswith("failed: "):
                    failed.append(f"{what}: {line[len('failed: '):].strip()}")
                else:                          # (end of file: the worker died)
                    w.proc.wait()
                    failed.append(f"{what}: {w.last_error()}")
                    w.job = None
                    sel.unregister(w.proc.stdout)
                    busy.remove(w)
                    w.close()
                    continue
                w.job = None
                if not feed(w):
                    sel.unregister(w.proc.stdout)
                    busy.remove(w)
                    w.close()
    finally:
        for w in busy:                          # (interrupted: stop the workers)
            with contextlib.suppress(OSError):
                w.proc.kill()
            w.close()
        sel.close()
    return failed


def compile_command(args: argparse.Namespace) -> int:
    cells = _names(args.cells, tuple(CONFIGS), "cells")
    dtypes = _names(args.dtype, DTYPES, "dtype")
    if args.jobs < 0:
        raise CliError(f"--jobs: expected an integer >= 0, got {args.jobs}")
    if not kernels.available():
        raise CliError("the compiled kernels need numba (pip install numba); nothing to compile")
    jobs = args.jobs or _cores()
    todo = plan(cells, dtypes)
    if not todo:
        print("rnnkit: the kernels are already in the cache; nothing to compile")
        return 0
    n, t0 = len(todo), time.perf_counter()
    print(f"rnnkit: compiling {n} groups of kernels ({', '.join(cells)}; {', '.join(dtypes)}), "
          f"{min(jobs, n)} at a time", flush=True)
    failed = run_groups(list(todo), jobs)
    secs = time.perf_counter() - t0
    if failed:
        print(f"rnnkit: error: {len(failed)} of {n} groups failed to compile: {'; '.join(failed)}",
              file=sys.stderr)
        return 1
    print(f"rnnkit: compiled in {secs:.1f} s; later runs load the kernels from the cache")
    return 0
