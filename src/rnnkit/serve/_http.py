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

A predict the app offers to answer here (its :class:`~rnnkit.serve._app.FastPredict`: ``POST
/v1/predict`` of a plain model, a JSON body of bounded ``Content-Length``, the token when one is
needed) is answered by the protocol itself: its head makes a :class:`_FastCycle` in place of
uvicorn's request cycle, its body is read as it arrives, checked and queued in the micro-batcher
when complete, and the answer is written from the batcher's result, in one write, through the
same transport (the same half-close, the same order behind earlier requests of the connection,
the same wait while the client does not read). No ASGI scope, messages, task or routing; the
reading, checks, answers, errors and metrics are the route's own functions, so the bytes on the
wire are those the app writes. The head's and body's deadlines hold as on the app's path. With
httptools missing (uvicorn's h11 protocol), an access log, ``limit_concurrency`` or a
``root_path``, every request goes to the app.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from typing import Any

from starlette.responses import Response
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from rnnkit.serve._app import FastPredict, body_timeout, client_disconnected
from rnnkit.serve._errors import RequestError
from rnnkit.serve._limits import HEADER_TIMEOUT_ENV, ServeConfig

#: uvicorn's status lines (httptools' protocol), by status
STATUS_LINE: dict[int, bytes] = {}
try:
    from uvicorn.protocols.http import httptools_impl
except ImportError:  # no httptools: uvicorn's h11 protocol, every request through the app
    _HTTPTOOLS = False
else:
    _HTTPTOOLS = AutoHTTPProtocol is httptools_impl.HttpToolsProtocol
    STATUS_LINE = httptools_impl.STATUS_LINE

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


def raw_transport(transport: Any) -> Any:
    """The connection's own transport under a :class:`_HalfClosingTransport` (a WebSocket's
    protocol, which uvicorn hands the HTTP protocol's transport when it upgrades, writes its
    frames there directly: the wrapper passes them on unchanged); any other transport as it is."""
    return transport._transport if isinstance(transport, _HalfClosingTransport) else transport


def _answer_408(seconds: float) -> bytes:
    body = json.dumps({"error": {
        "code": "header_timeout",
        "message": f"the request's head (request line and headers) did not arrive within {seconds} s; "
                   f"send it at once, or raise --header-timeout-s",
        "expected": seconds}}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


#: uvicorn's answer to an app that failed (its 500), written the same way on the fast path
_CRASHED = Response(b"Internal Server Error", status_code=500)
_CRASHED.raw_headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"21"),
                        (b"connection", b"close")]


def fast_predict_of(app: Any) -> FastPredict | None:
    """The :class:`~rnnkit.serve._app.FastPredict` of uvicorn's loaded app: the ``fast_predict``
    of the app rnnkit built, under uvicorn's proxy-headers middleware at most (which changes
    nothing a predict reads); None for any other app or wrapper."""
    while isinstance(app, ProxyHeadersMiddleware):
        app = app.app
    fast = getattr(app, "fast_predict", None)
    return fast if isinstance(fast, FastPredict) else None


def _closes(value: bytes) -> bool:
    """Whether a ``connection`` header's value says ``close`` (as uvicorn reads it)."""
    return b"close" in [t.lower().strip() for t in value.split(b",")]


