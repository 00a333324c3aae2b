"""The predict the HTTP protocol answers itself (``FastPredict``, ``_FastCycle`` in
``rnnkit.serve._http``) against the same server with ``fast_path=False`` (every request through
the ASGI app), both in this process on loopback ports: every answer, good or refused, is the same
bytes on the wire (status line, headers, body; only the ``date`` header's clock differs), the
metrics count the same, pipelined requests of one connection are answered in their order (fast
and app ones mixed), and the body's deadline, the half-close after it, the token and the body
limit hold on the fast path. A counting protocol checks which requests took the fast path, so a
test cannot pass with both servers answering through the app."""

from __future__ import annotations

import asyncio
import io
import json
import re
import sys
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

from serve_trials import Servers, free_port  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit.serve._http import HeadTimeoutProtocol, _FastCycle  # noqa: E402

F, T = 4, 5
TOKEN = "fast-path-token-0123456789"


def _model() -> rk.Sequential:
    return rk.Sequential([rk.LSTM(8, "tanh", seed=1), rk.Dense(3, "linear", seed=2)],
                         input_shape=(None, None, F))


def _counting(fast: list[int]) -> type:
    """The server's protocol, counting the requests that took the fast path (in ``fast[0]``)."""
    class Counting(HeadTimeoutProtocol):
        def _fast_begin(self, cycle: _FastCycle) -> None:
            fast[0] += 1
            super()._fast_begin(cycle)
    return Counting


class Pair(Servers):
    """Two servers of one model, ``fast_path`` on and off, on one event loop; ``fast[v]``: the
    requests server ``v`` answered on the fast path."""

    def __init__(self, **settings: Any) -> None:
        self.model = _model()
        self.ports = {v: free_port() for v in ("fast", "app")}
        self.fast = {v: [0] for v in self.ports}
        self.servers = {
            v: uvicorn.Server(uvicorn.Config(rk.serve.app(self.model, fast_path=v == "fast", **settings),
                                             host="127.0.0.1", port=port, log_level="warning",
                                             http=_counting(self.fast[v]), loop="asyncio", lifespan="on",
                                             access_log=False))
            for v, port in self.ports.items()}


