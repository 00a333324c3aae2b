"""``rnnkit serve`` under load, on loopback, bounded in time (about 2 minutes by default).

The model: LSTM(64) on 16 features (float32), in an rnnkit model file and, with the same
weights, in a ``torch.nn.LSTM`` state dict. Three servers, one at a time, each a child process
on a free 127.0.0.1 port, driven by the same clients:

- ``rnnkit batched``: ``rnnkit serve`` with micro-batching (``--max-wait-ms``, default 2).
- ``rnnkit unbatched``: the same server with ``--max-rows 1`` (every request its own call).
- ``torch per request``: a plain FastAPI (Starlette when FastAPI is missing) app on uvicorn that
  keeps each stream's ``(h, c)`` in a dict and calls ``torch.nn.LSTM`` once per request.

Loads (closed loop: each client sends its next request when the last is answered):

- ``streams``: N streams (default 500), one WebSocket each, one timestep per message (the same
  binary frames for every server: 8-byte seq + 16 float32), from ``serve_load.py`` in a process
  of its own (a lean RFC 6455 client: a few microseconds a step). Throughput in steps/s, latency
  p50 / p99 as the client sees it, and the server process's CPU time per step (user + system,
  over the measured steps only): on a loaded machine the steadiest of the numbers.
- ``streams @ half``: the same streams paced to half the peak throughput just measured.
- ``predict``: K clients (default 32) each POSTing one sequence of 32 timesteps (JSON).

For rnnkit the server's own metrics then say where a step's time goes: in the server (message
parsed to answer sent), waiting in the batcher, and the batched call (kernel; plus the commit
with ``--state-db``). The rest of the client's latency is transport and the client itself.
The servers run one kernel thread (``rnnkit serve``'s default; torch set to one thread).

    python benchmarks/bench_serve.py                      # the table
    python benchmarks/bench_serve.py --streams 100 --seconds 3

The predict clients (httpx) run in this process. Every process shares the machine's cores: on a
2-core machine the server gets about one core, the clients the other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
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
            msg = await websocket.receive_bytes()
        except Exception:
            return
        with torch.inference_mode():
            x = torch.frombuffer(bytearray(msg[8:]), dtype=torch.float32).reshape(1, 1, %(F)d)
            out, state = lstm(x, streams.get(sid))
        streams[sid] = state
        await websocket.send_bytes(msg[:8] + out[0].numpy().tobytes())
'''


def _pcts(lat: list[float]) -> tuple[float, float]:
    a = np.asarray(lat) * 1000.0
    return (float(np.percentile(a, 50)), float(np.percentile(a, 99))) if a.size else (float("nan"),) * 2


SEQS: dict[str, int] = {}  # each stream's last acknowledged step, across the runs
LOAD = Path(__file__).resolve().parent / "serve_load.py"


def _streams(server: ServerProcess, paths: list[str], seconds: float, rate: float | None) -> dict[str, Any]:
    """Every stream (a WebSocket path) steps for ``seconds`` (paced to ``rate`` steps/s in all when
    given), driven by ``serve_load.py`` in a process of its own; with the server's CPU seconds
    over the measured steps (the sockets' opening and closing left out)."""
    assert server.proc is not None
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"paths": paths, "seqs": {p: SEQS.get(p, 0) for p in paths}}, f)
    cmd = [sys.executable, str(LOAD), "--port", str(server.port), "--ids", f.name, "--seconds", str(seconds),
           "--features", str(F), "--handshake", *(["--rate", str(rate)] if rate else [])]
    try:
        with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as load:
            assert load.stdin is not None and load.stdout is not None
            if load.stdout.readline().strip() != "open":
                raise RuntimeError("the load generator could not open its sockets")
            cpu0 = _cpu_s(server.proc.pid)
            load.stdin.write("go\n")
            load.stdin.flush()
            line = load.stdout.readline()
            cpu = _cpu_s(server.proc.pid) - cpu0
            load.stdin.write("close\n")
            load.stdin.flush()
    finally:
        os.unlink(f.name)
    if load.returncode or not line:
        raise RuntimeError(f"the load generator failed (exit status {load.returncode})")
    out: dict[str, Any] = json.loads(line)
    SEQS.update(out.pop("seqs"))
    out["server_cpu_us_per_step"] = 1e6 * cpu / max(1, out["steps"])
    return out


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


