"""``rnnkit compile``: the kernels compiled into the on-disk cache ahead, so that a later fit and
``predict`` compile nothing and give the bits of a fit that compiled its own kernels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RNNKIT_COMPILE_AHEAD"}
    env.update({"PYTHONPATH": str(SRC), "NUMBA_CACHE_DIR": str(cache)})
    return env


def _rnnkit(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnkit", *args], env=_env(cache), capture_output=True,
                          text=True, timeout=1800)


@pytest.mark.parametrize(("args", "message"), [
    (["--cells", "lstm,tcn"], "--cells: expected a comma-separated list of lstm, gru, rnn, got 'lstm,tcn'"),
    (["--dtype", "float16"], "--dtype: expected a comma-separated list of float32, float64, got 'float16'"),
    (["--jobs", "-1"], "--jobs: expected an integer >= 0, got -1"),
])
def test_bad_arguments_are_one_line_and_status_2(tmp_path: Path, args: list[str], message: str) -> None:
    r = _rnnkit(["compile", *args], tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == f"rnnkit: error: {message}"
    assert not any(tmp_path.iterdir())          # nothing compiled


FIT = """
import sys
import numpy as np
from rnnkit import kernels
from rnnkit.cli._model import TrainConfig, build_network
from rnnkit.kernels import _warm

cfg = TrainConfig(cell="rnn", units=5, layers=2, epochs=2, batch_size=16, lr=0.01, patience=0, seed=0,
                  verbose=False)
model = build_network(cfg, 6, 2)
started = any(_warm.start(layer.cell, layer.input_dim, layer.dtype) for layer in model.layers[:2])
rng = np.random.default_rng(0)
x = rng.standard_normal((40, 6, 2)).astype(np.float32)
y = rng.standard_normal((40, 1)).astype(np.float32)
model.fit(x, y, epochs=2, batch_size=16, validation_data=(x[:8], y[:8]), seed=0)
pred = model.predict(x[:5], verbose=0)
model.save_weights(sys.argv[1])
np.save(sys.argv[2], pred)
print(int(started), kernels.compile_seconds() > 0)
"""


def test_a_fit_after_rnnkit_compile_compiles_nothing_and_gives_the_same_bits(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    env = {**_env(tmp_path / "own"), "RNNKIT_COMPILE_AHEAD": "0"}   # the reference: compiles it all itself
    own = subprocess.run([sys.executable, "-c", FIT, str(tmp_path / "own.st"), str(tmp_path / "own.npy")],
                         env=env, capture_output=True, text=True, timeout=1800, check=True).stdout.split()
    assert own == ["0", "True"]
    r = _rnnkit(["compile", "--cells", "rnn"], tmp_path / "ahead")
    assert r.returncode == 0, r.stderr
    assert "compiled in" in r.stdout
    fit = subprocess.run([sys.executable, "-c", FIT, str(tmp_path / "after.st"), str(tmp_path / "after.npy")],
                         env=_env(tmp_path / "ahead"), capture_output=True, text=True, timeout=1800,
                         check=True).stdout.split()
    assert fit == ["0", "False"]                 # no child started (the markers), nothing compiled
    assert (tmp_path / "own.st").read_bytes() == (tmp_path / "after.st").read_bytes()
    assert (tmp_path / "own.npy").read_bytes() == (tmp_path / "after.npy").read_bytes()
    again = _rnnkit(["compile", "--cells", "rnn"], tmp_path / "ahead")
    assert again.returncode == 0
    assert "already in the cache; nothing to compile" in again.stdout
