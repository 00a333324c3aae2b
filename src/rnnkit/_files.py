"""Opening a file a loader was given: only a regular file, checked before a byte is read.

A FIFO would block the reader forever, ``/dev/zero`` never ends, ``/dev/null`` and a directory
hold no model; each is refused with :class:`FileFormatError` naming what the path is. A file
the process may not read raises :class:`UnreadableFileError` (not "no such file"); a path that
does not exist raises ``FileNotFoundError`` naming it.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import AnyStr, BinaryIO

from rnnkit._errors import Error, FileFormatError, InvalidParameterError
from rnnkit._numbers import show


class UnreadableFileError(Error, PermissionError):
    """A file exists but this process may not read it (its permission bits, e.g. mode 000).
    Also a ``PermissionError``."""


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a ``st_mode`` describes, in words (``"a FIFO (named pipe)"``, ``"a regular file"``)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _refuse(p: str, mode: int, expected: str) -> FileFormatError:
    return FileFormatError(f"{p}: expected {expected} (a regular file), found {kind_of(mode)}; "
                           f"refused before reading")


def no_nul(p: AnyStr, expected: str) -> AnyStr:
    """``p`` (a path, as ``os.fspath`` gives it) when it holds no NUL character, which no path
    can hold; InvalidParameterError naming it and ``expected`` (what it should be the path of)
    otherwise (the OS calls' ValueError "embedded null byte")."""
    if "\x00" in (p if isinstance(p, str) else p.decode("latin-1")):
        raise InvalidParameterError(f"{show(p)}: a path cannot hold a NUL character; expected the path of "
                                    f"{expected}")
    return p


def check_regular(path: str | os.PathLike[str], expected: str = "a model file") -> str:
    """``path`` as a string once it names a regular file this process may read (links followed).

    Raises FileNotFoundError when nothing is there, FileFormatError naming what is there when it
    is not a regular file (directory, FIFO, device, socket), UnreadableFileError when its
    permissions forbid reading. Nothing is opened."""
    p = no_nul(os.fspath(path), expected)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"no such file: {p}", p) from None
    except PermissionError:
        raise UnreadableFileError(f"{p}: cannot be reached (a directory on the way is not searchable "
                                  f"by this process)") from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(p, st.st_mode, expected)
    if not os.access(p, os.R_OK):
        raise UnreadableFileError(f"{p}: exists but this process may not read it (mode "
                                  f"{stat.S_IMODE(st.st_mode):03o}); expected {expected} it can read")
    return p


def open_regular(path: str | os.PathLike[str], expected: str = "a model file") -> BinaryIO:
    """``check_regular``, then open for reading without blocking and check the opened file again
    (a path swapped for a FIFO in between is refused, not waited on)."""
    p = check_regular(path, expected)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        raise UnreadableFileError(f"{p}: exists but this process may not read it") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _refuse(p, st.st_mode, expected)
    return os.fdopen(fd, "rb")


def read_head(path: str | os.PathLike[str], n: int = 16, expected: str = "a model file") -> bytes:
    """The first ``n`` bytes of a regular file (fewer when it is shorter)."""
    with open_regular(path, expected) as fh:
        return fh.read(n)
