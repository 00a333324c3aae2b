"""The layer checker: one call proves a layer's contract with numbers.

For anyone writing a layer or a :class:`~rnnkit.Cell` (no private module needed)::

    from rnnkit.testing import check_layer

    report = check_layer(lambda dtype: rk.RecurrentLayer(MyCell(4), seed=3, dtype=dtype),
                         lambda rng: rng.standard_normal((2, 5, 3)))

``check_layer(make_layer, make_input, *, seed=0, rtol=1e-6, eps=1e-6, ...)`` runs, in order:

1. **build** — ``make_layer("float64")`` (built or not; an unbuilt layer is built with
   ``forward_mut``); the output shape must be accepted by ``compute_output_shape`` of the
   input's free-batch shape when the layer implements it.
2. **forward / backward** — a training pass with a random upstream gradient ``G`` (standard
   normal, the output's shape), so the loss is ``L = sum(y * G)``; ``backward(G)`` must return
   an input gradient of the input's shape and put a gradient of every weight's shape into the
   Ctx; the training and inference outputs agree to 1e-12 (relative).
3. **gradcheck** — float64 central differences ``(L(p + eps) - L(p - eps)) / (2 eps)`` of the
   input (unless ``input_grad=False``) and of EVERY trainable weight, entry by entry; each weight
   is perturbed through ``set_weight`` (the only way weights change) and restored. The error of
   one array is ``max|analytic - numeric| / max(max|numeric|, max|analytic|, 1e-30)`` and must
   be ``<= rtol``.
4. **unchanged** — every weight is bit-identical (same bytes) before and after forward+backward.
5. **sums** — two forward passes on two different inputs (``make_input`` of another seed) and
   their two backward passes, with two different upstream gradients, in one Ctx store the sum
   of the two passes' gradients (each computed in a Ctx of its own) to 1e-12 relative.
6. **no forward** — ``backward`` on a fresh training Ctx, and after an inference pass, raises
   ``ForwardPassNotRunError`` whose ``.layer`` is the layer's name.
7. **fast vs reference** — the output, input gradient and weight gradients of the default
   (compiled, where a kernel takes the layer) path equal those of
   ``rnnkit.kernels.use("reference")`` to 1e-10 relative (:func:`assert_fast_matches_reference`).
8. **threads** — ``threads`` threads run forward+backward on the one layer at once, each on its
   own input and Ctx; every output and gradient equals the serial result exactly.
9. **float32** — ``make_layer("float32")`` gives float32 outputs within ``float32_atol`` of the
   float64 layer (one seed draws the same weights in both dtypes).
10. **round trip** — the weights are first replaced by fresh random values, then copied with
    ``set_weight`` into a fresh ``make_layer`` layer built for the same shape, and saved with
    :func:`rnnkit.io.save_layer_weights` and loaded into another; ``predict`` is then identical
    in both (and differed before the copy, so the check can fail).

Each step is also a function of its own: :func:`gradcheck`, :func:`assert_gradcheck`,
:func:`snapshot`, :func:`assert_unchanged`, :func:`assert_fast_matches_reference`,
:func:`assert_round_trip`, :func:`assert_thread_safe`. A failed check raises ``AssertionError``
saying what differed (also under ``python -O``: nothing here is a bare ``assert``).

``make_layer(dtype)`` must be deterministic: two calls give the same weights (use a seed).
The layer's pass must be deterministic too (training output == inference output); a layer
with pass randomness (Dropout) uses the single functions with a seeded ``Ctx`` instead.
``make_input(rng)`` returns the input array (float64 values; indices for an Embedding, then
pass ``input_grad=False``), or for a layer of several inputs (``Attention``) the list of its
input arrays: the input gradient is then checked per input (``"input0"``, ``"input1"``, ...).
Keep shapes small: the gradcheck costs two forward passes per scalar of the input and of every
weight.

For a :class:`~rnnkit.Cell`, :func:`check_cell` checks its forms against each other: the reference
step (:meth:`~rnnkit.Cell.step` / ``step_back``) against float64 central differences of itself,
and the compiled step (:attr:`~rnnkit.Cell.compiled_step`) and the parallel form
(:meth:`~rnnkit.Cell.sequence_forward` / ``sequence_backward``), where the cell has them, against
the reference step, on random float64 inputs, weights, initial states and gradients.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit._arrays import as_real_array
from rnnkit._ctx import Ctx
from rnnkit._errors import ForwardPassNotRunError, InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer
from rnnkit._numbers import show
from rnnkit._shape import Shape
from rnnkit.io import load_layer_weights, save_layer_weights
from rnnkit.recurrent._cell import Cell
from rnnkit.recurrent._layers import RecurrentLayer
from rnnkit.recurrent._walker import (
    WalkCache,
    has_sequence_form,
    reference_walk,
    reference_walk_back,
    sequence_walk,
    sequence_walk_back,
    step_walk,
    walk_back,
)

MakeLayer = Callable[[str], Any]
MakeInput = Callable[[np.random.Generator], np.ndarray]
#: (output, dL/dx or None, {weight name: dL/dw})
Grads = tuple[np.ndarray, "np.ndarray | None", dict[str, np.ndarray]]
#: weight name -> (dtype, shape, bytes)
Snapshot = dict[str, tuple[str, tuple[int, ...], bytes]]


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)


def _layer_arg(layer: Any, where: str) -> Layer:
    """``layer`` itself when it is an rnnkit :class:`~rnnkit.Layer`; InvalidParameterError naming
    ``where`` and what was given otherwise (every helper here that takes a layer checks it)."""
    if not isinstance(layer, Layer):
        raise InvalidParameterError(f"testing.{where}: layer must be an rnnkit Layer, got {show(layer)} "
                                    f"({type(layer).__name__})")
    return layer


def _made(layer: Any, where: str) -> Layer:
    """What ``make_layer`` returned, when it is a Layer; InvalidParameterError otherwise."""
    if not isinstance(layer, Layer):
        raise InvalidParameterError(f"testing.{where}: make_layer must return an rnnkit Layer, got "
                                    f"{show(layer)} ({type(layer).__name__})")
    return layer


def _who(layer: Any) -> str:
    """How messages name a layer: ``layer 'lstm' (LSTM)``."""
    return f"layer {getattr(layer, 'name', '?')!r} ({type(layer).__name__})"


def rel_err(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """``max|a - n| / max(max|n|, max|a|, 1e-30)``: the error scaled by the array's magnitude."""
    a = as_real_array(analytic, "analytic", "testing.rel_err").astype(np.float64)
    n = as_real_array(numeric, "numeric", "testing.rel_err").astype(np.float64)
    if a.shape != n.shape:
        raise InvalidInputError(f"testing.rel_err: analytic and numeric must have one shape, got analytic "
                                f"{a.shape} and numeric {n.shape}")
    if a.size == 0:
        return 0.0
    scale = max(float(np.max(np.abs(n))), float(np.max(np.abs(a))), 1e-30)
    return float(np.max(np.abs(a - n))) / scale


