"""``rnnkit serve`` against slow and bad clients, and its startup refusals: a real server on a
free loopback port, talked to with Python's ``urllib`` and raw sockets (every socket has a
timeout, every server is stopped at the end)."""

from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

from serve_trials import F, ServerProcess, write_model  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit.serve._errors import RequestError  # noqa: E402
from rnnkit.serve._stepper import plan_streams  # noqa: E402
from rnnkit.serve._store import StreamStore  # noqa: E402


def _post(url: str, body: bytes, ctype: str = "application/json") -> tuple[int, dict[str, Any]]:
    """POST with urllib (it sends the whole body before it reads the answer)."""
    req = urllib.request.Request(url, data=body, method="POST", headers={"content-type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _serve(tmp_path: Path, *args: str) -> ServerProcess:
    model_path = tmp_path / "m.safetensors"
    if not model_path.exists():
        write_model(model_path, units=8)
    server = ServerProcess(model_path, list(args), tmp_path / "log")
    server.start()
    return server


def _recv_all(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything the server sends, and whether it closed the connection (False: the socket's
    own timeout ran out first)."""
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return out, False
        except ConnectionResetError:
            return out, True
        if not chunk:
            return out, True
        out += chunk


def test_requests_beyond_the_limits_get_their_4xx_read_by_urllib(tmp_path: Path) -> None:
    server = _serve(tmp_path)
    try:
        # 20 MB against the 8 MiB default: urllib sends it all, then must read the 413 (before:
        # "connection reset by peer", the server having closed with the body unread)
        big = b"[" + b"0," * (10 << 20) + b"0]"
        status, doc = _post(server.url + "/v1/predict", big)
        assert status == 413 and doc["error"]["code"] == "body_too_large"
        assert doc["error"]["got"] == len(big) and doc["error"]["expected"] == 8 << 20
        # 100 MB: past what the server drains (64 MiB), so it answers, half-closes, and discards
        # the rest until urllib has sent it all and reads the 413
        huge = b"[" + b"0," * (50 << 20) + b"0]"
        status, doc = _post(server.url + "/v1/predict", huge)
        assert status == 413 and doc["error"]["got"] == len(huge)
        del huge
        # a .npy header declaring (2, 3, 1e11) float32 over 96 bytes of data (before: a 500 MemoryError)
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False,
                                                    "shape": (2, 3, 10 ** 11)})
        status, doc = _post(server.url + "/v1/predict", head.getvalue() + bytes(96), "application/x-npy")
        assert status == 422 and doc["error"]["code"] == "bad_npy"
        assert doc["error"]["got"] == 2 * 3 * 10 ** 11 * 4 and doc["error"]["expected"] == 96
        # a client that asks Expect: 100-continue has sent no body yet: its 413 comes at once
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                         b"content-length: 20000000\r\nexpect: 100-continue\r\n\r\n")
            reply, closed = _recv_all(sock)
        assert closed and reply.startswith(b"HTTP/1.1 413 ") and b"body_too_large" in reply
        assert b"100 Continue" not in reply
        # the server still answers, with the model's numbers
        x = np.random.default_rng(0).standard_normal((2, 3, F)).astype(np.float32)
        status, doc = _post(server.url + "/v1/predict", json.dumps({"x": x.tolist()}).encode())
        assert status == 200
        want = rk.load_model(tmp_path / "m.safetensors").predict(x)
        np.testing.assert_array_equal(np.asarray(doc["outputs"], np.float32), want)
    finally:
        server.stop()


def test_slow_heads_and_bodies_are_cut_off_and_do_not_hold_the_server(tmp_path: Path) -> None:
    server = _serve(tmp_path, "--header-timeout-s", "1", "--body-timeout-s", "1", "--idle-timeout-s", "1")
    socks: list[socket.socket] = []
    try:
        # 50 connections trickling a request head, 10 that send nothing, 10 trickling a body
        for i in range(70):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            if i < 50:
                s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\n")
            elif i >= 60:
                s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                          b"content-length: 1000\r\n\r\n[")
            socks.append(s)
        # meanwhile a plain client is answered (the slow ones hold nothing it needs)
        x = np.zeros((1, 2, F), np.float32)
        assert _post(server.url + "/v1/predict", json.dumps({"x": x.tolist()}).encode())[0] == 200
        for s in socks[:50]:  # a byte at a time: the head deadline runs from the first byte, not the last
            s.sendall(b"x")
        answers = [_recv_all(s) for s in socks]
        # every slow connection was answered and closed by the server (1 s deadlines), none
        # waited out the sockets' own 10 s timeout
        assert all(closed for _, closed in answers)
        for a, _ in answers[:60]:
            assert a.startswith(b"HTTP/1.1 408 ") and b'"code": "header_timeout"' in a, a[:200]
        for a, _ in answers[60:]:
            assert a.startswith(b"HTTP/1.1 408 ") and b'"code":"body_timeout"' in a, a[:200]
        # an idle kept-alive connection is closed after --idle-timeout-s
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        socks.append(s)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        reply, closed = _recv_all(s)
        assert closed and reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b'{"status":"ok"}')
    finally:
        for s in socks:
            s.close()
        server.stop()


@pytest.mark.parametrize("case", ["fifo_model", "fifo_db", "fifo_token", "db_dir_missing", "db_not_sqlite",
                                  "db_is_dir", "timesteps_1e12"])
def test_startup_problems_are_one_typed_line_and_exit_2(tmp_path: Path, case: str) -> None:
    model = write_model(tmp_path / "m.safetensors", units=8)
    args = [str(model)]
    want = ""
    if case == "fifo_model":
        os.mkfifo(tmp_path / "fifo")
        args, want = [str(tmp_path / "fifo")], "found a FIFO (named pipe)"
    elif case == "fifo_db":
        os.mkfifo(tmp_path / "fifo")
        args += ["--state-db", str(tmp_path / "fifo")]
        want = "--state-db"
    elif case == "fifo_token":
        os.mkfifo(tmp_path / "fifo")
        args += ["--token-file", str(tmp_path / "fifo")]
        want = "expected a token file (a regular file), found a FIFO"
    elif case == "db_dir_missing":
        args += ["--state-db", str(tmp_path / "no" / "x.db")]
        want = "does not exist"
    elif case == "db_not_sqlite":
        (tmp_path / "x.db").write_bytes(b"not a database at all, but long enough to be read" * 20)
        args += ["--state-db", str(tmp_path / "x.db")]
        want = "file is not a database"
    elif case == "db_is_dir":
        args += ["--state-db", str(tmp_path)]
        want = "found a directory"
    else:
        m = rk.Sequential([rk.LSTM(4, "tanh", seed=1)], input_shape=(None, 3, F))
        path = tmp_path / "t.safetensors"
        rk.save_model(m, path)
        raw = path.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = raw[8:8 + n].replace(b"[null, 3, 16]", b"[null, 1000000000000, 16]")
        header += b" " * (-len(header) % 8)
        path.write_bytes(len(header).to_bytes(8, "little") + header + raw[8 + n:])
        args, want = [str(path)], "1000000000000 timesteps"
    proc = subprocess.run([sys.executable, "-m", "rnnkit", "serve", *args, "--port", "0"],
                          capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("rnnkit: compiling")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("rnnkit: error: ") and want in lines[0], lines


def _store(tmp_path: Path) -> tuple[StreamStore, Any]:
    m = rk.Sequential([rk.LSTM(64, "tanh", seed=1)], input_shape=(None, None, 4))
    plan, why = plan_streams(m, [1])
    assert plan is not None, why
    return StreamStore(plan, "sha", tmp_path / "s.db"), plan


def test_a_full_disk_at_commit_is_a_503_naming_it_and_the_stream_is_left_as_it_was(tmp_path: Path) -> None:
    store, plan = _store(tmp_path)
    s = store.create()
    assert store.db is not None
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count={pages}")  # the database may not grow: SQLITE_FULL
    new_state = [np.full(a.shape, 0.5, a.dtype) for a in s.state]
    y = np.ones((1000, 64), plan.dtype)  # 256 KB of stored answer: more pages than the file may have
    with pytest.raises(RequestError) as info:
        store.commit([(s, 1, new_state, y, "d" * 32)])
    e = info.value
    assert e.status == 503 and e.code == "storage_failed"
    assert "database or disk is full" in str(e) and "ROLLBACK" not in str(e).upper()
    assert s.seq == 0 and all((a == 0).all() for a in s.state) and s.last_y is None
    made = 0
    with pytest.raises(RequestError) as info:  # new streams until the full database refuses one
        for _ in range(10_000):
            store.create()
            made += 1
    assert info.value.status == 503 and "database or disk is full" in str(info.value)
    assert len(store.streams) == 1 + made  # the refused stream is not served from memory either
    store.close()
    rows = sqlite3.connect(tmp_path / "s.db").execute("SELECT id, seq FROM streams").fetchall()
    assert sorted(rows) == sorted((i, 0) for i in store.streams)


def test_reading_a_stream_refreshes_its_idle_time(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    s = store.create()
    s.touched -= 100.0
    assert store.idle(50.0) == [s.id]
    store.get(s.id)
    assert store.idle(50.0) == []
    store.close()


def test_a_full_disk_at_a_step_answers_503_with_the_cause_and_the_stream_keeps_its_state(
        tmp_path: Path) -> None:
    model = rk.Sequential([rk.LSTM(8, "tanh", seed=1, return_sequences=True)], input_shape=(None, None, F))
    app = rk.serve.app(model, state_db=str(tmp_path / "s.db"))
    xs = np.random.default_rng(1).standard_normal((2, 2000, F)).astype(np.float32)
    with TestClient(app) as c:
        sid = c.post("/v1/streams").json()["id"]
        assert c.post(f"/v1/streams/{sid}/step", json={"seq": 1, "x": xs[0].tolist()}).status_code == 200
        before = c.get(f"/v1/streams/{sid}").json()
        db = app.app.state.server.store.db
        db.execute(f"PRAGMA max_page_count={db.execute('PRAGMA page_count').fetchone()[0]}")
        r = c.post(f"/v1/streams/{sid}/step", json={"seq": 2, "x": xs[1].tolist()})
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "storage_failed" and "database or disk is full" in err["message"]
        after = c.get(f"/v1/streams/{sid}").json()
        assert after["seq"] == 1 and after["state"] == before["state"]
        db.execute("PRAGMA max_page_count=1073741823")  # room again: the same step now applies
        again = c.post(f"/v1/streams/{sid}/step", json={"seq": 2, "x": xs[1].tolist()})
        assert again.status_code == 200 and not again.json()["replayed"]
        want = model.predict(np.concatenate(xs)[None])[0, 2000:]
        # the step continues the recurrence from the stored state in float32, as predict runs it
        # over the whole sequence: equal bits (checked on the AVX-512 and the AVX2 paths)
        np.testing.assert_array_equal(np.asarray(again.json()["outputs"], np.float32), want)


@pytest.mark.parametrize(("name", "value"), [("synchronous", 1.5), ("streams", "yes"), ("fast_path", 1),
                                             ("state_db", 3),
                                             ("header_timeout_s", 0), ("body_timeout_s", float("nan")),
                                             ("idle_timeout_s", -1.0)])
def test_serve_config_refuses_wrong_types_with_a_typed_error(name: str, value: Any) -> None:
    with pytest.raises(rk.InvalidParameterError, match=f"ServeConfig: {name} must be"):
        rk.serve.ServeConfig(**{name: value})
