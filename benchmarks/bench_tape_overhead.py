"""The cost of recording on the gradient tape, per call: an ``rk.ops`` call against the NumPy
function it wraps, and a layer call on the tape against the same call without one.

CPU time of this process (``time.process_time``), the best of 7 repeats, tiny arrays (so the
figures are the per-call overhead, not arithmetic). Run: ``python benchmarks/bench_tape_overhead.py``.
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable

import numpy as np

import rnnkit as rk
from rnnkit import ops

K = 100


def per_call(f: Callable[[], object], calls: int, number: int = 200) -> float:
    """Microseconds per call of ``f``, which makes ``calls`` calls."""
    return min(timeit.repeat(f, number=number, repeat=7, timer=time.process_time)) / number / calls * 1e6


def main() -> None:
    a, b = np.ones((4, 4)), np.ones((4, 4))

    def recorded(op: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            with rk.GradientTape() as tape:
                tape.watch(a)
                for _ in range(K):
                    op()
        return run

    def plain(op: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(K):
                op()
        return run

    for name, np_op, rk_op in (("add", lambda: np.add(a, b), lambda: ops.add(a, b)),
                               ("tanh", lambda: np.tanh(a), lambda: ops.tanh(a)),
                               ("matmul", lambda: np.matmul(a, b), lambda: ops.matmul(a, b))):
        print(f"{name:7s} numpy {per_call(plain(np_op), K):5.2f} us | ops, no tape "
              f"{per_call(plain(rk_op), K):5.2f} us | ops, recorded {per_call(recorded(rk_op), K):5.2f} us")

    dense = rk.Dense(4, seed=1)
    dense.build((None, 4))
    lstm = rk.LSTM(8, seed=1)
    lstm.build((None, None, 4))
    for name, layer, x in (("Dense", dense, np.ones((2, 4), np.float32)),
                           ("LSTM", lstm, np.ones((1, 3, 4), np.float32))):
        layer(x, training=True)                       # compile outside the timing

        def call_plain(layer: rk.Layer = layer, x: np.ndarray = x) -> None:
            for _ in range(20):
                layer(x, training=True)

        def call_taped(layer: rk.Layer = layer, x: np.ndarray = x) -> None:
            with rk.GradientTape():
                for _ in range(20):
                    layer(x)
        print(f"{name:7s} layer(x, training=True) {per_call(call_plain, 20, 50):6.2f} us | recorded layer(x) "
              f"{per_call(call_taped, 20, 50):6.2f} us")


if __name__ == "__main__":
    main()