def _copy(x: Any) -> Any:
    """A copy of an array, or of each array of a list (a layer of several inputs)."""
    return [np.array(a) for a in x] if isinstance(x, list) else np.array(x)


def _free_batch(x: Any) -> Any:
    """The build shape of input ``x`` (batch free); a list of them for a list of inputs."""
    if isinstance(x, list):
        return [Shape.with_free_batch(np.shape(a)) for a in x]
    return Shape.with_free_batch(np.shape(x))


def _loss(layer: Any, x: np.ndarray, G: np.ndarray) -> float:
    return float(np.sum(np.asarray(layer.forward(x, Ctx.inference()), np.float64) * G))


def analytic_grads(layer: Any, x: np.ndarray, G: np.ndarray) -> Grads:
    """One training pass: (output, dL/dx or None, {weight name: dL/dw}) for ``L = sum(y * G)``
    (every trainable weight; a recurrent layer's cell may declare weights that do not train)."""
    _layer_arg(layer, "analytic_grads")
    ctx = Ctx.training()
    y = layer.forward(x, ctx)
    dx = layer.backward(G, ctx)
    names = getattr(layer, "trainable_names", layer.weight_names)
    grads = {n: np.array(ctx.grad(layer, n)) for n in names}
    return np.array(y), (None if dx is None else _copy(dx)), grads


