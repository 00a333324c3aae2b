"""``rnnkit compile``: the kernels compiled into the on-disk cache ahead, so that a later fit and
``predict`` compile nothing and give the bits of a fit that compiled its own kernels."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.cli._compile import plan, run_groups
from rnnkit.kernels import _warm
from rnnkit.quant import _warm as _warm8
from rnnkit.recurrent import LSTMCell, RecurrentLayer

SRC = Path(__file__).resolve().parents[1] / "src"


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RNNKIT_COMPILE_AHEAD"}
    env.update({"PYTHONPATH": str(SRC), "NUMBA_CACHE_DIR": str(cache)})
    return env


def _rnnkit(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnkit", *args], env=_env(cache), capture_output=True,
                          text=True, timeout=1800)


@pytest.mark.parametrize(("args", "message"), [
    (["--cells", "lstm,tcn"], "--cells: expected a comma-separated list of lstm, gru, rnn, gru-after, "
                              "lstm-proj, or all, got 'lstm,tcn'"),
    (["--dtype", "float16"], "--dtype: expected a comma-separated list of float32, float64, int8, or all, "
                             "got 'float16'"),
    (["--jobs", "-1"], "--jobs: expected an integer >= 0, got -1"),
])
def test_bad_arguments_are_one_line_and_status_2(tmp_path: Path, args: list[str], message: str) -> None:
    r = _rnnkit(["compile", *args], tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == f"rnnkit: error: {message}"
    assert not any(tmp_path.iterdir())          # nothing compiled


FIT = """
import sys
import numpy as np
from rnnkit import kernels
from rnnkit.cli._model import TrainConfig, build_network
from rnnkit.kernels import _warm

cfg = TrainConfig(cell="rnn", units=5, layers=2, epochs=2, batch_size=16, lr=0.01, patience=0, seed=0,
                  verbose=False, highway=0)
model = build_network(cfg, 6, 2)
started = any(_warm.start(layer.cell, layer.input_dim, layer.dtype) for layer in model.layers[:2])
rng = np.random.default_rng(0)
x = rng.standard_normal((40, 6, 2)).astype(np.float32)
y = rng.standard_normal((40, 1)).astype(np.float32)
model.fit(x, y, epochs=2, batch_size=16, validation_data=(x[:8], y[:8]), seed=0)
pred = model.predict(x[:5], verbose=0)
model.save_weights(sys.argv[1])
np.save(sys.argv[2], pred)
print(int(started), kernels.compile_seconds() > 0)
"""


@pytest.mark.timeout(1800)   # (two compilations of a configuration: slow on a loaded machine)
def test_a_fit_after_rnnkit_compile_compiles_nothing_and_gives_the_same_bits(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    env = {**_env(tmp_path / "own"), "RNNKIT_COMPILE_AHEAD": "0"}   # the reference: compiles it all itself
    own = subprocess.run([sys.executable, "-c", FIT, str(tmp_path / "own.st"), str(tmp_path / "own.npy")],
                         env=env, capture_output=True, text=True, timeout=1800, check=True).stdout.split()
    assert own == ["0", "True"]
    r = _rnnkit(["compile", "--cells", "rnn", "--dtype", "float32"], tmp_path / "ahead")
    assert r.returncode == 0, r.stderr
    assert "compiled in" in r.stdout
    fit = subprocess.run([sys.executable, "-c", FIT, str(tmp_path / "after.st"), str(tmp_path / "after.npy")],
                         env=_env(tmp_path / "ahead"), capture_output=True, text=True, timeout=1800,
                         check=True).stdout.split()
    assert fit == ["0", "False"]                 # no child started (the markers), nothing compiled
    assert (tmp_path / "own.st").read_bytes() == (tmp_path / "after.st").read_bytes()
    assert (tmp_path / "own.npy").read_bytes() == (tmp_path / "after.npy").read_bytes()
    again = _rnnkit(["compile", "--cells", "rnn", "--dtype", "float32"], tmp_path / "ahead")
    assert again.returncode == 0
    assert "already in the cache; nothing to compile" in again.stdout


def test_the_plan_covers_every_configuration_of_the_built_in_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every compiled step a built-in cell class declares (each GRU form its own), with and
    without an output projection where the cell has one, in float32 and float64: the four
    parts of a fit and ``predict`` (plus the dense products once per dtype); and the int8 loops
    of every such cell that ``rnnkit.quantize`` takes. (Markers ignored: an empty cache.)"""
    monkeypatch.setattr(_warm, "done", lambda desc, part: False)
    classes = [c for c in vars(rk).values() if isinstance(c, type) and issubclass(c, rk.Cell)]
    steps = {c.compiled_step for c in classes if c.compiled_step is not None}
    assert len(steps) == 4                       # SimpleRNN, LSTM, GRU reset_after=False / True
    got: dict[tuple[object, bool, str], set[str]] = {}
    int8: set[tuple[object, bool]] = set()
    for module, desc, parts in plan(["lstm", "gru", "rnn", "gru-after", "lstm-proj"],
                                    ["float32", "float64", "int8"]):
        cell, _, dt = _warm.rebuild(desc)
        key = (kernels.compiled_step(cell), bool(cell.get_config().get("proj_size")))
        if module == _warm8.__name__:
            assert parts == ("int8",) and dt == np.float32
            int8.add(key)
        else:
            assert module == _warm.__name__
            got.setdefault((*key, dt.name), set()).update(parts)
    want_int8 = set()
    for step in steps:
        cls = next(c for c in classes if c.compiled_step is step)
        for proj in ((False, True) if "proj_size" in cls(8).get_config() else (False,)):
            cell = cls(8, proj_size=4) if proj else cls(8)
            if type(cell).compiled_step is not step:     # GRUCell(8) makes the reset-after form
                cell = cls(8, reset_after=False)
            assert kernels.compiled_step(cell) is step
            for dt in ("float32", "float64"):
                assert got.pop((step, proj, dt)) - {"dense"} == {"back", "wide", "train", "infer"}
            with kernels.use("reference"):
                try:
                    model = rk.Sequential([RecurrentLayer(cell), rk.Dense(1)])
                    rk.quantize(model.build(rk.Shape.with_free_batch((2, 2, 1))))
                    want_int8.add((step, proj))
                except rk.InvalidParameterError:
                    assert proj                      # (an LSTM with proj_size has no int8 form)
    assert not got                               # nothing planned beyond these
    assert int8 == want_int8 and len(int8) == 4


