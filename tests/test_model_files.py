"""The model level writes files through the functions rnnkit.io hands down (it never imports
io): ``Model.save_weights`` / ``load_weights`` / ``save`` are io's, and without them a typed
error says what is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._safetensors import read_safetensors
from rnnkit.models import _files


def _model(seed: int) -> rk.Sequential:
    return rk.Sequential([rk.Dense(3, seed=seed, dtype="float64")], input_shape=(None, 2))


def test_the_model_writes_and_reads_through_io(tmp_path: Path) -> None:
    a, b = _model(1), _model(2)
    a.save_weights(str(tmp_path / "w.safetensors"))
    tensors, meta = read_safetensors(tmp_path / "w.safetensors")
    assert meta["format"] == "rnnkit-weights"
    np.testing.assert_array_equal(tensors["0.kernel"], a.layers[0].weight("kernel"))
    b.load_weights(str(tmp_path / "w.safetensors"))
    np.testing.assert_array_equal(b.layers[0].weight("kernel"), a.layers[0].weight("kernel"))
    a.save(str(tmp_path / "m.safetensors"))
    c = rk.io.load_model(str(tmp_path / "m.safetensors"))
    x = np.random.default_rng(0).normal(size=(4, 2))
    np.testing.assert_array_equal(c.predict(x), a.predict(x))


def test_without_io_the_model_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_files, "_FUNCTIONS", {})
    with pytest.raises(rk.Error, match=r"save_weights: rnnkit.io has not installed its file functions"):
        _model(1).save_weights(str(tmp_path / "w.safetensors"))
    assert not (tmp_path / "w.safetensors").exists()
