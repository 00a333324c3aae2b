"""Losses: a value and its gradient with respect to the prediction.

Every loss maps ``(y_true, y_pred)`` to one float, the mean over samples (Keras' reduction):

==============================  =======================================================
MeanSquaredError                mean((y_pred - y_true)**2)      over every element
MeanAbsoluteError               mean(|y_pred - y_true|)         over every element
BinaryCrossentropy              mean(-(y log p + (1-y) log(1-p)))  over every element,
                                p = clip(y_pred, eps, 1 - eps), eps = 1e-7 (Keras)
  from_logits=True              mean(max(z, 0) - z y + log(1 + exp(-|z|)))  (stable)
CategoricalCrossentropy         mean over positions of -sum_c y_c log q_c, where
                                q = clip(y_pred / sum(y_pred, -1), eps, 1 - eps) (Keras)
  from_logits=True              -sum_c y_c log_softmax(z)_c  (softmax fused, log-sum-exp)
SparseCategoricalCrossentropy   as Categorical with y the one-hot of integer labels; labels
                                of shape y_pred.shape[:-1] or y_pred.shape[:-1] + (1,)
Pinball(quantiles)              mean over positions and quantiles of max(q e, (q - 1) e),
  (QuantileLoss)                e = y_true - y_pred[..., j] for quantile q = quantiles[j]
==============================  =======================================================

The "mean over every element" of MSE/MAE/BCE equals Keras' mean over the last axis, then over
the samples. ``value_and_grad`` returns ``(loss, d loss / d y_pred)`` with the gradient in
``y_pred``'s dtype (float64 for an integer ``y_pred``); the arithmetic runs in float64, except
for the cross-entropies with ``from_logits=True``: they run in float32 for float32 logits (float64
otherwise), the log-softmax, the loss and the gradient fused in one sweep over the rows
(:mod:`rnnkit.losses._xent`), the sample weights and the mean folded into the gradient as it is
written, so the large (positions x classes) arrays of a language model are read and written once.

Where Keras clips a probability to ``[eps, 1 - eps]``, the gradient is the derivative of the
log evaluated at the clipped value (straight through the clip): exact wherever the prediction
lies inside ``[eps, 1 - eps]`` and never zero for a saturated, wrong prediction, so training can
recover from it (PyTorch's ``binary_cross_entropy`` behaves the same way).

``y_true`` and ``y_pred`` must have the same shape (``InvalidInputError`` naming both
otherwise); nothing is broadcast, except the label shapes SparseCategoricalCrossentropy accepts.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit.losses._base import EPSILON, Loss, PerPosition, _FromLogits, position_weights
from rnnkit.losses._crossentropy import CategoricalCrossentropy, SparseCategoricalCrossentropy


def _over_last(e: np.ndarray) -> tuple[np.ndarray, float]:
    """Per-position mean over the last axis (rank >= 2), or the elements themselves (rank 1)."""
    if e.ndim >= 2:
        return np.mean(e, axis=-1), float(e.shape[-1])
    return e, 1.0


class MeanSquaredError(Loss):
    """``mean((y_pred - y_true)**2)``; gradient ``2 (y_pred - y_true) / size``."""

    name: ClassVar[str] = "mean_squared_error"

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        yt, yp, dt = self._pair(y_true, y_pred)
        d = yp - yt
        v, F = _over_last(d * d)
        return v, (2.0 / F) * d if grad else None, dt


class MeanAbsoluteError(Loss):
    """``mean(|y_pred - y_true|)``; gradient ``sign(y_pred - y_true) / size`` (0 where equal)."""

    name: ClassVar[str] = "mean_absolute_error"

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        yt, yp, dt = self._pair(y_true, y_pred)
        d = yp - yt
        v, F = _over_last(np.abs(d))
        return v, np.sign(d) / F if grad else None, dt


class BinaryCrossentropy(_FromLogits):
    """Binary cross-entropy, mean over every element.

    Probabilities (default): ``p = clip(y_pred, 1e-7, 1 - 1e-7)``,
    ``loss = -(y log p + (1 - y) log(1 - p))``, gradient ``(p - y) / (p (1 - p)) / size``.
    ``from_logits=True``: ``loss = max(z, 0) - z y + log(1 + exp(-|z|))``, gradient
    ``(sigmoid(z) - y) / size``.
    """

    name: ClassVar[str] = "binary_crossentropy"

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        y, z, dt = self._pair(y_true, y_pred)
        if self.from_logits:
            v, F = _over_last(np.maximum(z, 0.0) - z * y + np.log1p(np.exp(-np.abs(z))))
            if not grad:
                return v, None, dt
            sig = 0.5 * (1.0 + np.tanh(0.5 * z))
            return v, (sig - y) / F, dt
        p = np.clip(z, EPSILON, 1.0 - EPSILON)
        v, F = _over_last(-(y * np.log(p) + (1.0 - y) * np.log1p(-p)))
        if not grad:
            return v, None, dt
        return v, (-y / p + (1.0 - y) / (1.0 - p)) / F, dt


class Pinball(Loss):
    """The pinball (quantile) loss of ``Q`` quantile forecasts: ``y_pred`` (..., Q), column j the
    forecast of quantile ``quantiles[j]``; ``y_true`` (..., 1) (one value for every quantile) or
    (..., Q). Per position ``mean_j max(q_j e_j, (q_j - 1) e_j)`` with ``e_j = y_true - y_pred_j``;
    minimised by the q_j-quantiles of y. Gradient ``(1 - q_j) / Q`` where the forecast is above
    the value, ``-q_j / Q`` below it, ``(0.5 - q_j) / Q`` at a tie (the midpoint of the
    subgradient, as autograd of ``maximum`` gives). ``quantiles`` are in (0, 1), default
    ``(0.5,)`` (half the mean absolute error)."""

    name: ClassVar[str] = "pinball"

    def __init__(self, quantiles: Any = (0.5,)) -> None:
        q = np.atleast_1d(np.asarray(quantiles, dtype=np.float64)) if not isinstance(quantiles, str) else None
        if q is None or q.ndim != 1 or q.size == 0 or not np.all((q > 0) & (q < 1)):
            raise InvalidParameterError(f"Pinball: quantiles must be numbers in (0, 1), got {quantiles!r}")
        self.quantiles = tuple(float(v) for v in q)

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        yp = np.asarray(y_pred)
        dt = yp.dtype if yp.dtype.kind == "f" else np.dtype(np.float64)
        Q = len(self.quantiles)
        yt = np.asarray(y_true, dtype=np.float64)
        if yp.ndim < 1 or yp.shape[-1] != Q or yt.shape not in (yp.shape, yp.shape[:-1] + (1,)):
            raise InvalidInputError(
                f"Pinball: y_pred must be (..., {Q}) (one column per quantile {list(self.quantiles)}) "
                f"and y_true (..., 1) or the same shape; got y_true {yt.shape}, y_pred {yp.shape}")
        q = np.asarray(self.quantiles)
        e = yt - yp.astype(np.float64)
        v = np.mean(np.maximum(q * e, (q - 1.0) * e), axis=-1)
        if not grad:
            return v, None, dt
        g = np.where(e > 0, -q, np.where(e < 0, 1.0 - q, 0.5 - q)) / Q
        return v, g, dt

    def get_config(self) -> dict[str, Any]:
        return {"quantiles": list(self.quantiles)}


#: the same class: the name the quantile loss also goes by
QuantileLoss = Pinball

_ALIASES: dict[str, type[Loss]] = {
    "pinball": Pinball, "quantile": Pinball,
    "mse": MeanSquaredError, "mean_squared_error": MeanSquaredError,
    "mae": MeanAbsoluteError, "mean_absolute_error": MeanAbsoluteError,
    "binary_crossentropy": BinaryCrossentropy, "bce": BinaryCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy, "cce": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
}
#: class name -> class, for files (which record Keras' class names; ``...CrossEntropy`` loads too)
_CLASSES: dict[str, type[Loss]] = {c.__name__: c for c in set(_ALIASES.values())}

# ``...CrossEntropy``: other spellings of Keras' ``...Crossentropy`` classes (the same objects).
BinaryCrossEntropy = BinaryCrossentropy
CategoricalCrossEntropy = CategoricalCrossentropy
SparseCategoricalCrossEntropy = SparseCategoricalCrossentropy
_CLASSES.update({"QuantileLoss": Pinball})
_CLASSES.update({"BinaryCrossEntropy": BinaryCrossentropy, "CategoricalCrossEntropy": CategoricalCrossentropy,
                 "SparseCategoricalCrossEntropy": SparseCategoricalCrossentropy})


def serialize(loss: Loss) -> dict[str, Any]:
    """``{"class_name": ..., "config": loss.get_config()}`` (JSON-serialisable)."""
    if not isinstance(loss, Loss):
        raise InvalidParameterError(f"losses.serialize: expected a Loss, got {type(loss).__name__}")
    return {"class_name": type(loss).__name__, "config": loss.get_config()}


def deserialize(data: dict[str, Any]) -> Loss:
    """The inverse of :func:`serialize`."""
    try:
        if not isinstance(data, dict):
            raise TypeError(type(data).__name__)
        cls = _CLASSES[data["class_name"]]
        return cls.from_config(dict(data.get("config", {})))
    except (KeyError, TypeError, AttributeError, ValueError):
        raise InvalidParameterError(f"losses.deserialize: not a serialized loss: {data!r}; "
                                    f"known classes {sorted(_CLASSES)}") from None


def get(identifier: str | Loss | dict[str, Any]) -> Loss:
    """A loss from a name (``"mse"``, ``"binary_crossentropy"``, a class name, ...), a serialized
    dict or a :class:`Loss` instance (returned as is)."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str):
        cls = _ALIASES.get(identifier.lower()) or _CLASSES.get(identifier)
        if cls is not None:
            return cls()
        raise InvalidParameterError(f"losses.get: unknown loss {identifier!r}; known: {sorted(_ALIASES)}")
    raise InvalidParameterError(
        f"losses.get: expected a name, a serialized dict or a Loss, got {type(identifier).__name__}"
    )


__all__ = ["BinaryCrossEntropy", "BinaryCrossentropy", "CategoricalCrossEntropy", "CategoricalCrossentropy",
           "Loss", "MeanAbsoluteError", "MeanSquaredError", "Pinball", "QuantileLoss",
           "SparseCategoricalCrossEntropy",
           "SparseCategoricalCrossentropy", "deserialize", "get", "position_weights", "serialize"]
