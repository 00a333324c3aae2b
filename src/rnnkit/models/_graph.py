"""Graph models: ``GraphBuilder`` -> ``GraphModel`` (a DAG of layer calls).

Nodes are created in topological order (a node can only read nodes that exist), so the
forward pass runs them in creation order and the backward pass in reverse. A layer added at
several nodes is ONE layer: its weights are shared, each call pushes its own cache into the
Ctx (popped last-in-first-out, which is exactly the reverse walk's order), and the gradient
store sums what every node contributes — the layer receives the total gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit import _penalties as _pen
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer
from rnnkit._numbers import show
from rnnkit._shape import Shape
from rnnkit.layers import MergeLayer, layer_from_config, layer_to_config
from rnnkit.models._base import Model, check_finite
from rnnkit.models._graph_order import keras_layer_order
from rnnkit.models._inference import graph_chain
from rnnkit.models._node import InputLayer, NestedCall, Node, call_node, check_arity, record
from rnnkit.models._sequential import check_weight_grads, layer_label
from rnnkit.models._summary import shape_text


class GraphBuilder:
    """Build a graph model::

        b = GraphBuilder()
        x = b.input(Shape.known((batch, steps, features)))
        h = b.add(LSTM(8, return_sequences=True), [x])
        ...
        model = b.build(outputs)          # a node or a list of nodes

    ``add`` builds the layer for its inputs' shapes at once (errors surface there, naming the
    node). Default node names are ``"{layer.name.lower()}_{k}"`` (``k`` counts per name from 0)
    and ``"input_{k}"``; names are unique.
    """

    def __init__(self, name: str = "graph_model") -> None:
        self.name = name
        self._nodes: list[Node] = []
        self._names: set[str] = set()   # every node name used so far
        self._counts: dict[str, int] = {}

    def _name(self, base: str, name: str | None, exact: bool = False) -> str:
        if exact:
            if base in self._names:
                raise InvalidInputError(f"GraphBuilder: node name {base!r} is already used")
            return base
        if name is None:
            while True:
                k = self._counts.get(base, 0)
                self._counts[base] = k + 1
                name = f"{base}_{k}"
                if name not in self._names:
                    return name
        if not isinstance(name, str) or not name or "." in name:
            raise InvalidInputError(
                f"GraphBuilder: a node name must be a non-empty str without '.', got {name!r}"
            )
        if name in self._names:
            raise InvalidInputError(f"GraphBuilder: node name {name!r} is already used")
        return name

    def _keep(self, node: Node) -> None:
        self._nodes.append(node)
        self._names.add(str(node.name))

    def input(self, shape: Shape | tuple[int | None, ...], name: str | None = None,
              dtype: str | None = None) -> Node:
        """A model input of ``shape`` (its batch axis is made free). ``dtype`` (Keras'
        ``Input(dtype=)``: ``"float32"``, ``"float64"``, ``"int32"``, ``"int64"``) is recorded as
        :func:`rnnkit.Input` records it; float arrays given for a float input are converted to it
        at the model's door (a value it cannot hold is refused), integer ids are passed as given."""
        shp = Shape.of(shape)
        if shp.rank < 1:
            raise InvalidInputError(f"GraphBuilder.input: expected a shape of rank >= 1, got {shp}")
        if dtype is not None and dtype not in ("float32", "float64", "int32", "int64"):
            raise InvalidParameterError(f"GraphBuilder.input: dtype must be float32, float64, int32, "
                                        f"int64 or None, got {dtype!r}")
        node = Node(self._name("input", name), None, (), Shape((None, *shp[1:])), self, dtype=dtype)
        self._keep(node)
        return node

    def add(self, layer: Layer, inputs: Node | list[Node], name: str | None = None) -> Node:
        """Call ``layer`` on ``inputs``: one node, or a list — a merge layer takes >= 2, a
        recurrent layer ``[x, *initial_state]`` (e.g. ``[dec_in, enc[1], enc[2]]``: the
        encoder's final LSTM state starts the decoder, and the decoder's loss trains the
        encoder through it). A layer with several outputs gives a node to index or unpack."""
        if not isinstance(layer, Layer):
            raise InvalidInputError(f"GraphBuilder.add: expected a Layer, got {type(layer).__name__}")
        ins = [inputs] if isinstance(inputs, Node) else list(inputs)
        for n in ins:
            if not isinstance(n, Node) or n.builder is not self:
                raise InvalidInputError(f"GraphBuilder.add: {n!r} is not a node of this builder")
        check_arity(layer, ins, "GraphBuilder.add")
        node_name = self._name(layer.name.lower(), name)
        out = call_node(layer, ins, f"GraphBuilder.add: node {node_name!r}")
        node = Node(node_name, layer, tuple(ins), out, self)
        self._keep(node)
        record(layer, node)
        return node

    def build(self, outputs: Node | list[Node], inputs: list[Node] | None = None) -> GraphModel:
        """The model computing ``outputs``. ``inputs`` defaults to every input node, in
        creation order; each must feed the outputs, and the outputs must need no others."""
        outs = [outputs] if isinstance(outputs, Node) else list(outputs)
        if not outs or any(not isinstance(n, Node) or n.builder is not self for n in outs):
            raise InvalidInputError(
                f"GraphBuilder.build: outputs must be nodes of this builder, got {outputs!r}"
            )
        needed: set[int] = set()
        stack = list(outs)
        while stack:
            n = stack.pop()
            if id(n) not in needed:
                needed.add(id(n))
                stack.extend(n.inbound)
        nodes = [n for n in self._nodes if id(n) in needed]
        ins = [n for n in self._nodes if n.is_input] if inputs is None else list(inputs)
        for n in ins:
            if not isinstance(n, Node) or not n.is_input or n.builder is not self:
                raise InvalidInputError(f"GraphBuilder.build: {n!r} is not an input node of this builder")
            if id(n) not in needed:
                raise InvalidInputError(f"GraphBuilder.build: input {n.name!r} does not feed the outputs")
        listed = {id(i) for i in ins}
        missing = [n.name for n in nodes if n.is_input and id(n) not in listed]
        if any(isinstance(n.shape, list) for n in outs):
            raise InvalidInputError("GraphBuilder.build: an output node has several outputs; list "
                                    "its parts (node[0], node[1], ...) instead")
        if missing:
            raise InvalidInputError(f"GraphBuilder.build: the outputs need inputs {missing} not listed")
        return GraphModel(nodes, ins, outs, self.name)


