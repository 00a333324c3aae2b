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

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer
from rnnkit._shape import Shape
from rnnkit.layers import MergeLayer, layer_from_config, layer_to_config
from rnnkit.models._base import Model, check_finite
from rnnkit.models._sequential import check_weight_grads, layer_label
from rnnkit.models._summary import shape_text


class Node:
    """One value of the graph: a model input (``layer is None``) or one call of ``layer`` on
    ``inbound`` nodes. ``shape`` is its output shape (batch axis ``None``)."""

    __slots__ = ("name", "layer", "inbound", "shape", "builder")

    def __init__(self, name: str, layer: Layer | None, inbound: tuple[Node, ...], shape: Shape,
                 builder: GraphBuilder) -> None:
        self.name, self.layer, self.inbound, self.shape, self.builder = name, layer, inbound, shape, builder

    def __repr__(self) -> str:
        what = "Input" if self.layer is None else type(self.layer).__name__
        return f"Node({self.name!r}, {what}, shape={self.shape})"


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
        self._counts: dict[str, int] = {}

    def _name(self, base: str, name: str | None) -> str:
        if name is None:
            while True:
                k = self._counts.get(base, 0)
                self._counts[base] = k + 1
                name = f"{base}_{k}"
                if all(n.name != name for n in self._nodes):
                    return name
        if not isinstance(name, str) or not name or "." in name:
            raise InvalidInputError(
                f"GraphBuilder: a node name must be a non-empty str without '.', got {name!r}"
            )
        if any(n.name == name for n in self._nodes):
            raise InvalidInputError(f"GraphBuilder: node name {name!r} is already used")
        return name

    def input(self, shape: Shape | tuple[int | None, ...], name: str | None = None) -> Node:
        """A model input of ``shape`` (its batch axis is made free)."""
        shp = Shape.of(shape)
        if shp.rank < 1:
            raise InvalidInputError(f"GraphBuilder.input: expected a shape of rank >= 1, got {shp}")
        node = Node(self._name("input", name), None, (), Shape((None, *shp[1:])), self)
        self._nodes.append(node)
        return node

    def add(self, layer: Layer, inputs: Node | list[Node], name: str | None = None) -> Node:
        """Call ``layer`` on ``inputs`` (one node, or a list; a merge layer takes >= 2)."""
        if not isinstance(layer, Layer):
            raise InvalidInputError(f"GraphBuilder.add: expected a Layer, got {type(layer).__name__}")
        ins = [inputs] if isinstance(inputs, Node) else list(inputs)
        for n in ins:
            if not isinstance(n, Node) or n.builder is not self:
                raise InvalidInputError(f"GraphBuilder.add: {n!r} is not a node of this builder")
        multi = isinstance(layer, MergeLayer)
        if (multi and len(ins) < 2) or (not multi and len(ins) != 1):
            want = "at least 2 input nodes" if multi else "exactly 1 input node"
            raise InvalidInputError(f"GraphBuilder.add: {type(layer).__name__} takes {want}, got {len(ins)}")
        node_name = self._name(layer.name.lower(), name)
        shapes: Any = [n.shape for n in ins] if multi else ins[0].shape
        try:
            layer.build(shapes)
            out = layer.compute_output_shape(shapes)
        except InvalidInputError as e:
            raise InvalidInputError(f"GraphBuilder.add: node {node_name!r}: {e}") from None
        node = Node(node_name, layer, tuple(ins), out, self)
        self._nodes.append(node)
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
        ins = [n for n in self._nodes if n.layer is None] if inputs is None else list(inputs)
        for n in ins:
            if n.layer is not None or n.builder is not self:
                raise InvalidInputError(f"GraphBuilder.build: {n!r} is not an input node of this builder")
            if id(n) not in needed:
                raise InvalidInputError(f"GraphBuilder.build: input {n.name!r} does not feed the outputs")
        missing = [n.name for n in nodes if n.layer is None and all(n is not i for i in ins)]
        if missing:
            raise InvalidInputError(f"GraphBuilder.build: the outputs need inputs {missing} not listed")
        return GraphModel(nodes, ins, outs, self.name)


