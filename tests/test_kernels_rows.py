"""The packed products' blocking (several panels a call) and the one-row paths of the compiled
walker (a batch of one, the small-call case): several panels a call keep each panel's bits; the
row product equals the blocked product bit for bit and numpy to rounding; the spare scratch arrays
and the direct entry point of a pass never leak one call's values into another's, whatever the
input's layout; the unmanaged views of the walkers leave no array alive or freed too early."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.recurrent._walker import reference_walk

pytest.importorskip("numba")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_product_equals_the_blocked_product_and_numpy(dtype: str) -> None:
    """``rgemm1`` over every panel count around ``ROW_PANELS`` (a full call, then the rest, a
    partial last panel), depths 0 to 40, beta 0 and 1, a row of a bigger array: the same bits
    as ``rgemm`` (so a batch of one gives what its row gives in any batch) and numpy's values."""
    import numba

    from rnnkit.kernels._packed import ROW_PANELS, nr_of, pack, rgemm, rgemm1

    @numba.njit(cache=False)
    def row_product(A: np.ndarray, P: np.ndarray, C: np.ndarray, beta: float) -> None:
        rgemm1(A, P, C, beta)

    rng = np.random.default_rng(0)
    nr = nr_of(dtype)
    tol = 2e-5 if dtype == "float32" else 1e-13
    for K in (0, 1, 7, 32, 40):
        for N in (1, nr - 1, nr, ROW_PANELS * nr, ROW_PANELS * nr + 1, (2 * ROW_PANELS + 1) * nr - 3):
            Bm = rng.standard_normal((K, N)).astype(dtype)
            P = pack(Bm)
            A = rng.standard_normal((3, K)).astype(dtype)[1:2]       # row 1 of a bigger array
            C0 = rng.standard_normal((1, N)).astype(dtype)
            for beta in (0.0, 1.0):
                got, blocked = C0.copy(), C0.copy()
                row_product(A, P, got, beta)
                rgemm(A, P, blocked, beta)
                np.testing.assert_array_equal(got, blocked)
                want = A.astype(np.float64) @ Bm.astype(np.float64) + beta * C0
                np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max())))


def _reference_outputs(layer: rk.RecurrentLayer, x: np.ndarray) -> list[np.ndarray]:
    with kernels.use("reference"):
        got = layer.forward(x, rk.Ctx.inference())
    return [np.asarray(g) for g in (got if isinstance(got, list) else [got])]


def _outputs(layer: rk.RecurrentLayer, x: np.ndarray) -> list[np.ndarray]:
    got = layer.forward(x, rk.Ctx.inference())
    return [np.asarray(g) for g in (got if isinstance(got, list) else [got])]


@pytest.mark.parametrize("kind", ["lstm", "gru", "lstm_proj"])
def test_consecutive_small_calls_keep_their_own_values(kind: str) -> None:
    """Calls of one layer one after another reuse the spare scratch arrays and the direct entry
    point: each call's outputs (sequence and final states) equal the reference for its own
    input, and outputs handed out earlier are never written by a later call."""
    layer = {"lstm": lambda: rk.LSTM(8, seed=1, return_sequences=True, return_state=True),
             "gru": lambda: rk.GRU(8, seed=2, return_sequences=True, return_state=True),
             "lstm_proj": lambda: rk.LSTM(8, proj_size=3, seed=3, return_sequences=True)}[kind]()
    layer.build((None, 7, 5))
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1, 7, 5)).astype(np.float32) for _ in range(4)]
    outs = [_outputs(layer, x) for x in xs]
    kept = [[o.copy() for o in out] for out in outs]
    for _ in range(3):                                   # more calls after the outputs were taken
        _outputs(layer, xs[0])
    for x, out, copy in zip(xs, outs, kept, strict=True):
        for o, c, want in zip(out, copy, _reference_outputs(layer, x), strict=True):
            np.testing.assert_array_equal(o, c)
            np.testing.assert_allclose(o, want, rtol=0, atol=2e-5)


