"""One Keras 3 layer config -> rnnkit layer(s), and a Keras weight list -> rnnkit weights.

Every option that changes what the layer computes at inference is checked; an option rnnkit
cannot reproduce raises :class:`UnsupportedFeatureError` naming the layer and the option (see
the table in :mod:`rnnkit.io._keras_file`). Options that only act while training (a
SimpleRNN's ``recurrent_dropout``, Dropout ``noise_shape``, custom regularizers and
constraints) are accepted with a warning naming the layer: the imported model predicts exactly
as Keras does, but further training in rnnkit does not apply them. A recurrent layer's
``dropout`` (and an LSTM's or GRU's ``recurrent_dropout``) is carried over; so are Keras' own
regularizers (L1, L2, L1L2) and constraints (MaxNorm, NonNeg, UnitNorm, MinMaxNorm), which
act in training as in Keras.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnkit import constraints, regularizers
from rnnkit._errors import Error, FileFormatError
from rnnkit._kind import builtin_kind
from rnnkit._layer import Layer
from rnnkit._penalties import attach
from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.layers import (
    ActivationLayer,
    Add,
    AdditiveAttention,
    Attention,
    Average,
    AveragePooling1D,
    BatchNormalization,
    Bidirectional,
    Concatenate,
    Conv1D,
    Cropping1D,
    Dense,
    Dot,
    Dropout,
    Embedding,
    Flatten,
    GaussianNoise,
    GlobalAveragePooling1D,
    GlobalMaxPooling1D,
    GroupNormalization,
    LayerNormalization,
    Masking,
    Maximum,
    MaxPooling1D,
    Minimum,
    MultiHeadAttention,
    Multiply,
    Permute,
    RepeatVector,
    Reshape,
    SpatialDropout1D,
    Subtract,
    TimeDistributed,
    UpSampling1D,
    ZeroPadding1D,
)
from rnnkit.layers._conv_lstm import ConvLSTM, ConvLSTM1D, ConvLSTM2D
from rnnkit.recurrent import GRU, LSTM, RNN, RecurrentLayer, SimpleRNN, StackedRNNCells
from rnnkit.recurrent._weights import keras_bias

RECURRENT = {"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU}
SUPPORTED = ("InputLayer", "SimpleRNN", "LSTM", "GRU", "Bidirectional", "Dense", "Embedding",
             "Dropout", "RepeatVector", "Activation", "Concatenate", "TimeDistributed", "Masking",
             "Add", "Multiply", "Average", "LayerNormalization", "Conv1D", "MaxPooling1D",
             "AveragePooling1D", "GlobalAveragePooling1D", "GlobalMaxPooling1D", "ZeroPadding1D",
             "Cropping1D", "UpSampling1D", "BatchNormalization", "Attention", "AdditiveAttention",
             "MultiHeadAttention", "Flatten", "Reshape", "Permute", "SpatialDropout1D", "GaussianNoise",
             "Subtract", "Maximum", "Minimum", "Dot", "GroupNormalization", "RNN",
             "ConvLSTM1D", "ConvLSTM2D")
POOLS = {"MaxPooling1D": MaxPooling1D, "AveragePooling1D": AveragePooling1D}
GLOBAL_POOLS = {"GlobalAveragePooling1D": GlobalAveragePooling1D, "GlobalMaxPooling1D": GlobalMaxPooling1D}
CONV_LSTMS: dict[str, type[ConvLSTM]] = {"ConvLSTM1D": ConvLSTM1D, "ConvLSTM2D": ConvLSTM2D}
MERGES = {"Add": Add, "Multiply": Multiply, "Average": Average, "Subtract": Subtract, "Maximum": Maximum,
          "Minimum": Minimum}
ACTIVATIONS = ("tanh", "sigmoid", "relu", "linear", "softmax", "hard_sigmoid")
_TRAIN_ONLY = ("kernel_regularizer", "recurrent_regularizer", "bias_regularizer",
               "activity_regularizer", "embeddings_regularizer", "kernel_constraint",
               "recurrent_constraint", "bias_constraint", "embeddings_constraint")


@dataclass
class Mapped:
    """A Keras layer as rnnkit layers.

    ``parts`` lists ``(rnnkit layer, vars path relative to the Keras layer's h5 group)`` for
    every rnnkit layer with weights (a Bidirectional's two directions); ``layer`` is the rnnkit
    layer (None for an InputLayer).
    """

    name: str
    class_name: str
    layer: Layer | None
    parts: list[tuple[Layer, str]] = field(default_factory=list)
    return_sequences: bool = False  # Bidirectional only


def _warn(name: str, what: str) -> None:
    warnings.warn(f"Keras layer {name!r}: {what}", UserWarning, stacklevel=4)


def dtype_of(cfg: dict[str, Any], name: str) -> str:
    """The layer's compute dtype: float32 or float64 (anything else is refused)."""
    d = cfg.get("dtype", "float32")
    if isinstance(d, dict):
        d = (d.get("config") or {}).get("name", "float32")
    if d is None:
        d = "float32"
    if d not in ("float32", "float64"):
        raise UnsupportedFeatureError(name, "dtype", f"dtype policy {d!r} is not supported; rnnkit "
                                      f"computes in float32 or float64 only")
    return str(d)


def _activation(cfg: dict[str, Any], key: str, name: str, default: str = "linear") -> str:
    a = cfg.get(key, default)
    if a is None:
        a = "linear"
    if isinstance(a, dict):  # a serialised function: {"class_name": "function", "config": "relu"}
        a = a.get("config") if isinstance(a.get("config"), str) else repr(a)
    if a not in ACTIVATIONS:
        raise UnsupportedFeatureError(name, key, f"activation {a!r} is not supported; rnnkit has "
                                      f"{', '.join(ACTIVATIONS)}")
    return str(a)


def _refuse_if(cond: bool, name: str, option: str, msg: str) -> None:
    if cond:
        raise UnsupportedFeatureError(name, option, msg)


def _readable_train_options(cfg: dict[str, Any]) -> dict[str, Any]:
    """The regularizers / constraints of a Keras layer config that rnnkit reproduces (Keras'
    L1, L2, L1L2, MaxNorm, NonNeg, UnitNorm, MinMaxNorm), as rnnkit objects by keyword."""
    out: dict[str, Any] = {}
    for k in _TRAIN_ONLY:
        if cfg.get(k) is None:
            continue
        with contextlib.suppress(Error):
            out[k] = (regularizers.get if k.endswith("regularizer") else constraints.get)(cfg[k])
    return out


def _train_only_options(cfg: dict[str, Any], name: str) -> None:
    readable = _readable_train_options(cfg)
    present = [k for k in _TRAIN_ONLY if cfg.get(k) is not None and k not in readable]
    if present:
        _warn(name, f"{', '.join(present)} not carried over (custom regularizers / constraints act "
                    f"only in training; predictions are unaffected)")


def _carry_train_options(layer_cfg: dict[str, Any], mapped: Mapped) -> None:
    """Attach the readable regularizers / constraints of the Keras config to the rnnkit layer(s)."""
    cfg = layer_cfg.get("config") or {}
    if mapped.class_name == "TimeDistributed":
        cfg = (cfg.get("layer") or {}).get("config") or {}
    if mapped.class_name == "Bidirectional":
        fwd = cfg.get("layer") or {}
        subs = [fwd.get("config") or {}, (cfg.get("backward_layer") or fwd).get("config") or {}]
        for (layer, _), sub in zip(mapped.parts, subs, strict=False):
            attach(layer, **_readable_train_options(sub))
    elif mapped.layer is not None:
        opts = _readable_train_options(cfg)
        if opts:
            attach(mapped.layer, **opts)


def _flag(cfg: dict[str, Any], key: str, default: bool, name: str) -> bool:
    """A boolean option of a Keras layer config; anything but true/false is a malformed file."""
    v = cfg.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise FileFormatError(f"Keras layer {name!r}: option {key!r} must be true or false, got {v!r}")
    return v


def _int(cfg: dict[str, Any], key: str, name: str, default: int | None = None) -> int:
    """An integer option of a Keras layer config (a float or string is a malformed file)."""
    v = cfg[key] if default is None else cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise FileFormatError(f"Keras layer {name!r}: option {key!r} must be an integer, got {v!r}")
    return v


def _norm_train_options(cfg: dict[str, Any], name: str) -> None:
    """A normalization layer's gamma / beta regularizers and constraints act only in training:
    warned about, not carried over."""
    present = [k for k in ("gamma_regularizer", "beta_regularizer", "gamma_constraint", "beta_constraint")
               if cfg.get(k) is not None]
    if present:
        _warn(name, f"{', '.join(present)} not carried over (they act only in training; predictions "
                    f"are unaffected)")


def _recurrent(class_name: str, cfg: dict[str, Any], name: str) -> RecurrentLayer:
    extra: dict[str, Any] = {}
    if class_name != "SimpleRNN":
        rec = _activation(cfg, "recurrent_activation", name, "sigmoid")
        _refuse_if(rec == "softmax", name, "recurrent_activation",
                   "recurrent_activation 'softmax' is not supported; rnnkit's gates take sigmoid, "
                   "hard_sigmoid, tanh, relu or linear")
        extra["recurrent_activation"] = rec
    act = _activation(cfg, "activation", name, "tanh")
    rec_drop = float(cfg.get("recurrent_dropout") or 0.0)
    if rec_drop > 0 and class_name == "SimpleRNN":
        _warn(name, f"recurrent_dropout={rec_drop} ignored: rnnkit's SimpleRNN has no dropout on the "
                    f"recurrent state (inference is unaffected; training in rnnkit runs without it)")
        rec_drop = 0.0
    _train_only_options(cfg, name)
    kwargs: dict[str, Any] = {
        **extra, "use_bias": _flag(cfg, "use_bias", True, name),
        "return_sequences": _flag(cfg, "return_sequences", False, name),
        "go_backwards": _flag(cfg, "go_backwards", False, name),
        "return_state": _flag(cfg, "return_state", False, name),
        "stateful": _flag(cfg, "stateful", False, name),
        "dropout": float(cfg.get("dropout") or 0.0), "recurrent_dropout": rec_drop,
        "dtype": dtype_of(cfg, name), "name": name,
    }
    units = _int(cfg, "units", name)
    if class_name == "GRU":
        return GRU(units, act, reset_after=_flag(cfg, "reset_after", True, name), **kwargs)
    cls = RECURRENT[class_name]
    return cls(units, act, **kwargs)


def _conv_lstm(class_name: str, cfg: dict[str, Any], name: str) -> ConvLSTM:
    """A Keras ``ConvLSTM1D`` / ``ConvLSTM2D`` config as the rnnkit layer (its initializers are
    not read: the file's weights replace what they draw)."""
    _refuse_if(cfg.get("data_format") not in ("channels_last", None), name, "data_format",
               f"data_format={cfg.get('data_format')!r} is not supported; rnnkit reads (batch, time, "
               f"*spatial, channels) inputs (channels_last)")
    _refuse_if(bool(cfg.get("zero_output_for_mask")), name, "zero_output_for_mask",
               "zero_output_for_mask=True is not supported; rnnkit repeats the previous output at a "
               "masked step (Keras' default)")
    rec = _activation(cfg, "recurrent_activation", name, "sigmoid")
    act = _activation(cfg, "activation", name, "tanh")
    _refuse_if("softmax" in (rec, act), name, "activation",
               "softmax is not supported in a ConvLSTM; it takes tanh, sigmoid, hard_sigmoid, relu or linear")
    _train_only_options(cfg, name)
    return CONV_LSTMS[class_name](
        _int(cfg, "filters", name), cfg["kernel_size"], cfg.get("strides", 1), cfg.get("padding", "valid"),
        None, cfg.get("dilation_rate", 1), act, rec, _flag(cfg, "use_bias", True, name),
        unit_forget_bias=_flag(cfg, "unit_forget_bias", True, name),
        dropout=float(cfg.get("dropout") or 0.0),
        recurrent_dropout=float(cfg.get("recurrent_dropout") or 0.0),
        seed=cfg.get("seed"), return_sequences=_flag(cfg, "return_sequences", False, name),
        return_state=_flag(cfg, "return_state", False, name),
        go_backwards=_flag(cfg, "go_backwards", False, name), stateful=_flag(cfg, "stateful", False, name),
        dtype=dtype_of(cfg, name), name=name)


def _rnn(cfg: dict[str, Any], name: str) -> Mapped:
    """Keras' ``RNN`` over one SimpleRNNCell / LSTMCell / GRUCell (weights in ``cell/vars``), or
    over a ``StackedRNNCells`` of them (each cell's in ``cell/cells/<its name>/vars``)."""
    cell_cfg: Any = cfg.get("cell")
    sub = cell_cfg.get("class_name") if isinstance(cell_cfg, dict) else None
    cells = cell_cfg.get("config", {}).get("cells") if sub == "StackedRNNCells" else [cell_cfg]
    if not isinstance(cells, list) or not cells:
        raise FileFormatError(f"Keras RNN {name!r}: its StackedRNNCells lists no cells")
    walk: dict[str, Any] = {k: cfg[k] for k in ("return_sequences", "go_backwards", "return_state",
                                                 "stateful", "dtype") if k in cfg}
    layers = []
    for c in cells:
        kind = c.get("class_name") if isinstance(c, dict) else None
        if kind not in ("SimpleRNNCell", "LSTMCell", "GRUCell"):
            raise UnsupportedFeatureError(name, "cell", f"RNN over {kind!r}; supported: SimpleRNNCell, "
                                          f"LSTMCell, GRUCell, or a StackedRNNCells of them")
        layers.append(_recurrent(str(kind)[:-4], {**c.get("config", {}), **walk}, name))   # the kind's layer
    kl = layers[0]
    if sub != "StackedRNNCells":
        rnn = RNN(kl.cell, kl.return_sequences, kl.return_state, kl.go_backwards, kl.stateful,
                  _flag(cfg, "unroll", False, name), _flag(cfg, "zero_output_for_mask", False, name),
                  dropout=kl.dropout, recurrent_dropout=kl.recurrent_dropout, dtype=kl.dtype, name=name)
        return Mapped(name, "RNN", rnn, [(rnn, "cell/vars")])
    dropped = [lay.name for lay in layers if lay.dropout or lay.recurrent_dropout]
    if dropped:
        _warn(name, "the dropout of the stacked cells is not carried over (it acts only in training; "
                    "predictions are unaffected)")
    stack = StackedRNNCells([lay.cell for lay in layers])
    rnn = RNN(stack, kl.return_sequences, kl.return_state, kl.go_backwards, kl.stateful,
              _flag(cfg, "unroll", False, name), _flag(cfg, "zero_output_for_mask", False, name),
              dtype=kl.dtype, name=name)
    return Mapped(name, "RNN", rnn, [(rnn, f"cell/cells/{n}/vars") for n in stacked_cell_names(stack)])


def map_layer(layer_cfg: dict[str, Any]) -> Mapped:
    """The rnnkit counterpart of one entry of a Keras ``config.json`` ``layers`` list.

    A malformed entry (a missing key, a value of the wrong type) raises FileFormatError."""
    try:
        mapped = _map_layer(layer_cfg)
        _carry_train_options(layer_cfg, mapped)
        return mapped
    except Error:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        what = layer_cfg.get("class_name") if isinstance(layer_cfg, dict) else None
        raise FileFormatError(f"a malformed Keras {what} layer config ({e!r})") from None


def _map_layer(layer_cfg: dict[str, Any]) -> Mapped:
    class_name = layer_cfg.get("class_name")
    cfg = layer_cfg.get("config")
    if not isinstance(class_name, str) or not isinstance(cfg, dict):
        raise FileFormatError(f"a Keras layer entry without class_name/config: {layer_cfg!r}")
    name = str(layer_cfg.get("name") or cfg.get("name") or class_name)
    if class_name == "Lambda":
        raise UnsupportedFeatureError(name, "class_name", "a Lambda layer is Python code (Keras itself "
                                      "loads one only with safe_mode=False); rnnkit runs no code from a "
                                      "file: rebuild the layer in code as rnnkit.Lambda")
    if class_name not in SUPPORTED:
        raise UnsupportedFeatureError(name, "class_name", f"Keras layer class {class_name!r} is not "
                                      f"supported; supported: {', '.join(SUPPORTED)}")
    if class_name == "InputLayer":
        return Mapped(name, class_name, None)
    if class_name in RECURRENT:
        rec = _recurrent(class_name, cfg, name)
        return Mapped(name, class_name, rec, [(rec, "cell/vars")])
    if class_name == "RNN":   # Keras' RNN over one built-in cell (its weights sit where the layer's
        return _rnn(cfg, name)  # do) or over a StackedRNNCells of them
    if class_name == "Bidirectional":
        return _bidirectional(cfg, name)
    if class_name in CONV_LSTMS:
        conv = _conv_lstm(class_name, cfg, name)
        return Mapped(name, class_name, conv, [(conv, "cell/vars")])
    if class_name == "TimeDistributed":
        inner_cfg = cfg.get("layer")
        if not isinstance(inner_cfg, dict):
            raise FileFormatError(f"Keras TimeDistributed {name!r} has no 'layer' config")
        inner = map_layer(inner_cfg)
        if inner.layer is None or len({id(lay) for lay, _ in inner.parts} - {id(inner.layer)}):
            raise UnsupportedFeatureError(name, "layer", f"TimeDistributed over {inner.class_name!r}; "
                                          f"rnnkit wraps a layer holding its own weights")
        try:
            td = TimeDistributed(inner.layer, name=name)
        except Error as e:
            raise UnsupportedFeatureError(name, "layer", str(e)) from None
        return Mapped(name, class_name, td, [(td, "layer/" + rel) for _, rel in inner.parts])
    dtype = dtype_of(cfg, name)
    out: Layer
    if class_name == "Dense":
        _refuse_if(cfg.get("lora_rank") is not None, name, "lora_rank", "LoRA-adapted Dense is not supported")
        _refuse_if(cfg.get("quantization_config") is not None, name, "quantization_config",
                   "quantized weights are not supported")
        _train_only_options(cfg, name)
        out = Dense(_int(cfg, "units", name), _activation(cfg, "activation", name),
                    use_bias=_flag(cfg, "use_bias", True, name), dtype=dtype, name=name)
        return Mapped(name, class_name, out, [(out, "vars")])
    if class_name == "Embedding":
        _refuse_if(cfg.get("lora_rank") is not None, name, "lora_rank",
                   "LoRA-adapted Embedding is not supported")
        _refuse_if(cfg.get("quantization_config") is not None, name, "quantization_config",
                   "quantized weights are not supported")
        _train_only_options(cfg, name)
        out = Embedding(_int(cfg, "input_dim", name), _int(cfg, "output_dim", name),
                        mask_zero=_flag(cfg, "mask_zero", False, name), dtype=dtype, name=name)
        return Mapped(name, class_name, out, [(out, "vars")])
    if class_name == "Dropout":
        if cfg.get("noise_shape") is not None:
            _warn(name, f"noise_shape={cfg['noise_shape']} not carried over (rnnkit drops elementwise; "
                        f"inference is unaffected)")
        return Mapped(name, class_name, Dropout(float(cfg["rate"]), dtype=dtype, name=name))
    if class_name == "Masking":
        return Mapped(name, class_name, Masking(float(cfg.get("mask_value", 0.0)), dtype=dtype, name=name))
    if class_name in MERGES:
        return Mapped(name, class_name, MERGES[class_name](dtype=dtype, name=name))
    if class_name == "LayerNormalization":
        _refuse_if(bool(cfg.get("rms_scaling")), name, "rms_scaling",
                   "rms_scaling=True (Keras' deprecated variance scaling) is not supported")
        _norm_train_options(cfg, name)
        axis = cfg.get("axis", -1)
        out = LayerNormalization(axis if isinstance(axis, int) else [int(a) for a in axis],
                                 float(cfg.get("epsilon", 1e-3)), _flag(cfg, "center", True, name),
                                 _flag(cfg, "scale", True, name), dtype=dtype, name=name)
        return Mapped(name, class_name, out, [(out, "vars")])
    if class_name == "GroupNormalization":
        _norm_train_options(cfg, name)
        gn = GroupNormalization(int(cfg.get("groups", 32)), int(cfg.get("axis", -1)),
                                float(cfg.get("epsilon", 1e-3)), _flag(cfg, "center", True, name),
                                _flag(cfg, "scale", True, name), dtype=dtype, name=name)
        return Mapped(name, class_name, gn, [(gn, "vars")])
    if class_name in ("Conv1D", *POOLS, *GLOBAL_POOLS, "ZeroPadding1D"):
        fmt = cfg.get("data_format", "channels_last")
        _refuse_if(fmt not in ("channels_last", None), name, "data_format",
                   f"data_format={cfg.get('data_format')!r} is not supported; rnnkit reads (batch, steps, "
                   f"channels) inputs (channels_last)")
    if class_name == "Conv1D":
        _refuse_if(cfg.get("lora_rank") is not None, name, "lora_rank",
                   "LoRA-adapted Conv1D is not supported")
        _train_only_options(cfg, name)
        out = Conv1D(_int(cfg, "filters", name), cfg["kernel_size"], cfg.get("strides", 1),
                     cfg.get("padding", "valid"), cfg.get("dilation_rate", 1), _int(cfg, "groups", name, 1),
                     _activation(cfg, "activation", name), _flag(cfg, "use_bias", True, name),
                     dtype=dtype, name=name)
        return Mapped(name, class_name, out, [(out, "vars")])
    if class_name in POOLS:
        pool = POOLS[class_name](cfg.get("pool_size", 2), cfg.get("strides"), cfg.get("padding", "valid"),
                                 dtype=dtype, name=name)
        return Mapped(name, class_name, pool)
    if class_name in GLOBAL_POOLS:
        return Mapped(name, class_name, GLOBAL_POOLS[class_name](_flag(cfg, "keepdims", False, name),
                                                                 dtype=dtype, name=name))
    if class_name == "ZeroPadding1D":
        return Mapped(name, class_name, ZeroPadding1D(cfg.get("padding", 1), dtype=dtype, name=name))
    if class_name == "Cropping1D":
        return Mapped(name, class_name, Cropping1D(cfg.get("cropping", (1, 1)), dtype=dtype, name=name))
    if class_name == "UpSampling1D":
        return Mapped(name, class_name, UpSampling1D(_int(cfg, "size", name, 2), dtype=dtype, name=name))
    if class_name == "BatchNormalization":
        _refuse_if(bool(cfg.get("renorm")), name, "renorm", "batch renormalization (renorm=True) is not "
                   "supported")
        _refuse_if(not isinstance(cfg.get("axis", -1), int), name, "axis",
                   f"axis {cfg.get('axis')!r}: rnnkit normalizes one axis (an int)")
        _norm_train_options(cfg, name)
        out = BatchNormalization(cfg.get("axis", -1), float(cfg.get("momentum", 0.99)),
                                 float(cfg.get("epsilon", 1e-3)), _flag(cfg, "center", True, name),
                                 _flag(cfg, "scale", True, name), dtype=dtype, name=name)
        return Mapped(name, class_name, out, [(out, "vars")])
    if class_name in ("Attention", "AdditiveAttention"):
        return _attention(class_name, cfg, layer_cfg.get("inbound_nodes"), dtype, name)
    if class_name == "MultiHeadAttention":
        return _multi_head(cfg, layer_cfg.get("inbound_nodes"), dtype, name)
    if class_name == "RepeatVector":
        return Mapped(name, class_name, RepeatVector(_int(cfg, "n", name), dtype=dtype, name=name))
    if class_name in SHAPE_LAYERS:
        return Mapped(name, class_name, SHAPE_LAYERS[class_name](cfg, dtype, name))
    if class_name == "Activation":
        return Mapped(name, class_name,
                      ActivationLayer(_activation(cfg, "activation", name), dtype=dtype, name=name))
    # Concatenate
    return Mapped(name, class_name, Concatenate(_int(cfg, "axis", name, -1), dtype=dtype, name=name))


def _seed(cfg: dict[str, Any]) -> int | None:
    s = cfg.get("seed")
    return s if isinstance(s, int) and not isinstance(s, bool) and s >= 0 else None


def _spatial_dropout(cfg: dict[str, Any], dtype: str, name: str) -> SpatialDropout1D:
    _refuse_if(cfg.get("noise_shape") is not None, name, "noise_shape",
               "SpatialDropout1D's noise shape is Keras' own (batch, 1, channels); another is not supported")
    return SpatialDropout1D(float(cfg["rate"]), _seed(cfg), dtype=dtype, name=name)


#: the Keras shape layers and wrappers' configs -> rnnkit layers (weightless)
SHAPE_LAYERS: dict[str, Any] = {
    "Flatten": lambda cfg, dtype, name: Flatten(cfg.get("data_format"), dtype=dtype, name=name),
    "Reshape": lambda cfg, dtype, name: Reshape(tuple(cfg["target_shape"]), dtype=dtype, name=name),
    "Permute": lambda cfg, dtype, name: Permute(tuple(cfg["dims"]), dtype=dtype, name=name),
    "SpatialDropout1D": _spatial_dropout,
    "GaussianNoise": lambda cfg, dtype, name: GaussianNoise(float(cfg["stddev"]), _seed(cfg), dtype=dtype,
                                                            name=name),
    "Dot": lambda cfg, dtype, name: Dot(cfg["axes"], _flag(cfg, "normalize", False, name), dtype=dtype,
                                        name=name),
}


#: the call arguments of a Keras attention layer that are configuration in rnnkit
ATTENTION_CALL_OPTIONS = ("use_causal_mask", "return_attention_scores")


def call_options(nodes: Any, keys: tuple[str, ...], name: str) -> dict[str, bool]:
    """The boolean call arguments ``keys`` of a Keras layer's calls (``inbound_nodes``), which
    rnnkit holds as configuration: every call must give the same (UnsupportedFeatureError
    otherwise); a missing one is False."""
    seen: list[dict[str, bool]] = []
    for node in nodes if isinstance(nodes, list) else []:
        kwargs = node.get("kwargs") if isinstance(node, dict) else None
        kwargs = kwargs if isinstance(kwargs, dict) else {}
        seen.append({k: _flag(kwargs, k, False, name) for k in keys})
    if any(s != seen[0] for s in seen):
        raise UnsupportedFeatureError(name, "/".join(keys), f"the layer's calls differ in {keys} "
                                      f"({seen}); rnnkit holds them as the layer's configuration")
    return seen[0] if seen else dict.fromkeys(keys, False)


def _attention(class_name: str, cfg: dict[str, Any], nodes: Any, dtype: str, name: str) -> Mapped:
    opts = call_options(nodes, ATTENTION_CALL_OPTIONS, name)
    seed = cfg.get("seed")
    common: dict[str, Any] = {"dropout": float(cfg.get("dropout") or 0.0), "dtype": dtype, "name": name,
                              "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                              **opts}
    out: Layer
    if class_name == "Attention":
        mode = cfg.get("score_mode", "dot")
        _refuse_if(mode not in ("dot", "concat"), name, "score_mode",
                   f"score_mode {mode!r}; Keras and rnnkit have 'dot' and 'concat'")
        out = Attention(_flag(cfg, "use_scale", False, name), str(mode), **common)
        weighted = out.use_scale or out.score_mode == "concat"
    else:
        out = AdditiveAttention(_flag(cfg, "use_scale", True, name), **common)
        weighted = out.use_scale
    return Mapped(name, class_name, out, [(out, "vars")] if weighted else [])


def _multi_head(cfg: dict[str, Any], nodes: Any, dtype: str, name: str) -> Mapped:
    """Keras' MultiHeadAttention, the sequence case; each projection's weights in the h5 group of
    its EinsumDense sublayer."""
    for opt, off in (("use_gate", False), ("sliding_window", None), ("flash_attention", None)):
        _refuse_if(cfg.get(opt, off) not in (off, False if off is None else off), name, opt,
                   f"{opt}={cfg.get(opt)!r} is not supported")
    axes = cfg.get("attention_axes")
    _refuse_if(axes not in (None, 1, -2, [1], [-2]), name, "attention_axes",
               f"attention_axes={axes!r}; rnnkit attends over the time axis of (batch, time, features)")
    shape = cfg.get("output_shape")
    _refuse_if(not (shape is None or isinstance(shape, int) or isinstance(shape, list) and len(shape) == 1),
               name, "output_shape", f"output_shape={shape!r}; rnnkit's output is (batch, time, width)")
    seed = cfg.get("seed")
    opts = call_options(nodes, ATTENTION_CALL_OPTIONS, name)
    out = MultiHeadAttention(_int(cfg, "num_heads", name), _int(cfg, "key_dim", name),
                             cfg.get("value_dim"), float(cfg.get("dropout") or 0.0),
                             _flag(cfg, "use_bias", True, name), shape, axes, dtype=dtype, name=name,
                             seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                             **opts)
    return Mapped(name, "MultiHeadAttention", out, [(out, f"{g}/vars") for g in MHA_GROUPS.values()])


def _bidirectional(cfg: dict[str, Any], name: str) -> Mapped:
    mode = cfg.get("merge_mode", "concat")
    _refuse_if(mode not in ("concat", "sum", "mul", "ave", None), name, "merge_mode",
               f"merge_mode {mode!r} is not supported; rnnkit has concat, sum, mul, ave and None")
    fwd_cfg = cfg.get("layer")
    if not isinstance(fwd_cfg, dict):
        raise FileFormatError(f"Keras Bidirectional {name!r} has no 'layer' config")
    bwd_cfg = cfg.get("backward_layer")
    if not isinstance(bwd_cfg, dict):  # Keras derives it: the same layer, go_backwards flipped
        inner = dict(fwd_cfg.get("config", {}))
        inner["go_backwards"] = not _flag(inner, "go_backwards", False, name)
        bwd_cfg = {"class_name": fwd_cfg.get("class_name"), "config": inner}
    dirs = []
    for sub, role in ((fwd_cfg, "forward"), (bwd_cfg, "backward")):
        sub_class = sub.get("class_name")
        if sub_class not in RECURRENT:
            raise UnsupportedFeatureError(name, "layer", f"Bidirectional over {sub_class!r}; supported: "
                                          f"SimpleRNN, LSTM, GRU")
        sub_cfg = dict(sub.get("config", {}))
        inner_state = _flag(sub_cfg, "return_state", False, name)
        sub_cfg["return_state"] = _flag(cfg, "return_state", inner_state, name)
        dirs.append(_recurrent(str(sub_class), sub_cfg, f"{role}_{name}"))
    try:
        bi = Bidirectional(dirs[0], mode, dirs[1], name=name)
    except Error as e:
        raise UnsupportedFeatureError(name, "layer", str(e)) from None
    return Mapped(name, "Bidirectional", bi,
                  [(dirs[0], "forward_layer/cell/vars"), (dirs[1], "backward_layer/cell/vars")],
                  return_sequences=dirs[0].return_sequences)


#: the sublayer of a Keras MultiHeadAttention holding each part's weights (its h5 group)
MHA_GROUPS = {"query": "query_dense", "key": "key_dense", "value": "value_dense",
              "attention_output": "output_dense"}


def weight_names(layer: Layer, group: str = "vars") -> list[str]:
    """The Keras order of ``layer``'s weights in its h5 vars group ``group`` (``vars/0, 1,
    ...``; a MultiHeadAttention has one per projection, ``query_dense/vars``, ...)."""
    if isinstance(layer, TimeDistributed):
        return weight_names(layer.layer, group)
    if isinstance(layer, MultiHeadAttention):
        part = next((p for p, g in MHA_GROUPS.items() if group.endswith(f"{g}/vars")), None)
        if part is None:
            return []
        return [n for n in (f"{part}_kernel", f"{part}_bias") if n in layer.weight_names]
    if isinstance(layer, RecurrentLayer) and isinstance(layer.cell, StackedRNNCells):
        k = stacked_index(layer.cell, group)
        if k is None:
            return []
        c = layer.cell.cells[k]
        return [f"cells.{k}.{n}" for n in ["kernel", "recurrent_kernel"] + (["bias"] if c.bias else [])]
    if isinstance(layer, RecurrentLayer):
        return ["kernel", "recurrent_kernel"] + (["bias"] if layer.cell.bias is not None else [])
    if isinstance(layer, Dense):
        return ["kernel", "bias"] if layer.use_bias else ["kernel"]
    if isinstance(layer, Embedding):
        return ["embeddings"]
    return list(layer.weight_names)   # the other layers declare their weights in Keras' order


def stacked_cell_names(stack: StackedRNNCells) -> list[str]:
    """The h5 groups of ``stack``'s cells in a Keras weights file (``cell/cells/<group>/vars``):
    Keras names the entries of a list by their class, not by the layer names of the config
    (which vary between sessions): ``lstm_cell``, ``gru_cell``, ``lstm_cell_1`` for a second
    LSTM cell, ..."""
    seen: dict[str, int] = {}
    out = []
    for c in stack.cells:
        base = {"LSTM": "lstm_cell", "GRU": "gru_cell", "SimpleRNN": "simple_rnn_cell"}.get(
            str(builtin_kind(c)), type(c).__name__.lower())
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append(base if n == 0 else f"{base}_{n}")
    return out


def stacked_index(stack: StackedRNNCells, group: str) -> int | None:
    """Which cell of ``stack`` the h5 vars group ``group`` (``.../cells/<name>/vars``) holds."""
    parts = group.rstrip("/").split("/")
    names = stacked_cell_names(stack)
    if len(parts) >= 2 and parts[-1] == "vars" and parts[-2] in names:
        return names.index(parts[-2])
    return None


def to_rnnkit_weights(layer: Layer, arrays: list[np.ndarray],
                      group: str = "vars") -> dict[str, np.ndarray] | str:
    """Keras arrays of ``layer`` -> ``{rnnkit weight name: array}``, or a problem description.

    Recurrent bias ``(G*H,)`` becomes ``(1, G*H)``; a ``(2, 3H)`` GRU ``reset_after`` bias stays;
    a recurrent layer saved with ``use_bias=False`` has two arrays (and no bias here either).
    """
    names = weight_names(layer, group)
    if len(arrays) != len(names):
        return f"expected {len(names)} arrays ({', '.join(names)}), found {len(arrays)}"
    out = dict(zip(names, arrays, strict=True))
    if isinstance(layer, RecurrentLayer) and isinstance(layer.cell, StackedRNNCells):
        k = stacked_index(layer.cell, group)
        assert k is not None
        b, c = out.get(f"cells.{k}.bias"), layer.cell.cells[k]
        if b is not None and c.bias_rows == 1 and b.ndim == 1:  # type: ignore[attr-defined]
            out[f"cells.{k}.bias"] = keras_bias("bias", b, (1, c.gate_width))  # type: ignore[attr-defined]
        return out
    if isinstance(layer, RecurrentLayer):
        b = out.get("bias")
        if b is not None and layer.cell.bias_rows == 1 and b.ndim == 1:  # type: ignore[attr-defined]
            out["bias"] = keras_bias("bias", b, (1, layer.cell.gate_width))  # type: ignore[attr-defined]
        elif b is not None and getattr(layer.cell, "bias_layout", "") == "torch" and b.ndim == 1:
            out["bias"] = np.stack([b, np.zeros_like(b)])   # Keras' one bias as PyTorch's bias_ih
    return out
