"""The training loop: full-batch and mini-batch epochs, the History's sample-weighted epoch
loss (recomputed independently), validation, callbacks, NaN/Inf errors, predict in batches and
from several threads, lazy builds, files."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.layers import Dense, Dropout
from rnnkit.models import (
    Callback,
    EarlyStopping,
    LearningRateScheduler,
    ModelCheckpoint,
    Sequential,
    model_from_config,
)


def _data(n: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 4, 2))
    y = np.stack([x[:, :, 0].sum(1), x[:, -1, 1]], axis=1)
    return x, y


def _model(dtype: str = "float64") -> Sequential:
    return Sequential([rk.GRU(5, seed=1, dtype=dtype), Dense(2, seed=2, dtype=dtype)],
                      input_shape=(None, 4, 2))


class Recorder(Callback):
    """Weights after every epoch, the batch logs, and the number of finished epochs."""

    def __init__(self) -> None:
        self.weights: list[list[np.ndarray]] = []
        self.batches: list[dict[str, float]] = []

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        self.batches.append(dict(logs or {}))

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        assert self.model is not None
        self.weights.append(self.model.get_weights())


def test_epoch_loss_is_the_sample_weighted_mean_of_pre_update_batch_losses() -> None:
    x, y = _data(10)
    model = _model()
    model.compile(rk.Adam(0.05), rk.MeanSquaredError(), metrics=["mae"])
    # the same steps by hand, on a copy, through the public forward/backward API
    twin = model_from_config(model.get_config())
    twin.set_weights(model.get_weights())
    opt, loss_fn = rk.Adam(0.05), rk.MeanSquaredError()
    expected_loss, expected_mae, plain_mean = [], [], []
    for _ in range(3):
        losses, maes, sizes = [], [], []
        for a in (0, 4, 8):  # shuffle=False: batches [0:4], [4:8], [8:10]
            xb, yb = x[a:a + 4], y[a:a + 4]
            ctx = rk.Ctx.training()
            pred = twin.forward(xb, ctx)
            loss, grad = loss_fn.value_and_grad(yb, pred)  # measured BEFORE this batch's update
            losses.append(loss)
            maes.append(np.abs(pred - yb).mean())
            sizes.append(len(xb))
            twin.backward(grad, ctx)
            opt.apply_gradients([(layer, n, ctx.grad(layer, n)) for layer, n in twin.trainable_weights()])
        w = np.array(sizes) / 10.0
        expected_loss.append(float(np.dot(w, losses)))
        expected_mae.append(float(np.dot(w, maes)))
        plain_mean.append(float(np.mean(losses)))
    hist = model.fit_with_batches(x, y, 3, 4, shuffle=False)
    np.testing.assert_allclose(hist.history["loss"], expected_loss, rtol=1e-12)
    np.testing.assert_allclose(hist.history["mae"], expected_mae, rtol=1e-12)
    assert np.abs(np.array(plain_mean) - expected_loss).max() > 1e-6  # the weighting matters here
    for a, b in zip(model.get_weights(), twin.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_full_batch_fit_takes_one_step_per_epoch_and_keywords_work() -> None:
    x, y = _data(6)
    model = _model()
    model.compile(rk.SGD(0.1), "mse")
    rec = Recorder()
    model.fit(x, y, 4, callbacks=[rec])
    assert len(rec.batches) == 4  # one step per epoch
    model2 = _model()
    model2.compile(rk.SGD(0.1), "mse")
    rec2 = Recorder()
    model2.fit_with_batches(x, y, epochs=2, batch_size=4, callbacks=[rec2], seed=3)
    assert len(rec2.batches) == 4  # 2 epochs x ceil(6 / 4)


def test_shuffle_is_seeded() -> None:
    x, y = _data(12)
    runs = []
    for seed in (7, 7, 8):
        model = _model()
        model.compile(rk.Adam(0.05), "mse")
        runs.append(model.fit(x, y, 3, batch_size=5, seed=seed).history["loss"])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_validation_data_and_split() -> None:
    x, y = _data(10)
    model = _model()
    model.compile(rk.Adam(0.01), "mse", metrics=["mae"])
    hist = model.fit(x[:7], y[:7], 2, validation_data=(x[7:], y[7:]))
    assert list(hist.history) == ["loss", "mae", "val_loss", "val_mae"]
    ev = model.evaluate(x[7:], y[7:])
    assert isinstance(ev, list) and ev[0] == pytest.approx(hist.history["val_loss"][-1], rel=1e-12)
    assert model.evaluate(x[7:], y[7:], return_dict=True) == pytest.approx(
        {"loss": hist.history["val_loss"][-1], "mae": hist.history["val_mae"][-1]}, rel=1e-12)
    model2 = _model()
    model2.compile(rk.Adam(0.01), "mse")
    hist2 = model2.fit(x, y, 2, validation_split=0.3)  # holds out the LAST 3 samples
    np.testing.assert_allclose(hist2.history["loss"], hist.history["loss"], rtol=1e-12)
    np.testing.assert_allclose(hist2.history["val_loss"], hist.history["val_loss"], rtol=1e-12)


def test_early_stopping_restores_the_best_weights() -> None:
    x, y = _data(10)
    model = _model()
    model.compile(rk.SGD(0.2), "mse")
    rec = Recorder()
    # good steps for 4 epochs, then a rate that overshoots, so val_loss climbs
    sched = LearningRateScheduler(lambda epoch, lr: 0.2 if epoch < 4 else 4.0)
    stop = EarlyStopping(monitor="val_loss", patience=2, restore_best_weights=True)
    hist = model.fit(x, y, 50, validation_data=(x, y), callbacks=[sched, stop, rec])
    val = hist.history["val_loss"]
    best = int(np.argmin(val))
    assert len(val) < 50 and stop.stopped_epoch == len(val) - 1 and stop.best_epoch == best
    assert val[-1] > val[best]
    assert hist.history["learning_rate"][:5] == [0.2, 0.2, 0.2, 0.2, 4.0]
    for w, wb in zip(model.get_weights(), rec.weights[best], strict=True):
        np.testing.assert_array_equal(w, wb)
    assert any(not np.array_equal(w, wl) for w, wl in zip(model.get_weights(), rec.weights[-1], strict=True))
    assert model.evaluate(x, y) == pytest.approx(val[best], rel=1e-12)


def test_early_stopping_names_a_missing_monitor() -> None:
    x, y = _data(4)
    model = _model()
    model.compile("sgd", "mse")
    with pytest.raises(rk.InvalidInputError, match=r"'val_loss'.*\['loss'\]"):
        model.fit(x, y, 2, callbacks=[EarlyStopping()])


def test_model_checkpoint_saves_the_best_epoch(tmp_path: Path) -> None:
    x, y = _data(10)
    model = _model()
    model.compile(rk.SGD(0.2), "mse")
    rec = Recorder()
    path = tmp_path / "best.safetensors"
    ck = ModelCheckpoint(str(path), monitor="loss", save_best_only=True)
    sched = LearningRateScheduler(lambda epoch, lr: 0.2 if epoch < 3 else 4.0)
    hist = model.fit(x, y, 6, callbacks=[sched, ck, rec])
    best = int(np.argmin(hist.history["loss"]))
    fresh = _model()
    fresh.load_weights(str(path))
    # "loss" is measured before each epoch's step: the best loss belongs to the weights that
    # ENTERED that epoch, but the checkpoint saves the weights at the epoch's end (as Keras)
    for w, wb in zip(fresh.get_weights(), rec.weights[best], strict=True):
        np.testing.assert_array_equal(w, wb)
    ck2 = ModelCheckpoint(str(tmp_path / "e{epoch:02d}.safetensors"), save_best_only=False)
    model.fit(x, y, 2, callbacks=[ck2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.safetensors", "e01.safetensors",
                                                          "e02.safetensors"]


def test_non_finite_training_names_the_epoch_and_the_layer() -> None:
    x, y = _data(6)
    model = _model("float32")
    model.compile(rk.SGD(1e3), "mse")
    rec = Recorder()
    with pytest.raises(rk.NonFiniteError, match=r"epoch (\d+)/100") as err:
        model.fit(x, y, 100, callbacks=[rec])
    epoch = int(str(err.value).split("epoch ")[1].split("/")[0])
    assert epoch == len(rec.weights) + 1 and epoch > 1  # the epochs before it completed
    # the first non-finite value of that step, named by where it appeared in the backward pass
    # (which quantity overflows first depends on the float details of the diverging run)
    assert re.search(r"first at the (gradient of 0\.\w+ \(GRU\)|input gradient of layer 1 \(Dense\)"
                     r"|gradient of 1\.\w+ \(Dense\))", str(err.value)), str(err.value)
    # a layer output overflowing at once names epoch 1 and that layer
    m = Sequential([Dense(3, seed=1), Dense(2, seed=2)], input_shape=(None, 2))
    m.layers[0].set_weight("kernel", np.full((2, 3), 3e38, np.float32))  # 1 * 3e38 * 2 = inf
    m.compile("sgd", "mse")
    with pytest.raises(rk.NonFiniteError, match=r"epoch 1/3 .*the output of layer 0 \(Dense\)"):
        m.fit(np.ones((4, 2)), np.zeros((4, 2)), 3)
    with pytest.raises(rk.InvalidInputError, match="fit: y holds nan"):
        m.fit(np.ones((4, 2)), np.full((4, 2), np.nan), 1)


def test_dropout_trains_reproducibly_with_a_seed() -> None:
    x, y = _data(8)
    hists = []
    for _ in range(2):
        model = Sequential([rk.LSTM(6, seed=1, dtype="float64", return_sequences=True), Dropout(0.3),
                            rk.LSTM(4, seed=2, dtype="float64"), Dense(2, seed=3, dtype="float64")])
        model.compile(rk.Adam(0.01), "mse")
        hists.append(model.fit(x, y, 3, seed=11).history["loss"])
        p1, p2 = model.predict(x), model.predict(x)
        np.testing.assert_array_equal(p1, p2)  # inference: no dropout
    assert hists[0] == hists[1]


def test_predict_in_batches_and_from_threads() -> None:
    x, _ = _data(23)
    model = _model()
    full = model.predict(x)
    np.testing.assert_allclose(model.predict(x, batch_size=5), full, rtol=1e-13, atol=1e-15)
    xs = [_data(7, seed=s)[0] for s in range(8)]
    serial = [model.predict(v) for v in xs]
    out: list[np.ndarray | None] = [None] * len(xs)
    barrier = threading.Barrier(len(xs))

    def work(k: int) -> None:
        barrier.wait()
        for _ in range(10):
            out[k] = model.predict(xs[k])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(out, serial, strict=True):
        np.testing.assert_array_equal(a, b)


def test_lazy_build_and_input_errors() -> None:
    model = Sequential([rk.LSTM(3, seed=1), Dense(1, seed=2)])
    assert not model.built
    assert "0 (unbuilt)" in model.summary(print_fn=None)   # Keras 3's unbuilt summary
    y = model.predict(np.zeros((2, 5, 4), np.float32))
    assert model.built and y.shape == (2, 1)
    nested = np.arange(20.0).reshape(1, 5, 4) / 20
    np.testing.assert_array_equal(model.predict(nested.tolist()), model.predict(nested))  # nested lists
    np.testing.assert_array_equal(model.predict([nested]), model.predict(nested))  # [one array]
    assert model.input_shapes()[0] == (None, 5, 4)
    with pytest.raises(rk.InvalidInputError, match=r"shape \(2, 6, 4\).*\(None, 5, 4\)"):
        model.predict(np.zeros((2, 6, 4)))
    with pytest.raises(rk.NotBuiltError, match="compile"):
        model.fit(np.zeros((2, 5, 4)), np.zeros((2, 1)), 1)
    model.compile("adam", "mse")
    with pytest.raises(rk.InvalidInputError, match=r"target 0 has shape \(3, 1\)"):
        model.fit(np.zeros((2, 5, 4)), np.zeros((3, 1)), 1)
    with pytest.raises(rk.InvalidInputError, match="layer 1 \\(LSTM\\)"):
        Sequential([rk.LSTM(3), rk.LSTM(2)], input_shape=(None, 5, 4))  # no return_sequences


def test_named_weights_save_and_load_model_bit_for_bit(tmp_path: Path) -> None:
    x, y = _data(6)
    model = Sequential([rk.Embedding(10, 3, seed=1), rk.LSTM(4, seed=2), Dense(2, seed=3)],
                       input_shape=(None, 4))
    idx = np.random.default_rng(0).integers(0, 10, (6, 4)).astype(np.float32)
    model.compile(rk.Adam(0.01), "mse")
    model.fit(idx, y, 3)
    assert list(model.named_weights()) == ["0.embeddings", "1.kernel", "1.recurrent_kernel", "1.bias",
                                           "2.kernel", "2.bias"]
    model.save(str(tmp_path / "m.rnnkit"))
    again = rk.load_model(str(tmp_path / "m.rnnkit"))
    np.testing.assert_array_equal(again.predict(idx), model.predict(idx))
    model.save_weights(str(tmp_path / "w.safetensors"))
    fresh = Sequential([rk.Embedding(10, 3), rk.LSTM(4), Dense(2)], input_shape=(None, 4))
    fresh.load_weights(str(tmp_path / "w.safetensors"))
    np.testing.assert_array_equal(fresh.predict(idx), model.predict(idx))


def test_verbose_progress_bar_shows_loss_and_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    x, y = _data(6)
    model = _model()
    model.compile("adam", "mse", metrics=["mae"])
    model.fit(x, y, 3, verbose=1)
    err = capsys.readouterr().err
    assert "3/3" in err and "loss=" in err and "mae=" in err
    model.fit(x, y, 2)
    assert capsys.readouterr().err == ""