def test_the_direct_entry_follows_the_input_layout() -> None:
    """The same layer on the inputs the walker accepts — writable, read-only, with a mask —
    one after another (each a different compiled version, each with its own entry): every
    output equals the reference, with the same bits for the same values."""
    from rnnkit.kernels import _driver

    layer = rk.LSTM(6, seed=5)
    layer.build((None, 9, 4))
    cell, w = layer.cell, layer._weights
    found = kernels.find_options(cell)
    assert found is not None
    step, opts = found
    rng = np.random.default_rng(6)
    base = rng.standard_normal((9, 3, 4)).astype(np.float32)
    ro = base.copy()
    ro.flags.writeable = False
    full = np.ones((9, 3), bool)
    ref_final = None
    for x_tm, mask in ((base, None), (ro, None), (base, full), (ro, full.astype(np.uint8)), (base, None)):
        _, final, _ = _driver.walk(cell, step, w, x_tm, None, False, False, mask, None, opts)
        _, want, _ = reference_walk(cell, w, x_tm, None, False, False, mask)
        np.testing.assert_allclose(final[0], want[0], rtol=0, atol=2e-5)
        if ref_final is None:
            ref_final = np.array(final[0])
        np.testing.assert_array_equal(final[0], ref_final)   # the same bits, whatever the call


def test_unmanaged_views_leave_the_arrays_alive_and_free() -> None:
    """The walkers' scratch arrays (kept alive to the end of the loops, then freed) and the
    caller's arrays (never freed by the walker): many passes, training and inference, each on
    an input dropped right after it, give the reference's values every time, and every array
    the compiled code allocated is freed again (Numba's allocation counts balance)."""
    from numba.core.runtime import _nrt_python as nrt
    from numba.core.runtime import rtsys

    layer = rk.GRU(5, seed=7, return_sequences=True)
    model = rk.Sequential([layer, rk.Dense(2, seed=8)])
    model.compile(optimizer=rk.SGD(0.0), loss="mse")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 6, 4)).astype(np.float32)
    y = rng.standard_normal((3, 6, 2)).astype(np.float32)
    model.fit(x, y, epochs=1, batch_size=3, verbose=0)
    want = _reference_outputs(layer, x)[0]
    was = nrt.memsys_stats_enabled()
    nrt.memsys_enable_stats()
    try:
        stats = []
        for i in range(20):
            if i in (5, 19):                          # in the steady state: as many frees as allocations
                gc.collect()
                stats.append(rtsys.get_allocation_stats())
            model.fit(np.array(x), y, epochs=1, batch_size=3, verbose=0)   # weights unchanged: SGD(0)
            for b in (1, 3):
                got = _outputs(layer, np.array(x[:b]))[0]
                np.testing.assert_allclose(got, want[:b], rtol=0, atol=2e-5)
        s0, s1 = stats
    finally:
        if not was:
            nrt.memsys_disable_stats()
    assert s1.alloc - s0.alloc > 0
    assert s1.alloc - s0.alloc == s1.free - s0.free


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_full_row_blocks_over_several_panels_keep_each_panels_values(dtype: str) -> None:
    """Full blocks of MR rows take ``FULL_PANELS`` panels a micro-kernel call: every panel count
    from 1 to past two such groups (a partial last panel too), beta 0 and 1, gives the same bits
    as each panel's columns multiplied alone (one panel a call), and numpy's values."""
    from rnnkit.kernels._packed import FULL_PANELS, MR, nr_of, pack, rgemm

    rng = np.random.default_rng(2)
    nr = nr_of(dtype)
    tol = 2e-5 if dtype == "float32" else 1e-13
    for M in (MR, 2 * MR + 1, 3 * MR + 5):
        for npan in range(1, 2 * FULL_PANELS + 2):
            for N in (npan * nr, npan * nr - 3):
                if N <= 0:
                    continue
                K = 37
                Bm = rng.standard_normal((K, N)).astype(dtype)
                A = rng.standard_normal((M, K)).astype(dtype)
                C0 = rng.standard_normal((M, N)).astype(dtype)
                for beta in (0.0, 1.0):
                    got = C0.copy()
                    rgemm(A, pack(Bm), got, beta)
                    alone = C0.copy()
                    for c0 in range(0, N, nr):
                        c1 = min(N, c0 + nr)
                        part = np.ascontiguousarray(alone[:, c0:c1])
                        rgemm(A, pack(Bm, cols=(c0, c1)), part, beta)
                        alone[:, c0:c1] = part
                    np.testing.assert_array_equal(got, alone)
                    want = A.astype(np.float64) @ Bm.astype(np.float64) + beta * C0
                    scale = max(1.0, float(np.abs(want).max()))
                    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_packed_panels_start_on_a_cache_line_and_hold_the_columns(dtype: str) -> None:
    """Every packing (many sizes, so many allocator offsets; transposed; a column range) starts
    on a 64-byte boundary, so a panel row is one cache line, and still holds ``op(B)``'s
    columns panel by panel, zero past the last."""
    from rnnkit.kernels._packed import nr_of, pack

    rng = np.random.default_rng(3)
    nr = nr_of(dtype)
    for K in (1, 3, 16, 33):
        for N in (1, nr + 5, 3 * nr):
            Bm = rng.standard_normal((K, N)).astype(dtype)
            for trans, src, cols in ((False, Bm, None), (True, Bm.T.copy(), None), (False, Bm, (1, N))):
                P = pack(src, trans=trans, cols=cols)
                assert P.ctypes.data % 64 == 0, (K, N, trans, cols)
                c0, c1 = cols or (0, N)
                flat = P.transpose(1, 0, 2).reshape(K, -1)       # (K, npan * nr)
                np.testing.assert_array_equal(flat[:, :c1 - c0], Bm[:, c0:c1])
                assert not flat[:, c1 - c0:].any()


