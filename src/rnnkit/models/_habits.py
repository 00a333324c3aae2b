"""Keras' habits at the door of ``fit`` / ``evaluate`` / ``predict``, each with Keras' meaning:

- ``verbose``: 0 (or False) silent, 1 (or True) a progress bar, 2 one line per epoch,
  ``"auto"`` = 1 (:func:`check_verbose`); ``evaluate`` / ``predict`` print one line when
  ``verbose`` is not 0 (:func:`report`);
- a ``(B,)`` target against a ``(B, 1)`` output: the target gets the trailing axis of size 1
  (Keras aligns the ranks; :func:`align_target`) — only that case, and not for a sparse
  loss, whose targets are class indices one rank below its output already;
- ``GraphBuilder.input(shape, dtype=)``: arrays for that input are converted to its dtype
  (:func:`cast_inputs`);
- a full-batch ``fit`` (no ``batch_size``) on more than :data:`FULL_BATCH_WARN` samples warns
  once with :class:`FullBatchWarning` how to get mini-batches (:func:`warn_full_batch`).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit.losses import SparseCategoricalCrossentropy
from rnnkit.models._checks import Trainable as Model

#: ``fit`` without ``batch_size`` on more samples than this warns (:class:`FullBatchWarning`)
FULL_BATCH_WARN = 512


class FullBatchWarning(UserWarning):
    """``fit(x, y, epochs)`` without ``batch_size`` on many samples: ONE full-batch step per
    epoch, which trains far slower per epoch than mini-batches (``batch_size=32``)."""


def check_verbose(value: Any, where: str) -> int:
    """``verbose`` as an int: ``"auto"`` is 1, a bool is 0 / 1, an int >= 0 stays (3 and more
    print nothing, as in Keras); anything else is InvalidParameterError."""
    if isinstance(value, str) and value == "auto":
        return 1
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)) and value >= 0:
        return int(value)
    raise InvalidParameterError(f"{where}: verbose must be 0 (silent), 1 (progress bar), 2 (one line per "
                                f"epoch), 'auto' (1) or a bool, got {value!r}")


def report(verbose: int, where: str, n: int | None, logs: dict[str, float] | None = None) -> None:
    """The one line ``evaluate`` / ``predict`` print when ``verbose`` is 1 or 2:
    ``"m.evaluate: 640 samples - loss: 0.1234 - mae: 0.2"`` (``n`` None: a batch source)."""
    if verbose not in (1, 2):
        return
    parts = [f"{where}: {'all batches' if n is None else f'{n} samples'}"]
    parts += [f"{k}: {float(v):.4g}" for k, v in (logs or {}).items()]
    print(" - ".join(parts), file=sys.stdout, flush=True)


def output_shapes(model: Any) -> list[Any] | None:
    """The built output shapes of a Sequential (``output_shape``) or graph model (its
    output nodes' shapes); None when not known (not built, or another kind of model)."""
    outs = getattr(model, "outputs", None)
    if isinstance(outs, list):
        return [getattr(n, "shape", None) for n in outs]
    if not getattr(model, "built", False) or not hasattr(type(model), "output_shape"):
        return None
    return [model.output_shape]


def align_target(model: Model, k: int, y: np.ndarray) -> np.ndarray:
    """Target ``k`` of shape ``(B,)`` as ``(B, 1)`` when output ``k`` is ``(None, 1)`` (Keras'
    rank alignment, that case only); any other array unchanged (the loss refuses a mismatch)."""
    if y.ndim != 1 or model.loss is None or isinstance(model.loss, SparseCategoricalCrossentropy):
        return y
    shapes = output_shapes(model)
    if shapes is None or k >= len(shapes):
        return y
    shp = shapes[k]
    if shp is not None and not isinstance(shp, list) and len(shp) == 2 and shp[1] == 1:
        return y.reshape(-1, 1)
    return y


def warn_full_batch(n: int, batch_size: int | None, where: str) -> None:
    """Warn (once per ``fit``) when ``fit`` takes full-batch steps on more than
    :data:`FULL_BATCH_WARN` samples."""
    if batch_size is None and n > FULL_BATCH_WARN:
        warnings.warn(f"{where}: no batch_size, so each epoch is ONE full-batch step over {n} samples; "
                      f"pass batch_size=32 (or another size) for mini-batch steps, as Keras' default "
                      f"does", FullBatchWarning, stacklevel=5)


_FLOATS: dict[Any, np.dtype] = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def cast_inputs(model: Any, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Each input array in the dtype its graph input declared (``GraphBuilder.input(dtype=)``),
    others as given; InvalidInputError where a finite value would become inf."""
    nodes = getattr(model, "inputs", None)
    if not isinstance(nodes, list) or len(nodes) != len(xs):
        return xs
    out = []
    for k, (a, node) in enumerate(zip(xs, nodes, strict=True)):
        dt = _FLOATS.get(getattr(node, "dtype", None))   # ids (None, "int32", ...): as given
        if dt is None or a.dtype == dt:
            out.append(a)
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            b = a.astype(dt)
        if a.dtype.kind == "f" and a.dtype.itemsize > dt.itemsize and (np.isinf(b) & np.isfinite(a)).any():
            raise InvalidInputError(f"{model.name}: input {k} holds values beyond {dt.name}'s range (largest "
                                    f"{float(np.finfo(dt).max):.4g}), the dtype its input declared; scale "
                                    f"the data or declare dtype='float64'")
        out.append(b)
    return out


def check_batch_axis(model: Any, where: str, **splitting: bool) -> None:
    """Refuse what splits or reorders a time-major model's data along axis 0 (time, not the
    batch): ``model.fit`` / ``evaluate`` / ``predict`` cut and shuffle the samples along axis 0,
    so a model holding a layer with ``input_layout == "time_major"`` (an ``rnnkit.rnn`` net with
    ``batch_first=False``) takes whole batches only. ``splitting`` names what was asked
    (``batch_size=True`` ...); InvalidParameterError naming the layer and the remedy."""
    asked = [k for k, v in splitting.items() if v]
    if not asked:
        return
    for layer in getattr(model, "layers", []):
        if getattr(layer, "input_layout", None) == "time_major":
            raise InvalidParameterError(
                f"{where}: {', '.join(asked)} would split or reorder the data along axis 0, which is time "
                f"for the time-major layer {layer.name!r} (inputs (seq_len, batch, features)); give whole "
                f"batches (no batch_size, shuffle=False, no validation_split or sample weights) or build "
                f"the net with batch_first=True")

