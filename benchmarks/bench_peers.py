"""rnnkit's inference against the deployment runtimes: onnxruntime on the graph ``rk.save_onnx``
writes for the same layer, PyTorch float32 and PyTorch int8 (``quantize_dynamic``), at one and
more threads (run by hand or through ``bench.py --peers``, never a test).

Cases, each a return_sequences layer of the shape's (B, T, F, H), float32:

==============  ===================================================================================
``lstm``        ``rk.LSTM(H)``                         torch ``nn.LSTM(F, H)``
``gru``         ``rk.GRU(H, reset_after=True)``         torch ``nn.GRU(F, H)``
``lstm-proj``   ``rk.LSTM(H, proj_size=H // 2)``        torch ``nn.LSTM(F, H, proj_size=H // 2)``
``lstm-len``    ``rk.LSTM(H)`` under ``ctx.set_mask(lengths=...)`` (lengths T, T-1, ... down to
                T/2 and again); torch on ``pack_padded_sequence`` (unpacked, zeros past each
                length); the ONNX graph with ``lengths=True`` (``sequence_lens``)
``bilstm``      ``rk.Bidirectional(rk.LSTM(H))``         torch ``nn.LSTM(F, H, bidirectional=True)``
==============  ===================================================================================

The torch modules get rnnkit's weights (``rnnkit.io.to_torch_state``); onnxruntime loads the
graph of a Sequential holding the layer. Before timing, every peer's output is compared with
rnnkit's (float32 tolerance for the float peers; the int8 model's largest difference is
recorded, not checked). Then the peers run INTERLEAVED (the order rotates every repeat), and the
medians are reported, with the ratios rnnkit / peer (below 1: rnnkit is faster). The int8 column
is PyTorch's ``quantize_dynamic`` of the same float module (``nn.LSTM`` / ``nn.GRU``; a projected
LSTM is not supported by it and reads ``n/a``; nor is it by ONNX's LSTM operator, so
``save_onnx`` refuses it and the onnxruntime column reads ``n/a`` too).

Threads: every thread count runs in its own child process, so ``RNNKIT_KERNEL_THREADS`` is set
before rnnkit is imported; the child also calls ``torch.set_num_threads`` and gives onnxruntime
``intra_op_num_threads`` (and ``inter_op_num_threads=1``) of that count, with its worker
threads' spin-wait off (``session.intra_op.allow_spinning`` = 0): left on, onnxruntime's idle
worker keeps a core busy after each of its runs and slows whichever peer is timed next (on a
2-core machine, PyTorch's two-thread S3 LSTM measured 45.6 ms beside it and 18.4 ms without).
PyTorch's own OpenMP workers spin too, for several ms after each call: every timed sample starts
after :data:`WARM_S` of untimed calls of its peer, in which they go idle. The one-thread and
two-thread rows come from different processes run one after the other: on a shared machine,
compare them only with the cores other processes used meanwhile (printed, and ``others_cores``
in the JSON).

Usage::

    python benchmarks/bench_peers.py --shapes S1,S2 --threads 1,2 --repeats 5
    python benchmarks/bench_peers.py --cases lstm,gru --shapes S3 --threads 2 --json out.json
    python benchmarks/bench_peers.py --markdown out.json     # the README tables of a results file
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SHAPES: dict[str, tuple[int, int, int, int]] = {
    "S1": (1, 100, 16, 32), "S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256), "S4": (128, 200, 256, 512)}
CASES = ("lstm", "gru", "lstm-proj", "lstm-len", "bilstm")
PEERS = ("rnnkit", "onnxruntime", "torch", "torch_int8")


#: the ISAs of ``--isa``
ISAS = {"native": ("native",), "avx2": ("avx2",), "both": ("native", "avx2")}
#: the script that puts a command on the AVX2 code path of every library but onnxruntime
AVX2_SH = Path(__file__).resolve().parent.parent / "tools" / "avx2.sh"


def lengths_of(B: int, T: int) -> np.ndarray:
    """T, T-1, ... down to about T/2, then again: the lengths of the ``lstm-len`` case."""
    span = max(1, T - T // 2)
    return np.array([T - (b % span) for b in range(B)], np.int64)


def _layer(case: str, H: int, F: int) -> Any:
    import rnnkit as rk

    if case == "gru":
        return rk.GRU(H, reset_after=True, return_sequences=True, seed=1, input_dim=F)
    if case == "lstm-proj":
        return rk.LSTM(H, proj_size=H // 2, return_sequences=True, seed=1, input_dim=F)
    if case == "bilstm":
        return rk.Bidirectional(rk.LSTM(H, return_sequences=True, seed=1))
    return rk.LSTM(H, return_sequences=True, seed=1, input_dim=F)


def _torch_module(case: str, layer: Any, F: int, H: int) -> Any:
    import torch

    import rnnkit as rk

    if case == "bilstm":
        state = {**rk.io.to_torch_state(layer.forward_layer, "_l0"),
                 **rk.io.to_torch_state(layer.backward_layer, "_l0_reverse")}
        mod: Any = torch.nn.LSTM(F, H, batch_first=True, bidirectional=True)
    else:
        state = rk.io.to_torch_state(layer, "_l0")
        if case == "gru":
            mod = torch.nn.GRU(F, H, batch_first=True)
        else:
            mod = torch.nn.LSTM(F, H, batch_first=True, proj_size=H // 2 if case == "lstm-proj" else 0)
    mod.load_state_dict({k: torch.from_numpy(np.array(v, np.float32)) for k, v in state.items()})
    return mod.eval()


def case_runners(case: str, shape: tuple[int, int, int, int], threads: int,
                 folder: str) -> tuple[dict[str, Callable[[], Any] | None], dict[str, float]]:
    """One callable per peer (None where the peer cannot run the case) and each peer's largest
    difference from rnnkit's output (SystemExit when a float peer differs beyond 1e-4)."""
    import onnxruntime as ort
    import torch

    import rnnkit as rk

    B, T, F, H = shape
    x = np.random.default_rng(7).standard_normal((B, T, F)).astype(np.float32)
    layer = _layer(case, H, F)
    model = rk.Sequential([layer])
    model.build((None, T, F))
    lens = lengths_of(B, T) if case == "lstm-len" else None

    def run_rk() -> Any:
        ctx = rk.Ctx.inference()
        if lens is not None:
            ctx.set_mask(lengths=lens)
        return layer.forward(x, ctx)

    path = os.path.join(folder, f"{case}-{B}x{T}x{F}x{H}.onnx")
    run_ort: Callable[[], Any] | None = None
    try:
        rk.save_onnx(model, path, lengths=lens is not None)
    except rk.UnsupportedFeatureError as e:       # ONNX's LSTM has no projection
        print(f"onnxruntime n/a for {case}: {e}", flush=True)
    else:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")   # (see the docstring)
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed: dict[str, Any] = {sess.get_inputs()[0].name: x}
        if lens is not None:
            feed["lengths"] = lens

        def run_ort() -> Any:
            return sess.run(None, feed)[0]

    mod = _torch_module(case, layer, F, H)
    xt = torch.from_numpy(x)
    int8 = None if case == "lstm-proj" else torch.ao.quantization.quantize_dynamic(
        torch.nn.ModuleList([mod]), {torch.nn.LSTM, torch.nn.GRU}, dtype=torch.qint8)[0]

    def torch_run(m: Any) -> Callable[[], Any]:
        if lens is None:
            def run() -> Any:
                with torch.inference_mode():
                    return m(xt)[0]
            return run
        lt = torch.from_numpy(lens)

        def run_packed() -> Any:
            with torch.inference_mode():
                packed = torch.nn.utils.rnn.pack_padded_sequence(xt, lt, batch_first=True,
                                                                 enforce_sorted=False)
                out, _ = torch.nn.utils.rnn.pad_packed_sequence(m(packed)[0], batch_first=True,
                                                                total_length=T)
                return out
        return run_packed

    runs: dict[str, Callable[[], Any] | None] = {
        "rnnkit": run_rk, "onnxruntime": run_ort, "torch": torch_run(mod),
        "torch_int8": None if int8 is None else torch_run(int8)}
    want = np.asarray(run_rk())
    errs: dict[str, float] = {}
    for name, fn in runs.items():
        if fn is None or name == "rnnkit":
            continue
        got = np.asarray(fn())
        errs[name] = float(np.max(np.abs(got - want)))
        if name != "torch_int8" and not errs[name] <= 1e-4:
            raise SystemExit(f"{case} {shape}: {name} differs from rnnkit by {errs[name]:.2e}")
    return runs, errs


