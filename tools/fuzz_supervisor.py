"""Run fuzz cases in supervised worker processes and report what came out, by surface.

A *surface* is a function ``case(rng: random.Random) -> str | None`` found in a module's
``SURFACES`` dict (by default every ``tests/test_fuzz*.py`` that defines one; a module's
``warmup()``, if any, runs once per worker before its first case). One case is one
call with ``random.Random(seed)``; its outcome is

- ``ok`` (returned; a returned string is a tag, e.g. ``"pending:<check>"`` for a hostile input
  that a check still missing somewhere lets through, counted apart),
- ``typed`` (raised an ``rnnkit.Error`` or a ``TypeError``: what hostile input should get),
- ``untyped`` (any other exception; its type, message and seed are kept),
- ``invariant`` (an ``AssertionError``: the case checked a value and it was wrong),
- ``hang`` (still running after ``--timeout`` seconds: the worker is killed and replaced),
- ``memory`` (the worker's resident memory passed ``--mem-mb``: killed and replaced).

Workers are separate processes (``--workers``, default 2) reading cases on stdin and answering
one JSON line each; the supervisor polls each worker's resident memory every 50 ms, and a
worker also runs under an address-space limit (``--as-mb``, default 8192) as a last guard. Each
worker resets its peak-RSS counter (``/proc/self/clear_refs``) before every case and reports
the case's peak, so the report's peak RSS is per case, not per process.

    nice -n 19 python tools/fuzz_supervisor.py --cases 20000 --json fuzz-report.json

The seeds are ``--seed`` + 0, 1, 2, ...; cases go round-robin over the surfaces, so a report is
reproducible and a finding is replayed with ``--surface NAME --first-seed SEED --cases 1``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
Surface = Callable[[random.Random], Any]


# -- worker side ---------------------------------------------------------------------------------
def load_surfaces(paths: list[str]) -> dict[str, Surface]:
    """``SURFACES`` of every module file in ``paths`` (names must not repeat)."""
    sys.path[:0] = [str(TESTS), str(ROOT / "src")]
    out: dict[str, Surface] = {}
    for p in paths:
        spec = importlib.util.spec_from_file_location(Path(p).stem, p)
        assert spec is not None and spec.loader is not None
        mod: ModuleType = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        for name, fn in getattr(mod, "SURFACES", {}).items():
            if name in out:
                raise SystemExit(f"surface {name!r} is defined twice ({p})")
            out[name] = fn
        warm = getattr(mod, "warmup", None)
        if callable(warm):                   # compile/cache what the cases use before timing them
            warm()
    return out


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")            # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass


def run_one(fn: Surface, seed: int) -> dict[str, Any]:
    """One case in this process: its outcome (see the module docstring)."""
    import numpy as np

    import rnnkit as rk

    typed = (rk.Error, TypeError)
    _reset_peak()
    t0 = time.perf_counter()
    out: dict[str, Any] = {"status": "ok"}
    try:
        with np.errstate(all="ignore"):
            tag = fn(random.Random(seed))
        if isinstance(tag, str) and tag:
            out["tag"] = tag
    except typed:
        out["status"] = "typed"
    except AssertionError as e:
        out.update(status="invariant", error=f"AssertionError: {str(e)[:300]}",
                   where=_where(e))
    except Exception as e:  # noqa: BLE001 - what the fuzzing is looking for
        out.update(status="untyped", error=f"{type(e).__module__}.{type(e).__name__}: {str(e)[:300]}",
                   where=_where(e))
    out["secs"] = time.perf_counter() - t0
    out["peak_kb"] = _status_kb("VmHWM")
    return out


def _where(e: BaseException) -> str:
    """The innermost frame inside rnnkit (else the innermost one) of ``e``'s traceback."""
    frames = traceback.extract_tb(e.__traceback__)
    inside = [f for f in frames if "/rnnkit/" in f.filename]
    f = (inside or frames)[-1]
    return f"{Path(f.filename).name}:{f.lineno}"


