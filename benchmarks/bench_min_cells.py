"""MinGRU / MinLSTM (Feng et al., 2024): one training step (forward + backward of
``L = sum(y * G)``, every output kept) at B=32, T=512, F=H=128, float32, one thread:

- rnnkit's parallel form (``rk.MinGRU`` / ``rk.MinLSTM``: GEMM, log-space scan, reverse sweep);
- rnnkit's sequential form (the same cell walked step by step: a ``RecurrentLayer`` over a subclass
  of the cell that overrides ``step``, :func:`step_form`);
- PyTorch's parallel log-space form, written as the paper's reference code writes it
  (``parallel_scan_log``: cumsum + logcumsumexp), with autograd;
- PyTorch's sequential loop (the paper's sequential mode: one ``nn.Linear`` per step), autograd;

and the streaming step at batch 1 (``layer.step(x_t, state)``, and the cell's bare ``step``).
CPU time of this process (``time.process_time``), the median of the repeats, the contenders
interleaved so a busy machine slows all alike. Run:
``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_min_cells.py [--repeats N] [--phases]``
(``--phases``: where rnnkit's training step goes, phase by phase).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as tF  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit.kernels import _min  # noqa: E402

B, T, F, H = 32, 512, 128, 128


def _log_g(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, (tF.relu(x) + 0.5).log(), -tF.softplus(-x))


def _g(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, x + 0.5, torch.sigmoid(x))


def parallel_scan_log(log_coeffs: torch.Tensor, log_values: torch.Tensor) -> torch.Tensor:
    """The paper's Heinsen scan: (B, T, H) coefficients, (B, T+1, H) values (h_0 first)."""
    a_star = tF.pad(torch.cumsum(log_coeffs, dim=1), (0, 0, 1, 0))
    log_h0_plus_b_star = torch.logcumsumexp(log_values - a_star, dim=1)
    return torch.exp(a_star + log_h0_plus_b_star)[:, 1:]


class TorchMin(torch.nn.Module):
    """minGRU / minLSTM as the paper's appendix writes them (parallel and sequential modes)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lin = torch.nn.Linear(F, (2 if kind == "MinGRU" else 3) * H)

    def parallel(self, x: torch.Tensor, h_0: torch.Tensor) -> torch.Tensor:
        k = self.lin(x)
        if self.kind == "MinGRU":
            kz, kh = k[..., :H], k[..., H:]
            log_z, log_coeffs = -tF.softplus(-kz), -tF.softplus(kz)
        else:
            kf, ki, kh = k[..., :H], k[..., H:2 * H], k[..., 2 * H:]
            diff = tF.softplus(-kf) - tF.softplus(-ki)
            log_coeffs, log_z = -tF.softplus(diff), -tF.softplus(-diff)
        log_values = torch.cat([_log_g(h_0), _log_g(kh) + log_z], dim=1)
        return parallel_scan_log(log_coeffs, log_values)

    def sequential(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        out = []
        h = h[:, 0]
        for t in range(x.shape[1]):
            k = self.lin(x[:, t])
            if self.kind == "MinGRU":
                z, ht = torch.sigmoid(k[:, :H]), _g(k[:, H:])
                h = (1 - z) * h + z * ht
            else:
                f, i, ht = torch.sigmoid(k[:, :H]), torch.sigmoid(k[:, H:2 * H]), _g(k[:, 2 * H:])
                h = f / (f + i) * h + i / (f + i) * ht
            out.append(h)
        return torch.stack(out, dim=1)


def step_form(cell_cls: type) -> type:
    """A subclass of ``cell_cls`` that overrides ``step`` / ``step_back`` (with the same
    arithmetic): the walker then runs its step form (an inherited parallel form counts only for
    the class that declares it with its step), which a plain ``RecurrentLayer`` over the cell
    does not (it gets the parallel form too)."""
    def step(self: object, *a: object, **kw: object) -> object:
        return cell_cls.step(self, *a, **kw)

    def step_back(self: object, *a: object, **kw: object) -> object:
        return cell_cls.step_back(self, *a, **kw)
    return type(f"Step{cell_cls.__name__}", (cell_cls,), {"step": step, "step_back": step_back})


def cpu_ms(f: Callable[[], object]) -> float:
    t0 = time.process_time()
    f()
    return (time.process_time() - t0) * 1e3


def per_call(f: Callable[[], object], n: int = 2000) -> float:
    """Microseconds per call of ``f``: the best of 5 runs of ``n`` calls (CPU time)."""
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(n):
            f()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def stream_times(cls: type[rk.RecurrentLayer], x1: np.ndarray) -> str:
    """One streaming step of a layer of ``cls``: ``layer.step`` and the cell's bare ``step``."""
    layer = cls(H, seed=1)  # type: ignore[call-arg]
    layer.build(rk.Shape((None, None, F)))
    state = layer.zero_state(1)
    w = layer._weights
    inp, h = x1 @ w["kernel"], (state[0],)
    return (f"  {cls.__name__:8s} layer.step {per_call(lambda: layer.step(x1, state)):6.1f} us | "
            f"cell.step (projection excluded) {per_call(lambda: layer.cell.step(w, inp, h, None)):6.1f} us")