def numeric_grad(layer: Any, x: np.ndarray, G: np.ndarray, wrt: str, eps: float = 1e-6) -> np.ndarray:
    """Central differences of ``L = sum(forward(x) * G)`` w.r.t. ``"input"`` or a weight name
    (the weight is restored afterwards, also when a pass raises); ``"input3"`` is the input of
    index 3 of a layer of several inputs."""
    _layer_arg(layer, "numeric_grad")
    if not isinstance(wrt, str):
        raise InvalidParameterError(f"testing.numeric_grad: wrt must be 'input', 'input<k>' or a weight name "
                                    f"(a str), got {show(wrt)} ({type(wrt).__name__})")
    if wrt.startswith("input") and wrt != "input":
        if not (wrt[5:].isascii() and wrt[5:].isdigit() and isinstance(x, list) and int(wrt[5:]) < len(x)):
            raise InvalidParameterError(f"testing.numeric_grad: wrt {show(wrt)} must name an input "
                                        f"'input<k>' with k below the number of inputs (a list of "
                                        f"{len(x) if isinstance(x, list) else 'no'} arrays given)")
        k = int(wrt[5:])
        xs = [np.array(a, np.float64, copy=True) for a in x]
        xp = xs[k]
        out = np.empty_like(xp)
        for i in np.ndindex(xp.shape):
            v = xp[i]
            xp[i] = v + eps
            lp = _loss(layer, xs, G)  # type: ignore[arg-type]
            xp[i] = v - eps
            lm = _loss(layer, xs, G)  # type: ignore[arg-type]
            xp[i] = v
            out[i] = (lp - lm) / (2 * eps)
        return out
    if wrt == "input":
        xp = np.array(x, np.float64, copy=True)
        out = np.empty_like(xp)
        for i in np.ndindex(xp.shape):
            v = xp[i]
            xp[i] = v + eps
            lp = _loss(layer, xp, G)
            xp[i] = v - eps
            lm = _loss(layer, xp, G)
            xp[i] = v
            out[i] = (lp - lm) / (2 * eps)
        return out
    w0 = np.array(layer.weight(wrt), copy=True)
    w = w0.copy()
    out = np.empty(w.shape, np.float64)
    try:
        for i in np.ndindex(w.shape):
            v = w[i]
            w[i] = v + eps
            layer.set_weight(wrt, w)
            lp = _loss(layer, x, G)
            w[i] = v - eps
            layer.set_weight(wrt, w)
            lm = _loss(layer, x, G)
            w[i] = v
            out[i] = (lp - lm) / (2 * eps)
    finally:
        layer.set_weight(wrt, w0)
    return out


def gradcheck(
    layer: Any, x: np.ndarray, *, G: np.ndarray | None = None, seed: int = 0, eps: float = 1e-6,
    wrt: list[str] | None = None, input_grad: bool = True,
) -> dict[str, float]:
    """Relative errors (see :func:`rel_err`) of the analytic gradients against float64 central
    differences, keyed ``"input"`` and by weight name. ``layer`` must be float64 and built.
    ``G`` defaults to a standard-normal draw from ``seed``; given, it must have the output's
    shape (InvalidInputError otherwise). ``wrt`` limits the checked names."""
    _layer_arg(layer, "gradcheck")
    _require(layer.dtype == np.float64, f"gradcheck needs a float64 layer, got {layer.dtype}")
    y = layer.forward(x, Ctx.inference())
    if G is None:
        G = np.random.default_rng(seed + 7919).standard_normal(y.shape)
    else:
        G = as_real_array(G, "G", "testing.gradcheck")
        if G.shape != np.shape(y):
            raise InvalidInputError(f"testing.gradcheck: G must have the output's shape {np.shape(y)}, "
                                    f"got {G.shape}")
    _, dx, grads = analytic_grads(layer, x, G)
    ins = [f"input{k}" for k in range(len(x))] if isinstance(x, list) else ["input"]
    names = wrt if wrt is not None else (ins if input_grad else []) + list(grads)
    if not isinstance(names, list) or not all(isinstance(n, str) and n in ins + list(grads) for n in names):
        raise InvalidParameterError(f"testing.gradcheck: wrt must be None or a list of names among "
                                    f"{ins + list(grads)}, got {show(wrt)}")
    errs: dict[str, float] = {}
    for name in names:
        if name.startswith("input"):
            ana = dx if name == "input" or dx is None else dx[int(name[5:])]
        else:
            ana = grads[name]
        _require(ana is not None, f"{_who(layer)}: backward returned no input gradient")
        num = numeric_grad(layer, x, G, name, eps)
        shape = np.asarray(ana).shape
        _require(shape == num.shape, f"{_who(layer)}: the gradient of {name} has shape {shape}, the numeric "
                 f"one {num.shape}")
        errs[name] = rel_err(np.asarray(ana), num)
    return errs


