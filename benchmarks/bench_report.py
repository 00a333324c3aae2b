"""The instruction-set restriction of ``bench.py --isa avx2`` (and the check that it took
effect), the README table of a results file, the tables of a ``bench.py --all`` run (with the
ISA each section's records show against the one asked for), and writing the results."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: the script that runs a command on the AVX2 path of Numba, OpenBLAS, numpy's SIMD loops and
#: PyTorch (ATen's vector kernels, oneDNN, MKL): the one recipe the tests' AVX2 run uses too
AVX2_SH = Path(__file__).resolve().parents[1] / "tools" / "avx2.sh"


def on_avx2(cmd: list[str]) -> list[str]:
    """``cmd`` run through :data:`AVX2_SH` (the interpreter it asks about numpy: ``cmd[0]``)."""
    return [str(AVX2_SH), *cmd]


def isa_in_effect() -> dict[str, Any]:
    """What each library runs here: the BLAS architectures (threadpoolctl), Numba's CPU name, and
    the ISA oneDNN names in verbose mode (a child process runs one small torch LSTM)."""
    out: dict[str, Any] = {"requested": os.environ.get("RNNKIT_BENCH_ISA", "native")}
    import ctypes

    import numpy  # noqa: F401 - its OpenBLAS: the sgemm roof, the reference path, Dense (not the kernels)

    cores = set()
    with open("/proc/self/maps") as fh:
        libs = {ln.split()[-1] for ln in fh if "openblas" in ln.lower() and "/" in ln}
    for lib in sorted(libs):
        for fn in ("openblas_get_corename", "scipy_openblas_get_corename64_", "openblas_get_corename64_"):
            try:
                f = getattr(ctypes.CDLL(lib), fn)
            except (OSError, AttributeError):
                continue
            f.restype = ctypes.c_char_p
            cores.add(f"{Path(lib).name}:{f().decode()}")
            break
    out["blas"] = sorted(cores) or "no OpenBLAS found"
    import numba

    out["numba_cpu"] = numba.config.CPU_NAME or "host"
    code = "import torch; torch.nn.LSTM(4, 4)(torch.zeros(3, 2, 4))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1"})
    isa = [ln.split("isa:", 1)[1].strip() for ln in proc.stdout.splitlines() if "isa:" in ln]
    out["onednn"] = isa[0] if isa else "not reported"
    if out["requested"] == "avx2":
        bad = [k for k, ok in (("blas", "haswell" in str(out["blas"]).lower()),
                               ("numba", out["numba_cpu"] == "haswell"),
                               ("onednn", "avx2" in out["onednn"].lower() and "512" not in out["onednn"]))
               if not ok]
        out["restrictions_not_in_effect"] = bad
        if bad:
            print(f"WARNING: the AVX2 restriction did not take effect for {bad}: {out}", flush=True)
    return out


def markdown(result: dict[str, Any]) -> str:
    """The README table of one results JSON."""
    m, st, sg = result["meta"], result.get("startup") or {}, result["sgemm"]
    lines = [f"Run {m['date_utc']} on {m['cpu']} ({m['cores']} cores), Python {m['python']}, numpy "
             f"{m['numpy']}, torch {m['torch']} ({m['torch_threads']} threads), rnnkit kernels "
             f"`{m['kernels']}`, {m['repeats']} interleaved samples per side; load average at start "
             f"{m.get('loadavg_start')}, at end {m.get('loadavg_end')}. sgemm 2048³: numpy "
             f"{sg['numpy_gflops']:.0f} GFLOP/s, torch {sg['torch_gflops']:.0f} GFLOP/s.", ""]
    if st:
        lines += [f"`import rnnkit`: {st['import_s']:.3f} s. First forward+backward of all three cells "
                  f"in a fresh process, warm Numba cache: {st['first_calls_all_cells_warm_cache_s']:.3f} s "
                  f"(the first process of the series, which may have compiled: "
                  f"{st['first_calls_all_cells_first_run_s']:.3f} s).", ""]
    lines += ["| cell | shape | mode | rnnkit | PyTorch | ratio | rnnkit GFLOP/s | PyTorch GFLOP/s "
              "| rnnkit % of sgemm |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]

    def t(v: float) -> str:
        return f"{v * 1e3:.3f} ms" if v < 1 else f"{v:.3f} s"

    for r in result["rows"]:
        lines.append(f"| {r['cell']} | {r['shape']} | {r['mode']} | {t(r['rnnkit_s'])} | {t(r['torch_s'])} "
                     f"| {r['ratio']:.2f} | {r['rnnkit_gflops']:.1f} | {r['torch_gflops']:.1f} "
                     f"| {100 * r['rnnkit_roof_frac']:.0f} % |")
    return "\n".join(lines)




def save_results(result: dict[str, Any], folder: Path, *, update_latest: bool,
                 prefix: str = "") -> list[Path]:
    """Write ``<prefix><utc-timestamp>.json`` into ``folder`` (and ``latest.json`` only when asked)."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    written = []
    for name in [f"{prefix}{stamp}.json"] + (["latest.json"] if update_latest else []):
        tmp = folder / (name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, folder / name)
        written.append(folder / name)
    return written


