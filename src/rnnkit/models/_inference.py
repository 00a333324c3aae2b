"""What a built ``Sequential`` (or a graph model that is a plain chain, :func:`graph_chain`)
finds ONCE for its inference passes (:class:`ChainPlan`), so that ``predict(x)`` and
``model(x)`` on one array are a loop over the layers' own ``forward``.

A chain qualifies when no layer can make a mask out of none: each layer's ``compute_mask`` is
one of :data:`PASSES_NONE`, which give None for an input without a mask. Without a mask at the
input, no layer then receives one, and the mask plumbing (``compute_mask``, ``Ctx.set_mask``
per layer) has nothing to do. A ``Masking`` layer, an ``Embedding`` (``mask_zero`` makes masks)
or a layer with its own ``compute_mask`` keeps the model on the general path.

The plan holds the layers (each layer's ``forward`` is looked up at every call, so what runs
is what the layer has then) and the build shape. The model makes a new plan whenever its
layers or its build shape change (``Sequential.build`` / ``add``); a layer's weights and dtype
are read by the layer's own ``forward``, so their changes need no new plan.

The door it keeps is the general door's, in its quick form: one array of reals with at least
one sample whose extents match the build shape (None there: any), and for ``predict`` every
value finite (a finite sum of squares proves it, as
:func:`~rnnkit.models._checks.all_finite`). An input that fails any of these is not refused
here: :meth:`ChainPlan.run` returns None and the caller takes the general path, which raises
the typed error naming what was wrong (or finds, as for squares that overflow, that the input
is fine after all)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._layer import Layer
from rnnkit._limits import LIMITS
from rnnkit._shape import Shape
from rnnkit.layers import Bidirectional, GlobalAveragePooling1D, MergeLayer, Reverse
from rnnkit.models._node import Node
from rnnkit.recurrent import RecurrentLayer

__all__ = ["PASSES_NONE", "ChainPlan", "chain_plan", "graph_chain"]

#: the ``compute_mask`` implementations that give None for an input without a mask (a layer
#: whose class uses one of them makes no mask of its own)
PASSES_NONE: frozenset[Callable[..., Any]] = frozenset({
    Layer.compute_mask, RecurrentLayer.compute_mask, Bidirectional.compute_mask, Reverse.compute_mask,
    GlobalAveragePooling1D.compute_mask,
})


class ChainPlan:
    """The inference plan of a maskless chain of layers (see the module docstring).

    ``chain`` the layers in order; ``dims`` the build shape's extents after the batch axis
    (None: any); ``tail`` the same as a tuple of ints when none is None (one tuple comparison
    then checks the shape), else None."""

    __slots__ = ("chain", "checked", "dims", "tail")

    def __init__(self, layers: Sequence[Layer], shape: Shape) -> None:
        self.chain: tuple[Layer, ...] = tuple(layers)
        self.dims: tuple[int | None, ...] = tuple(shape.dims[1:])
        fixed = tuple(d for d in self.dims if d is not None)
        self.tail: tuple[int, ...] | None = fixed if len(fixed) == len(self.dims) else None
        self.checked: tuple[Any, ...] = ()

    def within_budget(self, x: np.ndarray) -> None:
        """MemoryBudgetError, before any layer runs, when an output of a layer of the chain or
        an array its pass makes (:meth:`~rnnkit.Layer._pass_within_budget`) would be over the
        memory budget for ``x``, each layer's input shape told by the one before it. The last
        input shape, item size and budget checked are kept, so a run of calls on one shape
        checks once."""
        key = (x.shape, x.itemsize, LIMITS.max_array_bytes)
        if key == self.checked:
            return
        shape: tuple[int, ...] = x.shape
        for layer in self.chain:
            out = layer._pass_within_budget(shape, max(x.itemsize, np.dtype(layer.dtype).itemsize))
            if out is None:
                break
            shape = out
        self.checked = key

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether an array of ``shape`` holds at least one sample of the build shape."""
        if not shape or shape[0] < 1:
            return False
        if shape[1:] == self.tail:
            return True
        if len(shape) != len(self.dims) + 1:
            return False
        for d, s in zip(self.dims, shape[1:], strict=True):
            if d is not None and d != s:
                return False
        return True

    def run(self, x: np.ndarray, finite: bool) -> np.ndarray | None:
        """The layers' ``forward`` chained on ``x`` in one fresh inference Ctx; None, running
        nothing, when ``x`` does not pass the quick door (the caller then takes the general
        path). ``finite``: the door also asks every value to be finite (``predict``'s rule;
        ``model(x)`` passes NaN through as the layers do). No activity regularizer runs: its
        penalty would go into this Ctx, which nobody reads after the pass."""
        shape = x.shape
        if not shape or not shape[0] or (shape[1:] != self.tail and not self.fits(shape)):
            return None
        kind = x.dtype.kind
        if kind == "f":
            if finite and not (x.flags.c_contiguous and math.isfinite(np.vdot(x, x))):
                return None
        elif kind not in "biu":
            return None
        if (shape, x.itemsize, LIMITS.max_array_bytes) != self.checked:   # inlined: one shape, one check
            self.within_budget(x)
        ctx = Ctx(False)
        h = x
        for layer in self.chain:
            h = layer.forward(h, ctx)
        return h


def chain_plan(layers: Sequence[Layer], shape: Shape) -> ChainPlan | None:
    """The plan of ``layers`` built for inputs of ``shape``; None when some layer may make a
    mask of its own (its class's ``compute_mask`` is not in :data:`PASSES_NONE`) or there is
    no layer."""
    if not layers or any(type(la).compute_mask not in PASSES_NONE for la in layers):
        return None
    return ChainPlan(layers, shape)


def graph_chain(nodes: Sequence[Node], inputs: Sequence[Node], outputs: Sequence[Node]) -> ChainPlan | None:
    """The plan of a graph model that is a chain: one input that declared no dtype of its own
    (a declared one converts the array first), then each node one call of a layer on the node
    before it, the last node the one output, no layer with several outputs (``return_state``,
    ``merge_mode=None``) and none that takes several inputs; None for any other graph (and as
    :func:`chain_plan` for its layers)."""
    if len(inputs) != 1 or len(outputs) != 1 or inputs[0].dtype is not None or not nodes \
            or nodes[0] is not inputs[0] or outputs[0] is not nodes[-1]:
        return None
    layers: list[Layer] = []
    for before, n in zip(nodes[:-1], nodes[1:], strict=True):
        la = n.layer
        if la is None or len(n.inbound) != 1 or n.inbound[0] is not before or isinstance(la, MergeLayer) \
                or getattr(la, "return_state", False) or isinstance(n.shape, list) \
                or (isinstance(la, Bidirectional) and la.merge_mode is None):
            return None
        layers.append(la)
    return chain_plan(layers, inputs[0].shape)
