"""A GraphModel as a Keras 3 ``Functional`` config (for :func:`rnnkit.save_keras`).

Each rnnkit layer becomes one Keras layer named after its first node (a shared layer gets one
inbound node per call); each input node an ``InputLayer`` of its name. The pattern
:func:`rnnkit.load_keras` builds from a Keras ``Bidirectional`` (a forward recurrent node, a
``go_backwards`` one of the same class reading the same node, a ``Reverse(1)`` of it when the
sequences are returned, and a ``Concatenate(-1)`` of the two, nothing else reading them) is
written back as that Bidirectional, named after the concatenation node.
"""

from __future__ import annotations

from typing import Any

from rnnkit._layer import Layer
from rnnkit.io._keras_entries import Vars, bidirectional_entry, call_kwargs, keras_layer, shape_list
from rnnkit.io._keras_graph import inbound
from rnnkit.io._keras_h5 import unique_groups
from rnnkit.layers import Concatenate, MergeLayer, Reverse
from rnnkit.models._graph_order import keras_layer_order
from rnnkit.models._node import Node
from rnnkit.recurrent import RecurrentLayer


def _readers(model: Any) -> dict[int, int]:
    count: dict[int, int] = {}
    for n in model.nodes:
        for p in n.inbound:
            count[id(p)] = count.get(id(p), 0) + 1
    for n in model.outputs:
        count[id(n)] = count.get(id(n), 0) + 1
    return count


def _calls(model: Any) -> dict[int, int]:
    """How many nodes call each layer (by ``id``)."""
    count: dict[int, int] = {}
    for n in model.nodes:
        if n.layer is not None:
            count[id(n.layer)] = count.get(id(n.layer), 0) + 1
    return count


def _bidirectional(n: Any, readers: dict[int, int],
                   calls: dict[int, int]) -> tuple[Any, Any, Any, list[Any]] | None:
    """``(input node, forward layer, backward layer, absorbed nodes)`` when concatenation node
    ``n`` closes the Bidirectional pattern, else None."""
    if not isinstance(n.layer, Concatenate) or len(n.inbound) != 2:
        return None
    fwd, b = n.inbound
    rev = None
    if isinstance(b.layer, Reverse):
        rev, b = b, b.inbound[0]
    ok = (isinstance(fwd.layer, RecurrentLayer) and isinstance(b.layer, RecurrentLayer)
          and type(fwd.layer) is type(b.layer) and not fwd.layer.go_backwards and b.layer.go_backwards
          and fwd.inbound[0] is b.inbound[0] and fwd.layer.return_sequences == b.layer.return_sequences
          and (rev is not None) == fwd.layer.return_sequences
          and n.layer.axis in (-1, n.shape.rank - 1))
    if rev is not None:
        ok = ok and rev.layer.axis in (1, -rev.shape.rank + 1)
    absorbed = [fwd, b] + ([rev] if rev is not None else [])
    shared = sum(calls.get(id(lay), 0) for lay in {id(a.layer): a.layer for a in absorbed}.values())
    if not ok or shared != len(absorbed) or any(readers.get(id(a), 0) != 1 for a in absorbed):
        return None
    return fwd.inbound[0], fwd.layer, b.layer, absorbed


