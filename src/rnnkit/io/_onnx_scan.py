"""ONNX export of the recurrences no RNN / LSTM / GRU operator computes, as a ``Scan`` over their
step, registered into :data:`rnnkit.io._onnx_layers.SCAN_PASSES` by cell class: ``MinGRU`` and
``MinLSTM``, ``SLSTM`` and ``MLSTM``. What reads only the input (every projection) is computed
for all steps in the outer graph; the Scan body holds what reads the state. A masked step
(``lengths``) keeps every state part (``Where`` on the body's outputs).

xLSTM (sLSTM, mLSTM): the body is the cell's recurrent step with its stabilizer ``m``, as
:mod:`rnnkit.recurrent._xlstm` writes it (sLSTM's block-diagonal recurrent matrix as one dense
(H, 4H) matrix whose zeros add nothing; mLSTM's ``qkv_blocksize`` blocks likewise as
block-diagonal (H, H) matrices beside ``kernel``). rnnkit's MLSTM runs a plain pass by its
chunkwise form, which equals the recurrent form to rounding. The sigmoid is ``0.5 + 0.5
tanh(0.5 x)`` as rnnkit's xLSTM computes it (onnxruntime's ``Tanh`` is within ~2 ulps).

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

from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.io._onnx_layers import CONVERTERS, SCAN_PASSES, Graph, activation
from rnnkit.recurrent import MinGRUCell, MinLSTMCell, MLSTMCell, SLSTMCell


def _sigmoid(g: Graph, x: str, hint: str) -> str:
    """``exp(-softplus(-x))`` (module docstring: why not ``Sigmoid``)."""
    return g.one("Exp", [g.one("Neg", [g.one("Softplus", [g.one("Neg", [x], hint)], hint)], hint)], hint)


def _block(g: Graph, k: str, j: int, H: int, hint: str) -> str:
    """Column block ``j`` (width ``H``) of ``k`` (T, B, n*H)."""
    return g.one("Slice", [k, g.ints(f"start{j * H}", [j * H]), g.ints(f"end{(j + 1) * H}", [(j + 1) * H]),
                           g.ints("axis2", [2])], hint)


def scan(g: Graph, hint: str, init: list[str], seqs: list[str], mask: str | None, step: Any) -> list[str]:
    """A ``Scan`` over axis 0 of ``seqs`` (each (T, ...)) from the states ``init``: ``step(body,
    states, slices)`` writes one step into the body graph and returns the new states, which a
    masked step (``mask`` (T, B, 1) bool, or None) replaces by the states before it; the Scan
    returns the final states and, stacked over the steps, state part 0 after each step."""
    helper = g.helper
    elem = helper.np_dtype_to_tensor_dtype(g.dtype)
    body = g.body()
    s_in = [body.name(f"{hint}_state") for _ in init]
    x_in = [body.name(f"{hint}_slice") for _ in seqs]
    new = step(body, s_in, x_in)
    types = [elem] * (len(s_in) + len(x_in))
    if mask is not None:
        m_in = body.name(f"{hint}_mask")
        new = [body.one("Where", [m_in, a, b], hint) for a, b in zip(new, s_in, strict=True)]
        x_in.append(m_in)
        types.append(helper.np_dtype_to_tensor_dtype(np.dtype(bool)))
    y = body.one("Identity", [new[0]], hint)
    graph = helper.make_graph(body.nodes, body.name(f"{hint}_step"),
                              [helper.make_tensor_value_info(n, t, None) for n, t in zip(s_in + x_in, types,
                                                                                          strict=True)],
                              [helper.make_tensor_value_info(n, elem, None) for n in [*new, y]])
    return g.op("Scan", [*init, *seqs, *([] if mask is None else [mask])], hint, n_out=len(init) + 1,
                num_scan_inputs=len(x_in), body=graph)


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

    final, ys = scan(g, where, init[:1], [a, b], None, step)
    return ys, [final]


# -- xLSTM -------------------------------------------------------------------------------------
def _sig_tanh(g: Graph, x: str, hint: str) -> str:
    """``0.5 + 0.5 tanh(0.5 x)``, xLSTM's sigmoid as rnnkit computes it (onnxruntime's ``Tanh``
    is within ~2 ulps)."""
    half = g.const("half", np.asarray(0.5))
    t = g.one("Tanh", [g.one("Mul", [half, x], hint)], hint)
    return g.one("Add", [half, g.one("Mul", [half, t], hint)], hint)


def _log_forget(g: Graph, cell: Any, af: str, hint: str) -> str:
    """log f: ``af`` (``forget_gate="exp"``) or ``-softplus(-af)``."""
    if cell.forget_gate == "exp":
        return af
    return g.one("Neg", [g.one("Softplus", [g.one("Neg", [af], hint)], hint)], hint)


def _stabilized(g: Graph, cell: Any, ai: str, af: str, m_prev: str, hint: str) -> tuple[str, str, str]:
    """(m, i', f') of the stabilized gates: ``m = max(log f + m_prev, ai)``, ``i' = exp(ai - m)``,
    ``f' = exp(log f + m_prev - m)``."""
    lfm = g.one("Add", [_log_forget(g, cell, af, hint), m_prev], hint)
    m = g.one("Max", [lfm, ai], hint)
    ip = g.one("Exp", [g.one("Sub", [ai, m], hint)], hint)
    return m, ip, g.one("Exp", [g.one("Sub", [lfm, m], hint)], hint)


