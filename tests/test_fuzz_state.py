"""Fuzzing the training state and the passes: mutated checkpoint state files (the ``fit_state``
of ``fit(checkpoint=)``: its JSON and its tensors), layer constructors with their forward and
backward passes, and the model's ``fit`` / ``evaluate`` / ``predict`` arguments.

Surfaces and profiles as in ``tests/test_fuzz_callers.py`` (shared parts: ``fuzz_common.py``).
A mutated checkpoint must be refused with a typed error before resuming, or resume whole; the
out-of-range mutations (``epochs_done = -3``, a negative Adam ``v``, a slot of the wrong shape)
need the restore-time validation of ``models/_resume.py``, and are a pending check until it
exists.
"""

from __future__ import annotations

import functools
import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import rnnkit as rk  # noqa: E402
from fuzz_common import (  # noqa: E402
    PENDING,
    SW_CHECK,
    TYPED,
    X,
    Y,
    either,
    fuzz_model,
    hostile_array,
    huge_count,
    numeric,
    odd,
    pending,
    run_case,
    surface,
    typed_probe,
    valid,
)
from rnnkit._safetensors import read_safetensors, write_safetensors  # noqa: E402

RESUME_CHECK = "fit_state validation (types, shapes, ranges) in models/_resume.py restore_state"


class _Stop(Exception):
    """Raised by a callback to leave a fit after its first epoch (a checkpoint is then written)."""


def _stop_after_first(epoch: int, logs: Any) -> None:
    if epoch == 1:
        raise _Stop


@functools.cache
def _checkpoint_bytes() -> bytes:
    """A fit checkpoint after 1 of 3 epochs (Adam, EarlyStopping with best weights)."""
    with tempfile.TemporaryDirectory() as d:
        try:
            fuzz_model().fit(X, Y, 3, batch_size=4, seed=0, checkpoint=d,
                         callbacks=[rk.EarlyStopping(monitor="loss", patience=5, restore_best_weights=True),
                                    rk.LambdaCallback(on_epoch_begin=_stop_after_first)])
        except _Stop:
            pass
        return (Path(d) / "fit_state.safetensors").read_bytes()


def _resume(tensors: dict[str, np.ndarray], state: dict[str, Any]) -> Any:
    with tempfile.TemporaryDirectory() as d:
        write_safetensors(Path(d) / "fit_state.safetensors", tensors,
                          {"format": "rnnkit-fit-state", "fit_state": json.dumps(state)})
        m = fuzz_model()
        h = m.fit(X, Y, 3, batch_size=4, seed=0, checkpoint=d,
                  callbacks=[rk.EarlyStopping(monitor="loss", patience=5, restore_best_weights=True),
                             rk.LambdaCallback()])
        return m, h


def _saved() -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.safetensors"
        p.write_bytes(_checkpoint_bytes())
        tensors, meta = read_safetensors(p)
    return {k: np.array(v) for k, v in tensors.items()}, json.loads(meta["fit_state"])


@functools.cache
def resume_validates() -> bool:
    """Whether ``fit(checkpoint=)`` refuses an out-of-range ``fit_state`` before resuming."""
    tensors, state = _saved()
    state["epochs_done"] = -3
    return typed_probe(lambda: _resume(tensors, state))


PENDING[RESUME_CHECK] = resume_validates


