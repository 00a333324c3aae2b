"""Model files: ONE safetensors file holding the architecture and the weights.

Layout: the tensors are the weights under their ``named_weights()`` names (so
:func:`~rnnkit.io.load_weights` reads a model file too); the safetensors ``__metadata__``
(str -> str) holds::

    format          "rnnkit-model"
    format_version  "1"
    rnnkit_version  the writer's version
    config          JSON of model.get_config()  ({"class_name": ..., "config": {...}})
    compile         JSON {"optimizer": {class_name, config}, "loss": {class_name, config},
                          "metrics": [{class_name, config}, ...]}   (only when compiled)

:func:`load_model` rebuilds the model with ``rnnkit.models.model_from_config``, loads the
weights strictly, and compiles it again when the file says so (a fresh optimizer: slots such
as Adam's moments are not saved). No pickle anywhere.
"""

from __future__ import annotations

import json
import os
from typing import Any

from rnnkit import losses, metrics, optimizers
from rnnkit._budget import allocation_budget
from rnnkit._errors import Error, FileFormatError, InvalidParameterError
from rnnkit._limits import parse_json
from rnnkit._numbers import show
from rnnkit._version import __version__
from rnnkit.io._keras_export import save_keras
from rnnkit.io._keras_file import load_keras, load_keras_weights
from rnnkit.io._onnx import save_onnx
from rnnkit.io._sniff import describe, sniff
from rnnkit.io._weights import (
    FORMAT_VERSION,
    WEIGHTS_FORMAT,
    _named_of,
    apply_strict,
    collect,
    read_safetensors,
    write_safetensors,
)
from rnnkit.models import Model, model_from_config

MODEL_FORMAT = "rnnkit-model"


def _compile_config(model: Any) -> dict[str, Any] | None:
    opt, loss = getattr(model, "optimizer", None), getattr(model, "loss", None)
    if opt is None or loss is None:
        return None
    mets = []
    for m in getattr(model, "metrics", None) or []:
        cfg = m.get_config() if hasattr(m, "get_config") else {}
        mets.append({"class_name": type(m).__name__, "name": m.name, "config": cfg})
    return {"optimizer": optimizers.serialize(opt), "loss": losses.serialize(loss), "metrics": mets}


def save_model(model: Any, path: str | os.PathLike[str], *, metadata: dict[str, str] | None = None) -> None:
    """Write ``model``'s architecture (``get_config()``), compile settings and weights to one
    safetensors file, atomically; the same model always gives the same bytes. ``metadata``:
    extra str -> str entries stored beside rnnkit's own (which they may not replace). Load it
    with :func:`load_model` / ``rnnkit.load_model``.

    The name decides the format, never silently: ``*.keras`` writes a Keras 3 archive
    (:func:`~rnnkit.io.save_keras`), ``*.onnx`` an ONNX graph (:func:`~rnnkit.io.save_onnx`);
    each raises for what its format cannot hold; ``*.h5`` is refused (a Keras weights file:
    :func:`~rnnkit.io.save_keras_weights`); any other name (``m.safetensors``, ``m.rnnkit``)
    an rnnkit model file. :func:`load_model` reads each of them back by content."""
    if not isinstance(model, Model):
        raise InvalidParameterError(f"save_model: model must be an rnnkit Model (Sequential or a graph "
                                    f"model), got {show(model)} ({type(model).__name__})")
    p = os.fspath(path)
    foreign = p.lower().endswith((".keras", ".onnx", ".h5"))
    if foreign and metadata:
        raise InvalidParameterError(f"save_model: metadata= is stored in rnnkit model files only, not in "
                                    f"{p!r}")
    if p.lower().endswith(".keras"):
        return save_keras(model, p)
    if p.lower().endswith(".onnx"):
        return save_onnx(model, p)
    if p.lower().endswith(".h5"):
        raise InvalidParameterError(f"save_model: {p!r} names an HDF5 (Keras weights) file; write the "
                                    f"weights with save_keras_weights(model, 'name.weights.h5'), or save "
                                    f"the model as '.keras', '.onnx' or an rnnkit '.safetensors' file")

    meta = {"format": MODEL_FORMAT, "format_version": FORMAT_VERSION, "rnnkit_version": __version__,
            "config": json.dumps(model.get_config())}
    comp = _compile_config(model)
    if comp is not None:
        meta["compile"] = json.dumps(comp)
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"save_model: metadata must map str to str, got {k!r}: {type(v).__name__}")
        if k in meta:
            raise InvalidParameterError(f"save_model: metadata key {k!r} is rnnkit's own; choose another")
        meta[k] = v
    write_safetensors(path, collect(dict(model.named_weights())), meta)


def _decode(meta: dict[str, str], key: str, p: str) -> Any:
    if key not in meta:
        raise FileFormatError(f"{p}: the rnnkit model metadata entry {key!r} is missing")
    return parse_json(meta[key], f"{p}: metadata entry {key!r}")


