"""The walker: ONE implementation of a recurrent layer, over any :class:`Cell`.

It owns build (weights and their initialisation), the input projection of all timesteps in one
GEMM, the walk along time in either direction, ``return_sequences``, the per-step caches, the
backward walk and the batched weight-gradient GEMMs. The cell owns one timestep's arithmetic.

Internally everything is time-major and in PROCESSING order: row ``s`` of ``x_tm`` is the
input timestep step ``s`` consumes (``T-1-s`` under ``go_backwards``). Outputs are returned in
processing order too (slot 0 of a ``go_backwards`` sequence came from the LAST input step),
as the pages specify; only the input gradient is mapped back to input order.

Backward, after the walk has filled ``dxw`` (T, B, G*H) and ``drec``::

    dW      = x_tm^T @ dxw                  one GEMM over (T*B) rows
    b[0]    = sum(dxw)                      (b[1] = sum(drec) when the bias has 2 rows)
    dU[:, group] = P^T @ drec[:, group]     one GEMM per group of gates that projected the
                                            same array P (1 group; GRU reset_after=False: 2)
    dx      = dxw @ W^T                     one GEMM, then back to (B, T, F) input order
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._activations import Activation, ActivationLike, resolve_activation
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, WeightShapeError
from rnnkit._initializers import glorot_uniform, orthogonal
from rnnkit._layer import Layer, check_positive_int
from rnnkit._shape import Shape
from rnnkit.kernels import fast_walker
from rnnkit.recurrent._cell import Cell


class RecurrentLayer(Layer):
    """Shared base of SimpleRNN, LSTM and GRU (see the class docstrings of those three)."""

    cell_class: type[Cell] = Cell

    def __init__(
        self,
        units: int,
        activation: ActivationLike = "tanh",
        *,
        return_sequences: bool = False,
        go_backwards: bool = False,
        seed: int | None = None,
        dtype: Any = "float32",
        input_dim: int | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(seed=seed, dtype=dtype, name=name or self.cell_class.name)
        self.units = check_positive_int(units, "units", self.name)
        act = resolve_activation(activation, self.name)
        if act.kind is Activation.SOFTMAX and act.axis != -1:
            raise InvalidParameterError(
                f"{self.name}: an embedded softmax accepts only axis=-1, got axis={act.axis}"
            )
        self.activation = act
        self.return_sequences = bool(return_sequences)
        self.go_backwards = bool(go_backwards)
        self.cell: Cell = self._make_cell()
        if input_dim is not None:
            self.build(Shape((None, None, check_positive_int(input_dim, "input_dim", self.name))))

    def _make_cell(self) -> Cell:
        return self.cell_class(self.units, self.activation)

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
    @property
    def gate_width(self) -> int:
        return self.cell.gates * self.units

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
        F, H, G = int(shape[2]), self.units, self.cell.gates  # type: ignore[arg-type]
        # Draw order is fixed: kernel, then recurrent kernel (one orthogonal block per gate).
        kernel = glorot_uniform(rng, (F, G * H), F, H, self.dtype)   # per-gate fan F + H
        rec = np.concatenate([orthogonal(rng, H, self.dtype) for _ in range(G)], axis=1)
        self._add_weight("kernel", kernel)
        self._add_weight("recurrent_kernel", rec)
        self._add_weight("bias", self.cell.initial_bias(self.dtype))

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        if self.return_sequences:
            return Shape((shp[0], shp[1], self.units))
        return Shape((shp[0], self.units))

    @property
    def input_dim(self) -> int:
        return int(self.input_shape[2])  # type: ignore[arg-type]

    # -- weights -----------------------------------------------------------------------------
    def _weight_shapes(self, input_dim: int) -> dict[str, tuple[int, int]]:
        GH = self.gate_width
        return {"kernel": (input_dim, GH), "recurrent_kernel": (self.units, GH),
                "bias": (self.cell.bias_rows, GH)}

    def set_weights(self, kernel: Any, recurrent_kernel: Any, bias: Any) -> None:
        """Install the fused matrices. An unbuilt layer is built from ``kernel``'s rows."""
        arrays = {"kernel": np.asarray(kernel), "recurrent_kernel": np.asarray(recurrent_kernel),
                  "bias": np.asarray(bias)}
        k = arrays["kernel"]
        if not self.built:
            if k.ndim != 2 or k.shape[0] < 1:
                raise WeightShapeError("kernel", ("input_dim", self.gate_width), k.shape,
                                       f"layer {self.name}")
            F = int(k.shape[0])
        else:
            F = self.input_dim
        expected = self._weight_shapes(F)
        for name, arr in arrays.items():  # check all before changing anything
            if arr.shape != expected[name]:
                raise WeightShapeError(name, expected[name], arr.shape, f"layer {self.name}")
        if not self.built:
            self.build(Shape((None, None, F)))
        for name, arr in arrays.items():
            self.set_weight(name, arr)

    def _set_gate_triples(self, triples: list[tuple[Any, Any, Any]], names: list[str]) -> None:
        H = self.units
        ks, rks, bs = [], [], []
        for gate, (k, rk, b) in zip(names, triples, strict=True):
            k, rk, b = np.asarray(k), np.asarray(rk), np.asarray(b)
            F = k.shape[0] if k.ndim == 2 else -1
            if self.built:
                F = self.input_dim
            for nm, arr, exp in ((f"{gate}.kernel", k, (F, H)), (f"{gate}.recurrent_kernel", rk, (H, H)),
                                 (f"{gate}.bias", b, (self.cell.bias_rows, H))):
                if arr.shape != exp or F < 1:
                    raise WeightShapeError(nm, exp, arr.shape, f"layer {self.name}")
            ks.append(k)
            rks.append(rk)
            bs.append(b)
        self.set_weights(np.concatenate(ks, axis=1), np.concatenate(rks, axis=1),
                         np.concatenate(bs, axis=1))

    # -- forward -----------------------------------------------------------------------------
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

    def _project(self, x_tm: np.ndarray) -> np.ndarray:
        """xw = x @ W + b[0] for every step at once: (T, B, F) -> (T, B, G*H), one GEMM."""
        T, B, F = x_tm.shape
        xw = x_tm.reshape(T * B, F) @ self._weights["kernel"]
        xw += self._weights["bias"][0]
        return xw.reshape(T, B, self.gate_width)

    def _walk(
        self, x_tm: np.ndarray, init: tuple[np.ndarray, ...] | None, record: bool, keep_seq: bool
    ) -> tuple[np.ndarray | None, tuple[np.ndarray, ...], dict[str, Any] | None]:
        """Run the recurrence. Returns (sequence (T,B,H) or None, final states, cache or None)."""
        fast = fast_walker(self)   # compiled time loop (rnnkit.kernels), proven equal in tests
        if fast is not None:
            return fast.walk(self, x_tm, init, record, keep_seq)  # type: ignore[no-any-return]
        cell = self.cell
        T, B, _ = x_tm.shape
        H, dt = self.units, self.dtype
        U = self._weights["recurrent_kernel"]
        bias = self._weights["bias"]
        b_rec = bias[1] if cell.bias_rows == 2 else None
        xw = self._project(x_tm)
        n_states = len(cell.states)
        if record:
            # states[k][s] enters step s; states[k][s + 1] leaves it
            hist = [np.empty((T + 1, B, H), dt) for _ in range(n_states)]
            for k in range(n_states):
                hist[k][0] = 0.0 if init is None else init[k]
            parks = {n: np.empty((T, B, w * H), dt) for n, w in cell.parks.items()}
            for s in range(T):
                cell.step(xw[s], tuple(a[s] for a in hist), tuple(a[s + 1] for a in hist), U, b_rec,
                          {n: p[s] for n, p in parks.items()})
            cache = {"x_tm": x_tm, "states": hist, "parks": parks}
            seq = hist[0][1:] if keep_seq else None
            return seq, tuple(a[T] for a in hist), cache
        # inference: O(B*H) state, double-buffered; the sequence only when it is the output
        seq = np.empty((T, B, H), dt) if keep_seq else None
        bufs = [[np.zeros((B, H), dt) if init is None else np.array(init[k], dt), np.empty((B, H), dt)]
                for k in range(n_states)]
        for s in range(T):
            prev = tuple(b[s % 2] for b in bufs)
            out = [b[(s + 1) % 2] for b in bufs]
            if seq is not None:
                out[0] = seq[s]
            cell.step(xw[s], prev, tuple(out), U, b_rec, None)
            if seq is not None:
                bufs[0][(s + 1) % 2] = seq[s]
        final = tuple(b[T % 2] for b in bufs)
        return seq, tuple(np.array(f) for f in final), None

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        """Run the layer: (B, T, F) -> (B, H), or (B, T, H) under ``return_sequences``."""
        arr = self._check_input(x)
        x_tm = self._time_major(arr)
        seq, final, cache = self._walk(x_tm, None, ctx.training_mode, self.return_sequences)
        if cache is not None:
            cache["out_shape"] = (arr.shape[0], arr.shape[1], self.units) if self.return_sequences \
                else (arr.shape[0], self.units)
            ctx.save(self, cache)
        if self.return_sequences:
            assert seq is not None
            return seq.transpose(1, 0, 2).copy()  # never a view of the cache (B == 1, T == 1)
        return np.array(final[0])

    # -- backward ----------------------------------------------------------------------------
    def backward(self, grad: Any, ctx: Ctx) -> np.ndarray:
        """BPTT over the whole sequence. Adds kernel / recurrent_kernel / bias gradients into
        ``ctx`` and returns dL/dx, shape (B, T, F) in input order."""
        self._require_built("backward")
        cache = ctx.peek(self)
        g = self._as_grad(grad, cache["out_shape"])
        ctx.load(self)  # consumed only once the gradient fits
        fast = fast_walker(self)   # compiled walk + reductions (rnnkit.kernels), proven equal in tests
        if fast is not None:
            return fast.backward(self, cache, g, ctx)  # type: ignore[no-any-return]
        cell = self.cell
        x_tm, hist, parks = cache["x_tm"], cache["states"], cache["parks"]
        T, B, F = x_tm.shape
        H, GH, dt = self.units, self.gate_width, self.dtype
        U = self._weights["recurrent_kernel"]
        dxw = np.empty((T, B, GH), dt)
        drec = np.empty((T, B, GH), dt) if cell.separate_rec_grad else dxw
        d = tuple(np.zeros((B, H), dt) for _ in cell.states)
        g_tm = g.transpose(1, 0, 2) if self.return_sequences else None
        for s in range(T - 1, -1, -1):
            dh = d[0]
            if g_tm is not None:
                dh = dh + g_tm[s]
            elif s == T - 1:
                dh = dh + g
            d = cell.step_back((dh, *d[1:]), tuple(a[s] for a in hist), tuple(a[s + 1] for a in hist),
                               {n: p[s] for n, p in parks.items()}, U, dxw[s], drec[s])
        # the batched reductions
        dxw2 = dxw.reshape(T * B, GH)
        drec2 = drec.reshape(T * B, GH)
        ctx.add_grad(self, "kernel", x_tm.reshape(T * B, F).T @ dxw2)
        db = np.empty((cell.bias_rows, GH), dt)
        db[0] = dxw2.sum(axis=0)
        if cell.bias_rows == 2:
            db[1] = drec2.sum(axis=0)
        ctx.add_grad(self, "bias", db)
        dU = np.empty((H, GH), dt)
        for src, g0, g1 in cell.rec_groups:
            P = hist[cell.states.index(src)][:T] if src in cell.states else parks[src]
            dU[:, g0 * H:g1 * H] = P.reshape(T * B, H).T @ drec2[:, g0 * H:g1 * H]
        ctx.add_grad(self, "recurrent_kernel", dU)
        dx_tm = (dxw2 @ self._weights["kernel"].T).reshape(T, B, F)
        if self.go_backwards:
            dx_tm = dx_tm[::-1]
        return np.ascontiguousarray(dx_tm.transpose(1, 0, 2))

    # -- configuration -----------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        cfg = {"units": self.units, "activation": self.activation.name,
               "return_sequences": self.return_sequences, "go_backwards": self.go_backwards}
        cfg.update(super().get_config())
        return cfg

    # -- the tch-rs RNN trait: explicit states, for streaming inference -----------------------
    def zero_state(self, batch: int) -> Any:
        """The all-zero state for ``batch`` sequences (``LSTMState`` or ``GRUState``)."""
        b = check_positive_int(batch, "batch", self.name)
        return self._pack_state(tuple(np.zeros((b, self.units), self.dtype) for _ in self.cell.states))

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
        """Run from the zero state: (every state in processing order (B, T, H), final state)."""
        return self.seq_init(x, None)

    def seq_init(self, x: Any, state: Any) -> tuple[np.ndarray, Any]:
        """Run from ``state`` (``None`` = zeros): (sequence (B, T, H), final state)."""
        arr = self._check_input(x, check_steps=False)
        init = None
        if state is not None:
            init = self._unpack_state(state)
            for name, a in zip(self.cell.states, init, strict=True):
                if a.shape != (arr.shape[0], self.units):
                    raise InvalidInputError(
                        f"{self.name}: state {name!r} must have shape {(arr.shape[0], self.units)}, "
                        f"got {a.shape}"
                    )
        seq, final, _ = self._walk(self._time_major(arr), init, False, True)
        assert seq is not None
        return np.ascontiguousarray(seq.transpose(1, 0, 2)), self._pack_state(final)

    def _pack_state(self, arrays: tuple[np.ndarray, ...]) -> Any:
        return GRUState(arrays[0])

    def _unpack_state(self, state: Any) -> tuple[np.ndarray, ...]:
        if isinstance(state, GRUState):
            return (self._as_input(state.value(), "state"),)
        raise InvalidInputError(f"{self.name}: expected a GRUState as state, got {type(state).__name__}")


class GRUState:
    """The state of a SimpleRNN or GRU: one hidden array (B, H), read with ``value()``."""

    __slots__ = ("_h",)

    def __init__(self, h: np.ndarray) -> None:
        self._h = h

    def value(self) -> np.ndarray:
        return self._h

    def __repr__(self) -> str:
        return f"GRUState(shape={self._h.shape})"


class LSTMState:
    """The state of an LSTM: ``h()`` the hidden state and ``c()`` the cell state, each (B, H)."""

    __slots__ = ("_h", "_c")

    def __init__(self, h: np.ndarray, c: np.ndarray) -> None:
        self._h, self._c = h, c

    def h(self) -> np.ndarray:
        return self._h

    def c(self) -> np.ndarray:
        return self._c

    def __repr__(self) -> str:
        return f"LSTMState(shape={self._h.shape})"
