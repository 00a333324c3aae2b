"""Atomic file writes: a temporary file in the target's directory, flushed and fsynced, then
``os.replace``. A crash at any point leaves the previous file whole and no temporary file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO

_CHUNK = 1 << 20


def _write_chunk(f: IO[bytes], chunk: memoryview) -> None:
    """Write one chunk (a separate function so tests can make it fail mid-write)."""
    f.write(chunk)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: the file holds either its old content or ``data``.

    The new file gets the old file's permission bits (or ``0o666 & ~umask`` for a new file).
    """
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {target}: directory {directory} does not exist")
    try:
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            view = memoryview(data)
            for start in range(0, len(view), _CHUNK):
                _write_chunk(f, view[start:start + _CHUNK])
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


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
