"""Fuzzing hostile callers: the data helpers, ``Mask``, the callbacks' constructors, weights set
by hand, mutated checkpoint state files, layer constructors with their passes, and the model's
``fit`` / ``evaluate`` / ``predict`` arguments.

Each *surface* is a function of a seeded ``random.Random`` that draws one case (hostile values
mixed with valid ones), runs it, and checks what it can by value (every sequence in exactly one
batch with its values; refused weights leave the weights as they were; ...). A case passes when
it returns or raises an ``rnnkit.Error`` / ``TypeError``; any other exception is an untyped
error and an ``AssertionError`` a wrong value. ``SURFACES`` is what ``tools/fuzz_supervisor.py``
runs in supervised worker processes (the long profile: ``nice -n 19 python
tools/fuzz_supervisor.py --cases 20000``); here each surface runs ``max_examples`` seeds of the
Hypothesis profile (``ci``: 60; ``RNNKIT_FUZZ=long``: 10000).

A hostile input that still needs a check owned by another module is drawn only once that check
exists (:func:`pending`): until then the case returns a ``"pending:<check>"`` tag instead of
failing, and the supervisor counts those apart.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
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
from rnnkit.io._weights import read_safetensors, write_safetensors  # noqa: E402

TYPED = (rk.Error, TypeError)

#: hostile values for any argument
ODD: list[Any] = [None, "abc", "", "no", "False", -3, -1, 0, 1, 2, 3, 2.5, -0.5, 0.5, math.nan, math.inf,
                  -math.inf, True, False, [], [1, 2], [[1, 2], [3]], {}, {"a": 1}, object(), np.float32(0.5),
                  np.int64(2), np.bool_(True), 10**9, 10**30, 1e40, b"x", "float32", "float16", "int8",
                  "bool", "val_loss", np.array([1.0, 2.0]), np.zeros((2, 3)), np.array(["a"]), (None, 3),
                  "\x00", "{", "{0}", print, lambda *a: None, io.StringIO()]


def odd(r: random.Random) -> Any:
    return r.choice(ODD)


#: the least probability of a valid value in the case being drawn (see :func:`surface`)
_VALID = [0.0]


def surface(fn: Callable[[random.Random], Any]) -> Callable[[random.Random], Any]:
    """A surface whose cases are of four kinds, equally often: every argument valid (the deep
    paths, checked by value), few hostile (3 %, 10 % of the draws) and as many as drawn."""
    @functools.wraps(fn)
    def run(r: random.Random) -> Any:
        _VALID[0] = r.choice([1.0, 0.97, 0.9, 0.0])
        return fn(r)
    return run


def valid(r: random.Random, p: float) -> bool:
    """True with probability ``p`` (at least the case's, :func:`surface`): take the valid value."""
    return r.random() < max(p, _VALID[0])


def either(r: random.Random, valid: Any, p: float = 0.6) -> Any:
    """``valid`` (a value, or a callable making one) with probability ``p`` (at least the case's,
    :func:`surface`), else a hostile value."""
    if r.random() < max(p, _VALID[0]):
        return valid() if callable(valid) and not isinstance(valid, type) else valid
    return odd(r)


def hostile_array(r: random.Random, rank: int | None = None) -> Any:
    """An array of a random rank/shape/dtype holding special values (or a ragged list)."""
    if r.random() < 0.05:
        return [[1.0, 2.0], [3.0]]
    k = r.randint(0, 4) if rank is None else rank
    shape = tuple(r.randint(0, 4) for _ in range(k))
    special = [0.0, 1.0, -1.0, 0.5, 1e30, 1e300, math.nan, math.inf, -math.inf, 4.0]
    vals = np.resize(np.array([r.choice(special) for _ in range(4)]), shape)
    dt = r.choice([np.float32, np.float32, np.float64, np.int64, np.bool_, np.float16, np.complex64, object])
    with np.errstate(all="ignore"):
        return vals.astype(dt)


# -- checks that others own: drawn only once they exist ------------------------------------------
def _typed(call: Callable[[], Any]) -> bool:
    try:
        with np.errstate(all="ignore"):
            call()
    except TYPED:
        return True
    except Exception:  # noqa: BLE001 - the probe asks exactly this
        return False
    return False


def _model() -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(3, seed=0), rk.Dense(2, seed=1)], input_shape=(None, 4, 2))
    m.compile(rk.Adam(0.01), "mse")
    return m


