"""Loading costs time linear in the file: four times the layers of a model file cost at most
~four times its load time (a functional ``.keras`` chain, a ``.rnnkit`` Sequential of many
layers), and a long chain saves and loads back with the values it had.

The timings compare n and 4n layers in one test, not a duration: a linear loader gives a ratio
near 4 (the per-layer work is the same, plus a fixed cost that only lowers it), a quadratic one
near 16. The bound 5 leaves 25% for noise (a machine whose other cores are busy moves even CPU
time: caches, memory bandwidth); each size is timed in CPU time (``process_time``), the best of a
few runs taken in turns."""

from __future__ import annotations

import gc
import io
import json
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.models import GraphBuilder

#: layers of the smaller file of each pair (the larger has FACTOR times as many)
KERAS_LAYERS = 1_500
RNNKIT_LAYERS = 2_500
FACTOR = 4
#: a linear loader's ratio is <= FACTOR (+25% for noise); a quadratic one's is ~FACTOR**2
RATIO = 5.0


def _cpu(fn: Callable[[], Any]) -> float:
    """The CPU time of one call of ``fn``, the garbage collector paused (its full passes come at
    growth steps that n and 2n would straddle unevenly)."""
    gc.collect()
    gc.disable()
    try:
        t = time.process_time()
        fn()
        return time.process_time() - t
    finally:
        gc.enable()


def _ratio(small: Callable[[], Any], large: Callable[[], Any], repeats: int = 3) -> tuple[float, float]:
    """The best CPU times of ``small`` and ``large``, timed in turns (after one call of
    ``large``, so both run with the process's memory already grown to the larger size)."""
    large()
    t1 = t2 = float("inf")
    for _ in range(repeats):
        t1 = min(t1, _cpu(small))
        t2 = min(t2, _cpu(large))
    return t1, t2


def _tensor(name: str) -> dict[str, object]:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None, 4], "dtype": "float32", "keras_history": [name, 0, 0]}}


def _keras_chain(path: Path, n: int) -> None:
    """A functional ``.keras`` archive: an input and ``n`` Dropout layers, each reading the one
    before (layers listed last first, so a resolver scanning for ready calls pays n per call)."""
    h5py = pytest.importorskip("h5py")
    layers: list[dict[str, object]] = [
        {"module": "keras.layers", "class_name": "InputLayer", "name": "inp", "registered_name": None,
         "inbound_nodes": [],
         "config": {"batch_shape": [None, 4], "dtype": "float32", "sparse": False, "name": "inp"}}]
    prev = "inp"
    chain = []
    for i in range(n):
        chain.append({"module": "keras.layers", "class_name": "Dropout", "name": f"d{i}",
                      "registered_name": None,
                      "config": {"name": f"d{i}", "trainable": True, "dtype": "float32", "rate": 0.1},
                      "inbound_nodes": [{"args": [_tensor(prev)], "kwargs": {}}]})
        prev = f"d{i}"
    layers += chain[::-1]
    cfg = {"module": "keras.src.models.functional", "class_name": "Functional",
           "registered_name": "Functional",
           "config": {"name": "chain", "trainable": True, "layers": layers,
                      "input_layers": ["inp", 0, 0], "output_layers": [prev, 0, 0]},
           "build_config": {"input_shape": None}, "compile_config": None}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_group("layers")
        f.create_group("vars")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", json.dumps(cfg))
        z.writestr("model.weights.h5", buf.getvalue())


def test_functional_keras_chain_loads_in_linear_time(tmp_path: Path) -> None:
    """1.5k and 6k chained layers: the graph is ordered by in-degree counts (Kahn), not by
    rescanning the calls still waiting; the model built is the whole chain, in order."""
    small, large = tmp_path / "small.keras", tmp_path / "large.keras"
    _keras_chain(small, KERAS_LAYERS)
    _keras_chain(large, FACTOR * KERAS_LAYERS)
    model = rk.load_keras(large)
    assert isinstance(model, rk.GraphModel)
    assert [n.name for n in model.nodes] == ["inp"] + [f"d{i}" for i in range(FACTOR * KERAS_LAYERS)]
    del model
    t1, t2 = _ratio(lambda: rk.load_keras(small), lambda: rk.load_keras(large))
    assert t2 / t1 <= RATIO, (t1, t2)


def test_sequential_of_many_layers_loads_in_linear_time(tmp_path: Path) -> None:
    """2.5k and 10k Dropout layers in a ``.rnnkit`` file: Sequential.add finds a repeated layer
    by a position map, not by scanning the layers added before."""
    paths = []
    for n in (RNNKIT_LAYERS, FACTOR * RNNKIT_LAYERS):
        p = tmp_path / f"m{n}.rnnkit"
        rk.save_model(rk.Sequential([rk.Dropout(0.1) for _ in range(n)], input_shape=(None, 2, 3)), p)
        paths.append(p)
    assert len(rk.load_model(paths[1]).layers) == FACTOR * RNNKIT_LAYERS
    t1, t2 = _ratio(lambda: rk.load_model(paths[0]), lambda: rk.load_model(paths[1]))
    assert t2 / t1 <= RATIO, (t1, t2)


