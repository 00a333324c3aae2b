"""``rnnkit serve``'s HTTP predict under 200 concurrent clients, on loopback, the load generator
(``http_load.py``, raw-socket HTTP/1.1 from ``asyncio.Protocol``) in a process of its own on the
same machine.

The model: LSTM(64) on 8 features; every request is one sequence of 20 timesteps as JSON
(``{"x": [[[...8 numbers] x 20]]}``). Phases, ``--seconds`` each after a second of warm-up:

- ``keepalive``: ``--clients`` clients, each on one kept-alive connection;
- ``connect``: ``--clients`` clients, each request on a new connection;
- ``keepalive+slow``: the keep-alive clients plus ``--slow`` connections trickling a request
  head one byte every 0.5 s (reconnecting when the server closes them).

Two servers run side by side: ``fast`` (the default: the HTTP protocol answers a small JSON
predict itself) and ``app`` (``--no-fast-path``: every request through the ASGI app); each round
runs every phase on each of them in turn (interleaved, so that both see the same machine), and
the last lines give each phase's median over the rounds per server.

Each line: requests/s, latency p50 / p99 / max (ms), non-200 answers, connection errors, the
generator's and the server's CPU seconds per wall second (1.0 = one core), and the load average.
Then ``model.predict``'s own rows/s on batches of 32 for comparison, and the server's metrics:
where a request's time goes in it.

    PYTHONPATH=src python benchmarks/bench_serve_http.py [--clients 200 --slow 200 --seconds 5 --rounds 3]
"""

from __future__ import annotations

import argparse
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

F, H, T = 8, 64, 20
LOAD = Path(__file__).resolve().parent / "http_load.py"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(server: ServerProcess, body: Path, mode: str, clients: int, slow: int,
          seconds: float) -> dict[str, Any]:
    assert server.proc is not None
    cmd = [sys.executable, str(LOAD), "--port", str(server.port), "--body", str(body), "--mode", mode,
           "--clients", str(clients), "--slow", str(slow), "--seconds", str(seconds)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as gen:
        assert gen.stdout is not None and gen.stderr is not None
        lines = iter(gen.stdout.readline, "")
        cpu0 = cpu1 = 0.0
        r: dict[str, Any] = {}
        for line in lines:
            if line.strip() == "measuring":
                cpu0 = _cpu_s(server.proc.pid)
            elif line.strip() == "measured":
                cpu1 = _cpu_s(server.proc.pid)
            elif line.startswith("{"):
                r = json.loads(line)
        err = gen.stderr.read()
    if gen.returncode or not r:
        raise RuntimeError(f"the load generator failed: {err[-2000:]}")
    # the server's CPU seconds over the measured seconds, per request answered in them
    r["server_cpu_share"] = round((cpu1 - cpu0) / seconds, 2)
    r["server_cpu_us_per_request"] = round(1e6 * (cpu1 - cpu0) / max(1, r["answered"]))
    r["load_average_1m"] = os.getloadavg()[0]
    return r


def model_rows_per_s(model: Any, batch: int = 32, reps: int = 200) -> float:
    x = np.random.default_rng(0).standard_normal((batch, T, F)).astype(np.float32)
    model.predict(x)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps // 5):
            model.predict(x)
        times.append((time.perf_counter() - t0) / (reps // 5))
    return batch / float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--slow", type=int, default=200)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--phases", default="keepalive,connect,keepalive+slow")
    p.add_argument("--server-args", default="", help="extra flags for rnnkit serve (both servers)")
    p.add_argument("--variants", default="fast,app", help="fast: the default server; app: --no-fast-path")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None, metavar="PATH",
                   help="also write the medians per phase and server, and model.predict's rows/s, as JSON")
    a = p.parse_args(argv)
    import rnnkit as rk

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = rk.Sequential([rk.LSTM(H, "tanh", seed=1)], input_shape=(None, None, F))
        rk.save_model(model, d / "m.safetensors")
        x = np.random.default_rng(1).standard_normal((1, T, F)).astype(np.float32)
        (d / "body.json").write_text(json.dumps({"x": x.tolist()}))
        variants = a.variants.split(",")
        servers = {v: ServerProcess(d / "m.safetensors",
                                    a.server_args.split() + (["--no-fast-path"] if v == "app" else []),
                                    d / f"log-{v}") for v in variants}
        results: dict[tuple[str, str], list[dict[str, Any]]] = {}
        metrics: dict[str, str] = {}
        try:
            for server in servers.values():
                server.start()
            import httpx

            for rnd in range(a.rounds):
                for name in a.phases.split(","):
                    mode = name.split("+")[0]
                    slow = a.slow if name.endswith("+slow") else 0
                    for v in (variants if rnd % 2 == 0 else variants[::-1]):
                        r = phase(servers[v], d / "body.json", mode, a.clients, slow, a.seconds)
                        results.setdefault((name, v), []).append(r)
                        print(json.dumps({"round": rnd, "phase": name, "server": v, **r}), flush=True)
            for v, server in servers.items():
                metrics[v] = httpx.get(server.url + "/metrics", timeout=30).text
        finally:
            for server in servers.values():
                server.stop()
        medians = []
        for (name, v), rs in results.items():
            med = {k: float(np.median([r[k] for r in rs])) for k in
                   ("requests_per_s", "p50_ms", "p99_ms", "server_cpu_us_per_request", "load_average_1m")}
            medians.append({"median_of": len(rs), "phase": name, "server": v, **med})
            print(json.dumps(medians[-1]), flush=True)
        rows_per_s = round(model_rows_per_s(model))
        print(json.dumps({"model_predict_rows_per_s_batch32": rows_per_s}))
        if a.json:
            Path(a.json + ".tmp").write_text(json.dumps(
                {"clients": a.clients, "slow": a.slow, "seconds": a.seconds, "rounds": a.rounds,
                 "medians": medians, "model_predict_rows_per_s_batch32": rows_per_s}, indent=1))
            os.replace(a.json + ".tmp", a.json)
        for v, text in metrics.items():
            for line in text.splitlines():
                if (line.endswith("_sum") or "_sum{" in line or "_count{" in line) and "predict" in line:
                    print(v, line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
