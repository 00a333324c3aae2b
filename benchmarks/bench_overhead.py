"""What the model machinery costs over the layers it drives (run by hand, never a test).

Three numbers, on ``Sequential([LSTM(32), Dense(1)])`` with float32 data (B=32, T=20, F=8):

- **calls per step**: ``cProfile`` of ``model.fit(x, y, epochs=1, batch_size=32)``; every Python
  function call whose code lives in the rnnkit package, divided by the number of steps.
- **fit overhead**: one ``fit`` step against the same step written with bare calls (a training
  ``Ctx``, ``layer.forward`` twice, ``loss.value_and_grad``, ``layer.backward`` twice,
  ``optimizer.apply_gradients``), interleaved, medians; ``overhead = fit / bare - 1``.
- **predict ratio**: ``Sequential([LSTM(32)]).predict(x)`` against the layer's own
  ``forward(x, Ctx.inference())`` at S1 (1, 100, 16, 32).

Usage::

    python benchmarks/bench_overhead.py                  # all three, ~1 minute
    python benchmarks/bench_overhead.py --repeats 21 --steps 64
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import rnnkit as rk

PKG = str(Path(rk.__file__).resolve().parent)


def model(seed: int = 1) -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(32, seed=seed), rk.Dense(1, "linear", seed=seed + 1)])
    m.compile(rk.optimizers.SGD(0.01), "mse")
    return m


def data(n: int, T: int = 20, F: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, T, F)).astype(np.float32),
            rng.standard_normal((n, 1)).astype(np.float32))


def calls_per_step(steps: int) -> float:
    """rnnkit Python calls per optimizer step of ``fit(batch_size=32)``."""
    x, y = data(32 * steps)
    m = model()
    m.fit(x[:32], y[:32], epochs=1, batch_size=32, shuffle=False)  # build, compile kernels
    prof = cProfile.Profile()
    prof.enable()
    m.fit(x, y, epochs=1, batch_size=32, shuffle=False)
    prof.disable()
    st = pstats.Stats(prof)
    total = sum(nc for (fn, _, _), (_, nc, _, _, _) in st.stats.items()  # type: ignore[attr-defined]
                if fn.startswith(PKG))
    return total / steps


def median_time(fn: Callable[[], object], repeats: int, inner: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) / inner)
    return out


def fit_overhead(repeats: int, steps: int) -> tuple[float, float]:
    """(fit seconds per step, bare seconds per step), medians of interleaved samples."""
    x, y = data(32 * steps)
    m = model()
    m.fit(x[:32], y[:32], epochs=1, batch_size=32)
    bare_m = model()
    bare_m.build((None, 20, 8))
    lstm, dense = bare_m.layers
    loss, opt = rk.losses.get("mse"), rk.optimizers.SGD(0.01)
    seeds = np.random.default_rng(0)

    def bare() -> None:
        for a in range(0, x.shape[0], 32):
            ctx = rk.Ctx.training(int(seeds.integers(0, 2**63 - 1)))
            h = lstm.forward(x[a:a + 32], ctx)
            p = dense.forward(h, ctx)
            _, g = loss.value_and_grad(y[a:a + 32], p)
            lstm.backward(dense.backward(g, ctx), ctx)
            opt.apply_gradients([(la, n, ctx.grads[(la, n)]) for la in (lstm, dense)
                                 for n in la.weight_names])

    def fit() -> None:
        m.fit(x, y, epochs=1, batch_size=32, shuffle=False)

    fits: list[float] = []
    bares: list[float] = []
    for r in range(repeats):
        pair = [(fits, fit), (bares, bare)]
        for store, fn in (pair if r % 2 == 0 else pair[::-1]):
            store.extend(median_time(fn, 1, 1))
    return statistics.median(fits) / steps, statistics.median(bares) / steps


def predict_ratio(repeats: int) -> tuple[float, float]:
    """(predict seconds, forward seconds) at (B, T, F, H) = (1, 100, 16, 32)."""
    x = np.random.default_rng(0).standard_normal((1, 100, 16)).astype(np.float32)
    m = rk.Sequential([rk.LSTM(32, seed=1)])
    m.predict(x)
    layer = m.layers[0]
    ctx_fn = rk.Ctx.inference
    preds: list[float] = []
    fwds: list[float] = []
    for r in range(repeats):
        pair = [(preds, lambda: m.predict(x)), (fwds, lambda: layer.forward(x, ctx_fn()))]
        for store, fn in (pair if r % 2 == 0 else pair[::-1]):
            store.append(statistics.median(median_time(fn, 3, 200)))
    return statistics.median(preds), statistics.median(fwds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--steps", type=int, default=32, help="optimizer steps per timed fit")
    args = p.parse_args(argv)
    print(f"rnnkit Python calls per fit step: {calls_per_step(args.steps):.1f}")
    f, b = fit_overhead(args.repeats, args.steps)
    print(f"fit step {f * 1e3:.3f} ms, bare step {b * 1e3:.3f} ms, overhead {100 * (f / b - 1):+.1f} %")
    pr, fw = predict_ratio(args.repeats)
    print(f"predict {pr * 1e6:.1f} us, layer.forward {fw * 1e6:.1f} us, ratio {pr / fw:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
