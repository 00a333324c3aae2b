"""uvicorn's HTTP protocol with a deadline on each request's head.

uvicorn hands a request to the app only once its request line and headers are complete, and
closes a kept-alive connection only when it is idle between requests; a connection that sends a
byte now and then, or nothing at all, is held open for ever. :class:`HeadTimeoutProtocol` gives
each connection ``header_timeout_s`` seconds from connecting (for its first request) or from the
first byte of each later request until its head is complete; past that it is answered 408 with
a JSON error and closed. Once a request has reached the app, its body has the app's own deadline
(``body_timeout_s``, :func:`rnnkit.serve._app.read_body`); a connection upgraded to a WebSocket
is no longer watched.

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
        super().connection_made(transport)
        self._arm_head()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # bytes of a new request's head
            self._arm_head()
        super().data_received(data)
        if self.cycle is not cycle or self.transport.get_protocol() is not self:
            self._disarm_head()  # the head is complete (the request reached the app), or upgraded

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head()
        super().connection_lost(exc)


__all__ = ["DEFAULT_HEADER_TIMEOUT_S", "HeadTimeoutProtocol"]
