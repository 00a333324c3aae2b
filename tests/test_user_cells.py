"""Cells written outside the package run on the compiled walker, equal to their own reference.

The peephole LSTM and the MGU of docs/custom-cells.md (taken from the page itself): compiled
(``kernels.find``), equal to their reference steps in every pass (outputs, caches, final states,
dL/dx, every gradient, masks of both kinds, either direction, return_sequences, a forward of one
path feeding the backward of the other), split over threads, bit-independent of the thread
count and of the batch size; float64 gradients against central differences on the compiled
path. Also: the rules of a compiled step give typed errors when a layer is built, a subclass
that overrides ``step`` runs the reference, and recurrent dropout (a mask of the pass, not a
weight) is the same on both paths for every built-in cell. Tolerances as in test_kernels.py.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import assert_gradcheck
from rnnkit import kernels

pytest.importorskip("numba")

B, T, F, H = 3, 6, 4, 5
TOL = {"float64": 1e-12, "float32": 2e-5}
PAGE = Path(__file__).resolve().parents[1] / "docs" / "custom-cells.md"


def _page_cells() -> dict[str, Any]:
    """The page's first block (imports) and the blocks that define the two compiled cells, run
    as a module (importable, as a user's own file is: its compiled walkers are cached on disk)."""
    blocks = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), re.S | re.M)
    mod = types.ModuleType("rnnkit_docs_custom_cells")
    sys.modules[mod.__name__] = mod
    for code in [blocks[0], *(b for b in blocks if "class PeepholeLSTMCell" in b or "class MGUCell" in b)]:
        exec(compile(code, str(PAGE), "exec"), mod.__dict__)
    return mod.__dict__


NS = _page_cells()
CELLS = {"peephole": NS["PeepholeLSTMCell"], "mgu": NS["MGUCell"]}


def make(cell: str, dtype: str, rs: bool = True, gb: bool = False, **kw: Any) -> rk.RecurrentLayer:
    layer = rk.RecurrentLayer(CELLS[cell](H), return_sequences=rs, go_backwards=gb, seed=3, dtype=dtype, **kw)
    layer.build(rk.Shape((None, None, F)))
    b = layer.weight("bias")
    layer.set_weight("bias", 0.3 * np.random.default_rng(4).standard_normal(b.shape))
    return layer


def run(layer: rk.RecurrentLayer, x: np.ndarray, mask: Any = None) -> dict[str, np.ndarray]:
    """Everything a pass produces, by name (``mask``: (kind, array) set on the Ctx)."""
    ctx = rk.Ctx.training()
    if mask is not None:
        ctx.set_mask(**{mask[0]: mask[1]})
    y = layer.forward(x, ctx)
    wc = ctx.peek(layer).walk
    out = {"y": y, **{f"state{k}": a.copy() for k, a in enumerate(wc.states)},
           **{f"park_{n}": a.copy() for n, a in wc.parks.items()}}
    out["dx"] = layer.backward(np.random.default_rng(5).standard_normal(y.shape), ctx)
    out.update({f"d_{n}": ctx.grad(layer, n) for n in layer.weight_names})
    ictx = rk.Ctx.inference()
    if mask is not None:
        ictx.set_mask(**{mask[0]: mask[1]})
    out["y_infer"] = layer.forward(x, ictx)
    seq, st = layer.seq_init(x, None)
    out["seq"] = seq
    out.update({f"final_{k}": np.asarray(p) for k, p in enumerate(st)})
    return out


def assert_close(ref: dict[str, np.ndarray], fast: dict[str, np.ndarray], dtype: str, what: str) -> None:
    assert ref.keys() == fast.keys(), what
    for name, r in ref.items():
        f = fast[name]
        assert f.shape == r.shape and f.dtype == r.dtype, (what, name)
        err = float(np.max(np.abs(f - r))) if r.size else 0.0
        scale = max(1.0, float(np.max(np.abs(r))) if r.size else 0.0)
        assert err <= TOL[dtype] * scale, f"{what}: {name} differs by {err:.3e}"