X = np.random.default_rng(0).uniform(-1, 1, (8, 4, 2)).astype(np.float32)
Y = np.random.default_rng(1).uniform(-1, 1, (8, 2)).astype(np.float32)


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
            _model().fit(X, Y, 3, batch_size=4, seed=0, checkpoint=d,
                         callbacks=[rk.EarlyStopping(monitor="loss", patience=5, restore_best_weights=True),
                                    rk.LambdaCallback(on_epoch_begin=_stop_after_first)])
        except _Stop:
            pass
        return (Path(d) / "fit_state.safetensors").read_bytes()


def _resume(tensors: dict[str, np.ndarray], state: dict[str, Any]) -> Any:
    with tempfile.TemporaryDirectory() as d:
        write_safetensors(Path(d) / "fit_state.safetensors", tensors,
                          {"format": "rnnkit-fit-state", "fit_state": json.dumps(state)})
        m = _model()
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
    return _typed(lambda: _resume(tensors, state))


PENDING: dict[str, Callable[[], bool]] = {
    "fit_state validation (types, shapes, ranges) in models/_resume.py restore_state": resume_validates,
    "fit(callbacks=) type check of a numpy array": lambda: _typed(
        lambda: _model().fit(X, Y, 1, callbacks=np.array([rk.History()]))),  # type: ignore[arg-type]
    "sample_weight= type check (fit / evaluate / batches) in models/_weighting.py": lambda: _typed(
        lambda: _model().evaluate(X, Y, sample_weight="float16")),
    "predict(mask=[array, None]) check": lambda: _typed(
        lambda: _model().predict(X, mask=[np.ones((8, 4), bool), None])),
    "Dataset.__len__ check (negative / huge) in models/_fit_batches.py": lambda: _typed(
        lambda: _model().fit(_OddDataset(-1, [(X, Y)]), epochs=1)),
    "RepeatVector(n) bound before the allocation": lambda: _typed(
        lambda: rk.RepeatVector(10**30).forward(np.ones((1, 2), np.float32), rk.Ctx.inference())),
}


SW_CHECK = "sample_weight= type check (fit / evaluate / batches) in models/_weighting.py"


def _numeric(v: Any) -> bool:
    """``v`` an ndarray of real numbers (what a sample weight is), or None."""
    return v is None or (isinstance(v, np.ndarray) and v.dtype.kind in "biuf")


@functools.cache
def pending(check: str) -> bool:
    """True while ``check`` (a key of PENDING) is still missing."""
    return not PENDING[check]()


# -- surfaces --------------------------------------------------------------------------------------
@surface
def case_bucket(r: random.Random) -> None:
    n = r.randint(1, 6)
    feat = r.choice([(), (2,)])
    good = [np.random.default_rng(r.randint(0, 99)).integers(1, 9, (r.randint(0, 5), *feat)).astype(
        r.choice(["int64", "float64", "float32", "int32"])) for _ in range(n)]
    seqs = either(r, good, 0.8)
    kw: dict[str, Any] = {}
    for key, valid in (("targets", lambda: np.arange(n, dtype=float)), ("bucket_width", r.randint(1, 4)),
                       ("shuffle", r.random() < 0.5), ("seed", r.randint(0, 9)),
                       ("pad_value", r.choice([0, -1, 7])),
                       ("dtype", r.choice([None, "float32", "int64", "float64"]))):
        if r.random() < 0.5:
            kw[key] = either(r, valid)
    ds = rk.data.bucket_by_length(seqs, either(r, r.randint(1, 4), 0.8), **kw)
    seen: list[int] = []
    for b in range(len(ds)):
        item = ds[b]
        x = item[0] if isinstance(item, tuple) else item
        idx = ds.indices(b).tolist()
        lens = ds.lengths(b)
        assert ds.mask(b).ends(x.shape[1]).tolist() == lens.tolist()
        for row, i in enumerate(idx):
            s = np.asarray(seqs[i])
            assert np.array_equal(x[row, :lens[row]], s.astype(x.dtype)), (i, x[row], s)
            assert np.all(x[row, lens[row]:] == ds.pad_value)
        seen += idx
    assert sorted(seen) == list(range(len(seqs)))
    ds.on_epoch_end()
    for bad in (len(ds), -len(ds) - 1, 1.5, None, "0"):
        try:
            ds[bad]  # type: ignore[index]
            raise AssertionError(f"batch {bad!r} of {len(ds)} was given")
        except TYPED:
            pass


