"""The int8 loops' warm-up (``python -m rnnkit.quant._warm``, run by ``rnnkit compile``) compiles
every version of the loops that a quantized model then runs: Numba compiles a loop once per
layout ('C', 'F', 'A') of its array arguments, and a version the warm-up did not compile is
compiled again by the first process that needs it, whatever the cache holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels
from rnnkit.quant import _warm as warm8
from rnnkit.recurrent import Cell, GRUCell, LSTMCell, SimpleRNNCell

#: the loops the quantized layers call from Python (every other int8 kernel is called from these,
#: with argument types that follow from theirs, or takes weights whose layout is fixed)
ENTRIES = ("walk_lstm", "walk_gru", "walk_simple", "project")


def _types_of(run: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, tuple[Any, ...]]]:
    """The (loop, Numba argument types) of every call of :data:`ENTRIES` while ``run()`` runs
    (the loops themselves not run: the types are those Numba would compile for)."""
    numba = pytest.importorskip("numba")
    mod = kernels.int8()
    if mod is None:
        pytest.skip("the compiled int8 loops are not in use (RNNKIT_KERNELS=reference)")
    seen: set[tuple[str, tuple[Any, ...]]] = set()
    for name in ENTRIES:
        def record(*args: Any, _name: str = name) -> None:
            seen.add((_name, tuple(numba.typeof(a) for a in args)))
        monkeypatch.setattr(mod, name, record)
    try:
        run()
    finally:
        monkeypatch.undo()
    return seen


CELLS: dict[str, Callable[[], Cell]] = {
    "lstm": lambda: LSTMCell(8),
    "gru": lambda: GRUCell(8, reset_after=False),
    "gru-after": lambda: GRUCell(8, reset_after=True),
    "rnn": lambda: SimpleRNNCell(8),
}


def _uses(make: Callable[[], Cell]) -> None:
    """Quantized models of the cell as they are used: batches of several rows, steps and
    features, a last recurrent layer and one under another, either direction, a masked input,
    one row, one step, one feature, a batch that the loops run in blocks."""
    cfg = make().get_config()

    def layer(**kw: Any) -> rk.RecurrentLayer:
        return rk.RecurrentLayer(type(make()).from_config({**cfg, "units": 5}), **kw)

    rng = np.random.default_rng(0)
    models = [
        [layer()],
        [layer(return_sequences=True)],
        [layer(go_backwards=True)],
        [layer(return_sequences=True, go_backwards=True), layer()],
        [rk.Masking(0.0), layer(return_sequences=True), layer()],
    ]
    for stack in models:
        q = rk.quantize(rk.Sequential([*stack, rk.Dense(1)]).build(rk.Shape((None, None, 3))))
        for rows, steps in ((6, 7), (1, 7), (6, 1), (400, 7)):
            x = rng.standard_normal((rows, steps, 3)).astype(np.float32)
            x[:, -2:] = 0.0                     # (masked steps where a Masking layer is)
            q.predict(x, verbose=0)
    for seqs in (False, True):                  # one feature
        q = rk.quantize(rk.Sequential([layer(return_sequences=seqs), rk.Dense(1)]).build(
            rk.Shape((None, None, 1))))
        q.predict(rng.standard_normal((6, 7, 1)).astype(np.float32), verbose=0)


@pytest.mark.parametrize("name", list(CELLS))
def test_the_warm_up_compiles_every_version_of_the_loops_that_a_quantized_model_runs(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    warmed = _types_of(lambda: warm8.exercise(CELLS[name]()), monkeypatch)
    used = _types_of(lambda: _uses(CELLS[name]), monkeypatch)
    assert used, "no int8 loop ran"
    missing = sorted(str(t) for t in used - warmed)
    assert not missing, "\n".join(missing)
