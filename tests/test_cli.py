"""The ``rnnkit`` command line, run as a user runs it (subprocesses), on the bundled data and on
small generated CSV files; every bad input gives one line on stderr and exit status 2."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import datasets

SUN = str(datasets.path("sunspots"))
CO2 = str(datasets.path("co2"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


Trained = tuple[Path, subprocess.CompletedProcess[str]]


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONHASHSEED": "0", **(env or {})}
    return subprocess.run([sys.executable, "-m", "rnnkit", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


def assert_bad_input(res: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit status 2, exactly one line on stderr, naming the problem, no traceback."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("rnnkit: error: ")
    assert "Traceback" not in res.stderr
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


def parse_table(stdout: str) -> dict[str, tuple[float, float]]:
    rows = {}
    for m in re.finditer(r"^  (\S.*?)\s+([0-9.]+|nan)\s+([0-9.]+|nan)$", stdout, re.M):
        rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return rows


def parse_ranking(stdout: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    """The printed backtest ranking: ``(name, (MASE, sMAPE, RMSE, MAE))``, rank 1 first."""
    rows = re.findall(r"^\s+(\d+)  (\S+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.e+]+)\s+([0-9.e+]+)$", stdout, re.M)
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1)), stdout
    return [(r[1], (float(r[2]), float(r[3]), float(r[4]), float(r[5]))) for r in rows]


def read_out_csv(text: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


# -- demo ----------------------------------------------------------------------------------------
def test_demo_beats_both_baselines_and_draws_two_pictures(tmp_path: Path) -> None:
    res = run("demo", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    table = parse_table(out)
    lstm = next(v for k, v in table.items() if k.startswith("LSTM"))
    pers = table["persistence"]
    ar = next(v for k, v in table.items() if k.startswith("AR("))
    assert lstm[0] < pers[0] and lstm[0] < ar[0], table          # RMSE
    assert lstm[1] < pers[1] and lstm[1] < ar[1], table          # MAE
    # the baselines are the numbers an independent computation gives (test_datasets checks them)
    assert pers == (30.346, 23.602) and ar == (16.953, 14.081)
    assert "held-out test, last 50 years (1959-2008)" in out
    # the verdict is the backtest ranking's sentence: it names the forecaster ranked first
    ranking = parse_ranking(out)
    first, (first_mase, *_) = ranking[0]
    second_mase = ranking[1][1][0]
    verdict = out.splitlines()[out.splitlines().index(next(ln for ln in out.splitlines()
                                                              if " on the backtest " in ln))]
    if first.startswith("LSTM"):
        m = re.fullmatch(rf"the {re.escape(first)} ranks 1st of {len(ranking)} on the backtest \(MASE "
                         rf"([0-9.]+)\); the best baseline, {re.escape(ranking[1][0])}, has MASE ([0-9.]+) "
                         rf"\(([0-9.]+)% worse\)", verdict)
        assert m, verdict
        w, r, pct = (float(v) for v in m.groups())
        # the sentence (4 digits) and the table (3 decimals) round the same MASE values
        assert abs(w - first_mase) <= 5.5e-4 and abs(r - second_mase) <= 5.5e-4, (verdict, ranking)
        assert abs(pct - 100 * (r - w) / r) <= 0.05 + 1e-9, verdict
    else:
        assert f": the {first} baseline beats it, MASE {first_mase:.4g}" in verdict
    y = datasets.sunspots().values
    mean = np.mean(y[9:259])                     # the targets of the years before the test part
    assert table["training mean"] == (round(float(np.sqrt(np.mean((y[259:] - mean) ** 2))), 3),
                                      round(float(np.mean(np.abs(y[259:] - mean))), 3))
    assert not any(k.startswith("seasonal") for k in table)        # yearly data: no calendar season
    assert re.search(r"\d+%\|", res.stderr) and "epoch" in res.stderr    # the tqdm progress bar
    names = ("model.safetensors", "loss.png", "forecast.png")
    model, loss_png, fc_png = (tmp_path / "out" / n for n in names)
    assert str(model) in out
    try:
        import matplotlib.image as mpimg
    except ImportError:  # the plot extra is optional: the demo says it drew nothing
        assert "no pictures: matplotlib is not installed" in out
        assert not loss_png.exists() and not fc_png.exists()
    else:
        for png, (h, w) in ((loss_png, (420, 700)), (fc_png, (700, 900))):
            assert str(png) in out                                 # it says where
            assert png.read_bytes()[:8] == PNG_SIGNATURE
            img = mpimg.imread(png)
            assert img.shape[:2] == (h, w) and img.std() > 0.05          # decodes, not blank
    # the saved model (with its scaler) reproduces the printed test metrics
    pred = run("predict", str(model), SUN)
    assert pred.returncode == 0, pred.stderr
    header, rows = read_out_csv(pred.stdout)
    assert header == ["YEAR", "prediction", "actual"]
    test = [(float(r[1]), float(r[2])) for r in rows if r[2] and int(r[0]) >= 1959]
    assert len(test) == 50
    p, a = np.array(test).T
    assert np.sqrt(np.mean((p - a) ** 2)) == pytest.approx(lstm[0], abs=2e-3)
    assert np.mean(np.abs(p - a)) == pytest.approx(lstm[1], abs=2e-3)


def test_demo_is_reproducible_and_quiet_drops_only_the_bar(tmp_path: Path) -> None:
    from rnnkit.cli._demo import run_demo

    a = run_demo(tmp_path / "a", verbose=False, plots=False)
    assert a.beats_baselines
    assert a.test_years.tolist() == list(range(1959, 2009))
    assert a.loss_png is None and not (tmp_path / "a" / "loss.png").exists()
    res = run("demo", "--out", str(tmp_path / "b"), "--quiet", "--no-plots")   # another process
    assert res.returncode == 0, res.stderr
    assert "epoch/s" not in res.stderr and not re.search(r"\d+%\|", res.stderr)   # no progress bar
    table = parse_table(res.stdout)
    assert [(n, round(r, 3), round(m, 3)) for n, r, m in a.comparison.rows] == [
        (n, *table[n]) for n, _, _ in a.comparison.rows]
    assert f"trained {a.epochs_run} epochs" in res.stdout
    assert [(n, round(m, 3)) for n, (m, *_) in parse_ranking(res.stdout)] == [
        (s.name, round(s.overall["mase"], 3)) for s in a.backtest.ranking()]


def test_demo_verdict_comes_from_its_backtest_ranking(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's last judgement is the sentence of a rolling-origin backtest over the held-out
    years: the forecaster it names is the one ranked first, and the ranking's numbers are those
    an independent computation gives (the LSTM's forecasts: the saved model run recursively)."""
    from rnnkit.cli._demo import BACKTEST_HORIZON, BACKTEST_WINDOWS, run_demo

    res = run_demo(tmp_path, verbose=True, plots=False, progress=False)
    out = capsys.readouterr().out
    bt = res.backtest
    y = datasets.sunspots().values
    years = datasets.sunspots().years
    # the windows tile the held-out test years exactly, so every forecast is out of sample
    assert BACKTEST_WINDOWS * BACKTEST_HORIZON == 50
    assert years[bt.origins].tolist() == [1959, 1969, 1979, 1989, 1999]
    scale = np.array([np.mean(np.abs(np.diff(y[:o]))) for o in bt.origins])      # MASE: lag-1 naive
    actual = np.stack([y[o:o + BACKTEST_HORIZON] for o in bt.origins])
    fc = rk.io.load_forecaster(res.model_path)
    independent = {
        "naive": np.stack([np.full(BACKTEST_HORIZON, y[o - 1]) for o in bt.origins]),
        "mean": np.stack([np.full(BACKTEST_HORIZON, np.mean(y[:o])) for o in bt.origins]),
        res.model_name: np.stack([fc.path(y[:o], BACKTEST_HORIZON) for o in bt.origins]),
    }
    printed = dict(parse_ranking(out))
    for name, pred in independent.items():
        m = float(np.mean(np.abs(pred - actual) / scale[:, None]))
        # the same float64 operations up to summation order: 1e-12 relative
        assert bt.score(name).overall["mase"] == pytest.approx(m, rel=1e-12), name
        assert printed[name][0] == round(m, 3), name                   # printed with 3 decimals
    ranked = sorted(printed.items(), key=lambda kv: kv[1][0])
    winner = ranked[0][0]
    assert winner == res.winner == bt.ranking()[0].name
    verdict = next(ln for ln in out.splitlines() if " on the backtest " in ln)
    assert out.splitlines()[-3] == verdict                  # before the lines saying what was saved
    assert verdict == bt.verdict(res.model_name)
    if winner == res.model_name:
        w, r = bt.ranking()[0].overall["mase"], bt.ranking()[1].overall["mase"]
        assert verdict == (f"the {winner} ranks 1st of {len(ranked)} on the backtest (MASE {w:.4g}); "
                           f"the best baseline, {ranked[1][0]}, has MASE {r:.4g} "
                           f"({100 * (r - w) / r:.1f}% worse)")
    else:
        assert f": the {winner} baseline beats it" in verdict


