"""The first ``rnnkit demo`` on an empty kernel cache against a fresh PyTorch process doing the
same fit (run by hand, never a test).

Each measurement is a new process, timed from its launch to its exit, and to the end of its
first epoch:

- ``rnnkit cold``: ``rnnkit demo --no-plots`` with ``NUMBA_CACHE_DIR`` pointing at a new empty
  directory (every kernel compiled; with two cores the backward kernels in a second process);
- ``rnnkit cold, one process``: the same with ``RNNKIT_COMPILE_AHEAD=0``;
- ``rnnkit warm``: the demo again on the cache the cold run filled;
- ``rnnkit compile``: ``rnnkit compile --cells lstm`` on a new empty cache (the "first run" of
  a user who ran it after installing), and ``demo after compile``: the demo on that cache;
- ``pip install -e``: ``pip install --no-deps -e`` of this tree into the running environment
  (pip's build environment, then the build backend's compile of the LSTM's kernels) with a new
  empty ``NUMBA_CACHE_DIR``, and ``demo after install``: the demo on that cache, the first run
  a user who followed the README makes; ``pip install -e, no compile``: the same install with
  ``RNNKIT_COMPILE_AT_INSTALL=0``, so the difference is what the install spends compiling;
- ``baseline cold``: with ``--baseline SRC``, the cold demo of another checkout's ``src``
  (e.g. an older commit from ``git archive``), interleaved with this one's;
- ``pytorch``: the same data (the demo's windows, split and scaling), ``nn.LSTM(1, 24)`` and
  ``nn.Linear(24, 1)`` in float32, Adam(0.01), mean squared error, batches of 64 shuffled each
  epoch, the validation loss after every epoch, for as many epochs as the rnnkit run trained,
  the best weights restored, the held-out forecasts computed (torch's default threads unless
  ``--torch-threads``).

The CPU seconds (the process and its children) tell how much work a run is on a machine that
others share, where the wall-clock times stretch. Every run repeats ``--repeats`` times
(interleaved); medians are printed, with the ratio of the cold demo to PyTorch. The model
files of the cold and warm runs are compared byte for byte.

``--configs`` measures instead every configuration of the built-in cells (``rnnkit compile``'s:
SimpleRNN, LSTM, LSTM with ``proj_size``, GRU in both forms, each in float32 and float64 and
both directions; int8 for those with an int8 form): per configuration, a new process that
builds a small model (a ``Bidirectional`` layer over the cell and a ``Dense``), fits it one
epoch and predicts (int8: quantizes it and predicts), timed from its launch to the end of
``predict`` (the import apart), once on its own new empty cache (``empty cache``: every kernel
compiled there, ``RNNKIT_COMPILE_AHEAD=0``) and once on the cache that one ``rnnkit compile``
(what an editable install runs) filled (``installed cache``), with the kernels the process
compiled and those it loaded (Numba's dispatcher counts) and its CPU seconds; then the seconds of
that ``rnnkit compile`` (the install's share). The outputs of the two processes are compared
bit for bit.

Usage::

    python benchmarks/bench_coldstart.py                 # 3 repeats
    python benchmarks/bench_coldstart.py --configs       # per configuration, empty and installed cache
    python benchmarks/bench_coldstart.py --repeats 1 --skip single
    python benchmarks/bench_coldstart.py --baseline /tmp/old/src --skip single,torch,compile
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from rnnkit.cli._compile import CONFIGS, INT8  # noqa: E402  (this tree's configurations)

#: the demo, with the wall-clock time of the end of its first epoch written to stderr
RNNKIT = """
import sys, time
import rnnkit.models._progress as progress
_done = progress.EpochBar.epoch_done
def epoch_done(self, *args, **kwargs):
    if not getattr(progress, "_first_seen", False):
        progress._first_seen = True
        print(f"FIRST_EPOCH {time.time():.6f}", file=sys.stderr, flush=True)
    _done(self, *args, **kwargs)
progress.EpochBar.epoch_done = epoch_done
from rnnkit.cli import main
sys.exit(main(["demo", "--no-plots", "--out", sys.argv[1]]))
"""

TORCH = """
import sys, time
import numpy as np
import torch
from rnnkit import datasets
from rnnkit.cli import _demo
from rnnkit.cli._prepare import prepare

epochs = int(sys.argv[1])
if int(sys.argv[2]) > 0:
    torch.set_num_threads(int(sys.argv[2]))
torch.manual_seed(0)
sun = datasets.sunspots()
prep = prepare(sun.values[:, None], sun.values, ["SUNACTIVITY"], "SUNACTIVITY", window=_demo.WINDOW,
               horizon=1, val_split=_demo.VAL_SPLIT, n_test=_demo.TEST_YEARS, transform=_demo.TRANSFORM,
               index_name="YEAR", what="sunspots")
