"""ONNX export: :func:`save_onnx` writes a model as an ONNX graph for deployment (onnxruntime,
TensorRT, ...). Needs the ``onnx`` package (``pip install rnnkit[onnx]``) to build the graph;
nothing runs the graph here.

Graph interface::

    inputs   a Sequential / single layer: "input"; a GraphModel: its input nodes' names
             (dtype: the model's float type, or int64 indices where every reader is an Embedding)
             with lengths=True also "lengths" int64 (batch,)  (PyTorch's packed semantics)
             a single recurrent layer or RNNNet with initial_state=True: also its initial state
             parts ("initial_h", "initial_c": (batch, width); an RNNNet's (L*D, batch, width))
    outputs  "output", or "output_0", "output_1", ... (a layer with return_state adds its final
             state parts after its output, in the order rnnkit returns them)

Axes: the batch axis is named "batch" and the time axis "time" ("<input>_time" for each input of
a model with several: each has its own length) (free sizes; also where the
model was built for one length: every exported layer computes the same for any length) unless
``dynamic_batch`` / ``dynamic_time`` is False (the size the model was built with) or an int.
A float64 model gives a float64 graph (valid ONNX; onnxruntime 1.32's CPU recurrent ops run
float32 only). The layers and what they become are listed in :mod:`rnnkit.io._onnx_layers`; the weight
layouts in :mod:`rnnkit._layouts`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rnnkit._atomic import atomic_write_bytes
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer, check_bool
from rnnkit._shape import Shape
from rnnkit._version import __version__
from rnnkit.io import _onnx_scan, _onnx_wrappers  # noqa: F401  (register the Scan passes, Bidirectional, the merges)
from rnnkit.io._interop_errors import MissingDependencyError, refuse_int8
from rnnkit.io._onnx_layers import Graph, carries_lengths, converter
from rnnkit.layers import Embedding, MergeLayer
from rnnkit.models import GraphModel, Sequential
from rnnkit.recurrent import RecurrentLayer
from rnnkit.rnn import RNNNet

#: the opset written by default, and the oldest one the exporter can write
DEFAULT_OPSET = 17
MIN_OPSET = 14


def import_onnx() -> Any:
    """The onnx module, or MissingDependencyError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise MissingDependencyError("ONNX export needs the onnx package, which is not installed; install "
                                     "it with `pip install rnnkit[onnx]` (or `pip install onnx`)") from None
    return onnx


def _axis(flag: bool | int, built: int | None, what: str, sym: str) -> int | str:
    if isinstance(flag, bool):
        if flag:
            return sym
        if built is None:
            raise InvalidParameterError(f"save_onnx: dynamic_{what}=False needs a {what} size the model "
                                        f"was built with, and it has none; pass dynamic_{what}=<int>")
        return int(built)
    if not isinstance(flag, int) or flag < 1:
        raise InvalidParameterError(f"save_onnx: dynamic_{what} must be True, False or an int >= 1, "
                                    f"got {flag!r}")
    return flag


def _dims(shape: Shape, batch: bool | int, time: bool | int, has_time: bool,
          tm_first: bool = False, time_name: str = "time") -> list[Any]:
    """The graph input's dims: batch (and time, when ``has_time``) symbolic or fixed."""
    dims: list[Any] = list(shape.dims)
    b, t = (1, 0) if tm_first else (0, 1)
    dims[b] = _axis(batch, dims[b], "batch", "batch")
    if has_time:   # free even where the model was built for one length: the graph runs any
        dims[t] = _axis(time, dims[t], "time", time_name)
    return dims


def _call(g: Graph, layer: Layer, args: list[str], ranks: list[int]) -> list[str]:
    """Convert one layer call, keeping track of the tensors the lengths describe."""
    g.in_ranks = ranks
    outs = converter(layer)(g, layer, args)
    if g.lengths is not None and carries_lengths(layer, [a in g.masked for a in args[:max(1, len(ranks))]]):
        g.masked.add(outs[0])
    return outs


