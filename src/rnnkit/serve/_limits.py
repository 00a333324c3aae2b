"""The server's settings: micro-batching, bounds on what one request may ask, streams, auth."""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, fields
from pathlib import Path

from rnnkit._errors import InvalidParameterError
from rnnkit._files import check_regular, open_regular
from rnnkit._numbers import check_float, check_int, show

#: the environment variable through which ``rnnkit serve`` hands ``header_timeout_s`` to its HTTP
#: protocol (:mod:`rnnkit.serve._http`), in its own process and in ``--workers`` processes
HEADER_TIMEOUT_ENV = "RNNKIT_SERVE_HEADER_TIMEOUT_S"


@dataclass(frozen=True)
class ServeConfig:
    """Settings of :func:`rnnkit.serve.app` (the ``rnnkit serve`` flags of the same names).

    - ``max_wait_ms``: how long the micro-batcher holds the first request of a batch waiting for
      others (0: compute whatever has arrived at once).
    - ``max_rows``: the most rows (sequences x timesteps) in one batched call; 1 turns batching off.
    - ``max_body_bytes``: the largest request body (413 beyond).
    - ``max_timesteps``: the most timesteps in one request (predict or step).
    - ``max_batch``: the most sequences in one predict request.
    - ``max_streams``: the most streams open at once (429 beyond).
    - ``max_queue_rows``: rows waiting for the worker beyond which requests get 429.
    - ``request_timeout_s``: a request still waiting for the kernels this long gets 503 and is
      never computed (a step can be sent again with the same sequence number).
    - ``stream_ttl_s``: a stream unused this long (no step, read or WebSocket opened) is deleted.
    - ``header_timeout_s``: a connection must deliver a request's whole head (request line and
      headers) within this many seconds of its first byte (of connecting, for its first
      request); else it gets 408 and is closed. Served by ``rnnkit serve`` (the HTTP protocol
      is where headers are read); :func:`rnnkit.serve.app` under another ASGI server leaves
      this to that server.
    - ``body_timeout_s``: a request's whole body must arrive within this many seconds of its
      head; else 408 and the connection is closed.
    - ``idle_timeout_s``: a kept-alive connection idle this long between requests is closed.
    - ``state_db``: the SQLite file the streams persist in (None: memory only, lost on exit).
    - ``synchronous``: ``"FULL"`` (a commit survives a power cut) or ``"NORMAL"`` (it survives a
      killed server process).
    - ``token``: the bearer token every request but ``/healthz`` must carry (None: no auth).
    - ``streams``: False serves predict only (several worker processes cannot share streams).
    - ``fast_path``: ``rnnkit serve``'s HTTP protocol answers a plain model's ``POST
      /v1/predict`` with a small JSON body itself, without the ASGI app around the route
      (:class:`rnnkit.serve._app.FastPredict`: the same answers, byte for byte); False sends
      every request through the app (for comparison).
    - ``ws_fast_path``: ``rnnkit serve``'s WebSocket protocol answers the messages of a stream's
      WebSocket itself once the app has accepted it and found the stream
      (:class:`rnnkit.serve._wsconn.StreamWSProtocol`: binary steps parsed from the frames and
      computed in the step pool, every message answered by the same functions, byte for byte);
      False leaves every message to the ASGI app (for comparison).
    """

    max_wait_ms: float = 2.0
    max_rows: int = 1024
    max_body_bytes: int = 8 << 20
    max_timesteps: int = 4096
    max_batch: int = 1024
    max_streams: int = 10_000
    max_queue_rows: int = 1 << 20
    request_timeout_s: float = 30.0
    stream_ttl_s: float = 3600.0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0
    state_db: str | None = None
    synchronous: str = "FULL"
    token: str | None = None
    streams: bool = True
    fast_path: bool = True
    ws_fast_path: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "int":
                object.__setattr__(self, f.name, check_int(v, f.name, "ServeConfig", lo=1))
            elif f.type == "float":
                lo_open = f.name != "max_wait_ms"   # a wait of 0 computes at once; no other 0 means anything
                object.__setattr__(self, f.name,
                                   check_float(v, f.name, "ServeConfig", lo=0.0, lo_open=lo_open))
        if self.state_db is not None and not isinstance(self.state_db, (str, os.PathLike)):
            raise InvalidParameterError(f"ServeConfig: state_db must be None or a path (str), got "
                                        f"{show(self.state_db)} ({type(self.state_db).__name__})")
        if not isinstance(self.synchronous, str) or self.synchronous.upper() not in ("FULL", "NORMAL"):
            raise InvalidParameterError(f"ServeConfig: synchronous must be 'FULL' or 'NORMAL', "
                                        f"got {show(self.synchronous)}")
        for name in ("streams", "fast_path", "ws_fast_path"):
            flag = getattr(self, name)
            if not isinstance(flag, bool):
                raise InvalidParameterError(f"ServeConfig: {name} must be True or False, got "
                                            f"{type(flag).__name__} {show(flag)}")
        if self.token is not None and (not isinstance(self.token, str) or len(self.token) < 16):
            raise InvalidParameterError("ServeConfig: token must be a string of at least 16 characters")


_TOKEN_FILE_BYTES = 64 << 10


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The bearer token in ``path`` (its first line, surrounding whitespace removed; at least 16
    characters; only the file's first 64 KiB are read). A path that is not a regular file is
    refused before it is opened."""
    p = Path(check_regular(path, "a token file"))  # a FIFO or device: refused, never opened
    with open_regular(p, "a token file") as fh:
        head = fh.read(_TOKEN_FILE_BYTES)  # the first line is all that is used
    try:
        text = head.decode("utf-8", errors="strict").strip().splitlines()
    except UnicodeDecodeError as e:
        raise InvalidParameterError(f"--token-file {p}: expected UTF-8 text, found {e.reason} at byte "
                                    f"{e.start}") from None
    token = text[0].strip() if text else ""
    if len(token) < 16:
        raise InvalidParameterError(f"--token-file {p}: the token must be at least 16 characters, "
                                    f"found {len(token)}")
    return token


def token_ok(header: bytes | None, token: str) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <token>`` (compared in constant
    time)."""
    if header is None:
        return False
    want = b"Bearer " + token.encode()
    return hmac.compare_digest(header, want)


__all__ = ["HEADER_TIMEOUT_ENV", "ServeConfig", "read_token_file", "token_ok"]
