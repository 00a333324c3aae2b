"""The batch split over threads (rnnkit.kernels._threads): bit-identical results whatever the
thread count (training included: the projection in the row blocks, the reductions in halves),
values equal to the NumPy reference, errors and concurrent callers handled, a forked child
served, and the parallel layout copy equal to NumPy's."""

from __future__ import annotations

import multiprocessing
import sys
import threading
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels

pytest.importorskip("numba")

from rnnkit.kernels import _driver, _threads  # noqa: E402

B, T, F = 37, 6, 5


def _layer(kind: str) -> rk.RecurrentLayer:
    kw: dict[str, Any] = dict(return_sequences=True, input_dim=F, seed=3)
    if kind == "lstm":
        return rk.LSTM(7, **kw)
    if kind == "lstm_proj":
        return rk.LSTM(7, proj_size=4, **kw)
    if kind == "lstm_back":
        return rk.LSTM(7, go_backwards=True, **kw)
    if kind == "gru":
        return rk.GRU(6, **kw)
    if kind == "simple":
        return rk.SimpleRNN(6, **kw)
    return rk.GRU(6, reset_after=True, **kw)


def _pass(layer: rk.RecurrentLayer, x: np.ndarray, g: np.ndarray,
          lengths: Any = None) -> dict[str, np.ndarray]:
    """Output, dL/dx and every weight gradient of one training pass, and the inference output."""
    ctx = rk.Ctx.training(0).set_mask(lengths=lengths)
    out = {"y": layer.forward(x, ctx)}
    out["dx"] = layer.backward(g, ctx)
    out |= {f"d_{n}": np.array(ctx.grad(layer, n)) for n in layer.weight_names}
    out["y_infer"] = layer.forward(x, rk.Ctx.inference().set_mask(lengths=lengths))
    return out


