"""Hostile integers given to the ops, the data helpers, forecasting, the CLI and the server: a
bool, a float, a NumPy bool, an int NumPy cannot hold, an object whose ``__index__`` raises or
lies. Each goes through the one check (``rnnkit._numbers``) and is refused with a typed error
naming the argument; none reaches NumPy as a bare TypeError / ValueError / OverflowError."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import ops
from rnnkit._numbers import show
from rnnkit.cli._common import CliError
from rnnkit.cli._predict import _check_steps


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
    return type(v).__name__ + (f"({show(v)})" if isinstance(v, int) else "")


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


# -- the server: sequence numbers through the one check, request arrays within the memory budget --
F = 4


def _serve_client(**settings: Any) -> Any:
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient
    model = rk.Sequential([rk.LSTM(3, seed=1)], input_shape=(None, None, F))
    return TestClient(rk.serve.app(model, **settings))


@pytest.mark.parametrize("seq", [True, 1.0, 0, -1, 2**62, 10**30, "1", [1]])
def test_serve_step_seq_hostile_is_422_naming_seq(seq: Any) -> None:
    # before: a hand-written check; now rnnkit._numbers.check_int, the message naming seq and its range
    x = np.ones((1, F), np.float32).tolist()
    with _serve_client() as c:
        sid = c.post("/v1/streams").json()["id"]
        r = c.post(f"/v1/streams/{sid}/step", json={"seq": seq, "x": x})
        assert r.status_code == 422 and r.json()["error"]["code"] == "bad_seq"
        assert r.json()["error"]["message"].startswith("step: seq (the step's sequence number")
        with c.websocket_connect(f"/v1/streams/{sid}/ws") as ws:
            ws.send_text(json.dumps({"seq": seq, "x": x}))
            assert ws.receive_json()["error"]["code"] == "bad_seq"
        assert c.get(f"/v1/streams/{sid}").json()["seq"] == 0


def test_serve_request_arrays_over_the_memory_budget_are_413_before_allocation() -> None:
    # (2, 20, 4) JSON numbers are 160 int64/float64 = 1280 bytes; a (2, 40, 4) float32 .npy is
    # 1280 bytes: both over a 1024-byte budget, under it once the budget is raised
    x = np.ones((2, 20, F))
    npy = io.BytesIO()
    np.save(npy, np.ones((2, 40, F), np.float32))
    client = _serve_client()   # built under the default budget: its probe predicts batches of up to
    old = rk.io.set_limits(max_array_bytes=1024)   # 1024 rows, which a model's predict checks too
    try:
        with client as c:
            r = c.post("/v1/predict", json={"x": x.tolist()})
            assert r.status_code == 413, r.text
            err = r.json()["error"]
            assert err["code"] == "over_memory_budget" and err["got"] == [2, 20, 4]
            assert "(2, 20, 4) (160 numbers, 1280 bytes)" in err["message"]
            assert "budget of 1024 bytes" in err["message"] and "set_limits(max_array_bytes" in err["message"]
            r = c.post("/v1/predict", content=npy.getvalue(), headers={"content-type": "application/x-npy"})
            assert r.status_code == 413 and r.json()["error"]["code"] == "over_memory_budget", r.text
            assert "the .npy body" in r.json()["error"]["message"]
            sid = c.post("/v1/streams").json()["id"]
            r = c.post(f"/v1/streams/{sid}/step", json={"seq": 1, "x": np.ones((40, F)).tolist()})
            assert r.status_code == 413 and r.json()["error"]["code"] == "over_memory_budget"
            rk.io.set_limits(max_array_bytes=4096)
            assert c.post("/v1/predict", json={"x": x.tolist()}).status_code == 200
    finally:
        rk.io.set_limits(**old)


# -- constructors and functions with hand-written checks before: each through the one check --------
class ReprFails(int):
    """An int of more than 4300 digits: ``repr`` raises ValueError (Python's int-to-text limit), so a
    message formatting it with ``{value!r}`` raised that instead of the typed error."""


HUGE = ReprFails(10**5000)

CALLS: list[tuple[str, Callable[[Any], Any], str]] = [
    ("RNNConfig num_layers", lambda v: rk.rnn.RNNConfig(num_layers=v), r"RNNConfig: num_layers must be"),
    ("RNNConfig proj_size", lambda v: rk.rnn.RNNConfig(proj_size=v), r"RNNConfig: proj_size must be"),
    ("RNNConfig dropout", lambda v: rk.rnn.RNNConfig(dropout=v), r"RNNConfig: dropout must be"),
    ("Init.const", lambda v: rk.rnn.Init.const(v), r"Init.const: value must be"),
    ("Init.uniform", lambda v: rk.rnn.Init.uniform(0.0, v), r"Init.uniform: hi must be"),
    ("LSTM proj_size", lambda v: rk.LSTM(4, proj_size=v),
     r"proj_size \(0: no projection; below units=4\) must"),
    ("GRU dropout", lambda v: rk.GRU(4, dropout=v), r"dropout must be"),
    ("LSTM recurrent_dropout", lambda v: rk.LSTM(4, recurrent_dropout=v), r"recurrent_dropout must be"),
]


@pytest.mark.parametrize("value", [True, np.bool_(True), HUGE, -(10**400), RaisingIndex(), HugeIndex(), "2"],
                         ids=_id)
@pytest.mark.parametrize("name, call, says", CALLS, ids=[n for n, _, _ in CALLS])
def test_hand_written_checks_now_typed_for_hostile_values(name: str, call: Callable[[Any], Any], says: str,
                                                          value: Any) -> None:
    # before: an int of 5000 digits raised ValueError from {value!r}; np.float32 / np.int64 were refused
    # by some of these and accepted by others
    with pytest.raises(rk.InvalidParameterError, match=says):
        call(value)


def test_numpy_scalars_are_accepted_alike_with_their_values() -> None:
    cfg = rk.rnn.RNNConfig(num_layers=np.int64(2), proj_size=np.int32(0), dropout=np.float32(0.25))
    assert (cfg.num_layers, cfg.proj_size, cfg.dropout) == (2, 0, 0.25)
    assert type(cfg.num_layers) is int and type(cfg.dropout) is float
    assert rk.LSTM(4, proj_size=np.int64(2)).proj_size == 2
    assert rk.GRU(4, dropout=np.float64(0.5)).dropout == 0.5


@pytest.mark.parametrize("steps", [True, 2.0, 0, 100_001, HUGE, RaisingIndex()], ids=_id)
def test_predict_steps_hostile_is_refused_naming_the_flag(steps: Any) -> None:
    with pytest.raises(CliError, match=r"predict: --steps must be an int in \[1, 100000\]"):
        _check_steps(steps)


@pytest.mark.parametrize("make, shape, out", [
    (lambda: rk.Dense(10**5), (300_000, 1), (300_000, 100_000)),
    (lambda: rk.RepeatVector(10**6), (2000, 3), (2000, 1_000_000, 3)),
])
def test_a_layer_call_whose_output_is_over_the_memory_budget_is_refused_before_it_runs(
        make: Any, shape: tuple[int, ...], out: tuple[int, ...]) -> None:
    # before: Dense(10**5) on (300000, 1) raised a bare MemoryError (112 GiB) from NumPy;
    # the output's size is known from the input's shape alone
    layer = make()
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, (0,) * len(shape))  # no memory
    layer.build((None, *shape[1:]))
    says = (rf"the output for an input of shape {re.escape(str(shape))}: an array of shape "
            rf"{re.escape(str(out))}.*set_limits")
    with pytest.raises(rk.MemoryBudgetError, match=says):
        layer(x)
