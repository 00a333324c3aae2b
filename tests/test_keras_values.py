"""Values where a porter reads them, as Keras 3 gives them (checked against Keras itself, torch
backend): the batch logs of ``fit`` (running means over the epoch so far), ``evaluate``'s and
``history``'s Python floats, ``summary()``'s trainable counts of an int8 model, and
``layer.set_weights`` taking Keras' one list."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

# float32 passes of a small LSTM + Dense (<= 16 gate products a step, 4 steps) on O(1) values,
# the losses averaged over <= 10 samples: Keras (torch kernels) and rnnkit round differently,
# ~1e-7 relative per operation over a few hundred operations; 1e-5 relative is ~10x that margin.
# A per-batch loss instead of the running mean differs by more than 10 %.
RTOL = 1e-5
ATOL = 2e-5


@pytest.fixture(scope="module")
def keras() -> Any:
    return keras_or_skip()


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    return g.normal(size=(10, 4, 2)).astype("float32"), g.normal(size=(10, 1)).astype("float32")


def _pair(keras: Any, metrics: list[str] | None) -> tuple[Any, rk.Sequential]:
    """The same LSTM(3) -> Dense(1) in Keras and here, Keras' random weights copied; SGD with a
    learning rate of 0 so that every batch of both sees the same weights."""
    kmodel = keras.Sequential([keras.Input((4, 2)), keras.layers.LSTM(3), keras.layers.Dense(1)])
    g = np.random.default_rng(1)
    for w in kmodel.weights:
        w.assign(g.normal(0.0, 0.5, tuple(w.shape)).astype("float32"))
    kmodel.compile(keras.optimizers.SGD(0.0), "mse", metrics=metrics)
    model = rk.Sequential([rk.LSTM(3), rk.Dense(1)], input_shape=(4, 2))
    model.set_weights(kmodel.get_weights())
    model.compile(rk.SGD(0.0), "mse", metrics=metrics)
    return kmodel, model


def _close(got: float, want: float) -> None:
    assert type(got) is float and type(want) is float
    assert got == pytest.approx(want, rel=RTOL, abs=ATOL)


def test_batch_logs_are_the_running_means_keras_gives(keras: Any) -> None:
    """10 samples in batches of 4, 4, 2: Keras' ``on_train_batch_end`` logs hold each value's
    mean over the samples seen so far in the epoch (the last batch weighs 2, not 4)."""
    kmodel, model = _pair(keras, ["mae"])
    x, y = _data()
    klogs: list[dict[str, Any]] = []
    seen: list[dict[str, Any]] = []

    class KRec(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            klogs.append(dict(logs))

    class Rec(rk.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            seen.append(dict(logs))

    val = _data(5)
    kh = kmodel.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, callbacks=[KRec()],
                    validation_data=val)
    h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, callbacks=[Rec()],
                  validation_data=val)
    assert len(seen) == len(klogs) == 6
    for ours, theirs in zip(seen, klogs, strict=True):
        assert set(ours) == set(theirs) == {"loss", "mae"}
        for k in theirs:
            _close(ours[k], theirs[k])
    # the last batch's running means are the epoch's logs; Python floats in both histories,
    # the validation values (from evaluate) too
    assert list(h.history) == list(kh.history) == ["loss", "mae", "val_loss", "val_mae"]
    for k in kh.history:
        for ours_v, theirs_v in zip(h.history[k], kh.history[k], strict=True):
            _close(ours_v, theirs_v)
    for k in ("loss", "mae"):
        _close(seen[-1][k], h.history[k][-1])
    # and not the batch's own loss: the third batch's alone differs from the running mean
    p = model.predict(x)
    assert abs(float(np.mean((p[8:] - y[8:]) ** 2)) - seen[2]["loss"]) > 0.05 * seen[2]["loss"]


def test_evaluate_returns_python_floats_as_keras(keras: Any) -> None:
    x, y = _data(2)
    kmodel, model = _pair(keras, None)
    want, got = kmodel.evaluate(x, y, batch_size=4, verbose=0), model.evaluate(x, y, batch_size=4)
    _close(got, want)
    kmodel, model = _pair(keras, ["mae"])
    want, got = kmodel.evaluate(x, y, batch_size=4, verbose=0), model.evaluate(x, y, batch_size=4)
    assert isinstance(got, list) and len(got) == len(want) == 2
    for o, w in zip(got, want, strict=True):
        _close(o, w)
    wd = kmodel.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    gd = model.evaluate(x, y, batch_size=4, return_dict=True)
    assert isinstance(gd, dict) and list(gd) == list(wd)
    for k in wd:
        _close(gd[k], wd[k])


def _summary_counts(text: str) -> tuple[int, int, int]:
    lines = {ln.split(":")[0].strip(): ln.split(":")[1] for ln in text.splitlines() if "params:" in ln}
    return tuple(int(lines[k].split("(")[0].replace(",", "")) for k in  # type: ignore[return-value]
                 ("Total params", "Trainable params", "Non-trainable params"))


def test_int8_summary_counts_kernels_and_scales_as_non_trainable(keras: Any) -> None:
    """Keras' int8 Dense: its int8 kernel (4, 2) and kernel_scale (2,) are non-trainable, 10
    parameters of 12. Ours too; the bias (2,) as well, since an int8 layer here is inference
    only (training it raises) while Keras may still train its bias."""
    kmodel = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    kmodel.quantize("int8")
    knon = {w.path.split("/")[-1]: int(np.prod(w.shape)) for w in kmodel.non_trainable_weights}
    assert knon == {"kernel": 8, "kernel_scale": 2}
    lines: list[str] = []
    kmodel.summary(print_fn=lambda s, **_: lines.append(s))
    ktotal = _summary_counts("\n".join(lines))[0]
    model = rk.quantize(rk.Sequential([rk.Dense(2)], input_shape=(4,)))
    total, trainable, non = _summary_counts(model.summary(print_fn=None))
    assert total == ktotal == 12
    ours_non = {n: model.layers[0].weight(n).size for n in model.layers[0].weight_names}
    assert ours_non["kernel_q"] + ours_non["kernel_scale"] == sum(knon.values())
    assert (trainable, non) == (0, 12)
    # a float model's trainable count is every weight, as Keras counts it
    kfloat = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    assert _summary_counts(rk.Sequential([rk.Dense(2)], input_shape=(4,)).summary(print_fn=None)) == \
        (kfloat.count_params(), kfloat.count_params(), 0)


def _layer_pairs(keras: Any) -> list[tuple[Any, rk.Layer, tuple[int, ...]]]:
    L = keras.layers
    return [
        (L.LSTM(4), rk.LSTM(4), (3, 5, 2)),
        (L.GRU(4), rk.GRU(4, reset_after=True), (3, 5, 2)),
        (L.SimpleRNN(4, return_sequences=True), rk.SimpleRNN(4, return_sequences=True), (3, 5, 2)),
        (L.Dense(3), rk.Dense(3), (3, 2)),
        (L.Dense(3, use_bias=False), rk.Dense(3, use_bias=False), (3, 2)),
        (L.Bidirectional(L.LSTM(3)), rk.Bidirectional(rk.LSTM(3)), (3, 5, 2)),
    ]


def test_layer_set_weights_takes_keras_one_list(keras: Any) -> None:
    g = np.random.default_rng(3)
    for klayer, layer, shape in _layer_pairs(keras):
        x = g.normal(size=shape).astype("float32")
        klayer.build(shape)
        for w in klayer.weights:
            w.assign(g.normal(0.0, 0.5, tuple(w.shape)).astype("float32"))
        if isinstance(layer, rk.Bidirectional):
            layer.build((None, *shape[1:]))
        layer.set_weights(klayer.get_weights())   # Keras' list, its (G*H,) bias included
        want = keras.ops.convert_to_numpy(klayer(x))
        np.testing.assert_allclose(layer.predict(x), want, atol=ATOL, err_msg=type(layer).__name__)
    # an Embedding's table
    kemb, emb = keras.layers.Embedding(7, 3), rk.Embedding(7, 3)
    kemb.build((None, 4))
    kemb.embeddings.assign(g.normal(size=(7, 3)).astype("float32"))
    emb.set_weights(kemb.get_weights())
    ids = np.array([[0, 6, 2, 3]])
    np.testing.assert_array_equal(emb.predict(ids), keras.ops.convert_to_numpy(kemb(ids)))


def test_the_separate_spelling_still_works_and_lists_are_checked() -> None:
    g = np.random.default_rng(4)
    k, r, b = (g.normal(size=s).astype("float32") for s in ((2, 16), (4, 16), (1, 16)))
    one, two = rk.LSTM(4), rk.LSTM(4)
    one.set_weights(k, r, b)
    two.set_weights([k, r, b.reshape(-1)])
    for a, c in zip(one.get_weights(), two.get_weights(), strict=True):
        np.testing.assert_array_equal(a, c)
    with pytest.raises(rk.InvalidInputError, match="expected 3 arrays"):
        two.set_weights([k, r])
    # a Dense without bias takes its kernel written as nested lists, and [kernel]
    d = rk.Dense(2, use_bias=False)
    kern = g.normal(size=(3, 2)).astype("float32")
    d.set_weights(kern.tolist())
    np.testing.assert_array_equal(d.get_weights()[0], kern)
    d.set_weights([kern * 2])
    np.testing.assert_array_equal(d.get_weights()[0], kern * 2)
    with pytest.raises(rk.InvalidInputError, match="one list of 2 arrays"):
        rk.Dense(2).set_weights([kern])
    # the base spelling (a Bidirectional): the count, then each shape by position
    bi = rk.Bidirectional(rk.LSTM(4))
    bi.build((None, 5, 2))
    ws = bi.get_weights()
    with pytest.raises(rk.InvalidInputError, match="expected 6 arrays"):
        bi.set_weights(ws[:5])
    with pytest.raises(rk.WeightShapeError, match="position 4"):
        bi.set_weights([*ws[:4], ws[4].T, ws[5]])
