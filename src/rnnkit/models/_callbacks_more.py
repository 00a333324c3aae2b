"""More training callbacks with Keras 3's semantics: ``ReduceLROnPlateau``, ``CSVLogger``,
``TerminateOnNaN``, ``LambdaCallback`` and ``ProgbarLogger`` (what ``fit(verbose=2)`` prints).

Each class states the rule it follows; the tests drive Keras' own classes and these on the same
scripted sequence of logs and compare what they do.
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from rnnkit._atomic import atomic_write_bytes
from rnnkit._errors import InvalidParameterError, NonFiniteError
from rnnkit._layer import check_bool
from rnnkit._numbers import check_float, check_int
from rnnkit.models._callbacks import Callback, Logs, _monitor_op, check_path, check_writable


class ReduceLROnPlateau(Callback):
    """Multiply the learning rate by ``factor`` when ``monitor`` stops improving (Keras 3).

    At each epoch end, with ``current = logs[monitor]`` (the log gets ``learning_rate``, the rate
    the epoch used, first):

    - in cooldown (``cooldown_counter > 0``): ``cooldown_counter -= 1`` and ``wait = 0``;
    - an improvement (the first value always is; then ``current < best - min_delta`` in "min"
      mode, ``current > best + min_delta`` in "max"): ``best = current``, ``wait = 0``;
    - otherwise, when not in cooldown: ``wait += 1``; once ``wait >= patience`` and
      ``lr > float32(min_lr)``: ``lr = max(lr * factor, min_lr)``, ``cooldown_counter =
      cooldown``, ``wait = 0``.

    ``mode="auto"`` is max for accuracy names, min otherwise. A monitor missing from the logs
    is skipped (Keras warns; so does this, once per fit). ``factor`` must be in [0, 1).
    """

    def __init__(self, monitor: str = "val_loss", factor: float = 0.1, patience: int = 10,
                 verbose: int = 0, mode: str = "auto", min_delta: float = 1e-4, cooldown: int = 0,
                 min_lr: float = 0.0) -> None:
        where = "ReduceLROnPlateau"
        self.factor = check_float(factor, "factor", where, lo=0.0)
        if self.factor >= 1.0:
            raise InvalidParameterError(f"{where}: factor must be < 1.0, got {factor!r}")
        self.patience = check_int(patience, "patience", where, lo=0)
        self.cooldown = check_int(cooldown, "cooldown", where, lo=0)
        self.verbose = check_int(verbose, "verbose", where, lo=0)
        self.min_delta = abs(check_float(min_delta, "min_delta", where))
        self.min_lr = check_float(min_lr, "min_lr", where, lo=0.0)
        self.monitor, self.mode = monitor, mode
        self._better = _monitor_op(monitor, mode, where)
        self._sign = 1.0 if self._better(1.0, 0.0) else -1.0
        self.best: float | None = None
        self.wait = 0
        self.cooldown_counter = 0
        self._warned = False

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self.best, self.wait, self.cooldown_counter, self._warned = None, 0, 0, False

    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        opt = self._require_model().optimizer
        if logs is not None:
            logs["learning_rate"] = float(opt.learning_rate)
        if not logs or self.monitor not in logs:
            if not self._warned:
                print(f"ReduceLROnPlateau: {self.monitor!r} is not in the epoch logs "
                      f"{sorted(logs or {})}; the learning rate is left alone", file=sys.stderr)
                self._warned = True
            return
        current = float(logs[self.monitor])
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self.best is None or self._better(current - self._sign * self.min_delta, self.best):
            self.best, self.wait = current, 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                old = float(opt.learning_rate)
                if old > float(np.float32(self.min_lr)):
                    new = max(old * self.factor, self.min_lr)
                    opt.learning_rate = new
                    if self.verbose:
                        print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate to {new}.")
                    self.cooldown_counter, self.wait = self.cooldown, 0

    def get_fit_state(self) -> dict[str, Any]:
        return {"best": self.best, "wait": self.wait, "cooldown_counter": self.cooldown_counter}

    def set_fit_state(self, state: dict[str, Any]) -> None:
        self.best = None if state["best"] is None else float(state["best"])
        self.wait, self.cooldown_counter = int(state["wait"]), int(state["cooldown_counter"])


class CSVLogger(Callback):
    """Write one CSV row per epoch to ``filename``: ``epoch`` (0-based, as Keras) then the log
    keys in sorted order, fixed by the first epoch (plus ``val_`` twins when the first epoch has
    none, written ``NA`` when missing — Keras' layout).

    ``separator``: one character, not ``"``, ``\\r``, ``\\n`` or NUL (those would make rows that
    do not read back). ``append=False`` starts a new file; ``append=True`` adds rows, writing the
    header only when the file is empty. Every row is flushed as written. Resumable: under
    ``fit(checkpoint=DIR)`` the logger records how much of the file belongs to the saved epochs,
    and a resumed fit cuts the file back to that (rows of an epoch whose state was never saved
    go; the cut is an atomic rewrite) and appends from there, so the file ends as an uninterrupted run's.
    """

    def __init__(self, filename: str | os.PathLike[str], separator: str = ",", append: bool = False) -> None:
        self.filename = check_path(filename, "filename", "CSVLogger")
        if not isinstance(separator, str) or len(separator) != 1 or separator in _NOT_SEPARATORS:
            raise InvalidParameterError(f"CSVLogger: separator must be one character other than a quote, "
                                        f"a line break or NUL, got {separator!r}")
        self.sep = separator
        self.append = check_bool(append, "append", "CSVLogger")
        self.keys: list[str] | None = None
        self._file: TextIO | None = None
        self._resumed = False

    def on_train_begin(self, logs: Logs | None = None) -> None:
        check_writable(self.filename, "filename", "CSVLogger", replaced=False)
        self.keys, self._resumed = None, False
        self._close()

    def _open(self) -> TextIO:
        if self._file is None:
            append = self.append or self._resumed
            self._file = open(self.filename, "a" if append else "w", newline="", encoding="utf-8")  # noqa: SIM115
        return self._file

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        logs = logs or {}
        f = self._open()
        if self.keys is None:
            self.keys = sorted(logs)
            if self.keys and not any(k.startswith("val_") for k in self.keys):
                self.keys += [f"val_{k}" for k in self.keys]
            if f.tell() == 0:
                self._row(["epoch", *self.keys])
        self._row([str(epoch), *(_cell(logs.get(k, "NA")) for k in self.keys)])

    def _row(self, cells: list[str]) -> None:
        buf = io.StringIO()
        csv.writer(buf, delimiter=self.sep, lineterminator="\r\n").writerow(cells)
        f = self._open()
        f.write(buf.getvalue())
        f.flush()

    def on_train_end(self, logs: Logs | None = None) -> None:
        self._close()

    def _close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()
        self._file = None

    def get_fit_state(self) -> dict[str, Any]:
        size = self._file.tell() if self._file is not None else (
            os.path.getsize(self.filename) if os.path.exists(self.filename) else 0)
        return {"size": int(size), "keys": self.keys}

    def set_fit_state(self, state: dict[str, Any]) -> None:
        self._close()
        size = int(state["size"])
        if os.path.exists(self.filename) and os.path.getsize(self.filename) > size:
            with open(self.filename, "rb") as f:
                head = f.read(size)
            atomic_write_bytes(self.filename, head)
        self.keys = None if state["keys"] is None else [str(k) for k in state["keys"]]
        self._resumed = True


_NOT_SEPARATORS = ('"', "\r", "\n", "\x00")


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    return repr(float(value)) if isinstance(value, (float, np.floating)) else str(value)


class TerminateOnNaN(Callback):
    """Stop training when a batch's loss is NaN or Inf (Keras 3).

    ``fit`` never applies the step of a non-finite loss; with this callback attached it hands
    the batch (its ``loss``, the epoch's running mean, is then non-finite) to
    ``on_train_batch_end`` instead of raising :class:`~rnnkit.NonFiniteError`, and the epoch
    ends at that batch (Keras stops after the batch too). Then ``model.stop_training`` is set
    and the epoch's logs (holding the NaN) reach ``on_epoch_end`` as Keras' do.
    ``raise_error=True`` raises :class:`~rnnkit.NonFiniteError` naming the batch instead (Keras
    raises RuntimeError). Non-finite values elsewhere (a gradient, a weight) still raise, as
    without the callback.
    """

    def __init__(self, raise_error: bool = False) -> None:
        self.raise_error = check_bool(raise_error, "raise_error", "TerminateOnNaN")
        self.terminated_at: int | None = None

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            if self.raise_error:
                raise NonFiniteError(f"NaN or Inf loss encountered at batch {batch}. Loss value: {loss}. "
                                     f"Terminating training immediately.")
            print(f"Batch {batch}: Invalid loss, terminating training", file=sys.stderr)
            self.terminated_at = batch
            self._require_model().stop_training = True


#: attribute names looked up on any callback by fit and its checkpoints, besides the class's own
_RESERVED = ("model", "get_fit_state", "set_fit_state")


class LambdaCallback(Callback):
    """A callback from plain functions (Keras' signatures): ``on_epoch_begin(epoch, logs)``,
    ``on_epoch_end(epoch, logs)``, ``on_train_begin(logs)``, ``on_train_end(logs)``,
    ``on_train_batch_begin(batch, logs)``, ``on_train_batch_end(batch, logs)``. Hooks left out
    do nothing. Extra keywords become attributes (Keras' ``**kwargs``), except names the
    callback machinery uses (``model``, ``set_model``, ``get_fit_state``, ...: those would replace
    it) and other ``on_*`` names (hooks ``fit`` never calls, such as Keras' ``on_batch_end``
    alias): both raise InvalidParameterError."""

    _HOOKS = ("on_epoch_begin", "on_epoch_end", "on_train_begin", "on_train_end",
              "on_train_batch_begin", "on_train_batch_end")

    def __init__(self, on_epoch_begin: Callable[..., Any] | None = None,
                 on_epoch_end: Callable[..., Any] | None = None,
                 on_train_begin: Callable[..., Any] | None = None,
                 on_train_end: Callable[..., Any] | None = None,
                 on_train_batch_begin: Callable[..., Any] | None = None,
                 on_train_batch_end: Callable[..., Any] | None = None, **kwargs: Any) -> None:
        given = dict(zip(self._HOOKS, (on_epoch_begin, on_epoch_end, on_train_begin, on_train_end,
                                       on_train_batch_begin, on_train_batch_end), strict=True))
        for name, fn in given.items():
            if fn is None:
                continue
            if not callable(fn):
                raise TypeError(f"LambdaCallback: {name} must be callable, got {fn!r}")
            setattr(self, name, fn)
        for key in kwargs:
            if key.startswith("on_"):
                raise InvalidParameterError(
                    f"LambdaCallback: {key} is not a hook fit calls; the hooks are {', '.join(self._HOOKS)}")
            if key in _RESERVED or hasattr(LambdaCallback, key):
                raise InvalidParameterError(
                    f"LambdaCallback: the keyword {key!r} would replace the callback's own {key}; "
                    f"use another name")
        self.__dict__.update(kwargs)

    def on_train_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Called before each optimizer step."""


class ProgbarLogger(Callback):
    """What ``fit(verbose=2)`` prints (Keras' ``verbose=2``): one line per epoch on ``stream``
    (stdout by default), ``Epoch 3/10 - loss: 0.1234 - val_loss: 0.2345 (32 steps)``, every log
    entry with 4 significant digits, then the optimizer steps the epoch took (when it saw any
    batch end). ``verbose=1``
    shows the live progress bar instead; 0 prints nothing.
    ``epochs``: an int >= 1 (the total shown); ``stream``: None or an object with callable
    ``write`` and ``flush`` (a text file), checked here."""

    def __init__(self, epochs: int, stream: TextIO | None = None) -> None:
        epochs = check_int(epochs, "epochs", "ProgbarLogger", lo=1)
        if stream is not None and not all(callable(getattr(stream, m, None)) for m in ("write", "flush")):
            raise TypeError(f"ProgbarLogger: stream must be None or a text stream with write() and flush(), "
                            f"got {type(stream).__name__}")
        self.epochs = int(epochs)
        self.stream = stream
        self.steps = 0

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        self.steps = 0

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        self.steps += 1

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        parts = [f"Epoch {epoch + 1}/{self.epochs}"]
        parts += [f"{k}: {float(v):.4g}" for k, v in (logs or {}).items()]
        n = self.steps
        tail = "" if not n else f" ({n} step{'' if n == 1 else 's'})"   # no batch seen: nothing to count
        print(" - ".join(parts) + tail, file=self.stream if self.stream is not None else sys.stdout,
              flush=True)
