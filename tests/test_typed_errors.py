"""Every bad argument or input listed here raises a typed error (an ``rnnkit.Error``
subclass or a ``TypeError`` naming the argument), and no flag or number is coerced silently."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._safetensors import read_safetensors, write_safetensors


def _model() -> rk.Sequential:
    m = rk.Sequential([rk.Dense(2, seed=0)], input_shape=(None, 3))
    m.compile("sgd", "mse")
    return m


X = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
Y = np.ones((4, 2), np.float32)


@pytest.mark.parametrize("bs", [0, -1, 2.5, "2", True])
def test_evaluate_batch_size_is_checked(bs: object) -> None:
    with pytest.raises(rk.InvalidParameterError, match="batch_size must be an int >= 1"):
        _model().evaluate(X, Y, batch_size=bs)  # type: ignore[arg-type]


def test_evaluate_batches_agree_with_full_batch() -> None:
    m = _model()
    assert m.evaluate(X, Y, batch_size=3) == pytest.approx(m.evaluate(X, Y))


def test_fit_seed_shuffle_verbose_split() -> None:
    m = _model()
    with pytest.raises(rk.InvalidParameterError, match="seed must be an int >= 0"):
        m.fit(X, Y, seed=-1)
    with pytest.raises(TypeError, match="shuffle must be a bool"):
        m.fit(X, Y, shuffle="no")  # type: ignore[arg-type]
    with pytest.raises(rk.InvalidParameterError, match="verbose"):
        m.fit(X, Y, verbose=-1)
    # numpy floats are numbers like Python floats: np.float32(0.5) holds out 2 of 4 samples
    h = m.fit(X, Y, validation_split=np.float32(0.5), seed=0)
    assert "val_loss" in h.history and len(h.history["loss"]) == 1


def test_predict_of_a_ragged_list_is_typed() -> None:
    with pytest.raises(rk.InvalidInputError, match="input is not an array"):
        _model().predict([[1.0, 2.0, 3.0], [1.0, 2.0]])


def test_early_stopping_and_checkpoint_arguments() -> None:
    with pytest.raises(TypeError, match="monitor must be a log key"):
        rk.EarlyStopping(monitor=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="restore_best_weights must be a bool"):
        rk.EarlyStopping(restore_best_weights="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="save_best_only must be a bool"):
        rk.ModelCheckpoint("x.safetensors", save_best_only="False")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="filepath"):
        rk.ModelCheckpoint(3)  # type: ignore[arg-type]
    es = rk.EarlyStopping(min_delta=np.float32(0.25))
    assert es.min_delta == 0.25


def test_softmax_axis_out_of_range_is_refused_at_build() -> None:
    with pytest.raises(rk.InvalidInputError, match="softmax axis 5 is out of range for outputs of rank 2"):
        rk.Sequential([rk.Dense(3, rk.Softmax(5))], input_shape=(None, 3))
    # a valid axis still works: rows sum to 1
    y = rk.Sequential([rk.Dense(3, rk.Softmax(-1), seed=0)], input_shape=(None, 3)).predict(X)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-6)


def test_softmax_over_an_empty_axis() -> None:
    with pytest.raises(rk.InvalidInputError, match="has length 0"):
        rk.ActivationLayer("softmax").predict(np.zeros((2, 0)))
    # no rows at all: nothing to normalise, an empty result of the same shape
    assert rk.ActivationLayer("softmax").predict(np.zeros((0, 3))).shape == (0, 3)


@pytest.mark.parametrize("make", [lambda: rk.Dense(2, name=0), lambda: rk.ActivationLayer("tanh", name=0),
                                  lambda: rk.Dropout(0.1, name=b"x")])
def test_layer_names_must_be_strings(make: object) -> None:
    with pytest.raises(TypeError, match="name must be a str or None"):
        make()  # type: ignore[operator]


def test_graph_builder_with_a_non_string_name() -> None:
    b = rk.GraphBuilder()
    node = b.input((None, 3))
    with pytest.raises(TypeError, match="name must be a str"):
        b.add(rk.Dense(2, name=0), node)  # type: ignore[arg-type]


@pytest.mark.parametrize("layer", [rk.Dense(2, seed=0), rk.ActivationLayer("tanh"), rk.Dropout(0.5),
                                   rk.RepeatVector(2), rk.LSTM(2, seed=0)])
def test_forward_and_backward_without_a_ctx(layer: rk.Layer) -> None:
    """The doors that take a caller's Ctx refuse anything else, typed: ``layer(x, ctx)``,
    ``forward_mut`` and a model's ``forward`` / ``backward`` (``layer.forward`` /
    ``layer.backward`` are the raw passes, which expect a Ctx and check nothing)."""
    x = np.ones((2, 3, 3) if isinstance(layer, rk.LSTM) else (2, 3), np.float32)
    layer.build(rk.Shape.with_free_batch(x.shape))
    with pytest.raises(TypeError, match=r"forward: ctx must be an rnnkit.Ctx .* got str"):
        layer(x, "ctx")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"forward: ctx must be an rnnkit.Ctx .* got NoneType"):
        layer.forward_mut(x, None)  # type: ignore[arg-type]
    model = rk.Sequential([layer])
    with pytest.raises(TypeError, match=r"forward: ctx must be an rnnkit.Ctx .* got NoneType"):
        model.forward(x, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"backward: ctx must be an rnnkit.Ctx .* got str"):
        model.backward(np.ones((2, 2)), "ctx")  # type: ignore[arg-type]
    assert np.array_equal(layer(x), layer.forward(x, rk.Ctx.inference()))


def test_layer_classes_are_not_rewrapped() -> None:
    """A subclass's forward / backward is the function it defines, not a wrapper of it."""
    class Twice(rk.ActivationLayer):
        def forward(self, x: np.ndarray, ctx: rk.Ctx) -> np.ndarray:
            return 2 * super().forward(x, ctx)

    assert not hasattr(Twice.__dict__["forward"], "__wrapped__")
    assert rk.Dense.forward.__qualname__ == "Dense.forward" and not hasattr(rk.Dense.forward, "__wrapped__")