@surface
def case_windows(r: random.Random) -> None:
    n = r.randint(0, 30)
    shape = (n,) if r.random() < 0.5 else (n, r.randint(1, 3))
    good = np.random.default_rng(r.randint(0, 99)).standard_normal(shape) * r.choice([1.0, 1e30, 1e300])
    series = either(r, good, 0.8)
    kw: dict[str, Any] = {}
    for key, valid in (("horizon", r.randint(0, 3)), ("batch_size", r.randint(1, 8)),
                       ("shuffle", r.random() < 0.5), ("seed", r.randint(0, 9)), ("targets", None),
                       ("dtype", r.choice(["float32", "float64"]))):
        if r.random() < 0.5:
            kw[key] = either(r, valid)
    ds = rk.data.windows(series, either(r, r.randint(1, 6), 0.8), **kw)
    s2 = np.asarray(series)
    s2 = s2[:, None] if s2.ndim == 1 else s2
    for b in range(len(ds)):
        x, y = ds[b]
        starts = ds.starts(b)
        if x.dtype == np.float64:
            for row, s0 in enumerate(starts.tolist()):
                assert np.array_equal(x[row], s2[s0:s0 + ds.window])
                assert np.array_equal(y[row], s2[s0 + ds.window - 1 + ds.horizon])
    ds.on_epoch_end()


class _OddDataset(rk.data.Dataset):
    def __init__(self, n: Any, items: list[Any]) -> None:
        self.n, self.items = n, items

    def __len__(self) -> int:
        return self.n  # type: ignore[no-any-return]

    def __getitem__(self, i: int) -> Any:
        return self.items[i % len(self.items)]


@surface
def case_dataset(r: random.Random) -> str | None:
    def batch() -> Any:
        k = r.randint(1, 5)
        x = either(r, lambda: X[:k], 0.7) if valid(r, 0.7) else hostile_array(r, 3)
        y = either(r, lambda: Y[:k], 0.7) if valid(r, 0.7) else hostile_array(r, 2)
        sw = either(r, np.ones(k))
        if not _numeric(sw) and pending(SW_CHECK):
            sw = None
        return (x, y) if valid(r, 0.5) else r.choice([(x,), (x, y, sw), x, None, (x, y, 1, 2)])
    n = either(r, r.randint(1, 3), 0.85)
    if _huge_count(n):          # 10**9 batches is a long job, not an attack
        n = 2
    check = "Dataset.__len__ check (negative / huge) in models/_fit_batches.py"
    if isinstance(n, (int, np.integer)) and not isinstance(n, bool) and not 0 <= n < 2**62 and pending(check):
        return f"pending:{check}"
    ds = _OddDataset(n, [batch() for _ in range(3)])
    m = _model()
    op = r.choice(["fit", "evaluate", "predict"])
    if op == "fit":
        m.fit(ds, epochs=either(r, 1, 0.9), steps_per_epoch=either(r, None, 0.8))
    elif op == "evaluate":
        m.evaluate(ds)
    else:
        m.predict(ds, steps=either(r, None, 0.8))
    return None


