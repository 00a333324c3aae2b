"""What ``model.predict`` / ``model(x)`` cost over the layers' own passes (run by hand, never a test).

At S1 (B, T, F, H) = (1, 100, 16, 32), float32, for ``Sequential([LSTM(32)])``,
``Sequential([LSTM(32), Dense(1)])`` and the same with ``GRU(32)``:

- **bare**: the layers' own ``forward`` chained, each in a fresh ``Ctx.inference()`` (what a user
  calling the layers by hand pays, their input checks included);
- **predict** and **call**: ``model.predict(x)`` and ``model(x)``;
- timed in CPU time (``time.process_time``, so other processes' load counts less than in wall
  time), interleaved in one process (A, B, C, then C, B, A, ...), each sample the mean of
  ``--inner`` calls, medians over ``--repeats`` rounds; ``over`` = predict - bare in microseconds,
  ``ratio`` = predict / bare;
- **mach us**: the model machinery alone -- predict minus the bare chain with every layer's
  ``forward`` replaced by a stub that returns the layer's precomputed output (so the kernels'
  run-to-run swing drops out; the layers' own input checks drop out too), fastest of
  ``--repeats`` samples in CPU time;
- **calls**: Python function calls whose code lives in the rnnkit package, per call (``cProfile``),
  for predict and for the bare chain.

The kernels run on one thread unless ``RNNKIT_KERNEL_THREADS`` is set. On a shared machine the
microseconds drift between runs; the interleaved differences within one run are what to read.

Usage::

    RNNKIT_KERNEL_THREADS=1 python benchmarks/bench_predict.py
    RNNKIT_KERNEL_THREADS=1 python benchmarks/bench_predict.py --repeats 41 --inner 300
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import rnnkit as rk

PKG = str(Path(rk.__file__).resolve().parent)
S1 = (1, 100, 16, 32)


def models() -> dict[str, rk.Sequential]:
    """The four models of the benchmark, unbuilt."""
    H = S1[3]
    return {"LSTM": rk.Sequential([rk.LSTM(H, seed=1)]),
            "LSTM+Dense": rk.Sequential([rk.LSTM(H, seed=1), rk.Dense(1, seed=2)]),
            "GRU": rk.Sequential([rk.GRU(H, seed=1)]),
            "GRU+Dense": rk.Sequential([rk.GRU(H, seed=1), rk.Dense(1, seed=2)])}


def bare_chain(m: rk.Sequential) -> Callable[[np.ndarray], np.ndarray]:
    """The model's layers' own ``forward`` passes one after another, each in its own Ctx."""
    layers = list(m.layers)
    inference = rk.Ctx.inference

    def run(x: np.ndarray) -> np.ndarray:
        h = x
        for layer in layers:
            h = layer.forward(h, inference())
        return h

    return run


def rnnkit_calls(fn: Callable[[], object], n: int = 100) -> float:
    """rnnkit Python calls per call of ``fn``."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    st = pstats.Stats(prof)
    total = sum(nc for (fn_, _, _), (_, nc, _, _, _) in st.stats.items()  # type: ignore[attr-defined]
                if fn_.startswith(PKG))
    return total / n


def sample(fn: Callable[[], object], inner: int) -> float:
    t0 = time.process_time()
    for _ in range(inner):
        fn()
    return (time.process_time() - t0) / inner


def interleaved(fns: dict[str, Callable[[], object]], repeats: int, inner: int) -> dict[str, float]:
    """Median seconds per call of each of ``fns``, sampled in alternating order."""
    got: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for r in range(repeats):
        for k in (order if r % 2 == 0 else order[::-1]):
            got[k].append(sample(fns[k], inner))
    return {k: statistics.median(v) for k, v in got.items()}


def machinery(m: rk.Sequential, x: np.ndarray, repeats: int, inner: int) -> float:
    """Seconds per call that ``m.predict(x)`` spends outside its layers' ``forward`` (each
    layer's forward stubbed on the instance for the measurement, then restored)."""
    h = x
    for layer in m.layers:
        out = layer.forward(h, rk.Ctx.inference())
        layer.forward = (lambda o: lambda a, ctx: o)(out)  # type: ignore[method-assign]
        h = out
    try:
        bare = bare_chain(m)
        pred, chain = [], []
        for _ in range(repeats):
            pred.append(sample(lambda: m.predict(x), inner))
            chain.append(sample(lambda: bare(x), inner))
        return min(pred) - min(chain)
    finally:
        for layer in m.layers:
            del layer.forward


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--inner", type=int, default=200)
    args = p.parse_args(argv)
    B, T, F, _ = S1
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    print(f"S1 (B, T, F, H) = {S1}, float32, RNNKIT_KERNEL_THREADS="
          f"{os.environ.get('RNNKIT_KERNEL_THREADS', '(unset)')}")
    print(f"{'model':<11} {'bare us':>8} {'predict':>8} {'call':>8} {'over us':>8} {'ratio':>6} "
          f"{'mach us':>8} {'calls':>6} {'bare calls':>10}")
    for name, m in models().items():
        bare = bare_chain(m)
        want = m.predict(x)
        if not np.array_equal(bare(x), want) or not np.array_equal(m(x), want):
            raise SystemExit(f"{name}: predict, call and the bare chain disagree")
        t = interleaved({"bare": lambda b=bare: b(x), "predict": lambda m=m: m.predict(x),
                         "call": lambda m=m: m(x)}, args.repeats, args.inner)
        mach = machinery(m, x, args.repeats, args.inner * 10)
        calls = rnnkit_calls(lambda m=m: m.predict(x))
        bare_calls = rnnkit_calls(lambda b=bare: b(x))
        print(f"{name:<11} {t['bare'] * 1e6:8.1f} {t['predict'] * 1e6:8.1f} {t['call'] * 1e6:8.1f} "
              f"{(t['predict'] - t['bare']) * 1e6:+8.2f} {t['predict'] / t['bare']:6.3f} "
              f"{mach * 1e6:8.2f} {calls:6.0f} {bare_calls:10.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
