"""Cell registry keys: module-qualified, never silently replaced; files with bare names still load.

- A user's cell is written under its module-qualified key (``registry_cells.LeakyCell``); two
  classes of the same bare name in two modules both register and each file loads its own class.
- Registering a different class under a key already taken is refused (typed error naming both).
- rnnkit's own cells keep their bare keys (``"LSTMCell"``: every file written so far holds them).
- tests/data/cell_registry/bare_name.rnnkit was written by rnnkit before keys were qualified (its
  cell ``class_name`` is ``"LeakyCell"``): it loads, and its predictions equal a NumPy recurrence
  over its weights (float32 file, float64 NumPy: 4 steps of tanh on values below 3, within 1e-6).
"""

from __future__ import annotations

import json
import struct
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import registry_cells
import rnnkit as rk
from rnnkit.recurrent import _registry
from rnnkit.recurrent._registry import cell_from_config, cell_key, cell_to_config

DATA = Path(__file__).resolve().parent / "data" / "cell_registry"


@pytest.fixture(autouse=True)
def _registry_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a test registers is gone after it (the registry is process-wide)."""
    monkeypatch.setattr(_registry, "_CELLS", dict(_registry._CELLS))


def _twin(module: str, blank_lines: int = 0) -> type[rk.Cell]:
    """A class named ``LeakyCell`` (another recurrence: h = x W + b) defined in module ``module``
    (``blank_lines`` before its class statement: another place in the source)."""
    mod = types.ModuleType(module)
    exec("import rnnkit as rk\n" + "\n" * blank_lines +   # noqa: S102 - constants only
         "class LeakyCell(rk.Cell):\n"
         "    input_kernel, bias = 'kernel', 'bias'\n"
         "    def params(self, n):\n"
         "        z = lambda rng, s, dt: rng.uniform(-1, 1, s).astype(dt)\n"
         "        return [rk.Param('kernel', (n, self.units), z), rk.Param('bias', (1, self.units), z)]\n"
         "    def step(self, w, inp, prev, park):\n"
         "        return (inp,)\n", mod.__dict__)
    return mod.__dict__["LeakyCell"]  # type: ignore[no-any-return]


def _file_cell_name(path: Path) -> str:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    cfg = json.loads(json.loads(raw[8:8 + n])["__metadata__"]["config"])
    return cfg["config"]["layers"][0]["config"]["cell"]["class_name"]  # type: ignore[no-any-return]


def test_keys_are_module_qualified_and_builtins_keep_their_names() -> None:
    assert cell_key(registry_cells.LeakyCell) == "registry_cells.LeakyCell"
    assert cell_to_config(registry_cells.LeakyCell(2))["class_name"] == "registry_cells.LeakyCell"
    for cell in (rk.SimpleRNNCell(2), rk.LSTMCell(2), rk.GRUCell(2), rk.GRUResetAfterCell(2)):
        cfg = cell_to_config(cell)
        assert cfg["class_name"] == type(cell).__name__
        assert type(cell_from_config(cfg)) is type(cell)


def test_two_classes_of_one_name_in_two_modules_each_load_their_own(tmp_path: Path) -> None:
    other = rk.register_cell(_twin("rnnkit_test_registry_other"))
    x = np.random.default_rng(0).standard_normal((2, 4, 2)).astype(np.float32)
    for cls in (registry_cells.LeakyCell, other):
        model = rk.SequentialBuilder().add(rk.RecurrentLayer(cls(3), return_sequences=True, seed=1)) \
            .build(rk.Shape((None, 4, 2)))
        path = tmp_path / f"{cls.__module__}.rnnkit"
        model.save(str(path))
        assert _file_cell_name(path) == cell_key(cls)
        again = rk.load_model(path)
        assert type(again.layers[0].cell) is cls
        np.testing.assert_array_equal(again.predict(x), model.predict(x))
    # a bare name two registered classes share is refused, naming both
    with pytest.raises(rk.InvalidInputError, match=r"'LeakyCell'.*several.*\['registry_cells\.LeakyCell', "
                                                   r"'rnnkit_test_registry_other\.LeakyCell'\]"):
        cell_from_config({"class_name": "LeakyCell", "config": {"units": 3}})


def test_a_different_class_under_a_taken_key_is_refused() -> None:
    first = rk.register_cell(_twin("rnnkit_test_registry_clash"))
    assert rk.register_cell(first) is first                  # the same class again: nothing happens
    second = _twin("rnnkit_test_registry_clash", 3)          # same module and name, another class statement
    with pytest.raises(rk.InvalidParameterError,
                       match=r"'rnnkit_test_registry_clash\.LeakyCell' is already taken by another class"):
        rk.register_cell(second)
    assert cell_from_config({"class_name": "rnnkit_test_registry_clash.LeakyCell",
                             "config": {"units": 2}}).__class__ is first

    class LSTMCell(rk.LSTMCell):   # a user's class with a built-in's bare name: its own key
        pass

    rk.register_cell(LSTMCell)
    assert type(cell_from_config({"class_name": "LSTMCell", "config": {"units": 2}})) is rk.LSTMCell


def test_a_class_statement_run_again_replaces_the_class_it_defined() -> None:
    """A notebook cell or a reloaded module runs one class statement again: a new class object
    from the same source lines, which takes over its key (the old one is unreachable)."""
    first = rk.register_cell(_twin("rnnkit_test_registry_rerun"))
    again = _twin("rnnkit_test_registry_rerun")
    assert again is not first and rk.register_cell(again) is again
    assert type(cell_from_config({"class_name": "rnnkit_test_registry_rerun.LeakyCell",
                                  "config": {"units": 2}})) is again


def test_a_file_with_a_bare_name_still_loads() -> None:
    path = DATA / "bare_name.rnnkit"
    assert _file_cell_name(path) == "LeakyCell"               # written before keys were qualified
    model: Any = rk.load_model(path)
    layer = model.layers[0]
    assert type(layer.cell) is registry_cells.LeakyCell
    x = np.random.default_rng(1).standard_normal((2, 4, 2)).astype(np.float32)
    W, b, u = (layer.weight(n).astype(np.float64) for n in ("kernel", "bias", "u"))
    h = np.zeros((2, 3))
    want = []
    for t in range(4):
        h = np.tanh(x[:, t] @ W + b[0] + u * h)
        want.append(h)
    np.testing.assert_allclose(model.predict(x), np.stack(want, axis=1), rtol=0, atol=1e-6)
