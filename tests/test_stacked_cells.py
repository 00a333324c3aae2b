"""``rk.StackedRNNCells`` and ``rk.RNN([cells])``: Keras 3.15.1's stack of cells. Outputs and
every state (Keras' order: all of the first cell's parts, then the next cell's) equal Keras'
with copied weights, from zero and from given initial states, with a mask; gradients equal
PyTorch autograd through Keras' torch backend and float64 finite differences (the shared
harness); the config round-trips through the registry. The whole-sequence form (each cell
walked over the sequence in turn, compiled where the cell is) equals the step form (the
reference walk of the stack) in outputs, final states and every gradient, with masks,
``go_backwards``, initial and carried (``stateful``) states and input dropout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer, keras_or_skip
from registry_cells import LeakyCell
from rnnkit.recurrent import _walker
from rnnkit.testing import check_cell

B, T, F = 3, 5, 4
SIZES = (4, 3, 2)   # LSTMCell, GRUCell (Keras' default reset_after=True), SimpleRNNCell


def _ours(dtype: str = "float32", **kw: Any) -> rk.RNN:
    cells = [rk.LSTMCell(SIZES[0]), rk.GRUCell(SIZES[1], reset_after=True), rk.SimpleRNNCell(SIZES[2])]
    return rk.RNN(rk.StackedRNNCells(cells), seed=4, dtype=dtype, **kw)


def _theirs(keras: Any, **kw: Any) -> Any:
    L = keras.layers
    return L.RNN(L.StackedRNNCells([L.LSTMCell(SIZES[0]), L.GRUCell(SIZES[1]), L.SimpleRNNCell(SIZES[2])]),
                 **kw)


def _copy_in(theirs: Any, ours: rk.RNN) -> None:
    rng = np.random.default_rng(8)
    for w in theirs.weights:
        w.assign(rng.normal(0.0, 0.4, tuple(w.shape)).astype(w.dtype))
    ours.set_weights(*[np.asarray(w.numpy()).reshape(ours.weight(n).shape)
                       for w, n in zip(theirs.weights, ours.weight_names, strict=True)])


def test_state_order_weights_and_config() -> None:
    """Keras' order: the states of cell 0 (h, c), then cell 1's (h), then cell 2's (h); the
    output is the last cell's; the weights go cell by cell; the config rebuilds the layer and
    the rebuilt one computes the same (float64, same arithmetic: exact)."""
    layer = _ours("float64", return_state=True, return_sequences=True)
    assert layer.cell.state_names == ("h_0", "c_0", "h_1", "h_2")
    assert layer.output_size == SIZES[2]
    layer.build((None, T, F))
    assert layer.weight_names == [f"cells.{k}.{n}" for k in range(3)
                                  for n in ("kernel", "recurrent_kernel", "bias")]
    assert [layer.weight(n).shape[1] for n in layer.weight_names[::3]] == [16, 9, 2]
    x = np.random.default_rng(1).standard_normal((B, T, F))
    out, h0, c0, h1, h2 = layer.predict(x)
    np.testing.assert_array_equal(out[:, -1], h2)
    cfg = rk.layers.layer_to_config(layer)
    assert cfg["class_name"] == "RNN" and cfg["config"]["cell"]["class_name"] == "StackedRNNCells"
    again = rk.layers.layer_from_config(cfg)
    again.build((None, T, F))
    again.set_weights(*[layer.weight(n) for n in layer.weight_names])
    for a, b in zip(again.predict(x), [out, h0, c0, h1, h2], strict=True):
        np.testing.assert_array_equal(a, b)
    same = rk.RNN([rk.LSTMCell(4), rk.GRUCell(3, reset_after=True), rk.SimpleRNNCell(2)])
    assert type(same.cell) is rk.StackedRNNCells and same.cell.state_names == layer.cell.state_names


@pytest.mark.parametrize("backwards", [False, True])
def test_outputs_and_states_equal_keras(backwards: bool) -> None:
    """Keras 3.15.1 with the same weights (float32 over T steps of three cells: 1e-6 absolute
    on O(1) values): outputs and every final state, from zeros, from given initial states (a
    flat list in Keras' order, or Keras' nesting), and with a boolean mask. Under
    ``go_backwards`` with a mask the sequence output differs by rnnkit's rule (each sequence is
    reversed within its own length; Keras reverses the padded rows, padding first), so only
    the final states, which both reach after the same real steps, are compared there."""
    keras = keras_or_skip()
    kw = {"return_sequences": True, "return_state": True, "go_backwards": backwards}
    theirs = _theirs(keras, **kw)
    theirs.build((None, T, F))
    ours = _ours(**kw)
    ours.build((None, T, F))
    _copy_in(theirs, ours)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    init = [rng.standard_normal((B, n)).astype(np.float32) for n in (4, 4, 3, 2)]
    mask = np.arange(T)[None, :] < np.array([5, 2, 3])[:, None]
    nested = [init[:2], init[2], init[3]]   # Keras' structure: one entry per cell
    run = ours.forward
    inf = rk.Ctx.inference
    for got, want, masked in ((ours.predict(x), theirs(x), False),
                              (run([x, *init], inf()), theirs(x, initial_state=nested), False),
                              (run([x, *nested], inf()), theirs(x, initial_state=nested), False),
                              (run(x, inf().set_mask(mask)), theirs(x, mask=mask), True)):
        want = keras.tree.flatten(want)    # Keras returns [output, [h_0, c_0], h_1, h_2]
        assert len(got) == len(want) == 5
        if backwards and masked:
            got, want = got[1:], want[1:]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, np.asarray(w.detach()), rtol=0, atol=1e-6)


def test_gradients_equal_torch_autograd_through_keras() -> None:
    """dL/dx, dL/d(initial states) and every weight's gradient equal PyTorch autograd through
    Keras' torch backend (float32: 1e-5 relative to the largest entry)."""
    keras = keras_or_skip()
    torch = pytest.importorskip("torch")
    kw = {"return_sequences": True, "return_state": True}
    theirs = _theirs(keras, **kw)
    theirs.build((None, T, F))
    ours = _ours(**kw)
    ours.build((None, T, F))
    _copy_in(theirs, ours)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    init = [rng.standard_normal((B, n)).astype(np.float32) for n in (4, 4, 3, 2)]
    tx = torch.tensor(x, requires_grad=True)
    ti = [torch.tensor(a, requires_grad=True) for a in init]
    outs = keras.tree.flatten(theirs(tx, initial_state=[ti[:2], ti[2], ti[3]]))
    gs = [rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in outs]
    sum((o * torch.tensor(g)).sum() for o, g in zip(outs, gs, strict=True)).backward()
    ctx = rk.Ctx.training(seed=0)
    ours.forward([x, *init], ctx)
    got = ours.backward(gs, ctx)

    def close(a: np.ndarray, b: np.ndarray, what: str) -> None:
        err = np.abs(a - b).max() / np.abs(b).max()
        assert err <= 1e-5, (what, err)

    close(got[0], tx.grad.numpy(), "x")
    for k, (a, t) in enumerate(zip(got[1:], ti, strict=True)):
        close(a, t.grad.numpy(), f"initial state {k}")
    for w, n in zip(theirs.weights, ours.weight_names, strict=True):
        want = w.value.grad.numpy()
        close(ctx.grad(ours, n).reshape(want.shape), want, n)


