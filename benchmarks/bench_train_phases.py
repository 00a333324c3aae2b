"""Where one training step's time goes, by phase, at one thread (run by hand, never a test).

A training step as ``bench.py --modes train`` times it: ``layer.forward`` in a training
``Ctx`` (``return_sequences=True``), then ``layer.backward`` of ones over the whole output, for
LSTM and GRU (``reset_after=True``) at S2 (32, 50, 32, 64) and S3 (64, 100, 128, 256). Each
phase is this thread's CPU time (``time.thread_time``: a loaded machine disturbs it far less
than wall time), the median over ``--calls`` steps:

- ``proj``: the forward input projection ``x @ W + b`` of every step (one product over the
  ``T*B`` rows, timed alone on the same arrays),
- ``rec``: the rest of the compiled forward walk (the per-step products ``h @ U`` and the gates),
- ``back``: the compiled backward walk (the gates' derivatives and ``d @ U^T`` per step),
- ``wgrad``: the batched reductions (``dW``, ``dU``, ``db`` and ``dx``, all steps at once),
- ``pack``: laying out W, U and U^T as panels, which a step pays once per weight change (an
  optimizer step): timed alone (a step of this script keeps its weights, so its plan and
  panels are kept and ``full`` does not include it),
- ``rest``: ``full`` minus the compiled parts: the layers' Python, allocation and the layout
  copies (batch-major <-> time-major of the input, the output and dL/dx).

With ``--torch``, two more columns: ``torch``, the same training step of ``torch.nn.LSTM`` /
``torch.nn.GRU`` with the same weights (``bench.make_pair``; forward, ``out.sum().backward()``,
the input's gradient included) at ``torch.set_num_threads(1)``, and ``ratio`` = rnnkit's step /
torch's. Both are this thread's CPU time, measured in blocks of consecutive steps, the two sides'
blocks alternating (``--blocks``, the order swapped every block), medians of the blocks.

Usage::

    RNNKIT_KERNEL_THREADS=1 python benchmarks/bench_train_phases.py
    RNNKIT_KERNEL_THREADS=1 tools/avx2.sh python benchmarks/bench_train_phases.py   # the AVX2 path
    RNNKIT_KERNEL_THREADS=1 python benchmarks/bench_train_phases.py --torch --cells lstm
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit import kernels  # noqa: E402
from rnnkit.kernels import _driver, _gemm  # noqa: E402
from rnnkit.kernels._packed import pack  # noqa: E402

SHAPES = {"S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256)}


def _layer(cell: str, shape: str) -> tuple[Any, np.ndarray]:
    B, T, F, H = SHAPES[shape]
    layer = (rk.LSTM(H, seed=1, return_sequences=True) if cell == "lstm"
             else rk.GRU(H, seed=1, reset_after=True, return_sequences=True))
    layer.build((None, T, F))
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    return layer, x


def _timed(f: Callable[..., Any], acc: list[float]) -> Callable[..., Any]:
    def g(*a: Any, **k: Any) -> Any:
        t = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            acc.append(time.thread_time() - t)
    return g


def phases(cell: str, shape: str, calls: int) -> dict[str, float]:
    layer, x = _layer(cell, shape)
    B, T, F, H = SHAPES[shape]

    def step() -> None:
        ctx = rk.Ctx.training()
        y = layer.forward(x, ctx)
        layer.backward(np.ones_like(y), ctx)

    for _ in range(3):
        step()
    walks: list[float] = []
    reds: list[float] = []
    real_run, real_reduce = _driver.run_blocks, _driver.reduce
    full, fwd, back, red = [], [], [], []
    _driver.run_blocks, _driver.reduce = _timed(real_run, walks), _timed(real_reduce, reds)
    try:
        for _ in range(calls):
            walks.clear()
            reds.clear()
            t = time.thread_time()
            step()
            full.append(time.thread_time() - t)
            fwd.append(walks[0])
            back.append(walks[1])
            red.append(sum(reds))
    finally:
        _driver.run_blocks, _driver.reduce = real_run, real_reduce
    step_ = kernels.find(layer.cell)
    assert step_ is not None, "the compiled path (numba, kernels mode fast)"
    w = {n: layer.weight(n) for n in layer.weight_names}
    pl = _driver._plan(layer.cell, step_, w, np.dtype(np.float32))
    PW = pl.packed("w")
    x2 = np.ascontiguousarray(x.transpose(1, 0, 2)).reshape(T * B, F)
    out = np.empty((T * B, pl.N), np.float32)
    proj, packs = [], []
    for _ in range(calls):
        t = time.thread_time()
        _gemm.project(x2, PW, pl.b0, out)
        proj.append(time.thread_time() - t)
        t = time.thread_time()
        pack(pl.W)
        pack(pl.U)
        pack(pl.U, trans=True)
        packs.append(time.thread_time() - t)
    m = {k: statistics.median(v) * 1e3 for k, v in
         (("full", full), ("fwd", fwd), ("back", back), ("wgrad", red), ("proj", proj), ("pack", packs))}
    m["rec"] = m["fwd"] - m["proj"]
    m["rest"] = m["full"] - m["fwd"] - m["back"] - m["wgrad"]
    return m


def against_torch(cell: str, shape: str, blocks: int) -> tuple[float, float]:
    """(rnnkit's step, torch's step) in ms of this thread's CPU, the medians of ``blocks``
    alternating blocks of consecutive steps per side (the same weights and inputs)."""
    import torch
    from bench import make_pair

    torch.set_num_threads(1)
    B, T, F, H = SHAPES[shape]
    layer, mod = make_pair(cell, SHAPES[shape])
    x = np.random.default_rng(7).standard_normal((B, T, F)).astype(np.float32)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)

    def ours() -> None:
        ctx = rk.Ctx.training()
        y = layer.forward(x, ctx)
        layer.backward(np.ones_like(y), ctx)

    def theirs() -> None:
        mod.zero_grad(set_to_none=True)
        xt.grad = None
        mod(xt)[0].sum().backward()

    ours()
    t = time.thread_time()
    ours()
    n = max(1, int(0.08 / max(time.thread_time() - t, 1e-6)))     # steps per block: ~80 ms of CPU
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(blocks):
        order = ((ours, times[0]), (theirs, times[1]))
        for fn, acc in (order if r % 2 == 0 else order[::-1]):
            fn()                                          # (untimed: the caches refilled)
            t = time.thread_time()
            for _ in range(n):
                fn()
            acc.append((time.thread_time() - t) / n)
    return statistics.median(times[0]) * 1e3, statistics.median(times[1]) * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="S2,S3")
    p.add_argument("--cells", default="lstm,gru")
    p.add_argument("--calls", type=int, default=15)
    p.add_argument("--torch", action="store_true", help="also time PyTorch's step (interleaved blocks)")
    p.add_argument("--blocks", type=int, default=9, help="--torch: blocks per side")
    args = p.parse_args()
    from rnnkit.kernels._isa import has_avx512
    print(f"AVX-512 path: {has_avx512()}; load average {os.getloadavg()[0]:.1f}; "
          "ms of one thread's CPU per step")
    cols = ("full", "proj", "rec", "back", "wgrad", "rest", "pack")
    cols += ("torch", "ratio") if args.torch else ()
    print("| cell | shape | " + " | ".join(cols) + " |")
    print("|---|---|" + "---:|" * len(cols))
    for cell in args.cells.split(","):
        for shape in args.shapes.split(","):
            m = phases(cell, shape, args.calls)
            if args.torch:
                ours, m["torch"] = against_torch(cell, shape, args.blocks)
                m["ratio"] = ours / m["torch"]
            print(f"| {cell} | {shape} | " + " | ".join(f"{m[c]:.2f}" for c in cols) + " |", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