#: seconds of untimed calls of a peer before each of its timed samples (at least one call): the
#: threads of the peer timed before it stop spinning meanwhile (PyTorch's OpenMP workers, GNU
#: libgomp, spin-wait several ms after each parallel region, keeping the second core busy) and the
#: core is back at full speed after any pause. Measured on the 2-core AMD EPYC: rnnkit's two-thread
#: S3 LSTM took 33.7 ms (median) in the call right after a PyTorch call, 26.8 ms from 10 ms after
#: it; a sample at S3 is one call, so without this nearly every rnnkit sample paid it. (And a
#: call after 50 ms idle took 1.2-1.3x as long, back to speed after about 10 ms of calls.)
WARM_S = 0.02
#: the clocks of ``--clock``: the wall clock, or the calling thread's CPU time (one thread only:
#: every peer then runs in that thread; on a loaded machine the time it waits for a core is left
#: out. Not the process's CPU time: PyTorch's oneDNN LSTM leaves threads spinning after its
#: calls even at ``set_num_threads(1)``, which counted 0.2 ms into the next peer's S1 sample)
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}
_clock = CLOCKS["wall"]


def warm(f: Callable[[], Any], seconds: float) -> None:
    """Call ``f`` (untimed) for about ``seconds``, at least once."""
    end = time.perf_counter() + seconds
    f()
    while time.perf_counter() < end:
        f()


