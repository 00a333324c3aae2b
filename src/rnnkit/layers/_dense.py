"""``Dense`` and ``ActivationLayer``: the feed-forward head and a standalone nonlinearity."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._activations import Activation, ActivationLike
from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, WeightShapeError
from rnnkit._initializers import glorot_uniform, zeros
from rnnkit._layer import (
    Layer,
    as_weight_array,
    check_bool,
    check_finite_weight,
    check_positive_int,
    keras_weight_list,
)
from rnnkit._penalties import attach, config_of
from rnnkit._shape import Shape
from rnnkit.layers._common import activation_config, activation_from, check_activation_axis
from rnnkit.layers._dense_products import affine, weight_grads
from rnnkit.layers._product import matmul, matmul_tn
from rnnkit.layers._tied import check_tie, check_tied_build, table
from rnnkit.losses._xent import LogitsGradient


class Dense(Layer):
    """A fully connected layer over the LAST axis::

        y = act(x @ W + b)        x (..., F) -> y (..., units)

    Works on any input of rank >= 2 (batch, ..., F); leading axes are carried through, so a
    Dense after a ``return_sequences`` layer maps every timestep (Keras' behaviour).
    The input width ``F`` comes from :meth:`build`, never from an argument.

    Weights: ``kernel`` W (F, units), Glorot-uniform U(-l, l) with ``l = sqrt(6 / (F + units))``;
    ``bias`` b (units,), zeros (absent with ``use_bias=False``).
    ``param_count = F * units + units``. ``kernel_regularizer``, ``bias_regularizer``,
    ``activity_regularizer``, ``kernel_constraint``, ``bias_constraint``: Keras' (see
    :mod:`rnnkit._penalties`). ``activation`` defaults to ``"linear"``; any spelling
    of :func:`~rnnkit._activations.resolve_activation` is accepted (softmax over its axis).

    Backward: ``da = act.vjp(y, g)``; ``dW = x^T @ da`` and ``db = sum(da)`` over every leading
    axis (one GEMM for both: ``db`` is the product's row for a row of ones appended to ``x^T``);
    returns ``dx = da @ W^T``. A linear activation costs nothing: no pass over
    the output in forward, ``da = g`` itself in backward (so a (positions x vocabulary) output
    of a language model is written once forward and read, not copied, backward). A softmax
    output under a cross-entropy on probabilities is fused by the model's objective: the loss
    gives the gradient with respect to the logits (``softmax - onehot`` wherever nothing is
    clipped, a :class:`~rnnkit.losses._xent.LogitsGradient`), which backward takes as ``da``
    (:meth:`takes_logits_gradient`); any other gradient goes through the softmax's vjp.

    The products run on :mod:`rnnkit.layers._product` (the compiled kernels' packed product in
    the ``"fast"`` kernel mode; a wide forward product a slice of columns at a time with the bias
    added to each slice in the cache, :mod:`rnnkit.layers._dense_products`): a sample's output
    does not depend on the other samples of the batch, bit for bit, so ``predict`` gives the
    same values whatever its ``batch_size``.

    Masks: acts per timestep, so a mask passes through unchanged (Keras).

    ``tie_to=embedding`` (an :class:`~rnnkit.layers.Embedding` built before this layer) ties
    the kernel to the embedding table ``E`` (V, D): ``W = E^T``, one array, no kernel weight
    here; ``units`` must be V and the input width D; the kernel gradient is summed into the
    table's (:mod:`rnnkit.layers._tied`). No kernel regularizer or constraint then.
    """

    supports_masking = True

    def __init__(
        self,
        units: int,
        activation: ActivationLike | dict[str, Any] = "linear",
        *,
        use_bias: bool = True,
        seed: int | None = None,
        dtype: Any = "float32",
        name: str | None = None,
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        tie_to: Any = None,
    ) -> None:
        super().__init__(seed=seed, dtype=dtype, name=name)
        self.units = check_positive_int(units, "units", self.name)
        self.tie_to = check_tie(tie_to, self.name)
        if self.tie_to is not None and (kernel_regularizer is not None or kernel_constraint is not None):
            raise InvalidParameterError(f"{self.name}: a Dense tied to an Embedding has no kernel of its "
                                        f"own; regularize or constrain the Embedding's table instead")
        self.activation = activation_from(activation, self.name)
        self.use_bias = check_bool(use_bias, "use_bias", self.name)
        attach(self, kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
               activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
               bias_constraint=bias_constraint)

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank < 2:
            raise InvalidInputError(
                f"{self.name}: expected an input shape of rank >= 2 (batch, ..., features), "
                f"got {shape} (rank {shape.rank})"
            )
        if shape[-1] is None or shape[-1] < 1:
            raise InvalidInputError(
                f"{self.name}: the last (features) axis must be a known width >= 1, got {shape}"
            )
        check_activation_axis(self.activation, shape.rank, self.name)

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        F = int(shape[-1])  # type: ignore[arg-type]
        if self.tie_to is not None:
            check_tied_build(self, F)
        else:
            self._add_weight("kernel", glorot_uniform(rng, (F, self.units), F, self.units, self.dtype))
        if self.use_bias:
            self._add_weight("bias", zeros((self.units,), self.dtype))

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return Shape((*shp[:-1], self.units))

    def set_weights(self, kernel: Any, bias: Any = None) -> None:
        """Install ``kernel`` (F, units) and ``bias`` (units,), or, as Keras'
        ``layer.set_weights(weights)``, ONE list ``[kernel, bias]`` (``[kernel]`` with
        ``use_bias=False``; told from a kernel written as nested lists by its first item's two
        axes); an unbuilt layer builds from ``kernel``'s rows. Shapes and finiteness in the layer's
        dtype (no NaN or Inf, no value the cast would make Inf) are checked before anything
        changes. A tied Dense takes ``kernel=None`` (its kernel
        is the Embedding's table)."""
        listed = keras_weight_list(kernel, 2) if bias is None and self.tie_to is None else None
        if listed is not None:
            want = ["kernel", "bias"] if self.use_bias else ["kernel"]
            if len(listed) != len(want):
                raise InvalidInputError(f"{self.name}.set_weights: expected one list of {len(want)} "
                                        f"arrays ({', '.join(want)}), got {len(listed)}")
            kernel, bias = listed[0], (listed[1] if self.use_bias else None)
        if self.tie_to is not None:
            if kernel is not None:
                raise InvalidParameterError(f"{self.name}: the kernel is the tied Embedding's table "
                                            f"transposed; set the Embedding's weights, and pass "
                                            f"kernel=None here")
            self._require_built("set_weights")
            if self.use_bias:
                b = as_weight_array(bias, f"{self.name}.bias")
                if b.shape != (self.units,):
                    raise WeightShapeError("bias", (self.units,), b.shape, f"layer {self.name}")
                self.set_weight("bias", check_finite_weight(b, f"{self.name}.bias", self.dtype))
            return
        k = as_weight_array(kernel, f"{self.name}.kernel")
        if k.ndim != 2 or k.shape[1] != self.units or k.shape[0] < 1:
            raise WeightShapeError("kernel", ("input_dim", self.units), k.shape, f"layer {self.name}")
        if self.built and k.shape[0] != self.input_shape[-1]:
            raise WeightShapeError("kernel", (self.input_shape[-1], self.units), k.shape,
                                   f"layer {self.name}")
        if self.use_bias:
            if bias is None:
                raise WeightShapeError("bias", (self.units,), None, f"layer {self.name}")
            b = as_weight_array(bias, f"{self.name}.bias")
            if b.shape != (self.units,):
                raise WeightShapeError("bias", (self.units,), b.shape, f"layer {self.name}")
        elif bias is not None:
            raise WeightShapeError("bias", None, np.shape(bias), f"layer {self.name} has use_bias=False")
        k = check_finite_weight(k, f"{self.name}.kernel", self.dtype)
        if self.use_bias:
            b = check_finite_weight(b, f"{self.name}.bias", self.dtype)
        if not self.built:
            self.build(Shape((None, k.shape[0])))
        with WEIGHTS:   # one write: a reader in another thread sees both or neither
            self.set_weight("kernel", k)
            if self.use_bias:
                self.set_weight("bias", b)

    def kernel_array(self) -> np.ndarray:
        """The kernel W (F, units) the forward multiplies by: the ``kernel`` weight, or for a tied
        Dense the Embedding's table transposed (a new array)."""
        if self.tie_to is None:
            return self.weight("kernel")
        return np.ascontiguousarray(table(self).T)

    def _check_input(self, x: Any) -> np.ndarray:
        self._require_built()
        arr = self._as_input(x)
        if arr.ndim < 2 or arr.shape[-1] != self.input_shape[-1]:
            raise InvalidInputError(
                f"{self.name}: expected an input of rank >= 2 with {self.input_shape[-1]} features "
                f"on the last axis, got shape {arr.shape}"
            )
        return arr

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        """``act(x @ W + b)``; (..., F) -> (..., units)."""
        arr = self._check_input(x)
        F = arr.shape[-1]
        b = self._weights["bias"] if self.use_bias else None
        if self.tie_to is None:
            a = affine(arr.reshape(-1, F), self._weights["kernel"], b).reshape(*arr.shape[:-1], self.units)
        else:
            a = matmul(arr.reshape(-1, F), table(self), trans_b=True).reshape(*arr.shape[:-1], self.units)
            if b is not None:
                a += b
        y = a if self.activation.kind is Activation.LINEAR else self.activation(a, out=a)
        ctx.save(self, (arr, y))
        return y

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray | None:
        """Adds ``kernel`` / ``bias`` gradients into ``ctx``; returns dL/dx (..., F), or None
        when ``ctx`` says nobody reads it (:meth:`rnnkit.Ctx.skip_input_grad`)."""
        self._require_built("backward")
        x, y = ctx.peek(self)
        pre = isinstance(grad, LogitsGradient) and self.takes_logits_gradient()
        g = self._as_grad(grad, y.shape)
        ctx.load(self)  # consumed only once the gradient fits
        da = g if pre or self.activation.kind is Activation.LINEAR else self.activation.vjp(y, g)
        F = x.shape[-1]
        da2 = da.reshape(-1, self.units)
        if self.tie_to is not None:
            if self.use_bias:
                ctx.add_grad(self, "bias", da2.sum(axis=0))
            ctx.add_grad(self.tie_to, "embeddings", matmul_tn(da2, x.reshape(-1, F)))  # type: ignore[arg-type]
            return matmul(da2, table(self)).reshape(x.shape) if ctx.needs_input_grad(self) else None
        dw, db = weight_grads(x.reshape(-1, F), da2, self.use_bias)
        if db is not None:
            ctx.add_grad(self, "bias", db)
        ctx.give_grad(self, "kernel", dw)      # (weight_grads' own array: kept, not copied)
        if not ctx.needs_input_grad(self):
            return None
        return matmul(da2, self._weights["kernel"], trans_b=True).reshape(x.shape)

    def takes_logits_gradient(self) -> bool:
        """Whether :meth:`backward` takes a :class:`~rnnkit.losses._xent.LogitsGradient` (the
        gradient with respect to ``x @ W + b``, made by a cross-entropy on this layer's output)
        in place of the gradient with respect to its output: a softmax over the last axis and no
        activity regularizer (whose gradient is with respect to the output)."""
        act = self.activation
        return (act.kind is Activation.SOFTMAX and act.axis in (-1, self.input_shape.rank - 1)
                and self.activity_regularizer is None)

    def get_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"units": self.units, "activation": activation_config(self.activation),
                               "use_bias": self.use_bias}
        if self.tie_to is not None:
            cfg["tie_to"] = self.tie_to if isinstance(self.tie_to, str) else self.tie_to.name
        cfg.update(super().get_config())
        cfg.update(config_of(self))
        return cfg


class ActivationLayer(Layer):
    """An activation as a layer (Keras' ``layers.Activation``): ``y = act(x)``, any shape.

    Named ``ActivationLayer`` because ``rnnkit.Activation`` is the activation enum.
    No weights. Backward: ``act.vjp(y, g)`` (in terms of the output). A mask passes through.
    """

    supports_masking = True

    def __init__(self, activation: ActivationLike | dict[str, Any], *, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name if name is not None else "Activation")
        self.activation = activation_from(activation, self.name)

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank < 1:
            raise InvalidInputError(f"{self.name}: expected an input of rank >= 1, got {shape}")
        check_activation_axis(self.activation, shape.rank, self.name)

    def _check_rebuild(self, shape: Shape) -> None:
        """Stateless: any shape is accepted again."""

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return shp

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        arr = self._as_input(x)
        y = self.activation(arr)
        ctx.save(self, y)
        return y

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        y = ctx.peek(self)
        g = self._as_grad(grad, y.shape)
        ctx.load(self)  # consumed only once the gradient fits
        return self.activation.vjp(y, g)

    def get_config(self) -> dict[str, Any]:
        return {"activation": activation_config(self.activation), "dtype": self.dtype.name,
                "name": self.name}
