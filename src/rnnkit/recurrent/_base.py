"""``RecurrentLayer``: a recurrent layer = the walker over one :class:`~rnnkit.Cell`.

The layer holds the cell (configuration) and the weights the cell declares; a pass runs the
walker (:mod:`._walker`) and keeps its caches in the ``Ctx``. Outputs are in PROCESSING order
(slot 0 of a ``go_backwards`` sequence came from the LAST input step); only the input gradient
is mapped back to input order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit._activations import ActivationFn
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._kind import builtin_kind
from rnnkit._layer import Layer, check_bool, check_float, check_positive_int
from rnnkit._mask import Mask
from rnnkit._penalties import attach
from rnnkit._shape import Shape
from rnnkit.kernels._threads import swap01
from rnnkit.recurrent._cell import Arrays, Cell
from rnnkit.recurrent._infer import infer_array, infer_one_length, longest_first
from rnnkit.recurrent._registry import cell_from_config, cell_to_config
from rnnkit.recurrent._streaming import Streaming
from rnnkit.recurrent._walker import PassCache, walk, walk_back
from rnnkit.recurrent._weights import RecurrentWeights


def kind_config(cell: Cell, walk_config: dict[str, Any]) -> dict[str, Any]:
    """The constructor keywords of the layer of ``cell``'s built-in kind (``SimpleRNN`` /
    ``LSTM`` / ``GRU``): the cell's config, then ``walk_config``, then a GRU's ``reset_after``
    and a ``bias_layout`` other than ``"fused"``."""
    cfg = cell.get_config()
    cfg.update(walk_config)
    if builtin_kind(cell) == "GRU":
        cfg["reset_after"] = bool(getattr(cell, "reset_after", False))
    if getattr(cell, "bias_layout", "fused") != "fused" and builtin_kind(cell) != "GRU":
        cfg["bias_layout"] = cell.bias_layout  # type: ignore[attr-defined]
    return cfg


class RecurrentLayer(Streaming, RecurrentWeights, Layer):
    """``RecurrentLayer(cell, *, return_sequences=False, go_backwards=False, return_state=False,
    stateful=False, dropout=0.0, seed=None, dtype="float32", input_dim=None, name=None)``: any
    cell walked over time.

    Input (B, T, F); output (B, out) = the last step's output (state part 0), or (B, T, out)
    with ``return_sequences`` (slot k holds the output of processing step k). Weights: the
    cell's :meth:`~rnnkit.Cell.params`, drawn from ``seed`` in their order.

    - Padded batches: the ``Ctx``'s mask (:meth:`rnnkit.Ctx.set_mask`) marks the real steps; a
      masked step carries the state over and repeats the previous output (a boolean mask,
      Keras') or outputs zeros (``lengths``, PyTorch's packed sequences); ``go_backwards``
      reverses each sequence within its own length.
    - ``return_state``: ``forward`` returns ``[output, *final_state_parts]``; an input list
      ``[x, *initial_state_parts]`` starts from that state; gradients flow to both.
    - ``stateful``: each call starts where the previous one left off (per sample; the batch
      size must stay the same) until :meth:`reset_state`; gradients stop at the call's start
      (truncated BPTT). The carried state is the one thing such a layer keeps between passes:
      a stateful layer is not for sharing between threads or between two places of a model.
    - The layer holds the cell's weights (``cell.holder`` is the layer; a cell that already
      holds weights of its own, from a standalone call, brings them). A Keras cell's
      ``dropout`` / ``recurrent_dropout`` are the layer's when the layer sets neither, and its
      regularizer and constraint keywords are the layer's.
    - ``dropout``: inverted dropout of the inputs in a training ``Ctx``, one mask per sequence
      reused at every step (drawn from ``ctx.rng``, kept in the ``Ctx``); ``recurrent_dropout``
      the same for the state where it feeds back into the recurrent products (one mask per
      sequence, shared by the gates; the carried state itself is not dropped), as Keras does.
    """

    def __init__(self, cell: Cell | dict[str, Any], *, return_sequences: bool = False,
                 go_backwards: bool = False, return_state: bool = False, stateful: bool = False,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0,
                 seed: int | None = None, dtype: Any = "float32", input_dim: int | None = None,
                 name: str | None = None) -> None:
        if isinstance(cell, dict):  # from a model file: {"class_name": ..., "config": ...}
            cell = cell_from_config(cell)
        if not isinstance(cell, Cell):
            raise TypeError(f"RecurrentLayer: cell must be an rnnkit.Cell, got {type(cell).__name__}")
        super().__init__(seed=seed, dtype=dtype, name=name if name is not None else cell.name)
        cell.check(self.name)
        kernels.check(cell, self.name)
        self.cell = cell
        self.return_sequences = check_bool(return_sequences, "return_sequences", self.name)
        self.go_backwards = check_bool(go_backwards, "go_backwards", self.name)
        self.return_state = check_bool(return_state, "return_state", self.name)
        self.stateful = check_bool(stateful, "stateful", self.name)
        self.dropout = check_float(dropout, "dropout", self.name, lo=0.0, hi=1.0, hi_open=True)
        rd = check_float(recurrent_dropout, "recurrent_dropout", self.name, lo=0.0, hi=1.0, hi_open=True)
        if self.dropout == 0.0 and rd == 0.0:   # (a Keras cell's own rates, if any)
            self.dropout, rd = float(cell.dropout), float(cell.recurrent_dropout)
        if rd > 0 and not cell.supports_recurrent_dropout:
            raise InvalidParameterError(
                f"{self.name}: {type(cell).__name__} does not apply recurrent dropout "
                f"(Cell.supports_recurrent_dropout is False); recurrent_dropout must be 0")
        self.recurrent_dropout = float(rd)
        self._state: Arrays | None = None
        if cell.weight_keywords:   # a Keras cell's regularizers / constraints
            attach(self, **cell.weight_keywords)
        held, cell.holder = cell.holder, self
        if held is not None and held.built:   # a cell that holds weights already brings them
            self.set_weights(**{n: v for n, v in held.weights()})
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
        self.return_sequences = check_bool(flag, "return_sequences", self.name)
        return self

    def with_go_backwards(self, flag: bool = True) -> RecurrentLayer:
        self.go_backwards = check_bool(flag, "go_backwards", self.name)
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

    def _work_shapes(self, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
        """(batch, steps, width): the input projection of every step (``width`` the kernel's
        output width) and the states of every step a pass keeps, whichever is wider; they grow
        with batch x steps even where the output (the last step's) does not."""
        if len(shape) != 3 or not all(isinstance(d, int) for d in shape):
            return []
        kernel = self._weights.get("kernel")
        width = max(int(kernel.shape[-1]) if kernel is not None else 0, sum(self.cell.state_sizes()))
        return [(shape[0], shape[1], width)]

    def compute_output_shape(self, shape: Any) -> Any:
        """The output's shape; with ``return_state`` the list ``[output, *state parts]`` (each
        state part (batch, width)). ``shape`` may be a list ``[x, *initial state parts]``."""
        if isinstance(shape, list):
            shape = shape[0]
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        out = Shape((shp[0], shp[1], self.output_size)) if self.return_sequences else \
            Shape((shp[0], self.output_size))
        if self.return_state:
            return [out, *(Shape((shp[0], n)) for n in self.cell.state_sizes())]
        return out

    supports_masking = True

    def compute_mask(self, x: Any, mask: Any) -> Any:
        """The output keeps the mask under ``return_sequences`` (in processing order: reversed
        within each length under ``go_backwards``, which leaves a prefix mask as it is), none
        otherwise; with ``return_state`` a list ``[that, None, ...]``."""
        out = None
        if mask is not None and self.return_sequences:
            out = mask
            if self.go_backwards and mask.kind == "mask":
                T = int(np.shape(x[0] if isinstance(x, (list, tuple)) else x)[1])
                out = Mask(np.take_along_axis(mask.valid(T), mask.reverse_index(T), axis=1))
        return [out] + [None] * len(self.cell.state_names) if self.return_state else out

    @property
    def input_dim(self) -> int:
        return int(self.input_shape[2])  # type: ignore[arg-type]

    @property
    def trainable_names(self) -> list[str]:
        """The weights that receive gradients (the cell's ``Param.trainable``)."""
        self._require_built("trainable_names")
        return list(self._trainable)

    # -- passes ------------------------------------------------------------------------------
    def _check_input(self, x: Any, check_steps: bool = True) -> np.ndarray:
        """``x`` as a (B, T, F) array of the layer's dtype; ``check_steps=False`` (the streaming
        ``step / seq / seq_init``) accepts any T even when the build fixed the time axis."""
        built = self._input_shape
        if built is not None and type(x) is np.ndarray and x.dtype == self.dtype and x.ndim == 3:
            _, T, F = x.shape   # (the quick test first: an array of the layer's dtype that fits)
            want = built.dims
            if F == want[2] and T >= 1 and (want[1] is None or want[1] == T or not check_steps):
                return x
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

    def forward(self, x: Any, ctx: Ctx) -> Any:
        """Run the layer: (B, T, F) -> (B, out), or (B, T, out) under ``return_sequences``.

        ``x`` may be a list ``[x, *initial_state_parts]`` (Keras' ``initial_state``; each part
        (B, width), in :attr:`Cell.state_names` order); otherwise the state starts at zero (or,
        for a ``stateful`` layer, where the previous call left it). ``ctx.mask`` (a
        :class:`~rnnkit.Mask`) marks the real steps of a padded batch. With ``return_state`` the
        result is ``[output, *final_state_parts]``."""
        if type(x) is np.ndarray and not (ctx.training_mode or self.stateful or self.return_state) \
                and type(self)._pass is RecurrentLayer._pass:   # (int8's pass of its own is kept)
            mask = ctx.mask
            if mask is None:
                return infer_array(self, x)
            got = infer_one_length(self, x, mask)
            if got is not None:
                return got
        arr, init = self._split_inputs(x)
        out, final = self._pass(arr, init, ctx, self.return_sequences, "layer")
        return [out, *final] if self.return_state else out

    def backward(self, grad: Any, ctx: Ctx) -> Any:
        """BPTT over the whole sequence. Adds the gradient of every trainable weight into
        ``ctx`` (``ctx.grad(layer, name)``) and returns dL/dx, shape (B, T, F) in input order
        (``[dx, *d_initial_state_parts]`` when the forward had an initial state; None when
        ``ctx.needs_input_grad(self)`` is False and there was none). With
        ``return_state``, ``grad`` is a list ``[d_output, *d_final_state_parts]`` (any entry None:
        zero)."""
        self._require_built("backward")
        cache: PassCache = ctx.peek(self)
        if cache.api == "seq":     # recorded by seq_init: (d_seq, d_final_state)
            if not isinstance(grad, tuple) or len(grad) != 2:
                raise InvalidInputError(f"{self.name}: a pass recorded by seq_init takes backward((d_seq, "
                                        f"d_final_state), ctx); got {type(grad).__name__}")
            out = self._back(cache, grad[0], None if grad[1] is None else tuple(grad[1]), ctx)
            dx, d_init = (out[0], self.cell.make_state(tuple(out[1:]))) if cache.given else (out, None)
            return dx, d_init
        g_state = None
        if self.return_state:
            if not isinstance(grad, (list, tuple)) or len(grad) != 1 + len(self.cell.state_names):
                raise InvalidInputError(
                    f"{self.name}: with return_state, backward expects a list [d_output, "
                    f"{', '.join('d_' + n for n in self.cell.state_names)}], got {type(grad).__name__}")
            grad, g_state = grad[0], grad[1:]
        return self._back(cache, grad, g_state, ctx)

    def _split_inputs(self, x: Any) -> tuple[Any, Arrays | None]:
        if isinstance(x, (list, tuple)):
            n = len(self.cell.state_names)
            if any(isinstance(p, (list, tuple)) for p in x[1:]):   # Keras' nesting: flattened
                x = [x[0], *(a for p in x[1:] for a in (p if isinstance(p, (list, tuple)) else [p]))]
            if len(x) != 1 + n:
                raise InvalidInputError(
                    f"{self.name}: expected an input or a list [x, {', '.join(self.cell.state_names)}] "
                    f"(the initial state), got a list of {len(x)}")
            return x[0], tuple(x[1:])
        return x, None

    def _pass(self, x: Any, init: Any, ctx: Ctx, keep_seq: bool, api: str,
              check_steps: bool = True) -> tuple[np.ndarray, Arrays]:
        """One forward pass (recorded in a training ``ctx``): (output, final state parts)."""
        arr = self._check_input(x, check_steps)
        B, T = arr.shape[:2]
        mask = ctx.mask
        if mask is not None:
            mask.check(B, T, self.name)
        given = init is not None
        parts = self.unpack_state(init, B) if given else (
            self._carried_state(B) if self.stateful and api == "layer" else None)
        idx, m_tm = (None, None) if mask is None else self._order(mask, B, T)
        drop = None
        if ctx.drops and self.dropout > 0.0:   # one input mask per sequence, every step
            drop = (ctx.rng.random((B, 1, arr.shape[2])) >= self.dropout).astype(self.dtype)
            drop /= self.dtype.type(1.0 - self.dropout)
            arr = arr * drop
        f = arr.flags
        if idx is None and B == 1 and not (self.go_backwards or ctx.training_mode) and f.c_contiguous \
                and f.writeable and f.aligned:     # one row: time-major is the same memory, read only
            x_tm = arr.reshape(T, 1, arr.shape[2])
        elif idx is None:
            x_tm = swap01(arr[:, ::-1] if self.go_backwards else arr)
        else:
            x_tm = arr[np.arange(B)[None, :], idx]
        order = None if ctx.training_mode or self.stateful else longest_first(mask, B, T)
        if order is not None:                     # inference: the rows in decreasing length
            assert m_tm is not None
            x_tm, m_tm = np.ascontiguousarray(x_tm[:, order]), np.ascontiguousarray(m_tm[:, order])
            parts = None if parts is None else tuple(p[order] for p in parts)
        rdrop = None
        if ctx.drops and self.recurrent_dropout > 0.0:
            S = self.cell.state_sizes()[0]
            rdrop = (ctx.rng.random((B, S)) >= self.recurrent_dropout).astype(self.dtype)
            rdrop /= self.dtype.type(1.0 - self.recurrent_dropout)
        seq, final, wc = walk(self.cell, self._weights, x_tm, parts, ctx.training_mode, keep_seq, m_tm, rdrop)
        if order is not None:                     # back to the caller's order of the rows
            inv = np.argsort(order)
            seq = None if seq is None else seq.transpose(1, 0, 2)[inv].transpose(1, 0, 2)
            final = tuple(f[inv] for f in final)
        if self.stateful and api == "layer":
            self._state = tuple(np.array(f) for f in final)
        lengths = mask is not None and mask.kind == "lengths"
        if wc is not None:
            ctx.save(self, PassCache(wc, (B, T, self.output_size) if keep_seq else (B, self.output_size),
                                     arr.shape, idx, lengths and keep_seq, drop, given, api))
        if keep_seq:
            assert seq is not None
            out = seq.transpose(1, 0, 2)          # (inference: the walk's own new array)
            if wc is not None or not out.flags.c_contiguous:
                out = swap01(seq)                 # never a view of the cache (B == 1, T == 1)
            if lengths:                           # PyTorch's packed semantics: zero past the end
                assert mask is not None
                for b, n in enumerate(mask.ends(T).tolist()):   # (processing order keeps the end)
                    if n < T:
                        out[b, n:] = 0.0
        else:
            out = np.array(final[self.cell.output_part])
        if not (self.return_state or api != "layer"):   # the final state is not handed out
            return out, ()
        return out, tuple(np.array(f) for f in final)

    def _order(self, mask: Any, B: int, T: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(time index (T, B) of the input each processing step reads, or None for the plain
        order; the (T, B) real-step mask in processing order, or None)."""
        if mask is None:
            return None, None
        if not self.go_backwards:
            return None, mask.time_major(T)
        valid = mask.valid(T)
        idx = np.ascontiguousarray(mask.reverse_index(T).T)   # reversed within each length
        return idx, np.ascontiguousarray(np.take_along_axis(valid, idx.T, axis=1).T)

    def _back(self, cache: PassCache, grad: Any, g_state: Any, ctx: Ctx) -> Any:
        # no gradient for the output (only the states are used downstream): zero
        shape = cache.out_shape
        g = np.zeros(shape, self.dtype) if grad is None else self._as_grad(grad, shape)
        d_final = None
        if g_state is not None:
            B = cache.in_shape[0]
            d_final = tuple(np.zeros((B, n), self.dtype) if d is None else self._as_grad(d, (B, n))
                            for d, n in zip(g_state, self.cell.state_sizes(), strict=True))
        ctx.load(self)  # consumed only once the gradient fits
        full = len(cache.out_shape) == 3
        if cache.zero_pad:   # outputs past each sequence's end are constant zeros
            assert cache.walk.mask is not None
            g = g * cache.walk.mask.T[:, :, None]
        need_dx = cache.given or ctx.needs_input_grad(self)
        dx_tm, grads, d_init = walk_back(self.cell, self._weights, cache.walk, g, full, d_final, need_dx)
        for name in self._trainable:
            ctx.give_grad(self, name, grads[name])   # (the walk's own arrays: kept, not copied)
        if dx_tm is None:   # nobody reads dL/dx (Ctx.skip_input_grad)
            return None
        idx = cache.idx
        if idx is None:
            if self.go_backwards:
                dx_tm = dx_tm[::-1]
            dx = swap01(dx_tm)
        else:
            dx = np.empty(cache.in_shape, self.dtype)
            dx[np.arange(dx.shape[0])[None, :], idx] = dx_tm
        if cache.drop is not None:
            dx *= cache.drop
        return [dx, *d_init] if cache.given else dx

    # -- configuration -----------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """``{"cell": {"class_name", "config"}, ...}``; a plain ``RecurrentLayer`` over a built-in
        cell (:func:`rnnkit._kind.builtin_kind`) writes the config of the layer of that kind
        instead (``RecurrentLayer(LSTMCell(4))`` is saved as ``LSTM(4)``, and loads as one)."""
        if type(self) is RecurrentLayer and builtin_kind(self.cell) is not None:
            return kind_config(self.cell, self._walk_config())
        cfg: dict[str, Any] = {"cell": cell_to_config(self.cell)}
        cfg.update(self._walk_config())
        return cfg

    def _walk_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"return_sequences": self.return_sequences, "go_backwards": self.go_backwards}
        for k, default in (("return_state", False), ("stateful", False), ("dropout", 0.0),
                           ("recurrent_dropout", 0.0)):
            if getattr(self, k) != default:   # (files of layers without them stay as they were)
                cfg[k] = getattr(self, k)
        cfg.update(super().get_config())
        return cfg
