"""Memory of ``rnnkit train`` and ``rnnkit predict`` on long CSV files: the file is read as a
stream and every step after it works in blocks, so each extra row costs at most 4x the bytes
it takes in the file (measured with tracemalloc as the growth of the peak between a file and
one twice as long, after a warm-up that compiles the kernels and fills the caches, so fixed
costs cancel out). Pinned on the default path (the AR highway and the 3-window backtest with
every baseline, ETS included when statsmodels is installed), on one validation split
(``--backtest-windows 0``) and on the recurrent branch alone there (``--no-highway``). The
blocks, and the ETS baseline's bounded history, are made small here so that both files fill
them, as a 10-million-row file fills the real ones."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import rnnkit.cli._predict as predict_mod
import rnnkit.timeseries._backtest as backtest_mod
import rnnkit.timeseries._baselines as baselines_mod
import rnnkit.timeseries._csv as csv_mod
import rnnkit.timeseries._dates as dates_mod
import rnnkit.timeseries._forecast as forecast_mod
import rnnkit.timeseries._window as window_mod
from rnnkit.cli import main

#: the settings every run shares; PATHS adds the default path's (nothing) or the narrowing flags
ARGS = ["--epochs", "1", "--quiet", "--no-plots", "--units", "2", "--batch-size", "256", "--window", "12"]
PATHS = {"default": [], "split": ["--backtest-windows", "0"],
         "split-no-highway": ["--no-highway", "--backtest-windows", "0"]}


def _csv(path: Path, n: int) -> Path:
    v = np.cumsum(np.random.default_rng(0).standard_normal(n))
    days = np.datetime_as_string(np.datetime64("1900-01-01") + np.arange(n))
    path.write_text("date,value\n" + "".join(f"{d},{x:.6f}\n" for d, x in zip(days, v, strict=True)))
    return path


def _peak(argv: list[str]) -> int:
    tracemalloc.start()
    try:
        assert main(argv) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("path", list(PATHS))
def test_each_row_costs_at_most_four_times_its_bytes(path: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for mod, name in ((csv_mod, "BLOCK_ROWS"), (window_mod, "BLOCK"), (baselines_mod, "BLOCK"),
                      (forecast_mod, "CHUNK"), (predict_mod, "CHUNK"), (dates_mod, "FREQ_BLOCK"),
                      (backtest_mod, "ETS_MAX_ROWS")):
        assert getattr(mod, name) >= 1024
        monkeypatch.setattr(mod, name, 1024)
    args = [*ARGS, *PATHS[path]]
    warm = _csv(tmp_path / "warm.csv", 3000)
    assert main(["train", str(warm), "--target", "value", "--out", str(tmp_path / "w"), *args]) == 0
    assert main(["predict", str(tmp_path / "w" / "model.safetensors"), str(warm),
                 "--output", str(tmp_path / "w" / "p.csv")]) == 0
    sizes, train, predict = [], [], []
    for n in (15_000, 30_000):
        data = _csv(tmp_path / f"d{n}.csv", n)
        out = tmp_path / f"o{n}"
        sizes.append(data.stat().st_size)
        train.append(_peak(["train", str(data), "--target", "value", "--out", str(out), *args]))
        predict.append(_peak(["predict", str(out / "model.safetensors"), str(data),
                              "--output", str(out / "p.csv")]))
        assert len((out / "p.csv").read_text().splitlines()) == n - 12 + 2   # header + every window
    capsys.readouterr()
    grow = sizes[1] - sizes[0]
    assert (train[1] - train[0]) / grow <= 4.0, (train, sizes)
    assert (predict[1] - predict[0]) / grow <= 4.0, (predict, sizes)
