"""Numba's on-disk cache keyed on every kernel source: a cached kernel is loaded only while
ALL the ``.py`` files of its directory are as they were when it was compiled (Numba alone
compares the timestamp of the function's own file, so an edit of a helper that a loop elsewhere
inlines would leave a stale kernel in the cache); and whose entries several processes may add at
once (:class:`LockedIndexDataCacheFile`)."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

try:
    import fcntl
except ImportError:   # pragma: no cover - not POSIX: saves are not serialised across processes
    fcntl = None  # type: ignore[assignment]

from rnnkit.kernels._numba_private import caching as _caching

_KEYED: dict[str, bytes] = {}   # a directory (real path) -> the hash of all its .py files


def sources_hash(directory: str) -> bytes:
    """SHA-256 of the names and contents of every ``.py`` file directly in ``directory``."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        if name.endswith(".py"):
            with open(os.path.join(directory, name), "rb") as fh:
                h.update(name.encode() + b"\0" + fh.read() + b"\0")
    return h.digest()


def key_cache_on_sources(directory: str) -> None:
    """Key Numba's on-disk cache of every function defined in a ``.py`` file of ``directory`` on
    the contents of ALL the directory's ``.py`` files (hashed now), not only on the function's
    own file: a cached kernel compiled against an older helper (inlined from another module) is
    recompiled instead of loaded. Call it before the functions are decorated."""
    _KEYED[os.path.realpath(directory)] = sources_hash(directory)


class _SourcesKeyed:
    """Mixin for Numba's file-backed cache locators: for a function in a keyed directory, the
    source stamp also holds the directory's hash (a mismatch makes Numba recompile)."""

    _py_file: str

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if os.path.dirname(os.path.realpath(py_file)) not in _KEYED:
            return None   # not ours: Numba's own locators follow
        return super().from_function(py_func, py_file)  # type: ignore[misc]

    def get_source_stamp(self) -> Any:
        return (super().get_source_stamp(), _KEYED[os.path.dirname(os.path.realpath(self._py_file))])  # type: ignore[misc]


class LockedIndexDataCacheFile(_caching.IndexDataCacheFile):  # type: ignore[misc]
    """Numba's index-and-data cache file of one function, whose :meth:`save` holds an exclusive
    lock on the function's index (``<index>.lock``, ``flock``) from reading the index to writing
    it back.

    Numba's own save reads the index, adds its entry and writes the whole index back: two
    processes that compile versions of one function at once (the children of ``rnnkit
    compile``; a fit and its compile-ahead child) both read the same index, both take the same
    free data file, and the later write drops the other's entry (and may leave the file named
    in the index holding the other's code). Here savers take turns, and each writes its data
    file before the index that names it (a reader never finds an entry whose file is not
    written yet)."""

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if fcntl is None:   # pragma: no cover - not POSIX
            yield
            return
        fd = os.open(self._index_path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)   # (releases the lock)

    def save(self, key: Any, data: Any) -> None:
        with self._locked():
            overloads = self._load_index()
            name = overloads.get(key)
            if name is None:
                taken = set(overloads.values())
                name = next(n for n in (self._data_name(i) for i in itertools.count(1)) if n not in taken)
                overloads[key] = name
            self._save_data(name, data)
            self._save_index(overloads)


def _install_locators() -> None:
    """Put a keyed variant of each of Numba's file-backed locators first, in Numba's order (a
    Numba without this list of locators keeps its own keying, per file)."""
    known: list[Any] | None = getattr(_caching.CacheImpl, "_locator_classes", None)
    if not isinstance(known, list) or any(issubclass(c, _SourcesKeyed) for c in known):
        return
    keyed = [type(f"SourcesKeyed{c.__name__}", (_SourcesKeyed, c), {})
             for c in (_caching.UserProvidedCacheLocator, _caching.InTreeCacheLocator,
                       _caching.UserWideCacheLocator)]
    known[:0] = keyed


def _install_locked_saves() -> None:
    """Make every Numba cache of this process save through :class:`LockedIndexDataCacheFile`
    (Numba's caches build their cache file from the module's ``IndexDataCacheFile``)."""
    if _caching.IndexDataCacheFile is not LockedIndexDataCacheFile:
        _caching.IndexDataCacheFile = LockedIndexDataCacheFile  # type: ignore[misc]



_install_locators()
_install_locked_saves()