_SUMS = {
    "n": ("rnnkit_serve_request_duration_seconds_count", 'route="ws_step"'),
    "server": ("rnnkit_serve_request_duration_seconds_sum", 'route="ws_step"'),
    "parse": ("rnnkit_serve_parse_seconds_sum", 'route="ws_step"'),
    "commit": ("rnnkit_serve_commit_seconds_sum", ""),
    "wait": ("rnnkit_serve_batch_wait_seconds_sum", 'kind="step"'),
    "calls": ("rnnkit_serve_compute_seconds_count", 'kind="step"'),
    "call": ("rnnkit_serve_compute_seconds_sum", 'kind="step"'),
    "rows": ("rnnkit_serve_batch_rows_sum", 'kind="step"'),
}


def _counts(url: str) -> dict[str, float]:
    """The server's sums and counts of the step metrics now."""
    import httpx

    t = httpx.get(url + "/metrics", timeout=30).text
    return {k: _metric(t, name, label) for k, (name, label) in _SUMS.items()}


def _breakdown(url: str, base: dict[str, float]) -> dict[str, float]:
    """Where a step's time went in the server since ``base`` (:func:`_counts`)."""
    now = _counts(url)
    d = {k: now[k] - base.get(k, 0.0) for k in now}
    n, calls = max(1.0, d["n"]), max(1.0, d["calls"])
    return {
        "server_ms": 1000 * d["server"] / n,
        "parse_ms": 1000 * d["parse"] / n,
        "commit_ms": 1000 * d["commit"] / calls,
        "batch_wait_ms": 1000 * d["wait"] / n,
        "batched_call_ms": 1000 * d["call"] / calls,
        "call_us_per_step": 1e6 * d["call"] / max(1.0, d["rows"]),
        "steps_per_call": d["rows"] / calls,
    }


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def run_server(name: str, server: ServerProcess, args: argparse.Namespace, rnnkit: bool) -> dict[str, Any]:
    import httpx

    server.start()
    try:
        n = args.streams
        if rnnkit:
            paths = [f"/v1/streams/{httpx.post(server.url + '/v1/streams', timeout=30).json()['id']}/ws"
                     for _ in range(n)]
        else:
            paths = [f"/ws/s{i}" for i in range(n)]
        _streams(server, paths[: min(n, 50)], 1.0, None)  # warm up
        base = _counts(server.url) if rnnkit else {}
        peak = _streams(server, paths, args.seconds, None)
        where = _breakdown(server.url, base) if rnnkit else {}
        half = _streams(server, paths, args.seconds, peak["throughput"] / 2)
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
    p.add_argument("--ws", default=None, help="rnnkit serve's --ws (uvicorn's WebSocket implementation)")
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
        common = ["--max-streams", str(a.streams + 10), "--max-wait-ms", str(a.max_wait_ms),
                  *(["--ws", a.ws] if a.ws else [])]
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
          f"(1 x {T_PREDICT} x {F}, JSON), LSTM({H}), {a.seconds:g} s each, loopback, stream clients in "
          f"a process of their own")
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
        print(f"{r['server']}: server CPU per step at peak {r['streams']['server_cpu_us_per_step']:.0f} us, "
              f"at half {r['streams_half']['server_cpu_us_per_step']:.0f} us")
    for r in rows:
        if r["where"]:
            w = r["where"]
            print(f"{r['server']}: per step in the server {w['server_ms']:.2f} ms (message in, answer out): "
                  f"reading and checking it {w['parse_ms']:.3f} ms, waiting in the batcher "
                  f"{w['batch_wait_ms']:.2f} ms; one batched call {w['batched_call_ms']:.2f} ms for "
                  f"{w['steps_per_call']:.1f} steps ({w['call_us_per_step']:.1f} us a step), its commit "
                  f"{w['commit_ms']:.2f} ms; the rest is the event loop (lock, answer, socket writes)")
    errs = {r["server"]: (r["streams"]["errors"], r["streams_half"]["errors"], r["predict"]["errors"])
            for r in rows}
    print("errors (streams, @half, predict):", errs)


if __name__ == "__main__":
    sys.exit(main())
