"""Atomic file writes: a temporary file in the target's directory, flushed and fsynced, then
``os.replace``. A crash at any point leaves the previous file whole.

- The temporary file is named ``.NAME.PID.RANDOM.tmp``. A process killed mid-write (SIGKILL
  cannot be caught) leaves its temporary file behind; the next write of ``NAME`` removes every
  such file whose process no longer runs, so leftovers never accumulate.
- A symbolic link is followed: saving to ``link`` writes (atomically) the file it points to and
  keeps the link.
- The new file gets the old file's permission bits (or ``0o666 & ~umask`` for a new file).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from typing import IO

_CHUNK = 1 << 20


def _write_chunk(f: IO[bytes], chunk: memoryview) -> None:
    """Write one chunk (a separate function so tests can make it fail mid-write)."""
    f.write(chunk)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process, or no way to tell: keep its file
    return True


def remove_stale_temporaries(target: str) -> list[str]:
    """Delete ``.NAME.PID.*.tmp`` files next to ``target`` whose process is gone; returns them."""
    directory, base = os.path.split(target)
    prefix = f".{base}."
    removed: list[str] = []
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        pid = name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
    return removed


def resolve_target(path: str | os.PathLike[str]) -> str:
    """The absolute file a write to ``path`` must replace: symbolic links followed; its
    directory must exist (FileNotFoundError naming it otherwise)."""
    target = os.path.realpath(os.path.abspath(os.fspath(path)))
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {os.fspath(path)}: directory {directory} does not exist")
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot write {os.fspath(path)}: it is a directory")
    return target


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[str], None]) -> str:
    """Call ``write(tmp_path)`` to fill a temporary file, then move it over ``path`` atomically
    (see the module doc). Returns the path written (the link's target for a link)."""
    target = resolve_target(path)
    directory = os.path.dirname(target)
    try:
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    remove_stale_temporaries(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.{os.getpid()}.", suffix=".tmp",
                               dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: the file holds either its old content or ``data``."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            view = memoryview(data)
            for start in range(0, len(view), _CHUNK):
                _write_chunk(f, view[start:start + _CHUNK])
            f.flush()
            os.fsync(f.fileno())

    atomic_write_with(path, write)


def _fsync_dir(directory: str) -> None:
    """Persist the rename (POSIX); a no-op where directories cannot be opened."""
    flags = getattr(os, "O_DIRECTORY", None)
    if flags is None:
        return
    try:
        dfd = os.open(directory, os.O_RDONLY | flags)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(dfd)
    finally:
        os.close(dfd)
