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
    """The page's first block (imports) and the blocks that define its cells (the IndRNN, the
    two compiled ones), run as a module (importable, as a user's own file is: its compiled
    walkers are cached on disk)."""
    blocks = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), re.S | re.M)
    mod = types.ModuleType("rnnkit_docs_custom_cells")
    sys.modules[mod.__name__] = mod
    defining = ("class IndRNNCell", "class PeepholeLSTMCell", "class MGUCell")
    for code in [blocks[0], *(b for b in blocks if any(d in b for d in defining))]:
        exec(compile(code, str(PAGE), "exec"), mod.__dict__)
    return mod.__dict__


NS = _page_cells()
#: the page's compiled cells
CELLS = {"peephole": NS["PeepholeLSTMCell"], "mgu": NS["MGUCell"]}
#: every cell the page defines
PAGE_CELLS = {"indrnn": NS["IndRNNCell"], **CELLS}


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
                                              "options": base.compiled_step.options,
                                              "implements": base.compiled_step.implements,
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
    ({"step": {"implements": ["activation"]}}, "implements must map option names"),
    ({"step": {"implements": {"activation": 3}}}, "implements must map option names"),
    ({"__init__": lambda self, units, activation="tanh", *, leak=0.0:
        CELLS["mgu"].__init__(self, units, activation)},
     r"get_config\(\) must return every argument of the cell's constructor.*"
     r"takes \['leak'\], which get_config\(\) does not return"),
])
def test_a_step_that_breaks_a_rule_is_refused_when_built(change: dict[str, Any], match: str) -> None:
    with pytest.raises(rk.InvalidParameterError, match=match):   # (a bad function: when the Step is made)
        rk.RecurrentLayer(_broken(**change)(4))


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


# -- a compiled path runs exactly what the reference runs, or does not run -------------------------

#: every activation a cell takes; softmax has no compiled form (those cells run the reference)
ALL_ACTS = (*kernels.ACTIVATIONS, "softmax")
GATE_ACTS = ("sigmoid", "hard_sigmoid", "tanh", "relu", "linear")


class TanhOnlyRNNCell(rk.SimpleRNNCell):
    """A SimpleRNN cell whose compiled step hands the step tanh's code whatever the cell's
    ``activation`` (as a step that hard-codes tanh does); its reference honours the option."""

    compiled_step = kernels.Step("rnnkit.kernels._simple:forward", "rnnkit.kernels._simple:backward",
                                 options=lambda cell: (kernels.ACTIVATION_CODES["tanh"],))


@pytest.mark.parametrize("declared", [None, ("tanh",)], ids=["undeclared", "tanh-only"])
def test_an_option_value_the_step_does_not_implement_runs_the_reference(declared: Any) -> None:
    """The step above computes tanh only. Declaring nothing, no configuration runs compiled
    (every cell has an ``activation``); declaring ``activation: ("tanh",)``, tanh runs compiled
    and relu runs the reference: both paths give the reference's values (float64, to
    rounding), never tanh's in place of relu's."""
    impl = {} if declared is None else {"activation": declared, "use_bias": (True, False)}

    class Cell(TanhOnlyRNNCell):
        compiled_step = kernels.Step(*TanhOnlyRNNCell.compiled_step.functions(),  # type: ignore[union-attr]
                                     options=TanhOnlyRNNCell.compiled_step.options,  # type: ignore[union-attr]
                                     implements=impl)

    x = np.random.default_rng(2).standard_normal((B, T, F))
    for act in ("tanh", "relu"):
        layer = rk.RecurrentLayer(Cell(H, act), return_sequences=True, seed=3, input_dim=F, dtype="float64")
        compiled = declared is not None and act in declared
        assert (kernels.find(layer.cell) is not None) == compiled, act
        with kernels.use("reference"):
            ref = run(layer, x)
        assert_close(ref, run(layer, x), "float64", act)
    relu = rk.RecurrentLayer(Cell(H, "relu"), return_sequences=True, seed=3, input_dim=F, dtype="float64")
    tanh = rk.RecurrentLayer(Cell(H, "tanh"), return_sequences=True, seed=3, input_dim=F, dtype="float64")
    assert np.abs(relu.predict(x) - tanh.predict(x)).max() > 0.1   # (the option matters here)