f32 = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
xt, yt, xv, yv, xs = f32(prep.train.x), f32(prep.train.y), f32(prep.val.x), f32(prep.val.y), f32(prep.test.x)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(1, _demo.CONFIG.units, batch_first=True)
        self.out = torch.nn.Linear(_demo.CONFIG.units, 1)
    def forward(self, x):
        return self.out(self.lstm(x)[0][:, -1])

net = Net()
opt = torch.optim.Adam(net.parameters(), lr=_demo.CONFIG.lr, betas=(0.9, 0.999), eps=1e-8)
loss_fn = torch.nn.MSELoss()
g = torch.Generator().manual_seed(0)
best, best_state = float("inf"), None
B = _demo.CONFIG.batch_size
for epoch in range(epochs):
    net.train()
    for idx in torch.randperm(len(xt), generator=g).split(B):
        opt.zero_grad()
        loss = loss_fn(net(xt[idx]), yt[idx])
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        val = float(loss_fn(net(xv), yv))
    if val < best:
        best, best_state = val, {k: v.clone() for k, v in net.state_dict().items()}
    if epoch == 0:
        print(f"FIRST_EPOCH {time.time():.6f}", file=sys.stderr, flush=True)
net.load_state_dict(best_state)
with torch.no_grad():
    pred = net(xs).numpy()
print(f"best validation loss {best:.4f}, {len(pred)} forecasts")
"""


#: one configuration's first use: argv = configuration, dtype, output file; prints a JSON line
FIRST = """
import json, sys, time
t0 = time.perf_counter()
import numba
import numpy as np
import rnnkit as rk
from rnnkit.cli._compile import CONFIGS
t_import = time.perf_counter() - t0
name, dtype, out = sys.argv[1:]
rng = np.random.default_rng(0)
ft = "float32" if dtype == "int8" else dtype
x, y = rng.standard_normal((32, 6, 3)).astype(ft), rng.standard_normal((32, 1)).astype(ft)
t1 = time.perf_counter()
LAYERS = {"lstm": lambda **k: rk.LSTM(8, **k), "gru": lambda **k: rk.GRU(8, reset_after=False, **k),
          "rnn": lambda **k: rk.SimpleRNN(8, **k),
          "gru-after": lambda **k: rk.GRU(8, reset_after=True, **k),
          "lstm-proj": lambda **k: rk.LSTM(8, proj_size=4, **k)}
assert set(LAYERS) == set(CONFIGS), "a configuration of rnnkit compile without its layer here"
layer = LAYERS[name](seed=1, dtype=ft)
model = rk.Sequential([rk.Bidirectional(layer), rk.Dense(1, seed=2, dtype=ft)])
model.build(rk.Shape.with_free_batch(x.shape))
if dtype == "int8":
    pred = rk.quantize(model).predict(x, verbose=0)
else:
    model.compile(rk.Adam(0.01), "mse")
    model.fit(x, y, 1, batch_size=16, seed=0, verbose=0)
    pred = model.predict(x, verbose=0)
first = time.perf_counter() - t1
np.save(out, pred)
found = {}   # (a dispatcher is imported into several modules: each counted once)
for mod_name, mod in list(sys.modules.items()):
    if mod_name.startswith("rnnkit.kernels"):
        for f in vars(mod).values():
            if isinstance(f, numba.core.registry.CPUDispatcher):
                found[id(f)] = f
