"""``fit(..., checkpoint=DIR)``: training that survives being killed.

After every completed epoch ``fit`` writes ONE file, ``DIR/fit_state.safetensors``, atomically
(:mod:`rnnkit._atomic`; a kill leaves the previous epoch's file whole). It holds:

- tensors ``weight/{name}``: every weight of the model (``named_weights()`` names);
- tensors ``slot/{name}/{slot}``: every optimizer slot (Adam's ``m``, ``v``, ...);
- metadata ``fit_state``: JSON with the epochs completed, the fit generator's state (the
  shuffling order and every dropout mask derive from it), the optimizer's ``iterations``,
  learning rate and per-weight step counts, the History so far, the stop flag, the state of
  callbacks that keep one (EarlyStopping, ModelCheckpoint), and a fingerprint of the run
  (weight names and shapes, optimizer, loss, epochs, batch size, shuffle, seed, a SHA-256 of
  the data).

A later ``fit`` with the same ``checkpoint`` and the same run checks all of it
(:mod:`rnnkit.models._resume_check`: types, shapes, dtypes, ranges, the optimizer's slots; a
damaged or tampered file is refused with FileFormatError naming the field, before anything
changes), restores it and continues
with the next epoch, so it ends bit-identical to a run that was never interrupted. A file from
a different run (another model, data, seed, ...) is refused with InvalidParameterError naming
what differs; a run that already completed returns its History without training again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rnnkit import losses, optimizers
from rnnkit._errors import FileFormatError, InvalidParameterError
from rnnkit._limits import parse_json
from rnnkit._safetensors import read_safetensors, write_safetensors
from rnnkit.models._checks import Trainable as Model
from rnnkit.models._resume_check import check_state

if TYPE_CHECKING:
    from rnnkit.models._callbacks import Callback, History

STATE_FILE = "fit_state.safetensors"
_FORMAT = "rnnkit-fit-state"


def _digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a).reshape(np.shape(a))   # (ascontiguousarray makes 0-d 1-d)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def fingerprint(model: Model, xs: list[np.ndarray], ys: list[np.ndarray],
                run: dict[str, Any]) -> dict[str, Any]:
    """What must be equal for a checkpoint to continue this run."""
    return {
        "weights": {k: list(layer.weight(n).shape) for k, (layer, n) in model.named_weights().items()},
        "optimizer": optimizers.serialize(model.optimizer)["class_name"],
        "loss": losses.serialize(model.loss),
        "data": _digest([*xs, *ys]),
        **run,
    }


def _directory(checkpoint: Any) -> Path:
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(f"fit: checkpoint must be a directory path (str or PathLike), got {checkpoint!r}")
    d = Path(checkpoint)
    if d.exists() and not d.is_dir():
        raise InvalidParameterError(f"fit: checkpoint {d} exists and is not a directory")
    d.mkdir(parents=True, exist_ok=True)
    return d


def save_state(checkpoint: Any, model: Model, rng: np.random.Generator, epochs_done: int,
               history: History, callbacks: list[Callback], fp: dict[str, Any]) -> None:
    """Write the state after ``epochs_done`` completed epochs (atomic)."""
    d = _directory(checkpoint)
    opt = model.optimizer
    tensors: dict[str, np.ndarray] = {}
    steps: dict[str, dict[str, Any]] = {}
    for key, (layer, name) in model.named_weights().items():
        tensors[f"weight/{key}"] = np.asarray(layer.weight(name))
        st = opt._state.get((layer, name))
        if st is None:
            continue
        steps[key] = {}
        for slot, v in st.items():
            if isinstance(v, np.ndarray):
                tensors[f"slot/{key}/{slot}"] = v
            else:
                steps[key][slot] = v
    cb_states = {str(i): cb.get_fit_state() for i, cb in enumerate(callbacks)
                 if hasattr(cb, "get_fit_state")}
    for i, st in list(cb_states.items()):
        for wk, arr in enumerate(st.pop("arrays", None) or []):
            tensors[f"callback/{i}/{wk}"] = np.asarray(arr)
            st["n_arrays"] = wk + 1
    state = {"epochs_done": epochs_done, "rng": rng.bit_generator.state, "iterations": opt.iterations,
             "learning_rate": opt.learning_rate, "steps": steps, "history": history.history,
             "history_epochs": history.epoch, "stop_training": bool(model.stop_training),
             "callbacks": cb_states, "fingerprint": fp}
    write_safetensors(d / STATE_FILE, tensors, {"format": _FORMAT, "fit_state": json.dumps(state)})


def restore_state(checkpoint: Any, model: Model, rng: np.random.Generator, history: History,
                  callbacks: list[Callback], fp: dict[str, Any]) -> int | None:
    """Restore a saved state into the model, its optimizer, ``rng``, ``history`` and the
    callbacks; returns the number of epochs already completed (None: nothing to resume)."""
    path = _directory(checkpoint) / STATE_FILE
    if not path.exists():
        return None
    tensors, meta = read_safetensors(path)
    if meta.get("format") != _FORMAT or "fit_state" not in meta:
        raise FileFormatError(f"{path}: not a fit checkpoint (metadata format {meta.get('format')!r})")
    state = parse_json(meta["fit_state"], str(path))
    saved_fp = state.get("fingerprint") if isinstance(state, dict) else None
    if not isinstance(saved_fp, dict):
        raise FileFormatError(f"{path}: a damaged fit checkpoint: fingerprint must be an object, got "
                              f"{saved_fp!r:.80}")
    differ = sorted(k for k in set(fp) | set(saved_fp) if fp.get(k) != saved_fp.get(k))
    if differ:
        raise InvalidParameterError(
            f"fit: checkpoint {path} belongs to another run (differs in {differ}); use a new "
            f"checkpoint directory, or delete {path} to start over")
    check_state(path, state, tensors, model, int(fp["epochs"]), int(fp.get("initial_epoch", 0)))
    try:  # the callbacks first: their own checks are the last that can refuse the file
        for i, cb in enumerate(callbacks):
            st = state["callbacks"].get(str(i))
            if st is not None and hasattr(cb, "set_fit_state"):
                st = dict(st)
                st["arrays"] = [np.array(tensors[f"callback/{i}/{k}"]) for k in range(st.pop("n_arrays", 0))]
                cb.set_fit_state(st)
        named = model.named_weights()
        opt = model.optimizer
        model.set_weights([tensors[f"weight/{k}"] for k in named])
        opt._state.clear()
        slots: dict[str, dict[str, Any]] = {key: dict(sc) for key, sc in state["steps"].items()}
        for t, arr in tensors.items():
            if t.startswith("slot/"):
                key, _, slot = t[len("slot/"):].rpartition("/")
                slots[key][slot] = np.array(arr)
        for key, st in slots.items():
            opt._state[named[key]] = st
        opt.iterations = int(state["iterations"])
        opt.learning_rate = float(state["learning_rate"])
        rng.bit_generator.state = state["rng"]
        history.history = {k: [float(v) for v in vs] for k, vs in state["history"].items()}
        history.epoch = [int(e) for e in state["history_epochs"]]
        model.stop_training = bool(state["stop_training"])
        return int(state["epochs_done"])
    except (KeyError, TypeError, ValueError, OverflowError) as e:  # a callback's own checks
        if isinstance(e, InvalidParameterError):
            raise
        raise FileFormatError(f"{path}: a damaged fit checkpoint ({type(e).__name__}: {e})") from None
