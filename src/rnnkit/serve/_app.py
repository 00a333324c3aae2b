"""The ASGI app: the routes, the WebSocket of a stream, auth, error answers.

Routes::

    GET    /healthz                      {"status": "ok"} (no auth)
    GET    /v1/model                     the model's contract (shapes, dtype, sha256, version)
    GET    /metrics                      Prometheus text format
    POST   /v1/predict                   {"x": (B, T, ...), "lengths"?: (B,), "mask"?: (B, T)}
                                         or .npy bytes (?lengths=3,5,...) -> {"outputs": ...};
                                         a forecaster: {"x": (B, rows, features) raw data rows,
                                         "target"?: (B,)} or float64 .npy bytes (?target=...)
                                         -> {"outputs": (B, 1) forecasts in data units};
                                         a DeepAR model: series in long format -> quantiles
                                         (rnnkit.serve._deepar)
    POST   /v1/streams                   -> {"id", "seq": 0}
    GET    /v1/streams/{id}              -> {"id", "seq", "state": {...}}
    DELETE /v1/streams/{id}
    POST   /v1/streams/{id}/step         {"seq": n, "x": (T, features)} -> {"seq", "outputs", "replayed"}
    WS     /v1/streams/{id}/ws           one step per message (JSON as above, or binary: 8-byte
                                         little-endian seq, then the T x features values in the
                                         model's dtype; answered with the seq, one byte 1/0 for
                                         replayed, then the outputs' bytes): rnnkit.serve._ws

Every refusal is a 4xx with ``{"error": {"code", "message", "expected"?, "got"?}}``.

Each route is an :class:`Endpoint` (a plain ASGI app reading the scope through :class:`Incoming`);
Starlette routes to them, except ``POST /v1/predict`` and a stream's WebSocket, which
:class:`StreamRouter` hands over directly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rnnkit.io import DeepAR
from rnnkit.serve._codec import (
    NPY_TYPES,
    as_input,
    as_lengths,
    as_levels,
    as_mask,
    as_rows,
    as_seq,
    dump_json,
    field_of,
    parse_json,
    parse_npy,
    to_json,
    to_npy,
)
from rnnkit.serve._deepar import answer as deepar_answer
from rnnkit.serve._errors import RequestError, bad_request, unprocessable
from rnnkit.serve._limits import ServeConfig, token_ok
from rnnkit.serve._servable import Servable
from rnnkit.serve._server import Server
from rnnkit.serve._ws import StreamSocket
from rnnkit.timeseries import DataError, ForecastSpec

Handler = Callable[["Incoming"], Awaitable[Response]]


_JSON_TYPE = (b"content-type", b"application/json")


class JSONAnswer(JSONResponse):
    """A JSON answer, written by :func:`~rnnkit.serve._codec.dump_json`: Starlette's
    ``JSONResponse`` (its headers, byte for byte), without its per-answer work that no answer of
    this server needs (the headers derived from the media type, a background task, the
    path-send extension): the status line and headers and the body, in two ASGI messages."""

    def __init__(self, content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.background = None
        self.body = dump_json(content)
        if headers is None:
            self.raw_headers = [(b"content-length", str(len(self.body)).encode()), _JSON_TYPE]
        else:
            self.init_headers(headers)

    def render(self, content: Any) -> bytes:
        return dump_json(content)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        prefix = "websocket." if scope["type"] == "websocket" else ""
        await send({"type": prefix + "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        await send({"type": prefix + "http.response.body", "body": self.body})


def _error(e: RequestError) -> JSONAnswer:
    return JSONAnswer(e.body(), status_code=e.status, headers={"connection": "close"} if e.close else None)


#: the most bytes of a refused (too large) body read and discarded before the 413 is sent, as a
#: multiple of the body limit (at least 64 MiB): a client that sends its whole body before reading
#: the answer (Python's ``urllib``, most HTTP libraries) then reads the 413; a longer body gets the
#: 413 and the connection closed, which such a client may see as a reset
DRAIN_FACTOR = 4
DRAIN_MIN_BYTES = 64 << 20


def header_dict(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """A request's headers as a route reads them: lower-case names (as the HTTP server gives
    them), the first of a repeated header."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(raw)}


