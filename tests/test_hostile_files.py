"""Hostile and damaged files are refused within bounds: sizes stated by headers and configs are
checked against the file's own contents and against the documented limits before anything is
allocated or decompressed (``rnnkit.io.set_limits``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._safetensors import read_safetensors, write_safetensors

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _edited_model_file(tmp_path: Path, model: rk.Sequential, edit: dict[str, object]) -> Path:
    """``model`` saved, then its config's first layer edited (the weights stay small)."""
    src = tmp_path / "m.safetensors"
    model.save(str(src))
    tensors, meta = read_safetensors(src)
    cfg = json.loads(meta["config"])
    cfg["config"]["layers"][0]["config"].update(edit)
    meta["config"] = json.dumps(cfg)
    out = tmp_path / "hostile.safetensors"
    write_safetensors(out, tensors, meta)
    return out


@pytest.mark.parametrize("layer,edit", [
    (lambda: rk.Embedding(10, 1), {"input_dim": 200_000_000}),
    (lambda: rk.Dense(2), {"units": 10**9}),
    (lambda: rk.Dense(2), {"units": 5_000_000}),  # 15 M numbers: beyond twice the file plus 4 Mi
    (lambda: rk.LSTM(3), {"units": 6000}),
    (lambda: rk.GRU(3), {"units": 10**12}),
])
def test_model_config_larger_than_its_weights_is_refused_before_allocating(tmp_path, layer, edit) -> None:  # type: ignore[no-untyped-def]
    shape = (None, 3) if isinstance(layer(), (rk.Embedding, rk.Dense)) else (None, 2, 3)
    path = _edited_model_file(tmp_path, rk.Sequential([layer()], input_shape=shape), edit)
    assert path.stat().st_size < 2000
    t0 = time.perf_counter()
    with pytest.raises(rk.FileFormatError, match="declares a weight of shape .* refused before allocating"):
        rk.load_model(path)
    assert time.perf_counter() - t0 < 2.0


def test_model_file_with_nan_weights_is_refused(tmp_path: Path) -> None:
    m = rk.Sequential([rk.Dense(2, seed=0)], input_shape=(None, 3))
    m.save(str(tmp_path / "m.safetensors"))
    tensors, meta = read_safetensors(tmp_path / "m.safetensors")
    tensors["0.kernel"] = tensors["0.kernel"].copy()
    tensors["0.kernel"][1, 0] = np.nan
    write_safetensors(tmp_path / "nan.safetensors", tensors, meta)
    with pytest.raises(rk.FileFormatError, match=r"'0.kernel' holds nan at \(1, 0\)"):
        rk.load_model(tmp_path / "nan.safetensors")
    fresh = rk.Sequential([rk.Dense(2, seed=1)], input_shape=(None, 3))
    before = fresh.get_weights()
    with pytest.raises(rk.FileFormatError, match="nothing was loaded"):
        fresh.load_weights(str(tmp_path / "nan.safetensors"))
    for a, b in zip(before, fresh.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_limits_are_overridable_and_checked() -> None:
    old = rk.io.set_limits(max_json_depth=5)
    try:
        assert rk.io.LIMITS.max_json_depth == 5
        with pytest.raises(rk.InvalidParameterError, match="unknown limit 'nope'"):
            rk.io.set_limits(nope=1)
        with pytest.raises(rk.InvalidParameterError, match=r"max_json_bytes must be an int >= 1, got 0"):
            rk.io.set_limits(max_json_bytes=0)
    finally:
        rk.io.set_limits(**old)
    assert rk.io.LIMITS.max_json_depth == 100


def test_model_config_deeper_than_the_limit(tmp_path: Path) -> None:
    m = rk.Sequential([rk.Dense(2, seed=0)], input_shape=(None, 3))
    m.save(str(tmp_path / "m.safetensors"))
    old = rk.io.set_limits(max_json_depth=3)
    try:
        with pytest.raises(rk.FileFormatError, match="nested 5 levels deep, over the limit of 3"):
            rk.load_model(tmp_path / "m.safetensors")
    finally:
        rk.io.set_limits(**old)
    assert rk.load_model(tmp_path / "m.safetensors").param_count() == 8


def _zip_of_zeros(path: Path, entry: str, n_bytes: int, config: bytes = b'{"config": {}}') -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        if entry != "config.json":
            z.writestr("config.json", config)
        with z.open(entry, "w", force_zip64=True) as fh:
            block = bytes(1 << 20)
            for _ in range(n_bytes >> 20):
                fh.write(block)
        if entry == "config.json":
            z.writestr("model.weights.h5", b"")


def test_keras_archive_of_zeros_is_refused_from_its_header(tmp_path: Path) -> None:
    path = tmp_path / "bomb.keras"
    _zip_of_zeros(path, "model.weights.h5", 64 << 20)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(rk.FileFormatError, match=r"expands \d+-fold .* over the limit of 100"):
        rk.load_keras(path)
    old = rk.io.set_limits(max_compression_ratio=1e9, max_archive_entry_bytes=32 << 20)
    try:
        with pytest.raises(rk.FileFormatError, match=r"states 67108864 bytes uncompressed, over the limit"):
            rk.load_keras(path)
    finally:
        rk.io.set_limits(**old)


def test_keras_config_json_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big_config.keras"
    _zip_of_zeros(path, "config.json", 20 << 20)
    with pytest.raises(rk.FileFormatError, match="config.json' states 20971520 bytes uncompressed"):
        rk.load_keras(path)


PEAK = textwrap.dedent("""
    import resource, sys
    import rnnkit as rk
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        rk.load_keras(sys.argv[1])
    except rk.FileFormatError:
        pass
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)
""")


def test_keras_bomb_peak_memory_stays_small(tmp_path: Path) -> None:
    """A 256 MiB entry of zeros (the issue's 2 GiB one behaves the same: refused from the
    header) costs the reader under 32 MB of memory beyond the import."""
    path = tmp_path / "bomb.keras"
    _zip_of_zeros(path, "model.weights.h5", 256 << 20)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True, text=True,
                         env=env, timeout=120, check=True)
    assert int(out.stdout.strip()) < 32, out.stdout


