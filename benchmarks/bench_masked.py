"""What a padded batch costs: a masked recurrent layer against the same layer unmasked, and
against PyTorch's packed sequences, interleaved in one process (run by hand, never a test).

The batch has random lengths in [T/2, T] (a realistic padded batch); the masked pass runs all
T steps with per-row carries, as Keras does. Reports medians and the ratio masked / unmasked
(target at S3: at most 1.15) and, when torch is installed, rnnkit masked / torch packed.

Usage::

    python benchmarks/bench_masked.py                      # LSTM at S3, train and infer
    python benchmarks/bench_masked.py --cell gru --shape S2 --repeats 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import SHAPES, _cpu_name, time_pair  # noqa: E402

import rnnkit as rk  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cell", default="lstm", choices=["lstm", "gru", "rnn"])
    p.add_argument("--shape", default="S3", choices=sorted(SHAPES))
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    B, T, F, H = SHAPES[args.shape]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    lengths = rng.integers(T // 2, T + 1, B)
    layer = {"lstm": rk.LSTM, "gru": lambda h, **k: rk.GRU(h, reset_after=True, **k),
             "rnn": rk.SimpleRNN}[args.cell](H, return_sequences=True, seed=1, input_dim=F)
    torch: Any = None
    try:
        import torch  # type: ignore[no-redef]
        from torch.nn.utils.rnn import pack_padded_sequence

        torch.set_num_threads(os.cpu_count() or 1)
    except ImportError:
        pass
    if torch is not None and args.cell in ("lstm", "gru"):
        mod = getattr(torch.nn, args.cell.upper())(F, H, batch_first=True)
        tx, tl = torch.from_numpy(x), torch.from_numpy(lengths)

        def run_t(mode: str) -> None:
            packed = pack_padded_sequence(tx.requires_grad_(mode == "train"), tl, batch_first=True,
                                          enforce_sorted=False)
            if mode == "train":
                out, _ = mod(packed)
                out.data.sum().backward()
            else:
                with torch.inference_mode():
                    mod(packed)
    print(f"{_cpu_name()}, {os.cpu_count()} cores; load average {os.getloadavg()}; "
          f"{args.cell} {args.shape} (B, T, F, H) = {(B, T, F, H)}, lengths {lengths.min()}..{lengths.max()}")
    for mode in ("infer", "train"):
        def run(masked: bool, mode: str = mode) -> None:
            ctx = rk.Ctx.training() if mode == "train" else rk.Ctx.inference()
            if masked:
                ctx.set_mask(lengths=lengths)
            y = layer.forward(x, ctx)
            if mode == "train":
                layer.backward(np.ones_like(y), ctx)

        ta, tb = time_pair(lambda: run(False), lambda: run(True), args.repeats, 2, 0.3)
        plain, masked = statistics.median(ta), statistics.median(tb)
        line = (f"{mode}: unmasked {plain * 1e3:.2f} ms, masked {masked * 1e3:.2f} ms, "
                f"ratio {masked / plain:.3f}")
        if torch is not None and args.cell in ("lstm", "gru"):
            _, tt = time_pair(lambda: run(True), lambda m=mode: run_t(m), args.repeats, 2, 0.3)
            t_med = statistics.median(tt)
            line += f"; torch packed {t_med * 1e3:.2f} ms (rnnkit / torch {masked / t_med:.2f})"
        print(line)
    print(f"load average at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
