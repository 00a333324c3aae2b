"""``Conv1D``: a convolution over the time axis (Keras 3's layer), as an im2col and one matrix
product per group on the packed products (:mod:`rnnkit.layers._product`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._activations import Activation, ActivationLike
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._initializers import glorot_uniform, zeros
from rnnkit._layer import Layer, check_bool, check_positive_int
from rnnkit._penalties import attach, config_of
from rnnkit._shape import Shape
from rnnkit.layers._common import activation_config, activation_from
from rnnkit.layers._product import matmul, matmul_tn

PADDINGS = ("valid", "same", "causal")


def one_int(value: Any, what: str, where: str) -> int:
    """A positive int, also Keras' one-element list / tuple spelling (``(3,)``)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise InvalidParameterError(f"{where}: {what} must be an int or a list of one int, got {value!r}")
        value = value[0]
    return check_positive_int(value, what, where)


def padding_of(value: Any, where: str, allowed: tuple[str, ...] = PADDINGS) -> str:
    """``padding`` lower-cased (Keras takes any case), one of ``allowed``."""
    if not isinstance(value, str) or value.lower() not in allowed:
        raise InvalidParameterError(f"{where}: padding must be one of {', '.join(allowed)}, got {value!r}")
    return value.lower()


def pads(T: int, span: int, stride: int, padding: str) -> tuple[int, int]:
    """(left, right) zero steps added to a length-``T`` sequence read by windows covering ``span``
    steps every ``stride`` steps: none for ``valid``; Keras' (TensorFlow's) ``same``
    (``ceil(T / stride)`` outputs, the odd step of padding on the right); ``causal``: ``span - 1``
    on the left."""
    if padding == "valid":
        return 0, 0
    if padding == "causal":
        return span - 1, 0
    total = max((-(-T // stride) - 1) * stride + span - T, 0)
    return total // 2, total - total // 2


def out_len(T: int, span: int, stride: int, padding: str) -> int:
    """The number of windows over a length-``T`` sequence (after its padding)."""
    left, right = pads(T, span, stride, padding)
    return (T + left + right - span) // stride + 1


def windows(xp: np.ndarray, k: int, dilation: int, stride: int, n: int) -> np.ndarray:
    """A read-only (B, n, k, C) view of ``xp`` (B, Tp, C): window ``t`` holds steps
    ``t * stride + j * dilation``, j < k."""
    B, _, C = xp.shape
    s0, s1, s2 = xp.strides
    return np.lib.stride_tricks.as_strided(xp, (B, n, k, C), (s0, s1 * stride, s1 * dilation, s2),
                                           writeable=False)


def scatter_windows(dw: np.ndarray, Tp: int, dilation: int, stride: int) -> np.ndarray:
    """The adjoint of :func:`windows`: (B, n, k, C) window gradients summed into (B, Tp, C)."""
    B, n, k, C = dw.shape
    out = np.zeros((B, Tp, C), dw.dtype)
    for j in range(k):
        lo = j * dilation
        out[:, lo:lo + stride * (n - 1) + 1:stride] += dw[:, :, j]
    return out


class Conv1D(Layer):
    """A 1-D convolution over the time axis of (B, T, C) inputs (Keras 3's ``Conv1D``, channels
    last)::

        y[b, t, f] = act(bias[f] + sum_{j, c} xp[b, t * strides + j * dilation_rate, c] * kernel[j, c, f])

    where ``xp`` is the input padded with zeros by ``padding``: ``"valid"`` (none; ``T - span + 1``
    steps, ``span = dilation_rate * (kernel_size - 1) + 1``, strided), ``"same"`` (Keras'
    ``ceil(T / strides)`` steps, the odd padding step on the right), ``"causal"`` (``span - 1``
    zeros on the left: output ``t`` reads no input after ``t``). ``groups`` splits the channels
    and the filters into that many independent convolutions (``C`` and ``filters`` divisible by
    it). ``strides > 1`` with ``dilation_rate > 1`` is refused, as Keras refuses it.

    Weights, in Keras' order: ``kernel`` (kernel_size, C / groups, filters), Glorot-uniform with
    ``fan_in = kernel_size * C / groups``, ``fan_out = kernel_size * filters`` (Keras'); ``bias``
    (filters,), zeros (absent with ``use_bias=False``). ``activation`` defaults to linear (Keras'
    None). Keras' ``kernel_regularizer`` & co. as for :class:`~rnnkit.layers.Dense`.

    Build: a ``"valid"`` sequence of known length shorter than ``span`` is refused
    (InvalidInputError naming ``kernel_size``), as is one at forward.

    Masks: refused (Keras' ``Conv1D`` does not support masking): a masked input raises.

    Computed as an im2col: the (B * T', kernel_size * C) windows times the kernel reshaped to
    (kernel_size * C, filters), one product per group (the packed products); backward
    ``dW = cols^T @ da``, ``dcols = da @ W^T`` summed back into the padded input.
    """

    def __init__(self, filters: int, kernel_size: int | tuple[int] | list[int], strides: Any = 1,
                 padding: str = "valid", dilation_rate: Any = 1, groups: int = 1,
                 activation: ActivationLike | dict[str, Any] | None = None, use_bias: bool = True, *,
                 seed: int | None = None, dtype: Any = "float32", name: str | None = None,
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None) -> None:
        super().__init__(seed=seed, dtype=dtype, name=name)
        self.filters = check_positive_int(filters, "filters", self.name)
        self.kernel_size = one_int(kernel_size, "kernel_size", self.name)
        self.strides = one_int(strides, "strides", self.name)
        self.padding = padding_of(padding, self.name)
        self.dilation_rate = one_int(dilation_rate, "dilation_rate", self.name)
        self.groups = check_positive_int(groups, "groups", self.name)
        if self.strides > 1 and self.dilation_rate > 1:
            raise InvalidParameterError(f"{self.name}: strides > 1 with dilation_rate > 1 is not supported "
                                        f"(Keras refuses it too); got strides={self.strides}, "
                                        f"dilation_rate={self.dilation_rate}")
        if self.filters % self.groups:
            raise InvalidParameterError(f"{self.name}: filters ({self.filters}) must be divisible by groups "
                                        f"({self.groups})")
        self.activation = activation_from("linear" if activation is None else activation, self.name)
        self.use_bias = check_bool(use_bias, "use_bias", self.name)
        attach(self, kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
               activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
               bias_constraint=bias_constraint)

    @property
    def span(self) -> int:
        """The number of input steps one window covers: ``dilation_rate * (kernel_size - 1) + 1``."""
        return self.dilation_rate * (self.kernel_size - 1) + 1

    def _check_length(self, T: int | None) -> None:
        if T is not None and self.padding == "valid" and T < self.span:
            raise InvalidInputError(
                f"{self.name}: kernel_size={self.kernel_size} (dilation_rate={self.dilation_rate}, "
                f"{self.span} steps) is longer than the input's {T} steps with padding='valid'; expected "
                f"at least {self.span} steps, a shorter kernel, or padding='same' / 'causal'")

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank != 3:
            raise InvalidInputError(f"{self.name}: expected a rank-3 input (batch, steps, channels), got "
                                    f"{shape} (rank {shape.rank})")
        C = shape[-1]
        if C is None or C < 1:
            raise InvalidInputError(f"{self.name}: the channels axis must have a known size >= 1, got "
                                    f"{shape}")
        if C % self.groups:
            raise InvalidInputError(f"{self.name}: the input's {C} channels are not divisible by "
                                    f"groups={self.groups}")
        self._check_length(shape[1])

    def _check_rebuild(self, shape: Shape) -> None:
        if shape[-1] != self.input_shape[-1]:
            raise InvalidInputError(f"{self.name}: built for {self.input_shape[-1]} channels, asked to "
                                    f"build again for {shape}")

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        cg = int(shape[-1] or 0) // self.groups
        k = self.kernel_size
        self._add_weight("kernel", glorot_uniform(rng, (k, cg, self.filters), k * cg, k * self.filters,
                                                  self.dtype))
        if self.use_bias:
            self._add_weight("bias", zeros((self.filters,), self.dtype))

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        T = shp[1]
        return Shape((shp[0], None if T is None else out_len(T, self.span, self.strides, self.padding),
                      self.filters))

    def _check_input(self, x: Any) -> np.ndarray:
        self._require_built()
        arr = self._as_input(x)
        if arr.ndim != 3 or arr.shape[-1] != self.input_shape[-1]:
            raise InvalidInputError(f"{self.name}: expected an input (batch, steps, {self.input_shape[-1]}), "
                                    f"got shape {arr.shape}")
        self._check_length(arr.shape[1])
        return arr

    def _cols(self, arr: np.ndarray) -> tuple[np.ndarray, int, int]:
        """The windows as a C-contiguous (B, T', k, C) array, T' and the padded length."""
        B, T, C = arr.shape
        left, right = pads(T, self.span, self.strides, self.padding)
        xp = arr if left == right == 0 else np.pad(arr, ((0, 0), (left, right), (0, 0)))
        n = (T + left + right - self.span) // self.strides + 1
        return np.ascontiguousarray(windows(xp, self.kernel_size, self.dilation_rate, self.strides, n)), n, \
            T + left + right

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._check_input(x)
        B, _, C = arr.shape
        cols, n, _ = self._cols(arr)
        k, g, F = self.kernel_size, self.groups, self.filters
        cg, fg = C // g, F // g
        W = self._weights["kernel"]
        if g == 1:
            y = matmul(cols.reshape(B * n, k * C), W.reshape(k * C, F))
        else:
            y = np.empty((B * n, F), self.dtype)
            for i in range(g):
                ci = np.ascontiguousarray(cols[..., i * cg:(i + 1) * cg]).reshape(B * n, k * cg)
                y[:, i * fg:(i + 1) * fg] = matmul(ci, np.ascontiguousarray(W[..., i * fg:(i + 1) * fg])
                                                   .reshape(k * cg, fg))
        if self.use_bias:
            y += self._weights["bias"]
        y = y.reshape(B, n, F)
        if self.activation.kind is not Activation.LINEAR:
            y = self.activation(y, out=y)
        ctx.save(self, (arr.shape, cols, y))
        return y

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray | None:
        self._require_built("backward")
        shape, cols, y = ctx.peek(self)
        g_ = self._as_grad(grad, y.shape)
        ctx.load(self)  # consumed only once the gradient fits
        da = g_ if self.activation.kind is Activation.LINEAR else self.activation.vjp(y, g_)
        B, T, C = shape
        n = y.shape[1]
        k, g, F = self.kernel_size, self.groups, self.filters
        cg, fg = C // g, F // g
        da2 = np.ascontiguousarray(da).reshape(B * n, F)
        if self.use_bias:
            ctx.add_grad(self, "bias", da2.sum(axis=0))
        W = self._weights["kernel"]
        need_x = ctx.needs_input_grad(self)
        if g == 1:
            ctx.add_grad(self, "kernel", matmul_tn(cols.reshape(B * n, k * C), da2).reshape(k, C, F))
            dcols = matmul(da2, W.reshape(k * C, F), trans_b=True).reshape(B, n, k, C) if need_x else None
        else:
            dW = np.empty((k, cg, F), self.dtype)
            dcols = np.empty((B, n, k, C), self.dtype) if need_x else None
            for i in range(g):
                ci = np.ascontiguousarray(cols[..., i * cg:(i + 1) * cg]).reshape(B * n, k * cg)
                di = np.ascontiguousarray(da2[:, i * fg:(i + 1) * fg])
                dW[..., i * fg:(i + 1) * fg] = matmul_tn(ci, di).reshape(k, cg, fg)
                if dcols is not None:
                    wi = np.ascontiguousarray(W[..., i * fg:(i + 1) * fg]).reshape(k * cg, fg)
                    dcols[..., i * cg:(i + 1) * cg] = matmul(di, wi, trans_b=True).reshape(B, n, k, cg)
            ctx.add_grad(self, "kernel", dW)
        if dcols is None:
            return None
        left, right = pads(T, self.span, self.strides, self.padding)
        dxp = scatter_windows(dcols, T + left + right, self.dilation_rate, self.strides)
        return np.ascontiguousarray(dxp[:, left:left + T])

    def get_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "filters": self.filters, "kernel_size": self.kernel_size, "strides": self.strides,
            "padding": self.padding, "dilation_rate": self.dilation_rate, "groups": self.groups,
            "activation": activation_config(self.activation), "use_bias": self.use_bias}
        cfg.update(super().get_config())
        cfg.update(config_of(self))
        return cfg
