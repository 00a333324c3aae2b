"""What one WebSocket step costs ``rnnkit serve``'s process, without sockets: the server's HTTP
protocol objects (``HeadTimeoutProtocol``, one per simulated connection) are fed a WebSocket
handshake, upgrade to uvicorn's WebSocket protocol, and are then fed binary step frames directly;
the answers are taken from a transport that records them, on one event loop, so the CPU time per
step is the server's own work (frame parsing, the protocol, the ASGI app or not, the step pool,
the model, the answer's frame) and nothing of the kernel's TCP stack or of a load generator
sharing the cores.

The model and step are ``profile_ws.py``'s: LSTM(64) on 16 features, one float32 timestep a
message. ``--streams`` closed-loop connections, one stream each, send their next step as soon as
its answer is written. ``fast`` is ``rnnkit serve``'s default (the steps answered inside the
WebSocket protocol, :class:`rnnkit.serve._wsconn.StreamWSProtocol`); ``app`` is
``--no-ws-fast-path`` (uvicorn's ``websockets-sansio`` protocol, every message through the ASGI
app). They run interleaved, ``--rounds`` times each; each line gives CPU us per step (process
time), steps per CPU second and mean steps per batched call. With ``--profile`` the last round of
each runs under cProfile (process time) and its top functions are printed.

    PYTHONPATH=src python benchmarks/bench_ws_protocol.py [--streams 200 --steps 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import struct
import sys
import time
from typing import Any

import numpy as np
from bench_serve_protocol import interleave

F, H = 16, 64
HANDSHAKE = (b"GET /v1/streams/%s/ws HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\n"
             b"connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             b"sec-websocket-version: 13\r\n\r\n")


class Transport(asyncio.Transport):
    """A connection's transport: takes the handshake's answer, then counts the answers written
    and sends the connection's next step."""

    def __init__(self, sim: Sim) -> None:
        super().__init__()
        self.sim = sim
        self.protocol: Any = None
        self.closing = False
        self.open = False
        self.seq = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def next_step(self) -> None:
        self.seq += 1
        self.sim.sent += 1
        self.sim.loop.call_soon(self.protocol.data_received, self.sim.head + struct.pack("<Q", self.seq)
                                + self.sim.x)

    def write(self, data: Any) -> None:
        if not self.open:
            assert bytes(data[:12]) == b"HTTP/1.1 101", bytes(data[:200])
            self.open = True
            self.sim.opened += 1
            return
        assert data[0] == 0x82, bytes(data[:200])
        sim = self.sim
        sim.answered += 1
        if sim.sent < sim.total:
            self.next_step()
        elif sim.answered >= sim.total:
            sim.done.set_result(None)

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

    def get_write_buffer_size(self) -> int:
        return 0


class Sim:
    """One run: ``total`` steps over the connections."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent = self.answered = self.opened = 0
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()
        x = np.random.default_rng(0).standard_normal(F).astype(np.float32).tobytes()
        self.x = x
        self.head = bytes((0x82, 0x80 | (8 + len(x)))) + b"\0\0\0\0"  # masked with a key of zeros


async def run(application: Any, ws: Any, streams: int, total: int,
              profile: cProfile.Profile | None) -> dict[str, float]:
    """``total`` steps over ``streams`` new connections (a new stream each) to ``application``."""
    import uvicorn
    from uvicorn.server import ServerState

    from rnnkit.serve._http import HeadTimeoutProtocol

    config = uvicorn.Config(application, log_level="warning", access_log=False, lifespan="off", ws=ws,
                            ws_per_message_deflate=False, ws_max_size=8 << 20)
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Thu, 01 Jan 2026 00:00:00 GMT"), *config.encoded_headers]
    server = application.state.server
    metrics = server.metrics
    sim = Sim(total)
    transports = []
    for _ in range(streams):
        sid = (await server.create()).id
        p = HeadTimeoutProtocol(config=config, server_state=state, app_state={}, _loop=sim.loop)
        t = Transport(sim)
        t.protocol = p
        p.connection_made(t)
        p.data_received(HANDSHAKE % sid.encode())
        transports.append(t)
    while sim.opened < streams:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)
    n0 = metrics.counter("rnnkit_serve_steps_total")
    calls0 = metrics._hist.get("rnnkit_serve_batch_requests", {}).get((("kind", "step"),), [0.0])[-1]
    c0, w0 = time.process_time(), time.perf_counter()
    if profile is not None:
        profile.enable()
    for t in transports[:min(streams, total)]:
        t.next_step()
    await sim.done
    if profile is not None:
        profile.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    n = metrics.counter("rnnkit_serve_steps_total") - n0
    calls = metrics._hist["rnnkit_serve_batch_requests"][(("kind", "step"),)][-1] - calls0
    for t in transports:
        t.protocol.connection_lost(None)
    await asyncio.sleep(0.01)
    for sid in list(server.store.streams):
        await server.delete(sid)
    assert n == total, (n, total)
    return {"cpu_us_per_step": round(1e6 * cpu / total, 1), "steps_per_cpu_s": round(total / cpu),
            "wall_steps_per_s": round(total / wall), "steps_per_call": round(total / calls, 1)}


async def main_async(a: argparse.Namespace, apps: dict[str, tuple[Any, Any]]) -> None:
    async with contextlib.AsyncExitStack() as stack:
        for application, _ in apps.values():
            await stack.enter_async_context(application.state.server.lifespan())
        for application, ws in apps.values():  # warm-up: the kernels compiled, the caches filled
            await run(application, ws, a.streams, min(a.steps, 2000), None)
        await interleave(list(apps), a.rounds, a.profile,
                         lambda v, prof: run(*apps[v], a.streams, a.steps, prof))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args(argv)
    os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")  # rnnkit serve's default
    import rnnkit as rk
    from rnnkit.serve._cli import settle, ws_protocol
    from rnnkit.serve._limits import ServeConfig

    model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
    apps: dict[str, tuple[Any, Any]] = {}
    for v, on in (("fast", True), ("app", False)):
        cfg = ServeConfig(max_streams=a.streams + 10, ws_fast_path=on)
        apps[v] = (rk.serve.app(model, cfg), ws_protocol("websockets-sansio", cfg))
    settle()
    try:
        import uvloop  # uvicorn's loop when it is installed, as for rnnkit serve
    except ImportError:
        asyncio.run(main_async(a, apps))
    else:
        uvloop.run(main_async(a, apps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
