"""What a batch's predictions are worth: the loss (summed over the outputs) with its gradient
w.r.t. each output, and the metrics, keyed as the logs key them."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit.layers._dense import Dense
from rnnkit.losses import CategoricalCrossentropy, SparseCategoricalCrossentropy
from rnnkit.losses._xent import LogitsGradient
from rnnkit.models._checks import Trainable as Model

Arrays = list[np.ndarray]


def log_keys(model: Model) -> list[str]:
    """``loss`` then the metric keys, in the order :func:`metric_values` makes them."""
    ms = [m.name for m in model._compiled_metrics()]
    return ["loss", *(ms if model.n_outputs == 1 else
                      [f"output_{k}_{m}" for k in range(model.n_outputs) for m in ms])]


def softmax_fusion(model: Model) -> bool:
    """Whether the loss's gradient can be taken with respect to the logits of the output layer:
    one output, made by a ``Dense`` whose softmax :meth:`~rnnkit.Dense.takes_logits_gradient`,
    under a categorical cross-entropy on probabilities (``from_logits=False``). The loss is the
    same number; the gradient the composition of the loss's and the softmax's, to float rounding."""
    head = model._output_layer() if hasattr(model, "_output_layer") else None
    return (model.n_outputs == 1 and isinstance(head, Dense) and head.built
            and isinstance(model.loss, (CategoricalCrossentropy, SparseCategoricalCrossentropy))
            and not model.loss.from_logits and head.takes_logits_gradient())


def loss_and_grads(model: Model, ys: Arrays, preds: Arrays, weights: list[Any] | None = None,
                   scales: list[float] | None = None, fused: bool | None = None) -> tuple[float, Arrays]:
    """The summed loss over the outputs and d(loss)/d(pred) per output (``weights``: one array
    or None per output, see :class:`rnnkit.Loss`; ``scales``: a factor per output, 1 alone);
    where :func:`softmax_fusion` holds, d(loss)/d(logits) of the output layer instead
    (``fused``: that test's answer when the caller has it, else it is made here)."""
    total = 0.0
    grads: Arrays = []
    fused = softmax_fusion(model) if fused is None else fused
    for k, (y, p) in enumerate(zip(ys, preds, strict=True)):
        w = None if weights is None else weights[k]
        if fused:   # d loss / d logits of the Dense(softmax) output layer, its vjp skipped
            v, g = model.loss.value_and_logits_grad(y, p, w)
        else:
            v, g = model.loss.value_and_grad(y, p) if w is None else model.loss.value_and_grad(y, p, w)
        s = 1.0 if scales is None else scales[k]
        if s != 1.0:
            v, g = v * s, g * p.dtype.type(s)
        total += float(v)
        grads.append(g if isinstance(g, LogitsGradient) else np.asarray(g, p.dtype))
    return total, grads


def metric_values(model: Model, ys: Arrays, preds: Arrays,
                  weights: list[Any] | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, (y, p) in enumerate(zip(ys, preds, strict=True)):
        w = None if weights is None else weights[k]
        for m in model._compiled_metrics():
            key = m.name if len(ys) == 1 else f"output_{k}_{m.name}"
            out[key] = float(m(y, p) if w is None else m(y, p, sample_weight=w))
    return out
