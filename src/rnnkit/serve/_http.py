"""uvicorn's HTTP protocol with a deadline on each request's head.

uvicorn hands a request to the app only once its request line and headers are complete, and
closes a kept-alive connection only when it is idle between requests; a connection that sends a
byte now and then, or nothing at all, is held open for ever. :class:`HeadTimeoutProtocol` gives
each connection ``header_timeout_s`` seconds from connecting (for its first request) or from the
first byte of each later request until its head is complete; past that it is answered 408 with
a JSON error and closed. Once a request has reached the app, its body has the app's own deadline
(``body_timeout_s``, :func:`rnnkit.serve._app.read_body`); a connection upgraded to a WebSocket
is no longer watched.

Closing with a request's body unread (an answer such as a 413 or 408 that says ``connection:
close``) is a half-close: the answer is sent, then the server's side of the connection is shut
for writing, and what the client goes on sending is read and discarded (at most
:data:`LINGER_BYTES`, for at most :data:`LINGER_S` seconds) until it closes too. A client that
sends its whole body before it reads the answer thus reads the answer; a plain close would have
made its operating system answer the unread bytes with a reset, and the client would see
"connection reset by peer" instead.

The deadline travels in the environment variable :data:`HEADER_TIMEOUT_ENV` (set by ``rnnkit
serve``), so the worker processes of ``--workers N``, which build their protocol objects from an
import path, read the same value.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from rnnkit.serve._limits import HEADER_TIMEOUT_ENV, ServeConfig

#: the deadline when :data:`HEADER_TIMEOUT_ENV` is not set
DEFAULT_HEADER_TIMEOUT_S = ServeConfig.header_timeout_s


#: the most bytes read and discarded after a half-close
LINGER_BYTES = 256 << 20

#: the longest a half-closed connection is kept waiting for the client's close
LINGER_S = 10.0


class _HalfClosingTransport:
    """The connection's transport as the protocol and uvicorn's request cycle see it: ``close``
    becomes a half-close while the protocol has a request body unread; an answer's head is held
    and written with the first part of its body, in one write (uvicorn writes them apart: two
    ``send`` calls, and on loopback two trips through the operating system's TCP stack, each
    about as costly as the rest of a small answer's work); everything else is the transport's
    own."""

    def __init__(self, transport: asyncio.Transport, protocol: HeadTimeoutProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False
        self._held: bytes | None = None  # the head of the answer being written
        self._headed: object = None  # the request cycle whose head was held last
        self.get_extra_info = transport.get_extra_info
        self.get_protocol = transport.get_protocol
        self.set_protocol = transport.set_protocol
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data``; the first write of an answer (its status line and headers, written once
        its request's cycle has started the answer) is held until the next write, which sends
        both. Anything else (a ``100 Continue``, a 408, a WebSocket's frames) is written at once."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
            return
        cycle = self._protocol.cycle
        if cycle is not None and cycle is not self._headed and cycle.response_started \
                and not cycle.response_complete and self._transport.get_protocol() is self._protocol:
            self._headed = cycle
            self._held = bytes(data)
            return
        self._transport.write(data)

    def flush(self) -> None:
        """Write a held head now (before a close, an end of stream)."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        self.flush()
        t = self._transport
        if self.lingering or t.is_closing():
            return
        if not self._protocol.body_unread() or not t.can_write_eof():
            t.close()
            return
        self.lingering = True
        self._protocol.start_linger()
        t.resume_reading()
        t.write_eof()  # after the buffered answer: the client reads it, then end of stream


def _answer_408(seconds: float) -> bytes:
    body = json.dumps({"error": {
        "code": "header_timeout",
        "message": f"the request's head (request line and headers) did not arrive within {seconds} s; "
                   f"send it at once, or raise --header-timeout-s",
        "expected": seconds}}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class HeadTimeoutProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP protocol (httptools when installed, else h11) with the head deadline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_seconds = float(os.environ.get(HEADER_TIMEOUT_ENV, DEFAULT_HEADER_TIMEOUT_S))
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_left = -1  # bytes still to discard after a half-close (-1: not lingering)
        self._linger_timer: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None

    def body_unread(self) -> bool:
        """Whether a request's body is still (partly) unread: its answer must not close the
        connection outright."""
        cycle = self.cycle
        return self._raw is not None and self._raw.get_protocol() is self and cycle is not None \
            and bool(cycle.more_body)

    def start_linger(self) -> None:
        """Discard what the client still sends until it closes, :data:`LINGER_BYTES` arrive, or
        :data:`LINGER_S` pass; then close."""
        self._disarm_head()
        self._linger_left = LINGER_BYTES
        self._linger_timer = self.loop.call_later(LINGER_S, self._close_raw)

    def _close_raw(self) -> None:
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        if self._raw is not None and not self._raw.is_closing():
            self._raw.close()

    def _arm_head(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self._head_seconds, self._head_expired)

    def _disarm_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or transport.is_closing() or transport.get_protocol() is not self:
            return  # gone, or a WebSocket now
        transport.write(_answer_408(self._head_seconds))
        transport.close()

    def connection_made(self, transport: Any) -> None:
        self._raw = transport
        super().connection_made(_HalfClosingTransport(transport, self))
        self._arm_head()

    def eof_received(self) -> bool | None:
        if self._linger_left >= 0:
            self._close_raw()  # the client has finished sending: the half-close is complete
            return None
        return super().eof_received()  # type: ignore[no-any-return]

    def data_received(self, data: bytes) -> None:
        if self._linger_left >= 0:  # half-closed: the rest of a refused body, discarded
            self._linger_left -= len(data)
            if self._linger_left < 0:
                self._close_raw()
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # bytes of a new request's head
            self._arm_head()
        super().data_received(data)
        if self.cycle is not cycle or self.transport.get_protocol() is not self:
            self._disarm_head()  # the head is complete (the request reached the app), or upgraded

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self._linger_left = -1
        super().connection_lost(exc)


__all__ = ["DEFAULT_HEADER_TIMEOUT_S", "LINGER_BYTES", "LINGER_S", "HeadTimeoutProtocol"]
