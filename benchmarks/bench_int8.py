"""int8 inference: rnnkit int8 vs rnnkit float32 vs PyTorch ``quantize_dynamic`` vs PyTorch float32.

One LSTM (or GRU) layer, ``return_sequences``, the same weights everywhere (PyTorch's copied from
rnnkit's float32 layer), one thread each (``RNNKIT_KERNEL_THREADS=1``, ``torch.set_num_threads(1)``;
``RNNKIT_KERNEL_THREADS=2`` in the environment: two threads each, rnnkit's int8 and float32 loops
on blocks of the batch's rows and PyTorch's on two threads), same process, interleaved: every
repeat times each implementation once, and the medians are reported with the ratios (time of the
other / time of rnnkit int8: above 1 means rnnkit int8 is faster) and the max |int8 - float32| of
each int8 implementation over the whole output sequence.

Shapes (B, T, F, H): S1 (1,100,16,32), S2 (32,50,32,64), S3 (64,100,128,256), S4 (128,200,256,512).

``--isa both`` (the default) runs the shapes twice, each in a child process: on this CPU's own
instructions, then restricted to AVX2 (``tools/avx2.sh``: Numba's target haswell without
AVX-512, so rnnkit's int8 products run the ``vpmaddubsw`` tile and its float32 kernels AVX2
FMAs; PyTorch's kernels and oneDNN capped at AVX2). Each row names the int8 product that ran
(``layout``: vnni, avx2 or plain) and PyTorch's CPU capability. ``--isa here``: this process only.

    python benchmarks/bench_int8.py                       # LSTM, S1-S4, both ISAs
    python benchmarks/bench_int8.py --shapes S3 --repeats 3 --cell gru
    python benchmarks/bench_int8.py --demo /tmp/demo      # the demo's test RMSE, float32 vs int8
    RNNKIT_KERNEL_THREADS=2 python benchmarks/bench_int8.py --shapes S2,S3,S4   # two threads each
    python benchmarks/bench_int8.py --shapes S2 --json out.json   # the rows of every ISA, as JSON

``--json PATH`` writes ``{"threads", "cell", "isas", "rows"}``, each row with the ``isa`` it ran
on (``native`` or ``avx2``; ``bench.py --all`` reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("RNNKIT_KERNEL_THREADS", "1")
THREADS = int(os.environ["RNNKIT_KERNEL_THREADS"])
#: with two threads, each sample's untimed lead-in and its timed length (seconds)
SAMPLE_S = 0.05

import warnings  # noqa: E402

import numpy as np  # noqa: E402

import rnnkit as rk  # noqa: E402

SHAPES: dict[str, tuple[int, int, int, int]] = {
    "S1": (1, 100, 16, 32), "S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256), "S4": (128, 200, 256, 512),
}


def _torch_pair(layer: Any, cell: str) -> tuple[Any, Any] | None:
    """(float32 module, quantize_dynamic module) with ``layer``'s weights, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(THREADS)
    F, H = layer.input_dim, layer.units
    mod = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(F, H, batch_first=True)
    w = {n: np.asarray(v) for n, v in layer.weights()}
    k, u, b = w["kernel"].T, w["recurrent_kernel"].T, w["bias"]
    if cell == "gru":   # Keras [z|r|h] -> PyTorch [r|z|n]
        def perm(a: np.ndarray) -> np.ndarray:
            return np.concatenate([a[H:2 * H], a[:H], a[2 * H:]], axis=0)
        k, u, b = perm(k), perm(u), np.stack([perm(b[0]), perm(b[1])])
    with torch.no_grad():
        mod.weight_ih_l0.copy_(torch.from_numpy(np.array(k)))
        mod.weight_hh_l0.copy_(torch.from_numpy(np.array(u)))
        mod.bias_ih_l0.copy_(torch.from_numpy(np.array(b[0])))
        mod.bias_hh_l0.copy_(torch.from_numpy(np.array(b[1] if b.shape[0] > 1 else 0 * b[0])))
    holder = torch.nn.ModuleDict({"rnn": mod})   # quantize_dynamic swaps children, not the root
    qmod = torch.ao.quantization.quantize_dynamic(holder, {type(mod)}, dtype=torch.qint8)["rnn"]
    return mod, qmod


