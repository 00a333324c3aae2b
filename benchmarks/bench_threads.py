"""Do two threads pay? rnnkit at one and two row blocks beside PyTorch at one and two threads
(run by hand, never a test).

For each cell (LSTM, GRU with ``reset_after=True``) and shape (B, T, F, H) S2 (32,50,32,64),
S3 (64,100,128,256), S4 (128,200,256,512) it builds one layer with ``return_sequences=True`` and
the ``torch.nn`` module with the same weights, then times, INTERLEAVED in one process (the order
reversed every round), per call:

- ``infer``: ``layer.forward(x, Ctx.inference())`` / ``module(x)`` under ``torch.inference_mode``
- ``train``: ``layer.forward`` in a training ``Ctx`` then ``layer.backward`` of ones over the whole
  (B, T, H) output / ``module(x)[0].sum().backward()``

rnnkit's thread count is switched in place (``rnnkit.kernels._threads.CORES``), PyTorch's with
``torch.set_num_threads``. Each time is the minimum over the rounds (the least disturbed run on a
shared machine); the speed-ups are t(1) / t(2) and ``rk2/pt2`` is rnnkit's two-thread time over
PyTorch's (below 1: rnnkit faster). On a loaded machine (``uptime`` above the core count) the
wall-clock ratios mean little: say so with the numbers.

``--phases`` prints instead where one thread's CPU time goes (``time.thread_time`` at one thread,
which a loaded machine disturbs far less than wall time): the compiled row-block loops, the
batched reductions and the training projection (split into parts on two threads when they are
big enough), what runs serially in the kernels' glue (Python, allocation, packing) and in the
layer around it (the time-major copies of the input, the output and dL/dx), and the ceiling
Amdahl's law puts on two threads: ``1 / (serial + parallel / 2)``.

Usage::

    python benchmarks/bench_threads.py                           # S2-S4, LSTM and GRU
    python benchmarks/bench_threads.py --shapes S3 --cells lstm --rounds 9
    python benchmarks/bench_threads.py --phases --shapes S2,S3,S4
    python benchmarks/bench_threads.py --no-torch                # rnnkit alone
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("RNNKIT_KERNEL_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402
from bench_peers import WARM_S, warm  # noqa: E402  (the warm-up before each timed round)

import rnnkit as rk  # noqa: E402
from rnnkit.kernels import _driver, _threads  # noqa: E402

SHAPES = {"S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256), "S4": (128, 200, 256, 512)}


def _layer(cell: str, shape: str) -> tuple[Any, np.ndarray]:
    B, T, F, H = SHAPES[shape]
    layer = (rk.LSTM(H, seed=1, return_sequences=True) if cell == "lstm"
             else rk.GRU(H, seed=1, reset_after=True, return_sequences=True))
    layer.build((None, T, F))
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    return layer, x


def _rk_fns(layer: Any, x: np.ndarray) -> tuple[Callable[[], object], Callable[[], object]]:
    g = np.ones((x.shape[0], x.shape[1], layer.output_size), np.float32)

    def infer() -> object:
        return layer.forward(x, rk.Ctx.inference())

    def train() -> object:
        ctx = rk.Ctx.training(0)
        layer.forward(x, ctx)
        return layer.backward(g, ctx)

    return infer, train


def _torch_fns(layer: Any, x: np.ndarray, cell: str) -> tuple[Callable[[], object], Callable[[], object]]:
    import torch

    from rnnkit.io._interop import to_torch_state
    H = layer.output_size
    mod = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(x.shape[2], H, batch_first=True)
    mod.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in to_torch_state(layer).items()})
    xt = torch.from_numpy(x)
    ref = layer.forward(x, rk.Ctx.inference())
    with torch.inference_mode():
        err = float(np.max(np.abs(mod(xt)[0].numpy() - ref)))
    if err > 1e-3:
        raise SystemExit(f"{cell}: PyTorch's output differs from rnnkit's by {err:.2e}")

    def infer() -> object:
        with torch.inference_mode():
            return mod(xt)

    def train() -> object:
        mod.zero_grad(set_to_none=True)
        out = mod(xt)[0]
        out.sum().backward()
        return out

    return infer, train


def _at(n: int, f: Callable[[], object], torch_threads: bool) -> Callable[[], object]:
    def run() -> object:
        if torch_threads:
            import torch
            torch.set_num_threads(n)
        else:
            _threads.CORES = n
        return f()
    return run


def _interleaved(fns: dict[str, Callable[[], object]], rounds: int, budget: float) -> dict[str, float]:
    """Seconds per call of each function: the minimum over ``rounds`` interleaved rounds, each
    about ``budget`` seconds of calls."""
    inner = {}
    for k, f in fns.items():
        f()
        t0 = time.perf_counter()
        f()
        inner[k] = max(1, int(budget / max(time.perf_counter() - t0, 1e-7)))
    got: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            f, n = fns[k], inner[k]
            warm(f, WARM_S)                       # (the previous function's threads go idle)
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            got[k].append((time.perf_counter() - t0) / n)
    return {k: min(v) for k, v in got.items()}


def ab(cells: list[str], shapes: list[str], rounds: int, budget: float, with_torch: bool) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; ms per call, min of "
          f"{rounds} interleaved rounds; x = t(1 thread) / t(2 threads)")
    saved = _threads.CORES
    try:
        for cell in cells:
            for shape in shapes:
                layer, x = _layer(cell, shape)
                rk_i, rk_t = _rk_fns(layer, x)
                for mode, rkf, pti in (("infer", rk_i, 0), ("train", rk_t, 1)):
                    fns = {"rk1": _at(1, rkf, False), "rk2": _at(2, rkf, False)}
                    if with_torch:
                        ptf = _torch_fns(layer, x, cell)[pti]
                        fns |= {"pt1": _at(1, ptf, True), "pt2": _at(2, ptf, True)}
                    t = {k: v * 1e3 for k, v in _interleaved(fns, rounds, budget).items()}
                    line = (f"{cell:<5}{shape:<4}{mode:<6} rnnkit {t['rk1']:8.2f} / {t['rk2']:8.2f}  "
                            f"x{t['rk1'] / t['rk2']:.2f}")
                    if with_torch:
                        line += (f"   torch {t['pt1']:8.2f} / {t['pt2']:8.2f}  x{t['pt1'] / t['pt2']:.2f}"
                                 f"   rk2/pt2 {t['rk2'] / t['pt2']:.2f}")
                    print(line, flush=True)
    finally:
        _threads.CORES = saved


class _Phases:
    """CPU time (``time.thread_time``) of the kernels' parts during calls on this thread: with
    ``split`` the parts that two threads would run at once run one after the other here, each
    timed, so that the two-thread critical path (serial time + the longest part of each split)
    can be estimated without a second thread disturbing the first."""

    def __init__(self, split: bool) -> None:
        self.split = split
        self.t = {"parallel": 0.0, "longest": 0.0, "driver": 0.0, "copies": 0.0, "syncs": 0.0}
        self._saved: dict[str, Any] = {}
        self._in_driver = False

    def _run(self, n: int, job: Callable[[int, int], None], row_work: int = 0) -> None:
        self._parts(_threads.blocks(n, row_work) if self.split else [(0, n)], job)

    def _phases(self, parts: list[tuple[int, int]], first: Callable[[int, int], None],
                then: Callable[[int, int], None]) -> None:
        self._parts(parts, first)           # the barrier, then the return: two waits
        self._parts(parts, then)

    def _split(self, parts: list[tuple[int, int]], job: Callable[[int, int], None]) -> None:
        if self._in_driver:                 # the kernels' parts (the reductions' halves)
            self._parts(parts, job)
            return
        t0 = time.thread_time()             # the layer's layout copies
        self._parts(parts, job)
        self.t["copies"] += time.thread_time() - t0

    def _parts(self, parts: list[tuple[int, int]], job: Callable[[int, int], None]) -> None:
        times = []
        self.t["syncs"] += len(parts) > 1    # every split waits once for its parts
        for lo, hi in parts:
            t0 = time.thread_time()
            job(lo, hi)
            times.append(time.thread_time() - t0)
        self.t["parallel"] += sum(times)
        self.t["longest"] += max(times)

    def install(self) -> None:
        for name in ("run_blocks", "walk", "walk_back"):
            self._saved[name] = getattr(_driver, name)
        self._saved_split, self._saved_phases = _threads.run_split, _threads.run_phases
        _driver.run_blocks = self._run
        _threads.run_split, _threads.run_phases = self._split, self._phases

        def driver(f: Callable[..., Any]) -> Callable[..., Any]:
            def run(*a: Any, **k: Any) -> Any:
                t0 = time.thread_time()
                self._in_driver = True
                try:
                    return f(*a, **k)
                finally:
                    self._in_driver = False
                    self.t["driver"] += time.thread_time() - t0
            return run

        _driver.walk, _driver.walk_back = driver(self._saved["walk"]), driver(self._saved["walk_back"])

    def remove(self) -> None:
        for name, f in self._saved.items():
            setattr(_driver, name, f)
        _threads.run_split, _threads.run_phases = self._saved_split, self._saved_phases


def _measure(f: Callable[[], object], calls: int, split: bool) -> tuple[float, dict[str, float]]:
    _threads.CORES = 2 if split else 1
    f()
    ph = _Phases(split)
    ph.install()
    try:
        t0 = time.thread_time()
        for _ in range(calls):
            f()
        total = (time.thread_time() - t0) / calls
    finally:
        ph.remove()
    return total, {k: v / calls for k, v in ph.t.items()}


def phases(cells: list[str], shapes: list[str], calls: int, rounds: int) -> None:
    print(f"CPU time per call on one thread (time.thread_time, ms), mean over {calls} calls, the "
          f"least of {rounds} interleaved rounds. "
          "1 thr: the whole call at one thread. The rest: the call with its two-thread parts (row "
          "blocks, split reductions and projection) run one after the other: total, the parts "
          "(sum), the longer part of each split, the serial glue of the kernels, the serial layer "
          "around them; crit = serial + longer parts; est = 1 thr / crit; split = total / crit "
          "(the same without the cost of splitting); amdahl = 1 thr / (serial + parts / 2); "
          "waits: the synchronisation points of one call at two threads (every split's return "
          "and every barrier)")
    print(f"{'':<16}{'1 thr':>9} |{'total':>9}{'parts':>9}{'longer':>9}{'glue':>8}{'layer':>8}"
          f"{'serial%':>8}{'crit':>9}{'est':>6}{'split':>6}{'amdahl':>7}{'waits':>6}")
    saved = _threads.CORES
    try:
        for cell in cells:
            for shape in shapes:
                layer, x = _layer(cell, shape)
                for mode, f in zip(("infer", "train"), _rk_fns(layer, x), strict=True):
                    tot1, tot, t = float("inf"), float("inf"), {}
                    for _ in range(rounds):      # interleaved; the least disturbed of each
                        tot1 = min(tot1, _measure(f, calls, False)[0])
                        got = _measure(f, calls, True)
                        if got[0] < tot:
                            tot, t = got
                    serial = tot - t["parallel"]
                    crit = serial + t["longest"]
                    print(f"{cell:<5}{shape:<4}{mode:<7}{tot1 * 1e3:9.3f} |{tot * 1e3:9.3f}"
                          f"{t['parallel'] * 1e3:9.3f}{t['longest'] * 1e3:9.3f}"
                          f"{(t['driver'] - t['parallel'] + t['copies']) * 1e3:8.3f}"
                          f"{(tot - t['driver'] - t['copies']) * 1e3:8.3f}"
                          f"{100 * serial / tot:7.1f}%{crit * 1e3:9.3f}{tot1 / crit:6.2f}{tot / crit:6.2f}"
                          f"{tot1 / (serial + t['parallel'] / 2):7.2f}{t['syncs']:6.0f}", flush=True)
    finally:
        _threads.CORES = saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--shapes", default="S2,S3,S4")
    p.add_argument("--cells", default="lstm,gru")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--budget", type=float, default=0.2, help="seconds of calls per function per round")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--phases", action="store_true", help="one thread's CPU time per phase instead")
    p.add_argument("--calls", type=int, default=10, help="calls per phase measurement")
    args = p.parse_args(argv)
    cells, shapes = args.cells.split(","), args.shapes.split(",")
    if args.phases:
        phases(cells, shapes, args.calls, args.rounds)
    else:
        ab(cells, shapes, args.rounds, args.budget, not args.no_torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
