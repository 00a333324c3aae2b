"""Time and peak extra memory of rnnkit's loaders on each hostile file the tests build.

Usage::

    PYTHONPATH=src python tools/hostile_report.py [--json out.json]

Each file is loaded in a fresh child process (``python -c``), after rnnkit, numpy and h5py
are imported there: the time is the load's wall time, the memory the growth of the child's
peak resident set (``ru_maxrss``) over the load. The outcome is the error type and the start
of its message (or ``loaded``). ``peak extra`` is the growth of the peak resident set (0 when
the load stays below the peak the imports reached); ``traced`` is tracemalloc's peak of the
Python and numpy allocations during a second, untimed load. A load still running after 60 s is
killed and reported as such. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

import rnnkit as rk
from rnnkit.io._weights import read_safetensors, write_safetensors

CHILD = r"""
import json, resource, sys, time
import h5py, numpy
import rnnkit as rk
from rnnkit._limits import parse_json
kind, path = sys.argv[1], sys.argv[2]
calls = {"load_keras": rk.load_keras, "load_model": rk.load_model,
         "parse_json": lambda p: parse_json(open(p, "rb").read(), p)}
import tracemalloc
def run():
    try:
        calls[kind](path)
        return "loaded"
    except Exception as e:
        return f"{type(e).__name__}: {e}"
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
outcome = run()
dt = time.perf_counter() - t0
peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
tracemalloc.start()  # a second load, traced (tracing slows it: not timed)
run()
traced = tracemalloc.get_traced_memory()[1] / 2**20
print(json.dumps({"seconds": dt, "peak_mb": peak, "traced_mb": traced, "outcome": outcome}))
"""

KERNEL = np.arange(6, dtype=np.float32).reshape(3, 2)
SEQUENTIAL = {"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [None, 3]}},
    {"class_name": "Dense", "config": {"name": "dense", "units": 2, "activation": "linear",
                                       "use_bias": True, "dtype": "float32"}}]}}


def dense_h5(kernel: Callable[[Any], None]) -> bytes:
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        g = f.create_group("layers/dense/vars")
        g.attrs["name"] = "dense"
        kernel(g)
        g["1"] = np.zeros(2, np.float32)
    return buf.getvalue()


def keras(path: Path, h5: bytes, config: bytes | None = None, deflate: bool = False) -> Path:
    comp = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=comp, compresslevel=9 if deflate else None) as z:
        z.writestr("config.json", config if config is not None else json.dumps(SEQUENTIAL))
        z.writestr("model.weights.h5", h5)
    return path


def edited(d: Path, name: str, model: Any, index: int, edit: dict[str, Any]) -> Path:
    model.save(str(d / "src.safetensors"))
    tensors, meta = read_safetensors(d / "src.safetensors")
    cfg = json.loads(meta["config"])
    cfg["config"]["layers"][index]["config"].update(edit)
    meta["config"] = json.dumps(cfg)
    write_safetensors(d / name, tensors, meta)
    return d / name


def build(d: Path) -> list[tuple[str, str, Path]]:
    """(description, loader, path) of every hostile file."""
    secret, fifo, other = d / "secret", d / "fifo", d / "other.h5"
    secret.write_bytes(b"TOPSECRET" * 4)
    os.mkfifo(fifo)
    os.mkfifo(d / "model.fifo")
    with h5py.File(other, "w") as f:
        f["x"] = KERNEL

    def ext(target: str) -> Callable[[Any], None]:
        return lambda g: g.create_dataset("0", shape=(3, 2), dtype="f4",
                                          external=[(target, 0, h5py.h5f.UNLIMITED)])

    def vds(g: Any) -> None:
        layout = h5py.VirtualLayout(shape=(3, 2), dtype="f4")
        layout[:] = h5py.VirtualSource(str(other), "x", shape=(3, 2))
        g.create_virtual_dataset("0", layout)

    def link(obj: Any) -> Callable[[Any], None]:
        def make(g: Any) -> None:
            g.file["elsewhere"] = KERNEL
            g["0"] = obj
        return make

    doc16 = json.dumps({"config": {"layers": [{"class_name": "Dense", "config": {"name": f"d{i}",
                        "units": 3, "v": [0.5] * 60}} for i in range(40000)]}}).encode()
    (d / "legit16.json").write_bytes(doc16[:-2] + b" " * ((16 << 20) - len(doc16)) + doc16[-2:])
    (d / "unterminated.json").write_bytes(b'"' + b'\\"' * 200_000)
    cases = [
        ("external storage: /proc/self/environ", "load_keras",
         keras(d / "environ.keras", dense_h5(ext("/proc/self/environ")))),
        ("external storage: a secret file", "load_keras",
         keras(d / "secret.keras", dense_h5(ext(str(secret))))),
        ("external storage: a FIFO", "load_keras", keras(d / "fifo.keras", dense_h5(ext(str(fifo))))),
        ("virtual dataset (another file)", "load_keras", keras(d / "vds.keras", dense_h5(vds))),
        ("external link", "load_keras",
         keras(d / "elink.keras", dense_h5(link(h5py.ExternalLink(str(other), "/x"))))),
        ("soft link", "load_keras", keras(d / "slink.keras", dense_h5(link(h5py.SoftLink("/elsewhere"))))),
        ("non-standard filter (scaleoffset)", "load_keras", keras(d / "filter.keras", dense_h5(
            lambda g: g.create_dataset("0", data=np.arange(6).reshape(3, 2), scaleoffset=0)))),
        ("compound dtype", "load_keras", keras(d / "compound.keras", dense_h5(
            lambda g: g.create_dataset("0", data=np.zeros((3, 2), [("a", "f4"), ("b", "i4")]))))),
        ("chunked holes (declared 10**9, nothing stored)", "load_keras", keras(d / "holes.keras", dense_h5(
            lambda g: g.create_dataset("0", shape=(10**9,), dtype="f4", chunks=(1 << 16,))))),
        ("1.3 KB .keras: 512 KiB of \\\" in config.json", "load_keras", keras(
            d / "hang.keras", b"", b'{"config": {"a": "' + b'\\"' * ((1 << 18) - 10), deflate=True)),
        ("400 KB unterminated \\\" string", "parse_json", d / "unterminated.json"),
        ("legitimate 16 MiB config (accepted)", "parse_json", d / "legit16.json"),
        ("LSTM(4000, proj_size=3999) in 1 KB", "load_model", edited(
            d, "proj4000.safetensors", rk.Sequential([rk.LSTM(3, proj_size=2)], input_shape=(None, 2, 3)),
            0, {"units": 4000, "proj_size": 3999})),
        ("LSTM(30000, proj_size=29999) in 1 KB", "load_model", edited(
            d, "proj30000.safetensors", rk.Sequential([rk.LSTM(3, proj_size=2)], input_shape=(None, 2, 3)),
            0, {"units": 30000, "proj_size": 29999})),
        ("RepeatVector(10**9) in 3 KB", "load_model", edited(
            d, "repeat.safetensors", rk.Sequential([rk.RepeatVector(3), rk.LSTM(2)], input_shape=(None, 4)),
            0, {"n": 10**9})),
        ("Embedding(200_000_000, 1)", "load_model", edited(
            d, "embedding.safetensors", rk.Sequential([rk.Embedding(10, 1)], input_shape=(None, 3)),
            0, {"input_dim": 200_000_000})),
        ("/dev/null", "load_model", Path("/dev/null")),
        ("/dev/zero", "load_model", Path("/dev/zero")),
        ("a FIFO as the model file", "load_model", d / "model.fifo"),
        ("a directory", "load_model", d),
    ]
    return cases


def measure(kind: str, path: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, kind, str(path)], capture_output=True, text=True,
                             env=env, timeout=60)
    except subprocess.TimeoutExpired:
        return {"seconds": 60.0, "peak_mb": float("nan"), "traced_mb": float("nan"),
                "outcome": "KILLED after 60 s"}
    if out.returncode != 0:
        return {"seconds": float("nan"), "peak_mb": float("nan"), "traced_mb": float("nan"),
                "outcome": f"child failed: {out.stderr[-300:]}"}
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    row["outcome"] = row["outcome"].replace(str(path), "FILE").replace(str(path.parent), "DIR")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for what, kind, path in build(Path(tmp)):
            size = path.stat().st_size if path.is_file() else 0
            r = {"file": what, "bytes": size, "loader": kind, **measure(kind, path)}
            rows.append(r)
    print("| hostile file | bytes | loader | time (s) | peak extra RSS (MB) | traced (MB) | outcome |")
    print("|---|---:|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['file']} | {r['bytes']} | {r['loader']} | {r['seconds']:.3f} | {r['peak_mb']:.1f} | "
              f"{r.get('traced_mb', float('nan')):.2f} | {r['outcome'][:70].replace('|', '/')} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