#: the sections of ``bench.py --all``, in the order they run, with their tables' titles
SECTIONS = {
    "inference": "Inference, rnnkit / peer (below 1: rnnkit faster)",
    "training": "Training step (forward + backward), rnnkit / PyTorch",
    "int8": "int8 inference, one thread each",
    "first_use": "First use per configuration (a new process: import, first fit and predict)",
    "serving": "Serving (`rnnkit serve`, loopback, LSTM(64))",
}


def _f(v: Any, fmt: str = ".2f") -> str:
    """``v`` formatted, or "n/a" when it was not measured (None, absent)."""
    return "n/a" if v is None else format(v, fmt)


def _kernels_label(isa: str, host_isa: str) -> str:
    """The ISA rnnkit's kernels ran on for a run of ``isa`` ("native" or "avx2")."""
    return "AVX2" if isa == "avx2" else f"{host_isa} (native)"


def _head(run: dict[str, Any], name: str) -> list[str]:
    """The title and the machine line of one section's table."""
    sec = run["sections"][name]
    kern = ", ".join(_kernels_label(i, run["host_isa"]) for i in sec["isas"])
    line = (f"Machine: {run['cpu']} ({run['cores']} cores, {run['host_isa']}); kernels ran on: {kern}; "
            f"load average {_f(sec['loadavg_start'])} at start, {_f(sec['loadavg_end'])} at end; "
            f"{sec['wall_s']:.0f} s.")
    out = [f"### {SECTIONS[name]}", "", line, ""]
    off = [] if sec.get("error") else _isa_not_in_effect(name, sec, run["host_isa"])
    if off:
        out += [f"WARNING: the ISA asked for did not take effect: {'; '.join(off)}.", ""]
    if sec.get("error"):
        out += [f"Not measured: {sec['error']}", ""]
    return out


def _isa_not_in_effect(name: str, sec: dict[str, Any], host_isa: str) -> list[str]:
    """What the section's own records say against the ISA its runs asked for: the ISA rnnkit's
    kernels were compiled for (``inference`` rows), the restrictions found not in effect
    (``training``), the int8 product that ran (``int8``: VNNI is AVX-512's)."""
    bad: list[str] = []
    want = {"native": host_isa, "avx2": "AVX2"}
    if name == "inference":
        for isa in sec["isas"]:
            got = {r.get("isa") for r in sec["data"][isa]["rows"]} - {want[isa]}
            bad += [f"{isa} run compiled for {g}" for g in sorted(map(str, got))]
    elif name == "training":
        for r in sec["data"]["runs"]:
            miss = r["meta"]["isa"].get("restrictions_not_in_effect")
            if miss:
                bad.append(f"{r['meta']['isa']['requested']} run: {', '.join(miss)} not restricted")
    elif name == "int8":
        bad += [f"avx2 run used the {r['layout']} product at {r['shape']}" for r in sec["data"]["rows"]
                if r.get("isa") == "avx2" and r.get("layout") == "vnni"]
    return bad


