"""Training callbacks: ``History``, ``EarlyStopping``, ``ModelCheckpoint``,
``LearningRateScheduler`` (Keras' semantics, stated per class).

A callback sees ``set_model(model)``, then ``on_train_begin(logs)``, per epoch
``on_epoch_begin(epoch, logs)`` / ``on_epoch_end(epoch, logs)`` (``epoch`` counts from 0,
``logs`` holds ``loss``, the metrics and their ``val_`` versions), per mini-batch
``on_train_batch_end(batch, logs)``, and ``on_train_end(logs)``. Setting
``model.stop_training = True`` ends training after the current epoch.
"""

from __future__ import annotations

import math
import os
import re
import string
from collections.abc import Callable
from typing import Any

import numpy as np

from rnnkit._atomic import file_write_problem, write_problem
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import check_bool
from rnnkit._numbers import check_float, check_int
from rnnkit.models import _files
from rnnkit.models._checks import Trainable as Model
from rnnkit.models._habits import check_verbose

Logs = dict[str, float]


class Callback:
    """Base class: every hook does nothing."""

    model: Model | None = None

    def set_model(self, model: Model) -> None:
        self.model = model

    def on_train_begin(self, logs: Logs | None = None) -> None:
        """Called once before the first epoch."""

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        """Called before each epoch (``epoch`` counts from 0)."""

    def on_train_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Called before each optimizer step."""

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """Called after each optimizer step. ``logs`` (Keras 3's): ``loss`` and each metric as
        the running mean over the epoch so far (each batch's pre-update value weighted by its
        samples), Python floats; after the epoch's last batch they equal the epoch's logs."""

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        """Called after each epoch with the epoch's logs."""

    def on_train_end(self, logs: Logs | None = None) -> None:
        """Called once after the last epoch."""

    def _require_model(self) -> Model:
        if self.model is None:
            raise InvalidInputError(f"{type(self).__name__}: not attached to a model (set_model)")
        return self.model


class History(Callback):
    """Records every epoch's logs: ``history.history = {"loss": [...], "val_loss": [...], ...}``
    and ``history.epoch = [0, 1, ...]``. ``fit`` returns it (and sets ``model.history``)."""

    def __init__(self) -> None:
        self.history: dict[str, list[float]] = {}
        self.epoch: list[int] = []

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self.history = {}
        self.epoch = []

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(float(v))

    def __repr__(self) -> str:
        return f"History(epochs={len(self.epoch)}, keys={list(self.history)})"


def _monitor_op(monitor: str, mode: str, where: str) -> Callable[[float, float], bool]:
    """``better(current, best)``: "min", "max", or "auto" (max for accuracy-like names)."""
    if not isinstance(monitor, str) or not monitor:
        raise TypeError(f"{where}: monitor must be a log key such as 'val_loss' (a non-empty str), "
                        f"got {monitor!r}")
    if not isinstance(mode, str) or mode not in ("auto", "min", "max"):
        raise InvalidParameterError(f"{where}: mode must be 'auto', 'min' or 'max', got {mode!r}")
    if mode == "auto":
        base = monitor[4:] if monitor.startswith("val_") else monitor
        mode = "max" if base in ("accuracy", "acc") or base.endswith("accuracy") else "min"
    if mode == "max":
        return lambda cur, best: cur > best
    return lambda cur, best: cur < best


def _monitored(logs: Logs | None, monitor: str, where: str) -> float:
    if not logs or monitor not in logs:
        raise InvalidInputError(
            f"{where}: monitor {monitor!r} is not in the epoch logs; available: "
            f"{sorted(logs or {})} (val_ entries need validation_data or validation_split)"
        )
    return float(logs[monitor])


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved for ``patience`` epochs.

    An epoch improves when ``current < best - min_delta`` ("min" mode) or
    ``current > best + min_delta`` ("max"); ``mode="auto"`` picks max for accuracy names,
    min otherwise. After ``patience`` epochs without improvement, ``model.stop_training`` is
    set. With ``restore_best_weights=True`` the weights of the best epoch are put back when
    training ends (whether it stopped early or ran out of epochs). ``stopped_epoch`` and
    ``best_epoch`` (0-based) record what happened. A monitor missing from the logs raises
    :class:`InvalidInputError` listing the available keys.

    Keras' other keywords: ``verbose=1`` prints ``Epoch 7: early stopping`` (and, restoring,
    ``Restoring model weights from the end of the best epoch: 5.``, epochs 1-based);
    ``baseline``: an improvement resets the patience count only when it is also better than
    ``baseline``, else counts as a waiting epoch (training stops at the first epoch without an
    improvement once ``patience`` epochs have passed without beating it);
    ``start_from_epoch``: epochs before it (0-based) are not watched at all.

    The arguments come in Keras' order (``monitor, min_delta, patience, verbose, mode,
    baseline, restore_best_weights, start_from_epoch``), so a positional call means what it
    means in Keras.
    """

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0.0, patience: int = 0,
                 verbose: int = 0, mode: str = "auto", baseline: float | None = None,
                 restore_best_weights: bool = False, start_from_epoch: int = 0) -> None:
        patience = check_int(patience, "patience", "EarlyStopping", lo=0)
        min_delta = check_float(min_delta, "min_delta", "EarlyStopping")
        if baseline is not None:
            baseline = check_float(baseline, "baseline", "EarlyStopping")
        start_from_epoch = check_int(start_from_epoch, "start_from_epoch", "EarlyStopping", lo=0)
        self.verbose = check_verbose(verbose, "EarlyStopping")
        self.baseline = None if baseline is None else float(baseline)
        self.start_from_epoch = int(start_from_epoch)
        self.monitor = monitor
        self.patience = int(patience)
        self.min_delta = abs(float(min_delta))
        self.restore_best_weights = check_bool(restore_best_weights, "restore_best_weights",
                                               "EarlyStopping")
        self.mode = mode
        self._better = _monitor_op(monitor, mode, "EarlyStopping")
        self._sign = 1.0 if self._better(1.0, 0.0) else -1.0  # +1: max mode
        self.best: float = math.nan
        self.best_epoch = -1
        self.stopped_epoch = -1
        self.wait = 0
        self.best_weights: list[np.ndarray] | None = None

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self.best = -math.inf if self._sign > 0 else math.inf
        self.best_epoch, self.stopped_epoch, self.wait = -1, -1, 0
        self.best_weights = None

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        if epoch < self.start_from_epoch:
            return
        cur = _monitored(logs, self.monitor, "EarlyStopping")
        if self._better(cur - self._sign * self.min_delta, self.best):
            self.best, self.best_epoch = cur, epoch
            if self.restore_best_weights:
                self.best_weights = self._require_model().get_weights()
            beats = self.baseline is None or self._better(cur - self._sign * self.min_delta, self.baseline)
            self.wait = 0 if beats else self.wait + 1
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = epoch
            self._require_model().stop_training = True

    def on_train_end(self, logs: Logs | None = None) -> None:
        if self.verbose and self.stopped_epoch >= 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping", flush=True)
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose:
                print(f"Restoring model weights from the end of the best epoch: {self.best_epoch + 1}.",
                      flush=True)
            self._require_model().set_weights(self.best_weights)

    def get_fit_state(self) -> dict[str, Any]:
        """What a resumed ``fit(checkpoint=...)`` needs (JSON, plus ``arrays``)."""
        return {"best": self.best, "best_epoch": self.best_epoch, "stopped_epoch": self.stopped_epoch,
                "wait": self.wait, "arrays": list(self.best_weights or []),
                "has_best_weights": self.best_weights is not None}

    def set_fit_state(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch = float(state["best"]), int(state["best_epoch"])
        self.stopped_epoch, self.wait = int(state["stopped_epoch"]), int(state["wait"])
        self.best_weights = list(state["arrays"]) if state["has_best_weights"] else None


def check_path(path: Any, arg: str, where: str) -> str:
    """``path`` (a str or ``os.PathLike`` of a str) as a str: non-empty, without NUL bytes;
    TypeError / InvalidParameterError naming ``arg`` otherwise."""
    p = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(p, str):
        raise TypeError(f"{where}: {arg} must be a str or path, got {path!r}")
    if not p or "\x00" in p:
        raise InvalidParameterError(f"{where}: {arg} must be a non-empty path without NUL bytes, got {p!r}")
    return p


def check_writable(path: str, arg: str, where: str, *, replaced: bool) -> None:
    """InvalidParameterError naming ``where``, ``arg`` and ``path`` unless this process can write
    there: the directory exists and a file can be created in it (tried: a temporary file is
    created and removed, since ``os.access`` says yes to root where the write fails), ``path`` is
    not a directory, and (unless the file is ``replaced`` by a new one, as an atomic save does)
    an existing file opens for appending.
    Callbacks call it in ``on_train_begin``, so a bad path stops ``fit`` before the first epoch.
    A directory holding ``{field}`` templates is checked when the name is known, at the save."""
    directory = os.path.dirname(os.path.abspath(path))
    if "{" in os.path.dirname(path):
        return
    problem = (f"directory {directory} does not exist" if not os.path.isdir(directory)
               else "it is a directory" if os.path.isdir(path)
               else write_problem(directory) if replaced
               else file_write_problem(path) if os.path.exists(path)
               else write_problem(directory))
    if problem is not None:
        raise InvalidParameterError(f"{where}: cannot write {arg} {path!r}: {problem}; expected a path "
                                    f"this process can write (checked when fit starts)")


def check_path_template(path: Any, arg: str, where: str) -> str:
    """:func:`check_path`, and ``path`` must be a ``str.format`` template whose fields are named
    (``{epoch}``, a log key): a malformed one (``"{"``, ``"{0}"``, ``"{epoch:zz}"``) is refused
    here, not at the first epoch's end. Whether a named log key exists is known only then."""
    p = check_path(path, arg, where)
    try:
        roots = {re.match(r"[^.\[]*", f).group() for _, f, _, _ in string.Formatter().parse(p)  # type: ignore[union-attr]
                 if f is not None}
        if "" in roots or any(r.isdigit() for r in roots):
            raise ValueError("positional fields ({} or {0}) have nothing to fill them")
        p.format(**{r: 1 if r == "epoch" else 0.0 for r in roots})   # a trial: the logs hold numbers
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as e:
        raise InvalidParameterError(f"{where}: {arg} {p!r} is not a usable template: {e}; fields are "
                                    f"named, e.g. {{epoch:03d}} or {{val_loss:.4f}}") from None
    return p


