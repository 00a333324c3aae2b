"""Hostile requests against ``rnnkit serve`` on a loopback port (see tools/serve_trials.py for
the server process): every answer must be a 2xx or a 4xx, the server must stay up, and the
bystander streams (stepped before the fuzzing, then targeted only with requests that must be
refused) must keep their state bit for bit.

    python tools/serve_fuzz.py --requests 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_trials import F, ServerProcess, write_model  # noqa: E402

PATHS = ["/v1/predict", "/v1/streams", "/v1/model", "/healthz", "/metrics", "/v1/streams/{v}",
         "/v1/streams/{v}/step", "/v1/streams/nope/step", "/v1/streams/%2e%2e/step", "/v1/../etc/passwd",
         "/v1/predict?lengths=-1,x", "/v1/streams/{v}/ws", "/" + "a" * 3000, "/v1/predict/%00"]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
CTYPES = ["application/json", "application/x-npy", "application/octet-stream", "text/plain", "image/png",
          "application/json; charset=latin-1", "multipart/form-data; boundary=x", ""]


def _number(r: random.Random) -> Any:
    return r.choice([0, -0.0, 1, -1, 1e308, -1e308, 1e-320, 2 ** 64, -(2 ** 70), 3.5, True, None, "1", [],
                     {}])


def _array(r: random.Random, depth: int) -> Any:
    shape = [r.choice([0, 1, 2, 3, F, F + 1, 7]) for _ in range(depth)]

    def build(k: int) -> Any:
        if k == len(shape):
            return r.gauss(0, 1) if r.random() < 0.9 else _number(r)
        n = shape[k] if r.random() < 0.9 else r.randint(0, 5)
        return [build(k + 1) for _ in range(n)]

    return build(0)


def _json_body(r: random.Random, victim_seq: int) -> bytes:
    kind = r.randrange(12)
    if kind == 0:
        return b"[" * r.randint(1, 50000)
    if kind == 1:
        return json.dumps({"x": _array(r, 3)}).replace("0.", "NaN", 1).encode()
    if kind == 2:
        return b'{"x": [[[1e400' + b", 0" * (F - 1) + b"]]]}"
    if kind == 3:
        return bytes(r.getrandbits(8) for _ in range(r.randint(0, 400)))
    if kind == 4:
        return json.dumps({"x": _array(r, r.randint(0, 5)), "lengths": _array(r, 1)}).encode()
    if kind == 5:
        return json.dumps({"x": _array(r, 3), "mask": _array(r, 2)}).encode()
    if kind == 6:
        return json.dumps(_number(r)).encode()
    if kind == 7:  # never the victim's next step: only refusals, or the retry of its last one
        seq = r.choice([victim_seq + 2, victim_seq + 10 ** 6, 0, -1, 2 ** 63, 1.5, "2", None, True, []])
        return json.dumps({"seq": seq, "x": _array(r, 2)}).encode()
    if kind == 8:  # the victim's next step, with timesteps that must be refused
        bad = r.choice([[[None] * F], "x" * 10, [[1.0] * (F + 1)], [], [[[1.0] * F]], [[True] * F]])
        return json.dumps({"seq": victim_seq + 1, "x": bad}).encode()
    if kind == 9:
        return json.dumps({"seq": victim_seq, "x": [[1.0] * F]}).encode()  # a retry with another input
    if kind == 10:
        return ("\ud800" + "é" * r.randint(0, 50)).encode("utf-8", "surrogatepass")
    return json.dumps({"x": _array(r, 3), "extra": {"y": [1] * r.randint(0, 100)}}).encode()


async def _http(client: Any, r: random.Random, victims: list[tuple[str, int]], tally: Counter[str]) -> None:
    v, vseq = r.choice(victims)
    path = r.choice(PATHS).replace("{v}", v)
    if path.endswith("/ws"):
        path = path[:-3] + "/step"
    method = r.choice(METHODS) if r.random() < 0.3 else "POST"
    if method == "DELETE" and v in path:
        method = "GET"  # deleting a bystander is a valid request; everything else must be refused
    if method == "POST" and path == "/v1/streams" and r.random() < 0.9:
        path = "/v1/streams/" + v + "/step"
    headers = {"content-type": r.choice(CTYPES)}
    if r.random() < 0.2:
        headers["authorization"] = r.choice(["Bearer", "Bearer " + "x" * 5000, "Basic Zm9vOmJhcg==",
                                             "Bearer  "])
    if r.random() < 0.1:
        headers["accept"] = r.choice(["application/x-npy", "*/*", "text/html"])
    body = _json_body(r, vseq)
    import httpx

    try:
        resp = await client.request(method, path, content=body, headers=headers)
        tally[f"http {resp.status_code}"] += 1
    except (httpx.LocalProtocolError, httpx.InvalidURL):  # the client refused to send it
        tally["unsent (the client refused it)"] += 1
    except Exception as e:  # noqa: BLE001 - a broken connection is what this counts
        tally[f"http error {type(e).__name__}"] += 1


async def _raw(port: int, r: random.Random, tally: Counter[str]) -> None:
    lines = [b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{",
             b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
             b"GET /healthz HTTP/9.9\r\n\r\n", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
             b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
             b"GET /" + b"%" * 100 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
             b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\"x\":"]
    data = r.choice(lines)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        writer.write(data)
        await writer.drain()
        head = await asyncio.wait_for(reader.read(64), 5)
        writer.close()
        status = head.split(b" ")[1].decode() if head.startswith(b"HTTP/") else "closed"
        tally[f"raw {status}"] += 1
    except asyncio.TimeoutError:  # an incomplete request the server is still waiting on
        tally["raw no answer yet"] += 1
    except (OSError, IndexError) as e:
        tally[f"raw error {type(e).__name__}"] += 1


async def _ws(url: str, r: random.Random, victims: list[tuple[str, int]], tally: Counter[str],
              n: int) -> None:
    from websockets.asyncio.client import connect

    v, vseq = r.choice(victims)
    try:
        async with connect(url.replace("http", "ws") + f"/v1/streams/{v}/ws", open_timeout=10) as ws:
            for _ in range(n):
                k = r.randrange(4)
                if k == 0:
                    await ws.send(bytes(r.getrandbits(8) for _ in range(r.randint(0, 200))))
                elif k == 1:
                    await ws.send(struct.pack("<Q", r.choice([0, vseq + 2, 2 ** 64 - 1])) + b"\x00" * (4 * F))
                elif k == 2:
                    await ws.send(struct.pack("<Q", vseq + 1) + b"\x00\x00\xc0\x7f" * F)  # NaN
                else:
                    await ws.send(_json_body(r, vseq).decode("utf-8", "replace"))
                reply = await asyncio.wait_for(ws.recv(), 10)
                code = "bytes" if not isinstance(reply, str) else \
                    json.loads(reply).get("error", {}).get("code", "ok")
                tally[f"ws {code}"] += 1
    except Exception as e:  # noqa: BLE001 - a dropped socket is what this counts
        code = getattr(getattr(e, "rcvd", None), "code", None)
        tally[f"ws error {type(e).__name__}" + ("" if code is None else f" (close code {code})")] += 1


def fuzz(workdir: Path, requests: int = 5000, seed: int = 0, concurrency: int = 8) -> dict[str, Any]:
    """Send about ``requests`` hostile requests; returns the tally and the verdicts."""
    import httpx

    server = ServerProcess(write_model(workdir / "model.safetensors", units=8, features=F),
                           ["--max-body-bytes", "65536", "--max-timesteps", "64", "--max-streams", "200"],
                           workdir / "server.log")
    server.start()
    t0 = time.monotonic()
    tally: Counter[str] = Counter()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            victims = []
            for k in range(4):
                sid = c.post("/v1/streams").json()["id"]
                for s in range(1, k + 2):
                    c.post(f"/v1/streams/{sid}/step", json={"seq": s, "x": [[0.1 * s] * F]})
                victims.append((sid, k + 1))
            before = {sid: c.get(f"/v1/streams/{sid}").json() for sid, _ in victims}

        async def run() -> None:
            r = random.Random(seed)
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                sent = 0
                while sent < requests:
                    batch = []
                    for _ in range(concurrency):
                        k = r.random()
                        if k < 0.08:
                            batch.append(_ws(server.url, random.Random(r.random()), victims, tally, 10))
                            sent += 10
                        elif k < 0.12:
                            batch.append(_raw(server.port, random.Random(r.random()), tally))
                            sent += 1
                        else:
                            batch.append(_http(client, random.Random(r.random()), victims, tally))
                            sent += 1
                    await asyncio.gather(*batch)

        asyncio.run(run())
        with httpx.Client(base_url=server.url, timeout=30) as c:
            healthy = c.get("/healthz").status_code == 200
            after = {sid: c.get(f"/v1/streams/{sid}").json() for sid, _ in victims}
        changed = sum(int(after[s]["state"] != before[s]["state"] or after[s]["seq"] != before[s]["seq"])
                      for s in before)
        alive = server.alive()
    finally:
        server.stop()
    five = sum(n for k, n in tally.items()  # a 5xx status, a 5xx error over a socket, or an internal error
               if k.split()[-1].startswith("5") or k in ("ws timeout", "ws shutting_down") or "1011" in k)
    errors = sum(n for k, n in tally.items() if " error " in k)
    sent = sum(n for k, n in tally.items() if not k.startswith("unsent"))
    return {"requests": sent, "server_errors_5xx": five, "dropped_connections": errors,
            "server_alive": alive and healthy, "bystanders_changed": changed,
            "seconds": round(time.monotonic() - t0, 1), "tally": dict(sorted(tally.items()))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="hostile requests against rnnkit serve (loopback)")
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        report = fuzz(Path(tmp), a.requests, a.seed)
    print(json.dumps(report, indent=1))
    ok = not report["server_errors_5xx"] and report["server_alive"] and not report["bystanders_changed"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
