"""Reading a functional Keras model's call graph from its ``config.json``: which tensors each
call reads (positional, ``initial_state=``), tensor references, and the mask ops Keras records."""

from __future__ import annotations

from typing import Any

from rnnkit._errors import FileFormatError
from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.models._graph import Node

Ref = tuple[str, int, int]  # (Keras layer name, node index, tensor index)


def _dict(obj: Any) -> dict[str, Any]:
    """``obj`` when it is a dict, else an empty one (a missing or malformed entry)."""
    return obj if isinstance(obj, dict) else {}


def _index(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31


def history(t: Any, where: str) -> Ref:
    """``(layer name, node index, tensor index)`` of a serialised Keras tensor; FileFormatError
    naming ``where`` unless it is ``[str, int >= 0, int >= 0, ...]``."""
    hist: Any = None
    if isinstance(t, dict) and t.get("class_name") == "__keras_tensor__":
        hist = _dict(t.get("config")).get("keras_history")
    elif isinstance(t, list):  # Keras 2 style
        hist = t
    if not (isinstance(hist, list) and len(hist) >= 3 and isinstance(hist[0], str)
            and _index(hist[1]) and _index(hist[2])):
        raise FileFormatError(f"{where}: unreadable inbound tensor {str(t)[:200]}; expected a Keras "
                              f"tensor whose keras_history is [layer name, node index, tensor index]")
    return str(hist[0]), int(hist[1]), int(hist[2])


def tensors(obj: Any) -> list[Any]:
    if isinstance(obj, dict) and obj.get("class_name") == "__keras_tensor__":
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors(o)]
    return []


#: the ops a functional Keras model records to compute the masks it passes as ``mask=`` (a
#: Masking layer's ``not_equal`` + ``any``, a merge layer's ``logical_or``, ...); rnnkit's layers
#: give those masks themselves. Read only when they feed ``mask=`` arguments.
MASK_OPS = ("NotEqual", "Any", "All", "LogicalOr", "LogicalAnd", "ExpandDims", "BroadcastTo")


def layer_name(lc: Any) -> str:
    return str(lc.get("name") or _dict(lc.get("config")).get("name")) if isinstance(lc, dict) else ""


def mask_ops(layer_cfgs: Any) -> set[str]:
    """The names of the recorded mask ops (:data:`MASK_OPS` from ``keras.src.ops``)."""
    return {layer_name(lc) for lc in (layer_cfgs if isinstance(layer_cfgs, list) else [])
            if isinstance(lc, dict) and lc.get("class_name") in MASK_OPS
            and str(lc.get("module", "")).startswith("keras.src.ops")}


def inbound(node: Any, layer: str, mask_ops: frozenset[str] | set[str] = frozenset()) -> list[Ref]:
    """The tensors a call reads: its positional tensors, then its ``initial_state`` ones (or a
    MultiHeadAttention's ``key=``). A
    ``mask=`` computed by the recorded mask ops (``mask_ops``) is the one rnnkit propagates."""
    if isinstance(node, dict):
        kwargs = node.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise FileFormatError(f"layer {layer!r}: the call's kwargs are {str(kwargs)[:200]}, "
                                  f"expected an object")
        states: list[Ref] = []
        for key, val in kwargs.items():
            if key == "initial_state" and tensors(val):
                states = [history(t, f"layer {layer!r}") for t in tensors(val)]
            elif key == "key" and tensors(val):   # MultiHeadAttention(query, value, key=...)
                states = [history(t, f"layer {layer!r}") for t in tensors(val)]
            elif key == "mask" and tensors(val) and all(
                    history(t, layer)[0] in mask_ops for t in tensors(val)):
                continue
            elif tensors(val) or (key == "mask" and val is not None):
                raise UnsupportedFeatureError(layer, key, f"the call passes {key}=...; masks come from "
                                              f"Masking / Embedding(mask_zero=True) in rnnkit models")
        return [history(t, f"layer {layer!r}") for t in tensors(node.get("args", []))] + states
    if isinstance(node, list):  # Keras 2: [[name, node_index, tensor_index, kwargs], ...]
        return [history(t, f"layer {layer!r}") for t in node]
    raise FileFormatError(f"layer {layer!r}: unreadable inbound node {node!r}")


def refs(spec: Any, what: str = "input_layers/output_layers") -> list[Ref]:
    """The ``[name, node, tensor]`` references of a functional model's ``input_layers`` or
    ``output_layers`` (one, or a list of them); FileFormatError naming ``what`` otherwise."""
    items = [spec] if isinstance(spec, list) and spec and isinstance(spec[0], str) else spec
    if not isinstance(items, list) or not items:
        raise FileFormatError(f"the functional model's {what} is {str(spec)[:200]}, expected "
                              f"[layer name, node index, tensor index] or a list of them")
    out = []
    for s in items:
        if not (isinstance(s, list) and len(s) in (2, 3) and isinstance(s[0], str)
                and all(_index(v) for v in s[1:])):
            raise FileFormatError(f"the functional model's {what} holds {str(s)[:200]}, expected "
                                  f"[layer name, node index, tensor index]")
        out.append((s[0], int(s[1]), int(s[2]) if len(s) > 2 else 0))
    return out


def tensor(nodes: dict[tuple[str, int], Node], ref: Ref) -> Node:
    """The graph node of Keras tensor ``ref``: output ``ref[2]`` of a node with several;
    FileFormatError when no such call or output exists."""
    if ref[:2] not in nodes:
        raise FileFormatError(f"a call reads call {ref[1]} of layer {ref[0]!r}, which the model does "
                              f"not have")
    node = nodes[ref[:2]]
    if isinstance(node.shape, list):
        if ref[2] >= len(node.shape):
            raise FileFormatError(f"a call reads output {ref[2]} of layer {ref[0]!r}, which has "
                                  f"{len(node.shape)} outputs")
        return node[ref[2]]
    if ref[2] != 0:
        raise FileFormatError(f"a call reads output {ref[2]} of layer {ref[0]!r}, which has one output")
    return node