def test_aligned_scratch_starts_on_a_cache_line_with_the_shape_asked() -> None:
    """``_pool.aligned`` over many sizes (so many allocator offsets): a C-contiguous, writeable
    array of the shape and dtype asked, on a 64-byte boundary, that owns no other array's
    memory (two of them do not overlap)."""
    from rnnkit.kernels import _pool

    for n in range(1, 40):
        for dt in (np.float32, np.float64):
            a, b = _pool.aligned((n, 3), dt), _pool.aligned((n, 3), dt)
            assert a.shape == (n, 3) and a.dtype == dt and a.flags.c_contiguous and a.flags.writeable
            assert a.ctypes.data % 64 == 0 and b.ctypes.data % 64 == 0
            a[...], b[...] = 1.0, 2.0
            assert (a == 1.0).all() and (b == 2.0).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_last_rows_over_whole_groups_and_the_panels_left_keep_each_rows_values(dtype: str) -> None:
    """Every count of last rows (1 to MR - 1, after a full block) takes ``GROUP[mr]`` panels a
    call and the panels left over one a call: for panel counts from 1 to past two groups (a
    partial last panel too), beta 0 and 1, each row gives the bits of that row multiplied alone
    (a product of one row), and numpy's values."""
    from rnnkit.kernels._packed import GROUP, MR, nr_of, pack, rgemm

    rng = np.random.default_rng(4)
    nr = nr_of(dtype)
    tol = 2e-5 if dtype == "float32" else 1e-13
    K = 29
    for mr in range(1, MR):
        M = MR + mr
        for npan in sorted({1, GROUP[mr] - 1, GROUP[mr], GROUP[mr] + 1, 2 * GROUP[mr] + 1} - {0}):
            for N in (npan * nr, npan * nr - 3):
                if N <= 0:
                    continue
                Bm = rng.standard_normal((K, N)).astype(dtype)
                P = pack(Bm)
                A = rng.standard_normal((M, K)).astype(dtype)
                C0 = rng.standard_normal((M, N)).astype(dtype)
                for beta in (0.0, 1.0):
                    got = C0.copy()
                    rgemm(A, P, got, beta)
                    for r in range(M):
                        one = C0[r:r + 1].copy()
                        rgemm(A[r:r + 1], P, one, beta)
                        np.testing.assert_array_equal(got[r:r + 1], one, err_msg=f"mr={mr} npan={npan} {r}")
                    want = A.astype(np.float64) @ Bm.astype(np.float64) + beta * C0
                    scale = max(1.0, float(np.abs(want).max()))
                    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)
