"""``Sequential``: a stack of single-input layers, and ``SequentialBuilder``, its builder spelling
(an alias: :mod:`rnnkit.models._aliases`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rnnkit import _penalties as _pen
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer, resolve_dtype
from rnnkit._limits import LIMITS
from rnnkit._shape import Shape
from rnnkit.layers import MergeLayer, layer_from_config, layer_to_config
from rnnkit.layers._tied import resolve_ties
from rnnkit.models._base import Model, check_finite
from rnnkit.models._inference import chain_plan
from rnnkit.models._keras_shape import with_batch_axis
from rnnkit.models._mask_flow import check_mask_taken, mask_after
from rnnkit.models._node import Node
from rnnkit.models._summary import param_text, shape_text


def check_weight_grads(layer: Layer, ctx: Ctx, where: str) -> None:
    """Every weight gradient of ``layer`` stored in ``ctx`` is finite (NonFiniteAt otherwise)."""
    for n in layer.weight_names:
        g = ctx.grads.get((layer, n))
        if g is not None:
            check_finite(g, f"the gradient of {where}.{n} ({type(layer).__name__})")


def layer_label(prefix: str, layer: Layer) -> str:
    """``"1 (LSTM)"``; a layer named other than its class: ``"1 encoder (LSTM)"``."""
    cls = type(layer).__name__
    return f"{prefix} ({cls})" if layer.name == cls else f"{prefix} {layer.name} ({cls})"


def set_dtype(layer: Layer, dtype: np.dtype, where: str) -> None:
    """Make ``layer`` (and the layers inside a wrapper, Bidirectional's directions) keep its
    weights and compute in ``dtype``; InvalidInputError for one already built in another."""
    inner = [sub for _, sub in getattr(layer, "_parts", None) or [] if isinstance(sub, Layer)]
    for la in [layer, *inner]:
        if la.dtype != dtype and la.built:
            raise InvalidInputError(f"{where}: the layer is already built in {la.dtype.name}; the model's "
                                    f"dtype is {dtype.name}: build it in {dtype.name} or add it unbuilt")
    for la in [layer, *inner]:
        la.dtype = dtype


class Sequential(Model):
    """Layers applied one after another; layer ``i``'s weights are named ``"{i}.{weight}"``
    (so an LSTM at position 2 saves ``2.kernel``, ``2.recurrent_kernel``, ``2.bias``).

    ``Sequential([...])`` builds lazily on the first ``fit`` / ``predict`` / ``evaluate`` from
    the data's shape with a free batch axis, or explicitly with :meth:`build`
    (``input_shape=`` builds at once; Keras' shape of one sample, ``input_shape=(8, 8)``, is read
    as ``(None, 8, 8)``: :mod:`rnnkit.models._keras_shape`). A model always accepts any batch
    size: the batch axis of the build shape is made free. Other ``None`` axes (e.g. a free time
    axis) stay free.

    ``dtype="float64"`` (or ``"float32"``): every layer keeps its weights and computes in that
    dtype, whatever its own ``dtype=`` said (a model-wide dtype, as Keras' dtype policy); a
    layer already built in another dtype is refused. None (default): each layer's own.
    """

    def __init__(self, layers: Sequence[Layer | Node] | None = None, *, input_shape: Any = None,
                 name: str = "sequential", dtype: Any = None) -> None:
        super().__init__(name)
        self.dtype = None if dtype is None else resolve_dtype(dtype, f"{name}: dtype")
        self.layers: list[Layer] = []
        self._position: dict[int, int] = {}   # id(layer) -> its index in self.layers (add's check)
        self._input_shape: Shape | None = None
        self._out_shapes: list[Shape] = []
        self._declared = False   # built for the first layer's input_shape= (layers may still be added)
        self._given_input: Shape | None = None   # an rk.Input(...) given first, before any layer
        if layers is not None and not isinstance(layers, (list, tuple)):
            raise TypeError(f"{name}: layers must be a list of Layers (or None), got {type(layers).__name__}")
        for layer in layers or []:
            self.add(layer)
        if input_shape is not None:  # Keras' convention (no batch axis) too: models/_keras_shape.py
            self.build(with_batch_axis(self.layers, input_shape))

    def _call_nodes(self, x: Any, ctx: Ctx | None) -> Any:
        """``model(node)`` (Keras' nested-model call): this model's layers called in turn on the
        graph node — the same layers, so the same weights — giving the node of the last one's
        output."""
        if ctx is not None:
            raise InvalidInputError(f"{self.name}: a call on graph nodes takes no ctx")
        if not isinstance(x, Node):
            raise InvalidInputError(f"{self.name}: a Sequential is called on one graph node, got "
                                    f"{type(x).__name__}")
        if not self.layers:
            raise InvalidInputError(f"{self.name}: a Sequential without layers cannot be called on a node")
        out: Any = x
        for layer in self.layers:
            out = layer(out)
        return out

    def add(self, layer: Layer | Node) -> Sequential:
        """Append a layer (chainable). Only before the model is built. As in Keras, the first
        entry may be an ``rk.Input(shape)``: the model is then built for it once its first
        layer comes (and each later layer as it is added)."""
        if self._input_shape is not None and not self._declared:
            raise InvalidInputError(f"{self.name}: cannot add a layer to a built model")
        if isinstance(layer, Node) and layer.is_input:
            if self.layers or self._given_input is not None:
                raise InvalidInputError(f"{self.name}: an rk.Input may only be the first entry of a "
                                        f"Sequential (it declares the model's input); got one at position "
                                        f"{len(self.layers) + (self._given_input is not None)}")
            self._given_input = layer.shape
            return self
        if not isinstance(layer, Layer):
            raise InvalidInputError(f"{self.name}: expected a Layer, got {type(layer).__name__}")
        if isinstance(layer, MergeLayer):
            raise InvalidInputError(
                f"{self.name}: {type(layer).__name__} takes several inputs; use a GraphBuilder"
            )
        at = self._position.get(id(layer))
        if at is not None and at < len(self.layers) and self.layers[at] is layer:
            raise InvalidInputError(
                f"{self.name}: this {layer.name} layer is already at position {at}; share a layer "
                f"in a graph model instead"
            )
        if self.dtype is not None:
            set_dtype(layer, self.dtype, f"{self.name}: layer {len(self.layers)} ({type(layer).__name__})")
        if self._input_shape is not None:   # (refused before it joins the model)
            source: Layer | None = None
            for before in self.layers:
                source = mask_after(before, source)
            check_mask_taken(layer, source, f"{self.name}: layer {len(self.layers)}")
        self._position[id(layer)] = len(self.layers)
        self.layers.append(layer)
        if self._input_shape is not None:  # built for a declared input shape: build the new layer
            self._out_shapes.append(self._build_layer(len(self.layers) - 1, layer, self._out_shapes[-1]))
            self._keep_chain(chain_plan(self.layers, self._input_shape), Sequential)
        elif len(self.layers) == 1 and (self._given_input or layer.declared_input_shape) is not None:
            # Keras: an Input first, or input_shape= on the first layer
            self.build(self._given_input or layer.declared_input_shape)  # type: ignore[arg-type]
            self._declared = True
        return self

    @property
    def built(self) -> bool:
        return self._input_shape is not None

    def input_shapes(self) -> list[Shape]:
        if self._input_shape is None:
            raise InvalidInputError(f"{self.name}: not built")
        return [self._input_shape]

    def build(self, shape: Shape | tuple[int | None, ...]) -> Sequential:
        """Build every layer in order, threading each output shape into the next layer.

        ``shape`` is the input's shape (its batch axis is made free). Returns the model.
        """
        if not self.layers:
            raise InvalidInputError(f"{self.name}: cannot build a model with no layers")
        shp = Shape.of(shape)
        if shp.rank < 1:
            raise InvalidInputError(f"{self.name}: expected an input shape of rank >= 1, got {shp}")
        cur = Shape((None, *shp[1:]))
        first = cur
        outs: list[Shape] = []
        source: Layer | None = None   # the layer whose mask reaches layer i (:mod:`._mask_flow`)
        for i, layer in enumerate(self.layers):
            check_mask_taken(layer, source, f"{self.name}: layer {i}")
            cur = self._build_layer(i, layer, cur)
            outs.append(cur)
            source = mask_after(layer, source)
        self._out_shapes = outs
        self._input_shape = first
        self._keep_chain(chain_plan(self.layers, first), Sequential)
        return self

    def _build_layer(self, i: int, layer: Layer, cur: Shape) -> Shape:
        """Build layer ``i`` for inputs of ``cur``; its output shape. A layer that declared
        Keras' ``input_shape=`` must be given that shape (None there matches any extent)."""
        want = layer.declared_input_shape
        if want is not None and (want.rank != cur.rank or any(
                w is not None and c is not None and w != c for w, c in zip(want, cur, strict=True))):
            raise InvalidInputError(
                f"{self.name}: layer {i} ({type(layer).__name__}) declares input_shape={tuple(want[1:])} "
                f"(batch shape {want}), but its input has shape {cur}")
        try:
            layer.build(cur)
            out = layer.compute_output_shape(cur)
        except InvalidInputError as e:
            raise InvalidInputError(f"{self.name}: layer {i} ({type(layer).__name__}): {e}") from None
        if isinstance(out, list) or getattr(layer, "return_state", False):
            raise InvalidInputError(
                f"{self.name}: layer {i} ({type(layer).__name__}) has several outputs "
                f"(return_state, merge_mode=None); use a GraphBuilder and index its node")
        return out

    def _ensure_built(self, xs: list[np.ndarray]) -> None:
        if self._input_shape is None:
            with self._build_lock:
                if self._input_shape is None:
                    if xs[0].ndim < 1:
                        raise InvalidInputError(f"{self.name}: expected an array input, got a scalar")
                    self.build(Shape.with_free_batch(xs[0].shape))

    @property
    def output_shape(self) -> Shape:
        if not self._out_shapes:
            raise InvalidInputError(f"{self.name}: not built")
        return self._out_shapes[-1]

    def _forward(self, xs: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        return self._forward_masks(xs, ctx, check)[0]

    def _forward_masks(self, xs: list[np.ndarray], ctx: Ctx, check: bool,
                       masks: list[Any] | None = None) -> tuple[list[np.ndarray], list[Any]]:
        """The forward pass with mask propagation: ``masks[0]`` (default ``ctx.mask``) is the
        input's mask; before each layer ``ctx.mask`` is its input's mask, and
        ``layer.compute_mask`` gives the next one (a layer that cannot take a mask raises
        before it runs). ``ctx.mask`` is cleared afterwards. Returns (outputs, output masks).
        Without an input mask, a maskless chain (:mod:`rnnkit.models._inference`) runs the
        layers with no mask plumbing: no layer of it makes a mask, so every one would be None."""
        h: np.ndarray = xs[0]
        mask = masks[0] if masks is not None else ctx.mask
        chain = self._chain
        if chain is not None and mask is None:
            if masks is not None and ctx.mask is not None:   # masks=[None] overrides ctx.mask
                ctx.set_mask(None)
            if (h.shape, h.itemsize, LIMITS.max_array_bytes) != chain.checked:   # once per input shape
                chain.within_budget(h)
            for i, layer in enumerate(chain.chain):
                h = layer.forward(h, ctx)
                if layer.activity_regularizer is not None:
                    _pen.activity_forward(layer, h, ctx)
                if check:
                    check_finite(h, f"the output of layer {i} ({type(layer).__name__})")
            return [h], [None]
        try:
            for i, layer in enumerate(self.layers):
                if isinstance(h, np.ndarray):
                    layer._output_within_budget(h)
                try:
                    out_mask = layer.compute_mask(h, mask)
                except InvalidInputError as e:
                    raise InvalidInputError(f"{self.name}: layer {i} ({type(layer).__name__}): {e}") from None
                h = layer.forward(h, ctx.set_mask(mask))
                if layer.activity_regularizer is not None:
                    _pen.activity_forward(layer, h, ctx)
                mask = out_mask
                if check:
                    check_finite(h, f"the output of layer {i} ({type(layer).__name__})")
        finally:
            ctx.set_mask(None)
        return [h], [mask]

    def _backward(self, grads: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        g = grads[0]
        for i in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[i]
            if layer.activity_regularizer is not None:
                g = _pen.activity_backward(layer, g, ctx)
            g = layer.backward(g, ctx)
            if check:
                check_weight_grads(layer, ctx, str(i))
                check_finite(g, f"the input gradient of layer {i} ({type(layer).__name__})")
        return [g]

    def _unread_input_grads(self) -> tuple[Layer, ...]:
        """The first layer (a Sequential holds a layer once): its input gradient is dL/d(data)."""
        return (self.layers[0],) if self.layers else ()

    def _output_layer(self) -> Layer | None:
        """The layer whose output is the model's (the last one; None when there is none)."""
        return self.layers[-1] if self.layers else None

    def named_weights(self) -> dict[str, tuple[Layer, str]]:
        """``{"{index}.{weight}": (layer, weight)}`` in layer order."""
        return {f"{i}.{n}": (layer, n) for i, layer in enumerate(self.layers) for n in layer.weight_names}

    def _summary_rows(self) -> tuple[list[str], list[list[str]]]:
        if not self.built:   # Keras 3: "?" shapes, "0 (unbuilt)" counts
            rows = [[layer_label(str(i), layer), "?", param_text(layer)]
                    for i, layer in enumerate(self.layers)]
        else:
            rows = [[layer_label(str(i), layer), shape_text(s), f"{layer.param_count():,}"]
                    for i, (layer, s) in enumerate(zip(self.layers, self._out_shapes, strict=True))]
        return ["Layer (type)", "Output Shape", "Param #"], rows

    def get_config(self) -> dict[str, Any]:
        """``{"class_name": "Sequential", "config": {"name", "input_shape", "layers"}}`` (and
        ``"dtype"`` when the model was given one)."""
        shp = None if self._input_shape is None else list(self._input_shape.dims)
        return {"class_name": "Sequential",
                "config": {"name": self.name, "input_shape": shp,
                           **({} if self.dtype is None else {"dtype": self.dtype.name}),
                           "layers": [layer_to_config(layer) for layer in self.layers]}}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Sequential:
        """A new model (fresh weights) from the ``"config"`` part of :meth:`get_config`."""
        layers = [layer_from_config(c) for c in config.get("layers", [])]
        resolve_ties(layers)   # a tied Dense names its Embedding
        return cls(layers, input_shape=config.get("input_shape"), name=config.get("name", "sequential"),
                   dtype=config.get("dtype"))


class SequentialBuilder:
    """``SequentialBuilder(name).add(a).add(b).build(shape)``: ``Sequential([a, b],
    name=name).build(shape)`` (an alias: :mod:`rnnkit.models._aliases`)."""

    def __init__(self, name: str = "sequential") -> None:
        self._layers: list[Layer] = []
        self._name = name

    def add(self, layer: Layer) -> SequentialBuilder:
        self._layers.append(layer)
        return self

    def build(self, shape: Shape | tuple[int | None, ...]) -> Sequential:
        """Build every layer for inputs of ``shape`` (batch axis free) and return the model."""
        return Sequential(self._layers, name=self._name).build(shape)
