"""The order of a graph's calls: which nodes a model of given outputs holds, in an order its
forward pass can run, and the order Keras lists its layers in (``model.layers``).

Both walk from the outputs back through each node's inbound nodes, depth first, the way
Keras' ``map_graph`` does; a node picking output ``k`` of a call stands for that call.
"""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidInputError
from rnnkit.models._node import Node


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


def keras_layer_order(outputs: list[Node]) -> list[Any]:
    """The calls' operations as Keras orders ``model.layers``: by depth (the longest path to
    an output), deepest first, ties in the order the walk first meets each operation. An
    operation is a layer (one entry however often it is called) or an input node."""
    calls, _ = walk(outputs)
    first: dict[int, int] = {}
    # Keras numbers an operation when the walk first enters it (pre-order)
    stack: list[Node] = list(reversed(outputs))
    seen: set[int] = set()
    while stack:
        n = _call_of(stack.pop())
        if id(n) in seen:
            continue
        seen.add(id(n))
        op = n.layer if n.layer is not None else n
        first.setdefault(id(op), len(first))
        stack.extend(reversed(n.inbound))
    node_depth: dict[int, int] = {}
    op_depth: dict[int, int] = {}
    ops: dict[int, Any] = {}
    for n in reversed(calls):
        op = n.layer if n.layer is not None else n
        ops[id(op)] = op
        depth = max(node_depth.setdefault(id(n), 0), op_depth.get(id(op), 0))
        op_depth[id(op)] = node_depth[id(n)] = depth
        for p in n.inbound:
            c = _call_of(p)
            node_depth[id(c)] = max(depth + 1, node_depth.get(id(c), 0))
    return [ops[k] for k in sorted(ops, key=lambda k: (-op_depth[k], first[k]))]