def test_optimizer_pairs_must_name_a_layer() -> None:
    with pytest.raises(TypeError, match=r"\(Layer, weight name str, gradient\), got \(object"):
        rk.SGD().apply_gradients([(object(), "kernel", np.ones(3))])


def test_shape_of_a_non_sequence() -> None:
    with pytest.raises(TypeError, match="Shape: dims must be a sequence of axes.*got 0"):
        rk.Shape(0)  # type: ignore[arg-type]


def test_flags_take_bools_only() -> None:
    with pytest.raises(TypeError, match="use_bias must be a bool"):
        rk.Dense(2, use_bias="False")  # type: ignore[arg-type]
    assert rk.Dense(2, use_bias=np.bool_(False)).use_bias is False
    with pytest.raises(TypeError, match="return_dict must be a bool"):
        _model().evaluate(X, Y, return_dict="yes")  # type: ignore[arg-type]


def test_dtype_none_is_refused_and_numpy_floats_are_numbers() -> None:
    with pytest.raises(rk.InvalidParameterError, match="dtype must be 'float32' or 'float64', got None"):
        rk.Dense(2, dtype=None)
    assert rk.Dropout(np.float32(0.5)).rate == 0.5
    with pytest.raises(rk.InvalidParameterError, match="rate must be a real number"):
        rk.Dropout("0.5")  # type: ignore[arg-type]


def test_float32_layer_refuses_values_beyond_float32() -> None:
    d = rk.Dense(2, seed=0)
    d.build((None, 3))
    with pytest.raises(rk.InvalidInputError, match=r"1e\+300.*beyond the largest float32"):
        d.predict(np.full((1, 3), 1e300))
    # in-range float64 values, and NaN/Inf as given, are cast as before
    assert d.predict(np.full((1, 3), 1e30)).dtype == np.float32


def test_load_torch_rnn_arguments_are_checked_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "w.safetensors"
    write_safetensors(p, {"weight_ih_l0": np.ones((8, 3), np.float32)}, {})
    with pytest.raises(rk.InvalidParameterError,
                       match=r"dropout must be a real number in \[0\.0, 1\.0\), got 'x' \(str\)"):
        rk.load_torch_rnn(p, dropout="x")  # type: ignore[arg-type]
    with pytest.raises(rk.InvalidParameterError, match=r"dropout must be a finite number in \[0\.0, 1\.0\)"):
        rk.load_torch_rnn(p, dropout=1.5)
    with pytest.raises(TypeError, match="batch_first must be a bool"):
        rk.load_torch_rnn(p, batch_first="yes")  # type: ignore[arg-type]


def _saved(tmp_path, meta_update: dict[str, str]):  # type: ignore[no-untyped-def]
    src = tmp_path / "m.safetensors"
    _model().save(str(src))
    tensors, meta = read_safetensors(src)
    meta.update(meta_update)
    out = tmp_path / "edited.safetensors"
    write_safetensors(out, tensors, meta)
    return out


@pytest.mark.parametrize("compile_entry", [
    {"optimizer": {"class_name": "SGD", "config": {}}},                       # no loss
    {"optimizer": "sgd", "loss": "mse"},                                        # bare strings
    {"optimizer": {"class_name": "SGD", "config": {}}, "loss": {"class_name": 3}},
    {"optimizer": {"class_name": "Nope", "config": {}}, "loss": {"class_name": "MeanSquaredError"}},
    {"optimizer": {"class_name": "SGD", "config": {"learning_rate": "x"}},
     "loss": {"class_name": "MeanSquaredError", "config": {}}},
    {"optimizer": {"class_name": "SGD", "config": {}}, "loss": {"class_name": "MeanSquaredError"},
     "metrics": [{"class_name": "X", "config": {}}]},
    {"optimizer": {"class_name": "SGD", "config": {}}, "loss": {"class_name": "MeanSquaredError"},
     "metrics": "mae"},
    [1, 2],
])
def test_model_file_compile_metadata_is_checked(tmp_path, compile_entry: object) -> None:  # type: ignore[no-untyped-def]
    path = _saved(tmp_path, {"compile": json.dumps(compile_entry)})
    with pytest.raises(rk.FileFormatError, match="compile metadata"):
        rk.load_model(path)


