"""An HTTP/1.1 load generator for ``POST /v1/predict``: raw sockets from ``asyncio.Protocol``
objects (uvloop when installed), run as its own process so that its Python does not share the
server's process, and so that its own CPU time can be reported.

Each client is a closed loop: it sends its next request when the last is answered (status line,
headers, a ``Content-Length`` body: the same parser for every server). Modes:

- ``keepalive``: each client keeps one connection for all its requests;
- ``connect``: each request opens a new connection (``Connection: close``), which the client
  closes once it has read the answer.

``--slow N`` adds N slow connections that each send one byte of a request head every
``--slow-interval`` seconds and reconnect whenever the server closes them, present for the whole
run. Prints ``measuring`` and ``measured`` (one line each) when the measured seconds start and
end, then one JSON line: requests answered in the measured ``--seconds``, requests/s, latency
p50 / p99 / max (ms), non-200 answers, connection errors, the generator's own CPU seconds per
wall second (user + system; 1.0 is one core), and the slow connections the server closed.

    python benchmarks/http_load.py --port 8000 --body body.json --clients 200 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import time
from typing import Any

import numpy as np


class Run:
    """The shared counters of one run."""

    def __init__(self, host: str, port: int, request: bytes, keepalive: bool) -> None:
        self.host, self.port, self.request, self.keepalive = host, port, request, keepalive
        self.lat: list[float] = []
        self.non_200 = 0
        self.errors = 0
        self.measuring = False
        self.end = float("inf")
        self.slow_closed = 0


class Client(asyncio.Protocol):
    """One closed-loop client; in ``connect`` mode a new instance (connection) per request."""

    def __init__(self, run: Run, done: asyncio.Future[None]) -> None:
        self.run, self.done = run, done
        self.buf = bytearray()
        self.need = -1  # bytes of the whole answer (head + body) once the head is in; -1 before
        self.status = 0
        self.sent_at = 0.0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send()

    def send(self) -> None:
        assert self.transport is not None
        self.sent_at = time.perf_counter()
        self.transport.write(self.run.request)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            if self.run.keepalive or self.need >= 0 or self.buf:
                self.run.errors += 1
            self.done.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.need < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end]).lower()
                self.status = int(head[9:12])
                at = head.find(b"\r\ncontent-length:")
                if at < 0:
                    self.run.errors += 1
                    assert self.transport is not None
                    self.transport.close()
                    return
                stop = head.find(b"\r\n", at + 2)
                self.need = end + 4 + int(head[at + 17:stop if stop >= 0 else len(head)])
            if len(self.buf) < self.need:
                return
            del self.buf[:self.need]
            self.need = -1
            self.answered()
            if not self.run.keepalive:
                return

    def answered(self) -> None:
        run = self.run
        now = time.perf_counter()
        if run.measuring:
            run.lat.append(now - self.sent_at)
            if self.status != 200:
                run.non_200 += 1
                if run.non_200 <= 3:
                    print(f"answer {self.status}", file=sys.stderr)
        if not run.keepalive:
            assert self.transport is not None
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)
            return
        if now >= run.end:
            assert self.transport is not None
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)
            return
        self.send()


async def keepalive_client(run: Run) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    try:
        await loop.create_connection(lambda: Client(run, done), run.host, run.port)
    except OSError:
        run.errors += 1
        return
    await done


async def connect_client(run: Run) -> None:
    loop = asyncio.get_running_loop()
    while time.perf_counter() < run.end:
        done: asyncio.Future[None] = loop.create_future()
        t0 = time.perf_counter()
        try:
            await loop.create_connection(functools.partial(Client, run, done), run.host, run.port)
        except OSError:
            run.errors += 1
            await asyncio.sleep(0.01)
            continue
        await done
        if run.lat and run.measuring:  # the latency of a new connection includes its opening
            run.lat[-1] = time.perf_counter() - t0


async def slow_client(run: Run, head: bytes, interval: float) -> None:
    """A request head, one byte every ``interval`` s; a new connection whenever it is closed."""
    while time.perf_counter() < run.end:
        try:
            reader, writer = await asyncio.open_connection(run.host, run.port)
        except OSError:
            await asyncio.sleep(interval)
            continue
        try:
            for i in range(len(head)):
                if time.perf_counter() >= run.end:
                    return
                writer.write(head[i:i + 1])
                try:
                    data = await asyncio.wait_for(reader.read(4096), interval)
                except asyncio.TimeoutError:
                    continue
                if data or reader.at_eof():
                    run.slow_closed += 1
                    break
        except (ConnectionError, OSError):
            run.slow_closed += 1
        finally:
            writer.close()


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    body = open(a.body, "rb").read()
    keepalive = a.mode == "keepalive"
    close = "" if keepalive else "connection: close\r\n"
    request = (f"POST /v1/predict HTTP/1.1\r\nhost: {a.host}\r\ncontent-type: application/json\r\n"
               f"content-length: {len(body)}\r\n{close}\r\n").encode() + body
    run = Run(a.host, a.port, request, keepalive)
    slow_head = b"POST /v1/predict HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    warm = time.perf_counter() + a.warmup
    run.end = warm + a.seconds
    tasks = [asyncio.create_task(slow_client(run, slow_head, a.slow_interval)) for _ in range(a.slow)]
    if a.slow:
        await asyncio.sleep(0.5)  # the slow ones in place first
    client = keepalive_client if keepalive else connect_client
    tasks += [asyncio.create_task(client(run)) for _ in range(a.clients)]
    await asyncio.sleep(max(0.0, warm - time.perf_counter()))
    run.measuring = True
    cpu0, t0 = _cpu(), time.perf_counter()
    print("measuring", flush=True)  # a caller may read the server's CPU time from here ...
    await asyncio.sleep(max(0.0, run.end - time.perf_counter()))
    run.measuring = False
    cpu, wall = _cpu() - cpu0, time.perf_counter() - t0
    print("measured", flush=True)  # ... to here
    await asyncio.wait(tasks, timeout=30.0)
    ms = np.asarray(run.lat) * 1e3
    pct = (lambda q: round(float(np.percentile(ms, q)), 1)) if ms.size else (lambda q: None)
    return {"mode": a.mode, "clients": a.clients, "slow": a.slow, "answered": int(ms.size),
            "requests_per_s": round(ms.size / wall, 1), "p50_ms": pct(50), "p99_ms": pct(99),
            "max_ms": round(float(ms.max()), 1) if ms.size else None, "non_200": run.non_200,
            "errors": run.errors, "generator_cpu_share": round(cpu / wall, 2),
            "slow_connections_closed_by_server": run.slow_closed}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--body", required=True, help="a file holding the JSON body of every request")
    p.add_argument("--mode", choices=("keepalive", "connect"), default="keepalive")
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before the measured ones")
    p.add_argument("--slow", type=int, default=0, help="slow connections (a byte of a head at a time)")
    p.add_argument("--slow-interval", type=float, default=0.5, help="seconds between a slow client's bytes")
    a = p.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(main_async(a))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