class ModelCheckpoint(Callback):
    """Save the model after every epoch (``save_best_only=False``) or when ``monitor`` improves.

    ``filepath`` may hold ``str.format`` fields: ``{epoch}`` (1-based, as Keras) and any log key,
    e.g. ``"ckpt-{epoch:03d}-{val_loss:.4f}.safetensors"``. ``save_weights_only=True`` (default)
    writes :func:`rnnkit.io.save_weights`, else :func:`rnnkit.io.save_model`. Writes are atomic
    (the io functions write a temporary file, then rename). ``mode`` as in EarlyStopping.
    ``last_saved`` holds the path written last.

    Keras' other keywords: ``verbose=1`` prints Keras' line at each epoch end (``Epoch 3:
    val_loss improved from 0.50000 to 0.40000, saving model to PATH`` — ``from None`` the first
    time —, ``Epoch 3: val_loss did not improve from 0.40000``, or without ``save_best_only``
    ``Epoch 3: saving model to PATH``); ``initial_value_threshold``: with
    ``save_best_only``, the value to beat before the first save; ``save_freq="epoch"`` only
    (saving every N batches is refused: rnnkit saves at epoch ends).
    """

    def __init__(self, filepath: str, monitor: str = "val_loss", save_best_only: bool = False,
                 save_weights_only: bool = True, mode: str = "auto", *, verbose: int = 0,
                 save_freq: str = "epoch", initial_value_threshold: float | None = None) -> None:
        self.filepath = check_path_template(filepath, "filepath", "ModelCheckpoint")
        self.verbose = check_verbose(verbose, "ModelCheckpoint")
        if save_freq != "epoch":
            raise InvalidParameterError(f"ModelCheckpoint: save_freq must be 'epoch' (rnnkit saves at epoch "
                                        f"ends; Keras' save_freq=N batches is not offered), got "
                                        f"{save_freq!r}")
        t = initial_value_threshold
        self.initial_value_threshold = (None if t is None
                                        else check_float(t, "initial_value_threshold", "ModelCheckpoint"))
        self.monitor = monitor
        self.save_best_only = check_bool(save_best_only, "save_best_only", "ModelCheckpoint")
        self.save_weights_only = check_bool(save_weights_only, "save_weights_only", "ModelCheckpoint")
        self._better = _monitor_op(monitor, mode, "ModelCheckpoint")
        self.best: float | None = None
        self.last_saved: str | None = None

    def on_train_begin(self, logs: Logs | None = None) -> None:
        check_writable(self.filepath, "filepath", "ModelCheckpoint", replaced=True)
        self.best = self.initial_value_threshold

    def get_fit_state(self) -> dict[str, Any]:
        return {"best": self.best, "last_saved": self.last_saved}

    def set_fit_state(self, state: dict[str, Any]) -> None:
        self.best = None if state["best"] is None else float(state["best"])
        self.last_saved = state["last_saved"]

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        said = ""
        if self.save_best_only:
            cur = _monitored(logs, self.monitor, "ModelCheckpoint")
            if self.best is not None and not self._better(cur, self.best):
                if self.verbose:
                    print(f"Epoch {epoch + 1}: {self.monitor} did not improve from {self.best:.5f}",
                          flush=True)
                return
            was = "None" if self.best is None else f"{self.best:.5f}"
            said = f"{self.monitor} improved from {was} to {cur:.5f}, "
            self.best = cur
        try:
            path = self.filepath.format(epoch=epoch + 1, **(logs or {}))
        except (KeyError, IndexError, ValueError) as e:
            raise InvalidParameterError(
                f"ModelCheckpoint: cannot fill {self.filepath!r} from epoch and logs "
                f"{sorted(logs or {})}: {e}"
            ) from None
        model = self._require_model()
        if self.verbose:
            print(f"Epoch {epoch + 1}: {said}saving model to {path}", flush=True)
        if self.save_weights_only:
            _files.save_weights(model, path)
        else:
            _files.save_model(model, path)
        self.last_saved = path


