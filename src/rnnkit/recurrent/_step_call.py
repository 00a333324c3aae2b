"""A built-in cell called one step at a time, as Keras 3's ``LSTMCell`` / ``GRUCell`` /
``SimpleRNNCell``: ``output, new_states = cell(x_t, states, training=False)``.

- ``x_t`` (B, F): one timestep. ``states``: the list of the state parts in
  :attr:`~rnnkit.Cell.state_names` order (LSTM ``[h, c]``, GRU and SimpleRNN ``[h]``), each
  (B, width); a GRU or SimpleRNN cell also takes ``h`` itself, and then returns ``h`` itself
  as its new state (Keras' rule). Returns ``(output, new_states)``: ``output`` is ``h``, and
  ``new_states`` the list of the new parts (its ``h`` an array of its own, equal to ``output``).
- Weights: the layer that holds the cell's weights (:attr:`~rnnkit.Cell.holder`) holds them. A
  cell called on its own builds one for its input width on its first call (a
  :class:`~rnnkit.RecurrentLayer` over the cell, with the cell's ``seed``, ``dtype``, dropout
  rates, regularizers and constraints); a cell inside a layer (``rk.LSTM(8).cell``) steps with
  that layer's weights, the same arrays (``cell.weight("kernel") is layer.weight("kernel")``).
  The weights keep rnnkit's layout (the bias (1, G*H), or (2, 3H) for a GRU with
  ``reset_after``); :meth:`StepCalls.get_weights` / :meth:`StepCalls.set_weights` read and
  write Keras' layout (the bias (G*H,), or (2, 3H)), so ``cell.set_weights(keras_cell.get_weights())``
  copies a Keras cell.
- The arithmetic is the holding layer's pass over ONE timestep (:meth:`RecurrentLayer._pass`):
  the input projection, then the cell's step (compiled, or the cell's reference ``step``), from
  the given state; its backward is the layer's backward over that step (the cell's step
  backward, then the walker's reductions for the kernel, recurrent kernel and bias).
- While a :class:`~rnnkit.GradientTape` records, a call is ONE entry on it whose backward is
  that step backward: a decoder or sampling loop gets its gradients, the weights' summed over
  the calls. Outside a tape a call is an inference step (with ``training=True``, a training
  pass whose dropout is on).
- Dropout (``training=True``): each call draws its own masks, one per call (Keras' cells draw
  one and reuse it until ``reset_dropout_mask()``).

A wrong number of states, a state of the wrong shape, or an input that is not (B, F) of the
built width raises :class:`~rnnkit.InvalidInputError` naming what was expected and given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, NotBuiltError, WeightShapeError
from rnnkit._layer import WeightEntry, as_weight_array
from rnnkit._shape import Shape
from rnnkit._tape import ACTIVE, call_layer
from rnnkit.recurrent._base import RecurrentLayer
from rnnkit.recurrent._walker import walk

if TYPE_CHECKING:
    from rnnkit.recurrent._cell import Param


class StepCalls:
    """Mixin of the built-in cells (:class:`~rnnkit.recurrent._gated.GatedCell`): Keras 3's
    cell call and the weight methods of the layer that holds the cell's weights."""

    # provided by the cell
    name: ClassVar[str]
    state_names: ClassVar[tuple[str, ...]]
    holder: Any
    seed: int | None
    dtype: np.dtype

    if TYPE_CHECKING:
        def state_sizes(self) -> tuple[int, ...]: ...

        def params(self, input_dim: int) -> list[Param]: ...

    # -- the layer that holds the weights ----------------------------------------------------
    def _holder(self) -> RecurrentLayer:
        """The layer holding the weights; a new (unbuilt) one over this cell when there is none."""
        if self.holder is None:
            RecurrentLayer(self, seed=self.seed, dtype=self.dtype)  # type: ignore[arg-type]
        holder: RecurrentLayer = self.holder
        return holder

    def _built_holder(self, action: str) -> RecurrentLayer:
        if self.holder is None or not self.holder.built:
            raise NotBuiltError(self.name, action, f"{self.name} cell: {action} needs its weights; call "
                                f"the cell on a step's input, or build(input_shape), first")
        holder: RecurrentLayer = self.holder
        return holder

    @property
    def built(self) -> bool:
        """Whether the cell's weights exist (its own, or the layer's that holds them)."""
        return self.holder is not None and bool(self.holder.built)

    def build(self, input_shape: Any) -> None:
        """Create the weights for inputs of ``input_shape`` ((batch, features); only the last
        axis counts), as Keras' ``build``; a built cell keeps its weights (the width must stay)."""
        shape = Shape.of(input_shape)
        if shape.rank < 1 or shape[-1] is None:
            raise InvalidInputError(f"{self.name} cell: build expected a shape whose last axis is the "
                                    f"feature width, got {shape}")
        self._holder().build(Shape((None, None, shape[-1])))

    def weight(self, name: str) -> np.ndarray:
        """The live weight ``name`` of the holding layer (read-only, the layer's own array)."""
        return self._built_holder("weight").weight(name)

    def weights(self) -> list[WeightEntry]:
        """Every weight, as (name, the holding layer's live array), in rnnkit's layout."""
        return self._built_holder("weights").weights()

    def trainable_weights(self) -> list[tuple[Any, str]]:
        """The ``(layer, weight name)`` pairs that training updates (``tape.gradient``'s and
        ``optimizer.apply_gradients``' spelling, as ``model.trainable_weights()``)."""
        holder = self._built_holder("trainable_weights")
        return [(holder, n) for n in holder.trainable_names]

    def _keras_shape(self, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A weight's shape in Keras' layout: a one-row bias is a vector."""
        return (shape[1],) if name == "bias" and shape[0] == 1 else shape

    def get_weights(self) -> list[np.ndarray]:
        """Copies of the weights in Keras' layout and order: ``kernel`` (F, G*H),
        ``recurrent_kernel`` (H, G*H), ``bias`` (G*H,) (a GRU with ``reset_after``: (2, 3H))."""
        holder = self._built_holder("get_weights")
        return [a.reshape(self._keras_shape(n, a.shape))
                for n, a in zip(holder.weight_names, holder.get_weights(), strict=True)]

    def set_weights(self, *weights: Any) -> None:
        """Install every weight from Keras' layout and order (see :meth:`get_weights`): a list
        (``cell.set_weights(keras_cell.get_weights())``) or the arrays one by one. An unbuilt
        cell is built from the kernel's rows. Every shape is checked (WeightShapeError names the
        first misfit, in Keras' shape) before anything changes."""
        arrays: Sequence[Any] = weights[0] if len(weights) == 1 and isinstance(weights[0], (list, tuple)) \
            else weights
        if not arrays:
            raise InvalidInputError(f"{self.name} cell.set_weights: expected the arrays kernel, "
                                    f"recurrent_kernel[, bias], got none")
        kernel = as_weight_array(arrays[0], f"{self.name}.kernel")
        if kernel.ndim != 2:
            raise WeightShapeError("kernel", ("input_dim", self.state_sizes()[0]), kernel.shape,
                                   f"{self.name} cell")
        params = self.params(int(kernel.shape[0]))
        if len(arrays) != len(params):
            raise InvalidInputError(
                f"{self.name} cell.set_weights: expected {len(params)} arrays "
                f"({', '.join(p.name for p in params)}), got {len(arrays)}")
        stored = []
        for p, a in zip(params, arrays, strict=True):
            arr = as_weight_array(a, f"{self.name}.{p.name}")
            want = self._keras_shape(p.name, p.shape)
            if arr.shape != want:
                raise WeightShapeError(p.name, want, arr.shape, f"{self.name} cell, Keras' layout")
            stored.append(arr.reshape(p.shape))
        self._holder().set_weights(*stored)

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        """The zero state for ``batch_size`` rows, a list of parts (Keras')."""
        return list(self._holder().zero_state(batch_size))

    # -- the step ----------------------------------------------------------------------------
    def __call__(self, inputs: Any, states: Any, training: bool = False) -> tuple[Any, Any]:
        """One step: ``(output, new_states)`` (see the module docstring)."""
        if not isinstance(training, (bool, np.bool_)):
            raise InvalidParameterError(f"{self.name} cell: training must be a bool, got {training!r}")
        names = self.state_names
        nested = isinstance(states, (list, tuple))
        parts = list(states) if nested else [states]
        if len(parts) != len(names) or (not nested and len(names) > 1):
            got = f"a list of {len(parts)}" if nested else f"one {type(states).__name__}"
            raise InvalidInputError(
                f"{self.name} cell: expected {len(names)} state part(s), a list [{', '.join(names)}], "
                f"got {got}")
        shape = np.shape(inputs)
        if len(shape) != 2:
            raise InvalidInputError(f"{self.name} cell: expected one timestep (batch, features), got "
                                    f"shape {shape}")
        if not self.built:
            self.build(shape)
        holder = self._built_holder("call")
        x = holder._finite(inputs)
        holder._finite(parts)
        if ACTIVE.tapes and not ACTIVE.paused:
            out = call_layer(holder, x, parts, None, bool(training),
                             passes=(self._step_forward, self._step_backward))
        else:
            out = WEIGHTS.read(self._step_inference, holder, x, parts, bool(training))
        return out[0], (list(out[1:]) if nested else out[1])

    def _as_step(self, holder: RecurrentLayer, x: Any) -> np.ndarray:
        arr = holder._as_input(x)
        if arr.ndim != 2 or arr.shape[1] != holder.input_dim:
            raise InvalidInputError(f"{self.name} cell: expected one timestep (batch, {holder.input_dim}), "
                                    f"got shape {arr.shape}")
        return np.ascontiguousarray(arr)[:, None, :]   # (the compiled walk reads contiguous steps)

    def _step_inference(self, holder: RecurrentLayer, x: Any, parts: list[Any], training: bool) -> list[Any]:
        if training:   # dropout on: the layer's training pass over the step
            return self._step_forward([x, *parts], Ctx.training())
        if type(holder)._pass is not RecurrentLayer._pass:   # (a layer with a pass of its own: int8)
            return self._step_forward([x, *parts], Ctx.inference())
        arr = self._as_step(holder, x)
        B, dt = arr.shape[0], holder.dtype
        if all(type(p) is np.ndarray and p.dtype == dt and p.shape == (B, n)   # (the quick test first)
               for p, n in zip(parts, self.state_sizes(), strict=True)):
            init = tuple(parts)
        else:
            init = holder.unpack_state(tuple(parts), B)
        _, final, _ = walk(holder.cell, holder._weights, swap_step(arr), init, False, False)
        return [np.array(final[0]), *(np.array(f) for f in final)]

    def _step_forward(self, inputs: list[Any], ctx: Ctx) -> list[Any]:
        """The holding layer's pass over one step from the given state: [output, *new parts]."""
        holder: RecurrentLayer = self.holder
        x, *parts = inputs
        out, final = holder._pass(self._as_step(holder, x), tuple(parts), ctx, False, "cell",
                                  check_steps=False)
        return [out, *final]

    def _step_backward(self, grads: list[Any], ctx: Ctx) -> list[Any]:
        """That pass's backward: [dL/dx (B, F), *dL/d(state parts)]; weights' into ``ctx``."""
        holder: RecurrentLayer = self.holder
        dx, *d_init = holder._back(ctx.peek(holder), grads[0], grads[1:], ctx)
        return [None if dx is None else dx[:, 0, :], *d_init]


def swap_step(arr: np.ndarray) -> np.ndarray:
    """(B, 1, F) -> the time-major (1, B, F) of one step (the same memory)."""
    return arr.reshape(1, arr.shape[0], arr.shape[2])