def test_sequential_still_refuses_a_layer_added_twice() -> None:
    d = rk.Dropout(0.1)
    model = rk.Sequential([rk.Dropout(0.2), d])
    with pytest.raises(rk.InvalidInputError, match="already at position 1"):
        model.add(d)


def test_a_long_chain_saves_to_keras_and_loads_back_with_its_values(tmp_path: Path) -> None:
    """1,500 chained layers (deeper than Python's recursion limit) round-trip through
    ``save_keras``/``load_keras``: the loaded model predicts what the saved one did. The chain
    is Dense(3) then ActivationLayer(tanh) pairs; both sides run the same float32 arithmetic
    in the same order, so the outputs agree to rounding (rtol 1e-6)."""
    pytest.importorskip("h5py")
    b = GraphBuilder("long")
    x = b.input((None, 3))
    h = b.add(rk.Dense(3, seed=0), [x])
    for _ in range(1_499):
        h = b.add(rk.ActivationLayer("tanh"), [h])
    model = b.build(h)
    path = tmp_path / "long.keras"
    rk.save_keras(model, path)
    back = rk.load_keras(path)
    xs = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(back.predict(xs), model.predict(xs), rtol=1e-6, atol=0)
    assert len(back.nodes) == len(model.nodes)


def test_keras_weights_entry_is_streamed_not_held_twice(tmp_path: Path) -> None:
    """A 64 MiB weights entry (deflated ~50-fold, under the 100-fold limit) that is no HDF5
    file keeps no data: it is streamed to a temporary file, so the load's peak of traced
    allocations (Python's and NumPy's) is a 1 MiB read chunk and the config, far under 32 MiB
    (joined in memory it was 2 x 64 MiB)."""
    pytest.importorskip("h5py")
    n = 64 << 20
    rng = np.random.default_rng(0)
    data = np.zeros(n, np.uint8)
    at = rng.integers(0, n, n // 200)
    data[at] = rng.integers(1, 256, at.size)
    path = tmp_path / "junk.keras"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", json.dumps({"class_name": "Sequential", "config": {"layers": []}}))
        z.writestr("model.weights.h5", data.tobytes())
    del data
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("model.weights.h5")
        assert info.file_size / info.compress_size < 100   # not refused by the expansion limit
    tracemalloc.start()
    try:
        with pytest.raises(rk.FileFormatError, match="not an HDF5 Keras weights file"):
            rk.load_keras(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"the load allocated up to {peak >> 20} MiB at once"


def test_repeat_vector_through_the_api_is_refused_before_predict_allocates() -> None:
    """RepeatVector(10**9) of a (2, 3) float32 batch would be 24e9 bytes (2 * 1e9 * 3 * 4):
    over the 8 GiB default budget, refused naming the shape, bytes and the setting; a budget
    raised above it is obeyed (checked here without allocating: a budget just below still
    refuses), and an ordinary repeat is exact."""
    model = rk.Sequential([rk.RepeatVector(10**9)], input_shape=(None, 3))
    x = np.ones((2, 3), np.float32)
    refused = r"\(2, 1000000000, 3\).*24000000000 bytes.*max_array_bytes"
    with pytest.raises(rk.MemoryBudgetError, match=refused):
        model.predict(x)
    old = rk.io.set_limits(max_array_bytes=24_000_000_000 - 1)
    try:
        with pytest.raises(MemoryError, match="budget of 23999999999 bytes"):
            model.predict(x)
    finally:
        rk.io.set_limits(**old)
    small = rk.Sequential([rk.RepeatVector(3)], input_shape=(None, 3))
    np.testing.assert_array_equal(small.predict(x), np.stack([x, x, x], axis=1))


@pytest.mark.parametrize("make", [lambda: rk.LSTM(8), lambda: rk.GRU(8), lambda: rk.SimpleRNN(8)])
def test_zero_state_of_a_huge_batch_is_a_typed_error(make: Callable[[], Any]) -> None:
    """zero_state(2**31) of 8 units in float32: >= 2**31 * 8 * 4 = 64 GiB, over the budget;
    a MemoryBudgetError (not numpy's bare MemoryError) naming the batch. zero_state(2) is zeros."""
    layer = make()
    layer.build((None, 2, 3))
    with pytest.raises(rk.MemoryBudgetError, match=r"zero_state\(2147483648\).*over the memory budget"):
        layer.zero_state(2**31)
    state = layer.zero_state(2)
    assert len(state) >= 1
    for part in state:
        np.testing.assert_array_equal(part, np.zeros((2, 8), np.float32))


def test_rnn_net_zero_state_of_a_huge_batch_is_a_typed_error() -> None:
    net = rk.rnn.lstm(3, 8, rk.rnn.RNNConfig(num_layers=2))
    with pytest.raises(rk.MemoryBudgetError, match=r"zero_state\(2147483648\)"):
        net.zero_state(2**31)
