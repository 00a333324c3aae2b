"""One rnnkit layer -> ONNX nodes: the converter table of :func:`rnnkit.save_onnx`.

A converter ``conv(g, layer, inputs) -> outputs`` appends the nodes computing ``layer`` on the
tensors named ``inputs`` (a recurrent layer: ``[x, *initial_state_parts]``; a merge layer: its
inputs; anything else: one) and returns the names of its outputs (a recurrent layer with
``return_state``: ``[output, *final_state_parts]``). Every converter is exact: a layer or an
option ONNX cannot express raises :class:`~rnnkit.io.UnsupportedFeatureError` naming it.

Adding a layer is one entry in :data:`CONVERTERS` (keyed by class name, so layers from other
modules need no import here); refusing one is one entry in :data:`REFUSED`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._kind import builtin_kind, describe_cell
from rnnkit._layer import Layer
from rnnkit._layouts import ONNX_ACTIVATIONS, ONNX_OP, check_onnx_compatible, onnx_activations, to_onnx
from rnnkit._validate import weight_problem
from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.layers._conv import pads

_INT64_MIN = np.iinfo(np.int64).min


class Graph:
    """The ONNX graph being written: nodes, initializers, and the ``lengths`` input (int64 (B,))
    every recurrent op reads as ``sequence_lens`` when the export has one."""

    def __init__(self, helper: Any, numpy_helper: Any, dtype: np.dtype) -> None:
        self.helper, self.numpy_helper, self.dtype = helper, numpy_helper, dtype
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.lengths: str | None = None
        #: the tensors the lengths describe (the padded input and the sequences made from it)
        self.masked: set[str] = set()
        #: the ranks of the inputs of the layer being converted (set by the model walk)
        self.in_ranks: list[int] = []
        #: the opset being written (the reductions take their axes as an input from opset 18 on)
        self.opset = 17
        self._lengths32: str | None = None
        self._counter = [0]   # shared with the Scan / Loop bodies written inside this graph
        self._ints: dict[tuple[int, ...], str] = {}
        self._scalars: dict[int, str] = {}

    def name(self, hint: str) -> str:
        self._counter[0] += 1
        return f"{hint}__{self._counter[0]}"

    def body(self) -> Graph:
        """A graph for the body of a Scan / Loop written in this one: its own nodes; the names,
        the initializers (the body reads them from the outer scope) and the constants shared."""
        sub = Graph(self.helper, self.numpy_helper, self.dtype)
        sub.initializers, sub._ints, sub._scalars = self.initializers, self._ints, self._scalars
        sub._counter, sub.opset = self._counter, self.opset
        return sub

    def zeros(self, like: str, width: int, hint: str) -> str:
        """Zeros (B, ``width``) of the model's dtype, B the size of axis 1 of ``like`` (T, B, ...)."""
        b = self.one("Slice", [self.one("Shape", [like], hint), self.ints("one", [1]), self.ints("two", [2])],
                     hint)
        shape = self.one("Concat", [b, self.ints(f"width{width}", [width])], hint, axis=0)
        return self.one("ConstantOfShape", [shape], hint,
                        value=self.numpy_helper.from_array(np.zeros((1,), self.dtype)))

    def const(self, hint: str, value: Any, dtype: Any = None) -> str:
        """An initializer holding ``value`` (the model's dtype unless ``dtype``); InvalidInputError
        naming it when a value is NaN or Inf, or becomes Inf in that dtype (a float64 layer's
        1e300 in a float32 graph)."""
        arr, problem = weight_problem(np.asarray(value), np.dtype(self.dtype if dtype is None else dtype))
        if problem is not None:
            raise InvalidInputError(f"save_onnx: {hint}: {problem} (nothing was written)")
        arr = np.ascontiguousarray(arr).reshape(arr.shape)   # (ascontiguousarray makes 0-d 1-d)
        nm = self.name(hint)
        self.initializers.append(self.numpy_helper.from_array(arr, nm))
        return nm

    def ints(self, hint: str, values: list[int]) -> str:
        """An int64 constant (one initializer per distinct value)."""
        key = tuple(int(v) for v in values)
        if key not in self._ints:
            self._ints[key] = self.const(hint, np.asarray(values, np.int64), np.int64)
        return self._ints[key]

    def scalar_int(self, value: int) -> str:
        """An int64 scalar (0-d) constant (one initializer per distinct value)."""
        if value not in self._scalars:
            self._scalars[value] = self.const("scalar", np.asarray(value, np.int64), np.int64)
        return self._scalars[value]

    def op(self, op_type: str, inputs: list[str], hint: str, n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [self.name(f"{hint}_{op_type.lower()}") for _ in range(n_out)]
        self.nodes.append(self.helper.make_node(op_type, inputs, outs, name=outs[0], **attrs))
        return outs

    def one(self, op_type: str, inputs: list[str], hint: str, **attrs: Any) -> str:
        return self.op(op_type, inputs, hint, **attrs)[0]

    def reduce(self, op_type: str, x: str, axes: list[int], hint: str, keepdims: int = 1) -> str:
        """``op_type`` (ReduceMean, ReduceMax, ReduceSum) of ``x`` over ``axes``, written as the
        opset takes the axes (an attribute before opset 18, an input from 18 on)."""
        if self.opset >= 18 or op_type == "ReduceSum":
            return self.one(op_type, [x, self.ints("axes", axes)], hint, keepdims=keepdims)
        return self.one(op_type, [x], hint, axes=axes, keepdims=keepdims)

    def seq_lens(self, x: str, where: str) -> str:
        """The lengths as the int32 ``sequence_lens`` of an ONNX recurrent op reading ``x`` (""
        without lengths). ``x`` must carry them (:data:`masked`): a sequence the lengths do not
        describe (made by a RepeatVector, say) is refused."""
        if self.lengths is None:
            return ""
        self._check_described(x, where)
        if self._lengths32 is None:
            from onnx import TensorProto

            self._lengths32 = self.one("Cast", [self.lengths], "lengths", to=TensorProto.INT32)
        return self._lengths32

    def _check_described(self, x: str, where: str) -> None:
        if x not in self.masked:
            raise UnsupportedFeatureError(where, "lengths", "this layer reads a sequence the lengths "
                                          "do not describe (it comes after a layer that returns no "
                                          "sequence); export without lengths=True")

    def step_mask(self, x: str, x_tm: str, where: str) -> str | None:
        """The (T, B, 1) bool mask of the real steps of ``x_tm`` (T, B, ...), in processing order
        (``step < length``: :meth:`reverse_time` keeps the padding last), or None without
        lengths. ``x``, the tensor ``x_tm`` was made from, must carry the lengths (as in
        :meth:`seq_lens`)."""
        if self.lengths is None:
            return None
        self._check_described(x, where)
        shape = self.one("Shape", [x_tm], where)
        first = self.one("Slice", [shape, self.ints("zero", [0]), self.ints("one", [1])], where)
        T = self.one("Squeeze", [first, self.ints("axis0", [0])], where)
        steps = self.one("Range", [self.scalar_int(0), T, self.scalar_int(1)], where)
        steps = self.one("Unsqueeze", [steps, self.ints("axis1", [1])], where)                    # (T, 1)
        m = self.one("Less", [steps, self.one("Unsqueeze", [self.lengths, self.ints("axis0", [0])], where)],
                     where)                                                                     # (T, B)
        return self.one("Unsqueeze", [m, self.ints("axis2", [2])], where)

    def reverse_time_all(self, t: str, hint: str) -> str:
        """``t`` (T, ...) with the whole time axis reversed (padding and all)."""
        return self.one("Slice", [t, self.ints("start", [-1]), self.ints("end", [_INT64_MIN]),
                                  self.ints("axis", [0]), self.ints("step", [-1])], hint)

    def reverse_time(self, t: str, hint: str) -> str:
        """``t`` (T, B, ...) with the time axis reversed; with lengths, within each length
        (``ReverseSequence``, which leaves the steps past the end where they are)."""
        if self.lengths is not None:
            return self.one("ReverseSequence", [t, self.lengths], hint, batch_axis=1, time_axis=0)
        return self.reverse_time_all(t, hint)


def activation(g: Graph, x: str, fn: Any, hint: str, where: str) -> str:
    """``fn`` (an rnnkit ActivationFn) applied to ``x``."""
    name = fn.name
    if name == "linear":
        return x
    if name == "softmax":
        return g.one("Softmax", [x], hint, axis=int(fn.axis))
    if name not in ONNX_ACTIVATIONS:  # (the catalogue has no other; a guard for later additions)
        raise UnsupportedFeatureError(where, "activation", f"{name!r} has no exact ONNX operator")
    op, alpha, beta = ONNX_ACTIVATIONS[name]
    attrs = {} if alpha is None else {"alpha": alpha, "beta": beta}
    return g.one(op, [x], hint, **attrs)


# -- recurrent ---------------------------------------------------------------------------------
def _cell_check(layer: Any, where: str) -> str:
    if builtin_kind(layer.cell) is None:
        raise UnsupportedFeatureError(where, "cell", f"{describe_cell(layer.cell)} has no ONNX operator; "
                                      f"the cells that export: SimpleRNN, LSTM, GRU, MinGRU, MinLSTM, SLSTM, "
                                      f"MLSTM")
    try:
        return check_onnx_compatible(layer.cell, where)
    except InvalidParameterError as e:
        opt = "proj_size" if "proj_size" in str(e) else "activation"
        raise UnsupportedFeatureError(where, opt, str(e).split(": ", 1)[-1]) from None


def _rnn_op(g: Graph, layers: list[Any], x_tm: str, init: list[str], direction: str, hint: str,
            kind: str, lens: str) -> list[str]:
    """One ONNX RNN/LSTM/GRU op over ``layers`` (one per direction); ``x_tm`` is (T, B, F),
    ``init`` the (D, B, width) initial state parts or [], ``lens`` the sequence_lens or "".
    Returns [Y, Y_h(, Y_c)]."""
    cell = layers[0].cell
    Ws, Rs, Bs = zip(*(to_onnx(lay.cell, {n: lay.weight(n) for n in lay.weight_names}) for lay in layers),
                     strict=True)
    acts: list[str] = []
    alpha: list[float] = []
    beta: list[float] = []
    for lay in layers:
        a, al, be = onnx_activations(lay.cell, hint)
        acts += a
        alpha += al
        beta += be
    ins = [x_tm, g.const(f"{hint}_W", np.stack(Ws)), g.const(f"{hint}_R", np.stack(Rs)),
           "" if Bs[0] is None else g.const(f"{hint}_B", np.stack(Bs)), lens]
    ins += init
    while ins and ins[-1] == "":
        ins.pop()
    attrs: dict[str, Any] = {"hidden_size": int(cell.units), "direction": direction, "activations": acts}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    if kind == "GRU":
        attrs["linear_before_reset"] = int(bool(cell.reset_after))
    return g.op(ONNX_OP[kind], ins, hint, n_out=3 if kind == "LSTM" else 2, **attrs)


#: a cell's pass as ONNX nodes, for a cell no RNN / LSTM / GRU operator computes:
#: ``scan(g, layer, x_tm, init, mask, where) -> (y_tm, final_state_parts)``, with ``x_tm`` the
#: input (T, B, F) in processing order, ``init`` the initial state parts (B, width), ``mask``
#: the (T, B, 1) bool mask of the real steps or None (a masked step carries the state), and
#: ``y_tm`` every step's output (T, B, H); keyed by the exact cell class (a subclass may change
#: the step); registered by :mod:`rnnkit.io._onnx_scan`
ScanPass = Callable[[Graph, Any, str, list[str], "str | None", str], tuple[str, list[str]]]
SCAN_PASSES: dict[type, ScanPass] = {}


def _refuse_stateful(layer: Any, where: str) -> None:
    if layer.stateful:
        raise UnsupportedFeatureError(where, "stateful", "a stateful layer carries its state between "
                                      "calls; an ONNX graph starts from the state it is given")


def scan_recurrence(g: Graph, layer: Any, x: str, init: list[str], where: str) -> tuple[str, list[str]]:
    """A pass of ``layer`` (its cell in :data:`SCAN_PASSES`) over ``x`` (B, T, F) from ``init``
    (the initial state parts, or [] for zeros): (its outputs (T, B, H) in processing order --
    ``go_backwards`` reverses each sequence within its length -- zero past each length, its
    final state parts, carried from the last real step)."""
    _refuse_stateful(layer, where)
    x_tm = g.one("Transpose", [x], where, perm=[1, 0, 2])
    if layer.go_backwards:
        x_tm = g.reverse_time(x_tm, where)
    mask = g.step_mask(x, x_tm, where)
    if not init:
        init = [g.zeros(x_tm, int(n), where) for n in layer.cell.state_sizes()]
    y, finals = SCAN_PASSES[type(layer.cell)](g, layer, x_tm, init, mask, where)
    if mask is not None:
        y = g.one("Where", [mask, y, g.const("zero", np.zeros((), g.dtype))], where)
    return y, finals


def recurrent(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """SimpleRNN / LSTM / GRU: one ONNX op, ``direction="reverse"`` for ``go_backwards`` (its
    outputs put back into rnnkit's processing order). A cell of :data:`SCAN_PASSES`: its pass
    (:func:`scan_recurrence`)."""
    where = layer.name
    if type(layer.cell) in SCAN_PASSES:
        y, finals = scan_recurrence(g, layer, inputs[0], inputs[1:], where)
        y = g.one("Transpose", [y], where, perm=[1, 0, 2]) if layer.return_sequences else finals[0]
        return [y, *finals] if layer.return_state else [y]
    kind = _cell_check(layer, where)
    _refuse_stateful(layer, where)
    lens = g.seq_lens(inputs[0], where)
    x_tm = g.one("Transpose", [inputs[0]], where, perm=[1, 0, 2])
    zero = g.ints("axis0", [0])
    init = [g.one("Unsqueeze", [s, zero], where) for s in inputs[1:]]
    outs = _rnn_op(g, [layer], x_tm, init, "reverse" if layer.go_backwards else "forward", where, kind,
                   lens)
    if layer.return_sequences:
        y = g.one("Squeeze", [outs[0], g.ints("axis1", [1])], where)            # (T, B, H) in input order
        if layer.go_backwards:
            y = g.reverse_time(y, where)                       # rnnkit: processing order
        y = g.one("Transpose", [y], where, perm=[1, 0, 2])
    else:
        y = g.one("Squeeze", [outs[1], zero], where)
    states = [g.one("Squeeze", [s, zero], where) for s in outs[1:]]
    return [y, *states] if layer.return_state else [y]


def rnn_net(g: Graph, net: Any, inputs: list[str]) -> list[str]:
    """An RNNNet: one ONNX op per layer (``direction="bidirectional"`` for two directions, whose
    ``Y`` is in input order as the net's is); PyTorch's h_0 / c_0 and h_n / c_n."""
    where = net.name
    L, D = net.config.num_layers, net.directions
    kind = _cell_check(net._layer(0, 0), where)
    lens = g.seq_lens(inputs[0], where)
    x = inputs[0] if not net.config.batch_first else g.one("Transpose", [inputs[0]], where, perm=[1, 0, 2])
    finals: list[list[str]] = [[] for _ in range(2 if kind == "LSTM" else 1)]
    zero = g.ints("axis0", [0])
    for k in range(L):
        init = [g.one("Slice", [s, g.ints("start", [k * D]), g.ints("end", [(k + 1) * D]), zero], where)
                for s in inputs[1:]]
        layers = [net._layer(k, d) for d in range(D)]
        outs = _rnn_op(g, layers, x, init, "bidirectional" if D == 2 else "forward", f"{where}_l{k}", kind,
                       lens)
        y = g.one("Transpose", [outs[0]], where, perm=[0, 2, 1, 3])       # (T, B, D, H)
        x = g.one("Reshape", [y, g.ints("shape", [0, 0, -1])], where)     # (T, B, D*H)
        for lst, s in zip(finals, outs[1:], strict=True):
            lst.append(s)
    out = g.one("Transpose", [x], where, perm=[1, 0, 2]) if net.config.batch_first else x
    if not net.return_state:
        return [out]
    return [out, *(lst[0] if L == 1 else g.one("Concat", lst, where, axis=0) for lst in finals)]


# -- the other layers --------------------------------------------------------------------------
def dense(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    y = g.one("MatMul", [inputs[0], g.const(f"{layer.name}_kernel", layer.kernel_array())], layer.name)
    if layer.use_bias:
        y = g.one("Add", [y, g.const(f"{layer.name}_bias", layer.weight("bias"))], layer.name)
    return [activation(g, y, layer.activation, layer.name, layer.name)]


def embedding(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    if getattr(layer, "mask_zero", False):
        raise UnsupportedFeatureError(layer.name, "mask_zero", REFUSED["Masking"])
    from onnx import TensorProto

    table = g.const(f"{layer.name}_embeddings", layer.weight("embeddings"))
    # int64 ids pass unchanged; float ids truncate toward zero, as rnnkit's Embedding reads them
    ids = g.one("Cast", [inputs[0]], layer.name, to=TensorProto.INT64)
    return [g.one("Gather", [table, ids], layer.name, axis=0)]


def identity(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """Dropout: the identity at inference."""
    return [inputs[0]]


def repeat_vector(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    x = g.one("Unsqueeze", [inputs[0], g.ints("axis1", [1])], layer.name)
    return [g.one("Tile", [x, g.ints("repeats", [1, int(layer.n), 1])], layer.name)]


def reverse(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    ax = layer.axis + g.in_ranks[0] if layer.axis < 0 else layer.axis
    return [g.one("Slice", [inputs[0], g.ints("start", [-1]), g.ints("end", [_INT64_MIN]),
                            g.ints("axis", [ax]), g.ints("step", [-1])], layer.name)]


def concatenate(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    return [g.one("Concat", inputs, layer.name, axis=int(layer.axis))]


def layer_normalization(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over the layer's axes (elementary
    operators, so every opset from 14 on writes it, whichever axes are normalized)."""
    rank = g.in_ranks[0]
    given = layer.axis if isinstance(layer.axis, list) else [layer.axis]
    axes = sorted(a + rank if a < 0 else a for a in given)
    bshape = [layer.input_shape[a] if a in axes else 1 for a in range(rank)]
    nm, x = layer.name, inputs[0]
    xc = g.one("Sub", [x, g.reduce("ReduceMean", x, axes, nm)], nm)
    var = g.reduce("ReduceMean", g.one("Mul", [xc, xc], nm), axes, nm)
    s = g.one("Sqrt", [g.one("Add", [var, g.const(f"{nm}_epsilon", np.asarray(layer.epsilon))], nm)], nm)
    y = g.one("Div", [xc, s], nm)
    if layer.scale:
        y = g.one("Mul", [y, g.const(f"{nm}_gamma", layer.weight("gamma").reshape(bshape))], nm)
    if layer.center:
        y = g.one("Add", [y, g.const(f"{nm}_beta", layer.weight("beta").reshape(bshape))], nm)
    return [y]


def batch_normalization(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """The inference formula with the moving statistics: ``x * a + b``, ``a = gamma /
    sqrt(moving_variance + epsilon)``, ``b = beta - moving_mean * a`` (computed in float64)."""
    rank = g.in_ranks[0]
    ax = layer.axis + rank if layer.axis < 0 else layer.axis
    bshape = [-1 if k == ax else 1 for k in range(rank)]
    mv = np.asarray(layer.weight("moving_variance"), np.float64)
    a = 1.0 / np.sqrt(mv + layer.epsilon)
    if layer.scale:
        a = a * np.asarray(layer.weight("gamma"), np.float64)
    b = -np.asarray(layer.weight("moving_mean"), np.float64) * a
    if layer.center:
        b = b + np.asarray(layer.weight("beta"), np.float64)
    y = g.one("Mul", [inputs[0], g.const(f"{layer.name}_scale", a.reshape(bshape))], layer.name)
    return [g.one("Add", [y, g.const(f"{layer.name}_offset", b.reshape(bshape))], layer.name)]


def _channels_first(g: Graph, x: str, hint: str) -> str:
    return g.one("Transpose", [x], hint, perm=[0, 2, 1])


def conv1d(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """Conv on (B, C, T) with the padding as explicit ``pads`` (Keras' ``same`` and ``causal`` are
    uneven), the kernel as ONNX's (filters, C / groups, kernel_size)."""
    T = layer.input_shape[1]
    if T is None and layer.padding == "same" and layer.strides > 1:
        raise UnsupportedFeatureError(layer.name, "padding", "padding='same' with strides > 1 pads by the "
                                      "sequence's length, which this graph does not fix; build the model "
                                      "for a known number of steps")
    left, right = pads(T or 1, layer.span, layer.strides, layer.padding)
    w = g.const(f"{layer.name}_kernel", np.transpose(layer.weight("kernel"), (2, 1, 0)))
    ins = [_channels_first(g, inputs[0], layer.name), w]
    if layer.use_bias:
        ins.append(g.const(f"{layer.name}_bias", layer.weight("bias")))
    y = g.one("Conv", ins, layer.name, kernel_shape=[layer.kernel_size], strides=[layer.strides],
              dilations=[layer.dilation_rate], group=layer.groups, pads=[left, right])
    y = _channels_first(g, y, layer.name)
    return [activation(g, y, layer.activation, layer.name, layer.name)]


def pooling1d(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """MaxPool / AveragePool (padding never counted: ``count_include_pad=0``)."""
    T = layer.input_shape[1]
    if T is None and layer.padding == "same" and layer.strides > 1:
        raise UnsupportedFeatureError(layer.name, "padding", "padding='same' with strides > 1 pads by the "
                                      "sequence's length, which this graph does not fix; build the model "
                                      "for a known number of steps")
    left, right = pads(T or 1, layer.pool_size, layer.strides, layer.padding)
    attrs: dict[str, Any] = {"kernel_shape": [layer.pool_size], "strides": [layer.strides],
                             "pads": [left, right]}
    if type(layer).__name__ == "AveragePooling1D":
        attrs["count_include_pad"] = 0
    op = "MaxPool" if type(layer).__name__ == "MaxPooling1D" else "AveragePool"
    y = g.one(op, [_channels_first(g, inputs[0], layer.name)], layer.name, **attrs)
    return [_channels_first(g, y, layer.name)]


def global_pooling1d(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    op = "ReduceMax" if type(layer).__name__ == "GlobalMaxPooling1D" else "ReduceMean"
    return [g.reduce(op, inputs[0], [1], layer.name, keepdims=int(layer.keepdims))]


def zero_padding1d(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    left, right = layer.padding
    return [g.one("Pad", [inputs[0], g.ints("pads", [0, left, 0, 0, right, 0])], layer.name)]


def cropping1d(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    start, end = layer.cropping
    return [g.one("Slice", [inputs[0], g.ints("start", [start]), g.ints("end", [-end if end else 2**62]),
                            g.ints("axis", [1])], layer.name)]


def up_sampling1d(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    x = g.one("Unsqueeze", [inputs[0], g.ints("axis2", [2])], layer.name)              # (B, T, 1, C)
    x = g.one("Tile", [x, g.ints("repeats", [1, 1, int(layer.size), 1])], layer.name)   # (B, T, s, C)
    return [g.one("Reshape", [x, g.ints("shape", [0, -1, int(layer.input_shape[-1])])], layer.name)]


def activation_layer(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    return [activation(g, inputs[0], layer.activation, layer.name, layer.name)]


def score_attention(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """``Attention`` / ``AdditiveAttention`` at inference (no dropout; no masks: a masked input
    is refused by :func:`carries_lengths`): the scores, ``- 1e9`` above the diagonal under a
    causal mask (``Trilu`` of ones), ``Softmax`` over the last axis, ``MatMul`` with the value."""
    q, v = inputs[0], inputs[1]
    k = inputs[2] if len(inputs) > 2 else v
    nm = layer.name
    kind = type(layer).__name__
    if kind == "Attention" and layer.score_mode == "dot":
        s = g.one("MatMul", [q, g.one("Transpose", [k], nm, perm=[0, 2, 1])], nm)
        if layer.use_scale:
            s = g.one("Mul", [s, g.const(f"{nm}_scale", layer.weight("scale"))], nm)
    else:
        a = g.one("Add", [g.one("Unsqueeze", [q, g.ints("axis2", [2])], nm),
                          g.one("Unsqueeze", [k, g.ints("axis1", [1])], nm)], nm)
        if kind == "Attention" and layer.use_scale:
            a = g.one("Mul", [a, g.const(f"{nm}_scale", layer.weight("scale"))], nm)
        u = g.one("Tanh", [a], nm)
        if kind == "AdditiveAttention" and layer.use_scale:
            u = g.one("Mul", [u, g.const(f"{nm}_scale", layer.weight("scale"))], nm)
        s = g.one("ReduceSum", [u, g.ints("axis_last", [-1])], nm, keepdims=0)
        if kind == "Attention":
            c = g.const(f"{nm}_concat_score_weight", layer.weight("concat_score_weight"))
            s = g.one("Mul", [s, c], nm)
    w = g.one("Softmax", [_causal(g, s, nm) if layer.use_causal_mask else s], nm, axis=-1)
    out = g.one("MatMul", [w, v], nm)
    return [out, w] if layer.return_attention_scores else [out]


def _causal(g: Graph, s: str, nm: str) -> str:
    """The scores ``s`` (..., T, S) less 1e9 above the diagonal (``Trilu`` of ones), as rnnkit's
    causal mask takes them away (a probability there is then exactly 0, as rnnkit's)."""
    ones = g.one("ConstantOfShape", [g.one("Shape", [s], nm)], nm,
                 value=g.numpy_helper.from_array(np.ones((1,), g.dtype)))
    above = g.one("Sub", [ones, g.one("Trilu", [ones], nm, upper=0)], nm)
    return g.one("Sub", [s, g.one("Mul", [above, g.const(f"{nm}_shift", np.asarray(1.0e9))], nm)], nm)


def multi_head_attention(g: Graph, layer: Any, inputs: list[str]) -> list[str]:
    """``MultiHeadAttention`` at inference (no dropout; no masks but the causal one): the three
    projections, heads split by ``Reshape`` / ``Transpose``, scaled scores, ``Softmax``, the
    heads joined and the output projection."""
    nm = layer.name
    N, Kd, Vd = layer.num_heads, layer.key_dim, layer.value_dim
    q, v = inputs[0], inputs[1]
    k = inputs[2] if len(inputs) > 2 else v

    def project(part: str, x: str, width: int, perm: list[int]) -> str:
        w = layer.weight(f"{part}_kernel")
        y = g.one("MatMul", [x, g.const(f"{nm}_{part}_kernel", w.reshape(w.shape[0], -1))], nm)
        if layer.use_bias:
            y = g.one("Add", [y, g.const(f"{nm}_{part}_bias", layer.weight(f"{part}_bias").reshape(-1))], nm)
        y = g.one("Reshape", [y, g.ints(f"heads{width}", [0, 0, N, width])], nm)
        return g.one("Transpose", [y], nm, perm=perm)

    qh = g.one("Mul", [project("query", q, Kd, [0, 2, 1, 3]),
                       g.const(f"{nm}_inv_sqrt_key_dim", np.asarray(1.0 / np.sqrt(float(Kd))))], nm)
    s = g.one("MatMul", [qh, project("key", k, Kd, [0, 2, 3, 1])], nm)
    p = g.one("Softmax", [_causal(g, s, nm) if layer.use_causal_mask else s], nm, axis=-1)
    o = g.one("MatMul", [p, project("value", v, Vd, [0, 2, 1, 3])], nm)
    o = g.one("Transpose", [o], nm, perm=[0, 2, 1, 3])
    o = g.one("Reshape", [o, g.ints("joined", [0, 0, N * Vd])], nm)
    wo = layer.weight("attention_output_kernel")
    out = g.one("MatMul", [o, g.const(f"{nm}_output_kernel", wo.reshape(N * Vd, -1))], nm)
    if layer.use_bias:
        out = g.one("Add", [out, g.const(f"{nm}_output_bias", layer.weight("attention_output_bias"))], nm)
    return [out, p] if layer.return_attention_scores else [out]


Converter = Callable[..., list[str]]
#: rnnkit layer class name -> converter (a RecurrentLayer subclass uses "RecurrentLayer")
CONVERTERS: dict[str, Converter] = {
    "RecurrentLayer": recurrent, "RNNNet": rnn_net, "Dense": dense, "Embedding": embedding,
    "Dropout": identity, "RepeatVector": repeat_vector, "Reverse": reverse, "Concatenate": concatenate,
    "ActivationLayer": activation_layer, "LayerNormalization": layer_normalization, "Conv1D": conv1d,
    "BatchNormalization": batch_normalization,
    "MaxPooling1D": pooling1d, "AveragePooling1D": pooling1d, "GlobalAveragePooling1D": global_pooling1d,
    "GlobalMaxPooling1D": global_pooling1d, "ZeroPadding1D": zero_padding1d, "Cropping1D": cropping1d,
    "UpSampling1D": up_sampling1d,
    "Attention": score_attention, "AdditiveAttention": score_attention,
    "MultiHeadAttention": multi_head_attention,
}
#: layers whose outputs' steps are not the input's steps (or are none): padded sequences' lengths
#: do not describe them
RESHAPES_TIME = ("Conv1D", "MaxPooling1D", "AveragePooling1D", "GlobalAveragePooling1D",
                 "GlobalMaxPooling1D", "ZeroPadding1D", "Cropping1D", "UpSampling1D", "Flatten", "Reshape",
                 "Permute", "Dot")
#: layer class name -> why it cannot be exported exactly
REFUSED: dict[str, str] = {
    "Masking": ("Keras masking repeats the previous output at a masked step; ONNX's sequence_lens "
                "zero the outputs there, so no ONNX graph computes it exactly (export with "
                "lengths=True for PyTorch's packed semantics instead)"),
}


def carries_lengths(layer: Layer, masked: list[bool]) -> bool:
    """Whether ``layer``'s first output is still described by the lengths, given which of its
    inputs are (rnnkit's mask rules: sequences keep it, a last state or a RepeatVector drops it;
    a Reverse along time would turn it into a Keras mask, padding first: refused)."""
    if not any(masked):
        return False
    name = type(layer).__name__
    if name == "RepeatVector":
        return False
    if name in RESHAPES_TIME:
        raise UnsupportedFeatureError(layer.name, "lengths", f"a {name} mixes or moves the steps of a "
                                      f"padded sequence, so the lengths no longer describe its output")
    if name in ("Attention", "AdditiveAttention", "MultiHeadAttention"):
        raise UnsupportedFeatureError(layer.name, "lengths", "attention over padded sequences needs "
                                      "their masks, which the exported graph does not compute")
    if name == "Reverse":
        raise UnsupportedFeatureError(layer.name, "lengths", "reversing a padded sequence puts its "
                                      "padding first, which only a Keras mask describes")
    if name == "Concatenate" and getattr(layer, "axis", -1) in (1, -2):   # (B, T, F) joined in time
        raise UnsupportedFeatureError(layer.name, "lengths", "joining padded sequences along time puts "
                                      "padding inside the result, which only a Keras mask describes")
    if len(masked) > 1 and not all(masked):
        raise UnsupportedFeatureError(layer.name, "lengths", "it merges a padded sequence with one the "
                                      "lengths do not describe")
    return bool(getattr(layer, "return_sequences", True))


def converter(layer: Layer) -> Converter:
    """The converter of ``layer`` (by its class or the nearest base class in the table), or
    UnsupportedFeatureError naming the layer."""
    name = type(layer).__name__
    if name in REFUSED:
        raise UnsupportedFeatureError(layer.name, name, REFUSED[name])
    for cls in type(layer).__mro__:
        if cls.__name__ in CONVERTERS:
            return CONVERTERS[cls.__name__]
    raise UnsupportedFeatureError(layer.name, name, f"no ONNX export for layer class {name!r}; exported: "
                                  f"{', '.join(sorted(CONVERTERS))}")
