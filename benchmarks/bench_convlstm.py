"""ConvLSTM1D / ConvLSTM2D against PyTorch's implementation of the same equations, one thread
each (run by hand, never a test).

PyTorch has no ConvLSTM layer; the peer is the usual one: per step ``F.conv{1,2}d`` of the input
(Keras' padding applied with ``F.pad``) plus ``F.conv{1,2}d`` of ``h`` ("same", strides 1), the
gates i, f, c, o, under autograd; rnnkit's weights copied into it (kernel (*k, C, 4F) permuted to
torch's (4F, C, *k)).

Cases (float32), each timed as inference (forward) and as a training pass (forward + backward):

======  ===============================================================================
``1d``  ``ConvLSTM1D(32, 3, padding="same", return_sequences=True)``, batch 16 x 20 steps x
        64 positions x 8 channels
``2d``  ``ConvLSTM2D(16, (3, 3), padding="same")``, batch 8 x 10 steps x 16 x 16 x 4
======  ===============================================================================

Before timing, each case's outputs (and the training pass's input gradient) are compared with
PyTorch's. The two run INTERLEAVED (rnnkit, torch, rnnkit, ...) after a warm-up; the medians are
printed with the ratio rnnkit / torch (below 1: rnnkit is faster) and the load average.
``RNNKIT_KERNEL_THREADS=1`` is set before rnnkit is imported and ``torch.set_num_threads(1)``.

Usage::

    python benchmarks/bench_convlstm.py --repeats 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ["RNNKIT_KERNEL_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as tf  # noqa: E402

import rnnkit as rk  # noqa: E402

torch.set_num_threads(1)


def interleaved(a: Callable[[], object], b: Callable[[], object], repeats: int) -> tuple[float, float]:
    for f in (a, b):
        f()
    ta, tb = [], []
    for _ in range(repeats):
        for f, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            f()
            out.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def same_pads(k: int) -> tuple[int, int]:
    """Keras' "same" at strides 1: k - 1 zeros, the odd one after."""
    return (k - 1) // 2, k - 1 - (k - 1) // 2


def torch_convlstm(layer: Any, x: torch.Tensor) -> torch.Tensor:
    """The same equations in torch (channels first inside, "same" padding, strides 1)."""
    r = layer.rank
    conv = tf.conv1d if r == 1 else tf.conv2d
    perm = (r + 1, r, *range(r))
    W = torch.tensor(np.array(layer.weight("kernel"))).permute(*perm).contiguous()
    U = torch.tensor(np.array(layer.weight("recurrent_kernel"))).permute(*perm).contiguous()
    b = torch.tensor(np.array(layer.weight("bias")))
    pads: list[int] = []
    for k in reversed(layer.kernel_size):
        pads += list(same_pads(k))
    F = layer.filters
    xs = x.movedim(-1, 2)                                   # (B, T, C, *S)
    B, T = xs.shape[:2]
    xw = conv(tf.pad(xs.reshape(B * T, *xs.shape[2:]), pads), W, b).reshape(B, T, 4 * F, *xs.shape[3:])
    h = torch.zeros(B, F, *xs.shape[3:])
    c = torch.zeros_like(h)
    outs = []
    for t in range(T):
        z = xw[:, t] + conv(tf.pad(h, pads), U)
        i, f, g, o = torch.split(z, F, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    y = torch.stack(outs, 1) if layer.return_sequences else h
    return y.movedim(2 if layer.return_sequences else 1, -1)


def case(layer: Any, shape: tuple[int, ...], repeats: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype("float32")
    layer.build((None, *shape[1:]))
    y = layer.predict(x)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch_convlstm(layer, tx)
    err = float(np.abs(y - ty.detach().numpy()).max())
    G = rng.standard_normal(y.shape).astype("float32")
    ctx = rk.Ctx.training(0)
    layer.forward(x, ctx)
    dx = layer.backward(G, ctx)
    (ty * torch.tensor(G)).sum().backward()
    assert tx.grad is not None
    gerr = float(np.abs(dx - tx.grad.numpy()).max())
    assert err < 1e-5 and gerr < 1e-4, (err, gerr)

    def ours_inf() -> None:
        layer.predict(x)

    def theirs_inf() -> None:
        with torch.no_grad():
            torch_convlstm(layer, torch.tensor(x))

    def ours_train() -> None:
        c = rk.Ctx.training(0)
        layer.forward(x, c)
        layer.backward(G, c)

    def theirs_train() -> None:
        t = torch.tensor(x, requires_grad=True)
        (torch_convlstm(layer, t) * torch.tensor(G)).sum().backward()

    name = f"{type(layer).__name__} {shape}"
    for what, a, b in (("inference", ours_inf, theirs_inf), ("training", ours_train, theirs_train)):
        ta, tb = interleaved(a, b, repeats)
        print(f"{name:36s} {what:9s} rnnkit {ta * 1e3:8.1f} ms  torch {tb * 1e3:8.1f} ms  "
              f"ratio {ta / tb:5.2f}  (max |dy| {err:.1e}, |dx| {gerr:.1e}; load {os.getloadavg()[0]:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    case(rk.ConvLSTM1D(32, 3, padding="same", return_sequences=True, seed=0), (16, 20, 64, 8), args.repeats)
    case(rk.ConvLSTM2D(16, (3, 3), padding="same", seed=0), (8, 10, 16, 16, 4), args.repeats)


if __name__ == "__main__":
    main()