# -- train / predict / summary on the bundled sunspots --------------------------------------------
@pytest.fixture(scope="module")
def sun_model(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    out = tmp_path_factory.mktemp("sun")
    res = run("train", SUN, "--target", "SUNACTIVITY", "--window", "6", "--units", "8", "--epochs", "4",
              "--batch-size", "64", "--seed", "3", "--out", str(out), "--quiet", "--backtest-windows", "0")
    assert res.returncode == 0, res.stderr
    return out, res


def test_train_on_sunspots_writes_model_checkpoint_history(sun_model: Trained) -> None:
    out, res = sun_model
    assert "309 rows, 303 windows of 6" in res.stdout and "242 train, 61 validation" in res.stdout
    table = parse_table(res.stdout)
    y = datasets.sunspots().values
    val_pos = np.arange(303 - 61, 303) + 6                  # target rows of the last 61 windows
    pers = np.sqrt(np.mean((y[val_pos - 1] - y[val_pos]) ** 2))
    assert table["persistence"][0] == pytest.approx(pers, abs=1e-3)
    for name in ("model.safetensors", "checkpoint.safetensors", "history.csv", "metrics.json"):
        assert (out / name).is_file()
    hist = (out / "history.csv").read_text().splitlines()
    assert hist[0] == "epoch,loss,val_loss" and len(hist) == 5
    loaded = rk.load_model(out / "model.safetensors")      # part B's loader: the LSTM + AR(6) highway
    assert isinstance(loaded, rk.GraphModel) and loaded.get_layer("highway").get_weights()[0].shape == (6, 1)


def test_scaler_is_fitted_on_training_rows_only(sun_model: Trained) -> None:
    out, _ = sun_model
    spec = rk.io.load_forecaster(out / "model.safetensors").spec
    assert spec.window == 6 and spec.horizon == 1 and spec.index_name == "YEAR"
    y = datasets.sunspots().values
    rows = 242 - 1 + 6 + 1                                  # through the last training target
    assert spec.x_scaler.mean[0] == pytest.approx(y[:rows].mean(), rel=1e-12)
    assert spec.x_scaler.std[0] == pytest.approx(y[:rows].std(), rel=1e-12)
    assert spec.x_scaler.mean[0] != pytest.approx(y.mean(), rel=1e-3)


def test_predict_one_step_and_recursive(sun_model: Trained, tmp_path: Path) -> None:
    out, _ = sun_model
    model = str(out / "model.safetensors")
    res = run("predict", model, SUN)
    assert res.returncode == 0, res.stderr
    header, rows = read_out_csv(res.stdout)
    assert header == ["YEAR", "prediction", "actual"] and len(rows) == 309 - 6 + 1
    assert rows[0][:1] + rows[0][2:] == ["1706", "29"] and rows[-1][0] == "2009" and rows[-1][2] == ""
    preds = np.array([float(r[1]) for r in rows])
    assert np.isfinite(preds).all() and preds.std() > 1.0
    # the first forecast by hand: scale the years 1700-1705 as stored, run the network, unscale
    fc = rk.io.load_forecaster(model)
    net, spec = fc.model, fc.spec
    y = datasets.sunspots().values
    x = (y[:6, None] - spec.x_scaler.mean) / spec.x_scaler.std
    z = np.asarray(net.predict(x[None].astype(np.float32)), dtype=np.float64)[0, 0]
    assert preds[0] == pytest.approx(z * spec.y_scaler.std[0] + spec.y_scaler.mean[0], rel=1e-6)
    rec = run("predict", model, SUN, "--steps", "3", "--output", str(tmp_path / "f.csv"))
    assert rec.returncode == 0 and rec.stdout == ""
    header, rows3 = read_out_csv((tmp_path / "f.csv").read_text())
    assert header == ["YEAR", "prediction"] and [r[0] for r in rows3] == ["2009", "2010", "2011"]
    assert float(rows3[0][1]) == pytest.approx(preds[-1], rel=1e-5)   # step 1 == last one-step forecast


def test_summary_names_layers_params_and_settings(sun_model: Trained) -> None:
    out, _ = sun_model
    res = run("summary", str(out / "model.safetensors"))
    assert res.returncode == 0, res.stderr
    assert "LSTM" in res.stdout and "(None, 8)" in res.stdout and "Dense" in res.stdout
    assert "336" in res.stdout                     # 4*(1*8 + 8*8 + 8) + (8 + 1) + the highway's (6 + 1)
    assert "highway" in res.stdout and "Add" in res.stdout
    assert "forecast: 'SUNACTIVITY', 1 row(s) after a window of 6 rows" in res.stdout


# -- generated CSV files -------------------------------------------------------------------------
def test_train_gru_two_layers_two_features_on_generated_csv_beats_persistence(tmp_path: Path) -> None:
    t = np.arange(240)
    days = np.datetime64("2024-01-01") + t
    a = np.sin(2 * np.pi * t / 16)
    b = np.cos(2 * np.pi * t / 16)
    p = write_csv(tmp_path / "gen.csv", ["when", "a", "b", "label"],
                  [[str(d), f"{x:.6f}", f"{y:.6f}", "x"] for d, x, y in zip(days, a, b, strict=True)])
    res = run("train", str(p), "--target", "a", "--features", "a,b", "--date-col", "when", "--cell", "gru",
              "--layers", "2", "--units", "8", "--window", "8", "--horizon", "2", "--epochs", "40",
              "--batch-size", "32", "--lr", "0.02", "--out", str(tmp_path / "o"), "--quiet")
    assert res.returncode == 0, res.stderr
    table = parse_table(res.stdout)
    model_rmse = next(v for k, v in table.items() if k.startswith("GRU"))[0]
    assert model_rmse < 0.5 * table["persistence"][0], table
    pred = run("predict", str(tmp_path / "o" / "model.safetensors"), str(p))
    header, rows = read_out_csv(pred.stdout)
    assert header == ["when", "prediction", "actual"] and rows[0][0] == "2024-01-10"   # 7 + 2 days on
    assert rows[-1][0] == "2024-08-29"                       # 2 days after the last date
    bad = run("predict", str(tmp_path / "o" / "model.safetensors"), str(p), "--steps", "2")
    assert_bad_input(bad, "(--steps) need a model whose only feature is its target")


def test_difference_forecasts_changes_of_a_trending_series(tmp_path: Path) -> None:
    t = np.arange(200)
    level = 10 + 0.05 * t + np.sin(t / 3)               # trend: later values leave the training range
    p = write_csv(tmp_path / "trend.csv", ["row_id", "y"],
                  [[k, f"{v:.6f}"] for k, v in zip(t, level, strict=True)])
    res = run("train", str(p), "--target", "y", "--difference", "--window", "8", "--units", "8",
              "--epochs", "30", "--lr", "0.02", "--out", str(tmp_path / "d"), "--quiet",
              "--backtest-windows", "0")
    assert res.returncode == 0, res.stderr
    table = parse_table(res.stdout)
    assert next(v for k, v in table.items() if k.startswith("LSTM"))[0] < 0.5 * table["persistence"][0]
    model_path = tmp_path / "d" / "model.safetensors"
    fc = rk.io.load_forecaster(model_path)
    net, spec = fc.model, fc.spec
    assert spec.difference and spec.rows_needed == 9
    y = np.round(level, 6)
    d = np.diff(y)
    # 199 changes -> 191 windows: 38 validate (the last), 153 train; the training windows read and
    # predict changes 0 .. 152 + 8 = 160, so the scaler saw exactly those
    assert spec.x_scaler.mean[0] == pytest.approx(d[:161].mean(), rel=1e-9)
    assert spec.x_scaler.mean[0] != pytest.approx(d.mean(), rel=1e-3)
    one = run("predict", str(model_path), str(p))
    _, rows = read_out_csv(one.stdout)
    assert len(rows) == 200 - 9 + 1 and rows[0][0] == "9" and rows[-1][0] == "200"
    # the first forecast by hand: scaled changes of rows 0..8 -> network -> change + y[8]
    x = (d[:8, None] - spec.x_scaler.mean) / spec.x_scaler.std
    z = float(np.asarray(net.predict(x[None].astype(np.float32)))[0, 0])
    change = z * spec.y_scaler.std[0] + spec.y_scaler.mean[0]
    assert float(rows[0][1]) == pytest.approx(y[8] + change, rel=1e-6)
    rec = run("predict", str(model_path), str(p), "--steps", "2")
    _, rows2 = read_out_csv(rec.stdout)
    assert [r[0] for r in rows2] == ["200", "201"]
    assert float(rows2[0][1]) == pytest.approx(float(rows[-1][1]), rel=1e-6)
    assert_bad_input(run("train", str(p), "--target", "y", "--difference", "--transform", "sqrt"),
                     "--difference", "cannot be combined with --transform sqrt")


def test_missing_values_policies_on_co2(tmp_path: Path) -> None:
    assert_bad_input(run("train", CO2, "--target", "co2"),
                     "column 'co2' has 59 missing value(s) at lines 8 (19580510)", "--missing")
    for policy, rows in (("drop", 2284 - 59), ("interpolate", 2284)):
        res = run("train", CO2, "--target", "co2", "--missing", policy, "--window", "4", "--units", "4",
                  "--epochs", "1", "--out", str(tmp_path / policy), "--quiet")
        assert res.returncode == 0, res.stderr
        assert f"{rows} rows" in res.stdout


# -- bad input: one line, exit 2 ------------------------------------------------------------------
def test_bad_data_inputs(tmp_path: Path) -> None:
    assert_bad_input(run("train", str(tmp_path / "none.csv"), "--target", "v"), "none.csv: no such file")
    assert_bad_input(run("train", SUN, "--target", "SPOTS"),
                     "unknown column 'SPOTS'; the file has columns: YEAR, SUNACTIVITY")
    assert_bad_input(run("train", SUN, "--target", "SUNACTIVITY", "--features", "SUNACTIVITY,X"),
                     "unknown column 'X'")
    txt = write_csv(tmp_path / "txt.csv", ["v", "name"], [[1, "a"], [2, "b"]])
    assert_bad_input(run("train", str(txt), "--target", "name"),
                     "column 'name' is not numeric: line 2 has 'a'")
    small = write_csv(tmp_path / "small.csv", ["v"], [[k] for k in range(5)])
    assert_bad_input(run("train", str(small), "--target", "v", "--window", "5"),
                     "too few rows", "5 row(s), but window 5 and horizon 1 need at least 6")
    assert_bad_input(run("train", SUN, "--target", "SUNACTIVITY", "--out", SUN), "is not a directory")


def test_bad_model_inputs(sun_model: Trained, tmp_path: Path) -> None:
    out, _ = sun_model
    assert_bad_input(run("predict", str(tmp_path / "nope.safetensors"), SUN), "no such model file")
    junk = tmp_path / "junk.safetensors"
    junk.write_text("this is not a model\n")
    assert_bad_input(run("summary", str(junk)), "junk.safetensors", "not a safetensors file")
    assert_bad_input(run("predict", str(out / "checkpoint.safetensors"), SUN),
                     "not an rnnkit model file")              # a weights-only file
    plain = rk.SequentialBuilder().add(rk.LSTM(2, seed=1)).add(rk.Dense(1, seed=2)).build(
        rk.Shape.with_free_batch((1, 3, 1)))
    rk.io.save_model(plain, tmp_path / "plain.safetensors")
    assert_bad_input(run("predict", str(tmp_path / "plain.safetensors"), SUN),
                     "saved without forecast settings")
    few = write_csv(tmp_path / "few.csv", ["YEAR", "SUNACTIVITY"], [[2000, 1], [2001, 2]])
    assert_bad_input(run("predict", str(out / "model.safetensors"), str(few)),
                     "too few rows", "2 row(s), but window 6")
    assert_bad_input(run("predict", str(out / "model.safetensors"), str(few), "--steps", "2"),
                     "too few rows")
    nocol = write_csv(tmp_path / "nocol.csv", ["v"], [[k] for k in range(10)])
    assert_bad_input(run("predict", str(out / "model.safetensors"), str(nocol)),
                     "unknown column 'SUNACTIVITY'")


def test_usage_errors_exit_2() -> None:
    for args in (["train", SUN], ["train", SUN, "--target", "SUNACTIVITY", "--window", "0"],
                 ["train", SUN, "--target", "SUNACTIVITY", "--cell", "transformer"],
                 ["train", SUN, "--target", "SUNACTIVITY", "--val-split", "1.5"], ["frobnicate"], []):
        res = run(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "usage: rnnkit" in res.stderr and "Traceback" not in res.stderr


def test_console_script_and_python_m_both_work() -> None:
    beside = Path(sys.executable).parent / "rnnkit"           # the script pip installed with this python
    exe = str(beside) if beside.is_file() else shutil.which("rnnkit")
    assert exe is not None, "the rnnkit console script is not installed (pip install -e .)"
    res = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "demo" in res.stdout and "bench" in res.stdout
    assert run("summary", "--help").returncode == 0


# -- bench ---------------------------------------------------------------------------------------
def test_bench_runs_the_benchmark_when_torch_is_installed() -> None:
    pytest.importorskip("torch")
    res = run("bench", "--cells", "rnn", "--shapes", "S1", "--modes", "infer", "--repeats", "1",
              "--warmup", "0", "--sample", "0.001", "--no-startup", "--no-save", timeout=300)
    assert res.returncode == 0, res.stderr
    assert re.search(r"^rnn\s+S1\s+infer\s+[0-9.]+ms\s+[0-9.]+ms\s+[0-9.]+", res.stdout, re.M), res.stdout


def test_bench_says_clearly_when_torch_is_missing(tmp_path: Path) -> None:
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named torch (hidden by the test)')\n")
    res = run("bench", env={"PYTHONPATH": str(tmp_path)})
    assert_bad_input(res, "rnnkit bench compares against PyTorch, which is not installed",
                     "pip install torch")