def _walk(model: Any, g: Graph, in_names: list[str]) -> list[list[str]]:
    """Convert every layer call of ``model``; returns each model output's tensor names. (A node
    of a graph with several outputs per layer picks output ``node.index`` of its inbound node.)"""
    if isinstance(model, Sequential):
        cur = [in_names[0]]
        shapes = [model.input_shapes()[0], *model._out_shapes]
        for layer, shp in zip(model.layers, shapes, strict=False):
            cur = _call(g, layer, cur, [shp.rank])
        return [cur]
    if isinstance(model, GraphModel):
        vals: dict[int, list[str]] = {id(n): [nm] for n, nm in zip(model.inputs, in_names, strict=True)}
        for n in model.nodes:
            if n.layer is None:
                k = getattr(n, "index", None)
                if k is not None:
                    vals[id(n)] = [vals[id(n.inbound[0])][int(k)]]
                continue
            ranks = [int(getattr(p.shape, "rank", 0)) for p in n.inbound]
            if isinstance(n.layer, MergeLayer) or len(n.inbound) > 1:
                args = [vals[id(p)][0] for p in n.inbound]
            else:
                args = vals[id(n.inbound[0])]
            vals[id(n)] = _call(g, n.layer, args, ranks)
        return [vals[id(n)] for n in model.outputs]
    raise AssertionError(model)


def _reads_indices(model: Any, k: int) -> bool:
    """Whether every reader of input ``k`` is an Embedding (the input is then int64)."""
    if isinstance(model, Sequential):
        return isinstance(model.layers[0], Embedding)
    if isinstance(model, GraphModel):
        node = model.inputs[k]
        readers = [n.layer for n in model.nodes if any(p is node for p in n.inbound)]
        return bool(readers) and all(isinstance(r, Embedding) for r in readers)
    return False