def functional_config(model: Any) -> tuple[dict[str, Any], list[tuple[str, Vars]]]:
    """``(config.json, [(h5 group, vars)])`` of a GraphModel. A node that picks output ``k`` of
    a layer with several (``return_state``) refers to Keras' tensor ``k`` of that call; a
    recurrent node with inputs ``[x, *states]`` is a call with ``initial_state``."""
    readers = _readers(model)
    calls = _calls(model)
    bidi: dict[int, tuple[Any, Any, Any]] = {}
    skip: set[int] = set()
    for n in model.nodes:
        found = None if n.layer is None else _bidirectional(n, readers, calls)
        if found is not None:
            bidi[id(n)] = found[:3]
            skip.update(id(a) for a in found[3])
    dtype = model.called_layers[0].dtype.name if model.called_layers else "float32"
    entries: list[dict[str, Any]] = []
    listed: set[int] = set()                  # id() of every entry in entries
    vars_all: list[tuple[str, Vars]] = []
    ref: dict[int, list[Any]] = {}            # node -> [keras layer name, node index, 0]
    by_layer: dict[int, dict[str, Any]] = {}  # rnnkit layer -> its Keras entry
    states_ok = all(hasattr(n, "index") for n in model.nodes)   # nodes can pick one of several outputs
    for n in model.nodes:
        if id(n) in skip:
            continue
        k = getattr(n, "index", None)
        if n.layer is None and k is not None:         # output k of its inbound node's layer
            parent = ref[id(n.inbound[0])]
            ref[id(n)] = [parent[0], parent[1], int(k)]
            continue
        if n.layer is None:
            entries.append({"module": "keras.layers", "class_name": "InputLayer", "name": n.name,
                            "registered_name": None, "inbound_nodes": [],
                            "config": {"batch_shape": list(n.shape.dims), "sparse": False,
                                       "dtype": getattr(n, "dtype", None) or dtype, "name": n.name}})
            vars_all.append(("InputLayer", [("vars", n.name, [])]))
            ref[id(n)] = [n.name, 0, 0]
            continue
        if id(n) in bidi:
            src, f, b = bidi[id(n)]
            inbound = [src]
            entry, vars_ = bidirectional_entry(n.name, f, b, shape_list(src.shape))
        elif id(n.layer) in by_layer:       # a shared layer's next call
            entry = by_layer[id(n.layer)]
            inbound = list(n.inbound)
            vars_ = []
        else:
            inbound = list(n.inbound)
            shp = shape_list([p.shape for p in inbound]) if len(inbound) > 1 else shape_list(inbound[0].shape)
            entry, vars_ = keras_layer(n.layer, n.name, shp if len(inbound) == 1 or not states_ok
                                       or isinstance(n.layer, MergeLayer) else shape_list(inbound[0].shape),
                                       states_ok)
            by_layer[id(n.layer)] = entry
        if not vars_ and id(entry) in listed:
            ref[id(n)] = [entry["name"], len(entry["inbound_nodes"]), 0]
        else:
            entry["name"] = entry["config"]["name"]
            entry["inbound_nodes"] = []
            entries.append(entry)
            listed.add(id(entry))
            vars_all.append((entry["class_name"], vars_))
            ref[id(n)] = [entry["name"], 0, 0]
        tensors = [_tensor(p, ref[id(p)], dtype) for p in inbound]
        if len(tensors) > 1 and not isinstance(n.layer, MergeLayer):   # [x, *initial_state]
            call: dict[str, Any] = {"args": [tensors[0]], "kwargs": {"initial_state": tensors[1:]}}
        else:
            # Keras' MultiHeadAttention takes query, value (and key) as arguments, not one list
            spread = type(n.layer).__name__ == "MultiHeadAttention"
            call = {"args": tensors if spread else [tensors if len(tensors) > 1 else tensors[0]],
                    "kwargs": call_kwargs(n.layer)}
        entry["inbound_nodes"].append(call)
    ins = [ref[id(n)] for n in model.inputs]
    outs = [ref[id(n)] for n in model.outputs]
    # Keras reads a layer's weights from the group its class and position in ITS model.layers
    # order give (lstm, lstm_1, ...), so the groups follow the order Keras lists these layers in
    order = keras_order(entries, outs)
    placed = set(order)
    order += [i for i in range(len(entries)) if i not in placed]
    group_of = dict(zip(order, unique_groups([vars_all[i][0] for i in order]), strict=True))
    groups = [group_of[i] for i in range(len(entries))]
    cfg = {"module": "keras.src.models.functional", "class_name": "Functional",
           "registered_name": "Functional",
           "config": {"name": model.name, "trainable": True, "layers": entries,
                      "input_layers": ins if len(ins) > 1 else ins[0],
                      "output_layers": outs if len(outs) > 1 else outs[0]},
           "build_config": {"input_shape": None}, "compile_config": None}
    return cfg, [(g, v) for g, (_, v) in zip(groups, vars_all, strict=True)]


def keras_order(entries: list[dict[str, Any]], outputs: list[list[Any]]) -> list[int]:
    """The indices of a functional config's layer ``entries`` in the order Keras lists the
    layers of the model it builds from them (:func:`~rnnkit.models._graph_order.keras_layer_order`
    on the config's own call graph)."""
    index = {str(e["name"]): i for i, e in enumerate(entries)}
    tokens = {name: Layer(name="op") for name in index}   # one operation per entry
    ops: dict[int, int] = {}
    calls: dict[tuple[str, int], Node] = {}

    def made(r: tuple[str, int, int]) -> Node:
        parent = calls[(r[0], r[1])]
        return parent if r[2] == 0 else Node(None, None, (parent,), None, None, index=r[2])

    def tensor(r: tuple[str, int, int]) -> Node:
        """Keras tensor ``r``, every call it depends on made first (an explicit stack, not
        recursion: a chain of any length is fine)."""
        stack = [(r[0], r[1])]
        while stack:
            name, k = stack[-1]
            if (name, k) in calls:
                stack.pop()
                continue
            e = entries[index[name]]
            if e["class_name"] == "InputLayer":
                node = Node(name, None, (), None, None)
                ops[id(node)] = index[name]
            else:
                reads = inbound(e["inbound_nodes"][k], name)
                todo = [(q[0], q[1]) for q in reads if (q[0], q[1]) not in calls]
                if todo:
                    stack.extend(todo)
                    continue
                token = tokens[name]
                ops[id(token)] = index[name]
                node = Node(name, token, tuple(made(q) for q in reads), None, None)
            calls[(name, k)] = node
            stack.pop()
        return made(r)

    order = keras_layer_order([tensor((str(o[0]), int(o[1]), int(o[2]))) for o in outputs])
    return [ops[id(op)] for op in order]


def _tensor(node: Any, history: list[Any], dtype: str) -> dict[str, Any]:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": list(node.shape.dims), "dtype": dtype, "keras_history": history}}
