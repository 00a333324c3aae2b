"""``rk.SLSTM`` and ``rk.MLSTM`` against PyTorch implementations of the same equations on one
thread, written as the xLSTM paper's reference code computes them: sLSTM as a sequential loop
over time (the input projection of all steps in one product, the block-diagonal recurrence
per step), mLSTM by the stabilized parallel form (T x T decay matrix per head). float32,
``return_sequences``; run by hand, never a test.

Timed per layer: ``forward`` (an inference pass: rnnkit's ``predict`` path, PyTorch under
``no_grad``) and ``train`` (a training forward, loss = sum of output * G, backward: every
weight gradient and the input gradient). Both sides get the same weights; their outputs are
compared before timing. The sides run interleaved (the order flips every repeat); each sample
is the mean of an inner loop of about ``--sample`` seconds; the medians are reported with
ratio = rnnkit / PyTorch (below 1: rnnkit is faster). One thread: ``OPENBLAS_NUM_THREADS`` /
``RNNKIT_KERNEL_THREADS`` are set to 1 before NumPy and rnnkit are imported, and
``torch.set_num_threads(1)``.

Usage::

    python benchmarks/bench_xlstm.py                        # B=32, T=256, F=H=128, 4 heads
    python benchmarks/bench_xlstm.py --steps 64 --repeats 3 --json out.json
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "RNNKIT_KERNEL_THREADS",
             "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
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


def torch_slstm(torch: Any, x: Any, W: Any, R: Any, b: Any, nh: int) -> Any:
    """sLSTM, sigmoid forget gate, as a loop over time (the reference code's vanilla form)."""
    B, T, _ = x.shape
    H = W.shape[1] // 4
    dh = H // nh
    wx = (x @ W + b[0]).reshape(B, T, 4, nh, dh)
    h = c = n = m = torch.zeros(B, H)
    out = []
    for t in range(T):
        r = torch.einsum("bkd,kde->bke", h.reshape(B, nh, dh), R).reshape(B, nh, 4, dh).transpose(1, 2)
        a = (wx[:, t] + r).reshape(B, 4, H)
        ai, af, az, ao = a.unbind(1)
        lfm = m + torch.nn.functional.logsigmoid(af)
        m = torch.maximum(ai, lfm)
        ip, fp = torch.exp(ai - m), torch.exp(lfm - m)
        c = fp * c + ip * torch.tanh(az)
        n = fp * n + ip
        h = torch.sigmoid(ao) * c / n
        out.append(h)
    return torch.stack(out, 1)


def torch_mlstm(torch: Any, x: Any, W: Any, b: Any, nh: int) -> Any:
    """mLSTM, sigmoid forget gate, by the stabilized parallel form (the reference code's)."""
    B, T, _ = x.shape
    H = (W.shape[1] - 2 * nh) // 4
    dh = H // nh
    p = x @ W + b[0]

    def heads(a: Any) -> Any:
        return a.reshape(B, T, nh, dh).transpose(1, 2)

    q, k, v = heads(p[..., :H]), heads(p[..., H:2 * H]) / math.sqrt(dh), heads(p[..., 2 * H:3 * H])
    ai, af = p[..., 4 * H:4 * H + nh].transpose(1, 2), p[..., 4 * H + nh:].transpose(1, 2)
    F = torch.cumsum(torch.nn.functional.logsigmoid(af), -1)
    ltr = torch.tril(torch.ones(T, T, dtype=torch.bool))
    logD = torch.where(ltr, F[..., :, None] - F[..., None, :] + ai[..., None, :], -math.inf)
    m = logD.max(-1, keepdim=True).values
    C = (q @ k.transpose(-1, -2)) * torch.exp(logD - m)
    den = torch.maximum(C.sum(-1, keepdim=True).abs(), torch.exp(-m))
    hn = (C / den) @ v
    return torch.sigmoid(p[..., 3 * H:4 * H]) * hn.transpose(1, 2).reshape(B, T, H)


def run(batch: int, steps: int, features: int, units: int, heads: int, repeats: int,
        seconds: float) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, steps, features)).astype(np.float32)
    G = rng.standard_normal((batch, steps, units)).astype(np.float32)
    tx, tG = torch.tensor(x, requires_grad=True), torch.tensor(G)
    rows = []
    for kind in ("sLSTM", "mLSTM"):
        layer = (rk.SLSTM if kind == "sLSTM" else rk.MLSTM)(units, heads, return_sequences=True, seed=0)
        layer.build(rk.Shape((None, steps, features)))
        tw = {n: torch.tensor(np.asarray(v), requires_grad=True) for n, v in layer.weights()}

        def theirs_out(kind: str = kind, tw: dict[str, Any] = tw) -> Any:
            if kind == "sLSTM":
                return torch_slstm(torch, tx, tw["kernel"], tw["recurrent_kernel"], tw["bias"], heads)
            return torch_mlstm(torch, tx, tw["kernel"], tw["bias"], heads)

        with torch.no_grad():
            want = theirs_out().numpy()
        diff = float(np.max(np.abs(layer.predict(x) - want)))
        if diff > 1e-3:
            raise SystemExit(f"{kind}: outputs differ by {diff}; not timing")

        def ours_fwd(layer: rk.RecurrentLayer = layer) -> None:
            layer.predict(x)

        def ours_train(layer: rk.RecurrentLayer = layer) -> None:
            ctx = rk.Ctx.training()
            layer.forward(x, ctx)
            layer.backward(G, ctx)

        def theirs_fwd(theirs_out: Callable[[], Any] = theirs_out) -> None:
            with torch.no_grad():
                theirs_out()

        def theirs_train(theirs_out: Callable[[], Any] = theirs_out, tw: dict[str, Any] = tw) -> None:
            for p in (*tw.values(), tx):
                p.grad = None
            (theirs_out() * tG).sum().backward()

        for what, ours, theirs in (("forward", ours_fwd, theirs_fwd), ("train", ours_train, theirs_train)):
            samples: dict[str, list[float]] = {"rnnkit": [], "torch": []}
            for r in range(repeats):
                order = [("rnnkit", ours), ("torch", theirs)]
                for name, fn in order if r % 2 == 0 else order[::-1]:
                    samples[name].append(_sample(fn, seconds))
            med = {k: statistics.median(v) for k, v in samples.items()}
            rows.append({"layer": kind, "pass": what, "rnnkit_ms": 1e3 * med["rnnkit"],
                         "torch_ms": 1e3 * med["torch"], "ratio": med["rnnkit"] / med["torch"],
                         "max_output_diff": diff, "samples_s": samples})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--units", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sample", type=float, default=0.5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = run(a.batch, a.steps, a.features, a.units, a.heads, a.repeats, a.sample)
    print(f"B={a.batch} T={a.steps} F={a.features} H={a.units} heads={a.heads}, float32, 1 thread, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| layer | pass | rnnkit ms | torch ms | ratio |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['layer']} | {r['pass']} | {r['rnnkit_ms']:.1f} | {r['torch_ms']:.1f} "
              f"| {r['ratio']:.2f} |")
    if a.json:
        import torch
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "torch": torch.__version__, "numpy": np.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