def _group_head(first: list[str], isas: list[str], cols: list[str]) -> list[str]:
    """A table's header and rule: the ``first`` columns, then ``cols`` once per ISA."""
    head = "| " + " | ".join(first) + " |"
    for isa in isas:
        tag = f"{isa}: " if len(isas) > 1 else ""
        head += "".join(f" {tag if k == 0 else ''}{c} |" for k, c in enumerate(cols))
    return [head, "|" + "---|" * len(first) + "---:|" * (len(cols) * len(isas))]


def _inference(run: dict[str, Any]) -> list[str]:
    sec = run["sections"]["inference"]
    isas = sec["isas"]
    out = _group_head(["case", "shape", "threads"], isas, ["/ onnxruntime", "/ PyTorch", "/ PyTorch int8"])
    keys = list(dict.fromkeys((r["case"], r["shape"], r["threads"]) for i in isas
                              for r in sec["data"][i]["rows"]))
    for case, shape, n in keys:
        line = f"| {case} | {shape} | {n} |"
        for isa in isas:
            rows: list[dict[str, Any]] = sec["data"][isa]["rows"]
            r = next((x for x in rows if (x["case"], x["shape"], x["threads"]) == (case, shape, n)), {})
            line += (f" {_f(r.get('rnnkit_over_onnxruntime'))} | {_f(r.get('rnnkit_over_torch'))} "
                     f"| {_f(r.get('rnnkit_over_torch_int8'))} |")
        out.append(line)
    others = "; ".join(f"{isa} {n} thread{'s' if int(n) != 1 else ''} {cores}" for isa in isas
                       for n, cores in sec["data"][isa].get("others_cores", {}).items())
    out += ["", "onnxruntime has no ISA switch: it runs on the host's ISA in every column group."
            + (f" Cores the machine's other processes used meanwhile: {others}." if others else "")]
    return out


def _training(run: dict[str, Any]) -> list[str]:
    sec = run["sections"]["training"]
    by_isa = {r["meta"]["isa"]["requested"]: r for r in sec["data"]["runs"]}
    isas = [i for i in sec["isas"] if i in by_isa]
    out = _group_head(["cell", "shape"], isas, ["rnnkit", "PyTorch", "rnnkit / PyTorch"])
    keys = list(dict.fromkeys((r["cell"], r["shape"]) for i in isas for r in by_isa[i]["rows"]))
    for cell, shape in keys:
        line = f"| {cell} | {shape} |"
        for isa in isas:
            r = next((r for r in by_isa[isa]["rows"] if (r["cell"], r["shape"]) == (cell, shape)), None)
            line += (" n/a | n/a | n/a |" if r is None else
                     f" {r['rnnkit_s'] * 1e3:.3f} ms | {r['torch_s'] * 1e3:.3f} ms | {r['ratio']:.2f} |")
        out.append(line)
    return out


def _int8(run: dict[str, Any]) -> list[str]:
    sec = run["sections"]["int8"]
    rows = sec["data"]["rows"]
    isas = sec["isas"]
    out = [f"{sec['data']['cell']} layer; rnnkit int8 / rnnkit float32 and rnnkit int8 / PyTorch int8 "
           "(`quantize_dynamic`), below 1: rnnkit int8 faster; max abs error of each int8 output "
           "against its own float32 over the whole sequence.", ""]
    out += _group_head(["shape"], isas, ["int8 product", "rnnkit int8", "/ float32", "/ PyTorch int8",
                                         "error", "PyTorch int8 error"])
    for shape in dict.fromkeys(r["shape"] for r in rows):
        line = f"| {shape} |"
        for isa in isas:
            r = next((r for r in rows if r["shape"] == shape and r.get("isa") == isa), None)
            if r is None:
                line += " n/a |" * 6
                continue
            f32, t8 = r.get("rk_f32/rk_int8"), r.get("torch_int8/rk_int8")
            line += (f" {r['layout']} | {r['rk_int8_ms']:.3f} ms | {_f(None if f32 is None else 1 / f32)} "
                     f"| {_f(None if t8 is None else 1 / t8)} | {r['err_rk_int8']:.1e} "
                     f"| {_f(r.get('err_torch_int8'), '.1e')} |")
        out.append(line)
    return out