@pytest.mark.parametrize("seq", [True, False])
def test_layer_contract(seq: bool) -> None:
    """The shared harness: float64 finite differences of the input and every weight, config,
    weights round trip."""
    report = check_layer(lambda dtype: _ours(dtype, return_sequences=seq),
                         lambda rng: rng.standard_normal((2, 4, 3)), threads=2)
    assert report is not None


def test_refused() -> None:
    with pytest.raises(rk.InvalidParameterError, match="non-empty list"):
        rk.StackedRNNCells([])
    with pytest.raises(rk.InvalidParameterError, match="cell 1 must be an rnnkit.Cell"):
        rk.StackedRNNCells([rk.LSTMCell(2), "gru"])


def test_keras_files_both_ways(tmp_path: Any) -> None:
    """A ``.keras`` file Keras 3.15.1 writes with ``RNN(StackedRNNCells)`` loads as an
    ``rk.RNN`` over a ``StackedRNNCells`` predicting Keras' outputs (float32 over T steps of
    three cells: 1e-6 absolute); rnnkit writes it back and Keras loads that file and predicts
    the same (1e-6). The cells' weights lie under groups named by class (``lstm_cell``,
    ``lstm_cell_1``), whatever the cells' names in the config: a stack made after others (names
    ``lstm_cell_3`` ...) and a stack of two cells of one class load both ways."""
    keras = keras_or_skip()
    _theirs(keras)                      # (the next cells' config names get a suffix)
    theirs = keras.Sequential([keras.Input((T, F)), _theirs(keras, return_sequences=True)])
    rng = np.random.default_rng(5)
    for w in theirs.weights:
        w.assign(rng.normal(0.0, 0.4, tuple(w.shape)).astype("float32"))
    theirs.save(tmp_path / "theirs.keras")
    ours = rk.load_keras(tmp_path / "theirs.keras")
    layer = ours.layers[0]
    assert type(layer) is rk.RNN and type(layer.cell) is rk.StackedRNNCells
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    want = np.asarray(theirs(x).detach())
    np.testing.assert_allclose(ours.predict(x), want, rtol=0, atol=1e-6)
    rk.save_keras(ours, tmp_path / "ours.keras")
    again = keras.saving.load_model(tmp_path / "ours.keras")
    assert type(again.layers[0].cell) is keras.layers.StackedRNNCells
    np.testing.assert_allclose(np.asarray(again(x).detach()), want, rtol=0, atol=1e-6)
    fresh = rk.Sequential([rk.RNN([rk.LSTMCell(3), rk.LSTMCell(2)], seed=2)]).build((None, T, F))
    rk.save_keras(fresh, tmp_path / "fresh.keras")
    np.testing.assert_allclose(np.asarray(keras.saving.load_model(tmp_path / "fresh.keras")(x).detach()),
                               fresh.predict(x), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(rk.load_keras(tmp_path / "fresh.keras").predict(x), fresh.predict(x))


# -- the whole-sequence form against the step form ----------------------------------------------
def _built_in() -> list[rk.Cell]:
    return [rk.LSTMCell(4), rk.GRUCell(3, reset_after=True), rk.SimpleRNNCell(2)]


def _mixed() -> list[rk.Cell]:
    """A compiled cell, a user's cell with the step form only (the reference walk) and a cell
    with a parallel form of its own that takes a mask."""
    return [rk.LSTMCell(3), LeakyCell(4), rk.MinGRUCell(2)]


#: masks (B=4, T=6): a full row, masked steps first, a gap in the middle, one real step
_MASK = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [1, 1, 0, 0, 1, 1], [0, 0, 0, 1, 0, 0]], bool)
_LENGTHS = np.array([6, 3, 1, 5])
_CASES = {
    "sequences": {},
    "last step": {"return_sequences": False},
    "backwards": {"go_backwards": True},
    "mask": {"mask": _MASK},
    "mask backwards": {"mask": _MASK, "go_backwards": True},
    "lengths backwards": {"lengths": _LENGTHS, "go_backwards": True},
    "initial state, mask": {"init": True, "mask": _MASK},
    "stateful": {"stateful": True},
    "dropout": {"dropout": 0.3},
}


