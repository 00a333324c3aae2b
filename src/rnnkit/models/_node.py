"""``Node``: one value of a graph model, and what a recurrent node's state inputs look like.

A node made by :class:`~rnnkit.GraphBuilder` belongs to that builder; a node made by calling a
layer on nodes (``rk.LSTM(8)(x)``, the functional API) belongs to none and is named when the
first model holding it is made (:func:`rnnkit.Model`). :func:`call_node` is the one place a
layer call is checked and its output shape worked out, for both."""

from __future__ import annotations

from typing import Any, Protocol

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer, resolve_dtype
from rnnkit._shape import Shape
from rnnkit.layers import Bidirectional, MergeLayer
from rnnkit.models._mask_flow import check_mask_taken, mask_after
from rnnkit.recurrent import RecurrentLayer
from rnnkit.rnn import RNNNet


class Builder(Protocol):
    """What a node needs of the :class:`~rnnkit.GraphBuilder` that made it (so this module
    does not import the builder, which imports it): unique node names and the node list."""

    _nodes: list[Node]

    def _name(self, base: str, name: str | None, exact: bool = False) -> str: ...

    def _keep(self, node: Node) -> None: ...


class Node:
    """One value of the graph: a model input (``layer is None``, no inbound), one call of
    ``layer`` on ``inbound`` nodes, or output ``index`` of a node with several outputs (``layer``
    None, ``inbound`` that node). ``shape`` is its output shape (batch axis ``None``), a list of
    shapes for a layer with several outputs (``return_state=True``, ``merge_mode=None``): such a
    node is indexed (``enc[1]``) or unpacked (``out, h, c = enc``) to use its outputs."""

    __slots__ = ("name", "layer", "inbound", "shape", "builder", "index", "_picks", "dtype", "_input_layer",
                 "nested", "mask_source")

    def __init__(self, name: str | None, layer: Layer | None, inbound: tuple[Node, ...], shape: Any,
                 builder: Builder | None, index: int | None = None, dtype: str | None = None) -> None:
        self.name: str = name  # type: ignore[assignment]  # None until a model names it (functional)
        self.layer, self.inbound, self.shape, self.builder = layer, inbound, shape, builder
        self.index = index
        #: an input's declared dtype (``rk.Input(dtype=...)``), None when not declared
        self.dtype = dtype
        self._picks: dict[int, Node] = {}
        self._input_layer: InputLayer | None = None
        #: the model call this layer call was made by (a nested model's call on nodes), or None
        self.nested: NestedCall | None = None
        #: the layer whose mask this value carries, as far as the build can tell
        #: (:func:`~rnnkit.models._mask_flow.mask_after`; a merge's output: None), or None
        self.mask_source: Layer | None = None
        if layer is not None and not isinstance(layer, MergeLayer):
            self.mask_source = mask_after(layer, inbound[0].mask_source)
        elif layer is None and index == 0:   # output 0 of a node with several
            self.mask_source = inbound[0].mask_source

    @property
    def input_layer(self) -> InputLayer:
        """The :class:`InputLayer` standing for this input node in ``model.layers``."""
        if not self.is_input:
            raise TypeError(f"node {self.name!r} is not an input")
        if self._input_layer is None:
            self._input_layer = InputLayer(self)
        if self.name is not None:
            self._input_layer.name = self.name   # named by the first model that holds it
        return self._input_layer

    #: what :meth:`rnnkit.Layer.__call__` looks for to tell a symbolic call from an array one
    _symbolic = True

    @staticmethod
    def _call_layer(layer: Layer, x: Any, initial_state: Any) -> Any:
        """``layer(x, initial_state=...)`` on nodes (Keras' functional API): a new node, or the
        list of its outputs' nodes for a layer with several (``return_state=True``: ``[out, h,
        c]``). ``x`` is a node, or a list of them for a merge layer (``[x, *states]`` for a
        recurrent one, as ``initial_state=`` gives)."""
        ins = list(x) if isinstance(x, (list, tuple)) else [x]
        if initial_state is not None:
            ins += list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        label = f"calling {type(layer).__name__} {layer.name!r}"
        for n in ins:
            if not isinstance(n, Node):
                raise InvalidInputError(
                    f"{label}: every input of a call on graph nodes must be a node (rk.Input(...) or "
                    f"a layer call's output), got {type(n).__name__}")
        if initial_state is not None and (isinstance(layer, MergeLayer) or not takes_states(layer)):
            raise InvalidInputError(f"{label}: initial_state= is for recurrent layers; "
                                    f"{type(layer).__name__} takes none")
        out = call_node(layer, ins, label)
        node = Node(None, layer, tuple(ins), out, None)
        record(layer, node)
        return list(node) if isinstance(out, list) else node

    @property
    def is_input(self) -> bool:
        return self.layer is None and self.index is None

    @property
    def n_outputs(self) -> int:
        return len(self.shape) if isinstance(self.shape, list) else 1

    def __getitem__(self, k: int) -> Node:
        """Output ``k`` of a node with several outputs (the same node on every call)."""
        n = self.n_outputs
        if not isinstance(self.shape, list):
            raise TypeError(f"node {self.name!r} has one output; use the node itself")
        if isinstance(k, bool) or not isinstance(k, int) or not -n <= k < n:
            raise IndexError(f"node {self.name!r} has {n} outputs; got index {k!r}")
        k %= n
        if k not in self._picks:
            if self.builder is None:  # a functional node: named with its parent by the model
                pick = Node(None if self.name is None else f"{self.name}[{k}]", None, (self,),
                            self.shape[k], None, k)
            else:
                pick = Node(self.builder._name(f"{self.name}[{k}]", None, exact=True), None, (self,),
                            self.shape[k], self.builder, k)
                self.builder._keep(pick)
            self._picks[k] = pick
        return self._picks[k]

    def __bool__(self) -> bool:
        return True  # a node is always a value (len() only counts the outputs of a multi-output one)

    def __len__(self) -> int:
        if not isinstance(self.shape, list):
            raise TypeError(f"node {self.name!r} has one output")
        return len(self.shape)

    def __iter__(self) -> Any:
        return (self[k] for k in range(len(self)))

    def __repr__(self) -> str:
        what = "Input" if self.is_input else f"output {self.index}" if self.layer is None \
            else type(self.layer).__name__
        return f"Node({self.name!r}, {what}, shape={self.shape})"


