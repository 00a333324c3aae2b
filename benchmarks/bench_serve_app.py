"""The server's own CPU per predict request, without HTTP: the ASGI app of ``rnnkit serve``
(LSTM(64) on 8 features, as ``bench_serve_http.py``) called directly, ``--concurrent`` requests at
a time (each a single-row JSON body of 20 timesteps, answered through the micro-batcher), on
uvloop. Prints the median over ``--rounds`` of CPU microseconds per request (``time.process_time``)
for the whole app and for its parts alone: the route without the model (a stub returning the
outputs of one prepared call), the JSON parse + checks, and the answer's encoding.

    PYTHONPATH=src python benchmarks/bench_serve_app.py [--requests 4000 --concurrent 40 --rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

F, H, T = 8, 64, 20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--concurrent", type=int, default=40)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--profile", action="store_true", help="cProfile the rounds; print the top functions")
    a = p.parse_args(argv)
    import uvloop

    import rnnkit as rk
    from rnnkit.serve import ServeConfig, app
    from rnnkit.serve._cli import set_kernel_threads
    from rnnkit.serve._codec import as_input, dump_json, parse_json, to_json

    set_kernel_threads(1)  # as rnnkit serve, by default

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.safetensors"
        model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
        rk.save_model(model, path)
        application: Any = app(str(path), ServeConfig())
    x = np.random.default_rng(1).standard_normal((1, T, F)).astype(np.float32)
    body = json.dumps({"x": x.tolist()}).encode()
    want = model.predict(x)
    scope = {"type": "http", "method": "POST", "path": "/v1/predict", "query_string": b"",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode()), (b"user-agent", b"load")]}

    async def one() -> bytes:
        out: list[bytes] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.body":
                out.append(msg["body"])
        await application(dict(scope), receive, send)
        return out[0]

    async def run_app(n: int) -> float:
        c0 = time.process_time()
        for _ in range(n // a.concurrent):
            answers = await asyncio.gather(*[one() for _ in range(a.concurrent)])
        got = np.asarray(json.loads(answers[-1])["outputs"], np.float32)
        assert got.tobytes() == want.tobytes()
        return (time.process_time() - c0) / n * 1e6

    async def lifespan_run() -> dict[str, list[float]]:
        msgs = iter([{"type": "lifespan.startup"}])
        started = asyncio.Event()
        stop = asyncio.Event()

        async def receive() -> dict[str, Any]:
            try:
                return next(msgs)
            except StopIteration:
                await stop.wait()
                return {"type": "lifespan.shutdown"}

        async def send(msg: dict[str, Any]) -> None:
            if msg["type"] == "lifespan.startup.complete":
                started.set()
        task = asyncio.get_running_loop().create_task(application({"type": "lifespan"}, receive, send))
        await started.wait()
        sv = application.state.server.sv
        cfg = application.state.server.cfg
        res: dict[str, list[float]] = {"app": [], "parse+check": [], "encode": []}
        await run_app(a.requests)  # warm-up
        for _ in range(a.rounds):
            res["app"].append(await run_app(a.requests))
            c0 = time.process_time()
            for _ in range(a.requests):
                as_input(parse_json(body)["x"], sv, cfg, "x", stream=False)
            res["parse+check"].append((time.process_time() - c0) / a.requests * 1e6)
            c0 = time.process_time()
            for _ in range(a.requests):
                dump_json({"outputs": to_json([want]), "n_outputs": 1})
            res["encode"].append((time.process_time() - c0) / a.requests * 1e6)
        stop.set()
        await task
        return res

    import cProfile
    import pstats

    prof = cProfile.Profile()
    if a.profile:
        prof.enable()
    res = uvloop.run(lifespan_run())
    if a.profile:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    print(json.dumps({k: round(statistics.median(v), 1) for k, v in res.items()}
                     | {"rounds": a.rounds, "load_average_1m": os.getloadavg()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
