"""rk.data.windows (lazy windows from an array or a memory map) and rk.data.bucket_by_length."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.timeseries._window import make_windows


def _materialised(series: np.ndarray, window: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Every window by hand, the definition written out with loops."""
    s2 = series[:, None] if series.ndim == 1 else series
    n = s2.shape[0] - window - horizon + 1
    x = np.stack([s2[s:s + window] for s in range(n)])
    y = np.stack([s2[s + window - 1 + horizon] for s in range(n)])
    return x.astype(np.float32), y.astype(np.float32)


@pytest.mark.parametrize("shape,window,horizon,bs",
                         [((50,), 7, 1, 8), ((41, 3), 5, 3, 6), ((20, 2), 4, 0, 32)])
def test_windows_equal_materialised_windows_exactly(shape: tuple[int, ...], window: int, horizon: int,
                                                    bs: int) -> None:
    series = np.random.default_rng(0).normal(size=shape)
    ds = rk.data.windows(series, window, horizon, batch_size=bs)
    x = np.concatenate([ds[i][0] for i in range(len(ds))])
    y = np.concatenate([ds[i][1] for i in range(len(ds))])
    ex, ey = _materialised(series, window, horizon)
    np.testing.assert_array_equal(x, ex)
    np.testing.assert_array_equal(y, ey)
    assert len(ds) == -(-len(ex) // bs) and ds[len(ds) - 1][0].shape[0] == len(ex) - (len(ds) - 1) * bs
    if horizon >= 1:  # the forecasting windows of rnnkit.timeseries, for the same target column
        tw = make_windows(series.reshape(shape[0], -1), series.reshape(shape[0], -1)[:, 0], window, horizon)
        np.testing.assert_array_equal(x, tw.x)
        np.testing.assert_array_equal(y[:, :1], tw.y)


def test_windows_shuffle_is_a_seeded_permutation_redrawn_each_epoch() -> None:
    series = np.arange(100.0)
    ds = rk.data.windows(series, 5, 1, batch_size=16, shuffle=True, seed=3)
    first = np.concatenate([ds[i][1][:, 0] for i in range(len(ds))])
    assert sorted(first.tolist()) == list(np.arange(5.0, 100.0))
    assert not np.array_equal(first, np.arange(5.0, 100.0))
    for i in range(len(ds)):  # every x still ends the row before its target
        x, y = ds[i]
        np.testing.assert_array_equal(x[:, -1, 0] + 1, y[:, 0])
    ds.on_epoch_end()
    second = np.concatenate([ds[i][1][:, 0] for i in range(len(ds))])
    assert sorted(second.tolist()) == sorted(first.tolist()) and not np.array_equal(first, second)
    again = rk.data.windows(series, 5, 1, batch_size=16, shuffle=True, seed=3)
    np.testing.assert_array_equal(np.concatenate([again[i][1][:, 0] for i in range(len(again))]), first)


def test_windows_refuse_bad_input() -> None:
    with pytest.raises(rk.InvalidInputError, match="too few"):
        rk.data.windows(np.zeros(5), 5, 1)
    with pytest.raises(rk.InvalidParameterError, match="window"):
        rk.data.windows(np.zeros(5), 0, 1)
    with pytest.raises(rk.InvalidInputError, match="targets has 4 rows"):
        rk.data.windows(np.zeros(5), 2, 1, targets=np.zeros(4))
    with pytest.raises(IndexError, match="out of range"):
        rk.data.windows(np.zeros(10), 2, 1, batch_size=4)[3]


def test_windows_on_a_memory_map_of_ten_million_points_stay_under_50_mb(tmp_path: Path) -> None:
    n, window, bs = 10**7, 32, 4096
    path = tmp_path / "series.f32"
    mm = np.memmap(path, dtype=np.float32, mode="w+", shape=(n,))
    for a in range(0, n, 10**6):  # written in chunks: the test itself never holds the series
        mm[a:a + 10**6] = np.arange(a, a + 10**6, dtype=np.float32) * np.float32(1e-3)
    mm.flush()
    del mm
    series = np.memmap(path, dtype=np.float32, mode="r", shape=(n,))
    tracemalloc.start()
    peaks = []
    for shuffle in (False, True):
        tracemalloc.reset_peak()
        ds = rk.data.windows(series, window, 1, batch_size=bs, shuffle=shuffle, seed=0)
        checked = 0
        for i in range(0, len(ds), 97):  # a spread of batches, each against the definition
            x, y = ds[i]
            s = ds.starts(i)
            np.testing.assert_array_equal(x[:, :, 0], np.asarray(series)[s[:, None] + np.arange(window)])
            np.testing.assert_array_equal(y[:, 0], np.asarray(series)[s + window])
            checked += len(s)
        last = ds[len(ds) - 1][0]
        assert last.shape == ((n - window) % bs or bs, window, 1)
        assert checked > 10**5
        peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    print(f"windows over a 10**7-point memory map: peak {peaks[0] / 2**20:.1f} MiB traced in order, "
          f"{peaks[1] / 2**20:.1f} MiB shuffled (the uint32 permutation: 38 MiB)")
    assert peaks[0] < 5 * 2**20 and peaks[1] < 50 * 2**20


def test_bucket_by_length_every_sequence_once_and_padding_below_the_bucket_width() -> None:
    rng = np.random.default_rng(1)
    seqs = [rng.integers(1, 50, size=int(t)) for t in rng.integers(1, 60, size=203)]
    targets = np.arange(203)
    for width in (None, 8):
        ds = rk.data.bucket_by_length(seqs, 16, targets, bucket_width=width, seed=2)
        for _epoch in range(2):
            seen = []
            for b in range(len(ds)):
                x, y = ds[b]
                lens = ds.lengths(b)
                seen += y.tolist()
                assert x.shape == (len(y), lens.max())
                for row, i in enumerate(y):
                    np.testing.assert_array_equal(x[row, :lens[row]], seqs[i])
                    assert (x[row, lens[row]:] == 0).all()
                    assert lens[row] == len(seqs[i])
                pad = lens.max() - lens
                if width is not None:
                    assert pad.max() < width and len(set((lens // width).tolist())) == 1
                mask = ds.mask(b)
                np.testing.assert_array_equal(mask.valid(x.shape[1]), np.arange(x.shape[1]) < lens[:, None])
            assert sorted(seen) == list(range(203))
            ds.on_epoch_end()
    # sorted order (no width): total padding no more than any other grouping into these sizes
    ds = rk.data.bucket_by_length(seqs, 16, targets, shuffle=False)
    total = sum(int((ds.lengths(b).max() - ds.lengths(b)).sum()) for b in range(len(ds)))
    lens = np.sort([len(s) for s in seqs])
    assert total == sum(int((lens[a:a + 16].max() - lens[a:a + 16]).sum()) for a in range(0, 203, 16))
    with pytest.raises(rk.InvalidInputError, match="sequence 1"):
        rk.data.bucket_by_length([np.zeros((3, 2)), np.zeros((3, 4))], 2)
