"""Keras' functional API on the graph model: ``rk.Input``, layers called on nodes, and
``rk.Model(inputs, outputs)``::

    inputs = rk.Input((None, 3))                         # (timesteps, features); batch free
    x, h, c = rk.LSTM(16, return_state=True)(inputs)
    y = rk.Dense(1)(x)
    model = rk.Model(inputs, y)                          # a GraphModel

A layer called on nodes (:meth:`rnnkit.Layer.__call__`) is built for their shapes and gives a
new node; ``initial_state=[h, c]`` feeds a recurrent layer's state. ``rk.Model`` collects the
nodes between the inputs and the outputs into a :class:`~rnnkit.GraphModel` holding the same
layer objects: models made from the same layers (an encoder model and a decoder model from
the layers of a trained seq2seq model) share their weights.

Names: a node without a name gets one when the first model holding it is made — an input
``"input_layer"``, a call its layer's name when that was given (``rk.LSTM(8, name="enc")``),
else the snake-case class name (``"lstm"``), suffixed ``_1``, ``_2`` ... to be unique in the
model (Keras' names in a fresh session; a layer left with its default name, its class name,
takes its first node's name, as Keras' layers are named ``lstm``, ``lstm_1`` ...); a layer's
later calls are ``"{first}__1"``, ...; output ``k`` of a call ``"{call}[k]"``. Names stay once
given; two nodes of one name in one model are refused.
"""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._numbers import check_int, show
from rnnkit._shape import Shape
from rnnkit._validate import check_utf8
from rnnkit.models._base import Model as BaseModel
from rnnkit.models._graph import GraphModel
from rnnkit.models._graph_order import ordered_nodes
from rnnkit.models._node import Node
from rnnkit.models._subclass import SubclassModel, snake_case

#: the dtypes an input may declare (Keras' names); the layers reading it convert the values
INPUT_DTYPES = ("float32", "float64", "int32", "int64")


