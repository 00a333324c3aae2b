"""Readers during ``fit`` in another thread: ``predict``, ``model(x)``, ``evaluate``,
``get_weights`` and ``save_weights`` see the weights of one whole optimizer step, never some from
before a step and some from after it (:mod:`rnnkit._consistency`)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._consistency import WEIGHTS
from rnnkit.models import Callback, Sequential

#: bounds of the stress test: readings per reader thread, seconds before the readers stop
MAX_READS = 150
MAX_SECONDS = 60.0


class StepWeights(Callback):
    """The model's weights after every optimizer step (the weights of step k are ``seen[k]``;
    ``seen[0]``, set by the test, are those before the first step)."""

    def __init__(self, first: list[np.ndarray]) -> None:
        super().__init__()
        self.seen = [first]
        self.stepping = threading.Event()

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        self.seen.append(self.model.get_weights())
        self.stepping.set()


@pytest.fixture
def switch_often() -> Iterator[None]:
    """Threads switch every 10 us instead of every 5 ms, so a reader lands inside a step often
    (the interpreter's switch interval; restored afterwards)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _model() -> Sequential:
    model = Sequential([rk.LSTM(12, seed=1, dtype="float64", return_sequences=True),
                        rk.GRU(8, seed=2, dtype="float64"),
                        rk.Dense(6, seed=3, dtype="float64"), rk.Dense(1, seed=4, dtype="float64")],
                       input_shape=(None, 5, 3))
    return model.compile(rk.optimizers.Adam(0.05), "mse")


def test_readers_during_fit_see_the_weights_of_one_whole_step(switch_often: None, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (96, 5, 3))
    y = np.sin(x.sum(axis=(1, 2)))[:, None]
    xq, yq = x[:3], y[:3]
    model = _model()
    rec = StepWeights(model.get_weights())
    done = threading.Event()
    readings: dict[str, list[object]] = {"predict": [], "call": [], "evaluate": [], "get_weights": [],
                                         "save_weights": []}
    failures: list[BaseException] = []

    def read(kind: str) -> None:
        try:
            rec.stepping.wait(MAX_SECONDS)   # from the first step on
            deadline = time.monotonic() + MAX_SECONDS
            out = readings[kind]
            while not done.is_set() and len(out) < MAX_READS and time.monotonic() < deadline:
                if kind == "predict":
                    out.append(model.predict(xq))
                elif kind == "call":
                    out.append(model(xq))
                elif kind == "evaluate":
                    out.append(model.evaluate(xq, yq))
                elif kind == "get_weights":
                    out.append(model.get_weights())
                else:
                    path = tmp_path / f"w{len(out)}.safetensors"
                    model.save_weights(str(path))
                    out.append(path)
        except BaseException as e:  # (reported by the main thread)
            failures.append(e)

    model.predict(xq), model(xq), model.evaluate(xq, yq)   # compiled before the threads start
    readers = [threading.Thread(target=read, args=(k,)) for k in readings]
    for t in readers:
        t.start()
    try:
        model.fit(x, y, epochs=6, batch_size=4, shuffle=False, callbacks=[rec], verbose=0)
    finally:
        done.set()
        for t in readers:
            t.join(MAX_SECONDS)
    assert not failures, failures
    steps = rec.seen
    assert len(steps) == 1 + 6 * 24
    # the readers ran while the weights changed: their readings are not all of one step
    assert len(readings["predict"]) >= 5 and len(readings["get_weights"]) >= 5

    def flat(ws: list[np.ndarray]) -> bytes:
        return b"".join(np.ascontiguousarray(w).tobytes() for w in ws)

    index = {flat(ws): k for k, ws in enumerate(steps)}
    assert len(index) == len(steps)  # every step changed the weights
    torn: dict[str, int] = {}
    torn["get_weights"] = sum(flat(ws) not in index for ws in readings["get_weights"])  # type: ignore[arg-type]
    loaded = _model()
    loaded.build((None, 5, 3))
    torn["save_weights"] = 0
    for path in readings["save_weights"]:
        loaded.load_weights(str(path))
        torn["save_weights"] += flat(loaded.get_weights()) not in index
    # each output is compared, to the bit, with the same call under the weights of every step:
    # the same code path on the same input computes the same bits
    refs: dict[str, set[bytes]] = {"predict": set(), "call": set(), "evaluate": set()}
    for ws in steps:
        model.set_weights(ws)
        refs["predict"].add(np.asarray(model.predict(xq)).tobytes())
        refs["call"].add(np.asarray(model(xq)).tobytes())
        refs["evaluate"].add(np.float64(model.evaluate(xq, yq)).tobytes())
    for kind, ref in refs.items():
        got = [np.float64(v).tobytes() if kind == "evaluate" else np.asarray(v).tobytes()
               for v in readings[kind]]
        torn[kind] = sum(g not in ref for g in got)
    counts = {k: len(v) for k, v in readings.items()}
    assert torn == dict.fromkeys(torn, 0), f"readings not of one whole step: {torn} of {counts}"


def test_guard_reads_again_under_the_lock_when_a_write_overlaps() -> None:
    calls: list[int] = []

    def reader() -> int:
        calls.append(WEIGHTS.count)
        if len(calls) == 1:  # a write starts and ends while the first run reads
            with WEIGHTS:
                pass
        return len(calls)

    assert WEIGHTS.read(reader) == 2
    assert calls[1] == calls[0] + 2   # the second run came after the write
    calls.clear()
    assert WEIGHTS.read(lambda: len(calls)) == 0   # no write: one run


def test_guard_holds_writers_back_while_a_locked_reader_runs() -> None:
    took: list[bool] = []

    def try_to_write() -> None:   # another thread: can a write start now?
        took.append(WEIGHTS._lock.acquire(blocking=False))
        if took[-1]:
            WEIGHTS._lock.release()

    def read() -> None:
        t = threading.Thread(target=try_to_write)
        t.start()
        t.join()

    WEIGHTS.read_once(read)
    try_to_write()
    assert took == [False, True]
