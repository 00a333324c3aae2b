"""The load generator of ``bench_serve.py``: many WebSocket streams stepping one timestep each,
run as its own process so that its Python does not share the server's process.

Each stream is one TCP connection speaking RFC 6455 directly from an ``asyncio.Protocol`` (the
handshake, masked client frames, the server's unmasked frames), so a step costs the client a few
microseconds and no coroutine switch: the same client, byte for byte, for every server it drives.
A step is the binary message ``8-byte little-endian seq`` + ``features`` float32 values; the
answer's first 8 bytes must carry the same seq (a text answer is counted as an error).

Closed loop (each stream sends its next step when the last is answered) or paced (``--rate``
steps/s over all streams, each stream at ``rate / N`` with a random phase). Prints one JSON
line: steps answered in the measured ``--seconds``, wall time (until the steps in flight were
answered), throughput, latencies p50 / p99 (ms), errors, each stream's last acknowledged seq.

    python benchmarks/serve_load.py --port 8000 --ids ids.json --seconds 5 [--rate 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import json
import os
import random
import struct
import sys
import time

import numpy as np


def frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """A masked client frame (FIN set) holding ``payload``."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    key = os.urandom(4)
    masked = (int.from_bytes(payload, "little") ^ int.from_bytes((key * (n // 4 + 1))[:n], "little")) \
        .to_bytes(n, "little") if n else b""
    return head + key + masked


class Stream(asyncio.Protocol):
    """One stream's connection: the handshake, then closed-loop or paced steps."""

    def __init__(self, load: Load, path: str, seq: int) -> None:
        self.load, self.path, self.seq = load, path, seq
        self.buf = b""
        self.open: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.sent_at = 0.0
        self.next_at = 0.0
        self.interval = 0.0
        self.waiting = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        key = base64.b64encode(os.urandom(16)).decode()
        self.transport.write((f"GET {self.path} HTTP/1.1\r\nHost: {self.load.host}:{self.load.port}\r\n"
                              f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                              f"Sec-WebSocket-Version: 13\r\n\r\n").encode())

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.open.done():
            self.open.set_exception(ConnectionError(f"{self.path}: closed during the handshake"))
        elif self.waiting:
            self.load.errors += 1
            self.waiting = False

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.open.done():
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            if not head.startswith(b"HTTP/1.1 101"):
                self.open.set_exception(ConnectionError(f"{self.path}: {head[:200]!r}"))
                return
            self.open.set_result(None)
        while len(self.buf) >= 2:
            b0, b1 = self.buf[0], self.buf[1] & 0x7F
            at = 2
            if b1 == 126:
                if len(self.buf) < 4:
                    return
                (b1,), at = struct.unpack_from("!H", self.buf, 2), 4
            elif b1 == 127:
                if len(self.buf) < 10:
                    return
                (b1,), at = struct.unpack_from("!Q", self.buf, 2), 10
            if len(self.buf) < at + b1:
                return
            payload, self.buf = self.buf[at:at + b1], self.buf[at + b1:]
            self.answer(b0 & 0x0F, payload)

    def answer(self, opcode: int, payload: bytes) -> None:
        load = self.load
        if opcode == 0x8:  # close
            return
        self.waiting = False
        if opcode != 0x2 or len(payload) < 8 or struct.unpack_from("<Q", payload)[0] != self.seq:
            load.errors += 1
            if load.errors <= 3:
                print(f"bad answer to step {self.seq} of {self.path}: {payload[:300]!r}", file=sys.stderr)
            return
        now = time.perf_counter()
        if load.measuring:
            load.lat.append(now - self.sent_at)
            load.done += 1
        load.acked[self.path] = self.seq
        if now >= load.end:
            return
        if self.interval:
            self.next_at += self.interval
            delay = self.next_at - now
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self.send)
                return
        self.send()

    def send(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.seq += 1
        self.waiting = True
        self.sent_at = time.perf_counter()
        self.transport.write(frame(struct.pack("<Q", self.seq) + self.load.x))


class Load:
    """All the streams of one run."""

    def __init__(self, host: str, port: int, x: bytes) -> None:
        self.host, self.port, self.x = host, port, x
        self.lat: list[float] = []
        self.done = 0
        self.errors = 0
        self.measuring = False
        self.end = float("inf")
        self.acked: dict[str, int] = {}


async def run(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    spec = json.loads(open(a.ids).read())
    x = np.random.default_rng(0).standard_normal(a.features).astype(np.float32).tobytes()
    load = Load(a.host, a.port, x)
    streams: list[Stream] = []
    for k in range(0, len(spec["paths"]), 100):  # open in waves: no listen-queue overflow
        part = []
        for path in spec["paths"][k:k + 100]:
            make = functools.partial(Stream, load, path, spec["seqs"].get(path, 0))
            _, s = await loop.create_connection(make, a.host, a.port)
            part.append(s)
        await asyncio.gather(*[s.open for s in part])
        streams += part
    if a.handshake:  # the caller measures from here: it says when to start
        print("open", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
    t0 = time.perf_counter()
    load.end = t0 + a.seconds
    load.measuring = True
    interval = len(streams) / a.rate if a.rate else 0.0
    for s in streams:
        s.interval = interval
        if interval:
            s.next_at = t0 + random.random() * interval
            loop.call_at(loop.time() + (s.next_at - t0), s.send)
        else:
            s.send()
    await asyncio.sleep(a.seconds)
    load.measuring = False
    grace = time.perf_counter() + 30.0  # the steps in flight are answered (their seq is acknowledged)
    while any(s.waiting for s in streams) and time.perf_counter() < grace:
        await asyncio.sleep(0.01)
    wall = time.perf_counter() - t0
    lat = np.asarray(load.lat) * 1000.0
    p50, p99 = (float(np.percentile(lat, 50)), float(np.percentile(lat, 99))) if lat.size else (0.0, 0.0)
    print(json.dumps({"steps": load.done, "wall_s": wall, "throughput": load.done / a.seconds, "p50_ms": p50,
                      "p99_ms": p99, "errors": load.errors, "seqs": load.acked}), flush=True)
    if a.handshake:
        await loop.run_in_executor(None, sys.stdin.readline)
    for s in streams:
        if s.transport is not None:
            s.transport.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ids", required=True, help='a JSON file {"paths": [...], "seqs": {path: last seq}}')
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=0.0, help="steps/s over all streams (0: closed loop)")
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--handshake", action="store_true",
                   help='print "open" when the sockets are open and start at the next line on stdin; '
                        'after the result, close them at the next line')
    a = p.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(run(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
