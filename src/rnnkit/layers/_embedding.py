"""``Embedding``: index -> row of a trainable table (Keras' ``Embedding``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, WeightShapeError
from rnnkit._initializers import uniform
from rnnkit._layer import Layer, as_weight_array, check_positive_int, keras_weight_list
from rnnkit._mask import Mask
from rnnkit._penalties import attach, config_of
from rnnkit._shape import Shape

#: above this many selections of one row, :func:`scatter_rows` hands the sums to ``np.add.at``
MAX_ROUNDS = 32


def scatter_rows(idx: np.ndarray, rows: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
    """The (n, D) table whose row ``i`` is the sum of the ``rows`` (M, D) whose ``idx`` (M,) is
    ``i``, added from zero in increasing position order (the sums ``np.add.at`` makes, bit for
    bit), zeros elsewhere (:func:`scatter_rows_into` a zeroed table)."""
    table = np.zeros((n, rows.shape[1]), dtype)
    scatter_rows_into(table, idx, rows)
    return table


def scatter_rows_into(table: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> None:
    """Add each of the ``rows`` (M, D) into row ``idx`` (M,) of ``table`` (n, D), in increasing
    position order per row (the sums ``np.add.at`` makes, bit for bit). In rounds: round ``k``
    adds, with one fancy-indexed ``+=``, the ``k``-th selection of every row selected more than
    ``k`` times, so the work is a few numpy calls per round instead of one step per position; a
    row selected more than :data:`MAX_ROUNDS` times sends the whole sum to ``np.add.at``."""
    if idx.size == 0:
        return
    order = np.argsort(idx, kind="stable")
    sidx = idx[order]
    starts = np.flatnonzero(np.r_[True, sidx[1:] != sidx[:-1]])
    counts = np.diff(np.r_[starts, sidx.size])
    if counts.max() > MAX_ROUNDS:
        np.add.at(table, idx, rows)
        return
    rank = np.arange(sidx.size) - np.repeat(starts, counts)
    for k in range(int(counts.max())):
        sel = order[rank == k]
        table[idx[sel]] += rows[sel]


class Embedding(Layer):
    """Replace each index by its row of a ``(input_dim, output_dim)`` table.

    ``input_dim`` is the vocabulary size (the largest usable index is ``input_dim - 1``);
    ``output_dim`` is the vector width. The output appends ``output_dim`` as a new trailing
    axis: ``(N,) -> (N, D)``, ``(N, T) -> (N, T, D)``, ``(N, T, K) -> (N, T, K, D)``.

    Indices arrive as numbers (floats allowed). Each value is TRUNCATED TOWARD ZERO, then
    checked: ``2.0`` and ``2.9`` select row 2, ``-0.5`` selects row 0. A value whose truncation
    lies outside ``0..input_dim-1``, and any NaN or Inf, raises :class:`InvalidInputError` naming
    the offending value and its position.

    ``mask_zero=True`` (Keras): index 0 is padding. The output mask (:meth:`compute_mask`,
    which the model hands to the layers after it) is ``Mask(indices != 0)`` for a (B, T) input;
    row 0 of the table still exists and is looked up (so ``input_dim`` counts the pad index).

    Weight: ``embeddings`` (input_dim, output_dim), U(-0.05, 0.05) (Keras' default, not Glorot).
    ``param_count = input_dim * output_dim``.

    Backward scatter-adds the upstream gradient into the selected rows (:func:`scatter_rows_into`:
    ``np.add.at``'s sums, in position order): a row selected twice gets the sum, a row never
    selected gets exactly 0. The table gradient is
    dense. The input gradient is zeros (indices are not differentiable).
    """

    def __init__(self, input_dim: int, output_dim: int, *, mask_zero: bool = False,
                 seed: int | None = None, dtype: Any = "float32", name: str | None = None,
                 embeddings_regularizer: Any = None, activity_regularizer: Any = None,
                 embeddings_constraint: Any = None) -> None:
        super().__init__(seed=seed, dtype=dtype, name=name)
        self.input_dim = check_positive_int(input_dim, "input_dim", self.name)
        self.output_dim = check_positive_int(output_dim, "output_dim", self.name)
        if not isinstance(mask_zero, (bool, np.bool_)):
            raise InvalidParameterError(f"{self.name}: mask_zero must be a bool, got {mask_zero!r}")
        self.mask_zero = bool(mask_zero)
        attach(self, embeddings_regularizer=embeddings_regularizer,
               activity_regularizer=activity_regularizer, embeddings_constraint=embeddings_constraint)

    supports_masking = True
    checks_values = True  # its forward refuses a non-finite or non-integral index itself

    def compute_mask(self, x: Any, mask: Any) -> Mask | None:
        """The lookup acts per step, so an incoming mask (``lengths=`` given to the model)
        passes on; with ``mask_zero`` (a (B, T) index input) index 0 is masked too:
        ``Mask(indices != 0)``, and-ed with an incoming mask."""
        if not self.mask_zero:
            return mask  # type: ignore[no-any-return]
        idx = self.indices(x)
        if idx.ndim != 2:
            raise InvalidInputError(f"{self.name}: mask_zero needs a (batch, timesteps) index input, "
                                    f"got shape {idx.shape}")
        if mask is not None:
            mask.check(idx.shape[0], idx.shape[1], self.name)
            return Mask(mask.valid(idx.shape[1]) & (idx != 0))
        return Mask(idx != 0)

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank < 1:
            raise InvalidInputError(
                f"{self.name}: expected an index input of rank >= 1 (batch, ...), got {shape}"
            )

    def _check_rebuild(self, shape: Shape) -> None:
        """The table does not depend on the input shape: any index shape is accepted."""

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        self._add_weight("embeddings",
                         uniform(rng, (self.input_dim, self.output_dim), -0.05, 0.05, self.dtype))

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        return Shape((*shp, self.output_dim))

    def set_weights(self, table: Any) -> None:
        """Install the table, shape (input_dim, output_dim), given alone or, as Keras'
        ``layer.set_weights(weights)``, as ONE list ``[table]`` (told from a table written as
        nested lists by its item's two axes); an unbuilt layer is built."""
        listed = keras_weight_list(table, 2)
        if listed is not None:
            if len(listed) != 1:
                raise InvalidInputError(f"{self.name}.set_weights: expected one list of 1 array "
                                        f"(embeddings), got {len(listed)}")
            table = listed[0]
        t = as_weight_array(table, f"{self.name}.embeddings")
        if t.shape != (self.input_dim, self.output_dim):
            raise WeightShapeError("embeddings", (self.input_dim, self.output_dim), t.shape,
                                   f"layer {self.name}")
        if not self.built:
            self.build(Shape((None, None)))
        self.set_weight("embeddings", t)

    def indices(self, x: Any) -> np.ndarray:
        """The row indices ``x`` selects (int64, same shape), after truncation and checks."""
        arr = as_real_array(x, "indices", self.name)
        if arr.ndim < 1:
            raise InvalidInputError(f"{self.name}: expected an index array of rank >= 1, got a scalar")
        if arr.dtype.kind == "f":
            bad = ~np.isfinite(arr)
            if bad.any():
                pos = tuple(int(i) for i in np.argwhere(bad)[0])
                raise InvalidInputError(
                    f"{self.name}: index value {str(arr[pos])} at position {pos} is not finite; "
                    f"expected a number in [0, {self.input_dim}) (truncated toward zero)"
                )
            idx = np.trunc(arr)
        else:
            idx = arr
        out = (idx < 0) | (idx >= self.input_dim)
        if out.any():
            pos = tuple(int(i) for i in np.argwhere(out)[0])
            raise InvalidInputError(
                f"{self.name}: index value {str(arr[pos])} at position {pos} is out of range; "
                f"expected 0 <= trunc(value) < input_dim = {self.input_dim} "
                f"(truncated toward zero it is {int(idx[pos])})"
            )
        return idx.astype(np.int64)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        """``table[trunc(x)]``: (...) -> (..., output_dim)."""
        self._require_built()
        idx = self.indices(x)
        ctx.save(self, idx)
        return self._weights["embeddings"][idx]

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        """Scatter-add ``grad`` into ``embeddings``' gradient; returns zeros of the input shape."""
        self._require_built("backward")
        idx = ctx.peek(self)
        g = self._as_grad(grad, (*idx.shape, self.output_dim))
        ctx.load(self)  # consumed only once the gradient fits
        flat_idx, rows = idx.reshape(-1), g.reshape(-1, self.output_dim)
        # written straight into a zeroed table the Ctx makes: the rows not selected stay
        # untouched pages, and nothing is copied (a big vocabulary's table costs a copy otherwise)
        ctx.add_grad_from(self, "embeddings", (self.input_dim, self.output_dim), self.dtype,
                          lambda table: scatter_rows_into(table, flat_idx, rows))
        return np.zeros(idx.shape, self.dtype)

    def get_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"input_dim": self.input_dim, "output_dim": self.output_dim}
        if self.mask_zero:
            cfg["mask_zero"] = True
        cfg.update(super().get_config())
        cfg.update(config_of(self))
        return cfg
