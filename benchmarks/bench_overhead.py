"""What the model machinery costs over the layers it drives (run by hand, never a test).

Numbers on ``Sequential([LSTM(H), Dense(1)])`` with float32 data, for two configurations:

- ``lstm32``: H=32, B=32, T=20, F=8, SGD(0.01), batches in order;
- ``demo``: the shapes of ``rnnkit demo`` (the sunspots forecaster): H=24, B=64, T=9, F=1,
  Adam(0.01), shuffled batches.

For each:

- **calls per step**: ``cProfile`` of one ``fit`` epoch; every Python function call whose code
  lives in the rnnkit package, divided by the number of steps, and the part of them made in
  ``rnnkit.models`` / ``rnnkit.optimizers`` / ``rnnkit._penalties`` (the model level);
- **fit overhead**: one ``fit`` epoch against the same epoch written with bare calls (the
  batch cut from the arrays, a training ``Ctx``, ``layer.forward`` twice,
  ``loss.value_and_grad``, ``layer.backward`` twice, ``optimizer.apply_gradients``), in CPU
  time (``time.process_time``) with one kernel thread (``RNNKIT_KERNEL_THREADS=1``, set here
  before rnnkit is imported), interleaved, medians; ``overhead = fit / bare - 1``.

And the **predict ratio**: ``Sequential([LSTM(32)]).predict(x)`` against the layer's own
``forward(x, Ctx.inference())`` at S1 (1, 100, 16, 32).

Usage::

    python benchmarks/bench_overhead.py                  # everything, ~1-2 minutes
    python benchmarks/bench_overhead.py --repeats 41 --steps 64 --only demo
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")

import numpy as np  # noqa: E402

import rnnkit as rk  # noqa: E402

PKG = str(Path(rk.__file__).resolve().parent)
MODEL_LEVEL = tuple(os.path.join(PKG, p) for p in ("models", "optimizers", "_penalties.py"))


@dataclass(frozen=True)
class Config:
    """One measured fit: LSTM units, batch, window, features, optimizer, shuffling."""

    name: str
    units: int
    batch: int
    window: int
    features: int
    optimizer: str
    shuffle: bool

    def model(self, seed: int = 1) -> rk.Sequential:
        m = rk.Sequential([rk.LSTM(self.units, seed=seed), rk.Dense(1, "linear", seed=seed + 1)])
        m.compile(self.make_optimizer(), "mse")
        m.build((None, self.window, self.features))
        return m

    def make_optimizer(self) -> rk.optimizers.Optimizer:
        return rk.optimizers.SGD(0.01) if self.optimizer == "sgd" else rk.optimizers.Adam(0.01)

    def data(self, steps: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(0)
        n = self.batch * steps
        return (rng.standard_normal((n, self.window, self.features)).astype(np.float32),
                rng.standard_normal((n, 1)).astype(np.float32))


CONFIGS = {
    "lstm32": Config("lstm32", 32, 32, 20, 8, "sgd", False),
    "demo": Config("demo", 24, 64, 9, 1, "adam", True),
}


def calls_per_step(cfg: Config, steps: int) -> tuple[float, float]:
    """(rnnkit Python calls, of them model-level) per optimizer step of one ``fit`` epoch."""
    x, y = cfg.data(steps)
    m = cfg.model()
    m.fit(x[:cfg.batch], y[:cfg.batch], epochs=1, batch_size=cfg.batch, verbose=0)  # compile kernels
    prof = cProfile.Profile()
    prof.enable()
    m.fit(x, y, epochs=1, batch_size=cfg.batch, shuffle=cfg.shuffle, verbose=0)
    prof.disable()
    st = pstats.Stats(prof)
    counts = [(fn, nc) for (fn, _, _), (_, nc, _, _, _) in st.stats.items()  # type: ignore[attr-defined]
              if fn.startswith(PKG)]
    total = sum(nc for _, nc in counts)
    model_level = sum(nc for fn, nc in counts if fn.startswith(MODEL_LEVEL))
    return total / steps, model_level / steps


def cpu_once(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def fit_overhead(cfg: Config, repeats: int, steps: int) -> tuple[float, float]:
    """(fit CPU seconds per step, bare CPU seconds per step), medians of interleaved epochs."""
    x, y = cfg.data(steps)
    bs = cfg.batch
    m = cfg.model()
    m.fit(x[:bs], y[:bs], epochs=1, batch_size=bs, verbose=0)
    bare_m = cfg.model()
    lstm, dense = bare_m.layers
    loss, opt = rk.losses.get("mse"), cfg.make_optimizer()
    rng = np.random.default_rng(0)
    names = [(la, n) for la in (lstm, dense) for n in la.weight_names]

    def bare() -> None:
        order = rng.permutation(x.shape[0]) if cfg.shuffle else None
        for a in range(0, x.shape[0], bs):
            if order is None:
                xb, yb = x[a:a + bs], y[a:a + bs]
            else:
                idx = order[a:a + bs]
                xb, yb = x[idx], y[idx]
            ctx = rk.Ctx.training(int(rng.integers(0, 2**63 - 1)))
            p = dense.forward(lstm.forward(xb, ctx), ctx)
            _, g = loss.value_and_grad(yb, p)
            lstm.backward(dense.backward(g, ctx), ctx)
            opt.apply_gradients([(la, n, ctx.grads[(la, n)]) for la, n in names])

    def fit() -> None:
        m.fit(x, y, epochs=1, batch_size=bs, shuffle=cfg.shuffle, verbose=0)

    fits: list[float] = []
    bares: list[float] = []
    for r in range(repeats):
        pair = [(fits, fit), (bares, bare)]
        for store, fn in (pair if r % 2 == 0 else pair[::-1]):
            store.append(cpu_once(fn))
    return statistics.median(fits) / steps, statistics.median(bares) / steps


def predict_ratio(repeats: int) -> tuple[float, float]:
    """(predict seconds, forward seconds) at (B, T, F, H) = (1, 100, 16, 32), CPU time."""
    x = np.random.default_rng(0).standard_normal((1, 100, 16)).astype(np.float32)
    m = rk.Sequential([rk.LSTM(32, seed=1)])
    m.predict(x)
    layer = m.layers[0]
    ctx_fn = rk.Ctx.inference
    preds: list[float] = []
    fwds: list[float] = []

    def many(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(200):
                fn()
        return run

    for r in range(repeats):
        pair = [(preds, many(lambda: m.predict(x))), (fwds, many(lambda: layer.forward(x, ctx_fn())))]
        for store, fn in (pair if r % 2 == 0 else pair[::-1]):
            store.append(cpu_once(fn) / 200)
    return statistics.median(preds), statistics.median(fwds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--steps", type=int, default=32, help="optimizer steps per timed fit epoch")
    p.add_argument("--only", choices=[*CONFIGS, "predict"], default=None)
    args = p.parse_args(argv)
    for name, cfg in CONFIGS.items():
        if args.only not in (None, name):
            continue
        total, model_level = calls_per_step(cfg, args.steps)
        print(f"[{name}] rnnkit Python calls per fit step: {total:.1f} (model level {model_level:.1f})")
        f, b = fit_overhead(cfg, args.repeats, args.steps)
        print(f"[{name}] fit step {f * 1e3:.3f} ms, bare step {b * 1e3:.3f} ms, CPU time, "
              f"overhead {100 * (f / b - 1):+.1f} %", flush=True)
    if args.only in (None, "predict"):
        pr, fw = predict_ratio(args.repeats)
        print(f"predict {pr * 1e6:.1f} us, layer.forward {fw * 1e6:.1f} us, ratio {pr / fw:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
