"""``TimeDistributed`` (one layer applied to every step) and ``Lambda`` (a function of
:mod:`rnnkit.ops`, differentiated by the gradient tape) — Keras 3's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, NotBuiltError
from rnnkit._layer import Layer, WeightEntry
from rnnkit._mask import Mask
from rnnkit._shape import Shape
from rnnkit._tape import GradientTape, TapeError, recording_alone
from rnnkit._weight_decl import WeightDecl
from rnnkit.layers._registry import layer_from_config, layer_to_config


class TimeDistributed(Layer):
    """``TimeDistributed(layer)``: ``layer`` applied to every step of a (B, T, ...) input, one
    step after another, as Keras 3 calls it: step ``t``'s output is ``layer`` on ``x[:, t]``
    (shape (B, ...)); the outputs are stacked on axis 1. So a layer whose training pass looks
    across the batch (BatchNormalization) sees each step's batch alone, as in Keras.

    Weights are the wrapped layer's, under its own names (``kernel``, ``bias``, ...; Keras'
    ``time_distributed/layer`` weights); the gradients of every step are summed into them.
    The wrapped layer takes one input and gives one output (a layer of several inputs or of
    several outputs raises InvalidParameterError). An input of rank < 3 raises
    InvalidInputError at build.

    Masks (Keras'): a (B, T) mask marks whole steps; it is passed on unchanged, and the wrapped
    layer computes every step (a masked step's output is the layer's output on it, as Keras').
    """

    supports_masking = True

    def __init__(self, layer: Any, *, name: str | None = None) -> None:
        if isinstance(layer, dict):   # from a model file
            layer = layer_from_config(layer)
        if not isinstance(layer, Layer):
            raise TypeError(f"TimeDistributed: layer must be an rnnkit Layer, got {type(layer).__name__}")
        if getattr(layer, "multi_input", False) or getattr(layer, "return_state", False):
            raise InvalidParameterError(f"TimeDistributed: {layer.name} takes several inputs or gives "
                                        f"several outputs; TimeDistributed wraps a layer of one input "
                                        f"and one output")
        super().__init__(seed=layer.seed, dtype=layer.dtype, name=name or "TimeDistributed")
        self.layer = layer

    # -- build and shapes ----------------------------------------------------------------------
    def _child(self, shape: Shape | tuple[Any, ...]) -> Shape:
        if len(shape) < 3:
            raise InvalidInputError(f"{self.name}: expected an input of rank >= 3 (batch, steps, ...), got "
                                    f"shape {tuple(shape)} (rank {len(shape)})")
        return Shape((shape[0], *tuple(shape)[2:]))

    def build(self, shape: Shape | tuple[int | None, ...]) -> None:
        shp = Shape.of(shape)
        self.layer.build(self._child(shp))
        if self._input_shape is None:
            self._input_shape = shp

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        out = self.layer.compute_output_shape(self._child(shp))
        if not isinstance(out, Shape):
            raise InvalidParameterError(f"{self.name}: {self.layer.name} gives several outputs; "
                                        f"TimeDistributed wraps a layer of one output")
        return Shape((shp[0], shp[1], *out[1:]))

    # -- weights (the wrapped layer's, under its names) -----------------------------------------
    @property
    def weight_names(self) -> list[str]:
        return list(self.layer.weight_names)

    @property
    def trainable_names(self) -> list[str]:
        return list(self.layer.trainable_names)

    def weights(self) -> list[WeightEntry]:
        return list(self.layer.weights())

    def _copy_weights(self) -> list[np.ndarray]:
        return [np.array(e.value) for e in self.weights()]

    def weight(self, name: str) -> np.ndarray:
        if not self.built:
            raise NotBuiltError(self.name, "weight")
        return self.layer.weight(name)

    def declaration(self, name: str) -> WeightDecl:
        if not self.built:
            raise NotBuiltError(self.name, "declaration")
        return self.layer.declaration(name)

    def from_keras_weight(self, name: str, value: Any) -> Any:
        return self.layer.from_keras_weight(name, value)

    def set_weight(self, name: str, value: Any, *, check_finite: bool = True) -> None:
        self.layer.set_weight(name, value, check_finite=check_finite)

    def param_count(self) -> int:
        return self.layer.param_count()

    # -- passes ---------------------------------------------------------------------------------
    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        self._require_built()
        arr = self._as_input(x)
        self._child(arr.shape)
        mask = ctx.mask
        ctx.set_mask(None)   # the wrapped layer sees each step alone
        try:
            steps = []
            for t in range(arr.shape[1]):
                y = self.layer.forward(np.ascontiguousarray(arr[:, t]), ctx)
                if isinstance(y, list):
                    raise InvalidInputError(f"{self.name}: {self.layer.name} gave several outputs; "
                                            f"TimeDistributed wraps a layer of one output")
                steps.append(y)
        finally:
            ctx.set_mask(mask)
        out = np.stack(steps, axis=1)
        ctx.save(self, (arr.shape, out.shape))
        return out

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        in_shape, out_shape = ctx.peek(self)
        g = self._as_grad(grad, out_shape)
        ctx.load(self)  # consumed only once the gradient fits
        dx = np.empty(in_shape, self.dtype)
        for t in range(in_shape[1] - 1, -1, -1):   # the steps' caches, last in first out
            d = self.layer.backward(np.ascontiguousarray(g[:, t]), ctx)
            if d is not None:
                dx[:, t] = d
        for n in self.layer.trainable_names:   # the steps' gradients, under this layer's names
            ctx.move_grad(self.layer, n, self, n)
        return dx

    def get_config(self) -> dict[str, Any]:
        return {"layer": layer_to_config(self.layer), "name": self.name}


class LambdaNotSavedError(InvalidParameterError):
    """A ``Lambda`` layer's configuration was asked for (a model file, ``get_config``): its
    function is Python code, which rnnkit never writes to a file nor runs from one."""


class Lambda(Layer):
    """``Lambda(function, output_shape=None, mask=None, arguments=None)`` (Keras'): ``y =
    function(x, **arguments)``, where ``function`` computes with :mod:`rnnkit.ops` (and
    Python arithmetic on their results).

    Gradients: a training pass records ``function``'s ops on a :class:`~rnnkit.GradientTape` of
    its own, kept in the Ctx; backward is that tape's gradient. A function whose output the tape
    did not record (computed with NumPy outside :mod:`rnnkit.ops`) raises InvalidInputError at
    backward, never a silent zero gradient. ``x`` may be a list of arrays (a function of several
    inputs); backward then returns one gradient per input.

    ``output_shape``: the output's shape without the batch axis, or None (found by calling
    ``function`` on zeros of the input's shape, its free axes of size 1 then 2: an axis that
    follows them is free).

    Masks (Keras'): with ``mask=None`` a masked input is refused (Keras drops it); a callable
    ``mask(x, input_mask)`` (the input's mask as a boolean (B, T) array, or None) gives the
    output's mask (a boolean (B, T) array or None).

    Files: a Lambda has no configuration (:class:`LambdaNotSavedError`, naming the layer): its
    function is code, and rnnkit writes no code to a file and runs none from one; a Keras file
    holding a Lambda is refused when read.
    """

    def __init__(self, function: Callable[..., Any], output_shape: Any = None, mask: Any = None,
                 arguments: dict[str, Any] | None = None, *, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(dtype=dtype, name=name)
        if not callable(function):
            raise InvalidParameterError(f"{self.name}: function must be callable, got {function!r}")
        if mask is not None and not callable(mask):
            raise InvalidParameterError(f"{self.name}: mask must be None or a callable (x, mask) -> mask, "
                                        f"got {type(mask).__name__}")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParameterError(f"{self.name}: arguments must be a dict of keyword arguments, "
                                        f"got {type(arguments).__name__}")
        if output_shape is not None and (not isinstance(output_shape, (list, tuple)) or any(
                d is not None and (not isinstance(d, int) or isinstance(d, bool) or d < 1)
                for d in output_shape)):
            raise InvalidParameterError(f"{self.name}: output_shape must be a tuple of positive ints (or "
                                        f"None) without the batch axis, got {output_shape!r}")
        self.function = function
        self.output_shape = None if output_shape is None else tuple(output_shape)
        self.mask = mask
        self.arguments = dict(arguments or {})
        self.supports_masking = mask is not None

    def _check_rebuild(self, shape: Shape) -> None:
        """Weightless: any shape is accepted again."""

    def build(self, shape: Any) -> None:
        if isinstance(shape, list) and shape and isinstance(shape[0], (Shape, list, tuple)):
            if self._input_shape is None:
                self._input_shape = Shape.of(shape[0])
            return
        super().build(shape)

    def compute_mask(self, x: Any, mask: Any) -> Mask | None:
        if mask is None and self.mask is None:
            return None
        if self.mask is None:
            return super().compute_mask(x, mask)   # refused
        m = Mask.of(mask) if mask is not None else None
        valid = None if m is None else m.valid(int(np.shape(x)[1]))
        out = self.mask(x, valid)
        return None if out is None else Mask.of(out)

    def _call(self, x: Any) -> Any:
        return self.function(x, **self.arguments)

    def compute_output_shape(self, shape: Any) -> Any:
        several = isinstance(shape, list) and shape and isinstance(shape[0], (Shape, list, tuple))
        shapes = [Shape.of(s) for s in shape] if several else [Shape.of(shape)]
        if self.output_shape is not None:
            return Shape((shapes[0][0], *self.output_shape))
        outs = []
        for size in (1, 2):
            zeros = [np.zeros(tuple(size if d is None else int(d) for d in s.dims), self.dtype)
                     for s in shapes]
            with recording_alone(GradientTape()):
                outs.append(np.shape(self._call(zeros if several else zeros[0])))
        a, b = outs
        if len(a) != len(b):
            raise InvalidInputError(f"{self.name}: the function's output rank depends on the input's free "
                                    f"axes ({a} vs {b}); give output_shape")
        return Shape((shapes[0][0], *(None if p != q else p for p, q in zip(a[1:], b[1:], strict=True))))

    def forward(self, x: Any, ctx: Ctx) -> Any:
        several = isinstance(x, (list, tuple))
        xs = [self._as_input(a) for a in x] if several else [self._as_input(x)]
        if not ctx.training_mode:
            with recording_alone(GradientTape()):
                return np.asarray(self._call(xs if several else xs[0]), dtype=self.dtype)
        tape = GradientTape()
        with recording_alone(tape):
            for a in xs:
                tape.watch(a)
            y = self._call(xs if several else xs[0])
        if not isinstance(y, np.ndarray):
            y = np.asarray(y)
        ctx.save(self, (tape, xs, y, several))
        return y.astype(self.dtype, copy=False)

    def backward(self, grad: Any, ctx: Ctx) -> Any:
        tape, xs, y, several = ctx.peek(self)
        g = self._as_grad(grad, y.shape)
        ctx.load(self)  # consumed only once the gradient fits
        if not tape.tracks(y):
            raise InvalidInputError(f"{self.name}: the function's output was not computed with rnnkit.ops "
                                    f"from the input, so the tape has no gradient for it; write it with "
                                    f"rnnkit.ops (rk.ops.multiply, ...)")
        try:
            got = tape.gradient(y, xs, output_gradients=g, unconnected_gradients="zero")
        except TapeError as e:   # pragma: no cover - one gradient per recorded pass
            raise InvalidInputError(f"{self.name}: {e}") from None
        out = [np.asarray(d, dtype=self.dtype) for d in got]
        return out if several else out[0]

    def get_config(self) -> dict[str, Any]:
        raise LambdaNotSavedError(f"{self.name} (Lambda): its function is Python code, which rnnkit never "
                                  f"writes to a file nor runs from one; rebuild the layer in code (Keras "
                                  f"itself loads a Lambda only with safe_mode=False)")

    def __repr__(self) -> str:
        return f"Lambda({getattr(self.function, '__name__', self.function)!r}, name={self.name!r})"
