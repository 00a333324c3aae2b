"""The predict path that skips the framework: many concurrent kept-alive clients against a real
``rnnkit serve`` process, each answer equal, bit for bit, to ``model.predict`` on its own row
(the batcher never mixes rows up between requests); what the direct route keeps of the
framework's (405, auth, 404); the JSON reader's fallback; the collector's settling."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")
pytest.importorskip("orjson")

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

from serve_trials import F, ServerProcess, write_model  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit.serve._cli import settle  # noqa: E402
from rnnkit.serve._codec import dump_json, parse_json  # noqa: E402
from rnnkit.serve._errors import RequestError  # noqa: E402


async def _client(port: int, bodies: list[bytes]) -> list[tuple[int, bytes]]:
    """One kept-alive connection sending ``bodies`` one after the other; (status, body) each."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    try:
        for body in bodies:
            writer.write(b"POST /v1/predict HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            status = int((await reader.readuntil(b"\r\n")).split()[1])
            length = 0
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line[15:])
            out.append((status, await reader.readexactly(length)))
    finally:
        writer.close()
    return out


def test_concurrent_clients_each_get_predict_of_their_own_row(tmp_path: Path) -> None:
    """60 connections x 8 requests, every request one distinct row (or two), sent at once: the
    server batches them (its metrics say so) and every answer is the model's output for that
    request's rows alone, bit for bit (float32 outputs travel as the exact float64 of each value,
    so reading them back as float32 is exact)."""
    model_path = write_model(tmp_path / "m.safetensors")
    model = rk.load_model(model_path)
    rng = np.random.default_rng(7)
    n_clients, per_client, T = 60, 8, 6
    xs = [[rng.standard_normal((1 + (c + k) % 2, T, F)).astype(np.float32) for k in range(per_client)]
          for c in range(n_clients)]
    server = ServerProcess(model_path, ["--max-wait-ms", "5"], tmp_path / "log")
    server.start()
    try:
        async def all_clients() -> list[list[tuple[int, bytes]]]:
            return await asyncio.gather(*[
                _client(server.port, [json.dumps({"x": x.tolist()}).encode() for x in xs[c]])
                for c in range(n_clients)])

        answers = asyncio.run(all_clients())
        import httpx

        metrics = httpx.get(server.url + "/metrics", timeout=30).text
    finally:
        server.stop()
    for c in range(n_clients):
        for k in range(per_client):
            status, body = answers[c][k]
            assert status == 200, body[:300]
            got = np.asarray(json.loads(body)["outputs"], dtype=np.float32)
            want = model.predict(xs[c][k])
            assert got.shape == want.shape and got.tobytes() == want.tobytes(), (c, k)
    calls = next(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith('rnnkit_serve_batch_requests_count{kind="predict"}'))
    assert calls < n_clients * per_client  # some calls held several requests: rows were batched


def _lstm() -> rk.Sequential:
    return rk.Sequential([rk.LSTM(8, "tanh", seed=1)], input_shape=(None, None, F))


def test_the_direct_predict_route_keeps_405_auth_and_metrics() -> None:
    token = "s3cret-token-0123456789"
    x = np.random.default_rng(0).standard_normal((2, 3, F)).astype(np.float32)
    with TestClient(rk.serve.app(_lstm(), token=token)) as c:
        auth = {"authorization": "Bearer " + token}
        assert c.post("/v1/predict", json={"x": x.tolist()}).status_code == 401
        r = c.get("/v1/predict", headers=auth)
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
        r = c.post("/v1/predict", headers=auth, json={"x": x.tolist()})
        assert r.status_code == 200
        assert np.asarray(r.json()["outputs"], np.float32).tobytes() == _lstm().predict(x).tobytes()
        r = c.post("/v1/predict", headers={**auth, "content-type": "text/csv"}, content=b"1,2")
        assert r.status_code == 415 and r.json()["error"]["got"] == "text/csv"
        text = c.get("/metrics", headers=auth).text
    for status, n in (("200", 1), ("415", 1)):
        assert f'rnnkit_serve_requests_total{{route="predict",status="{status}"}} {n}' in text


def test_json_that_orjson_refuses_is_judged_by_the_standard_reader() -> None:
    assert parse_json(b'{"x": [[[1e400, 0, 0, 0]]]}') == {"x": [[[float("inf"), 0, 0, 0]]]}
    body = b'{"x": [[[1e400' + b", 0" * (F - 1) + b"]]]}"
    x = [[[0.5] * F]]
    with TestClient(rk.serve.app(_lstm())) as c:
        r = c.post("/v1/predict", content=body)
        assert r.status_code == 422 and r.json()["error"]["code"] == "non_finite"
        assert r.json()["error"]["message"] == "x[0, 0, 0] is not finite"
        r = c.post("/v1/predict", json={"x": x[0]})  # a well-formed body of the wrong shape
        assert r.status_code == 422 and r.json()["error"]["code"] == "bad_shape"
    for bad in (b'{"x": NaN}', b"\xff", b'{"x": 1} x', b'{"x": [1,'):
        with pytest.raises(RequestError) as e:
            parse_json(bad)
        assert e.value.status == 400 and e.value.code == "bad_json"
    big = 10 ** 30  # beyond orjson's 64-bit integers: written by the standard library
    assert json.loads(dump_json({"got": big, "a": [1.5, -2.0]})) == {"got": big, "a": [1.5, -2.0]}


def test_settle_freezes_every_object_alive_at_the_call() -> None:
    """After ``settle`` the objects alive before it are in the permanent generation: a
    collection no longer walks them."""
    anchor: list[Any] = [[k] for k in range(1000)]  # objects the collector tracks
    tracked = len(gc.get_objects())
    settle()
    try:
        # all but what the collection freed is frozen; the collector tracks almost nothing
        assert gc.get_freeze_count() > 0.9 * tracked and len(gc.get_objects()) < 0.01 * tracked
        assert not any(o is anchor for o in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(o is anchor for o in gc.get_objects())


def test_a_job_expired_behind_a_call_on_the_loop_is_answered_503_and_never_computed() -> None:
    """With calls on the event loop's thread (predicts and steps), the sweeper cannot run while a
    call does: a job whose time ran out behind it is refused when it is taken, not computed."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from rnnkit.serve._batcher import Batcher
    from rnnkit.serve._metrics import Metrics

    calls: list[list[str]] = []

    def slow(payloads: list[str]) -> list[str]:
        calls.append(payloads)
        time.sleep(0.4)  # the loop is blocked: 4 times the jobs' 0.1 s
        return [p.upper() for p in payloads]

    async def main() -> list[Any]:
        b = Batcher("t", slow, ThreadPoolExecutor(1), Metrics(), max_wait_s=0.0, max_rows=1,
                    max_queue_rows=100, timeout_s=0.1, inline=True)
        b.start()
        jobs = [b.submit("k", 1, "a"), b.submit("k", 1, "b")]  # one call each (max_rows 1)
        out = await asyncio.gather(*jobs, return_exceptions=True)
        await b.stop()
        return out

    a, b = asyncio.run(main())
    assert a == "A" and isinstance(b, RequestError) and b.status == 503 and b.code == "timeout"
    assert calls == [["a"]]
