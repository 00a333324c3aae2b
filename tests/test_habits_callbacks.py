"""``rnnkit.callbacks`` (Keras' module name), the callbacks' Keras keywords (``verbose``,
EarlyStopping's ``baseline`` / ``start_from_epoch``, ModelCheckpoint's
``initial_value_threshold`` / ``save_freq``), and ``Dataset(workers=, use_multiprocessing=,
max_queue_size=)``. Keras' own EarlyStopping, driven on the same scripted logs, is the oracle
for the stopping epochs; the printed lines are Keras' formats, filled from the run's history."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

LOSSES = [1.0, 0.9, 0.95, 0.7, 0.72, 0.69, 0.71, 0.73, 0.5, 0.55, 0.56, 0.57, 0.58, 0.59, 0.6]


def test_the_callbacks_module_has_keras_names_for_rnnkit_classes() -> None:
    names = rk.callbacks.__all__
    assert {"EarlyStopping", "ModelCheckpoint", "ReduceLROnPlateau", "CSVLogger", "LearningRateScheduler",
            "TerminateOnNaN", "LambdaCallback", "Callback", "History", "ProgbarLogger"} == set(names)
    for n in names:
        assert getattr(rk.callbacks, n) is getattr(rk.models, n)
    keras = keras_or_skip()
    assert all(hasattr(keras.callbacks, n) for n in names)


def _stop_epoch(cb: Any, values: list[float]) -> tuple[int | None, int]:
    model = SimpleNamespace(stop_training=False, get_weights=lambda: [], set_weights=lambda w: None)
    cb.set_model(model)
    cb.on_train_begin({})
    for epoch, v in enumerate(values):
        cb.on_epoch_end(epoch, {"val_loss": v})
        if model.stop_training:
            return epoch, cb.wait
    return None, cb.wait


@pytest.mark.parametrize("kw", [
    {"patience": 2},
    {"patience": 2, "baseline": 0.6},
    {"patience": 3, "baseline": 0.8, "min_delta": 0.01},
    {"patience": 1, "start_from_epoch": 4},
    {"patience": 2, "baseline": 0.4, "start_from_epoch": 2},
])
def test_early_stopping_baseline_and_start_from_epoch_stop_where_keras_does(kw: dict[str, Any]) -> None:
    keras = keras_or_skip()
    ours = _stop_epoch(rk.EarlyStopping("val_loss", mode="min", **kw), LOSSES)
    theirs = _stop_epoch(keras.callbacks.EarlyStopping("val_loss", mode="min", **kw), LOSSES)
    assert ours == theirs


def test_early_stopping_positional_arguments_mean_what_they_mean_in_keras() -> None:
    keras = keras_or_skip()
    args = ("val_loss", 0.05, 2, 0, "min", 0.7, False, 1)   # monitor, min_delta, patience, ...
    ours, theirs = rk.EarlyStopping(*args), keras.callbacks.EarlyStopping(*args)
    assert (ours.min_delta, ours.patience, ours.baseline, ours.start_from_epoch) == (
        theirs.min_delta, theirs.patience, theirs.baseline, theirs.start_from_epoch)
    assert _stop_epoch(ours, LOSSES) == _stop_epoch(theirs, LOSSES)


def test_early_stopping_baseline_by_hand() -> None:
    # epochs 0-2 improve but none beats the baseline 0.5, so each counts as waiting (wait 1, 2, 3);
    # epoch 3 does not improve (wait 4 >= patience 2): stop there. Without a baseline the
    # improvements reset the count, and epoch 3 only waits once.
    values = [0.9, 0.8, 0.7, 0.75]
    assert _stop_epoch(rk.EarlyStopping("val_loss", patience=2, baseline=0.5), values) == (3, 4)
    assert _stop_epoch(rk.EarlyStopping("val_loss", patience=2), values) == (None, 1)
    for bad in ({"baseline": "0.5"}, {"baseline": float("nan")}, {"start_from_epoch": -1},
                {"verbose": "loud"}):
        with pytest.raises(rk.InvalidParameterError):
            rk.EarlyStopping(**bad)


def _model() -> rk.Sequential:
    m = rk.Sequential([rk.Dense(1, seed=0)], input_shape=(None, 3))
    m.compile(rk.SGD(0.05), "mse")
    return m


def _data() -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(1)
    x = r.normal(size=(16, 3)).astype(np.float32)
    return x, (x @ np.array([[1.0], [-2.0], [0.5]], np.float32))


def test_checkpoint_and_scheduler_verbose_print_keras_lines(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    x, y = _data()
    path = str(tmp_path / "best.safetensors")
    ck = rk.callbacks.ModelCheckpoint(path, monitor="loss", save_best_only=True, verbose=1)
    lrs = rk.callbacks.LearningRateScheduler(lambda e, lr: 0.05 if e < 2 else 2.0, verbose=1)
    h = _model().fit(x, y, 5, batch_size=4, shuffle=False, callbacks=[lrs, ck])
    want, best = [], None
    for e, loss in enumerate(h.history["loss"]):
        rate = 0.05 if e < 2 else 2.0
        want.append(f"Epoch {e + 1}: LearningRateScheduler setting learning rate to {rate}.")
        if best is None or loss < best:
            was = "None" if best is None else f"{best:.5f}"
            want.append(f"Epoch {e + 1}: loss improved from {was} to {loss:.5f}, saving model to {path}")
            best = loss
        else:
            want.append(f"Epoch {e + 1}: loss did not improve from {best:.5f}")
    assert capsys.readouterr().out.splitlines() == want
    assert any("did not improve" in w for w in want)   # the rate 2.0 makes the loss worse
    every = rk.callbacks.ModelCheckpoint(str(tmp_path / "e{epoch}.safetensors"), verbose=1)
    _model().fit(x, y, 2, batch_size=8, callbacks=[every])
    assert capsys.readouterr().out.splitlines() == [
        f"Epoch {e}: saving model to {tmp_path / f'e{e}.safetensors'}" for e in (1, 2)]


def test_checkpoint_initial_value_threshold_and_save_freq(tmp_path: Path) -> None:
    x, y = _data()
    never = rk.ModelCheckpoint(str(tmp_path / "m.safetensors"), monitor="loss", save_best_only=True,
                               initial_value_threshold=1e-9)
    h = _model().fit(x, y, 3, batch_size=8, callbacks=[never])
    assert min(h.history["loss"]) > 1e-9 and never.last_saved is None and not list(tmp_path.iterdir())
    some = rk.ModelCheckpoint(str(tmp_path / "m.safetensors"), monitor="loss", save_best_only=True,
                              initial_value_threshold=1e9)
    _model().fit(x, y, 1, batch_size=8, callbacks=[some])
    assert some.last_saved is not None
    with pytest.raises(rk.InvalidParameterError, match="save_freq must be 'epoch'"):
        rk.ModelCheckpoint(str(tmp_path / "m.safetensors"), save_freq=10)
    with pytest.raises(rk.InvalidParameterError, match="initial_value_threshold"):
        rk.ModelCheckpoint(str(tmp_path / "m.safetensors"), initial_value_threshold="low")


def test_early_stopping_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    x, y = _data()
    es = rk.callbacks.EarlyStopping("loss", patience=1, verbose=1, restore_best_weights=True)
    lrs = rk.LearningRateScheduler(lambda e, lr: 0.05 if e < 3 else 2.0)    # diverges from epoch 4
    _model().fit(x, y, 20, batch_size=8, shuffle=False, callbacks=[lrs, es])
    assert es.stopped_epoch >= 3
    assert capsys.readouterr().out.splitlines() == [
        f"Epoch {es.stopped_epoch + 1}: early stopping",
        f"Restoring model weights from the end of the best epoch: {es.best_epoch + 1}."]


# -- Dataset(workers=, use_multiprocessing=, max_queue_size=) -----------------------------------------
class _Batches(rk.data.Dataset):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.x, self.y = _data()
        self.threads: set[int] = set()

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        self.threads.add(threading.get_ident())
        return self.x[4 * i:4 * i + 4], self.y[4 * i:4 * i + 4]


def test_dataset_workers_keywords_set_the_read_ahead() -> None:
    main = threading.get_ident()
    runs = {}
    for kw, fit_kw in [({"workers": 0}, {}), ({"workers": 2, "max_queue_size": 3}, {}),
                       ({"workers": 2}, {"workers": 0}), ({}, {})]:
        ds = _Batches(**kw)
        m = _model()
        m.fit(ds, epochs=2, **fit_kw)
        runs[str((kw, fit_kw))] = (ds.threads, m.get_weights())
    (t0, w0), (t1, w1), (t2, w2), (t3, w3) = runs.values()
    assert t0 == {main} and t2 == {main}            # workers=0: read in the training thread
    assert main not in t1 and main not in t3         # a background thread reads ahead
    for w in (w1, w2, w3):                           # batches in order: bit-identical training
        for a, b in zip(w0, w, strict=True):
            np.testing.assert_array_equal(a, b)
    assert _Batches().prefetch() is None and _Batches(workers=0).prefetch() == 0
    assert _Batches(workers=4).prefetch() == 1 and _Batches(workers=1, max_queue_size=6).prefetch() == 6


def test_dataset_refuses_multiprocessing_and_bad_counts() -> None:
    with pytest.raises(rk.InvalidParameterError, match="use_multiprocessing must be False.*pickled"):
        _Batches(use_multiprocessing=True)
    with pytest.raises(rk.InvalidParameterError, match="workers must be an int >= 0"):
        _Batches(workers=-1)
    with pytest.raises(rk.InvalidParameterError, match="max_queue_size must be an int >= 1"):
        _Batches(max_queue_size=0)
