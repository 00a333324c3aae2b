"""The WebSocket of a stream, ``/v1/streams/{id}/ws``, as a plain ASGI app: one step per message,
read from ``websocket.receive`` and answered with one ``websocket.send``, without a framework's
wrapper around either.

A message is a binary step (8-byte little-endian seq, then the ``T x features`` values in the
model's dtype; answered with the seq, one byte 1/0 for replayed, then the outputs' bytes) or a
JSON text step ``{"seq": n, "x": (T, features)}`` (answered ``{"seq", "outputs", "replayed"}``).
A refused message is answered with a JSON text ``{"seq", "error": {...}}`` and the socket stays
open. A stream that does not exist: the socket is accepted, told why in a JSON text, and closed
with code 1008.

Its metrics (requests by status, time from message to answer, parse time) are kept in plain
lists and moved into the server's :class:`~rnnkit.serve._metrics.Metrics` in bulk, before every
``/metrics`` answer and every few thousand messages.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np

from rnnkit.serve._codec import as_input, as_seq, dump_json, field_of, parse_json, to_json
from rnnkit.serve._errors import RequestError, bad_request
from rnnkit.serve._server import Server

Scope = dict[str, Any]
_FLUSH_EVERY = 4096
_ROUTE = "ws_step"


class SocketStats:
    """The WebSocket messages' metrics, buffered: ``flush`` moves them into the metrics."""

    def __init__(self, server: Server) -> None:
        self.metrics = server.metrics
        self.durations: list[float] = []
        self.parses: list[float] = []
        self.statuses: dict[str, int] = {}
        self.metrics.add_flush(self.flush)

    def flush(self) -> None:
        """Move the buffered observations into the metrics."""
        durations, parses, statuses = self.durations, self.parses, self.statuses
        self.durations, self.parses, self.statuses = [], [], {}
        m = self.metrics
        for status, n in statuses.items():
            m.inc("rnnkit_serve_requests_total", n, route=_ROUTE, status=status)
        m.observe_many("rnnkit_serve_request_duration_seconds", durations, route=_ROUTE)
        m.observe_many("rnnkit_serve_parse_seconds", parses, route=_ROUTE)


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

    async def answer(self, sid: str, msg: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The ``websocket.send`` message answering one received message, and its status."""
        seq: Any = None
        t0 = time.perf_counter()
        data = msg.get("bytes")
        try:
            if data is not None:
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
            ok_seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
            text = dump_json({"seq": ok_seq, **e.body()}).decode()
            return {"type": "websocket.send", "text": text}, str(e.status)

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
            stats.durations.append(time.perf_counter() - t0)
            stats.statuses[status] = stats.statuses.get(status, 0) + 1
            if len(stats.durations) >= _FLUSH_EVERY:
                stats.flush()


__all__ = ["SocketStats", "StreamSocket"]
