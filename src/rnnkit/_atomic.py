"""Atomic file writes: a temporary file in the target's directory, flushed and fsynced, then
``os.replace``. A crash at any point leaves the previous file whole.

- The temporary file is named ``.rnnkit.PID.RANDOM.tmp`` (PID: the writer's process id,
  RANDOM: 8 characters), short whatever the target's name (a 255-byte name saves), and the
  writer holds an exclusive ``flock`` on it until the rename. A process killed mid-write
  (SIGKILL cannot be caught) leaves its temporary behind; the next write into the directory
  removes a file only when its whole name matches that pattern exactly, its process no longer
  runs AND its lock can be taken (the kernel drops a dead writer's lock), so a live
  temporary — of this process, of another, or of another machine on a shared folder — is never
  removed, and leftovers never accumulate.
- A symbolic link is followed: saving to ``link`` writes (atomically) the file it points to and
  keeps the link.
- The new file gets the old file's permission bits (or ``0o666 & ~umask`` for a new file).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Callable
from types import ModuleType
from typing import IO

from rnnkit._errors import InvalidInputError
from rnnkit._files import no_nul

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # not POSIX: the PID alone tells a dead writer's temporary
    fcntl = None

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


_TEMP = re.compile(r"\.rnnkit\.([0-9]{1,10})\.[A-Za-z0-9_]{8}\.tmp")
_PREFIX = ".rnnkit."


def _locked_by_someone(path: str) -> bool:
    """Whether another open file holds the writer's lock on ``path`` (False when it could be
    taken, or locks are not available; True when ``path`` cannot be opened as a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        if fcntl is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        return False
    finally:
        os.close(fd)  # closing drops the probe's own lock


def remove_stale_temporaries(target: str) -> list[str]:
    """Delete the temporaries of dead writers in ``target``'s directory (names matching
    ``.rnnkit.PID.RANDOM.tmp`` exactly, PID not running, the lock free); returns them."""
    directory = os.path.dirname(target) or "."
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = _TEMP.fullmatch(name)
        if m is None or _alive(int(m.group(1))):
            continue
        path = os.path.join(directory, name)
        if _locked_by_someone(path):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed.append(path)
    return removed


def resolve_target(path: str | os.PathLike[str]) -> str:
    """The absolute file a write to ``path`` must replace: symbolic links followed; its
    directory must exist (FileNotFoundError naming it otherwise); an empty path names no file
    (InvalidInputError), a directory is not one (IsADirectoryError, as ``open`` says)."""
    if os.fspath(path) in ("", b""):
        raise InvalidInputError("the file to write: expected a file path, got an empty one ('')")
    target = os.path.realpath(os.path.abspath(no_nul(os.fspath(path), "the file to write")))
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
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{_PREFIX}{os.getpid()}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise _naming(e, path) from e
    try:
        if fcntl is not None:
            with contextlib.suppress(OSError):  # a file system without locks: the PID still guards
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        write(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno is not None and e.filename in (tmp, None):
            # (a system call on the temporary file itself, not another file the writer read)
            raise _naming(e, path) from e
        raise
    finally:
        os.close(fd)  # held (with its lock) until the rename is done
    _fsync_dir(directory)
    return target


def _naming(e: OSError, path: str | os.PathLike[str]) -> OSError:
    """``e`` (its class and errno kept) naming the file the caller asked to write, not the
    temporary file beside it that the system call named; the file there is unchanged."""
    return type(e)(e.errno, f"{e.strerror} (writing {os.fspath(path)}, which is left as it was)",
                   os.fspath(path))


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


def write_problem(directory: str) -> str | None:
    """Why this process cannot create a file in ``directory`` (None when it can), found by
    trying: a temporary ``.rnnkit.PID.RANDOM.tmp`` is created there and removed at once.
    ``os.access`` is not asked: it answers from the permission bits and the process's ids, and
    for root it says yes where the write then fails (a read-only or pseudo file system such as
    ``/proc``, an immutable directory, a network share mapping root to nobody)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{_PREFIX}{os.getpid()}.", suffix=".tmp", dir=directory)
    except OSError as e:
        return f"creating a file in directory {directory} failed ({e.strerror or e})"
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    return None


def file_write_problem(path: str) -> str | None:
    """Why this process cannot write the existing file ``path`` in place (None when it can),
    found by opening it for appending (nothing is written, the file is unchanged; no
    ``os.access``, see :func:`write_problem`). A path that does not exist is no problem here."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"opening the file for writing failed ({e.strerror or e})"
    os.close(fd)
    return None
