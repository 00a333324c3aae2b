"""A stack of two LSTM cells, ``rk.RNN([rk.LSTMCell(64), rk.LSTMCell(64)])``, against the same
cells as two compiled layers (``LSTM(64, return_sequences=True)`` then ``LSTM(64)``) and PyTorch's
``nn.LSTM(32, 64, num_layers=2)``, at B=32, T=50, F=32, float32, and against the stack's step
form (the reference walk of the stack, which it ran before its whole-sequence form: a subclass
that overrides ``step`` has no whole-sequence form, :func:`rnnkit.recurrent._walker.has_sequence_form`):

- one training step: forward and backward of ``L = sum(y * G)`` (the last step's output), with
  the input gradient;
- inference: the last step's output (``predict`` / ``torch.no_grad``).

CPU time of this process (``time.process_time``), the median of the repeats, the contenders
interleaved so a busy machine slows all alike; the load average is printed with the figures.
Run: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_stacked.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Mapping

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rnnkit as rk  # noqa: E402

B, T, F, H = 32, 50, 32, 64


class _StepFormStack(rk.StackedRNNCells):
    """The same stack walked by its step form only (its ``step`` overridden, unchanged)."""

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: tuple[np.ndarray, ...],
             park: dict[str, np.ndarray] | None) -> tuple[np.ndarray, ...]:
        return super().step(w, inp, prev, park)


def _rnnkit_pair(stacked: bool, step_form: bool = False) -> tuple[Callable[[], None], Callable[[], None]]:
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    G = np.random.default_rng(1).standard_normal((B, H)).astype(np.float32)
    if stacked:
        cells = [rk.LSTMCell(H), rk.LSTMCell(H)]
        model = rk.Sequential([rk.RNN(_StepFormStack(cells) if step_form else cells, seed=1)])
    else:
        model = rk.Sequential([rk.LSTM(H, return_sequences=True, seed=1), rk.LSTM(H, seed=2)])
    model.build(rk.Shape((None, T, F)))
    layers = model.layers

    def train() -> None:
        ctx = rk.Ctx.training(seed=0)
        y = x
        for layer in layers:
            y = layer.forward(y, ctx)
        g = G
        for layer in reversed(layers):
            g = layer.backward(g, ctx)

    def infer() -> None:
        model.predict(x)

    return train, infer


def _torch_pair() -> tuple[Callable[[], None], Callable[[], None]]:
    torch.set_num_threads(1)
    net = torch.nn.LSTM(F, H, num_layers=2, batch_first=True)
    x = torch.tensor(np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32),
                     requires_grad=True)
    G = torch.tensor(np.random.default_rng(1).standard_normal((B, H)).astype(np.float32))

    def train() -> None:
        net.zero_grad()
        x.grad = None
        y, _ = net(x)
        (y[:, -1] * G).sum().backward()

    def infer() -> None:
        with torch.no_grad():
            net(x)

    return train, infer


def _cpu(fn: Callable[[], None]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args()
    runs = {"stacked cells": _rnnkit_pair(True), "stacked, step form": _rnnkit_pair(True, True),
            "two LSTM layers": _rnnkit_pair(False),
            "torch 2-layer LSTM": _torch_pair()}
    for tr, inf in runs.values():     # compile and warm
        for _ in range(3):
            tr()
            inf()
    times: dict[str, dict[str, list[float]]] = {n: {"train": [], "infer": []} for n in runs}
    for _ in range(args.repeats):
        for n, (tr, inf) in runs.items():
            times[n]["train"].append(_cpu(tr))
            times[n]["infer"].append(_cpu(inf))
    print(f"B={B} T={T} F={F} H={H} float32, one thread; load average {os.getloadavg()}")
    base = {p: statistics.median(times["two LSTM layers"][p]) for p in ("train", "infer")}
    for n, d in times.items():
        cells = []
        for p in ("train", "infer"):
            m = statistics.median(d[p])
            cells.append(f"{p} {m * 1e3:7.2f} ms ({m / base[p]:.2f}x two layers)")
        print(f"{n:20s} " + "   ".join(cells))


if __name__ == "__main__":
    main()
