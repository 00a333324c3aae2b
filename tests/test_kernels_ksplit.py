"""The K-split reductions (rnnkit.kernels._reduce.split_k) and the two-phase split under them
(rnnkit.kernels._threads.run_phases): ``A[:m]^T G[:m] + A[m:]^T G[m:]`` as one packed product per
half on the threads, then the halves' sum on the same threads; bit-equal to the two separate
products and their sum (float32 and float64) at one, two and three threads, close to NumPy's
product; every first phase over before any second; errors re-raised."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

pytest.importorskip("numba")

from rnnkit.kernels import _gemm, _packed, _threads  # noqa: E402
from rnnkit.kernels._packed import gemm, ready  # noqa: E402
from rnnkit.kernels._reduce import product_tn, reduce  # noqa: E402


@pytest.fixture(autouse=True)
def _loops_ready() -> None:
    """The packed products' loops registered for both dtypes (the kernels do it on first use)."""
    ready(np.float32)
    ready(np.float64)


def _two_calls(A: np.ndarray, G: np.ndarray) -> np.ndarray:
    """The K split written out: the two halves' products as two calls, then their sum."""
    M, N = G.shape
    m = M // 2
    h0, h1 = np.empty((A.shape[1], N), A.dtype), np.empty((A.shape[1], N), A.dtype)
    gemm(A[:m].T, G[:m], False, h0, False, 0, N)
    gemm(A[m:].T, G[m:], False, h1, False, 0, N)
    return h0 + h1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1300, 37, 45), (2 * 512 + 7, 64, 130), (9, 3, 17)])
def test_split_product_equals_the_two_calls_and_their_sum(monkeypatch: pytest.MonkeyPatch, dtype: str,
                                                          shape: tuple[int, int, int]) -> None:
    M, K, N = shape
    rng = np.random.default_rng(5)
    A = rng.standard_normal((M, K)).astype(dtype)
    G = rng.standard_normal((M, N)).astype(dtype)
    want = _two_calls(A, G)
    for cores in (1, 2, 3):
        monkeypatch.setattr(_threads, "CORES", cores)
        out = np.full((K, N), np.nan, dtype)
        product_tn(A, G, out, True)
        np.testing.assert_array_equal(out, want, err_msg=f"{cores} threads")
    exact = A.astype(np.float64).T @ G.astype(np.float64)
    tol = 1e-4 if dtype == "float32" else 1e-11
    assert float(np.max(np.abs(want - exact))) <= tol * max(1.0, float(np.max(np.abs(exact))))
    one = np.empty((K, N), dtype)                  # (not split: one product over every row)
    product_tn(A, G, one, False)
    assert float(np.max(np.abs(one - exact))) <= tol * max(1.0, float(np.max(np.abs(exact))))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shared", [True, False], ids=["lstm-like", "gru-like"])
