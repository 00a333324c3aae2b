"""``Node``: one value of a graph model, and what a recurrent node's state inputs look like."""

from __future__ import annotations

from typing import Any, Protocol

from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer
from rnnkit._shape import Shape
from rnnkit.layers import Bidirectional
from rnnkit.recurrent import RecurrentLayer
from rnnkit.rnn import RNNNet


class Builder(Protocol):
    """What a node needs of the :class:`~rnnkit.GraphBuilder` that made it (so this module
    does not import the builder, which imports it): unique node names and the node list."""

    _nodes: list[Node]

    def _name(self, base: str, name: str | None, exact: bool = False) -> str: ...


class Node:
    """One value of the graph: a model input (``layer is None``, no inbound), one call of
    ``layer`` on ``inbound`` nodes, or output ``index`` of a node with several outputs (``layer``
    None, ``inbound`` that node). ``shape`` is its output shape (batch axis ``None``), a list of
    shapes for a layer with several outputs (``return_state=True``, ``merge_mode=None``): such a
    node is indexed (``enc[1]``) or unpacked (``out, h, c = enc``) to use its outputs."""

    __slots__ = ("name", "layer", "inbound", "shape", "builder", "index", "_picks", "dtype")

    def __init__(self, name: str, layer: Layer | None, inbound: tuple[Node, ...], shape: Any,
                 builder: Builder, index: int | None = None) -> None:
        self.name, self.layer, self.inbound, self.shape, self.builder = name, layer, inbound, shape, builder
        self.index = index
        self._picks: dict[int, Node] = {}
        self.dtype: Any = None  # a model input's dtype= (numpy float dtype), else None

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
            pick = Node(self.builder._name(f"{self.name}[{k}]", None, exact=True), None, (self,),
                        self.shape[k], self.builder, k)
            self.builder._nodes.append(pick)
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
