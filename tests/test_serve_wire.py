"""What the server writes on the wire: an answer (status line, headers, body) leaves in one write
to the connection, a ``100 Continue`` at once, and the answers are those of the plain path: the
JSON answer's headers are Starlette's ``JSONResponse``'s, and a predict's numbers are
``model.predict``'s, bit for bit."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("orjson")
pytest.importorskip("httptools")

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

from serve_trials import free_port  # noqa: E402
from starlette.responses import JSONResponse, Response  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit.serve._app import JSONAnswer  # noqa: E402
from rnnkit.serve._http import HeadTimeoutProtocol  # noqa: E402

F = 4


class _Recording:
    """A transport that records every write reaching the connection."""

    def __init__(self, transport: Any, writes: list[bytes]) -> None:
        self._t, self._writes = transport, writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._t.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)


def _protocol(writes: list[bytes]) -> type:
    class Recorded(HeadTimeoutProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(_Recording(transport, writes))
    return Recorded


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status = int((await reader.readuntil(b"\r\n")).split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    return status, headers, await reader.readexactly(int(headers.get("content-length", "0")))


def _request(path: str, body: bytes | None = None, extra: bytes = b"") -> bytes:
    if body is None:
        return b"GET %s HTTP/1.1\r\nhost: t\r\n%s\r\n" % (path.encode(), extra)
    return (b"POST %s HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
            % (path.encode(), len(body), extra, body))


def test_each_answer_is_one_write_and_a_100_continue_is_not_held() -> None:
    """Kept-alive requests (/healthz, predicts, a 422): each answer reaches the connection in one
    write holding its status line, headers and body (uvicorn alone writes the head and the body
    apart: two writes); a ``100 Continue`` is written at once (the client sends its body only
    after it, so holding it would stall the request); predict's numbers are ``model.predict``'s,
    bit for bit (float32 outputs travel as the exact float64 of each value)."""
    model = rk.Sequential([rk.LSTM(8, "tanh", seed=1)], input_shape=(None, None, F))
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1 + k % 2, 5, F)).astype(np.float32) for k in range(3)]
    writes: list[bytes] = []
    port = free_port()
    config = uvicorn.Config(rk.serve.app(model), host="127.0.0.1", port=port, log_level="warning",
                            http=_protocol(writes), loop="asyncio", lifespan="on", access_log=False)
    server = uvicorn.Server(config)

    async def run() -> list[tuple[int, dict[str, str], bytes]]:
        task = asyncio.get_running_loop().create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        out = []
        try:
            writer.write(_request("/healthz"))
            out.append(await _answer(reader))
            for x in xs:
                writer.write(_request("/v1/predict", json.dumps({"x": x.tolist()}).encode()))
                out.append(await _answer(reader))
            writer.write(_request("/v1/predict", b'{"x": [1, 2]}'))  # 422 bad_shape
            out.append(await _answer(reader))
            body = json.dumps({"x": xs[0].tolist()}).encode()
            writer.write(b"POST /v1/predict HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\nexpect: 100-continue\r\n\r\n" % len(body))
            line = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert line.startswith(b"HTTP/1.1 100 "), line
            writer.write(body)
            out.append(await _answer(reader))
        finally:
            writer.close()
            server.should_exit = True
            await task
        return out

    answers = asyncio.run(run())
    assert [a[0] for a in answers] == [200, 200, 200, 200, 422, 200]
    assert json.loads(answers[0][2]) == {"status": "ok"}
    for x, (_, headers, body) in zip([*xs, xs[0]], answers[1:4] + answers[5:], strict=True):
        got = np.asarray(json.loads(body)["outputs"], dtype=np.float32)
        want = model.predict(x)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()
        assert headers["content-type"] == "application/json"
    assert json.loads(answers[4][2])["error"]["code"] == "bad_shape"
    answer_writes = [w for w in writes if w.startswith(b"HTTP/1.1 ") and not w.startswith(b"HTTP/1.1 100 ")]
    assert len(answer_writes) == 6 and len(writes) == 7  # 6 answers + the 100 Continue, nothing else
    for w, (status, _, body) in zip(answer_writes, answers, strict=True):
        assert w.startswith(b"HTTP/1.1 %d " % status) and w.endswith(b"\r\n\r\n" + body)


@pytest.mark.parametrize("status", [200, 201, 401, 422])
@pytest.mark.parametrize("headers", [None, {"connection": "close"}, {"WWW-Authenticate": "Bearer"}])
def test_json_answer_has_starlettes_headers_and_the_same_document(status: int,
                                                                   headers: dict[str, str] | None) -> None:
    doc = {"outputs": [[0.1, -2.5e-8, 3.0]], "n_outputs": 1, "text": "é"}
    ours = JSONAnswer(doc, status_code=status, headers=headers)
    assert json.loads(bytes(ours.body)) == json.loads(bytes(JSONResponse(doc).body)) == doc
    # the headers Starlette gives a JSON answer of these bytes (orjson writes -2.5e-08 as -2.5e-8)
    theirs = Response(ours.body, status_code=status, headers=headers, media_type=JSONResponse.media_type)
    assert ours.raw_headers == theirs.raw_headers
    sent: list[MutableMapping[str, Any]] = []

    async def send(msg: MutableMapping[str, Any]) -> None:
        sent.append(msg)

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.disconnect"}

    asyncio.run(ours({"type": "http"}, receive, send))
    assert sent == [{"type": "http.response.start", "status": status, "headers": theirs.raw_headers},
                    {"type": "http.response.body", "body": ours.body}]


def test_a_held_head_is_written_before_the_connection_closes() -> None:
    """An app that starts an answer and fails before its body: uvicorn closes the connection, and
    the head held for the body is written first, as uvicorn alone writes it (the client reads
    the status line, then the end of the stream)."""
    async def failing(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")]})
        raise RuntimeError("failed after the head")

    writes: list[bytes] = []
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(failing, host="127.0.0.1", port=port, log_level="critical",
                                           http=_protocol(writes), loop="asyncio", lifespan="off"))

    async def run() -> bytes:
        task = asyncio.get_running_loop().create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(_request("/x"))
            return await asyncio.wait_for(reader.read(), 10)  # to the end of the stream
        finally:
            writer.close()
            server.should_exit = True
            await task

    got = asyncio.run(run())
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"content-length: 5\r\n\r\n")
    assert writes == [got]
