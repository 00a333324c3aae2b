"""The streams: their states in memory, and (with a path) in an SQLite database in write-ahead
log mode, so that a server killed at any moment restarts with every acknowledged step.

A stream holds the sequence number of its last applied step (``seq``, 0 when new), its state,
and the answer to that last step (its outputs and a digest of its input), so that a retried
step is answered again without being applied twice. :meth:`StreamStore.commit` writes the new
rows of a whole batch of steps in one transaction; the server answers those steps only after it
returns. The database remembers the model it was made for (its SHA-256 and state layout) and
refuses to serve a different one.

All database calls happen on the server's one worker thread.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass

import numpy as np

from rnnkit._errors import InvalidParameterError
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
        if synchronous.upper() not in ("FULL", "NORMAL"):
            raise InvalidParameterError(f"serve: synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
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
        elif meta.get("model_sha256") != model_sha256 or meta.get("layout") != self.layout:
            raise InvalidParameterError(
                f"serve: the stream database {self.path} was made for another model (sha256 "
                f"{meta.get('model_sha256')}, state {meta.get('layout')}); this model is sha256 "
                f"{model_sha256}, state {self.layout}. Use a new --state-db file for a new model")
        for row in self.db.execute("SELECT id, seq, state, last_y, last_shape, last_digest, created, touched "
                                   "FROM streams"):
            sid, seq, blob, y, shape, digest, created, touched = row
            last = None if y is None else np.frombuffer(y, plan.dtype).reshape(json.loads(shape)).copy()
            self.streams[sid] = Stream(sid, int(seq), self._unpack(blob), float(created), float(touched),
                                       last, digest)

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

    # -- streams -----------------------------------------------------------------------------
    def get(self, sid: str) -> Stream:
        """The stream ``sid``, or a 404 naming it."""
        s = self.streams.get(sid)
        if s is None:
            raise RequestError(404, "unknown_stream", f"no stream {sid[:80]!r} (never created, deleted, or "
                                                      f"expired after its idle time)", got=sid[:80])
        return s

    def create(self) -> Stream:
        """A new stream at seq 0 with the zero state, committed before it is returned."""
        now = time.time()
        s = Stream(secrets.token_urlsafe(12), 0, self.plan.zero(), now, now)
        if self.db is not None:
            self.db.execute("INSERT INTO streams (id, seq, state, created, touched) VALUES (?, 0, ?, ?, ?)",
                            (s.id, self._pack(s.state), now, now))
        self.streams[s.id] = s
        return s

    def delete(self, sids: list[str]) -> None:
        """Forget the streams ``sids`` (committed before it returns)."""
        if self.db is not None and sids:
            self.db.execute("BEGIN")
            self.db.executemany("DELETE FROM streams WHERE id = ?", [(i,) for i in sids])
            self.db.execute("COMMIT")
        for sid in sids:
            self.streams.pop(sid, None)

    def commit(self, updates: list[tuple[Stream, int, list[np.ndarray], np.ndarray, str]]) -> None:
        """Apply ``(stream, new seq, new state, outputs, input digest)`` for a batch of steps:
        first one transaction in the database (when there is one), then memory."""
        now = time.time()
        if self.db is not None and updates:
            rows = [(seq, self._pack(st), np.ascontiguousarray(y).tobytes(), json.dumps(list(y.shape)), dig,
                     now, s.id) for s, seq, st, y, dig in updates]
            self.db.execute("BEGIN")
            try:
                self.db.executemany("UPDATE streams SET seq = ?, state = ?, last_y = ?, last_shape = ?, "
                                    "last_digest = ?, touched = ? WHERE id = ?", rows)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
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


__all__ = ["Stream", "StreamStore"]
