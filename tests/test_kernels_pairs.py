"""Two passes side by side (rnnkit.kernels._threads.run_each): the two directions of a
Bidirectional layer's inference, one per thread, with the same bits as one after the other;
jobs in the caller's context; errors re-raised once both are over; a split inside a job runs
as one block on the job's thread."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.kernels import _threads
from rnnkit.layers import _bidirectional


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "CORES", 2)


@pytest.fixture
def every_pass_pays(monkeypatch: pytest.MonkeyPatch, two_cores: None) -> None:
    """Two cores, and passes of any size side by side (the layers below are small)."""
    monkeypatch.setattr(_threads, "PAIR_WORK", 0)


def test_run_each_runs_the_jobs_on_two_threads_in_the_callers_context(two_cores: None) -> None:
    seen: list[tuple[int, str]] = []

    def job(k: int) -> Any:
        def f() -> int:
            seen.append((threading.get_ident(), kernels.mode()))
            return 10 * k
        return f

    with kernels.use("reference"):
        got = _threads.run_each([job(1), job(2)])
    assert got == [10, 20]
    assert len({t for t, _ in seen}) == 2                  # one job on a worker
    assert [m for _, m in seen] == ["reference", "reference"]
    assert _threads.run_each([job(k) for k in range(5)]) == [0, 10, 20, 30, 40]


def test_run_each_on_one_core_runs_here_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "CORES", 1)
    order: list[tuple[int, int]] = []
    got = _threads.run_each([lambda: order.append((0, threading.get_ident())) or "a",
                             lambda: order.append((1, threading.get_ident())) or "b"])
    assert got == ["a", "b"]
    assert order == [(0, threading.get_ident()), (1, threading.get_ident())]


def test_run_each_reraises_a_jobs_error_once_both_are_over(two_cores: None) -> None:
    done = threading.Event()

    def slow() -> None:
        done.wait(0.2)
        done.set()

    def bad() -> None:
        raise ValueError("job 1 failed")

    with pytest.raises(ValueError, match="job 1 failed"):
        _threads.run_each([slow, bad])
    assert done.is_set()
    assert _threads.run_each([lambda: 1, lambda: 2]) == [1, 2]     # the workers are free again


def test_a_split_inside_a_job_is_one_block_on_the_jobs_thread(two_cores: None) -> None:
    calls: list[list[tuple[int, int, int]]] = [[], []]

    def job(k: int) -> Any:
        def f() -> None:
            _threads.run_blocks(64, lambda lo, hi: calls[k].append((lo, hi, threading.get_ident())))
            calls[k].append((-1, -1, threading.get_ident()))
        return f

    _threads.run_each([job(0), job(1)])
    for c in calls:
        assert [(lo, hi) for lo, hi, _ in c] == [(0, 64), (-1, -1)]
        assert c[0][2] == c[1][2]
    outside: list[tuple[int, int]] = []
    _threads.run_blocks(64, lambda lo, hi: outside.append((lo, hi)))
    assert sorted(outside) == [(0, 32), (32, 64)]                 # not busy: two blocks again


@pytest.mark.parametrize(("cores", "B", "work", "pays"), [
    (1, 1, 1 << 40, False), (1, 64, 1 << 40, False), (2, 1, 0, False), (2, 15, 0, False), (2, 16, 0, True),
    (2, 64, 0, True), (2, 1, _threads.PAIR_WORK, True), (2, 8, _threads.PAIR_WORK - 1, False),
    (4, 16, 0, True), (4, 23, 0, True), (4, 24, 0, False), (4, 64, 1 << 40, False)])
def test_pairs_pay_when_the_row_split_would_use_at_most_two_cores_and_the_passes_are_worth_it(
        monkeypatch: pytest.MonkeyPatch, cores: int, B: int, work: int, pays: bool) -> None:
    monkeypatch.setattr(_threads, "CORES", cores)
    assert _threads.pairs_pay(B, work) is pays


def _bi(cell: str, **kw: Any) -> rk.Bidirectional:
    inner = (rk.LSTM(6, seed=4, return_sequences=True, **kw) if cell == "lstm"
             else rk.GRU(5, seed=4, return_sequences=True, **kw))
    layer = rk.Bidirectional(inner, merge_mode="concat")
    layer.build(rk.Shape.with_free_batch((None, 7, 3)))
    return layer


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("B", [1, 5, 40])
@pytest.mark.parametrize("lengths", [False, True])
def test_bidirectional_inference_side_by_side_has_the_serial_bits(
        monkeypatch: pytest.MonkeyPatch, every_pass_pays: None, cell: str, B: int, lengths: bool) -> None:
    layer = _bi(cell)
    rng = np.random.default_rng(B)
    x = rng.standard_normal((B, 7, 3)).astype(np.float32)
    n = rng.integers(1, 8, B) if lengths else None
    used: list[int] = []
    real = _bidirectional.run_each
    monkeypatch.setattr(_bidirectional, "run_each", lambda jobs: used.append(len(jobs)) or real(jobs))
    side = layer.forward(x, rk.Ctx.inference().set_mask(lengths=n))
    assert used == [2]
    monkeypatch.setattr(_bidirectional, "pairs_pay", lambda B, work: False)
    serial = layer.forward(x, rk.Ctx.inference().set_mask(lengths=n))
    np.testing.assert_array_equal(side, serial)
    with kernels.use("reference"):                     # the mode reaches the worker's direction
        ref = layer.forward(x, rk.Ctx.inference().set_mask(lengths=n))
    monkeypatch.setattr(_bidirectional, "pairs_pay", _threads.pairs_pay)
    with kernels.use("reference"):
        np.testing.assert_array_equal(layer.forward(x, rk.Ctx.inference().set_mask(lengths=n)), ref)
    np.testing.assert_allclose(side, ref, rtol=2e-5, atol=2e-6)


def test_a_small_bidirectional_pass_runs_its_directions_one_after_the_other(monkeypatch: pytest.MonkeyPatch,
                                                                           two_cores: None) -> None:
    layer = _bi("lstm")
    used: list[int] = []
    real = _bidirectional.run_each
    monkeypatch.setattr(_bidirectional, "run_each", lambda jobs: used.append(len(jobs)) or real(jobs))
    x = np.random.default_rng(1).standard_normal((15, 7, 3)).astype(np.float32)
    serial = layer.forward(x, rk.Ctx.inference())      # 15 rows x 7 steps x 264 weights: far below
    assert used == []
    monkeypatch.setattr(_threads, "PAIR_WORK", 15 * 7 * layer.forward_layer.param_count())
    np.testing.assert_array_equal(layer.forward(x, rk.Ctx.inference()), serial)
    assert used == [2]


def test_bidirectional_states_side_by_side_and_training_one_after_the_other(monkeypatch: pytest.MonkeyPatch,
                                                                            every_pass_pays: None) -> None:
    layer = _bi("lstm", return_state=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7, 3)).astype(np.float32)
    init = [rng.standard_normal((3, 6)).astype(np.float32) for _ in range(4)]
    used: list[int] = []
    real = _bidirectional.run_each
    monkeypatch.setattr(_bidirectional, "run_each", lambda jobs: used.append(len(jobs)) or real(jobs))
    side = layer.forward([x, *init], rk.Ctx.inference())
    ctx = rk.Ctx.training(0)
    trained = layer.forward([x, *init], ctx)            # training: never side by side
    assert used == [2]
    monkeypatch.setattr(_bidirectional, "pairs_pay", lambda B, work: False)
    serial = layer.forward([x, *init], rk.Ctx.inference())
    assert len(side) == len(serial) == len(trained) == 5
    for a, b, c in zip(side, serial, trained, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("work", "edges"), [
    ([1] * 32, [(0, 16), (16, 32)]),                      # (HANDOFF_WORK is 0 here: the next test)
    ([10_000_000] * 32, [(0, 16), (16, 32)]),
    ([50] * 12 + [5] * 20, [(0, 8), (8, 32)]),             # the long rows first: the first block is short
    ([5] * 20 + [50] * 12, [(0, 24), (24, 32)]),
    ([0] * 32, [(0, 16), (16, 32)]),                       # nothing to weigh: the plain blocks
    ([1] * 15, [(0, 15)]),                                 # one block
])
def test_weighted_blocks_balance_the_rows_work(two_cores: None, work: list[int], edges: list[tuple[int, int]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "block_cost", None)
    monkeypatch.setattr(_threads, "HANDOFF_WORK", 0)
    assert _threads.weighted_blocks(np.array(work, np.int64)) == edges


def test_weighted_blocks_give_the_caller_the_hand_off(two_cores: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "HANDOFF_WORK", 4_000_000)      # two rows of 1M each: one row more
    assert _threads.weighted_blocks(np.full(32, 1_000_000, np.int64)) == [(0, 18), (18, 32)]
    monkeypatch.setattr(_threads, "CORES", 4)
    assert _threads.weighted_blocks(np.full(32, 1, np.int64)) == [(0, 8), (8, 16), (16, 24), (24, 32)]


def test_a_whole_batch_block_while_the_workers_are_busy_keeps_its_scratch_apart(two_cores: None) -> None:
    """A pass of 16 rows and more that finds the workers busy runs one block of every row: its
    parks and its projection chunk (both for all the rows) go back to the plan's spares under
    keys of their own, so that another thread never takes one for the other."""
    pytest.importorskip("numba")
    from rnnkit.kernels import _plans

    layer = rk.LSTM(6, seed=2, return_sequences=True)
    layer.build(rk.Shape.with_free_batch((None, 7, 3)))
    x = np.random.default_rng(3).standard_normal((24, 7, 3)).astype(np.float32)
    free = layer.forward(x, rk.Ctx.inference())
    assert _threads._busy.acquire(blocking=False)
    try:
        busy = [layer.forward(x, rk.Ctx.inference()) for _ in range(2)]
    finally:
        _threads._busy.release()
    for y in busy:
        np.testing.assert_array_equal(y, free)
    kept = _plans._plans.get(layer.cell)
    assert kept is not None
    keys = [k for k, _ in kept.plan._spares]
    assert len(keys) == len(set(keys)) == 2