def assert_gradcheck(layer: Any, x: np.ndarray, *, rtol: float = 1e-6, **kw: Any) -> dict[str, float]:
    """:func:`gradcheck`, failing when any relative error exceeds ``rtol``; returns the errors."""
    errs = gradcheck(layer, x, **kw)
    bad = {k: v for k, v in errs.items() if not v <= rtol}
    _require(not bad, f"{_who(layer)}: gradient relative errors above {rtol}: {bad} (all: {errs})")
    return errs


def snapshot(layer: Any) -> Snapshot:
    """The bytes (plus dtype and shape) of every weight, for :func:`assert_unchanged`."""
    _layer_arg(layer, "snapshot")
    return {e.name: (str(e.value.dtype), e.value.shape, e.value.tobytes()) for e in layer.weights()}


def assert_unchanged(layer: Any, before: Snapshot, what: str = "forward+backward") -> None:
    """Every weight is bit-identical to ``before`` (a :func:`snapshot`)."""
    if not isinstance(before, dict):
        raise InvalidParameterError(f"testing.assert_unchanged: before must be a snapshot (a dict from "
                                    f"snapshot(layer)), got {type(before).__name__}")
    after = snapshot(layer)
    _require(list(after) == list(before), f"weight names changed: {list(before)} -> {list(after)}")
    changed = [n for n in before if before[n] != after[n]]
    _require(not changed, f"{_who(layer)}: weights {changed} changed during {what}")


def assert_fast_matches_reference(layer: Any, x: np.ndarray, G: np.ndarray, rtol: float = 1e-10) -> None:
    """The default path (a compiled kernel, where one takes the layer) and the NumPy reference
    (``kernels.use("reference")``) give the same output, input gradient and weight gradients,
    within ``rtol`` relative (see :func:`rel_err`)."""
    _layer_arg(layer, "assert_fast_matches_reference")
    fast = analytic_grads(layer, x, G)
    with kernels.use("reference"):
        ref = analytic_grads(layer, x, G)
    pairs: list[tuple[str, Any, Any]] = [("output", fast[0], ref[0])]
    if isinstance(fast[1], list):
        pairs += [(f"input gradient {k}", a, b) for k, (a, b) in enumerate(zip(fast[1], ref[1], strict=True))]
    elif fast[1] is not None:
        pairs.append(("input gradient", fast[1], ref[1]))
    pairs += [(f"gradient of {n}", fast[2][n], ref[2][n]) for n in ref[2]]
    for what, a, b in pairs:
        _require(np.shape(a) == np.shape(b), f"{_who(layer)}: fast vs reference {what}: shape "
                 f"{np.shape(a)} vs {np.shape(b)}")
        err = rel_err(a, b)
        _require(err <= rtol, f"{_who(layer)}: fast vs reference {what}: relative error {err} > {rtol}")


def assert_round_trip(make_layer: MakeLayer, layer: Any, x: np.ndarray, seed: int = 0) -> None:
    """Randomise ``layer``'s weights, copy them into a fresh ``make_layer`` layer with
    ``set_weight`` and, through a weights file (:func:`rnnkit.io.save_layer_weights` /
    :func:`~rnnkit.io.load_layer_weights`), into another; both must ``predict`` exactly what
    ``layer`` does (and the fresh layer must differ before the copy, so the check can fail)."""
    _layer_arg(layer, "assert_round_trip")
    if not callable(make_layer):
        raise InvalidParameterError(f"testing.assert_round_trip: make_layer must be a callable dtype -> "
                                    f"Layer, got {type(make_layer).__name__}")
    rng = np.random.default_rng(seed + 104729)
    for e in layer.weights():
        layer.set_weight(e.name, rng.uniform(-0.5, 0.5, e.value.shape))
    fresh = _made(make_layer(layer.dtype.name), "assert_round_trip")
    loaded = _made(make_layer(layer.dtype.name), "assert_round_trip")
    for other in (fresh, loaded):
        if not other.built:
            other.build(_free_batch(x) if isinstance(x, list) else layer.input_shape)
    ref = layer.predict(x)
    if layer.weights():
        _require(not np.array_equal(fresh.predict(x), ref), "round trip check cannot fail: same weights")
    for e in layer.weights():
        fresh.set_weight(e.name, e.value)
    names = [e.name for e in layer.weights()]
    _require([e.name for e in fresh.weights()] == names, f"weight names differ: {names}")
    np.testing.assert_array_equal(fresh.predict(x), ref, err_msg="after set_weight")
    if names:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "layer.safetensors")
            save_layer_weights(layer, path)
            load_layer_weights(loaded, path)
        np.testing.assert_array_equal(loaded.predict(x), ref, err_msg="after save/load_layer_weights")


