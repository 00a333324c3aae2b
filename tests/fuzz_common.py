"""What the fuzz surfaces (``tests/test_fuzz_*.py``) share: the hostile values, how a case mixes
them with valid ones, a small compiled model and its data, and the checks that other modules own
(:data:`PENDING`): a hostile input that still needs one of them is drawn only once it exists
(:func:`pending`); until then the case returns a ``"pending:<check>"`` tag instead of failing
(``tests/test_fuzz_state.py`` fails while any is missing),
and ``tools/fuzz_supervisor.py`` counts those apart.

A case passes when it returns or raises an ``rnnkit.Error`` / ``TypeError``; any other exception
is an untyped error and an ``AssertionError`` a wrong value (:func:`run_case`).
"""

from __future__ import annotations

import functools
import io
import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np

import rnnkit as rk

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

def typed_probe(call: Callable[[], Any]) -> bool:
    try:
        with np.errstate(all="ignore"):
            call()
    except TYPED:
        return True
    except Exception:  # noqa: BLE001 - the probe asks exactly this
        return False
    return False


def fuzz_model() -> rk.Sequential:
    """LSTM(3) then Dense(2) on (batch, 4, 2), compiled with Adam and mse."""
    m = rk.Sequential([rk.LSTM(3, seed=0), rk.Dense(2, seed=1)], input_shape=(None, 4, 2))
    m.compile(rk.Adam(0.01), "mse")
    return m


X = np.random.default_rng(0).uniform(-1, 1, (8, 4, 2)).astype(np.float32)
Y = np.random.default_rng(1).uniform(-1, 1, (8, 2)).astype(np.float32)

class OddDataset(rk.data.Dataset):
    """A Dataset of ``n`` batches (whatever ``n`` is) cycling through ``items``."""

    def __init__(self, n: Any, items: list[Any]) -> None:
        self.n, self.items = n, items

    def __len__(self) -> int:
        return self.n  # type: ignore[no-any-return]

    def __getitem__(self, i: int) -> Any:
        return self.items[i % len(self.items)]

SW_CHECK = "sample_weight= type check (fit / evaluate / batches) in models/_weighting.py"

#: check name -> a probe that is True once the check exists (a module adds its own)
PENDING: dict[str, Callable[[], bool]] = {
    "fit(callbacks=) type check of a numpy array": lambda: typed_probe(
        lambda: fuzz_model().fit(X, Y, 1, callbacks=np.array([rk.History()]))),  # type: ignore[arg-type]
    SW_CHECK: lambda: typed_probe(lambda: fuzz_model().evaluate(X, Y, sample_weight="float16")),
    "predict(mask=[array, None]) check": lambda: typed_probe(
        lambda: fuzz_model().predict(X, mask=[np.ones((8, 4), bool), None])),
    "Dataset.__len__ check (negative / huge) in models/_fit_batches.py": lambda: typed_probe(
        lambda: fuzz_model().fit(OddDataset(-1, [(X, Y)]), epochs=1)),
    "RepeatVector(n) bound before the allocation": lambda: typed_probe(
        lambda: rk.RepeatVector(10**30).forward(np.ones((1, 2), np.float32), rk.Ctx.inference())),
}


def numeric(v: Any) -> bool:
    """``v`` an ndarray of real numbers (what a sample weight is), or None."""
    return v is None or (isinstance(v, np.ndarray) and v.dtype.kind in "biuf")


@functools.cache
def pending(check: str) -> bool:
    """True while ``check`` (a key of PENDING) is still missing."""
    return not PENDING[check]()


def huge_count(v: Any) -> bool:
    """A count a machine would try to honour (a size of 10**9, 10**9 epochs or batches): a
    request that only takes long or much memory, left out of the draws (10**30 stays: it
    overflows, and must be refused)."""
    return bool(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 10**5 < v < 2**62)


def run_case(surfaces: dict[str, Callable[[random.Random], Any]], name: str, seed: int) -> str | None:
    """One case of ``surfaces[name]``; an untyped error fails with its repr and the seed that
    replays it."""
    try:
        with np.errstate(all="ignore"):
            out = surfaces[name](random.Random(seed))
    except TYPED:
        return None
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001 - the property under test
        raise AssertionError(f"{name} seed {seed}: untyped {type(e).__module__}.{type(e).__name__}: "
                             f"{e}") from e
    return out if isinstance(out, str) else None