def _layout() -> str:
    """The int8 product this process runs: "vnni", "avx2", "plain", or "reference" without numba."""
    mod = rk.kernels.int8()
    return "reference" if mod is None else str(sys.modules["rnnkit.kernels._int8_gemm"].LAYOUT)


def _torch_isa() -> str:
    try:
        import torch
    except ImportError:
        return "none"
    return str(torch.backends.cpu.get_cpu_capability())


def _calls_for(f: Callable[[], Any], clock: Callable[[], float]) -> float:
    """Call ``f`` for at least :data:`SAMPLE_S` seconds; the seconds per call."""
    n, t0 = 0, clock()
    while n == 0 or clock() - t0 < SAMPLE_S:
        f()
        n += 1
    return (clock() - t0) / n


def run(shapes: list[str], cell: str, repeats: int, clock: Callable[[], float] = time.perf_counter,
        budget: float = 0.5) -> list[dict[str, Any]]:
    """Time every implementation interleaved, at least ``repeats`` rounds and until each has run
    ``budget`` seconds; medians, ratios and errors per shape."""
    rows = []
    for sname in shapes:
        B, T, F, H = SHAPES[sname]
        x = np.random.default_rng(7).standard_normal((B, T, F)).astype(np.float32)
        if cell == "lstm":
            layer: Any = rk.LSTM(H, return_sequences=True, seed=0)
        else:
            layer = rk.GRU(H, return_sequences=True, seed=0, reset_after=True)
        fmodel = rk.Sequential([layer]).build((None, T, F))
        qlayer = rk.quantize(fmodel).layers[0]
        ctx = rk.Ctx(False)
        jobs: dict[str, Callable[[], Any]] = {
            "rk_int8": lambda q=qlayer, x=x, ctx=ctx: q.forward(x, ctx),
            "rk_f32": lambda f=layer, x=x, ctx=ctx: f.forward(x, ctx),
        }
        tp = _torch_pair(layer, cell)
        if tp is not None:
            import torch
            xt = torch.from_numpy(x)

            def tjob(m: Any, xt: Any = xt) -> Callable[[], Any]:
                def call() -> Any:
                    with torch.inference_mode():
                        return m(xt)[0]
                return call
            jobs["torch_int8"], jobs["torch_f32"] = tjob(tp[1]), tjob(tp[0])
        outs = {k: np.asarray(f()) for k, f in jobs.items()}   # warm-up (compiles)
        times: dict[str, list[float]] = {k: [] for k in jobs}
        # (one thread: each sample is one call, and the rounds go on until every implementation has
        # run ``budget`` seconds; two threads: each sample is 50 ms of calls already)
        while len(times["rk_int8"]) < repeats or (
                THREADS == 1 and min(sum(v) for v in times.values()) < budget):
            for k, f in jobs.items():
                if THREADS == 1:
                    t0 = clock()
                    f()
                    times[k].append(clock() - t0)
                    continue
                # two threads: another implementation's threads may still spin after its calls
                # (PyTorch's OpenMP workers): 50 ms of untimed calls first, then a sample of
                # at least 50 ms, timed per call
                _calls_for(f, clock)
                times[k].append(_calls_for(f, clock))
        med = {k: statistics.median(v) for k, v in times.items()}
        row: dict[str, Any] = {"shape": sname, "cell": cell, "threads": THREADS, "layout": _layout(),
                               "torch_isa": _torch_isa(),
                               **{f"{k}_ms": v * 1e3 for k, v in med.items()}}
        for k in med:
            if k != "rk_int8":
                row[f"{k}/rk_int8"] = med[k] / med["rk_int8"]
        row["err_rk_int8"] = float(np.abs(outs["rk_int8"] - outs["rk_f32"]).max())
        if "torch_int8" in outs:
            row["err_torch_int8"] = float(np.abs(outs["torch_int8"] - outs["torch_f32"]).max())
            row["err_torch_f32_vs_rk_f32"] = float(np.abs(outs["torch_f32"] - outs["rk_f32"]).max())
        rows.append(row)
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
              flush=True)
    return rows