def assert_thread_safe(layer: Any, xs: list[np.ndarray], seed: int = 0) -> None:
    """Run forward+backward on ``layer`` from ``len(xs)`` threads at once (several rounds);
    every output, input gradient and weight gradient equals the serial result exactly."""
    _layer_arg(layer, "assert_thread_safe")
    if not isinstance(xs, list) or not xs:
        raise InvalidParameterError(f"testing.assert_thread_safe: xs must be a non-empty list of inputs (one "
                                    f"per thread), got {show(xs)} ({type(xs).__name__})")
    rng = np.random.default_rng(seed + 15485863)
    Gs = [rng.standard_normal(layer.predict(x).shape) for x in xs]
    serial = [analytic_grads(layer, x, G) for x, G in zip(xs, Gs, strict=True)]
    rounds = 5
    results: list[list[Any]] = [[None] * rounds for _ in xs]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(xs))

    def worker(k: int) -> None:
        try:
            barrier.wait()
            for r in range(rounds):
                results[k][r] = analytic_grads(layer, xs[k], Gs[k])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _require(not errors, f"a thread raised: {errors[0]!r}" if errors else "")
    for k, (y, dx, grads) in enumerate(serial):
        for r in range(rounds):
            ty, tdx, tgrads = results[k][r]
            np.testing.assert_array_equal(ty, y, err_msg=f"thread {k} round {r}: output")
            for a, b in zip(tdx if isinstance(dx, list) else [tdx], dx if isinstance(dx, list) else [dx],
                            strict=True):
                if b is not None:
                    np.testing.assert_array_equal(a, b, err_msg=f"thread {k} round {r}: input grad")
            for n in grads:
                np.testing.assert_array_equal(tgrads[n], grads[n], err_msg=f"thread {k}: grad {n}")


@dataclass
class LayerReport:
    """What :func:`check_layer` measured."""

    output_shape: tuple[int, ...]
    grad_errors: dict[str, float] = field(default_factory=dict)
    float32_max_abs: float = 0.0


def _check_pass(layer: Any, x: np.ndarray, y_inf: np.ndarray, G: np.ndarray, input_grad: bool) -> Grads:
    """Steps 2 and 4: a training pass, its shapes and its agreement with inference."""
    before = snapshot(layer)
    y, dx, grads = analytic_grads(layer, x, G)
    assert_unchanged(layer, before)
    _require(y.dtype == np.float64, f"float64 layer gave {y.dtype} outputs")
    np.testing.assert_allclose(y, y_inf, rtol=1e-12, atol=1e-12)
    if input_grad and isinstance(x, list):
        _require(isinstance(dx, list) and [np.shape(d) for d in dx] == [a.shape for a in x],
                 f"input grads {[np.shape(d) for d in dx] if isinstance(dx, list) else dx} vs "
                 f"{[a.shape for a in x]}")
    elif input_grad:
        _require(dx is not None and dx.shape == x.shape,
                 f"input grad {getattr(dx, 'shape', None)} vs {x.shape}")
    for e in layer.weights():
        if e.name in grads:
            _require(grads[e.name].shape == e.value.shape, f"grad {e.name}: {grads[e.name].shape}")
    return y, dx, grads


def _check_sums_and_no_forward(layer: Any, x: np.ndarray, G: np.ndarray,
                               grads: dict[str, np.ndarray], x2: np.ndarray, seed: int) -> None:
    """Steps 5 and 6 (``x2``: a second input of ``x``'s shape and dtype)."""
    G2 = np.random.default_rng(seed + 104729).standard_normal(layer.predict(x2).shape)
    _, _, grads2 = analytic_grads(layer, x2, G2)
    ctx = Ctx.training()
    layer.forward(x, ctx)
    layer.forward(x2, ctx)
    layer.backward(G2, ctx)
    layer.backward(G, ctx)
    for n, g in grads.items():
        np.testing.assert_allclose(ctx.grad(layer, n), g + grads2[n], rtol=1e-12, atol=1e-300,
                                   err_msg=f"{_who(layer)}: grad {n} summed over two passes")
    for c in (Ctx.training(), Ctx.inference()):
        if not c.is_training:
            layer.forward(x, c)
        try:
            layer.backward(G, c)
        except ForwardPassNotRunError as err:
            _require(err.layer == layer.name, f"{err.layer!r} != {layer.name!r}")
        else:
            raise AssertionError(f"{_who(layer)}: backward without a recorded forward did not raise")