def Input(shape: Any, dtype: str | None = None, name: str | None = None,
          batch_size: int | None = None) -> Node:
    """A model input (Keras' ``keras.Input``): ``shape`` excludes the batch axis (``None``
    for a free extent, e.g. ``(None, 8)``: any number of timesteps of 8 features); the batch
    axis is free, or ``batch_size`` (what a stateful layer needs). ``dtype`` (``"float32"``,
    ``"float64"``, ``"int32"``, ``"int64"``; None: not declared) is recorded and written to
    Keras files as the input's dtype; the layers reading the input convert what they are given
    to their own dtype (an ``Embedding`` reads integer ids). ``name`` (no ``.``) is the input's
    name in the model, else ``"input_layer"``, ``"input_layer_1"`` ...; two inputs of one name
    in one model are refused."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list, Shape)):
        raise InvalidParameterError(f"rk.Input: shape must be a tuple of ints or None without the batch "
                                    f"axis, e.g. (None, 8), got {shape!r}")
    dims = list(shape.dims if isinstance(shape, Shape) else shape)
    where = f"rk.Input: shape {show(tuple(dims))}"
    dims = [check_int(d, "each extent", where, lo=1, none_ok=True) for d in dims]
    if dtype is not None and str(getattr(dtype, "name", dtype)) not in INPUT_DTYPES:
        raise InvalidParameterError(f"rk.Input: dtype must be one of {INPUT_DTYPES} or None, got {dtype!r}")
    if name is not None and (not isinstance(name, str) or not name or "." in name):
        raise InvalidParameterError(f"rk.Input: name must be a non-empty str without '.', got {name!r}")
    if name is not None:
        check_utf8(name, "name", "rk.Input")
    batch = check_int(batch_size, "batch_size", "rk.Input", lo=1, none_ok=True)
    full = Shape((batch, *dims))
    return Node(name, None, (), full, None,
                dtype=None if dtype is None else str(getattr(dtype, "name", dtype)))


def _as_nodes(value: Any, what: str) -> list[Node]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise InvalidInputError(f"rk.Model: {what} is empty; expected a node or a list of nodes")
    for v in items:
        if not isinstance(v, Node):
            raise InvalidInputError(f"rk.Model: {what} must be nodes (rk.Input(...) or a layer call's "
                                    f"output), got {type(v).__name__}")
        if isinstance(v.shape, list):
            raise InvalidInputError(f"rk.Model: {what} holds a call with {v.n_outputs} outputs whole; "
                                    f"list its outputs (out, h, c = layer(x) gives them)")
    return items


def _call_names(node: Node) -> tuple[str | None, set[str]]:
    """The name of the first named call of ``node``'s layer other than ``node`` (None if
    none) and the names of all its named calls."""
    first, names = None, set()
    for _, out in node.layer.__dict__.get("_graph_calls", []):  # type: ignore[union-attr]
        call = out[0].inbound[0] if isinstance(out, list) else out
        if call is not node and call.name is not None:
            first = first if first is not None else str(call.name)
            names.add(str(call.name))
    return first, names


def _unique(base: str, used: set[str], sep: str = "_") -> str:
    name, k = base, 0
    while name in used:
        k += 1
        name = f"{base}{sep}{k}"
    return name


def _name_nodes(nodes: list[Node]) -> None:
    """Give every unnamed node its name (see the module docstring); refuse two of one name."""
    named: dict[str, Node] = {}
    for n in nodes:
        if n.name is None:
            continue
        other = named.setdefault(n.name, n)
        if other is not n:
            what = "inputs" if n.is_input and other.is_input else "nodes"
            raise InvalidInputError(f"rk.Model: two {what} are named {n.name!r}; names in one model must "
                                    f"be unique (give one of them another name=)")
    # no two layers of one name: those already named by a model keep theirs
    used = set(named) | {n.layer.name for n in nodes if n.layer is not None
                         and (n.name is not None or _call_names(n)[0] is not None)}
    for n in nodes:
        if n.name is not None:
            continue
        if n.is_input:
            n.name = _unique("input_layer", used)
        elif n.layer is None:
            n.name = f"{n.inbound[0].name}[{n.index}]"
        else:
            first, taken = _call_names(n)
            if first is not None:
                k = 1
                while f"{first}__{k}" in used or f"{first}__{k}" in taken:
                    k += 1
                n.name = f"{first}__{k}"
            else:
                given = n.layer.name != type(n.layer).__name__
                base = n.layer.name.replace(".", "_") if given else snake_case(type(n.layer).__name__)
                if given and base in used:
                    raise InvalidInputError(f"rk.Model: two nodes are named {base!r} (the layer name); "
                                            f"names in one model must be unique")
                n.name = _unique(base, used)
                if not given:  # Keras' layers carry their unique name: the layer takes its node's
                    n.layer.name = n.name
        used.add(n.name)


def functional_model(inputs: Any, outputs: Any, name: str | None = None) -> GraphModel:
    """The GraphModel computing ``outputs`` (a node or a list) from ``inputs`` (input nodes:
    ``rk.Input(...)`` or ``model.input``). Every input must feed an output and the outputs
    must need no other input (InvalidInputError naming it: a disconnected graph)."""
    ins = _as_nodes(inputs, "inputs")
    outs = _as_nodes(outputs, "outputs")
    if name is not None and not isinstance(name, str):
        raise InvalidParameterError(f"rk.Model: name must be a str, got {name!r}")
    for k, n in enumerate(ins):
        if not n.is_input:
            raise InvalidInputError(f"rk.Model: inputs[{k}] ({n!r}) is a layer call's output; a model's "
                                    f"inputs are input nodes (rk.Input(...)); make a new rk.Input for "
                                    f"what it carries")
        if any(m is n for m in ins[:k]):
            raise InvalidInputError(f"rk.Model: inputs[{k}] is listed twice")
    nodes = ordered_nodes(outs)
    listed = {id(n) for n in ins}
    missing = [n for n in nodes if n.is_input and id(n) not in listed]
    if missing:
        raise InvalidInputError(
            f"rk.Model: graph disconnected: the outputs need {len(missing)} input(s) not listed in "
            f"inputs ({', '.join(repr(n) for n in missing)}); list every input the outputs are "
            f"computed from")
    reached = {id(n) for n in nodes}
    for k, n in enumerate(ins):
        if id(n) not in reached:
            raise InvalidInputError(f"rk.Model: inputs[{k}] ({n!r}) does not feed any output")
    _name_nodes(nodes)
    return GraphModel(nodes, ins, outs, "functional" if name is None else name)


class _ModelType(type):
    """``rk.Model``'s type: every rnnkit model is an instance of ``rk.Model``, and a class
    deriving from ``rk.Model`` derives from :class:`~rnnkit.models._subclass.SubclassModel`
    in its place (Keras' subclassing)."""

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> Any:  # noqa: N804
        if any(isinstance(b, _ModelType) for b in bases):   # (rk.Model itself has no bases)
            bases = tuple(SubclassModel if isinstance(b, _ModelType) else b for b in bases)
            return type(name, bases, ns)
        return super().__new__(mcs, name, bases, ns)

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, BaseModel)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, BaseModel)


class Model(metaclass=_ModelType):
    """Keras' ``keras.Model(inputs, outputs, name=None)``: the :class:`~rnnkit.GraphModel`
    computing ``outputs`` from ``inputs`` (see :func:`functional_model`). Every rnnkit model
    (Sequential, GraphModel, subclassed) is an instance of it, as Keras' models are of
    ``keras.Model``. ``class M(rk.Model)`` with layers made in ``__init__`` and the pass in
    ``call`` is Keras' subclassing: :mod:`rnnkit.models._subclass`."""

    def __new__(cls, inputs: Any = None, outputs: Any = None, name: str | None = None) -> GraphModel:  # type: ignore[misc]
        if inputs is None or outputs is None:
            raise TypeError("rk.Model(inputs, outputs, name=None) needs inputs and outputs")
        return functional_model(inputs, outputs, name)
