"""A stream's WebSocket step in the ASGI app alone, no sockets, no uvicorn: N streams (LSTM(64) on
16 features, float32, as ``bench_serve.py``), each a WebSocket whose ``receive`` / ``send`` are
in-memory queues; a round puts one binary step in every socket's queue and waits for every
answer. Prints the app's CPU per step (this process's CPU time / steps), medians of interleaved
rounds, for the fast path (:class:`rnnkit.serve._ws.StepPool`) and the general path
(``Server.step`` through the micro-batcher; ``StreamSocket.fast = False``), and the parts of a
fast-path step timed alone.

    PYTHONPATH=src python benchmarks/bench_ws_app.py [--streams 200 --rounds 40 --repeats 7]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import struct
import sys
import time
from typing import Any

import numpy as np

F, H = 16, 64


class Socket:
    """One WebSocket as the app sees it."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.inbox.put_nowait({"type": "websocket.connect"})

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send(self, msg: dict[str, Any]) -> None:
        self.sent.put_nowait(msg)


async def run(a: argparse.Namespace) -> dict[str, list[float]]:
    import rnnkit as rk
    from rnnkit.serve import Servable, ServeConfig
    from rnnkit.serve._server import Server
    from rnnkit.serve._ws import StreamSocket

    model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
    server = Server(Servable(model), ServeConfig(max_streams=2 * a.streams + 10, max_wait_ms=a.max_wait_ms))
    x = np.random.default_rng(0).standard_normal(F).astype(np.float32).tobytes()
    out: dict[str, list[float]] = {"fast": [], "general": []}
    async with server.lifespan():
        apps = {"fast": StreamSocket(server), "general": StreamSocket(server)}
        apps["general"].fast = False
        socks: dict[str, list[Socket]] = {}
        seqs = {"fast": 0, "general": 0}
        tasks = []
        for name, app in apps.items():
            socks[name] = [Socket() for _ in range(a.streams)]
            for s in socks[name]:
                sid = (await server.create()).id
                tasks.append(asyncio.create_task(app({"path": f"/v1/streams/{sid}/ws"}, s.receive, s.send)))
                await s.sent.get()

        async def round_(name: str) -> None:
            seqs[name] += 1
            msg = {"type": "websocket.receive", "bytes": struct.pack("<Q", seqs[name]) + x}
            for s in socks[name]:
                s.inbox.put_nowait(msg)
            for s in socks[name]:
                m = await s.sent.get()
                assert "bytes" in m, m

        for name in apps:  # warm-up
            for _ in range(3):
                await round_(name)
        for _ in range(a.repeats):
            for name in apps:
                c0 = time.process_time()
                for _ in range(a.rounds):
                    await round_(name)
                out[name].append(1e6 * (time.process_time() - c0) / (a.rounds * a.streams))
        for ss in socks.values():
            for s in ss:
                s.inbox.put_nowait({"type": "websocket.disconnect"})
        await asyncio.gather(*tasks)
    return out


def parts(streams: int) -> dict[str, float]:
    """µs per step of the pieces of a fast-path step, each timed alone (best of 5)."""
    import rnnkit as rk
    from rnnkit.serve import Servable

    model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
    plan = Servable(model).streams
    assert plan is not None
    xs = np.random.default_rng(0).standard_normal((streams, 1, F)).astype(np.float32)
    states = [plan.zero() for _ in range(streams)]
    st = plan.stack(states)

    def best(fn: Any, per: int, n: int = 20) -> float:
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            ts.append((time.perf_counter() - t0) / (n * per))
        return 1e6 * min(ts)

    x1 = xs[0]
    return {
        "digest (sha256 of the input)": best(lambda: hashlib.sha256(repr(x1.shape).encode() + x1.tobytes())
                                             .hexdigest(), 1, 2000),
        "finiteness, per step in a batch": best(lambda: np.isfinite(xs.reshape(streams, -1)).all(axis=1),
                                                streams),
        "stack the inputs (np.stack)": best(lambda: np.stack(list(xs)), streams),
        "gather the states (plan.stack)": best(lambda: plan.stack(states), streams),
        "the batched step (plan.step)": best(lambda: plan.step(xs, st), streams),
        "scatter the states (plan.split)": best(lambda: plan.split(st, streams), streams),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--max-wait-ms", type=float, default=2.0)
    a = p.parse_args(argv)
    from rnnkit.serve._cli import set_kernel_threads

    set_kernel_threads(1)  # rnnkit serve's default
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    out = asyncio.run(run(a))
    print(f"{a.streams} streams, {a.rounds} rounds x {a.repeats} (interleaved), load average "
          f"{os.getloadavg()[0]:.1f}: app CPU per step, median (min..max)")
    for name, v in out.items():
        print(f"  {name:<8} {statistics.median(v):6.1f} us  ({min(v):.1f}..{max(v):.1f})")
    print("parts, us per step:")
    for k, v in parts(a.streams).items():
        print(f"  {v:6.2f}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