def _keras_archive(path: Path, units: int, h5_bytes: bytes) -> None:
    cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 5, 3]}},
        {"class_name": "LSTM", "config": {"name": "lstm", "units": units, "activation": "tanh",
                                          "recurrent_activation": "sigmoid", "use_bias": True,
                                          "return_sequences": False, "dtype": "float32"}}]}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(cfg))
        z.writestr("model.weights.h5", h5_bytes)


def _h5_lstm(units: int, declared: int | None = None) -> bytes:
    import io

    h5py = pytest.importorskip("h5py")
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        g = f.create_group("layers/lstm/cell/vars")
        f["layers/lstm/vars"] = np.zeros(0)  # placeholder group name attr below
        del f["layers/lstm/vars"]
        f.create_group("layers/lstm/vars").attrs["name"] = "lstm"
        g["0"] = np.zeros((3, 4 * units), np.float32)
        g["1"] = np.zeros((units, 4 * units), np.float32)
        if declared is None:
            g["2"] = np.zeros((4 * units,), np.float32)
        else:  # declared huge, no data written: reading it would fill `declared` numbers
            g.create_dataset("2", shape=(declared,), dtype=np.float32)
    return buf.getvalue()


def test_keras_config_larger_than_its_weights(tmp_path: Path) -> None:
    path = tmp_path / "lstm.keras"
    _keras_archive(path, 20000, _h5_lstm(2))
    t0 = time.perf_counter()
    with pytest.raises(rk.FileFormatError, match=r"declares a weight of shape \(20000, 20000\)"):
        rk.load_keras(path)
    assert time.perf_counter() - t0 < 2.0
    _keras_archive(path, 2, _h5_lstm(2))  # the honest file loads
    assert rk.load_keras(path).param_count() == 3 * 8 + 2 * 8 + 8


def test_keras_dataset_declared_beyond_the_file(tmp_path: Path) -> None:
    path = tmp_path / "holes.keras"
    _keras_archive(path, 2, _h5_lstm(2, declared=10**9))
    with pytest.raises(rk.FileFormatError, match=r"declares shape \(1000000000,\) .* refused before reading"):
        rk.load_keras(path)


@pytest.mark.parametrize("blob", [b"", b"PK\x03\x04" + b"\x00" * 40, b"{" * 64, os.urandom(300)])
def test_damaged_files_are_file_format_errors(tmp_path: Path, blob: bytes) -> None:
    for name, load in (("x.keras", rk.load_keras), ("x.safetensors", rk.load_model),
                       ("y.safetensors", rk.load_torch_safetensors)):
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(rk.FileFormatError):
            load(tmp_path / name)


def _depth_reference(doc: bytes) -> int:
    """Nesting depth by a plain character loop: a quote after an even run of backslashes opens
    or closes a string; brackets count outside strings only."""
    depth = deepest = run = 0
    inside = False
    for c in doc.decode("latin-1"):
        if c == '"' and run % 2 == 0:
            inside = not inside
        elif not inside and c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif not inside and c in "]}":
            depth -= 1
        run = run + 1 if c == "\\" else 0
    return deepest


