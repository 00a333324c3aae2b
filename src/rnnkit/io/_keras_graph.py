"""Reading a functional Keras model's call graph from its ``config.json``: which tensors each
call reads (positional, ``initial_state=``), tensor references, and the mask ops Keras records."""

from __future__ import annotations

from typing import Any

from rnnkit._errors import FileFormatError
from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.models._graph import Node

Ref = tuple[str, int, int]  # (Keras layer name, node index, tensor index)


def history(t: Any, where: str) -> Ref:
    """``(layer name, node index, tensor index)`` of a serialised Keras tensor."""
    hist: Any = None
    if isinstance(t, dict) and t.get("class_name") == "__keras_tensor__":
        hist = (t.get("config") or {}).get("keras_history")
    elif isinstance(t, list):  # Keras 2 style
        hist = t
    if not (isinstance(hist, list) and len(hist) >= 3 and isinstance(hist[0], str)):
        raise FileFormatError(f"{where}: unreadable inbound tensor {t!r}")
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
    return str(lc.get("name") or (lc.get("config") or {}).get("name")) if isinstance(lc, dict) else ""


def mask_ops(layer_cfgs: Any) -> set[str]:
    """The names of the recorded mask ops (:data:`MASK_OPS` from ``keras.src.ops``)."""
    return {layer_name(lc) for lc in (layer_cfgs if isinstance(layer_cfgs, list) else [])
            if isinstance(lc, dict) and lc.get("class_name") in MASK_OPS
            and str(lc.get("module", "")).startswith("keras.src.ops")}


def inbound(node: Any, layer: str, mask_ops: frozenset[str] | set[str] = frozenset()) -> list[Ref]:
    """The tensors a call reads: its positional tensors, then its ``initial_state`` ones. A
    ``mask=`` computed by the recorded mask ops (``mask_ops``) is the one rnnkit propagates."""
    if isinstance(node, dict):
        kwargs = node.get("kwargs") or {}
        states: list[Ref] = []
        for key, val in kwargs.items():
            if key == "initial_state" and tensors(val):
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


def refs(spec: Any) -> list[Ref]:
    items = [spec] if spec and isinstance(spec[0], str) else list(spec)
    return [(str(s[0]), int(s[1]), int(s[2]) if len(s) > 2 else 0) for s in items]


def tensor(nodes: dict[tuple[str, int], Node], ref: Ref) -> Node:
    """The graph node of Keras tensor ``ref``: output ``ref[2]`` of a node with several."""
    node = nodes[ref[:2]]
    if isinstance(node.shape, list):
        return node[ref[2]]
    if ref[2] != 0:
        raise FileFormatError(f"a call reads output {ref[2]} of layer {ref[0]!r}, which has one output")
    return node