COUNTED = """
import sys
import numpy as np
import numba
import rnnkit as rk
from rnnkit import kernels

x = np.random.default_rng(0).standard_normal((24, 5, 3)).astype(np.float32)
model = rk.Sequential([rk.GRU(4, reset_after=False, return_sequences=True, seed=1),
                       rk.GRU(4, reset_after=False, go_backwards=True, seed=2), rk.Dense(1, seed=3)])
q = rk.quantize(model.build(rk.Shape((None, None, 3))))
preds = [q.predict(x, verbose=0), q.predict(x[:1], verbose=0)]   # (several rows; one row)
np.save(sys.argv[1], np.concatenate([p.ravel() for p in preds]))
found = {}   # (a dispatcher is imported into several modules: each counted once)
for name, mod in list(sys.modules.items()):
    if name.startswith("rnnkit.kernels"):
        for f in vars(mod).values():
            if isinstance(f, numba.core.registry.CPUDispatcher):
                found[id(f)] = f
loaded = sum(sum(f.stats.cache_hits.values()) for f in found.values())
compiled = sum(sum(f.stats.cache_misses.values()) for f in found.values())
for f in found.values():
    for sig in f.stats.cache_misses:
        print("compiled:", f.__name__, sig, file=sys.stderr)
print(compiled, loaded, kernels.compile_seconds() > 0)
"""


@pytest.mark.timeout(1800)   # (two compilations of the int8 loops: slow on a loaded machine)
def test_a_cold_process_loads_every_kernel_rnnkit_compile_filled_and_gives_the_same_bits(
        tmp_path: Path) -> None:
    """``rnnkit compile`` of one configuration (the int8 form of a GRU with
    ``reset_after=False``): a later process that runs a quantized model of it (two layers, the
    first returning sequences, the second backwards; a batch of several rows and one of one row:
    the loops' input and outputs in every layout the layers hand them) compiles no kernel and
    loads them all from the cache; its outputs are the bits of a process that compiled every
    kernel itself. (The float kernels: the test above.)"""
    pytest.importorskip("numba")
    env = {**_env(tmp_path / "own"), "RNNKIT_COMPILE_AHEAD": "0"}   # the reference: compiles it all itself
    own = subprocess.run([sys.executable, "-c", COUNTED, str(tmp_path / "own.npy")], env=env,
                         capture_output=True, text=True, timeout=1800, check=True).stdout.split()
    assert int(own[0]) > 0 and own[2] == "True"
    r = _rnnkit(["compile", "--cells", "gru", "--dtype", "int8"], tmp_path / "ahead")
    assert r.returncode == 0, r.stderr
    assert "compiling 1 groups" in r.stdout
    run = subprocess.run([sys.executable, "-c", COUNTED, str(tmp_path / "after.npy")],
                         env=_env(tmp_path / "ahead"), capture_output=True, text=True, timeout=1800,
                         check=True)
    after = run.stdout.split()
    assert after[0] == "0" and after[2] == "False", run.stderr   # nothing compiled here
    assert int(after[1]) > 0                          # every kernel loaded from the cache
    assert (tmp_path / "own.npy").read_bytes() == (tmp_path / "after.npy").read_bytes()


