"""Hostile integers given to the ops, the data helpers, forecasting, the CLI and the server: a
bool, a float, a NumPy bool, an int NumPy cannot hold, an object whose ``__index__`` raises or
lies. Each goes through the one check (``rnnkit._numbers``) and is refused with a typed error
naming the argument; none reaches NumPy as a bare TypeError / ValueError / OverflowError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import ops


class RaisingIndex:
    """Has ``__index__``, which raises (an int check that calls it would leak the error)."""

    def __index__(self) -> int:
        raise RuntimeError("__index__ called")


class HugeIndex:
    """Has ``__index__``, which returns an int no array index can be."""

    def __index__(self) -> int:
        return 10**30


HOSTILE = [True, np.bool_(False), 1.0, 10**30, -(10**30), RaisingIndex(), HugeIndex(), "1", None]
X = np.arange(6.0).reshape(2, 3)

OPS_AXIS: list[tuple[str, Callable[[Any], Any]]] = [
    ("sum", lambda a: ops.sum(X, axis=a)),
    ("mean", lambda a: ops.mean(X, axis=a)),
    ("concatenate", lambda a: ops.concatenate([X, X], axis=a)),
    ("stack", lambda a: ops.stack([X, X], axis=a)),
    ("split", lambda a: ops.split(X, 1, axis=a)),
    ("take", lambda a: ops.take(X, np.array([0]), axis=a)),
    ("cumsum", lambda a: ops.cumsum(X, axis=a)),
    ("argmax", lambda a: ops.argmax(X, axis=a)),
    ("squeeze", lambda a: ops.squeeze(X[:1], axis=a)),
    ("expand_dims", lambda a: ops.expand_dims(X, a)),
    ("transpose", lambda a: ops.transpose(X, axes=a)),
    ("one_hot", lambda a: ops.one_hot(np.array([1]), 3, axis=a)),
]


def _id(v: object) -> str:
    return type(v).__name__ + (f"({v})" if isinstance(v, int) else "")


@pytest.mark.parametrize("value", HOSTILE, ids=_id)
@pytest.mark.parametrize("op, call", OPS_AXIS, ids=[o for o, _ in OPS_AXIS])
def test_ops_axis_hostile_values_are_typed(op: str, call: Callable[[Any], Any], value: Any) -> None:
    # before: 1.5 / RaisingIndex -> TypeError "not iterable" (sum), a list axis -> ValueError
    # "too many values to unpack" (concatenate, cumsum, take), 10**30 -> OverflowError (expand_dims)
    if value is None and op not in ("expand_dims",):
        return  # None is "all axes" / the default axis where the op has one
    with pytest.raises(rk.InvalidInputError, match=rf"ops\.{op}: ax[ie]s"):
        call(value)


@pytest.mark.parametrize("op, call", [(o, c) for o, c in OPS_AXIS
                                      if o in ("concatenate", "stack", "split", "take", "cumsum", "argmax",
                                               "one_hot")])
def test_ops_one_axis_refuses_a_list_of_axes(op: str, call: Callable[[Any], Any]) -> None:
    with pytest.raises(rk.InvalidInputError, match=rf"ops\.{op}: axis must be one int, got \[0, 1\]"):
        call([0, 1])


def test_ops_axes_accept_numpy_ints_with_numpy_values() -> None:
    np.testing.assert_array_equal(ops.sum(X, axis=np.int64(-1)), X.sum(axis=-1))
    np.testing.assert_array_equal(ops.sum(X, axis=(np.int32(0), 1)), X.sum())
    np.testing.assert_array_equal(ops.concatenate([X, X], axis=np.int8(1)), np.concatenate([X, X], 1))
    np.testing.assert_array_equal(ops.expand_dims(X, (0, -1)), X[None, :, :, None])
    np.testing.assert_array_equal(ops.argmax(X, axis=np.int64(0)), np.argmax(X, 0))


@pytest.mark.parametrize("value", [True, 2.0, 0, -3, RaisingIndex(), HugeIndex(), 2**63])
def test_one_hot_num_classes_hostile_is_typed(value: Any) -> None:
    # before: 10**30 reached np.arange (ValueError: Maximum allowed size exceeded)
    with pytest.raises(rk.InvalidInputError, match=r"ops\.one_hot: num_classes must be an int >= 1"):
        ops.one_hot(np.array([1]), value)


def test_one_hot_num_classes_over_the_memory_budget_is_refused_before_allocation() -> None:
    old = rk.io.set_limits(max_array_bytes=1 << 20)
    try:
        with pytest.raises(rk.MemoryBudgetError, match=r"ops\.one_hot: .*\(4, 1000000\).*over the memory "
                                                       r"budget of 1048576 bytes.*set_limits"):
            ops.one_hot(np.array([0, 1, 2, 3]), 1_000_000)
    finally:
        rk.io.set_limits(**old)


@pytest.mark.parametrize("axes", [True, 2.5, 3, HugeIndex(), RaisingIndex(), (0, 1, 2), ([0], [True])])
def test_tensordot_axes_hostile_is_typed(axes: Any) -> None:
    with pytest.raises(rk.InvalidInputError, match=r"ops\.tensordot: ax"):
        ops.tensordot(X, X.T, axes=axes)
    np.testing.assert_allclose(ops.tensordot(X, X.T, axes=np.int64(1)), X @ X.T)