def media_type(headers: dict[str, str]) -> str:
    """The media type of ``Content-Type`` in ``headers`` (:func:`header_dict`; lower case, without
    parameters; JSON when absent)."""
    return headers.get("content-type", "application/json").split(";")[0].strip().lower()


#: the media types a predict reads as JSON
JSON_TYPES = ("application/json", "text/plain", "")


class Incoming:
    """What a route reads of one HTTP request: its headers (lower-case names; the first of a
    repeated header), query parameters, path parameters and body (:meth:`body`), read straight
    from the ASGI scope: no framework object per request."""

    __slots__ = ("_query", "headers", "path_params", "receive", "scope")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self.receive = receive
        self.headers = header_dict(scope["headers"])
        self.path_params: dict[str, Any] = scope.get("path_params", {})
        self._query: QueryParams | None = None

    @property
    def query_params(self) -> QueryParams:
        """The query string's parameters."""
        if self._query is None:
            self._query = QueryParams(self.scope.get("query_string", b""))
        return self._query

    def content_type(self) -> str:
        """The media type of ``Content-Type``: :func:`media_type`."""
        return media_type(self.headers)

    async def body(self, limit: int, timeout_s: float) -> bytes:
        """The body: :func:`read_body`."""
        return await read_body(self.receive, self.headers, limit, timeout_s)


