"""One step of a cell called alone, batch 1, 256 units, 256 input features, one thread:
``rk.GRUCell`` / ``rk.LSTMCell`` (``h, states = cell(x_t, states)``) against PyTorch's
``nn.GRUCell`` / ``nn.LSTMCell`` forward (under ``torch.no_grad()``, its cheapest), and the same
rnnkit step recorded on a gradient tape.

CPU time of this process (``time.process_time``), the best of 15 repeats of 500 calls, the
two libraries interleaved so that a busy machine slows both alike. Run:
``OMP_NUM_THREADS=1 python benchmarks/bench_step_cells.py``.
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable

import numpy as np
import torch

import rnnkit as rk

B, F, H = 1, 256, 256


def per_call(f: Callable[[], object], number: int = 500) -> float:
    """Microseconds per call of ``f``."""
    return min(timeit.repeat(f, number=number, repeat=15, timer=time.process_time)) / number * 1e6


def main() -> None:
    torch.set_num_threads(1)
    g = np.random.default_rng(0)
    x = g.normal(size=(B, F)).astype(np.float32)
    h = np.zeros((B, H), np.float32)
    tx, th = torch.from_numpy(x), torch.from_numpy(h)
    cells = {"GRU": (rk.GRUCell(H, seed=1), torch.nn.GRUCell(F, H), [h], th),
             "LSTM": (rk.LSTMCell(H, seed=1), torch.nn.LSTMCell(F, H), [h, h], (th, th))}
    for name, (cell, tcell, states, tstates) in cells.items():
        cell(x, states)                                   # build and compile outside the timing

        def ours(cell: rk.Cell = cell, states: list[np.ndarray] = states) -> None:
            cell(x, states)  # type: ignore[operator]

        def taped(cell: rk.Cell = cell, states: list[np.ndarray] = states) -> None:
            with rk.GradientTape():
                cell(x, states)  # type: ignore[operator]

        def theirs(tcell: torch.nn.Module = tcell, tstates: object = tstates) -> None:
            with torch.no_grad():
                tcell(tx, tstates)

        for _ in range(2):
            print(f"{name:5s} rk {per_call(ours):6.1f} us | torch no_grad {per_call(theirs):6.1f} us | "
                  f"rk on a tape {per_call(taped):6.1f} us")


if __name__ == "__main__":
    main()
