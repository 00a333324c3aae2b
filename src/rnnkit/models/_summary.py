"""The ``summary()`` table.

Layout (every line right-stripped)::

    Model: "<name>"
    ====...                                  one '=' per column of the table width
    <header cells>
    ----...
    <one row per layer>
    ====...
    Total params: 1,697
    Trainable params: 1,697
    Non-trainable params: 0

Columns are left-aligned, each padded to the widest of its header and cells, and separated
by 2 spaces; the table width is the sum of the column widths plus 2 per gap. Counts carry
thousands separators. Trainable params are those of the weights training updates (the model's
``trainable_weights()``); the rest are non-trainable: every weight of an int8 layer (an
inference-only layer: its int8 kernels, their scales and its bias), a cell's ``Param``
declared ``trainable=False``. Keras counts an int8 kernel and its scale as non-trainable too.

Rows. Sequential: ``Layer (type) | Output Shape | Param #``; the layer cell is
``"{index} ({Class})"`` (the index is the weight-name prefix), or ``"{index} {name} ({Class})"``
for a layer named other than its class. Graph: one more column, ``Connected to`` (the inbound
node names, comma-separated); the layer cell is ``"{node} ({Class})"``; an input node prints
``"{node} (Input)"`` with 0 params; a layer's second and later nodes print ``shared`` as their
count (the totals count each layer once). Output shapes: the batch axis always prints ``None``,
a free axis (e.g. time) prints ``None`` too: ``(None, units)``, ``(None, timesteps, units)``.
A model not built yet (Keras 3's rows): every output shape ``?``, each layer not built
``0 (unbuilt)`` (:func:`param_text`), the totals those of the layers built.
"""

from __future__ import annotations

from typing import Any

from rnnkit._shape import Shape


def shape_text(shape: Shape) -> str:
    """``(None, 4, 8)``: the batch axis always prints ``None`` (models take any batch size)."""
    dims = ["None", *("None" if d is None else str(d) for d in shape[1:])]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


def param_text(layer: Any) -> str:
    """A layer's ``Param #`` cell: its count with thousands separators, ``0 (unbuilt)`` for a
    layer not built yet (Keras 3's cell)."""
    return f"{layer.param_count():,}" if layer.built else "0 (unbuilt)"


def render_summary(name: str, header: list[str], rows: list[list[str]], total: int, trainable: int) -> str:
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    width = sum(widths) + 2 * (len(widths) - 1)

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [f'Model: "{name}"', "=" * width, line(header), "-" * width]
    out += [line(r) for r in rows]
    out += ["=" * width, f"Total params: {total:,}", f"Trainable params: {trainable:,}",
            f"Non-trainable params: {total - trainable:,}"]
    return "\n".join(out)
