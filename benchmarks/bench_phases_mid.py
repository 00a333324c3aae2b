"""Where the time of one mid-size inference call goes (run by hand, never a test).

At S2 (32, 50, 32, 64) and S3 (64, 100, 128, 256) (``--shapes``), float32, one thread
(``RNNKIT_KERNEL_THREADS=1`` and one OpenBLAS thread are set here before anything is imported),
for LSTM and GRU (``reset_after=True``, PyTorch's form), the table splits
``layer.forward(x, Ctx.inference())`` (``return_sequences``) into:

- **python + driver** ``layer.forward`` minus the compiled call;
- **compiled call** the compiled inference loop called directly with prepared arguments;
- **projection** ``x @ W + b`` of every step, as the loop makes it: a chunk of steps at a time
  (one compiled call each) into one buffer of the driver's chunk size (L2-sized; a buffer of
  all ``T*B`` rows, 26 MB at S3, falls out of the caches and overstated the projection, so
  understated the rest of the loop);
- **products** the T per-step ``h @ U`` products alone (a compiled loop of ``rgemm``);
- **gates** the cell's compiled step alone, T times, on a copy of realistic pre-activations
  (a compiled loop; the copy is timed apart and left out);
- **rest of loop** compiled call minus projection, products and gates (the copies of the
  output, the chunk loop);

beside what the same products cost in OpenBLAS (``np.dot`` on the same shapes, one thread:
**sgemm: projection**, **sgemm: products**) and PyTorch's whole call (``torch.nn.LSTM`` /
``GRU`` with the same weights, ``torch.set_num_threads(1)``, under ``inference_mode``).

All in this thread's CPU time by default (``--clock cpu``; ``time.thread_time``), so that the time
spent waiting for a core on a loaded machine is left out; medians of interleaved rounds.

Usage::

    python benchmarks/bench_phases_mid.py [--shapes S2,S3] [--cells LSTM,GRU] [--repeats 9]
                                          [--sample 0.05] [--clock cpu|wall]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numba  # noqa: E402
import numpy as np  # noqa: E402
from bench_phases import chunked_projection  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit import kernels  # noqa: E402
from rnnkit.kernels import _driver as drv  # noqa: E402
from rnnkit.kernels._gemm import project  # noqa: E402
from rnnkit.kernels._packed import rgemm  # noqa: E402
from rnnkit.kernels._plans import _Plan  # noqa: E402
from rnnkit.kernels._steps import step_forward  # noqa: E402

SHAPES = {"S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256), "S4": (128, 200, 256, 512)}
_clock: Callable[[], float] = time.thread_time


@numba.njit(cache=False)
def _products(h: Any, PU: Any, out: Any, T: int) -> None:
    for _ in range(T):
        rgemm(h, PU, out, 1.0)


@numba.njit(cache=False)
def _gates(step: Any, pre: Any, a: Any, rec: Any, fed: Any, st: Any, pk: Any, own: Any, tmp: Any, opts: Any,
           T: int, ngroups: int, copy_only: bool) -> None:
    """T steps of the cell's forward on a fresh copy of ``pre`` each (``copy_only``: the copies)."""
    for s in range(T):
        for b in range(a.shape[0]):
            for j in range(a.shape[1]):
                a[b, j] = pre[b, j]
        if not copy_only:
            for k in range(ngroups):
                step_forward(step, k, a, rec, fed, st, s & 1, 1 - (s & 1), pk, 0, own, tmp, opts)


def _time(fns: dict[str, Callable[[], object]], repeats: int, sample: float) -> dict[str, float]:
    """Microseconds per call of each function: medians over ``repeats`` interleaved rounds, each
    round an inner loop of about ``sample`` seconds per function."""
    inner = {}
    for k, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        inner[k] = max(1, int(sample / max(time.perf_counter() - t0, 1e-7)))
    got: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        names = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for k in names:
            fn, n = fns[k], inner[k]
            t0 = _clock()
            for _ in range(n):
                fn()
            got[k].append((_clock() - t0) / n * 1e6)
    return {k: statistics.median(v) for k, v in got.items()}


