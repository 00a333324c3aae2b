"""Pooling and padding over the time axis of (B, T, C) inputs, as Keras 3 has them:
``MaxPooling1D``, ``AveragePooling1D``, ``GlobalAveragePooling1D``, ``GlobalMaxPooling1D``,
``ZeroPadding1D``, ``Cropping1D``, ``UpSampling1D``. None has weights."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer, check_bool, check_positive_int
from rnnkit._numbers import check_int
from rnnkit._shape import Shape
from rnnkit.layers._conv import one_int, out_len, padding_of, pads, scatter_windows, windows


class _TimeLayer(Layer):
    """A weightless layer over (B, T, C) inputs: rank 3, any T and C again after the build."""

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank != 3:
            raise InvalidInputError(f"{self.name}: expected a rank-3 input (batch, steps, channels), got "
                                    f"{shape} (rank {shape.rank})")
        self._check_length(shape[1])

    def _check_length(self, T: int | None) -> None:
        """InvalidInputError when ``T`` steps (None: not known yet) are too few for the layer."""

    def _out_steps(self, T: int) -> int:
        """The output's steps for ``T`` input steps."""
        return T

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        T = shp[1]
        return Shape((shp[0], None if T is None else self._out_steps(T), shp[2]))

    def _check_rebuild(self, shape: Shape) -> None:
        """Weightless: any (B, T, C) shape is accepted again."""

    def _input(self, x: Any) -> np.ndarray:
        arr = self._as_input(x)
        if arr.ndim != 3:
            raise InvalidInputError(f"{self.name}: expected an input (batch, steps, channels), got shape "
                                    f"{arr.shape}")
        return arr


