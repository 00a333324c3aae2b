"""The pool of big work arrays (rnnkit.kernels._pool): a buffer is handed out again only when no
array uses it, never beyond the cap; a layer's passes from the pool give the same values as
fresh arrays and keep earlier results intact."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.kernels import _pool

BIG = (_pool.MIN_BYTES // 4,)                 # float32 elements of one pooled array


@pytest.fixture(autouse=True)
def _empty_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pool, "_bufs", [])
    monkeypatch.setattr(_pool, "CAP", 4 * _pool.MIN_BYTES)


def test_a_buffer_in_use_is_never_handed_out_again() -> None:
    a = _pool.empty(BIG, np.float32)
    view = a[10:20]                          # a view alone keeps the buffer in use
    del a
    b = _pool.empty(BIG, np.float32)
    assert not np.shares_memory(view, b)
    del view
    c = _pool.empty(BIG, np.float32)         # now the first buffer is idle: reused
    assert len(_pool._bufs) == 2 and not np.shares_memory(b, c)
    assert c.shape == BIG and c.dtype == np.float32 and c.flags.c_contiguous and c.flags.writeable


def test_other_shapes_and_dtypes_of_the_same_bytes_share_a_buffer() -> None:
    a = _pool.empty(BIG, np.float32)
    addr = a.__array_interface__["data"][0]
    del a
    b = _pool.empty((2, BIG[0] // 4), np.float64)
    assert b.__array_interface__["data"][0] == addr and b.shape == (2, BIG[0] // 4)


def test_the_cap_drops_idle_buffers_and_then_falls_back_to_numpy() -> None:
    held = [_pool.empty(BIG, np.float32) for _ in range(4)]      # the cap: four buffers
    assert _pool.held() == 4 * _pool.MIN_BYTES
    extra = _pool.empty(BIG, np.float32)                         # no room, none idle: numpy's
    assert extra.base is None and _pool.held() == 4 * _pool.MIN_BYTES
    del held[:2]
    other = _pool.empty((BIG[0] + 16,), np.float32)              # a new size: two idle dropped
    assert other.base is not None and _pool.held() == 3 * _pool.MIN_BYTES + 64
    small = _pool.empty((8,), np.float32)
    assert small.base is None
    _pool.clear()
    assert _pool.held() == 3 * _pool.MIN_BYTES + 64               # in use: kept


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_passes_from_the_pool_equal_fresh_ones_and_keep_earlier_results(monkeypatch: pytest.MonkeyPatch,
                                                                         kind: str) -> None:
    pytest.importorskip("numba")
    monkeypatch.setattr(_pool, "MIN_BYTES", 1024)                # every pass array pooled here
    monkeypatch.setattr(_pool, "CAP", 1 << 26)
    B, T, F, H = 24, 9, 5, 8
    layer = (rk.LSTM(H, seed=2, return_sequences=True) if kind == "lstm"
             else rk.GRU(H, seed=2, reset_after=True, return_sequences=True))
    layer.build((None, T, F))
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((B, T, F)).astype(np.float32) for _ in range(3)]
    g = rng.standard_normal((B, T, H)).astype(np.float32)

    def train(x: np.ndarray) -> list[np.ndarray]:
        ctx = rk.Ctx.training(0)
        y = layer.forward(x, ctx)
        dx = layer.backward(g, ctx)
        return [y, dx, *(np.array(ctx.grad(layer, n)) for n in layer.weight_names),
                layer.forward(x, rk.Ctx.inference())]

    got = [train(x) for x in xs]                                 # the earlier results stay alive
    assert len(_pool._bufs) > 0
    monkeypatch.setattr(_pool, "CAP", 0)                         # fresh arrays every time
    for x, old in zip(xs, got, strict=True):
        for a, b in zip(old, train(x), strict=True):
            np.testing.assert_array_equal(a, b)
