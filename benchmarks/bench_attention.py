"""``rk.MultiHeadAttention`` against PyTorch's ``nn.MultiheadAttention`` on one thread: one
training step (forward, loss = sum of output * G, backward: every weight gradient and the
input gradients), self-attention, float32 (run by hand, never a test).

Both get the same weights (PyTorch's packed ``in_proj_weight`` is rnnkit's ``query_kernel``,
``key_kernel`` and ``value_kernel``, each reshaped (E, E) and transposed, stacked) and the
outputs are compared before timing. The sides then run interleaved (the order flips every
repeat); each sample is the mean of an inner loop of about ``--sample`` seconds; the medians
are reported with ratio = rnnkit / PyTorch (below 1: rnnkit is faster). One thread:
``OPENBLAS_NUM_THREADS`` / ``RNNKIT_KERNEL_THREADS`` are set to 1 before NumPy and rnnkit are
imported, and ``torch.set_num_threads(1)``.

Usage::

    python benchmarks/bench_attention.py                      # B=32, T=100, E=128, 4 heads
    python benchmarks/bench_attention.py --batch 8 --steps 50 --repeats 5 --json out.json
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "RNNKIT_KERNEL_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import rnnkit as rk  # noqa: E402


def _sample(fn: Callable[[], Any], seconds: float) -> float:
    """Mean seconds per call over an inner loop of about ``seconds``."""
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            return el / n


def run(batch: int, steps: int, width: int, heads: int, repeats: int, seconds: float) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, steps, width)).astype(np.float32)
    G = rng.standard_normal((batch, steps, width)).astype(np.float32)
    layer = rk.MultiHeadAttention(heads, width // heads, seed=0)
    layer.build([(None, steps, width), (None, steps, width)])
    tm = torch.nn.MultiheadAttention(width, heads, batch_first=True)
    with torch.no_grad():
        tm.in_proj_weight.copy_(torch.tensor(np.concatenate(
            [layer.weight(f"{p}_kernel").reshape(width, width).T for p in ("query", "key", "value")])))
        tm.in_proj_bias.zero_()
        tm.out_proj.bias.zero_()
        wo = layer.weight("attention_output_kernel").reshape(width, width)
        tm.out_proj.weight.copy_(torch.tensor(wo.T))
    tx, tG = torch.tensor(x, requires_grad=True), torch.tensor(G)

    def ours() -> None:
        ctx = rk.Ctx.training()
        layer.forward([x, x], ctx)
        layer.backward(G, ctx)

    def theirs() -> None:
        tm.zero_grad()
        tx.grad = None
        out, _ = tm(tx, tx, tx, need_weights=False)
        (out * tG).sum().backward()

    want, _ = tm(tx, tx, tx, need_weights=False)
    diff = float(np.max(np.abs(layer.predict([x, x]) - want.detach().numpy())))
    if diff > 1e-4:
        raise SystemExit(f"outputs differ by {diff}; not timing")
    samples: dict[str, list[float]] = {"rnnkit": [], "torch": []}
    for r in range(repeats):
        order = [("rnnkit", ours), ("torch", theirs)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            samples[name].append(_sample(fn, seconds))
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {"batch": batch, "steps": steps, "width": width, "heads": heads, "max_output_diff": diff,
            "rnnkit_ms": 1e3 * med["rnnkit"], "torch_ms": 1e3 * med["torch"],
            "ratio": med["rnnkit"] / med["torch"], "samples_s": samples,
            "torch": torch.__version__, "numpy": np.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sample", type=float, default=0.5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    res = run(a.batch, a.steps, a.width, a.heads, a.repeats, a.sample)
    print(f"MultiHeadAttention fwd+bwd B={a.batch} T={a.steps} E={a.width} heads={a.heads}, 1 thread: "
          f"rnnkit {res['rnnkit_ms']:.2f} ms, torch {res['torch_ms']:.2f} ms, ratio {res['ratio']:.3f} "
          f"(max output diff {res['max_output_diff']:.1e})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
