"""The file functions a model calls, handed down by :mod:`rnnkit.io`.

``Model.save`` / ``save_weights`` / ``load_weights`` and :class:`ModelCheckpoint` write and
read formats (safetensors model and weight files, ``.keras``, ``.onnx``, Keras' ``.weights.h5``)
that :mod:`rnnkit.io` implements, one layer above the models, and io imports the models to
write them. So the model level never imports io: io hands its three functions down with
:func:`install` when it is imported, which ``import rnnkit`` (and so any import of an rnnkit
module) does before a model can exist.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rnnkit._errors import Error

PathLike = str | os.PathLike[str]
FileFunction = Callable[[Any, PathLike], None]

_FUNCTIONS: dict[str, FileFunction] = {}


def install(*, save_model: FileFunction, save_weights: FileFunction, load_weights: FileFunction) -> None:
    """Make ``save_model(model, path)``, ``save_weights(model, path)`` and
    ``load_weights(model, path)`` the functions the model level calls (io does, on import)."""
    _FUNCTIONS.update(save_model=save_model, save_weights=save_weights, load_weights=load_weights)


def _function(name: str) -> FileFunction:
    try:
        return _FUNCTIONS[name]
    except KeyError:
        raise Error(f"{name}: rnnkit.io has not installed its file functions; import rnnkit "
                    f"before saving or loading a model") from None


def save_model(model: Any, path: PathLike) -> None:
    """:func:`rnnkit.io.save_model`."""
    _function("save_model")(model, path)


def save_weights(model: Any, path: PathLike) -> None:
    """:func:`rnnkit.io.save_weights`."""
    _function("save_weights")(model, path)


def load_weights(model: Any, path: PathLike) -> None:
    """:func:`rnnkit.io.load_weights`."""
    _function("load_weights")(model, path)