def phases(repeats: int) -> None:
    """Where a training step of the parallel form goes: each phase timed alone (median CPU ms)
    on arrays of the benchmark's shape, the phases the walker and the cell run in that order."""
    print(f"phases of one training step, B={B} T={T} F={F} H={H} float32 (ms, median of {repeats}); "
          f"load average {os.getloadavg()[0]:.1f}")
    for cls in (rk.MinGRU, rk.MinLSTM):
        _phases_of(cls, repeats)


def _phases_of(cls: type[rk.RecurrentLayer], repeats: int) -> None:
    def med(f: Callable[[], object]) -> float:
        f()
        return statistics.median(cpu_ms(f) for _ in range(repeats))

    rng = np.random.default_rng(0)
    layer = cls(H, return_sequences=True, seed=1)  # type: ignore[call-arg]
    layer.build(rk.Shape((None, T, F)))
    w, kind = layer._weights, layer.cell.scan_kind
    W = w["kernel"]
    N = W.shape[1]
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    G = rng.standard_normal((B, T, H)).astype(np.float32)
    xt = np.ascontiguousarray(x.transpose(1, 0, 2))
    x2 = xt.reshape(T * B, F)
    inp = (x2 @ W).reshape(T, B, N)
    k = inp + w["bias"]
    h0, m = np.zeros((B, H), np.float32), np.zeros((0, 0), np.uint8)
    hist = np.empty((T + 1, B, H), np.float32)
    dh = np.ascontiguousarray(G.transpose(1, 0, 2))
    dk, dh0 = np.empty_like(k), np.empty((B, H), np.float32)

    def train() -> None:
        ctx = rk.Ctx.training()
        layer.forward(x, ctx)
        layer.backward(G, ctx)

    r = {"whole training step": med(train),
         "GEMM x @ W (all steps, all gates)": med(lambda: x2 @ W),
         "GEMM dW = x^T @ dk": med(lambda: x2.T @ dk.reshape(T * B, N)),
         "GEMM dx = dk @ W^T": med(lambda: dk.reshape(T * B, N) @ W.T),
         "bias: k = inp + b, db = sum dk": med(lambda: (inp + w["bias"], dk.reshape(-1, N).sum(axis=0))),
         "scan forward (compiled)": med(lambda: _min.scan_forward(k, kind, h0, m, hist)),
         "scan backward (compiled)": med(
             lambda: _min.scan_backward(k, kind, h0, hist[1:], dh, m, dk, dh0)),
         "copies: (B,T)<->(T,B) x3, states, dh": med(lambda: (
             [np.ascontiguousarray(x.transpose(1, 0, 2)) for _ in range(3)],
             np.concatenate([h0[None], hist[1:]]), np.zeros((T, B, H), np.float32) + dh))}
    rest = r["whole training step"] - sum(v for n, v in r.items() if n != "whole training step")
    print(cls.__name__)
    for n, v in r.items():
        print(f"  {n:40s} {v:8.2f}")
    print(f"  {'the rest (Python, checks, allocation)':40s} {rest:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--phases", action="store_true", help="the breakdown of a training step by phase")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.phases:
        phases(args.repeats)
        return
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    G = rng.standard_normal((B, T, H)).astype(np.float32)
    tx, tG = torch.from_numpy(x), torch.from_numpy(G)
    th0 = torch.zeros(B, 1, H)
    print(f"B={B} T={T} F={H} H={H} float32, one thread; load average {os.getloadavg()[0]:.1f}")
    print(f"{'cell':8s} {'rk parallel':>12s} {'rk sequential':>14s} {'torch parallel':>15s} "
          f"{'torch sequential':>17s}   (ms, median of {args.repeats}; training step fwd+bwd)")
    for cls in (rk.MinGRU, rk.MinLSTM):
        layer = cls(H, return_sequences=True, seed=1)
        layer.build(rk.Shape((None, T, F)))
        seq = rk.RecurrentLayer(step_form(type(layer.cell))(H), return_sequences=True, seed=1)
        seq.build(rk.Shape((None, T, F)))
        tm = TorchMin(cls.__name__)

        def rk_step(lay: rk.RecurrentLayer) -> Callable[[], object]:
            def run() -> None:
                ctx = rk.Ctx.training()
                lay.forward(x, ctx)
                lay.backward(G, ctx)
            return run

        def torch_step(parallel: bool, tm: TorchMin = tm) -> Callable[[], object]:
            def run() -> None:
                tm.zero_grad()
                y = tm.parallel(tx, th0) if parallel else tm.sequential(tx, th0)
                (y * tG).sum().backward()
            return run

        runs = {"rk parallel": rk_step(layer), "rk sequential": rk_step(seq),
                "torch parallel": torch_step(True), "torch sequential": torch_step(False)}
        for f in runs.values():
            f()                                            # warm up outside the timing
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.repeats):
            for k, f in runs.items():
                times[k].append(cpu_ms(f))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{cls.__name__:8s} {med['rk parallel']:12.1f} {med['rk sequential']:14.1f} "
              f"{med['torch parallel']:15.1f} {med['torch sequential']:17.1f}   "
              f"seq/par {med['rk sequential'] / med['rk parallel']:.1f}x, "
              f"rk par / torch par {med['rk parallel'] / med['torch parallel']:.2f}")

    print("streaming step, batch 1, F=H=128 (us, best of 5 x 2000 calls):")
    for cls in (rk.MinGRU, rk.MinLSTM):
        print(stream_times(cls, x[:1, 0]))

if __name__ == "__main__":
    main()