def phases(kind: str, shape: tuple[int, int, int, int], repeats: int, sample: float,
           with_torch: bool) -> dict[str, float]:
    B, T, F, H = shape
    extra = {"reset_after": True} if kind == "GRU" else {}
    layer = getattr(rk, kind)(H, seed=1, return_sequences=True, **extra)
    layer.build((None, T, F))
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
    x_tm = np.ascontiguousarray(x.transpose(1, 0, 2))
    cell, w = layer.cell, layer._weights
    step = kernels.find(cell)
    assert step is not None, "the fast kernels are not available"
    dt = x_tm.dtype
    pl = _Plan(cell, step, w, dt)
    PW, PU, PWp = pl.forward_panels()
    N = pl.N
    ring = drv._ring(pl.sizes, B, dt, None)
    pk1, buf = drv._whole_scratch(pl, B, T, dt)
    out = np.empty((B, T, pl.sizes[0]), dt)
    mk = drv._mask_arg(None, T, B)

    def call() -> object:
        return pl.infer(pl.handle, x_tm, PW, pl.b0, ring, pk1, out, True, buf, mk, False, PU, pl.srcs,
                        pl.cols, pl.apart, pl.b1, pl.proj, PWp, pl.own, pl.opts, 0, B)

    chunk = drv._chunk(T, B, N * dt.itemsize)
    xp = drv._chunk_buf(pl, B, T, dt)          # (the driver's chunk: L2-sized, not T steps)
    x2 = x_tm.reshape(T * B, F)

    projection = chunked_projection(project, x2, B, PW, pl.b0, xp, chunk)

    S = pl.sizes[0]
    h = np.asarray(np.random.default_rng(1).uniform(-1, 1, (B, S)), dt)
    hu = np.zeros((B, PU[0].shape[1] * PU[0].shape[2]), dt)[:, :N]
    projection()
    pre = np.ascontiguousarray(xp[:B] + h @ np.asarray(pl.U))    # a realistic step input
    a = np.empty_like(pre)
    nrec = N if pl.apart else 0
    rec = np.asarray(np.random.default_rng(2).standard_normal((B, nrec)), dt)
    pre_rec = rec.copy()
    st = tuple(np.asarray(np.random.default_rng(3).uniform(-1, 1, (2, B, n)), dt) for n in pl.sizes)
    pk = drv._parks1(pl, B, dt)
    tmp = np.empty((B, N), dt)
    W_, U_ = np.asarray(pl.W), np.asarray(pl.U)
    dot_out, dot_rec = np.empty((T * B, N), dt), np.empty((B, N), dt)

    def gates() -> object:
        rec[...] = pre_rec
        return _gates(pl.handle, pre, a, rec, h, st, pk, pl.own, tmp, pl.opts, T, len(PU), False)

    def sgemm_products() -> object:
        for _ in range(T):
            np.dot(h, U_, out=dot_rec)
        return dot_rec

    fns: dict[str, Callable[[], object]] = {
        "forward": lambda: layer.forward(x, rk.Ctx.inference()),
        "call": call,
        "projection": projection,
        "products": lambda: _products(h, PU[0], hu, T),
        "products0": lambda: _products(h, PU[0], hu, 0),
        "gates": gates,
        "gates0": lambda: _gates(pl.handle, pre, a, rec, h, st, pk, pl.own, tmp, pl.opts, T, len(PU), True),
        "sgemm: projection": lambda: np.dot(x2, W_, out=dot_out),
        "sgemm: products": sgemm_products,
    }
    if with_torch:
        import torch

        from rnnkit.io._interop import to_torch_state

        torch.set_num_threads(1)
        tmod = (torch.nn.LSTM if kind == "LSTM" else torch.nn.GRU)(F, H, batch_first=True)
        tmod.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in to_torch_state(layer).items()})
        tx = torch.from_numpy(x)

        def torch_fwd() -> object:
            with torch.inference_mode():
                return tmod(tx)[0]

        fns["torch"] = torch_fwd
    for f in fns.values():
        f()
    t = _time(fns, repeats, sample)
    prod = t["products"] - t["products0"]
    gate = t["gates"] - t["gates0"]
    res = {
        "python + driver": t["forward"] - t["call"],
        "compiled call": t["call"],
        "  projection": t["projection"],
        "  products": prod,
        "  gates": gate,
        "  rest of loop": t["call"] - t["projection"] - prod - gate,
        "layer.forward": t["forward"],
        "sgemm: projection": t["sgemm: projection"],
        "sgemm: products": t["sgemm: products"],
    }
    if with_torch:
        res["torch"] = t["torch"]
        res["forward / torch"] = t["forward"] / t["torch"]
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--shapes", default="S2,S3")
    p.add_argument("--cells", default="LSTM,GRU")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--sample", type=float, default=0.05, help="seconds per timed sample")
    p.add_argument("--clock", choices=("wall", "cpu"), default="cpu",
                   help="cpu: this thread's CPU time (time.thread_time), for a loaded machine")
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args(argv)
    global _clock
    _clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    for sname in args.shapes.split(","):
        shape = SHAPES[sname]
        rows = {k: phases(k, shape, args.repeats, args.sample, not args.no_torch)
                for k in args.cells.split(",")}
        print(f"{sname} {shape} float32, one thread, microseconds per call ({args.clock} clock, "
              f"load {os.getloadavg()[0]:.1f})")
        print(f"{'phase':<20}" + "".join(f"{k:>10}" for k in rows))
        for name in next(iter(rows.values())):
            print(f"{name:<20}" + "".join(f"{r[name]:>10.2f}" for r in rows.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
