"""Weight files: safetensors, one tensor per weight, named as ``model.named_weights()`` names
them (Sequential ``"2.kernel"``, ``"2.recurrent_kernel"``, ``"2.bias"``; graph models
``"{node}.{weight}"``; a single layer ``"kernel"``, ...). No pickle: safetensors holds raw
little-endian arrays and a JSON header.

Loading is strict and all-or-nothing: every name of the model must be in the file with the
weight's exact shape, and the file must hold no other name. Otherwise :class:`WeightShapeError`
lists EACH offending name (expected vs got) and no weight changes. Arrays are converted to the
layer's dtype; a value that is NaN or Inf, or becomes Inf in that dtype (1e300 read into a
float32 layer), is a FileFormatError naming the weight, and nothing changes. Every write is
atomic (:mod:`rnnkit._atomic`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rnnkit._consistency import WEIGHTS
from rnnkit._errors import FileFormatError, InvalidParameterError, WeightShapeError
from rnnkit._layer import Layer as _Layer
from rnnkit._numbers import show
from rnnkit._safetensors import read_safetensors, write_safetensors
from rnnkit._validate import weight_problem
from rnnkit._version import __version__
from rnnkit.io._keras_export import save_keras_weights

if TYPE_CHECKING:
    from rnnkit._layer import Layer

#: metadata ``format`` of a weights file; a model file says ``"rnnkit-model"``
WEIGHTS_FORMAT = "rnnkit-weights"
FORMAT_VERSION = "1"

Named = Mapping[str, tuple["Layer", str]]


def check_finite_weights(tensors: Mapping[str, np.ndarray], source: str,
                         dtypes: Mapping[str, np.dtype] | None = None) -> dict[str, np.ndarray]:
    """The tensors, each cast to its dtype in ``dtypes`` (as they are when None): FileFormatError
    naming the first weight that holds NaN or Inf, or a finite value beyond its dtype (the cast
    would make it Inf; :func:`rnnkit._validate.weight_problem`), its value and position (nothing
    is loaded)."""
    out: dict[str, np.ndarray] = {}
    for key in sorted(tensors):
        a = np.asarray(tensors[key])
        cast, problem = weight_problem(a, a.dtype if dtypes is None else dtypes[key])
        if problem is not None:
            raise FileFormatError(f"{source}: weight {key!r} {problem.removeprefix('the weight ')} "
                                  f"(nothing was loaded)")
        out[key] = cast
    return out


def collect(named: Named) -> dict[str, np.ndarray]:
    """The live arrays under their file names: those of one whole optimizer step while ``fit``
    trains in another thread (a weight array is never changed in place, only replaced, so the
    arrays stay what they were after this returns; :mod:`rnnkit._consistency`)."""
    return WEIGHTS.read(_live, named)


def _live(named: Named) -> dict[str, np.ndarray]:
    return {key: layer.weight(wname) for key, (layer, wname) in named.items()}


def apply_strict(named: Named, tensors: Mapping[str, np.ndarray], source: str) -> None:
    """Install ``tensors`` into the weights ``named`` lists, all or nothing.

    Raises WeightShapeError listing every missing name (expected shape, got ``missing``), every
    mis-shaped name (expected vs got) and every unexpected name in the file; ``.name``,
    ``.expected``, ``.got`` describe the first of them and ``.problems`` holds all as
    ``(name, expected, got)`` triples.
    """
    problems: list[tuple[str, Any, Any]] = []
    for key, (layer, wname) in named.items():
        want = layer.weight(wname).shape
        if key not in tensors:
            problems.append((key, want, "missing (not in the file)"))
        elif tensors[key].shape != want:
            problems.append((key, want, tensors[key].shape))
        elif tensors[key].dtype.kind not in "biuf":
            problems.append((key, f"{want} of real numbers", f"dtype {tensors[key].dtype}"))
    for key in tensors:
        if key not in named:
            problems.append((key, "no such weight in the model", f"unexpected {tensors[key].shape}"))
    if problems:
        listing = "; ".join(f"{n!r}: expected {e}, got {g}" for n, e, g in problems)
        first = problems[0]
        err = WeightShapeError(
            first[0], first[1], first[2],
            f"{source}: {len(problems)} problem(s), nothing was loaded: {listing}; "
            f"the model's names are {list(named)}",
        )
        err.problems = problems  # type: ignore[attr-defined]
        raise err
    cast = check_finite_weights(tensors, source, {key: layer.dtype for key, (layer, _) in named.items()})
    with WEIGHTS:   # one write: a reader in another thread sees all of it or none
        for key, (layer, wname) in named.items():
            layer.set_weight(wname, cast[key])


def _named_of(model: Any) -> Named:
    try:
        named = model.named_weights()
    except AttributeError:
        raise TypeError(f"expected a model with named_weights(), got {type(model).__name__}") from None
    return dict(named)


def _meta(kind: str) -> dict[str, str]:
    return {"format": kind, "format_version": FORMAT_VERSION, "rnnkit_version": __version__}


def _refuse_foreign_name(p: str, what: str) -> None:
    """A file's name never lies about its format: ``*.keras``, ``*.onnx`` and ``*.h5`` are not
    names for the safetensors file ``what`` writes."""
    low = p.lower()
    if low.endswith((".keras", ".onnx", ".h5")):
        suffix = ".weights.h5" if low.endswith(".weights.h5") else os.path.splitext(low)[1]
        raise InvalidParameterError(
            f"{what}: {p!r} ends with {suffix!r}, the name of another format, but {what} writes a "
            f"safetensors file; name it '*.safetensors'"
            + (" (or save the whole model with save_model)" if suffix in (".keras", ".onnx") else ""))


def save_weights(model: Any, path: str | os.PathLike[str]) -> None:
    """Write every weight of ``model`` under its ``named_weights()`` name (safetensors, atomic).

    A name ending ``.weights.h5`` (Keras' name for a weights file) writes Keras' HDF5 weights
    format instead (:func:`~rnnkit.io.save_keras_weights`), which Keras and :func:`load_weights`
    read; ``*.h5``, ``*.keras`` and ``*.onnx`` are refused with InvalidParameterError (a file's
    name never lies about its format)."""
    p = os.fspath(path)
    if p.lower().endswith(".weights.h5"):
        return save_keras_weights(model, p)
    _refuse_foreign_name(p, "save_weights")
    write_safetensors(p, collect(_named_of(model)), _meta(WEIGHTS_FORMAT))


def _layer_named(layer: Layer) -> Named:
    if not isinstance(layer, _Layer):
        raise InvalidParameterError(f"save/load_layer_weights: layer must be an rnnkit Layer, got "
                                    f"{show(layer)} ({type(layer).__name__})")
    layer._require_built("save/load weights")
    return {n: (layer, n) for n in layer.weight_names}


def save_layer_weights(layer: Layer, path: str | os.PathLike[str]) -> None:
    """Write one built layer's weights under their own names (``kernel``, ...) as safetensors;
    a name ending ``.keras``, ``.onnx`` or ``.h5`` is refused (InvalidParameterError)."""
    _refuse_foreign_name(os.fspath(path), "save_layer_weights")
    write_safetensors(path, collect(_layer_named(layer)), _meta(WEIGHTS_FORMAT))


def load_layer_weights(layer: Layer, path: str | os.PathLike[str]) -> None:
    """Read one layer's weights, strictly (every name, exact shapes, no extra names)."""
    tensors, _ = read_safetensors(path)
    apply_strict(_layer_named(layer), tensors, f"load_layer_weights({os.fspath(path)})")