def test_deeply_nested_config_is_a_file_format_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    deep = "[" * 100_000 + "]" * 100_000
    path = _saved(tmp_path, {"config": deep})
    with pytest.raises(rk.FileFormatError, match="nested 100000 levels deep"):
        rk.load_model(path)


def test_two_threads_fitting_one_model() -> None:
    m = rk.Sequential([rk.Dense(2, seed=0)], input_shape=(None, 3))
    m.compile(rk.SGD(0.01), "mse")
    errors: list[BaseException] = []
    started = threading.Event()

    class Slow(rk.models.Callback):  # type: ignore[name-defined,misc]
        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            started.set()
            threading.Event().wait(0.01)

    def first() -> None:
        m.fit(X, Y, epochs=60, callbacks=[Slow()], seed=0)

    t = threading.Thread(target=first)
    t.start()
    started.wait(10)
    try:
        m.fit(X, Y, epochs=1, seed=0)
    except rk.Error as e:
        errors.append(e)
    t.join()
    assert len(errors) == 1 and "already training" in str(errors[0])
    # the first run was not disturbed: 60 epochs, identical to a fresh run
    ref = rk.Sequential([rk.Dense(2, seed=0)], input_shape=(None, 3))
    ref.compile(rk.SGD(0.01), "mse")
    ref.fit(X, Y, epochs=60, seed=0)
    for a, b in zip(m.get_weights(), ref.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cls", [rk.SimpleRNN, rk.LSTM, rk.GRU])
@pytest.mark.parametrize("units", [10**12, 2**62])
def test_weights_numpy_cannot_allocate_are_typed(cls: type, units: int) -> None:
    refused = r"shape \(3, \d+\) .*over the memory budget .*max_array_bytes"
    with pytest.raises(rk.MemoryBudgetError, match=refused):
        cls(units).build((None, 2, 3))
    with pytest.raises(rk.MemoryBudgetError, match="over the memory budget"):
        rk.Embedding(units, 10).build((None, 3))


@pytest.mark.parametrize("cls", [rk.SimpleRNN, rk.LSTM, rk.GRU])
def test_units_beyond_int64_are_refused_at_construction(cls: type) -> None:
    """10**30 units: no NumPy integer holds it, so the constructor refuses it, before any build."""
    with pytest.raises(rk.InvalidParameterError, match=r"units must be an int >= 1, at most 2\*\*63 - 1"):
        cls(10**30)
    with pytest.raises(rk.InvalidParameterError, match=r"input_dim must be an int >= 1, at most 2\*\*63 - 1"):
        rk.Embedding(10**30, 10)


def test_sequential_layers_must_be_a_list() -> None:
    with pytest.raises(TypeError, match="layers must be a list of Layers"):
        rk.Sequential(np.array([1.0, 2.0]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name must be a str"):
        rk.Sequential([], name=3)  # type: ignore[arg-type]


def test_ctx_training_flag_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="Ctx: training must be a bool"):
        rk.Ctx("no")  # type: ignore[arg-type]
    assert rk.Ctx(np.bool_(False)).training_mode is False


@pytest.mark.parametrize("option,value,what", [("return_sequences", "false", "true or false"),
                                               ("go_backwards", 1, "true or false"),
                                               ("units", 2.7, "an integer"), ("units", "3", "an integer")])
def test_keras_config_options_are_not_coerced(tmp_path, option: str, value: object, what: str) -> None:  # type: ignore[no-untyped-def]
    import json
    import zipfile

    lstm = {"name": "l", "units": 3, option: value}
    cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 5, 3]}},
        {"class_name": "LSTM", "config": lstm}]}}
    with zipfile.ZipFile(tmp_path / "m.keras", "w") as z:
        z.writestr("config.json", json.dumps(cfg))
        z.writestr("model.weights.h5", b"")
    with pytest.raises(rk.FileFormatError, match=f"option '{option}' must be {what}"):
        rk.load_keras(tmp_path / "m.keras")


def test_weight_importers_refuse_nan() -> None:
    layer = rk.LSTM(2, seed=0)
    layer.build((None, 3, 4))
    k, r, b = rk.io.to_keras_weights(layer)
    r[1, 3] = np.inf
    fresh = rk.LSTM(2, seed=1)
    fresh.build((None, 3, 4))
    before = fresh.get_weights()
    with pytest.raises(rk.InvalidInputError, match=r"recurrent_kernel holds inf at \(1, 3\)"):
        rk.io.from_keras_weights(fresh, [k, r, b])
    for a, c in zip(before, fresh.get_weights(), strict=True):
        np.testing.assert_array_equal(a, c)
    state = rk.io.to_torch_state(layer)
    state["bias_hh_l0"] = state["bias_hh_l0"].copy()
    state["bias_hh_l0"][0] = np.nan
    with pytest.raises(rk.InvalidInputError, match="from_torch_state: bias holds nan"):
        rk.io.from_torch_state(rk.LSTM(2), state)
