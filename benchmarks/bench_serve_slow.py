"""Plain HTTP clients against ``rnnkit serve`` while slow clients trickle bytes at it.

Starts ``rnnkit serve`` (an LSTM(64) -> Dense(4) model on 16 features) on a free loopback port,
then runs two phases of ``--seconds`` each from one load process:

- ``plain``: ``--clients`` kept-alive HTTP/1.1 connections, each in a closed loop of
  ``POST /v1/predict`` (one sequence of ``--timesteps`` x 16 float32, JSON);
- ``plain+slow``: the same, plus ``--slow`` connections that each send one byte of a request
  head every ``--slow-interval`` seconds, reconnecting whenever the server closes them (its
  ``--header-timeout-s``), so that they stay present for the whole phase.

Prints one JSON line per phase: requests answered, requests/s, latency p50 / p99 / max (ms) of
the plain clients, non-200 answers, and for the slow phase how many slow connections the server
closed. Loopback only; everything stops by itself (the server is stopped at the end).

    PYTHONPATH=src python benchmarks/bench_serve_slow.py [--clients 200 --slow 200 --seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from serve_trials import F, ServerProcess, write_model  # noqa: E402


async def plain_client(port: int, body: bytes, stop: float, lat: list[float], bad: list[int]) -> None:
    """Closed-loop predicts on one kept-alive connection until ``stop`` (monotonic)."""
    head = (f"POST /v1/predict HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            writer.write(head + body)
            status_line = await reader.readuntil(b"\r\n")
            length = 0
            while True:
                line = await reader.readuntil(b"\r\n")
                if line == b"\r\n":
                    break
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            if status_line.split()[1] != b"200":
                bad.append(int(status_line.split()[1]))
    finally:
        writer.close()


async def slow_client(port: int, stop: float, interval: float, closed: list[int]) -> None:
    """A request head, one byte every ``interval`` s; a new connection whenever it is closed."""
    head = b"POST /v1/predict HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    while time.monotonic() < stop:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for i in range(len(head)):
                if time.monotonic() >= stop:
                    return
                writer.write(head[i:i + 1])
                try:
                    data = await asyncio.wait_for(reader.read(4096), interval)
                except asyncio.TimeoutError:
                    continue
                if data or reader.at_eof():
                    closed[0] += 1
                    break
        except (ConnectionError, OSError):
            closed[0] += 1
        finally:
            writer.close()


async def phase(port: int, a: argparse.Namespace, slow: int) -> dict[str, object]:
    x = np.random.default_rng(0).standard_normal((1, a.timesteps, F)).astype(np.float32)
    body = json.dumps({"x": x.tolist()}).encode()
    lat: list[float] = []
    bad: list[int] = []
    closed = [0]
    stop = time.monotonic() + a.seconds
    tasks = [asyncio.create_task(slow_client(port, stop, a.slow_interval, closed)) for _ in range(slow)]
    await asyncio.sleep(0.5 if slow else 0.0)  # the slow ones in place first
    stop = time.monotonic() + a.seconds
    t0 = time.perf_counter()
    tasks += [asyncio.create_task(plain_client(port, body, stop, lat, bad)) for _ in range(a.clients)]
    await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.perf_counter() - t0
    ms = np.array(lat) * 1e3
    return {"phase": "plain+slow" if slow else "plain", "clients": a.clients, "slow": slow,
            "answered": len(lat), "requests_per_s": round(len(lat) / wall, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 1) if len(ms) else None,
            "p99_ms": round(float(np.percentile(ms, 99)), 1) if len(ms) else None,
            "max_ms": round(float(ms.max()), 1) if len(ms) else None,
            "non_200": len(bad), "slow_connections_closed_by_server": closed[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--slow", type=int, default=200)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--timesteps", type=int, default=8)
    p.add_argument("--slow-interval", type=float, default=0.5, help="seconds between a slow client's bytes")
    p.add_argument("--header-timeout-s", type=float, default=None, help="the server's (default: its own)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = write_model(Path(tmp) / "m.safetensors")
        extra = [] if a.header_timeout_s is None else ["--header-timeout-s", str(a.header_timeout_s)]
        server = ServerProcess(model, extra, Path(tmp) / "log")
        server.start()
        try:
            for slow in (0, a.slow):
                print(json.dumps(asyncio.run(phase(server.port, a, slow))), flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
