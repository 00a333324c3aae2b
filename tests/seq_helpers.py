"""Helpers of the sequence and export tests: float64 finite differences through whole models,
random weights."""

from __future__ import annotations

from typing import Any

import numpy as np

import rnnkit as rk
from harness import rel_err


def _outs(model: Any, xs: list[np.ndarray], masks: Any = None) -> list[np.ndarray]:
    outs, _ = model._forward_masks(xs, rk.Ctx.inference(), False, masks)
    return [np.asarray(o, np.float64) for o in outs]


def model_loss(model: Any, xs: list[np.ndarray], Gs: list[np.ndarray], masks: Any = None) -> float:
    return float(sum(np.sum(o * g) for o, g in zip(_outs(model, xs, masks), Gs, strict=True)))


def model_gradcheck(model: Any, xs: list[np.ndarray], *, masks: Any = None, seed: int = 0,
                    eps: float = 1e-6, inputs: tuple[int, ...] | None = None) -> dict[str, float]:
    """Relative errors of the analytic gradients of ``L = sum_k sum(out_k * G_k)`` (a float64
    model) against central differences: every weight (by its model name) and the inputs listed
    in ``inputs`` (default: all), keyed ``"input{k}"``."""
    rng = np.random.default_rng(seed)
    Gs = [rng.standard_normal(o.shape) for o in _outs(model, xs, masks)]
    ctx = rk.Ctx.training()
    model._forward_masks(xs, ctx, False, masks)
    dxs = model._backward(Gs, ctx, False)
    errs: dict[str, float] = {}
    for key, (layer, name) in model.named_weights().items():
        w0 = np.array(layer.weight(name), copy=True)
        w = w0.copy()
        num = np.empty(w.shape)
        for i in np.ndindex(w.shape):
            v = w[i]
            w[i] = v + eps
            layer.set_weight(name, w)
            lp = model_loss(model, xs, Gs, masks)
            w[i] = v - eps
            layer.set_weight(name, w)
            lm = model_loss(model, xs, Gs, masks)
            w[i] = v
            num[i] = (lp - lm) / (2 * eps)
        layer.set_weight(name, w0)
        ana = ctx.grads.get((layer, name), np.zeros_like(w0))
        errs[key] = rel_err(ana, num)
    for k in inputs if inputs is not None else range(len(xs)):
        x = np.array(xs[k], np.float64, copy=True)
        num = np.empty(x.shape)
        for i in np.ndindex(x.shape):
            v = x[i]
            x[i] = v + eps
            lp = model_loss(model, [*xs[:k], x, *xs[k + 1:]], Gs, masks)
            x[i] = v - eps
            lm = model_loss(model, [*xs[:k], x, *xs[k + 1:]], Gs, masks)
            x[i] = v
            num[i] = (lp - lm) / (2 * eps)
        errs[f"input{k}"] = rel_err(dxs[k], num)
    return errs


def randomise(layers: list[Any], seed: int = 0) -> None:
    """Every weight of ``layers`` drawn from N(0, 0.5) (the initial LSTM/GRU biases are mostly
    zeros: too easy a test of an exported layout)."""
    rng = np.random.default_rng(seed)
    for layer in layers:
        for n in layer.weight_names:
            w = layer.weight(n)
            layer.set_weight(n, rng.normal(0.0, 0.5, w.shape).astype(w.dtype))