def _like(value: Any, x: Any) -> Any:
    """``value`` (another draw of ``make_input``) in the dtype of ``x`` (each array of a list)."""
    if isinstance(x, list):
        return [np.asarray(a, b.dtype) for a, b in zip(value, x, strict=True)]
    return np.asarray(value, x.dtype)


def check_layer(
    make_layer: MakeLayer, make_input: MakeInput, *, seed: int = 0, rtol: float = 1e-6,
    eps: float = 1e-6, input_grad: bool = True, threads: int = 2, check_float32: bool = True,
    float32_atol: float = 1e-4, round_trip: bool = True, fast_vs_reference: bool = True,
) -> LayerReport:
    """Run the whole contract (see the module docstring) and return the measured numbers."""
    for what, f in (("make_layer", make_layer), ("make_input", make_input)):
        if not callable(f):
            raise InvalidParameterError(f"testing.check_layer: {what} must be a callable, got {show(f)} "
                                        f"({type(f).__name__})")
    rng = np.random.default_rng(seed)
    x = make_input(rng)
    if isinstance(x, list):
        x = [np.asarray(a, np.float64) for a in x]
    elif input_grad:
        x = np.asarray(x, np.float64)
    layer = _made(make_layer("float64"), "check_layer")
    if not layer.built and isinstance(x, list):                            # 1. build
        layer.build(_free_batch(x))
    elif not layer.built:
        layer.forward_mut(x, Ctx.inference())
    _require(layer.built, f"{_who(layer)} is not built after forward_mut")
    y_inf = layer.predict(x)
    try:
        out_shape = layer.compute_output_shape(_free_batch(x))
    except NotImplementedError:
        out_shape = None
    if out_shape is not None:
        _require(Shape.of(out_shape).accepts(y_inf.shape), f"output {y_inf.shape} vs {out_shape}")
    G = np.random.default_rng(seed + 7919).standard_normal(y_inf.shape)
    _, _, grads = _check_pass(layer, x, y_inf, G, input_grad)              # 2., 4.
    before = snapshot(layer)
    errs = assert_gradcheck(layer, x, rtol=rtol, G=G, eps=eps, input_grad=input_grad)   # 3.
    assert_unchanged(layer, before, "the gradcheck")
    xs = [x] + [_like(make_input(np.random.default_rng(seed + k)), x) for k in range(1, max(threads, 2))]
    _check_sums_and_no_forward(layer, x, G, grads, xs[1], seed)            # 5., 6.
    if fast_vs_reference:                                                  # 7.
        assert_fast_matches_reference(layer, x, G)
    if threads > 1:                                                        # 8.
        assert_thread_safe(layer, xs[:threads], seed)
    f32_err = 0.0
    if check_float32:                                                      # 9.
        l32 = _made(make_layer("float32"), "check_layer")
        if not l32.built and isinstance(x, list):
            l32.build(_free_batch(x))
        elif not l32.built:
            l32.forward_mut(x, Ctx.inference())
        y32 = l32.predict(x)
        _require(y32.dtype == np.float32, f"float32 layer gave {y32.dtype} outputs")
        f32_err = float(np.max(np.abs(y32 - y_inf))) if y32.size else 0.0
        _require(f32_err <= float32_atol, f"float32 vs float64 output: max abs {f32_err}")
    if round_trip:                                                         # 10. (replaces the weights)
        assert_round_trip(make_layer, layer, x, seed)
    return LayerReport(tuple(y_inf.shape), errs, f32_err)


#: what one form of a cell gives for one pass: {name: array} (``y``, ``final0``..., ``dx``,
#: ``d_init0``..., ``d_<weight>``)
_Pass = dict[str, np.ndarray]


