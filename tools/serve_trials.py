"""Trials of ``rnnkit serve`` as a real process on a loopback port.

``kill``: streams step over WebSockets while the server is killed with SIGKILL at a random
moment and restarted on the same ``--state-db``, many times; afterwards every stream's state and
every acknowledged answer is compared, bit for bit, with the model stepped offline. It counts
acknowledged steps lost (the restarted server's seq below the client's last acknowledged one)
and steps applied twice or wrongly (a state or an answer that differs from the offline run).

``fuzz``: hostile requests (random bytes, mutated JSON shapes / types / numbers, bad sequence
numbers, unknown streams, odd methods and paths, malformed raw HTTP, garbage WebSocket
messages) against a server holding a few "bystander" streams; it counts answers by status,
5xx answers, dropped connections, whether the server is still up, and whether any bystander's
state changed.

    python tools/serve_trials.py kill --kills 20 --streams 500
    python tools/serve_trials.py fuzz --requests 5000

Both bind 127.0.0.1 only and stop by themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

F, UNITS = 16, 64


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Servers:
    """uvicorn servers (``self.servers``, by name) run as tasks of one event loop: started on
    ``async with`` (when every one reports started) and stopped, awaited, on its exit."""

    servers: dict[str, Any]

    async def __aenter__(self) -> Any:
        self.tasks = [asyncio.get_running_loop().create_task(s.serve()) for s in self.servers.values()]
        while not all(s.started for s in self.servers.values()):
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for s in self.servers.values():
            s.should_exit = True
        await asyncio.gather(*self.tasks)


def write_model(path: Path, units: int = UNITS, features: int = F) -> Path:
    """An LSTM(units) -> Dense(4) model file on ``features`` inputs."""
    import rnnkit as rk

    m = rk.Sequential([rk.LSTM(units, "tanh", seed=1), rk.Dense(4, "linear", seed=2)],
                      input_shape=(None, None, features))
    rk.save_model(m, path)
    return path


class ServerProcess:
    """``python -m rnnkit serve MODEL`` on a free loopback port, as a child process."""

    def __init__(self, model: Path, args: list[str], log: Path) -> None:
        self.model, self.args, self.log = model, args, log
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> None:
        import httpx

        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "rnnkit", "serve", str(self.model), "--port",
                                          str(self.port), "--log-level", "warning", *self.args],
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the server did not answer /healthz within {timeout} s")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# -- kill -9 trials ---------------------------------------------------------------------------
async def _stepper(url: str, sid: str, xs: np.ndarray, acked: list[int], answers: dict[int, bytes],
                   stop: asyncio.Event, connected: list[int]) -> None:
    """Step stream ``sid`` over its WebSocket until ``stop`` or the connection breaks; each
    answer (outputs bytes) is recorded under its seq, ``acked[0]`` is the last one received."""
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://") + f"/v1/streams/{sid}/ws"
    async with connect(ws_url, max_size=None, open_timeout=60, compression=None) as ws:
        connected[0] += 1
        while not stop.is_set():
            seq = acked[0] + 1
            if seq > len(xs):
                return
            await ws.send(struct.pack("<Q", seq) + xs[seq - 1].tobytes())
            reply = await ws.recv()
            if isinstance(reply, str):
                raise RuntimeError(f"stream {sid} step {seq}: {reply[:300]}")
            got, _ = struct.unpack_from("<QB", reply)
            if got != seq:
                raise RuntimeError(f"stream {sid}: asked step {seq}, answered {got}")
            answers[seq] = reply[9:]
            acked[0] = seq


async def _round(url: str, ids: list[str], xs: np.ndarray, acked: list[list[int]],
                 answers: list[dict[int, bytes]],
                 server: ServerProcess, after_s: float, errors: list[str], kill: bool = True) -> int:
    """Step every stream; ``after_s`` seconds after all are connected, kill the server with
    SIGKILL (``kill``) or stop the clients. Returns the steps acknowledged in the round."""
    stop = asyncio.Event()
    before = sum(a[0] for a in acked)
    connected = [0]
    tasks = [asyncio.ensure_future(_stepper(url, sid, xs[i], acked[i], answers[i], stop, connected))
             for i, sid in enumerate(ids)]
    end = time.monotonic() + 60
    while connected[0] < len(ids) and time.monotonic() < end and not all(t.done() for t in tasks):
        await asyncio.sleep(0.02)
    await asyncio.sleep(after_s)
    if kill:
        server.kill9()
    stop.set()
    for r in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(r, RuntimeError):
            errors.append(str(r))
    return sum(a[0] for a in acked) - before


def kill_trials(workdir: Path, kills: int = 20, streams: int = 500, steps: int = 4000, seed: int = 0,
                window: tuple[float, float] = (0.5, 2.0), synchronous: str = "FULL") -> dict[str, Any]:
    """Run ``kills`` kill-and-restart rounds with ``streams`` streams stepping (one timestep a
    step); returns the counts (see the module doc)."""
    import httpx

    from rnnkit.serve import load

    model = write_model(workdir / "model.safetensors")
    db = workdir / "streams.sqlite"
    server = ServerProcess(model, ["--state-db", str(db), "--synchronous", synchronous, "--max-wait-ms", "2"],
                           workdir / "server.log")
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((streams, steps, 1, F)).astype(np.float32)
    pick = random.Random(seed)
    acked = [[0] for _ in range(streams)]
    answers: list[dict[int, bytes]] = [{} for _ in range(streams)]
    lost = ahead = committed_unacked = 0
    errors: list[str] = []
    steps_during_kills = 0
    server.start()
    ids = [httpx.post(server.url + "/v1/streams", timeout=30).json()["id"] for _ in range(streams)]
    t0 = time.monotonic()
    for _ in range(kills):
        steps_during_kills += asyncio.run(_round(server.url, ids, xs, acked, answers, server,
                                                 pick.uniform(*window), errors))
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as c:
            for i, sid in enumerate(ids):
                seq = c.get(f"/v1/streams/{sid}").json()["seq"]
                lost += max(0, acked[i][0] - seq)
                ahead += max(0, seq - acked[i][0] - 1)
                committed_unacked += int(seq == acked[i][0] + 1)
    after_last = asyncio.run(_round(server.url, ids, xs, acked, answers, server, 0.5, errors, kill=False))
    sv = load(model)
    plan = sv.streams
    assert plan is not None
    wrong_answers = wrong_states = 0
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for i, sid in enumerate(ids):
            doc = c.get(f"/v1/streams/{sid}").json()
            state = plan.stack([plan.zero()])
            for t in range(doc["seq"]):
                y, state = plan.step(xs[i, t][None], state)
                rec = answers[i].get(t + 1)
                if rec is not None and rec != np.ascontiguousarray(y[0]).tobytes():
                    wrong_answers += 1
            mine = plan.split(state, 1)[0]
            theirs = [np.asarray(doc["state"][e.name], np.float32) for e in plan.entries]
            wrong_states += int(any(a.tobytes() != b.tobytes() for a, b in zip(mine, theirs, strict=True)))
    server.stop()
    return {"kills": kills, "streams": streams, "steps_acknowledged": sum(a[0] for a in acked),
            "steps_acknowledged_in_kill_rounds": steps_during_kills,
            "steps_after_the_last_kill": after_last, "lost": lost, "applied_twice": ahead,
            "committed_but_unacknowledged_then_replayed": committed_unacked, "wrong_answers": wrong_answers,
            "wrong_states": wrong_states, "seconds": round(time.monotonic() - t0, 1),
            "synchronous": synchronous, "client_errors": len(errors), "first_errors": errors[:3]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="kill -9 and restart trials of rnnkit serve (loopback)")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--streams", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        report = kill_trials(Path(tmp), a.kills, a.streams, seed=a.seed, synchronous=a.synchronous)
    print(json.dumps(report, indent=1))
    bad = report["lost"] + report["applied_twice"] + report["wrong_answers"] + report["wrong_states"]
    return 1 if bad or report["client_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
