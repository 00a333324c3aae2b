"""The categorical cross-entropies: one-hot (or soft) targets and integer labels, on
probabilities (Keras' clip) or on logits (fused through :mod:`rnnkit.losses._xent`)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from rnnkit._errors import InvalidInputError, MethodNotImplementedError
from rnnkit.losses._base import (
    EPSILON,
    Loss,
    PerPosition,
    _array,
    _FromLogits,
    _grad_dtype,
    position_weights,
)
from rnnkit.losses._xent import LogitsGradient, compute_dtype, softmax_xent, softmax_xent_probs


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = np.max(z, axis=-1, keepdims=True)
    s = z - m
    return s - np.log(np.sum(np.exp(s), axis=-1, keepdims=True))


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


def _fused_probs(loss: Loss, target: np.ndarray, p: np.ndarray, sparse: bool,
                 sample_weight: Any) -> tuple[float, LogitsGradient]:
    """The probability cross-entropies of softmax outputs ``p`` and the gradient with respect
    to the softmax's logits (:func:`~rnnkit.losses._xent.softmax_xent_probs`), weighted and
    divided by the number of positions as :meth:`Loss.value_and_grad` is."""
    dt = compute_dtype(p)
    C = p.shape[-1]
    p2 = np.ascontiguousarray(p.reshape(-1, C), dtype=dt)
    N = p2.shape[0]
    t2 = target.reshape(-1) if sparse else target.reshape(-1, C).astype(dt, copy=False)
    w = None if sample_weight is None else \
        position_weights(sample_weight, p.shape[:-1], type(loss).__name__).reshape(-1)
    coef = np.full(N, 1.0 / N, dt) if w is None else (w / N).astype(dt)
    out = np.empty((N, C), dt)
    v = softmax_xent_probs(p2, t2, sparse, coef, out, EPSILON)
    value = float(np.sum(v) / N) if w is None else float(np.sum(w * v) / N)
    return value, out.reshape(p.shape).astype(_grad_dtype(p), copy=False).view(LogitsGradient)


class _SoftmaxFusable(_FromLogits):
    """The cross-entropies that can also give the gradient with respect to the logits of a
    softmax output (what a ``Dense(softmax)`` output layer takes in place of the gradient with
    respect to its output)."""

    def value_and_logits_grad(self, y_true: Any, y_pred: Any,
                              sample_weight: Any = None) -> tuple[float, LogitsGradient]:
        """For ``y_pred = softmax(a)`` over the last axis (rows summing to 1): ``(loss, d loss /
        d a)``, the loss being the one :meth:`value_and_grad` gives (``from_logits=False``;
        with ``from_logits=True`` the prediction is ``a`` itself and this is
        :meth:`value_and_grad`). The gradient is a :class:`~rnnkit.losses._xent.LogitsGradient`."""
        if self.from_logits:
            value, g = self.value_and_grad(y_true, y_pred, sample_weight)
            return value, g.view(LogitsGradient)
        return self._logits_grad(y_true, y_pred, sample_weight)

    def _logits_grad(self, y_true: Any, y_pred: Any, sample_weight: Any) -> tuple[float, LogitsGradient]:
        raise MethodNotImplementedError(f"{type(self).__name__}._logits_grad is not implemented; a "
                                        f"subclass provides it")


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


class CategoricalCrossentropy(_SoftmaxFusable):
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
        yt, yp = self._same_shape(y_true, y_pred)
        _check_classes(yp, type(self).__name__)
        return _fused_logits(self, yt, yp, False, grad, sample_weight)

    def _logits_grad(self, y_true: Any, y_pred: Any, sample_weight: Any) -> tuple[float, LogitsGradient]:
        yt, yp = self._same_shape(y_true, y_pred)
        _check_classes(yp, type(self).__name__)
        return _fused_probs(self, yt, yp, False, sample_weight)

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        y, z, dt = self._pair(y_true, y_pred)
        _check_classes(z, type(self).__name__)
        v, g = _categorical(y, z, False, self.from_logits, grad)
        return v, g, dt


class SparseCategoricalCrossentropy(_SoftmaxFusable):
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

    def _logits_grad(self, y_true: Any, y_pred: Any, sample_weight: Any) -> tuple[float, LogitsGradient]:
        where = type(self).__name__
        yp = _array(y_pred, "y_pred", where)
        _check_classes(yp, where)
        return _fused_probs(self, self.labels(y_true, yp.shape), yp, True, sample_weight)

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        where = type(self).__name__
        yp = _array(y_pred, "y_pred", where)
        _check_classes(yp, where)
        lab = self.labels(y_true, yp.shape)
        v, g = _categorical(lab, yp.astype(np.float64), True, self.from_logits, grad)
        return v, g, _grad_dtype(yp)
