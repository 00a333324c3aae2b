"""What one ``POST /v1/predict`` costs ``rnnkit serve``'s process, without sockets: the server's
HTTP protocol objects (``HeadTimeoutProtocol``, one per simulated connection) are fed the
requests' bytes directly and their answers taken from a transport that records them, on one
event loop, so the CPU time per request is the server's own work (HTTP parsing, the fast path or
the ASGI app, JSON, checks, batching, the model, the answer) and nothing of the kernel's TCP
stack or of a load generator sharing the cores.

The model and request are ``bench_serve_http.py``'s: LSTM(64) on 8 features, one sequence of 20
timesteps as JSON per request. ``--clients`` closed-loop connections each send their next request
as soon as its answer is written. The fast path (the default server) and ``--no-fast-path`` (every
request through the ASGI app) run interleaved, ``--rounds`` times each; each line gives CPU us
per request (process time), requests per CPU second, and mean requests per batched call. With
``--profile`` the last round of each runs under cProfile (process time) and its top functions
are printed.

    PYTHONPATH=src python benchmarks/bench_serve_protocol.py [--clients 200 --requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

F, H, T = 8, 64, 20


class Transport(asyncio.Transport):
    """A connection's transport: counts the answers written and asks for the next request."""

    def __init__(self, sim: Sim) -> None:
        super().__init__()
        self.sim = sim
        self.protocol: Any = None
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def write(self, data: Any) -> None:
        assert bytes(data[:12]) == b"HTTP/1.1 200", bytes(data[:200])
        self.sim.answered += 1
        if self.sim.sent < self.sim.total:
            self.sim.sent += 1
            self.sim.loop.call_soon(self.protocol.data_received, self.sim.request)
        elif self.sim.answered >= self.sim.total:
            self.sim.done.set_result(None)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_protocol(self) -> Any:
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass


class Sim:
    """One run: ``total`` requests over ``clients`` connections."""

    def __init__(self, request: bytes, total: int) -> None:
        self.request, self.total = request, total
        self.sent = self.answered = 0
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()


async def run(application: Any, request: bytes, clients: int, total: int,
              profile: cProfile.Profile | None) -> dict[str, float]:
    """``total`` requests over ``clients`` new connections to ``application`` (its lifespan
    started)."""
    import uvicorn
    from uvicorn.server import ServerState

    from rnnkit.serve._http import HeadTimeoutProtocol

    config = uvicorn.Config(application, log_level="warning", access_log=False, lifespan="off")
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Thu, 01 Jan 2026 00:00:00 GMT"), *config.encoded_headers]
    metrics = application.state.server.metrics
    sim = Sim(request, total)
    protocols = []
    for _ in range(clients):
        p = HeadTimeoutProtocol(config=config, server_state=state, app_state={}, _loop=sim.loop)
        t = Transport(sim)
        t.protocol = p
        p.connection_made(t)
        protocols.append(p)
    n0 = metrics.counter("rnnkit_serve_requests_total", route="predict", status="200")
    calls0 = metrics._hist.get("rnnkit_serve_batch_requests", {}).get((("kind", "predict"),), [0.0])[-1]
    c0, w0 = time.process_time(), time.perf_counter()
    if profile is not None:
        profile.enable()
    for p in protocols[:min(clients, total)]:
        sim.sent += 1
        sim.loop.call_soon(p.data_received, request)
    await sim.done
    if profile is not None:
        profile.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    n = metrics.counter("rnnkit_serve_requests_total", route="predict", status="200") - n0
    calls = metrics._hist["rnnkit_serve_batch_requests"][(("kind", "predict"),)][-1] - calls0
    for p in protocols:
        p.connection_lost(None)
    assert n == total, (n, total)
    return {"cpu_us_per_request": round(1e6 * cpu / total, 1), "requests_per_cpu_s": round(total / cpu),
            "wall_requests_per_s": round(total / wall), "requests_per_call": round(total / calls, 1)}


async def interleave(names: list[str], rounds: int, profile: bool,
                     run_one: Callable[[str, cProfile.Profile | None], Awaitable[dict[str, float]]]) -> None:
    """``rounds`` rounds of ``run_one(name, profiler)`` over ``names``, the order reversed every
    other round, a JSON line a run; then each name's medians and, with ``profile``, cProfile's
    table of its last round (the profiler given to that run)."""
    results: dict[str, list[dict[str, float]]] = {v: [] for v in names}
    profiles = {v: cProfile.Profile(time.process_time) for v in names}
    for rnd in range(rounds):
        for v in (names if rnd % 2 == 0 else names[::-1]):
            r = await run_one(v, profiles[v] if profile and rnd == rounds - 1 else None)
            results[v].append(r)
            print(json.dumps({"round": rnd, "server": v, **r, "load_average_1m": os.getloadavg()[0]}),
                  flush=True)
    for v, rs in results.items():
        print(json.dumps({"median_of": len(rs), "server": v,
                          **{k: float(np.median([r[k] for r in rs])) for k in rs[0]}}), flush=True)
    if profile:
        for v, prof in profiles.items():
            print(f"--- {v}: the last round, by own time (process time, cProfile's overhead included)")
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)


async def main_async(a: argparse.Namespace, apps: dict[str, Any], request: bytes) -> None:
    async with contextlib.AsyncExitStack() as stack:
        for application in apps.values():
            await stack.enter_async_context(application.state.server.lifespan())
        for v in apps:  # warm-up: the kernels compiled, the caches filled
            await run(apps[v], request, a.clients, min(a.requests, 2000), None)
        await interleave(list(apps), a.rounds, a.profile,
                         lambda v, prof: run(apps[v], request, a.clients, a.requests, prof))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args(argv)
    os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")  # rnnkit serve's default
    import rnnkit as rk
    from rnnkit.serve._cli import settle

    model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
    x = np.random.default_rng(1).standard_normal((1, T, F)).astype(np.float32)
    body = json.dumps({"x": x.tolist()}).encode()
    request = (b"POST /v1/predict HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\n\r\n%s" % (len(body), body))
    apps = {"fast": rk.serve.app(model), "app": rk.serve.app(model, fast_path=False)}
    settle()
    try:
        import uvloop  # uvicorn's loop when it is installed, as for rnnkit serve
    except ImportError:
        asyncio.run(main_async(a, apps, request))
    else:
        uvloop.run(main_async(a, apps, request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
