"""Fuzzing every public constructor and function: each callable of ``rnnkit.__all__`` and of every
public sub-package's ``__all__`` (:data:`CALLABLES`, enumerated, so a new public name is fuzzed
without being listed), called with hostile arguments (:data:`fuzz_common.ODD`) mixed with
plausible ones, by position and by the names of its signature. A case passes when the call
returns or raises a typed error (``rnnkit.Error`` / ``TypeError``); anything else is untyped.

The cases run in ``tools/fuzz_supervisor.py`` worker processes (a case is killed after its time
limit or over its memory cap and counted as a hang / memory finding), in a temporary working
directory (a save given the path ``"abc"`` writes there). The CI run here is short (a few
thousand cases over this and the other surfaces, ``--cases``); ``RNNKIT_FUZZ=long`` runs the long
profile (100,000 cases: ``RNNKIT_FUZZ=long nice -n 19 python tools/fuzz_supervisor.py``).

Left out (:data:`SKIP`): what starts a process-wide service or hands the process to a command
line (``cli.main``, ``distributed.MPI``), and what changes process-wide settings
(``kernels.set_mode``; ``io.set_limits`` is fuzzed and the limits restored after each case)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import random
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from fuzz_common import ODD, X

#: public callables never called with hostile arguments here, and why (see the module doc)
SKIP = {"rnnkit.cli.main": "runs a command line (serve blocks)",
        "rnnkit.distributed.MPI": "starts MPI",
        "rnnkit.kernels.set_mode": "changes every later case's kernels"}


def _public_modules() -> list[str]:
    return ["rnnkit"] + sorted(m.name for m in pkgutil.iter_modules(rk.__path__, "rnnkit.")
                               if not m.name.rsplit(".", 1)[-1].startswith("_"))


def _callables() -> list[tuple[str, Callable[..., Any]]]:
    out: dict[int, tuple[str, Callable[..., Any]]] = {}
    for name in _public_modules():
        mod = importlib.import_module(name)
        for n in getattr(mod, "__all__", ()):
            obj = getattr(mod, n)
            full = f"{name}.{n}"
            if isinstance(obj, types.GenericAlias):   # a type alias (``Snapshot = dict[...]``): calling
                continue                              # it calls the builtin, not rnnkit
            if callable(obj) and full not in SKIP and id(obj) not in out:
                out[id(obj)] = (full, obj)
    return sorted(out.values(), key=lambda t: t[0])


CALLABLES = _callables()

#: plausible values (an argument drawn from these is often valid, so the call goes deeper)
PLAUSIBLE: list[Any] = [1, 2, 3, 4, 0.1, "tanh", "mse", "sigmoid", None, X, X[:, :, 0], X[0], True, False,
                        (None, 4, 2), (4, 2), [1, 2], "float32", -1, 0]


def _value(r: random.Random) -> Any:
    return r.choice(ODD) if r.random() < 0.5 else r.choice(PLAUSIBLE)


def _params(fn: Callable[..., Any]) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]


def case_public(r: random.Random) -> str | None:
    """One public callable, called with 0-3 drawn positional arguments and drawn keywords of
    its signature; a layer it returns is also called on a small input."""
    name, fn = r.choice(CALLABLES)
    args = [_value(r) for _ in range(r.randint(0, 3))]
    names = _params(fn)[len(args):]
    kwargs = {n: _value(r) for n in names if r.random() < 0.3}
    limits = rk.io.set_limits()
    try:
        with np.errstate(all="ignore"):
            out = fn(*args, **kwargs)
            if isinstance(out, rk.Layer) and r.random() < 0.5:
                out(X)
    except FileNotFoundError:   # a path naming no file: what open() raises, documented by the loaders
        return "no such file"
    except IsADirectoryError:   # a path naming a folder where a file is written: what open() raises
        return "a directory"
    finally:
        rk.io.set_limits(**limits)
    return None


SURFACES: dict[str, Callable[[random.Random], Any]] = {"public_api": case_public}


def warmup() -> None:
    """Work in a temporary directory (what a case saves lands there), and compile the kernels."""
    os.chdir(tempfile.mkdtemp(prefix="rnnkit-fuzz-public-"))
    rk.LSTM(3, seed=0)(X)


ROOT = Path(__file__).resolve().parents[1]
_LONG = os.environ.get("RNNKIT_FUZZ") == "long"


def test_every_public_module_and_callable_is_enumerated() -> None:
    names = {n for n, _ in CALLABLES}
    assert {"rnnkit.LSTM", "rnnkit.ops.one_hot", "rnnkit.io.set_limits", "rnnkit.serve.app",
            "rnnkit.timeseries.make_windows", "rnnkit.data.bucket_by_length"} <= names
    assert len(CALLABLES) > 250   # 293: 410 public names are callable, many re-exported twice
    assert not any(n in names for n in SKIP)


def test_public_api_under_hostile_arguments_raises_only_typed_errors(tmp_path: Path) -> None:
    """The supervised run over this surface: 0 untyped errors, 0 hangs, 0 memory kills."""
    cases = 100_000 if _LONG else 1500
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz_supervisor.py"), "--module", __file__,
                          "--cases", str(cases), "--timeout", "20", "--mem-mb", "2048",
                          "--json", str(tmp_path / "report.json")],
                         capture_output=True, text=True, env=env, timeout=None if _LONG else 600)
    rep = json.loads((tmp_path / "report.json").read_text())
    r = rep["surfaces"]["public_api"]
    assert r["ok"] + r["typed"] == cases, out.stdout[-4000:]
    assert out.returncode == 0, out.stdout[-4000:]


# -- what the fuzzer found, each fixed where it arose (seeds of the first CI run) ----------------
FOUND: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    # AttributeError: 'numpy.ndarray' object has no attribute 'name'
    ("InputLayer(array)", lambda: rk.InputLayer(X), rk.InvalidParameterError, r"InputLayer: node must be"),
    # ValueError: the truth value of an array is ambiguous (the message's "(empty)")
    ("pad_sequences(array)", lambda: rk.data.pad_sequences(np.ones((2, 3))), rk.InvalidInputError,
     r"sequences must be a non-empty list of sequences, got ndarray$"),
    # numpy AxisError: axis 0 is out of bounds for array of dimension 0
    ("log_softmax(scalar, 0)", lambda: rk.ops.log_softmax(np.float32(1.0), 0), rk.InvalidInputError,
     r"ops.log_softmax: x is a scalar \(rank 0\)"),
    ("softmax(scalar)", lambda: rk.ops.softmax(np.array(1.0)), rk.InvalidInputError,
     r"ops.softmax: axis \(of an input of rank 0\) must be an int in \[0, 0\], got -1"),
    ("sum(scalar, axis=0)", lambda: rk.ops.sum(np.array(1.0), axis=0), rk.InvalidInputError,
     r"ops.sum: x is a scalar"),
    # AttributeError: 'str' object has no attribute 'max_rows'
    ("serve.app(config=str)", lambda: rk.serve.app(rk.Sequential([rk.Dense(1)], input_shape=(None, 2)), "x"),
     rk.InvalidParameterError, r"serve.app: config must be a ServeConfig or None, got str"),
]


@pytest.mark.parametrize("what, call, error, says", FOUND, ids=[f[0] for f in FOUND])
def test_fuzz_findings_are_typed(what: str, call: Callable[[], Any], error: type[Exception],
                                 says: str) -> None:
    with pytest.raises(error, match=says):
        call()


def test_error_details_that_are_arrays_are_shown_not_tested_for_truth() -> None:
    # before: ValueError (the truth value of an array is ambiguous) from the error's own constructor
    e = rk.ForwardPassNotRunError("lstm", np.array([1, 2]))
    assert str(e).endswith("training Ctx ([1 2])")
    w = rk.WeightShapeError("kernel", (2, 3), (3, 2), np.array([0, 0]))
    assert str(w).endswith("got (3, 2) ([0 0])")
    assert str(rk.ForwardPassNotRunError("lstm")).endswith("training Ctx")


if not CALLABLES:  # pragma: no cover - the enumeration itself is under test above
    pytest.fail("no public callables found")