def _cell_pass(cell: Cell, w: dict[str, np.ndarray], x_tm: np.ndarray, init: tuple[np.ndarray, ...],
               G: np.ndarray, d_final: tuple[np.ndarray, ...], form: str,
               mask: np.ndarray | None = None) -> _Pass:
    """One recorded pass and its backward by ``form``: ``"reference"`` (the step form in NumPy),
    ``"compiled"`` (the compiled step) or ``"sequence"`` (the parallel form)."""
    cache: WalkCache | None
    if form == "sequence":
        seq, final, cache = sequence_walk(cell, w, x_tm, init, True, True, mask)
        assert cache is not None
        dx, grads, d_init = sequence_walk_back(cell, w, cache, G, True, d_final)
    elif form == "reference":
        seq, final, cache = reference_walk(cell, w, x_tm, init, True, True, mask)
        assert cache is not None
        dx, grads, d_init = reference_walk_back(cell, w, cache, G, True, d_final)
    else:
        with kernels.use("fast"):
            seq, final, cache = step_walk(cell, w, x_tm, init, True, True, mask)
            assert cache is not None
            dx, grads, d_init = walk_back(cell, w, cache, G, True, d_final)
    assert seq is not None and dx is not None
    out = {"y": np.array(seq), "dx": np.array(dx)}
    out.update({f"final{k}": np.array(a) for k, a in enumerate(final)})
    out.update({f"d_init{k}": np.array(a) for k, a in enumerate(d_init)})
    out.update({f"d_{n}": np.array(g) for n, g in grads.items()})
    return out


def _cell_loss(cell: Cell, w: dict[str, np.ndarray], x_tm: np.ndarray, init: tuple[np.ndarray, ...],
               G: np.ndarray, d_final: tuple[np.ndarray, ...]) -> float:
    seq, final, _ = reference_walk(cell, w, x_tm, init, False, True)
    assert seq is not None
    tail = sum(np.sum(f * d) for f, d in zip(final, d_final, strict=True))
    return float(np.sum(seq * G.transpose(1, 0, 2)) + tail)


def _compare(who: str, what: str, got: _Pass, want: _Pass, rtol: float, errs: dict[str, float]) -> None:
    _require(set(got) == set(want),
             f"check_cell({who}): {what} gives the results {sorted(got)}, the reference step {sorted(want)}")
    for name in want:
        _require(got[name].shape == want[name].shape,
                 f"check_cell({who}): {what}: {name} has shape {got[name].shape}, the reference step's "
                 f"{want[name].shape}")
        err = rel_err(got[name], want[name])
        errs[f"{what}:{name}"] = err
        _require(err <= rtol, f"check_cell({who}): {what} differs from the reference step in {name}: "
                 f"relative error {err:.3g} > rtol {rtol:g} (max |got - reference| / max |.|)")