def _cols(g: Graph, t: str, start: int, end: int, hint: str, axis: int = 2) -> str:
    """Entries ``start:end`` of axis ``axis`` of ``t``."""
    bounds = [g.ints(f"start{start}", [start]), g.ints(f"end{end}", [end]), g.ints(f"axis{axis}", [axis])]
    return g.one("Slice", [t, *bounds], hint)


def slstm_pass(g: Graph, layer: Any, x_tm: str, init: list[str], mask: str | None,
               where: str) -> tuple[str, list[str]]:
    """sLSTM (:mod:`rnnkit.recurrent._xlstm`): ``x W + b`` for every step in the outer graph; the
    body adds ``h R`` (R's per-head blocks as one block-diagonal (H, 4H) matrix: the zeros add
    nothing) and computes the stabilized step."""
    cell = layer.cell
    H, nh, dh = int(cell.units), int(cell.num_heads), int(cell.head_size)
    R = layer.weight("recurrent_kernel")
    dense = np.zeros((H, 4 * H), R.dtype)
    for k in range(nh):
        for j in range(4):
            dense[k * dh:(k + 1) * dh, j * H + k * dh:j * H + (k + 1) * dh] = R[k][:, j * dh:(j + 1) * dh]
    xw = g.one("MatMul", [x_tm, g.const(f"{where}_kernel", layer.weight("kernel"))], where)
    xw = g.one("Add", [xw, g.const(f"{where}_bias", layer.weight("bias").reshape(-1))], where)
    rd = g.const(f"{where}_recurrent_kernel", dense)

    def step(b: Graph, states: list[str], slices: list[str]) -> list[str]:
        h, c, n, m = states
        a = b.one("Add", [slices[0], b.one("MatMul", [h, rd], where)], where)
        ai, af, az, ao = (_cols(b, a, j * H, (j + 1) * H, where, axis=1) for j in range(4))
        m_new, ip, fp = _stabilized(b, cell, ai, af, m, where)
        z = b.one("Tanh", [az], where)
        c_new = b.one("Add", [b.one("Mul", [fp, c], where), b.one("Mul", [ip, z], where)], where)
        n_new = b.one("Add", [b.one("Mul", [fp, n], where), ip], where)
        h_new = b.one("Mul", [_sig_tanh(b, ao, where), b.one("Div", [c_new, n_new], where)], where)
        return [h_new, c_new, n_new, m_new]

    outs = scan(g, where, init, [xw], mask, step)
    return outs[-1], outs[:-1]


