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
import pytest

import rnnkit as rk
from rnnkit._atomic import remove_stale_temporaries

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
    dead_pid = _dead_pid()
    dead = tmp_path / f".rnnkit.{dead_pid}.abc123xy.tmp"
    dead.write_bytes(b"x" * 1000)
    live = tmp_path / f".rnnkit.{os.getppid()}.zzzzzzzz.tmp"  # a running process: kept
    live.write_bytes(b"y")
    # not exactly the pattern: never touched
    near = [tmp_path / f".rnnkit.{dead_pid}.abc.tmp", tmp_path / f".rnnkit.{dead_pid}.abc123xy.tmp.bak",
            tmp_path / f".m.safetensors.{dead_pid}.abc123xy.tmp", tmp_path / f"rnnkit.{dead_pid}.abcd.tmp"]
    for p in near:
        p.write_bytes(b"z")
    _model().save(str(path))
    assert not dead.exists() and live.exists() and all(p.exists() for p in near)
    assert remove_stale_temporaries(str(tmp_path / "other.safetensors")) == []


def test_a_locked_temporary_is_never_removed(tmp_path: Path) -> None:
    """A temporary whose PID is not running here (a writer on another machine sharing the
    folder) is kept while its lock is held, and removed once it is released."""
    import fcntl

    tmp = tmp_path / f".rnnkit.{_dead_pid()}.lockedxy.tmp"
    tmp.write_bytes(b"x")
    fd = os.open(tmp, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert remove_stale_temporaries(str(tmp_path / "m.safetensors")) == []
        assert tmp.exists()
    finally:
        os.close(fd)
    assert remove_stale_temporaries(str(tmp_path / "m.safetensors")) == [str(tmp)]


LOOP = textwrap.dedent("""
    import sys
    import rnnkit as rk
    m = rk.Sequential([rk.Dense(256, seed=0)], input_shape=(None, 256))
    for _ in range(int(sys.argv[2])):
        m.save(sys.argv[1])
    print("done")
""")


def test_concurrent_saves_of_overlapping_names_keep_each_others_temporaries(tmp_path: Path) -> None:
    """Two processes save ``m`` and ``m.<N>.safetensors`` (N a PID that is not running) into one
    folder at once; neither sweep takes the other's live temporary."""
    names = [tmp_path / "m", tmp_path / f"m.{_dead_pid()}.safetensors"]
    procs = [subprocess.Popen([sys.executable, "-c", LOOP, str(n), "60"], env=ENV, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in names]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and out.strip() == "done", err[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n.name for n in names)


def test_names_up_to_255_bytes_save(tmp_path: Path) -> None:
    m = _model()
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    for n in (240, 255):
        path = tmp_path / ("a" * (n - len(".safetensors")) + ".safetensors")
        assert len(path.name.encode()) == n
        m.save(str(path))
        np.testing.assert_array_equal(rk.load_model(path).predict(x), m.predict(x))
    assert all(len(p.name) <= 255 for p in tmp_path.iterdir())


def test_threads_saving_in_one_folder(tmp_path: Path) -> None:
    import threading

    errors: list[BaseException] = []

    def loop(name: str) -> None:
        m = _model()
        try:
            for _ in range(20):
                m.save(str(tmp_path / name))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(n,)) for n in ("m", "m.2024.safetensors", "m")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == [] and sorted(p.name for p in tmp_path.iterdir()) == ["m", "m.2024.safetensors"]


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


def test_a_failed_write_names_the_users_file_not_the_temporary(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk error while the temporary file beside the target is written or renamed is raised
    as the same OSError class and errno, naming the file the caller asked for (the system call
    named the temporary), and the old file is untouched."""
    import errno as errno_mod

    from rnnkit import _atomic
    target = tmp_path / "w.bin"
    _atomic.atomic_write_bytes(target, b"old")

    def full(src: str, dst: str) -> None:
        raise OSError(errno_mod.ENOSPC, "No space left on device", src)

    monkeypatch.setattr(_atomic.os, "replace", full)
    try:
        _atomic.atomic_write_bytes(target, b"new")
    except OSError as e:
        assert e.errno == errno_mod.ENOSPC and e.filename == str(target), e
        assert ".tmp" not in str(e) and str(target) in str(e), e
    else:
        raise AssertionError("the write did not fail")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["w.bin"]
