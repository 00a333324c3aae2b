"""The WebSocket of a stream, ``/v1/streams/{id}/ws``, as a plain ASGI app: one step per message,
read from ``websocket.receive`` and answered with one ``websocket.send``, without a framework's
wrapper around either.

A message is a binary step (8-byte little-endian seq, then the ``T x features`` values in the
model's dtype; answered with the seq, one byte 1/0 for replayed, then the outputs' bytes) or a
JSON text step ``{"seq": n, "x": (T, features)}`` (answered ``{"seq", "outputs", "replayed"}``).
A refused message is answered with a JSON text ``{"seq", "error": {...}}`` and the socket stays
open. A stream that does not exist: the socket is accepted, told why in a JSON text, and closed
with code 1008.

The binary steps of the fast path (a stream's next step, ``seq = its seq + 1``, in the model's
float dtype, its lock free) skip the server's general step path: each is put in a
:class:`StepPool`, and every step put there during one turn of the event loop is computed in one
batched call (``Server._compute_steps``, the plain path's call) run right after that turn, with
no timer and no queue task, then committed by ``Server._commit_steps`` (the plain path's commit:
the database, the metrics). Whatever is not on the fast path (a retry, a stale or skipped seq, a
step whose stream is busy with another step, a JSON step, another dtype) takes
``Server.step``, the general path; both hold the stream's lock while a step is in flight.

Its metrics (requests by status, time from message to answer, parse time) are kept in plain
lists and moved into the server's :class:`~rnnkit.serve._metrics.Metrics` in bulk, before every
``/metrics`` answer and every few thousand messages.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import numpy as np

from rnnkit.serve._codec import as_input, as_seq, dump_json, field_of, parse_json, to_json
from rnnkit.serve._errors import RequestError, bad_request
from rnnkit.serve._server import Server, digest
from rnnkit.serve._store import Stream

Scope = dict[str, Any]
_FLUSH_EVERY = 4096
_ROUTE = "ws_step"
_SEQ_HI = 2**62 - 1  # as_seq's range: [1, 2**62)
_HEAD = struct.Struct("<Q")
_ANSWER = struct.Struct("<QB")

#: the key of the scope's ``extensions`` under which a WebSocket protocol that answers a stream's
#: messages itself (:class:`rnnkit.serve._wsconn.StreamWSProtocol`) offers to take them over: a
#: callable ``(socket, stream id)``, called once the handshake is accepted and the stream found
WS_STEPS = "rnnkit.ws_steps"


class SocketStats:
    """The WebSocket messages' metrics, buffered: ``flush`` moves them into the metrics."""

    def __init__(self, server: Server) -> None:
        self.metrics = server.metrics
        self.durations: list[float] = []
        self.parses: list[float] = []
        self.statuses: dict[str, int] = {}
        self.metrics.add_flush(self.flush)

    def record(self, t0: float, status: str) -> None:
        """One answered message: received at ``t0`` (``time.perf_counter``), answered now with
        ``status``."""
        self.durations.append(time.perf_counter() - t0)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if len(self.durations) >= _FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Move the buffered observations into the metrics."""
        durations, parses, statuses = self.durations, self.parses, self.statuses
        self.durations, self.parses, self.statuses = [], [], {}
        m = self.metrics
        for status, n in statuses.items():
            m.inc("rnnkit_serve_requests_total", n, route=_ROUTE, status=status)
        m.observe_many("rnnkit_serve_request_duration_seconds", durations, route=_ROUTE)
        m.observe_many("rnnkit_serve_parse_seconds", parses, route=_ROUTE)


class _Pending:
    """One step waiting in a :class:`StepPool`."""

    __slots__ = ("stream", "seq", "x", "future", "arrived")

    def __init__(self, stream: Stream, seq: int, x: np.ndarray, future: asyncio.Future[Any]) -> None:
        self.stream, self.seq, self.x, self.future = stream, seq, x, future
        self.arrived = time.perf_counter()


class FastStep:
    """A step on the fast path: its stream (locked, busy), seq, the stream's lock, and the
    future the :class:`StepPool` completes with its outputs (T, ...) or the error refusing it."""

    __slots__ = ("stream", "seq", "lock", "future")

    def __init__(self, stream: Stream, seq: int, lock: asyncio.Lock, future: asyncio.Future[Any]) -> None:
        self.stream, self.seq, self.lock, self.future = stream, seq, lock, future


def _take(lock: asyncio.Lock) -> None:
    """Take a free ``lock`` without yielding to the event loop (``acquire`` of a free lock
    returns at its first step)."""
    coro = lock.acquire()
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise AssertionError("a free lock did not return at once")


class StepPool:
    """The fast path's steps of every socket, computed together: the steps put here during one
    turn of the event loop make one batched call per number of timesteps (at most ``max_rows``
    rows each), run right after that turn (``loop.call_soon``), then one commit per call.

    A step's input is checked for finiteness here, all the batch's rows in one NumPy call; a row
    that is not finite is refused with the error :func:`as_input` gives it, and never computed."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pending: list[_Pending] = []
        self.scheduled = False
        self.commits: set[asyncio.Task[None]] = set()

    def put(self, stream: Stream, seq: int, x: np.ndarray) -> asyncio.Future[Any]:
        """Queue step ``seq`` of ``stream`` (timesteps ``x``, (T, features)); the future gets its
        outputs (T, ...) once committed, or the error that refused it."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.pending.append(_Pending(stream, seq, x, fut))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self.run)
        return fut

    def run(self) -> None:
        """Compute every queued step: group by timesteps, in calls of at most ``max_rows`` rows."""
        self.scheduled = False
        pending, self.pending = self.pending, []
        groups: dict[int, list[_Pending]] = {}
        for p in pending:
            groups.setdefault(p.x.shape[0], []).append(p)
        max_rows = self.server.cfg.max_rows
        for t, group in groups.items():
            per = max(1, max_rows // t)
            for at in range(0, len(group), per):
                self._call(group[at:at + per])

    def _call(self, group: list[_Pending]) -> None:
        server = self.server
        x = np.stack([p.x for p in group])
        finite = np.isfinite(x.reshape(len(group), -1)).all(axis=1)
        if not finite.all():
            for p, ok in zip(group, finite, strict=True):
                if not ok:
                    try:
                        as_input(p.x, server.sv, server.cfg, "x", stream=True)
                        raise AssertionError("as_input accepted a step that is not finite")
                    except RequestError as e:
                        p.future.set_exception(e)
            group = [p for p, ok in zip(group, finite, strict=True) if ok]
            if not group:
                return
        payloads = [(p.stream, p.seq, p.x, digest(p.x)) for p in group]
        m = server.metrics
        start = time.perf_counter()
        m.observe_many("rnnkit_serve_batch_wait_seconds", [start - p.arrived for p in group], kind="step")
        try:
            results = server._compute_steps(payloads)
        except Exception as e:  # noqa: BLE001 - one failed call fails its own steps only
            results = [e] * len(group)
        rows = sum(p.x.shape[0] for p in group)
        m.observe("rnnkit_serve_batch_rows", rows, kind="step")
        m.observe("rnnkit_serve_batch_requests", len(group), kind="step")
        m.observe("rnnkit_serve_compute_seconds", time.perf_counter() - start, kind="step")
        task = asyncio.get_running_loop().create_task(self._commit(group, payloads, results))
        self.commits.add(task)
        task.add_done_callback(self.commits.discard)

    async def _commit(self, group: list[_Pending], payloads: list[Any], results: list[Any]) -> None:
        try:
            results = await self.server._commit_steps(payloads, results)
        except Exception as e:  # noqa: BLE001 - a failed commit fails the steps of its call only
            results = [e] * len(group)
        for p, r in zip(group, results, strict=True):
            if p.future.done():
                continue
            if isinstance(r, BaseException):
                p.future.set_exception(r)
            else:
                p.future.set_result(r)


class StreamSocket:
    """The ASGI app of a stream's WebSocket (``scope["path"]`` is ``/v1/streams/{id}/ws``)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.sv = server.sv
        self.cfg = server.cfg
        self.stats = SocketStats(server)
        plan = self.sv.streams
        # binary steps already in the model's float dtype need no conversion: a length check,
        # a view of the bytes and a finiteness check (anything else takes the general path)
        self.fast = plan is not None and plan.dtype == self.sv.input_dtype == self.sv.dtype \
            and plan.dtype.kind == "f"
        self.width = 0 if plan is None else plan.features * plan.dtype.itemsize
        self.pool = StepPool(server)

    @staticmethod
    def stream_id(path: str) -> str | None:
        """The stream id of a WebSocket path ``/v1/streams/{id}/ws`` (None for any other path)."""
        if path.startswith("/v1/streams/") and path.endswith("/ws"):
            sid = path[12:-3]
            if sid and "/" not in sid:
                return sid
        return None

    def binary_step(self, data: bytes) -> tuple[int, np.ndarray]:
        """The seq and the timesteps ``(T, features)`` of a binary step message, checked."""
        plan = self.sv.streams
        assert plan is not None
        width = self.width
        if len(data) < 8 + width or (len(data) - 8) % width:
            raise bad_request("bad_message", f"a binary step is 8 bytes of seq and then T x {plan.features} "
                                             f"{plan.dtype.name} values ({width} bytes per timestep); got "
                                             f"{len(data)} bytes", expected=f"8 + T * {width} bytes",
                              got=len(data))
        (seq,) = struct.unpack_from("<Q", data)
        x = np.frombuffer(data, plan.dtype, offset=8).reshape(-1, plan.features)
        seq = as_seq(seq)
        if not self.fast or x.shape[0] > self.cfg.max_timesteps or not np.isfinite(x).all():
            x = as_input(x, self.sv, self.cfg, "x", stream=True)  # the refusal, or the general path
        return seq, x

    def start_step(self, sid: str, data: bytes, t0: float) -> FastStep | None:
        """Put a binary step on the fast path (the stream's next step, whole timesteps, at most
        ``max_timesteps``, its lock free) in the :class:`StepPool`, the stream's lock taken: its
        :class:`FastStep`, whose ``future`` gets the outputs; None when the step is not one for
        the fast path (the general path then answers it, or refuses it). Runs without yielding
        to the event loop; :meth:`end_step` must follow once the future is done."""
        n = len(data) - 8
        width = self.width
        if n <= 0 or n % width or n // width > self.cfg.max_timesteps:
            return None
        (seq,) = _HEAD.unpack_from(data)
        store = self.server.store
        s = None if store is None else store.streams.get(sid)
        if s is None or seq != s.seq + 1 or seq > _SEQ_HI:
            return None
        locks = self.server.locks
        lock = locks.get(sid)
        if lock is None:
            lock = locks[sid] = asyncio.Lock()
        elif lock.locked():
            return None
        plan = self.sv.streams
        assert plan is not None
        x = np.frombuffer(data, plan.dtype, offset=8).reshape(n // width, plan.features)
        _take(lock)
        s.busy = True
        s.touched = time.time()
        self.stats.parses.append(time.perf_counter() - t0)
        return FastStep(s, seq, lock, self.pool.put(s, seq, x))

    @staticmethod
    def end_step(step: FastStep) -> None:
        """Release the stream of a step put on the fast path (its future done, or abandoned)."""
        step.stream.busy = False
        step.lock.release()

    @staticmethod
    def step_answer(step: FastStep, y: np.ndarray) -> bytes:
        """The binary answer to a step on the fast path: the seq, 0 (not replayed), the outputs."""
        return _ANSWER.pack(step.seq, 0) + y.tobytes()

    @staticmethod
    def refusal(seq: Any, e: RequestError) -> tuple[str, str]:
        """The JSON text answering a refused message (``seq``: what the message's seq was read as,
        if anything), and its status."""
        ok_seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        return dump_json({"seq": ok_seq, **e.body()}).decode(), str(e.status)

    async def fast_step(self, sid: str, data: bytes, t0: float) -> dict[str, Any] | None:
        """The ``websocket.send`` message answering a binary step on the fast path
        (:meth:`start_step`); None when the step is not one for the fast path."""
        step = self.start_step(sid, data, t0)
        if step is None:
            return None
        try:
            y = await step.future
        finally:
            self.end_step(step)
        return {"type": "websocket.send", "bytes": self.step_answer(step, y)}

    async def answer(self, sid: str, msg: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The ``websocket.send`` message answering one received message, and its status."""
        seq: Any = None
        t0 = time.perf_counter()
        data = msg.get("bytes")
        try:
            if data is not None:
                if self.fast:
                    seq = _HEAD.unpack_from(data)[0] if len(data) >= 8 else None
                    reply = await self.fast_step(sid, data, t0)
                    if reply is not None:
                        return reply, "200"
                seq, x = self.binary_step(data)
            else:
                text = msg.get("text") or ""
                if len(text) > self.cfg.max_body_bytes:
                    raise RequestError(413, "body_too_large",
                                       f"the message exceeds {self.cfg.max_body_bytes} bytes")
                doc = parse_json(text.encode("utf-8", "surrogatepass"))
                seq = field_of(doc, "seq")
                seq = as_seq(seq)
                x = as_input(field_of(doc, "x"), self.sv, self.cfg, "x", stream=True)
            self.stats.parses.append(time.perf_counter() - t0)
            y, replayed = await self.server.step(sid, seq, x)
            if data is not None:
                return {"type": "websocket.send",
                        "bytes": struct.pack("<QB", seq, replayed) + y.tobytes()}, "200"
            doc = {"seq": seq, "outputs": to_json([y]), "replayed": replayed}
            return {"type": "websocket.send", "text": dump_json(doc).decode()}, "200"
        except RequestError as e:
            text, status = self.refusal(seq, e)
            return {"type": "websocket.send", "text": text}, status

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        sid = self.stream_id(scope["path"])
        assert sid is not None
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        try:
            self.server.get(sid)
        except RequestError as e:
            self.server.metrics.inc("rnnkit_serve_requests_total", route="ws_open", status=str(e.status))
            try:
                await send({"type": "websocket.send", "text": dump_json(e.body()).decode()})
                await send({"type": "websocket.close", "code": 1008})
            except OSError:
                pass
            return
        hand_over = scope.get("extensions", {}).get(WS_STEPS)
        if hand_over is not None and self.cfg.ws_fast_path:
            hand_over(self, sid)  # the protocol answers the messages from now on; receive gets the disconnect
        stats = self.stats
        while True:
            msg = await receive()
            if msg["type"] != "websocket.receive":
                return  # websocket.disconnect
            t0 = time.perf_counter()
            reply, status = await self.answer(sid, msg)
            try:
                await send(reply)
            except OSError:  # the client has gone
                return
            stats.record(t0, status)


__all__ = ["WS_STEPS", "FastStep", "SocketStats", "StepPool", "StreamSocket"]
