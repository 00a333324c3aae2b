"""rnnkit against PyTorch on the CPU, side by side in ONE process (run by hand, never a test).

For every selected cell x shape x mode it builds one rnnkit layer, copies its weights into the
matching ``torch.nn`` module (float32), checks that both give the same output, warms both up,
then times them INTERLEAVED (rnnkit, torch, torch, rnnkit, ... alternating the order every
repeat) and reports medians:

- ``infer``: ``layer.forward(x, Ctx.inference())`` vs ``module(x)`` under ``torch.inference_mode``
- ``train``: forward in a training Ctx, loss = sum of the output (``return_sequences=True``, so the
  whole (B, T, H) sequence, as torch returns it), backward of ones; torch: forward,
  ``out.sum().backward()``.

Shapes (B, T, F, H): S1 (1,100,16,32), S2 (32,50,32,64), S3 (64,100,128,256), S4 (128,200,256,512).
The GFLOP/s count only the GEMMs: inference ``2*T*B*(F+H)*G*H``, training three times that.
The roof is the numpy (OpenBLAS) sgemm rate on 2048^3 measured in the same run.

Usage::

    python benchmarks/bench.py                       # everything (several minutes)
    python benchmarks/bench.py --cells lstm --shapes S1,S2 --repeats 5 --modes infer
    python benchmarks/bench.py --kernels reference   # rnnkit's plain NumPy path
    python benchmarks/bench.py --isa both            # this machine's ISA, then AVX2 only
    python benchmarks/bench.py --user-cells --shapes S2,S3   # docs' compiled cells vs built-ins
    python benchmarks/bench.py --peers --threads 1,2 --shapes S1,S2 --repeats 3
    python benchmarks/bench.py --markdown benchmarks/results/<stamp>.json   # its README tables
    python benchmarks/bench.py --all --quick --isa both    # every speed figure, short (see below)

``--all`` runs every section below in child processes of their own (the scripts' own command
lines, each writing ``--json``), then prints one summary, a table per section, each headed by
the machine (CPU model, the ISA rnnkit's kernels ran on, the load average at the section's
start and end), and saves it as ``benchmarks/results/all-<utc-timestamp>.json`` (``--markdown``
prints its tables again):

- ``inference``: :mod:`bench_peers` (rnnkit / onnxruntime, / PyTorch, / PyTorch int8 at 1 and
  2 threads), one column group per ISA of ``--isa``;
- ``training``: this script's ``--modes train`` against PyTorch, per ISA;
- ``int8``: :mod:`bench_int8` (rnnkit int8 against its float32 and PyTorch's int8, with the
  errors), per ISA;
- ``first_use``: ``bench_coldstart.py --configs`` (per configuration, a new process on the cache
  ``rnnkit compile`` filled, and, without ``--quick``, one on an empty cache);
- ``serving``: ``bench_serve_http.py`` (requests/s, p99, the server's CPU a request) and
  ``profile_ws.py --no-profile`` (WebSocket steps/s, the server's CPU a step).

``--quick`` shrinks every section (fewer shapes, cases and repeats; first use on this
environment's own kernel cache after ``rnnkit compile`` on it, the empty-cache runs left out;
first use and serving on the native ISA only, since their AVX2 run would first compile every
configuration for AVX2).

``--peers`` (:mod:`bench_peers`): inference of LSTM, GRU, a ``proj_size`` LSTM, an LSTM under
``lengths`` and a Bidirectional LSTM against onnxruntime on the ``rk.save_onnx`` graph of the same
layer, PyTorch float32 and PyTorch int8 (``quantize_dynamic``), each thread count of ``--threads``
in a child process of its own (``RNNKIT_KERNEL_THREADS``, ``torch.set_num_threads``, onnxruntime's
``intra_op_num_threads``); the results file holds them under ``"peers"``, and ``--markdown``
prints their tables.

``--isa avx2`` runs rnnkit and PyTorch in a child process restricted to AVX2 by
``tools/avx2.sh`` (the recipe the tests' AVX2 run uses): ``OPENBLAS_CORETYPE=Haswell`` (OpenBLAS's
AVX2 kernels), ``NUMBA_CPU_NAME=haswell`` with an empty ``NUMBA_CPU_FEATURES`` (rnnkit's compiled
loops; the name alone keeps the host's features, AVX-512 included), numpy's AVX-512 dispatch
targets disabled, ``ATEN_CPU_CAPABILITY=avx2`` (PyTorch's vector kernels),
``ONEDNN_MAX_CPU_ISA=AVX2`` (its LSTM) and ``MKL_ENABLE_INSTRUCTIONS=AVX2`` (its GRU and
products); the child checks that each
took effect (the BLAS architectures threadpoolctl reports, Numba's CPU name, the ISA oneDNN's
verbose mode names) and records them in the results (``meta.isa``).

Writes ``benchmarks/results/<utc-timestamp>.json`` unless ``--no-save`` (``--results DIR`` for
another folder). ``benchmarks/results/latest.json`` is the tracked reference the README's table
comes from: only ``--update-latest`` replaces it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_peers  # noqa: E402
from bench_report import (  # noqa: E402
    AVX2_SH,
    SECTIONS,
    isa_in_effect,
    markdown,
    markdown_all,
    on_avx2,
    save_results,
)

SHAPES: dict[str, tuple[int, int, int, int]] = {
    "S1": (1, 100, 16, 32),
    "S2": (32, 50, 32, 64),
    "S3": (64, 100, 128, 256),
    "S4": (128, 200, 256, 512),
}
GATES = {"rnn": 1, "lstm": 4, "gru": 3}
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def make_pair(cell: str, shape: tuple[int, int, int, int], seed: int = 0) -> tuple[Any, Any]:
    """An rnnkit layer (return_sequences=True, float32) and the torch module with its weights."""
    import torch

    import rnnkit as rk

    _, _, F, H = shape
    if cell == "rnn":
        layer: Any = rk.SimpleRNN(H, return_sequences=True, seed=seed, input_dim=F)
        mod: Any = torch.nn.RNN(F, H, batch_first=True)
        order = [0]
    elif cell == "lstm":
        layer = rk.LSTM(H, return_sequences=True, seed=seed, input_dim=F)
        mod = torch.nn.LSTM(F, H, batch_first=True)
        order = [0, 1, 2, 3]                 # Keras [i|f|g|o] == torch [i|f|g|o]
    else:
        layer = rk.GRU(H, reset_after=True, return_sequences=True, seed=seed, input_dim=F)
        mod = torch.nn.GRU(F, H, batch_first=True)
        order = [1, 0, 2]                    # Keras [z|r|h] -> torch [r|z|n]
    W = np.asarray(layer.weight("kernel"))
    U = np.asarray(layer.weight("recurrent_kernel"))
    b = np.asarray(layer.weight("bias"))
    rng = np.random.default_rng(seed + 1)
    b = (0.1 * rng.standard_normal(b.shape)).astype(np.float32)   # non-trivial biases
    layer.set_weights(W, U, b)

    def reorder(m: np.ndarray) -> np.ndarray:
        return np.concatenate([m[..., g * H:(g + 1) * H] for g in order], axis=-1)

    b_ih = reorder(b[0])
    b_hh = reorder(b[1]) if b.shape[0] == 2 else np.zeros_like(b_ih)
    with torch.no_grad():
        mod.weight_ih_l0.copy_(torch.from_numpy(np.ascontiguousarray(reorder(W).T)))
        mod.weight_hh_l0.copy_(torch.from_numpy(np.ascontiguousarray(reorder(U).T)))
        mod.bias_ih_l0.copy_(torch.from_numpy(b_ih))
        mod.bias_hh_l0.copy_(torch.from_numpy(b_hh))
    return layer, mod


def runners(cell: str, shape: tuple[int, int, int, int], mode: str) -> tuple[Callable[[], Any], ...]:
    import torch

    import rnnkit as rk

    B, T, F, _ = shape
    layer, mod = make_pair(cell, shape)
    x = np.random.default_rng(7).standard_normal((B, T, F)).astype(np.float32)
    xt = torch.from_numpy(x.copy())
    # equality check: same work on both sides
    y_rk = layer.forward(x, rk.Ctx.inference())
    with torch.inference_mode():
        y_t = mod(xt)[0].numpy()
    err = float(np.max(np.abs(y_rk - y_t)))
    if err > 1e-4:
        raise SystemExit(f"{cell} {shape}: rnnkit and torch disagree (max abs diff {err:.2e})")

    if mode == "infer":
        def run_rk() -> Any:
            return layer.forward(x, rk.Ctx.inference())

        def run_t() -> Any:
            with torch.inference_mode():
                return mod(xt)[0]
    else:
        xt_req = xt.clone().requires_grad_(True)

        def run_rk() -> Any:
            ctx = rk.Ctx.training()
            y = layer.forward(x, ctx)
            return layer.backward(np.ones_like(y), ctx)

        def run_t() -> Any:
            mod.zero_grad(set_to_none=True)
            xt_req.grad = None
            out = mod(xt_req)[0]
            out.sum().backward()
            return xt_req.grad
    return run_rk, run_t


def _inner_count(fn: Callable[[], Any], budget: float) -> int:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return max(1, min(1000, int(budget / max(dt, 1e-7))))


def time_pair(run_a: Callable[[], Any], run_b: Callable[[], Any], repeats: int, warmup: int,
              sample_s: float) -> tuple[list[float], list[float]]:
    """Interleaved timing; each sample is the mean over an inner loop of ~sample_s seconds, after
    ``bench_peers.WARM_S`` of untimed calls of the same function (PyTorch's OpenMP workers spin
    for several ms after its calls, on the core that rnnkit's second row block needs)."""
    for _ in range(warmup):
        run_a()
        run_b()
    na, nb = _inner_count(run_a, sample_s), _inner_count(run_b, sample_s)
    ta: list[float] = []
    tb: list[float] = []
    for r in range(repeats):
        order = [(run_a, na, ta), (run_b, nb, tb)]
        if r % 2:
            order.reverse()
        for fn, n, acc in order:
            bench_peers.warm(fn, bench_peers.WARM_S)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            acc.append((time.perf_counter() - t0) / n)
    return ta, tb


def sgemm_rates(n: int = 2048, repeats: int = 5) -> dict[str, float]:
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.empty_like(a)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tc = torch.empty_like(ta)

    def run_np() -> None:
        np.matmul(a, b, out=c)

    def run_t() -> None:
        torch.mm(ta, tb, out=tc)

    s_np, s_t = time_pair(run_np, run_t, repeats, 1, 0.0)
    flop = 2.0 * n ** 3
    return {"numpy_gflops": flop / statistics.median(s_np) / 1e9,
            "torch_gflops": flop / statistics.median(s_t) / 1e9}


def flops(cell: str, shape: tuple[int, int, int, int], mode: str) -> float:
    B, T, F, H = shape
    f = 2.0 * T * B * (F + H) * GATES[cell] * H
    return f if mode == "infer" else 3.0 * f


def startup_times(repeats: int = 5) -> dict[str, float]:
    """``import rnnkit`` in fresh processes, and the first kernel call (warm on-disk cache)."""
    env = dict(os.environ)
    imp = []
    for _ in range(repeats):
        code = "import time; t=time.perf_counter(); import rnnkit; print(time.perf_counter()-t)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             check=True)
        imp.append(float(out.stdout.strip().splitlines()[-1]))
    code = (
        "import time, numpy as np, rnnkit as rk\n"
        "res = {}\n"
        "for name, L in (('lstm', rk.LSTM(32, return_sequences=True, input_dim=16)),\n"
        "                ('gru', rk.GRU(32, reset_after=True, return_sequences=True, input_dim=16)),\n"
        "                ('rnn', rk.SimpleRNN(32, return_sequences=True, input_dim=16))):\n"
        "    x = np.ones((2, 5, 16), np.float32)\n"
        "    t = time.perf_counter(); L.forward(x, rk.Ctx.inference()); t1 = time.perf_counter() - t\n"
        "    ctx = rk.Ctx.training(); t = time.perf_counter(); y = L.forward(x, ctx)\n"
        "    L.backward(np.ones_like(y), ctx); t2 = time.perf_counter() - t\n"
        "    res[name] = (t1, t2)\n"
        "print(sum(a for a, _ in res.values()), sum(b for _, b in res.values()))\n"
    )
    first = []
    for _ in range(max(2, repeats // 2)):   # the first run may populate the cache
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             check=True)
        a, b = (float(v) for v in out.stdout.strip().splitlines()[-1].split())
        first.append(a + b)
    return {"import_s": statistics.median(imp), "first_calls_all_cells_warm_cache_s": min(first[1:]),
            "first_calls_all_cells_first_run_s": first[0]}


def _loadavg() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _section_commands(name: str, isa: str, quick: bool, out: Path) -> list[list[str]]:
    """The command lines of one section on one ISA (``isa`` "avx2": under ``tools/avx2.sh``);
    each writes its results into ``out`` (a JSON file; ``training``: a folder)."""
    py = [sys.executable]
    if name == "inference":
        cmd = [*py, str(HERE / "bench_peers.py"), "--json", str(out), "--isa", "native", "--threads", "1,2",
               *(["--shapes", "S2,S3", "--cases", "lstm,gru", "--repeats", "3"] if quick else [])]
        cmds = [cmd]
    elif name == "training":
        cmds = [[*py, str(HERE / "bench.py"), "--modes", "train", "--no-startup", "--results", str(out),
                 *(["--cells", "lstm,gru", "--shapes", "S2,S3", "--repeats", "3"] if quick else [])]]
    elif name == "int8":
        cmds = [[*py, str(HERE / "bench_int8.py"), "--json", str(out), "--isa", "here",
                 *(["--shapes", "S2,S3", "--repeats", "3"] if quick else [])]]
    elif name == "first_use":
        cmds = [[*py, str(HERE / "bench_coldstart.py"), "--configs", "--json", str(out),
                 *(["--no-empty", "--own-cache"] if quick else [])]]
    else:   # serving: HTTP predict, then the WebSocket steps
        cmds = [[*py, str(HERE / "bench_serve_http.py"), "--json", f"{out}.http",
                 *(["--variants", "fast", "--phases", "keepalive", "--rounds", "1", "--seconds", "3",
                    "--clients", "100", "--slow", "0"] if quick else [])],
                [*py, str(HERE / "profile_ws.py"), "--no-profile", "--json", f"{out}.ws",
                 *(["--seconds", "3", "--streams", "100"] if quick else [])]]
    return [on_avx2(c) if isa == "avx2" else c for c in cmds]


def _section_data(name: str, out: Path) -> Any:
    """What one section's commands wrote into ``out``."""
    if name == "training":
        return json.loads(next(iter(sorted(out.glob("*.json")))).read_text())
    if name == "serving":
        return {"http": json.loads(Path(f"{out}.http").read_text()),
                "ws": json.loads(Path(f"{out}.ws").read_text())}
    return json.loads(out.read_text())


def run_all(isa: str, quick: bool, argv: list[str], folder: Path) -> tuple[dict[str, Any], list[Path]]:
    """``--all``: every section of :data:`bench_report.SECTIONS` in child processes (see the module
    docstring), a failed one recorded with its exit status and the rest run on; the results,
    saved into ``folder`` as ``all-<utc-timestamp>.json``."""
    import tempfile

    isas = list(bench_peers.ISAS[isa])
    t0 = time.perf_counter()
    run: dict[str, Any] = {
        "kind": "all", "argv": argv, "quick": quick, "isas": isas,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_name(), "cores": os.cpu_count(), "host_isa": bench_peers._host_isa(),
        "versions": bench_peers.versions(), "loadavg_start": _loadavg(), "sections": {}}
    env = {**os.environ, "PYTHON": sys.executable}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SECTIONS:
            sec_isas = ["native"] if quick and name in ("first_use", "serving") else isas
            sec: dict[str, Any] = {"isas": sec_isas, "loadavg_start": _loadavg(), "data": {},
                                   "error": None}
            s0 = time.perf_counter()
            for i in sec_isas:
                out = Path(tmp) / f"{name}-{i}"
                if name == "training":
                    out.mkdir()
                for cmd in _section_commands(name, i, quick, out):
                    print(f"== {name} ({i}): {' '.join(cmd)}", flush=True)
                    rc = subprocess.run(cmd, env={**env, "RNNKIT_BENCH_ISA": i}).returncode
                    if rc:
                        script = next(Path(a).name for a in cmd if a.endswith(".py"))
                        sec["error"] = f"{script} ({i}) exited with status {rc}"
                        break
                if sec["error"]:
                    break
                sec["data"][i] = _section_data(name, out)
            sec["loadavg_end"], sec["wall_s"] = _loadavg(), time.perf_counter() - s0
            if name == "training" and not sec["error"]:
                sec["data"] = {"runs": list(sec["data"].values())}
            if name == "int8" and not sec["error"]:
                parts = sec["data"]
                sec["data"] = {"cell": parts[sec_isas[0]]["cell"],
                               "rows": [{**r, "isa": i} for i in sec_isas for r in parts[i]["rows"]]}
            run["sections"][name] = sec
    run["loadavg_end"], run["wall_s"] = _loadavg(), time.perf_counter() - t0
    written = save_results(run, folder, update_latest=False, prefix="all-")
    return run, written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", default="rnn,lstm,gru")
    p.add_argument("--shapes", default="S1,S2,S3,S4")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--sample", type=float, default=0.05, help="seconds per timing sample (inner loop)")
    p.add_argument("--kernels", default=None, help="set RNNKIT_KERNELS (fast|reference)")
    p.add_argument("--torch-threads", type=int, default=None, help="default: torch's own default")
    p.add_argument("--no-startup", action="store_true", help="skip the import/compile timings")
    p.add_argument("--no-save", action="store_true", help="write no results file")
    p.add_argument("--results", default=str(RESULTS), metavar="DIR",
                   help="folder for the results file (default benchmarks/results)")
    p.add_argument("--update-latest", action="store_true",
                   help="also replace the tracked reference results/latest.json (the README's table)")
    p.add_argument("--markdown", metavar="JSON", help="print the README table of a results file and exit")
    p.add_argument("--user-cells", action="store_true",
                   help="time the compiled cells of docs/custom-cells.md against the built-ins, then exit")
    p.add_argument("--peers", action="store_true",
                   help="inference against onnxruntime (the save_onnx graph), PyTorch float32 and int8")
    p.add_argument("--threads", default="1,2", help="--peers: thread counts, one child process each")
    p.add_argument("--cases", default=",".join(bench_peers.CASES),
                   help="--peers: lstm, gru, lstm-proj (proj_size), lstm-len (lengths), bilstm")
    p.add_argument("--clock", choices=tuple(bench_peers.CLOCKS), default="wall",
                   help="--peers: wall, or cpu (the calling thread's CPU time, --threads 1)")
    p.add_argument("--isa", choices=("native", "avx2", "both"), default="native",
                   help="native: this machine; avx2: a child process restricted to AVX2; both: one, "
                        "then the other")
    p.add_argument("--all", action="store_true",
                   help="every section (inference and training against the peers, int8, first use, "
                        "serving), each in a child process, then one summary")
    p.add_argument("--quick", action="store_true", help="--all: a short run (see the module docstring)")
    args = p.parse_args(argv)
    if args.markdown:
        data = json.loads(Path(args.markdown).read_text())
        if data.get("kind") == "all":
            print(markdown_all(data))
        else:
            print(bench_peers.markdown(data["peers"]) if "peers" in data else markdown(data))
        return 0
    if args.quick and not args.all:
        p.error("--quick shortens --all: give --all too")
    if args.all:
        run, written = run_all(args.isa, args.quick, argv if argv is not None else sys.argv[1:],
                               Path(args.results))
        print(markdown_all(run))
        for path in written:
            print(f"wrote {path}")
        return 0
    if args.peers:   # every thread count (and ISA) in a child process of its own (bench_peers.py)
        peers = bench_peers.run(args.shapes, args.cases, [int(n) for n in args.threads.split(",")],
                                args.repeats, args.warmup, args.sample, bench_peers.ISAS[args.isa],
                                args.clock)
        print(bench_peers.markdown(peers))
        if not args.no_save:
            for path in save_results({"peers": peers}, Path(args.results), update_latest=args.update_latest):
                print(f"wrote {path}")
        return 0
    if args.isa != "native" and os.environ.get("RNNKIT_BENCH_ISA") != "avx2":
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--isa")]
        rest = [a for i, a in enumerate(rest) if not (i > 0 and rest[i - 1] == "--isa")]
        rest = [a for a in rest if a not in ("native", "avx2", "both")]
        if args.isa == "both":
            rc = main(rest)
            if rc:
                return rc
        if args.isa == "both":   # latest.json (the README's first table) keeps the native run
            rest = [a for a in rest if a != "--update-latest"]
        env = {**os.environ, "RNNKIT_BENCH_ISA": "avx2", "PYTHON": sys.executable}
        print(f"-- AVX2 only (child process under {AVX2_SH.name})", flush=True)
        return subprocess.run(on_avx2([sys.executable, __file__, *rest]), env=env).returncode
    if args.kernels:
        os.environ["RNNKIT_KERNELS"] = args.kernels
    if args.user_cells:
        from bench_cells import user_cells
        user_cells(args.shapes.split(","), args.modes.split(","), args.repeats, args.warmup, args.sample)
        return 0
    if args.peers:   # every thread count in a child process of its own (bench_peers.py)
        peers = bench_peers.run(args.shapes, args.cases, [int(n) for n in args.threads.split(",")],
                                args.repeats, args.warmup, args.sample)
        print(bench_peers.markdown(peers))
        if not args.no_save:
            for path in save_results({"peers": peers}, Path(args.results), update_latest=args.update_latest):
                print(f"wrote {path}")
        return 0

    import torch

    import rnnkit as rk

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    startup = {} if args.no_startup else startup_times()
    roof = sgemm_rates()
    try:
        from rnnkit import kernels as _k
        kmode = _k.mode()
    except Exception:  # noqa: BLE001 - an older rnnkit without kernels
        kmode = "reference"
    meta = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "rnnkit": rk.__version__, "kernels": kmode, "repeats": args.repeats,
        "loadavg_start": [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "isa": isa_in_effect(),
    }
    print(json.dumps(meta))
    if startup:
        print(f"import rnnkit {startup['import_s']:.3f} s | first calls (3 cells, infer+train, warm "
              f"cache) {startup['first_calls_all_cells_warm_cache_s']:.3f} s")
    print(f"sgemm 2048^3: numpy {roof['numpy_gflops']:.1f} GFLOP/s, torch {roof['torch_gflops']:.1f}")
    hdr = f"{'cell':5} {'shape':5} {'mode':5} {'rnnkit':>11} {'torch':>11} {'ratio':>6} " \
          f"{'GF/s rk':>8} {'GF/s t':>8} {'%roof rk':>8}"
    print(hdr)
    rows = []
    for sname in args.shapes.split(","):
        shape = SHAPES[sname]
        for cell in args.cells.split(","):
            for mode in args.modes.split(","):
                run_rk, run_t = runners(cell, shape, mode)
                t_rk, t_t = time_pair(run_rk, run_t, args.repeats, args.warmup, args.sample)
                m_rk, m_t = statistics.median(t_rk), statistics.median(t_t)
                fl = flops(cell, shape, mode)
                row = {"cell": cell, "shape": sname, "BTFH": shape, "mode": mode,
                       "rnnkit_s": m_rk, "torch_s": m_t, "ratio": m_rk / m_t,
                       "rnnkit_gflops": fl / m_rk / 1e9, "torch_gflops": fl / m_t / 1e9,
                       "rnnkit_roof_frac": fl / m_rk / 1e9 / roof["numpy_gflops"],
                       "rnnkit_samples": t_rk, "torch_samples": t_t}
                rows.append(row)
                print(f"{cell:5} {sname:5} {mode:5} {m_rk * 1e3:9.3f}ms {m_t * 1e3:9.3f}ms "
                      f"{row['ratio']:6.3f} {row['rnnkit_gflops']:8.1f} {row['torch_gflops']:8.1f} "
                      f"{100 * row['rnnkit_roof_frac']:7.1f}%", flush=True)
    meta["loadavg_end"] = [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None
    print(f"load average at the end: {meta['loadavg_end']}")
    result = {"meta": meta, "startup": startup, "sgemm": roof, "rows": rows}
    if not args.no_save:
        for path in save_results(result, Path(args.results), update_latest=args.update_latest):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
