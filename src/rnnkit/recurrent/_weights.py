"""Installing a recurrent layer's whole set of weights at once (:class:`RecurrentWeights`, mixed
into :class:`~rnnkit.RecurrentLayer`): positionally or by name, every shape and value checked
before anything changes, an unbuilt layer built from the arrays themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rnnkit._consistency import WEIGHTS
from rnnkit._errors import InvalidInputError, WeightShapeError
from rnnkit._layer import as_weight_array, check_finite_weight, keras_weight_list
from rnnkit._shape import Shape
from rnnkit.constraints import Constraint
from rnnkit.recurrent._cell import Cell
from rnnkit.regularizers import Regularizer


def keras_bias(name: str, value: Any, expected: tuple[int, ...]) -> Any:
    """Keras' spelling of a one-row recurrent bias: ``value`` of shape ``(n,)`` for the weight
    ``"bias"`` kept as ``(1, n)`` is that row; any other ``value`` is returned as given (the
    shape checks that follow refuse a misfit). Nothing else is ever reshaped."""
    if name != "bias" or len(expected) != 2 or expected[0] != 1:
        return value
    arr = as_weight_array(value, "bias")
    return arr.reshape(expected) if arr.shape == expected[1:] else arr


class RecurrentWeights:
    """Mixin of :class:`~rnnkit.RecurrentLayer`: :meth:`set_weights` over the cell's parameters."""

    # provided by RecurrentLayer / Layer
    cell: Cell
    name: str
    dtype: np.dtype
    _weights: dict[str, np.ndarray]
    _trainable: list[str]
    _input_shape: Shape | None

    if TYPE_CHECKING:   # (Layer's and RecurrentLayer's, which come after this mixin)
        @property
        def built(self) -> bool: ...

        @property
        def input_dim(self) -> int: ...

        def _check_build_shape(self, shape: Shape) -> None: ...

        def _add_weight(self, name: str, value: np.ndarray, *, regularizer: Regularizer | None = None,
                        constraint: Constraint | None = None) -> None: ...

        def set_weight(self, name: str, value: Any, *, check_finite: bool = True) -> None: ...

    def from_keras_weight(self, name: str, value: Any) -> Any:
        """Keras' ``(G*H,)`` bias as the ``(1, G*H)`` kept here (:func:`keras_bias`); anything
        else as given."""
        return keras_bias(name, value, tuple(self._weights[name].shape)) if name in self._weights \
            else value

    def _weight_shapes(self, input_dim: int) -> dict[str, tuple[int, ...]]:
        return {p.name: p.shape for p in self.cell.params(input_dim)}

    def set_weights(self, *arrays: Any, **named: Any) -> None:
        """Install every weight at once, positionally in :meth:`weights` order (for the built-in
        cells ``kernel, recurrent_kernel[, bias][, projection_kernel]``) or by name, each in its
        shape here; or, as Keras' ``layer.set_weights(weights)``, ONE list (or tuple) of those
        arrays (told from a kernel written as nested lists by its first item's axes): a Keras
        layer's ``get_weights()``, whose one-row bias ``(G*H,)`` is taken for the ``(1, G*H)``
        kept here (the only array taken in another shape, and only in the list). An unbuilt
        layer is built from the first array's rows. Every shape and every value is checked
        before anything changes (WeightShapeError names the first misfit; NaN or Inf, or a value
        beyond the layer's dtype, is an InvalidInputError naming the weight)."""
        listed = None
        if len(arrays) == 1 and not named:   # Keras' one list, or the first weight alone
            listed = keras_weight_list(arrays[0], len(self.cell.params(1)[0].shape))
            arrays = arrays if listed is None else tuple(listed)
        if not self.built:
            first = as_weight_array(arrays[0] if arrays else next(iter(named.values()), None),
                                    f"{self.name}.set_weights")
            if first.ndim < 1 or first.shape[0] < 1:
                raise WeightShapeError("kernel", ("input_dim", "..."), first.shape, f"layer {self.name}")
            F = int(first.shape[0])
        else:
            F = self.input_dim
        expected = self._weight_shapes(F)
        names = list(expected)
        if len(arrays) > len(names):
            raise InvalidInputError(
                f"{self.name}.set_weights: expected {len(names)} arrays ({', '.join(names)}), "
                f"got {len(arrays)}")
        given = dict(zip(names, arrays, strict=False))
        for k, v in named.items():
            if k not in expected or k in given:
                raise InvalidInputError(
                    f"{self.name}.set_weights: unexpected or repeated weight {k!r}; weights: {names}")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise InvalidInputError(
                f"{self.name}.set_weights: expected {len(names)} arrays ({', '.join(names)}), "
                f"missing {missing}")
        if listed is not None:   # Keras' shapes in Keras' spelling; the separate arrays exactly
            given = {n: keras_bias(n, v, expected[n]) for n, v in given.items()}
        arrs = {n: as_weight_array(v, f"{self.name}.{n}") for n, v in given.items()}
        for n in names:  # check all before changing anything
            if arrs[n].shape != expected[n]:
                raise WeightShapeError(n, expected[n], arrs[n].shape, f"layer {self.name}")
            if arrs[n].dtype.kind not in "biuf":
                raise InvalidInputError(
                    f"{self.name}.{n}: weights must be real numbers, got {arrs[n].dtype}")
            arrs[n] = check_finite_weight(arrs[n], f"{self.name}.{n}", self.dtype)
        if not self.built:   # built from these arrays: nothing is drawn only to be replaced
            shape = Shape((None, None, F))
            self._check_build_shape(shape)
            self._weights = {}
            for n in names:
                self._add_weight(n, arrs[n])
            self._trainable = [p.name for p in self.cell.params(F) if p.trainable]
            self._input_shape = shape
            return
        with WEIGHTS:   # one write: a reader in another thread sees all of it or none
            for n in names:
                self.set_weight(n, arrs[n])