def _first_use(run: dict[str, Any]) -> list[str]:
    sec = run["sections"]["first_use"]
    out: list[str] = []
    for isa in sec["isas"]:
        d = sec["data"][isa]
        empty = any(r["empty"] for r in d["rows"])
        out += [f"{_kernels_label(isa, run['host_isa'])}: `rnnkit compile` "
                + ("on this environment's cache (compiling only what it lacked)" if d["own_cache"]
                   else "on a new empty cache") + f" {d['compile_s']:.1f} s, {d['compile_cpu_s']:.1f} CPU s; "
                "then per configuration a new process on that cache"
                + (", and one on an empty cache of its own" if empty else " (the empty-cache runs: "
                   "only without --quick)") + ". Seconds: import + first fit and predict (int8: "
                "quantize and predict); CPU s of the process.", ""]
        head = ["config", "dtype", "installed cache s", "CPU s", "compiled", "loaded"]
        head += ["empty cache s", "CPU s", "compiled"] if empty else []
        out += ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
        for r in d["rows"]:
            w, c = r["installed"], r["empty"]
            line = (f"| {r['config']} | {r['dtype']} | {w['import'] + w['first']:.2f} | {w['cpu']:.2f} "
                    f"| {w['compiled']:.0f} | {w['loaded']:.0f} |")
            if empty:
                line += (" n/a | n/a | n/a |" if c is None else
                         f" {c['import'] + c['first']:.2f} | {c['cpu']:.2f} | {c['compiled']:.0f} |")
            out.append(line)
        out.append("")
    return out[:-1]


def _serving(run: dict[str, Any]) -> list[str]:
    sec = run["sections"]["serving"]
    out: list[str] = []
    for isa in sec["isas"]:
        d = sec["data"][isa]
        h, ws = d["http"], d["ws"]
        out += [f"{_kernels_label(isa, run['host_isa'])}: HTTP predict, {h['clients']} clients, "
                f"{h['seconds']:g} s per phase, median of {h['rounds']} round(s); WebSocket, "
                f"{ws['streams']} streams in a closed loop for {ws['seconds']:g} s. "
                f"`model.predict` alone: {h['model_predict_rows_per_s_batch32']} rows/s on batches of 32.",
                "", "| what | server | per s | p99 ms | server CPU µs a request / step |",
                "|---|---|---:|---:|---:|"]
        for m in h["medians"]:
            out.append(f"| HTTP {m['phase']} | {m['server']} | {m['requests_per_s']:.0f} requests "
                       f"| {m['p99_ms']:.1f} | {m['server_cpu_us_per_request']:.0f} |")
        out.append(f"| WebSocket steps | {'fast path' if ws['ws_fast_path'] else 'app'} "
                   f"| {ws['steps_per_s']:.0f} steps | {_f(ws.get('p99_ms'), '.1f')} "
                   f"| {ws['server_cpu_us_per_step']:.0f} |")
        out.append("")
    return out[:-1]


def markdown_all(run: dict[str, Any]) -> str:
    """The tables of one ``bench.py --all`` results file: a run line, then per section its
    machine line (CPU, the ISA the kernels ran, load average at its start and end) and table."""
    out = [f"`bench.py {' '.join(run['argv'])}`, {run['date_utc']}, {run['wall_s'] / 60:.0f} min in all; "
           f"{run['cpu']} ({run['cores']} cores, {run['host_isa']}); load average {_f(run['loadavg_start'])} "
           f"at start, {_f(run['loadavg_end'])} at end; "
           + ", ".join(f"{k} {v}" for k, v in run.get("versions", {}).items()) + ".", ""]
    tables = {"inference": _inference, "training": _training, "int8": _int8, "first_use": _first_use,
              "serving": _serving}
    for name, table in tables.items():
        sec = run["sections"].get(name)
        if sec is None:
            continue
        out += _head(run, name)
        if not sec.get("error"):
            out += table(run) + [""]
    return "\n".join(out).rstrip()