class _Deadline:
    """Cancels the running task at ``timeout_s`` seconds from now unless :meth:`disarm` ed first
    (one timer for a whole body, instead of a task per chunk)."""

    def __init__(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.fired = False
        self.handle = loop.call_at(loop.time() + timeout_s, self._fire)

    def _fire(self) -> None:
        self.fired = True
        if self.task is not None:
            self.task.cancel()

    def disarm(self) -> None:
        self.handle.cancel()

    def absorb(self) -> bool:
        """After a ``CancelledError``: True when this deadline caused it (the cancellation is
        then withdrawn), False when it came from elsewhere (to be re-raised)."""
        if not self.fired:
            return False
        uncancel = getattr(self.task, "uncancel", None)  # Python >= 3.11 counts cancellations
        if uncancel is not None:
            uncancel()
        return True


def client_disconnected(total: int) -> RequestError:
    """The refusal of a request whose client closed the connection after ``total`` bytes of its
    body (answered to nobody; counted in the metrics)."""
    return bad_request("client_disconnected", "the client closed the connection during the body",
                       got=total, close=True)


def body_timeout(timeout_s: float, total: int) -> RequestError:
    """The 408 of a body not complete ``timeout_s`` seconds after its head (``total`` bytes came)."""
    return RequestError(408, "body_timeout", f"the body did not arrive within {timeout_s} s ({total} bytes "
                                             f"came); send it at once, or raise --body-timeout-s",
                        expected=timeout_s, got=total, close=True)


async def read_body(receive: Receive, headers: dict[str, str], limit: int, timeout_s: float = 30.0) -> bytes:
    """The request body (from the ASGI ``receive``; ``headers`` as :class:`Incoming` holds
    them), at most ``limit`` bytes, arriving within ``timeout_s`` seconds.

    Too large (by its ``Content-Length`` or as it arrives): 413. The rest of the body is read and
    discarded first (up to ``max(DRAIN_FACTOR * limit, DRAIN_MIN_BYTES)`` bytes, within the same
    time), so that a client still sending it reads the answer instead of a reset; a client that
    asked ``Expect: 100-continue`` has sent nothing yet and is answered at once. Too slow: 408.
    When the body was not read to its end, the answer closes the connection."""
    declared = headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise bad_request("bad_header", f"Content-Length {declared[:40]!r} is not a number", close=True)
    too_large: RequestError | None = None
    if declared is not None and int(declared) > limit:
        too_large = RequestError(413, "body_too_large", f"the body has {declared} bytes; at most {limit}",
                                 expected=limit, got=int(declared))
        if headers.get("expect", "").lower() == "100-continue":
            too_large.close = True
            raise too_large
    parts: list[bytes] = []
    total = 0
    cap = max(DRAIN_FACTOR * limit, DRAIN_MIN_BYTES)
    deadline = _Deadline(timeout_s)
    try:
        while True:
            msg: Message = await receive()
            if msg["type"] != "http.request":  # http.disconnect: nobody is left to answer
                raise client_disconnected(total)
            chunk = msg.get("body", b"")
            total += len(chunk)
            if too_large is None and total > limit:
                too_large = RequestError(413, "body_too_large", f"the body exceeds {limit} bytes",
                                         expected=limit)
                parts.clear()
            if too_large is None and chunk:
                parts.append(chunk)
            elif too_large is not None and total > cap:
                too_large.close = True  # drained as far as allowed: answer and close
                break
            if not msg.get("more_body", False):
                break
    except asyncio.CancelledError:
        if not deadline.absorb():
            raise
        if too_large is not None:
            too_large.close = True
            raise too_large from None
        raise body_timeout(timeout_s, total) from None
    finally:
        deadline.disarm()
    if too_large is not None:
        raise too_large
    return parts[0] if len(parts) == 1 else b"".join(parts)


class Endpoint:
    """One route as a plain ASGI app: ``fn(Incoming) -> Response``, refusals answered as JSON
    errors, counted and timed under ``route`` in the server's metrics. Starlette routes to it;
    :class:`StreamRouter` hands ``POST /v1/predict`` to it directly."""

    def __init__(self, route: str, fn: Handler, server: Server) -> None:
        self.route, self.fn, self.metrics = route, fn, server.metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = time.perf_counter()
        try:
            resp = await self.fn(Incoming(scope, receive))
        except RequestError as e:
            resp = _error(e)
        self.count(resp.status_code, t0)
        await resp(scope, receive, send)

    def count(self, status: int, t0: float) -> None:
        """Count an answer of ``status`` to a request that reached the route at ``t0``
        (``time.perf_counter``)."""
        self.metrics.inc("rnnkit_serve_requests_total", route=self.route, status=str(status))
        self.metrics.observe("rnnkit_serve_request_duration_seconds", time.perf_counter() - t0,
                             route=self.route)


#: the largest body :class:`FastPredict` takes (uvicorn's read buffer: a larger body pauses the
#: connection's reading until the app asks for it, which the route's reader does)
FAST_BODY_BYTES = 64 << 10


class FastPredict:
    """``POST /v1/predict`` of a plain model (no forecaster, no DeepAR) with a JSON body of at most
    ``min(max_body_bytes, FAST_BODY_BYTES)`` bytes, declared by ``Content-Length``, as ``rnnkit
    serve``'s HTTP protocol answers it itself (:mod:`rnnkit.serve._http`): no ASGI cycle, no
    task, no routing. It reads, checks, queues, answers, refuses and counts through the route's
    own functions (:meth:`Api.submit_predict`, :meth:`Api.predict_answer`, the route's
    :class:`Endpoint` for the metrics, :func:`client_disconnected`, :func:`body_timeout`), so
    its answers are the route's, byte for byte. Every other request (a chunked body, ``Expect``,
    another media type, a missing or wrong token, a larger body) goes to the app."""

    def __init__(self, api: Api, endpoint: Endpoint, token: str | None) -> None:
        self.api, self.endpoint, self.token = api, endpoint, token
        self.max_body = min(api.cfg.max_body_bytes, FAST_BODY_BYTES)
        self.body_timeout_s = api.cfg.body_timeout_s
        self.count = endpoint.count
        self.error = _error

    def takes(self, raw: list[tuple[bytes, bytes]]) -> tuple[dict[str, str], str] | None:
        """The headers (:func:`header_dict`) and media type (:func:`media_type`) of a predict's
        head ``raw`` (lower-case names) that this path answers; None when the app must."""
        headers = header_dict(raw)
        n = headers.get("content-length")
        if n is None or not n.isdigit() or int(n) > self.max_body or "transfer-encoding" in headers \
                or "expect" in headers:
            return None
        ctype = media_type(headers)
        if ctype not in JSON_TYPES:
            return None
        if self.token is not None:
            auth = headers.get("authorization")
            if not token_ok(None if auth is None else auth.encode("latin-1"), self.token):
                return None  # the app's 401
        return headers, ctype

    def submit(self, body: bytes, ctype: str) -> asyncio.Future[list[np.ndarray]]:
        """Read, check and queue the request, its body of media type ``ctype`` (a
        :class:`RequestError` when it is refused)."""
        return self.api.submit_predict(body, ctype, None)

    def answer(self, outs: list[np.ndarray], headers: dict[str, str]) -> Response:
        """The answer to the outputs (a :class:`RequestError` when they cannot be sent)."""
        return self.api.predict_answer(outs, headers)


class AuthMiddleware:
    """Refuses (401; a WebSocket is closed with code 1008) every request but ``/healthz`` without
    ``Authorization: Bearer <token>``. ``fast_predict``: the app's :class:`FastPredict` (its
    token checked the same way), for the HTTP protocol."""

    fast_predict: FastPredict | None = None

    def __init__(self, app: ASGIApp, token: str, server: Server) -> None:
        self.app, self.token, self.server = app, token, server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path") != "/healthz":
            header = next((v for k, v in scope.get("headers", []) if k == b"authorization"), None)
            if not token_ok(header, self.token):
                self.server.metrics.inc("rnnkit_serve_requests_total", route="auth", status="401")
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                err = RequestError(401, "unauthorized", "this server needs 'Authorization: Bearer <token>'")
                resp = JSONAnswer(err.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


class StreamRouter:
    """Hands the WebSocket of a stream (``/v1/streams/{id}/ws``) to ``sockets`` and ``POST
    /v1/predict`` to ``predict`` (the same :class:`Endpoint` Starlette routes to) directly, and
    everything else (the other routes, a predict with another method, lifespan) to ``app`` (a
    Starlette app, whose ``state`` it shares). The hot paths thus skip Starlette's middleware
    and route matching, which cost a request more than its parsing does. ``fast_predict``: the
    app's :class:`FastPredict` (None when turned off, or for a forecaster or DeepAR model), for
    the HTTP protocol."""

    fast_predict: FastPredict | None = None

    def __init__(self, app: Starlette, sockets: StreamSocket, predict: Endpoint) -> None:
        self.app, self.sockets, self.predict = app, sockets, predict
        self.state = app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" and scope["path"] == "/v1/predict" and scope["method"] == "POST":
            await self.predict(scope, receive, send)
            return
        if kind == "websocket" and StreamSocket.stream_id(scope["path"]) is not None:
            await self.sockets(scope, receive, send)  # type: ignore[arg-type]
            return
        await self.app(scope, receive, send)


class Api:
    """The HTTP face of a :class:`Server` (its stream WebSockets: :class:`StreamSocket`)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.sv = server.sv
        self.cfg = server.cfg

    # -- plain routes ------------------------------------------------------------------------
    async def healthz(self, request: Incoming) -> Response:
        return JSONAnswer({"status": "ok"})

    async def model(self, request: Incoming) -> Response:
        return JSONAnswer(self.sv.describe())

    async def metrics(self, request: Incoming) -> Response:
        return PlainTextResponse(self.server.metrics.render(), media_type="text/plain; version=0.0.4")

    async def predict(self, request: Incoming) -> Response:
        body = await request.body(self.cfg.max_body_bytes, self.cfg.body_timeout_s)
        ctype = request.content_type()
        if self.sv.forecast is not None:
            return await self.forecast(request, body, ctype, self.sv.forecast)
        if self.sv.deepar is not None:
            return await self.deepar(body, ctype, self.sv.deepar)
        outs = await self.submit_predict(body, ctype, request)
        return self.predict_answer(outs, request.headers)

    def submit_predict(self, body: bytes, ctype: str,
                       request: Incoming | None) -> asyncio.Future[list[np.ndarray]]:
        """Read and check a plain model's predict request (``body`` of media type ``ctype``; the
        query parameters of ``request``, read for a ``.npy`` body only, which needs one) and queue
        it in the micro-batcher; the future gets the outputs."""
        lengths_raw: Any = None
        mask_raw: Any = None
        if ctype in NPY_TYPES:
            assert request is not None, "a .npy body reads its lengths from the query"
            x = as_input(parse_npy(body), self.sv, self.cfg, "x", stream=False)
            lengths_raw = request.query_params.get("lengths")
        elif ctype in JSON_TYPES:
            doc = parse_json(body)
            x = as_input(field_of(doc, "x"), self.sv, self.cfg, "x", stream=False)
            lengths_raw, mask_raw = doc.get("lengths"), doc.get("mask")
        else:
            raise RequestError(415, "bad_content_type", f"Content-Type {ctype[:60]!r} is not served",
                               expected=["application/json", *NPY_TYPES], got=ctype[:60])
        if lengths_raw is not None and mask_raw is not None:
            raise RequestError(422, "lengths_and_mask", "give lengths or mask, not both")
        B, T = x.shape[0], x.shape[1]
        lengths = None if lengths_raw is None else as_lengths(lengths_raw, B, T, self.sv)
        mask = None if mask_raw is None else as_mask(mask_raw, B, T, self.sv)
        return self.server.submit_predict(x, lengths, mask)

    def predict_answer(self, outs: list[np.ndarray], headers: dict[str, str]) -> Response:
        """The answer of a plain model's predict: its outputs as JSON, or as ``.npy`` bytes when
        ``Accept`` (in ``headers``, :func:`header_dict`) asks for them."""
        if "application/x-npy" in headers.get("accept", ""):
            if len(outs) != 1:
                raise RequestError(406, "npy_one_output", f"the model has {len(outs)} outputs; .npy answers "
                                                          f"hold one, ask for JSON")
            return Response(to_npy(outs[0]), media_type="application/x-npy")
        return JSONAnswer({"outputs": to_json(outs), "n_outputs": len(outs)})

    async def forecast(self, request: Incoming, body: bytes, ctype: str, spec: ForecastSpec) -> Response:
        """``/v1/predict`` of a forecaster: windows of raw data rows -> forecasts in data units,
        the model's stored preprocessing applied by :class:`ForecastSpec` (as ``rnnkit
        predict`` applies it)."""
        extra: list[str]
        if ctype in NPY_TYPES:
            rows = as_rows(parse_npy(body), spec, self.cfg, "x")
            target_raw: Any = request.query_params.get("target")
            extra = [k for k in ("lengths", "mask") if k in request.query_params]
        elif ctype in JSON_TYPES:
            doc = parse_json(body)
            rows = as_rows(field_of(doc, "x"), spec, self.cfg, "x")
            target_raw = doc.get("target")
            extra = [k for k in ("lengths", "mask") if doc.get(k) is not None]
        else:
            raise RequestError(415, "bad_content_type", f"Content-Type {ctype[:60]!r} is not served",
                               expected=["application/json", *NPY_TYPES], got=ctype[:60])
        if extra:
            raise unprocessable("lengths_unsupported", f"a forecaster reads whole windows of "
                                                       f"{spec.rows_needed} data rows; drop {extra[0]}")
        target = None if target_raw is None else as_levels(target_raw, rows.shape[0], "target")
        try:
            spec.last_levels(rows, target)            # a needed target is checked before any work
            x = spec.window_inputs(rows)
        except DataError as e:
            raise unprocessable("bad_rows", str(e)) from None
        outs = await self.server.predict(x, None, None)
        try:
            y = spec.window_levels(outs[0], rows, target)[:, None]
        except DataError as e:
            raise unprocessable("non_finite_output", str(e)) from None
        if "application/x-npy" in request.headers.get("accept", ""):
            return Response(to_npy(y), media_type="application/x-npy")
        return JSONAnswer({"outputs": to_json([y]), "n_outputs": 1})

    async def deepar(self, body: bytes, ctype: str, model: DeepAR) -> Response:
        """``/v1/predict`` of a DeepAR model: series in long format -> quantiles of sampled paths,
        computed on the kernels' thread (:mod:`rnnkit.serve._deepar`)."""
        if ctype not in JSON_TYPES:
            raise RequestError(415, "bad_content_type", f"Content-Type {ctype[:60]!r} is not served: a "
                                                        f"DeepAR model reads series as JSON",
                               expected=["application/json"], got=ctype[:60])
        doc = parse_json(body)
        loop = asyncio.get_running_loop()
        return JSONAnswer(await loop.run_in_executor(self.server.executor, deepar_answer, model, doc))

    async def create(self, request: Incoming) -> Response:
        s = await self.server.create()
        return JSONAnswer({"id": s.id, "seq": s.seq}, status_code=201)

    async def read(self, request: Incoming) -> Response:
        return JSONAnswer(self.server.state_doc(self.server.get(request.path_params["sid"])))

    async def delete(self, request: Incoming) -> Response:
        await self.server.delete(request.path_params["sid"])
        return JSONAnswer({"deleted": request.path_params["sid"]})

    async def step(self, request: Incoming) -> Response:
        sid = request.path_params["sid"]
        self.server.get(sid)
        doc = parse_json(await request.body(self.cfg.max_body_bytes, self.cfg.body_timeout_s))
        seq = as_seq(field_of(doc, "seq"))
        x = as_input(field_of(doc, "x"), self.sv, self.cfg, "x", stream=True)
        y, replayed = await self.server.step(sid, seq, x)
        return JSONAnswer({"seq": seq, "outputs": to_json([y]), "replayed": replayed})

    # -- errors outside the routes -----------------------------------------------------------
    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        self.server.metrics.inc("rnnkit_serve_requests_total", route="other", status=str(exc.status_code))
        err = RequestError(exc.status_code, code, f"{request.method} {request.url.path[:100]}: {exc.detail}")
        return JSONAnswer(err.body(), status_code=exc.status_code, headers=getattr(exc, "headers", None))


