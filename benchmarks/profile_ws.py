"""Where the server's CPU goes for a stream's WebSocket step: the app of ``rnnkit serve`` (LSTM(64)
on 16 features, float32, as ``bench_serve.py``) run by uvicorn in this process while
``serve_load.py`` drives N streams in a closed loop (one binary timestep a message) from a
process of its own. Prints steps/s, the server's CPU per step (this process's CPU over the
measured seconds / steps answered) and, unless ``--no-profile``, cProfile's own time by group.

``--empty`` serves an echo WebSocket app instead (each binary message answered with its first 8
bytes and 256 zero bytes, as many as LSTM(64)'s float32 output): the floor of uvicorn, its
WebSocket protocol and the event loop. cProfile inflates small Python functions: read the
shares, not the absolute times.

    PYTHONPATH=src python benchmarks/profile_ws.py [--streams 200 --seconds 4 --ws websockets-sansio]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from serve_trials import free_port  # noqa: E402

F, H = 16, 64
LOAD = Path(__file__).resolve().parent / "serve_load.py"


async def empty_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif m["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"id": "x"}'})
        return
    await receive()
    await send({"type": "websocket.accept"})
    zeros = bytes(4 * H + 1)
    while True:
        m = await receive()
        if m["type"] != "websocket.receive":
            return
        await send({"type": "websocket.send", "bytes": m["bytes"][:8] + zeros})


GROUPS = [
    ("the model (batched step call: stack, kernel, split)", (
        "rnnkit/kernels", "rnnkit/recurrent", "rnnkit/models", "rnnkit/layers", "_stepper.py", "rnnkit/_",
        "numpy.concatenate", "numpy.array", "method 'copy'", "_compute_steps", "moveaxis", "numpy.asarray")),
    ("frame parse + decode + checks (_ws binary_step)", ("binary_step", "frombuffer", "isfinite", "as_seq",
                                                         "method 'all'", "unpack_from", "method 'reshape'")),
    ("encode the answer (pack, tobytes)", ("tobytes", "_struct.pack")),
    ("server.step (lock, digest, seq checks, submit)", ("_server.py", "sha256", "hexdigest", "locks.py",
                                                        "_store.py", "(digest)", "method 'encode'")),
    ("batcher (jobs, futures, collector, commit)", ("_batcher.py", "create_future", "set_result")),
    ("_ws loop + metrics", ("serve/_ws.py", "serve/_metrics.py", "perf_counter")),
    ("uvicorn WebSocket protocol (frames in/out, ASGI messages, queue)", ("uvicorn/", "websockets/")),
    ("asyncio (tasks, futures, transport writes)", ("asyncio/", "_asyncio", "uvloop", "_weakrefset",
                                                    "current_task", "write")),
]


def print_groups(st: pstats.Stats, steps: int, cpu_us: float) -> None:
    """Own time per group of functions, as shares of the profiled total and as µs of the
    unprofiled server CPU per step (the share times that CPU)."""
    sums: dict[str, float] = {}
    total = 0.0
    for (file, line, name), (_, _, tt, _, _) in st.stats.items():  # type: ignore[attr-defined]
        where = f"{file}:{line}({name})" if file != "~" else name
        total += tt
        group = next((g for g, pats in GROUPS if any(p in where for p in pats)), "other")
        sums[group] = sums.get(group, 0.0) + tt
    print(f"own time by group ({steps} steps, {cpu_us:.1f} us of server CPU each):")
    for g, t in sorted(sums.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * t / total:5.1f} %  {cpu_us * t / total:6.1f} us  {g}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--empty", action="store_true")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--no-profile", action="store_true", help="time only (steps/s, server CPU)")
    p.add_argument("--ws", default="auto", help="uvicorn's WebSocket implementation")
    p.add_argument("--other", action="store_true", help="list the functions of the group 'other'")
    p.add_argument("--max-wait-ms", type=float, default=2.0)
    p.add_argument("--no-ws-fast-path", action="store_true",
                   help="every message through the ASGI app (ServeConfig.ws_fast_path=False)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the summary line as JSON")
    a = p.parse_args(argv)
    import httpx
    import uvicorn

    import rnnkit as rk
    from rnnkit.serve import ServeConfig, app
    from rnnkit.serve._cli import HTTP_PROTOCOL, set_kernel_threads, settle, ws_protocol

    set_kernel_threads(1)  # rnnkit serve's default

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
        rk.save_model(model, d / "m.safetensors")
        cfg = ServeConfig(max_streams=a.streams + 10, max_wait_ms=a.max_wait_ms,
                          ws_fast_path=not a.no_ws_fast_path)
        application: Any = empty_app if a.empty else app(str(d / "m.safetensors"), cfg)
        settle()
        port = free_port()
        config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning",
                                http=HTTP_PROTOCOL, access_log=False, lifespan="on",
                                ws=ws_protocol(a.ws, cfg), ws_per_message_deflate=False)
        server = uvicorn.Server(config)
        prof = cProfile.Profile()
        result: dict[str, Any] = {}
        loops: list[asyncio.AbstractEventLoop] = []

        def on_loop(fn: Any) -> None:
            if not a.no_profile:
                loops[0].call_soon_threadsafe(fn)

        def drive() -> None:
            while not server.started:
                time.sleep(0.05)
            url = f"http://127.0.0.1:{port}"
            ids_ = [str(i) if a.empty else httpx.post(url + "/v1/streams", timeout=30).json()["id"]
                    for i in range(a.streams)]
            paths = [f"/v1/streams/{i}/ws" for i in ids_]
            ids = d / "ids.json"
            seqs: dict[str, int] = {}
            for seconds, measure in ((1.0, False), (a.seconds, True)):  # a warm-up run, then the measured one
                ids.write_text(json.dumps({"paths": paths, "seqs": seqs}))
                cmd = [sys.executable, str(LOAD), "--port", str(port), "--ids", str(ids), "--seconds",
                       str(seconds), "--features", str(F), "--handshake"]
                with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as gen:
                    assert gen.stdin is not None and gen.stdout is not None
                    assert gen.stdout.readline().strip() == "open"
                    c0 = time.process_time()
                    t0 = os.times()
                    if measure:
                        on_loop(prof.enable)
                    gen.stdin.write("go\n")
                    gen.stdin.flush()
                    line = gen.stdout.readline()
                    cpu = time.process_time() - c0
                    t1 = os.times()
                    if measure:
                        on_loop(prof.disable)
                    gen.stdin.write("close\n")
                    gen.stdin.flush()
                out = json.loads(line)
                seqs = out.pop("seqs")
                if measure:
                    result.update(out, server_cpu_s=cpu, server_sys_s=t1.system - t0.system)
            server.should_exit = True

        async def serve() -> None:
            loops.append(asyncio.get_running_loop())
            await server.serve()

        t = threading.Thread(target=drive, daemon=True)
        t.start()
        import uvloop

        uvloop.run(serve())
        t.join()
    steps = max(1, int(result.get("steps", 1)))
    cpu_us = 1e6 * result.get("server_cpu_s", 0.0) / steps
    summary = {"steps_per_s": round(result.get("throughput", 0.0)), "p50_ms": result.get("p50_ms"),
               "p99_ms": result.get("p99_ms"), "errors": result.get("errors"),
               "server_cpu_us_per_step": round(cpu_us, 1),
               "of_which_system_us": round(1e6 * result.get("server_sys_s", 0.0) / steps, 1),
               "load_average_1m": os.getloadavg()[0]}
    print(json.dumps(summary))
    if a.json:
        Path(a.json + ".tmp").write_text(json.dumps({"streams": a.streams, "seconds": a.seconds,
                                                     "ws_fast_path": not a.no_ws_fast_path, **summary}))
        os.replace(a.json + ".tmp", a.json)
    if not a.no_profile:
        st = pstats.Stats(prof)
        print_groups(st, steps, cpu_us)
        if a.other:
            for (file, line, name), (_, nc, tt, _, _) in sorted(st.stats.items(),  # type: ignore[attr-defined]
                                                                key=lambda kv: -kv[1][2]):
                where = f"{file}:{line}({name})" if file != "~" else name
                if not any(pat in where for _, pats in GROUPS for pat in pats):
                    print(f"  other: {tt:.3f} s {nc} calls {where}")
        st.sort_stats("tottime").print_stats(a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
