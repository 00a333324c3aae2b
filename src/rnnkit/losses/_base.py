"""The base of every loss: :class:`Loss` (the value, its gradient, the weighted mean over the
positions), the sample weights of the positions, and the ``from_logits`` switch."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._errors import InvalidInputError, InvalidParameterError, MethodNotImplementedError
from rnnkit._numbers import check_int, show
from rnnkit._tape import ACTIVE, record

#: the probability clip of the probability forms (Keras' backend epsilon)
EPSILON = 1e-7


def _array(x: Any, what: str, where: str) -> np.ndarray:
    return as_real_array(x, what, where, allow_empty=False)


def _grad_dtype(y_pred: np.ndarray) -> np.dtype:
    return y_pred.dtype if y_pred.dtype.kind == "f" else np.dtype(np.float64)


PerPosition = tuple[np.ndarray, 'np.ndarray | None', np.dtype]


def position_weights(sample_weight: Any, lead: tuple[int, ...], where: str) -> np.ndarray:
    """``sample_weight`` as float64 weights of the loss positions ``lead`` (``y_pred.shape[:-1]``;
    ``y_pred.shape`` for a rank-1 prediction): one per sample ``(B,)`` (spread over the other
    positions, e.g. every timestep), one per position, or with a trailing axis of 1. Checked:
    finite, >= 0, a fitting shape (InvalidInputError naming what it got); ``lead`` a tuple of
    ints >= 0 (InvalidParameterError otherwise)."""
    if not isinstance(lead, tuple):
        raise InvalidParameterError(f"position_weights: lead must be a tuple of ints >= 0 (a shape), got "
                                    f"{show(lead)} ({type(lead).__name__})")
    lead = tuple(check_int(d, f"lead[{k}]", "position_weights", lo=0) for k, d in enumerate(lead))
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

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        """The loss value (the weighted mean over positions): a float; while a
        :class:`~rnnkit.GradientTape` tracks ``y_pred``, a 0-d array of ``y_pred``'s dtype
        recorded on the tape (its gradient is :meth:`value_and_grad`'s), as Keras' losses are
        differentiable in a custom loop (``float()`` reads it)."""
        if ACTIVE.tapes and any(t.tracks(y_pred) for t in ACTIVE.tapes):
            return loss_on_tape(self, [y_true], [y_pred], None if sample_weight is None else [sample_weight])
        return self._compute(y_true, y_pred, False, sample_weight)[0]

    def value_and_grad(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> tuple[float, np.ndarray]:
        """``(loss, d loss / d y_pred)``; the gradient has y_pred's shape and (float) dtype."""
        value, grad = self._compute(y_true, y_pred, True, sample_weight)
        assert grad is not None
        return value, grad

    def _same_shape(self, y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray]:
        """Both as arrays of real numbers, in their own dtypes; InvalidInputError unless their
        shapes are equal (nothing is broadcast)."""
        where = type(self).__name__
        yt = _array(y_true, "y_true", where)
        yp = _array(y_pred, "y_pred", where)
        if yt.shape != yp.shape:
            raise InvalidInputError(
                f"{where}: y_true shape {yt.shape} does not match y_pred shape {yp.shape}; "
                f"the shapes must be equal (nothing is broadcast)"
            )
        return yt, yp

    def _pair(self, y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray, np.dtype]:
        yt, yp = self._same_shape(y_true, y_pred)
        return yt.astype(np.float64), yp.astype(np.float64), _grad_dtype(yp)

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        raise MethodNotImplementedError(f"{type(self).__name__}._per_position is not implemented; a "
                                        f"subclass provides it")

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


class _FromLogits(Loss):
    def __init__(self, from_logits: bool = False) -> None:
        if not isinstance(from_logits, (bool, np.bool_)):
            raise InvalidParameterError(f"{type(self).__name__}: from_logits must be a bool, "
                                        f"got {from_logits!r}")
        self.from_logits = bool(from_logits)

    def get_config(self) -> dict[str, Any]:
        return {"from_logits": self.from_logits}


def loss_on_tape(loss: Loss, ys: list[Any], preds: list[np.ndarray], weights: list[Any] | None) -> np.ndarray:
    """``sum_k loss(ys[k], preds[k], weights[k])`` as a 0-d array (of the first prediction's
    float dtype) recorded on the recording tapes as one entry over ``preds``: its backward
    scales each :meth:`Loss.value_and_grad` gradient by the upstream gradient."""
    total = 0.0
    grads: list[np.ndarray] = []
    for k, (y, p) in enumerate(zip(ys, preds, strict=True)):
        w = None if weights is None else weights[k]
        v, g = loss.value_and_grad(y, p, w)
        total += float(v)
        grads.append(g)
    out = np.asarray(total, dtype=_grad_dtype(np.asarray(preds[0])))

    def vjp(g: Any, needs: tuple[bool, ...]) -> list[Any]:
        s = float(g)
        return [(gk if s == 1.0 else gk * gk.dtype.type(s)) if need else None
                for gk, need in zip(grads, needs, strict=True)]

    record([out], preds, vjp)
    return out
