"""HDF5 weights files read only their own bytes: external storage, virtual datasets, links,
non-standard filters and non-numeric types are refused naming the dataset, before anything is
read; loaders refuse what is not a regular file before reading it."""

from __future__ import annotations

import io
import json
import os
import tempfile
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

h5py = pytest.importorskip("h5py")

KERNEL = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], np.float32)
BIAS = np.array([0.1, -0.2], np.float32)


def dense_h5(edit: Callable[[Any], None] | None = None, **ds: Any) -> bytes:
    """The weights file of a Keras ``Dense(2)`` on 3 features; ``edit(vars_group)`` replaces
    the kernel dataset ``0`` by whatever it creates; ``ds``: create_dataset options for both."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        g = f.create_group("layers/dense/vars")
        g.attrs["name"] = "dense"
        if edit is None:
            g.create_dataset("0", data=KERNEL, **ds)
        else:
            edit(g)
        g.create_dataset("1", data=BIAS, **ds)
    return buf.getvalue()


def dense_keras(path: Path, h5: bytes) -> Path:
    cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 3]}},
        {"class_name": "Dense", "config": {"name": "dense", "units": 2, "activation": "linear",
                                           "use_bias": True, "dtype": "float32"}}]}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(cfg))
        z.writestr("model.weights.h5", h5)
    return path


def both_loaders(tmp_path: Path, h5: bytes, match: str) -> None:
    """``.keras`` (load_keras) and ``.weights.h5`` (load_keras_weights) both refuse ``h5``."""
    with pytest.raises(rk.FileFormatError, match=match):
        rk.load_keras(dense_keras(tmp_path / "m.keras", h5))
    (tmp_path / "w.weights.h5").write_bytes(h5)
    model = rk.Sequential([rk.Dense(2, seed=0)], input_shape=(None, 3))
    before = model.get_weights()
    with pytest.raises(rk.FileFormatError, match=match):
        rk.load_keras_weights(model, tmp_path / "w.weights.h5")
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_compressed_weights_load_with_their_values(tmp_path: Path) -> None:
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], np.float32)
    for opts in ({"compression": "gzip", "shuffle": True, "fletcher32": True, "chunks": True},
                 {"compression": "lzf"}, {}):
        model = rk.load_keras(dense_keras(tmp_path / "m.keras", dense_h5(**opts)))
        np.testing.assert_allclose(model.predict(x), x @ KERNEL + BIAS, rtol=1e-6)


def test_external_storage_of_the_environment_is_refused(tmp_path: Path) -> None:
    def edit(g: Any) -> None:
        g.create_dataset("0", shape=(3, 2), dtype="f4",
                         external=[("/proc/self/environ", 0, h5py.h5f.UNLIMITED)])

    both_loaders(tmp_path, dense_h5(edit), r"dataset 'layers/dense/vars/0' keeps its data in an "
                                          r"external file \('/proc/self/environ'\)")


def test_external_storage_of_a_secret_never_reaches_the_weights(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"TOPSECRET" * 3)

    def edit(g: Any) -> None:
        g.create_dataset("0", shape=(3, 2), dtype="f4", external=[(str(secret), 0, 24)])

    with pytest.raises(rk.FileFormatError, match="external file") as e:
        rk.load_keras(dense_keras(tmp_path / "m.keras", dense_h5(edit)))
    assert "TOPSECRET" not in str(e.value)


def _load_or_unblock(fifo: Path, load: Callable[[], Any]) -> BaseException | None:
    """Run ``load`` in a thread; if it still runs after 20 s (blocked on ``fifo``), open the
    FIFO's writing end to release it and fail."""
    out: list[BaseException | None] = [None]

    def run() -> None:
        try:
            load()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out[0] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():
        with open(fifo, "wb"):
            pass
        t.join(20)
        pytest.fail(f"the load blocked on the FIFO {fifo}")
    return out[0]


def test_external_storage_in_a_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def edit(g: Any) -> None:
        g.create_dataset("0", shape=(3, 2), dtype="f4", external=[(str(fifo), 0, 24)])

    path = dense_keras(tmp_path / "m.keras", dense_h5(edit))
    err = _load_or_unblock(fifo, lambda: rk.load_keras(path))
    assert isinstance(err, rk.FileFormatError) and "external file" in str(err)


def test_virtual_dataset_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = KERNEL

    def edit(g: Any) -> None:
        layout = h5py.VirtualLayout(shape=(3, 2), dtype="f4")
        layout[:] = h5py.VirtualSource(str(other), "x", shape=(3, 2))
        g.create_virtual_dataset("0", layout)

    both_loaders(tmp_path, dense_h5(edit), r"'layers/dense/vars/0' has virtual storage")