def save_onnx(model: Any, path: str | os.PathLike[str], *, opset: int | None = None,
              dynamic_batch: bool | int = True, dynamic_time: bool | int = True, lengths: bool = False,
              initial_state: bool = False) -> None:
    """Write ``model`` (a Sequential, a GraphModel, or one recurrent layer / RNNNet) as an ONNX
    graph to ``path``, atomically; ``onnx.checker`` passes on it before it is written.

    ``opset``: the ONNX opset (default 17, at least 14). ``dynamic_batch`` / ``dynamic_time``:
    leave the batch / time axis free (default), fix it at the size the model was built with
    (False), or at a given int. ``lengths=True`` adds the int64 input ``lengths`` (batch,),
    given to every recurrent op as ``sequence_lens``: the graph then computes what rnnkit does
    under ``ctx.set_mask(lengths=...)`` (outputs past each length zero, the final state at the
    last real step). ``initial_state=True`` (a single recurrent layer or RNNNet) adds its initial
    state parts as inputs. Anything ONNX cannot compute exactly is refused with
    UnsupportedFeatureError naming the layer and what it uses: a custom cell, ``proj_size``,
    a softmax recurrent activation, Keras masking, a stateful layer."""
    onnx = import_onnx()
    from onnx import TensorProto, helper, numpy_helper


    lengths = check_bool(lengths, "lengths", "save_onnx")
    initial_state = check_bool(initial_state, "initial_state", "save_onnx")
    op_max = int(onnx.defs.onnx_opset_version())
    opset = DEFAULT_OPSET if opset is None else opset
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= op_max:
        raise InvalidParameterError(
            f"save_onnx: opset must be an int in [{MIN_OPSET}, {op_max}], got {opset!r}")
    single = isinstance(model, (RecurrentLayer, RNNNet))
    if not (single or isinstance(model, (Sequential, GraphModel))):
        raise InvalidInputError(f"save_onnx: expected a Sequential, a GraphModel, a recurrent layer or an "
                                f"RNNNet, got {type(model).__name__}")
    if initial_state and not single:
        raise InvalidParameterError("save_onnx: initial_state=True applies to a single recurrent layer or "
                                    "RNNNet (a model's layers start from the state their graph gives)")
    if not single and not model.built:
        raise InvalidInputError(f"save_onnx: the model {model.name!r} is not built; build it (or run it "
                                f"once) so its input shape is known")
    if single and not model.built:
        raise InvalidInputError(f"save_onnx: the layer {model.name!r} is not built")
    refuse_int8(_layers(model), "save_onnx")
    dtype = np.dtype(next((lay.dtype for lay in _layers(model)), np.float32))
    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE}[dtype]
    g = Graph(helper, numpy_helper, dtype)
    g.opset = opset
    inputs: list[Any] = []
    if single:
        tm_first = isinstance(model, RNNNet) and not model.config.batch_first
        shp = Shape((None, None, model.in_dim)) if isinstance(model, RNNNet) else model.input_shape
        if tm_first:
            shp = Shape((shp[1], shp[0], shp[2]))
        dims = _dims(shp, dynamic_batch, dynamic_time, True, tm_first)
        inputs.append(helper.make_tensor_value_info("input", elem, dims))
        names = ["input"]
        if initial_state:
            cell = (model._layer(0, 0) if isinstance(model, RNNNet) else model).cell
            for part, size in zip(cell.state_names, cell.state_sizes(), strict=True):
                nm = f"initial_{part}"
                sdims = ([model.config.num_layers * model.directions, dims[1 if tm_first else 0], size]
                         if isinstance(model, RNNNet) else [dims[0], size])
                inputs.append(helper.make_tensor_value_info(nm, elem, sdims))
                names.append(nm)
        batch_dim = dims[1 if tm_first else 0]
    else:
        names = [n.name for n in model.inputs] if isinstance(model, GraphModel) else ["input"]
        batch_dim = None
        for k, (nm, shp) in enumerate(zip(names, model.input_shapes(), strict=True)):
            ints = _reads_indices(model, k)
            dims = _dims(shp, dynamic_batch, dynamic_time, shp.rank >= 3 or (ints and shp.rank == 2),
                         time_name="time" if len(names) == 1 else f"{nm}_time")   # lengths of their own
            batch_dim = dims[0]
            et = TensorProto.INT64 if ints else elem
            inputs.append(helper.make_tensor_value_info(nm, et, dims))
    if lengths:
        inputs.append(helper.make_tensor_value_info("lengths", TensorProto.INT64, [batch_dim]))
        g.lengths = "lengths"
        g.masked.add(names[0])   # the (first) input is the padded sequence
    if single:
        outs = [_call(g, model, names, [3])]
    else:
        outs = _walk(model, g, names)
    flat = [t for o in outs for t in o]
    out_names = ["output"] if len(flat) == 1 else [f"output_{k}" for k in range(len(flat))]
    for t, nm in zip(flat, out_names, strict=True):
        g.nodes.append(helper.make_node("Identity", [t], [nm], name=nm))
    ranks = _output_ranks(model, single)
    outputs = [helper.make_tensor_value_info(nm, elem, [None] * r)
               for nm, r in zip(out_names, ranks, strict=True)]
    graph = helper.make_graph(g.nodes, str(getattr(model, "name", "rnnkit")), inputs, outputs, g.initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="rnnkit", producer_version=_version())
    proto.ir_version = helper.find_min_ir_version_for(list(proto.opset_import))  # the oldest readers
    onnx.checker.check_model(proto)
    atomic_write_bytes(path, proto.SerializeToString())


def _output_ranks(model: Any, single: bool) -> list[int]:
    """The rank of every (flattened) output, from one pass of rnnkit on a small zero input."""
    if single:
        shapes = [Shape((None, None, getattr(model, "in_dim", None) or model.input_shape[2]))]
    else:
        shapes = model.input_shapes()
    xs = [np.zeros([2 if d is None else int(d) for d in s.dims], np.float32) for s in shapes]
    out = model.forward(xs[0] if len(xs) == 1 else xs, Ctx.inference())
    flat: list[Any] = []
    for o in out if isinstance(out, list) else [out]:
        flat.extend(o if isinstance(o, list) else [o])
    return [int(np.ndim(o)) for o in flat]


def _layers(model: Any) -> list[Layer]:
    # a GraphModel's model.layers lists its InputLayers too (Keras' indices): the called ones
    return [model] if isinstance(model, Layer) else list(getattr(model, "called_layers", model.layers))


def _version() -> str:
    return __version__
