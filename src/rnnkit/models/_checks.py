"""What the model level shares below ``Model`` itself: the model protocol the trainer drives,
the internal NaN/Inf signal of a checked pass, and the conversion of inputs to arrays."""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError
from rnnkit._layer import Layer

Data = Any  # an array, or a list of arrays (one per model input / output)


class Trainable(Protocol):
    """What the trainer, the evaluator, the weighting helpers, the callbacks and the fit
    checkpoints use of a model (:class:`rnnkit.models.Model` has it all)."""

    name: str
    n_inputs: int
    n_outputs: int
    optimizer: Any
    loss: Any
    metrics: list[Any]
    stop_training: bool
    history: Any

    def _forward_masks(self, xs: list[np.ndarray], ctx: Ctx, check: bool,
                       masks: list[Any] | None = None) -> tuple[list[np.ndarray], list[Any]]: ...

    def _backward(self, grads: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]: ...

    def _inputs(self, x: Data) -> list[np.ndarray]: ...

    def named_weights(self) -> dict[str, tuple[Layer, str]]: ...

    @property
    def trainable_weights(self) -> Any: ...

    def _unread_input_grads(self) -> tuple[Layer, ...]: ...

    def _compiled_metrics(self) -> list[Any]: ...

    def _custom_step(self) -> Any: ...

    def get_weights(self) -> list[np.ndarray]: ...

    def set_weights(self, weights: list[Any]) -> None: ...


class NonFiniteAt(Exception):
    """Internal: a checked pass produced NaN/Inf at ``where``; ``fit`` adds the epoch."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


def check_finite(arr: np.ndarray, where: str) -> None:
    if not np.isfinite(arr).all():
        raise NonFiniteAt(where)


def as_list(x: Data, n: int, what: str) -> list[np.ndarray]:
    """One array per model input/output: a plain array when ``n == 1`` (nested Python lists are
    one array; a list holding exactly one ndarray is accepted too), a list of ``n`` otherwise."""
    if n == 1:
        if isinstance(x, (list, tuple)) and len(x) == 1 and isinstance(x[0], np.ndarray):
            return [_real(x[0], what)]
        return [_real(x, what)]
    if not isinstance(x, (list, tuple)) or len(x) != n:
        got = f"a list of {len(x)}" if isinstance(x, (list, tuple)) else "one array"
        want = "a list" if n > 1 else "one array"
        raise InvalidInputError(f"expected {n} {what} array(s) ({want}), got {got}")
    return [_real(a, what) for a in x]


def _real(x: Any, what: str) -> np.ndarray:
    """An array of real numbers (ragged nested lists and objects are refused, typed)."""
    return as_real_array(x, what, "model")


def unlist(xs: list[np.ndarray]) -> Data:
    return xs[0] if len(xs) == 1 else xs


def all_finite(a: np.ndarray) -> bool:
    """Whether every value of ``a`` is finite (integer arrays always are). A finite sum of
    squares proves it (NaN and Inf propagate) in one BLAS pass without a temporary, for a
    contiguous array of reals (``vdot`` copies a strided view, such as lazy windows, whole);
    only when the sum is not finite (or overflows) are the values looked at. ``vdot``, unlike
    ``dot``, raises no overflow warning, and ``math.isfinite`` reads its scalar in a tenth of
    ``np.isfinite``'s time."""
    kind = a.dtype.kind
    if kind not in "fc":
        return True
    if kind == "f" and a.flags.c_contiguous and math.isfinite(np.vdot(a, a)):
        return True
    return bool(np.isfinite(a).all())


def first_non_finite(arrs: list[np.ndarray], what: str) -> None:
    """InvalidInputError naming the first NaN/Inf of ``arrs`` (``what``, numbered when several)
    and its position; nothing when every value is finite (integer arrays always are)."""
    for k, a in enumerate(arrs):
        if not all_finite(a):
            pos = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
            raise InvalidInputError(f"{what}{'' if len(arrs) == 1 else f' {k}'} holds {a[pos]} at {pos}; "
                                    f"expected finite numbers")