class GraphModel(Model):
    """A DAG of layer calls (build with :class:`GraphBuilder`). One input and one output are
    plain arrays; several are lists in the builder's order. Weights are named
    ``"{node_name}.{weight}"``; a shared layer appears once, under its first node; the weight
    list is in Keras' order (:meth:`named_weights`)."""

    def __init__(self, nodes: list[Node], inputs: list[Node], outputs: list[Node], name: str) -> None:
        for what, given in (("nodes", nodes), ("inputs", inputs), ("outputs", outputs)):
            if not isinstance(given, (list, tuple)) or not all(isinstance(n, Node) for n in given):
                raise InvalidInputError(f"GraphModel: {what} must be a list of graph nodes (what rk.Input "
                                        f"and layer calls on nodes return; build a graph with rk.Model("
                                        f"inputs, outputs)), got {show(given)}")
        super().__init__(name)
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.n_inputs = len(inputs)
        self.n_outputs = len(outputs)
        #: Keras' order of ``model.layers`` (an input node stands for its InputLayer); fixed,
        #: as the graph is
        self._layer_order: list[Any] = keras_layer_order(outputs)
        self._keep_chain(graph_chain(nodes, inputs, outputs), GraphModel)   # a chain: the layers alone

    @property
    def built(self) -> bool:
        return True

    def input_shapes(self) -> list[Shape]:
        return [n.shape for n in self.inputs]

    @property
    def called_layers(self) -> list[Layer]:
        """Each layer once, in order of first use (no input layers)."""
        seen: dict[int, Layer] = {}
        for n in self.nodes:
            if n.layer is not None:
                seen.setdefault(id(n.layer), n.layer)
        return list(seen.values())

    @property
    def layers(self) -> list[Layer]:
        """Keras' ``model.layers``: each input's :class:`~rnnkit.models.InputLayer` and each layer
        once, in Keras' order (by depth from the outputs, deepest first), so ``model.layers[i]``
        is what Keras' functional model of the same graph has at ``i``. A nested model (one
        called on this graph's nodes) is listed as its layers, in its own order, where Keras
        lists the nested model itself."""
        out: dict[int, Layer] = {}
        for op in self._layer_order:
            if isinstance(op, Node):
                out[id(op)] = op.input_layer
            else:
                for lay in op.layers if isinstance(op, NestedCall) else [op]:
                    out.setdefault(id(lay), lay)
        return list(out.values())

    def weight_layers(self) -> list[Layer]:
        """The layers holding the model's weights, each once, in Keras' order of
        ``model.weights``: :attr:`layers`' order, a nested model's layers (a model called on
        this graph's nodes) in that model's own order at the place Keras lists the nested
        model (by its depth in this graph, as one operation)."""
        return [lay for lay in self.layers if not isinstance(lay, InputLayer)]

    @property
    def input(self) -> Node | list[Node]:
        """Keras' ``model.input``: the input node, or the list of them for several inputs
        (call layers on them to make new models from this one's layers)."""
        return self.inputs[0] if len(self.inputs) == 1 else list(self.inputs)

    @property
    def output(self) -> Node | list[Node]:
        """Keras' ``model.output``: the output node, or the list of them for several."""
        return self.outputs[0] if len(self.outputs) == 1 else list(self.outputs)

    def _call_nodes(self, x: Any, ctx: Ctx | None) -> Any:
        """``model(nodes)`` (one per model input; Keras' nested-model call): this model's layer
        calls repeated on those nodes — the same layers, so the same weights — giving the nodes
        of its outputs (a list for several); the new model lists those layers, not this model."""
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        if ctx is not None or len(xs) != len(self.inputs) or not all(isinstance(a, Node) for a in xs):
            raise InvalidInputError(f"{self.name}: a call on graph nodes takes one node per model input "
                                    f"({len(self.inputs)}) and no ctx, got {len(xs)} value(s)")
        vals: dict[int, Any] = {id(n): a for n, a in zip(self.inputs, xs, strict=True)}
        call = NestedCall(self, tuple(xs), self.weight_layers())
        for n in self.nodes:
            if n.is_input:
                continue
            if n.layer is None:
                vals[id(n)] = vals[id(n.inbound[0])][int(n.index)]  # type: ignore[arg-type]
                continue
            args = [vals[id(p)] for p in n.inbound]
            arg = args if isinstance(n.layer, MergeLayer) or len(args) > 1 else args[0]
            made = Node._call_layer(n.layer, arg, None)
            (made if isinstance(made, Node) else made[0].inbound[0]).nested = call
            vals[id(n)] = made
        outs = [vals[id(n)] for n in self.outputs]
        return outs[0] if len(outs) == 1 else outs

    def get_layer(self, name: str | None = None, index: int | None = None) -> Layer:
        """Keras' ``get_layer``: the layer of ``model.layers`` at ``index``, or the one whose node
        is named ``name`` (a layer's first node; an input's name gives its InputLayer), or else
        the one layer whose own ``name`` is ``name``. InvalidInputError lists the names otherwise."""
        if (name is None) == (index is None):
            raise InvalidInputError(f"{self.name}.get_layer: give exactly one of name= and index=")
        layers = self.layers
        if index is not None:
            count = len(layers)
            if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
                raise InvalidInputError(f"{self.name}.get_layer: index {index!r} is out of range; the "
                                        f"model has {len(layers)} layers")
            return layers[index]
        for n in self.nodes:
            if n.name == name and (n.is_input or n.layer is not None):
                return n.input_layer if n.is_input else n.layer  # type: ignore[return-value]
        hits = [lay for lay in layers if lay.name == name]
        if len(hits) == 1:
            return hits[0]
        names = [n.name for n in self.nodes if n.is_input or n.layer is not None]
        raise InvalidInputError(
            f"{self.name}.get_layer: {'several layers are' if hits else 'no layer is'} named {name!r}; "
            f"the model's node names are {names}")

    def _forward(self, xs: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        return self._forward_masks(xs, ctx, check)[0]

    def _forward_masks(self, xs: list[np.ndarray], ctx: Ctx, check: bool,
                       masks: list[Any] | None = None) -> tuple[list[np.ndarray], list[Any]]:
        """The forward pass with mask propagation (Keras' rules): ``masks`` holds one mask (or
        None) per model input (default: ``ctx.mask`` for the first input). Before each call
        ``ctx.mask`` is the mask of its (first) input; ``layer.compute_mask`` gives the
        node's. ``ctx.mask`` is cleared afterwards. Returns (outputs, output masks)."""
        if masks is None:
            masks = [ctx.mask] + [None] * (len(xs) - 1)
        # keyed by the nodes themselves (a Node hashes by identity)
        vals: dict[Node, Any] = dict(zip(self.inputs, xs, strict=True))
        mvals: dict[Node, Any] = dict(zip(self.inputs, masks, strict=True))
        try:
            for n in self.nodes:
                layer = n.layer
                if layer is None:
                    if n.index is None:   # an input
                        continue
                    k = int(n.index)      # output `index` of a node with several outputs
                    vals[n] = vals[n.inbound[0]][k]
                    pm = mvals[n.inbound[0]]
                    mvals[n] = pm[k] if isinstance(pm, list) else None
                    continue
                merge = isinstance(layer, MergeLayer)
                first = n.inbound[0]
                if merge or len(n.inbound) > 1:
                    arg: Any = [vals[p] for p in n.inbound]
                else:
                    arg = vals[first]
                if merge:
                    m_in: Any = [mvals[p] for p in n.inbound]
                    m_in = None if all(m is None for m in m_in) else m_in
                else:
                    m_in = mvals[first]
                try:
                    mvals[n] = layer.compute_mask(arg, m_in)
                except InvalidInputError as e:
                    raise InvalidInputError(f"{self.name}: node {n.name!r}: {e}") from None
                ctx.set_mask(None if merge else m_in)
                if m_in is not None and hasattr(layer, "forward_masked"):   # Keras' masked Multiply
                    out = layer.forward_masked(arg, m_in, ctx)
                else:
                    out = layer.forward(arg, ctx)
                if layer.activity_regularizer is not None:
                    _pen.activity_forward(layer, out, ctx)
                if check:
                    for o in out if isinstance(out, list) else [out]:
                        check_finite(o, f"the output of node {n.name} ({type(n.layer).__name__})")
                vals[n] = out
        finally:
            ctx.set_mask(None)
        return [vals[n] for n in self.outputs], [mvals[n] for n in self.outputs]

    def _backward(self, grads: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        acc: dict[int, Any] = {}

        def add(node: Node, g: Any) -> None:
            if g is None:
                return
            if node.layer is None and node.index is not None:  # into the parent's list
                parent = node.inbound[0]
                lst = acc.setdefault(id(parent), [None] * parent.n_outputs)
                k = node.index
                lst[k] = np.asarray(g) if lst[k] is None else lst[k] + g
                return
            have = acc.get(id(node))
            acc[id(node)] = np.asarray(g) if have is None else have + g

        for n, g0 in zip(self.outputs, grads, strict=True):
            add(n, g0)
        for n in reversed(self.nodes):
            if n.layer is None:
                continue
            g: Any = acc.pop(id(n), None)
            if g is None:
                g = [None] * n.n_outputs if n.n_outputs > 1 else None
            if g is None:  # no gradient reaches this node: nothing to do  # pragma: no cover
                continue
            if n.layer.activity_regularizer is not None:
                g = _pen.activity_backward(n.layer, g, ctx)
            gin = n.layer.backward(g, ctx)
            listed = isinstance(n.layer, MergeLayer) or len(n.inbound) > 1
            gins = gin if listed else [gin]
            if check:
                check_weight_grads(n.layer, ctx, n.name)
                for gi in gins:
                    if gi is not None:
                        check_finite(gi, f"the input gradient of node {n.name} ({type(n.layer).__name__})")
            for p, gi in zip(n.inbound, gins, strict=True):
                add(p, gi)
        return [acc[id(n)] if id(n) in acc else np.zeros((0,)) for n in self.inputs]

    def named_weights(self) -> dict[str, tuple[Layer, str]]:
        """Every weight as ``{"{node}.{weight}": (layer, weight)}`` (``node``: the layer's first
        node), layer by layer in :attr:`layers` order, each layer's weights in its own order:
        Keras' order of ``model.weights`` for the same graph, so ``get_weights`` /
        ``set_weights`` exchange lists with Keras' functional model position by position."""
        first: dict[int, Node] = {}
        for n in self.nodes:
            if n.layer is not None:
                first.setdefault(id(n.layer), n)
        out: dict[str, tuple[Layer, str]] = {}
        for lay in self.weight_layers():
            n = first[id(lay)]
            out.update({f"{n.name}.{w}": (lay, w) for w in lay.weight_names})
        return out

    def _summary_rows(self) -> tuple[list[str], list[list[str]]]:
        rows: list[list[str]] = []
        seen: set[int] = set()
        for n in self.nodes:
            if n.is_input:
                rows.append([f"{n.name} (Input)", shape_text(n.shape), "0", ""])
                continue
            if n.layer is None:  # an output of a node with several outputs: listed with it
                continue
            shared = id(n.layer) in seen
            seen.add(id(n.layer))
            count = "shared" if shared else f"{n.layer.param_count():,}"
            shp = (", ".join(shape_text(x) for x in n.shape) if isinstance(n.shape, list)
                   else shape_text(n.shape))
            label = f"{n.name} ({type(n.layer).__name__})" if n.layer.name == n.name \
                else layer_label(n.name, n.layer)
            rows.append([label, shp, count,
                         ", ".join(p.name for p in n.inbound)])
        return ["Layer (type)", "Output Shape", "Param #", "Connected to"], rows

    def get_config(self) -> dict[str, Any]:
        """``{"class_name": "GraphModel", "config": {"name", "layers", "nodes", "inputs",
        "outputs"}}``; a node refers to its layer by index into ``layers`` (shared layers
        appear once) and to its inputs by node name."""
        layers = self.called_layers
        position = {id(lay): i for i, lay in enumerate(layers)}

        def index(layer: Layer) -> int:
            return position[id(layer)]

        nodes: list[dict[str, Any]] = []
        calls: list[NestedCall] = []
        ops: list[object] = []
        nested: list[dict[str, Any]] = []
        for n in self.nodes:
            if n.is_input:
                nodes.append({"name": n.name, "input_shape": list(n.shape.dims)}
                             | ({} if n.dtype is None else {"dtype": n.dtype}))
            elif n.layer is None:
                nodes.append({"name": n.name, "output_of": n.inbound[0].name, "index": n.index})
            else:
                spec = {"name": n.name, "layer": index(n.layer), "inbound": [p.name for p in n.inbound]}
                if n.nested is not None:
                    if all(c is not n.nested for c in calls):
                        calls.append(n.nested)
                        if all(o is not n.nested.op for o in ops):
                            ops.append(n.nested.op)
                        nested.append({"model": next(i for i, o in enumerate(ops) if o is n.nested.op),
                                       "inputs": [p.name for p in n.nested.inputs],
                                       "layers": [index(lay) for lay in n.nested.layers]})
                    spec["nested"] = next(i for i, c in enumerate(calls) if c is n.nested)
                nodes.append(spec)
        return {"class_name": "GraphModel",
                "config": {"name": self.name, "layers": [layer_to_config(lay) for lay in layers],
                           "nodes": nodes, "inputs": [n.name for n in self.inputs],
                           "outputs": [n.name for n in self.outputs]}
                | ({"nested": nested} if nested else {})}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GraphModel:
        """A new model (fresh weights, same sharing, the same nested model calls) from the
        ``"config"`` of :meth:`get_config`. A node's ``"nested"`` is the index of the nested
        model call that made it in ``"nested"`` (the calling model's index among the nested
        models, the nodes it reads, its layers in weight order)."""
        layers = [layer_from_config(c) for c in config["layers"]]
        b = GraphBuilder(config.get("name", "graph_model"))
        by_name: dict[str, Node] = {}
        specs = config.get("nested", [])
        ops = [object() for _ in range(1 + max((int(c["model"]) for c in specs), default=-1))]
        calls: dict[int, NestedCall] = {}
        for spec in config["nodes"]:
            if "input_shape" in spec:
                by_name[spec["name"]] = b.input(spec["input_shape"], name=spec["name"],
                                                dtype=spec.get("dtype"))
            elif "output_of" in spec:
                by_name[spec["name"]] = by_name[spec["output_of"]][int(spec["index"])]
            else:
                by_name[spec["name"]] = b.add(layers[spec["layer"]], [by_name[p] for p in spec["inbound"]],
                                              name=spec["name"])
                if "nested" in spec:
                    k = int(spec["nested"])
                    if k not in calls:
                        c = specs[k]
                        calls[k] = NestedCall(ops[int(c["model"])], tuple(by_name[p] for p in c["inputs"]),
                                              [layers[int(i)] for i in c["layers"]])
                    by_name[spec["name"]].nested = calls[k]
        return b.build([by_name[o] for o in config["outputs"]], [by_name[i] for i in config["inputs"]])
