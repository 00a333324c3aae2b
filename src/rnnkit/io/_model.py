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

from rnnkit._errors import FileFormatError
from rnnkit.io._weights import (
    FORMAT_VERSION,
    WEIGHTS_FORMAT,
    apply_strict,
    collect,
    read_safetensors,
    write_safetensors,
)

MODEL_FORMAT = "rnnkit-model"


def _compile_config(model: Any) -> dict[str, Any] | None:
    from rnnkit import losses, optimizers

    opt, loss = getattr(model, "optimizer", None), getattr(model, "loss", None)
    if opt is None or loss is None:
        return None
    mets = []
    for m in getattr(model, "metrics", None) or []:
        cfg = m.get_config() if hasattr(m, "get_config") else {}
        mets.append({"class_name": type(m).__name__, "name": m.name, "config": cfg})
    return {"optimizer": optimizers.serialize(opt), "loss": losses.serialize(loss), "metrics": mets}


def save_model(model: Any, path: str | os.PathLike[str]) -> None:
    """Write ``model``'s architecture (``get_config()``), compile settings and weights to one
    safetensors file, atomically. Load it with :func:`load_model` / ``rnnkit.load_model``."""
    from rnnkit import __version__

    meta = {"format": MODEL_FORMAT, "format_version": FORMAT_VERSION, "rnnkit_version": __version__,
            "config": json.dumps(model.get_config())}
    comp = _compile_config(model)
    if comp is not None:
        meta["compile"] = json.dumps(comp)
    write_safetensors(path, collect(dict(model.named_weights())), meta)


def _decode(meta: dict[str, str], key: str, p: str) -> Any:
    try:
        return json.loads(meta[key])
    except (KeyError, json.JSONDecodeError) as e:
        raise FileFormatError(f"{p}: the rnnkit model metadata entry {key!r} is missing or not JSON "
                              f"({e})") from None


def load_model(path: str | os.PathLike[str]) -> Any:
    """Rebuild the model saved by :func:`save_model`: architecture, weights (strict), compile.

    Raises FileFormatError naming the path when the file is not safetensors, is a weights-only
    file, or carries no rnnkit model metadata (it says what it found instead).
    """
    from rnnkit import losses, metrics, optimizers
    from rnnkit.models import model_from_config

    p = os.fspath(path)
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
    model = model_from_config(_decode(meta, "config", p))
    apply_strict(dict(model.named_weights()), tensors, f"load_model({p})")
    if "compile" in meta:
        comp = _decode(meta, "compile", p)
        mets = [metrics.get(m["name"]) if not m.get("config")
                else metrics.from_config(m["class_name"], m["config"]) for m in comp.get("metrics", [])]
        model.compile(optimizers.deserialize(comp["optimizer"]), losses.deserialize(comp["loss"]),
                      metrics=mets)
    return model
