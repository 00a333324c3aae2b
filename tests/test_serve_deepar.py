"""A DeepAR model file behind ``rnnkit serve``: ``/v1/predict`` takes series in long format and
answers the mean and quantiles of ``rk.io.DeepAR``'s own forecast with the request's seed and
number of samples, bit for bit, over real HTTP (a server process on a loopback port); a request
is reproducible; bad requests are typed 4xx answers naming what was wrong."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

from serve_trials import ServerProcess  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit.io import DeepAR  # noqa: E402
from rnnkit.timeseries._panel import Panel  # noqa: E402

N_ROWS = 24


def _quarters(n: int) -> np.ndarray:
    m0 = np.datetime64("2000-01", "M").astype(np.int64)
    return (m0 + 3 * np.arange(n)).astype("datetime64[M]").astype("datetime64[D]")


def _columns(ids: tuple[str, ...] = ("a", "b"), covariate: bool = False,
             n: int = N_ROWS) -> dict[str, list[Any]]:
    """Long-format columns of quarterly series with a season of 4 (JSON-ready: dates as text)."""
    rng = np.random.default_rng(7)
    cols: dict[str, list[Any]] = {"unique_id": [], "ds": [], "y": []}
    if covariate:
        cols["c"] = []
    for k, sid in enumerate(ids):
        y = 10.0 * (k + 1) * (1 + 0.3 * np.sin(np.arange(n) * np.pi / 2)) + rng.normal(0, 0.5, n)
        cols["unique_id"] += [sid] * n
        cols["ds"] += [str(d) for d in _quarters(n)]
        cols["y"] += [float(v) for v in y]
        if covariate:
            cols["c"] += [float(v) for v in rng.normal(size=n)]
    return cols


def _panel(cols: dict[str, list[Any]]) -> Panel:
    cov = {k: v for k, v in cols.items() if k not in ("unique_id", "ds", "y")}
    return Panel.from_columns(cols["unique_id"], cols["ds"], cols["y"], cov or None)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("deepar")
    m = DeepAR(4, context=8, units=6, layers=1, epochs=3, patience=0, batch_size=16, seed=1,
               lags=(1, 4))          # 1 and the season: 24 rows are enough
    m.fit(_panel(_columns()))
    return m.save(d / "deepar.safetensors")


def _expected(path: Path, cols: dict[str, list[Any]], samples: int, seed: int,
              quantiles: list[float]) -> tuple[np.ndarray, np.ndarray]:
    fc = DeepAR.load(path).forecast(_panel(cols), num_samples=samples, seed=seed)
    return fc.mean, fc.quantile(quantiles)


def test_a_served_deepar_file_answers_deepars_own_quantiles_over_http(model_file: Path,
                                                                      tmp_path: Path) -> None:
    server = ServerProcess(model_file, [], tmp_path / "log")
    server.start()
    try:
        doc = httpx.get(server.url + "/v1/model").json()
        assert doc["deepar"]["horizon"] == 4 and doc["deepar"]["ids"] == ["a", "b"]
        assert doc["deepar"]["rows_needed"] == 8 + 4                  # context + the season's lag
        assert doc["streams"] is None and "sampling" in doc["streams_unavailable"]
        cols = _columns()
        req = {**cols, "num_samples": 64, "seed": 5, "quantiles": [0.1, 0.5, 0.9]}
        r = httpx.post(server.url + "/v1/predict", json=req, timeout=60)
        assert r.status_code == 200, r.text
        got = r.json()
        mean, qv = _expected(model_file, cols, 64, 5, [0.1, 0.5, 0.9])
        assert got["ids"] == ["a", "b"] and (got["num_samples"], got["seed"]) == (64, 5)
        # the horizon's dates continue each series' quarters: 2006-01-01 .. 2006-10-01
        assert got["ds"] == [["2006-01-01", "2006-04-01", "2006-07-01", "2006-10-01"]] * 2
        # JSON carries float64 exactly (shortest round-trip text): the same bits as DeepAR's own
        assert np.array_equal(np.array(got["mean"]), mean)
        for j, q in enumerate(("0.1", "0.5", "0.9")):
            assert np.array_equal(np.array(got["quantiles"][q]), qv[j]), q
        assert np.all(qv[0] < qv[2])                                   # an interval, not a point
        # reproducible: the same request again gives the same bits; another seed other numbers
        again = httpx.post(server.url + "/v1/predict", json=req, timeout=60).json()
        assert again == got
        other = httpx.post(server.url + "/v1/predict", json={**req, "seed": 6}, timeout=60).json()
        assert other["mean"] != got["mean"]
        # the defaults: 200 samples, seed 0, quantiles 0.1, 0.5, 0.9
        plain = httpx.post(server.url + "/v1/predict", json=cols, timeout=60).json()
        mean0, q0 = _expected(model_file, cols, 200, 0, [0.1, 0.5, 0.9])
        assert (plain["num_samples"], plain["seed"]) == (200, 0)
        assert np.array_equal(np.array(plain["mean"]), mean0)
        assert np.array_equal(np.array(plain["quantiles"]["0.5"]), q0[1])
        # a typed refusal over the wire: a series the model was not trained on
        bad = httpx.post(server.url + "/v1/predict", json=_columns(("a", "zz")), timeout=60)
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "bad_series"
        assert "'zz' was not among the 2 series" in bad.json()["error"]["message"]
    finally:
        server.stop()


def test_bad_deepar_requests_are_typed_4xx_naming_the_problem(model_file: Path) -> None:
    cols = _columns()

    def err(c: TestClient, body: Any, status: int, code: str, *fragments: str, **kw: Any) -> None:
        r = c.post("/v1/predict", json=body, **kw) if "content" not in kw else c.post("/v1/predict", **kw)
        assert r.status_code == status, r.text
        e = r.json()["error"]
        assert e["code"] == code, e
        for f in fragments:
            assert f in e["message"], (f, e["message"])

    with TestClient(rk.serve.app(str(model_file))) as c:
        err(c, None, 415, "bad_content_type", "reads series as JSON", content=b"\x93NUMPY",
            headers={"content-type": "application/x-npy"})
        err(c, {k: v for k, v in cols.items() if k != "y"}, 422, "missing_field", "no 'y'")
        err(c, {**cols, "num_sample": 10}, 422, "unknown_field", "['num_sample']")
        err(c, {**cols, "num_samples": 0}, 422, "bad_parameter", "num_samples", "got 0")
        err(c, {**cols, "num_samples": 60_000}, 422, "bad_parameter", "at most 100000 paths")
        err(c, {**cols, "seed": -1}, 422, "bad_parameter", "seed")
        err(c, {**cols, "quantiles": [0.5, 1.0]}, 422, "bad_parameter", "strictly between 0 and 1")
        err(c, {**cols, "quantiles": []}, 422, "bad_parameter", "quantiles")
        err(c, {**cols, "y": cols["y"][:-1]}, 422, "bad_series", "column 'y' has 47 value(s)")
        err(c, {**cols, "ds": ["not a date"] * len(cols["ds"])}, 422, "bad_series", "not a date")
        short = _columns(n=11)                                         # 11 rows < context 8 + lag 4
        err(c, short, 422, "bad_series", "series 'a': 11 row(s), too short", "at least 12")
        err(c, {**cols, "future": {"unique_id": ["a"], "ds": ["2006-01-01"]}}, 422, "unknown_field",
            "reads no covariates")
        err(c, [1, 2], 422, "bad_body", "must be a JSON object")
        # a DeepAR model has no streams: they answer 409
        assert c.post("/v1/streams").status_code == 409


def test_a_trained_deepar_object_is_served_alike(model_file: Path) -> None:
    m = DeepAR.load(model_file)
    cols = _columns()
    mean, qv = _expected(model_file, cols, 30, 2, [0.25])
    with TestClient(rk.serve.app(m)) as c:
        got = c.post("/v1/predict", json={**cols, "num_samples": 30, "seed": 2, "quantiles": [0.25]}).json()
    assert np.array_equal(np.array(got["mean"]), mean)
    assert np.array_equal(np.array(got["quantiles"]["0.25"]), qv[0])
    with pytest.raises(rk.InvalidParameterError, match="not trained"):
        rk.serve.app(DeepAR(4))
