"""``rnnkit serve`` under load, on loopback, bounded in time (about 2 minutes by default).

The model: LSTM(64) on 16 features (float32), in an rnnkit model file and, with the same
weights, in a ``torch.nn.LSTM`` state dict. Three servers, one at a time, each a child process
on a free 127.0.0.1 port, driven from this process:

- ``rnnkit batched``: ``rnnkit serve`` with micro-batching (``--max-wait-ms``, default 2).
- ``rnnkit unbatched``: the same server with ``--max-rows 1`` (every request its own call).
- ``torch per request``: a plain FastAPI (Starlette when FastAPI is missing) app on uvicorn that
  keeps each stream's ``(h, c)`` in a dict and calls ``torch.nn.LSTM`` once per request.

Loads (closed loop: each client sends its next request when the last is answered):

- ``streams``: N streams (default 500), one WebSocket each, one timestep per message (binary
  frames for rnnkit: 8-byte seq + 16 float32; JSON for the torch app). Throughput in steps/s,
  latency p50 / p99 as the client sees it.
- ``streams @ half``: the same streams paced to half the peak throughput just measured.
- ``predict``: K clients (default 32) each POSTing one sequence of 32 timesteps (JSON).

For rnnkit the server's own metrics then say where a step's time goes: in the server (message
parsed to answer sent), waiting in the batcher, and the batched call (kernel; plus the commit
with ``--state-db``). The rest of the client's latency is transport and the client itself.

    python benchmarks/bench_serve.py                      # the table
    python benchmarks/bench_serve.py --streams 100 --seconds 3

The clients run in this process and share the cores with the server: on a 2-core machine the
numbers are the two together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from serve_trials import ServerProcess  # noqa: E402

F, H, T_PREDICT = 16, 64, 32

TORCH_APP = r'''
import json, os, torch
from safetensors.torch import load_file
try:
    from fastapi import FastAPI, WebSocket
    app, kind = FastAPI(), "FastAPI"
    route, ws_route = app.post, app.websocket
except ImportError:
    from starlette.applications import Starlette
    from starlette.websockets import WebSocket
    app, kind = Starlette(), "Starlette"
    route = lambda p: (lambda f: (app.add_route(p, f, methods=["POST"]), f)[1])
    ws_route = lambda p: (lambda f: (app.add_websocket_route(p, f), f)[1])
from starlette.requests import Request
from starlette.responses import JSONResponse
torch.set_num_threads(1)  # one thread per call: the usual setting for a per-request server
lstm = torch.nn.LSTM(%(F)d, %(H)d, batch_first=True)
lstm.load_state_dict(load_file(os.environ["TORCH_WEIGHTS"]))
lstm.eval()
streams = {}

@route("/v1/predict")
async def predict(request: Request):
    x = torch.tensor(json.loads(await request.body())["x"], dtype=torch.float32)
    with torch.inference_mode():
        out, _ = lstm(x)
    return JSONResponse({"outputs": out[:, -1].tolist()})

@ws_route("/ws/{sid}")
async def ws(websocket: WebSocket):
    await websocket.accept()
    sid = websocket.path_params["sid"]
    while True:
        try:
            msg = json.loads(await websocket.receive_text())
        except Exception:
            return
        with torch.inference_mode():
            x = torch.tensor(msg["x"], dtype=torch.float32)[None]
            out, state = lstm(x, streams.get(sid))
        streams[sid] = state
        await websocket.send_text(json.dumps({"seq": msg["seq"], "outputs": out[0].tolist()}))
'''


def _pcts(lat: list[float]) -> tuple[float, float]:
    a = np.asarray(lat) * 1000.0
    return (float(np.percentile(a, 50)), float(np.percentile(a, 99))) if a.size else (float("nan"),) * 2


SEQS: dict[str, int] = {}  # each stream's last step, across the runs


async def _streams(url: str, ids: list[str], seconds: float, rate: float | None,
                   binary: bool) -> dict[str, Any]:
    """Every stream steps for ``seconds`` (paced to ``rate`` steps/s in all when given)."""
    from websockets.asyncio.client import connect

    lat: list[float] = []
    counts = [0]
    start_evt = asyncio.Event()
    x = np.random.default_rng(0).standard_normal((1, F)).astype(np.float32)
    frame_x, json_x = x.tobytes(), x.tolist()

    async def one(sid: str) -> None:
        ws_url = url.replace("http", "ws") + (f"/v1/streams/{sid}/ws" if binary else f"/ws/{sid}")
        async with connect(ws_url, max_size=None, open_timeout=60, ping_interval=None,
                           compression=None) as ws:
            seq = SEQS.get(sid, 0)
            await start_evt.wait()
            interval = len(ids) / rate if rate else 0.0
            nxt = time.perf_counter() + random.random() * interval
            end = t_end[0]
            while time.perf_counter() < end:
                if interval:
                    delay = nxt - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    nxt += interval
                seq += 1
                t0 = time.perf_counter()
                await ws.send(struct.pack("<Q", seq) + frame_x if binary
                              else json.dumps({"seq": seq, "x": json_x}))
                reply = await ws.recv()
                if binary and isinstance(reply, str):
                    raise RuntimeError(reply[:300])
                lat.append(time.perf_counter() - t0)
                counts[0] += 1
                SEQS[sid] = seq

    t_end = [0.0]
    tasks = [asyncio.ensure_future(one(s)) for s in ids]
    await asyncio.sleep(min(10.0, 1.0 + len(ids) / 200))  # the sockets open
    t_end[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start_evt.set()
    errs = [r for r in await asyncio.gather(*tasks, return_exceptions=True)
            if isinstance(r, BaseException)]
    wall = time.perf_counter() - t0
    p50, p99 = _pcts(lat)
    return {"throughput": counts[0] / wall, "p50_ms": p50, "p99_ms": p99, "errors": len(errs)}


async def _predicts(url: str, clients: int, seconds: float) -> dict[str, Any]:
    import httpx

    x = np.random.default_rng(1).standard_normal((1, T_PREDICT, F)).round(4)
    body = json.dumps({"x": x.tolist()})
    lat: list[float] = []
    end = time.perf_counter() + seconds
    errors = [0]

    async def one(c: Any) -> None:
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            r = await c.post("/v1/predict", content=body, headers={"content-type": "application/json"})
            if r.status_code != 200:
                errors[0] += 1
            lat.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*[one(c) for _ in range(clients)])
        wall = time.perf_counter() - t0
    p50, p99 = _pcts(lat)
    return {"throughput": len(lat) / wall, "p50_ms": p50, "p99_ms": p99, "errors": errors[0]}


def _metric(text: str, name: str, label: str) -> float:
    for line in text.splitlines():
        if line.startswith(name) and label in line:
            return float(line.split()[-1])
    return float("nan")


def _breakdown(url: str) -> dict[str, float]:
    import httpx

    t = httpx.get(url + "/metrics", timeout=30).text
    n = _metric(t, "rnnkit_serve_request_duration_seconds_count", 'route="ws_step"')
    calls = _metric(t, "rnnkit_serve_compute_seconds_count", 'kind="step"')
    return {
        "server_ms": 1000 * _metric(t, "rnnkit_serve_request_duration_seconds_sum", 'route="ws_step"') / n,
        "parse_ms": 1000 * _metric(t, "rnnkit_serve_parse_seconds_sum", 'route="ws_step"') / n,
        "commit_ms": 1000 * _metric(t, "rnnkit_serve_commit_seconds_sum", "") / calls,
        "batch_wait_ms": 1000 * _metric(t, "rnnkit_serve_batch_wait_seconds_sum", 'kind="step"') / n,
        "batched_call_ms": 1000 * _metric(t, "rnnkit_serve_compute_seconds_sum", 'kind="step"') / calls,
        "steps_per_call": _metric(t, "rnnkit_serve_batch_rows_sum", 'kind="step"') / calls,
    }


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def run_server(name: str, server: ServerProcess, args: argparse.Namespace, binary: bool) -> dict[str, Any]:
    import httpx

    server.start()
    try:
        n = args.streams
        if binary:
            ids = [httpx.post(server.url + "/v1/streams", timeout=30).json()["id"] for _ in range(n)]
        else:
            ids = [f"s{i}" for i in range(n)]
        asyncio.run(_streams(server.url, ids[: min(n, 50)], 1.0, None, binary))  # warm up
        if binary:
            httpx.get(server.url + "/metrics")
        assert server.proc is not None
        cpu0 = _cpu_s(server.proc.pid)
        peak = asyncio.run(_streams(server.url, ids, args.seconds, None, binary))
        peak["server_cpu_us_per_step"] = 1e6 * (_cpu_s(server.proc.pid) - cpu0) / max(
            1.0, peak["throughput"] * args.seconds)
        where = _breakdown(server.url) if binary else {}
        half = asyncio.run(_streams(server.url, ids, args.seconds, peak["throughput"] / 2, binary))
        pred = asyncio.run(_predicts(server.url, args.clients, args.seconds))
    finally:
        server.stop()
    return {"server": name, "streams": peak, "streams_half": half, "predict": pred, "where": where}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=500)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--max-wait-ms", type=float, default=2.0)
    p.add_argument("--state-db", action="store_true", help="rnnkit batched with --state-db too (FULL)")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--json", default=None, metavar="FILE", help="write the results here too")
    a = p.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    import rnnkit as rk

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
        rk.save_model(model, d / "m.safetensors")
        rk.save_torch_safetensors(model.layers[0], d / "torch.safetensors")
        common = ["--max-streams", str(a.streams + 10), "--max-wait-ms", str(a.max_wait_ms)]
        configs: list[tuple[str, list[str]]] = [("rnnkit batched", common),
                                                ("rnnkit unbatched", [*common, "--max-rows", "1"])]
        if a.state_db:
            configs.insert(1, ("rnnkit batched + SQLite FULL", [*common, "--state-db", str(d / "s.db")]))
        for name, extra in configs:
            rows.append(run_server(name, ServerProcess(d / "m.safetensors", extra, d / "log"), a, True))
        if not a.no_torch:
            (d / "torch_app.py").write_text(TORCH_APP % {"F": F, "H": H})
            rows.append(run_server("torch per request", TorchServer(d), a, False))
    _print(rows, a)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


class TorchServer(ServerProcess):
    """The torch-per-request app (``torch_app.py`` in ``folder``) on uvicorn."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder / "torch.safetensors", [], folder / "log")
        self.folder = folder

    def start(self, timeout: float = 120.0) -> None:
        import subprocess

        import httpx

        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "--app-dir", str(self.folder), "torch_app:app", "--port",
                 str(self.port), "--log-level", "warning", "--no-access-log"],
                env={**os.environ, "TORCH_WEIGHTS": str(self.model)}, stdout=out, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the torch app exited: {self.log.read_text()[-2000:]}")
            try:
                httpx.get(self.url + "/", timeout=1.0)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("the torch app did not start")


