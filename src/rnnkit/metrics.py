"""Metrics: ``metric(y_true, y_pred) -> float``, each with a ``.name`` (the History key).

- :class:`Accuracy` (``"accuracy"``, ``"acc"``): the fraction of positions predicted right.
  The form follows the shapes:

  ====================================  ==================  ===================================
  y_pred                                y_true              a position is right when
  ====================================  ==================  ===================================
  (..., 1) or rank 1 (binary)           same shape, or      (y_pred > threshold) == y_true,
                                        y_pred.shape[:-1]   y_true holding 0 / 1
  (..., C), C > 1 (categorical)         same shape          argmax(y_pred) == argmax(y_true)
  (..., C), C > 1 (sparse labels)       (...) or (..., 1)   argmax(y_pred) == label
  ====================================  ==================  ===================================

- :class:`MeanAbsoluteError` (``"mae"``) and :class:`MeanSquaredError` (``"mse"``): the mean over
  every element, shapes equal.

Any other shape pairing raises InvalidInputError naming both shapes.

Every metric takes ``sample_weight`` (per sample, or per position such as per timestep — see
:func:`rnnkit.losses.position_weights`) and is then the weighted mean over positions,
``sum(w v) / sum(w)`` (0 when every weight is 0), as Keras' mean metrics; a model passes the
mask of its output as weights, so masked timesteps do not count.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._errors import InvalidInputError, InvalidParameterError, MethodNotImplementedError
from rnnkit._numbers import check_float
from rnnkit.losses import position_weights


def _arr(x: Any, what: str, where: str) -> np.ndarray:
    return as_real_array(x, what, where, allow_empty=False)


def _weighted_mean(v: np.ndarray, sample_weight: Any, where: str) -> float:
    """Mean of the per-position values ``v``, or ``sum(w v) / sum(w)`` with weights."""
    if sample_weight is None:
        return float(np.mean(v))
    w = position_weights(sample_weight, v.shape, where)
    total = float(np.sum(w))
    return float(np.sum(w * v) / total) if total > 0 else 0.0


class Metric:
    """Base class: a named function of ``(y_true, y_pred)`` to a float."""

    name: ClassVar[str] = "metric"

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
        raise MethodNotImplementedError(f"{type(self).__name__}.__call__ is not implemented; a "
                                        f"subclass provides it")

    def get_config(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({cfg})"


class Accuracy(Metric):
    """Accuracy, binary / categorical / sparse by the shapes (see the module doc).

    Args:
        threshold: the binary decision threshold on ``y_pred`` (default 0.5, in [0, 1]).
    """

    name: ClassVar[str] = "accuracy"

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = check_float(threshold, "threshold", "Accuracy", lo=0.0, hi=1.0)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
        yt = _arr(y_true, "y_true", "Accuracy")
        yp = _arr(y_pred, "y_pred", "Accuracy")
        if yp.ndim == 0:
            raise InvalidInputError(f"Accuracy: y_pred must have at least one axis (a batch of predictions), "
                                    f"got a scalar {yp.item()!r}; y_true shape {yt.shape}")
        binary = yp.ndim == 1 or yp.shape[-1] == 1
        if binary:
            squeezed = yp.ndim >= 1 and yp.shape[-1] == 1 and yt.shape == yp.shape[:-1]
            if yt.shape != yp.shape and not squeezed:
                raise InvalidInputError(
                    f"Accuracy: y_true shape {yt.shape} does not fit the binary y_pred shape {yp.shape}; "
                    f"expected {yp.shape}" + (f" or {yp.shape[:-1]}" if yp.ndim >= 2 else "")
                )
            bad = (yt != 0) & (yt != 1)
            if np.any(bad):
                raise InvalidInputError(
                    f"Accuracy: binary labels must be 0 or 1, got {yt[bad].flat[0].item()!r} in y_true"
                )
            pred = (yp > self.threshold).reshape(yt.shape)
            right = pred == (yt == 1)
            if yp.ndim >= 2:
                right = right.reshape(yp.shape[:-1])
            return _weighted_mean(right, sample_weight, "Accuracy")
        lead = yp.shape[:-1]
        pred_cls = np.argmax(yp, axis=-1)
        if yt.shape == yp.shape:
            return _weighted_mean(pred_cls == np.argmax(yt, axis=-1), sample_weight, "Accuracy")
        if yt.shape in (lead, lead + (1,)):
            labels = yt.reshape(lead)
            if labels.dtype.kind == "f":
                bad = ~np.isfinite(labels) | (labels != np.round(labels))
                if np.any(bad):
                    raise InvalidInputError("Accuracy: sparse labels must be whole class indices, "
                                            f"got {labels[bad].flat[0].item()!r}")
            return _weighted_mean(pred_cls == labels.astype(np.int64), sample_weight, "Accuracy")
        raise InvalidInputError(
            f"Accuracy: y_true shape {yt.shape} does not fit y_pred shape {yp.shape}; expected "
            f"{yp.shape} (one-hot), {lead} or {lead + (1,)} (labels)"
        )

    def get_config(self) -> dict[str, Any]:
        return {"threshold": self.threshold}


class _Elementwise(Metric):
    def _pair(self, y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray]:
        where = type(self).__name__
        yt, yp = _arr(y_true, "y_true", where), _arr(y_pred, "y_pred", where)
        if yt.shape != yp.shape:
            raise InvalidInputError(f"{where}: y_true shape {yt.shape} does not match y_pred shape "
                                    f"{yp.shape}; the shapes must be equal")
        return yt.astype(np.float64), yp.astype(np.float64)


class MeanAbsoluteError(_Elementwise):
    """``mean(|y_pred - y_true|)`` over every element."""

    name: ClassVar[str] = "mae"

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
        yt, yp = self._pair(y_true, y_pred)
        e = np.abs(yp - yt)
        return _weighted_mean(np.mean(e, axis=-1) if e.ndim >= 2 else e, sample_weight, "mae")


class MeanSquaredError(_Elementwise):
    """``mean((y_pred - y_true)**2)`` over every element."""

    name: ClassVar[str] = "mse"

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
        yt, yp = self._pair(y_true, y_pred)
        e = (yp - yt) ** 2
        return _weighted_mean(np.mean(e, axis=-1) if e.ndim >= 2 else e, sample_weight, "mse")


_ALIASES: dict[str, type[Metric]] = {
    "accuracy": Accuracy, "acc": Accuracy,
    "mae": MeanAbsoluteError, "mean_absolute_error": MeanAbsoluteError,
    "mse": MeanSquaredError, "mean_squared_error": MeanSquaredError,
}


def from_config(class_name: str, config: dict[str, Any]) -> Metric:
    """A metric from its class name and ``get_config()`` dict (what a model file stores)."""
    classes: dict[str, type[Metric]] = {
        c.__name__: c for c in (Accuracy, MeanAbsoluteError, MeanSquaredError)
    }
    cls = classes.get(class_name)
    if cls is None:
        raise InvalidParameterError(f"metrics.from_config: unknown metric class {class_name!r}; "
                                    f"known: {sorted(classes)}")
    try:
        return cls(**config)
    except TypeError as e:
        raise InvalidParameterError(f"metrics.from_config: bad config for {class_name}: {e}") from None


def get(identifier: str | Metric) -> Metric:
    """A metric from a name (``"accuracy"``, ``"acc"``, ``"mae"``, ``"mse"``, ...) or an instance
    (anything callable with a ``name`` attribute is returned as is)."""
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        cls = _ALIASES.get(identifier.lower())
        if cls is None:
            raise InvalidParameterError(f"metrics.get: unknown metric {identifier!r}; "
                                        f"known: {sorted(_ALIASES)}")
        return cls()
    if callable(identifier) and isinstance(getattr(identifier, "name", None), str):
        return identifier
    raise InvalidParameterError(
        f"metrics.get: expected a metric name or a Metric, got {type(identifier).__name__}"
    )


__all__ = ["Accuracy", "MeanAbsoluteError", "MeanSquaredError", "Metric", "from_config", "get"]
