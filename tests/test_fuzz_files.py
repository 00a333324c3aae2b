"""Fuzzed model files (Hypothesis): mutated ``.keras`` configs, HDF5 weight layouts (external
storage, links, dtypes, filters, chunking), truncated and bit-flipped files, mutated rnnkit
model configs. Whatever the file, a loader returns a model or raises an ``rnnkit.Error``; a
model it returns holds exactly the numbers written into the file (nothing read from elsewhere).

Cases per surface: ``RNNKIT_FUZZ=long`` runs :data:`LONG` each, the default CI profile
:data:`CI` each. ``RNNKIT_FUZZ_COUNTS=path`` writes the count of cases run per surface there
(JSON) when the module ends.
"""

from __future__ import annotations

import copy
import io
import json
import os
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
h5py = pytest.importorskip("h5py")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit._safetensors import read_safetensors, safetensors_bytes  # noqa: E402

CI, LONG = 40, 6000
_LONG = os.environ.get("RNNKIT_FUZZ") == "long"
EXAMPLES = int(os.environ.get("RNNKIT_FUZZ_EXAMPLES", LONG if _LONG else CI))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not _LONG,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
COUNTS: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()

KERNEL = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], np.float32)
BIAS = np.array([0.1, -0.2], np.float32)
X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], np.float32)
SECRET = b"TOPSECRET-" * 4
ODD: list[Any] = [None, "", "abc", -1, 0, 1, 3, 2.5, 1e300, -1e300, 10**12, True, [], [1, 2], {},
                  {"class_name": 1}, ["in", 0, 0], [["in", 0, 0]], "Dense", "InputLayer", [None, 3]]


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    path = os.environ.get("RNNKIT_FUZZ_COUNTS")
    if path:
        Path(path).write_text(json.dumps({"cases": dict(COUNTS), "outcomes": dict(OUTCOMES)}, indent=1))


def typed(surface: str, call: Callable[[], Any]) -> Any:
    """Run ``call``; anything but a result or an rnnkit.Error fails the property."""
    COUNTS[surface] += 1
    try:
        with np.errstate(all="ignore"):
            out = call()
    except rk.Error as e:
        OUTCOMES[f"{surface}: {type(e).__name__}"] += 1
        return None
    except Exception as e:  # noqa: BLE001 - the property under test
        raise AssertionError(f"{surface}: untyped {type(e).__module__}.{type(e).__name__}: {e}") from e
    OUTCOMES[f"{surface}: loaded"] += 1
    return out


def _tensor(name: str) -> dict[str, Any]:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None, 3], "dtype": "float32", "keras_history": [name, 0, 0]}}


def functional() -> dict[str, Any]:
    return {"class_name": "Functional", "config": {"name": "f", "layers": [
        {"class_name": "InputLayer", "name": "in", "inbound_nodes": [],
         "config": {"name": "in", "batch_shape": [None, 3], "dtype": "float32"}},
        {"class_name": "Dense", "name": "dense", "config": {"name": "dense", "units": 2,
                                                            "activation": "linear", "use_bias": True,
                                                            "dtype": "float32"},
         "inbound_nodes": [{"args": [_tensor("in")], "kwargs": {}}]}],
        "input_layers": [["in", 0, 0]], "output_layers": [["dense", 0, 0]]}}


def sequential() -> dict[str, Any]:
    return {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 3]}},
        {"class_name": "Dense", "config": {"name": "dense", "units": 2, "activation": "linear",
                                           "use_bias": True, "dtype": "float32"}}]}}


def dense_h5(make: Callable[[Any, str, np.ndarray], None] | None = None) -> bytes:
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        g = f.create_group("layers/dense/vars")
        g.attrs["name"] = "dense"
        for name, data in (("0", KERNEL), ("1", BIAS)):
            if make is None:
                g.create_dataset(name, data=data)
            else:
                make(g, name, data)
    return buf.getvalue()


