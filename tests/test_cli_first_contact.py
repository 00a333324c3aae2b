"""A new user's first session: the progress bar ends where early stopping stops,
bundled data sets by name, output paths checked before work, train's own pictures, summary of
the checkpoint, help texts, bench leaving the tracked results alone, honest picture labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from file_modules import load
from rnnkit.cli import build_parser, main
from rnnkit.cli._plots import have_matplotlib

ROOT = Path(__file__).resolve().parents[1]


def test_progress_bar_ends_where_early_stopping_stops(capsys: pytest.CaptureFixture[str]) -> None:
    m = rk.Sequential([rk.Dense(1, seed=0)], input_shape=(None, 2))
    m.compile(rk.SGD(0.0), "mse")  # lr 0: the loss never improves, patience 3 stops after 4 epochs
    x = np.ones((8, 2), np.float32)
    h = m.fit(x, x[:, :1], 200, verbose=1, callbacks=[rk.EarlyStopping("loss", patience=3)])
    err = capsys.readouterr().err
    assert len(h.history["loss"]) == 4
    counts = re.findall(r"(\d+)/(\d+) \[", err)
    assert counts[-1] == ("4", "4"), counts
    assert "4/200" not in err.split("\r")[-1]


def test_bundled_data_sets_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", "sunspots", "--target", "SUNACTIVITY", "--epochs", "2", "--quiet",
                 "--no-plots", "--out", "o"]) == 0
    assert main(["predict", "o/model.safetensors", "sunspots", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "YEAR,prediction\n2009," in out
    assert main(["train", "sunspot", "--target", "x"]) == 2
    err = capsys.readouterr().err
    assert "sunspot: no such file (bundled data sets, usable by name: co2, sunspots)" in err


def test_bad_output_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the model does not even exist: the output folder is checked first
    assert main(["predict", str(tmp_path / "absent.safetensors"), "sunspots",
                 "--output", "/nonexistent_dir/x.csv"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("rnnkit: error: --output /nonexistent_dir/x.csv: the folder /nonexistent_dir "
                           "does not exist")
    assert main(["predict", str(tmp_path / "absent.safetensors"), "sunspots", "--output", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.skipif(not have_matplotlib(), reason="needs matplotlib")
def test_train_draws_its_own_pictures_over_an_earlier_runs(tmp_path: Path) -> None:
    out = tmp_path / "rnnkit_out"
    out.mkdir()
    for name in ("loss.png", "forecast.png"):
        (out / name).write_bytes(b"the demo's picture")
    # one validation split: its loss curve and forecast picture replace the demo's
    args = ["train", "sunspots", "--target", "SUNACTIVITY", "--epochs", "2", "--quiet", "--out", str(out),
            "--backtest-windows", "0"]
    assert main(args) == 0
    for name in ("loss.png", "forecast.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args, "--no-plots"]) == 0
    assert not (out / "loss.png").exists() and not (out / "forecast.png").exists()
    # the default backtest: its loss curve and MASE-per-step picture; the demo's forecast.png
    # (another model's) is removed, not left beside them
    for name in ("loss.png", "forecast.png"):
        (out / name).write_bytes(b"the demo's picture")
    assert main(args[:-2]) == 0
    for name in ("loss.png", "backtest.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "forecast.png").exists()
    assert main([*args[:-2], "--no-plots"]) == 0
    assert not any((out / n).exists() for n in ("loss.png", "forecast.png", "backtest.png"))


def test_train_no_plots_removes_stale_pictures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "forecast.png").write_bytes(b"old")
    assert main(["train", "sunspots", "--target", "SUNACTIVITY", "--epochs", "1", "--quiet",
                 "--no-plots", "--out", str(out)]) == 0
    assert not (out / "forecast.png").exists()
    assert f"removed {out / 'forecast.png'}" in capsys.readouterr().out


def test_summary_reads_the_clis_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["train", "sunspots", "--target", "SUNACTIVITY", "--epochs", "2", "--quiet",
                 "--no-plots", "--units", "4", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["summary", str(out / "checkpoint.safetensors")]) == 0
    text = capsys.readouterr().out
    assert "a weights-only file" in text
    assert re.search(r"lstm\.recurrent_kernel\s+\(4, 16\)\s+64", text)
    assert re.search(r"highway\.kernel\s+\(12, 1\)\s+12", text)
    # LSTM(4) on 1 feature: 16 + 64 + 16, its Dense(1): 5, the AR(12) highway over the window: 13
    assert "total params: 114" in text


def test_every_option_has_help_and_commands_are_listed_once(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        if name == "bench":
            continue
        for action in p._actions:
            assert action.help, f"rnnkit {name}: {action.option_strings or action.dest} has no help text"
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for cmd in ("demo", "train", "predict", "summary", "bench"):
        assert len(re.findall(rf"^\s+{cmd}\s", text, re.M)) == 1, (cmd, text)


def test_bench_does_not_overwrite_the_tracked_latest_results(tmp_path: Path) -> None:
    bench = load("bench_under_test", "benchmarks/bench.py")
    (tmp_path / "latest.json").write_text('{"tracked": true}')
    written = bench.save_results({"rows": []}, tmp_path, update_latest=False)
    assert [p.name for p in written] != ["latest.json"] and len(written) == 1
    assert json.loads((tmp_path / "latest.json").read_text()) == {"tracked": True}
    bench.save_results({"rows": [1]}, tmp_path, update_latest=True)
    assert json.loads((tmp_path / "latest.json").read_text()) == {"rows": [1]}


@pytest.mark.skipif(not have_matplotlib(), reason="needs matplotlib")
def test_forecast_picture_labels_validation_and_test_parts_apart() -> None:
    from rnnkit.cli._plots import forecast_figure

    x = np.arange(20.0)
    fig = forecast_figure(x, np.sin(x), {"LSTM (test RMSE 1.0)": (x[15:], np.sin(x[15:]))},
                          title="t", ylabel="y", split_at=14.5,
                          before=("LSTM, validation years (early stopping)", x[10:15], np.sin(x[10:15])))
    top, bottom = fig.axes
    top_lines = {ln.get_label(): ln.get_xdata() for ln in top.get_lines()}
    assert list(top_lines["LSTM, validation years (early stopping)"]) == [10, 11, 12, 13, 14]
    assert min(top_lines["LSTM (test RMSE 1.0)"]) == 15  # the "test" label covers test years only
    assert "start of the held-out test part" in top_lines
    assert bottom.get_title() == "held-out test part"


@pytest.mark.skipif(not have_matplotlib(), reason="needs matplotlib")
def test_forecast_legends_cover_no_data_point() -> None:
    from rnnkit.cli._plots import forecast_figure

    x = np.arange(1950.0, 2020.0)
    y = np.sin(x / 3.0)
    y[3] = y[55] = 6.0                          # the highest peaks under the old upper-left legends
    fig = forecast_figure(x, y, {f"model {k} with a long label (test RMSE 0.1)": (x[50:], y[50:] + 0.01 * k)
                                 for k in range(3)},
                          title="t", ylabel="y", split_at=1999.5,
                          before=("LSTM, validation years (early stopping)", x[40:50], y[40:50]))
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        box = ax.get_legend().get_window_extent(renderer)
        for line in ax.get_lines():
            if line.get_transform() is not ax.transData:
                continue                         # the vertical split marker spans the axes
            pts = ax.transData.transform(np.column_stack([line.get_xdata(), line.get_ydata()]))
            inside = [(px, py) for px, py in pts if box.contains(px, py)]
            assert not inside, (ax.get_title(), line.get_label(), inside[:3])