@pytest.mark.parametrize("link,match", [
    (lambda p: h5py.ExternalLink(str(p), "/x"), r"'layers/dense/vars/0' is an external link to '/x'"),
    (lambda p: h5py.SoftLink("/elsewhere"), r"'layers/dense/vars/0' is a soft link to '/elsewhere'"),
])
def test_links_are_refused(tmp_path: Path, link: Callable[[Path], Any], match: str) -> None:
    """The other file is a FIFO: following the link would block, refusing it does not."""
    other = tmp_path / "other.h5"
    os.mkfifo(other)

    def edit(g: Any) -> None:
        g.file["elsewhere"] = KERNEL
        g["0"] = link(other)

    h5 = dense_h5(edit)
    err = _load_or_unblock(other, lambda: both_loaders(tmp_path, h5, match))
    assert err is None, err


@pytest.mark.parametrize("make,match", [
    (lambda g: g.create_dataset("0", data=np.arange(6).reshape(3, 2), scaleoffset=0),
     "uses HDF5 filter 6"),
    (lambda g: g.create_dataset("0", data=KERNEL, chunks=(3, 2), compression=32001,
                                allow_unknown_filter=True), "uses HDF5 filter 32001"),
    (lambda g: g.create_dataset("0", data=np.zeros((3, 2), [("a", "f4"), ("b", "i4")])),
     "holds compound values"),
    (lambda g: g.create_dataset("0", data=np.array([["a", "b"]] * 3, dtype=h5py.string_dtype())),
     "holds string values"),
    (lambda g: g.create_dataset("0", data=np.array([[b"ab", b"c"]] * 3)), "holds string values"),
    (lambda g: g.create_dataset("0", data=np.ones((3, 2), bool)), "holds enum values"),
    (lambda g: g.create_dataset("0", shape=(3, 2), dtype=h5py.vlen_dtype("f4")),
     "holds variable-length values"),
    (lambda g: h5py.h5d.create(g.id, b"0", h5py.h5t.array_create(h5py.h5t.IEEE_F32LE, (2,)),
                               h5py.h5s.create_simple((3,))), "holds array values"),
    (lambda g: g.create_dataset("0", shape=(3, 2), dtype="f4", chunks=(1, 2)),
     r"declares shape \(3, 2\) \(24 bytes\) but has 0 bytes stored"),
    (lambda g: g.create_dataset("0", data=KERNEL, maxshape=(None, 2), chunks=(10**6, 2)),
     r"declares chunks of \(1000000, 2\)"),
])
def test_non_standard_datasets_are_refused_naming_them(tmp_path: Path, make: Callable[[Any], Any],
                                                       match: str) -> None:
    both_loaders(tmp_path, dense_h5(make), "dataset 'layers/dense/vars/0' " + match)


def test_a_layers_link_to_another_file_is_not_followed(tmp_path: Path) -> None:
    """``layers`` itself an external link to a file that is a FIFO: refused without opening it
    (opening would block)."""
    fifo = tmp_path / "other.h5"
    os.mkfifo(fifo)
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f["layers"] = h5py.ExternalLink(str(fifo), "/layers")
    path = dense_keras(tmp_path / "m.keras", buf.getvalue())
    err = _load_or_unblock(fifo, lambda: rk.load_keras(path))
    assert isinstance(err, rk.FileFormatError) and "'layers' is a soft or external link" in str(err), err


NON_REGULAR = {"/dev/null": "a character device", "/dev/zero": "a character device"}


def _loaders(tmp: Path) -> dict[str, Callable[[str], Any]]:
    model = rk.Sequential([rk.Dense(2, seed=0)], input_shape=(None, 3))
    return {"load_model": rk.load_model, "load_keras": rk.load_keras,
            "load_keras_weights": lambda p: rk.load_keras_weights(model, p),
            "load_weights": lambda p: rk.io.load_weights(model, p),
            "load_torch_safetensors": rk.load_torch_safetensors, "load_torch_rnn": rk.load_torch_rnn}


@pytest.mark.parametrize("special", sorted(NON_REGULAR))
def test_devices_are_refused_by_every_loader(tmp_path: Path, special: str) -> None:
    for name, load in _loaders(tmp_path).items():
        with pytest.raises(rk.FileFormatError, match=f"found {NON_REGULAR[special]}; refused before"):
            load(special)
        assert name


def test_fifo_and_directory_are_refused_by_every_loader(tmp_path: Path) -> None:
    fifo = tmp_path / "m.safetensors"
    os.mkfifo(fifo)
    for name, load in _loaders(tmp_path).items():
        err = _load_or_unblock(fifo, lambda load=load: load(str(fifo)))  # type: ignore[misc]
        assert isinstance(err, rk.FileFormatError) and "a FIFO (named pipe)" in str(err), (name, err)
        with pytest.raises(rk.FileFormatError, match="found a directory"):
            load(str(tmp_path))


