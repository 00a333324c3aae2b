"""ReduceLROnPlateau, CSVLogger, TerminateOnNaN, LambdaCallback and fit(verbose=2).

Keras 3's own callback classes, driven with a stand-in model on a scripted sequence of logs,
are the oracle: the learning-rate sequences must be equal exactly, the CSV files byte for byte.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip
from rnnkit.layers import Dense
from rnnkit.models import Sequential

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")



LOSSES = [1.0, 0.9, 0.95, 0.96, 0.97, 0.89995, 0.9, 0.91, 0.5, 0.5, 0.5, 0.5, 0.5, 0.49999, 0.6,
          0.7, 0.8, 0.9, 1.0, 0.3, 0.31, 0.32, 0.33, 0.34, 0.35]


def _lr_sequence(cb: Any, values: list[float], monitor: str, lr: float = 0.1) -> list[float]:
    model = SimpleNamespace(optimizer=SimpleNamespace(learning_rate=lr), stop_training=False)
    cb.set_model(model)
    cb.on_train_begin({})
    out = []
    for epoch, v in enumerate(values):
        logs = {monitor: v}
        cb.on_epoch_end(epoch, logs)
        out.append(float(model.optimizer.learning_rate))
        assert logs["learning_rate"] == (out[-2] if epoch else lr)  # the rate the epoch used
    return out


@pytest.mark.parametrize("kw", [
    {},
    {"patience": 2},
    {"patience": 1, "cooldown": 2},
    {"patience": 2, "min_delta": 0.05, "factor": 0.5},
    {"patience": 0, "cooldown": 1, "min_lr": 0.004, "factor": 0.2},
    {"patience": 1, "min_delta": 0.0, "mode": "min"},
    {"patience": 2, "mode": "max", "monitor": "val_accuracy"},
])
def test_reduce_lr_on_plateau_learning_rates_equal_keras(kw: dict[str, Any]) -> None:
    keras = keras_or_skip()
    monitor = kw.get("monitor", "val_loss")
    ours = _lr_sequence(rk.ReduceLROnPlateau(**kw), LOSSES, monitor)
    theirs = _lr_sequence(keras.callbacks.ReduceLROnPlateau(**kw), LOSSES, monitor)
    assert ours == theirs
    assert len(set(ours)) > 1  # the script does reduce the rate


def test_reduce_lr_on_plateau_hand_computed_and_auto_mode_for_accuracy() -> None:
    # patience 2, cooldown 1: plateau at epochs 1-2 -> reduce after epoch 2; epoch 3 spends the
    # cooldown (counter 1 -> 0) and, no longer in cooldown, counts wait 1; epoch 4 reduces again
    got = _lr_sequence(rk.ReduceLROnPlateau("loss", factor=0.5, patience=2, cooldown=1),
                       [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], "loss", lr=1.0)
    assert got == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    # auto mode on an accuracy: rising values are improvements, so nothing is reduced
    rising = _lr_sequence(rk.ReduceLROnPlateau("val_accuracy", patience=1), [0.1, 0.2, 0.3, 0.4],
                          "val_accuracy")
    assert rising == [0.1] * 4
    with pytest.raises(rk.InvalidParameterError, match="factor"):
        rk.ReduceLROnPlateau(factor=1.0)
    with pytest.raises(rk.InvalidParameterError, match="patience"):
        rk.ReduceLROnPlateau(patience=-1)


def _csv_run(cb: Any, epochs: list[dict[str, float]], start: int = 0) -> None:
    cb.set_model(SimpleNamespace(optimizer=None, stop_training=False))
    cb.on_train_begin({})
    for e, logs in enumerate(epochs):
        cb.on_epoch_end(start + e, dict(logs))
    cb.on_train_end({})


def test_csv_logger_file_equals_keras_byte_for_byte(tmp_path: Path) -> None:
    keras = keras_or_skip()
    runs = [[{"loss": 0.5, "mae": 0.25}, {"loss": 0.125, "mae": 0.0625}],
            [{"loss": 0.1, "mae": 0.05, "val_loss": 0.2, "val_mae": 0.1}]]
    for append in (False, True):
        a, b = tmp_path / f"ours{append}.csv", tmp_path / f"keras{append}.csv"
        for logs in runs:
            _csv_run(rk.CSVLogger(a, append=append), logs)
            _csv_run(keras.callbacks.CSVLogger(str(b), append=append), logs)
        assert a.read_bytes() == b.read_bytes()
    text = (tmp_path / "oursTrue.csv").read_text()
    assert text.splitlines()[0] == "epoch,loss,mae,val_loss,val_mae"
    assert text.count("epoch") == 1 and text.splitlines()[2] == "1,0.125,0.0625,NA,NA"


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (12, 3))
    return x, x @ np.array([[1.0], [-2.0], [0.5]])


def _model() -> Sequential:
    m = Sequential([Dense(1, seed=3, dtype="float64")], input_shape=(None, 3))
    m.compile(rk.SGD(0.1), "mse", metrics=["mae"])
    return m


def test_csv_logger_resumes_with_fit_checkpoint_as_an_uninterrupted_run(tmp_path: Path) -> None:
    x, y = _data()
    whole = tmp_path / "whole.csv"
    _model().fit(x, y, 4, batch_size=4, seed=1, callbacks=[rk.CSVLogger(whole)])

    class Kill(rk.models.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if epoch == 2:  # the CSV row of epoch 2 is written, its state is not saved
                raise KeyboardInterrupt

    part = tmp_path / "part.csv"
    with pytest.raises(KeyboardInterrupt):
        _model().fit(x, y, 4, batch_size=4, seed=1, checkpoint=tmp_path / "ck",
                     callbacks=[rk.CSVLogger(part), Kill()])
    assert part.read_text().count("\n") == 4  # header + epochs 0, 1, 2
    _model().fit(x, y, 4, batch_size=4, seed=1, checkpoint=tmp_path / "ck", callbacks=[rk.CSVLogger(part)])
    assert part.read_bytes() == whole.read_bytes()


def test_terminate_on_nan_stops_at_the_batch_and_keeps_the_last_finite_weights() -> None:
    x, y = _data()
    y = y.astype(np.float64)
    y[8] = 1e200  # batch 2 (samples 8..11): its squared error overflows to inf
    m, ref = _model(), _model()
    with np.errstate(over="ignore"):
        ref.fit(x[:8], y[:8], 1, batch_size=4, shuffle=False)  # the two finite steps
    cb = rk.TerminateOnNaN()
    with np.errstate(over="ignore"):
        hist = m.fit(x, y, 5, batch_size=4, shuffle=False, callbacks=[cb])
    assert cb.terminated_at == 2 and hist.epoch == [0] and m.stop_training
    assert not np.isfinite(hist.history["loss"][0])
    for a, b in zip(m.get_weights(), ref.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(rk.NonFiniteError, match="batch 2"), np.errstate(over="ignore"):
        _model().fit(x, y, 5, batch_size=4, shuffle=False, callbacks=[rk.TerminateOnNaN(raise_error=True)])
    with pytest.raises(rk.NonFiniteError, match="batch 3/3"), np.errstate(over="ignore"):
        _model().fit(x, y, 5, batch_size=4, shuffle=False)  # without the callback: the error


def test_terminate_on_nan_matches_keras_on_scripted_batches() -> None:
    keras = keras_or_skip()
    for cls in (rk.TerminateOnNaN, keras.callbacks.TerminateOnNaN):
        model = SimpleNamespace(stop_training=False)
        cb = cls()
        cb.set_model(model)
        stops = []
        for b, loss in enumerate([1.0, 0.5, float("inf"), float("nan")]):
            model.stop_training = False
            cb.on_train_batch_end(b, {"loss": loss})
            stops.append(model.stop_training)
        assert stops == [False, False, True, True]


def test_lambda_callback_hooks_in_order_and_batch_stop() -> None:
    x, y = _data()
    calls: list[tuple[Any, ...]] = []
    m = _model()
    cb = rk.LambdaCallback(
        on_train_begin=lambda logs: calls.append(("train_begin",)),
        on_epoch_begin=lambda e, logs: calls.append(("epoch_begin", e)),
        on_train_batch_begin=lambda b, logs: calls.append(("batch_begin", b)),
        on_train_batch_end=lambda b, logs: calls.append(("batch_end", b, round(logs["loss"], 12))),
        on_epoch_end=lambda e, logs: calls.append(("epoch_end", e, sorted(logs))),
        on_train_end=lambda logs: calls.append(("train_end",)), note="kept")
    assert cb.note == "kept"
    m.fit(x, y, 2, batch_size=6, shuffle=False, callbacks=[cb])
    kinds = [c[0] for c in calls]
    assert kinds == ["train_begin", "epoch_begin", "batch_begin", "batch_end", "batch_begin", "batch_end",
                     "epoch_end", "epoch_begin", "batch_begin", "batch_end", "batch_begin", "batch_end",
                     "epoch_end", "train_end"]
    assert calls[6][2] == ["loss", "mae"]
    # the first batch loss by hand: MSE of the initial Dense on samples 0..5
    w = _model().get_weights()
    pred = x[:6] @ w[0] + w[1]
    assert calls[3][2] == round(float(np.mean((pred - y[:6]) ** 2)), 12)
    # stop_training set in a batch hook ends the epoch after that batch (Keras 3)
    seen: list[int] = []

    def stop(b: int, logs: Any) -> None:
        seen.append(b)
        m.stop_training = True

    hist = m.fit(x, y, 3, batch_size=4, callbacks=[rk.LambdaCallback(on_train_batch_end=stop)])
    assert seen == [0] and hist.epoch == [0]
    with pytest.raises(TypeError, match="on_epoch_end"):
        rk.LambdaCallback(on_epoch_end=3)  # type: ignore[arg-type]


def test_history_has_every_metric_and_the_learning_rate(capsys: pytest.CaptureFixture[str]) -> None:
    x, y = _data()
    m = _model()
    hist = m.fit(x, y, 3, batch_size=6, validation_split=0.25, shuffle=False, verbose=2,
                 callbacks=[rk.ReduceLROnPlateau("val_loss", patience=0, factor=0.5)])
    assert sorted(hist.history) == ["learning_rate", "loss", "mae", "val_loss", "val_mae"]
    assert hist.history["learning_rate"][0] == 0.1
    ev = m.evaluate(x[9:], y[9:], return_dict=True)
    assert isinstance(ev, dict)
    assert hist.history["val_mae"][-1] == pytest.approx(ev["mae"], rel=1e-12)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[0].startswith("Epoch 1/3 - loss: ")
    assert f"val_mae: {hist.history['val_mae'][2]:.4g}" in out[2]
    _model().fit(x, y, 2, verbose=0)
    assert capsys.readouterr().out == ""
