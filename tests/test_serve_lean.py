"""The lean per-message path of the server: the stream WebSocket as a plain ASGI app (binary
steps checked without a conversion, its metrics moved into /metrics in bulk), histograms filled
a batch at a time, states split into copies of their own, and the kernel threads of
``rnnkit serve``."""

from __future__ import annotations

import struct
import warnings
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

pytest.importorskip("starlette")
pytest.importorskip("httpx")
warnings.filterwarnings("ignore", message=".*httpx2.*")

from starlette.testclient import TestClient  # noqa: E402

from rnnkit.serve._metrics import Metrics  # noqa: E402
from rnnkit.serve._servable import Servable  # noqa: E402
from rnnkit.serve._ws import StreamSocket  # noqa: E402

F = 4


def lstm_model() -> rk.Sequential:
    return rk.Sequential([rk.LSTM(6, "tanh", seed=1)], input_shape=(None, None, F))


def metric(text: str, line_start: str) -> float:
    return float(next(x for x in text.splitlines() if x.startswith(line_start + " ")).split()[-1])


def test_observe_many_counts_exactly_what_observe_counts_for_each_value() -> None:
    values = [0.0, 0.0005, 0.0004999, 0.001, 0.003, 0.05, 7.0, 11.0, 1e-9]
    one, many = Metrics(), Metrics()
    for v in values:
        one.observe("rnnkit_serve_request_duration_seconds", v, route="r")
    many.observe_many("rnnkit_serve_request_duration_seconds", values[:4], route="r")
    many.observe_many("rnnkit_serve_request_duration_seconds", values[4:], route="r")
    many.observe_many("rnnkit_serve_request_duration_seconds", [], route="r")
    assert many.render() == one.render()
    # the buckets by hand: le=0.0005 holds 0, 0.0005, 0.0004999, 1e-9; le=0.001 adds 0.001, ...
    text = many.render()
    assert metric(text, 'rnnkit_serve_request_duration_seconds_bucket{route="r",le="0.0005"}') == 4
    assert metric(text, 'rnnkit_serve_request_duration_seconds_bucket{route="r",le="0.001"}') == 5
    assert metric(text, 'rnnkit_serve_request_duration_seconds_bucket{route="r",le="10"}') == 8
    assert metric(text, 'rnnkit_serve_request_duration_seconds_count{route="r"}') == 9


def test_websocket_messages_are_counted_in_metrics_by_status() -> None:
    model = lstm_model()
    xs = np.random.default_rng(0).standard_normal((3, 1, F)).astype(np.float32)
    with TestClient(rk.serve.app(model)) as c:
        sid = c.post("/v1/streams").json()["id"]
        with c.websocket_connect(f"/v1/streams/{sid}/ws") as ws:
            for t in range(3):
                ws.send_bytes(struct.pack("<Q", t + 1) + xs[t].tobytes())
                assert struct.unpack_from("<QB", ws.receive_bytes()) == (t + 1, 0)
            ws.send_text("{")
            assert ws.receive_json()["error"]["code"] == "bad_json"
        text = c.get("/metrics").text
    assert metric(text, 'rnnkit_serve_requests_total{route="ws_step",status="200"}') == 3
    assert metric(text, 'rnnkit_serve_requests_total{route="ws_step",status="400"}') == 1
    assert metric(text, 'rnnkit_serve_request_duration_seconds_count{route="ws_step"}') == 4
    assert metric(text, 'rnnkit_serve_parse_seconds_count{route="ws_step"}') == 3


def test_binary_steps_are_refused_like_json_ones_and_leave_the_stream_as_it_was() -> None:
    model = lstm_model()
    x = np.random.default_rng(1).standard_normal((1, F)).astype(np.float32)
    bad = x.copy()
    bad[0, 2] = np.nan
    with TestClient(rk.serve.app(model, max_timesteps=2)) as c:
        sid = c.post("/v1/streams").json()["id"]
        with c.websocket_connect(f"/v1/streams/{sid}/ws") as ws:
            ws.send_bytes(struct.pack("<Q", 1) + bad.tobytes())
            r = ws.receive_json()
            assert r["error"]["code"] == "non_finite" and "[0, 2]" in r["error"]["message"]
            ws.send_bytes(struct.pack("<Q", 1) + np.tile(x, (3, 1)).tobytes())
            r = ws.receive_json()
            assert r["error"]["code"] == "too_many_timesteps" and r["error"]["got"] == 3
            ws.send_bytes(struct.pack("<Q", 0) + x.tobytes())
            assert ws.receive_json()["error"]["code"] == "bad_seq"
            ws.send_bytes(struct.pack("<Q", 1) + x.tobytes())
            b = ws.receive_bytes()
        assert c.get(f"/v1/streams/{sid}").json()["seq"] == 1
    lstm: Any = model.layers[0]
    seq, _ = lstm.seq_init(x[None], lstm.zero_state(1))
    assert struct.unpack_from("<QB", b) == (1, 0) and b[9:] == seq[0].tobytes()


def test_only_a_stream_path_goes_to_the_stream_socket() -> None:
    assert StreamSocket.stream_id("/v1/streams/abc_9-Z/ws") == "abc_9-Z"
    for path in ("/v1/streams//ws", "/v1/streams/a/b/ws", "/v1/streams/a/wss", "/v2/streams/a/ws", "/ws"):
        assert StreamSocket.stream_id(path) is None
    with TestClient(rk.serve.app(lstm_model())) as c:
        with pytest.raises(Exception):  # noqa: B017 - no such WebSocket route: closed before it opens
            with c.websocket_connect("/v1/other/ws") as ws:
                ws.receive_text()
        with c.websocket_connect("/v1/streams/nope/ws") as ws:
            assert ws.receive_json()["error"]["code"] == "unknown_stream"


@pytest.mark.parametrize("kind", ["sequential", "rnnnet"])
def test_split_states_are_copies_equal_to_each_streams_slice(kind: str) -> None:
    model: Any = lstm_model() if kind == "sequential" else rk.rnn.lstm(F, 5, rk.rnn.RNNConfig(num_layers=2),
                                                                        seed=3)
    plan = Servable(model).streams
    assert plan is not None
    rng = np.random.default_rng(2)
    n = 5
    batched = [rng.standard_normal((*e.shape[:e.axis], n, *e.shape[e.axis:])).astype(np.float32)
               for e in plan.entries]
    parts = plan.split(batched, n)
    assert len(parts) == n
    for i, part in enumerate(parts):
        for b, e, got in zip(batched, plan.entries, part, strict=True):
            want = np.take(b, i, axis=e.axis)
            assert got.shape == e.shape and got.tobytes() == np.ascontiguousarray(want).tobytes()
            assert got.flags.c_contiguous and not np.shares_memory(got, b)
    restacked = plan.stack(parts)
    assert all(r.tobytes() == b.tobytes() for r, b in zip(restacked, batched, strict=True))


def test_set_kernel_threads_changes_the_count_this_process_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    from rnnkit.kernels import _threads
    from rnnkit.serve._cli import set_kernel_threads

    monkeypatch.setattr(_threads, "CORES", _threads.CORES)
    monkeypatch.setenv("RNNKIT_KERNEL_THREADS", "")
    monkeypatch.setattr(_threads.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    set_kernel_threads(1)
    assert _threads.CORES == 1 and _threads.blocks(64) == [(0, 64)]
    set_kernel_threads(3)
    assert _threads.CORES == 3 and len(_threads.blocks(64)) == 3
    set_kernel_threads(9)
    assert _threads.CORES == 4
