"""The one integer / float check (``rnnkit._numbers``) and the public arguments that go through
it: a real int or NumPy integer (never a bool, never another ``__index__`` object, read once),
a finite real for rates, range checked, the argument named; values NumPy cannot hold are refused
where they are given, never a bare TypeError / OverflowError later."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._numbers import INT_MAX, check_float, check_int, show
from rnnkit._safetensors import write_safetensors
from rnnkit.cli._common import CliError, check_output_file


class Indexable:
    """Not an int, but has ``__index__`` (counts its calls)."""

    calls = 0

    def __index__(self) -> int:
        Indexable.calls += 1
        return 3


class TwoFaced(int):
    """An int subclass whose ``__index__`` / ``__int__`` / ``__float__`` lie about its value."""

    def __index__(self) -> int:
        return 10**30

    def __int__(self) -> int:
        return -5

    def __float__(self) -> float:
        return math.nan


# -- the checker itself -------------------------------------------------------------------------
@pytest.mark.parametrize("value", [3, np.int8(3), np.uint8(3), np.int64(3), np.uint64(3)])
def test_check_int_returns_the_python_int(value: Any) -> None:
    out = check_int(value, "n", "here", lo=1)
    assert out == 3 and type(out) is int


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 3.0, np.float64(3.0), "3", None, np.array(3),
                                   np.array([3]), Indexable(), [3], 3 + 0j])
def test_check_int_refuses_what_is_not_an_int(value: Any) -> None:
    Indexable.calls = 0
    with pytest.raises(rk.InvalidParameterError, match=r"here: n must be an int >= 1, got .* \(\w+\)"):
        check_int(value, "n", "here", lo=1)
    assert Indexable.calls == 0   # refused by its type, never converted


def test_an_int_subclass_is_read_once_as_the_int_it_is() -> None:
    assert check_int(TwoFaced(7), "n", "here", lo=1) == 7
    assert check_float(TwoFaced(7), "r", "here") == 7.0


def test_check_int_bounds_are_inclusive_and_int64_is_the_default_cap() -> None:
    assert check_int(INT_MAX, "n", "here") == 2**63 - 1
    assert check_int(np.uint64(2**63 - 1), "n", "here") == 2**63 - 1
    with pytest.raises(rk.InvalidParameterError,
                       match=r"at most 2\*\*63 - 1 \(NumPy's int64\), got 9223372036854775808"):
        check_int(2**63, "n", "here")
    with pytest.raises(rk.InvalidParameterError, match=r"got 18446744073709551615"):
        check_int(np.uint64(2**64 - 1), "n", "here")
    with pytest.raises(rk.InvalidParameterError, match=r"n must be an int in \[2, 4\], got 5"):
        check_int(5, "n", "here", lo=2, hi=4)
    assert check_int(10**30, "n", "here", hi=None) == 10**30
    assert check_int(None, "n", "here", none_ok=True) is None
    with pytest.raises(rk.InvalidInputError, match="n must be an int >= 0 or None, got -1"):
        check_int(-1, "n", "here", lo=0, none_ok=True, error=rk.InvalidInputError)


def test_a_huge_int_is_named_by_its_size_not_by_a_failing_repr() -> None:
    # repr() refuses ints beyond 4300 digits (ValueError): the message must still be written
    with pytest.raises(rk.InvalidParameterError, match="got an int of 16610 bits"):
        check_int(10**5000, "n", "here")
    with pytest.raises(rk.InvalidParameterError, match="got a negative int of 16610 bits"):
        check_int(-(10**5000), "n", "here")
    with pytest.raises(rk.InvalidParameterError,
                       match=r"at least -2\*\*63 \(NumPy.s int64\), got -9223372036854775809"):
        check_int(-(2**63) - 1, "n", "here")
    assert check_int(-(2**63), "n", "here") == -(2**63)
    assert show(10**5000) == "an int of 16610 bits" and show(2**63) == "9223372036854775808"


@pytest.mark.parametrize("value", [10**400, -(10**400), math.nan, math.inf, np.float32("inf")])
def test_check_float_refuses_what_is_not_finite_overflowing_ints_included(value: Any) -> None:
    # float(10**400) raises OverflowError; the check reports it as not finite instead
    with pytest.raises(rk.InvalidParameterError, match="r must be a finite number"):
        check_float(value, "r", "here")


@pytest.mark.parametrize("value", [True, np.bool_(False), "0.5", None, np.array(0.5), 1j])
def test_check_float_refuses_what_is_not_a_real_number(value: Any) -> None:
    with pytest.raises(rk.InvalidParameterError, match=r"r must be a real number in \[0\.0, 1\.0\), got"):
        check_float(value, "r", "here", lo=0.0, hi=1.0, hi_open=True)


def test_check_float_bounds() -> None:
    assert check_float(np.float32(0.5), "r", "here", lo=0.0, hi=1.0) == 0.5
    assert check_float(0, "r", "here", lo=0.0) == 0.0
    with pytest.raises(rk.InvalidParameterError, match=r"r must be a finite number > 0\.0, got 0"):
        check_float(0, "r", "here", lo=0.0, lo_open=True)
    with pytest.raises(rk.InvalidParameterError, match=r"in \[0\.0, 1\.0\), got 1\.0"):
        check_float(1.0, "r", "here", lo=0.0, hi=1.0, hi_open=True)


# -- the public arguments: refused where given, typed, named ----------------------------------------
BEYOND = [10**30, 2**63, np.uint64(2**64 - 1)]


@pytest.mark.parametrize("value", BEYOND)
@pytest.mark.parametrize("make", [
    lambda v: rk.LSTM(3, seed=v),
    lambda v: rk.Dense(2, seed=v),
    lambda v: rk.set_global_seed(v),
    lambda v: rk.data.bucket_by_length([np.arange(1, 3)], 1, seed=v),
], ids=["LSTM seed", "Dense seed", "set_global_seed", "bucket_by_length seed"])
def test_seeds_numpy_cannot_hold_are_refused_at_the_call(make: Any, value: Any) -> None:
    # before: accepted, then np.random.default_rng / SeedSequence raised later or the config broke
    with pytest.raises(rk.InvalidParameterError, match=r"seed must be an int >= 0, at most 2\*\*63 - 1"):
        make(value)
    rk.set_global_seed(None)


@pytest.mark.parametrize("make, arg", [
    (lambda v: rk.Dense(v), "units"),
    (lambda v: rk.LSTM(v), "units"),
    (lambda v: rk.Embedding(v, 4), "input_dim"),
    (lambda v: rk.RepeatVector(v), "n"),
    (lambda v: rk.Input((v, 3)), "each extent"),
    (lambda v: rk.Input((None, 3), batch_size=v), "batch_size"),
    (lambda v: rk.Shape((None, v)), "each axis"),
    (lambda v: rk.EarlyStopping(patience=v), "patience"),
    (lambda v: rk.ProgbarLogger(v), "epochs"),
    (lambda v: rk.ReduceLROnPlateau(cooldown=v), "cooldown"),
    (lambda v: rk.data.pad_sequences([[1, 2]], maxlen=v), "maxlen"),
])
def test_counts_beyond_int64_are_refused_at_the_call(make: Any, arg: str) -> None:
    for v in BEYOND:
        with pytest.raises((rk.InvalidParameterError, rk.InvalidInputError), match=rf"{arg} must be an int"):
            make(v)


@pytest.mark.parametrize("make", [
    lambda v: rk.Dense(v), lambda v: rk.LSTM(3, seed=v), lambda v: rk.RepeatVector(v),
    lambda v: rk.Input((v, 3)), lambda v: rk.EarlyStopping(patience=v),
])
def test_index_objects_that_are_not_ints_are_refused(make: Any) -> None:
    Indexable.calls = 0
    for v in (Indexable(), np.array(2), np.bool_(True)):
        with pytest.raises((rk.InvalidParameterError, rk.InvalidInputError), match=r"must be an int"):
            make(v)
    assert Indexable.calls == 0


@pytest.mark.parametrize("make", [
    lambda v: rk.EarlyStopping(min_delta=v),
    lambda v: rk.EarlyStopping(baseline=v),
    lambda v: rk.ReduceLROnPlateau(min_lr=v),
    lambda v: rk.ModelCheckpoint("m.safetensors", initial_value_threshold=v),
    lambda v: rk.Dropout(v),
    lambda v: rk.LSTM(2, dropout=v),
    lambda v: rk.Adam(v),
    lambda v: rk.data.bucket_by_length([np.arange(1, 3)], 1, pad_value=v, dtype="float64"),
])
def test_reals_too_large_for_a_float_are_typed(make: Any) -> None:
    # before: float(10**400) raised a bare OverflowError in several of these
    with pytest.raises(rk.InvalidParameterError, match="must be a finite number"):
        make(10**400)


def test_fit_counts_beyond_int64_are_refused_before_training() -> None:
    m = rk.Sequential([rk.Dense(1, seed=0)], input_shape=(None, 2))
    m.compile(rk.SGD(0.1), "mse")
    x, y = np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)

    class NoTraining(rk.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            raise AssertionError("fit started training (10**30 epochs would run for ever)")

    for kw in ({"epochs": 10**30}, {"batch_size": 2**63}, {"initial_epoch": 10**30}, {"workers": 10**30}):
        with pytest.raises(rk.InvalidParameterError, match=r"fit: \w+ .*must be an int"):
            m.fit(x, y, **{"epochs": 1, **kw}, callbacks=[NoTraining()])
    with pytest.raises(rk.InvalidParameterError, match=r"batch_size must be an int >= 1"):
        m.predict(x, batch_size=10**30)
    with pytest.raises(rk.InvalidParameterError, match=r"batch_size must be an int >= 1"):
        m.evaluate(x, y, batch_size=np.array(2))


def test_serve_config_numbers_and_flags_are_typed() -> None:
    serve = pytest.importorskip("rnnkit.serve")
    cfg = serve.ServeConfig(max_rows=np.int64(8), max_wait_ms=np.float32(0.5))
    assert cfg.max_rows == 8 and type(cfg.max_rows) is int and cfg.max_wait_ms == 0.5
    assert serve.ServeConfig(max_wait_ms=0).max_wait_ms == 0.0
    with pytest.raises(rk.InvalidParameterError,
                       match="ServeConfig: synchronous must be 'FULL' or 'NORMAL', got 1.5"):
        serve.ServeConfig(synchronous=1.5)   # before: AttributeError: 'float' object has no attribute 'upper'
    with pytest.raises(rk.InvalidParameterError, match=r"max_rows must be an int >= 1, at most 2\*\*63 - 1"):
        serve.ServeConfig(max_rows=10**30)
    with pytest.raises(rk.InvalidParameterError, match="max_rows must be an int >= 1, got 2.0"):
        serve.ServeConfig(max_rows=2.0)
    with pytest.raises(rk.InvalidParameterError, match="request_timeout_s must be a finite number > 0.0"):
        serve.ServeConfig(request_timeout_s=10**400)   # before: OverflowError from math.isfinite
    with pytest.raises(rk.InvalidParameterError,
                       match="request_timeout_s must be a finite number > 0.0, got 0"):
        serve.ServeConfig(request_timeout_s=0)
    with pytest.raises(rk.InvalidParameterError, match="state_db must be None or a path"):
        serve.ServeConfig(state_db=3)
    with pytest.raises(rk.InvalidParameterError, match="streams must be True or False"):
        serve.ServeConfig(streams="no")


# -- listed untyped errors ---------------------------------------------------------------------
@pytest.mark.parametrize("y_true, y_pred", [(1.0, 1.0), (np.ones(3), np.float32(0.7)), (0, np.int64(1))])
def test_accuracy_on_a_scalar_prediction_is_typed(y_true: Any, y_pred: Any) -> None:
    # before: IndexError from yp.shape[-1]
    with pytest.raises(rk.InvalidInputError, match="Accuracy: y_pred must have at least one axis"):
        rk.metrics.Accuracy()(y_true, y_pred)
    # a scalar label beside one binary prediction stays a valid pair: 0.7 > 0.5 is class 1
    assert rk.metrics.Accuracy()(1.0, np.array([0.7])) == 1.0
    assert rk.metrics.Accuracy()(0.0, np.array([0.7])) == 0.0


@pytest.mark.parametrize("x", [[], (), [np.zeros((1, 2, 2), np.float32)]])
def test_torch_style_rnn_refuses_a_list_of_the_wrong_length(x: Any) -> None:
    # before: predict([]) raised IndexError from x[0]
    net = rk.rnn.lstm(2, 3, seed=0)
    with pytest.raises(rk.InvalidInputError,
                       match=rf"expected an input or a list \[x, h, c\] .*got a list of {len(x)}"):
        net.predict(x)


@pytest.mark.parametrize("make", [
    lambda n: rk.Dense(2, name=n), lambda n: rk.LSTM(2, name=n),
    lambda n: rk.Sequential([rk.Dense(1)], name=n), lambda n: rk.Input((None, 2), name=n),
])
def test_a_name_with_a_lone_surrogate_is_refused_at_construction(make: Any) -> None:
    # before: accepted, then the save failed with UnicodeEncodeError
    with pytest.raises(rk.InvalidParameterError, match=r"holds the lone surrogate '\\ud800' at index 1"):
        make("a\ud800b")
    make("aé✓")   # any text UTF-8 encodes is a name


def test_a_non_ascii_name_is_kept() -> None:
    assert rk.Dense(2, name="dense_é✓").name == "dense_é✓"


@pytest.mark.parametrize("make, arg", [
    (lambda d: rk.ModelCheckpoint(str(d / "missing" / "m-{epoch}.safetensors")), "filepath"),
    (lambda d: rk.CSVLogger(str(d / "missing" / "log.csv")), "filename"),
    (lambda d: rk.CSVLogger(str(d)), "filename"),
])
def test_unwritable_callback_paths_stop_fit_before_the_first_epoch(tmp_path: Any, make: Any,
                                                                   arg: str) -> None:
    # before: the first epoch trained, then open() / the save raised an OSError
    m = rk.Sequential([rk.Dense(1, seed=0)], input_shape=(None, 2))
    m.compile(rk.SGD(0.1), "mse")
    w0 = [a.copy() for a in m.get_weights()]
    epochs: list[int] = []
    seen = rk.LambdaCallback(on_epoch_begin=lambda e, logs: epochs.append(e))
    x, y = np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)
    with pytest.raises(rk.InvalidParameterError,
                       match=rf"cannot write {arg} .*(does not exist|is a directory)"):
        m.fit(x, y, epochs=2, callbacks=[seen, make(tmp_path)])
    assert epochs == []
    for a, b in zip(m.get_weights(), w0, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("whh_shape", [(8,), (), (2, 2, 2)])
def test_load_torch_rnn_with_a_weight_hh_not_2d_is_typed(tmp_path: Any, whh_shape: tuple[int, ...]) -> None:
    # before: IndexError from weight_hh_l0.shape[1] on a 1-D tensor
    p = tmp_path / "w.safetensors"
    write_safetensors(p, {"weight_ih_l0": np.ones((8, 3), np.float32),
                          "weight_hh_l0": np.ones(whh_shape, np.float32)}, {})
    with pytest.raises(rk.InvalidInputError, match=r"weight_hh_l0 \(.*\) / weight_ih_l0 \(8, 3\) are not"):
        rk.io.load_torch_rnn(p)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
@pytest.mark.parametrize("make, arg", [
    (lambda: rk.ModelCheckpoint("/proc/m.safetensors"), "filepath"),
    (lambda: rk.CSVLogger("/proc/log.csv"), "filename"),
])
def test_callback_paths_where_even_root_cannot_create_a_file_stop_fit(make: Any, arg: str) -> None:
    # /proc: os.access(W_OK) says yes to root, but no file can be created there. before: the
    # check asked os.access, so (as root, where this suite runs) fit trained an epoch and the
    # save then raised FileNotFoundError
    m = rk.Sequential([rk.Dense(1, seed=0)], input_shape=(None, 2))
    m.compile(rk.SGD(0.1), "mse")
    epochs: list[int] = []
    seen = rk.LambdaCallback(on_epoch_begin=lambda e, logs: epochs.append(e))
    x, y = np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)
    with pytest.raises(rk.InvalidParameterError, match=rf"cannot write {arg} .*/proc.*(failed|not writable)"):
        m.fit(x, y, epochs=2, callbacks=[seen, make()])
    assert epochs == []


def test_callback_write_check_leaves_nothing_behind(tmp_path: Any) -> None:
    # the honest check creates a temporary file and removes it; an existing CSV is not changed
    log = tmp_path / "log.csv"
    log.write_text("epoch,loss\n")
    m = rk.Sequential([rk.Dense(1, seed=0)], input_shape=(None, 2))
    m.compile(rk.SGD(0.1), "mse")
    x, y = np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)
    m.fit(x, y, epochs=1, verbose=0, callbacks=[rk.ModelCheckpoint(str(tmp_path / "m.safetensors"))])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "m.safetensors"]
    assert log.read_text() == "epoch,loss\n"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_cli_output_folder_where_even_root_cannot_create_a_file_is_refused_up_front() -> None:
    # the sibling of check_writable in the CLI: before, os.access said yes to root for /proc
    with pytest.raises(CliError, match=r"--output /proc/out.csv: the folder /proc is not writable"):
        check_output_file("/proc/out.csv", "--output")
