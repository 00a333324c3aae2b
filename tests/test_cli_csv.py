"""The command line on CSV files as users bring them: ``--date-col none``, notes about columns
not used, repeated names, values whose scaling overflows, a tampered scaler, forecasts that
would not be finite, quarters and pandas' unnamed index carried into ``predict``'s output, and
the status line while the kernels compile."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from pandas_frames import FIXTURES
from rnnkit.cli import main
from rnnkit.cli._common import compile_status

TRAIN = ["--window", "3", "--epochs", "2", "--units", "3", "--quiet", "--no-plots"]


def one_error_line(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rnnkit: error: "), err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_date_col_none_and_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(FIXTURES / "nile_range_index.csv")
    assert main(["train", data, "--target", "volume", *TRAIN, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "note: " in out and "unnamed first column (pandas' index) counts the rows" in out
    assert main(["train", data, "--target", "volume", "--date-col", "none", *TRAIN,
                 "--out", str(tmp_path / "b")]) == 0
    assert "note:" not in capsys.readouterr().out
    assert main(["predict", str(tmp_path / "b" / "model.safetensors"), data]) == 0
    assert capsys.readouterr().out.startswith("row,prediction,actual\n3,")     # rows numbered
    assert main(["predict", str(tmp_path / "a" / "model.safetensors"), data]) == 0
    assert capsys.readouterr().out.startswith("year,prediction,actual\n1874,")


def test_quarters_go_through_train_and_predict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(FIXTURES / "quarters.csv")
    assert main(["train", data, "--target", "infl", "--window", "2", "--epochs", "1", "--units", "2",
                 "--quiet", "--no-plots", "--val-split", "0.4", "--out", str(tmp_path)]) == 0
    assert "seasonal naive (4 rows)" in capsys.readouterr().out       # quarterly: a season of 4
    assert main(["predict", str(tmp_path / "model.safetensors"), data, "--steps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "quarter,prediction" and [x.split(",")[0] for x in lines[1:]] == ["1961Q1", "1961Q2"]


def test_repeated_names_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", str(FIXTURES / "duplicate_names.csv"), "--target", "a", *TRAIN,
                 "--out", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err, "used more than once in the header: a")


def test_values_whose_scaling_overflows_are_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "huge.csv"
    p.write_text("v\n" + "".join(f"{(-1) ** k * 1e300 * (1 + k / 10)}\n" for k in range(40)))
    # the scaler sees the training rows only, and names their largest magnitude. One validation
    # split: 37 windows of 3, the last 7 validate, so rows 0..32 train: 1e300 * (1 + 32/10)
    assert main(["train", str(p), "--target", "v", *TRAIN, "--out", str(tmp_path / "o"),
                 "--backtest-windows", "0"]) == 2
    one_error_line(capsys.readouterr().err, "column 'v': its values are too large to standardise",
                   "the largest magnitude is 4.2e+300")
    assert not (tmp_path / "o" / "model.safetensors").exists()
    # the default backtest (3 windows of 1 row): the network trains on the 37 rows before the
    # first origin, 34 windows of 3, the last 7 validate, so rows 0..29 train: 1e300 * (1 + 29/10)
    assert main(["train", str(p), "--target", "v", *TRAIN, "--out", str(tmp_path / "o")]) == 2
    one_error_line(capsys.readouterr().err, "column 'v': its values are too large to standardise",
                   "the largest magnitude is 3.9e+300")
    assert not (tmp_path / "o" / "model.safetensors").exists()


def _trained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    p = tmp_path / "s.csv"
    p.write_text("v\n" + "".join(f"{np.sin(k / 3):.5f}\n" for k in range(40)))
    assert main(["train", str(p), "--target", "v", *TRAIN, "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    return p, tmp_path / "o" / "model.safetensors"


def test_a_scaler_with_an_infinite_std_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, model = _trained(tmp_path, capsys)
    with safe_open(str(model), framework="numpy") as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no items()
    spec = json.loads(meta["rnnkit.forecast"])
    spec["y_scaler"]["std"] = [float("inf")]
    meta["rnnkit.forecast"] = json.dumps(spec)
    save_file(tensors, str(model), metadata=meta)
    out = tmp_path / "pred.csv"
    assert main(["predict", str(model), str(data), "--output", str(out)]) == 2
    one_error_line(capsys.readouterr().err, "forecast settings stored with the model are damaged",
                   "standard deviations finite and > 0")
    assert not out.exists()


def test_predict_never_writes_a_non_finite_forecast(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data, model = _trained(tmp_path, capsys)
    big = tmp_path / "big.csv"
    big.write_text("v\n" + "".join(f"{v}\n" for v in (0.1, 0.2, 1e300, 0.3, 0.2)))
    out = tmp_path / "pred.csv"
    assert main(["predict", str(model), str(big), "--output", str(out)]) == 2
    one_error_line(capsys.readouterr().err, "column 'v': row 2 holds 1e+300", "beyond float32's range")
    assert not out.exists()


class _Clock:
    """compile_seconds() of a process that compiles for the first ``until`` calls."""

    def __init__(self, until: int) -> None:
        self.calls, self.until = 0, until

    def __call__(self) -> float:
        self.calls += 1
        return 0.05 * min(self.calls, self.until)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_compile_status_says_it_is_alive() -> None:
    import time

    def until_polled(clock: _Clock) -> None:
        """Wait until the watcher has read the clock past its last compile (however loaded the
        machine: the polls, not the wall time, decide what is written)."""
        deadline = time.monotonic() + 60
        while clock.calls <= clock.until + 2 and time.monotonic() < deadline:
            time.sleep(0.01)

    log = io.StringIO()
    clock = _Clock(30)
    with compile_status(log, poll=0.01, line_every=0.0, quiet_after=1e9, seconds=clock):
        until_polled(clock)
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("rnnkit: compiling the kernels for this machine (first run only, about ")
    assert lines[0].endswith(" s") and len(lines) >= 10            # one line per poll here
    assert lines[-1] == "rnnkit: kernels compiled in 1.5 s; later runs load them from the cache"
    tty = _Tty()
    clock = _Clock(30)
    with compile_status(tty, poll=0.01, quiet_after=1e9, seconds=clock):
        until_polled(clock)
    text = tty.getvalue()
    assert text.count("\r\x1b[Krnnkit: compiling") >= 10 and text.count("\n") == 1   # rewritten in place
    quiet = io.StringIO()
    with compile_status(quiet, poll=0.01, seconds=lambda: 0.0):   # from the cache: nothing shown
        time.sleep(0.1)
    assert quiet.getvalue() == ""


def test_every_page_gives_the_same_first_run_figure() -> None:
    import inspect

    import rnnkit.kernels
    from rnnkit.cli._common import FIRST_RUN

    root = Path(__file__).resolve().parents[1]
    pages = {"README.md": (root / "README.md").read_text(),
             "docs/cli.md": (root / "docs" / "cli.md").read_text(),
             "the compile message": inspect.getsource(rnnkit.kernels)}
    for name, text in pages.items():
        flat = " ".join(text.split()).replace('" "', "")      # string literals split over lines joined
        assert FIRST_RUN in flat, name
        for other in ("10-30 s", "about 15 s", "a few seconds:"):
            assert other not in flat, (name, other)
    log = io.StringIO()
    with compile_status(log, poll=0.01, line_every=0.0, quiet_after=0.05, seconds=_Clock(5)):
        import time

        time.sleep(0.2)
    assert f"(first run only, {FIRST_RUN}): " in log.getvalue()