hits = sum(sum(f.stats.cache_hits.values()) for f in found.values())
misses = sum(sum(f.stats.cache_misses.values()) for f in found.values())
print(json.dumps({"import": t_import, "first": first, "compiled": misses, "loaded": hits}))
"""


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(code: str | None, args: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """(seconds to exit, seconds to the end of the first epoch, CPU seconds of the process and
    its children, stdout) of a new process (``python -c code args``; ``python args`` without code)."""
    c0, t0 = _cpu(), time.time()
    cmd = [sys.executable, *(["-c", code] if code is not None else []), *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    total, cpu = time.time() - t0, _cpu() - c0
    m = re.search(r"FIRST_EPOCH (\d+\.\d+)", r.stderr)
    first = float(m.group(1)) - t0 if m else float("nan")
    return total, first, cpu, r.stdout


def first_use(name: str, dtype: str, env: dict[str, str], out: Path) -> dict[str, float]:
    """One configuration's first use in a new process (:data:`FIRST`), with its wall-clock and
    CPU seconds to exit."""
    c0, t0 = _cpu(), time.time()
    r = subprocess.run([sys.executable, "-c", FIRST, name, dtype, str(out)], env=env, capture_output=True,
                       text=True, check=True)
    got: dict[str, float] = json.loads(r.stdout.strip().splitlines()[-1])
    return {**got, "exit": time.time() - t0, "cpu": _cpu() - c0}


def configs(base: dict[str, str], tmp: Path, *, empty: bool = True,
            own_cache: bool = False) -> dict[str, Any]:
    """The ``--configs`` table (see the module docstring); ``empty`` False leaves out the runs on
    an empty cache, ``own_cache`` runs ``rnnkit compile`` on this environment's kernel cache (its
    ``NUMBA_CACHE_DIR``, or the package's own) instead of a new empty one. Returns the rows and
    the compile's seconds."""
    installed = tmp / "installed"
    envi = {**base} if own_cache else {**base, "NUMBA_CACHE_DIR": str(installed)}
    load0 = os.getloadavg()[0]
    inst = timed(None, ["-m", "rnnkit", "compile"], envi)
    rows = []
    for dt in ("float32", "float64", "int8"):
        for name in CONFIGS:
            if dt == "int8" and name not in INT8:
                continue
            cold: dict[str, float] | None = None
            if empty:
                env0 = {**base, "NUMBA_CACHE_DIR": str(tmp / f"empty-{name}-{dt}"),
                        "RNNKIT_COMPILE_AHEAD": "0"}
                cold = first_use(name, dt, env0, tmp / f"cold-{name}-{dt}.npy")
            warm = first_use(name, dt, envi, tmp / f"warm-{name}-{dt}.npy")
            same = None if cold is None else ((tmp / f"cold-{name}-{dt}.npy").read_bytes()
                                              == (tmp / f"warm-{name}-{dt}.npy").read_bytes())
            rows.append((name, dt, cold, warm, same))
            print(f"{name:<11}{dt:<8} empty cache " + ("not run" if cold is None else
                  f"{cold['import'] + cold['first']:6.2f} s ({cold['compiled']:.0f} compiled, "
                  f"{cold['cpu']:.1f} CPU s)") + f"; installed cache {warm['import'] + warm['first']:5.2f} s "
                  f"({warm['cpu']:.1f} CPU s, {warm['compiled']:.0f} compiled, {warm['loaded']:.0f} loaded)"
                  + ("" if same is None else f"; outputs {'identical' if same else 'DIFFER'}"), flush=True)
    load1 = os.getloadavg()[0]
    print(f"\n{os.cpu_count()} cores, load average {load0:.1f} at the start, {load1:.1f} at the "
          f"end; first use = import + first fit and predict (int8: quantize and predict), seconds")
    print(f"{'config':<12}{'dtype':<9}{'empty cache':>12}{'CPU s':>8}{'compiled':>9}"
          f"{'installed':>11}{'CPU s':>8}{'compiled':>9}{'loaded':>8}  bits")

    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for name, dt, cold, warm, same in rows:
        c = cold or {}
        print(f"{name:<12}{dt:<9}{num(c['import'] + c['first'] if c else None, '>12.2f')}"
              f"{num(c.get('cpu'), '>8.1f')}{num(c.get('compiled'), '>9.0f')}"
              f"{warm['import'] + warm['first']:>11.2f}{warm['cpu']:>8.1f}{warm['compiled']:>9.0f}"
              f"{warm['loaded']:>8.0f}  {'-' if same is None else 'same' if same else 'DIFFER'}")
    print(f"rnnkit compile (every configuration, what an editable install adds): {inst[0]:.1f} s, "
          f"{inst[2]:.1f} CPU s" + (" (on this environment's cache, compiling only what it lacked)"
                                   if own_cache else ""))
    return {"loadavg_start_end": [round(load0, 2), round(load1, 2)], "own_cache": own_cache,
            "compile_s": inst[0], "compile_cpu_s": inst[2],
            "rows": [{"config": name, "dtype": dt, "empty": cold, "installed": warm, "same_bits": same}
                     for name, dt, cold, warm, same in rows]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma-separated runs to leave out: single, warm, torch, "
                                                "compile, install")
    ap.add_argument("--baseline", default=None, metavar="SRC",
                    help="also time the cold demo of this src directory (interleaved)")
    ap.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: its default)")
    ap.add_argument("--configs", action="store_true",
                    help="per configuration: first use on an empty and on an installed cache")
    ap.add_argument("--no-empty", action="store_true",
                    help="--configs: leave out the runs on an empty cache (the installed cache only)")
    ap.add_argument("--own-cache", action="store_true",
                    help="--configs: run `rnnkit compile` on this environment's kernel cache instead "
                         "of a new empty one (quick when it is already filled)")
    ap.add_argument("--json", default=None, metavar="PATH", help="--configs: also write the rows as JSON")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    base.pop("RNNKIT_COMPILE_AHEAD", None)
    if args.configs:
        with tempfile.TemporaryDirectory() as tmp:
            got = configs(base, Path(tmp), empty=not args.no_empty, own_cache=args.own_cache)
        if args.json:
            Path(args.json + ".tmp").write_text(json.dumps(got, indent=1))
            os.replace(args.json + ".tmp", args.json)
        return
    res: dict[str, list[tuple[float, ...]]] = {}
    epochs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            cache = Path(tmp) / f"cache{k}"
            env = {**base, "NUMBA_CACHE_DIR": str(cache)}
            *cold, out = timed(RNNKIT, [str(Path(tmp) / f"cold{k}")], env)
            res.setdefault("rnnkit cold", []).append(tuple(cold))
            epochs = int(re.search(r"trained (\d+) epochs", out).group(1))  # type: ignore[union-attr]
            if "warm" not in skip:
                warm = timed(RNNKIT, [str(Path(tmp) / f"warm{k}")], env)
                res.setdefault("rnnkit warm", []).append(warm[:3])
                same = ((Path(tmp) / f"cold{k}" / "model.safetensors").read_bytes()
                        == (Path(tmp) / f"warm{k}" / "model.safetensors").read_bytes())
                print(f"repeat {k + 1}: cold and warm model files {'identical' if same else 'DIFFER'}")
            if "single" not in skip:
                env1 = {**base, "NUMBA_CACHE_DIR": str(Path(tmp) / f"single{k}"), "RNNKIT_COMPILE_AHEAD": "0"}
                res.setdefault("rnnkit cold, one process", []).append(
                    timed(RNNKIT, [str(Path(tmp) / f"one{k}")], env1)[:3])
            if "compile" not in skip:
                envc = {**base, "NUMBA_CACHE_DIR": str(Path(tmp) / f"compiled{k}")}
                res.setdefault("rnnkit compile", []).append(
                    timed(None, ["-m", "rnnkit", "compile", "--cells", "lstm", "--dtype", "float32"],
                          envc)[:3])
                res.setdefault("demo after compile", []).append(
                    timed(RNNKIT, [str(Path(tmp) / f"after{k}")], envc)[:3])
            if "install" not in skip:
                envi = {**base, "NUMBA_CACHE_DIR": str(Path(tmp) / f"installed{k}")}
                pip = ["-m", "pip", "install", "-q", "--no-deps", "-e", str(SRC.parent)]
                res.setdefault("pip install -e", []).append(timed(None, pip, envi)[:3])
                res.setdefault("demo after install", []).append(
                    timed(RNNKIT, [str(Path(tmp) / f"inst{k}")], envi)[:3])
                env0 = {**base, "NUMBA_CACHE_DIR": str(Path(tmp) / f"plain{k}"),
                        "RNNKIT_COMPILE_AT_INSTALL": "0"}
                res.setdefault("pip install -e, no compile", []).append(timed(None, pip, env0)[:3])
            if args.baseline:
                envb = {**base, "NUMBA_CACHE_DIR": str(Path(tmp) / f"base{k}"),
                        "PYTHONPATH": os.pathsep.join([args.baseline, os.environ.get("PYTHONPATH", "")])}
                res.setdefault("baseline cold", []).append(
                    timed(RNNKIT, [str(Path(tmp) / f"basecold{k}")], envb)[:3])
            if "torch" not in skip:
                torch_run = timed(TORCH, [str(epochs), str(args.torch_threads)], base)
                res.setdefault("pytorch", []).append(torch_run[:3])
    print(f"\n{os.cpu_count()} cores, {args.repeats} repeats, {epochs} epochs, load average "
          f"{os.getloadavg()[0]:.1f} at the end; medians (s)")
    print(f"{'run':<28}{'to exit':>10}{'to 1st epoch':>14}{'CPU s':>10}")
    med = {n: tuple(statistics.median(r[i] for r in v) for i in range(3)) for n, v in res.items()}
    for n, (t, f, c) in med.items():
        print(f"{n:<28}{t:>10.2f}{f:>14.2f}{c:>10.2f}")
    if "pytorch" in med:
        print(f"cold demo / pytorch: {med['rnnkit cold'][0] / med['pytorch'][0]:.2f}x")
        if "demo after install" in med:
            print(f"first demo after pip install -e / pytorch: "
                  f"{med['demo after install'][0] / med['pytorch'][0]:.2f}x")
    if "baseline cold" in med:
        print(f"cold demo / baseline cold demo: {med['rnnkit cold'][0] / med['baseline cold'][0]:.2f}x "
              f"to exit, {med['rnnkit cold'][2] / med['baseline cold'][2]:.2f}x CPU")


if __name__ == "__main__":
    main()