def test_split_reductions_equal_the_two_halves_summed(monkeypatch: pytest.MonkeyPatch, dtype: str,
                                                      shared: bool) -> None:
    """``reduce`` in halves: dW, db, dU the halves' reductions summed, dx the halves' rows, the
    same bits at every thread count."""
    M, F, S, N = 611, 9, 12, 48
    rng = np.random.default_rng(7)
    x2, dxw2 = rng.standard_normal((M, F)).astype(dtype), rng.standard_normal((M, N)).astype(dtype)
    drec2 = dxw2 if shared else rng.standard_normal((M, N)).astype(dtype)
    P1, P2 = rng.standard_normal((M, S)).astype(dtype), rng.standard_normal((M, S)).astype(dtype)
    split = N if shared else N // 3
    W = rng.standard_normal((F, N)).astype(dtype)
    rows = 1 if shared else 2

    def run(lo: int, hi: int) -> tuple[np.ndarray, ...]:
        dW, db, dU = np.empty((F, N), dtype), np.empty((rows, N), dtype), np.empty((S, N), dtype)
        dx = np.empty((hi - lo, F), dtype)
        _gemm.reductions(x2[lo:hi], dxw2[lo:hi], drec2[lo:hi], shared, P1[lo:hi], P2[lo:hi], split, W, dW, db,
                         dU, dx, 0, N, 0, hi - lo)
        return dW, db, dU, dx

    m = M // 2
    h0, h1 = run(0, m), run(m, M)
    want = [a + b for a, b in zip(h0[:3], h1[:3], strict=True)] + [np.concatenate([h0[3], h1[3]])]
    for cores in (1, 2, 3):
        monkeypatch.setattr(_threads, "CORES", cores)
        dW, db, dU = np.empty((F, N), dtype), np.empty((rows, N), dtype), np.empty((S, N), dtype)
        dx = np.empty((M, F), dtype)
        reduce(x2, dxw2, drec2, shared, P1, P2, split, W, dW, db, dU, dx, True, True)
        for name, got, w in zip(("dW", "db", "dU", "dx"), (dW, db, dU, dx), want, strict=True):
            np.testing.assert_array_equal(got, w, err_msg=f"{name} at {cores} threads")
    exact_db = dxw2.astype(np.float64).sum(axis=0)
    assert float(np.max(np.abs(db[0] - exact_db))) <= (1e-3 if dtype == "float32" else 1e-10)


def test_bias_sums_add_the_rows_in_order() -> None:
    """Every column's sum is the rows added one after the other from 0 (the order the halves'
    sum and the thread-count independence rely on), for any column range."""
    rng = np.random.default_rng(2)
    d = rng.standard_normal((257, 40)).astype(np.float32)
    db = np.full((2, 40), np.nan, np.float32)
    _gemm.bias_sums(d, d[::-1].copy(), db, 3, 37)
    for r, src in enumerate((d, d[::-1])):
        want = np.zeros(34, np.float32)
        for i in range(src.shape[0]):
            want = want + src[i, 3:37]
        np.testing.assert_array_equal(db[r, 3:37], want)
    assert np.isnan(db[:, :3]).all() and np.isnan(db[:, 37:]).all()


@pytest.mark.parametrize("cores", [2, 3])
def test_every_first_phase_ends_before_any_second_starts(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    monkeypatch.setattr(_threads, "CORES", cores)
    log: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    def note(phase: str) -> Any:
        def job(lo: int, hi: int) -> None:
            with lock:
                log.append((phase, lo, threading.current_thread().name))
        return job

    parts = [(i, i + 1) for i in range(cores)]
    for _ in range(20):
        log.clear()
        _threads.run_phases(parts, note("first"), note("then"))
        assert [p for p, _, _ in log] == ["first"] * cores + ["then"] * cores
        where = {(p, lo): t for p, lo, t in log}
        assert all(where["first", lo] == where["then", lo] for lo, _ in parts)   # one thread per part


def test_a_failing_first_phase_is_reraised_and_no_second_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "CORES", 3)
    thens: list[int] = []

    def first(lo: int, hi: int) -> None:
        if lo == 1:
            raise ValueError(f"part {lo}")

    with pytest.raises(ValueError, match="part 1"):
        _threads.run_phases([(0, 1), (1, 2), (2, 3)], first, lambda lo, hi: thens.append(lo))
    assert thens == []
    out = np.zeros(3)                     # the workers serve the next call
    _threads.run_phases([(0, 1), (1, 2), (2, 3)], lambda lo, hi: None,
                        lambda lo, hi: out.__setitem__(lo, lo + 1))
    np.testing.assert_array_equal(out, [1, 2, 3])


