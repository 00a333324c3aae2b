"""Fuzzing hostile callers: the data helpers (``bucket_by_length``, ``windows``, a user's
``Dataset``), ``Mask``, the callbacks' constructors and weights set by hand.

Each *surface* is a function of a seeded ``random.Random`` that draws one case (hostile values
mixed with valid ones: :mod:`fuzz_common`), runs it, and checks what it can by value (every
sequence in exactly one batch with its values; refused weights leave the weights as they were;
...). ``SURFACES`` is what ``tools/fuzz_supervisor.py`` runs in supervised worker processes (the
long profile: ``nice -n 19 python tools/fuzz_supervisor.py --cases 20000``, with the surfaces of
``test_fuzz_state.py``); here each surface runs ``max_examples`` seeds of the Hypothesis profile
(``ci``: 60; ``RNNKIT_FUZZ=long``: 10000).
"""

from __future__ import annotations

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
from fuzz_common import (  # noqa: E402
    PENDING,
    SW_CHECK,
    TYPED,
    OddDataset,
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
    valid,
)


@surface
def case_bucket(r: random.Random) -> None:
    n = r.randint(1, 6)
    feat = r.choice([(), (2,)])
    good = [np.random.default_rng(r.randint(0, 99)).integers(1, 9, (r.randint(0, 5), *feat)).astype(
        r.choice(["int64", "float64", "float32", "int32"])) for _ in range(n)]
    seqs = either(r, good, 0.8)
    kw: dict[str, Any] = {}
    for key, fine in (("targets", lambda: np.arange(n, dtype=float)), ("bucket_width", r.randint(1, 4)),
                       ("shuffle", r.random() < 0.5), ("seed", r.randint(0, 9)),
                       ("pad_value", r.choice([0, -1, 7])),
                       ("dtype", r.choice([None, "float32", "int64", "float64"]))):
        if r.random() < 0.5:
            kw[key] = either(r, fine)
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
    for key, fine in (("horizon", r.randint(0, 3)), ("batch_size", r.randint(1, 8)),
                       ("shuffle", r.random() < 0.5), ("seed", r.randint(0, 9)), ("targets", None),
                       ("dtype", r.choice(["float32", "float64"]))):
        if r.random() < 0.5:
            kw[key] = either(r, fine)
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


@surface
def case_dataset(r: random.Random) -> str | None:
    def batch() -> Any:
        k = r.randint(1, 5)
        x = either(r, lambda: X[:k], 0.7) if valid(r, 0.7) else hostile_array(r, 3)
        y = either(r, lambda: Y[:k], 0.7) if valid(r, 0.7) else hostile_array(r, 2)
        sw = either(r, np.ones(k))
        if not numeric(sw) and pending(SW_CHECK):
            sw = None
        return (x, y) if valid(r, 0.5) else r.choice([(x,), (x, y, sw), x, None, (x, y, 1, 2)])
    n = either(r, r.randint(1, 3), 0.85)
    if huge_count(n):          # 10**9 batches is a long job, not an attack
        n = 2
    check = "Dataset.__len__ check (negative / huge) in models/_fit_batches.py"
    if isinstance(n, (int, np.integer)) and not isinstance(n, bool) and not 0 <= n < 2**62 and pending(check):
        return f"pending:{check}"
    ds = OddDataset(n, [batch() for _ in range(3)])
    m = fuzz_model()
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
                          ("restore_best_weights", True), ("mode", "auto"), ("verbose", 0), ("baseline", 1.0),
                          ("start_from_epoch", 1)],
        "ModelCheckpoint": [("filepath", os.path.join(d, "w-{epoch:02d}.safetensors")), ("monitor", "loss"),
                            ("save_best_only", False), ("save_weights_only", True), ("mode", "min"),
                            ("verbose", 0), ("save_freq", "epoch"), ("initial_value_threshold", 10.0)],
        "LearningRateScheduler": [("schedule", lambda e, lr: lr * 0.5), ("verbose", 0)],
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
        m = fuzz_model()
        m.fit(X, Y, 2, batch_size=4, validation_split=r.choice([0.0, 0.25]), callbacks=cbs, verbose=0)


@surface
def case_mask(r: random.Random) -> None:
    m = fuzz_model()
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
    m = fuzz_model()
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



SURFACES: dict[str, Callable[[random.Random], Any]] = {
    "data.bucket_by_length": case_bucket, "data.windows": case_windows, "data.Dataset": case_dataset,
    "callbacks": case_callbacks, "Mask": case_mask, "set_weights": case_weights,
}


def warmup() -> None:
    """Compile the kernels the cases use before any case is timed."""
    fuzz_model().fit(X, Y, 1, batch_size=4)
    for check in PENDING:
        pending(check)


@pytest.mark.parametrize("name", sorted(SURFACES))
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_hostile_callers_get_typed_errors(name: str, seed: int) -> None:
    run_case(SURFACES, name, seed)


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


SLOW_SURFACES = '''
import time
def slow(r): time.sleep(0.4)
SURFACES = {"slow": slow}
'''


def test_the_supervisor_writes_its_partial_report_while_it_runs(tmp_path: Path) -> None:
    # a long run (100,000 cases, hours) is read while it goes on: the report at --json is
    # rewritten every --save-every seconds (atomically), marked partial, with the cases run so far
    import subprocess
    import sys
    import time

    mod = tmp_path / "slow_surfaces.py"
    mod.write_text(SLOW_SURFACES)
    out = tmp_path / "report.json"
    tool = Path(__file__).resolve().parents[1] / "tools" / "fuzz_supervisor.py"
    proc = subprocess.Popen([sys.executable, str(tool), "--module", str(mod), "--cases", "12",
                             "--workers", "1", "--save-every", "0.3", "--json", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: list[tuple[bool, int, int]] = []
    try:
        while proc.poll() is None:
            if out.exists():
                rep = json.loads(out.read_text())   # never half-written (renamed into place)
                seen.append((rep["partial"], rep["cases"], rep["surfaces"]["slow"]["ok"]))
            time.sleep(0.05)
    finally:
        proc.wait(timeout=120)
    final = json.loads(out.read_text())
    assert proc.returncode == 0
    assert (final["partial"], final["cases"], final["surfaces"]["slow"]["ok"]) == (False, 12, 12)
    partial = [s for s in seen if s[0]]
    assert partial and all(0 <= n < 12 and ok == n for _, n, ok in partial)
    assert any(n > 0 for _, n, _ in partial)
