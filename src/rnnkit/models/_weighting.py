"""Masks and sample weights of ``fit`` / ``evaluate``: the masks of the model inputs (``mask=``,
``lengths=``), their rows for a batch, the per-sample / per-timestep / per-class weights in
Keras' normalisation, and the weights each output's loss takes."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._mask import Mask
from rnnkit.models._checks import Trainable as Model


def input_masks(model: Model, xs: list[np.ndarray], mask: Any, lengths: Any) -> list[Any] | None:
    """The masks of the model inputs from ``mask=`` (a Mask or boolean (B, T) array; a list
    of them, one per input, for several inputs) or ``lengths=`` ((B,) ints, or a list), each
    checked against its input. None when neither is given."""
    if mask is None and lengths is None:
        return None
    if mask is not None and lengths is not None:
        raise InvalidParameterError(f"{model.name}: give mask= or lengths=, not both")
    given, kind = (mask, "mask") if mask is not None else (lengths, "lengths")
    items = list(given) if model.n_inputs > 1 else [given]
    if len(items) != model.n_inputs:
        raise InvalidInputError(f"{model.name}: expected one {kind} per input ({model.n_inputs}), "
                                f"got {len(items)}")
    out: list[Any] = []
    for k, (a, item) in enumerate(zip(xs, items, strict=True)):
        if item is None:
            out.append(None)
            continue
        try:
            m = Mask(lengths=item) if kind == "lengths" else Mask.of(item)
        except (ValueError, TypeError) as e:  # ragged or non-numeric (e.g. [array, None])
            want = "(B,) ints" if kind == "lengths" else "a Mask or a boolean (B, T) array"
            raise InvalidInputError(f"{model.name}: {kind} of input {k} must be {want}, got "
                                    f"{type(item).__name__} that is not one ({e})") from None
        assert m is not None
        if a.ndim < 2:
            raise InvalidInputError(f"{model.name}: input {k} of shape {a.shape} has no time axis to mask")
        m.check(a.shape[0], a.shape[1], f"{model.name}: {kind} of input {k}")
        out.append(m)
    return out


def take_mask(m: Any, idx: Any, T: int) -> Any:
    """The samples ``idx`` of mask ``m`` (None stays None)."""
    if m is None:
        return None
    return Mask(lengths=m.ends(T)[idx]) if m.kind == "lengths" else Mask(m.valid(T)[idx])


def sample_weights(model: Model, ys: list[np.ndarray], sample_weight: Any,
                   class_weight: Any) -> list[Any] | None:
    """One weight array (or None) per output from ``sample_weight`` (an array; a list, one per
    output, for several outputs) or ``class_weight`` (a dict ``{class: weight}``, single-output
    models with one target per sample: the class is the label, or the argmax of a one-hot)."""
    if sample_weight is None and class_weight is None:
        return None
    if sample_weight is not None and class_weight is not None:
        raise InvalidParameterError(f"{model.name}: give sample_weight or class_weight, not both "
                                    f"(Keras' rule)")
    n = ys[0].shape[0]
    if class_weight is not None:
        if not isinstance(class_weight, dict):
            raise InvalidParameterError(f"{model.name}: class_weight must be a dict {{class: weight}}, "
                                        f"got {type(class_weight).__name__}")
        if model.n_outputs != 1:
            raise InvalidParameterError(f"{model.name}: class_weight needs a model with one output")
        y = ys[0]
        outs = getattr(model, "outputs", None)
        out_shape = outs[0].shape if outs else getattr(model, "output_shape", None)
        if out_shape is not None and len(out_shape) >= 3:
            y = y[:, :, None]  # a sequence output has a target per timestep: refused below
        elif y.ndim > 1:
            y = np.argmax(y, axis=-1) if y.shape[-1] != 1 else y[..., 0]
        if y.ndim != 1:
            raise InvalidInputError(f"{model.name}: class_weight needs one target per sample, got targets of "
                                    f"shape {ys[0].shape}; weight timesteps with sample_weight instead")
        labels = np.round(y).astype(np.int64)
        return [np.array([float(class_weight.get(int(c), 1.0)) for c in labels])]
    items = list(sample_weight) if model.n_outputs > 1 else [sample_weight]
    if len(items) != model.n_outputs:
        raise InvalidInputError(f"{model.name}: expected one sample_weight per output ({model.n_outputs}), "
                                f"got {len(items)}")
    out: list[Any] = []
    for w in items:
        if w is None:
            out.append(None)
            continue
        try:
            arr = np.asarray(w, np.float64)
        except (ValueError, TypeError):
            raise InvalidInputError(f"{model.name}: sample_weight must be an array of real numbers, got "
                                    f"{type(w).__name__} {w!r:.60}") from None
        if arr.ndim < 1 or arr.shape[0] != n:
            raise InvalidInputError(f"{model.name}: sample_weight has shape {arr.shape}; expected {n} "
                                    f"samples on axis 0")
        if not np.isfinite(arr).all():
            raise InvalidInputError(f"{model.name}: sample_weight holds NaN or Inf; expected finite numbers")
        out.append(arr)
    return out


def output_weights(preds: list[np.ndarray], masks: list[Any] | None, sws: list[Any] | None,
                   valid_totals: Any = None) -> tuple[list[Any], list[Any]]:
    """(loss weights, metric weights) per output from the output masks and sample weights:
    Keras' ``apply_mask`` (``P / V`` at the V valid steps of the P positions) times the sample
    weights for the loss; the mask alone (0/1) for the metrics (Keras' ``metrics=`` are
    unweighted: sample weights do not reach them). ``valid_totals[k]``, when given, is the V
    of output ``k`` over the whole batch (several processes each hold a part of it)."""
    lw: list[Any] = []
    mw: list[Any] = []
    for k, p in enumerate(preds):
        sw = None if sws is None else sws[k]
        m = None if masks is None else masks[k]
        if isinstance(m, Mask) and p.ndim >= 3:
            valid = m.valid(p.shape[1]).astype(np.float64)
            if sw is not None:
                w = np.asarray(sw, np.float64)
                if w.ndim == 1:
                    w = w[:, None]
                elif w.ndim == 3 and w.shape[-1] == 1:
                    w = w[..., 0]
            V = float(valid.sum()) if valid_totals is None else float(valid_totals[k])
            scale = valid.size / V if V > 0 else 0.0
            lw.append(valid * scale * (w if sw is not None else 1.0))
            mw.append(valid)
        else:
            lw.append(sw)
            mw.append(None)
    return lw, mw
