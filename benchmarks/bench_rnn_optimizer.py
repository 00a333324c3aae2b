"""An optimizer step on an ``rnnkit.rnn`` network against ``torch.optim.Adam`` on ``torch.nn.LSTM``
/ ``nn.GRU`` of the same shapes: microseconds per step and per parameter tensor, one thread.

The rnnkit step is ``Adam.apply_gradients`` over every parameter of the net (the gradients of
one backward pass); the PyTorch step is ``optimizer.step()`` with ``.grad`` set the same way.
CPU time of this process (``time.process_time``), the best of 7 repeats of 200 steps.
Run: ``python benchmarks/bench_rnn_optimizer.py`` (``--json`` prints the figures as JSON).
"""

from __future__ import annotations

import argparse
import json
import time
import timeit

import numpy as np

import rnnkit as rk
from rnnkit.rnn import RNNConfig


def per_step(f: object, number: int = 200) -> float:
    """Microseconds per call of ``f``."""
    return min(timeit.repeat(f, number=number, repeat=7, timer=time.process_time)) / number * 1e6  # type: ignore[arg-type]


def case(mode: str, in_dim: int, hidden: int, layers: int) -> dict[str, float | int | str]:
    import torch

    torch.set_num_threads(1)
    make = rk.rnn.lstm if mode == "lstm" else rk.rnn.gru
    net = make(in_dim, hidden, RNNConfig(num_layers=layers), seed=0)
    x = np.random.default_rng(0).normal(size=(8, 10, in_dim)).astype(np.float32)
    ctx = rk.Ctx.training(0)
    y = net.forward(x, ctx)
    net.backward(np.ones_like(y), ctx)
    pairs = [(net, n, np.array(g)) for (_, n), g in ctx.grads.items()]
    opt = rk.optimizers.Adam(1e-6)

    module = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    mod = module(in_dim, hidden, num_layers=layers, batch_first=True)
    for p in mod.parameters():
        p.grad = torch.ones_like(p) * 1e-3
    topt = torch.optim.Adam(mod.parameters(), lr=1e-6)   # (PyTorch's default: foreach on CPU off)

    rk_us = per_step(lambda: opt.apply_gradients(pairs))
    torch_us = per_step(topt.step)
    n = len(pairs)
    return {"mode": mode, "in": in_dim, "hidden": hidden, "layers": layers, "params": n,
            "rnnkit_us": round(rk_us, 1), "torch_us": round(torch_us, 1),
            "rnnkit_us_per_param": round(rk_us / n, 2), "torch_us_per_param": round(torch_us / n, 2),
            "ratio": round(rk_us / torch_us, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [case("lstm", 32, 64, 1), case("lstm", 64, 128, 2), case("gru", 64, 128, 2),
            case("lstm", 256, 256, 1)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print(f"{r['mode']:4s} in={r['in']:<4} H={r['hidden']:<4} layers={r['layers']}  "
              f"params={r['params']:<3} "
              f"rnnkit {r['rnnkit_us']:8.1f} us ({r['rnnkit_us_per_param']:6.2f}/param)  "
              f"torch {r['torch_us']:8.1f} us ({r['torch_us_per_param']:6.2f}/param)  ratio {r['ratio']:.2f}")


if __name__ == "__main__":
    main()