def check_cell(cell: Cell, *, input_dim: int = 3, batch: int = 3, steps: int = 5, seed: int = 0,
               rtol: float = 1e-10, grad_rtol: float = 1e-6, eps: float = 1e-6,
               init: tuple[np.ndarray, ...] | None = None) -> dict[str, float]:
    """Check a cell's forms against each other in float64; return ``{check: error}``.

    Weights: the cell's initialisers (``seed``) plus standard normal noise times 0.3 (so zero
    biases are not zero); input ``x`` (``batch``, ``steps``, ``input_dim``), an initial state,
    the upstream gradient ``G`` of every step's output and the gradient of the final state parts:
    standard normal; ``init``, when given, is the initial state instead (one (``batch``, size)
    array per part: for a cell whose :meth:`~rnnkit.Cell.check_init` refuses some states, such
    as a min cell's negative ``h``). The loss is ``L = sum(y * G) + sum(final * d_final)``.

    1. **reference gradients** — the reference step's backward (:meth:`~rnnkit.Cell.step_back`
       walked by the reference walker) against central differences of its forward, for the
       input, the initial state and every trainable parameter; error as :func:`rel_err`, at most
       ``grad_rtol`` (``eps``: the step; float64 truncation ~eps^2 and rounding ~1e-16/eps give
       about 1e-8 to 1e-10).
    2. **compiled step** — where the cell's compiled step runs it (:func:`rnnkit.kernels.find`),
       outputs, final states, dL/dx, dL/d(initial state) and every gradient equal the reference
       step's to ``rtol``, without and with a mask (row 0 of the batch one step short).
    3. **parallel form** — where the cell has one, the same comparison for
       :meth:`~rnnkit.Cell.sequence_forward` / ``sequence_backward``; also with the mask of 2.
       for a cell whose parallel form takes one (:attr:`~rnnkit.Cell.sequence_takes_mask`).

    A failure raises ``AssertionError`` naming the form, the quantity and the error; a ``cell``
    that is not a :class:`~rnnkit.Cell`, InvalidParameterError."""
    if not isinstance(cell, Cell):
        raise InvalidParameterError(f"testing.check_cell: cell must be an rnnkit Cell, got {show(cell)} "
                                    f"({type(cell).__name__})")
    who = type(cell).__name__
    rng = np.random.default_rng(seed)
    layer = RecurrentLayer(cell, return_sequences=True, seed=seed, dtype="float64", input_dim=input_dim)
    trainable = {p.name for p in cell.params(input_dim) if p.trainable}
    w = {n: np.array(layer.weight(n), np.float64) for n in layer.weight_names}
    for n in trainable:
        w[n] = w[n] + 0.3 * rng.standard_normal(w[n].shape)
    x_tm = rng.standard_normal((steps, batch, input_dim))
    drawn = tuple(rng.standard_normal((batch, k)) for k in cell.state_sizes())
    init = drawn if init is None else tuple(np.array(a, np.float64) for a in init)
    cell.check_init(init, f"check_cell({who})")
    G = rng.standard_normal((batch, steps, cell.output_size))
    d_final = tuple(rng.standard_normal((batch, k)) for k in cell.state_sizes())
    errs: dict[str, float] = {}
    ref = _cell_pass(cell, w, x_tm, init, G, d_final, "reference")
    # 1. the reference backward against central differences of the reference forward
    wrt: list[tuple[str, np.ndarray]] = [("dx", x_tm), *((f"d_init{k}", a) for k, a in enumerate(init)),
                                         *((f"d_{n}", w[n]) for n in sorted(trainable))]
    for name, arr in wrt:
        _require(name in ref, f"check_cell({who}): the reference step gives no gradient {name}")
        num = np.zeros(arr.shape)
        for i in np.ndindex(arr.shape):
            old = arr[i]
            arr[i] = old + eps
            up = _cell_loss(cell, w, x_tm, init, G, d_final)
            arr[i] = old - eps
            down = _cell_loss(cell, w, x_tm, init, G, d_final)
            arr[i] = old
            num[i] = (up - down) / (2 * eps)
        _require(ref[name].shape == num.shape, f"check_cell({who}): the reference step's {name} has shape "
                 f"{ref[name].shape}, central differences {num.shape}")
        err = rel_err(ref[name], num)
        errs[f"gradcheck:{name}"] = err
        _require(err <= grad_rtol, f"check_cell({who}): the reference step's {name} differs from central "
                 f"differences of its forward: relative error {err:.3g} > grad_rtol {grad_rtol:g}")
    # 2. the compiled step against the reference step
    with kernels.use("fast"):
        compiled = kernels.find_options(cell) is not None
    mask = np.ones((steps, batch), bool)
    mask[steps - 1, 0] = False
    ref_m = _cell_pass(cell, w, x_tm, init, G, d_final, "reference", mask)
    if compiled:
        got = _cell_pass(cell, w, x_tm, init, G, d_final, "compiled")
        _compare(who, "compiled step", got, ref, rtol, errs)
        _compare(who, "compiled step (masked)", _cell_pass(cell, w, x_tm, init, G, d_final, "compiled", mask),
                 ref_m, rtol, errs)
    # 3. the parallel form against the reference step
    if has_sequence_form(cell):
        got = _cell_pass(cell, w, x_tm, init, G, d_final, "sequence")
        _compare(who, "parallel form", got, ref, rtol, errs)
        if cell.sequence_takes_mask:
            got_m = _cell_pass(cell, w, x_tm, init, G, d_final, "sequence", mask)
            _compare(who, "parallel form (masked)", got_m, ref_m, rtol, errs)
    return errs


__all__ = ["Grads", "LayerReport", "MakeInput", "MakeLayer", "Snapshot", "analytic_grads",
           "assert_fast_matches_reference", "assert_gradcheck", "assert_round_trip",
           "assert_thread_safe", "assert_unchanged", "check_cell", "check_layer", "gradcheck", "numeric_grad",
           "rel_err", "snapshot"]
