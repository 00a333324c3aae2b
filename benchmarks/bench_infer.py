"""float32 inference against onnxruntime and PyTorch, same process (run by hand, never a test).

For each shape (B, T, F, H) S1 (1,100,16,32), S2 (32,50,32,64), S3 (64,100,128,256),
S4 (128,200,256,512) and each of LSTM / GRU (``reset_after=True``, PyTorch's and ONNX's form),
one layer returning its last output: rnnkit ``layer.forward(x, Ctx.inference())``,
``Sequential([layer]).predict(x)``, onnxruntime on the graph ``rk.save_onnx`` writes of that
model, and ``torch.nn.LSTM`` / ``GRU`` with the same weights (``rnnkit.io._interop.to_torch_state``). The
threads: ``--threads N`` sets ``RNNKIT_KERNEL_THREADS``, ``torch.set_num_threads`` and
onnxruntime's ``intra_op_num_threads`` (before anything is imported). Every output is checked
against onnxruntime's (max |diff| printed). Times are medians of interleaved rounds; the
ratios are rnnkit / peer (below 1: rnnkit faster). On a shared machine say so with the numbers.

Usage::

    python benchmarks/bench_infer.py [--shapes S1,S2] [--cells lstm,gru] [--threads 1] [--repeats 7]
    python benchmarks/bench_infer.py --threads-ab --shapes S3,S4   # rnnkit alone, 1 vs 2 threads

``--threads-ab`` times rnnkit's inference (``layer.forward``) and training pass (forward +
backward in a training ``Ctx``) with one and with two row blocks, alternating within each
round (the block count is switched in place), and prints the speed-up of two over one.
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

SHAPES = {"S1": (1, 100, 16, 32), "S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256),
          "S4": (128, 200, 256, 512)}


def _rounds(fns: dict[str, Callable[[], object]], repeats: int, budget: float) -> dict[str, float]:
    """Seconds per call of each function: medians of ``repeats`` interleaved rounds, each round
    of each function about ``budget`` seconds."""
    inner = {}
    for k, f in fns.items():
        f()
        t0 = time.perf_counter()
        f()
        inner[k] = max(1, int(budget / max(time.perf_counter() - t0, 1e-7)))
    got: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            f, n = fns[k], inner[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            got[k].append((time.perf_counter() - t0) / n)
    return {k: statistics.median(v) for k, v in got.items()}


def one(cell: str, shape: str, threads: int, repeats: int, budget: float) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort
    import torch

    import rnnkit as rk
    from rnnkit.io._interop import to_torch_state

    B, T, F, H = SHAPES[shape]
    layer = rk.LSTM(H, seed=1) if cell == "lstm" else rk.GRU(H, seed=1, reset_after=True)
    model = rk.Sequential([layer])
    model.build((None, T, F))
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "m.onnx")
        rk.save_onnx(model, path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    tmod = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(F, H, batch_first=True)
    tmod.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in to_torch_state(layer).items()})
    tmod.eval()
    tx = torch.from_numpy(x)

    def torch_fwd() -> Any:
        with torch.inference_mode():
            return tmod(tx)[0][:, -1]

    ref = sess.run(None, {name: x})[0].reshape(B, H)
    diffs = {"forward": layer.forward(x, rk.Ctx.inference()), "predict": model.predict(x),
             "torch": torch_fwd().numpy()}
    err = {k: float(np.max(np.abs(np.asarray(v) - ref))) for k, v in diffs.items()}
    t = _rounds({"forward": lambda: layer.forward(x, rk.Ctx.inference()), "predict": lambda: model.predict(x),
                 "ort": lambda: sess.run(None, {name: x}), "torch": torch_fwd}, repeats, budget)
    return {"t": t, "err": err}


def threads_ab(cell: str, shape: str, repeats: int, budget: float) -> dict[str, float]:
    """Seconds per call of rnnkit inference and training at one and two threads, interleaved."""
    import numpy as np

    import rnnkit as rk
    from rnnkit.kernels import _threads

    B, T, F, H = SHAPES[shape]
    layer = rk.LSTM(H, seed=1) if cell == "lstm" else rk.GRU(H, seed=1, reset_after=True)
    layer.build((None, T, F))
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    g = np.ones((B, H), np.float32)

    def train() -> None:
        ctx = rk.Ctx.training(0)
        layer.forward(x, ctx)
        layer.backward(g, ctx)

    def at(n: int, f: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            _threads.CORES = n
            return f()
        return run

    infer = lambda: layer.forward(x, rk.Ctx.inference())  # noqa: E731
    saved = _threads.CORES
    try:
        return _rounds({"infer1": at(1, infer), "infer2": at(2, infer), "train1": at(1, train),
                        "train2": at(2, train)}, repeats, budget)
    finally:
        _threads.CORES = saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--shapes", default="S1,S2,S3,S4")
    p.add_argument("--cells", default="lstm,gru")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--budget", type=float, default=0.05, help="seconds per function per round")
    p.add_argument("--threads-ab", action="store_true", help="rnnkit alone: one vs two threads")
    args = p.parse_args(argv)
    if args.threads_ab:
        os.environ["RNNKIT_KERNEL_THREADS"] = "2"
        print("rnnkit, milliseconds per call at 1 / 2 threads, interleaved; speed-up = t1 / t2")
        for cell in args.cells.split(","):
            for shape in args.shapes.split(","):
                t = {k: v * 1e3 for k, v in threads_ab(cell, shape, args.repeats, args.budget).items()}
                print(f"{cell:<5}{shape:<4} inference {t['infer1']:8.2f} / {t['infer2']:8.2f}  x"
                      f"{t['infer1'] / t['infer2']:.2f}   training {t['train1']:8.2f} / {t['train2']:8.2f}  x"
                      f"{t['train1'] / t['train2']:.2f}", flush=True)
        return 0
    os.environ["RNNKIT_KERNEL_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}; times in microseconds; ratio = rnnkit / peer")
    print(f"{'cell':<5}{'shape':<6}{'forward':>10}{'predict':>10}{'ort':>10}{'torch':>10}"
          f"{'fwd/ort':>9}{'pred/ort':>9}{'fwd/torch':>10}{'pred-fwd':>9}  max|diff| vs ort")
    for cell in args.cells.split(","):
        for shape in args.shapes.split(","):
            r = one(cell, shape, args.threads, args.repeats, args.budget)
            t = {k: v * 1e6 for k, v in r["t"].items()}
            print(f"{cell:<5}{shape:<6}{t['forward']:>10.1f}{t['predict']:>10.1f}{t['ort']:>10.1f}"
                  f"{t['torch']:>10.1f}{t['forward'] / t['ort']:>9.2f}{t['predict'] / t['ort']:>9.2f}"
                  f"{t['forward'] / t['torch']:>10.2f}{t['predict'] - t['forward']:>9.1f}  "
                  + " ".join(f"{k} {v:.1e}" for k, v in r["err"].items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