def _mutate_state(r: random.Random, state: dict[str, Any], tensors: dict[str, np.ndarray]) -> str:
    """Mutate the saved state in place; returns the class of the mutation."""
    kind = r.random()
    if kind < 0.25:     # values out of range (what needs the restore-time validation)
        key, val = r.choice([("epochs_done", -3), ("epochs_done", 10**9), ("epochs_done", True),
                             ("epochs_done", 1.5), ("iterations", -1), ("learning_rate", -1.0),
                             ("stop_training", "no"), ("history_epochs", [5, 2]), ("history", {"loss": [1]})])
        state[key] = val
        return "range"
    if kind < 0.45:     # tensors: a slot's sign or shape, a weight's value, one gone or extra
        slots = sorted(k for k in tensors if k.startswith("slot/"))
        k = r.choice(slots)
        mut = r.choice(["neg", "shape", "nan_weight", "drop", "extra", "dtype"])
        if mut == "neg":
            tensors[k] = -np.abs(tensors[k]) - 1
            if not k.endswith("/v"):  # a first moment (a running mean of gradients) takes any sign
                return "structure"
        elif mut == "shape":
            tensors[k] = np.zeros(tensors[k].shape[:-1] + (tensors[k].shape[-1] + 1,), tensors[k].dtype)
        elif mut == "nan_weight":
            w = r.choice(sorted(t for t in tensors if t.startswith("weight/")))
            tensors[w] = tensors[w].copy()
            tensors[w].flat[0] = np.nan
            return "structure"
        elif mut == "drop":
            del tensors[r.choice(sorted(tensors))]
            return "structure"
        elif mut == "extra":
            tensors["slot/9.kernel/m"] = np.zeros(3, np.float32)
        else:                   # a wider float: casting it back loses nothing, so either answer is right
            tensors[k] = tensors[k].astype(np.float64)
            return "structure"
        return "range"
    # JSON structure: a leaf replaced, a key dropped or added, anywhere in the tree
    node: Any = state
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        at = r.choice(keys)
        child = node[at]
        if isinstance(child, (dict, list)) and child and r.random() < 0.6:
            node = child
            continue
        act = r.random()
        if act < 0.7:
            node[at] = odd(r)
            if not _jsonable(node[at]):
                node[at] = "x"
        elif act < 0.9 and isinstance(node, dict):
            del node[at]
        elif isinstance(node, dict):
            node["unexpected"] = 1
        break
    return "structure"


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


@surface
def case_checkpoint(r: random.Random) -> str | None:
    """A mutated fit checkpoint: refused with a typed error before resuming, or resumed whole."""
    tensors, state = _saved()
    cls = _mutate_state(r, state, tensors)
    check = "fit_state validation (types, shapes, ranges) in models/_resume.py restore_state"
    try:
        _resume(tensors, state)
    except TYPED:
        raise
    except Exception:
        if pending(check):
            return f"pending:{check}"
        raise
    if cls == "range":        # resumed from an out-of-range state
        if pending(check):
            return f"pending:{check}"
        raise AssertionError("an out-of-range fit_state was resumed without a word")
    return None


LAYERS: list[tuple[Callable[..., rk.Layer], list[tuple[str, Any]], int]] = [
    (rk.Dense, [("units", 3), ("activation", "tanh"), ("use_bias", True), ("seed", 0)], 2),
    (rk.Dense, [("units", 2), ("activation", "softmax"), ("kernel_regularizer", "l2"), ("seed", 0)], 3),
    (rk.LSTM, [("units", 2), ("return_sequences", True), ("go_backwards", False), ("proj_size", 0),
               ("seed", 0)], 3),
    (rk.GRU, [("units", 2), ("reset_after", True), ("return_state", False), ("seed", 0)], 3),
    (rk.SimpleRNN, [("units", 2), ("activation", "relu"), ("dropout", 0.0), ("recurrent_dropout", 0.0),
                    ("seed", 0)], 3),
    (rk.Embedding, [("input_dim", 5), ("output_dim", 2), ("mask_zero", False), ("seed", 0)], 2),
    (rk.Dropout, [("rate", 0.3)], 2),
    (rk.RepeatVector, [("n", 2)], 2),
    (rk.Reverse, [("axis", 1)], 3),
    (rk.Masking, [("mask_value", 0.0)], 3),
    (rk.ActivationLayer, [("activation", "relu")], 2),
]


#: the size arguments of LAYERS: a size a machine could try to allocate (10**9 units, 12 GB of
#: weights) is a request, not an attack, and is left out of the draw (10**30 stays: it overflows)
SIZES = ("units", "input_dim", "output_dim", "n", "proj_size")


def _size_ok(v: Any) -> bool:
    return not huge_count(v)


@surface
def case_layers(r: random.Random) -> str | None:
    make, spec, rank = r.choice(LAYERS)
    kw = {k: either(r, v, 0.8) for k, v in spec}
    for k in SIZES:
        if k in kw and not _size_ok(kw[k]):
            kw[k] = 2
    check = "RepeatVector(n) bound before the allocation"
    if make is rk.RepeatVector and isinstance(kw["n"], int) and kw["n"] > 2**20 and pending(check):
        return f"pending:{check}"
    layer = make(**kw)
    shape = ((None, *([3] * (rank - 1))) if valid(r, 0.8)
             else tuple(either(r, 3) for _ in range(r.randint(0, 4))))
    layer.build(shape)
    training = r.random() < 0.5
    ctx = rk.Ctx.training(0) if training else rk.Ctx.inference()
    x = (np.random.default_rng(r.randint(0, 9)).uniform(-1, 1, (2, *([3] * (rank - 1))))
         if valid(r, 0.6) else hostile_array(r, rank if r.random() < 0.7 else None))
    if make is rk.Embedding and r.random() < 0.8:
        x = np.random.default_rng(0).integers(0, 5, (2, 3))
    y = layer.forward(x, ctx)
    if training:
        layer.backward(np.ones_like(y) if valid(r, 0.7) else hostile_array(r), ctx)
    return None