@pytest.fixture
def split_everything(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Small blocks, the reductions always in parts, and a record of every split's part count."""
    monkeypatch.setattr(_threads, "MIN_ROWS", 4)
    monkeypatch.setattr(_driver, "PARALLEL_REDUCTIONS", 0)
    seen: list[int] = []
    real = _threads.run_split

    def spy(parts: list[tuple[int, int]], job: Any) -> None:
        seen.append(len(parts))
        real(parts, job)

    real_phases = _threads.run_phases

    def spy_phases(parts: list[tuple[int, int]], first: Any, then: Any) -> None:
        seen.append(len(parts))
        real_phases(parts, first, then)

    monkeypatch.setattr(_threads, "run_split", spy)
    monkeypatch.setattr(_threads, "run_phases", spy_phases)
    return seen


@pytest.mark.parametrize("kind", ["lstm", "lstm_proj", "lstm_back", "gru", "gru_ra", "simple"])
@pytest.mark.parametrize("masked", [False, True], ids=["plain", "lengths"])
def test_training_bits_do_not_depend_on_the_thread_count(monkeypatch: pytest.MonkeyPatch,
                                                          split_everything: list[int], kind: str,
                                                          masked: bool) -> None:
    """One, two and three threads: the same bits for the output, dL/dx and every gradient;
    and those values are the NumPy reference's (float32 tolerance)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    layer = _layer(kind)
    g = rng.standard_normal((B, T, layer.output_size)).astype(np.float32)
    lengths = rng.integers(1, T + 1, B) if masked else None
    got = {}
    for cores in (1, 2, 3):
        monkeypatch.setattr(_threads, "CORES", cores)
        split_everything.clear()
        got[cores] = _pass(layer, x, g, lengths)
        # row blocks forward, backward and in inference (one per core), the reductions' halves
        if cores == 1:
            assert split_everything == []
        else:
            assert split_everything.count(cores) >= 3 and 2 in split_everything
            assert set(split_everything) <= {2, cores}
    for cores in (2, 3):
        for k, v in got[1].items():
            np.testing.assert_array_equal(got[cores][k], v, err_msg=f"{kind} {k} at {cores} threads")
    with kernels.use("reference"):
        ref = _pass(layer, x, g, lengths)
    for k, v in ref.items():
        scale = max(1.0, float(np.max(np.abs(v))))
        assert float(np.max(np.abs(got[2][k] - v))) <= 2e-5 * scale, k


def test_a_block_that_raises_is_reraised_once_every_block_is_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "CORES", 3)
    done: list[tuple[int, int]] = []
    release = threading.Event()

    def job(lo: int, hi: int) -> None:
        if lo == 0:
            release.wait(5)        # the caller's own block outlasts the failing one
        if lo == 8:
            release.set()
            raise ValueError(f"block {lo}")
        done.append((lo, hi))

    with pytest.raises(ValueError, match="block 8"):
        _threads.run_split([(0, 8), (8, 16), (16, 24)], job)
    assert sorted(done) == [(0, 8), (16, 24)]
    out = np.zeros(24)                 # the workers serve the next call

    def fill(lo: int, hi: int) -> None:
        out[lo:hi] = np.arange(lo, hi)

    _threads.run_split([(0, 8), (8, 16), (16, 24)], fill)
    np.testing.assert_array_equal(out, np.arange(24))


def test_concurrent_callers_and_nested_splits_get_every_block_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls from several threads at once, and a split inside a block: every part runs exactly
    once (a caller that finds the workers busy runs its parts itself)."""
    monkeypatch.setattr(_threads, "CORES", 2)
    n = 64
    results: dict[int, np.ndarray] = {}

    def caller(c: int) -> None:
        out = np.zeros(n)

        def outer(lo: int, hi: int) -> None:
            def inner(a: int, b: int) -> None:
                out[a:b] += np.arange(a, b) + c
            m = (lo + hi) // 2
            _threads.run_split([(lo, m), (m, hi)], inner)

        for _ in range(20):
            _threads.run_split([(0, n // 2), (n // 2, n)], outer)
        results[c] = out

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for c in range(4):
        np.testing.assert_array_equal(results[c], 20 * (np.arange(n) + c))


@pytest.mark.parametrize("spin_us", [0, 50, 100_000])
def test_every_post_runs_once_whether_the_worker_spins_or_sleeps(monkeypatch: pytest.MonkeyPatch,
                                                                  spin_us: int) -> None:
    """The spin hand-off (``_spin``): with no spin (the worker always sleeps on its lock), a
    short one (pauses of 0 to 200 us between posts: it sleeps sometimes), and a long one (it
    never sleeps), each of 300 posts runs its job exactly once with its own arguments, the
    caller sees the job's writes after ``wait``, and a job's error comes back from ``wait``."""
    import time

    from rnnkit.kernels import _spin

    monkeypatch.setattr(_spin, "WORKER_SPIN_US", spin_us)
    monkeypatch.setattr(_spin, "JOIN_SPIN_US", spin_us)
    w = _threads._Worker()
    rng = np.random.default_rng(spin_us)
    seen: list[tuple[int, int]] = []
    box = np.zeros(1)

    def job(lo: int, hi: int) -> None:
        seen.append((lo, hi))
        box[0] = lo * 1000 + hi

    for k in range(300):
        w.start(job, k, k + 1)
        w.wait()
        assert box[0] == k * 1000 + k + 1
        if spin_us and k % 3 == 0:
            time.sleep(float(rng.uniform(0, 2e-4)))
    assert seen == [(k, k + 1) for k in range(300)]

    def bad(lo: int, hi: int) -> None:
        raise KeyError(lo)

    w.start(bad, 7, 8)
    with pytest.raises(KeyError):
        w.wait()
    w.start(job, 1, 2)                 # and it serves the next post
    w.wait()
    assert seen[-1] == (1, 2)


def test_without_numba_the_hand_off_blocks_on_its_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the compiled spin waits (no numba) a worker's flags live under the GIL and every
    wait blocks on its lock: each of 100 posts still runs once, in order."""
    monkeypatch.setattr(_threads, "_SPIN", _threads._NoSpin)
    w = _threads._Worker()
    assert w.sp is _threads._NoSpin
    seen: list[int] = []
    for k in range(100):
        w.start(lambda lo, hi: seen.append(lo), k, k + 1)
        w.wait()
    assert seen == list(range(100))


def _child(q: Any) -> None:
    out = np.zeros(32)

    def fill(lo: int, hi: int) -> None:
        out[lo:hi] = 1.0

    _threads.run_blocks(32, fill)
    q.put(float(out.sum()))


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_a_forked_child_splits_on_threads_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child forked after the workers started (they do not exist in it) is not left waiting."""
    monkeypatch.setattr(_threads, "CORES", 2)
    _threads.run_blocks(32, lambda lo, hi: None)          # the parent's workers exist
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(60)
    if p.is_alive():
        p.kill()
        pytest.fail("the forked child hung in run_blocks")
    assert p.exitcode == 0
    assert q.get(timeout=5) == 32.0


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_swap01_is_numpys_transposed_copy(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    monkeypatch.setattr(_threads, "CORES", cores)
    monkeypatch.setattr(_threads, "PARALLEL_COPY_BYTES", 0)
    a = np.arange(7 * 5 * 3, dtype=np.float32).reshape(7, 5, 3)
    for v in (a, a[:, ::-1], a[::-1], a[1:6, ::2], a.transpose(1, 0, 2)):
        got = _threads.swap01(v)
        assert got.flags.c_contiguous and got.dtype == v.dtype
        np.testing.assert_array_equal(got, np.ascontiguousarray(v.transpose(1, 0, 2)))
        for i in range(v.shape[1]):          # element by element, against the definition
            for j in range(v.shape[0]):
                np.testing.assert_array_equal(got[i, j], v[j, i])