def test_busy_workers_run_both_phases_here_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that finds the workers busy (here: a call inside a part) runs every first phase,
    then every second, on its own thread."""
    monkeypatch.setattr(_threads, "CORES", 2)
    seen: list[list[str]] = []

    def outer(lo: int, hi: int) -> None:
        log: list[str] = []
        _threads.run_phases([(0, 1), (1, 2)], lambda a, b: log.append(f"f{a}"),
                            lambda a, b: log.append(f"t{a}"))
        seen.append(log)

    _threads.run_split([(0, 1), (1, 2)], outer)
    assert seen == [["f0", "f1", "t0", "t1"]] * 2


def test_the_halves_sum_refuses_a_strided_output() -> None:
    A, G = np.ones((40, 4), np.float32), np.ones((40, 6), np.float32)
    out = np.empty((4, 12), np.float32)[:, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        product_tn(A, G, out, True)


def test_the_calling_thread_takes_rows_for_the_hand_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the work of a row, the caller's block (the first) takes about HANDOFF_WORK / 2 of it
    in extra rows, none when a row outweighs that, and leaves the worker at least MIN_ROWS."""
    monkeypatch.setattr(_threads, "CORES", 2)
    monkeypatch.setattr(_threads, "block_cost", None)
    monkeypatch.setattr(_threads, "HANDOFF_WORK", 1 << 21)
    assert _threads.blocks(32, 50 * 256 * 96) == [(0, 17), (17, 32)]       # the LSTM at S2
    assert _threads.blocks(32, 10 * 256 * 96) == [(0, 20), (20, 32)]       # ... over 10 steps
    assert _threads.blocks(64, 100 * 1024 * 384) == [(0, 32), (32, 64)]    # S3: no shift
    assert _threads.blocks(32, 1) == [(0, 24), (24, 32)]                   # the worker keeps MIN_ROWS
    assert _threads.blocks(32) == _threads.blocks(32, 0) == [(0, 16), (16, 32)]
    monkeypatch.setattr(_threads, "CORES", 3)
    assert _threads.blocks(48, 1) == [(0, 16), (16, 32), (32, 48)]         # (two blocks only)


def test_two_blocks_split_where_the_modelled_products_are_cheapest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two row blocks split at B // 2 or at the nearest multiple of the register block within
    1/16 of it, whichever the cost model makes cheapest (the even split on a tie); every block
    contiguous, at least MIN_ROWS rows."""
    monkeypatch.setattr(_threads, "CORES", 2)
    monkeypatch.setattr(_threads, "block_rows", 6)
    monkeypatch.setattr(_threads, "block_cost", lambda n: n // 6 + (2.0 if n % 6 == 4 else 0.4 * (n % 6 > 0)))
    assert _threads.blocks(128) == [(0, 66), (66, 128)]      # 64 = 10 * 6 + 4: dearer than 66
    assert _threads.blocks(64) == [(0, 32), (32, 64)]        # 30 + 34 would be dearer
    assert _threads.blocks(32) == [(0, 16), (16, 32)]        # 18 is more than 1/16 off 16
    monkeypatch.setattr(_threads, "block_cost", lambda n: 1.0)
    assert _threads.blocks(128) == [(0, 64), (64, 128)]      # a tie: the even split
    monkeypatch.setattr(_threads, "block_cost", None)
    assert _threads.blocks(128) == [(0, 64), (64, 128)]
    monkeypatch.setattr(_threads, "block_cost", _packed.block_cost)
    for B in range(16, 600):
        for row_work in (1, 1 << 16, 1 << 20, 1 << 30):     # the caller's block longer, never shorter
            got = _threads.blocks(B, row_work)
            assert got[0] == (0, got[1][0]) and got[1][1] == B and got[1][0] >= _threads.blocks(B)[0][1]
            assert got[1][1] - got[1][0] >= _threads.MIN_ROWS
        parts = _threads.blocks(B)
        assert parts[0][0] == 0 and parts[-1][1] == B and parts[0][1] == parts[1][0]
        assert min(hi - lo for lo, hi in parts) >= _threads.MIN_ROWS
        assert 16 * abs(parts[0][1] - B // 2) <= B // 2