def test_every_option_of_the_cell_must_be_declared() -> None:
    """An option the step does not declare (here ``use_bias``) sends the cell to the
    reference, whatever its value; :meth:`Step.missing` names it with its value."""
    step = kernels.Step(*TanhOnlyRNNCell.compiled_step.functions(),  # type: ignore[union-attr]
                        options=TanhOnlyRNNCell.compiled_step.options,  # type: ignore[union-attr]
                        implements={"activation": ("tanh",)})

    class Cell(TanhOnlyRNNCell):
        compiled_step = step

    assert step.missing(Cell(H)) == ["use_bias=True"]
    assert step.missing(Cell(H, "relu", use_bias=False)) == ["activation='relu'", "use_bias=False"]
    assert kernels.find(Cell(H)) is None
    assert kernels.find(rk.SimpleRNNCell(H, "relu", use_bias=False)) is not None
    assert kernels.ANY.__contains__(object())


def _page_layer(name: str, act: str, dtype: str, **kw: Any) -> rk.RecurrentLayer:
    layer = rk.RecurrentLayer(PAGE_CELLS[name](H, act), seed=3, dtype=dtype, input_dim=F, **kw)
    layer.set_weight("bias", 0.3 * np.random.default_rng(4).standard_normal(layer.weight("bias").shape))
    return layer


@pytest.mark.parametrize("act", ALL_ACTS)
@pytest.mark.parametrize("cell", sorted(PAGE_CELLS))
def test_the_page_cells_honour_their_activation(cell: str, act: str) -> None:
    """Each cell of the page computes the activation it is given, on both paths: a cell of
    another activation, with the same weights, gives other outputs."""
    x = np.random.default_rng(2).standard_normal((B, T, F))
    layer = _page_layer(cell, act, "float64", return_sequences=True)
    assert (kernels.find(layer.cell) is not None) == (cell in CELLS and act in kernels.ACTIVATIONS)
    with kernels.use("reference"):
        ref = layer.predict(x)
    assert np.abs(layer.predict(x) - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())
    if act != "tanh":
        with kernels.use("reference"):
            other = _page_layer(cell, "tanh", "float64", return_sequences=True).predict(x)
        assert np.abs(ref - other).max() > 1e-3, f"{cell} computes tanh for activation={act!r}"


# Every option of every built-in cell and every cell of the page, on both paths. float64: the
# two paths differ by rounding only, 1e-12 * max(1, max|ref|). float32 (TOL, 2e-5 * max(1,
# max|ref|)): per step, the compiled tanh and sigmoid are rational approximations (max abs error
# 2.6e-7 and 1.6e-7, test_kernels.py) and the products sum F + S <= 9 terms in another order
# (unit roundoff 6e-8: 5.4e-7), 9.6e-7 a step; a gradient goes through the T = 6 steps forward
# and again backward (12 steps: 1.15e-5), then the reductions sum T * B = 18 rows (1.1e-6):
# 1.3e-5 < 2e-5. (Measured worst over this matrix: 1.1e-5, a GRU's d_bias with linear gates.)
MASK = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]], bool)
LENGTHS = np.array([4, 6, 2])


def _builtin_options() -> list[tuple[str, dict[str, Any]]]:
    """SimpleRNN: every (activation, use_bias). LSTM and GRU: every (activation, gate
    activation) pair, the four (use_bias, proj_size / reset_after) pairs taken in turn (each
    of them with every activation and with every gate activation); PyTorch's bias layout."""
    out: list[tuple[str, dict[str, Any]]] = []
    for act, ub in ((a, u) for a in ALL_ACTS for u in (True, False)):
        out.append(("SimpleRNN", {"activation": act, "use_bias": ub}))
    turns = [(True, False), (True, True), (False, False), (False, True)]
    for i, j in ((i, j) for i in range(len(ALL_ACTS)) for j in range(len(GATE_ACTS))):
        act, ra, (ub, other) = ALL_ACTS[i], GATE_ACTS[j], turns[(i + j) % 4]
        base = {"activation": act, "recurrent_activation": ra, "use_bias": ub}
        out += [("LSTM", {**base, "proj_size": 3 if other else 0}), ("GRU", {**base, "reset_after": other})]
    out += [("SimpleRNN", {"activation": "relu", "bias_layout": "torch"}),
            ("LSTM", {"activation": "relu", "recurrent_activation": "hard_sigmoid", "bias_layout": "torch"})]
    return out