def worker(paths: list[str]) -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)                 # what the cases print (a progress line...) goes nowhere
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the whole process
    surfaces = load_surfaces(paths)
    proto.write(json.dumps({"ready": sorted(surfaces)}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        res = run_one(surfaces[job["surface"]], int(job["seed"]))
        proto.write(json.dumps(res) + "\n")


# -- supervisor side -----------------------------------------------------------------------------
class Worker:
    """One worker process and its pipes."""

    def __init__(self, paths: list[str], as_mb: int) -> None:
        def limit() -> None:
            os.setsid()
            if as_mb > 0:
                resource.setrlimit(resource.RLIMIT_AS, (as_mb << 20, as_mb << 20))

        mods = [a for p in paths for a in ("--module", p)]
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", *mods],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
            preexec_fn=limit, cwd=str(ROOT))
        self.buf = ""

    def rss_kb(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def read_line(self, deadline: float, mem_kb: int) -> tuple[str | None, str]:
        """The next line, or (None, "hang" | "memory" | "died")."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            if "\n" in self.buf:
                line, self.buf = self.buf.split("\n", 1)
                return line, ""
            now = time.monotonic()
            if now > deadline:
                return None, "hang"
            if mem_kb and self.rss_kb() > mem_kb:
                return None, "memory"
            r, _, _ = select.select([fd], [], [], min(0.05, deadline - now))
            if r:
                chunk = os.read(fd, 1 << 16).decode()
                if not chunk:
                    return None, "died"
                self.buf += chunk

    def send(self, job: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()


def _start(paths: list[str], as_mb: int) -> tuple[Worker, list[str]]:
    w = Worker(paths, as_mb)
    line, why = w.read_line(time.monotonic() + 300, 0)
    if line is None:
        w.kill()
        raise SystemExit(f"a worker did not start ({why})")
    return w, json.loads(line)["ready"]


def supervise(args: argparse.Namespace) -> dict[str, Any]:
    paths = args.module or [str(p) for p in sorted(TESTS.glob("test_fuzz*.py"))]
    pool: list[Worker] = []
    names: list[str] = []
    for _ in range(args.workers):
        w, names = _start(paths, args.as_mb)
        pool.append(w)
    names = [n for n in names if args.surface is None or n in args.surface]
    if not names:
        raise SystemExit(f"no surface selected; there are {names}")
    jobs = [{"surface": names[i % len(names)], "seed": args.first_seed + i} for i in range(args.cases)]
    report: dict[str, Any] = {n: {"cases": 0, "ok": 0, "typed": 0, "untyped": 0, "invariant": 0, "hang": 0,
                                  "memory": 0, "died": 0, "pending": {}, "peak_rss_mb": 0.0, "max_secs": 0.0,
                                  "findings": []} for n in names}
    busy: dict[int, tuple[dict[str, Any], float]] = {}
    todo = list(reversed(jobs))
    t0 = time.monotonic()
    done = 0
    saved = t0
    while todo or busy:
        if args.json and args.save_every and time.monotonic() - saved >= args.save_every:
            write_report(_report(report, done, t0, args, partial=True), args.json)
            saved = time.monotonic()
        for k, w in enumerate(pool):
            if k not in busy and todo:
                job = todo.pop()
                w.send(job)
                busy[k] = (job, time.monotonic())
        for k in list(busy):
            w = pool[k]
            job, start = busy[k]
            line, why = w.read_line(min(start + args.timeout, time.monotonic() + 0.02), args.mem_mb << 10)
            if line is None and why == "hang" and time.monotonic() < start + args.timeout:
                continue                                  # not yet due: poll the next worker
            rep = report[job["surface"]]
            rep["cases"] += 1
            if line is None:
                rep[why] += 1
                rss = round(w.rss_kb() / 1024, 1)
                rep["peak_rss_mb"] = max(rep["peak_rss_mb"], rss)
                rep["findings"].append({"seed": job["seed"], "status": why, "rss_mb": rss})
                w.kill()
                pool[k], _ = _start(paths, args.as_mb)
            else:
                res = json.loads(line)
                st = res["status"]
                tag = res.get("tag", "")
                if st == "ok" and tag.startswith("pending:"):
                    rep["pending"][tag] = rep["pending"].get(tag, 0) + 1
                rep[st] += 1
                rep["peak_rss_mb"] = max(rep["peak_rss_mb"], round(res["peak_kb"] / 1024, 1))
                rep["max_secs"] = max(rep["max_secs"], round(res["secs"], 3))
                if st in ("untyped", "invariant"):
                    rep["findings"].append({"seed": job["seed"], "status": st, "error": res["error"],
                                            "where": res["where"]})
            del busy[k]
            done += 1
            if args.progress and done % args.progress == 0:
                print(f"{done}/{len(jobs)} cases, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    for w in pool:
        w.kill()
    return _report(report, done, t0, args, partial=False)


def _report(report: dict[str, Any], done: int, t0: float, args: argparse.Namespace, *,
            partial: bool) -> dict[str, Any]:
    """The report of the ``done`` cases run so far: per surface, its counts and one example per
    distinct finding with its count (``report`` itself is left as it is). A partial report
    (written while the run goes on) says ``"partial": true``; ``cases`` counts the cases run."""
    out: dict[str, Any] = {}
    for name, rep in report.items():
        seen: dict[str, dict[str, Any]] = {}
        for f in rep["findings"]:
            key = f"{f['status']} {f.get('error', '')[:120]} {f.get('where', '')}"
            seen.setdefault(key, {**f, "count": 0})["count"] += 1
        out[name] = {**rep, "pending": dict(rep["pending"]), "findings": list(seen.values())}
    return {"surfaces": out, "cases": done, "partial": partial, "wall_s": round(time.monotonic() - t0, 1),
            "timeout_s": args.timeout, "mem_cap_mb": args.mem_mb, "workers": args.workers}


def write_report(rep: dict[str, Any], path: str) -> None:
    """``rep`` as JSON at ``path``, atomically (a temporary file beside it, then renamed), so a
    reader never sees half a report while the run writes its partial ones."""
    tmp = Path(f"{path}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(rep, indent=1))
    os.replace(tmp, path)


def render(rep: dict[str, Any]) -> str:
    cols = ("cases", "ok", "typed", "untyped", "invariant", "hang", "memory", "died")
    lines = [f"{'surface':<24}" + "".join(f"{c:>10}" for c in cols)
             + f"{'pending':>10}{'peak MB':>10}{'max s':>8}"]
    tot = dict.fromkeys(cols, 0)
    for name, r in rep["surfaces"].items():
        pend = sum(r["pending"].values())
        lines.append(f"{name:<24}" + "".join(f"{r[c]:>10}" for c in cols)
                     + f"{pend:>10}{r['peak_rss_mb']:>10.0f}{r['max_secs']:>8.2f}")
        for c in cols:
            tot[c] += r[c]
    lines.append(f"{'total':<24}" + "".join(f"{tot[c]:>10}" for c in cols))
    lines.append(f"{rep['cases']} cases in {rep['wall_s']} s, {rep['workers']} workers, kill over "
                 f"{rep['timeout_s']} s or {rep['mem_cap_mb']} MB")
    for name, r in rep["surfaces"].items():
        for tag, n in sorted(r["pending"].items()):
            lines.append(f"  {name}: {n} x {tag}")
        for f in r["findings"]:
            said = (f"killed at {f['rss_mb']} MB" if "rss_mb" in f
                    else f"{f.get('error', '')} {f.get('where', '')}")
            lines.append(f"  {name}: {f['count']} x {f['status']} (seed {f['seed']}) {said}".rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=20000 if os.environ.get("RNNKIT_FUZZ") == "long" else 1000,
                    help="cases in all (default 1000; 20000 with RNNKIT_FUZZ=long)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a case may run")
    ap.add_argument("--mem-mb", type=int, default=1024, help="resident memory a worker may reach")
    ap.add_argument("--as-mb", type=int, default=8192, help="address-space limit of a worker (0: none)")
    ap.add_argument("--module", action="append", help="a file defining SURFACES (repeatable)")
    ap.add_argument("--surface", action="append", help="run only these surfaces (repeatable)")
    ap.add_argument("--first-seed", "--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the report here")
    ap.add_argument("--progress", type=int, default=0, help="print a line every N cases")
    ap.add_argument("--save-every", type=float, default=60.0,
                    help="with --json, also write the partial report every this many seconds "
                         "(0: only at the end)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.module or [])
        return 0
    rep = supervise(args)
    print(render(rep))
    if args.json:
        write_report(rep, args.json)
    bad = sum(r[k] for r in rep["surfaces"].values()
              for k in ("untyped", "invariant", "hang", "memory", "died"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
