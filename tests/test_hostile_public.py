"""What the public-API fuzzer (``tests/test_fuzz_public.py``) found, one test per family, each
fixed where the value enters: a hostile argument raises a typed error (``rnnkit.Error``) naming
the function, what was expected and what was given, and valid calls still give the values
NumPy computes; the memory budget also covers recurrent layers' working arrays and a model's
``predict`` / call, refused before anything runs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import initializers, ops, testing, timeseries
from rnnkit.models._graph import GraphModel

X = np.random.default_rng(0).standard_normal((2, 3, 2))


@pytest.fixture
def small_budget() -> Iterator[None]:
    old = rk.io.set_limits(max_array_bytes=10**6)
    try:
        yield
    finally:
        rk.io.set_limits(**old)


# -- rnnkit.testing: any object was taken as a layer (AttributeError) -------------------------
LAYER_TAKERS: list[tuple[str, Callable[[Any], Any]]] = [
    ("analytic_grads", lambda o: testing.analytic_grads(o, X, np.ones((2, 4)))),
    ("numeric_grad", lambda o: testing.numeric_grad(o, X, np.ones((2, 4)), "input")),
    ("gradcheck", lambda o: testing.gradcheck(o, X)),
    ("gradcheck", lambda o: testing.assert_gradcheck(o, X)),
    ("snapshot", lambda o: testing.snapshot(o)),
    ("assert_fast_matches_reference", lambda o: testing.assert_fast_matches_reference(o, X, np.ones((2, 4)))),
    ("assert_round_trip", lambda o: testing.assert_round_trip(lambda dt: rk.Dense(4), o, X)),
    ("assert_thread_safe", lambda o: testing.assert_thread_safe(o, [X, X])),
]


@pytest.mark.parametrize(
    "where, call", LAYER_TAKERS, ids=[f"{w}-{k}" for k, (w, _) in enumerate(LAYER_TAKERS)]
)
@pytest.mark.parametrize("obj", [1.5, "lstm", np.ones(3), None, lambda d: rk.Dense(4)])
def test_testing_helpers_refuse_what_is_not_a_layer(where: str, call: Callable[[Any], Any], obj: Any) -> None:
    with pytest.raises(
        rk.InvalidParameterError,
        match=rf"^testing\.{where}: layer must be an rnnkit Layer, got .* \({type(obj).__name__}\)$",
    ):
        call(obj)


def test_check_layer_and_check_cell_refuse_non_factories_and_non_cells() -> None:
    with pytest.raises(
        rk.InvalidParameterError, match=r"check_layer: make_layer must be a callable, got 3 \(int\)"
    ):
        testing.check_layer(3, lambda r: X)  # type: ignore[arg-type]
    with pytest.raises(
        rk.InvalidParameterError,
        match=r"check_layer: make_layer must return an rnnkit Layer, "
        r"got 'x' \(str\)",
    ):
        testing.check_layer(lambda dt: "x", lambda r: X)
    with pytest.raises(
        rk.InvalidParameterError, match=r"check_cell: cell must be an rnnkit Cell, got 'lstm'"
    ):
        testing.check_cell("lstm")  # type: ignore[arg-type]


def test_rel_err_and_gradcheck_refuse_mismatched_shapes_as_input_errors_not_wrong_values() -> None:
    # before: AssertionError ("shape mismatch"), which the fuzzer counts as a wrong value
    with pytest.raises(
        rk.InvalidInputError,
        match=r"rel_err: analytic and numeric must have one shape, got "
        r"analytic \(3,\) and numeric \(2,\)",
    ):
        testing.rel_err(np.ones(3), np.ones(2))
    with pytest.raises(
        rk.InvalidInputError, match=r"rel_err: analytic must hold real numbers, got dtype <U1"
    ):
        testing.rel_err(np.array(["x"]), np.ones(1))
    layer = rk.Dense(4, dtype="float64", seed=1)
    layer.build((None, 3, 2))
    with pytest.raises(
        rk.InvalidInputError,
        match=r"gradcheck: G must have the output's shape \(2, 3, 4\), "
        r"got \(2, 4\)",
    ):
        testing.gradcheck(layer, X, G=np.ones((2, 4)))
    with pytest.raises(rk.InvalidParameterError, match=r"gradcheck: wrt must be None or a list of names"):
        testing.gradcheck(layer, X, wrt=["nope"])
    # and the values still come: rel_err is max|a - n| / max(max|n|, max|a|) exactly
    assert testing.rel_err(np.array([1.0, 2.0]), np.array([1.0, 2.5])) == 0.5 / 2.5


# -- rnnkit.timeseries: baselines, make_windows, Scaler, the index helpers ---------------------
T = np.arange(20.0) ** 1.5


@pytest.mark.parametrize(
    "call, says",
    [
        (lambda: timeseries.rmse("abc", [1.0]), r"rmse: pred must hold real numbers, got dtype <U3"),
        (
            lambda: timeseries.mae([1.0, 2.0], [1.0]),
            r"mae: pred and actual must hold the same number .* got 2 and 1",
        ),
        (
            lambda: timeseries.mean_forecast(T, np.array([1.5]), np.arange(3)),
            r"mean_forecast: train_pos must be a 1-D array of integer row positions, got dtype float64",
        ),
        (
            lambda: timeseries.mean_forecast(T, np.arange(3), np.ones((2, 2), int)),
            r"mean_forecast: pos must be a 1-D array of integer row positions, got dtype int64 "
            r"shape \(2, 2\)",
        ),
        (
            lambda: timeseries.mean_forecast(T, np.array([25]), np.arange(3)),
            r"mean_forecast: train_pos must lie in \[0, 19\] \(the target's rows\), got \[25, 25\]",
        ),
        (
            lambda: timeseries.persistence_forecast(T, np.arange(3, 5), horizon=True),
            r"persistence_forecast: horizon must be an int >= 1, got True",
        ),
        (
            lambda: timeseries.persistence_forecast(T.reshape(4, 5), np.arange(3)),
            r"persistence_forecast: target must be a 1-D series, got shape \(4, 5\)",
        ),
        (
            lambda: timeseries.select_ar_order(T, np.arange(20), "2"),
            r"select_ar_order: max_p must be an int >= 1",
        ),
        (
            lambda: timeseries.seasonal_naive_forecast(T, np.arange(10, 12), 1.5),
            r"season must be an int >= 1",
        ),
        (
            lambda: timeseries.make_windows(np.ones((8, 4)), np.ones(2), 2, 1),
            r"make_windows: target must be 1-D with one value per row of features \(8\), got shape \(2,\)",
        ),
        (
            lambda: timeseries.make_windows(np.ones(8), None, 2, 1),
            r"make_windows: features must be \(rows, F\)",
        ),
        (
            lambda: timeseries.make_windows(np.ones((8, 4)), None, "2", 1),
            r"make_windows: window must be an int >= 1",
        ),
        (
            lambda: timeseries.make_windows(np.ones((8, 4)), None, 2, 1, dtype="float16"),
            r"make_windows: dtype must be 'float32' or 'float64', got 'float16'",
        ),
        (
            lambda: timeseries.format_index(np.ones((2, 2), int), "int"),
            r"format_index: values must be a 1-D array",
        ),
        (lambda: timeseries.continue_index(np.arange(3), 10**15), r"continue_index: an array of shape"),
        (lambda: timeseries.continue_index(np.array(["a"]), 2), r"continue_index: index must be a 1-D array"),
        (
            lambda: timeseries.Scaler(("a",), np.zeros(1), np.ones(1), "float16"),
            r"Scaler: transform must be one of .*, got 'float16'",
        ),
        (
            lambda: timeseries.Scaler(("a",), np.zeros(1), np.ones(1)).apply(np.ones((3, 2))),
            r"Scaler.apply: expected values \(rows, 1\)",
        ),
    ],
)
def test_timeseries_hostile_arguments_are_typed(call: Callable[[], Any], says: str) -> None:
    # before: ValueError (could not convert / truth value / broadcast), IndexError, or an
    # allocation of 10**15 index values
    with pytest.raises(rk.Error, match=says):
        call()


def test_timeseries_baselines_still_give_numpys_values() -> None:
    pred, actual = np.array([1.0, 2.0, 4.0]), np.array([1.5, 2.0, 1.0])
    assert timeseries.rmse(pred, actual) == pytest.approx(np.sqrt(np.mean((pred - actual) ** 2)), rel=1e-15)
    assert timeseries.mae(pred, actual) == pytest.approx(np.mean(np.abs(pred - actual)), rel=1e-15)
    np.testing.assert_array_equal(
        timeseries.mean_forecast(T, np.arange(5), np.arange(30, 33)), np.full(3, T[:5].mean())
    )
    np.testing.assert_array_equal(timeseries.persistence_forecast(T, np.arange(3, 6), 2), T[1:4])
    w = timeseries.make_windows(np.arange(16.0).reshape(8, 2), np.arange(8.0), 3, 1)
    np.testing.assert_array_equal(w.y[:, 0], np.arange(3.0, 8.0))
    np.testing.assert_array_equal(w.x[1], np.arange(16.0).reshape(8, 2)[1:4])


# -- ops: a reduction with no identity over an empty axis --------------------------------------
@pytest.mark.parametrize("op", ["max", "min", "softmax", "log_softmax", "argmax"])
def test_ops_reductions_over_an_empty_axis_name_the_op_and_the_axis(op: str) -> None:
    with pytest.raises(
        rk.InvalidInputError, match=rf"^ops\.{op}: axis 0 of the input \(shape \(0, 3\)\) is empty"
    ):
        getattr(ops, op)(np.zeros((0, 3)), axis=0)


@pytest.mark.parametrize("op", ["max", "min", "argmax"])
def test_ops_reductions_over_a_non_empty_axis_of_an_empty_array_are_numpys(op: str) -> None:
    # (0, 3) reduced over axis 1 (3 long) is an empty result, as NumPy gives; before: refused
    got = getattr(ops, op)(np.zeros((0, 3)), axis=1)
    want = getattr(np, op)(np.zeros((0, 3)), axis=1)
    assert got.shape == want.shape == (0,)


def test_ops_where_of_a_scalar_condition_and_max_initial_are_typed() -> None:
    with pytest.raises(rk.InvalidInputError, match=r"ops.where: condition is a scalar \(rank 0\)"):
        ops.where(np.array(True))
    with pytest.raises(rk.InvalidParameterError, match=r"ops.max: initial must be a real number, got 'x'"):
        ops.max(np.ones(3), initial="x")
    assert float(ops.max(np.zeros(0), initial=-2.0)) == -2.0


# -- converters, initialisers, configs, abstract methods --------------------------------------
@pytest.mark.parametrize(
    "call, error, says",
    [
        (
            lambda: rk.quant.quantize_layer(1.5),
            rk.InvalidParameterError,
            r"quantize_layer: expected an rnnkit Layer, got 1.5 \(float\)",
        ),
        (
            lambda: initializers.kaiming_uniform(True, (2, 2), 2, "float32"),
            rk.InvalidParameterError,
            r"kaiming_uniform: rng must be a numpy.random.Generator, got True",
        ),
        (
            lambda: initializers.orthogonal(np.random.default_rng(0), "float32", "float32"),
            rk.InvalidParameterError,
            r"orthogonal: shape\[0\] must be an int >= 0, got 'float32'",
        ),
        (
            lambda: initializers.uniform(np.random.default_rng(0), [2], 0, 1, "float32"),
            rk.InvalidParameterError,
            r"uniform: shape must be a tuple of ints >= 0, got \[2\]",
        ),
        (
            lambda: initializers.zeros((2,), "int8"),
            rk.InvalidParameterError,
            r"zeros: dtype must be 'float32'",
        ),
        (lambda: rk.rnn.Init(np.array([1, 2])), rk.InvalidParameterError, r"Init: kind must be one of"),
        (
            lambda: rk.losses.deserialize(np.array([1, 2])),
            rk.InvalidParameterError,
            r"losses.deserialize: not a serialized loss",
        ),
        (
            lambda: rk.optimizers.deserialize({"class_name": "adam", "config": [(1, 2, 3, 4)]}),
            rk.InvalidParameterError,
            r"optimizers.deserialize: bad config for adam",
        ),
        (
            lambda: rk.io.save_forecaster(rk.Sequential([rk.Dense(1)]), 3, "f.safetensors"),
            rk.InvalidParameterError,
            r"save_forecaster: spec must be a ForecastSpec, got 3 \(int\)",
        ),
        (lambda: rk.Layer()(X), rk.MethodNotImplementedError, r"Layer \(Layer\): forward is not implemented"),
        (
            lambda: rk.Layer().compute_output_shape((None, 2)),
            NotImplementedError,
            r"compute_output_shape is not implemented",
        ),
    ],
)
def test_converters_initializers_and_bases_hostile_is_typed(
    call: Callable[[], Any], error: type[Exception], says: str
) -> None:
    # before: AttributeError, ValueError, IndexError or a bare NotImplementedError
    with pytest.raises(error, match=says):
        call()


def test_initializers_draw_the_same_values_as_before() -> None:
    # the checks read the arguments; the draw is the generator's (Kaiming: U(-l, l), l = gain*sqrt(3/fan_in))
    got = initializers.kaiming_uniform(np.random.default_rng(5), (3, 4), 4, "float64")
    want = np.random.default_rng(5).uniform(
        -np.sqrt(2.0) * np.sqrt(3.0 / 4), np.sqrt(2.0) * np.sqrt(3.0 / 4), size=(3, 4)
    )
    np.testing.assert_array_equal(got, want)
    assert issubclass(rk.MethodNotImplementedError, rk.Error)


# -- the memory budget: recurrent layers' working arrays, models' predict and call ------------
@pytest.mark.parametrize(
    "make, width", [(lambda: rk.LSTM(64), 256), (lambda: rk.GRU(64), 192), (lambda: rk.SimpleRNN(64), 64)]
)
def test_a_recurrent_call_whose_working_arrays_are_over_the_budget_is_refused(
    small_budget: None, make: Callable[[], rk.Layer], width: int
) -> None:
    # the output (100, 64) float32 is 25.6 kB, inside the 1 MB budget, but the pass projects
    # every step's input: (100, 100, width) float32 = 40 kB * width; before: it ran (the hang
    # of a huge batch x steps input had this cause)
    layer = make()
    layer.build((None, 100, 2))
    x = np.zeros((100, 100, 2), np.float32)
    says = (
        rf"an array its pass makes for an input of shape \(100, 100, 2\): an array of shape "
        rf"\(100, 100, {width}\)"
    )
    for call in (layer, layer.predict):
        with pytest.raises(rk.MemoryBudgetError, match=says):
            call(x)


def test_model_predict_and_call_are_checked_against_the_budget_before_running(small_budget: None) -> None:
    x = np.zeros((100, 100, 2), np.float32)
    chain = rk.Sequential([rk.Dense(3), rk.LSTM(64, return_sequences=True)], input_shape=(None, None, 2))
    masked = rk.Sequential([rk.Masking(), rk.LSTM(64)], input_shape=(None, None, 2))  # the general path
    out = re.escape("LSTM: the output for an input of shape (100, 100, 3): an array of shape (100, 100, 64)")
    for call in (chain.predict, chain):
        with pytest.raises(rk.MemoryBudgetError, match=out):
            call(x)
    with pytest.raises(rk.MemoryBudgetError, match=r"LSTM: an array its pass makes for an input of shape"):
        masked.predict(x)


def test_model_predict_inside_the_budget_still_gives_the_layers_values() -> None:
    x = np.random.default_rng(1).standard_normal((4, 5, 2)).astype(np.float32)
    m = rk.Sequential([rk.Dense(3, seed=0), rk.LSTM(6, seed=1)], input_shape=(None, None, 2))
    want = m.layers[1].forward(m.layers[0].forward(x, rk.Ctx.inference()), rk.Ctx.inference())
    np.testing.assert_array_equal(m.predict(x), want)


# -- the findings of a 20,000-case run (seeds 1500..21499), each family once ------------------
@pytest.mark.parametrize(
    "call, error, says",
    [
        (
            lambda: rk.Activation(np.ones(2)),
            rk.InvalidParameterError,
            r"Activation: expected one of \['tanh'",
        ),
        (lambda: rk.Activation("x", 1.0), rk.InvalidParameterError, r"got 'x' \(str\) and more arguments"),
        (lambda: rk.Activation(3), rk.InvalidParameterError, r"Activation: expected one of .* got 3 \(int\)"),
        (
            lambda: rk.save_model((1, 2), "m.safetensors"),
            rk.InvalidParameterError,
            r"save_model: model must be an rnnkit Model .* got \(1, 2\) \(tuple\)",
        ),
        (
            lambda: rk.save_layer_weights(1.5, "w.safetensors"),
            rk.InvalidParameterError,
            r"save/load_layer_weights: layer must be an rnnkit Layer, got 1.5 \(float\)",
        ),
        (
            lambda: rk.load_torch_rnn("a\x00b"),
            rk.InvalidParameterError,
            r"a path cannot hold a NUL character",
        ),
        (
            lambda: timeseries.count_windows(np.ones((8, 4)), 2, 1),
            rk.InvalidParameterError,
            r"count_windows: rows must be an int >= 0",
        ),
        (
            lambda: timeseries.infer_frequency([np.ones(2), 1]),
            rk.InvalidInputError,
            r"infer_frequency: index is not",
        ),
        (
            lambda: timeseries.read_csv("x.csv", ["a"], missing=np.ones(2)),
            rk.InvalidInputError,
            r"missing must be one of",
        ),
        (
            lambda: rk.losses.position_weights(np.ones(2), np.ones((8, 4)), "loss"),
            rk.InvalidParameterError,
            r"position_weights: lead must be a tuple of ints >= 0",
        ),
        (lambda: rk.Flatten(np.ones(2)), rk.InvalidParameterError, r"Flatten: data_format must be"),
        (
            lambda: rk.Adam(beta1=np.ones(2), beta_1=0.8),
            rk.InvalidParameterError,
            r"Adam: beta1 must be a real number",
        ),
        (
            lambda: rk.distributed.DistributedError("fit", "ab", 0, 1),
            rk.InvalidParameterError,
            r"DistributedError: failures must be a dict",
        ),
        (lambda: ops.split(np.float32(1.0), 2), rk.InvalidInputError, r"ops.split: x is a scalar \(rank 0\)"),
        (
            lambda: ops.concatenate([np.float32(1.0), np.float32(2.0)]),
            rk.InvalidInputError,
            r"ops.concatenate: x is a scalar \(rank 0\)",
        ),
        (
            lambda: ops.add(np.ones(2, np.int8), 300),
            rk.InvalidInputError,
            r"ops.add: x2 = 300 does not fit the dtype int8 it takes; expected an int in \[-128, 127\]",
        ),
        (
            lambda: ops.where(np.array([True]), 10**30, 1),
            rk.InvalidInputError,
            r"x1 = .* does not fit the dtype int64",
        ),
        (
            lambda: ops.norm(np.ones(3), ord=np.ones(2)),
            rk.InvalidInputError,
            r"ops.norm: ord must be None, 'fro'",
        ),
        (
            lambda: ops.convert_to_tensor(1.0, sparse=np.ones(2)),
            rk.InvalidInputError,
            r"convert_to_tensor: sparse must be None or a bool",
        ),
        (
            lambda: ops.argmax(np.ones(3), keepdims=np.ones(2)),
            TypeError,
            r"ops.argmax: keepdims must be a bool",
        ),
    ],
)
def test_the_20k_run_findings_are_typed(call: Callable[[], Any], error: type[Exception], says: str) -> None:
    # before: ValueError (truth value / not a valid Activation / broadcast / embedded null
    # byte), AttributeError, IndexError (tuple index out of range) or OverflowError
    with pytest.raises(error, match=says):
        call()


def test_the_checked_ops_and_activation_still_give_numpys_values() -> None:
    assert (
        rk.Activation("tanh") is rk.Activation.TANH
        and rk.Activation(rk.Activation.RELU) is rk.Activation.RELU
    )
    np.testing.assert_array_equal(ops.add(np.ones(2, np.int8), 100), np.full(2, 101, np.int8))
    np.testing.assert_array_equal(ops.add(np.ones(2), 10**30), np.ones(2) + 1e30)  # a float operand takes it
    assert timeseries.count_windows(10, 3, 2) == 6
    np.testing.assert_array_equal(ops.norm(np.arange(3.0)), np.sqrt(5.0))


def test_the_long_runs_last_findings_are_typed(tmp_path: Path) -> None:
    """The 100,000-case run's last two: a GraphModel given arrays where graph nodes go
    (AttributeError before), and an atomic write to the empty path (IsADirectoryError naming
    the working folder before)."""
    with pytest.raises(rk.InvalidInputError, match=r"GraphModel: nodes must be a list of graph nodes.*got"):
        GraphModel(np.zeros(3), [], [], "g")    # type: ignore[arg-type]
    with pytest.raises(rk.InvalidInputError, match=r"GraphModel: outputs must be a list of graph nodes"):
        GraphModel([], [], [np.zeros(2)], "g")  # type: ignore[list-item]
    with pytest.raises(rk.InvalidInputError, match=r"expected a file path, got an empty one"):
        rk.io.atomic_write_bytes("", b"x")
    with pytest.raises(IsADirectoryError, match="it is a directory"):
        rk.io.atomic_write_bytes(tmp_path, b"x")
    assert list(tmp_path.iterdir()) == []       # nothing written beside it


def test_the_forecasting_surface_refuses_hostile_arguments_typed() -> None:
    """The backtest's metrics, the season rule, a panel from a non-frame and DeepAR's float
    options (the CI fuzz run found each raising NumPy's or Python's own error)."""
    hist = np.arange(10.0)
    with pytest.raises(rk.InvalidInputError, match="mase: actual must hold real numbers"):
        timeseries.mase(np.ones(2), np.array(["int8", "x"]), hist)
    with pytest.raises(timeseries.DataError, match="mase_scale: target must be a 1-D series"):
        timeseries.mase_scale(np.float64(3.0))
    with pytest.raises(timeseries.DataError, match="mase_scale: season must be an int >= 1"):
        timeseries.mase_scale(hist, "float32")   # type: ignore[arg-type]
    with pytest.raises(rk.InvalidInputError, match="smape: pred must hold real numbers"):
        timeseries.smape(np.array(["no"]), np.ones(1))
    with pytest.raises(rk.InvalidInputError, match="detect_season: target must hold real numbers"):
        timeseries.detect_season(np.array(["", "a"]))
    with pytest.raises(timeseries.DataError, match="panel_from_frame: expected a long-format data frame"):
        timeseries.panel_from_frame(3)
    with pytest.raises(rk.InvalidParameterError, match="DeepAR: lr must be"):
        rk.io.DeepAR(4, lr=b"x")   # type: ignore[arg-type]
    assert timeseries.mase(np.array([5.0, 5.0]), np.array([6.0, 8.0]), np.array([1.0, 2, 4, 8])) \
        == pytest.approx(2 / (7 / 3), rel=1e-15)
    assert timeseries.smape(np.array([1.0, 0.0]), np.array([3.0, 0.0])) == pytest.approx(50.0)
