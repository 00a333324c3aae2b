"""A stream's WebSocket answered inside uvicorn's WebSocket protocol
(:class:`rnnkit.serve._wsconn.StreamWSProtocol`) against the same server with
``ws_fast_path=False`` (uvicorn's ``websockets-sansio`` protocol, every message through the ASGI
app), both in this process on loopback ports, spoken to over raw sockets with hand-made frames:
every frame the servers write after the handshake (answers, refusals, pongs, close frames) is the
same bytes; the outputs are ``model.predict``'s over each prefix of the stream, bit for bit;
pipelined messages (one write, or one byte a write) are answered in their order; the frame
limits (size, masking, reserved bits, UTF-8) close the connection with the same code; the
metrics count the same. A counting protocol checks that the steps took the protocol's path, so a
test cannot pass with both servers answering through the app."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("orjson")
pytest.importorskip("websockets")
httpx = pytest.importorskip("httpx")

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

from serve_trials import Servers, free_port  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit.serve import ServeConfig  # noqa: E402
from rnnkit.serve import _cli as cli  # noqa: E402
from rnnkit.serve._wsconn import StreamWSProtocol  # noqa: E402

F = 4
MASK = b"\x11\x22\x33\x44"
TOKEN = "ws-fast-path-token-0123456789"


def _model() -> rk.Sequential:
    return rk.Sequential([rk.LSTM(8, "tanh", seed=1), rk.Dense(3, "linear", seed=2)],
                         input_shape=(None, None, F))


def _counting(count: list[int], base: type) -> type:
    """The protocol ``base``, counting the steps answered from the step pool (in ``count[0]``)."""
    class Counting(base):  # type: ignore[valid-type, misc]
        def stepped(self, step: Any, t0: float, future: asyncio.Future[Any]) -> None:
            count[0] += 1
            super().stepped(step, t0, future)
    return Counting


class Pair(Servers):
    """Two servers of one model: ``fast`` (this protocol, ``ws_fast_path`` on) and ``app``
    (uvicorn's ``websockets-sansio``, ``ws_fast_path`` off)."""

    def __init__(self, ws_max_size: int = 1 << 20, ws: type = StreamWSProtocol, **settings: Any) -> None:
        self.model = _model()
        self.ports = {v: free_port() for v in ("fast", "app")}
        self.count = {v: [0] for v in self.ports}
        self.servers = {
            v: uvicorn.Server(uvicorn.Config(
                rk.serve.app(self.model, ws_fast_path=v == "fast", **settings), host="127.0.0.1", port=port,
                log_level="warning", loop="asyncio", lifespan="on", access_log=False,
                ws=_counting(self.count[v], ws) if v == "fast" else "websockets-sansio",
                ws_max_size=ws_max_size, ws_per_message_deflate=False))
            for v, port in self.ports.items()}

    async def create(self, v: str, headers: dict[str, str] | None = None) -> str:
        async with httpx.AsyncClient() as c:
            r = await c.post(f"http://127.0.0.1:{self.ports[v]}/v1/streams", headers=headers)
            sid: str = r.json()["id"]
            return sid

    async def metrics(self, v: str) -> list[str]:
        async with httpx.AsyncClient() as c:
            text = (await c.get(f"http://127.0.0.1:{self.ports[v]}/metrics",
                                headers={"authorization": f"Bearer {TOKEN}"})).text
        return [line for line in text.splitlines()
                if line.startswith(("rnnkit_serve_requests_total", "rnnkit_serve_steps_total"))]


def frame(payload: bytes, opcode: int = 0x2, fin: bool = True, mask: bool = True, rsv: int = 0) -> bytes:
    """A client's frame."""
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | rsv | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack("!H", n)
    else:
        head += bytes([m | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    body = bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))
    return head + MASK + body


def step(seq: int, x: np.ndarray) -> bytes:
    return frame(struct.pack("<Q", seq) + np.ascontiguousarray(x, np.float32).tobytes())


def text(doc: Any) -> bytes:
    return frame(json.dumps(doc).encode(), opcode=0x1)


class Client:
    """A raw WebSocket connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, sid: str, token: str | None = None) -> tuple[Client, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        auth = b"" if token is None else b"authorization: Bearer %s\r\n" % token.encode()
        writer.write(b"GET /v1/streams/%s/ws HTTP/1.1\r\nhost: t\r\nupgrade: websocket\r\n"
                     b"connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     b"sec-websocket-version: 13\r\n%s\r\n"
                     % (sid.encode(), auth))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        return cls(reader, writer), head.split(b"\r\n", 1)[0]

    async def frame(self) -> bytes:
        """The next frame the server writes, whole (b"" at the end of the stream)."""
        try:
            head = await asyncio.wait_for(self.reader.readexactly(2), 30)
        except asyncio.IncompleteReadError:
            return b""
        n = head[1] & 0x7F
        ext = b""
        if n == 126:
            ext = await self.reader.readexactly(2)
            n = struct.unpack("!H", ext)[0]
        elif n == 127:
            ext = await self.reader.readexactly(8)
            n = struct.unpack("!Q", ext)[0]
        return head + ext + await self.reader.readexactly(n)

    async def rest(self) -> bytes:
        """What the server writes until it closes (within 5 s)."""
        try:
            return await asyncio.wait_for(self.reader.read(), 5)
        except asyncio.TimeoutError:
            return b"(open)"

    def close(self) -> None:
        self.writer.close()


RNG = np.random.default_rng(3)
XS = [RNG.standard_normal((t, F)).astype(np.float32) for t in (1, 3, 1, 2, 1, 1)]


def script() -> list[tuple[bytes, str]]:
    """Messages, each with what it tests; every one gets exactly one answer."""
    bad = XS[3].copy()
    bad[1, 2] = np.nan
    return [
        (step(1, XS[0]), "next step (pool)"),
        (step(2, XS[1]), "next step, 3 timesteps (pool)"),
        (step(2, XS[1]), "retry: replayed"),
        (step(2, XS[2]), "retry with another input: 409"),
        (step(9, XS[2]), "gap: 409"),
        (step(1, XS[2]), "stale: 409"),
        (frame(struct.pack("<Q", 3) + b"\0" * 5), "not whole timesteps: 400"),
        (frame(b"\1\2\3"), "shorter than a seq: 400"),
        (step(3, bad), "not finite: 422 from the pool"),
        (step(3, RNG.standard_normal((7, F))), "too many timesteps: 413"),
        (step(0, XS[2]), "seq 0: 400"),
        (text({"seq": 3, "x": XS[2].tolist()}), "JSON step"),
        (text({"seq": 4}), "JSON without x: 422"),
        (frame(b"{not json", opcode=0x1), "bad JSON: 400"),
        (step(4, XS[3]), "binary after JSON (pool)"),
        (frame(struct.pack("<Q", 5) + XS[4].tobytes()[:8], fin=False)
         + frame(XS[4].tobytes()[8:], opcode=0x0), "a fragmented binary step (the library's path)"),
        (step(6, XS[5]), "next step (pool)"),
    ]


def _payload(raw: bytes) -> bytes:
    n = raw[1] & 0x7F
    return raw[2:] if n < 126 else raw[4:] if n == 126 else raw[10:]


def _binary(raw: bytes) -> tuple[int, int, np.ndarray]:
    assert raw[0] == 0x82, raw[:2]
    body = _payload(raw)
    seq, replayed = struct.unpack_from("<QB", body)
    return seq, replayed, np.frombuffer(body[9:], np.float32).reshape(-1, 3)


def test_every_frame_is_the_apps_byte_for_byte_and_counted_the_same() -> None:
    """The script one message at a time on each server: the same frames back, then a ping's pong
    and the close handshake; the outputs are ``model.predict`` over each prefix; the steps the
    pool answered (6 of them: the refused one and the fragmented one too) went through the
    protocol's path on the fast server and none on the other; the metrics count the same."""
    async def run() -> tuple[dict[str, list[bytes]], dict[str, list[str]], Pair]:
        got: dict[str, list[bytes]] = {}
        metrics = {}
        async with Pair(max_timesteps=6) as pair:
            for v, port in pair.ports.items():
                c, status = await Client.open(port, await pair.create(v))
                assert status == b"HTTP/1.1 101 Switching Protocols"
                out = []
                for msg, _ in script():
                    c.writer.write(msg)
                    out.append(await c.frame())
                c.writer.write(frame(b"hi", opcode=0x9))
                out.append(await c.frame())
                c.writer.write(frame(struct.pack("!H", 1000) + b"bye", opcode=0x8))
                out += [await c.frame(), await c.rest()]
                c.close()
                got[v] = out
                await asyncio.sleep(0.05)
                metrics[v] = await pair.metrics(v)
        return got, metrics, pair

    got, metrics, pair = asyncio.run(run())
    assert got["fast"] == got["app"]
    assert pair.count["fast"][0] == 6 and pair.count["app"][0] == 0
    answers = got["fast"]
    seqs = {1: XS[0], 2: XS[1], 3: XS[2], 4: XS[3], 5: XS[4], 6: XS[5]}
    for i, seq, replayed in ((0, 1, 0), (1, 2, 0), (2, 2, 1), (14, 4, 0), (15, 5, 0), (16, 6, 0)):
        s, r, y = _binary(answers[i])
        whole = np.concatenate([seqs[k] for k in range(1, seq + 1)])[None]
        n = whole.shape[1]
        want = np.concatenate([pair.model.predict(whole[:, :m])
                               for m in range(n - len(seqs[seq]) + 1, n + 1)])
        assert (s, r) == (seq, replayed) and y.tobytes() == want.tobytes(), i
    json_step = json.loads(_payload(answers[11]))
    whole = np.concatenate([seqs[k] for k in (1, 2, 3)])[None]
    assert json_step["seq"] == 3 and np.asarray(json_step["outputs"][0], np.float32).tobytes() == \
        pair.model.predict(whole).tobytes()
    codes = [json.loads(_payload(answers[i]))["error"]["code"] for i in (3, 4, 5, 6, 7, 8, 9, 10, 12, 13)]
    assert codes == ["seq_conflict", "seq_gap", "seq_stale", "bad_message", "bad_message", "non_finite",
                     "too_many_timesteps", "bad_seq", "missing_field", "bad_json"], codes
    assert answers[17] == b"\x8a\x02hi"  # the pong
    assert answers[18] == b"\x88\x05" + struct.pack("!H", 1000) + b"bye" and answers[19] == b""
    assert metrics["fast"] == metrics["app"]
    assert 'rnnkit_serve_requests_total{route="ws_step",status="200"} 7' in metrics["fast"]


def test_pipelined_messages_are_answered_in_order() -> None:
    """The whole script in one write, and again one byte a write on a new stream: the answers of
    each are the app server's answers to the script sent one message at a time."""
    async def run() -> dict[str, list[list[bytes]]]:
        got: dict[str, list[list[bytes]]] = {"fast": [], "app": []}
        msgs = [m for m, _ in script()]
        async with Pair(max_timesteps=6) as pair:
            for v, port in pair.ports.items():
                c, _ = await Client.open(port, await pair.create(v))
                for m in msgs:
                    c.writer.write(m)
                    await c.writer.drain()
                got[v].append([await c.frame() for _ in msgs])
                c.close()
                c, _ = await Client.open(port, await pair.create(v))
                c.writer.write(b"".join(msgs))
                got[v].append([await c.frame() for _ in msgs])
                c.close()
                c, _ = await Client.open(port, await pair.create(v))
                for b in b"".join(msgs):
                    c.writer.write(bytes([b]))
                    await c.writer.drain()
                got[v].append([await c.frame() for _ in msgs])
                c.close()
            assert pair.count["fast"][0] >= 3 * 5 - 5  # the one-byte writes: most steps still pooled
        return got

    got = asyncio.run(run())
    want = got["app"][0]
    for v in ("fast", "app"):
        for answers in got[v]:
            assert answers == want, v


def test_the_frame_limits_close_the_connection_as_the_library_does() -> None:
    """After good steps: a binary frame over ``ws_max_size`` (1009), an unmasked frame (1002),
    reserved bits set (1002), a text frame that is not UTF-8 (1007), a continuation with no
    message begun (1002): the same bytes on both servers, up to the end of the stream."""
    bad_frames = [
        step(2, RNG.standard_normal((20, F))),  # 8 + 320 bytes > ws_max_size 300
        frame(struct.pack("<Q", 2) + XS[0].tobytes(), mask=False),
        frame(struct.pack("<Q", 2) + XS[0].tobytes(), rsv=0x40),
        frame(b"\xff\xfe", opcode=0x1),
        frame(b"abc", opcode=0x0),
    ]

    async def run() -> dict[str, list[list[bytes]]]:
        got: dict[str, list[list[bytes]]] = {"fast": [], "app": []}
        async with Pair(ws_max_size=300) as pair:
            for v, port in pair.ports.items():
                for bad in bad_frames:
                    c, _ = await Client.open(port, await pair.create(v))
                    c.writer.write(step(1, XS[0]))
                    first = await c.frame()
                    c.writer.write(bad + step(2, XS[2]))
                    got[v].append([first, await c.rest()])
                    c.close()
            assert pair.count["fast"][0] == len(bad_frames)
        return got

    got = asyncio.run(run())
    assert got["fast"] == got["app"]
    codes = [struct.unpack("!H", rest[2:4])[0] for _, rest in got["fast"]]
    assert codes == [1009, 1002, 1002, 1007, 1002], codes


def test_a_missing_stream_and_the_token_are_answered_by_the_app() -> None:
    """A stream that does not exist: its error and close 1008, the same bytes; without the token
    the handshake is refused (403) on both; with it, steps take the protocol's path."""
    async def run() -> tuple[dict[str, list[bytes]], Pair]:
        got: dict[str, list[bytes]] = {"fast": [], "app": []}
        auth = {"authorization": f"Bearer {TOKEN}"}
        async with Pair(token=TOKEN) as pair:
            for v, port in pair.ports.items():
                c, status = await Client.open(port, "nope", TOKEN)
                got[v] += [status, await c.frame(), await c.frame()]
                c.close()
                sid = await pair.create(v, auth)
                c, status = await Client.open(port, sid)
                got[v].append(status)
                c.close()
                c, status = await Client.open(port, sid, TOKEN)
                c.writer.write(step(1, XS[0]))
                got[v] += [status, await c.frame()]
                c.close()
        return got, pair

    got, pair = asyncio.run(run())
    assert got["fast"] == got["app"]
    status, error, close, refused, accepted, answer = got["fast"]
    assert status == accepted == b"HTTP/1.1 101 Switching Protocols" and refused.startswith(b"HTTP/1.1 403")
    assert json.loads(_payload(error))["error"]["code"] == "unknown_stream"
    assert close[:4] == b"\x88\x02\x03\xf0"  # 1008
    assert _binary(answer)[:2] == (1, 0)
    assert pair.count["fast"][0] == 1


def test_answers_wait_while_the_client_does_not_read() -> None:
    """A client that sends 40 large steps without reading: the fast server's transport stops
    taking writes (its socket's send buffer and its own buffer limit made small here), the
    answers wait in the protocol and are written as the client reads, all of them, in order, the
    app server's bytes."""
    held = [0]

    class Small(StreamWSProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            self.transport.set_write_buffer_limits(high=1024)

        def resume_writing(self) -> None:
            held[0] += self.held is not None
            super().resume_writing()

    msgs = [step(i + 1, RNG.standard_normal((2000, F))) for i in range(40)]
    count: list[list[int]] = []

    async def run() -> dict[str, list[bytes]]:
        got: dict[str, list[bytes]] = {}
        async with Pair(ws_max_size=1 << 20, ws=Small, max_timesteps=2000) as pair:
            count.append(pair.count["fast"])
            for v, port in pair.ports.items():
                c, _ = await Client.open(port, await pair.create(v))
                c.writer.write(b"".join(msgs))
                await asyncio.sleep(1.0)  # the server answers what it can, then waits for the reader
                got[v] = [await c.frame() for _ in msgs]
                c.close()
        return got

    got = asyncio.run(run())
    assert got["fast"] == got["app"]
    assert [_binary(a)[0] for a in got["fast"]] == list(range(1, 41))
    assert count[0][0] == 40
    assert held[0] > 0


def test_the_switch() -> None:
    """``--no-ws-fast-path`` turns ``ws_fast_path`` off and leaves uvicorn's own protocol;
    by default ``auto`` and ``websockets-sansio`` give this protocol; ``wsproto`` stays itself;
    a switch that is not a bool is refused, naming it."""
    import argparse

    from rnnkit.serve import ServeConfig
    from rnnkit.serve._cli import WS_PROTOCOL, add_parser, config_from, ws_protocol

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    on = config_from(parser.parse_args(["serve", "m"]))
    off = config_from(parser.parse_args(["serve", "m", "--no-ws-fast-path"]))
    assert on.ws_fast_path is True and off.ws_fast_path is False
    assert [ws_protocol(w, on) for w in ("auto", "websockets-sansio", "wsproto", "websockets")] == \
        [WS_PROTOCOL, WS_PROTOCOL, "wsproto", "websockets"]
    assert ws_protocol("auto", off) == "auto"
    with pytest.raises(rk.Error, match="ws_fast_path must be True or False, got str 'yes'"):
        ServeConfig(ws_fast_path="yes")  # type: ignore[arg-type]


def test_without_the_modules_it_builds_on_streams_go_through_uvicorns_protocol(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An uvicorn without the ``websockets-sansio`` protocol (before 0.35), or websockets
    without its compiled unmasking, gets ``ws`` as asked, never a protocol it cannot import."""
    on = ServeConfig()
    assert cli.ws_protocol("auto", on) == cli.WS_PROTOCOL
    for missing in ("uvicorn.protocols.websockets.no_such_impl", "no_such_package.speedups"):
        monkeypatch.setattr(cli, "WS_NEEDS", (*cli.WS_NEEDS, missing))
        asked = ["auto", "websockets-sansio"]
        assert [cli.ws_protocol(w, on) for w in asked] == asked
        monkeypatch.undo()