def mlstm_pass(g: Graph, layer: Any, x_tm: str, init: list[str], mask: str | None,
               where: str) -> tuple[str, list[str]]:
    """mLSTM (:mod:`rnnkit.recurrent._xlstm`), by its recurrent form: the projections
    ``[q | k | v | o | i | f]`` of every step in the outer graph (``qkv_blocksize``: the blocks
    as block-diagonal (H, H) matrices beside ``kernel``), the body the stabilized update of
    ``C``, ``n``, ``m`` and ``h``."""
    cell = layer.cell
    H, nh, dh = int(cell.units), int(cell.num_heads), int(cell.head_size)
    W = layer.weight("kernel")
    s = cell.qkv_blocksize
    if s is not None:
        blocks = layer.weight("qkv_kernel")
        qkv = np.zeros((3, H, H), W.dtype)
        for j in range(H // s):
            qkv[:, j * s:(j + 1) * s, j * s:(j + 1) * s] = blocks[:, j]
        W = np.concatenate([qkv[0], qkv[1], qkv[2], W], axis=1)
    p = g.one("MatMul", [x_tm, g.const(f"{where}_kernel", W)], where)
    p = g.one("Add", [p, g.const(f"{where}_bias", layer.weight("bias").reshape(-1))], where)
    heads = g.ints(f"heads{nh}x{dh}", [0, 0, nh, dh])
    q, k, v = (g.one("Reshape", [_cols(g, p, j * H, (j + 1) * H, where), heads], where) for j in range(3))
    k = g.one("Mul", [k, g.const(f"{where}_key_scale", np.asarray(1.0 / np.sqrt(float(dh))))], where)
    ao = _cols(g, p, 3 * H, 4 * H, where)
    ai, af = _cols(g, p, 4 * H, 4 * H + nh, where), _cols(g, p, 4 * H + nh, 4 * H + 2 * nh, where)

    def step(b: Graph, states: list[str], slices: list[str]) -> list[str]:
        _, C, n, m = states
        qt, kt, vt, ot, it, ft = slices                    # (B, nh, dh) x3, (B, H), (B, nh) x2
        m_new, ip, fp = _stabilized(b, cell, it, ft, m, where)
        ax3, ax23 = b.ints("axis_last", [-1]), b.ints("axes23", [2, 3])
        C4 = b.one("Reshape", [C, b.ints(f"matrix{nh}x{dh}", [0, nh, dh, dh])], where)
        vk = b.one("Mul", [b.one("Unsqueeze", [vt, ax3], where),
                           b.one("Unsqueeze", [kt, b.ints("axis2", [2])], where)], where)    # (B, nh, dh, dh)
        C_new = b.one("Add", [b.one("Mul", [b.one("Unsqueeze", [fp, ax23], where), C4], where),
                              b.one("Mul", [b.one("Unsqueeze", [ip, ax23], where), vk], where)], where)
        n3 = b.one("Reshape", [n, b.ints(f"vectors{nh}x{dh}", [0, nh, dh])], where)
        n_new = b.one("Add", [b.one("Mul", [b.one("Unsqueeze", [fp, ax3], where), n3], where),
                              b.one("Mul", [b.one("Unsqueeze", [ip, ax3], where), kt], where)], where)
        num = b.one("MatMul", [C_new, b.one("Unsqueeze", [qt, ax3], where)], where)
        num = b.one("Squeeze", [num, ax3], where)                                           # (B, nh, dh)
        dot = b.one("ReduceSum", [b.one("Mul", [n_new, qt], where), ax3], where, keepdims=0)      # (B, nh)
        floor = b.one("Exp", [b.one("Neg", [m_new], where)], where)
        den = b.one("Max", [b.one("Abs", [dot], where), floor], where)
        ht = b.one("Div", [num, b.one("Unsqueeze", [den, ax3], where)], where)
        flat = b.ints("flat", [0, -1])
        h_new = b.one("Mul", [_sig_tanh(b, ot, where), b.one("Reshape", [ht, flat], where)], where)
        new = [h_new, b.one("Reshape", [C_new, flat], where), b.one("Reshape", [n_new, flat], where), m_new]
        return new

    outs = scan(g, where, init, [q, k, v, ao, ai, af], mask, step)
    return outs[-1], outs[:-1]


SCAN_PASSES.update({MinGRUCell: min_pass, MinLSTMCell: min_pass, SLSTMCell: slstm_pass,
                    MLSTMCell: mlstm_pass})


# -- ConvLSTM ------------------------------------------------------------------------------------
def conv_lstm(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """``ConvLSTM1D`` / ``ConvLSTM2D``: the input convolution of every step as one ``Conv`` over
    the steps folded into the batch (channels first inside the graph), and a ``Scan`` whose body
    adds the recurrent ``Conv`` (strides 1, ``same``) and computes the LSTM step. The layer's
    rules (Keras'): ``go_backwards`` reverses the whole time axis, the lengths' mask with it; a
    masked step keeps ``h`` and ``c``; under ``return_sequences`` with lengths the masked steps'
    outputs are zeros; the last output is the final ``h``. The state starts at zeros (a model
    graph gives a ConvLSTM no initial state); ``return_state`` adds the final ``h``, ``c``."""
    where = layer.name
    if layer.stateful:
        raise UnsupportedFeatureError(where, "stateful", "a stateful layer carries its state between "
                                      "calls; an ONNX graph starts from the state it is given")
    r, F = int(layer.rank), int(layer.filters)
    conv, rconv = layer._geometry()
    C = int(layer.input_shape[-1])
    out = [int(n) for n in conv.out]
    x = inputs[0]
    x_tm = g.one("Transpose", [x], where, perm=[1, 0, r + 2, *range(2, r + 2)])          # (T, B, C, *S)
    if layer.go_backwards:   # the whole time axis (Keras' rule), the padding first under lengths
        x_tm = g.reverse_time_all(x_tm, where)
    tb = g.one("Slice", [g.one("Shape", [x_tm], where), g.ints("zero", [0]), g.ints("two", [2])], where)
    spatial = [int(n) for n in layer.input_shape.dims[2:2 + r]]
    frames = g.one("Reshape", [x_tm, g.ints(f"{where}_frames", [-1, C, *spatial])], where)
    kern = np.transpose(layer.weight("kernel"), (r + 1, r, *range(r)))               # (4F, C, *k)
    ins = [frames, g.const(f"{where}_kernel", kern)]
    if layer.use_bias:
        ins.append(g.const(f"{where}_bias", layer.weight("bias")))
    lo, hi = zip(*conv.pads, strict=True)
    xw = g.one("Conv", ins, where, kernel_shape=list(layer.kernel_size), strides=list(layer.strides),
               dilations=list(layer.dilation_rate), pads=[*lo, *hi])                  # (T*B, 4F, *O)
    xw = g.one("Reshape", [xw, g.one("Concat", [tb, g.ints(f"{where}_gates", [4 * F, *out])], where, axis=0)],
               where)                                                                  # (T, B, 4F, *O)
    mask = None
    if g.lengths is not None:
        steps = g.step_mask(x, x_tm, where)                                            # (T, B, 1): t < length
        assert steps is not None
        if layer.go_backwards:
            steps = g.reverse_time_all(steps, where)                           # the mask reversed with x
        mask = g.one("Unsqueeze", [steps, g.ints(f"axes_spatial{r}", list(range(3, 3 + r)))], where)
    zshape = g.one("Concat", [g.one("Slice", [tb, g.ints("one", [1]), g.ints("two", [2])], where),
                              g.ints(f"{where}_state", [F, *out])], where, axis=0)
    zero = g.one("ConstantOfShape", [zshape], where, value=g.numpy_helper.from_array(np.zeros((1,), g.dtype)))
    U = g.const(f"{where}_recurrent_kernel",
                np.transpose(layer.weight("recurrent_kernel"), (r + 1, r, *range(r))))   # (4F, F, *k)
    rlo, rhi = zip(*rconv.pads, strict=True)

    def step(b: Graph, states: list[str], slices: list[str]) -> list[str]:
        h, c = states
        z = b.one("Add", [slices[0], b.one("Conv", [h, U], where, kernel_shape=list(layer.kernel_size),
                                           pads=[*rlo, *rhi])], where)
        i, f, cand, o = (_cols(b, z, j * F, (j + 1) * F, where, axis=1) for j in range(4))
        ra = layer.recurrent_activation
        i, f, o = (activation(b, t, ra, where, where) for t in (i, f, o))
        cand = activation(b, cand, layer.activation, where, where)
        c_new = b.one("Add", [b.one("Mul", [f, c], where), b.one("Mul", [i, cand], where)], where)
        return [b.one("Mul", [o, activation(b, c_new, layer.activation, where, where)], where), c_new]

    h_f, c_f, ys = scan(g, where, [zero, zero], [xw], mask, step)
    to_cl = [0, *range(2, r + 2), 1]                                           # (B, F, *O) -> (B, *O, F)
    states = [g.one("Transpose", [s], where, perm=to_cl) for s in (h_f, c_f)]
    if layer.return_sequences:
        if mask is not None:
            ys = g.one("Where", [mask, ys, g.const("zero", np.zeros((), g.dtype))], where)
        y = g.one("Transpose", [ys], where, perm=[1, 0, *range(3, r + 3), 2])          # (B, T, *O, F)
    else:
        y = states[0]
    return [y, *states] if layer.return_state else [y]


CONVERTERS["ConvLSTM"] = conv_lstm