def demo_rmse(out: str) -> dict[str, float]:
    """The sunspots demo (``rnnkit demo``'s training) and its held-out RMSE in float32 and int8."""
    from rnnkit import datasets
    from rnnkit.cli._demo import TEST_YEARS, TRANSFORM, VAL_SPLIT, WINDOW, run_demo
    from rnnkit.cli._prepare import predict_blocks, prepare

    res = run_demo(out, verbose=False, plots=False)
    fc = rk.io.load_forecaster(res.model_path)
    model = fc.model
    values = datasets.sunspots().values
    prep = prepare(values[:, None], values, ["SUNACTIVITY"], "SUNACTIVITY", window=WINDOW, horizon=1,
                   val_split=VAL_SPLIT, n_test=TEST_YEARS, transform=TRANSFORM, index_name="YEAR",
                   what="sunspots")
    actual = prep.target[prep.test.pos]
    row = {}
    for name, m in (("float32", model), ("int8", rk.quantize(model))):
        pred = predict_blocks(m, prep.spec, prep.test, prep.target)
        row[f"rmse_{name}"] = float(np.sqrt(np.mean((pred - actual) ** 2)))
    row["int8/float32"] = row["rmse_int8"] / row["rmse_float32"]
    print(" ".join(f"{k}={v:.5g}" for k, v in row.items()), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="S1,S2,S3,S4")
    p.add_argument("--cell", choices=("lstm", "gru"), default="lstm")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: time.perf_counter; cpu: time.process_time (this process's CPU time, "
                        "steadier on a shared machine; only with one thread each)")
    p.add_argument("--isa", choices=("both", "native", "avx2", "here"), default="both",
                   help="both: a child process on this CPU's instructions, then one restricted to "
                        "AVX2 (tools/avx2.sh); native / avx2: that child only; here: this process")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="also write the rows (of every ISA run) to PATH as JSON")
    p.add_argument("--demo", default=None, metavar="DIR",
                   help="instead: train the sunspots demo into DIR and compare its test RMSE in int8")
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=DeprecationWarning)   # torch.ao.quantization
    if a.demo is not None:
        demo_rmse(a.demo)
        return 0
    if a.isa != "here":
        args = ["--shapes", a.shapes, "--cell", a.cell, "--repeats", str(a.repeats), "--clock", a.clock,
                "--isa", "here"]
        avx2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "avx2.sh")
        isas = ("native", "avx2") if a.isa == "both" else (a.isa,)
        rows: list[dict[str, Any]] = []
        for isa in isas:
            part = f"{a.json}.{isa}.part" if a.json else None
            cmd = [sys.executable, os.path.abspath(__file__), *args, *(["--json", part] if part else [])]
            print(f"# {isa}", flush=True)
            rc = subprocess.call([avx2, *cmd] if isa == "avx2" else cmd,
                                 env={**os.environ, "PYTHON": sys.executable})
            if rc:
                return rc
            if part:
                rows += [{**r, "isa": isa} for r in json.loads(open(part).read())["rows"]]
                os.remove(part)
        if a.json:
            _write_json(a.json, {"threads": THREADS, "cell": a.cell, "isas": list(isas), "rows": rows})
        return 0
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    got = run(a.shapes.split(","), a.cell, a.repeats, clock)
    if a.json:
        _write_json(a.json, {"threads": THREADS, "cell": a.cell, "isas": ["here"], "rows": got})
    return 0


def _write_json(path: str, data: dict[str, Any]) -> None:
    """``data`` into ``path`` atomically (a temporary file beside it, then a rename)."""
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    raise SystemExit(main())