def _print(rows: list[dict[str, Any]], a: argparse.Namespace) -> None:
    print(f"\n{a.streams} streams (1 timestep of {F} per step, WebSocket), {a.clients} predict clients "
          f"(1 x {T_PREDICT} x {F}, JSON), LSTM({H}), {a.seconds:g} s each, loopback, clients in this "
          f"process")
    head = f"{'server':<30}{'steps/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'@half p50':>11}{'@half p99':>11}" \
           f"{'predict/s':>11}{'p50 ms':>9}{'p99 ms':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        s, h, q = r["streams"], r["streams_half"], r["predict"]
        print(f"{r['server']:<30}{s['throughput']:>10.0f}{s['p50_ms']:>9.1f}{s['p99_ms']:>9.1f}"
              f"{h['p50_ms']:>11.1f}{h['p99_ms']:>11.1f}{q['throughput']:>11.0f}{q['p50_ms']:>9.1f}"
              f"{q['p99_ms']:>9.1f}")
    for r in rows:
        print(f"{r['server']}: server CPU per step at peak {r['streams']['server_cpu_us_per_step']:.0f} us")
    for r in rows:
        if r["where"]:
            w = r["where"]
            print(f"{r['server']}: per step in the server {w['server_ms']:.2f} ms (message in, answer out): "
                  f"reading and checking it {w['parse_ms']:.3f} ms, waiting in the batcher "
                  f"{w['batch_wait_ms']:.2f} ms; one batched call {w['batched_call_ms']:.2f} ms for "
                  f"{w['steps_per_call']:.1f} steps, its commit {w['commit_ms']:.2f} ms; the rest is the "
                  f"event loop's queue (lock, answer, socket writes)")
    errs = {r["server"]: (r["streams"]["errors"], r["streams_half"]["errors"], r["predict"]["errors"])
            for r in rows}
    print("errors (streams, @half, predict):", errs)


if __name__ == "__main__":
    sys.exit(main())