def _callback(r: random.Random, d: str) -> Any:
    kind = r.choice(["EarlyStopping", "ModelCheckpoint", "LearningRateScheduler", "ReduceLROnPlateau",
                     "CSVLogger", "TerminateOnNaN", "LambdaCallback", "ProgbarLogger", "History"])
    spec: dict[str, list[tuple[str, Any]]] = {
        "EarlyStopping": [("monitor", "loss"), ("patience", 1), ("min_delta", 0.0),
                          ("restore_best_weights", True), ("mode", "auto")],
        "ModelCheckpoint": [("filepath", os.path.join(d, "w-{epoch:02d}.safetensors")), ("monitor", "loss"),
                            ("save_best_only", False), ("save_weights_only", True), ("mode", "min")],
        "LearningRateScheduler": [("schedule", lambda e, lr: lr * 0.5)],
        "ReduceLROnPlateau": [("monitor", "loss"), ("factor", 0.5), ("patience", 0), ("verbose", 0),
                              ("mode", "min"), ("min_delta", 1e-4), ("cooldown", 0), ("min_lr", 0.0)],
        "CSVLogger": [("filename", os.path.join(d, "log.csv")), ("separator", ","), ("append", False)],
        "TerminateOnNaN": [("raise_error", False)],
        "LambdaCallback": [("on_epoch_begin", lambda e, logs: None), ("on_epoch_end", lambda e, logs: None),
                           ("on_train_batch_end", lambda b, logs: None), ("extra", 1)],
        "ProgbarLogger": [("epochs", 2), ("stream", io.StringIO())],
        "History": [],
    }
    kw = {k: either(r, v, 0.7) for k, v in spec[kind] if r.random() < 0.6}
    if kind == "ModelCheckpoint" and "filepath" not in kw:
        kw["filepath"] = spec[kind][0][1]
    if kind == "ProgbarLogger" and "epochs" not in kw:
        kw["epochs"] = 2
    if kind == "LearningRateScheduler" and "schedule" not in kw:
        kw["schedule"] = spec[kind][0][1]
    if kind in ("ModelCheckpoint", "CSVLogger"):     # relative paths land in the temporary folder
        for k in ("filepath", "filename"):
            if isinstance(kw.get(k), str) and kw[k] and not os.path.isabs(kw[k]):
                kw[k] = os.path.join(d, kw[k])
    return getattr(rk, kind)(**kw)


@surface
def case_callbacks(r: random.Random) -> None:
    """A callback built from hostile arguments either refuses them at once or runs through fit."""
    with tempfile.TemporaryDirectory() as d:
        cbs = [_callback(r, d) for _ in range(r.randint(1, 2))]
        m = _model()
        m.fit(X, Y, 2, batch_size=4, validation_split=r.choice([0.0, 0.25]), callbacks=cbs, verbose=0)


@surface
def case_mask(r: random.Random) -> None:
    m = _model()
    if r.random() < 0.5:
        valid = np.array([r.randint(0, 4) for _ in range(8)])
        lengths = either(r, valid, 0.7)
        mask = rk.Mask(lengths=lengths)
        out = m.predict(X, mask=mask)
        ends = mask.ends(4)
        b = int(np.argmax(ends))
        if ends[b] > 0:   # a padded sequence gives what it gives alone, unpadded
            alone = m.predict(X[b:b + 1, :ends[b]])
            np.testing.assert_allclose(out[b], alone[0], rtol=1e-5, atol=1e-6)
    else:
        valid = np.random.default_rng(r.randint(0, 9)).random((8, 4)) < 0.7
        mask = rk.Mask(either(r, valid, 0.7))
        m.predict(X, mask=mask)
        m.evaluate(X, Y, mask=mask)


def _finite(model: rk.Sequential) -> bool:
    return all(np.isfinite(w).all() for w in model.get_weights())


