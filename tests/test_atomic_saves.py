"""Saves are atomic, leave nothing behind, follow symbolic links and give the same bytes for
the same model; a process SIGKILLed mid-save leaves the old or the new file, and the next save
removes its temporary file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

import rnnkit as rk
from rnnkit.io._atomic import remove_stale_temporaries

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _model(seed: int = 0) -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(4, seed=seed), rk.Dense(1, seed=seed)], input_shape=(None, 5, 3))
    m.compile("adam", "mse", metrics=["mae"])
    return m


def test_two_saves_give_identical_bytes(tmp_path: Path) -> None:
    m = _model()
    m.save(str(tmp_path / "a.safetensors"))
    m.save(str(tmp_path / "b.safetensors"))
    m.save_weights(str(tmp_path / "c.safetensors"))
    m.save_weights(str(tmp_path / "d.safetensors"))
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    assert (tmp_path / "c.safetensors").read_bytes() == (tmp_path / "d.safetensors").read_bytes()
    # and in another process (another hash seed)
    code = f"import rnnkit as rk, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
           f"from test_atomic_saves import _model; _model().save({str(tmp_path / 'e.safetensors')!r})"
    subprocess.run([sys.executable, "-c", code], env={**ENV, "PYTHONHASHSEED": "123"}, check=True,
                   timeout=120)
    assert (tmp_path / "e.safetensors").read_bytes() == (tmp_path / "a.safetensors").read_bytes()
    x = np.linspace(0, 1, 30, dtype=np.float32).reshape(2, 5, 3)
    np.testing.assert_array_equal(rk.load_model(tmp_path / "a.safetensors").predict(x), m.predict(x))


def test_saving_through_a_symlink_writes_its_target(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "m.safetensors"
    _model(0).save(str(target))
    link = tmp_path / "link.safetensors"
    link.symlink_to(target)
    _model(1).save(str(link))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == link.read_bytes()
    x = np.ones((1, 5, 3), np.float32)
    np.testing.assert_array_equal(rk.load_model(target).predict(x), _model(1).predict(x))
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["m.safetensors"]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    dead = tmp_path / f".m.safetensors.{_dead_pid()}.abc123.tmp"
    dead.write_bytes(b"x" * 1000)
    live = tmp_path / f".m.safetensors.{os.getppid()}.zzz.tmp"  # a running process: kept
    live.write_bytes(b"y")
    other = tmp_path / f".other.safetensors.{_dead_pid()}.q.tmp"  # another file's: not ours
    other.write_bytes(b"z")
    _model().save(str(path))
    assert not dead.exists() and live.exists() and other.exists()
    assert remove_stale_temporaries(str(tmp_path / "other.safetensors")) == [str(other)]


SAVER = textwrap.dedent("""
    import sys
    import numpy as np
    import rnnkit as rk
    path = sys.argv[1]
    m = rk.Sequential([rk.Dense(512, seed=0), rk.Dense(512, seed=1)], input_shape=(None, 512))
    k = 0
    print("ready", flush=True)
    while True:
        k += 1
        m.layers[0].set_weight("bias", np.full(512, k, np.float32))
        m.save(path)
""")


def test_sigkill_during_saves_leaves_a_whole_file_and_nothing_behind(tmp_path: Path) -> None:
    """Kill trials: a process saving a 2 MB model in a loop is SIGKILLed at varied moments;
    each time the file loads whole (the bias is one constant: one save's, not a mix), and the
    next save leaves exactly one file in the folder."""
    path = tmp_path / "m.safetensors"
    trials = int(os.environ.get("RNNKIT_KILL_TRIALS", "8"))
    rng = np.random.default_rng(0)
    seen_tmp = 0
    for _ in range(trials):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], env=ENV, stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(float(rng.uniform(0.05, 0.6)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        seen_tmp += sum(1 for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
        if path.exists():
            bias = rk.load_model(path).layers[0].weight("bias")
            assert np.all(bias == bias[0])
    _model().save(str(path))
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"], seen_tmp