def _load_as(uid: int | None, p: str) -> list[str]:
    """The errors of three loaders on ``p``, in this process or (``uid``) in a forked child
    running as that user (root may read any file)."""
    if uid is None:
        return [_error(load, p) for load in (rk.load_model, rk.load_keras, rk.load_torch_safetensors)]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to ``uid``, report, exit without running pytest's cleanup
        code = 1
        try:
            os.close(r)
            os.setgid(uid)
            os.setuid(uid)
            os.write(w, json.dumps(_load_as(None, p)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and data, status
    return list(json.loads(data))


def _error(load: Callable[[str], Any], p: str) -> str:
    try:
        load(p)
    except rk.io.UnreadableFileError as e:
        return f"{isinstance(e, PermissionError)} {e}"
    except Exception as e:  # noqa: BLE001 - reported to the test
        return f"{type(e).__name__}: {e}"
    return "loaded"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_mode_000_file_is_reported_unreadable() -> None:
    d = tempfile.mkdtemp()
    try:
        os.chmod(d, 0o755)
        p = os.path.join(d, "m.safetensors")
        rk.Sequential([rk.Dense(2)], input_shape=(None, 3)).save(p)
        os.chmod(p, 0)
        for msg in _load_as(65534 if os.geteuid() == 0 else None, p):
            assert msg.startswith(f"True {p}: exists but this process may not read it (mode 000)"), msg
    finally:
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)


def _tensor(name: str) -> dict[str, Any]:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None, 3], "dtype": "float32", "keras_history": [name, 0, 0]}}


def functional_config() -> dict[str, Any]:
    """A functional Keras model ``in -> dense`` as Keras 3 writes its config.json."""
    return {"class_name": "Functional", "config": {"name": "f", "layers": [
        {"class_name": "InputLayer", "name": "in", "inbound_nodes": [],
         "config": {"name": "in", "batch_shape": [None, 3], "dtype": "float32"}},
        {"class_name": "Dense", "name": "dense",
         "config": {"name": "dense", "units": 2, "activation": "linear", "use_bias": True,
                    "dtype": "float32"},
         "inbound_nodes": [{"args": [_tensor("in")], "kwargs": {}}]}],
        "input_layers": [["in", 0, 0]], "output_layers": [["dense", 0, 0]]}}


def _archive(path: Path, cfg: dict[str, Any], h5: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(cfg))
        z.writestr("model.weights.h5", h5)
    return path


def _dense(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg["config"]["layers"][1]  # type: ignore[no-any-return]


MALFORMED: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (lambda c: _dense(c)["inbound_nodes"][0]["args"][0].update(config="x"), "unreadable inbound tensor"),
    (lambda c: _dense(c)["inbound_nodes"][0]["args"][0]["config"].update(keras_history=["in", "a", 0]),
     "unreadable inbound tensor"),
    (lambda c: _dense(c)["inbound_nodes"][0]["args"][0]["config"].update(keras_history=["in", 0, 2.5]),
     "unreadable inbound tensor"),
    (lambda c: _dense(c)["inbound_nodes"][0].update(kwargs=[1]), "the call's kwargs are"),
    (lambda c: _dense(c)["inbound_nodes"][0].update(args=[]), "call 0 of layer 'dense' reads no tensor"),
    (lambda c: c["config"].update(output_layers=5), "output_layers is 5"),
    (lambda c: c["config"].update(output_layers=[["dense", "x"]]), "output_layers holds"),
    (lambda c: c["config"].update(output_layers=[["dense", 0, 3]]), "reads output 3 of layer 'dense'"),
    (lambda c: c["config"].update(input_layers=[["nope", 0, 0]]), "call 0 of layer 'nope', which"),
    (lambda c: c["config"].update(layers={"a": 1}), "layers are {'a': 1}, expected a list"),
    (lambda c: c["config"]["layers"][0].update(config=[]), "malformed|InputLayer"),
    (lambda c: _dense(c).update(config=["units"]), "dense|Dense"),
]


def test_functional_config_loads_with_its_values(tmp_path: Path) -> None:
    model = rk.load_keras(_archive(tmp_path / "f.keras", functional_config(), dense_h5()))
    x = np.array([[1.0, -2.0, 0.5]], np.float32)
    np.testing.assert_allclose(model.predict(x), x @ KERNEL + BIAS, rtol=1e-6)


@pytest.mark.parametrize("edit,match", MALFORMED)
def test_malformed_functional_configs_are_file_format_errors(
        tmp_path: Path, edit: Callable[[dict[str, Any]], None], match: str) -> None:
    cfg = functional_config()
    edit(cfg)
    with pytest.raises(rk.Error, match=match) as e:
        rk.load_keras(_archive(tmp_path / "f.keras", cfg, dense_h5()))
    assert isinstance(e.value, (rk.FileFormatError, rk.io.UnsupportedFeatureError)), repr(e.value)


@pytest.mark.parametrize("rename", ["00", "\u0660", "x", "0/0"])
def test_renamed_weight_datasets_are_file_format_errors(tmp_path: Path, rename: str) -> None:
    """A kernel stored as ``vars/00`` (or an Arabic-Indic zero, a name, a group) instead of
    ``vars/0``."""
    def edit(g: Any) -> None:
        g.create_dataset(rename, data=KERNEL)

    both_loaders(tmp_path, dense_h5(edit), r"the weights under 'layers/dense/vars' are not numbered 0..n-1")
