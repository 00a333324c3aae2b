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

from rnnkit._arrays import as_real_array
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit.losses._xent import compute_dtype, softmax_xent

#: the probability clip of the probability forms (Keras' backend epsilon)
EPSILON = 1e-7


def _array(x: Any, what: str, where: str) -> np.ndarray:
    return as_real_array(x, what, where, allow_empty=False)


def _grad_dtype(y_pred: np.ndarray) -> np.dtype:
    return y_pred.dtype if y_pred.dtype.kind == "f" else np.dtype(np.float64)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = np.max(z, axis=-1, keepdims=True)
    s = z - m
    return s - np.log(np.sum(np.exp(s), axis=-1, keepdims=True))


PerPosition = tuple[np.ndarray, 'np.ndarray | None', np.dtype]


def position_weights(sample_weight: Any, lead: tuple[int, ...], where: str) -> np.ndarray:
    """``sample_weight`` as float64 weights of the loss positions ``lead`` (``y_pred.shape[:-1]``;
    ``y_pred.shape`` for a rank-1 prediction): one per sample ``(B,)`` (spread over the other
    positions, e.g. every timestep), one per position, or with a trailing axis of 1. Checked:
    finite, >= 0, a fitting shape (InvalidInputError naming what it got)."""
    w = as_real_array(sample_weight, "sample_weight", where).astype(np.float64)
    if w.shape == lead + (1,):
        w = w.reshape(lead)
    if w.shape != lead:
        if len(lead) >= 1 and w.shape == lead[:1]:
            w = w.reshape(lead[:1] + (1,) * (len(lead) - 1))
        else:
            raise InvalidInputError(
                f"{where}: sample_weight has shape {w.shape}; expected one weight per sample "
                f"{lead[:1]} or per position {lead}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise InvalidInputError(f"{where}: sample_weight must hold finite numbers >= 0")
    return np.broadcast_to(w, lead)


class Loss:
    """Base class: ``loss(y_true, y_pred, sample_weight=None) -> float`` and ``value_and_grad``.

    A loss has one value per POSITION (every index of ``y_pred`` but its last axis; every
    element of a rank-1 ``y_pred``): the mean over the last axis (MSE, MAE, BCE) or the sum over
    the classes (cross-entropies). The loss is Keras' ``sum_over_batch_size`` reduction::

        loss = sum_p w_p * v_p / P          (P positions; w_p = 1 without weights)

    ``sample_weight`` gives ``w`` (:func:`position_weights`: per sample or per position, e.g.
    per timestep). A mask enters as weights too (Keras' ``apply_mask``): ``w_p * P / V`` at the
    V valid positions and 0 elsewhere, so the loss is the mean over the valid positions.
    Subclasses implement ``_per_position(y_true, y_pred, grad) -> (v, dv/dy_pred, dtype)``.
    """

    #: the Keras-style name (``losses.get`` accepts it)
    name: ClassVar[str] = "loss"

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
        """The loss value (the weighted mean over positions)."""
        return self._compute(y_true, y_pred, False, sample_weight)[0]

    def value_and_grad(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> tuple[float, np.ndarray]:
        """``(loss, d loss / d y_pred)``; the gradient has y_pred's shape and (float) dtype."""
        value, grad = self._compute(y_true, y_pred, True, sample_weight)
        assert grad is not None
        return value, grad

    def _pair(self, y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray, np.dtype]:
        where = type(self).__name__
        yt = _array(y_true, "y_true", where)
        yp = _array(y_pred, "y_pred", where)
        if yt.shape != yp.shape:
            raise InvalidInputError(
                f"{where}: y_true shape {yt.shape} does not match y_pred shape {yp.shape}; "
                f"the shapes must be equal (nothing is broadcast)"
            )
        return yt.astype(np.float64), yp.astype(np.float64), _grad_dtype(yp)

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        raise NotImplementedError

    def _compute(self, y_true: Any, y_pred: Any, grad: bool,
                 sample_weight: Any = None) -> tuple[float, np.ndarray | None]:
        v, g, dt = self._per_position(y_true, y_pred, grad)
        P = max(v.size, 1)
        if sample_weight is None:
            value = float(np.sum(v) / P)
            return value, None if g is None else (g / P).astype(dt)
        w = position_weights(sample_weight, v.shape, type(self).__name__)
        value = float(np.sum(w * v) / P)
        if g is None:
            return value, None
        wg = w if g.ndim == w.ndim else w[..., None]
        return value, (wg * g / P).astype(dt)

    def get_config(self) -> dict[str, Any]:
        """The constructor keywords (JSON-serialisable)."""
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Loss:
        return cls(**config)

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({cfg})"


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


class _FromLogits(Loss):
    def __init__(self, from_logits: bool = False) -> None:
        if not isinstance(from_logits, (bool, np.bool_)):
            raise InvalidParameterError(f"{type(self).__name__}: from_logits must be a bool, "
                                        f"got {from_logits!r}")
        self.from_logits = bool(from_logits)

    def get_config(self) -> dict[str, Any]:
        return {"from_logits": self.from_logits}


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


def _check_classes(yp: np.ndarray, where: str) -> None:
    if yp.ndim < 1 or yp.shape[-1] < 1:
        raise InvalidInputError(f"{where}: y_pred needs a class axis (last), got shape {yp.shape}")


def _fused_logits(loss: Loss, target: np.ndarray, z: np.ndarray, sparse: bool, grad: bool,
                  sample_weight: Any) -> tuple[float, np.ndarray | None]:
    """The from-logits cross-entropies through :func:`~rnnkit.losses._xent.softmax_xent`: one
    sweep over the rows, in ``z``'s float type (float64 for other types), the weights and the
    ``1 / P`` folded into the gradient as it is written. ``target``: int64 labels of
    ``z.shape[:-1]`` (``sparse``) or targets of ``z``'s shape."""
    dt = compute_dtype(z)
    C = z.shape[-1]
    z2 = np.ascontiguousarray(z.reshape(-1, C), dtype=dt)
    N = z2.shape[0]
    t2 = target.reshape(-1) if sparse else target.reshape(-1, C).astype(dt, copy=False)
    w = None if sample_weight is None else \
        position_weights(sample_weight, z.shape[:-1], type(loss).__name__).reshape(-1)
    out = np.empty((N, C), dt) if grad else None
    coef = None
    if grad:
        coef = np.full(N, 1.0 / N, dt) if w is None else (w / N).astype(dt)
    v = softmax_xent(z2, t2, sparse, coef, out)
    value = float(np.sum(v) / N) if w is None else float(np.sum(w * v) / N)
    if out is None:
        return value, None
    return value, out.reshape(z.shape).astype(_grad_dtype(z), copy=False)


def _categorical(onehot_or_labels: np.ndarray, z: np.ndarray, sparse: bool, from_logits: bool,
                 grad: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Shared CCE arithmetic, per position (z.shape[:-1]): the values and their gradients.
    ``sparse``: ``onehot_or_labels`` are int labels of z.shape[:-1]."""
    if from_logits:
        logp = _log_softmax(z)
        if sparse:
            v = -np.take_along_axis(logp, onehot_or_labels[..., None], axis=-1)[..., 0]
        else:
            v = -np.sum(onehot_or_labels * logp, axis=-1)
        if not grad:
            return v, None
        soft = np.exp(logp)
        if sparse:
            g = soft
            np.put_along_axis(g, onehot_or_labels[..., None],
                              np.take_along_axis(g, onehot_or_labels[..., None], axis=-1) - 1.0, axis=-1)
        else:
            g = soft * np.sum(onehot_or_labels, axis=-1, keepdims=True) - onehot_or_labels
        return v, g
    s = np.sum(z, axis=-1, keepdims=True)
    q = z / s
    qc = np.clip(q, EPSILON, 1.0 - EPSILON)
    if sparse:
        idx = onehot_or_labels[..., None]
        qc_l = np.take_along_axis(qc, idx, axis=-1)
        v = -np.log(qc_l)[..., 0]
        if not grad:
            return v, None
        # d/dp_k of -log clip(p_l / s): (1/s) * (-[k == l] / qc_l + q_l / qc_l)
        q_l = np.take_along_axis(q, idx, axis=-1)
        g = np.broadcast_to(q_l / qc_l, z.shape).copy()
        np.put_along_axis(g, idx, q_l / qc_l - 1.0 / qc_l, axis=-1)
        return v, g / s
    y = onehot_or_labels
    v = -np.sum(y * np.log(qc), axis=-1)
    if not grad:
        return v, None
    # d/dp_k of -sum_j y_j log clip(p_j / s): (1/s) * (-y_k / qc_k + sum_j y_j q_j / qc_j)
    g = (-y / qc + np.sum(y * q / qc, axis=-1, keepdims=True)) / s
    return v, g


class CategoricalCrossentropy(_FromLogits):
    """Categorical cross-entropy over the last (class) axis with one-hot (or soft) targets,
    averaged over every other position.

    Probabilities (default, Keras): ``q = clip(y_pred / sum(y_pred, -1), 1e-7, 1 - 1e-7)``,
    ``loss = -sum_c y_c log q_c``. ``from_logits=True``: softmax fused,
    ``loss = -sum_c y_c (z_c - logsumexp(z))``, gradient ``softmax(z) sum(y) - y``.
    """

    name: ClassVar[str] = "categorical_crossentropy"

    def _compute(self, y_true: Any, y_pred: Any, grad: bool,
                 sample_weight: Any = None) -> tuple[float, np.ndarray | None]:
        if not self.from_logits:
            return super()._compute(y_true, y_pred, grad, sample_weight)
        where = type(self).__name__
        yt, yp = _array(y_true, "y_true", where), _array(y_pred, "y_pred", where)
        if yt.shape != yp.shape:
            raise InvalidInputError(
                f"{where}: y_true shape {yt.shape} does not match y_pred shape {yp.shape}; "
                f"the shapes must be equal (nothing is broadcast)"
            )
        _check_classes(yp, where)
        return _fused_logits(self, yt, yp, False, grad, sample_weight)

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        y, z, dt = self._pair(y_true, y_pred)
        _check_classes(z, type(self).__name__)
        v, g = _categorical(y, z, False, self.from_logits, grad)
        return v, g, dt


class SparseCategoricalCrossentropy(_FromLogits):
    """Categorical cross-entropy with integer class labels.

    ``y_true`` holds labels in ``0..C-1`` (ints, or floats with integral values) of shape
    ``y_pred.shape[:-1]`` or ``y_pred.shape[:-1] + (1,)``; ``y_pred`` (..., C). A label outside
    ``0..C-1``, non-integral or non-finite raises InvalidInputError naming it and its position.
    The arithmetic is :class:`CategoricalCrossentropy`'s with the one-hot of the labels.
    """

    name: ClassVar[str] = "sparse_categorical_crossentropy"

    def labels(self, y_true: Any, y_pred_shape: tuple[int, ...]) -> np.ndarray:
        """The labels as an int64 array of shape ``y_pred_shape[:-1]`` (checked)."""
        where = type(self).__name__
        yt = _array(y_true, "y_true", where)
        lead = y_pred_shape[:-1]
        if yt.shape == lead + (1,) and len(y_pred_shape) >= 1:
            yt = yt.reshape(lead)
        elif yt.shape != lead:
            raise InvalidInputError(
                f"{where}: y_true (labels) shape {yt.shape} does not fit y_pred shape "
                f"{y_pred_shape}; expected {lead} or {lead + (1,)}"
            )
        C = y_pred_shape[-1]
        if yt.dtype.kind == "f":
            bad = ~np.isfinite(yt) | (yt != np.trunc(np.where(np.isfinite(yt), yt, 0.0)))
            if np.any(bad):
                pos = tuple(int(i) for i in np.argwhere(bad)[0])
                raise InvalidInputError(f"{where}: label {yt[pos].item()!r} at position {pos} is not a whole "
                                        f"number; labels are class indices 0..{C - 1}")
        lab = yt.astype(np.int64)
        bad = (lab < 0) | (lab >= C)
        if np.any(bad):
            pos = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InvalidInputError(f"{where}: label {yt[pos].item()!r} at position {pos} is out of range; "
                                    f"y_pred has {C} classes, so labels must lie in 0..{C - 1}")
        return lab

    def _compute(self, y_true: Any, y_pred: Any, grad: bool,
                 sample_weight: Any = None) -> tuple[float, np.ndarray | None]:
        if not self.from_logits:
            return super()._compute(y_true, y_pred, grad, sample_weight)
        where = type(self).__name__
        yp = _array(y_pred, "y_pred", where)
        _check_classes(yp, where)
        return _fused_logits(self, self.labels(y_true, yp.shape), yp, True, grad, sample_weight)

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        where = type(self).__name__
        yp = _array(y_pred, "y_pred", where)
        _check_classes(yp, where)
        lab = self.labels(y_true, yp.shape)
        v, g = _categorical(lab, yp.astype(np.float64), True, self.from_logits, grad)
        return v, g, _grad_dtype(yp)


_ALIASES: dict[str, type[Loss]] = {
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
        cls = _CLASSES[data["class_name"]]
        return cls.from_config(dict(data.get("config", {})))
    except (KeyError, TypeError, AttributeError):
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
           "Loss", "MeanAbsoluteError", "MeanSquaredError", "SparseCategoricalCrossEntropy",
           "SparseCategoricalCrossentropy", "deserialize", "get", "position_weights", "serialize"]
