"""``fit`` of a subclassed model (``class M(rk.Model)`` with ``call``) against the same model built
as a ``Sequential``, the same weights, data and batches: the ratio of their times.

Model: LSTM(64) encoder and Dense(8) head on (512, 20, 16) float32 inputs, batch 32, Adam,
2 epochs per run (32 steps). CPU time of this process (``time.process_time``), runs of the two
interleaved, the best of 5 each. Run: ``python benchmarks/bench_subclass_fit.py``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import rnnkit as rk


class Tagger(rk.Model):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = rk.LSTM(64, seed=1)
        self.head = rk.Dense(8, seed=2)

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.head(self.encoder(inputs))


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 20, 16)).astype(np.float32)
    y = rng.normal(size=(512, 8)).astype(np.float32)
    sub = Tagger()
    sub.build(x.shape)
    seq = rk.Sequential([rk.LSTM(64), rk.Dense(8)])
    seq.build(x.shape)
    seq.set_weights(sub.get_weights())
    for m in (sub, seq):
        m.compile(rk.optimizers.Adam(1e-3), "mse")
        m.fit(x, y, epochs=1, batch_size=32, seed=0)   # warm: compiled kernels, first allocations
    best = {"subclass": float("inf"), "sequential": float("inf")}
    for _ in range(5):
        for name, m in (("subclass", sub), ("sequential", seq)):
            t0 = time.process_time()
            m.fit(x, y, epochs=2, batch_size=32, seed=0)
            best[name] = min(best[name], time.process_time() - t0)
    steps = 2 * 512 // 32
    for name, t in best.items():
        print(f"{name:10s} {t * 1e3:8.1f} ms per fit ({t / steps * 1e6:7.0f} us per step)")
    print(f"ratio subclass / sequential: {best['subclass'] / best['sequential']:.3f}")


if __name__ == "__main__":
    main()
