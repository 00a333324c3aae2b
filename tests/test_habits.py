"""Keras' habits, each accepted with Keras' meaning or refused with a typed error saying what
rnnkit expects: ``input_shape=`` / ``input_dim=`` on a first layer, ``verbose`` on ``fit`` /
``evaluate`` / ``predict``, ``(B,)`` targets against ``(B, 1)`` outputs, ``summary()`` before
build, ``Sequential(dtype=)`` / ``GraphBuilder.input(dtype=)``, and full-batch fits made
visible. Every check compares values with an independent spelling of the same model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rnnkit as rk

RNG = np.random.default_rng(7)
X3 = RNG.normal(size=(12, 5, 3)).astype(np.float32)
X2 = RNG.normal(size=(12, 4)).astype(np.float32)
Y1 = RNG.normal(size=(12,)).astype(np.float32)


# -- input_shape= / input_dim= on a layer ----------------------------------------------------------
def test_input_shape_on_the_first_layer_builds_the_model_as_keras_does() -> None:
    m = rk.Sequential([rk.LSTM(4, input_shape=(5, 3), seed=1), rk.Dense(2, seed=2)])
    assert m.built and m.input_shapes() == [rk.Shape((None, 5, 3))]
    ref = rk.Sequential([rk.LSTM(4, seed=1), rk.Dense(2, seed=2)], input_shape=(None, 5, 3))
    np.testing.assert_array_equal(m.predict(X3), ref.predict(X3))
    assert m.summary(print_fn=None) == ref.summary(print_fn=None)   # summary before any fit
    with pytest.raises(rk.InvalidInputError, match=r"built for \(None, 5, 3\)"):
        m.predict(X3[:, :4])
    free = rk.Sequential([rk.GRU(2, input_shape=(None, 3), seed=1)])    # a free time axis stays free
    assert free.input_shapes() == [rk.Shape((None, None, 3))] and free.predict(X3[:, :2]).shape == (12, 2)
    # add() one by one, Keras' other spelling: built after the first, later layers join it
    a = rk.Sequential()
    a.add(rk.Dense(3, input_dim=4, seed=3))
    assert a.built and a.input_shapes() == [rk.Shape((None, 4))]
    a.add(rk.Dense(1, seed=4))
    b = rk.Sequential([rk.Dense(3, seed=3), rk.Dense(1, seed=4)], input_shape=(None, 4))
    np.testing.assert_array_equal(a.predict(X2), b.predict(X2))
    assert a.output_shape == rk.Shape((None, 1))


def test_input_shape_conflicts_and_bad_values_are_refused() -> None:
    with pytest.raises(rk.InvalidInputError, match=r"declares input_shape=\(5, 3\)"):
        rk.Sequential([rk.LSTM(4, input_shape=(5, 3))], input_shape=(None, 5, 2))
    with pytest.raises(rk.InvalidInputError, match="declares input_shape"):
        rk.Sequential([rk.Dense(4), rk.Dense(2, input_shape=(7,))], input_shape=(None, 3))
    for bad in (8, ()):
        with pytest.raises(rk.InvalidParameterError, match="input_shape must be the shape of one sample"):
            rk.LSTM(4, input_shape=bad)
    for bad, says in (((0, 3), "got 0"), ((2.5,), r"got 2.5 \(float\)"), ((True,), r"got True \(bool\)")):
        with pytest.raises(rk.InvalidParameterError,
                           match=rf"input_shape \(.*\): each axis must be an int >= 1 or None, {says}"):
            rk.LSTM(4, input_shape=bad)
    with pytest.raises(rk.InvalidParameterError, match="not both"):
        rk.Dense(2, input_shape=(3,), input_dim=3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        rk.Dense(2, input_length=3)   # any other keyword stays Python's TypeError


def test_input_dim_keeps_its_own_meaning_where_a_layer_has_one() -> None:
    emb = rk.Embedding(10, 3)               # the vocabulary size
    assert emb.input_dim == 10 and emb.declared_input_shape is None
    lstm = rk.LSTM(2, input_dim=3)          # built for (batch, time, 3), as before
    assert lstm.built and lstm.input_shape == rk.Shape((None, None, 3))
    assert rk.Dense(2, input_dim=3).declared_input_shape == rk.Shape((None, 3))


# -- verbose -------------------------------------------------------------------------------------
def _dense(seed: int = 0) -> rk.Sequential:
    m = rk.Sequential([rk.Dense(1, seed=seed)], input_shape=(None, 4))
    m.compile(rk.SGD(0.1), "mse", metrics=["mae"])
    return m


def test_predict_and_evaluate_take_keras_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    m = _dense()
    want = X2 @ m.get_weights()[0] + m.get_weights()[1]
    np.testing.assert_allclose(m.predict(X2, verbose=0), want, rtol=1e-6)
    assert capsys.readouterr().out == ""
    np.testing.assert_allclose(m.predict(X2, verbose="auto"), want, rtol=1e-6)
    assert capsys.readouterr().out == "sequential.predict: 12 samples\n"
    loss, mae = m.evaluate(X2, Y1[:, None], verbose=0)
    assert capsys.readouterr().out == ""
    err = want[:, 0] - Y1
    assert loss == pytest.approx(float(np.mean(err.astype(np.float64) ** 2)), rel=1e-5)
    assert mae == pytest.approx(float(np.mean(np.abs(err))), rel=1e-5)
    m.evaluate(X2, Y1[:, None], verbose=2)
    assert capsys.readouterr().out == f"sequential.evaluate: 12 samples - loss: {loss:.4g} - mae: {mae:.4g}\n"
    for bad in ("yes", -1, 1.5, None):
        with pytest.raises(rk.InvalidParameterError, match="verbose must be 0 .silent., 1"):
            m.predict(X2, verbose=bad)
        with pytest.raises(rk.InvalidParameterError, match="verbose must be"):
            m.evaluate(X2, Y1, verbose=bad)


def test_fit_verbose_auto_is_the_bar_and_trains_as_silent(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _dense(), _dense()
    ha = a.fit(X2, Y1[:, None], 3, batch_size=5, seed=0, verbose="auto")
    err = capsys.readouterr().err
    assert "3/3" in err and "steps=3" in err      # 12 samples in batches of 5: 3 steps an epoch
    hb = b.fit(X2, Y1[:, None], 3, batch_size=5, seed=0, verbose=0)
    assert capsys.readouterr().err == ""
    assert ha.history == hb.history
    with pytest.raises(rk.InvalidParameterError, match="'auto'"):
        a.fit(X2, Y1, 1, verbose="loud")


# -- (B,) targets against a (B, 1) output ----------------------------------------------------------
def test_rank_one_targets_align_with_a_single_output_column() -> None:
    a, b = _dense(), _dense()
    ha = a.fit(X2, Y1, 4, batch_size=6, seed=3)
    hb = b.fit(X2, Y1[:, None], 4, batch_size=6, seed=3)
    assert ha.history == hb.history
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)
    assert a.evaluate(X2, Y1) == b.evaluate(X2, Y1[:, None])


def test_other_target_mismatches_are_still_refused() -> None:
    two = rk.Sequential([rk.Dense(2)], input_shape=(None, 4)).compile("sgd", "mse")
    with pytest.raises(rk.InvalidInputError, match=r"y_true shape \(12,\) does not match y_pred shape "
                                                   r"\(12, 2\)"):
        two.fit(X2, Y1, 1)
    seq = rk.Sequential([rk.LSTM(1, return_sequences=True)], input_shape=(None, 5, 3)).compile("sgd", "mse")
    with pytest.raises(rk.InvalidInputError, match="does not match"):
        seq.fit(X3, RNG.normal(size=(12, 5)), 1)   # (B, T) against (B, T, 1): not Keras' one case


# -- summary before build --------------------------------------------------------------------------
# -- dtype ---------------------------------------------------------------------------------------
def test_sequential_dtype_makes_every_layer_compute_in_it() -> None:
    x = RNG.normal(size=(4, 6, 3))
    f64 = rk.Sequential([rk.Bidirectional(rk.GRU(3, seed=1, dtype="float64")),
                         rk.Dense(2, seed=2, dtype="float64")])
    model = rk.Sequential([rk.Bidirectional(rk.GRU(3, seed=1)), rk.Dense(2, seed=2)], dtype="float64")
    out = model.predict(x)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, f64.predict(x))
    again = rk.Sequential.from_config(model.get_config()["config"])
    assert again.dtype == np.float64 and all(la.dtype == np.float64 for la in again.layers)
    for bad in ("int32", "float16", "bfloat16"):
        with pytest.raises(rk.InvalidParameterError, match="dtype must be 'float32' or 'float64'"):
            rk.Sequential([rk.Dense(2)], dtype=bad)
    built = rk.Dense(2)
    built.build((None, 3))
    with pytest.raises(rk.InvalidInputError, match="already built in float32"):
        rk.Sequential([built], dtype="float64")


def test_graph_input_dtype_converts_its_arrays_at_the_door() -> None:
    g = rk.GraphBuilder()
    i = g.input((None, 4), dtype="float32")
    model = g.build(g.add(rk.Dense(2, seed=5, dtype="float64"), i))
    x = RNG.normal(size=(3, 4))                 # float64 data through a float32 input
    w, b = model.get_weights()
    np.testing.assert_array_equal(model.predict(x), x.astype(np.float32).astype(np.float64) @ w + b)
    with pytest.raises(rk.InvalidInputError, match="beyond float32's range"):
        model.predict(np.full((2, 4), 1e300))
    assert g.input((None, 4), dtype="int32").dtype == "int32"   # token ids: recorded, passed as given
    with pytest.raises(rk.InvalidParameterError, match="dtype must be float32, float64, int32, int64"):
        g.input((None, 4), dtype="float16")


# -- full-batch fits made visible ------------------------------------------------------------------
def test_full_batch_fit_on_many_samples_warns_once(capsys: pytest.CaptureFixture[str]) -> None:
    x = RNG.normal(size=(rk.models._habits.FULL_BATCH_WARN + 1, 4)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    with pytest.warns(rk.FullBatchWarning,
                      match="ONE full-batch step over 513 samples; pass batch_size=32") as rec:
        _dense().fit(x, y, 3, verbose=2)
    assert len([r for r in rec if issubclass(r.category, rk.FullBatchWarning)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(line.endswith("(1 step)") for line in lines)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rk.FullBatchWarning)
        _dense().fit(x, y, 1, batch_size=32)
        _dense().fit(x[:-1], y[:-1], 1)          # 512 samples: at the threshold, no warning
        h = _dense().fit(x, y, 2, batch_size=200, verbose=2)
    assert capsys.readouterr().out.splitlines()[-1].endswith("(3 steps)") and len(h.epoch) == 2


def test_an_input_first_in_a_sequential_builds_it_as_keras_does() -> None:
    x = RNG.normal(size=(3, 5, 3)).astype(np.float32)
    ours = rk.Sequential([rk.Input((5, 3)), rk.LSTM(4, seed=1), rk.Dense(2, seed=2)])
    explicit = rk.Sequential([rk.LSTM(4, seed=1), rk.Dense(2, seed=2)]).build((None, 5, 3))
    assert ours.built and ours.input_shapes() == explicit.input_shapes()
    np.testing.assert_array_equal(ours.predict(x), explicit.predict(x))
    added = rk.Sequential().add(rk.Input((5, 3))).add(rk.LSTM(4, seed=1)).add(rk.Dense(2, seed=2))
    np.testing.assert_array_equal(added.predict(x), explicit.predict(x))
    assert len(ours.layers) == 2          # as Keras' Sequential.layers, the Input is not a layer
    with pytest.raises(rk.InvalidInputError, match="only be the first entry"):
        rk.Sequential([rk.LSTM(4), rk.Input((5, 3))])