class NestedCall:
    """One call of a model on graph nodes (Keras' nested model): its layer calls are repeated
    in the outer graph, each node made by it points here (``node.nested``). Keras counts the
    call as ONE node of ONE operation (the inner model) in the outer graph: ``op`` stands for
    that operation (every call of one model shares it), ``inputs`` are the outer nodes it
    reads, and ``layers`` are the inner model's layers in its own weight order (what the
    operation's weights are, in order)."""

    __slots__ = ("op", "inputs", "layers")

    def __init__(self, op: object, inputs: tuple[Node, ...], layers: list[Layer]) -> None:
        self.op, self.inputs, self.layers = op, inputs, layers


def state_shapes(layer: Any) -> tuple[list[str], list[Shape]]:
    """The names and shapes of a recurrent layer's state parts: (batch, width) for a
    RecurrentLayer, PyTorch's (num_layers * directions, batch, width) for an ``RNNNet``."""
    if isinstance(layer, Bidirectional):
        names, shapes = [], []
        for role, sub in (("forward", layer.forward_layer), ("backward", layer.backward_layer)):
            names += [f"{role}_{n}" for n in sub.cell.state_names]
            shapes += [Shape((None, n)) for n in sub.cell.state_sizes()]
        return names, shapes
    if isinstance(layer, RNNNet):
        cell = layer._layers[(0, 0)].cell
        LD = layer.config.num_layers * layer.directions
        return list(cell.state_names), [Shape((LD, None, n)) for n in cell.state_sizes()]
    return list(layer.cell.state_names), [Shape((None, n)) for n in layer.cell.state_sizes()]