def time_peers(runs: dict[str, Callable[[], Any] | None], repeats: int, warmup: int,
               sample_s: float) -> dict[str, float | None]:
    """Interleaved medians (seconds a call); each sample is the mean of an inner loop of about
    ``sample_s`` seconds, after :data:`WARM_S` of untimed calls, and the order of the peers
    rotates every repeat."""
    live = [(k, f) for k, f in runs.items() if f is not None]
    for _ in range(warmup):
        for _, f in live:
            f()
    inner = {}
    for k, f in live:
        t0 = time.perf_counter()
        f()
        inner[k] = max(1, min(1000, int(sample_s / max(time.perf_counter() - t0, 1e-7))))
    acc: dict[str, list[float]] = {k: [] for k, _ in live}
    for r in range(repeats):
        for k, f in live[r % len(live):] + live[:r % len(live)]:
            n = inner[k]
            warm(f, WARM_S)
            t0 = _clock()
            for _ in range(n):
                f()
            acc[k].append((_clock() - t0) / n)
    return {k: (statistics.median(acc[k]) if k in acc else None) for k in runs}


def child(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows of one thread count (this process was started with its RNNKIT_KERNEL_THREADS)."""
    import warnings

    import torch

    warnings.filterwarnings("ignore", category=DeprecationWarning)   # torch.ao's pointer to torchao
    warnings.filterwarnings("ignore", message=".*quantiz.*")
    torch.set_num_threads(args.threads_one)
    global _clock
    _clock = CLOCKS[args.clock]
    from rnnkit.kernels._isa import has_avx512
    isa = "AVX-512" if has_avx512() else "AVX2"     # what rnnkit's kernels were compiled for
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for sname in args.shapes.split(","):
            for case in args.cases.split(","):
                runs, errs = case_runners(case, SHAPES[sname], args.threads_one, folder)
                med = time_peers(runs, args.repeats, args.warmup, args.sample)
                row = {"case": case, "shape": sname, "threads": args.threads_one, "isa": isa,
                       **{f"{k}_s": v for k, v in med.items()}, "max_abs_diff": errs}
                rk_s = med["rnnkit"]
                for k in PEERS[1:]:
                    v = med.get(k)
                    row[f"rnnkit_over_{k}"] = None if v is None or rk_s is None else rk_s / v
                rows.append(row)
                cells = "  ".join(f"{k} {'n/a' if v is None else f'{v * 1e3:.3f}'}" for k, v in med.items())
                print(f"{isa:7} {args.threads_one}t {case:9} {sname}  ms: {cells}", flush=True)
    return rows


def run(shapes: str, cases: str, threads: list[int], repeats: int, warmup: int,
        sample: float, isas: tuple[str, ...] = ("native",), clock: str = "wall") -> dict[str, Any]:
    """Every thread count in its own child process (``clock`` "cpu": one thread only), per ISA
    of ``isas`` ("native": this machine's; "avx2": the child under ``tools/avx2.sh``, rnnkit's
    kernels, numpy and PyTorch on AVX2 while onnxruntime, which has no such switch, stays on the
    host's ISA); the merged results, each row naming the ISA rnnkit's kernels were compiled for (``isa``)."""
    if clock == "cpu" and any(n != 1 for n in threads):
        raise SystemExit(f"--clock cpu counts the calling thread only: it needs --threads 1, got {threads}")
    rows: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    others_cores: dict[str, float] = {}     # per ISA and thread count: what the rest of the machine used
    for isa in isas:
        for n in threads:
            with tempfile.TemporaryDirectory() as d:
                out = Path(d) / "rows.json"
                env = {**os.environ, "RNNKIT_KERNEL_THREADS": str(n), "OMP_NUM_THREADS": str(n),
                       "PYTHON": sys.executable}
                cmd = [sys.executable, __file__, "--child", str(out), "--threads-one", str(n), "--shapes",
                       shapes, "--cases", cases, "--repeats", str(repeats), "--warmup", str(warmup),
                       "--sample", str(sample), "--clock", clock]
                before = _busy_seconds(), _children_seconds(), time.perf_counter()
                subprocess.run([str(AVX2_SH), *cmd] if isa == "avx2" else cmd, env=env, check=True)
                others = _busy_seconds() - before[0] - (_children_seconds() - before[1])
                key = f"{isa} {n}" if len(isas) > 1 else str(n)
                others_cores[key] = round(max(0.0, others) / (time.perf_counter() - before[2]), 2)
                print(f"{key}t: other processes used {others_cores[key]} cores meanwhile", flush=True)
                rows += json.loads(out.read_text())
    return {"threads": threads, "shapes": shapes.split(","), "cases": cases.split(","), "isas": list(isas),
            "clock": clock, "repeats": repeats, "versions": versions(), "cpu": _cpu(),
            "host_isa": _host_isa(),
            "cores": os.cpu_count(), "loadavg_start_end": [round(load[0], 2), round(os.getloadavg()[0], 2)],
            "others_cores": others_cores, "rows": rows}


def _host_isa() -> str:
    """"AVX-512" when the CPU has AVX-512F (``/proc/cpuinfo``), else "AVX2"."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next((ln for ln in lines if ln.startswith("flags")), "")
    except OSError:
        flags = ""
    return "AVX-512" if " avx512f" in flags else "AVX2"


def _busy_seconds() -> float:
    """CPU seconds every process of the machine has used (``/proc/stat``; 0 elsewhere)."""
    try:
        f = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")     # all but idle and iowait


def _children_seconds() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def versions() -> dict[str, str]:
    """The peers' versions (read from the installed distributions, nothing imported)."""
    out = {}
    for dist in ("rnnkit", "numpy", "torch", "onnxruntime"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def markdown(peers: dict[str, Any]) -> str:
    """One table per thread count: time of rnnkit and of each peer, and rnnkit / peer; with
    several ISAs (``--isa both``) one column group per ISA rnnkit's kernels ran on, side by side
    (onnxruntime stays on the host's ISA in every group)."""
    v = peers.get("versions", {})
    out: list[str] = [f"{peers.get('cpu', 'CPU not recorded')} ({peers.get('cores')} cores"
                      + (f", {peers['host_isa']}" if peers.get("host_isa") else "") + "), load average "
                      f"at start and end {peers.get('loadavg_start_end')}; "
                      + ", ".join(f"{k} {x}" for k, x in v.items()) + f"; {peers['repeats']} interleaved "
                      "samples per peer, medians"
                      + ("; the calling thread's CPU time" if peers.get("clock") == "cpu" else "")
                      + (f"; cores other processes used meanwhile, per thread count: {peers['others_cores']}"
                         if peers.get("others_cores") else "") + ".", ""] if v else []
    isas = list(dict.fromkeys(r.get("isa", "") for r in peers["rows"]))    # in the order they ran

    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 1e3:.3f} ms"

    def x(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    for n in peers["threads"]:
        head, rule = "| case | shape |", "|---|---|"
        for isa in isas:
            tag = f"{isa}: " if len(isas) > 1 else ""
            head += (f" {tag}rnnkit | onnxruntime | PyTorch | PyTorch int8 | / onnxruntime | / PyTorch "
                     "| / PyTorch int8 |")
            rule += "---:|---:|---:|---:|---:|---:|---:|"
        out += [f"Inference, {n} thread{'s' if n > 1 else ''} each (rnnkit / peer below 1: rnnkit faster; "
                "int8: PyTorch `quantize_dynamic`"
                + ("; ISA: the one rnnkit, numpy and PyTorch ran on, onnxruntime on the host's"
                   if len(isas) > 1 else "") + "):", "", head, rule]
        keys = list(dict.fromkeys((r["case"], r["shape"]) for r in peers["rows"] if r["threads"] == n))
        for case, shape in keys:
            line = f"| {case} | {shape} |"
            for isa in isas:
                r = next((r for r in peers["rows"] if r["threads"] == n and r["case"] == case
                          and r["shape"] == shape and r.get("isa", "") == isa), None)
                if r is None:
                    line += " |" * 7
                    continue
                line += (f" {ms(r['rnnkit_s'])} | {ms(r['onnxruntime_s'])} | {ms(r['torch_s'])} "
                         f"| {ms(r['torch_int8_s'])} | {x(r['rnnkit_over_onnxruntime'])} "
                         f"| {x(r['rnnkit_over_torch'])} | {x(r['rnnkit_over_torch_int8'])} |")
            out.append(line)
        out.append("")
    return "\n".join(out).rstrip()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="S1,S2,S3,S4")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--threads", default="1,2", help="thread counts, one child process each")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--sample", type=float, default=0.05, help="seconds per timing sample")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                   help="cpu: the calling thread's CPU time, one thread only (a loaded machine; see CLOCKS)")
    p.add_argument("--isa", choices=("native", "avx2", "both"), default="native",
                   help="this machine's ISA, AVX2 (tools/avx2.sh), or both side by side")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--markdown", metavar="JSON", help="print the tables of a results file and exit")
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--threads-one", type=int, default=1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.markdown:
        data = json.loads(Path(args.markdown).read_text())
        print(markdown(data.get("peers", data)))
        return 0
    if args.child is not None:
        rows = child(args)
        args.child.write_text(json.dumps(rows))
        return 0
    bad = [c for c in args.cases.split(",") if c not in CASES]
    if bad:
        raise SystemExit(f"unknown cases {bad}; known: {list(CASES)}")
    result = run(args.shapes, args.cases, [int(t) for t in args.threads.split(",")], args.repeats,
                 args.warmup, args.sample, ISAS[args.isa], args.clock)
    print(markdown(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