def _random_json(rng: np.random.Generator, level: int) -> object:
    kind = int(rng.integers(0, 4 if level < 12 else 2))
    if kind == 0:
        return "".join(rng.choice(list('ab"\\[]{}:, \n\t\u00e9'), size=int(rng.integers(0, 8))))
    if kind == 1:
        return float(rng.standard_normal())
    if kind == 2:
        return [_random_json(rng, level + 1) for _ in range(int(rng.integers(0, 4)))]
    return {str(_random_json(rng, 99)): _random_json(rng, level + 1) for _ in range(int(rng.integers(0, 4)))}


@pytest.mark.parametrize("block", [1 << 18, 1, 2, 7])
def test_json_depth_matches_a_character_loop(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Documents json.dumps writes (strings full of quotes, backslashes and brackets) and byte
    soups, scanned in blocks of ``block`` bytes (the state carried across block edges)."""
    from rnnkit import _limits

    monkeypatch.setattr(_limits, "_CHUNK", block)
    rng = np.random.default_rng(0)
    for _ in range(300):
        doc = json.dumps(_random_json(rng, 0)).encode()
        assert _limits.json_depth(doc) == _depth_reference(doc), doc
        soup = bytes(rng.choice(list(b'[]{}"\\a,:'), size=int(rng.integers(0, 50))))
        assert _limits.json_depth(soup) == _depth_reference(soup), soup


def test_json_depth_memory_is_bounded_by_its_block() -> None:
    """A legitimate 16 MiB config is accepted; the check's peak memory is a few MiB, not a
    multiple of the document."""
    import tracemalloc

    from rnnkit._limits import json_depth, parse_json

    layers = [{"class_name": "Dense", "config": {"name": f"d{i}", "units": 3, "v": [0.5] * 60}}
              for i in range(40000)]
    doc = json.dumps({"config": {"layers": layers}}).encode()
    doc = doc[:-2] + b" " * ((16 << 20) - len(doc)) + doc[-2:]
    assert len(doc) == 16 << 20
    tracemalloc.start()
    try:
        assert json_depth(doc) == 6
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak
    assert parse_json(doc, "big")["config"]["layers"][39999]["config"]["name"] == "d39999"


HANG = textwrap.dedent("""
    import sys
    import rnnkit as rk
    from rnnkit._limits import parse_json
    try:
        parse_json(b'"' + b'\\\\"' * 200_000, "unterminated")
    except rk.FileFormatError as e:
        assert "not JSON" in str(e)
    try:
        rk.load_keras(sys.argv[1])
    except rk.FileFormatError as e:
        assert "not JSON (Unterminated string" in str(e), e
    print("refused")
""")


def test_unterminated_escaped_strings_are_refused_without_hanging(tmp_path: Path) -> None:
    """A 400 KB run of backslash-quote and a ~1 KB .keras whose config.json inflates to 512 KiB
    of them (the nesting check once backtracked on these for minutes); run in a child so a
    regression cannot hang the suite."""
    path = tmp_path / "hang.keras"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("config.json", b'{"config": {"a": "' + b'\\"' * ((1 << 18) - 10))
        z.writestr("model.weights.h5", b"")
    assert path.stat().st_size < 2000
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", HANG, str(path)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.stdout.strip() == "refused", out.stderr[-2000:]


@pytest.mark.parametrize("limit,value", [("max_json_bytes", math.inf), ("max_json_bytes", 0.5),
                                         ("max_json_depth", 2.5), ("max_compression_ratio", math.nan),
                                         ("max_archive_entry_bytes", -1), ("max_json_depth", "5"),
                                         ("max_json_depth", 7.0), ("max_json_bytes", True),
                                         ("max_json_bytes", 10**400), ("max_array_bytes", 2**63),
                                         ("max_compression_ratio", 10**400),
                                         ("max_compression_ratio", np.bool_(True))])
def test_set_limits_refuses_what_is_not_a_finite_positive_number(limit: str, value: object) -> None:
    before = rk.io.set_limits()
    with pytest.raises(rk.InvalidParameterError, match=f"set_limits: {limit} must be a"):
        rk.io.set_limits(**{limit: value})
    assert rk.io.set_limits() == before
    # before: 10**400 raised a bare OverflowError (math.isfinite), 7.0 / True were taken as ints
    old = rk.io.set_limits(max_json_depth=np.int64(7), max_compression_ratio=2.5)
    try:
        assert rk.io.LIMITS.max_json_depth == 7 and type(rk.io.LIMITS.max_json_depth) is int
        assert rk.io.LIMITS.max_compression_ratio == 2.5
    finally:
        rk.io.set_limits(**old)
