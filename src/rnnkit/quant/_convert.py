"""``quantize(model)``: the int8 twin of a built float32 model."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit._kind import builtin_kind
from rnnkit._layer import Layer
from rnnkit._numbers import show
from rnnkit.layers import Bidirectional, Dense
from rnnkit.layers._registry import layer_from_config, layer_to_config
from rnnkit.models import Sequential
from rnnkit.quant._layers import QuantizedDense, QuantizedRecurrent, check_quantizable
from rnnkit.quant._reference import quantize_weight
from rnnkit.recurrent import RecurrentLayer
from rnnkit.recurrent._registry import cell_to_config


def _int8_weights(layer: Layer) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, value in layer.weights():
        if name in ("kernel", "recurrent_kernel"):
            out[name + "_q"], out[name + "_scale"] = quantize_weight(value)
        else:
            out[name] = np.asarray(value, np.float32)
    return out


def _copy(layer: Layer) -> Layer:
    new = layer_from_config(layer_to_config(layer))
    if layer.built:
        new.build(layer.input_shape)
        for name, value in layer.weights():
            new.set_weight(name, value)
    return new


def quantize_layer(layer: Layer) -> Layer:
    """The int8 form of one built layer: ``Dense`` -> :class:`QuantizedDense`; a SimpleRNN /
    LSTM / GRU -> :class:`QuantizedRecurrent`; ``Bidirectional`` over them -> ``Bidirectional``
    over their int8 forms; a layer without a kernel (Dropout, Masking, Reshape, ...) and an
    Embedding are copied as they are. InvalidParameterError names a layer with a kernel that
    has no int8 form (a custom cell, an LSTM with ``proj_size``, a softmax gate, float64), and
    a ``layer`` that is not an rnnkit Layer."""
    if not isinstance(layer, Layer):
        raise InvalidParameterError(f"quantize_layer: expected an rnnkit Layer, got {show(layer)} "
                                    f"({type(layer).__name__})")
    if isinstance(layer, (QuantizedDense, QuantizedRecurrent)):
        return _copy(layer)
    if layer.built and layer.dtype != np.float32:
        raise InvalidParameterError(f"quantize: layer {layer.name} is {layer.dtype}; int8 models are "
                                    f"made from float32 models")
    if isinstance(layer, Bidirectional):
        fwd = quantize_layer(layer.forward_layer)
        bwd = quantize_layer(layer.backward_layer)
        out: Layer = Bidirectional(fwd, layer.merge_mode, backward_layer=bwd, name=layer.name)
        out.build(layer.input_shape)
        return out
    if type(layer) is Dense:
        dense = QuantizedDense(layer.units, layer.activation, use_bias=layer.use_bias, name=layer.name)
        dense.build(layer.input_shape)
        for name, value in _int8_weights(layer).items():
            dense.set_weight(name, value)
        return dense
    if isinstance(layer, RecurrentLayer):
        if builtin_kind(layer.cell) is None or (type(layer) is not RecurrentLayer
                                                and builtin_kind(layer.cell) != type(layer).__name__):
            raise InvalidParameterError(f"quantize: layer {layer.name} ({type(layer).__name__}) has no "
                                        f"int8 form (SimpleRNN, LSTM and GRU layers have)")
        check_quantizable(layer.cell, f"quantize: layer {layer.name}")
        cfg: dict[str, Any] = layer._walk_config()
        cfg.pop("dropout", None)
        cfg.pop("recurrent_dropout", None)
        cfg.pop("seed", None)
        rec = QuantizedRecurrent(cell_to_config(layer.cell), **cfg)
        rec.build(layer.input_shape)
        for name, value in _int8_weights(layer).items():
            rec.set_weight(name, value)
        return rec
    if layer.weight_names and type(layer).__name__ != "Embedding":
        raise InvalidParameterError(f"quantize: layer {layer.name} ({type(layer).__name__}) has weights "
                                    f"and no int8 form")
    return _copy(layer)


def quantize(model: Any) -> Sequential:
    """A new, built :class:`~rnnkit.Sequential` computing ``model``'s function in int8 (the
    weights of every Dense and recurrent kernel int8 per output channel, activations quantized
    per row at every step; see :mod:`rnnkit.kernels._int8`). ``model`` is unchanged and must be
    a built float32 ``Sequential``; the result is for inference (``predict``, ``evaluate``,
    saving); it is not compiled. InvalidParameterError names what has no int8 form."""
    if not isinstance(model, Sequential):
        raise InvalidParameterError(f"quantize: expected a built rnnkit Sequential model, got "
                                    f"{type(model).__name__} (graph models have no int8 form)")
    if not model.built:
        raise InvalidParameterError(f"quantize: {model.name} is not built; build or fit it first")
    layers = [quantize_layer(layer) for layer in model.layers]
    return Sequential(layers, name=model.name).build(model.input_shapes()[0])
