"""The serving app in process (Starlette's test client): predict and stream answers equal, bit
for bit, what the model gives each request alone, also when requests are batched together;
sequence numbers, limits, auth, metrics, expiry, and the loaders."""

from __future__ import annotations

import json
import struct
import threading
import warnings
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

pytest.importorskip("starlette")
pytest.importorskip("httpx")
warnings.filterwarnings("ignore", message=".*httpx2.*")

from starlette.testclient import TestClient  # noqa: E402

from rnnkit.serve import Servable, ServeConfig  # noqa: E402

F = 4


def lstm_model(units: int = 8, seqs: bool = False, head: bool = False) -> rk.Sequential:
    layers: list[Any] = [rk.LSTM(units, "tanh", seed=1, return_sequences=seqs)]
    if head:
        layers.append(rk.Dense(3, "tanh", seed=2))
    return rk.Sequential(layers, input_shape=(None, None, F))


def f32(v: Any) -> np.ndarray:
    return np.asarray(v, dtype=np.float32)


def client(model: Any, **settings: Any) -> TestClient:
    return TestClient(rk.serve.app(model, **settings))


def reference_steps(model: rk.Sequential, xs: np.ndarray) -> tuple[list[np.ndarray], Any]:
    """Each step's outputs and the final state, stepping the LSTM alone (batch 1) by hand."""
    lstm = model.layers[0]
    state = lstm.zero_state(1)
    outs = []
    for x in xs:
        seq, state = lstm.seq_init(x[None], state)
        outs.append(seq[0])
    return outs, state