@surface
def case_passes(r: random.Random) -> None:
    m = fuzz_model()
    x = X if valid(r, 0.6) else hostile_array(r, r.choice([None, 3]))
    y = Y if valid(r, 0.6) else hostile_array(r, r.choice([None, 2]))
    kw: dict[str, Any] = {}
    options: list[tuple[str, Any]] = [("batch_size", 4), ("validation_split", 0.25), ("seed", 0),
                                      ("shuffle", True), ("verbose", 0), ("initial_epoch", 0),
                                      ("sample_weight", np.ones(8)), ("class_weight", None),
                                      ("lengths", np.full(8, 4)), ("validation_data", (X, Y))]
    if not pending("fit(callbacks=) type check of a numpy array"):
        options.append(("callbacks", np.array([rk.History()])))
    for k, v in options:
        if r.random() < 0.3:
            kw[k] = either(r, v, 0.5)
    if not numeric(kw.get("sample_weight")) and pending(SW_CHECK):
        kw["sample_weight"] = None
    op = r.choice(["fit", "evaluate", "predict"])
    if op == "fit":
        epochs = either(r, 1, 0.9)
        m.fit(x, y, 2 if huge_count(epochs) else epochs, **kw)
    elif op == "evaluate":
        sw = either(r, np.ones(8), 0.5)
        if not numeric(sw) and pending(SW_CHECK):
            sw = None
        m.evaluate(x, y, batch_size=kw.get("batch_size"), sample_weight=sw)
    else:
        mask = either(r, np.ones((8, 4), bool), 0.5) if r.random() < 0.4 else None
        if r.random() < 0.2 and not pending("predict(mask=[array, None]) check"):
            mask = [np.ones((8, 4), bool), None]
        m.predict(x, batch_size=kw.get("batch_size"), mask=mask)


SURFACES: dict[str, Callable[[random.Random], Any]] = {
    "checkpoint_state": case_checkpoint, "layers": case_layers, "fit_evaluate_predict": case_passes,
}


def warmup() -> None:
    """Compile the kernels the cases use, and make the checkpoint, before any case is timed."""
    _checkpoint_bytes()
    fuzz_model().fit(X, Y, 1, batch_size=4)
    for check in PENDING:
        pending(check)


@pytest.mark.parametrize("name", sorted(SURFACES))
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_hostile_state_and_passes_get_typed_errors(name: str, seed: int) -> None:
    run_case(SURFACES, name, seed)



@pytest.mark.skipif("not resume_validates()",
                    reason="needs the fit_state validation in models/_resume.py restore_state: types of "
                           "every entry, epochs_done, iterations, learning rate, history and optimizer slots "
                           "(sign, shape, dtype) checked before resuming")
@pytest.mark.parametrize("seed", range(24))
def test_mutated_checkpoint_state_is_refused_before_resuming(seed: int) -> None:
    r = random.Random(seed)
    tensors, state = _saved()
    cls = _mutate_state(r, state, tensors)
    try:
        _resume(tensors, state)
    except TYPED:
        return
    assert cls != "range", "an out-of-range fit_state was resumed without a word"


def test_an_intact_checkpoint_resumes_to_the_uninterrupted_run() -> None:
    """The fixture the checkpoint surface mutates is a real, resumable state."""
    tensors, state = _saved()
    m, h = _resume(tensors, state)
    whole = fuzz_model()
    hw = whole.fit(X, Y, 3, batch_size=4, seed=0,
                   callbacks=[rk.EarlyStopping(monitor="loss", patience=5, restore_best_weights=True)])
    assert h.history["loss"] == hw.history["loss"]
    for a, b in zip(m.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)



def test_no_check_the_fuzz_relies_on_is_missing() -> None:
    """Every check in PENDING exists: a hostile input whose check is missing is counted apart
    as 'pending' instead of failing its case, so a check that disappears again fails here."""
    missing = sorted(check for check in PENDING if pending(check))
    assert not missing, f"checks the fuzz surfaces need are missing: {missing}"