def archive(path: Path, cfg: Any, h5: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(cfg) if not isinstance(cfg, bytes) else cfg)
        z.writestr("model.weights.h5", h5)
    return path


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def mutate(cfg: Any, picks: list[tuple[int, int, int]]) -> Any:
    """``cfg`` with each pick ``(where, how, value)`` applied: replace the node at a path by
    an odd value, delete it, or duplicate it."""
    cfg = copy.deepcopy(cfg)
    for where, how, value in picks:
        paths = _paths(cfg)[1:]
        if not paths:
            break
        path = paths[where % len(paths)]
        parent = cfg
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        if how == 0:
            parent[key] = copy.deepcopy(ODD[value % len(ODD)])
        elif how == 1:
            del parent[key]
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[key] = [copy.deepcopy(parent[key])] * 2
    return cfg


PICKS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 2), st.integers(0, 100)), min_size=1,
                 max_size=3)


@FUZZ
@given(functional_model=st.booleans(), picks=PICKS)
def test_mutated_keras_configs(tmp_path_factory: pytest.TempPathFactory, functional_model: bool,
                               picks: list[tuple[int, int, int]]) -> None:
    cfg = mutate(functional() if functional_model else sequential(), picks)
    path = archive(tmp_path_factory.mktemp("cfg") / "m.keras", cfg, dense_h5())
    model = typed("keras config", lambda: rk.load_keras(path))
    if model is not None:
        typed("keras config", lambda: model.predict(X))


def _layout(secret: Path, other: Path, choice: dict[str, Any]) -> Callable[[Any, str, np.ndarray], None]:
    def make(g: Any, name: str, data: np.ndarray) -> None:
        kind = choice[name]
        dtype = data.dtype if kind["dtype"] == "same" else kind["dtype"]
        opts: dict[str, Any] = {}
        if kind["layout"] == "chunked":
            opts["chunks"] = kind["chunks"](data.shape)
        for f in kind["filters"]:
            opts.update(f)
        if kind["storage"] == "external":
            g.create_dataset(name, shape=data.shape, dtype=dtype,
                             external=[(str(secret), 0, h5py.h5f.UNLIMITED)])
        elif kind["storage"] == "environ":
            g.create_dataset(name, shape=data.shape, dtype=dtype,
                             external=[("/proc/self/environ", 0, h5py.h5f.UNLIMITED)])
        elif kind["storage"] == "empty":
            g.create_dataset(name, shape=data.shape, dtype=dtype, **opts)
        elif kind["storage"] == "soft":
            g.file[f"elsewhere{name}"] = data
            g[name] = h5py.SoftLink(f"/elsewhere{name}")
        elif kind["storage"] == "external-link":
            g[name] = h5py.ExternalLink(str(other), "/x")
        elif kind["storage"] == "virtual":
            layout = h5py.VirtualLayout(shape=data.shape, dtype="f4")
            layout[:] = h5py.VirtualSource(str(other), "x", shape=(3, 2))[: data.shape[0]] \
                if data.ndim == 2 else h5py.VirtualSource(str(other), "x", shape=(3, 2))[0]
            g.create_virtual_dataset(name, layout)
        else:
            try:
                g.create_dataset(name, data=np.asarray(data).astype(dtype), **opts)
            except (TypeError, ValueError):
                g.create_dataset(name, data=data, **opts)
    return make


DATASET = st.fixed_dictionaries({
    "dtype": st.sampled_from(["same", "same", "f8", "i4", "f2", "u1", "S4", "bool",
                              h5py.string_dtype(), np.dtype([("a", "f4"), ("b", "f4")])]),
    "layout": st.sampled_from(["contiguous", "chunked"]),
    "chunks": st.sampled_from([lambda s: True, lambda s: tuple(1 for _ in s)]),
    "filters": st.lists(st.sampled_from([{"compression": "gzip"}, {"shuffle": True}, {"fletcher32": True},
                                         {"compression": "lzf"}, {"scaleoffset": 4},
                                         {"compression": 32001, "allow_unknown_filter": True}]),
                        max_size=2, unique_by=lambda d: next(iter(d))),
    "storage": st.sampled_from(["data"] * 6 + ["external", "environ", "empty", "soft", "external-link",
                                               "virtual"]),
})


