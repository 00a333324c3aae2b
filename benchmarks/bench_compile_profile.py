"""Where a cold ``rnnkit demo`` spends its compile time: per compiled function (signature) and per
phase (run by hand, never a test).

Runs the demo's fit in THIS process on an empty Numba cache (a new temporary directory; compiling
ahead in a child is turned off, so every kernel compiles here) and prints, per specialisation
that was compiled, its own CPU time (the time of the functions it compiled on the way, nested
compiles, left out) split into Numba's phases — typing (``NopythonTypeInference`` and the
rewrites around it), inlining (``InlineOverloads``, ``InlineInlinables``, ``InlineClosureLikeCalls``
...), lowering (``NativeLowering`` less the LLVM work inside it), other Numba passes — and
LLVM (function passes, module passes, machine code), then the totals. Also lists every
specialisation the demo compiles (function and argument types). With ``--ahead`` the child
that compiles the backward ahead stays on, and the table is what the fitting process still
compiles itself beside it.

Usage::

    python benchmarks/bench_compile_profile.py            # the demo's fit, 600 epochs at most
    python benchmarks/bench_compile_profile.py --epochs 2 # compile, then stop soon
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

_TMP = tempfile.mkdtemp(prefix="rnnkit-prof-")
os.environ["NUMBA_CACHE_DIR"] = _TMP
if "--ahead" not in sys.argv[1:]:
    os.environ["RNNKIT_COMPILE_AHEAD"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from numba.core import ccallback, codegen, event  # noqa: E402


def _phase(name: str) -> str:
    """The phase of a Numba compiler pass (by its registered name; the event adds `` [qualname]``)."""
    name = name.split(" ", 1)[0]
    if "type_inference" in name or name in ("annotate_types", "nopython_rewrites"):
        return "typing"
    if "inline" in name or "unroll" in name:
        return "inline"
    if name == "native_lowering":
        return "lower"
    return "numba other"


class _Prof:
    """Nested timers: a stack of open compiles; every second goes to the innermost one."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []        # [key, phase stack]
        self.own: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.count: dict[str, int] = defaultdict(int)
        self.last = time.process_time()
        self.phase: list[str] = []

    def _tick(self) -> None:
        now = time.process_time()
        if self.stack:
            ph = self.phase[-1] if self.phase else "numba other"
            self.own[self.stack[-1][0]][ph] += now - self.last
        self.last = now

    def enter(self, key: str) -> None:
        self._tick()
        self.stack.append([key, len(self.phase)])
        self.count[key] += 1

    def leave(self) -> None:
        self._tick()
        _, depth = self.stack.pop()
        del self.phase[depth:]

    def push(self, ph: str) -> None:
        self._tick()
        self.phase.append(ph)

    def pop(self) -> None:
        self._tick()
        if self.phase:
            self.phase.pop()


P = _Prof()


def _key(ev: Any) -> str:
    d = ev.data["dispatcher"]
    py = getattr(d, "py_func", None)
    mod = str(getattr(py, "__module__", None) or "?").rsplit(".", 1)[-1]
    name = f"{mod}.{py.__qualname__}" if py is not None else repr(d)
    args = ", ".join(str(a) for a in ev.data["args"])
    return f"{name}({args})"


class _Compiles(event.Listener):
    def on_start(self, ev: Any) -> None:
        P.enter(_key(ev))

    def on_end(self, ev: Any) -> None:
        P.leave()


class _Passes(event.Listener):
    def on_start(self, ev: Any) -> None:
        P.push(_phase(ev.data["name"]))

    def on_end(self, ev: Any) -> None:
        P.pop()


def _wrap(cls: type, name: str) -> None:
    orig = getattr(cls, name)

    def wrapped(*a: Any, **k: Any) -> Any:
        P.push("llvm")
        try:
            return orig(*a, **k)
        finally:
            P.pop()

    setattr(cls, name, wrapped)


for _m in ("_optimize_functions", "_optimize_final_module", "_finalize_specific", "emit_native_object",
           "serialize_using_object_code"):
    for _c in (codegen.CPUCodeLibrary, codegen.JITCodeLibrary):
        if _m in _c.__dict__:
            _wrap(_c, _m)
_cfunc_compile = ccallback.CFunc.compile


def _timed_cfunc_compile(self: Any) -> Any:   # (a cfunc's compile sends no numba:compile event)
    P.enter(f"cfunc {self._pyfunc.__qualname__}{self._sig}")
    try:
        return _cfunc_compile(self)
    finally:
        P.leave()


ccallback.CFunc.compile = _timed_cfunc_compile
event.register("numba:compile", _Compiles())
event.register("numba:run_pass", _Passes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=0, help="epochs at most (0: the demo's)")
    ap.add_argument("--part", default="demo", choices=("demo", "train", "back", "infer", "products"),
                    help="the demo's fit (default), or one part of the compile-ahead split alone: the "
                         "demo's LSTM cell's kernels as rnnkit.kernels._warm.exercise runs them")
    ap.add_argument("--ahead", action="store_true",
                    help="keep the demo's compile-ahead child: the table is then what THIS process "
                         "compiles itself (what it loads from the child's cache is not listed)")
    ap.add_argument("--gc", default="on", choices=("on", "off", "high"),
                    help="Python's cyclic garbage collector during the run: on (default), off, or "
                         "high thresholds (gc.set_threshold(100000, 50, 100))")
    args = ap.parse_args()
    if args.gc == "off":
        gc.disable()
    elif args.gc == "high":
        gc.set_threshold(100_000, 50, 100)
    from rnnkit.cli import _demo
    from rnnkit.cli._model import TrainConfig, build_network

    t0 = time.perf_counter()
    if args.part != "demo":
        from rnnkit.kernels import _driver, _warm

        layer = build_network(_demo.CONFIG, _demo.WINDOW, 1).layers[0]
        if args.part == "products":
            _driver.products(layer.dtype)
        else:
            _warm.exercise(layer.cell, layer.input_dim, layer.dtype, args.part)
    else:
        if args.epochs:
            _demo.CONFIG = TrainConfig(**{**_demo.CONFIG.__dict__, "epochs": args.epochs})
        with tempfile.TemporaryDirectory() as out:
            _demo.run_demo(out, verbose=False, plots=False)
    wall = time.perf_counter() - t0
    phases = ("typing", "inline", "lower", "numba other", "llvm")
    tot = defaultdict(float)
    rows = []
    for k, v in P.own.items():
        s = sum(v.values())
        rows.append((s, k, v))
        for ph in phases:
            tot[ph] += v.get(ph, 0.0)
    rows.sort(reverse=True)
    print(f"{'own s':>7} " + " ".join(f"{p:>7}" for p in ("typing", "inline", "lower", "other", "llvm"))
          + "  specialisation")
    for s, k, v in rows:
        print(f"{s:7.2f} " + " ".join(f"{v.get(p, 0.0):7.2f}" for p in phases) + f"  {k[:150]}")
    print(f"{sum(tot.values()):7.2f} " + " ".join(f"{tot[p]:7.2f}" for p in phases)
          + f"  TOTAL over {len(rows)} specialisations; demo wall {wall:.2f} s")


if __name__ == "__main__":
    main()
