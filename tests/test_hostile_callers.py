"""Hostile arguments to the data helpers, ``Mask`` and the callbacks' constructors: refused at
the call with a typed error naming the argument, never later inside ``fit`` and never coerced."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

import rnnkit as rk

SEQS = [np.arange(1, 4), np.arange(1, 6), np.arange(1, 3), np.arange(1, 5)]


# -- Mask ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lengths", [[np.array([1, 2]), None], [[1, 2], [3]], [3, None], [1.5, 2.0]])
def test_mask_lengths_that_are_not_ints_are_typed(lengths: object) -> None:
    with pytest.raises(rk.InvalidInputError, match="Mask: expected lengths"):
        rk.Mask(lengths=lengths)


def test_mask_lengths_beyond_int64_are_refused_not_wrapped() -> None:
    with pytest.raises(rk.InvalidInputError, match="a length of 18446744073709551615"):
        rk.Mask(lengths=np.array([2**64 - 1], np.uint64))
    m = rk.Mask(lengths=np.array([2, 0], np.uint64))   # in range: kept as it is
    np.testing.assert_array_equal(m.valid(3), [[True, True, False], [False, False, False]])


def test_a_ragged_boolean_mask_is_typed() -> None:
    with pytest.raises(rk.InvalidInputError, match="Mask: expected a boolean"):
        rk.Mask([[True, False], [True]])


# -- callbacks' constructors ---------------------------------------------------------------------
@pytest.mark.parametrize("epochs", ["", "3", 0, -1, 2.5, True, math.inf, None])
def test_progbar_logger_epochs_are_checked_in_the_constructor(epochs: object) -> None:
    with pytest.raises(rk.InvalidParameterError, match="ProgbarLogger: epochs must be an int >= 1"):
        rk.ProgbarLogger(epochs)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [[], "out.txt", 1, object()])
def test_progbar_logger_stream_is_checked_in_the_constructor(stream: object) -> None:
    with pytest.raises(TypeError, match="ProgbarLogger: stream must be None or a text stream"):
        rk.ProgbarLogger(1, stream=stream)  # type: ignore[arg-type]


def test_progbar_logger_writes_one_line_per_epoch() -> None:
    buf = io.StringIO()
    cb = rk.ProgbarLogger(np.int64(3), stream=buf)
    cb.on_epoch_end(1, {"loss": 0.123456, "val_loss": 2.0})
    assert buf.getvalue() == "Epoch 2/3 - loss: 0.1235 - val_loss: 2\n"


@pytest.mark.parametrize("path", ["", "a\x00b", "{", "{0}.safetensors", "{}.safetensors", "w-{epoch:zz}",
                                  "w-{epoch"])
def test_model_checkpoint_refuses_unusable_paths_at_once(path: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match="ModelCheckpoint: filepath"):
        rk.ModelCheckpoint(path)


def test_model_checkpoint_accepts_named_fields() -> None:
    cb = rk.ModelCheckpoint("ck-{epoch:03d}-{val_loss:.4f}.safetensors")
    assert cb.filepath.format(epoch=7, val_loss=0.25) == "ck-007-0.2500.safetensors"


def test_csv_logger_arguments() -> None:
    with pytest.raises(rk.InvalidParameterError, match="CSVLogger: filename"):
        rk.CSVLogger("")
    with pytest.raises(TypeError, match="CSVLogger: filename"):
        rk.CSVLogger(3)  # type: ignore[arg-type]
    for sep in ('"', "\n", "\r", "\x00", ";;"):
        with pytest.raises(rk.InvalidParameterError, match="CSVLogger: separator"):
            rk.CSVLogger("log.csv", separator=sep)
    assert rk.CSVLogger("log.csv", separator=";").sep == ";"


def test_reduce_lr_factor_is_in_zero_one() -> None:
    with pytest.raises(rk.InvalidParameterError, match=r"factor must be a finite number >= 0\.0"):
        rk.ReduceLROnPlateau(factor=-0.5)
    with pytest.raises(rk.InvalidParameterError, match="factor must be < 1"):
        rk.ReduceLROnPlateau(factor=1.0)
    assert rk.ReduceLROnPlateau(factor=0.0).factor == 0.0


def test_lambda_callback_keywords_cannot_replace_the_machinery() -> None:
    for key in ("set_model", "model", "get_fit_state", "on_train_begin_", "_require_model"):
        with pytest.raises(rk.InvalidParameterError, match="LambdaCallback"):
            rk.LambdaCallback(**{key: 1})
    with pytest.raises(rk.InvalidParameterError, match="on_batch_end is not a hook fit calls"):
        rk.LambdaCallback(on_batch_end=lambda b, logs: None)
    assert rk.LambdaCallback(note="kept").note == "kept"  # type: ignore[attr-defined]


def test_a_checked_callback_fails_before_fit_starts() -> None:
    m = rk.Sequential([rk.Dense(1, seed=0)], input_shape=(None, 2))
    m.compile("sgd", "mse")
    before = m.get_weights()
    with pytest.raises(TypeError, match="stream"):
        m.fit(np.ones((4, 2), np.float32), np.ones((4, 1), np.float32), 2,
              callbacks=[rk.ProgbarLogger(2, stream=[])])  # type: ignore[arg-type]
    for a, b in zip(before, m.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


# -- bucket_by_length ------------------------------------------------------------------------------
@pytest.mark.parametrize("targets", [1.0, "abc", [[1, 2], [3]], np.array(["a", "b", "c", "d"])])
def test_bucket_targets_are_checked_at_the_call(targets: object) -> None:
    with pytest.raises(rk.InvalidInputError, match="bucket_by_length: targets"):
        rk.data.bucket_by_length(SEQS, 2, targets)


@pytest.mark.parametrize("pad", ["x", None, math.nan, math.inf, True, [0]])
def test_bucket_pad_value_is_checked_at_the_call(pad: object) -> None:
    with pytest.raises(rk.InvalidParameterError, match="bucket_by_length: pad_value"):
        rk.data.bucket_by_length(SEQS, 2, pad_value=pad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("pad", "dtype"), [(0.5, None), (300, "uint8"), (-1, "uint8"), (1e40, "float32")])
def test_bucket_pad_value_must_be_a_value_of_the_batch_dtype(pad: float, dtype: str | None) -> None:
    with pytest.raises(rk.InvalidParameterError, match="pad_value"):
        rk.data.bucket_by_length(SEQS, 2, pad_value=pad, dtype=dtype)


@pytest.mark.parametrize("shuffle", ["no", "False", 0, 1, None])
def test_bucket_shuffle_must_be_a_bool(shuffle: object) -> None:
    with pytest.raises(TypeError, match="bucket_by_length: shuffle must be a bool"):
        rk.data.bucket_by_length(SEQS, 2, shuffle=shuffle)  # type: ignore[arg-type]


def test_bucket_dtype_never_truncates_values() -> None:
    floats = [np.array([0.5, 1.5]), np.array([2.5])]
    with pytest.raises(rk.InvalidInputError, match="would truncate"):
        rk.data.bucket_by_length(floats, 2, dtype="int32")
    with pytest.raises(rk.InvalidInputError, match="outside dtype int8"):
        rk.data.bucket_by_length([np.array([1, 300])], 1, dtype="int8")
    with pytest.raises(rk.InvalidInputError, match="it would become inf"):
        rk.data.bucket_by_length([np.array([1e300])], 1, dtype="float32")
    with pytest.raises(rk.InvalidParameterError, match="dtype must be an int or float dtype"):
        rk.data.bucket_by_length(SEQS, 2, dtype="U3")
    with pytest.raises(rk.InvalidParameterError, match="dtype must be"):
        rk.data.bucket_by_length(SEQS, 2, dtype="no such dtype")


def test_bucket_mixed_dtypes_batch_in_their_common_dtype() -> None:
    ds = rk.data.bucket_by_length([np.array([1, 2]), np.array([0.5, 1.5, 2.5])], 2, shuffle=False,
                                  pad_value=-1)
    x = ds[0]
    assert x.dtype == np.float64      # the int sequence is not truncated into ints, nor the float one
    np.testing.assert_array_equal(x, [[1.0, 2.0, -1.0], [0.5, 1.5, 2.5]])


def test_bucket_padding_and_targets_values() -> None:
    y = np.array([10.0, 20.0, 30.0, 40.0])
    ds = rk.data.bucket_by_length(SEQS, 2, y, shuffle=False, pad_value=np.int64(-7), dtype="float32")
    got = {tuple(ds.indices(b)): ds[b] for b in range(len(ds))}
    for idx, (x, t) in got.items():
        lens = [len(SEQS[i]) for i in idx]
        for row, i in enumerate(idx):
            np.testing.assert_array_equal(x[row, :lens[row]], SEQS[i])
            assert np.all(x[row, lens[row]:] == -7.0)
        np.testing.assert_array_equal(t, y[list(idx)])
    assert sorted(i for idx in got for i in idx) == [0, 1, 2, 3]


def test_a_huge_bucket_width_is_one_bucket() -> None:
    one = rk.data.bucket_by_length(SEQS, 2, bucket_width=10**30, shuffle=False)
    same = rk.data.bucket_by_length(SEQS, 2, bucket_width=6, shuffle=False)
    assert [ds.indices(b).tolist() for ds in (one,) for b in range(len(ds))] == \
        [same.indices(b).tolist() for b in range(len(same))]


def test_batch_index_out_of_range_is_typed_and_an_index_error() -> None:
    ds = rk.data.bucket_by_length(SEQS, 2)
    with pytest.raises(rk.InvalidInputError, match="out of range") as e:
        ds[2]
    assert isinstance(e.value, IndexError)
    assert len(list(ds)) == 2  # iteration still ends at the last batch


# -- windows ---------------------------------------------------------------------------------------
def test_windows_arguments_are_checked_at_the_call() -> None:
    with pytest.raises(TypeError, match="windows: shuffle must be a bool"):
        rk.data.windows(np.arange(10.0), 3, shuffle="no")  # type: ignore[arg-type]
    with pytest.raises(rk.InvalidParameterError, match="windows: dtype must be a float dtype"):
        rk.data.windows(np.arange(10.0), 3, dtype="int32")
    with pytest.raises(rk.InvalidInputError, match="windows: series is not an array"):
        rk.data.windows([[1.0, 2.0], [3.0]], 1)


def test_windows_refuse_values_that_would_become_inf() -> None:
    series = np.arange(20.0)
    series[13] = 1e300
    ds = rk.data.windows(series, 4, 1, batch_size=4)
    np.testing.assert_array_equal(ds[0][0][:, :, 0], [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]])
    with pytest.raises(rk.InvalidInputError, match=r"series holds 1e\+300 .*starting at row 10"):
        ds[2]
    wide = rk.data.windows(series, 4, 1, batch_size=4, dtype="float64")
    assert wide[2][0][2, 3, 0] == wide[2][0][3, 2, 0] == 1e300
    series[13] = np.inf                  # the data's own inf is the data's, as before (fit refuses it)
    assert np.isinf(rk.data.windows(series, 4, 1, batch_size=4)[2][0]).any()


# -- non-finite weights ----------------------------------------------------------------------------
def _two_dense() -> rk.Sequential:
    m = rk.Sequential([rk.Dense(3, seed=0), rk.Dense(2, seed=1)], input_shape=(None, 2))
    m.compile("sgd", "mse")
    return m


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_set_weight_refuses_non_finite_values(bad: float) -> None:
    d = rk.Dense(3, seed=0)
    d.build(rk.Shape((None, 2)))
    before = np.array(d.weight("kernel"))
    w = np.zeros((2, 3), np.float32)
    w[1, 2] = bad
    with pytest.raises(rk.InvalidInputError, match=rf"{d.name}\.kernel: the weight holds {bad} at \(1, 2\)"):
        d.set_weight("kernel", w)
    np.testing.assert_array_equal(d.weight("kernel"), before)
    d.set_weight("kernel", w, check_finite=False)      # the explicit switch the optimizer uses
    assert np.array_equal(np.isnan(d.weight("kernel")), np.isnan(w))


def test_model_set_weights_checks_every_value_before_changing_any() -> None:
    m = _two_dense()
    before = m.get_weights()
    new = [np.full_like(a, 0.5) for a in before]
    new[-1][0] = np.nan                                  # the last weight: nothing before it changes
    with pytest.raises(rk.InvalidInputError,
                       match=r"set_weights: weight 1\.bias: the weight holds nan at \(0,\)"):
        m.set_weights(new)
    for a, b in zip(before, m.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_layer_set_weights_check_every_value_before_changing_any() -> None:
    d = rk.Dense(2, seed=0)
    with pytest.raises(rk.InvalidInputError, match="bias: the weight holds inf"):
        d.set_weights(np.ones((3, 2)), np.array([0.0, np.inf]))
    assert not d.built
    lstm = rk.LSTM(2, seed=0)
    k, u, b = np.ones((3, 8)), np.ones((2, 8)), np.ones(8)
    u[0, 0] = np.nan
    with pytest.raises(rk.InvalidInputError, match="recurrent_kernel: the weight holds nan"):
        lstm.set_weights(k, u, b)
    assert not lstm.built
    lstm.build(rk.Shape((None, None, 3)))
    before = [np.array(e.value) for e in lstm.weights()]
    with pytest.raises(rk.InvalidInputError, match="recurrent_kernel"):
        lstm.set_weights(k * 0.5, u, b)
    for a, e in zip(before, lstm.weights(), strict=True):
        np.testing.assert_array_equal(a, e.value)


def test_bidirectional_set_weight_refuses_non_finite() -> None:
    bi = rk.Bidirectional(rk.SimpleRNN(2, seed=0))
    bi.build(rk.Shape((None, 4, 3)))
    name = bi.weight_names[0]
    bad = np.array(bi.weight(name))
    bad.flat[0] = np.nan
    with pytest.raises(rk.InvalidInputError, match="the weight holds nan"):
        bi.set_weight(name, bad)


def test_rnn_net_load_state_dict_refuses_non_finite_and_changes_nothing() -> None:
    net = rk.rnn.lstm(3, 2)
    before = net.state_dict()
    state = {k: v * 0.5 for k, v in before.items()}
    last = sorted(state)[-1]
    state[last].flat[-1] = np.inf
    with pytest.raises(rk.InvalidInputError, match=rf"load_state_dict: '{last}': the weight holds inf"):
        net.load_state_dict(state)
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    with pytest.raises(TypeError, match="state must be a mapping"):
        net.load_state_dict([("weight_ih_l0", before["weight_ih_l0"])])  # type: ignore[arg-type]
    ragged = dict(before, weight_ih_l0=[[1.0, 2.0], [3.0]])
    with pytest.raises(rk.InvalidInputError, match="'weight_ih_l0': not an array"):
        net.load_state_dict(ragged)
    net.load_state_dict({k: v * 0.5 for k, v in before.items()})   # finite: installed, and used
    np.testing.assert_array_equal(net.state_dict()["weight_ih_l0"], before["weight_ih_l0"] * 0.5)


def test_an_optimizer_step_that_overflows_still_names_the_epoch() -> None:
    m = rk.Sequential([rk.Dense(2, seed=1)], input_shape=(None, 2))
    m.compile(rk.SGD(3e38), "mse")      # finite loss and gradients; the step itself overflows
    with pytest.raises(rk.NonFiniteError, match=r"epoch 1/3 .*first at weight 0\.kernel \(Dense\) after the "
                                                r"optimizer step"):
        m.fit(np.ones((4, 2), np.float32), np.zeros((4, 2), np.float32), 3)


def test_ragged_weight_arrays_are_typed() -> None:
    ragged = [[1.0, 2.0], [3.0]]
    d = rk.Dense(2, seed=0)
    with pytest.raises(rk.InvalidInputError, match=r"\.kernel: not an array"):
        d.set_weights(ragged, np.zeros(2))
    lstm = rk.LSTM(2, seed=0)
    with pytest.raises(rk.InvalidInputError, match="not an array"):
        lstm.set_weights(np.ones((3, 8)), ragged, np.ones(8))
    m = _two_dense()
    with pytest.raises(rk.InvalidInputError, match=r"set_weights: weight 0\.bias: not an array"):
        m.set_weights([m.get_weights()[0], ragged, *m.get_weights()[2:]])
    with pytest.raises(rk.InvalidInputError, match=r"\.kernel: not an array"):
        m.layers[0].set_weight("kernel", ragged)


def test_early_stopping_patience_takes_numpy_ints_and_refuses_the_rest() -> None:
    assert rk.EarlyStopping(patience=np.int64(2)).patience == 2
    for bad in (-1, 2.0, True, "2"):
        with pytest.raises(rk.InvalidParameterError, match="patience must be an int >= 0"):
            rk.EarlyStopping(patience=bad)  # type: ignore[arg-type]
