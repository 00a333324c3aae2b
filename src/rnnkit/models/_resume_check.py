"""What a fit checkpoint's state must be before a resumed ``fit`` trusts any of it.

:func:`check_state` reads the whole ``fit_state`` (the JSON) and the tensors of a checkpoint
file against the model and the run, and raises FileFormatError naming the first field that is
not what a fit writes — before anything is restored, so a refused file changes nothing:

- ``epochs_done``: an int (not a bool) in ``[0, epochs]``; ``iterations``: an int >= 0;
  ``learning_rate``: a finite number >= 0; ``stop_training``: a bool;
- ``rng``: a state numpy's generator accepts;
- ``history``: ``{key: [finite numbers or NaN/Inf as a fit logs them]}``, ``history_epochs``
  ints; ``callbacks``: ``{index: {field: JSON scalar or list}}`` with ``n_arrays`` an int >= 0
  whose tensors exist;
- ``steps``: for weights of the model only, ``{slot: int >= 0}``; tensor ``weight/{name}`` for
  every weight, of its shape, finite; tensor ``slot/{name}/{slot}`` of the weight's shape,
  finite, and >= 0 for second-moment slots (Adam's / RMSprop's ``v``).
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


def _int(value: Any, lo: int, hi: int | None = None) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= lo
            and (hi is None or value <= hi))


def check_state(path: Path, state: Any, tensors: dict[str, np.ndarray], model: Model,
                epochs: int) -> None:
    """FileFormatError naming what is wrong (see the module docstring); nothing when sound."""

    def bad(field: str, want: str, got: Any) -> FileFormatError:
        return FileFormatError(f"{path}: a damaged fit checkpoint: {field} must be {want}, got {got!r:.80}")

    if not isinstance(state, dict):
        raise bad("fit_state", "a JSON object", type(state).__name__)
    if not _int(state.get("epochs_done"), 0, epochs):
        raise bad("epochs_done", f"an int in [0, {epochs}]", state.get("epochs_done"))
    if not _int(state.get("iterations"), 0):
        raise bad("iterations", "an int >= 0", state.get("iterations"))
    lr = state.get("learning_rate")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
        raise bad("learning_rate", "a finite number >= 0", lr)
    if not isinstance(state.get("stop_training"), bool):
        raise bad("stop_training", "true or false", state.get("stop_training"))
    try:
        np.random.default_rng(0).bit_generator.state = state.get("rng")  # type: ignore[assignment]
    except (TypeError, ValueError, KeyError) as e:
        raise bad("rng", "a numpy generator state", f"{type(e).__name__}: {e}") from None
    hist, eps = state.get("history"), state.get("history_epochs")
    if not isinstance(hist, dict) or not all(isinstance(v, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) for v in hist.values()):
        raise bad("history", "{key: [numbers]}", hist)
    if not isinstance(eps, list) or not all(_int(e, 0) for e in eps):
        raise bad("history_epochs", "a list of ints >= 0", eps)
    cbs = state.get("callbacks")
    if not isinstance(cbs, dict):
        raise bad("callbacks", "an object", cbs)
    for i, st in cbs.items():
        if not isinstance(st, dict) or not all(v is None or isinstance(v, (bool, int, float, str, list))
                                               for v in st.values()):
            raise bad(f"callbacks[{i}]", "an object of JSON values", st)
        n_arr = st.get("n_arrays", 0)
        if not _int(n_arr, 0) or any(f"callback/{i}/{k}" not in tensors for k in range(n_arr)):
            raise bad(f"callbacks[{i}].n_arrays", "an int >= 0 with that many tensors", n_arr)
    named = model.named_weights()
    for key, (layer, name) in named.items():
        w = layer.weight(name)
        t = tensors.get(f"weight/{key}")
        if t is None or t.shape != w.shape or not np.isfinite(t).all():
            raise bad(f"tensor weight/{key}", f"finite numbers of shape {w.shape}",
                      None if t is None else f"shape {t.shape}")
    steps = state.get("steps")
    if not isinstance(steps, dict) or any(k not in named for k in steps):
        raise bad("steps", "an object keyed by the model's weight names", steps)
    for key, slots in steps.items():
        if not isinstance(slots, dict) or not all(_int(v, 0) for v in slots.values()):
            raise bad(f"steps[{key}]", "{slot: int >= 0}", slots)
    for t_name, arr in tensors.items():
        if not t_name.startswith("slot/"):
            continue
        key, _, slot = t_name[len("slot/"):].rpartition("/")
        if key not in named:
            raise bad(f"tensor {t_name}", "the slot of one of the model's weights", key)
        layer, name = named[key]
        shape = layer.weight(name).shape
        if arr.shape != shape or not np.isfinite(arr).all():
            raise bad(f"tensor {t_name}", f"finite numbers of shape {shape}", f"shape {arr.shape}")
        if slot in NON_NEGATIVE_SLOTS and (arr < 0).any():
            raise bad(f"tensor {t_name}", "numbers >= 0 (a mean of squares)", float(arr.min()))
