"""Where the time of one inference call goes (run by hand, never a test).

At S1 (B, T, F, H) = (1, 100, 16, 32) and S2 (32, 50, 32, 64) (``--shapes``), float32, one
thread (``RNNKIT_KERNEL_THREADS=1`` is set here before rnnkit is imported), for LSTM and GRU with
``return_sequences=True``, the table splits ``layer.forward(x, Ctx.inference())`` into:

- **python: layer** the layer's own Python (argument checks, the time-major view, the
  options lookup): ``layer.forward`` minus the driver's prepared call (``_driver.infer``);
- **driver: plan** finding the pass's plan and packed weights (kept per cell while the
  weights are the same arrays); **packing, uncached** what laying out W and U as panels costs
  when done again (every pass, before the plans were kept);
- **driver: rest** the driver's Python around the compiled call (the results' allocation, the
  scratch, the call's arguments): ``infer`` minus the plan minus the compiled call;
- **compiled call** the compiled inference loop's entry point (what ``infer`` calls) with
  prepared arguments, split into its fixed cost (the same call at T=1, minus one step, with
  the arguments' conversion) and its steps;
- **projection** ``x @ W + b`` of every step, timed alone, as the loop makes it: a chunk of
  steps at a time (one compiled call each) into a buffer of the driver's chunk size (the
  compiled call too runs on that buffer: a buffer of all T steps, 1.6 MB at S2, falls out of
  L2 and added its traffic to the steps);
- **products** the T per-step ``h @ U`` products alone (a compiled loop of ``rgemm1``, the
  one-row product the steps use at B=1; ``rgemm`` for more rows);
- **gates** the rest of the steps: steps minus projection minus products.

The last row, **FMA bound**, is the multiply-adds of the call (``T*B*(F+H)*G*H``) at the
rate of the packed product's micro-kernel on operands that stay in L1 (a (96 x 64) @ (64 x 256)
product, measured in the same process: the machine's FMA throughput as rnnkit's kernels reach
it on the ISA they were compiled for).

``--isa avx2`` re-runs the script in a child process under ``tools/avx2.sh`` (rnnkit's kernels,
numpy and OpenBLAS restricted to AVX2 on an AVX-512 machine); ``--isa both`` prints the native
table, then the AVX2 one.

Medians of interleaved samples; on a shared machine the numbers move by ~10 % (``--clock cpu``
counts this thread's CPU time instead of the wall clock: on a loaded machine the time the
thread waits for a core is left out).

Usage::

    python benchmarks/bench_phases.py [--shapes S1,S2] [--repeats 9] [--inner 2000] [--clock wall|cpu]
    python benchmarks/bench_phases.py --isa both          # native, then the AVX2 path
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")

import numba  # noqa: E402
import numpy as np  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit import kernels  # noqa: E402
from rnnkit.kernels import _driver as drv  # noqa: E402
from rnnkit.kernels._gemm import project  # noqa: E402
from rnnkit.kernels._isa import has_avx512  # noqa: E402
from rnnkit.kernels._packed import rgemm, rgemm1  # noqa: E402

#: the plan class (in the driver in older versions of the package: the script times either)
_Plan = getattr(drv, "_Plan", None) or importlib.import_module("rnnkit.kernels._plans")._Plan
#: (B, T, F, H) of the shapes ``--shapes`` names
SHAPES = {"S1": (1, 100, 16, 32), "S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256)}
GATES = {"LSTM": 4, "GRU": 3}
AVX2_SH = Path(__file__).resolve().parent.parent / "tools" / "avx2.sh"

#: the clock of every sample (``--clock``): wall time, or this thread's CPU time (a loaded machine)
_clock = time.perf_counter
#: multiply-adds per second of the micro-kernel (:func:`fma_rate`), measured in :func:`main`
RATE = 1.0


def chunked_projection(project: Callable[..., object], x2: np.ndarray, B: int, PW: object, b0: object,
                       xp: np.ndarray, chunk: int) -> Callable[[], None]:
    """The input projections as the inference loop makes them: ``chunk`` steps of ``B`` rows of
    ``x2`` (time-major, flattened) at a time into one L2-sized buffer ``xp``."""
    T = x2.shape[0] // B

    def projection() -> None:
        for t0 in range(0, T, chunk):
            n = min(chunk, T - t0)
            project(x2[t0 * B:(t0 + n) * B], PW, b0, xp[:n * B])
    return projection


@numba.njit(cache=False)
def _products(h: Any, PU: Any, out: Any, T: int) -> None:
    for _ in range(T):
        if h.shape[0] == 1:
            rgemm1(h, PU, out, 1.0)
        else:
            rgemm(h, PU, out, 1.0)


def _time(fns: dict[str, Callable[[], object]], repeats: int, inner: int) -> dict[str, float]:
    """Microseconds per call of each function: medians over ``repeats`` interleaved rounds."""
    got: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        names = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for k in names:
            fn = fns[k]
            t0 = _clock()
            for _ in range(inner):
                fn()
            got[k].append((_clock() - t0) / inner * 1e6)
    return {k: statistics.median(v) for k, v in got.items()}


def _compiled_call(layer: Any, x_tm: np.ndarray) -> Callable[[], object]:
    """The compiled inference loop of ``layer`` on ``x_tm`` with every argument prepared."""
    cell, w = layer.cell, layer._weights
    step = kernels.find(cell)
    T, B, _ = x_tm.shape
    dt = x_tm.dtype
    pl = _Plan(cell, step, w, dt)
    PW, PU, PWp = pl.packed("w"), pl.packed_u(), pl.packed("p")
    ring = tuple(np.zeros((2, B, n), dt) for n in cell.state_sizes())
    pk1 = (*(np.empty((1, B, wd), dt) for wd in pl.park_sizes.values()), np.empty((1, B, 0), dt))
    seq = np.empty((B, T, cell.state_sizes()[0]), dt)
    buf = drv._chunk_buf(pl, B, T, dt)          # (the driver's chunk: L2-sized, not T steps)
    mk = drv._mask_arg(None, T, B)
    args = (pl.handle, x_tm, PW, pl.b0, ring, pk1, seq, True, buf, mk, False, PU, pl.srcs, pl.cols, pl.apart,
            pl.b1, pl.proj, PWp, pl.own, pl.opts, 0, B)
    pl.infer(*args)
    ov = pl.infer.overloads.get(tuple(numba.typeof(a) for a in args))
    fn = pl.infer if ov is None else ov.entry_point   # (the entry point, as the prepared call)
    return lambda: fn(*args)


def fma_rate() -> float:
    """Multiply-adds per second of the packed product on L1-resident operands (see the module)."""
    a = np.random.default_rng(1).standard_normal((96, 64)).astype(np.float32)
    P = drv.pack(np.random.default_rng(2).standard_normal((64, 256)).astype(np.float32))
    c = np.zeros((96, 256), np.float32)
    _products(a, P, c, 1)
    n = 2000
    best = min(_timed(lambda: _products(a, P, c, n)) for _ in range(7))
    return 96 * 64 * 256 * n / best


def _timed(fn: Callable[[], object]) -> float:
    t0 = _clock()
    fn()
    return _clock() - t0


def phases(kind: str, B: int, T: int, F: int, H: int, repeats: int, inner: int) -> dict[str, float]:
    layer = getattr(rk, kind)(H, return_sequences=True, seed=1)
    layer.build((None, T, F))
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    x_tm = np.ascontiguousarray(x.transpose(1, 0, 2))
    cell, w = layer.cell, layer._weights
    step = kernels.find(cell)
    assert step is not None, "the fast kernels are not available"
    opts = step.options(cell)
    pl = _Plan(cell, step, w, x_tm.dtype)
    PW, PU = drv.pack(pl.W), pl.packed_u()

    def plan() -> object:
        got = drv._plan(cell, step, w, x_tm.dtype)
        return got.packed("w"), got.packed_u(), got.packed("p")

    chunk = drv._chunk(T, B, pl.N * 4)
    xp = np.empty((chunk * B, pl.N), np.float32)
    x2 = x_tm.reshape(T * B, F)

    projection = chunked_projection(project, x2, B, PW, pl.b0, xp, chunk)

    h = np.zeros((B, PU[0].shape[1]), np.float32)
    hu = np.zeros((B, pl.N), np.float32)
    call_T, call_1 = _compiled_call(layer, x_tm), _compiled_call(layer, x_tm[:1])
    fns: dict[str, Callable[[], object]] = {
        "forward": lambda: layer.forward(x, rk.Ctx.inference()),
        "walk": (lambda: drv.infer(cell, step, w, x_tm, True, opts)) if hasattr(drv, "infer") else
                (lambda: drv.walk(cell, step, w, x_tm, None, False, True)),
        "plan": plan,
        "packing": lambda: (drv.pack(pl.W), drv.pack(pl.U)),
        "call": call_T, "call1": call_1,
        "projection": projection,
        "products": lambda: _products(h, PU[0], hu, T),
        "products0": lambda: _products(h, PU[0], hu, 0),
    }
    for f in fns.values():
        f()
    t = _time(fns, repeats, inner)
    step1 = (t["call"] - t["call1"]) / (T - 1)
    steps = step1 * T
    fixed = t["call"] - steps
    prod = t["products"] - t["products0"]
    return {
        "python: layer": t["forward"] - t["walk"],
        "driver: plan": t["plan"],
        "driver: rest": t["walk"] - t["plan"] - t["call"],
        "packing, uncached": t["packing"],
        "compiled: fixed": fixed,
        "compiled: steps": steps,
        "  projection": t["projection"],
        "  products": prod,
        "  gates, loop": steps - t["projection"] - prod,
        "layer.forward": t["forward"],
        "FMA bound": T * B * (F + H) * GATES[kind] * H / RATE * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--inner", type=int, default=2000)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: this thread's CPU time (time.thread_time), for a loaded machine")
    p.add_argument("--shapes", default="S1,S2", help=f"of {', '.join(SHAPES)}")
    p.add_argument("--isa", choices=("native", "avx2", "both"), default="native",
                   help="avx2: a child process under tools/avx2.sh; both: native, then avx2")
    args = p.parse_args(argv)
    if args.isa != "native" and os.environ.get("RNNKIT_TEST_ISA") != "avx2":
        rest = [a for a in (argv if argv is not None else sys.argv[1:])]
        i = rest.index("--isa") if "--isa" in rest else -1
        rest = rest[:i] + rest[i + 2:] if i >= 0 else [a for a in rest if not a.startswith("--isa=")]
        if args.isa == "both":
            main(rest)
        env = {**os.environ, "PYTHON": sys.executable}
        return subprocess.run([str(AVX2_SH), sys.executable, __file__, *rest], env=env).returncode
    global _clock, RATE
    _clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    RATE = fma_rate()
    isa = "AVX-512" if has_avx512() else "AVX2"
    for sname in args.shapes.split(","):
        B, T, F, H = SHAPES[sname]
        rows = {k: phases(k, B, T, F, H, args.repeats, max(1, args.inner * 100 // (B * T)))
                for k in ("LSTM", "GRU")}
        print(f"{sname} {(B, T, F, H)} float32, one thread, {isa} kernels "
              f"(micro-kernel {RATE * 2e-9:.0f} GFLOP/s), microseconds per call ({args.clock} clock), "
              f"load {os.getloadavg()[0]:.1f}")
        print(f"{'phase':<20}" + "".join(f"{k:>10}" for k in rows))
        for name in next(iter(rows.values())):
            print(f"{name:<20}" + "".join(f"{r[name]:>10.1f}" for r in rows.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
