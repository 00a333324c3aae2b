"""The instruction-set restriction of ``bench.py --isa avx2`` (and the check that it took
effect), the README table of a results file, and writing the results."""

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




def save_results(result: dict[str, Any], folder: Path, *, update_latest: bool) -> list[Path]:
    """Write ``<utc-timestamp>.json`` into ``folder`` (and ``latest.json`` only when asked)."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    written = []
    for name in [f"{stamp}.json"] + (["latest.json"] if update_latest else []):
        tmp = folder / (name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, folder / name)
        written.append(folder / name)
    return written
