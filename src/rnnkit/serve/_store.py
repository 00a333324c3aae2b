"""The streams: their states in memory, and (with a path) in an SQLite database in write-ahead
log mode, so that a server killed at any moment restarts with every acknowledged step.

A stream holds the sequence number of its last applied step (``seq``, 0 when new), its state,
and the answer to that last step (its outputs and a digest of its input), so that a retried
step is answered again without being applied twice. :meth:`StreamStore.commit` writes the new
rows of a whole batch of steps in one transaction; the server answers those steps only after it
returns. The database remembers the model it was made for (its SHA-256 and state layout) and
refuses to serve a different one.

All database calls happen on the server's one worker thread. A write the database refuses (a
full disk, an I/O error, a file made read-only) is rolled back, leaves every stream in memory as
it was, and raises a 503 :class:`~rnnkit.serve._errors.RequestError` naming SQLite's own error;
a rollback that itself fails never hides that first error.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rnnkit._errors import FileFormatError, InvalidParameterError
from rnnkit._files import kind_of
from rnnkit.serve._errors import RequestError
from rnnkit.serve._stepper import StreamPlan

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS streams (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state BLOB NOT NULL,
    last_y BLOB, last_shape TEXT, last_digest TEXT, created REAL NOT NULL, touched REAL NOT NULL
);
"""


@dataclass
class Stream:
    """One stream. ``touched``: the wall-clock time of its last use (idle expiry)."""

    id: str
    seq: int
    state: list[np.ndarray]
    created: float
    touched: float
    last_y: np.ndarray | None = None
    last_digest: str | None = None
    busy: bool = False