def _post(body: bytes, path: str = "/v1/predict", ctype: bytes | None = b"application/json",
          extra: bytes = b"") -> bytes:
    ct = b"" if ctype is None else b"content-type: %s\r\n" % ctype
    return b"POST %s HTTP/1.1\r\nhost: t\r\n%scontent-length: %d\r\n%s\r\n%s" % (
        path.encode(), ct, len(body), extra, body)


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """One answer's bytes (status line, headers, body by its Content-Length)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    n = re.search(rb"\r\ncontent-length: (\d+)\r\n", head)
    assert n is not None, head
    return head + await reader.readexactly(int(n.group(1)))


async def _exchange(port: int, data: bytes, answers: int) -> tuple[list[bytes], bytes]:
    """Send ``data`` on a new connection; the ``answers`` answers, then whatever else comes
    within 0.3 s (b"" when the server closed the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        out = [await _answer(reader) for _ in range(answers)]
        try:
            rest = await asyncio.wait_for(reader.read(1 << 16), 0.3)
        except asyncio.TimeoutError:
            rest = b"(open)"
    finally:
        writer.close()
    return out, rest


def _same_clock(raw: bytes) -> bytes:
    return re.sub(rb"\r\ndate: [^\r]*\r\n", b"\r\ndate: -\r\n", raw)


def _status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def _doc(raw: bytes) -> Any:
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


def _metric(text: str, start: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(start))


RNG = np.random.default_rng(7)
X1 = RNG.standard_normal((1, T, F)).astype(np.float32)
X2 = RNG.standard_normal((2, T, F)).astype(np.float32)

#: (request, expected status, whether the fast path takes it)
CASES: list[tuple[bytes, int, bool]] = [
    (_post(json.dumps({"x": X1.tolist()}).encode()), 200, True),
    (_post(json.dumps({"x": X2.tolist(), "lengths": [T, 2]}).encode()), 200, True),
    (_post(json.dumps({"x": X2.tolist(), "mask": [[1] * T, [1, 1, 0, 0, 0]]}).encode()), 200, True),
    (_post(json.dumps({"x": X1.tolist()}).encode(), ctype=None), 200, True),
    (_post(json.dumps({"x": X1.tolist()}).encode(), ctype=b"text/plain; charset=utf-8"), 200, True),
    (_post(json.dumps({"x": X1.tolist()}).encode(), extra=b"accept: application/x-npy\r\n"), 200, True),
    (_post(json.dumps({"x": X2.tolist(), "lengths": [1, 2], "mask": [[1] * T] * 2}).encode()), 422, True),
    (_post(json.dumps({"x": X2.tolist(), "lengths": [0, 9]}).encode()), 422, True),
    (_post(b'{"x": [[[1, 2'), 400, True),
    (_post(b""), 400, True),
    (_post(b'{"x": NaN}'), 400, True),
    (_post(b"[1, 2]"), 422, True),
    (_post(b'{"y": 1}'), 422, True),
    (_post(b'{"x": [1, 2]}'), 422, True),
    (_post(b'{"x": [[[1e400, 0, 0, 0]]]}'), 422, True),
    (_post(b'{"x": [[["a", 0, 0, 0]]]}'), 422, True),
    (_post(json.dumps({"x": RNG.standard_normal((5, T, F)).tolist()}).encode()), 413, True),  # max_batch 4
    (_post(b"1,2,3", ctype=b"text/csv"), 415, False),
    (_post(json.dumps({"x": X1.tolist()}).encode(), path="/v1/predict?lengths=5"), 200, False),
    (b"GET /v1/predict HTTP/1.1\r\nhost: t\r\n\r\n", 405, False),
    (b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n", 200, False),
]


def test_every_answer_is_the_apps_byte_for_byte_and_counted_the_same() -> None:
    """Each case on its own kept-alive connection to both servers: the same status line, headers
    and body (the date aside); the predicts' numbers are ``model.predict``'s, bit for bit; the
    fast server answered exactly the predicts it may take itself, the other none; both servers'
    metrics count the same requests by status. Then a too-large Content-Length (the app's 413,
    read and drained) and ``Connection: close`` (the answer says so, the connection closes)."""
    async def run() -> tuple[dict[str, list[bytes]], dict[str, str], Pair]:
        got: dict[str, list[bytes]] = {"fast": [], "app": []}
        metrics = {}
        async with Pair(max_batch=4, max_body_bytes=4096) as pair:
            for v, port in pair.ports.items():
                for req, _, _ in CASES:
                    got[v] += (await _exchange(port, req, 1))[0]
                big = _post(b'{"x": [' + b"0," * 3000 + b"0]}")
                answers, rest = await _exchange(port, big, 1)
                got[v] += [*answers, rest]
                closing = _post(json.dumps({"x": X1.tolist()}).encode(), extra=b"connection: close\r\n")
                answers, rest = await _exchange(port, closing, 1)
                got[v] += [*answers, rest]
                m = await _exchange(port, b"GET /metrics HTTP/1.1\r\nhost: t\r\n\r\n", 1)
                metrics[v] = _doc_text(m[0][0])
        return got, metrics, pair

    got, metrics, pair = asyncio.run(run())
    assert [_same_clock(a) for a in got["fast"]] == [_same_clock(a) for a in got["app"]]
    assert pair.fast["fast"][0] == sum(fast for _, _, fast in CASES) + 1 and pair.fast["app"][0] == 0
    answers = got["fast"]
    assert [_status(a) for a in answers[:len(CASES)]] == [s for _, s, _ in CASES]
    want = pair.model.predict(X1)
    assert np.asarray(_doc(answers[0])["outputs"], np.float32).tobytes() == want.tobytes()
    assert np.asarray(_doc(answers[1])["outputs"], np.float32).tobytes() == \
        pair.model.predict(X2, lengths=np.array([T, 2])).tobytes()
    npy = answers[5].split(b"\r\n\r\n", 1)[1]
    assert b"content-type: application/x-npy" in answers[5]
    assert np.lib.format.read_array(io.BytesIO(npy)).tobytes() == want.tobytes()
    assert [_doc(a)["error"]["code"] for a in answers[6:17]] == [
        "lengths_and_mask", "bad_lengths", "bad_json", "bad_json", "bad_json", "bad_body", "missing_field",
        "bad_shape", "non_finite", "bad_dtype", "too_many_sequences"]
    big, after_big, closed, after_close = answers[len(CASES):len(CASES) + 4]
    assert _status(big) == 413 and _doc(big)["error"]["code"] == "body_too_large" and after_big == b"(open)"
    assert _status(closed) == 200 and b"\r\nconnection: close\r\n" in closed and after_close == b""
    assert _counts(metrics["fast"]) == _counts(metrics["app"])
    for status, n in (("200", 8), ("400", 3), ("413", 2), ("415", 1), ("422", 7)):
        assert _metric(metrics["fast"], f'rnnkit_serve_requests_total{{route="predict",status="{status}"}}') \
            == n


def _doc_text(raw: bytes) -> str:
    return raw.split(b"\r\n\r\n", 1)[1].decode()


def _counts(text: str) -> list[str]:
    """The request counters of a metrics page (the times differ between two servers)."""
    return [line for line in text.splitlines() if line.startswith("rnnkit_serve_requests_total")]


def test_pipelined_requests_are_answered_in_order() -> None:
    """Twelve requests in one write on one connection, fast predicts (each its own row), app
    requests (a 415, /healthz, a predict with a query) and a refused fast one mixed, the last
    saying ``Connection: close``: the answers come in the requests' order, each predict's
    numbers those of ``model.predict`` on its own row, the same bytes from both servers, and the
    connection closes after the last."""
    xs = [RNG.standard_normal((1, T, F)).astype(np.float32) for _ in range(8)]
    reqs = [_post(json.dumps({"x": x.tolist()}).encode()) for x in xs]
    reqs.insert(2, _post(b"1,2", ctype=b"text/csv"))
    reqs.insert(4, b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
    reqs.insert(6, _post(b'{"x": [1]}'))
    reqs.append(_post(json.dumps({"x": xs[0].tolist()}).encode(), path="/v1/predict?a=1",
                      extra=b"connection: close\r\n"))

    async def run() -> tuple[dict[str, tuple[list[bytes], bytes]], Pair]:
        async with Pair() as pair:
            data = b"".join(reqs)
            return {v: await _exchange(port, data, len(reqs)) for v, port in pair.ports.items()}, pair

    got, pair = asyncio.run(run())
    assert [_same_clock(a) for a in got["fast"][0]] == [_same_clock(a) for a in got["app"][0]]
    answers, rest = got["fast"]
    assert rest == b"" and got["app"][1] == b""
    assert pair.fast["fast"][0] == 9
    assert [_status(a) for a in answers] == [200, 200, 415, 200, 200, 200, 422, 200, 200, 200, 200, 200]
    predicts = [a for i, a in enumerate(answers) if i not in (2, 4, 6)]
    for x, a in zip([*xs, xs[0]], predicts, strict=True):
        assert np.asarray(_doc(a)["outputs"], np.float32).tobytes() == pair.model.predict(x).tobytes()


def test_a_slow_body_gets_the_apps_408_and_a_half_close() -> None:
    """A predict whose body stops halfway: past ``body_timeout_s`` both servers answer the same
    408 ``body_timeout`` (naming the bytes that came) with ``connection: close``; the client may
    go on sending (the rest is read and discarded) and then reads the end of the stream, not a
    reset. A client that leaves during the body is counted as the app counts it (400)."""
    body = json.dumps({"x": X1.tolist()}).encode()
    half = _post(body)[:-len(body) // 2]

    async def slow(port: int) -> tuple[bytes, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(half)
            answer = await _answer(reader)
            writer.write(body[-len(body) // 2:] + b"more" * 1000)  # read and discarded
            writer.write_eof()
            rest = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
        return answer, rest

    async def leave(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(half)
        await asyncio.sleep(0.1)
        writer.close()
        await asyncio.sleep(0.2)

    async def run() -> tuple[dict[str, tuple[bytes, bytes]], dict[str, str], Pair]:
        async with Pair(body_timeout_s=0.4) as pair:
            got = {v: await slow(port) for v, port in pair.ports.items()}
            metrics = {}
            for v, port in pair.ports.items():
                await leave(port)
                page = await _exchange(port, b"GET /metrics HTTP/1.1\r\nhost: t\r\n\r\n", 1)
                metrics[v] = _doc_text(page[0][0])
            return got, metrics, pair

    got, metrics, pair = asyncio.run(run())
    assert _same_clock(got["fast"][0]) == _same_clock(got["app"][0])
    answer, rest = got["fast"]
    came = len(half) - half.index(b"\r\n\r\n") - 4
    assert _status(answer) == 408 and b"\r\nconnection: close\r\n" in answer and rest == b""
    assert _doc(answer)["error"] == {
        "code": "body_timeout", "expected": 0.4, "got": came,
        "message": f"the body did not arrive within 0.4 s ({came} bytes came); send it at once, or raise "
                   f"--body-timeout-s"}
    assert pair.fast["fast"][0] == 2 and pair.fast["app"][0] == 0
    for v in ("fast", "app"):
        assert _metric(metrics[v], 'rnnkit_serve_requests_total{route="predict",status="400"}') == 1
        assert _metric(metrics[v], 'rnnkit_serve_requests_total{route="predict",status="408"}') == 1


def test_the_token_is_checked_on_the_fast_path() -> None:
    """With a token: a predict without it, or with a wrong one, gets the app's 401 (not the fast
    path); with it, the fast path's answer, the same bytes as the app's."""
    body = json.dumps({"x": X1.tolist()}).encode()
    reqs = [_post(body), _post(body, extra=b"authorization: Bearer wrong-token-0123456789\r\n"),
            _post(body, extra=b"authorization: Bearer " + TOKEN.encode() + b"\r\n")]

    async def run() -> tuple[dict[str, list[bytes]], Pair]:
        async with Pair(token=TOKEN) as pair:
            return {v: [(await _exchange(port, r, 1))[0][0] for r in reqs]
                    for v, port in pair.ports.items()}, pair

    got, pair = asyncio.run(run())
    assert [_same_clock(a) for a in got["fast"]] == [_same_clock(a) for a in got["app"]]
    assert [_status(a) for a in got["fast"]] == [401, 401, 200]
    assert pair.fast["fast"][0] == 1 and pair.fast["app"][0] == 0
    assert np.asarray(_doc(got["fast"][2])["outputs"], np.float32).tobytes() == \
        pair.model.predict(X1).tobytes()


class _Paused(asyncio.Transport):
    """A connection whose client does not read: the server's writes are recorded, and the
    protocol is told its transport's buffer is full (``pause_writing``) until ``resume``."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.protocol: Any = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_protocol(self) -> Any:
        return self.protocol

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_an_answer_waits_while_the_client_does_not_read() -> None:
    """With the connection's write buffer full (the client reads nothing), a fast answer is not
    written (the app's path waits the same way, in ``send``); once the buffer drains it is
    written, whole, and the pipelined request behind it is answered after it, in order."""
    from uvicorn.server import ServerState

    model = _model()
    application = rk.serve.app(model)
    xs = [RNG.standard_normal((1, T, F)).astype(np.float32) for _ in range(2)]

    async def run() -> tuple[list[bytes], list[bytes]]:
        config = uvicorn.Config(application, log_level="warning", access_log=False, lifespan="off")
        config.load()
        state = ServerState()
        state.default_headers = [(b"date", b"Thu, 01 Jan 2026 00:00:00 GMT"), *config.encoded_headers]
        async with application.state.server.lifespan():
            t = _Paused()
            p = HeadTimeoutProtocol(config=config, server_state=state, app_state={})
            t.protocol = p
            p.connection_made(t)
            p.pause_writing()
            p.data_received(b"".join(_post(json.dumps({"x": x.tolist()}).encode()) for x in xs))
            await asyncio.sleep(0.3)  # computed (max_wait_ms 2), held
            held = list(t.writes)
            p.resume_writing()
            await asyncio.sleep(0.3)
            p.connection_lost(None)
            return held, t.writes

    held, written = asyncio.run(run())
    assert held == [] and len(written) == 2
    for x, w in zip(xs, written, strict=True):
        assert _status(w) == 200
        assert np.asarray(_doc(w)["outputs"], np.float32).tobytes() == model.predict(x).tobytes()
