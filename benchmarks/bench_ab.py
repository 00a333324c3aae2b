"""The built-in cells timed in two source trees, child processes alternating (run by hand,
never a test): ``python benchmarks/bench_ab.py OLD_SRC NEW_SRC native|avx2 ROUNDS S1,S2,S3,S4``.

Each child imports rnnkit from one tree (``PYTHONPATH``) with one kernel thread and times
``layer.forward`` (inference) and forward + backward with a ones gradient (training) of
SimpleRNN, LSTM and GRU (``return_sequences=True``) at each shape, the median of its calls in
a fixed time budget, in process CPU time (``time.process_time``, so other load on the
machine moves the figures less than wall time would). Rounds alternate the order of the
trees; the table gives the median of the per-round medians and new/old (below 1: the new
tree is faster). ``avx2`` runs the children under ``tools/avx2.sh`` (Numba, OpenBLAS, numpy
and PyTorch on their AVX2 paths).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from bench_report import on_avx2

SHAPES = {"S1": (1, 100, 16, 32), "S2": (32, 50, 32, 64), "S3": (64, 100, 128, 256),
          "S4": (128, 200, 256, 512)}
CELLS = ("LSTM", "GRU", "SimpleRNN")


def child(shapes: list[str]) -> None:
    import numpy as np

    import rnnkit as rk
    out = {}
    for s in shapes:
        B, T, F, H = SHAPES[s]
        x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32)
        for c in CELLS:
            layer = getattr(rk, c)(H, return_sequences=True)
            layer.build((None, T, F))
            budget = 0.6 if s != "S4" else 2.0

            def inf(layer: Any = layer, x: Any = x) -> None:
                layer.forward(x, rk.Ctx.inference())

            def tr(layer: Any = layer, x: Any = x) -> None:
                ctx = rk.Ctx.training()
                y = layer.forward(x, ctx)
                layer.backward(np.ones_like(y), ctx)

            for mode, fn in (("infer", inf), ("train", tr)):
                fn()
                fn()
                ts: list[float] = []
                t_end = time.perf_counter() + budget
                while time.perf_counter() < t_end or len(ts) < 3:
                    t0 = time.process_time()
                    fn()
                    ts.append(time.process_time() - t0)
                ts.sort()
                out[f"{s} {c} {mode}"] = ts[len(ts) // 2]
    print("RESULT" + json.dumps(out), flush=True)


def main() -> None:
    a, b, isa = sys.argv[1], sys.argv[2], sys.argv[3]
    rounds, shapes = int(sys.argv[4]), sys.argv[5].split(",")
    env = {**os.environ, "RNNKIT_KERNEL_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    run = on_avx2 if isa == "avx2" else (lambda cmd: cmd)   # tools/avx2.sh: the one AVX2 recipe
    res: dict[str, list[dict[str, float]]] = {a: [], b: []}
    for r in range(rounds):
        for src in ((a, b) if r % 2 == 0 else (b, a)):
            p = subprocess.run(run([sys.executable, __file__, "child", ",".join(shapes)]),
                               env={**env, "PYTHONPATH": src}, capture_output=True, text=True)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
            if not line:
                print(p.stderr[-2000:])
                sys.exit(1)
            res[src].append(json.loads(line[0][6:]))
    print(f"isa={isa} rounds={rounds} load={os.getloadavg()[0]:.2f}  new/old (median of per-round medians), "
          "ms old -> new")
    for k in res[a][0]:
        old = sorted(d[k] for d in res[a])[rounds // 2]
        new = sorted(d[k] for d in res[b])[rounds // 2]
        print(f"{k:22s} {old * 1e3:9.3f} -> {new * 1e3:9.3f}  x{new / old:.3f}")


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2].split(","))
    else:
        main()