def test_a_worker_runs_each_group_in_turn_and_answers_one_line_for_each() -> None:
    """``python -m rnnkit.kernels._warm --serve``'s loop: a malformed request, an unknown
    module, parts a module does not know: each answered ``failed: `` with the error, and the
    next request still runs; a group that compiles (the float32 dense products) answers ``ok``
    and leaves its marker."""
    pytest.importorskip("numba")
    desc = _warm.describe(LSTMCell(3), 2, np.float32)
    assert desc is not None
    asks = ["{", json.dumps({"module": "os", "desc": desc, "parts": ["back"]}),
            json.dumps({"module": _warm8.__name__, "desc": desc, "parts": ["back"]}),
            json.dumps({"module": _warm.__name__, "desc": desc, "parts": ["dense"]})]
    out = io.StringIO()
    assert _warm.serve(io.StringIO("\n".join(asks) + "\n"), out) == 0
    got = out.getvalue().splitlines()
    assert got[0].startswith("failed: JSONDecodeError: ")
    assert got[1:] == [
        "failed: InvalidParameterError: rnnkit.kernels._warm.serve: the module must be one of "
        "('rnnkit.kernels._warm', 'rnnkit.quant._warm'), got 'os'",
        "failed: InvalidParameterError: rnnkit.quant._warm: parts must be 'int8', got 'back'",
        "ok"]
    assert _warm.done(desc, "dense")


def test_the_groups_run_on_jobs_workers_not_one_process_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five groups on two workers start two processes (each imports NumPy, Numba and rnnkit
    once), and every group's failure comes back with its parts and its error."""
    pytest.importorskip("numba")
    started: list[subprocess.Popen[str]] = []
    real = _warm.spawn_worker

    def counted(stderr: object = subprocess.DEVNULL) -> subprocess.Popen[str]:
        started.append(real(stderr))
        return started[-1]

    monkeypatch.setattr(_warm, "spawn_worker", counted)
    desc = _warm.describe(LSTMCell(3), 2, np.float32)
    assert desc is not None
    failed = run_groups([(_warm.__name__, desc, (f"p{i}",)) for i in range(5)], 2)
    assert len(started) == 2
    want = "InvalidParameterError: rnnkit.kernels._warm.run: parts must be some of ('back', 'infer', " \
           "'train', 'dense', 'wide'), got ('p{}',)"
    assert sorted(failed) == [f"p{i}: " + want.format(i) for i in range(5)]
    assert all(p.returncode == 0 for p in started)      # (each ended when its requests did)


DYING = "import sys; sys.stdin.readline(); print('first line', file=sys.stderr); " \
        "print('MemoryError: out of memory', file=sys.stderr); sys.exit(3)"


def test_a_worker_that_dies_fails_its_group_and_a_new_one_takes_the_rest(monkeypatch: pytest.MonkeyPatch
                                                                           ) -> None:
    """A worker that ends without answering (killed, out of memory) fails the group it held,
    with the last line of its stderr; the groups left go to a new worker."""
    started: list[subprocess.Popen[str]] = []

    def dying(stderr: object = subprocess.DEVNULL) -> subprocess.Popen[str]:
        started.append(subprocess.Popen([sys.executable, "-c", DYING], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=stderr, text=True))
        return started[-1]

    monkeypatch.setattr(_warm, "spawn_worker", dying)
    failed = run_groups([(_warm.__name__, "{}", ("back", "wide")), (_warm8.__name__, "{}", ("int8",))], 1)
    assert failed == ["back,wide: MemoryError: out of memory", "int8: MemoryError: out of memory"]
    assert [p.returncode for p in started] == [3, 3]