MASKS = [None, ("mask", np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]], bool)),
         ("lengths", np.array([4, 6, 2]))]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mask", MASKS, ids=["nomask", "mask", "lengths"])
@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("rs", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_user_cell_fast_equals_its_reference(cell: str, rs: bool, gb: bool, mask: Any, dtype: str) -> None:
    layer = make(cell, dtype, rs, gb)
    assert kernels.find(layer.cell) is not None
    x = np.random.default_rng(2).standard_normal((B, T, F)).astype(dtype)
    with kernels.use("reference"):
        ref = run(layer, x, mask)
    assert_close(ref, run(layer, x, mask), dtype, f"{cell}/{dtype}")
    g = np.random.default_rng(5).standard_normal(ref["y"].shape)
    for fwd, bwd in (("fast", "reference"), ("reference", "fast")):   # either cache, either backward
        ctx = rk.Ctx.training()
        with kernels.use(fwd):
            layer.forward(x, ctx)
        with kernels.use(bwd):
            dx = layer.backward(g, ctx)
        if mask is None:
            assert_close({"dx": ref["dx"], "d_kernel": ref["d_kernel"]},
                         {"dx": dx, "d_kernel": ctx.grad(layer, "kernel")}, dtype, f"{fwd}->{bwd}")


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_user_cell_gradients_on_the_compiled_path(cell: str) -> None:
    """float64 central differences of every weight and the input, the compiled path running."""
    layer = make(cell, "float64", True, True)
    assert kernels.find(layer.cell) is not None
    assert_gradcheck(layer, np.random.default_rng(1).standard_normal((2, 5, F)))


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_user_cell_split_over_threads_is_bit_identical(monkeypatch: pytest.MonkeyPatch, cell: str) -> None:
    """Rows in blocks on three threads (reductions and projection in parts too) give the same
    bits as one thread; predict gives the same bits whatever its batch size."""
    from rnnkit.kernels import _driver, _threads

    x = np.random.default_rng(4).standard_normal((20, 5, F)).astype("float32")
    layer = make(cell, "float32", True, True)

    def everything(cores: int) -> dict[str, np.ndarray]:
        monkeypatch.setattr(_threads, "CORES", cores)
        monkeypatch.setattr(_threads, "MIN_ROWS", 4)
        monkeypatch.setattr(_driver, "PARALLEL_REDUCTIONS", 0)
        return run(layer, x)

    one, three = everything(1), everything(3)
    assert _threads.blocks(20) == [(0, 6), (6, 13), (13, 20)]
    for name in one:
        np.testing.assert_array_equal(three[name], one[name], err_msg=name)
    whole = layer.predict(x)
    parts = np.concatenate([layer.predict(x[lo:hi]) for lo, hi in ((0, 1), (1, 13), (13, 20))])
    np.testing.assert_array_equal(parts, whole)
    with kernels.use("reference"):
        assert_close(run(layer, x), one, "float32", f"{cell} split")


def test_a_subclass_that_overrides_the_step_runs_the_reference() -> None:
    base = CELLS["mgu"]

    class Same(base):  # type: ignore[misc, valid-type]
        pass

    class Changed(base):  # type: ignore[misc, valid-type]
        def step(self, w: Any, inp: Any, prev: Any, park: Any) -> Any:
            (h,) = super().step(w, inp, prev, park)
            return (0.5 * h,)

    assert kernels.find(Same(3)) is not None
    assert kernels.find(Changed(3)) is None

    class Again(Changed):   # declares a compiled step of its own: compiled again
        compiled_step = base.compiled_step

    assert kernels.find(Again(3)) is not None
    layer = rk.RecurrentLayer(Changed(H), return_sequences=True, seed=3, input_dim=F, dtype="float64")
    ref = rk.RecurrentLayer(base(H), return_sequences=True, seed=3, input_dim=F, dtype="float64")
    x = np.random.default_rng(1).standard_normal((B, T, F))
    assert np.abs(layer.predict(x) - ref.predict(x)).max() > 1e-3   # its own arithmetic, not the MGU's


def _broken(**change: Any) -> Any:
    base = CELLS["mgu"]
    attrs = {"compiled_step": kernels.Step(**{"forward": NS["mgu_forward"], "backward": NS["mgu_backward"],
                                              "input_park": "gates", "parks": lambda c: {"fh": c.units},
                                              **change.pop("step", {})}), **change}
    return type("Broken", (base,), attrs)


@pytest.mark.parametrize("change,match", [
    ({"step": {"forward": lambda *a: None}}, "forward must be a numba.njit function"),
    ({"step": {"parks": lambda c: {"h": c.units}}}, "park names must differ"),
    ({"step": {"parks": lambda c: {}}}, "each group's source"),
    ({"rec_groups": lambda self, w: [("h", 0, 2), ("h", 3, w)]}, "contiguous groups"),
    ({"rec_groups": lambda self, w: [("h", 0, 1), ("h", 1, 2), ("h", 2, w)]}, "one or two"),
    ({"step": {"own": ("kernel",)}}, "own must name parameters"),
    ({"step": {"options": lambda c: (1.5,)}}, "tuple of ints"),
    ({"recurrent_kernel": None}, "must name an input_kernel and a recurrent_kernel"),
    ({"step": {"input_park": "fh"}}, "park names must differ"),
])
def test_a_step_that_breaks_a_rule_is_refused_when_built(change: dict[str, Any], match: str) -> None:
    cls = _broken(**change)
    with pytest.raises(rk.InvalidParameterError, match=match):
        rk.RecurrentLayer(cls(4))


def test_a_two_row_bias_needs_the_products_apart() -> None:
    class TwoRows(CELLS["mgu"]):  # type: ignore[misc, valid-type]
        def params(self, input_dim: int) -> list[rk.Param]:
            p = super().params(input_dim)
            return [*p[:2], rk.Param("bias", (2, 2 * self.units), lambda rng, s, dt: np.zeros(s, dt))]

    with pytest.raises(rk.InvalidParameterError, match=r"\(2, 8\) with rec_apart"):
        rk.RecurrentLayer(TwoRows(4))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", ["rnn", "lstm", "lstm_proj", "gru", "gru_ra"])
def test_recurrent_dropout_is_the_same_on_both_paths(kind: str, dtype: str) -> None:
    """The pass's recurrent dropout mask (drawn from the Ctx's seed) reaches the compiled
    walker and the reference steps alike: equal outputs and gradients; the layer's weights are
    a mapping of its parameters only."""
    kw: dict[str, Any] = dict(return_sequences=True, recurrent_dropout=0.4, seed=2, input_dim=F, dtype=dtype)
    layer = {"rnn": lambda: rk.SimpleRNN(H, **kw), "lstm": lambda: rk.LSTM(H, **kw),
             "lstm_proj": lambda: rk.LSTM(H, proj_size=3, **kw), "gru": lambda: rk.GRU(H, **kw),
             "gru_ra": lambda: rk.GRU(H, reset_after=True, **kw)}[kind]()
    assert kernels.find(layer.cell) is not None
    x = np.random.default_rng(3).standard_normal((B, T, F)).astype(dtype)
    got = {}
    for m in ("reference", "fast"):
        with kernels.use(m):
            ctx = rk.Ctx.training(seed=11)
            y = layer.forward(x, ctx)
            assert ctx.peek(layer).walk.rdrop is not None
            dx = layer.backward(np.ones_like(y), ctx)
            got[m] = {"y": y, "dx": dx, **{n: ctx.grad(layer, n) for n in layer.weight_names}}
    assert_close(got["reference"], got["fast"], dtype, kind)
    undropped = layer.forward(x, rk.Ctx.inference())   # (inference: no dropout) the mask did act
    assert np.abs(undropped - got["fast"]["y"]).max() > 1e-3
