"""Samples per second of data-parallel LSTM training at S3 on 1 and 2 MPI processes.

    python benchmarks/bench_distributed.py                 # 3 interleaved pairs of runs, ~2 minutes
    python benchmarks/bench_distributed.py --repeats 1 --steps 4

Model: ``LSTM(256)`` on (B, T, F) = S3 (64, 100, 128) float32, then ``Dense(1)``, MSE, Adam;
``fit(batch_size=64)`` over ``steps`` global batches per epoch (one warm-up epoch, then
``epochs`` timed epochs, each one ``fit`` call; one process runs the plain ``fit``). Every
process gets ONE kernel thread and one BLAS thread
(``RNNKIT_KERNEL_THREADS=1``, ``OMP_NUM_THREADS=1``, ``OPENBLAS_NUM_THREADS=1``), so N
processes use N cores. The 1- and 2-process runs alternate (``repeats`` pairs, the order flipped
every pair) and each side's number is the median. Each 2-process run also splits every rank's
step into computing and the allreduces (the transfer plus the wait for the slower rank), and a
last single process times forward+backward on B and on B/2 rows, alternating: their ratio is
the most two quiet cores can gain. The 2-process run also times the gradient
allreduce alone (the bytes every rank sends per step, the seconds per Allreduce) beside the
compute per step, which is what decides the scaling across hosts. It is run by hand, never by
the tests; results go to ``benchmarks/results/distributed-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
B, T, F, H = 64, 100, 128, 256


def worker(steps: int, epochs: int, out: str) -> None:
    import numpy as np

    import rnnkit as rk
    from rnnkit.distributed._buffers import FlatLayout

    dist = rk.distributed.MPI()
    spent = time_phases()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(B * steps, T, F)).astype(np.float32)
    y = rng.normal(size=(B * steps, 1)).astype(np.float32)
    model = rk.Sequential([rk.LSTM(H, "tanh", seed=1), rk.Dense(1, "linear", seed=2)])
    model.compile(rk.Adam(1e-3), "mse")
    model.fit(x[:2 * B], y[:2 * B], 1, batch_size=B, seed=0, distributed=dist)  # warm-up (compiles)
    times = []
    spent.update(compute=0.0, communicate=0.0, steps=0.0)
    for e in range(epochs):   # one process: the plain fit, what a user compares against
        dist.comm.Barrier()
        t0 = time.perf_counter()
        model.fit(x, y, 1, batch_size=B, seed=e, distributed=dist if dist.size > 1 else None)
        times.append(time.perf_counter() - t0)
    phases = dist.allgather({k: v / max(1.0, spent["steps"]) for k, v in spent.items() if k != "steps"})
    layout = FlatLayout(model)
    reps = 20
    dist.comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        layout.allreduce(dist)
    allreduce_s = (time.perf_counter() - t0) / reps
    if dist.is_root:
        Path(out).write_text(json.dumps({
            "ranks": dist.size, "epoch_seconds": times, "samples_per_epoch": B * steps,
            "samples_per_s": B * steps / statistics.median(times),
            "step_seconds": statistics.median(times) / steps,
            "allreduce_bytes_per_rank": layout.nbytes, "allreduce_seconds": allreduce_s,
            "params": model.param_count(), "seconds_per_step_by_rank": phases,
        }))


def halves(repeats: int, out: str) -> None:
    """One process: forward+backward of the S3 model on B rows and on B/2 rows, alternating
    (the compute of one rank of 1 and of 2), median seconds of each."""
    import numpy as np

    import rnnkit as rk

    rng = np.random.default_rng(0)
    x = rng.normal(size=(B, T, F)).astype(np.float32)
    y = rng.normal(size=(B, 1)).astype(np.float32)
    model = rk.Sequential([rk.LSTM(H, "tanh", seed=1), rk.Dense(1, "linear", seed=2)])
    model.compile(rk.Adam(1e-3), "mse")
    model.fit(x, y, 1)
    got: dict[int, list[float]] = {B: [], B // 2: []}
    for r in range(2 * repeats):
        for b in ((B, B // 2) if r % 2 == 0 else (B // 2, B)):
            t0 = time.perf_counter()
            ctx = rk.Ctx.training(0)
            _, g = model.loss.value_and_grad(y[:b], model.forward(x[:b], ctx))
            model.backward(g, ctx)
            got[b].append(time.perf_counter() - t0)
    Path(out).write_text(json.dumps({str(b): statistics.median(v) for b, v in got.items()}))


def time_phases() -> dict[str, float]:
    """Accumulate, per process, the seconds of each step (``compute``: the whole step less its
    allreduces) and of the step's allreduces (``communicate``: the transfer plus the wait for the
    slower rank)."""
    import rnnkit.models._trainer as trainer
    from rnnkit.distributed._mpi import MPI

    spent = {"compute": 0.0, "communicate": 0.0, "steps": 0.0}
    train_step, allreduce_sum = trainer.train_step, MPI.allreduce_sum

    def timed_step(*args: Any) -> Any:
        t0, c0 = time.perf_counter(), spent["communicate"]
        try:
            return train_step(*args)
        finally:
            spent["compute"] += time.perf_counter() - t0 - (spent["communicate"] - c0)
            spent["steps"] += 1

    def timed_allreduce(self: Any, buf: Any) -> None:
        t0 = time.perf_counter()
        allreduce_sum(self, buf)
        spent["communicate"] += time.perf_counter() - t0

    trainer.train_step = timed_step  # type: ignore[assignment]
    MPI.allreduce_sum = timed_allreduce  # type: ignore[method-assign]
    return spent


def mpiexec() -> str:
    here = Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        sys.exit("bench_distributed: no mpiexec found; pip install rnnkit[mpi]")
    return found


def run(n: int, steps: int, epochs: int, mode: str = "--worker") -> dict[str, Any]:
    env = dict(os.environ, RNNKIT_KERNEL_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    src = HERE.parent / "src"
    env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([mpiexec(), "-n", str(n), sys.executable, __file__, mode, "--steps", str(steps),
                        "--epochs", str(epochs), "--repeats", "3", "--out", str(out)], check=True, env=env)
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``; 0 elsewhere)."""
    try:
        with open("/proc/stat") as fh:
            f = [int(v) for v in fh.readline().split()[1:]]
    except OSError:
        return 0.0
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def own_seconds() -> float:
    """CPU seconds of this process and its finished children (the benchmark's own runs)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def machine() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        model = next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    return f"{model} ({os.cpu_count()} cores)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8, help="global batches per timed epoch (default 8)")
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per run (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved pairs of 1- and 2-process runs")
    p.add_argument("--no-save", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--halves", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.steps, a.epochs, a.out)
        return
    if a.halves:
        halves(a.repeats, a.out)
        return
    load0 = os.getloadavg()
    busy0, own0, wall0 = busy_seconds(), own_seconds(), time.perf_counter()
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for r in range(a.repeats):
        for n in ((1, 2) if r % 2 == 0 else (2, 1)):
            runs[n].append(run(n, a.steps, a.epochs))
            print(f"  {n} process(es): {runs[n][-1]['samples_per_s']:.1f} samples/s", flush=True)
    half = run(1, a.steps, a.epochs, "--halves")
    load1 = os.getloadavg()
    others = max(0.0, (busy_seconds() - busy0) - (own_seconds() - own0)) / (time.perf_counter() - wall0)
    one = statistics.median(x["samples_per_s"] for x in runs[1])
    two = statistics.median(x["samples_per_s"] for x in runs[2])
    step1 = statistics.median(x["step_seconds"] for x in runs[1])
    ar = statistics.median(x["allreduce_seconds"] for x in runs[2])
    nbytes = runs[2][0]["allreduce_bytes_per_rank"]
    res = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
           "python": platform.python_version(), "shape": {"B": B, "T": T, "F": F, "H": H},
           "load_average_start": load0, "load_average_end": load1, "other_processes_cores": others,
           "runs": runs,
           "samples_per_s": {"1": one, "2": two}, "ratio": two / one, "step_seconds_1_process": step1,
           "allreduce_bytes_per_rank": nbytes, "allreduce_seconds_2_ranks": ar,
           "forward_backward_seconds": half, "quiet_core_ceiling": half[str(B)] / (half[str(B // 2)] + ar)}
    print(f"S3 LSTM training (B={B}, T={T}, F={F}, H={H}), one kernel thread per process, "
          f"on {res['machine']}")
    print(f"load average at start {[round(v, 2) for v in load0]}, at end {[round(v, 2) for v in load1]}; "
          f"other processes used {others:.2f} cores on average meanwhile")
    print(f"  1 process : {one:8.1f} samples/s  ({step1 * 1e3:.0f} ms per step of {B})")
    print(f"  2 processes: {two:8.1f} samples/s  ratio {two / one:.2f}x")
    print(f"  allreduce per step: {nbytes / 1e6:.2f} MB per rank, {ar * 1e3:.2f} ms on 2 local ranks "
          f"({100 * ar / step1:.1f} % of the 1-process step)")
    print(f"  forward+backward in one process, alternating: {half[str(B)] * 1e3:.0f} ms on {B} rows, "
          f"{half[str(B // 2)] * 1e3:.0f} ms on {B // 2}: on two quiet cores a step could take "
          f"{half[str(B)] / (half[str(B // 2)] + ar):.2f}x less than on one (the ceiling)")
    for k, x in enumerate(runs[2]):
        parts = ", ".join(f"rank {r}: {p['compute'] * 1e3:.0f} ms computing its {B // 2} rows + "
                          f"{p['communicate'] * 1e3:.0f} ms in the allreduces"
                          for r, p in enumerate(x["seconds_per_step_by_rank"]))
        print(f"  2-process run {k + 1}, per step: {parts}")
    if not a.no_save:
        (HERE / "results").mkdir(exist_ok=True)
        path = HERE / "results" / f"distributed-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        path.write_text(json.dumps(res, indent=1))
        print(f"saved {path}")


if __name__ == "__main__":
    main()