def _header_lines(headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """``headers`` as uvicorn writes them (names in lower case, one ``name: value`` line each),
    and whether one of them closes the connection."""
    lines = [b"%s: %s\r\n" % (name.lower(), value) for name, value in headers]
    return b"".join(lines), any(name.lower() == b"connection" and _closes(value) for name, value in headers)


#: the server's default headers last written, as one tuple (replaced whole, so a reader never
#: mixes two servers' lists): (the list uvicorn holds, its lines, whether they close)
_defaults: list[tuple[Any, bytes, bool]] = [(None, b"", False)]


class _NoEvent:
    """A fast request's ``message_event``: uvicorn's protocol sets it on a disconnect; nothing
    waits on it."""

    @staticmethod
    def set() -> None:
        return None


class _FastCycle:
    """A request the protocol answers itself, with what uvicorn's protocol (and
    :class:`_HalfClosingTransport`) read of a request cycle: ``more_body`` (its body is still
    arriving), ``response_started`` / ``response_complete``, ``keep_alive``, ``disconnected``,
    ``message_event``; its headers and media type (:meth:`FastPredict.takes`). ``t0``: when it
    reached its turn (``time.perf_counter``; -1 while it waits behind an earlier request of the
    connection); ``timer``: its body's deadline."""

    __slots__ = ("body", "ctype", "disconnected", "headers", "keep_alive", "more_body", "response_complete",
                 "response_started", "t0", "timer")

    message_event = _NoEvent()

    def __init__(self, headers: dict[str, str], ctype: str, keep_alive: bool) -> None:
        self.headers = headers
        self.ctype = ctype
        self.keep_alive = keep_alive
        self.body = b""
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.disconnected = False
        self.t0 = -1.0
        self.timer: asyncio.TimerHandle | None = None


class HeadTimeoutProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP protocol (httptools when installed, else h11) with the head deadline, and
    the fast path of a predict (:class:`_FastCycle`)."""

    cycle: Any  # uvicorn's request cycle of the request being read, or a _FastCycle

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_seconds = float(os.environ.get(HEADER_TIMEOUT_ENV, DEFAULT_HEADER_TIMEOUT_S))
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_left = -1  # bytes still to discard after a half-close (-1: not lingering)
        self._linger_timer: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None
        self._fast: FastPredict | None = None
        if _HTTPTOOLS and not self.access_log \
                and self.limit_concurrency is None and not self.root_path:
            self._fast = fast_predict_of(self.app)
        self._feeding = False  # in data_received: the parser's callbacks run
        self._held: _FastCycle | None = None  # a fast answer waiting for the client to read
        self._held_answer: Response | None = None

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
        waiting = cycle is None or cycle.response_complete  # these are bytes of a new request's head
        self._feeding = True
        try:
            super().data_received(data)
        finally:
            self._feeding = False
        now = self.cycle
        if now is not cycle or self.transport.get_protocol() is not self:
            self._disarm_head()  # the head is complete (the request reached the app), or upgraded
        elif waiting:
            self._arm_head()  # the head is not complete: its deadline runs from these bytes
        if type(now) is _FastCycle and now.more_body and now.t0 >= 0 and now.timer is None \
                and not now.response_complete:
            self._arm_body(now)  # its turn has come, its body is still arriving

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self._linger_left = -1
        cycle = self.cycle
        super().connection_lost(exc)
        if type(cycle) is _FastCycle:
            if cycle.timer is not None:
                cycle.timer.cancel()
                cycle.timer = None
            if cycle.more_body and cycle.t0 >= 0 and not cycle.response_complete:
                self._fast_answer(cycle, self._fast_error(client_disconnected(len(cycle.body))))

    # -- the fast path -------------------------------------------------------------------------
    def on_headers_complete(self) -> None:
        fast = self._fast
        if fast is None or self.url != b"/v1/predict" or self.parser.get_method() != b"POST" \
                or self.parser.get_http_version() != "1.1" or self.parser.should_upgrade():
            super().on_headers_complete()
            return
        taken = fast.takes(self.headers)
        if taken is None:
            super().on_headers_complete()
            return
        cycle = _FastCycle(*taken, self.parser.should_keep_alive())
        existing = self.cycle
        self.cycle = cycle
        if existing is None or existing.response_complete:
            self._fast_begin(cycle)
        else:  # behind an earlier request of this connection, as uvicorn queues one
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if type(cycle) is _FastCycle:
            self._fast_begin(cycle)
            return
        super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if type(cycle) is not _FastCycle:
            super().on_body(body)
        elif not cycle.response_complete:
            cycle.body += body  # at most FastPredict.max_body bytes: the head said so

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if type(cycle) is not _FastCycle:
            super().on_message_complete()
            return
        if cycle.response_complete:
            return
        cycle.more_body = False
        if cycle.timer is not None:
            cycle.timer.cancel()
            cycle.timer = None
        if cycle.t0 >= 0:
            self._fast_submit(cycle)

    def resume_writing(self) -> None:
        super().resume_writing()
        cycle, answer = self._held, self._held_answer
        if cycle is not None and answer is not None:
            self._held = self._held_answer = None
            self._fast_write(cycle, answer)

    def _fast_begin(self, cycle: _FastCycle) -> None:
        """The request's turn (its head complete, every earlier request answered)."""
        cycle.t0 = time.perf_counter()
        if not cycle.more_body:
            self._fast_submit(cycle)
        elif not self._feeding:  # (else data_received arms it once the bytes at hand are read)
            self._arm_body(cycle)

    def _arm_body(self, cycle: _FastCycle) -> None:
        assert self._fast is not None
        cycle.timer = self.loop.call_later(self._fast.body_timeout_s, self._fast_body_expired, cycle)

    def _fast_body_expired(self, cycle: _FastCycle) -> None:
        cycle.timer = None
        if cycle.more_body and not cycle.response_complete and not cycle.disconnected:
            assert self._fast is not None
            self._fast_answer(cycle, self._fast_error(body_timeout(self._fast.body_timeout_s,
                                                                   len(cycle.body))))

    def _fast_error(self, e: RequestError) -> Response:
        assert self._fast is not None
        answer: Response = self._fast.error(e)
        return answer

    def _fast_submit(self, cycle: _FastCycle) -> None:
        """Read, check and queue the complete request; answer a refusal at once."""
        assert self._fast is not None
        try:
            future = self._fast.submit(cycle.body, cycle.ctype)
        except RequestError as e:
            self._fast_answer(cycle, self._fast_error(e))
            return
        except Exception as e:  # noqa: BLE001 - the app's 500, as uvicorn answers a failed app
            self._fast_crash(cycle, e)
            return
        future.add_done_callback(functools.partial(self._fast_done, cycle))

    def _fast_done(self, cycle: _FastCycle, future: asyncio.Future[Any]) -> None:
        assert self._fast is not None
        try:
            answer = self._fast.answer(future.result(), cycle.headers)
        except RequestError as e:
            answer = self._fast_error(e)
        except (Exception, asyncio.CancelledError) as e:  # noqa: BLE001 - as uvicorn answers a failed app
            self._fast_crash(cycle, e)
            return
        self._fast_answer(cycle, answer)

    def _fast_crash(self, cycle: _FastCycle, e: BaseException) -> None:
        self.logger.error("Exception in ASGI application\n", exc_info=e)
        self._fast_write(cycle, _CRASHED)

    def _fast_answer(self, cycle: _FastCycle, answer: Response) -> None:
        """Count the answer in the route's metrics and write it."""
        assert self._fast is not None
        self._fast.count(answer.status_code, cycle.t0)
        self._fast_write(cycle, answer)

    def _fast_write(self, cycle: _FastCycle, answer: Response) -> None:
        """Write ``answer`` as uvicorn writes an app's answer (the server's default headers first;
        ``connection: close`` added when the connection is not kept alive, and then closed), in
        one write; held while the transport's buffer is full, until the client reads."""
        if cycle.disconnected:
            return
        if self.flow.write_paused:
            self._held, self._held_answer = cycle, answer
            return
        defaults = self.server_state.default_headers
        cached = _defaults[0]
        if cached[0] is not defaults:  # a new list (uvicorn makes one a second, for the date)
            cached = _defaults[0] = (defaults, *_header_lines(defaults))
        content: list[Any] = [STATUS_LINE[answer.status_code], cached[1]]
        closing = cached[2]
        if closing:
            cycle.keep_alive = False
        for name, value in answer.raw_headers:
            name = name.lower()
            if name == b"connection" and _closes(value):
                cycle.keep_alive = False
                closing = True
            content += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive and not closing:
            content.append(b"connection: close\r\n")
        content += (b"\r\n", answer.body)
        self.transport.write(b"".join(content))
        cycle.response_started = cycle.response_complete = True
        if cycle.timer is not None:
            cycle.timer.cancel()
            cycle.timer = None
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()


__all__ = ["DEFAULT_HEADER_TIMEOUT_S", "LINGER_BYTES", "LINGER_S", "HeadTimeoutProtocol", "raw_transport"]
