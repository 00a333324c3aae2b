"""Keras 3 export: :func:`save_keras` writes a ``.keras`` archive that
``keras.saving.load_model`` opens, :func:`save_keras_weights` a ``.weights.h5`` file for
``model.load_weights`` of a Keras model of the same architecture. The mirror image of
:func:`rnnkit.load_keras` (h5py is needed: ``pip install rnnkit[interop]``; Keras is not).

Written, as Keras 3.15.1 writes it: ``config.json`` (a ``Sequential`` for a Sequential, a
``Functional`` for a GraphModel), ``metadata.json`` and ``model.weights.h5`` (the layout in
:mod:`rnnkit.io._keras_h5`). Layers (one entry each in :data:`rnnkit.io._keras_entries.KERAS_LAYERS`)::

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

from rnnkit._atomic import atomic_write_bytes
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit.io._interop_errors import refuse_int8
from rnnkit.io._keras_entries import Vars, keras_layer, shape_list
from rnnkit.io._keras_functional import functional_config
from rnnkit.io._keras_h5 import import_h5py, unique_groups
from rnnkit.models import GraphModel, Sequential

KERAS_VERSION = "3.15.1"

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
        entry, vars_ = keras_layer(layer, name, shape_list(s))
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
    if isinstance(model, (Sequential, GraphModel)):
        refuse_int8(model.layers, where)
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