def build_app(sv: Servable, cfg: ServeConfig) -> ASGIApp:
    """The ASGI app serving ``sv`` under ``cfg`` (its lifespan starts and stops the batchers)."""
    server = Server(sv, cfg)
    api = Api(server)

    def e(route: str, fn: Handler) -> Endpoint:
        return Endpoint(route, fn, server)

    predict = e("predict", api.predict)
    routes = [
        Route("/healthz", e("healthz", api.healthz), methods=["GET"]),
        Route("/v1/model", e("model", api.model), methods=["GET"]),
        Route("/metrics", e("metrics", api.metrics), methods=["GET"]),
        Route("/v1/predict", predict, methods=["POST"]),
        Route("/v1/streams", e("create", api.create), methods=["POST"]),
        Route("/v1/streams/{sid}", e("read", api.read), methods=["GET"]),
        Route("/v1/streams/{sid}", e("delete", api.delete), methods=["DELETE"]),
        Route("/v1/streams/{sid}/step", e("step", api.step), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=server.lifespan,
                    exception_handlers={HTTPException: api.http_error})
    app.state.server = server
    fast = FastPredict(api, predict, cfg.token) \
        if cfg.fast_path and sv.forecast is None and sv.deepar is None else None
    router = StreamRouter(app, StreamSocket(server), predict)
    router.fast_predict = fast
    if cfg.token is None:
        return router
    outer = AuthMiddleware(router, cfg.token, server)
    outer.fast_predict = fast
    return outer


__all__ = ["FAST_BODY_BYTES", "JSON_TYPES", "AuthMiddleware", "Endpoint", "FastPredict", "Incoming",
           "StreamRouter", "body_timeout", "build_app", "client_disconnected", "header_dict", "media_type",
           "read_body"]