class StreamStore:
    """The open streams of one model (``plan``), persisted at ``path`` (None: in memory only).

    ``synchronous``: SQLite's ``FULL`` (each commit reaches the disk: survives a power cut) or
    ``NORMAL`` (survives a killed process, the operating system keeping the log)."""

    def __init__(self, plan: StreamPlan, model_sha256: str, path: str | os.PathLike[str] | None = None, *,
                 synchronous: str = "FULL") -> None:
        self.plan = plan
        self.streams: dict[str, Stream] = {}
        self.path = None if path is None else os.fspath(path)
        self.db: sqlite3.Connection | None = None
        self.layout = json.dumps({"dtype": plan.dtype.str, "state": [[e.name, list(e.shape)]
                                                                     for e in plan.entries]})
        if self.path is None:
            return
        if not isinstance(synchronous, str) or synchronous.upper() not in ("FULL", "NORMAL"):
            raise InvalidParameterError(f"serve: synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        _check_db_path(self.path)
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self.db.executescript(_SCHEMA)
            meta = dict(self.db.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                self.db.execute("BEGIN")
                self.db.executemany("INSERT INTO meta VALUES (?, ?)", [("model_sha256", model_sha256),
                                                                       ("layout", self.layout)])
                self.db.execute("COMMIT")
        except sqlite3.Error as e:
            self.close()
            raise FileFormatError(f"--state-db {self.path}: cannot be opened as a stream database "
                                  f"(SQLite: {e}); expected a new path in a writable directory or an "
                                  f"SQLite file this server wrote") from None
        if meta and (meta.get("model_sha256") != model_sha256 or meta.get("layout") != self.layout):
            self.close()
            raise InvalidParameterError(
                f"serve: the stream database {self.path} was made for another model (sha256 "
                f"{meta.get('model_sha256')}, state {meta.get('layout')}); this model is sha256 "
                f"{model_sha256}, state {self.layout}. Use a new --state-db file for a new model")
        try:
            for row in self.db.execute("SELECT id, seq, state, last_y, last_shape, last_digest, created, "
                                       "touched FROM streams"):
                sid, seq, blob, y, shape, digest, created, touched = row
                last = None if y is None else np.frombuffer(y, plan.dtype).reshape(json.loads(shape)).copy()
                self.streams[sid] = Stream(sid, int(seq), self._unpack(blob), float(created), float(touched),
                                           last, digest)
        except (sqlite3.Error, ValueError, TypeError) as e:
            self.close()
            raise FileFormatError(f"--state-db {self.path}: a stored stream cannot be read back ({e}); "
                                  f"expected the rows this server writes") from None

    # -- encoding ----------------------------------------------------------------------------
    def _pack(self, state: list[np.ndarray]) -> bytes:
        return b"".join(np.ascontiguousarray(a, self.plan.dtype).tobytes() for a in state)

    def _unpack(self, blob: bytes) -> list[np.ndarray]:
        out, pos = [], 0
        for e in self.plan.entries:
            n = int(np.prod(e.shape)) * self.plan.dtype.itemsize
            out.append(np.frombuffer(blob[pos:pos + n], self.plan.dtype).reshape(e.shape).copy())
            pos += n
        return out

    def _write(self, what: str, work: Callable[[sqlite3.Connection], object]) -> None:
        """Run ``work`` in one transaction. A refused write (disk full, I/O error, read-only
        file) is rolled back (SQLite may have done so already) and raised as a 503 naming SQLite's
        error; nothing in memory has changed."""
        db = self.db
        assert db is not None
        try:
            db.execute("BEGIN")
            try:
                work(db)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):  # the first error is the one to report
                        db.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise RequestError(503, "storage_failed", f"the stream database {self.path} refused to {what}: "
                                                      f"{e}; nothing was applied, retry once it has room",
                               got=str(e)) from e

    # -- streams -----------------------------------------------------------------------------
    def get(self, sid: str) -> Stream:
        """The stream ``sid``, or a 404 naming it. Reading a stream counts as using it: its idle
        time starts again (in memory; the database's ``touched`` moves with its next step)."""
        s = self.streams.get(sid)
        if s is None:
            raise RequestError(404, "unknown_stream", f"no stream {sid[:80]!r} (never created, deleted, or "
                                                      f"expired after its idle time)", got=sid[:80])
        s.touched = time.time()
        return s

    def create(self) -> Stream:
        """A new stream at seq 0 with the zero state, committed before it is returned."""
        now = time.time()
        s = Stream(secrets.token_urlsafe(12), 0, self.plan.zero(), now, now)
        if self.db is not None:
            self._write("create a stream", lambda db: db.execute(
                "INSERT INTO streams (id, seq, state, created, touched) VALUES (?, 0, ?, ?, ?)",
                (s.id, self._pack(s.state), now, now)))
        self.streams[s.id] = s
        return s

    def delete(self, sids: list[str]) -> None:
        """Forget the streams ``sids`` (committed before it returns)."""
        if self.db is not None and sids:
            self._write("delete streams", lambda db: db.executemany("DELETE FROM streams WHERE id = ?",
                                                                    [(i,) for i in sids]))
        for sid in sids:
            self.streams.pop(sid, None)

    def commit(self, updates: list[tuple[Stream, int, list[np.ndarray], np.ndarray, str]]) -> None:
        """Apply ``(stream, new seq, new state, outputs, input digest)`` for a batch of steps:
        first one transaction in the database (when there is one), then memory."""
        now = time.time()
        if self.db is not None and updates:
            rows = [(seq, self._pack(st), np.ascontiguousarray(y).tobytes(), json.dumps(list(y.shape)), dig,
                     now, s.id) for s, seq, st, y, dig in updates]
            self._write("commit a step", lambda db: db.executemany(
                "UPDATE streams SET seq = ?, state = ?, last_y = ?, last_shape = ?, last_digest = ?, "
                "touched = ? WHERE id = ?", rows))
        for s, seq, st, y, dig in updates:
            s.seq, s.state, s.last_y, s.last_digest, s.touched = seq, st, y, dig, now

    def idle(self, ttl_s: float, now: float | None = None) -> list[str]:
        """The ids of streams unused for more than ``ttl_s`` seconds and not stepping now."""
        t = time.time() if now is None else now
        return [s.id for s in list(self.streams.values()) if not s.busy and t - s.touched > ttl_s]

    def close(self) -> None:
        """Close the database (every commit is already durable)."""
        if self.db is not None:
            self.db.close()
            self.db = None


def _check_db_path(path: str) -> None:
    """Refuse, before SQLite opens it, a ``--state-db`` that is not a regular file (a FIFO would
    block, a directory cannot be opened) or whose directory does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise FileFormatError(f"--state-db {path}: its directory {parent} does not exist; expected a "
                                  f"file path in an existing, writable directory") from None
        return
    except OSError as e:
        raise FileFormatError(f"--state-db {path}: cannot be reached ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise FileFormatError(f"--state-db {path}: expected an SQLite file (a regular file) or a new path, "
                              f"found {kind_of(st.st_mode)}")


__all__ = ["Stream", "StreamStore"]