@surface
def case_weights(r: random.Random) -> None:
    """Weights installed by hand: NaN/Inf, wrong shapes, dtypes, counts. Whatever happens, the
    model's weights stay finite and, when refused, unchanged."""
    m = _model()
    before = m.get_weights()
    op = r.choice(["model", "layer", "dense", "lstm", "net"])
    refused: BaseException | None = None
    try:
        if op == "model":
            ws = [np.array(w) for w in before]
            for _ in range(r.randint(1, 3)):
                if not ws:
                    break
                k = r.randrange(len(ws))
                choice = r.random()
                arr = ws[k] if isinstance(ws[k], np.ndarray) and ws[k].dtype.kind == "f" else None
                if choice < 0.4 and arr is not None and arr.size:
                    arr.flat[r.randrange(arr.size)] = r.choice([math.nan, math.inf, -math.inf, 1e30])
                elif choice < 0.7:
                    ws[k] = hostile_array(r, r.choice([None, 2]))
                elif choice < 0.85:
                    ws.pop(k)
                else:
                    ws[k] = odd(r)
            m.set_weights(ws)
        elif op == "layer":
            layer = r.choice(m.layers)
            name = either(r, r.choice(layer.weight_names), 0.8)
            known = isinstance(name, str) and name in layer.weight_names
            value = np.array(layer.weight(name)) if known else None
            if value is not None and value.size and r.random() < 0.6:
                value.flat[0] = r.choice([math.nan, math.inf, -math.inf])
            layer.set_weight(name, value if value is not None and valid(r, 0.7) else hostile_array(r))
        elif op == "dense":
            d: Any = m.layers[1]
            kern, bias = np.array(d.weight("kernel")), np.array(d.weight("bias"))
            if r.random() < 0.5:
                kern.flat[r.randrange(kern.size)] = r.choice([math.nan, math.inf])
            d.set_weights(either(r, kern, 0.8), either(r, bias, 0.8))
        elif op == "lstm":
            lstm: Any = m.layers[0]
            arrs = [np.array(e.value) for e in lstm.weights()]
            j = r.randrange(len(arrs))
            arrs[j].flat[r.randrange(arrs[j].size)] = r.choice([math.nan, math.inf, 1.0])
            lstm.set_weights(*[either(r, a, 0.85) for a in arrs])
        else:
            net = rk.rnn.lstm(2, 3)
            state = net.state_dict()
            key = r.choice(sorted(state))
            mut = r.random()
            if mut < 0.4:
                state[key].flat[0] = r.choice([math.nan, math.inf])
            elif mut < 0.6:
                state[key] = hostile_array(r)
            elif mut < 0.8:
                del state[key]
            else:
                state[odd(r) if r.random() < 0.5 else "extra"] = np.zeros(2)
            before_net = net.state_dict()
            try:
                net.load_state_dict(either(r, state, 0.9))
            except TYPED:
                for k2, v in net.state_dict().items():
                    assert np.array_equal(v, before_net[k2]), f"refused load_state_dict changed {k2}"
                raise
            assert all(np.isfinite(v).all() for v in net.state_dict().values())
            net.seq(np.ones((1, 2, 2), np.float32))
            return
    except TYPED as e:
        refused = e
    after = m.get_weights()
    assert _finite(m), f"non-finite weights got in through {op}"
    if refused and op in ("model", "dense", "lstm"):
        for a, b2 in zip(before, after, strict=True):
            assert np.array_equal(a, b2), f"a refused {op} set_weights changed a weight"
    m.predict(X)
    if refused is not None:
        raise refused         # counted as the typed refusal it was


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


