"""What a fit checkpoint's state must be before a resumed ``fit`` trusts any of it.

:func:`check_state` reads the whole ``fit_state`` (the JSON) and the tensors of a checkpoint
file against the model, its optimizer and the run, and raises FileFormatError naming the first
entry that is not what a fit writes — before anything is restored, so a refused file changes
nothing. Every entry is checked for its type, shape, dtype and range:

- the JSON object has exactly the keys a fit writes (:data:`KEYS`);
- ``epochs_done``: an int (not a bool) in ``[initial_epoch, epochs]``; ``iterations``: an int
  in ``[0, 2**63 - 1]``; ``learning_rate``: a finite number >= 0 (what the optimizer accepts:
  a schedule may set 0); ``stop_training``: a bool;
- ``rng``: a state of the generator numpy makes, in its layout (keys, ints >= 0, names);
- ``history_epochs``: strictly increasing ints in ``[0, epochs_done)``; ``history``:
  ``{key: [floats]}`` (JSON floats: ``1.0``, never ``1`` or ``true``; NaN and Inf are floats a
  fit logs: a validation loss that overflowed, the step TerminateOnNaN stopped), each list no
  longer than ``history_epochs``;
- ``callbacks``: ``{index: {field: JSON scalar or list}}`` with ``n_arrays`` an int >= 0
  whose tensors exist;
- tensor ``weight/{name}`` for every weight of the model: its shape and dtype, finite;
- ``steps``: keyed by weights of the model; for each, exactly the scalar slots the optimizer
  keeps (``{"t": int in [0, iterations]}``: a weight takes at most one step per iteration), and
  exactly the tensor slots ``slot/{name}/{slot}`` the optimizer keeps for that weight (Adam's
  ``m`` and ``v``, SGD's momentum ``m``, RMSprop's ``v``/``a``/``b``), each of the weight's shape
  and dtype, finite, and >= 0 for the running means of squares (:data:`NON_NEGATIVE_SLOTS`); a
  slot tensor of a weight that has no ``steps`` entry is refused too (it could not be restored).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rnnkit._errors import FileFormatError
from rnnkit.models._checks import Trainable as Model

#: slots that hold running means of squares: never negative
NON_NEGATIVE_SLOTS = ("v",)

#: the keys of the ``fit_state`` JSON object
KEYS = frozenset({"epochs_done", "rng", "iterations", "learning_rate", "steps", "history",
                  "history_epochs", "stop_training", "callbacks", "fingerprint"})

#: the largest ``iterations`` (an int64 counter)
MAX_ITERATIONS = 2**63 - 1


def _int(value: Any, lo: int, hi: int | None = None) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= lo
            and (hi is None or value <= hi))


def _like(value: Any, template: Any) -> bool:
    """``value`` has ``template``'s layout: the same keys, ints where it has ints (never bools),
    the same strings."""
    if isinstance(template, dict):
        return (isinstance(value, dict) and set(value) == set(template)
                and all(_like(value[k], v) for k, v in template.items()))
    if isinstance(template, int) and not isinstance(template, bool):
        return _int(value, 0)
    return bool(type(value) is type(template) and value == template)


class _Checker:
    """The checks of one file; :meth:`bad` builds the error naming an entry."""

    def __init__(self, path: Path, tensors: dict[str, np.ndarray], model: Model) -> None:
        self.path, self.tensors, self.model = path, tensors, model
        self.named = model.named_weights()

    def bad(self, field: str, want: str, got: Any) -> FileFormatError:
        return FileFormatError(f"{self.path}: a damaged fit checkpoint: {field} must be {want}, "
                               f"got {got!r:.80}")

    def scalars(self, state: dict[str, Any], epochs: int, initial_epoch: int) -> None:
        if set(state) != KEYS:
            raise self.bad("fit_state", f"an object with the keys {sorted(KEYS)}", sorted(state))
        if not _int(state["epochs_done"], initial_epoch, epochs):
            raise self.bad("epochs_done", f"an int in [{initial_epoch}, {epochs}]", state["epochs_done"])
        if not _int(state["iterations"], 0, MAX_ITERATIONS):
            raise self.bad("iterations", f"an int in [0, {MAX_ITERATIONS}]", state["iterations"])
        lr = state["learning_rate"]
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
            raise self.bad("learning_rate", "a finite number >= 0", lr)
        if not isinstance(state["stop_training"], bool):
            raise self.bad("stop_training", "true or false", state["stop_training"])
        fresh = np.random.default_rng(0).bit_generator
        if not _like(state["rng"], fresh.state):
            raise self.bad("rng", f"a {type(fresh).__name__} state (the layout numpy writes)", state["rng"])
        try:
            fresh.state = state["rng"]
        except (TypeError, ValueError, KeyError, OverflowError) as e:
            raise self.bad("rng", "a numpy generator state", f"{type(e).__name__}: {e}") from None

    def history(self, state: dict[str, Any]) -> None:
        done, eps, hist = state["epochs_done"], state["history_epochs"], state["history"]
        if (not isinstance(eps, list) or not all(_int(e, 0, done - 1) for e in eps)
                or any(a >= b for a, b in zip(eps, eps[1:], strict=False))):
            raise self.bad("history_epochs", f"strictly increasing ints in [0, {done})", eps)
        if not isinstance(hist, dict):
            raise self.bad("history", "an object {key: [floats]}", hist)
        for key, values in hist.items():
            if not isinstance(values, list) or len(values) > len(eps):
                raise self.bad(f"history[{key!r}]", f"a list of at most {len(eps)} floats", values)
            for x in values:
                if not isinstance(x, float):
                    raise self.bad(f"history[{key!r}]", "a list of floats", x)

    def callbacks(self, state: dict[str, Any]) -> None:
        cbs = state["callbacks"]
        if not isinstance(cbs, dict):
            raise self.bad("callbacks", "an object", cbs)
        for i, st in cbs.items():
            if not isinstance(st, dict) or not all(
                    v is None or isinstance(v, (bool, int, float, str, list)) for v in st.values()):
                raise self.bad(f"callbacks[{i}]", "an object of JSON values", st)
            n_arr = st.get("n_arrays", 0)
            if not _int(n_arr, 0) or any(f"callback/{i}/{k}" not in self.tensors for k in range(n_arr)):
                raise self.bad(f"callbacks[{i}].n_arrays", "an int >= 0 with that many tensors", n_arr)

    def tensor(self, t_name: str, arr: np.ndarray | None, w: np.ndarray) -> None:
        if arr is None:
            raise self.bad(f"tensor {t_name}", "present", None)
        if arr.shape != w.shape or arr.dtype != w.dtype:
            raise self.bad(f"tensor {t_name}", f"of shape {w.shape} and dtype {w.dtype}",
                           f"shape {arr.shape}, dtype {arr.dtype}")
        if not np.isfinite(arr).all():
            raise self.bad(f"tensor {t_name}", "finite numbers", "NaN or Inf")

    def weights(self) -> None:
        for key, (layer, name) in self.named.items():
            self.tensor(f"weight/{key}", self.tensors.get(f"weight/{key}"), layer.weight(name))

    def slots(self, state: dict[str, Any]) -> None:
        steps, iterations = state["steps"], state["iterations"]
        if not isinstance(steps, dict) or any(k not in self.named for k in steps):
            raise self.bad("steps", "an object keyed by the model's weight names",
                           sorted(steps) if isinstance(steps, dict) else steps)
        kept: dict[str, set[str]] = {}
        for t_name in self.tensors:
            if t_name.startswith("slot/"):
                key, _, slot = t_name[len("slot/"):].rpartition("/")
                if key not in steps:
                    raise self.bad(f"tensor {t_name}", "the slot of a weight listed in steps", key)
                kept.setdefault(key, set()).add(slot)
        opt = self.model.optimizer
        for key, scalars in steps.items():
            layer, name = self.named[key]
            w = layer.weight(name)
            want = set(opt._init_state(w))  # the tensor slots this optimizer keeps for w
            if not isinstance(scalars, dict) or set(scalars) != {"t"}:
                raise self.bad(f"steps[{key}]", '{"t": the steps this weight took}', scalars)
            if not _int(scalars["t"], 0, iterations):
                raise self.bad(f"steps[{key}].t", f"an int in [0, iterations = {iterations}]",
                               scalars["t"])
            if kept.get(key, set()) != want:
                raise self.bad(f"the slots of {key}", f"{sorted(want)} ({type(opt).__name__})",
                               sorted(kept.get(key, set())))
            for slot in sorted(want):
                t_name = f"slot/{key}/{slot}"
                arr = self.tensors[t_name]
                self.tensor(t_name, arr, w)
                if slot in NON_NEGATIVE_SLOTS and (arr < 0).any():
                    raise self.bad(f"tensor {t_name}", "numbers >= 0 (a mean of squares)", float(arr.min()))


def check_state(path: Path, state: Any, tensors: dict[str, np.ndarray], model: Model,
                epochs: int, initial_epoch: int = 0) -> None:
    """FileFormatError naming what is wrong (see the module docstring); nothing when sound."""
    c = _Checker(path, tensors, model)
    if not isinstance(state, dict):
        raise c.bad("fit_state", "a JSON object", type(state).__name__)
    c.scalars(state, epochs, initial_epoch)
    c.history(state)
    c.callbacks(state)
    c.weights()
    c.slots(state)