def _step_form_only(m: pytest.MonkeyPatch) -> None:
    """Make the walker choose the step form for a stack (its reference walk, as before the stack
    had a whole-sequence form); every other cell keeps the walker's choice."""
    choose = _walker.sequence_form
    m.setattr(_walker, "sequence_form", lambda cell, steps, mask, rdrop: False if isinstance(
        cell, rk.StackedRNNCells) else choose(cell, steps, mask, rdrop))


def _run(layer: rk.RNN, case: dict[str, Any], dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    """One training pass of ``layer`` (return_state) and its backward from random gradients of
    the output and of every final state: {output, final states, dx, d(initial state), every
    weight's gradient}. A stateful layer runs an inference call first (the state it carries)."""
    Bn, Tn, Fn = _MASK.shape[0], _MASK.shape[1], 3
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((Bn, Tn, Fn)).astype(dtype)
    init = [np.abs(rng.standard_normal((Bn, n))).astype(dtype) for n in layer.cell.state_sizes()]
    if layer.stateful:
        layer.reset_states()
        layer.forward(rng.standard_normal((Bn, Tn, Fn)).astype(dtype), rk.Ctx.inference())
    ctx = rk.Ctx.training(seed=seed)
    if "mask" in case:
        ctx.set_mask(case["mask"])
    if "lengths" in case:
        ctx.set_mask(lengths=case["lengths"])
    given = bool(case.get("init"))
    out = layer.forward([x, *init] if given else x, ctx)
    gs = [rng.standard_normal(o.shape).astype(dtype) for o in out]
    back = layer.backward(gs, ctx)
    got = {"y": out[0], **{f"final{k}": a for k, a in enumerate(out[1:])}}
    dx, *d_init = back if given else [back]
    got["dx"] = dx
    got.update({f"d_init{k}": a for k, a in enumerate(d_init)})
    got.update({f"d_{n}": ctx.grad(layer, n) for n in layer.trainable_names})
    return got


def _compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rtol: float) -> None:
    assert set(got) == set(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        err = float(np.abs(got[name] - w).max() / max(np.abs(w).max(), 1e-300))
        assert err <= rtol, (name, err)


def _both_forms(make: Any, case: dict[str, Any], dtype: str) -> tuple[dict[str, np.ndarray], ...]:
    kw = {k: case[k] for k in ("return_sequences", "go_backwards", "stateful", "dropout") if k in case}
    kw.setdefault("return_sequences", True)
    layer = rk.RNN(make(), return_state=True, seed=4, dtype=dtype, input_dim=3, **kw)
    got = _run(layer, case, dtype)
    with pytest.MonkeyPatch.context() as m:
        _step_form_only(m)
        want = _run(layer, case, dtype)
    return got, want


@pytest.mark.parametrize("make", [_built_in, _mixed], ids=["built-in", "mixed"])
@pytest.mark.parametrize("case", list(_CASES))
def test_whole_sequence_form_equals_step_form(make: Any, case: str) -> None:
    """float64: outputs, every final state (Keras' order), dL/dx, dL/d(initial state) and every
    weight's gradient equal the reference walk of the stack to 1e-12 relative to the largest
    entry (the same arithmetic in another order: products and sums of O(1) terms over 6 steps,
    rounding ~1e-15). The input dropout masks are the same (one seeded ``Ctx`` each)."""
    got, want = _both_forms(make, _CASES[case], "float64")
    _compare(got, want, 1e-12)


def test_whole_sequence_form_equals_step_form_float32() -> None:
    """float32, masked, from given states: the compiled kernels against the NumPy reference
    (other summation orders and fused multiply-adds). Each value is a chain of at most
    3 cells x 6 steps of dot products of at most T*B = 24 terms (the weight gradients' sums);
    at u = 6e-8 per operation that is 24 * 18 * u ~ 3e-5 in the worst case of every rounding
    adding up, 2e-5 relative to the largest entry; the measured error is about 1e-6."""
    got, want = _both_forms(_built_in, _CASES["initial state, mask"], "float32")
    _compare(got, want, 2e-5)


def test_built_in_cells_run_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack of built-in cells runs no reference walk (training and inference, with and
    without a mask); in a stack with a user's cell only that cell's walk is the reference."""
    walked: list[type] = []
    forward, backward = _walker.reference_walk, _walker.reference_walk_back

    def spy_forward(cell: rk.Cell, *a: Any, **kw: Any) -> Any:
        walked.append(type(cell))
        return forward(cell, *a, **kw)

    def spy_backward(cell: rk.Cell, *a: Any, **kw: Any) -> Any:
        walked.append(type(cell))
        return backward(cell, *a, **kw)

    monkeypatch.setattr(_walker, "reference_walk", spy_forward)
    monkeypatch.setattr(_walker, "reference_walk_back", spy_backward)
    for make, reference in ((_built_in, []), (_mixed, [LeakyCell] * 3)):   # (train, back, predict)
        for case in ("sequences", "mask"):
            walked.clear()
            layer = rk.RNN(make(), return_state=True, return_sequences=True, seed=4, dtype="float32",
                           input_dim=3)
            _run(layer, _CASES[case], "float32")
            layer.predict(np.ones((2, 6, 3), np.float32))
            assert walked == reference, (make.__name__, case, walked)


def test_check_cell() -> None:
    """``rnnkit.testing.check_cell``: the step form's gradients against central differences,
    and the whole-sequence form against the step form, unmasked and masked, to 1e-10 (it raises
    beyond). The mixed stack starts from states of 0.5 (its MinGRU cell's state is >= 0)."""
    mixed = rk.StackedRNNCells(_mixed())
    for stack, init in ((rk.StackedRNNCells(_built_in()), None),
                        (mixed, tuple(np.full((3, n), 0.5) for n in mixed.state_sizes()))):
        errors = check_cell(stack, init=init)
        forms = {k: v for k, v in errors.items() if k.startswith("parallel form")}
        assert any(k.startswith("parallel form (masked):") for k in forms)
        assert max(forms.values()) <= 1e-10
