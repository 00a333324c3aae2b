"""Compiling ahead in a child process (``rnnkit.kernels._warm``): the cell travels as a JSON
description, and a fit whose backward kernels a child compiled into an empty cache gives the
same bits as a fit on the warm cache (the parent loads what the child compiled; nothing runs on
another code path).

The cold runs compile every kernel of a small model (tens of seconds on two cores); the same
check on the whole ``rnnkit demo`` (an LSTM, and a third run compiling everything in one
process) runs with ``RNNKIT_COLD_TESTS=1``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.kernels import _warm
from rnnkit.quant import _warm as warm8
from rnnkit.recurrent._gru import GRUCell
from rnnkit.recurrent._lstm import LSTMCell
from rnnkit.recurrent._simple_rnn import SimpleRNNCell

SRC = Path(__file__).resolve().parents[1] / "src"
SLOW = os.environ.get("RNNKIT_COLD_TESTS") == "1"


@pytest.mark.parametrize("cell", [
    LSTMCell(7, "relu", recurrent_activation="hard_sigmoid", proj_size=3, use_bias=False),
    LSTMCell(5),
    GRUCell(6, reset_after=False),
    GRUCell(6),
    SimpleRNNCell(4, "linear", use_bias=False),
], ids=lambda c: type(c).__name__)
def test_a_description_rebuilds_the_cell(cell: object) -> None:
    desc = _warm.describe(cell, 3, np.float32)
    assert desc is not None
    got, width, dt = _warm.rebuild(desc)
    assert type(got) is type(cell)
    assert got.get_config() == cell.get_config()  # type: ignore[attr-defined]
    assert (width, dt) == (3, np.dtype(np.float32))
    assert json.loads(desc)["cell"] == f"{type(cell).__module__}:{type(cell).__qualname__}"


def test_a_cell_that_cannot_be_named_is_not_described() -> None:
    class Local(SimpleRNNCell):   # defined in a function: another process cannot import it
        pass

    assert _warm.describe(Local(3), 2, np.float64) is None
    assert not _warm.start(Local(3), 2, np.float64)


def test_the_environment_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RNNKIT_COMPILE_AHEAD", "0")
    assert not _warm.enabled()
    assert not _warm.start(LSTMCell(3), 2, np.float32)
    assert not _warm.pending()


def test_an_unknown_part_is_a_typed_error() -> None:
    with pytest.raises(rk.InvalidParameterError, match=r"part must be one of .* got 'forward'"):
        _warm.exercise(LSTMCell(3), 2, np.float32, "forward")


def test_the_int8_child_refuses_other_parts_and_float64_cells() -> None:
    desc = _warm.describe(LSTMCell(3), 2, np.float32)
    assert desc is not None
    with pytest.raises(rk.InvalidParameterError, match=r"parts must be 'int8', got 'back'"):
        warm8.main([desc, "back"])
    with pytest.raises(rk.InvalidParameterError, match=r"the int8 loops need a float32 cell, got float64"):
        warm8.exercise(LSTMCell(3, dtype="float64"))
    with pytest.raises(rk.InvalidParameterError,
                       match=r"parts must be some of \('int8',\), got \('infer',\)"):
        _warm.spawn(desc, ("infer",), module=warm8.__name__, known=warm8.PARTS)


FIT = """
import sys
import numpy as np
from rnnkit import kernels
from rnnkit.cli._model import TrainConfig, build_network
from rnnkit.kernels import _warm

cfg = TrainConfig(cell="rnn", units=5, layers=1, epochs=2, batch_size=16, lr=0.01, patience=0, seed=0,
                  verbose=False, highway=0)
model = build_network(cfg, 6, 2)
layer = model.layers[0]
started = _warm.start(layer.cell, layer.input_dim, layer.dtype)
rng = np.random.default_rng(0)
x = rng.standard_normal((40, 6, 2)).astype(np.float32)
y = rng.standard_normal((40, 1)).astype(np.float32)
model.fit(x, y, epochs=2, batch_size=16, validation_data=(x[:8], y[:8]), seed=0)
model.save_weights(sys.argv[1])
from rnnkit.kernels import _walk
loaded = sum(_walk.walk_back.stats.cache_hits.values())
print(int(started), loaded, kernels.compile_seconds() > 0)
"""


def _run(code: str, args: list[str], cache: Path, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "RNNKIT_COMPILE_AHEAD"}
    full.update({"PYTHONPATH": str(SRC), "NUMBA_CACHE_DIR": str(cache), **env})
    return subprocess.run([sys.executable, "-c", code, *args], env=full, capture_output=True, text=True,
                          timeout=1800, check=True).stdout


def test_a_cold_fit_with_a_child_compiling_gives_the_bits_of_a_warm_fit(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    if not _warm.enabled():
        pytest.skip("compiling ahead needs two cores")
    cache = tmp_path / "cache"
    cold = _run(FIT, [str(tmp_path / "cold.safetensors")], cache).split()
    # the child compiled the backward walk; the parent loaded it from the cache
    assert cold == ["1", "1", "True"]
    warm = _run(FIT, [str(tmp_path / "warm.safetensors")], cache).split()
    assert warm == ["0", "1", "False"]          # no child (its marker), nothing compiled
    assert (tmp_path / "cold.safetensors").read_bytes() == (tmp_path / "warm.safetensors").read_bytes()


DEMO = "import sys; from rnnkit.cli._demo import run_demo; run_demo(sys.argv[1], verbose=False, plots=False)"


@pytest.mark.skipif(not SLOW, reason="set RNNKIT_COLD_TESTS=1 (three full compilations of the demo)")
def test_the_demo_gives_the_same_bits_cold_warm_and_compiled_in_one_process(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    runs = [("cold", "a", {}), ("warm", "a", {}), ("single", "b", {"RNNKIT_COMPILE_AHEAD": "0"})]
    for name, cache, env in runs:
        _run(DEMO, [str(tmp_path / name)], tmp_path / cache, **env)
    models = [(tmp_path / name / "model.safetensors").read_bytes() for name, _, _ in runs]
    assert models[0] == models[1] == models[2]


def test_cells_that_differ_in_sizes_and_activations_only_share_a_kernel_key() -> None:
    key = lambda c, w=3, dt=np.float32: _warm.kernel_key(_warm.describe(c, w, dt))  # noqa: E731
    assert key(LSTMCell(24)) == key(LSTMCell(5, "relu", recurrent_activation="hard_sigmoid"), 7)
    assert key(LSTMCell(5, proj_size=3)) == key(LSTMCell(9, proj_size=4))
    others = [key(LSTMCell(5, proj_size=3)), key(LSTMCell(5, use_bias=False)),
              key(LSTMCell(5), 3, np.float64), key(GRUCell(5, reset_after=False)), key(GRUCell(5)),
              key(SimpleRNNCell(5)), key(LSTMCell(5))]
    assert len(set(others)) == len(others)
