"""ONNX converters of the layers that wrap or merge others: ``Bidirectional`` and the elementwise
merges ``Add`` / ``Multiply`` / ``Average``, and the shape layers and wrappers (``Flatten``,
``Reshape``, ``Permute``, ``TimeDistributed``, ``Subtract`` / ``Maximum`` / ``Minimum``, ``Dot``;
``SpatialDropout1D`` and ``GaussianNoise`` are the identity at inference), registered into the
converter table by class name, so they apply wherever rnnkit has those classes.

A Bidirectional whose two directions share the cell class, width, activations and bias option
is ONE ONNX op with ``direction="bidirectional"`` (its backward ``Y`` is already in input order,
reversed within each length, as the layer aligns it); otherwise two ops, ``"forward"`` and
``"reverse"``; a direction whose cell exports as a ``Scan`` (:data:`~rnnkit.io._onnx_layers.SCAN_PASSES`)
is that pass, the backward one's outputs put back into input order (reversed within each length).
States follow the layer: inputs ``[x, *forward_state, *backward_state]``,
outputs ``[output(s), *forward_final, *backward_final]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.io._onnx_layers import (
    CONVERTERS,
    REFUSED,
    SCAN_PASSES,
    Graph,
    _cell_check,
    _rnn_op,
    converter,
    scan_recurrence,
)


def _same_op(f: Any, b: Any) -> bool:
    cf, cb = f.cell, b.cell
    gates = [getattr(getattr(c, "recurrent_activation", None), "name", None) for c in (cf, cb)]
    return (type(cf) is type(cb) and cf.units == cb.units and cf.use_bias == cb.use_bias
            and cf.activation.name == cb.activation.name and gates[0] == gates[1])


def _scans(layer: Any) -> bool:
    return type(layer.cell) in SCAN_PASSES


def bidirectional(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    f, b = layer.forward_layer, layer.backward_layer
    where = layer.name
    kinds = [None if _scans(lay) else _cell_check(lay, where) for lay in (f, b)]
    if f.go_backwards or not b.go_backwards:
        raise UnsupportedFeatureError(where, "go_backwards", "the forward layer must read forwards and "
                                      "the backward layer backwards")
    if f.stateful:
        raise UnsupportedFeatureError(where, "stateful", "a stateful layer carries its state between "
                                      "calls; an ONNX graph starts from the state it is given")
    ops = any(k is not None for k in kinds)   # a direction is an ONNX RNN / LSTM / GRU op
    lens = g.seq_lens(inputs[0], where) if ops else ""
    x_tm = g.one("Transpose", [inputs[0]], where, perm=[1, 0, 2]) if ops else ""
    nf = len(f.cell.state_names)
    init_f, init_b = inputs[1:1 + nf], inputs[1 + nf:]
    zero, one = g.ints("axis0", [0]), g.ints("axis1", [1])
    if None not in kinds and _same_op(f, b):
        init = [g.one("Concat", [g.one("Unsqueeze", [p, zero], where), g.one("Unsqueeze", [q, zero], where)],
                      where, axis=0) for p, q in zip(init_f, init_b, strict=True)]
        outs = _rnn_op(g, [f, b], x_tm, init, "bidirectional", where, str(kinds[0]), lens)
        ys = [g.one("Gather", [outs[0], g.ints(f"dir{d}", [d])], where, axis=1) for d in (0, 1)]
        ys = [g.one("Squeeze", [y, one], where) for y in ys]                    # (T, B, H) each
        states = [[g.one("Squeeze", [g.one("Gather", [s, g.ints(f"dir{d}", [d])], where, axis=0), zero],
                         where) for s in outs[1:]] for d in (0, 1)]
    else:
        ys, states = [], []
        for lay, direction, init, kind in zip((f, b), ("forward", "reverse"), (init_f, init_b), kinds,
                                              strict=True):
            if kind is None:   # a Scan pass (processing order), the backward one put in input order
                y, fin = scan_recurrence(g, lay, inputs[0], init, where)
                ys.append(g.reverse_time(y, where) if lay.go_backwards else y)
                states.append(fin)
                continue
            o = _rnn_op(g, [lay], x_tm, [g.one("Unsqueeze", [p, zero], where) for p in init], direction,
                        f"{where}_{direction}", kind, lens)
            ys.append(g.one("Squeeze", [o[0], one], where))
            states.append([g.one("Squeeze", [s, zero], where) for s in o[1:]])
    if layer.return_sequences:
        yf, yb = (g.one("Transpose", [y], where, perm=[1, 0, 2]) for y in ys)
    else:
        yf, yb = states[0][0], states[1][0]
    mode = layer.merge_mode
    if mode is None:
        out = [yf, yb]
    elif mode == "concat":
        out = [g.one("Concat", [yf, yb], where, axis=-1)]
    elif mode == "sum":
        out = [g.one("Add", [yf, yb], where)]
    elif mode == "mul":
        out = [g.one("Mul", [yf, yb], where)]
    else:   # "ave": (yf + yb) / 2, as the layer computes it
        out = [g.one("Div", [g.one("Add", [yf, yb], where), g.const("two", 2.0)], where)]
    return [*out, *states[0], *states[1]] if layer.return_state else out


def _fold(op: str) -> Any:
    def conv(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
        acc = inputs[0]
        for t in inputs[1:]:      # left to right, as NumPy reduces the stacked inputs
            acc = g.one(op, [acc, t], layer.name)
        return [acc]
    return conv


def average(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    total = _fold("Add")(g, layer, inputs)[0]
    return [g.one("Div", [total, g.const("n", float(len(inputs)))], layer.name)]


CONVERTERS.update({"Bidirectional": bidirectional, "Add": _fold("Add"), "Multiply": _fold("Mul"),
                   "Average": average})


# -- the shape layers and wrappers ----------------------------------------------------------------
def _identity(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """SpatialDropout1D / GaussianNoise: the identity at inference."""
    return [inputs[0]]


def flatten(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    x, rank = inputs[0], g.in_ranks[0]
    if layer.data_format == "channels_first" and rank > 2:
        x = g.one("Transpose", [x], layer.name, perm=[0, *range(2, rank), 1])
    return [g.one("Reshape", [x, g.ints("flat", [0, -1])], layer.name)]


def reshape(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    return [g.one("Reshape", [inputs[0], g.ints(f"{layer.name}_target", [0, *layer.target_shape])],
                  layer.name)]


def permute(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    return [g.one("Transpose", [inputs[0]], layer.name, perm=[0, *layer.dims])]


def time_distributed(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """The wrapped layer's nodes on the steps folded into the batch, (B, T, ...) -> (B*T, ...),
    and the result unfolded (every wrapped layer computes each row alone at inference)."""
    nm, rank = layer.name, g.in_ranks[0]
    rest = [int(d) if d is not None else -1 for d in layer.input_shape[2:]]
    if rest.count(-1):
        raise UnsupportedFeatureError(nm, "input_shape", f"TimeDistributed over steps of free shape "
                                      f"{tuple(layer.input_shape)[2:]}; the export folds the steps into the "
                                      f"batch and needs their shape")
    folded = g.one("Reshape", [inputs[0], g.ints(f"{nm}_fold", [-1, *rest])], nm)
    g.in_ranks = [rank - 1]
    y = converter(layer.layer)(g, layer.layer, [folded])
    if len(y) != 1:
        raise UnsupportedFeatureError(nm, "layer", "the wrapped layer gives several outputs")
    out_rest = [int(d) for d in layer.compute_output_shape(layer.input_shape).dims[2:]]
    bt = g.one("Slice", [g.one("Shape", [inputs[0]], nm), g.ints("zero", [0]), g.ints("two", [2])], nm)
    shape = g.one("Concat", [bt, g.ints(f"{nm}_rest", out_rest)], nm, axis=0) if out_rest else bt
    return [g.one("Reshape", [y[0], shape], nm)]


def dot(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """``Einsum`` over the two axes, sample by sample (after Keras' L2 normalization when the
    layer normalizes: ``x * min(1 / sqrt(sum x**2), 1e7)``)."""
    nm = layer.name
    ra, rb = g.in_ranks[0], g.in_ranks[1]
    a0, a1 = layer._axes_for([(None,) * ra, (None,) * rb])
    xs = list(inputs[:2])
    if layer.normalize:
        for i, (ax, x) in enumerate(((a0, xs[0]), (a1, xs[1]))):
            ss = g.one("ReduceSum", [g.one("Mul", [x, x], nm), g.ints(f"axis{ax}", [ax])], nm, keepdims=1)
            inv = g.one("Min", [g.one("Reciprocal", [g.one("Sqrt", [ss], nm)], nm),
                                g.const(f"{nm}_inv_eps", np.asarray(1.0 / layer.EPSILON))], nm)
            xs[i] = g.one("Mul", [x, inv], nm)
    letters = iter("cdefghijklmnopqrstuvwxyz")
    la = ["b", *(next(letters) for _ in range(ra - 1))]
    lb = ["b", *(next(letters) for _ in range(rb - 1))]
    lb[a1] = la[a0] = "a"
    out = [c for k, c in enumerate(la) if k != a0] + [c for k, c in enumerate(lb) if k not in (0, a1)]
    y = g.one("Einsum", xs, nm, equation=f"{''.join(la)},{''.join(lb)}->{''.join(out)}")
    if len(out) == 1:   # two (B, n): Keras gives (B, 1)
        y = g.one("Unsqueeze", [y, g.ints("axis1", [1])], nm)
    return [y]


CONVERTERS.update({"Flatten": flatten, "Reshape": reshape, "Permute": permute, "SpatialDropout1D": _identity,
                   "GaussianNoise": _identity, "TimeDistributed": time_distributed, "Subtract": _fold("Sub"),
                   "Maximum": _fold("Max"), "Minimum": _fold("Min"), "Dot": dot})
REFUSED["Lambda"] = ("a Lambda layer is Python code, which has no ONNX operators; rnnkit does not "
                     "trace it")
