"""Which built-in recurrence a cell computes: the one rule every reader of it uses.

A built-in cell class declares its kind ONCE, as the class attribute ``kind`` written in its
own class body (``kind = "LSTM"``). :func:`builtin_kind` reads that declaration from the
cell's EXACT class (``type(cell).__dict__``), never through inheritance: a subclass of a
built-in cell is not a built-in kind unless its own body declares ``kind`` again — which is a
promise that its arithmetic is exactly that kind's. So a subclass that changes ``step`` runs the
NumPy reference (no compiled kernel takes it) and every exporter refuses it, naming the layer.

Readers: the compiled-kernel lookup, the PyTorch / ONNX / Keras layouts (``rnnkit._layouts``),
the weight interop (``rnnkit.io``), the exporters and the model files (a ``RecurrentLayer``
over a built-in cell is written as the layer of that kind).
"""

from __future__ import annotations

from typing import Any

#: the built-in kinds, as declared by the cells and named by the layer classes
KINDS = ("SimpleRNN", "LSTM", "GRU")


def builtin_kind(cell: Any) -> str | None:
    """``"SimpleRNN"``, ``"LSTM"`` or ``"GRU"`` when ``cell``'s exact class (or ``cell`` itself,
    when it is a class) declares that kind in its own body; None for any other cell, subclasses
    of built-in cells included. A declared value outside :data:`KINDS` counts as None."""
    cls = cell if isinstance(cell, type) else type(cell)
    kind = cls.__dict__.get("kind")
    return kind if isinstance(kind, str) and kind in KINDS else None


def describe_cell(cell: Any) -> str:
    """How messages name a cell that is no built-in kind: ``"a custom cell (MyCell)"``, or for a
    subclass of a built-in cell ``"a custom cell (MyGRU, a subclass of GRUCell that declares no
    kind of its own)"``."""
    cls = type(cell)
    base = next((b for b in cls.__mro__[1:] if builtin_kind(b) is not None), None)
    if base is None:
        return f"a custom cell ({cls.__name__})"
    return f"a custom cell ({cls.__name__}, a subclass of {base.__name__} that declares no kind of its own)"


__all__ = ["KINDS", "builtin_kind", "describe_cell"]
