"""What every model offers for its weights and its description: the weight list in
``named_weights`` order, copying weights in and out, weight and model files, the summary table,
the carried state of stateful layers. A mixin of :class:`rnnkit.models._base.Model`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rnnkit._consistency import WEIGHTS
from rnnkit._errors import WeightShapeError
from rnnkit._layer import Layer, as_weight_array, check_finite_weight
from rnnkit.models import _files
from rnnkit.models._summary import render_summary


class WeightList(list[tuple[Layer, str]]):
    """A list of ``(layer, weight name)`` pairs that calling returns (a plain list of them), so
    ``model.trainable_weights`` reads as Keras' property and as rnnkit's method."""

    def __call__(self) -> list[tuple[Layer, str]]:
        return list(self)


class WeightsAPI:
    """Weights, files and summary of a model (needs ``name``, ``built``, ``named_weights()``,
    ``_summary_rows()`` from the model)."""

    name: str

    @property
    def built(self) -> bool:
        raise NotImplementedError

    def named_weights(self) -> dict[str, tuple[Layer, str]]:
        raise NotImplementedError

    def _summary_rows(self) -> tuple[list[str], list[list[str]]]:
        raise NotImplementedError

    # -- weights -----------------------------------------------------------------------------
    def all_weights(self) -> list[tuple[Layer, str]]:
        """Every (layer, weight name) once, in :meth:`named_weights` order."""
        return list(self.named_weights().values())

    @property
    def trainable_weights(self) -> WeightList:
        """The (layer, weight name) pairs that training updates, in :meth:`named_weights` order:
        each layer's ``trainable_names`` (every weight, except a cell's ``Param`` declared
        ``trainable=False``). A list, read as Keras' property (``tape.gradient(loss,
        model.trainable_weights)``) or called (``model.trainable_weights()``, the same list)."""
        return WeightList((la, n) for la, n in self.named_weights().values() if n in la.trainable_names)

    def reset_states(self) -> None:
        """Clear the carried state of every stateful layer (Keras' ``reset_states``), those of
        nested models included: the next call of each starts from zeros."""
        for layer in getattr(self, "layers", []):
            if isinstance(layer, WeightsAPI):
                layer.reset_states()
            elif getattr(layer, "stateful", False):
                layer.reset_state()

    def get_weights(self) -> list[np.ndarray]:
        """Copies of every weight, in :meth:`named_weights` order: those of one whole optimizer
        step while ``fit`` trains the model in another thread (:mod:`rnnkit._consistency`)."""
        return WEIGHTS.read(self._copy_weights)

    def _copy_weights(self) -> list[np.ndarray]:
        return [np.array(layer.weight(n)) for layer, n in self.all_weights()]

    def set_weights(self, weights: list[Any]) -> None:
        """Install arrays in :meth:`named_weights` order (Keras' order of ``model.weights``: a
        Keras model's ``get_weights()`` of the same architecture fits position by position).
        Each array must have its weight's shape; the one exception is Keras' spelling of a
        recurrent layer's one-row bias, ``(G*H,)`` for the ``(1, G*H)`` kept here
        (:meth:`rnnkit.Layer.from_keras_weight`). A misfit is a WeightShapeError naming its
        position, the weight and its layer, the expected and the given shape; a value that is
        not finite in the layer's dtype (NaN or Inf, or a value the cast would make Inf such as
        1e300 for float32) an InvalidInputError naming the weight, as the file loaders refuse
        them. Everything is checked before anything changes, and a reader in another thread
        (``predict`` ...) sees the weights before this call or after it, never a mixture."""
        pairs = self.all_weights()
        if isinstance(weights, np.ndarray) or not isinstance(weights, (list, tuple)):
            raise WeightShapeError("weights", f"a list of {len(pairs)} arrays", type(weights).__name__,
                                   f"model {self.name}")
        if len(weights) != len(pairs):
            raise WeightShapeError("weights", f"{len(pairs)} arrays", f"{len(weights)} arrays",
                                   f"model {self.name}")
        keys = list(self.named_weights())
        arrs = [as_weight_array(layer.from_keras_weight(n, w), f"{self.name}.set_weights: weight {key}")
                for key, (layer, n), w in zip(keys, pairs, weights, strict=True)]
        for i, (key, (layer, n), a) in enumerate(zip(keys, pairs, arrs, strict=True)):
            if a.shape != layer.weight(n).shape:
                raise WeightShapeError(key, layer.weight(n).shape, a.shape,
                                       f"position {i} of model {self.name}'s weight list: weight "
                                       f"{n!r} of layer {layer.name} ({type(layer).__name__})")
            arrs[i] = check_finite_weight(a, f"{self.name}.set_weights: weight {key}", layer.dtype)
        with WEIGHTS:   # one write: a reader in another thread sees all of it or none
            for (layer, n), a in zip(pairs, arrs, strict=True):
                layer.set_weight(n, a)

    def param_count(self) -> int:
        """Number of scalar weights; a shared layer counts once."""
        return int(sum(layer.weight(n).size for layer, n in self.all_weights()))

    def save_weights(self, path: str) -> None:
        """Write every weight under its :meth:`named_weights` name (``rnnkit.io.save_weights``):
        those of one whole optimizer step while ``fit`` trains the model in another thread (the
        step waits for the write)."""
        WEIGHTS.read_once(_files.save_weights, self, path)

    def load_weights(self, path: str) -> None:
        """Read weights written by :meth:`save_weights` (strict: ``rnnkit.io.load_weights``)."""
        _files.load_weights(self, path)

    def save(self, path: str) -> None:
        """Write architecture and weights (``rnnkit.io.save_model``; ``rnnkit.load_model`` reads);
        a ``.keras`` / ``.onnx`` name writes that format or raises, never another. While
        ``fit`` trains the model in another thread, the file holds the weights of one whole
        optimizer step (the step waits for the write)."""
        WEIGHTS.read_once(_files.save_model, self, path)

    # -- summary -----------------------------------------------------------------------------
    def summary(self, print_fn: Callable[[str], None] | None = print) -> str:
        """Print (with ``print_fn``; ``None`` prints nothing) and return the layer table: the
        layer, its output shape with the batch axis as ``None`` (a free time axis too), and its
        parameter count, then the totals. A model not built yet prints as Keras 3 prints one:
        ``?`` for every output shape, ``0 (unbuilt)`` for each layer not built, and totals of
        the layers built. See :func:`rnnkit.models._summary.render_summary`."""
        header, rows = self._summary_rows()
        if self.built:
            total = self.param_count()
            trainable = int(sum(layer.weight(n).size for layer, n in self.trainable_weights()))
        else:   # Keras: the layers built so far count, the others print "0 (unbuilt)"
            built = [la for la in getattr(self, "layers", []) if isinstance(la, Layer) and la.built]
            total = int(sum(la.param_count() for la in built))
            trainable = int(sum(la.weight(n).size for la in built for n in la.trainable_names))
        text = render_summary(self.name, header, rows, total, trainable)
        if print_fn is not None:
            print_fn(text)
        return text