class LearningRateScheduler(Callback):
    """Set ``optimizer.learning_rate = schedule(epoch, lr)`` at the start of each epoch
    (``epoch`` 0-based, ``lr`` the current rate); the rate used is logged as ``learning_rate``.
    ``verbose=1`` prints ``Epoch 3: LearningRateScheduler setting learning rate to 0.01.``
    (Keras' line, epochs 1-based)."""

    def __init__(self, schedule: Callable[[int, float], float], verbose: int = 0) -> None:
        if not callable(schedule):
            raise InvalidParameterError(f"LearningRateScheduler: schedule must be callable, got {schedule!r}")
        self.schedule = schedule
        self.verbose = check_verbose(verbose, "LearningRateScheduler")

    def _optimizer(self) -> Any:
        opt = getattr(self._require_model(), "optimizer", None)
        if opt is None:
            raise InvalidInputError("LearningRateScheduler: the model is not compiled")
        return opt

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        opt = self._optimizer()
        lr = self.schedule(epoch, float(opt.learning_rate))
        lr = check_float(lr, "the learning rate", f"LearningRateScheduler: schedule({epoch}, lr)")
        opt.learning_rate = float(lr)
        if self.verbose:
            print(f"Epoch {epoch + 1}: LearningRateScheduler setting learning rate to {float(lr)}.",
                  flush=True)

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        if logs is not None:
            logs["learning_rate"] = float(self._optimizer().learning_rate)


