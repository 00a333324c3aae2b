"""Small-shape inference against onnxruntime in CPU time (run by hand, never a test).

For each case, ``layer.forward(x, Ctx.inference())`` (``return_sequences=True``, float32, one
thread: ``RNNKIT_KERNEL_THREADS=1`` is set here before rnnkit is imported) and onnxruntime on the
graph ``rk.save_onnx`` writes of the same model (``intra_op_num_threads=1``), interleaved in one
process, the order rotating every repeat. Each sample is this thread's CPU time
(``time.thread_time``) over an inner loop, so the time the thread waits for a core on a loaded
machine is left out. Cases ``lstm``, ``gru`` (``reset_after=True``) and ``lstm-len`` (lengths
``T, T-1, ...`` down to about ``T/2``, as ``bench_peers.py``): the last is timed against BOTH
onnxruntime graphs, the plain one and the one with ``sequence_lens`` (``lengths=True``), so
that one can see whether the lengths graph costs onnxruntime anything. Every onnxruntime output
is checked against rnnkit's first.

Usage::

    python benchmarks/bench_small.py                           # lstm:S1 gru:S1 lstm-len:S1 lstm-len:S2
    python benchmarks/bench_small.py lstm:S1 --repeats 31 --stat min
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")

import numpy as np  # noqa: E402

import rnnkit as rk  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_peers import SHAPES, lengths_of  # noqa: E402


def _time(fns: dict[str, Callable[[], object]], repeats: int, inner: int, stat: str) -> dict[str, float]:
    """Microseconds of CPU time per call: the median (or min) over ``repeats`` rotated rounds."""
    got: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    for r in range(repeats):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            fn = fns[k]
            t0 = time.thread_time()
            for _ in range(inner):
                fn()
            got[k].append((time.thread_time() - t0) / inner * 1e6)
    pick = min if stat == "min" else statistics.median
    return {k: float(pick(v)) for k, v in got.items()}


def runners(kind: str, shape: tuple[int, int, int, int], folder: str) -> dict[str, Callable[[], object]]:
    """rnnkit's call and one onnxruntime call per graph (checked against rnnkit's output)."""
    import onnxruntime as ort

    B, T, F, H = shape
    x = np.random.default_rng(7).standard_normal((B, T, F)).astype(np.float32)
    base = kind.split("-")[0]
    layer: Any = (rk.GRU(H, reset_after=True, return_sequences=True, seed=1, input_dim=F) if base == "gru"
                  else rk.LSTM(H, return_sequences=True, seed=1, input_dim=F))
    model = rk.Sequential([layer])
    model.build((None, T, F))
    lens = lengths_of(B, T) if kind.endswith("-len") else None

    def run_rk() -> object:
        ctx = rk.Ctx.inference()
        if lens is not None:
            ctx.set_mask(lengths=lens)
        return layer.forward(x, ctx)

    want = np.asarray(run_rk())
    fns: dict[str, Callable[[], object]] = {"rnnkit": run_rk}
    for graph_lengths in ((False, True) if lens is not None else (False,)):
        path = os.path.join(folder, f"{kind}-{B}x{T}x{F}x{H}-{graph_lengths}.onnx")
        rk.save_onnx(model, path, lengths=graph_lengths)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed: dict[str, Any] = {sess.get_inputs()[0].name: x}
        if graph_lengths:
            feed["lengths"] = lens
        out = np.asarray(sess.run(None, feed)[0])
        if graph_lengths or lens is None:   # (the plain graph runs every step of every row)
            err = float(np.max(np.abs(out - want)))
            if not err <= 1e-4:
                raise SystemExit(f"{kind} {shape}: onnxruntime differs from rnnkit by {err:.2e}")

        def run_ort(sess: Any = sess, feed: dict[str, Any] = feed) -> object:
            return sess.run(None, feed)[0]

        fns["ort-len" if graph_lengths else "ort"] = run_ort
    return fns


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("cases", nargs="*", default=["lstm:S1", "gru:S1", "lstm-len:S1", "lstm-len:S2"],
                   help="kind:shape, kind one of lstm, gru, lstm-len; shape S1-S4")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--stat", choices=("median", "min"), default="median")
    args = p.parse_args(argv)
    folder = tempfile.mkdtemp()
    print(f"CPU time per call (time.thread_time, {args.stat} of {args.repeats}), one thread; "
          f"ratio = rnnkit / onnxruntime")
    for case in args.cases:
        kind, shp = case.split(":")
        shape = SHAPES[shp]
        fns = runners(kind, shape, folder)
        t0 = time.thread_time()
        for _ in range(10):
            fns["rnnkit"]()
        inner = max(1, min(1000, int(0.01 / max((time.thread_time() - t0) / 10, 1e-7))))   # ~10 ms
        t = _time(fns, args.repeats, inner, args.stat)
        r = t["rnnkit"]
        peers = "  ".join(f"{k} {v:8.1f} us (ratio {r / v:.2f})" for k, v in t.items() if k != "rnnkit")
        print(f"{case:12s} rnnkit {r:8.1f} us  {peers}  load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
