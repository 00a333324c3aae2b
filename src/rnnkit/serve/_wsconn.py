"""uvicorn's WebSocket protocol (``websockets-sansio``) answering a stream's messages itself.

Through the ASGI app, each message of a stream's WebSocket (``/v1/streams/{id}/ws``) is parsed by
the ``websockets`` library's sans-I/O parser into a frame object, put in the connection's ASGI
queue as a ``websocket.receive`` dict, taken by the app's task (a task switch), answered, handed
back as a ``websocket.send`` dict to ``send`` (a coroutine), framed by the library and written.
:class:`StreamWSProtocol` keeps all of that for the handshake and for every connection whose app
does not ask otherwise; once :class:`~rnnkit.serve._ws.StreamSocket` has accepted the handshake
and found the stream, it hands the connection's messages over (the scope's extension
:data:`~rnnkit.serve._ws.WS_STEPS`), and from then on:

- a complete, unfragmented, masked binary frame within ``ws_max_size`` (no extension
  negotiated, the connection open, no fragmented message in progress) is unmasked here and is a
  message; every other frame (text, fragments, ping, pong, close, a frame the library refuses:
  unmasked, reserved bits, too large) is handed to the library's parser, byte for byte, and
  handled by uvicorn's own code (a text message then reaches this protocol, not the app's queue);
- messages are answered one at a time, in their order: a binary step that is its stream's next
  one goes to the :class:`~rnnkit.serve._ws.StepPool` (:meth:`StreamSocket.start_step`) and is
  answered from the pool's completion; any other message is answered by
  :meth:`StreamSocket.answer` (the app's own function) in a task. The answers, refusals, metrics
  (:meth:`SocketStats.record`) and the stream's lock are the app's; an answer is framed as the
  library frames it (FIN, opcode, length; a server's frames are not masked) and written at once,
  or once the transport's buffer drains when the client does not read;
- reading is paused while a message is being answered and resumed once every message read is
  answered, as uvicorn pauses it until the app has taken the queued messages;
- a client that leaves, a close, a failed answer: what the app's path does (the answer is not
  written; an exception is logged as uvicorn logs an app's and the connection is closed); the
  app's task waits on ``receive`` for the disconnect and ends as before.

The frame layer knows where the library's parser stands: it hands it whole frames (counting a
frame's bytes until the library has all of them), and takes over only at a frame boundary (the
parser waiting for a new frame with nothing buffered).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State
from websockets.speedups import apply_mask

from rnnkit.serve._errors import RequestError
from rnnkit.serve._http import raw_transport
from rnnkit.serve._ws import WS_STEPS, FastStep, StreamSocket

_BINARY_FIN = 0x82
_TEXT_FIN = 0x81


def frame(opcode: int, payload: bytes) -> bytes:
    """A server's unmasked, unfragmented frame of ``opcode`` (with FIN) carrying ``payload``, as
    ``websockets`` serializes it without extensions."""
    n = len(payload)
    if n < 126:
        head = bytes((opcode, n))
    elif n < 65536:
        head = bytes((opcode, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((opcode, 127)) + n.to_bytes(8, "big")
    return head + payload


class _Inbox:
    """The connection's ASGI queue once the protocol answers its messages: a message
    (``websocket.receive``) goes to the protocol's inbox, anything else (a disconnect) to the
    app's queue, from which the app's ``receive`` reads."""

    def __init__(self, protocol: StreamWSProtocol, queue: asyncio.Queue[Any]) -> None:
        self.protocol, self.queue = protocol, queue

    def put_nowait(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "websocket.receive":
            data = msg.get("bytes")
            self.protocol.inbox.append((msg["text"] if data is None else data, time.perf_counter()))
        else:
            self.queue.put_nowait(msg)

    def empty(self) -> bool:
        return self.queue.empty()

    async def get(self) -> Any:
        return await self.queue.get()


def _at_boundary(conn: Any) -> bool:
    """Whether the library's parser waits for a new frame with nothing buffered (every byte it
    got belonged to complete frames)."""
    if conn.reader.buffer:
        return False
    g = conn.parser
    while getattr(g, "gi_yieldfrom", None) is not None:
        g = g.gi_yieldfrom
    return getattr(getattr(g, "gi_code", None), "co_name", "") == "at_eof"


class StreamWSProtocol(WebSocketsSansIOProtocol):  # type: ignore[misc]
    """uvicorn's ``websockets-sansio`` protocol that answers a stream's messages itself once
    the app hands them over (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sockets: StreamSocket | None = None
        self.sid = ""
        self.inbox: collections.deque[tuple[bytes | str, float]] = collections.deque()
        self.busy = False  # a message is being answered
        self.synced = False  # the frame layer knows the library's parser is at a frame boundary
        self.owed = 0  # bytes of the current frame still to hand to the library's parser
        self.buf = bytearray()  # the start of a frame this layer takes, incomplete
        self.held: tuple[bytes | str, str, float] | None = None  # an answer waiting for the client to read
        self.max_size = self.config.ws_max_size

    def connection_made(self, transport: Any) -> None:
        super().connection_made(raw_transport(transport))

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][WS_STEPS] = self.take_over

    def take_over(self, sockets: StreamSocket, sid: str) -> None:
        """Answer the messages of stream ``sid``'s WebSocket here from now on, those already
        queued for the app first."""
        self.sockets, self.sid = sockets, sid
        queue = self.queue
        rest = []
        while not queue.empty():
            msg = queue.get_nowait()
            if msg["type"] == "websocket.receive":
                data = msg.get("bytes")
                self.inbox.append((msg["text"] if data is None else data, time.perf_counter()))
            else:
                rest.append(msg)
        for msg in rest:
            queue.put_nowait(msg)
        self.queue = _Inbox(self, queue)  # type: ignore[assignment]
        self.synced = _at_boundary(self.conn)
        self.pump()

    # -- reading -------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.sockets is None:
            super().data_received(data)
            return
        if not self.synced:
            super().data_received(data)
            self.synced = _at_boundary(self.conn)
        else:
            self.read_frames(data)
        self.pump()

    def read_frames(self, data: bytes) -> None:
        """Take the complete binary frames of the bytes at hand as messages; hand every other
        frame to the library's parser."""
        buf = self.buf
        buf += data
        n = len(buf)
        at = 0
        conn = self.conn
        while at < n:
            owed = self.owed
            if owed:
                k = min(owed, n - at)
                self.owed = owed - k
                chunk = bytes(buf[at:at + k])
                at += k
                super().data_received(chunk)
                if conn.parser_exc is not None or self.transport.is_closing():
                    buf.clear()
                    return
                continue
            if n - at < 2:
                break
            b1 = buf[at + 1]
            length = b1 & 0x7F
            head = 2
            if length == 126:
                head = 4
                if n - at < head:
                    break
                length = int.from_bytes(buf[at + 2:at + 4], "big")
            elif length == 127:
                head = 10
                if n - at < head:
                    break
                length = int.from_bytes(buf[at + 2:at + 10], "big")
            if b1 & 0x80:
                head += 4
            if buf[at] == _BINARY_FIN and b1 & 0x80 and (self.max_size is None or length <= self.max_size) \
                    and conn.state is State.OPEN and conn.current_size is None and not conn.extensions \
                    and not self.close_sent:
                end = at + head + length
                if end > n:
                    break  # the rest of the frame is still on its way
                self.inbox.append((apply_mask(buf[at + head:end], buf[at + head - 4:at + head]),
                                   time.perf_counter()))
                at = end
            else:
                self.owed = head + length
        del buf[:at]

    # -- answering -----------------------------------------------------------------------------
    def pump(self) -> None:
        """Answer the next message, unless one is being answered; resume reading once every
        message read is answered, else pause it."""
        sockets = self.sockets
        assert sockets is not None
        inbox = self.inbox
        while not self.busy and inbox:
            data, t0 = inbox.popleft()
            self.busy = True
            if type(data) is bytes and sockets.fast:
                step = sockets.start_step(self.sid, data, t0)
                if step is not None:
                    step.future.add_done_callback(functools.partial(self.stepped, step, t0))
                    break
            msg = {"type": "websocket.receive", "bytes": data} if type(data) is bytes \
                else {"type": "websocket.receive", "text": data}
            task = self.loop.create_task(self.answer(msg, t0))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        if self.busy or inbox:
            if not self.read_paused:
                self.read_paused = True
                self.transport.pause_reading()
        elif self.read_paused and not self.transport.is_closing():
            self.read_paused = False
            self.transport.resume_reading()

    def stepped(self, step: FastStep, t0: float, future: asyncio.Future[Any]) -> None:
        """A step of the pool is done: release its stream and answer it."""
        sockets = self.sockets
        assert sockets is not None
        sockets.end_step(step)
        try:
            y = future.result()
        except RequestError as e:
            self.deliver(*sockets.refusal(step.seq, e), t0)
            return
        except BaseException as e:  # noqa: BLE001 - as uvicorn treats an app that failed
            self.crash(e)
            return
        self.deliver(sockets.step_answer(step, y), "200", t0)

    async def answer(self, msg: dict[str, Any], t0: float) -> None:
        """Answer a message by :meth:`StreamSocket.answer` (the app's own path) and write it."""
        sockets = self.sockets
        assert sockets is not None
        try:
            reply, status = await sockets.answer(self.sid, msg)
        except Exception as e:  # noqa: BLE001 - as uvicorn treats an app that failed
            self.crash(e)
            return
        data = reply.get("bytes")
        self.deliver(reply["text"] if data is None else data, status, t0)

    def crash(self, e: BaseException) -> None:
        """An answer failed: logged and the connection closed, as uvicorn ends a failed app."""
        self.logger.error("Exception in ASGI application\n", exc_info=e)
        self.inbox.clear()
        self.transport.close()

    def deliver(self, payload: bytes | str, status: str, t0: float) -> None:
        """Write an answer (counted in the metrics), then answer the next message. Nothing is
        written to a client that has gone or a connection closing (the app's ``send`` fails
        there, and the app's loop ends)."""
        if self.disconnected or self.close_sent or self.conn.state is not State.OPEN:
            self.inbox.clear()
            return
        if not self.writable.is_set():
            self.held = (payload, status, t0)
            return
        conn = self.conn
        if conn.extensions:  # the library's framing (compression)
            if isinstance(payload, bytes):
                conn.send_binary(payload)
            else:
                conn.send_text(payload.encode())
            self.transport.write(b"".join(conn.data_to_send()))
        elif isinstance(payload, bytes):
            self.transport.write(frame(_BINARY_FIN, payload))
        else:
            self.transport.write(frame(_TEXT_FIN, payload.encode()))
        sockets = self.sockets
        assert sockets is not None
        sockets.stats.record(t0, status)
        self.busy = False
        self.pump()

    def resume_writing(self) -> None:
        super().resume_writing()
        held = self.held
        if held is not None:
            self.held = None
            self.deliver(*held)

    def connection_lost(self, exc: Exception | None) -> None:
        self.inbox.clear()
        self.held = None
        super().connection_lost(exc)


__all__ = ["StreamWSProtocol", "frame"]