OPTIONS = [*(("builtin", k, o) for k, o in _builtin_options()),
           *(("page", c, {"activation": a}) for c in sorted(PAGE_CELLS) for a in ALL_ACTS)]


def _make(source: str, kind: str, opts: dict[str, Any], dtype: str, **walk: Any) -> rk.RecurrentLayer:
    """The layer of ``kind`` with cell options ``opts`` and layer options ``walk``; every
    weight drawn from the seed, biases made nonzero."""
    if source == "builtin":
        layer: rk.RecurrentLayer = getattr(rk, kind)(H, **opts, seed=3, dtype=dtype, input_dim=F, **walk)
    else:
        walk.pop("recurrent_dropout", None)   # (the page's cells apply no recurrent dropout)
        layer = rk.RecurrentLayer(PAGE_CELLS[kind](H, opts["activation"]), seed=3, dtype=dtype,
                                  input_dim=F, **walk)
    if layer.cell.bias is not None:
        b = layer.weight("bias")
        layer.set_weight("bias", b + 0.3 * np.random.default_rng(4).standard_normal(b.shape))
    return layer


def _drive(layers: tuple[rk.RecurrentLayer, rk.RecurrentLayer], x: np.ndarray) -> dict[str, np.ndarray]:
    """Everything both layers compute: ``layers[0]`` (return_sequences, go_backwards, dropout,
    recurrent dropout) in a training pass under a boolean mask (outputs, caches, dL/dx, every
    gradient), in inference under ``lengths`` and unmasked, and from a given initial state
    (outputs, final state); ``layers[1]`` (stateful, last output) over two calls in a row."""
    layer, stateful = layers
    ctx = rk.Ctx.training(seed=7).set_mask(MASK)
    y = layer.forward(x, ctx)
    wc = ctx.peek(layer).walk
    out = {"y": y, **{f"state{k}": a.copy() for k, a in enumerate(wc.states)},
           **{f"park_{n}": a.copy() for n, a in wc.parks.items()}}
    out["dx"] = layer.backward(np.random.default_rng(5).standard_normal(y.shape), ctx)
    out.update({f"d_{n}": ctx.grad(layer, n) for n in layer.trainable_names})
    out["y_lengths"] = layer.forward(x, rk.Ctx.inference().set_mask(lengths=LENGTHS))
    out["y_predict"] = layer.predict(x)
    rng = np.random.default_rng(6)
    init = tuple(0.5 * rng.standard_normal((x.shape[0], n)).astype(x.dtype) for n in layer.cell.state_sizes())
    seq, final = layer.seq_init(x, init)
    out["seq_init"] = seq
    out.update({f"final_{k}": np.asarray(p) for k, p in enumerate(final)})
    stateful.reset_state()
    out["stateful_1"] = stateful.forward(x[:, :4], rk.Ctx.inference())
    out["stateful_2"] = stateful.forward(x[:, 4:], rk.Ctx.inference())
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("source,kind,opts", OPTIONS,
                         ids=[f"{k}-" + "-".join(f"{v}" for v in o.values()) for _, k, o in OPTIONS])
def test_every_option_of_every_cell_is_the_same_on_both_paths(source: str, kind: str, opts: dict[str, Any],
                                                              dtype: str) -> None:
    """Compiled (where a step implements the configuration) against reference: the values of
    every pass above, forward and backward, with every layer option on."""
    layers = (_make(source, kind, opts, dtype, return_sequences=True, go_backwards=True, dropout=0.25,
                    recurrent_dropout=0.3),
              _make(source, kind, opts, dtype, stateful=True))
    compiled = opts.get("activation") != "softmax" and "bias_layout" not in opts and kind != "indrnn"
    assert (kernels.find(layers[0].cell) is not None) == compiled
    # (inputs of scale 0.5: with linear gates and a relu the LSTM's state is a polynomial of
    # degree 2^T in them, which overflows float32 from inputs of scale 1)
    x = 0.5 * np.random.default_rng(2).standard_normal((B, T, F)).astype(dtype)
    with kernels.use("reference"):
        ref = _drive(layers, x)
    assert_close(ref, _drive(layers, x), dtype, f"{kind} {opts}")
