"""The order of a graph's calls: which nodes a model of given outputs holds, in an order its
forward pass can run, and the order Keras lists its layers in (``model.layers``).

Both walk from the outputs back through each node's inbound nodes, depth first, the way
Keras' ``map_graph`` does; a node picking output ``k`` of a call stands for that call.
"""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidInputError
from rnnkit.models._node import NestedCall, Node


def _call_of(n: Node) -> Node:
    """The call (or input) node a value belongs to: a pick's parent, any other node itself."""
    return n.inbound[0] if n.layer is None and n.index is not None else n


def walk(outputs: list[Node]) -> tuple[list[Node], list[Node]]:
    """``(calls, values)``: the call and input nodes the outputs need, each after every node it
    reads (depth first from each output in turn, inbound nodes in order), and every value
    (picks included) that the outputs need."""
    calls: list[Node] = []
    done: set[int] = set()
    going: set[int] = set()
    values: dict[int, Node] = {}
    stack: list[tuple[Node, bool]] = [(n, False) for n in reversed(outputs)]
    while stack:
        v, expanded = stack.pop()
        values[id(v)] = v
        n = _call_of(v)
        values[id(n)] = n
        if expanded:
            going.discard(id(n))
            if id(n) not in done:
                done.add(id(n))
                calls.append(n)
            continue
        if id(n) in done:
            continue
        if id(n) in going:  # pragma: no cover - a node can only read nodes made before it
            raise InvalidInputError(f"the graph has a cycle through node {n.name!r}")
        going.add(id(n))
        stack.append((n, True))
        stack.extend((p, False) for p in reversed(n.inbound))
    return calls, list(values.values())


def ordered_nodes(outputs: list[Node]) -> list[Node]:
    """Every node the outputs need, in an order the forward pass can run: each call (or
    input) in :func:`walk`'s order, followed by the picks of its outputs that are needed."""
    calls, values = walk(outputs)
    picks: dict[int, list[Node]] = {}
    for v in values:
        if v.layer is None and v.index is not None:
            picks.setdefault(id(v.inbound[0]), []).append(v)
    out: list[Node] = []
    for n in calls:
        out.append(n)
        out.extend(sorted(picks.get(id(n), []), key=lambda p: int(p.index or 0)))
    return out


def _unit(v: Node) -> Node | NestedCall:
    """What Keras counts as one node of the graph for the value ``v``: its call, or the nested
    model call that made that call."""
    n = _call_of(v)
    return n if n.nested is None else n.nested


def _reads(u: Node | NestedCall) -> tuple[Node, ...]:
    return u.inputs if isinstance(u, NestedCall) else u.inbound


def _op(u: Node | NestedCall) -> Any:
    """The operation of a unit: a call's layer, an input node itself, a nested call's model."""
    if isinstance(u, NestedCall):
        return u.op
    return u.layer if u.layer is not None else u


def keras_layer_order(outputs: list[Node]) -> list[Any]:
    """The operations of the graph as Keras orders ``model.layers`` (``ops/function.py``'s
    ``map_graph``): by depth (the longest path to an output), deepest first, ties in the order
    a depth-first walk from the outputs (each node's inputs in order) first enters each
    operation. An operation is a layer (one entry however often it is called), an input node,
    or a nested model (all its calls one operation: the first :class:`NestedCall` met stands
    for it, its layers are the model's)."""
    first: dict[int, int] = {}
    entry: dict[int, Any] = {}
    # pre-order numbering, as Keras numbers an operation when its walk first enters it
    stack: list[Node] = list(reversed(outputs))
    seen: set[int] = set()
    while stack:
        u = _unit(stack.pop())
        if id(u) in seen:
            continue
        seen.add(id(u))
        op = _op(u)
        if id(op) not in first:
            first[id(op)] = len(first)
            entry[id(op)] = u if isinstance(u, NestedCall) else op
        stack.extend(reversed(_reads(u)))
    # post-order (every unit after the units it reads), then depths from the outputs down
    units: list[Node | NestedCall] = []
    done: set[int] = set()
    todo: list[tuple[Node | NestedCall, bool]] = [(_unit(v), False) for v in reversed(outputs)]
    while todo:
        u, expanded = todo.pop()
        if expanded:
            if id(u) not in done:
                done.add(id(u))
                units.append(u)
            continue
        if id(u) in done:
            continue
        todo.append((u, True))
        todo.extend((_unit(p), False) for p in reversed(_reads(u)))
    unit_depth: dict[int, int] = {}
    op_depth: dict[int, int] = {}
    for u in reversed(units):
        op = _op(u)
        depth = max(unit_depth.setdefault(id(u), 0), op_depth.get(id(op), 0))
        op_depth[id(op)] = unit_depth[id(u)] = depth
        for p in _reads(u):
            c = _unit(p)
            unit_depth[id(c)] = max(depth + 1, unit_depth.get(id(c), 0))
    return [entry[k] for k in sorted(op_depth, key=lambda k: (-op_depth[k], first[k]))]