def check_state_shapes(layer: Any, shapes: list[Shape], where: str) -> None:
    """The initial-state nodes of a recurrent layer: one per state part, of its shape."""
    names, want = state_shapes(layer)
    if len(shapes) != len(names):
        raise InvalidInputError(f"{layer.name} takes [x, {', '.join(names)}] (its initial state), got "
                                f"{1 + len(shapes)} inputs")
    for nm, s, w in zip(names, shapes, want, strict=True):
        if s.rank != w.rank or any(a is not None and b is not None and a != b
                                   for a, b in zip(s.dims, w.dims, strict=True)):
            raise InvalidInputError(f"{layer.name}: initial state {nm!r} must have shape {w}, got {s}")


def takes_states(layer: Layer) -> bool:
    """A recurrent layer (``RecurrentLayer``, ``RNNNet``, ``Bidirectional``) takes
    ``[x, *initial_state]``."""
    return isinstance(layer, (RecurrentLayer, RNNNet, Bidirectional))


class InputLayer(Layer):
    """A model input as Keras lists it in ``model.layers``: no weights; ``output`` (and
    ``input``) is the input node, ``batch_shape`` its shape, ``name`` its name."""

    def __init__(self, node: Node) -> None:
        if not isinstance(node, Node):
            raise InvalidParameterError(f"InputLayer: node must be a model input (rnnkit.Input(...)), got "
                                        f"{type(node).__name__}")
        super().__init__(name=node.name)
        self.node = node
        if node.dtype is not None and node.dtype in ("float32", "float64"):
            self.dtype = resolve_dtype(node.dtype, node.name)
        self._input_shape = node.shape
        self._record_call(node, node)

    @property
    def batch_shape(self) -> tuple[int | None, ...]:
        return tuple(self.node.shape.dims)

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        return Shape.of(shape)

    def __repr__(self) -> str:
        return f"InputLayer(name={self.name!r}, batch_shape={self.batch_shape})"


def check_arity(layer: Layer, ins: list[Node], label: str) -> bool:
    """Refuse a call of ``layer`` on ``ins`` that reads a node with several outputs whole, or
    the wrong number of nodes: a merge layer takes >= 2, a recurrent layer ``[x,
    *initial_state]``, any other layer one. Returns whether the call passes initial states."""
    for n in ins:
        if isinstance(n.shape, list):
            raise InvalidInputError(
                f"{label}: node {n.name!r} has {n.n_outputs} outputs; pass one of them "
                f"({n.name}[0], ...) or unpack it (out, *states = node)")
    multi = isinstance(layer, MergeLayer)
    states = not multi and len(ins) > 1 and takes_states(layer)
    if (multi and len(ins) < 2) or (not multi and not states and len(ins) != 1):
        want = "at least 2 input nodes" if multi else "exactly 1 input node (a recurrent layer: " \
            "[x, *initial_state])"
        raise InvalidInputError(f"{label}: {type(layer).__name__} takes {want}, got {len(ins)}")
    return states


def call_node(layer: Layer, ins: list[Node], label: str) -> Any:
    """Build ``layer`` for a call on nodes ``ins`` (checked by :func:`check_arity`; each
    initial state of its shape) and return the call's output shape (a list of shapes for a
    layer with several outputs). InvalidInputError names ``label`` (the call) and what was
    wrong: a built layer called on a node of another feature width is refused here."""
    states = check_arity(layer, ins, label)
    check_mask_taken(layer, next((n.mask_source for n in ins if n.mask_source is not None), None), label)
    shapes: Any = [n.shape for n in ins] if isinstance(layer, MergeLayer) else ins[0].shape
    try:
        layer.build(shapes)
        out: Any = layer.compute_output_shape(shapes)
        if states:
            check_state_shapes(layer, [n.shape for n in ins[1:]], label)
    except InvalidInputError as e:
        raise InvalidInputError(f"{label}: {e}") from None
    if getattr(layer, "return_state", False) and not isinstance(out, list) and takes_states(layer):
        out = [out, *state_shapes(layer)[1]]
    return out


def record(layer: Layer, node: Node) -> None:
    """Note call ``node`` on ``layer`` (for ``layer.input`` / ``layer.output``): its input is
    the node read (a list when it reads several), its output the node, or the list of its
    outputs' nodes when it has several."""
    ins: Any = list(node.inbound) if len(node.inbound) > 1 else node.inbound[0]
    layer._record_call(ins, list(node) if isinstance(node.shape, list) else node)
