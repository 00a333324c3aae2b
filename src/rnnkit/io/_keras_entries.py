"""The Keras 3 config entry and weight vars of one rnnkit layer (:func:`keras_layer`), one
converter per layer class in :data:`KERAS_LAYERS`; what Keras cannot express is refused with
UnsupportedFeatureError naming the layer. The Sequential writer (:mod:`rnnkit.io._keras_export`)
and the functional one (:mod:`rnnkit.io._keras_functional`) both build their layer lists with it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._kind import builtin_kind, describe_cell
from rnnkit._layouts import cell_kind, to_keras
from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.io._keras_h5 import snake_case
from rnnkit.io._keras_layers import stacked_cell_names
from rnnkit.recurrent import StackedRNNCells

#: (relative h5 path of a vars group, its "name" attribute, its arrays)
Vars = list[tuple[str, str, list[np.ndarray]]]


def _act(fn: Any, layer: str) -> str:
    if fn.name == "softmax" and fn.axis != -1:
        raise UnsupportedFeatureError(layer, "activation", f"softmax over axis {fn.axis}; Keras' "
                                      f"activation 'softmax' acts on the last axis")
    return str(fn.name)


def _cell_entry(cell: Any, name: str, dtype: str, dropouts: dict[str, float]) -> dict[str, Any]:
    """Keras' config entry of a built-in cell named ``name``."""
    kind = cell_kind(cell, name)
    if getattr(cell, "proj_size", 0):
        raise UnsupportedFeatureError(name, "proj_size", f"Keras' LSTM has no projection; this cell has "
                                      f"proj_size={cell.proj_size}")
    cfg: dict[str, Any] = {"name": name, "trainable": True, "dtype": dtype, "units": int(cell.units),
                           "activation": _act(cell.activation, name), "use_bias": bool(cell.use_bias),
                           **dropouts}
    if kind != "SimpleRNN":
        cfg["recurrent_activation"] = cell.recurrent_activation.name
    if kind == "GRU":
        cfg["reset_after"] = bool(cell.reset_after)
    return {"module": "keras.layers", "class_name": f"{kind}Cell", "config": cfg, "registered_name": None}