class GraphModel(Model):
    """A DAG of layer calls (build with :class:`GraphBuilder`). One input and one output are
    plain arrays; several are lists in the builder's order. Weights are named
    ``"{node_name}.{weight}"``; a shared layer appears once, under its first node."""

    def __init__(self, nodes: list[Node], inputs: list[Node], outputs: list[Node], name: str) -> None:
        super().__init__(name)
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.n_inputs = len(inputs)
        self.n_outputs = len(outputs)

    @property
    def built(self) -> bool:
        return True

    def input_shapes(self) -> list[Shape]:
        return [n.shape for n in self.inputs]

    @property
    def layers(self) -> list[Layer]:
        """Each layer once, in order of first use."""
        seen: list[Layer] = []
        for n in self.nodes:
            if n.layer is not None and all(n.layer is not s for s in seen):
                seen.append(n.layer)
        return seen

    def _forward(self, xs: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        vals: dict[int, Any] = {id(n): x for n, x in zip(self.inputs, xs, strict=True)}
        for n in self.nodes:
            if n.layer is None:
                continue
            args = [vals[id(p)] for p in n.inbound]
            out = n.layer.forward(args if isinstance(n.layer, MergeLayer) else args[0], ctx)  # type: ignore[arg-type]
            if check:
                check_finite(out, f"the output of node {n.name} ({type(n.layer).__name__})")
            vals[id(n)] = out
        return [vals[id(n)] for n in self.outputs]

    def _backward(self, grads: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        acc: dict[int, np.ndarray] = {}

        def add(node: Node, g: np.ndarray) -> None:
            have = acc.get(id(node))
            acc[id(node)] = np.asarray(g) if have is None else have + g

        for n, g in zip(self.outputs, grads, strict=True):
            add(n, g)
        for n in reversed(self.nodes):
            if n.layer is None:
                continue
            g = acc.pop(id(n))
            gin = n.layer.backward(g, ctx)
            gins = gin if isinstance(n.layer, MergeLayer) else [gin]
            if check:
                check_weight_grads(n.layer, ctx, n.name)
                for gi in gins:
                    check_finite(gi, f"the input gradient of node {n.name} ({type(n.layer).__name__})")
            for p, gi in zip(n.inbound, gins, strict=True):
                add(p, gi)
        return [acc[id(n)] for n in self.inputs]

    def named_weights(self) -> dict[str, tuple[Layer, str]]:
        out: dict[str, tuple[Layer, str]] = {}
        seen: list[Layer] = []
        for n in self.nodes:
            if n.layer is None or any(n.layer is s for s in seen):
                continue
            seen.append(n.layer)
            out.update({f"{n.name}.{w}": (n.layer, w) for w in n.layer.weight_names})
        return out

    def _summary_rows(self) -> tuple[list[str], list[list[str]]]:
        rows: list[list[str]] = []
        seen: list[Layer] = []
        for n in self.nodes:
            if n.layer is None:
                rows.append([f"{n.name} (Input)", shape_text(n.shape), "0", ""])
                continue
            shared = any(n.layer is s for s in seen)
            seen.append(n.layer)
            count = "shared" if shared else f"{n.layer.param_count():,}"
            rows.append([layer_label(n.name, n.layer), shape_text(n.shape), count,
                         ", ".join(p.name for p in n.inbound)])
        return ["Layer (type)", "Output Shape", "Param #", "Connected to"], rows

    def get_config(self) -> dict[str, Any]:
        """``{"class_name": "GraphModel", "config": {"name", "layers", "nodes", "inputs",
        "outputs"}}``; a node refers to its layer by index into ``layers`` (shared layers
        appear once) and to its inputs by node name."""
        layers = self.layers
        nodes: list[dict[str, Any]] = []
        for n in self.nodes:
            if n.layer is None:
                nodes.append({"name": n.name, "input_shape": list(n.shape.dims)})
            else:
                idx = next(i for i, lay in enumerate(layers) if lay is n.layer)
                nodes.append({"name": n.name, "layer": idx, "inbound": [p.name for p in n.inbound]})
        return {"class_name": "GraphModel",
                "config": {"name": self.name, "layers": [layer_to_config(lay) for lay in layers],
                           "nodes": nodes, "inputs": [n.name for n in self.inputs],
                           "outputs": [n.name for n in self.outputs]}}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GraphModel:
        """A new model (fresh weights, same sharing) from the ``"config"`` of :meth:`get_config`."""
        layers = [layer_from_config(c) for c in config["layers"]]
        b = GraphBuilder(config.get("name", "graph_model"))
        by_name: dict[str, Node] = {}
        for spec in config["nodes"]:
            if "input_shape" in spec:
                by_name[spec["name"]] = b.input(spec["input_shape"], name=spec["name"])
            else:
                by_name[spec["name"]] = b.add(layers[spec["layer"]], [by_name[p] for p in spec["inbound"]],
                                              name=spec["name"])
        return b.build([by_name[o] for o in config["outputs"]], [by_name[i] for i in config["inputs"]])
