"""``rnnkit serve`` as a real process on a free loopback port: the token file, a WebSocket
stream, kill -9 and restart with nothing lost, and hostile requests with no 5xx (small versions
of tools/serve_trials.py and tools/serve_fuzz.py)."""

from __future__ import annotations

import asyncio
import hashlib
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pytest.importorskip("websockets")

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

from serve_fuzz import fuzz  # noqa: E402
from serve_trials import F, ServerProcess, kill_trials, write_model  # noqa: E402

import rnnkit as rk  # noqa: E402


def test_cli_server_with_a_token_file_answers_http_and_a_websocket(tmp_path: Path) -> None:
    from websockets.asyncio.client import connect

    model_path = write_model(tmp_path / "m.safetensors", units=8)
    token = "0123456789abcdef-token"
    (tmp_path / "token").write_text(token + "\n")
    server = ServerProcess(model_path, ["--token-file", str(tmp_path / "token")], tmp_path / "log")
    server.start()
    auth = {"authorization": f"Bearer {token}"}
    try:
        assert httpx.get(server.url + "/v1/model").status_code == 401
        doc = httpx.get(server.url + "/v1/model", headers=auth).json()
        assert doc["sha256"] == hashlib.sha256(model_path.read_bytes()).hexdigest()
        sid = httpx.post(server.url + "/v1/streams", headers=auth).json()["id"]
        xs = np.random.default_rng(0).standard_normal((3, 1, F)).astype(np.float32)

        async def talk() -> list[bytes]:
            url = server.url.replace("http", "ws") + f"/v1/streams/{sid}/ws"
            out = []
            async with connect(url, additional_headers=auth) as ws:
                for t in range(3):
                    await ws.send(struct.pack("<Q", t + 1) + xs[t].tobytes())
                    out.append(await ws.recv())
            return out

        replies = asyncio.run(talk())
    finally:
        server.stop()
    model = rk.load_model(model_path)
    for t, reply in enumerate(replies):
        assert isinstance(reply, bytes) and struct.unpack_from("<QB", reply) == (t + 1, 0)
        want = model.predict(xs[: t + 1].reshape(1, t + 1, F))
        np.testing.assert_array_equal(np.frombuffer(reply, np.float32, offset=9).reshape(1, -1), want)


def test_kill_9_and_restart_lose_no_step_and_apply_none_twice(tmp_path: Path) -> None:
    report = kill_trials(tmp_path, kills=2, streams=12, steps=2000, window=(0.4, 0.8))
    assert report["client_errors"] == 0, report["first_errors"]
    assert report["steps_acknowledged_in_kill_rounds"] > 0
    assert report["lost"] == report["applied_twice"] == 0, report
    assert report["wrong_answers"] == report["wrong_states"] == 0, report


def test_hostile_requests_never_get_a_5xx_nor_change_a_bystander(tmp_path: Path) -> None:
    report = fuzz(tmp_path, requests=330)  # a few of them the HTTP client itself refuses to send
    assert report["server_errors_5xx"] == 0, report["tally"]
    assert report["server_alive"], report
    assert report["bystanders_changed"] == 0, report
    assert report["requests"] >= 300 and sum(n for k, n in report["tally"].items() if " 4" in k) > 100