def _stacked(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    """Keras' ``RNN(StackedRNNCells([...]))``: each cell's weights in ``cell/cells/<name>/vars``."""
    stack = layer.cell
    if layer.stateful:
        raise UnsupportedFeatureError(name, "stateful", "a stateful Keras layer needs a fixed batch size; "
                                      "this layer has stateful=True")
    if layer.dropout or layer.recurrent_dropout:
        raise UnsupportedFeatureError(name, "dropout", "Keras' stacked cells drop each cell's own input; "
                                      "this RNN drops the stack's input only (dropout must be 0 to export)")
    names = stacked_cell_names(stack)
    dt = layer.dtype.name
    entries, vars_ = [], []
    for k, (c, n) in enumerate(zip(stack.cells, names, strict=True)):
        if builtin_kind(c) is None:
            raise UnsupportedFeatureError(name, "cell", f"{describe_cell(c)} has no Keras cell; only "
                                          f"SimpleRNNCell, LSTMCell and GRUCell export")
        entries.append(_cell_entry(c, n, dt, {"dropout": 0.0, "recurrent_dropout": 0.0}))
        w = {p: layer.weight(f"cells.{k}.{p}") for p in ("kernel", "recurrent_kernel", "bias")
             if f"cells.{k}.{p}" in layer.weight_names}
        vars_.append((f"cell/cells/{n}/vars", n, to_keras(c, w)))
    cell = {"module": "keras.layers", "class_name": "StackedRNNCells", "registered_name": None,
            "config": {"name": "stacked_rnn_cells", "trainable": True, "dtype": dt, "cells": entries}}
    cfg = {"cell": cell, "return_sequences": layer.return_sequences, "return_state": layer.return_state,
           "go_backwards": layer.go_backwards, "stateful": False, "unroll": False,
           "zero_output_for_mask": False}
    return "RNN", cfg, [*vars_, ("cell/vars", "stacked_rnn_cells", []), ("vars", name, [])]


def _recurrent(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    if isinstance(layer.cell, StackedRNNCells):
        return _stacked(layer, name)
    if builtin_kind(layer.cell) is None:
        raise UnsupportedFeatureError(name, "cell", f"{describe_cell(layer.cell)} has no Keras layer; "
                                      f"only SimpleRNN, LSTM and GRU export")
    kind = cell_kind(layer.cell, name)
    cell = layer.cell
    for opt, bad, why in (("proj_size", getattr(cell, "proj_size", 0), "Keras' LSTM has no projection"),
                          ("stateful", layer.stateful, "a stateful Keras layer needs a fixed batch size")):
        if bad:
            raise UnsupportedFeatureError(name, opt, f"{why}; this layer has {opt}={bad}")
    cfg: dict[str, Any] = {"units": int(cell.units), "activation": _act(cell.activation, name),
                           "use_bias": bool(cell.use_bias), "return_sequences": layer.return_sequences,
                           "return_state": layer.return_state, "go_backwards": layer.go_backwards,
                           "stateful": False,
                           "unroll": False, "dropout": layer.dropout,
                           "recurrent_dropout": layer.recurrent_dropout}
    if kind != "SimpleRNN":
        cfg["recurrent_activation"] = cell.recurrent_activation.name
    if kind == "GRU":
        cfg["reset_after"] = bool(cell.reset_after)
    arrays = to_keras(cell, {n: layer.weight(n) for n in layer.weight_names})
    vars_: Vars = [("cell/vars", f"{snake_case(kind)}_cell", arrays), ("vars", name, [])]
    if type(layer).__name__ == "RNN":   # Keras' RNN over the cell (the weights lie where the layer's do)
        walk = {k: cfg.pop(k) for k in ("return_sequences", "return_state", "go_backwards", "stateful",
                                         "unroll")}
        cell_cfg = {"name": f"{snake_case(kind)}_cell", "trainable": True, "dtype": layer.dtype.name, **cfg}
        entry = {"module": "keras.layers", "class_name": f"{kind}Cell", "config": cell_cfg,
                 "registered_name": None}
        return "RNN", {"cell": entry, **walk, "zero_output_for_mask": False}, vars_
    return kind, cfg, vars_


def _plain(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    cls = type(layer).__name__
    if cls == "Dense":
        if getattr(layer, "tie_to", None) is not None:
            raise UnsupportedFeatureError(name, "tie_to", "Keras' Dense has no weight tying (a Keras model "
                                          "would train its own copy of the embedding table)")
        cfg = {"units": layer.units, "activation": _act(layer.activation, name), "use_bias": layer.use_bias}
        arrays = [layer.weight("kernel")] + ([layer.weight("bias")] if layer.use_bias else [])
        return "Dense", cfg, [("vars", name, arrays)]
    if cls == "Embedding":
        return "Embedding", {"input_dim": layer.input_dim, "output_dim": layer.output_dim,
                             "mask_zero": bool(getattr(layer, "mask_zero", False))}, \
            [("vars", name, [layer.weight("embeddings")])]
    cfg = {"Dropout": lambda: {"rate": layer.rate, "seed": None, "noise_shape": None},
           "RepeatVector": lambda: {"n": layer.n}, "Concatenate": lambda: {"axis": layer.axis},
           "ActivationLayer": lambda: {"activation": _act(layer.activation, name)}}[cls]()
    return ("Activation" if cls == "ActivationLayer" else cls), cfg, [("vars", name, [])]


def bidirectional_entry(name: str, fwd: Any, bwd: Any, shape: Any,
                        merge_mode: str | None = "concat") -> tuple[dict[str, Any], Vars]:
    """A Keras ``Bidirectional`` named ``name`` over the recurrent layers ``fwd`` / ``bwd``."""
    f_entry, f_vars = keras_layer(fwd, f"forward_{fwd.name}", shape, states_ok=True)
    b_entry, b_vars = keras_layer(bwd, f"backward_{bwd.name}", shape, states_ok=True)
    entry = {"module": "keras.layers", "class_name": "Bidirectional", "registered_name": None,
             "config": {"name": name, "trainable": True, "dtype": fwd.dtype.name, "merge_mode": merge_mode,
                        "layer": f_entry, "backward_layer": b_entry},
             "build_config": {"input_shape": shape}}
    vars_ = ([(f"forward_layer/{rel}", nm, arr) for rel, nm, arr in f_vars]
             + [(f"backward_layer/{rel}", nm, arr) for rel, nm, arr in b_vars] + [("vars", name, [])])
    return entry, vars_


def _attention(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    """``Attention`` / ``AdditiveAttention``: the constructor's options (the call's go to
    :func:`call_kwargs`) and the weights in Keras' order (rnnkit's names are Keras')."""
    cls = type(layer).__name__
    cfg: dict[str, Any] = {"use_scale": layer.use_scale, "dropout": layer.dropout, "seed": layer.seed}
    if cls == "Attention":
        cfg["score_mode"] = layer.score_mode
    return cls, cfg, [("vars", name, [layer.weight(n) for n in layer.weight_names])]


def _multi_head(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    """``MultiHeadAttention``: its options, and each projection's kernel and bias in the h5 group
    of Keras' EinsumDense sublayer (``query_dense``, ``key_dense``, ``value_dense``,
    ``output_dense``)."""
    cfg = {"num_heads": layer.num_heads, "key_dim": layer.key_dim, "value_dim": layer.value_dim,
           "dropout": layer.dropout, "use_bias": layer.use_bias, "use_gate": False,
           "output_shape": None if layer.output_shape is None else [layer.output_shape],
           "attention_axes": [1], "sliding_window": None, "seed": layer.seed}
    vars_: Vars = []
    for part, group in (("query", "query"), ("key", "key"), ("value", "value"),
                        ("attention_output", "output")):
        names = [n for n in (f"{part}_kernel", f"{part}_bias") if n in layer.weight_names]
        vars_.append((f"{group}_dense/vars", part, [layer.weight(n) for n in names]))
    return "MultiHeadAttention", cfg, vars_ + [("vars", name, [])]


def call_kwargs(layer: Any) -> dict[str, Any]:
    """The Keras call arguments of ``layer``'s calls that rnnkit holds as its configuration."""
    if type(layer).__name__ in ("Attention", "AdditiveAttention", "MultiHeadAttention"):
        return {"use_causal_mask": layer.use_causal_mask,
                "return_attention_scores": layer.return_attention_scores}
    return {}


def _bidirectional(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    """rnnkit's ``Bidirectional`` layer (forward_layer, backward_layer, merge_mode)."""
    entry, vars_ = bidirectional_entry(name, layer.forward_layer, layer.backward_layer, None,
                                       layer.merge_mode)
    cfg = {k: v for k, v in entry["config"].items() if k not in ("name", "trainable", "dtype")}
    for inner in ("layer", "backward_layer"):   # built by the Bidirectional from its own input shape
        cfg[inner].pop("build_config", None)
    return "Bidirectional", cfg, vars_


def _weightless(keras_class: str, **options: str) -> Any:
    """A layer without weights whose Keras config is ``{option: layer.<attribute>}``."""
    def conv(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
        return keras_class, {k: getattr(layer, attr) for k, attr in options.items()}, [("vars", name, [])]
    return conv


def _configured(keras_class: str, *options: str) -> Any:
    """A layer without weights whose Keras config is the given keys of its own config (the same
    names and JSON forms as Keras')."""
    def conv(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
        cfg = layer.get_config()
        return keras_class, {k: cfg[k] for k in options}, [("vars", name, [])]
    return conv


def _declared(keras_class: str, *options: str) -> Any:
    """A layer whose Keras config is ``{option: layer.<option>}`` and whose weights are its own,
    declared in Keras' order."""
    def conv(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
        return (keras_class, {k: getattr(layer, k) for k in options},
                [("vars", name, [layer.weight(n) for n in layer.weight_names])])
    return conv


def _conv1d(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    cfg = {"filters": layer.filters, "kernel_size": [layer.kernel_size], "strides": [layer.strides],
           "padding": layer.padding, "data_format": "channels_last", "dilation_rate": [layer.dilation_rate],
           "groups": layer.groups, "activation": _act(layer.activation, name), "use_bias": layer.use_bias}
    return "Conv1D", cfg, [("vars", name, [layer.weight(n) for n in layer.weight_names])]


def _conv_lstm(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    """A ConvLSTM1D / ConvLSTM2D: Keras' config; its weights in the cell's group, Keras' order."""
    if layer.stateful:
        raise UnsupportedFeatureError(name, "stateful", "a stateful Keras layer needs a fixed batch size; "
                                      "this layer has stateful=True")
    cfg = {"filters": layer.filters, "kernel_size": list(layer.kernel_size), "strides": list(layer.strides),
           "padding": layer.padding, "data_format": "channels_last",
           "dilation_rate": list(layer.dilation_rate), "activation": _act(layer.activation, name),
           "recurrent_activation": layer.recurrent_activation.name, "use_bias": layer.use_bias,
           "unit_forget_bias": layer.unit_forget_bias, "dropout": layer.dropout,
           "recurrent_dropout": layer.recurrent_dropout, "seed": layer.seed,
           "return_sequences": layer.return_sequences, "return_state": layer.return_state,
           "go_backwards": layer.go_backwards, "stateful": False, "unroll": False}
    arrays = [layer.weight(n) for n in layer.weight_names]
    return type(layer).__name__, cfg, [("cell/vars", "conv_lstm_cell", arrays), ("vars", name, [])]


def _pool(keras_class: str) -> Any:
    def conv(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
        return keras_class, {"pool_size": [layer.pool_size], "strides": [layer.strides],
                             "padding": layer.padding, "data_format": "channels_last"}, [("vars", name, [])]
    return conv


def _global_pool(keras_class: str) -> Any:
    def conv(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
        return keras_class, {"data_format": "channels_last", "keepdims": layer.keepdims}, [("vars", name, [])]
    return conv


def _time_distributed(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
    """``TimeDistributed``: the wrapped layer's entry (built by the wrapper from its own input
    shape) and its vars under ``layer/``."""
    inner, vars_ = keras_layer(layer.layer, layer.layer.name, None)
    inner.pop("build_config", None)
    return "TimeDistributed", {"layer": inner}, [(f"layer/{rel}", nm, arr) for rel, nm, arr in vars_] + \
        [("vars", name, [])]


def _refuse(why: str) -> Any:
    def conv(layer: Any, name: str) -> Any:
        raise UnsupportedFeatureError(name, type(layer).__name__, why)
    return conv


#: rnnkit layer class name -> (layer, Keras name) -> (Keras class, config, vars); a
#: RecurrentLayer subclass uses "RecurrentLayer"
KERAS_LAYERS: dict[str, Any] = {
    "RecurrentLayer": _recurrent, "Dense": _plain, "Embedding": _plain, "Dropout": _plain,
    "RepeatVector": _plain, "Concatenate": _plain, "ActivationLayer": _plain,
    # the sequence-model layers (where rnnkit has them)
    "Bidirectional": _bidirectional, "Masking": _weightless("Masking", mask_value="mask_value"),
    "LayerNormalization": _declared("LayerNormalization", "axis", "epsilon", "center", "scale"),
    "BatchNormalization": _declared("BatchNormalization", "axis", "momentum", "epsilon", "center", "scale"),
    "Conv1D": _conv1d, "ConvLSTM1D": _conv_lstm, "ConvLSTM2D": _conv_lstm,
    "MaxPooling1D": _pool("MaxPooling1D"), "AveragePooling1D": _pool("AveragePooling1D"),
    "GlobalAveragePooling1D": _global_pool("GlobalAveragePooling1D"),
    "GlobalMaxPooling1D": _global_pool("GlobalMaxPooling1D"),
    "ZeroPadding1D": _weightless("ZeroPadding1D", padding="padding"),
    "Cropping1D": _weightless("Cropping1D", cropping="cropping"),
    "UpSampling1D": _weightless("UpSampling1D", size="size"),
    "Attention": _attention, "AdditiveAttention": _attention, "MultiHeadAttention": _multi_head,
    "Add": _weightless("Add"), "Multiply": _weightless("Multiply"), "Average": _weightless("Average"),
    # the shape layers and wrappers
    "Flatten": _weightless("Flatten", data_format="data_format"),
    "Reshape": _configured("Reshape", "target_shape"), "Permute": _configured("Permute", "dims"),
    "SpatialDropout1D": _weightless("SpatialDropout1D", rate="rate", seed="noise_seed"),
    "GaussianNoise": _weightless("GaussianNoise", stddev="stddev", seed="noise_seed"),
    "Subtract": _weightless("Subtract"), "Maximum": _weightless("Maximum"), "Minimum": _weightless("Minimum"),
    "Dot": _configured("Dot", "axes", "normalize"),
    "TimeDistributed": _time_distributed,
    "Lambda": _refuse("a Lambda layer is Python code; rnnkit writes no code to a file (Keras itself loads a "
                      "Lambda only with safe_mode=False): rebuild it in code after loading"),
    "GroupNormalization": _declared("GroupNormalization", "groups", "axis", "epsilon", "center", "scale"),
    "RNNNet": _refuse("an RNNNet is a PyTorch-layout stack with no Keras layer; write it with "
                      "save_torch_safetensors, or export a Sequential of SimpleRNN/LSTM/GRU layers"),
    "Reverse": _refuse("Keras has no layer reversing an axis (only a Bidirectional's backward branch, "
                       "written from the forward/backward/Reverse/Concatenate pattern)"),
}


#: the Keras classes whose config has no "trainable" (their constructor refuses it)
NO_TRAINABLE = ("SpatialDropout1D",)


def keras_layer(layer: Any, name: str, shape: Any, states_ok: bool = False) -> tuple[dict[str, Any], Vars]:
    """The Keras config entry of ``layer`` (named ``name``, fed ``shape``) and its vars.
    ``states_ok``: the graph can pick a layer's several outputs (nodes with an ``index``), so a
    ``return_state`` layer is expressible; otherwise it is refused."""
    if getattr(layer, "return_state", False) and not states_ok:
        raise UnsupportedFeatureError(name, "return_state", "a Keras layer returning its state needs a "
                                      "graph whose nodes pick its outputs; this layer has return_state=True")
    for cls in type(layer).__mro__:
        if cls.__name__ in KERAS_LAYERS:
            kcls, cfg, vars_ = KERAS_LAYERS[cls.__name__](layer, name)
            break
    else:
        raise UnsupportedFeatureError(name, type(layer).__name__,
                                      f"no Keras export for layer class {type(layer).__name__!r}; "
                                      f"exported: {', '.join(sorted(KERAS_LAYERS))}")
    cfg = {"name": name, "trainable": True, "dtype": layer.dtype.name, **cfg}
    if kcls in NO_TRAINABLE:
        del cfg["trainable"]
    build: dict[str, Any] = {"input_shape": shape}
    if kcls == "MultiHeadAttention":   # Keras builds it from named shapes
        build = {"shapes_dict": dict(zip(("query_shape", "value_shape", "key_shape"), shape, strict=False))}
    return ({"module": "keras.layers", "class_name": kcls, "config": cfg, "registered_name": None,
             "build_config": build}, vars_)


def shape_list(s: Any) -> Any:
    """A Shape (or a list of them) as Keras' ``[None, 5, 4]`` lists."""
    return [list(x.dims) for x in s] if isinstance(s, list) else list(s.dims)
