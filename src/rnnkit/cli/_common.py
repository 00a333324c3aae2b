"""Shared pieces of the command line: the error type, atomic text writes, the metrics table, and
the status line shown while the kernels compile."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from rnnkit import datasets, kernels
from rnnkit._atomic import atomic_write_bytes, atomic_write_with, write_problem


class CliError(Exception):
    """Bad command-line input that is not an rnnkit.Error (printed as one line, exit status 2)."""


def umask() -> int:
    """The process umask (read without changing it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def ensure_dir(path: str | os.PathLike[str]) -> Path:
    """Create the output directory (and parents); a path that is a file is an error."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CliError(f"{p}: exists and is not a directory; choose another --out")
    p.mkdir(parents=True, exist_ok=True)
    return p


def data_path(text: str) -> Path:
    """The CSV file ``text`` names: a file path, or the name of a bundled data set (``sunspots``,
    ``co2``) when no such file exists, so the documented commands run from any folder."""
    p = Path(text)
    if p.exists():
        if p.is_dir():
            raise CliError(f"{p}: is a directory, expected a CSV file")
        return p
    if text in datasets._FILES:
        return datasets.path(text)
    raise CliError(f"{text}: no such file (bundled data sets, usable by name: "
                   f"{', '.join(sorted(datasets._FILES))})")


def check_output_file(path: str | os.PathLike[str], flag: str) -> Path:
    """Refuse an output path that cannot be written BEFORE any work is done: its folder must
    exist and be writable, and the path itself must not be a folder."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise CliError(f"{flag} {p}: is a directory; give a file name")
    if not parent.is_dir():
        raise CliError(f"{flag} {p}: the folder {parent} does not exist")
    problem = write_problem(str(parent))
    if problem is not None:
        raise CliError(f"{flag} {p}: the folder {parent} is not writable: {problem}")
    return p


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file next to ``path``, then rename it over ``path``."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` atomically (``rnnkit._atomic``: temporary file, fsync, rename; a link is
    followed; stale temporaries of killed writers are removed)."""
    atomic_write_bytes(path, data)


def write_chunks(output: str | os.PathLike[str] | None, chunks: Iterable[str]) -> int:
    """Write the text ``chunks`` one after another to ``output`` (atomically: a temporary file,
    fsynced, renamed over it, so an error half-way leaves no partial file) or, for None, to
    stdout as they come; never the whole text in memory. Returns the number of lines written."""
    count = 0
    if output is None:
        for text in chunks:
            sys.stdout.write(text)
            count += text.count("\n")
        sys.stdout.flush()
        return count

    def fill(tmp: str) -> None:
        nonlocal count
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            for text in chunks:
                fh.write(text)
                count += text.count("\n")
            fh.flush()
            os.fsync(fh.fileno())

    atomic_write_with(output, fill)
    return count


def history_csv(history: dict[str, list[float]]) -> str:
    keys = sorted(history)
    n = max((len(v) for v in history.values()), default=0)
    lines = [",".join(["epoch", *keys])]
    for e in range(n):
        vals = [f"{history[k][e]:.8g}" if e < len(history[k]) else "" for k in keys]
        lines.append(",".join([str(e + 1), *vals]))
    return "\n".join(lines) + "\n"


def metrics_table(rows: list[tuple[str, float, float]], title: str) -> str:
    """A fixed-width table: one row per model, columns RMSE and MAE (data units)."""
    width = max(len(r[0]) for r in rows)
    lines = [title, f"  {'model':<{width}}  {'RMSE':>9}  {'MAE':>9}"]
    lines += [f"  {name:<{width}}  {r:9.3f}  {m:9.3f}" for name, r, m in rows]
    return "\n".join(lines)


#: the first-run figure every page quotes: a cold ``rnnkit demo`` (empty Numba cache) took 28 s of
#: CPU, nearly all of it compiling, which is its wall time on an idle 2-core machine
FIRST_RUN = "about 10-20 s on an idle 2-core machine"


@contextlib.contextmanager
def compile_status(stream: TextIO | None = None, *, poll: float = 0.25, line_every: float = 5.0,
                   quiet_after: float = 15.0,
                   seconds: Callable[[], float] = kernels.compile_seconds) -> Iterator[None]:
    """While the block runs, a thread watches ``seconds()`` (the process's compile time so far)
    and, while it grows, says so on ``stream`` (default stderr): on a terminal one line
    ``rnnkit: compiling the kernels for this machine (first run only): 12 s`` rewritten in place
    every ``poll`` seconds; elsewhere (a log, a pipe) that line once every ``line_every`` seconds.
    The seconds count from the first compilation and keep counting through the gaps between one
    kernel and the next. When nothing has compiled for ``quiet_after`` seconds, or the block
    ends, one line says how long the compiling itself took. Nothing is shown when the kernels
    come from the cache."""
    out = stream if stream is not None else sys.stderr
    tty = bool(getattr(out, "isatty", lambda: False)())
    done = threading.Event()

    state: dict[str, float | None] = {"first": None, "active": None}

    def finish(total: float) -> None:
        out.write(("\r\x1b[K" if tty else "") + f"rnnkit: kernels compiled in {total:.1f} s; later runs "
                  "load them from the cache\n")
        out.flush()
        state["active"] = None

    def watch() -> None:
        last = seconds()
        said, idle = -line_every, 0.0
        while not done.wait(poll):
            now = seconds()
            if now > last:
                if state["first"] is None:
                    state["first"] = time.perf_counter() - (now - last)
                state["active"], idle = state["first"], 0.0
            elif state["active"] is not None:
                idle += poll
                if idle >= quiet_after:     # long enough without compiling: done, not a gap
                    finish(now)
            first = state["first"]
            if state["active"] is not None and first is not None:
                el = time.perf_counter() - first
                msg = (f"rnnkit: compiling the kernels for this machine (first run only, {FIRST_RUN}): "
                       f"{el:.0f} s")
                if tty:
                    out.write("\r\x1b[K" + msg)
                elif el - said >= line_every:
                    out.write(msg + "\n")
                    said = el
                out.flush()
            last = now
        if state["active"] is not None:
            finish(seconds())

    thread = threading.Thread(target=watch, name="rnnkit-compile-status", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
