"""ONNX export of the recurrences no RNN / LSTM / GRU operator computes, as a ``Scan`` over their
step, registered into :data:`rnnkit.io._onnx_layers.SCAN_PASSES` by cell class: ``MinGRU`` and
``MinLSTM``.

minGRU / minLSTM. Their gates read the input only, so every step's gates are computed for the
whole sequence at once in the outer graph (one ``MatMul``), and the ``Scan`` body is the linear
recurrence alone, ``h_t = a_t * h_{t-1} + b_t`` (two nodes)::

    minGRU:  u = k_z                                    minLSTM:  u = softplus(-k_f) - softplus(-k_i)
    a = sigmoid(-u) (= 1 - z),   b = sigmoid(u) * g(k_h),   g(x) = x + 0.5 (x >= 0), sigmoid(x) (x < 0)

A masked step (``lengths``) is ``a = 1``, ``b = 0``, which carries the state exactly. The
recurrence is the step form, not rnnkit's log-space scan of the whole sequence: ONNX has
``CumSum`` but no cumulative log-sum-exp, and a log-sum-exp by ``CumSum`` of ``exp(x - max)``
with one shift for all steps underflows to ``log 0`` once the steps' terms span more than
float32's ~87 nats (a long sequence with gates near 0), where the step form loses nothing: each
step is a convex blend of the state and a positive term, so its rounding error stays at a few
ulps per step, relative. ``sigmoid(x)`` is written ``exp(-softplus(-x))``, as rnnkit computes
it: onnxruntime's ``Sigmoid`` is an approximation (measured: up to ~5000 ulps off for
``-8 < x < 0``), its ``Softplus`` and ``Exp`` are within a few ulps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.io._onnx_layers import SCAN_PASSES, Graph
from rnnkit.recurrent import MinGRUCell, MinLSTMCell


def _sigmoid(g: Graph, x: str, hint: str) -> str:
    """``exp(-softplus(-x))`` (module docstring: why not ``Sigmoid``)."""
    return g.one("Exp", [g.one("Neg", [g.one("Softplus", [g.one("Neg", [x], hint)], hint)], hint)], hint)


def _block(g: Graph, k: str, j: int, H: int, hint: str) -> str:
    """Column block ``j`` (width ``H``) of ``k`` (T, B, n*H)."""
    return g.one("Slice", [k, g.ints(f"start{j * H}", [j * H]), g.ints(f"end{(j + 1) * H}", [(j + 1) * H]),
                           g.ints("axis2", [2])], hint)


def scan(g: Graph, hint: str, init: list[str], seqs: list[str], step: Any) -> list[str]:
    """A ``Scan`` over axis 0 of ``seqs`` (each (T, ...)) from the states ``init``: ``step(body,
    states, slices) -> new_states`` writes one step into the body graph; the Scan returns the
    final states and, stacked over the steps, state part 0 after each step."""
    helper = g.helper
    elem = helper.np_dtype_to_tensor_dtype(g.dtype)
    body = g.body()
    s_in = [body.name(f"{hint}_state") for _ in init]
    x_in = [body.name(f"{hint}_slice") for _ in seqs]
    new = step(body, s_in, x_in)
    y = body.one("Identity", [new[0]], hint)
    graph = helper.make_graph(body.nodes, body.name(f"{hint}_step"),
                              [helper.make_tensor_value_info(n, elem, None) for n in s_in + x_in],
                              [helper.make_tensor_value_info(n, elem, None) for n in [*new, y]])
    return g.op("Scan", [*init, *seqs], hint, n_out=len(init) + 1, num_scan_inputs=len(seqs), body=graph)


def min_pass(g: Graph, layer: Any, x_tm: str, init: list[str], mask: str | None,
             where: str) -> tuple[str, list[str]]:
    """MinGRU / MinLSTM (module docstring)."""
    cell = layer.cell
    H = int(cell.units)
    k = g.one("MatMul", [x_tm, g.const(f"{where}_kernel", layer.weight("kernel"))], where)
    k = g.one("Add", [k, g.const(f"{where}_bias", layer.weight("bias"))], where)
    if isinstance(cell, MinLSTMCell):
        sp = [g.one("Softplus", [g.one("Neg", [_block(g, k, j, H, where)], where)], where) for j in (0, 1)]
        u = g.one("Sub", sp, where)
        v = _block(g, k, 2, H, where)
    else:
        u, v = _block(g, k, 0, H, where), _block(g, k, 1, H, where)
    zero = g.const("zero", np.zeros((), g.dtype))
    gv = g.one("Where", [g.one("GreaterOrEqual", [v, zero], where),
                         g.one("Add", [v, g.const("half", np.asarray(0.5))], where),
                         _sigmoid(g, g.one("Min", [v, zero], where), where)], where)
    a = _sigmoid(g, g.one("Neg", [u], where), where)
    b = g.one("Mul", [_sigmoid(g, u, where), gv], where)
    if mask is not None:   # a masked step carries the state: h = 1 * h + 0
        a = g.one("Where", [mask, a, g.const("one", np.ones((), g.dtype))], where)
        b = g.one("Where", [mask, b, zero], where)

    def step(body: Graph, states: list[str], slices: list[str]) -> list[str]:
        return [body.one("Add", [body.one("Mul", [slices[0], states[0]], where), slices[1]], where)]

    final, ys = scan(g, where, init[:1], [a, b], step)
    return ys, [final]


SCAN_PASSES.update({MinGRUCell: min_pass, MinLSTMCell: min_pass})