def test_concurrent_predicts_are_batched_and_each_equals_predict_alone() -> None:
    model = lstm_model()
    rng = np.random.default_rng(0)
    reqs = [(rng.standard_normal((1 + k % 3, 5, F)).astype(np.float32), k % 2) for k in range(24)]
    answers: dict[int, Any] = {}
    with client(model, max_wait_ms=40) as c:
        def call(k: int) -> None:
            x, with_len = reqs[k]
            body: dict[str, Any] = {"x": x.tolist()}
            if with_len:
                body["lengths"] = [1 + (k + i) % 5 for i in range(x.shape[0])]
            answers[k] = c.post("/v1/predict", json=body)

        threads = [threading.Thread(target=call, args=(k,)) for k in range(len(reqs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        metrics = c.get("/metrics").text
    for k, (x, with_len) in enumerate(reqs):
        r = answers[k]
        assert r.status_code == 200, r.text
        lens = np.array([1 + (k + i) % 5 for i in range(x.shape[0])]) if with_len else None
        want = model.predict(x, lengths=lens)
        assert f32(r.json()["outputs"]).tobytes() == want.tobytes()
    name = 'rnnkit_serve_batch_requests_count{kind="predict"}'
    counts = [line for line in metrics.splitlines() if line.startswith(name)]
    assert counts and float(counts[0].split()[-1]) < len(reqs)  # fewer calls than requests: batched


def test_predict_npy_in_and_out_and_lengths_in_the_query() -> None:
    model = lstm_model(seqs=True)
    x = np.random.default_rng(1).standard_normal((3, 6, F)).astype(np.float32)
    buf = __import__("io").BytesIO()
    np.save(buf, x)
    with client(model) as c:
        r = c.post("/v1/predict?lengths=6,2,4", content=buf.getvalue(),
                   headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
        assert r.status_code == 200, r.text
        got = np.load(__import__("io").BytesIO(r.content))
        assert got.tobytes() == model.predict(x, lengths=np.array([6, 2, 4])).tobytes()
        r = c.post("/v1/predict", content=b"not npy", headers={"content-type": "application/x-npy"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_npy"
        buf64 = __import__("io").BytesIO()
        np.save(buf64, x.astype(np.float64))
        r = c.post("/v1/predict", content=buf64.getvalue(), headers={"content-type": "application/x-npy"})
        assert r.status_code == 422 and r.json()["error"]["expected"] == "float32"


class _BatchDependent(Servable):
    """A model whose answer depends on the batch it is computed in (a stand-in for layers whose
    rows are not batch-independent)."""

    def predict(self, x: np.ndarray, lengths: Any, mask: Any = None) -> list[np.ndarray]:
        return [out + np.float32(x.shape[0]) for out in super().predict(x, lengths, mask)]


def test_a_model_whose_rows_depend_on_the_batch_is_computed_request_by_request() -> None:
    model = lstm_model()
    sv = _BatchDependent(model)
    assert not sv.predict_batched and "one request at a time" in sv.describe()["predict_batching"]
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((2, 3, F)).astype(np.float32) for _ in range(8)]
    out: dict[int, Any] = {}
    with client(sv, max_wait_ms=40) as c:
        def call(k: int) -> None:
            out[k] = c.post("/v1/predict", json={"x": xs[k].tolist()})

        ts = [threading.Thread(target=call, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    for k, x in enumerate(xs):
        assert f32(out[k].json()["outputs"]).tobytes() == (model.predict(x) + np.float32(2)).tobytes()


def test_stream_steps_over_http_follow_the_sequence_numbers() -> None:
    model = lstm_model(head=True)
    xs = np.random.default_rng(3).standard_normal((4, 2, F)).astype(np.float32)
    with client(model) as c:
        sid = c.post("/v1/streams").json()["id"]
        url = f"/v1/streams/{sid}/step"
        r1 = c.post(url, json={"seq": 1, "x": xs[0].tolist()}).json()
        again = c.post(url, json={"seq": 1, "x": xs[0].tolist()}).json()
        assert again["replayed"] and not r1["replayed"] and again["outputs"] == r1["outputs"]
        conflict = c.post(url, json={"seq": 1, "x": xs[1].tolist()})
        assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "seq_conflict"
        gap = c.post(url, json={"seq": 3, "x": xs[1].tolist()})
        assert gap.status_code == 409 and gap.json()["error"]["expected"] == 2
        c.post(url, json={"seq": 2, "x": xs[1].tolist()})
        stale = c.post(url, json={"seq": 1, "x": xs[0].tolist()})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "seq_stale"
        state = c.get(f"/v1/streams/{sid}").json()
        assert state["seq"] == 2
        # the whole model on the 4 timesteps so far: every output is the prediction of its prefix
        seq_all = np.concatenate(xs[:2])[None]
        want = [model.predict(seq_all[:, :t + 1]) for t in range(4)]
        r2 = c.post(url, json={"seq": 2, "x": xs[1].tolist()}).json()
        got = f32(r1["outputs"]).tolist() + f32(r2["outputs"]).tolist()
        np.testing.assert_allclose(f32(got), np.concatenate(want), rtol=0, atol=1e-6)
        _, st = reference_steps(model, xs[:2])
        assert f32(state["state"]["0.h"]).tobytes() == st[0][0].tobytes()
        assert f32(state["state"]["0.c"]).tobytes() == st[1][0].tobytes()
        assert c.delete(f"/v1/streams/{sid}").status_code == 200
        gone = c.post(url, json={"seq": 3, "x": xs[2].tolist()})
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "unknown_stream"


def test_websocket_steps_of_many_streams_are_batched_and_equal_each_stream_alone() -> None:
    model = lstm_model(units=16, seqs=True)
    n, steps = 12, 5
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((n, steps, 1, F)).astype(np.float32)
    got: dict[int, list[np.ndarray]] = {}
    with client(model, max_wait_ms=30) as c:
        ids = [c.post("/v1/streams").json()["id"] for _ in range(n)]

        def run(i: int) -> None:
            outs = []
            with c.websocket_connect(f"/v1/streams/{ids[i]}/ws") as ws:
                for t in range(steps):
                    if t % 2:
                        ws.send_bytes(struct.pack("<Q", t + 1) + xs[i, t].tobytes())
                        b = ws.receive_bytes()
                        assert struct.unpack_from("<QB", b) == (t + 1, 0)
                        outs.append(np.frombuffer(b, np.float32, offset=9).reshape(1, -1))
                    else:
                        ws.send_text(json.dumps({"seq": t + 1, "x": xs[i, t].tolist()}))
                        outs.append(f32(ws.receive_json()["outputs"]))
            got[i] = outs

        ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        metrics = c.get("/metrics").text
    for i in range(n):
        want, _ = reference_steps(model, xs[i])
        assert all(g.tobytes() == w.tobytes() for g, w in zip(got[i], want, strict=True))
    name = 'rnnkit_serve_batch_requests_count{kind="step"}'
    line = next(x for x in metrics.splitlines() if x.startswith(name))
    assert float(line.split()[-1]) < n * steps


def test_hostile_requests_get_4xx_naming_the_problem_and_leave_other_streams_alone() -> None:
    model = lstm_model(head=True)
    x = np.ones((1, F), np.float32)
    with client(model, max_body_bytes=4096, max_timesteps=8, max_batch=4, max_streams=3) as c:
        sid = c.post("/v1/streams").json()["id"]
        c.post(f"/v1/streams/{sid}/step", json={"seq": 1, "x": x.tolist()})
        before = c.get(f"/v1/streams/{sid}").json()
        step = f"/v1/streams/{sid}/step"
        cases: list[tuple[str, str, Any, int, str]] = [
            ("POST", "/v1/predict", b"{nope", 400, "bad_json"),
            ("POST", "/v1/predict", b'{"x": NaN}', 400, "bad_json"),
            ("POST", "/v1/predict", {"x": [[[1, 2]]]}, 422, "bad_shape"),
            ("POST", "/v1/predict", {"x": [[["a"] * F]]}, 422, "bad_dtype"),
            ("POST", "/v1/predict", {"x": [[[1e39] * F]]}, 422, "non_finite"),
            ("POST", "/v1/predict", {"x": [[[1] * F], [1]]}, 422, "bad_input"),
            ("POST", "/v1/predict", {"x": [[[1] * F] * 9]}, 413, "too_many_timesteps"),
            ("POST", "/v1/predict", {"x": [[[1] * F]] * 5}, 413, "too_many_sequences"),
            ("POST", "/v1/predict", {"x": [[[1] * F] * 2], "lengths": [3]}, 422, "bad_lengths"),
            ("POST", "/v1/predict", {"x": [[[1] * F] * 2], "mask": [[1, 2]]}, 422, "bad_mask"),
            ("POST", "/v1/predict", {"y": 1}, 422, "missing_field"),
            ("POST", "/v1/predict", [1, 2], 422, "bad_body"),
            ("POST", "/v1/predict", b"x" * 5000, 413, "body_too_large"),
            ("POST", step, {"seq": 1.5, "x": x.tolist()}, 422, "bad_seq"),
            ("POST", step, {"seq": True, "x": x.tolist()}, 422, "bad_seq"),
            ("POST", step, {"seq": 9, "x": x.tolist()}, 409, "seq_gap"),
            ("POST", step, {"seq": 2, "x": [[1, 2]]}, 422, "bad_shape"),
            ("POST", step, b'{"seq": 2, "x": [[1e400, 0, 0, 0]]}', 422, "non_finite"),
            ("POST", "/v1/streams/nope/step", {"seq": 1, "x": x.tolist()}, 404, "unknown_stream"),
            ("GET", "/v1/streams/" + "z" * 300, None, 404, "unknown_stream"),
            ("PUT", "/v1/predict", None, 405, "method_not_allowed"),
            ("GET", "/v2/anything", None, 404, "not_found"),
        ]
        for method, url, body, status, code in cases:
            kw: dict[str, Any] = {}
            if isinstance(body, bytes):
                kw["content"] = body
            elif body is not None:
                kw["content"] = json.dumps(body, allow_nan=True)
                kw["headers"] = {"content-type": "application/json"}
            r = c.request(method, url, **kw)
            assert r.status_code == status, (url, body, r.text)
            assert r.json()["error"]["code"] == code, r.text
            assert r.json()["error"]["message"]
        r = c.post("/v1/predict", content=b"{}", headers={"content-type": "image/png"})
        assert r.status_code == 415 and "application/json" in r.json()["error"]["expected"]
        with c.websocket_connect(f"/v1/streams/{sid}/ws") as ws:
            for msg in ("junk", json.dumps({"seq": 5, "x": x.tolist()}), json.dumps({"seq": 2})):
                ws.send_text(msg)
                assert ws.receive_json()["error"]["code"] in ("bad_json", "seq_gap", "missing_field")
            ws.send_bytes(b"\x01\x02")
            assert ws.receive_json()["error"]["code"] == "bad_message"
        c.post("/v1/streams")
        c.post("/v1/streams")
        full = c.post("/v1/streams")
        assert full.status_code == 429 and full.json()["error"]["code"] == "too_many_streams"
        after = c.get(f"/v1/streams/{sid}").json()
        assert after["state"] == before["state"] and after["seq"] == before["seq"] == 1
        assert c.get("/healthz").status_code == 200


def test_bearer_token_is_required_except_for_healthz() -> None:
    token = "s3cret-token-0123456789"
    with client(lstm_model(), token=token) as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/v1/model")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert c.get("/v1/model", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/v1/model", headers={"authorization": "Bearer " + token}).status_code == 200
        with pytest.raises(Exception):  # noqa: B017 - the socket is closed before it opens
            with c.websocket_connect("/v1/streams/x/ws") as ws:
                ws.receive_text()


def test_model_document_and_metrics_text() -> None:
    model = lstm_model(head=True)
    with client(model) as c:
        doc = c.get("/v1/model").json()
        assert doc["input_shape"] == [None, None, F] and doc["output_shapes"] == [[None, 3]]
        assert doc["input_dtype"] == "float32" and doc["rnnkit_version"] == rk.__version__
        assert doc["streams"]["state"] == {"0.h": [8], "0.c": [8]}
        c.post("/v1/predict", json={"x": [[[0.5] * F]]})
        c.post("/v1/predict", json={"x": [[[0.5] * 3]]})
        text = c.get("/metrics").text
    assert 'rnnkit_serve_requests_total{route="predict",status="200"} 1' in text
    assert 'rnnkit_serve_requests_total{route="predict",status="422"} 1' in text
    assert 'rnnkit_serve_request_duration_seconds_bucket{route="predict",le="+Inf"} 2' in text
    assert "# TYPE rnnkit_serve_active_streams gauge" in text


def test_idle_streams_expire() -> None:
    app = rk.serve.app(lstm_model(), stream_ttl_s=100.0)
    with TestClient(app) as c:
        keep, old = c.post("/v1/streams").json()["id"], c.post("/v1/streams").json()["id"]
        server = app.state.server
        server.store.streams[old].touched -= 500.0
        gone = c.portal.call(server.expire)
        assert gone == [old]
        assert c.get(f"/v1/streams/{old}").status_code == 404
        assert c.get(f"/v1/streams/{keep}").status_code == 200


def test_models_that_cannot_be_stepped_refuse_streams_and_still_predict() -> None:
    b = rk.GraphBuilder()
    inp = b.input((None, None, F))
    out = b.add(rk.Bidirectional(rk.LSTM(4, "tanh", seed=1)), inp)
    model = b.build(out)
    with client(model) as c:
        r = c.post("/v1/streams")
        assert r.status_code == 409 and "GraphModel" in r.json()["error"]["message"]
        x = np.random.default_rng(5).standard_normal((2, 3, F)).astype(np.float32)
        got = f32(c.post("/v1/predict", json={"x": x.tolist()}).json()["outputs"])
        assert got.tobytes() == model.predict(x).tobytes()


def test_serve_config_is_checked() -> None:
    with pytest.raises(rk.InvalidParameterError, match="max_rows"):
        ServeConfig(max_rows=0)
    with pytest.raises(rk.InvalidParameterError, match="token"):
        ServeConfig(token="short")
    with pytest.raises(rk.InvalidParameterError, match="stateful"):
        Servable(rk.Sequential([rk.LSTM(2, stateful=True)], input_shape=(None, 3, F)))


def test_the_serve_command_refuses_bad_arguments_with_one_line(tmp_path: Any, capsys: Any) -> None:
    from rnnkit.cli import main

    model = tmp_path / "m.safetensors"
    rk.save_model(lstm_model(), model)
    (tmp_path / "short").write_text("abc\n")
    cases = [
        (["serve", str(tmp_path / "missing.safetensors")], "missing.safetensors"),
        (["serve", str(model), "--token-file", str(tmp_path / "short")], "at least 16"),
        (["serve", str(model), "--token-file", str(tmp_path / "nope")], "no such file"),
        (["serve", str(model), "--workers", "2", "--state-db", str(tmp_path / "s.db")], "predict only"),
        (["serve", str(model), "--max-rows", "0"], "max_rows"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("rnnkit: error: ") and words in err[0], err


def test_a_stream_database_refuses_another_model(tmp_path: Any) -> None:
    db = str(tmp_path / "s.db")
    with client(lstm_model(), state_db=db) as c:
        sid = c.post("/v1/streams").json()["id"]
        c.post(f"/v1/streams/{sid}/step", json={"seq": 1, "x": [[0.5] * F]})
    with client(lstm_model(), state_db=db) as c:  # the same model: the stream is back
        assert c.get(f"/v1/streams/{sid}").json()["seq"] == 1
    other = rk.Sequential([rk.LSTM(8, "tanh", seed=9)], input_shape=(None, None, F))
    with pytest.raises(rk.InvalidParameterError, match="another model"):
        rk.serve.app(other, state_db=db)


def test_a_job_timed_out_in_the_queue_is_answered_503_and_never_computed() -> None:
    import asyncio
    import time
    from concurrent.futures import ThreadPoolExecutor

    from rnnkit.serve._batcher import Batcher
    from rnnkit.serve._errors import RequestError
    from rnnkit.serve._metrics import Metrics

    calls: list[list[str]] = []

    def slow(payloads: list[str]) -> list[str]:
        calls.append(payloads)
        time.sleep(0.4)
        return [p.upper() for p in payloads]

    async def main() -> tuple[Any, Any]:
        b = Batcher("t", slow, ThreadPoolExecutor(1), Metrics(), max_wait_s=0.0, max_rows=1,
                    max_queue_rows=100, timeout_s=0.1)
        b.start()
        first = b.submit("k", 1, "a")
        await asyncio.sleep(0.05)                   # "a" is being computed
        second = b.submit("k", 1, "b")
        out = await asyncio.gather(first, second, return_exceptions=True)
        await b.stop()
        return out[0], out[1]

    a, b = asyncio.run(main())
    assert a == "A" and isinstance(b, RequestError) and b.status == 503 and b.code == "timeout"
    assert calls == [["a"]]