def _huge_count(v: Any) -> bool:
    """A count a machine would try to honour (a size of 10**9, 10**9 epochs): a request that only
    takes long, left out of the draws (10**30 stays: it overflows, and must be refused)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 10**5 < v < 2**62


def _size_ok(v: Any) -> bool:
    return not _huge_count(v)


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
    m = _model()
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
    if not _numeric(kw.get("sample_weight")) and pending(SW_CHECK):
        kw["sample_weight"] = None
    op = r.choice(["fit", "evaluate", "predict"])
    if op == "fit":
        epochs = either(r, 1, 0.9)
        m.fit(x, y, 2 if _huge_count(epochs) else epochs, **kw)
    elif op == "evaluate":
        sw = either(r, np.ones(8), 0.5)
        if not _numeric(sw) and pending(SW_CHECK):
            sw = None
        m.evaluate(x, y, batch_size=kw.get("batch_size"), sample_weight=sw)
    else:
        mask = either(r, np.ones((8, 4), bool), 0.5) if r.random() < 0.4 else None
        if r.random() < 0.2 and not pending("predict(mask=[array, None]) check"):
            mask = [np.ones((8, 4), bool), None]
        m.predict(x, batch_size=kw.get("batch_size"), mask=mask)


SURFACES: dict[str, Callable[[random.Random], Any]] = {
    "data.bucket_by_length": case_bucket, "data.windows": case_windows, "data.Dataset": case_dataset,
    "callbacks": case_callbacks, "Mask": case_mask, "set_weights": case_weights,
    "checkpoint_state": case_checkpoint, "layers": case_layers, "fit_evaluate_predict": case_passes,
}


def warmup() -> None:
    """Compile the kernels the cases use, and make the checkpoint, before any case is timed."""
    _checkpoint_bytes()
    _model().fit(X, Y, 1, batch_size=4)
    for check in PENDING:
        pending(check)


def run_case(surface: str, seed: int) -> str | None:
    """One case; an untyped error fails with its repr and the seed that replays it."""
    try:
        with np.errstate(all="ignore"):
            out = SURFACES[surface](random.Random(seed))
    except TYPED:
        return None
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001 - the property under test
        raise AssertionError(f"{surface} seed {seed}: untyped {type(e).__module__}.{type(e).__name__}: "
                             f"{e}") from e
    return out if isinstance(out, str) else None


@pytest.mark.parametrize("surface", sorted(SURFACES))
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_hostile_callers_get_typed_errors(surface: str, seed: int) -> None:
    run_case(surface, seed)


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
    whole = _model()
    hw = whole.fit(X, Y, 3, batch_size=4, seed=0,
                   callbacks=[rk.EarlyStopping(monitor="loss", patience=5, restore_best_weights=True)])
    assert h.history["loss"] == hw.history["loss"]
    for a, b in zip(m.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


FAKE_SURFACES = '''
import time
import numpy as np
import rnnkit as rk

def ok(r): return None
def typed(r): raise rk.InvalidInputError("typed")
def untyped(r): raise KeyError("boom")
def wrong(r): assert r.random() > 2, "a wrong value"
def pending(r): return "pending:a check"
def hang(r): time.sleep(60)
def hog(r):
    a = np.ones(300 * 2**20 // 8)   # 300 MB, touched
    time.sleep(30)
SURFACES = {"ok": ok, "typed": typed, "untyped": untyped, "wrong": wrong, "pending": pending, "hang": hang,
            "hog": hog}
'''


def test_the_supervisor_counts_every_outcome_and_kills_hangs_and_hogs(tmp_path: Path) -> None:
    import subprocess
    import sys

    mod = tmp_path / "fake_surfaces.py"
    mod.write_text(FAKE_SURFACES)
    out = tmp_path / "report.json"
    tool = Path(__file__).resolve().parents[1] / "tools" / "fuzz_supervisor.py"
    proc = subprocess.run([sys.executable, str(tool), "--module", str(mod), "--cases", "14", "--timeout", "3",
                           "--mem-mb", "150", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr      # findings: a non-zero exit
    rep = json.loads(out.read_text())["surfaces"]
    keys = ("cases", "ok", "typed", "untyped", "invariant", "hang", "memory")
    counts = {name: {k: rep[name][k] for k in keys} for name in rep}
    two = dict.fromkeys(("ok", "typed", "untyped", "invariant", "hang", "memory"), 0)
    assert counts == {
        "ok": {**two, "cases": 2, "ok": 2}, "pending": {**two, "cases": 2, "ok": 2},
        "typed": {**two, "cases": 2, "typed": 2}, "untyped": {**two, "cases": 2, "untyped": 2},
        "wrong": {**two, "cases": 2, "invariant": 2}, "hang": {**two, "cases": 2, "hang": 2},
        "hog": {**two, "cases": 2, "memory": 2}}
    assert rep["pending"]["pending"] == {"pending:a check": 2}
    assert rep["untyped"]["findings"][0]["error"] == "builtins.KeyError: 'boom'"
    assert rep["hog"]["peak_rss_mb"] > 150
    assert "hang" in proc.stdout and "2 x memory" in proc.stdout
