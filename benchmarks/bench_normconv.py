"""The layers around the recurrence against PyTorch, one thread each (run by hand, never a test).

Cases (float32):

============  =====================================================================================
``convlstm``  one training step (forward, backward, SGD update) of ``Conv1D(64, 5, relu) ->
              MaxPooling1D(2) -> LSTM(64) -> Dense(10, softmax)`` under a sparse categorical
              cross-entropy, batch 64 x 400 steps x 8 channels; torch: ``Conv1d``, ``MaxPool1d``,
              ``LSTM``, ``Linear``, ``cross_entropy``, ``SGD`` with rnnkit's weights
``layernorm`` ``LayerNormalization()`` forward + backward at (64, 100, 256); torch ``nn.LayerNorm``
``batchnorm`` ``BatchNormalization()`` training forward + backward at (64, 100, 256); torch
              ``nn.BatchNorm1d(256)`` in training mode on the (64, 256, 100) transpose, contiguous
              (its own layout)
============  =====================================================================================

Before timing, each case's outputs are compared with PyTorch's (float32 tolerance). The two run
INTERLEAVED (rnnkit, torch, rnnkit, ...) after a warm-up, and the medians are printed with the
ratio rnnkit / torch (below 1: rnnkit is faster). ``RNNKIT_KERNEL_THREADS=1`` is set before
rnnkit is imported and ``torch.set_num_threads(1)``.

Usage::

    python benchmarks/bench_normconv.py --repeats 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ["RNNKIT_KERNEL_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

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


def convlstm(repeats: int) -> tuple[float, float]:
    B, T, C, K = 64, 400, 8, 10
    rng = np.random.default_rng(0)
    x = rng.normal(size=(B, T, C)).astype("float32")
    y = rng.integers(0, K, B)
    model = rk.Sequential([rk.Conv1D(64, 5, activation="relu", seed=1), rk.MaxPooling1D(2),
                           rk.LSTM(64, seed=2), rk.Dense(K, "softmax", seed=3)], input_shape=(None, T, C))
    model.compile(optimizer=rk.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    conv, lstm, dense = model.layers[0], model.layers[2], model.layers[3]
    tconv = torch.nn.Conv1d(C, 64, 5)
    tlstm = torch.nn.LSTM(64, 64, batch_first=True)
    tdense = torch.nn.Linear(64, K)
    with torch.no_grad():
        tconv.weight.copy_(torch.tensor(np.transpose(conv.weight("kernel"), (2, 1, 0))))
        tconv.bias.copy_(torch.tensor(conv.weight("bias")))
        Hd = 64
        tlstm.weight_ih_l0.copy_(torch.tensor(np.asarray(lstm.weight("kernel")).T))
        tlstm.weight_hh_l0.copy_(torch.tensor(np.asarray(lstm.weight("recurrent_kernel")).T))
        tlstm.bias_ih_l0.copy_(torch.tensor(np.asarray(lstm.weight("bias")).reshape(-1)[:4 * Hd]))
        tlstm.bias_hh_l0.zero_()
        tdense.weight.copy_(torch.tensor(np.asarray(dense.weight("kernel")).T))
        tdense.bias.copy_(torch.tensor(dense.weight("bias")))
    params = [*tconv.parameters(), *tlstm.parameters(), *tdense.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    tx, ty = torch.tensor(x), torch.tensor(y)

    def t_forward() -> torch.Tensor:
        h = torch.relu(tconv(tx.transpose(1, 2)))
        h = torch.nn.functional.max_pool1d(h, 2).transpose(1, 2)
        _, (hn, _) = tlstm(h)
        return tdense(hn[0])

    with torch.no_grad():
        want = torch.softmax(t_forward(), -1).numpy()
    got = model.predict(x)
    diff = float(np.max(np.abs(got - want)))
    assert diff < 1e-4, f"rnnkit and torch differ by {diff}"

    def ours() -> None:
        model.fit(x, y, epochs=1, batch_size=B, shuffle=False, verbose=0)

    def theirs() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(t_forward(), ty).backward()
        opt.step()

    return interleaved(ours, theirs, repeats)


def layernorm(repeats: int) -> tuple[float, float]:
    shape = (64, 100, 256)
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    G = np.random.default_rng(1).normal(size=shape).astype("float32")
    ln = rk.LayerNormalization()
    ln.build((None, *shape[1:]))
    tln = torch.nn.LayerNorm(shape[-1], eps=1e-3)
    tG = torch.tensor(G)
    ctx = rk.Ctx.training()
    y = ln.forward(x, ctx)
    ln.backward(G, ctx)
    tx = torch.tensor(x, requires_grad=True)
    assert float(np.max(np.abs(tln(tx).detach().numpy() - y))) < 1e-5

    def ours() -> None:
        c = rk.Ctx.training()
        ln.forward(x, c)
        ln.backward(G, c)

    def theirs() -> None:
        t = torch.tensor(x, requires_grad=True)
        tln(t).backward(tG)

    return interleaved(ours, theirs, repeats)


def batchnorm(repeats: int) -> tuple[float, float]:
    shape = (64, 100, 256)
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    G = np.random.default_rng(1).normal(size=shape).astype("float32")
    bn = rk.BatchNormalization()
    bn.build((None, *shape[1:]))
    tbn = torch.nn.BatchNorm1d(shape[-1], eps=1e-3)
    tbn.train()
    xt = np.ascontiguousarray(x.transpose(0, 2, 1))      # torch's own layout (N, C, L), contiguous
    tG = torch.tensor(np.ascontiguousarray(G.transpose(0, 2, 1)))
    y = bn.forward(x, rk.Ctx.training())
    tx = torch.tensor(xt)
    assert float(np.max(np.abs(tbn(tx).transpose(1, 2).detach().numpy() - y))) < 1e-5

    def ours() -> None:
        c = rk.Ctx.training()
        bn.forward(x, c)
        bn.backward(G, c)

    def theirs() -> None:
        t = torch.tensor(xt, requires_grad=True)
        tbn(t).backward(tG)

    return interleaved(ours, theirs, repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cases", default="convlstm,layernorm,batchnorm")
    args = ap.parse_args()
    cases = {"convlstm": convlstm, "layernorm": layernorm, "batchnorm": batchnorm}
    for name in args.cases.split(","):
        ours, theirs = cases[name](args.repeats)
        print(f"{name:10s} rnnkit {ours * 1e3:9.2f} ms   torch {theirs * 1e3:9.2f} ms   "
              f"ratio {ours / theirs:5.2f}")


if __name__ == "__main__":
    main()
