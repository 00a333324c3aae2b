"""One prediction path for a saved forecaster: ``rnnkit predict``, the model server and Python
(:func:`rnnkit.io.load_forecaster`) apply the preprocessing stored with the model — scaling and
transform, differencing, the missing-value policy, the window — and give the same float64 bits;
the dates past the end of a file follow its calendar as pandas' ``date_range`` does."""

from __future__ import annotations

import csv
import io
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import rnnkit as rk
from rnnkit.cli import main

warnings.filterwarnings("ignore", message=".*httpx2.*")

TRAIN = ["--epochs", "3", "--units", "4", "--quiet", "--no-plots", "--lr", "0.02"]


def month_ends(n: int) -> list[str]:
    """``n`` month ends from 2015-01-31 (February 2016 is the 29th), without pandas."""
    months = np.datetime64("2015-01") + np.arange(1, n + 1)
    return [str(d) for d in months.astype("datetime64[D]") - 1]


def level_series(n: int) -> np.ndarray:
    k = np.arange(n)
    return np.round(5.0 + 3.0 * np.sin(k / 4.0) + 0.02 * k, 4)


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A forecaster trained with --transform log1p and --missing interpolate on a month-end series
    with two empty fields: (its model file, the data file)."""
    d = tmp_path_factory.mktemp("scaled")
    y = level_series(60)
    fields = [repr(float(v)) for v in y]
    fields[20] = fields[41] = ""
    data = d / "series.csv"
    data.write_text("date,level\n" + "".join(f"{t},{v}\n"
                                             for t, v in zip(month_ends(60), fields, strict=True)))
    assert main(["train", str(data), "--target", "level", "--window", "4", "--transform", "log1p",
                 "--missing", "interpolate", *TRAIN, "--out", str(d / "out")]) == 0
    return d / "out" / "model.safetensors", data


def predict_csv(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[list[str], list[list[str]]]:
    capsys.readouterr()
    assert main(["predict", *args]) == 0, capsys.readouterr().err
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    return rows[0], rows[1:]


def bits(values: Any) -> bytes:
    return np.asarray(values, dtype=np.float64).tobytes()


def test_predict_applies_the_stored_missing_policy_and_python_gives_its_bits(
        scaled: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    model, data = scaled
    fc = rk.io.load_forecaster(model)
    assert fc.spec.missing == "interpolate" and fc.spec.x_scaler.transform == "log1p"
    header, rows = predict_csv(capsys, str(model), str(data))       # no --missing: the model's own
    assert header == ["date", "prediction", "actual"] and len(rows) == 60 - 4 + 1
    pos, values = fc.one_step(fc.read_csv(data))
    assert bits([float(r[1]) for r in rows]) == bits(values)          # the text reads back to the bits
    # the gap at data row 20 was interpolated, as in training: its neighbours' mean
    y = level_series(60)
    assert float(rows[20 - 4][2]) == pytest.approx((y[19] + y[21]) / 2, abs=1e-12)
    # by hand: log1p, standardise with the stored statistics, the network, back to data units
    table = fc.read_csv(data)
    v = table.columns["level"]
    x = (np.log1p(v[:4, None]) - fc.spec.x_scaler.mean) / fc.spec.x_scaler.std
    z = float(np.asarray(fc.model.predict(x[None].astype(np.float32)), dtype=np.float64)[0, 0])
    u = z * fc.spec.y_scaler.std[0] + fc.spec.y_scaler.mean[0]
    # float32 input rounding (2**-24 relative) through a 4-unit network and expm1: far below 1e-5
    assert float(rows[0][1]) == pytest.approx(np.expm1(u), rel=1e-5)
    assert main(["predict", str(model), str(data), "--missing", "drop"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trained on data read with --missing interpolate" in err[0]


def test_predicted_dates_past_the_end_follow_month_ends_as_pandas_does(
        scaled: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    pd = pytest.importorskip("pandas")
    model, data = scaled
    _, rows = predict_csv(capsys, str(model), str(data))
    _, rec = predict_csv(capsys, str(model), str(data), "--steps", "14")
    idx = pd.DatetimeIndex(month_ends(60))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        freq = str(getattr(pd.infer_freq(idx), "freqstr", pd.infer_freq(idx)))
    after = [f"{d:%Y-%m-%d}" for d in pd.date_range(idx[-1], periods=15, freq=freq)[1:]]
    assert rows[-1][0] == after[0] == "2020-01-31"
    assert [r[0] for r in rec] == after                                # 2020-02-29 included
    assert "2020-02-29" in after


def test_the_server_answers_predicts_bits_in_data_units(scaled: tuple[Path, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    model, data = scaled
    _, rows = predict_csv(capsys, str(model), str(data))
    fc = rk.io.load_forecaster(model)
    v = fc.read_csv(data).columns["level"]
    windows = np.stack([v[s:s + 4, None] for s in range(len(v) - 3)])      # every window, raw rows
    with TestClient(rk.serve.app(str(model))) as c:
        doc = c.get("/v1/model").json()
        assert doc["input_shape"] == [None, 4, 1] and doc["forecast"]["missing"] == "interpolate"
        r = c.post("/v1/predict", json={"x": windows.tolist()})
        assert r.status_code == 200, r.text
        served = np.asarray(r.json()["outputs"], dtype=np.float64)[:, 0]
        one = c.post("/v1/predict", json={"x": windows[7:8].tolist()}).json()["outputs"]
        npy = io.BytesIO()
        np.save(npy, windows)
        rn = c.post("/v1/predict", content=npy.getvalue(),
                    headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
        assert rn.status_code == 200, rn.text
        served_npy = np.load(io.BytesIO(rn.content))[:, 0]
        refused = c.post("/v1/streams")
        masked = c.post("/v1/predict", json={"x": windows[:2].tolist(), "lengths": [4, 4]})
        short = c.post("/v1/predict", json={"x": windows[:2, :3].tolist()})
    cli = np.array([float(r[1]) for r in rows])
    assert bits(served) == bits(cli) == bits(served_npy)
    assert bits(one[0]) == bits(cli[7:8])
    assert bits(fc.predict_windows(windows)) == bits(cli)
    assert refused.status_code == 409 and "forecaster" in refused.json()["error"]["message"]
    assert masked.status_code == 422 and masked.json()["error"]["code"] == "lengths_unsupported"
    assert short.status_code == 422 and short.json()["error"]["code"] == "bad_shape"


def test_a_differencing_forecaster_with_another_target_is_served_with_its_target(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    k = np.arange(50)
    a, b = np.round(np.sin(k / 3), 4), np.round(np.cos(k / 5), 4)
    c = np.round(10 + 0.3 * k + a, 4)
    data = tmp_path / "abc.csv"
    data.write_text("a,b,c\n" + "".join(f"{float(x)!r},{float(y)!r},{float(z)!r}\n"
                                         for x, y, z in zip(a, b, c, strict=True)))
    assert main(["train", str(data), "--target", "c", "--features", "a,b", "--difference", "--window", "3",
                 "--horizon", "2", *TRAIN, "--out", str(tmp_path / "o")]) == 0
    model = tmp_path / "o" / "model.safetensors"
    _, rows = predict_csv(capsys, str(model), str(data))
    assert len(rows) == 50 - 4 + 1 and rows[0][0] == "5"              # rows s..s+3 -> row s+3+2
    x = np.stack([np.stack([a, b], axis=1)[s:s + 4] for s in range(47)])
    last_c = c[3:50]                                                   # c at each window's last row
    with TestClient(rk.serve.app(rk.io.load_forecaster(model))) as cl:
        r = cl.post("/v1/predict", json={"x": x.tolist(), "target": last_c.tolist()})
        without = cl.post("/v1/predict", json={"x": x.tolist()})
    assert r.status_code == 200, r.text
    assert bits(np.asarray(r.json()["outputs"])[:, 0]) == bits([float(row[1]) for row in rows])
    assert without.status_code == 422 and "give the value of 'c'" in without.json()["error"]["message"]


def strip_stored_policy(model: Path) -> None:
    """Rewrite ``model`` as a file saved before the policy was stored: no ``missing`` entry, and
    training notes without it."""
    with safe_open(str(model), framework="numpy") as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no items()
    spec = json.loads(meta[rk.timeseries.SPEC_KEY])
    del spec["missing"]
    spec["extra"].pop("missing")
    meta[rk.timeseries.SPEC_KEY] = json.dumps(spec)
    save_file(tensors, str(model), metadata=meta)


def test_an_older_file_without_the_policy_reads_with_error_unless_told(
        scaled: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, data = scaled
    old = tmp_path / "old.safetensors"
    old.write_bytes(model.read_bytes())
    strip_stored_policy(old)
    assert rk.io.load_forecaster(old).spec.missing is None
    assert main(["predict", str(old), str(data)]) == 2
    assert "missing value(s)" in capsys.readouterr().err
    _, rows = predict_csv(capsys, str(old), str(data), "--missing", "interpolate")
    _, new = predict_csv(capsys, str(model), str(data))
    assert rows == new


def test_convert_to_an_rnnkit_file_keeps_the_forecast_settings(
        scaled: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, data = scaled
    copy = tmp_path / "copy.rnnkit"
    assert main(["convert", str(model), str(copy)]) == 0
    assert rk.io.load_forecaster(copy).spec.to_json() == rk.io.load_forecaster(model).spec.to_json()
    assert predict_csv(capsys, str(copy), str(data)) == predict_csv(capsys, str(model), str(data))


def test_a_plain_model_file_is_no_forecaster(tmp_path: Path) -> None:
    plain = rk.Sequential([rk.LSTM(2, seed=1), rk.Dense(1, seed=2)], input_shape=(None, 3, 1))
    rk.io.save_model(plain, tmp_path / "plain.safetensors")
    with pytest.raises(rk.FileFormatError, match="saved without forecast settings"):
        rk.io.load_forecaster(tmp_path / "plain.safetensors")