class _Pooling1D(_TimeLayer):
    """A window of ``pool_size`` steps every ``strides`` steps (default ``pool_size``); ``padding``
    ``"valid"`` or ``"same"`` (Keras': ``ceil(T / strides)`` windows, the odd padding step on the
    right, padding never counted in a window's value)."""

    def __init__(self, pool_size: Any = 2, strides: Any = None, padding: str = "valid", *,
                 dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.pool_size = one_int(pool_size, "pool_size", self.name)
        self.strides = self.pool_size if strides is None else one_int(strides, "strides", self.name)
        self.padding = padding_of(padding, self.name, ("valid", "same"))

    def _check_length(self, T: int | None) -> None:
        if T is not None and self.padding == "valid" and T < self.pool_size:
            raise InvalidInputError(f"{self.name}: pool_size={self.pool_size} is longer than the input's {T} "
                                    f"steps with padding='valid'; expected at least {self.pool_size} steps")

    def _out_steps(self, T: int) -> int:
        return out_len(T, self.pool_size, self.strides, self.padding)

    def _windows(self, arr: np.ndarray, fill: float) -> tuple[np.ndarray, int, int, int]:
        """(B, n, pool_size, C) windows of ``arr`` padded with ``fill``; n, left pad, padded T."""
        self._check_length(arr.shape[1])
        T = arr.shape[1]
        left, right = pads(T, self.pool_size, self.strides, self.padding)
        xp = arr if left == right == 0 else np.pad(arr, ((0, 0), (left, right), (0, 0)), constant_values=fill)
        n = (T + left + right - self.pool_size) // self.strides + 1
        return windows(xp, self.pool_size, 1, self.strides, n), n, left, T + left + right

    def get_config(self) -> dict[str, Any]:
        return {"pool_size": self.pool_size, "strides": self.strides, "padding": self.padding,
                "dtype": self.dtype.name, "name": self.name}


class MaxPooling1D(_Pooling1D):
    """The largest value of each window, per channel (Keras 3's ``MaxPooling1D``; see
    :class:`_Pooling1D` for the windows). Backward sends a window's gradient to its first
    largest step (PyTorch's and Keras-on-torch's choice). Masks: refused (Keras' layer does not
    support masking)."""

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._input(x)
        w, n, left, Tp = self._windows(arr, -np.inf)
        idx = w.argmax(axis=2)                                   # (B, n, C)
        y = np.take_along_axis(w, idx[:, :, None, :], axis=2)[:, :, 0, :]
        ctx.save(self, (arr.shape, idx, n, left, Tp))
        return np.ascontiguousarray(y)

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape, idx, n, left, Tp = ctx.peek(self)
        g = self._as_grad(grad, (shape[0], n, shape[2]))
        ctx.load(self)  # consumed only once the gradient fits
        dw = np.zeros((shape[0], n, self.pool_size, shape[2]), self.dtype)
        np.put_along_axis(dw, idx[:, :, None, :], g[:, :, None, :], axis=2)
        return np.ascontiguousarray(scatter_windows(dw, Tp, 1, self.strides)[:, left:left + shape[1]])


class AveragePooling1D(_Pooling1D):
    """The mean of each window's real steps, per channel (Keras 3's ``AveragePooling1D``; see
    :class:`_Pooling1D`): with ``padding="same"`` a window reaching into the padding averages
    only the input steps it covers (Keras' documented rule, TensorFlow's; Keras on its torch
    backend agrees wherever the padding is even on both sides). Masks: refused (as Keras)."""

    def _counts(self, T: int, n: int, left: int, Tp: int) -> np.ndarray:
        real = np.zeros(Tp, self.dtype)
        real[left:left + T] = 1.0
        return windows(real[None, :, None], self.pool_size, 1, self.strides, n).sum(axis=2)[0, :, 0]

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._input(x)
        w, n, left, Tp = self._windows(arr, 0.0)
        count = self._counts(arr.shape[1], n, left, Tp)
        y = w.sum(axis=2) / count[None, :, None]
        ctx.save(self, (arr.shape, count, n, left, Tp))
        return y

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape, count, n, left, Tp = ctx.peek(self)
        g = self._as_grad(grad, (shape[0], n, shape[2]))
        ctx.load(self)  # consumed only once the gradient fits
        share = g / count[None, :, None]
        dw = np.broadcast_to(share[:, :, None, :], (shape[0], n, self.pool_size, shape[2]))
        return np.ascontiguousarray(scatter_windows(dw, Tp, 1, self.strides)[:, left:left + shape[1]])


class _GlobalPooling1D(_TimeLayer):
    """One value per channel over all the steps: (B, T, C) -> (B, C), or (B, 1, C) with
    ``keepdims=True``."""

    def __init__(self, keepdims: bool = False, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.keepdims = check_bool(keepdims, "keepdims", self.name)

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return Shape((shp[0], 1, shp[2]) if self.keepdims else (shp[0], shp[2]))

    def _shape_out(self, y: np.ndarray) -> np.ndarray:
        return y[:, None, :] if self.keepdims else y

    def _grad_in(self, grad: Any, B: int, C: int) -> np.ndarray:
        g = self._as_grad(grad, (B, 1, C) if self.keepdims else (B, C))
        return g.reshape(B, C)

    def get_config(self) -> dict[str, Any]:
        return {"keepdims": self.keepdims, "dtype": self.dtype.name, "name": self.name}


class GlobalAveragePooling1D(_GlobalPooling1D):
    """The mean over the steps (Keras 3's ``GlobalAveragePooling1D``). Masks: consumed, as in
    Keras: the mean of the real steps only (``sum(x * m) / sum(m)``); the output carries no
    mask. A sample whose steps are all masked has no mean: InvalidInputError naming it."""

    supports_masking = True

    def compute_mask(self, x: Any, mask: Any) -> None:
        return None

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._input(x)
        B, T, C = arr.shape
        mask = ctx.mask
        if T == 0:
            raise InvalidInputError(f"{self.name}: an input of 0 steps has no mean")
        if mask is None:
            w = np.full((B, T), 1.0 / T, self.dtype)
        else:
            mask.check(B, T, self.name)
            m = mask.valid(T).astype(self.dtype)
            n = m.sum(axis=1)
            if (n == 0).any():
                raise InvalidInputError(f"{self.name}: sample {int(np.argmax(n == 0))} has every step "
                                        f"masked, so no mean; expected at least one real step per sample")
            w = m / n[:, None]
        y = np.einsum("btc,bt->bc", arr, w)
        ctx.save(self, (arr.shape, w))
        return self._shape_out(y)

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape, w = ctx.peek(self)
        g = self._grad_in(grad, shape[0], shape[2])
        ctx.load(self)  # consumed only once the gradient fits
        return w[:, :, None] * g[:, None, :]


class GlobalMaxPooling1D(_GlobalPooling1D):
    """The largest value over the steps, per channel (Keras 3's ``GlobalMaxPooling1D``); backward
    sends the gradient to the first largest step. Masks: refused (Keras' layer does not support
    masking)."""

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._input(x)
        if arr.shape[1] == 0:
            raise InvalidInputError(f"{self.name}: an input of 0 steps has no largest value")
        idx = arr.argmax(axis=1)                                 # (B, C)
        y = np.take_along_axis(arr, idx[:, None, :], axis=1)[:, 0, :]
        ctx.save(self, (arr.shape, idx))
        return self._shape_out(np.ascontiguousarray(y))

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape, idx = ctx.peek(self)
        g = self._grad_in(grad, shape[0], shape[2])
        ctx.load(self)  # consumed only once the gradient fits
        dx = np.zeros(shape, self.dtype)
        np.put_along_axis(dx, idx[:, None, :], g[:, None, :], axis=1)
        return dx


def _pair(value: Any, what: str, where: str) -> tuple[int, int]:
    """An int n (both sides n) or a pair (left, right) of ints >= 0."""
    vals = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(vals) != 2:
        raise InvalidParameterError(f"{where}: {what} must be an int or a pair (left, right), got {value!r}")
    out = tuple(check_int(v, what, where) for v in vals)
    if min(out) < 0:
        raise InvalidParameterError(f"{where}: {what} must be >= 0, got {value!r}")
    return out[0], out[1]


class ZeroPadding1D(_TimeLayer):
    """Zeros added before and after the steps (Keras 3's ``ZeroPadding1D``): ``padding`` an int
    (both sides) or ``(left, right)``. Masks: refused (as Keras)."""

    def __init__(self, padding: Any = 1, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.padding = _pair(padding, "padding", self.name)

    def _out_steps(self, T: int) -> int:
        return T + sum(self.padding)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._input(x)
        ctx.save(self, arr.shape)
        return np.pad(arr, ((0, 0), self.padding, (0, 0)))

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape = ctx.peek(self)
        g = self._as_grad(grad, (shape[0], shape[1] + sum(self.padding), shape[2]))
        ctx.load(self)  # consumed only once the gradient fits
        return np.ascontiguousarray(g[:, self.padding[0]:self.padding[0] + shape[1]])

    def get_config(self) -> dict[str, Any]:
        return {"padding": list(self.padding), "dtype": self.dtype.name, "name": self.name}


class Cropping1D(_TimeLayer):
    """Steps removed from the start and the end (Keras 3's ``Cropping1D``): ``cropping`` an int
    (both sides) or ``(start, end)``, default ``(1, 1)``; an input of no more steps than are
    cropped is refused (InvalidInputError naming ``cropping``). Masks: refused (as Keras)."""

    def __init__(self, cropping: Any = (1, 1), *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.cropping = _pair(cropping, "cropping", self.name)

    def _check_length(self, T: int | None) -> None:
        if T is not None and T <= sum(self.cropping):
            raise InvalidInputError(f"{self.name}: cropping={self.cropping} removes {sum(self.cropping)} "
                                    f"steps of an input of {T}; expected more steps than are cropped")

    def _out_steps(self, T: int) -> int:
        return T - sum(self.cropping)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._input(x)
        self._check_length(arr.shape[1])
        ctx.save(self, arr.shape)
        return np.ascontiguousarray(arr[:, self.cropping[0]:arr.shape[1] - self.cropping[1]])

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        shape = ctx.peek(self)
        g = self._as_grad(grad, (shape[0], shape[1] - sum(self.cropping), shape[2]))
        ctx.load(self)  # consumed only once the gradient fits
        return np.pad(g, ((0, 0), self.cropping, (0, 0)))

    def get_config(self) -> dict[str, Any]:
        return {"cropping": list(self.cropping), "dtype": self.dtype.name, "name": self.name}


class UpSampling1D(_TimeLayer):
    """Each step repeated ``size`` times (Keras 3's ``UpSampling1D``, default 2); backward sums
    each step's ``size`` gradients. Masks: refused (as Keras)."""

    def __init__(self, size: int = 2, *, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        self.size = check_positive_int(size, "size", self.name)

    def _out_steps(self, T: int) -> int:
        return T * self.size

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._input(x)
        ctx.save(self, arr.shape)
        return np.repeat(arr, self.size, axis=1)

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        B, T, C = ctx.peek(self)
        g = self._as_grad(grad, (B, T * self.size, C))
        ctx.load(self)  # consumed only once the gradient fits
        return g.reshape(B, T, self.size, C).sum(axis=2)

    def get_config(self) -> dict[str, Any]:
        return {"size": self.size, "dtype": self.dtype.name, "name": self.name}
