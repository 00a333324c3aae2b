"""Keras 3 export: :func:`save_keras` writes a ``.keras`` archive that
``keras.saving.load_model`` opens, :func:`save_keras_weights` a ``.weights.h5`` file for
``model.load_weights`` of a Keras model of the same architecture. The mirror image of
:func:`rnnkit.load_keras` (h5py is needed: ``pip install rnnkit[interop]``; Keras is not).

Written, as Keras 3.15.1 writes it: ``config.json`` (a ``Sequential`` for a Sequential, a
``Functional`` for a GraphModel), ``metadata.json`` and ``model.weights.h5`` (the layout in
:mod:`rnnkit.io._keras_h5`). Layers (one entry each in :data:`KERAS_LAYERS`)::

    rnnkit                        Keras
    SimpleRNN / LSTM / GRU        the same class and options (weights as they are, a one-row
                                  bias flat; GRU reset_after kept)
    Dense, Embedding, Dropout, RepeatVector, Concatenate    the same class
    ActivationLayer               Activation
    Bidirectional, Masking, Add, Multiply, Average   the same class (where rnnkit has them)
    nodes F (a recurrent layer), R = Reverse(1) of B (the same layer class, go_backwards) and
    a Concatenate(-1) of [F, R] (or [F, B] without return_sequences), both reading one node:
                                  Bidirectional(merge_mode="concat"), the graph load_keras
                                  builds from one

Refused with UnsupportedFeatureError naming the layer: an RNNNet (PyTorch's layout; write it
with save_torch_safetensors), a custom cell, ``proj_size``, ``stateful``, ``return_state`` where the
graph cannot pick a layer's several outputs (a GraphModel whose nodes can writes the states as
Keras' extra outputs and ``[x, *states]`` calls as ``initial_state=``), a
Reverse outside that pattern (Keras has no reverse layer) and softmax over an axis other than
the last.
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._kind import builtin_kind, describe_cell
from rnnkit._layouts import cell_kind, to_keras
from rnnkit.io._atomic import atomic_write_bytes
from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.io._keras_h5 import import_h5py, snake_case, unique_groups
from rnnkit.models import GraphModel, Sequential

KERAS_VERSION = "3.15.1"
#: (relative h5 path of a vars group, its "name" attribute, its arrays)
Vars = list[tuple[str, str, list[np.ndarray]]]


def _act(fn: Any, layer: str) -> str:
    if fn.name == "softmax" and fn.axis != -1:
        raise UnsupportedFeatureError(layer, "activation", f"softmax over axis {fn.axis}; Keras' "
                                      f"activation 'softmax' acts on the last axis")
    return str(fn.name)


def _recurrent(layer: Any, name: str) -> tuple[str, dict[str, Any], Vars]:
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
    return kind, cfg, [("cell/vars", f"{snake_case(kind)}_cell", arrays), ("vars", name, [])]


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
    "Add": _weightless("Add"), "Multiply": _weightless("Multiply"), "Average": _weightless("Average"),
    "RNNNet": _refuse("an RNNNet is a PyTorch-layout stack with no Keras layer; write it with "
                      "save_torch_safetensors, or export a Sequential of SimpleRNN/LSTM/GRU layers"),
    "Reverse": _refuse("Keras has no layer reversing an axis (only a Bidirectional's backward branch, "
                       "written from the forward/backward/Reverse/Concatenate pattern)"),
}


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
    return ({"module": "keras.layers", "class_name": kcls, "config": cfg, "registered_name": None,
             "build_config": {"input_shape": shape}}, vars_)


def _shape(s: Any) -> Any:
    return [list(x.dims) for x in s] if isinstance(s, list) else list(s.dims)


def _h5_bytes(groups: list[tuple[str, Vars]], model_name: str) -> bytes:
    h5py = import_h5py("writing")
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_group("layers")
        for group, vars_ in groups:
            for rel, vname, arrays in vars_:
                g = f.require_group(f"layers/{group}/{rel}")
                g.attrs["name"] = vname
                for i, a in enumerate(arrays):
                    g.create_dataset(str(i), data=np.asarray(a))
        f.create_group("vars").attrs["name"] = model_name
    return buf.getvalue()


def _sequential(model: Any) -> tuple[dict[str, Any], list[tuple[str, Vars]]]:
    shp = list(model.input_shapes()[0].dims)
    dtype = model.layers[0].dtype.name
    names = _unique([lay.name for lay in model.layers])
    entries = [{"module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
                "config": {"batch_shape": shp, "dtype": dtype, "sparse": False, "name": "input_layer"}}]
    vars_all: list[tuple[str, Any]] = []
    ins = [model.input_shapes()[0], *model._out_shapes]
    for layer, name, s in zip(model.layers, names, ins, strict=False):
        entry, vars_ = keras_layer(layer, name, _shape(s))
        entries.append(entry)
        vars_all.append((entry["class_name"], vars_))
    groups = unique_groups([c for c, _ in vars_all])
    cfg = {"module": "keras", "class_name": "Sequential", "registered_name": None,
           "config": {"name": model.name, "trainable": True, "dtype": dtype, "layers": entries,
                      "build_input_shape": shp},
           "build_config": {"input_shape": shp}, "compile_config": None}
    return cfg, [(g, v) for g, (_, v) in zip(groups, vars_all, strict=True)]


def _unique(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        base, k, cand = n or "layer", 0, n or "layer"
        while cand in out:
            k += 1
            cand = f"{base}_{k}"
        out.append(cand)
    return out


def _bundle(model: Any, path: str, cfg: dict[str, Any], groups: list[tuple[str, Vars]]) -> None:
    meta = {"keras_version": KERAS_VERSION, "date_saved": time.strftime("%Y-%m-%d@%H:%M:%S")}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", json.dumps(meta))
        z.writestr("config.json", json.dumps(cfg))
        z.writestr("model.weights.h5", _h5_bytes(groups, model.name))
    atomic_write_bytes(path, buf.getvalue())


def save_keras(model: Any, path: str | os.PathLike[str]) -> None:
    """Write ``model`` (a built Sequential or GraphModel) as a Keras 3 ``.keras`` archive,
    atomically. ``keras.saving.load_model(path)`` then predicts what ``model.predict`` does
    (float32: within ~1e-6) and :func:`rnnkit.load_keras` gives back the same weights. What
    Keras cannot express is refused with UnsupportedFeatureError naming the layer (see the
    module doc)."""
    p = os.fspath(path)
    if not p.endswith(".keras"):
        raise InvalidParameterError(f"save_keras: Keras reads archives named '*.keras'; got {p!r}")
    cfg, groups = _model_config(model, "save_keras")
    _bundle(model, p, cfg, groups)


def _model_config(model: Any, where: str) -> tuple[dict[str, Any], list[tuple[str, Vars]]]:
    from rnnkit.io._keras_functional import functional_config  # (it imports this module)

    if isinstance(model, Sequential):
        if not model.built:
            raise InvalidInputError(f"{where}: the model {model.name!r} is not built; build it (or run it "
                                    f"once) so its input shape is known")
        return _sequential(model)
    if isinstance(model, GraphModel):
        return functional_config(model)
    raise InvalidInputError(f"{where}: expected a Sequential or GraphModel, got {type(model).__name__}")


def save_keras_weights(model: Any, path: str | os.PathLike[str]) -> None:
    """Write ``model``'s weights as a Keras 3 ``.weights.h5`` file, atomically: a Keras model of
    the same architecture reads them with ``keras_model.load_weights(path)`` (the k-th Keras
    layer of a class takes the k-th rnnkit layer of that class, as :func:`load_keras_weights`
    reads them back)."""
    p = os.fspath(path)
    if not p.endswith(".weights.h5"):
        raise InvalidParameterError(f"save_keras_weights: Keras reads weights files named '*.weights.h5'; "
                                    f"got {p!r}")
    _, groups = _model_config(model, "save_keras_weights")
    atomic_write_bytes(p, _h5_bytes(groups, model.name))
