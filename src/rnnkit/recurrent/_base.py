"""``RecurrentLayer``: a recurrent layer = the walker over one :class:`~rnnkit.Cell`.

The layer holds the cell (configuration) and the weights the cell declares; a pass runs the
walker (:mod:`._walker`) and keeps its caches in the ``Ctx``. Outputs are in PROCESSING order
(slot 0 of a ``go_backwards`` sequence came from the LAST input step); only the input gradient
is mapped back to input order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._activations import ActivationFn
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, WeightShapeError
from rnnkit._layer import Layer, check_positive_int
from rnnkit._shape import Shape
from rnnkit.recurrent._cell import Arrays, Cell
from rnnkit.recurrent._walker import walk, walk_back


class RecurrentLayer(Layer):
    """``RecurrentLayer(cell, *, return_sequences=False, go_backwards=False, seed=None,
    dtype="float32", input_dim=None, name=None)``: any cell walked over time.

    Input (B, T, F); output (B, out) = the last step's output (state part 0), or (B, T, out)
    with ``return_sequences`` (slot k holds the output of processing step k). Weights: the
    cell's :meth:`~rnnkit.Cell.params`, drawn from ``seed`` in their order.
    """

    def __init__(self, cell: Cell | dict[str, Any], *, return_sequences: bool = False,
                 go_backwards: bool = False,
                 seed: int | None = None, dtype: Any = "float32", input_dim: int | None = None,
                 name: str | None = None) -> None:
        if isinstance(cell, dict):  # from a model file: {"class_name": ..., "config": ...}
            from rnnkit.recurrent._registry import cell_from_config

            cell = cell_from_config(cell)
        if not isinstance(cell, Cell):
            raise TypeError(f"RecurrentLayer: cell must be an rnnkit.Cell, got {type(cell).__name__}")
        super().__init__(seed=seed, dtype=dtype, name=name or cell.name)
        cell.check(self.name)
        self.cell = cell
        self.return_sequences = bool(return_sequences)
        self.go_backwards = bool(go_backwards)
        if input_dim is not None:
            self.build(Shape((None, None, check_positive_int(input_dim, "input_dim", self.name))))

    @property
    def units(self) -> int:
        return self.cell.units

    @property
    def activation(self) -> ActivationFn:
        return self.cell.activation

    @property
    def output_size(self) -> int:
        return self.cell.output_size

    # -- chainable builders ------------------------------------------------------------------
    def with_return_sequences(self, flag: bool = True) -> RecurrentLayer:
        self.return_sequences = bool(flag)
        return self

    def with_go_backwards(self, flag: bool = True) -> RecurrentLayer:
        self.go_backwards = bool(flag)
        return self

    def with_random_state(self, seed: int) -> RecurrentLayer:
        super().with_random_state(seed)
        return self

    # -- build -------------------------------------------------------------------------------
    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank != 3:
            raise InvalidInputError(
                f"{self.name}: expected a 3D input shape (batch, timesteps, features), "
                f"got {shape} (rank {shape.rank})"
            )
        if shape[2] is None or shape[2] < 1:
            raise InvalidInputError(
                f"{self.name}: the features axis must be a known width >= 1, got {shape}"
            )

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        params = self.cell.params(int(shape[2]))  # type: ignore[arg-type]
        self._trainable = [p.name for p in params if p.trainable]
        for p in params:
            value = np.asarray(p.init(rng, p.shape, self.dtype))
            if value.shape != p.shape:
                raise InvalidParameterError(
                    f"{type(self.cell).__name__}: the initialiser of {p.name!r} returned shape "
                    f"{value.shape}, expected {p.shape}")
            self._add_weight(p.name, value)

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        if self.return_sequences:
            return Shape((shp[0], shp[1], self.output_size))
        return Shape((shp[0], self.output_size))

    @property
    def input_dim(self) -> int:
        return int(self.input_shape[2])  # type: ignore[arg-type]

    @property
    def trainable_names(self) -> list[str]:
        """The weights that receive gradients (the cell's ``Param.trainable``)."""
        self._require_built("trainable_names")
        return list(self._trainable)

    # -- weights -----------------------------------------------------------------------------
    def _weight_shapes(self, input_dim: int) -> dict[str, tuple[int, ...]]:
        return {p.name: p.shape for p in self.cell.params(input_dim)}

    def set_weights(self, *arrays: Any, **named: Any) -> None:
        """Install every weight at once, positionally in :meth:`weights` order (for the built-in
        cells ``kernel, recurrent_kernel[, bias][, projection_kernel]``) or by name. An unbuilt
        layer is built from the first array's rows. Every shape is checked before anything
        changes (WeightShapeError names the first misfit)."""
        if not self.built:
            first = np.asarray(arrays[0] if arrays else next(iter(named.values()), None))
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
        arrs = {n: np.asarray(v) for n, v in given.items()}
        for n in names:  # check all before changing anything
            if arrs[n].shape != expected[n]:
                raise WeightShapeError(n, expected[n], arrs[n].shape, f"layer {self.name}")
        if not self.built:
            self.build(Shape((None, None, F)))
        for n in names:
            self.set_weight(n, arrs[n])

    # -- passes ------------------------------------------------------------------------------
    def _check_input(self, x: Any, check_steps: bool = True) -> np.ndarray:
        """``x`` as a (B, T, F) array of the layer's dtype; ``check_steps=False`` (the tch-style
        ``step / seq / seq_init``) accepts any T even when the build fixed the time axis."""
        self._require_built()
        arr = self._as_input(x)
        if arr.ndim != 3:
            raise InvalidInputError(
                f"{self.name}: expected a 3D input (batch, timesteps, features), got shape "
                f"{arr.shape} (rank {arr.ndim}); a recurrent layer never reshapes its input"
            )
        if arr.shape[2] != self.input_dim:
            raise InvalidInputError(
                f"{self.name}: expected {self.input_dim} features on the last axis, got shape {arr.shape}"
            )
        if arr.shape[1] < 1:
            raise InvalidInputError(f"{self.name}: expected at least 1 timestep, got shape {arr.shape}")
        expect = self.input_shape
        if check_steps and expect[1] is not None and expect[1] != arr.shape[1]:
            raise InvalidInputError(
                f"{self.name}: built for {expect[1]} timesteps, got shape {arr.shape}"
            )
        return arr

    def _time_major(self, x: np.ndarray) -> np.ndarray:
        """(B, T, F) -> contiguous (T, B, F) in processing order."""
        xt = x.transpose(1, 0, 2)
        return np.ascontiguousarray(xt[::-1] if self.go_backwards else xt)

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        """Run the layer: (B, T, F) -> (B, out), or (B, T, out) under ``return_sequences``."""
        arr = self._check_input(x)
        seq, final, cache = walk(self.cell, self._weights, self._time_major(arr), None,
                                 ctx.training_mode, self.return_sequences)
        if cache is not None:
            B, T = arr.shape[:2]
            cache["out_shape"] = (B, T, self.output_size) if self.return_sequences else (B, self.output_size)
            ctx.save(self, cache)
        if self.return_sequences:
            assert seq is not None
            return seq.transpose(1, 0, 2).copy()  # never a view of the cache (B == 1, T == 1)
        return np.array(final[0])

    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        """BPTT over the whole sequence. Adds the gradient of every trainable weight into
        ``ctx`` (``ctx.grad(layer, name)``) and returns dL/dx, shape (B, T, F) in input order."""
        self._require_built("backward")
        cache = ctx.peek(self)
        g = self._as_grad(grad, cache["out_shape"])
        ctx.load(self)  # consumed only once the gradient fits
        dx_tm, grads, _ = walk_back(self.cell, self._weights, cache, g, self.return_sequences)
        for name in self._trainable:
            ctx.add_grad(self, name, grads[name])
        if self.go_backwards:
            dx_tm = dx_tm[::-1]
        return np.ascontiguousarray(dx_tm.transpose(1, 0, 2))

    # -- configuration -----------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        from rnnkit.recurrent._registry import cell_to_config

        cfg: dict[str, Any] = {"cell": cell_to_config(self.cell)}
        cfg.update(self._walk_config())
        return cfg

    def _walk_config(self) -> dict[str, Any]:
        cfg = {"return_sequences": self.return_sequences, "go_backwards": self.go_backwards}
        cfg.update(super().get_config())
        return cfg

    # -- the tch-rs RNN trait: explicit states, for streaming inference -----------------------
    def zero_state(self, batch: int) -> Any:
        """The all-zero state for ``batch`` sequences (the cell's state type)."""
        b = check_positive_int(batch, "batch", self.name)
        return self.cell.make_state(tuple(np.zeros((b, n), self.dtype) for n in self.cell.state_sizes()))

    def step(self, x: Any, state: Any) -> Any:
        """Advance ``state`` by one timestep of input ``x`` (B, F); inference, records nothing."""
        arr = self._as_input(x)
        if arr.ndim != 2:
            raise InvalidInputError(
                f"{self.name}.step: expected one timestep (batch, features), got shape {arr.shape}"
            )
        _, final = self.seq_init(arr[:, None, :], state)
        return final

    def seq(self, x: Any) -> tuple[np.ndarray, Any]:
        """Run from the zero state: (every output in processing order (B, T, out), final state)."""
        return self.seq_init(x, None)

    def seq_init(self, x: Any, state: Any) -> tuple[np.ndarray, Any]:
        """Run from ``state`` (``None`` = zeros): (sequence (B, T, out), final state)."""
        arr = self._check_input(x, check_steps=False)
        init = None if state is None else self.unpack_state(state, arr.shape[0])
        seq, final, _ = walk(self.cell, self._weights, self._time_major(arr), init, False, True)
        assert seq is not None
        return np.ascontiguousarray(seq.transpose(1, 0, 2)), self.cell.make_state(final)

    def unpack_state(self, state: Any, batch: int) -> Arrays:
        """The parts of ``state`` (the cell's state type, or a plain tuple of its parts) as
        arrays of this layer's dtype, each checked against (batch, width)."""
        cls = type(self.cell.make_state(tuple(np.empty(0) for _ in self.cell.state_names)))
        names = self.cell.state_names
        if not isinstance(state, tuple) or not (type(state) is tuple or isinstance(state, cls)) \
                or len(state) != len(names):
            raise InvalidInputError(
                f"{self.name}: expected a {cls.__name__} ({', '.join(names)}) as state, got "
                f"{type(state).__name__}")
        parts = tuple(self._as_input(p, "state") for p in state)
        for name, a, n in zip(names, parts, self.cell.state_sizes(), strict=True):
            if a.shape != (batch, n):
                raise InvalidInputError(
                    f"{self.name}: state {name!r} must have shape {(batch, n)}, got {a.shape}")
        return parts
