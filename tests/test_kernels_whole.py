"""Inference over the whole batch in one compiled call (a batch that is one row block) equals
the NumPy reference and the split batch bit for bit, across calls that change the batch, the
steps and the mask; a padded batch's mask reaches the compiled loop as the Mask's own
time-major array, made once."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.kernels import _driver, _threads

pytest.importorskip("numba")

F, H = 5, 6


def _forward(layer: Any, x: np.ndarray, mask: dict[str, Any], mode: str) -> list[np.ndarray]:
    with kernels.use(mode):
        ctx = rk.Ctx.inference()
        if mask:
            ctx.set_mask(**mask)
        got = layer.forward(x, ctx)
    return [np.array(g) for g in got]


def _mask(kind: str, B: int, T: int) -> dict[str, Any]:
    n = np.arange(B) % T + 1
    n[0] = T
    if kind == "lengths":
        return {"lengths": n}
    if kind == "mask":
        return {"mask": np.arange(T)[None, :] < n[:, None]}
    return {}


@pytest.mark.parametrize("cls", [rk.LSTM, rk.GRU])
def test_calls_that_change_batch_steps_and_mask_equal_the_reference(cls: type) -> None:
    layer = cls(H, return_sequences=True, return_state=True, seed=3)
    layer.build((None, None, F))
    rng = np.random.default_rng(0)
    for B, T, kind in ((1, 9, "none"), (1, 5, "lengths"), (3, 9, "mask"), (1, 9, "lengths"),
                       (1, 9, "none"), (2, 4, "none"), (1, 9, "mask")):
        x = rng.standard_normal((B, T, F)).astype(np.float32)
        m = _mask(kind, B, T)
        fast, ref = _forward(layer, x, m, "fast"), _forward(layer, x, m, "reference")
        for a, b in zip(fast, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=2e-5 * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("kind", ["none", "lengths"])
@pytest.mark.parametrize("cls", [rk.LSTM, rk.GRU])
def test_one_block_and_split_blocks_give_the_same_bits(cls: type, kind: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    B, T = 2 * _threads.MIN_ROWS + 3, 7
    layer = cls(H, return_sequences=True, return_state=True, seed=4)
    layer.build((None, T, F))
    x = np.random.default_rng(1).standard_normal((B, T, F)).astype(np.float32)
    m = _mask(kind, B, T)
    monkeypatch.setattr(_threads, "CORES", 1)
    whole = _forward(layer, x, m, "fast")
    monkeypatch.setattr(_threads, "CORES", 2)
    split = _forward(layer, x, m, "fast")
    for a, b in zip(whole, split, strict=True):
        assert np.array_equal(a, b)


def test_time_major_is_valid_transposed_made_once_per_steps() -> None:
    n = np.array([3, 0, 5, 1])
    for mask in (rk.Mask(lengths=n), rk.Mask(np.arange(5)[None, :] < n[:, None])):
        tm = mask.time_major(5)
        assert tm.dtype == np.bool_ and tm.flags.c_contiguous
        assert np.array_equal(tm, (np.arange(5)[None, :] < n[:, None]).T)
        assert mask.time_major(5) is tm
    lengths = rk.Mask(lengths=n)
    t5 = lengths.time_major(5)
    t6 = lengths.time_major(6)                    # other steps: made again, for them
    assert t6 is not t5 and np.array_equal(t6, (np.arange(6)[None, :] < n[:, None]).T)


def test_a_boolean_time_major_mask_reaches_the_loop_without_a_copy() -> None:
    tm = rk.Mask(lengths=np.array([2, 4])).time_major(4)
    arg = _driver._mask_arg(tm, 4, 2)
    assert arg.dtype == np.uint8 and np.shares_memory(arg, tm)
    assert np.array_equal(arg, tm.astype(np.uint8))
    other = np.asfortranarray(np.ones((4, 3), bool))   # not C-contiguous: a copy, same values
    got = _driver._mask_arg(other, 4, 3)
    assert got.flags.c_contiguous and not np.shares_memory(got, other) and np.all(got == 1)


def test_lengths_checks_read_the_longest_length_kept() -> None:
    m = rk.Mask(lengths=np.array([2, 7, 4], np.uint16))
    m.check(3, 7, "here")
    with pytest.raises(rk.InvalidInputError, match="a length of 7 exceeds the 6 timesteps"):
        m.check(3, 6, "here")
    with pytest.raises(rk.InvalidInputError, match="beyond any sequence"):
        rk.Mask(lengths=np.array([2**63], np.uint64))
    with pytest.raises(rk.InvalidInputError, match="non-negative"):
        rk.Mask(lengths=np.array([1, -1]))


@pytest.mark.parametrize("cls", [rk.LSTM, rk.GRU])
def test_one_row_reads_the_input_in_place_and_leaves_it_unchanged(cls: type) -> None:
    layer = cls(H, return_sequences=True, return_state=True, seed=5)
    layer.build((None, 8, F))
    x = np.random.default_rng(2).standard_normal((1, 8, F)).astype(np.float32)
    keep = x.copy()
    frozen = x.copy()
    frozen.flags.writeable = False                  # a read-only input: copied, as before
    strided = np.repeat(x, 2, axis=2)[:, :, ::2]    # not contiguous: copied
    ref = _forward(layer, x, {}, "reference")
    got = [_forward(layer, a, {}, "fast") for a in (x, frozen, strided)]
    assert np.array_equal(x, keep)
    for run in got:
        for a, b, c in zip(run, got[0], ref, strict=True):
            assert np.array_equal(a, b)
            np.testing.assert_allclose(a, c, rtol=0, atol=2e-5 * max(1.0, float(np.abs(c).max())))