def _entry(obj: Any, what: str, p: str) -> tuple[str, dict[str, Any]]:
    """``(class_name, config)`` of a ``{"class_name": str, "config": dict}`` entry, or
    FileFormatError saying what the compile metadata held instead."""
    if (not isinstance(obj, dict) or not isinstance(obj.get("class_name"), str)
            or not isinstance(obj.get("config", {}), dict)):
        raise FileFormatError(f"{p}: compile metadata {what} must be {{'class_name': str, 'config': "
                              f"dict}} as save_model writes it, got {str(obj)[:200]}")
    return obj["class_name"], obj.get("config", {})


def _compile_from(comp: Any, p: str) -> tuple[Any, Any, list[Any]]:
    """The optimizer, loss and metrics of a file's ``compile`` entry; every deviation from what
    :func:`save_model` writes is a FileFormatError naming the path."""
    if not isinstance(comp, dict) or not {"optimizer", "loss"} <= set(comp):
        raise FileFormatError(f"{p}: compile metadata must be an object with 'optimizer' and 'loss' "
                              f"(and 'metrics'), got {str(comp)[:200]}")
    mets_cfg = comp.get("metrics", [])
    if not isinstance(mets_cfg, list):
        raise FileFormatError(f"{p}: compile metadata 'metrics' must be a list, got {mets_cfg!r}"[:300])
    try:
        _entry(comp["optimizer"], "'optimizer'", p)
        _entry(comp["loss"], "'loss'", p)
        mets = []
        for m in mets_cfg:
            name, cfg = _entry(m, "metric", p)
            if not cfg:
                if not isinstance(m.get("name"), str):
                    raise FileFormatError(f"{p}: compile metadata metric {m!r} has no name"[:300])
                mets.append(metrics.get(m["name"]))
            else:
                mets.append(metrics.from_config(name, cfg))
        return optimizers.deserialize(comp["optimizer"]), losses.deserialize(comp["loss"]), mets
    except FileFormatError:
        raise
    except (Error, TypeError, KeyError, AttributeError, ValueError) as e:
        raise FileFormatError(f"{p}: the compile metadata cannot be rebuilt ({type(e).__name__}: "
                              f"{e})"[:500]) from None


def load_model(path: str | os.PathLike[str]) -> Any:
    """Rebuild the model saved by :func:`save_model`: architecture, weights (strict), compile.

    The file's content decides how, never its name (:func:`~rnnkit.io._sniff.sniff`): an rnnkit
    model file (safetensors) is rebuilt here, a Keras ``.keras`` archive by
    :func:`~rnnkit.io.load_keras`, whatever each is called. Raises FileFormatError naming the
    path and what the file is otherwise (a weights-only file, Keras HDF5 weights, an ONNX graph,
    a pickle, a safetensors file without rnnkit model metadata, ...).
    """
    p = os.fspath(path)
    kind = sniff(p)
    if kind == "keras":
        return load_keras(p)
    if kind != "safetensors":
        raise describe(p, kind, "an rnnkit model file (safetensors) or a Keras '.keras' archive")
    tensors, meta = read_safetensors(p)
    fmt = meta.get("format")
    if fmt != MODEL_FORMAT:
        if fmt == WEIGHTS_FORMAT:
            found = "a weights-only file (format 'rnnkit-weights'); build the model and call load_weights"
        elif meta:
            found = f"metadata keys {sorted(meta)} (format {fmt!r})"
        else:
            found = f"no metadata, {len(tensors)} tensor(s)"
        raise FileFormatError(f"{p}: not an rnnkit model file (expected metadata format "
                              f"{MODEL_FORMAT!r}); found {found}")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise FileFormatError(f"{p}: rnnkit model format_version {version!r} is not supported "
                              f"(this rnnkit reads {FORMAT_VERSION!r})")
    config = _decode(meta, "config", p)
    compiled = _compile_from(_decode(meta, "compile", p), p) if "compile" in meta else None
    with allocation_budget(sum(int(t.size) for t in tensors.values()), f"load_model({p})"):
        try:
            model = model_from_config(config)
        except RecursionError:
            raise FileFormatError(f"{p}: the model config is nested too deeply to rebuild") from None
        except Error:
            raise
        except (KeyError, IndexError, AttributeError, ValueError, TypeError) as e:
            # a value of the wrong kind somewhere in the stored config that no check names
            raise FileFormatError(f"{p}: the model config is malformed ({type(e).__name__}: "
                                  f"{e})"[:500]) from None
    apply_strict(dict(model.named_weights()), tensors, f"load_model({p})")
    if compiled is not None:
        model.compile(compiled[0], compiled[1], metrics=compiled[2])
    return model


def load_weights(model: Any, path: str | os.PathLike[str]) -> None:
    """Read a weights (or model) file into ``model``, strictly (see :func:`~rnnkit.io._weights.apply_strict`).

    By content, never by name: a safetensors file here, Keras HDF5 weights or a ``.keras``
    archive with :func:`~rnnkit.io.load_keras_weights`; anything else is a FileFormatError
    saying what it is."""
    p = os.fspath(path)
    kind = sniff(p)
    if kind in ("hdf5", "keras"):
        return load_keras_weights(model, p)
    if kind != "safetensors":
        raise describe(p, kind, "a weights file (safetensors, or Keras HDF5 weights)")
    tensors, _ = read_safetensors(p)
    apply_strict(_named_of(model), tensors, f"load_weights({p})")