@FUZZ
@given(kernel=DATASET, bias=DATASET)
def test_hdf5_layouts(tmp_path_factory: pytest.TempPathFactory, kernel: dict[str, Any],
                      bias: dict[str, Any]) -> None:
    d = tmp_path_factory.mktemp("h5")
    secret, other = d / "secret", d / "other.h5"
    secret.write_bytes(SECRET)
    with h5py.File(other, "w") as f:
        f["x"] = KERNEL * 100
    try:
        h5 = dense_h5(_layout(secret, other, {"0": kernel, "1": bias}))
    except (TypeError, ValueError, OSError):
        return  # a combination h5py itself refuses to write
    path = archive(d / "m.keras", sequential(), h5)
    model = typed("hdf5 layout", lambda: rk.load_keras(path))
    if model is not None:  # the numbers are the file's own: never the secret, the environment or
        assert kernel["storage"] == "data" and bias["storage"] == "data"  # another file's
        with h5py.File(io.BytesIO(h5), "r") as f:
            stored = [np.asarray(f[f"layers/dense/vars/{i}"][()], np.float32) for i in (0, 1)]
        for got, want in zip(model.get_weights(), stored, strict=True):
            np.testing.assert_array_equal(got, want.reshape(got.shape))
    (d / "w.weights.h5").write_bytes(h5)
    target = rk.Sequential([rk.Dense(2, seed=0)], input_shape=(None, 3))
    typed("hdf5 layout", lambda: rk.load_keras_weights(target, d / "w.weights.h5"))


@pytest.fixture(scope="module")
def valid_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a valid model file, .keras archive and .weights.h5 file (a path, so
    Hypothesis' reports do not print the bytes)."""
    d = tmp_path_factory.mktemp("valid")
    m = rk.Sequential([rk.LSTM(3, seed=0), rk.Dense(2, seed=1)], input_shape=(None, 4, 3))
    m.save(str(d / "m.safetensors"))
    m.save(str(d / "m.keras"))
    m.save_weights(str(d / "w.weights.h5"))
    return d


def _loaders() -> dict[str, Callable[[Path], Any]]:
    fresh = rk.Sequential([rk.LSTM(3, seed=2), rk.Dense(2, seed=3)], input_shape=(None, 4, 3))
    return {"load_model": rk.load_model, "load_keras": rk.load_keras,
            "load_weights": lambda p: fresh.load_weights(str(p)),
            "load_keras_weights": lambda p: rk.load_keras_weights(fresh, p),
            "load_torch_safetensors": rk.load_torch_safetensors}


@FUZZ
@given(source=st.sampled_from(["m.safetensors", "m.keras", "w.weights.h5"]), cut=st.floats(0, 1),
       flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 7)), max_size=8),
       loader=st.sampled_from(sorted(_loaders())))
def test_truncated_and_bit_flipped_files(tmp_path_factory: pytest.TempPathFactory,
                                         valid_files: Path, source: str, cut: float,
                                         flips: list[tuple[float, int]], loader: str) -> None:
    data = bytearray((valid_files / source).read_bytes())
    for where, bit in flips:
        data[min(int(where * len(data)), len(data) - 1)] ^= 1 << bit
    data = data[: max(1, int(len(data) * (1 - cut * cut * 0.5))) if cut > 0.5 else len(data)]
    path = tmp_path_factory.mktemp("bytes") / source
    path.write_bytes(bytes(data))
    typed("bytes", lambda: _loaders()[loader](path))


@FUZZ
@given(picks=PICKS)
def test_mutated_model_file_configs(tmp_path_factory: pytest.TempPathFactory,
                                    valid_files: Path, picks: list[tuple[int, int, int]]) -> None:
    d = tmp_path_factory.mktemp("st")
    (d / "src").write_bytes((valid_files / "m.safetensors").read_bytes())
    tensors, meta = read_safetensors(d / "src")
    meta["config"] = json.dumps(mutate(json.loads(meta["config"]), picks))
    (d / "m.safetensors").write_bytes(safetensors_bytes(tensors, meta))
    model = typed("model config", lambda: rk.load_model(d / "m.safetensors"))
    if model is not None:
        typed("model config", lambda: model.predict(np.zeros((1, 4, 3), np.float32)))
