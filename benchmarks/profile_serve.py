"""Where the server's CPU goes under ``http_load.py``: the app of ``rnnkit serve`` (LSTM(64) on 8
features, single-row JSON predicts of 20 timesteps, as ``bench_serve_http.py``) run by uvicorn in
this process under ``cProfile`` while the load generator drives it from a process of its own;
prints the functions with the most own time and the most time below them.

``--empty`` serves an empty ASGI app (a fixed 200 answer) instead: the floor of uvicorn, its
HTTP protocol and the event loop. cProfile inflates small Python functions, so read the shares,
not the absolute times.

    PYTHONPATH=src python benchmarks/profile_serve.py [--seconds 5 --clients 200 --mode keepalive]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from serve_trials import free_port  # noqa: E402

F, H, T = 8, 64, 20
LOAD = Path(__file__).resolve().parent / "http_load.py"


async def empty_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})


#: where a function's own time is counted: the first group whose pattern its file or name holds
GROUPS = [
    ("answer writes (uvicorn's send, transport.write: the TCP stack)", ("_http.py:70(write)",
                                                                         "httptools_impl.py:461(send)")),
    ("answer encode (to_json, orjson.dumps, Starlette's response)", ("orjson.dumps", "tolist", "(to_json)",
                                                                     "(dump_json)", "starlette/responses.py",
                                                                     "(render)")),
    ("request parse (orjson) + checks (as_input)", ("orjson.loads", "_codec.py", "numpy.asarray",
                                                    "ascontiguousarray", "_budget.py", "math.prod",
                                                    "method 'reduce'", "method 'astype'")),
    ("the model (batched call)", ("rnnkit/kernels", "rnnkit/recurrent", "rnnkit/models", "rnnkit/layers",
                                  "_thread.lock", "rnnkit/_", "_servable.py", "_server.py",
                                  "numpy.concatenate")),
    ("batcher (futures, collector)", ("_batcher.py", "create_future", "set_result")),
    ("rnnkit's route (Endpoint, Incoming, read_body, metrics, head timer)", ("serve/_app.py",
                                                                             "serve/_metrics.py",
                                                                             "serve/_http.py")),
    ("uvicorn + httptools (parse, cycle, ASGI messages)", ("uvicorn/",)),
    ("asyncio (tasks, timers)", ("asyncio/", "_asyncio", "uvloop", "_weakrefset", "current_task")),
]


def print_groups(st: pstats.Stats, answered: int, cpu_us: float) -> None:
    """Own time per group of functions, as shares of the profiled total and as µs of the
    unprofiled server CPU per request (the share times that CPU)."""
    sums: dict[str, float] = {}
    total = 0.0
    for (file, line, name), (_, _, tt, _, _) in st.stats.items():  # type: ignore[attr-defined]
        where = f"{file}:{line}({name})" if file != "~" else name
        total += tt
        group = next((g for g, pats in GROUPS if any(p in where for p in pats)), "other")
        sums[group] = sums.get(group, 0.0) + tt
    print(f"own time by group ({answered} requests, {cpu_us:.0f} us of server CPU each unprofiled):")
    for g, t in sorted(sums.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * t / total:5.1f} %  {cpu_us * t / total:6.1f} us  {g}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--mode", choices=("keepalive", "connect"), default="keepalive")
    p.add_argument("--empty", action="store_true")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--no-profile", action="store_true", help="time only (requests/s, server CPU)")
    p.add_argument("--uvicorn", default="{}", help="uvicorn settings to add, as JSON (e.g. "
                                                   "'{\"proxy_headers\": false}')")
    a = p.parse_args(argv)
    import uvicorn

    import rnnkit as rk
    from rnnkit.serve import ServeConfig, app
    from rnnkit.serve._cli import HTTP_PROTOCOL, settle

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
        rk.save_model(model, d / "m.safetensors")
        x = np.random.default_rng(1).standard_normal((1, T, F)).astype(np.float32)
        (d / "body.json").write_text(json.dumps({"x": x.tolist()}))
        application: Any = empty_app if a.empty else app(str(d / "m.safetensors"), ServeConfig())
        settle()
        port = free_port()
        config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning",
                                http=HTTP_PROTOCOL, access_log=False, lifespan="auto",
                                **json.loads(a.uvicorn))
        server = uvicorn.Server(config)
        prof = cProfile.Profile()  # profiles the thread that enables it: the event loop's
        result: dict[str, Any] = {}
        loops: list[asyncio.AbstractEventLoop] = []

        def on_loop(fn: Any) -> None:
            if not a.no_profile:
                loops[0].call_soon_threadsafe(fn)

        def drive() -> None:
            while not server.started:
                time.sleep(0.05)
            cmd = [sys.executable, str(LOAD), "--port", str(port), "--body", str(d / "body.json"),
                   "--mode", a.mode, "--clients", str(a.clients), "--seconds", str(a.seconds)]
            with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as gen:
                assert gen.stdout is not None
                c0 = 0.0
                for line in iter(gen.stdout.readline, ""):
                    if line.strip() == "measuring":
                        c0 = time.process_time()
                        on_loop(prof.enable)
                    elif line.strip() == "measured":
                        result["server_cpu_s"] = time.process_time() - c0
                        on_loop(prof.disable)
                    elif line.startswith("{"):
                        result.update(json.loads(line))
            server.should_exit = True

        async def serve() -> None:
            loops.append(asyncio.get_running_loop())
            await server.serve()

        t = threading.Thread(target=drive, daemon=True)
        t.start()
        import uvloop

        uvloop.run(serve())
        t.join()
    answered = max(1, int(result.get("answered", 1)))
    print(json.dumps({k: result[k] for k in ("requests_per_s", "p50_ms", "p99_ms", "non_200", "errors")
                      if k in result} | {"server_cpu_us_per_request":
                                         round(1e6 * result.get("server_cpu_s", 0) / answered),
                                         "load_average_1m": os.getloadavg()[0]}))
    if not a.no_profile:
        st = pstats.Stats(prof)
        print_groups(st, answered, result.get("server_cpu_s", 0.0) * 1e6 / answered)
        st.sort_stats("tottime").print_stats(a.top)
        st.sort_stats("cumulative").print_stats(a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
