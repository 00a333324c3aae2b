"""What a batch's predictions are worth: the loss (summed over the outputs) with its gradient
w.r.t. each output, and the metrics, keyed as the logs key them."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.models._checks import Trainable as Model

Arrays = list[np.ndarray]


def log_keys(model: Model) -> list[str]:
    """``loss`` then the metric keys, in the order :func:`metric_values` makes them."""
    ms = [m.name for m in model.metrics]
    return ["loss", *(ms if model.n_outputs == 1 else
                      [f"output_{k}_{m}" for k in range(model.n_outputs) for m in ms])]


def loss_and_grads(model: Model, ys: Arrays, preds: Arrays, weights: list[Any] | None = None,
                   scales: list[float] | None = None) -> tuple[float, Arrays]:
    """The summed loss over the outputs and d(loss)/d(pred) per output (``weights``: one array
    or None per output, see :class:`rnnkit.Loss`; ``scales``: a factor per output, 1 alone)."""
    total = 0.0
    grads: Arrays = []
    for k, (y, p) in enumerate(zip(ys, preds, strict=True)):
        w = None if weights is None else weights[k]
        v, g = model.loss.value_and_grad(y, p) if w is None else model.loss.value_and_grad(y, p, w)
        s = 1.0 if scales is None else scales[k]
        if s != 1.0:
            v, g = v * s, g * p.dtype.type(s)
        total += float(v)
        grads.append(np.asarray(g, p.dtype))
    return total, grads


def metric_values(model: Model, ys: Arrays, preds: Arrays,
                  weights: list[Any] | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, (y, p) in enumerate(zip(ys, preds, strict=True)):
        w = None if weights is None else weights[k]
        for m in model.metrics:
            key = m.name if len(ys) == 1 else f"output_{k}_{m.name}"
            out[key] = float(m(y, p) if w is None else m(y, p, sample_weight=w))
    return out