class CallbackList:
    """Dispatch every hook to each callback in order (``fit`` puts the History last, so it
    records what the other callbacks added to the logs, e.g. ``learning_rate``)."""

    def __init__(self, callbacks: list[Callback], model: Model) -> None:
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise InvalidParameterError(
                    f"fit: callbacks must be Callback instances, got {type(cb).__name__}"
                )
            cb.set_model(model)
        self.callbacks = callbacks

    def call(self, hook: str, *args: Any) -> None:
        """Call hook ``hook`` (one of :data:`HOOKS`) of each callback in order."""
        if hook not in HOOKS:
            raise InvalidParameterError(f"CallbackList: {hook!r} is not a callback hook; the hooks: "
                                        f"{list(HOOKS)}")
        for cb in self.callbacks:
            getattr(cb, hook)(*args)

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self.call("on_train_begin", logs)

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        self.call("on_epoch_begin", epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        self.call("on_train_batch_begin", batch, logs)

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        self.call("on_train_batch_end", batch, logs)

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        self.call("on_epoch_end", epoch, logs)

    def on_train_end(self, logs: Logs | None = None) -> None:
        self.call("on_train_end", logs)


#: the hooks a CallbackList dispatches, in the order a fit calls them first
HOOKS = ("on_train_begin", "on_epoch_begin", "on_train_batch_begin", "on_train_batch_end", "on_epoch_end",
         "on_train_end")
