"""The server's work, apart from HTTP: predicts and stream steps through the micro-batchers,
the streams' sequence numbers, idle expiry. :mod:`rnnkit.serve._app` puts HTTP and WebSocket
in front of it.

Sequence numbers: a stream at ``seq = s`` (its last applied step; 0 when new) applies a step
numbered ``s + 1``; a step numbered ``s`` with the same input is answered again with the
stored outputs, without being applied (a retry); anything else is refused (409: a gap, an old
step, or a retry with a different input). One step of a stream runs at a time (a lock per
stream, held until the step is committed or refused), so a retry can never apply it twice; a
step timed out in the queue was never computed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError
from rnnkit.serve._batcher import Batcher
from rnnkit.serve._errors import RequestError
from rnnkit.serve._limits import ServeConfig
from rnnkit.serve._metrics import Metrics
from rnnkit.serve._servable import Servable
from rnnkit.serve._store import Stream, StreamStore


def digest(x: np.ndarray) -> str:
    """A digest of a step's input (its shape and bytes)."""
    return hashlib.sha256(repr(x.shape).encode() + x.tobytes()).hexdigest()[:32]


class Server:
    """Predicts and streams of one :class:`Servable` under one :class:`ServeConfig`."""

    def __init__(self, sv: Servable, cfg: ServeConfig) -> None:
        self.sv = sv
        self.cfg = cfg
        self.metrics = Metrics()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="rnnkit-serve")
        self.store: StreamStore | None = None
        if sv.streams is not None and cfg.streams:
            self.store = StreamStore(sv.streams, sv.sha256, cfg.state_db, synchronous=cfg.synchronous)
        self.locks: dict[str, asyncio.Lock] = {}
        wait = cfg.max_wait_ms / 1000.0
        # predicts are computed on the event loop's thread, as steps are: a call is bounded by
        # max_rows, its kernels release the GIL, and on the worker thread each of its returns to
        # Python waited for the GIL behind the event loop (up to the 5 ms switch interval each
        # time: a 2.5 ms call of 40 requests took 29 ms there on a busy 2-core machine)
        self.predicts = Batcher("predict", self._run_predicts, self.executor, self.metrics, max_wait_s=wait,
                                max_rows=cfg.max_rows if sv.predict_batched else 1,
                                max_queue_rows=cfg.max_queue_rows, timeout_s=cfg.request_timeout_s,
                                inline=True)
        self.steps = Batcher("step", self._compute_steps, self.executor, self.metrics, max_wait_s=wait,
                             max_rows=cfg.max_rows, max_queue_rows=cfg.max_queue_rows,
                             timeout_s=cfg.request_timeout_s, inline=True, finish=self._commit_steps)
        self.metrics.gauges["rnnkit_serve_active_streams"] = lambda: float(
            0 if self.store is None else len(self.store.streams))
        self._expiry: asyncio.Task[None] | None = None

    # -- life --------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """Start the batchers and the expiry task; on exit stop them and close the database."""
        self.predicts.start()
        self.steps.start()
        self._expiry = asyncio.get_running_loop().create_task(self._expire_loop())
        try:
            yield
        finally:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
            await self.predicts.stop()
            await self.steps.stop()
            if self.store is not None:
                await self._call(self.store.close)
            self.executor.shutdown(wait=True)

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _expire_loop(self) -> None:
        period = min(max(self.cfg.stream_ttl_s / 4.0, 0.05), 10.0)
        while True:
            await asyncio.sleep(period)
            await self.expire()

    async def expire(self, now: float | None = None) -> list[str]:
        """Delete the streams idle for longer than ``stream_ttl_s``; returns their ids."""
        if self.store is None:
            return []
        ids = [i for i in self.store.idle(self.cfg.stream_ttl_s, now)
               if not (i in self.locks and self.locks[i].locked())]
        if ids:
            try:
                await self._call(self.store.delete, ids)
            except RequestError:  # the database refused (full disk): they stay, tried again next round
                return []
            for i in ids:
                self.locks.pop(i, None)
            self.metrics.inc("rnnkit_serve_streams_expired_total", len(ids))
        return ids

    # -- predict -----------------------------------------------------------------------------
    def _run_predicts(self, payloads: list[tuple[np.ndarray, Any, Any]]) -> list[Any]:
        if len(payloads) == 1:
            x, lens, mask = payloads[0]
            return [self._predict_alone(x, lens, mask)]
        x = np.concatenate([p[0] for p in payloads])
        lens = None if payloads[0][1] is None else np.concatenate([p[1] for p in payloads])
        mask = None if payloads[0][2] is None else np.concatenate([p[2] for p in payloads])
        try:
            outs = self.sv.predict(x, lens, mask)
        except InvalidInputError:  # one bad request in the batch: each alone, so it fails alone
            return [self._predict_alone(*p) for p in payloads]
        res, at = [], 0
        for p in payloads:
            n = p[0].shape[0]
            res.append([o[at:at + n] for o in outs])
            at += n
        return res

    def _predict_alone(self, x: np.ndarray, lens: Any, mask: Any) -> Any:
        try:
            return self.sv.predict(x, lens, mask)
        except InvalidInputError as e:
            return RequestError(422, "model_refused", f"the model refused the input: {str(e)[:300]}")

    def submit_predict(self, x: np.ndarray, lengths: np.ndarray | None,
                       mask: np.ndarray | None) -> asyncio.Future[list[np.ndarray]]:
        """Queue one request's predict (computed with whatever else arrives in the same few ms);
        the future gets its outputs. A 429 when the queue is full."""
        kind = "lengths" if lengths is not None else "mask" if mask is not None else ""
        key: Hashable = (x.shape[1:], kind)
        rows = int(x.shape[0] * x.shape[1])
        return self.predicts.submit(key, rows, (x, lengths, mask))

    async def predict(self, x: np.ndarray, lengths: np.ndarray | None,
                      mask: np.ndarray | None) -> list[np.ndarray]:
        """The outputs for one request: :meth:`submit_predict`, awaited."""
        out: list[np.ndarray] = await self.submit_predict(x, lengths, mask)
        return out

    # -- streams -----------------------------------------------------------------------------
    def _store(self) -> StreamStore:
        if self.store is None:
            why = self.sv.stream_reason or "this server runs several worker processes (predict only)"
            raise RequestError(409, "streams_unavailable", f"this server has no streams: {why}")
        return self.store

    async def create(self) -> Stream:
        """A new stream (committed before it is returned); 429 beyond ``max_streams``."""
        store = self._store()
        if len(store.streams) >= self.cfg.max_streams:
            raise RequestError(429, "too_many_streams", f"{len(store.streams)} streams are open, at most "
                                                        f"{self.cfg.max_streams}; delete some first")
        s: Stream = await self._call(store.create)
        return s

    def get(self, sid: str) -> Stream:
        """The stream ``sid`` (404 when there is none); reading it counts as using it."""
        return self._store().get(sid)

    async def delete(self, sid: str) -> None:
        """Delete stream ``sid`` after any step of it in flight."""
        store = self._store()
        store.get(sid)
        async with self.locks.setdefault(sid, asyncio.Lock()):
            if sid in store.streams:
                await self._call(store.delete, [sid])
        self.locks.pop(sid, None)

    def _compute_steps(self, payloads: list[tuple[Stream, int, np.ndarray, str]]) -> list[Any]:
        """The new states and outputs of a batch of steps (on the event loop's thread: the
        kernels release the GIL and use every core for a large batch)."""
        plan = self.sv.streams
        assert plan is not None
        x = np.stack([p[2] for p in payloads])
        y, new = plan.step(x, plan.stack([p[0].state for p in payloads]))
        states = plan.split(new, len(payloads))
        return [(st, yi.copy()) for st, yi in zip(states, y, strict=True)]

    async def _commit_steps(self, payloads: list[tuple[Stream, int, np.ndarray, str]],
                            results: list[Any]) -> list[Any]:
        """Commit a computed batch (one transaction, on the worker thread when there is a
        database); returns the outputs to answer with."""
        store = self.store
        assert store is not None
        if isinstance(results[0], BaseException):
            return results
        updates = [(s, seq, st, yi, dig)
                   for (s, seq, _, dig), (st, yi) in zip(payloads, results, strict=True)]
        t0 = time.perf_counter()
        if store.db is not None:
            await self._call(store.commit, updates)
        else:
            store.commit(updates)
        self.metrics.observe("rnnkit_serve_commit_seconds", time.perf_counter() - t0)
        self.metrics.inc("rnnkit_serve_steps_total", len(payloads))
        return [yi for _, yi in results]

    async def step(self, sid: str, seq: int, x: np.ndarray) -> tuple[np.ndarray, bool]:
        """Apply step ``seq`` (timesteps ``x`` (T, features)) to stream ``sid``: (its outputs
        (T, ...), whether they are the stored answer to a retry)."""
        store = self._store()
        store.get(sid)
        lock = self.locks.get(sid)
        if lock is None:
            lock = self.locks[sid] = asyncio.Lock()
        async with lock:
            s = store.get(sid)  # deleted or expired while this step waited
            dig = digest(x)
            if seq == s.seq and s.last_y is not None:
                if dig != s.last_digest:
                    raise RequestError(409, "seq_conflict", f"step {seq} of this stream was applied with a "
                                                            f"different input; a retry must resend the same "
                                                            f"timesteps", expected=s.seq + 1, got=seq)
                return s.last_y, True
            if seq <= s.seq:
                raise RequestError(409, "seq_stale", f"step {seq} was applied before the stream's last step "
                                                     f"{s.seq}; only the last step can be answered again",
                                   expected=s.seq + 1, got=seq, stream_seq=s.seq)
            if seq > s.seq + 1:
                raise RequestError(409, "seq_gap", f"step {seq} would skip step(s) {s.seq + 1}..{seq - 1}; "
                                                   f"the stream's next step is {s.seq + 1}",
                                   expected=s.seq + 1, got=seq, stream_seq=s.seq)
            s.busy = True
            try:
                y: np.ndarray = await self.steps.submit((x.shape[0],), int(x.shape[0]), (s, seq, x, dig))
            finally:
                s.busy = False
            return y, False

    def state_doc(self, s: Stream) -> dict[str, Any]:
        """A stream's state as JSON: id, seq, each state array, times."""
        plan = self.sv.streams
        assert plan is not None
        return {"id": s.id, "seq": s.seq, "created": s.created, "touched": s.touched,
                "state": {e.name: a.tolist() for e, a in zip(plan.entries, s.state, strict=True)}}


__all__ = ["Server", "digest"]
