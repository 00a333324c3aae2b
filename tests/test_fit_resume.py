"""``fit(..., checkpoint=DIR)`` resumes after a SIGKILL from the last completed epoch and ends
bit-identical to an uninterrupted run with the same seed (weights, optimizer slots, history)."""

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

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}

RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import rnnkit as rk

    def build():
        m = rk.Sequential([rk.GRU(8, seed=1), rk.Dropout(0.2), rk.Dense(1, seed=2)], input_shape=(None, 6, 2))
        m.compile(rk.Adam(0.01), "mse")
        return m

    def data():
        r = np.random.default_rng(5)
        x = r.standard_normal((96, 6, 2)).astype(np.float32)
        return x, x.sum(axis=(1, 2))[:, None] / 4

    def train(ckpt, epochs):
        m = build()
        x, y = data()
        cbs = [rk.EarlyStopping("loss", patience=50, restore_best_weights=True)]
        h = m.fit(x, y, epochs, batch_size=16, seed=7, checkpoint=ckpt, callbacks=cbs)
        return m, h

    if __name__ == "__main__":
        m, h = train(sys.argv[1], int(sys.argv[2]))
        np.savez(sys.argv[3], *m.get_weights(), loss=np.array(h.history["loss"]))
""")


def _run(tmp: Path, ckpt: Path, out: Path, epochs: int) -> subprocess.Popen[bytes]:
    script = tmp / "run.py"
    script.write_text(RUN)
    return subprocess.Popen([sys.executable, str(script), str(ckpt), str(epochs), str(out)], env=ENV)


def test_resume_after_sigkill_is_bit_identical(tmp_path: Path) -> None:
    epochs = 40
    ref = _run(tmp_path, tmp_path / "ref_ckpt", tmp_path / "ref.npz", epochs)
    assert ref.wait(timeout=300) == 0   # (compiles the kernels if the cache is cold: not timed)
    again = _run(tmp_path, tmp_path / "again_ckpt", tmp_path / "again.npz", epochs)
    t0 = time.perf_counter()
    assert again.wait(timeout=300) == 0
    full = time.perf_counter() - t0     # how long a run takes, so that the kills land inside one
    want = np.load(tmp_path / "ref.npz")
    trials = int(os.environ.get("RNNKIT_KILL_TRIALS", "3"))
    rng = np.random.default_rng(1)
    survived = 0
    for k in range(trials):
        ckpt, out = tmp_path / f"ckpt{k}", tmp_path / f"out{k}.npz"
        kills = 0
        for _ in range(3):  # up to three kills in one run, at varied moments
            proc = _run(tmp_path, ckpt, out, epochs)
            time.sleep(float(rng.uniform(0.2, 1.0)) * full)
            if proc.poll() is not None:
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
        assert _run(tmp_path, ckpt, out, epochs).wait(timeout=300) == 0
        got = np.load(out)
        assert sorted(got.files) == sorted(want.files)
        for name in want.files:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"trial {k}: {name}")
        survived += kills
        assert [p.name for p in ckpt.iterdir()] == ["fit_state.safetensors"]
    assert survived >= 1


def _small() -> tuple[rk.Sequential, np.ndarray, np.ndarray]:
    m = rk.Sequential([rk.Dense(4, "tanh", seed=0), rk.Dense(1, seed=1)], input_shape=(None, 3))
    m.compile(rk.Adam(0.01), "mse")
    x = np.linspace(-1, 1, 60, dtype=np.float32).reshape(20, 3)
    return m, x, x.sum(axis=1, keepdims=True)


def test_resume_in_process_matches_and_optimizer_state_is_restored(tmp_path: Path) -> None:
    ref, x, y = _small()
    ref.fit(x, y, 12, batch_size=5, seed=3)
    m, _, _ = _small()

    class Stop(rk.models.Callback):  # type: ignore[name-defined,misc]
        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            if epoch == 4:
                raise KeyboardInterrupt  # an interruption after 5 completed epochs

    with pytest.raises(KeyboardInterrupt):
        m.fit(x, y, 12, batch_size=5, seed=3, checkpoint=tmp_path / "c", callbacks=[Stop()])
    resumed, _, _ = _small()  # a fresh model and optimizer, as after a restart
    h = resumed.fit(x, y, 12, batch_size=5, seed=3, checkpoint=tmp_path / "c")
    assert len(h.history["loss"]) == 12 and h.epoch == list(range(12))
    for a, b in zip(resumed.get_weights(), ref.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    layer = ref.layers[0]
    for slot in ("m", "v"):
        np.testing.assert_array_equal(resumed.optimizer.get_state(resumed.layers[0], "kernel")[slot],
                                      ref.optimizer.get_state(layer, "kernel")[slot])
    assert resumed.optimizer.iterations == ref.optimizer.iterations == 48


def test_checkpoint_of_another_run_is_refused(tmp_path: Path) -> None:
    m, x, y = _small()
    m.fit(x, y, 2, seed=3, checkpoint=tmp_path)
    other, _, _ = _small()
    with pytest.raises(rk.InvalidParameterError, match=r"belongs to another run \(differs in \['data'\]\)"):
        other.fit(x + 1, y, 2, seed=3, checkpoint=tmp_path)
    with pytest.raises(rk.InvalidParameterError, match=r"differs in \['seed'\]"):
        other.fit(x, y, 2, seed=4, checkpoint=tmp_path)
    with pytest.raises(TypeError, match="checkpoint must be a directory path"):
        other.fit(x, y, 2, checkpoint=3)
    # the completed run: a second call trains no further and returns the same history
    again, _, _ = _small()
    h = again.fit(x, y, 2, seed=3, checkpoint=tmp_path)
    assert h.history["loss"] == m.history.history["loss"]  # type: ignore[union-attr]
    for a, b in zip(again.get_weights(), m.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
