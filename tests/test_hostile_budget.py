"""Every allocation a model file can cause is counted before it happens: the weights an
initializer draws (an LSTM projection's semi-orthogonal blocks too), a RepeatVector's copies,
and what ``rnnkit predict`` makes from a file's window and ``--steps``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._safetensors import read_safetensors, write_safetensors

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _edited(tmp_path: Path, model: Any, index: int, edit: dict[str, object]) -> Path:
    src = tmp_path / "m.safetensors"
    model.save(str(src))
    tensors, meta = read_safetensors(src)
    cfg = json.loads(meta["config"])
    cfg["config"]["layers"][index]["config"].update(edit)
    meta["config"] = json.dumps(cfg)
    out = tmp_path / "hostile.safetensors"
    write_safetensors(out, tensors, meta)
    return out


CAPPED = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import rnnkit as rk
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        rk.load_model(sys.argv[1])
    except rk.FileFormatError as e:
        print(e)
    else:
        print("loaded")
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)
""")


@pytest.mark.parametrize("units,proj", [(4000, 3999), (30000, 29999)])
def test_lstm_projection_larger_than_its_file_is_refused_before_drawing(tmp_path: Path, units: int,
                                                                      proj: int) -> None:
    """The semi-orthogonal recurrent blocks (proj, units) of LSTM(units, proj_size) are counted
    before they are drawn: refused with under 100 MB of memory. Run in a child with 3 GiB of
    address space, so drawing the blocks (16 M and 900 M numbers) would fail there rather than
    take the machine."""
    model = rk.Sequential([rk.LSTM(3, proj_size=2, seed=0)], input_shape=(None, 2, 3))
    path = _edited(tmp_path, model, 0, {"units": units, "proj_size": proj})
    assert path.stat().st_size < 2000
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", CAPPED, str(path)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert f"declares a weight of shape ({units}, {proj})" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "refused before allocating" in out.stdout
    assert int(out.stdout.split()[-1]) < 100, out.stdout  # MB of peak memory beyond the import


def test_semi_orthogonal_counts_its_draw_against_the_budget() -> None:
    from rnnkit._budget import allocation_budget
    from rnnkit._initializers import semi_orthogonal

    rng = np.random.default_rng(0)
    q = semi_orthogonal(rng, 3, 5, np.float64)
    np.testing.assert_allclose(q @ q.T, np.eye(3), atol=1e-12)  # orthonormal rows
    with allocation_budget(0, "f"), pytest.raises(rk.FileFormatError, match=r"shape \(3000, 2000\)"):
        semi_orthogonal(rng, 2000, 3000, np.float64)


def test_repeat_vector_larger_than_its_file_is_refused_at_load(tmp_path: Path) -> None:
    model = rk.Sequential([rk.RepeatVector(3), rk.LSTM(2, seed=0)], input_shape=(None, 4))
    path = _edited(tmp_path, model, 0, {"n": 10**9})
    with pytest.raises(rk.FileFormatError,
                       match=r"RepeatVector\(1000000000\) makes 4000000000 numbers per sample"):
        rk.load_model(path)
    honest = tmp_path / "r.safetensors"
    rk.Sequential([rk.RepeatVector(3)], input_shape=(None, 4)).save(str(honest))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(rk.load_model(honest).predict(x), np.stack([x, x, x], axis=1))
    assert rk.RepeatVector(10**9).compute_output_shape((None, 4)).dims == (None, 10**9, 4)


def _forecaster(tmp_path: Path, window: int) -> tuple[Path, Path]:
    from rnnkit.cli._model import TrainConfig, build_network
    from rnnkit.io import save_forecaster
    from rnnkit.timeseries import ForecastSpec, Scaler

    net = build_network(TrainConfig(units=2, seed=0), window, 1)
    sc = Scaler(("y",), np.array([0.0]), np.array([1.0]))
    spec = ForecastSpec("y", ("y",), window, 1, sc, sc)
    model = save_forecaster(net, spec, tmp_path / "model.safetensors")
    data = tmp_path / "d.csv"
    data.write_text("y\n" + "".join(f"{v}\n" for v in np.sin(np.arange(40) / 3)))
    return model, data


def test_predict_steps_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rnnkit.cli._main import main

    model, data = _forecaster(tmp_path, 4)
    assert main(["predict", str(model), str(data), "--steps", str(10**7)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rnnkit: error: predict: --steps must be an int in [1, 100000], got 10000000"], err
    assert main(["predict", str(model), str(data), "--steps", "3", "--output",
                 str(tmp_path / "f.csv")]) == 0
    assert len((tmp_path / "f.csv").read_text().splitlines()) == 4



@pytest.mark.parametrize("init", [{"kind": "const", "a": 0.5, "b": 0.0},
                                  {"kind": "randn", "a": 0.0, "b": 1.0}])
def test_rnn_net_initializers_count_against_the_budget(tmp_path: Path, init: dict[str, object]) -> None:
    """RNNNet's constant and Gaussian initializers count their draws too (the recurrent weights
    (4 * 100000, 100000) of a file holding 72 numbers)."""
    from rnnkit.rnn import Init, RNNConfig, RNNNet

    cfg = RNNConfig(w_hh_init=Init(**init))  # type: ignore[arg-type]
    model = rk.Sequential([RNNNet("lstm", 3, 2, cfg, seed=0)], input_shape=(None, 2, 3))
    path = _edited(tmp_path, model, 0, {"hidden_dim": 100_000})
    with pytest.raises(rk.FileFormatError, match=r"declares a weight of shape \(400000, 100000\)"):
        rk.load_model(path)
