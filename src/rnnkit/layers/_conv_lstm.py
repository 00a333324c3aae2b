"""``ConvLSTM1D`` / ``ConvLSTM2D``: an LSTM whose products are convolutions (Keras 3's layers,
channels last), walked over time with explicit BPTT.

Input (B, T, *S, C) (``S`` one spatial axis for 1D, two for 2D); state ``h``, ``c`` (B, *O, F)
where ``O`` is the input convolution's output grid (``strides``, ``padding``, ``dilation_rate``
applied to ``S``). Step ``t`` (``xw_t`` is computed for every step at once, before the walk)::

    1.  z = conv(x_t, kernel, strides, padding, dilation_rate) + bias      (B, *O, 4F)
          + conv(h_prev, recurrent_kernel, strides 1, "same")
    2.  i = ra(z_i)   f = ra(z_f)   g = act(z_c)   o = ra(z_o)              (Keras' order i, f, c, o)
    3.  c = f * c_prev + i * g
    4.  h = o * act(c)

Every convolution is an im2col (a strided view of the zero-padded input, made contiguous) times
the kernel reshaped to (prod(kernel_size) * channels, 4F), on the packed products
(:mod:`rnnkit.layers._product`); its adjoint sums the window gradients back into the padded
input (:func:`col2im`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from rnnkit._activations import Activation, ActivationFn, resolve_activation
from rnnkit._budget import check_array
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._initializers import glorot_uniform, semi_orthogonal, uniform
from rnnkit._layer import Layer, check_bool, check_float, check_positive_int
from rnnkit._penalties import attach, config_of
from rnnkit._shape import Shape
from rnnkit.layers._conv import padding_of, pads
from rnnkit.layers._product import matmul, matmul_tn
from rnnkit.recurrent._cell import state_type_for
from rnnkit.recurrent._gated import resolve_gate_activation

Init = Callable[[np.random.Generator, tuple[int, ...], np.dtype], np.ndarray]
#: the state of a ConvLSTM: ``ConvLSTMState(h, c)``, each (B, *O, F)
STATE = state_type_for("ConvLSTM", ("h", "c"))


def _glorot(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Keras' Glorot-uniform of a convolution kernel (k..., C, N): fans ``prod(k) * C`` and
    ``prod(k) * N``."""
    field = math.prod(shape[:-2])
    return glorot_uniform(rng, shape, field * shape[-2], field * shape[-1], dt)


def _orthogonal(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Keras' orthogonal initializer: the kernel flattened to (prod(shape[:-1]), shape[-1])."""
    rows = math.prod(shape[:-1])
    return semi_orthogonal(rng, rows, shape[-1], dt).reshape(shape)


#: the initializer names these layers take (Keras' spellings)
INITIALIZERS: dict[str, Init] = {
    "glorot_uniform": _glorot,
    "orthogonal": _orthogonal,
    "zeros": lambda rng, shape, dt: np.zeros(shape, dt),
    "ones": lambda rng, shape, dt: np.ones(shape, dt),
    "random_uniform": lambda rng, shape, dt: uniform(rng, shape, -0.05, 0.05, dt),
    "random_normal": lambda rng, shape, dt: (rng.standard_normal(shape) * 0.05).astype(dt),
}


def _initializer(value: Any, arg: str, where: str) -> str:
    name = value.get("class_name") if isinstance(value, dict) else value
    if isinstance(name, str):
        snake = "".join("_" + ch.lower() if ch.isupper() else ch for ch in name).lstrip("_")
        for cand in (name, snake):
            if cand in INITIALIZERS:
                return cand
    raise InvalidParameterError(f"{where}: {arg} must be one of {', '.join(INITIALIZERS)}, got {value!r}")


def _tuple(value: Any, n: int, what: str, where: str) -> tuple[int, ...]:
    """``value`` (an int, or a list / tuple of ``n`` ints) as ``n`` positive ints (Keras'
    ``standardize_tuple``)."""
    vals = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(vals) != n:
        raise InvalidParameterError(f"{where}: {what} must be an int or {n} ints, got {value!r}")
    return tuple(check_positive_int(v, what, where) for v in vals)


def windows_nd(xp: np.ndarray, k: tuple[int, ...], dil: tuple[int, ...], stride: tuple[int, ...],
               out: tuple[int, ...]) -> np.ndarray:
    """A read-only (N, *out, *k, C) view of ``xp`` (N, *Sp, C): window ``o`` holds positions
    ``o * stride + j * dil`` along each spatial axis."""
    r = len(k)
    st = xp.strides
    sp = st[1:1 + r]
    shape = (xp.shape[0], *out, *k, xp.shape[-1])
    strides = (st[0], *(s * q for s, q in zip(sp, stride, strict=True)),
               *(s * d for s, d in zip(sp, dil, strict=True)), st[-1])
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def col2im(dcols: np.ndarray, padded: tuple[int, ...], dil: tuple[int, ...],
           stride: tuple[int, ...]) -> np.ndarray:
    """The adjoint of :func:`windows_nd`: (N, *out, *k, C) window gradients summed into
    (N, *padded, C)."""
    r = len(padded)
    N, C = dcols.shape[0], dcols.shape[-1]
    out_sp, k = dcols.shape[1:1 + r], dcols.shape[1 + r:1 + 2 * r]
    res = np.zeros((N, *padded, C), dcols.dtype)
    for j in np.ndindex(*k):
        sl = tuple(slice(jj * d, jj * d + s * (o - 1) + 1, s)
                   for jj, d, s, o in zip(j, dil, stride, out_sp, strict=True))
        res[(slice(None),) + sl] += dcols[(slice(None),) * (1 + r) + j]
    return res


class Conv:
    """One convolution's geometry over a fixed spatial grid: the padding and output grid, the
    im2col and its adjoint."""

    def __init__(self, spatial: tuple[int, ...], k: tuple[int, ...], stride: tuple[int, ...],
                 dil: tuple[int, ...], padding: str) -> None:
        self.spatial, self.k, self.stride, self.dil = spatial, k, stride, dil
        spans = [d * (kk - 1) + 1 for kk, d in zip(k, dil, strict=True)]
        self.pads = [pads(n, sp, s, padding) for n, sp, s in zip(spatial, spans, stride, strict=True)]
        self.padded = tuple(n + lo + hi for n, (lo, hi) in zip(spatial, self.pads, strict=True))
        self.out = tuple((n - sp) // s + 1 for n, sp, s in zip(self.padded, spans, stride, strict=True))

    @property
    def positions(self) -> int:
        return math.prod(self.out)

    def cols(self, x: np.ndarray) -> np.ndarray:
        """(N, *spatial, C) -> the (N * positions, prod(k) * C) windows, C-contiguous."""
        N, C = x.shape[0], x.shape[-1]
        if any(lo or hi for lo, hi in self.pads):
            x = np.pad(x, ((0, 0), *self.pads, (0, 0)))
        w = windows_nd(x, self.k, self.dil, self.stride, self.out)
        return np.ascontiguousarray(w).reshape(N * self.positions, math.prod(self.k) * C)

    def adjoint(self, dcols: np.ndarray, N: int, C: int) -> np.ndarray:
        """(N * positions, prod(k) * C) column gradients -> (N, *spatial, C)."""
        d = col2im(dcols.reshape(N, *self.out, *self.k, C), self.padded, self.dil, self.stride)
        crop = tuple(slice(lo, lo + n) for (lo, _), n in zip(self.pads, self.spatial, strict=True))
        return np.ascontiguousarray(d[(slice(None),) + crop])


class ConvLSTM(Layer):
    """The ConvLSTM of spatial rank :attr:`rank` (Keras 3's ``ConvLSTM``; use
    :class:`ConvLSTM1D` / :class:`ConvLSTM2D`).

    Arguments and defaults are Keras 3's: ``filters`` F, ``kernel_size``, ``strides`` (1),
    ``padding`` (``"valid"`` / ``"same"``, TensorFlow's ``same``: the odd padding step after),
    ``data_format`` (None / ``"channels_last"``; ``"channels_first"`` is refused),
    ``dilation_rate`` (1; ``strides > 1`` with ``dilation_rate > 1`` is refused, as Keras does),
    ``activation`` (tanh), ``recurrent_activation`` (sigmoid), ``use_bias``,
    ``kernel_initializer`` (glorot_uniform, fans ``prod(k) * C`` and ``prod(k) * 4F``),
    ``recurrent_initializer`` (orthogonal, of the kernel flattened to (prod(k) * F, 4F)),
    ``bias_initializer`` (zeros), ``unit_forget_bias`` (True: the forget block starts at 1), the
    regularizer / constraint keywords, ``dropout`` / ``recurrent_dropout``, ``seed``,
    ``return_sequences``, ``return_state``, ``go_backwards``, ``stateful``.

    Weights, Keras' names and layout: ``kernel`` (*kernel_size, C, 4F), ``recurrent_kernel``
    (*kernel_size, F, 4F), ``bias`` (4F,); gate blocks in the order i, f, c, o along the last
    axis. The recurrent convolution always uses strides 1, ``"same"`` padding, no dilation.

    Output: (B, *O, F) (the last step's ``h``), (B, T, *O, F) under ``return_sequences`` (in
    processing order: slot 0 of a ``go_backwards`` pass read the last input step); with
    ``return_state`` the list ``[output, h, c]``. An input list ``[x, h0, c0]`` starts from that
    state (gradients flow to it). ``stateful``: each call starts where the previous one ended
    (same batch size) until :meth:`reset_state`; gradients stop at the call's start.

    Streaming, as every recurrent layer: :meth:`zero_state`, :meth:`step` (one timestep
    (B, *S, C), state in, state out), :meth:`seq` and :meth:`seq_init` (any number of steps from
    a given state; recorded in a training ``Ctx``); the state is ``ConvLSTMState(h, c)``.

    Masks (Keras' rules): a boolean (B, T) mask marks the real steps; a masked step keeps ``h``
    and ``c`` and repeats the previous output (zeros before the first real step); under
    ``go_backwards`` the mask is reversed with the time axis. A ``lengths`` mask (PyTorch's
    packed sequences) gives zeros past each sequence's end under ``return_sequences``. The
    output keeps the mask under ``return_sequences``, none otherwise.

    ``dropout`` / ``recurrent_dropout`` (training ``Ctx`` only): Keras' four inverted-dropout
    masks per sequence, one per gate, on the step input (B, *S, C) and on ``h_prev`` where it
    feeds the recurrent convolution, reused at every step (drawn from ``ctx.rng``).

    Build: the spatial axes and channels must be known; the input's rank must be ``rank + 3``
    (InvalidInputError otherwise); a ``"valid"`` spatial axis shorter than its kernel's span is
    refused (InvalidInputError naming ``kernel_size``).
    """

    rank: ClassVar[int] = 0
    supports_masking = True

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 data_format: str | None = None, dilation_rate: Any = 1, activation: Any = "tanh",
                 recurrent_activation: Any = "sigmoid", use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", recurrent_initializer: Any = "orthogonal",
                 bias_initializer: Any = "zeros", unit_forget_bias: bool = True,
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None,
                 kernel_constraint: Any = None, recurrent_constraint: Any = None,
                 bias_constraint: Any = None, dropout: float = 0.0, recurrent_dropout: float = 0.0,
                 seed: int | None = None, return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, *, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(seed=seed, dtype=dtype, name=name)
        r, where = self.rank, self.name
        self.filters = check_positive_int(filters, "filters", where)
        self.kernel_size = _tuple(kernel_size, r, "kernel_size", where)
        self.strides = _tuple(strides, r, "strides", where)
        self.padding = padding_of(padding, where, ("valid", "same"))
        if data_format not in (None, "channels_last"):
            raise InvalidParameterError(f"{where}: data_format must be None or 'channels_last' (inputs "
                                        f"(batch, time, *spatial, channels)), got {data_format!r}")
        self.dilation_rate = _tuple(dilation_rate, r, "dilation_rate", where)
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise InvalidParameterError(f"{where}: strides > 1 with dilation_rate > 1 is not supported "
                                        f"(Keras refuses it too); got strides={self.strides}, "
                                        f"dilation_rate={self.dilation_rate}")
        self.activation: ActivationFn = resolve_activation(activation, where)
        if self.activation.kind is Activation.SOFTMAX:
            raise InvalidParameterError(f"{where}: activation must be elementwise (tanh, sigmoid, relu, "
                                        f"linear, hard_sigmoid), got softmax")
        self.recurrent_activation = resolve_gate_activation(recurrent_activation, where)
        self.use_bias = check_bool(use_bias, "use_bias", where)
        self.kernel_initializer = _initializer(kernel_initializer, "kernel_initializer", where)
        self.recurrent_initializer = _initializer(recurrent_initializer, "recurrent_initializer", where)
        self.bias_initializer = _initializer(bias_initializer, "bias_initializer", where)
        self.unit_forget_bias = check_bool(unit_forget_bias, "unit_forget_bias", where)
        self.dropout = check_float(dropout, "dropout", where, lo=0.0, hi=1.0, hi_open=True)
        self.recurrent_dropout = check_float(recurrent_dropout, "recurrent_dropout", where, lo=0.0, hi=1.0,
                                             hi_open=True)
        self.return_sequences = check_bool(return_sequences, "return_sequences", where)
        self.return_state = check_bool(return_state, "return_state", where)
        self.go_backwards = check_bool(go_backwards, "go_backwards", where)
        self.stateful = check_bool(stateful, "stateful", where)
        self._state: tuple[np.ndarray, np.ndarray] | None = None
        attach(self, kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
               bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
               kernel_constraint=kernel_constraint, recurrent_constraint=recurrent_constraint,
               bias_constraint=bias_constraint)

    # -- geometry ------------------------------------------------------------------------------
    def _spans(self) -> list[int]:
        return [d * (k - 1) + 1 for k, d in zip(self.kernel_size, self.dilation_rate, strict=True)]

    def _check_build_shape(self, shape: Shape) -> None:
        r = self.rank
        if shape.rank != r + 3:
            axes = "(batch, time, steps, channels)" if r == 1 else "(batch, time, rows, cols, channels)"
            raise InvalidInputError(f"{self.name}: expected a rank-{r + 3} input {axes}, got {shape} "
                                    f"(rank {shape.rank})")
        for n in shape.dims[2:]:
            if n is None or n < 1:
                raise InvalidInputError(f"{self.name}: the spatial axes and the channels must have known "
                                        f"sizes >= 1, got {shape}")
        if self.padding == "valid":
            for ax, (n, span) in enumerate(zip(shape.dims[2:2 + r], self._spans(), strict=True)):
                assert n is not None
                if n < span:
                    raise InvalidInputError(
                        f"{self.name}: kernel_size={self.kernel_size} (dilation_rate={self.dilation_rate}, "
                        f"{span} positions on spatial axis {ax}) is larger than the input's {n} positions "
                        f"there with padding='valid' (input {shape}); expected a kernel span of at most "
                        f"{n}, or padding='same'")

    def _check_rebuild(self, shape: Shape) -> None:
        if shape.dims[2:] != self.input_shape.dims[2:]:
            raise InvalidInputError(f"{self.name}: built for inputs {self.input_shape}, asked to build again "
                                    f"for {shape}")

    def _geometry(self) -> tuple[Conv, Conv]:
        spatial = tuple(int(n) for n in self.input_shape.dims[2:2 + self.rank])  # type: ignore[arg-type]
        conv = Conv(spatial, self.kernel_size, self.strides, self.dilation_rate, self.padding)
        ones = (1,) * self.rank
        return conv, Conv(conv.out, self.kernel_size, ones, ones, "same")

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        C, F = int(shape[-1] or 0), self.filters
        k = self.kernel_size
        self._add_weight("kernel", INITIALIZERS[self.kernel_initializer](rng, (*k, C, 4 * F), self.dtype))
        self._add_weight("recurrent_kernel",
                         INITIALIZERS[self.recurrent_initializer](rng, (*k, F, 4 * F), self.dtype))
        if self.use_bias:
            b = np.array(INITIALIZERS[self.bias_initializer](rng, (4 * F,), self.dtype))
            if self.unit_forget_bias:
                b[F:2 * F] = 1.0
            self._add_weight("bias", b)

    def _state_shape(self, shape: Shape) -> tuple[int | None, ...]:
        spatial = tuple(int(n) for n in shape.dims[2:2 + self.rank])  # type: ignore[arg-type]
        out = Conv(spatial, self.kernel_size, self.strides, self.dilation_rate, self.padding).out
        return (shape[0], *out, self.filters)

    def compute_output_shape(self, shape: Any) -> Any:
        """(B, *O, F), or (B, T, *O, F) under ``return_sequences``; with ``return_state`` the list
        ``[output, h, c]``. ``shape`` may be a list ``[x, h0, c0]``."""
        if isinstance(shape, list):
            shape = shape[0]
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        st = self._state_shape(shp)
        out = Shape((st[0], shp[1], *st[1:])) if self.return_sequences else Shape(st)
        return [out, Shape(st), Shape(st)] if self.return_state else out

    def compute_mask(self, x: Any, mask: Any) -> Any:
        out = mask if self.return_sequences else None
        return [out, None, None] if self.return_state else out

    # -- state and streaming -------------------------------------------------------------------
    @property
    def states(self) -> Any:
        """A ``stateful`` layer's carried state (``ConvLSTMState(h, c)``), or None before the first
        call and after :meth:`reset_state`."""
        return None if self._state is None else STATE(*self._state)

    def reset_state(self, state: Any = None) -> None:
        """Forget the carried state of a ``stateful`` layer (the next call starts at zeros), or
        set it to ``state`` (``ConvLSTMState(h, c)`` or ``(h, c)``, each (B, *O, F))."""
        if state is None:
            self._state = None
            return
        first = state[0] if isinstance(state, (tuple, list)) and state else None
        self._state = self.unpack_state(state, int(np.shape(first)[0]) if first is not None else 0)

    def reset_states(self, states: Any = None) -> None:
        """Keras' spelling of :meth:`reset_state`."""
        self.reset_state(states)

    def _state_grid(self, batch: int) -> tuple[int, ...]:
        conv, _ = self._geometry()
        return (batch, *conv.out, self.filters)

    def zero_state(self, batch: int) -> Any:
        """The all-zero state ``ConvLSTMState(h, c)`` for ``batch`` sequences, each (batch, *O, F)."""
        self._require_built("zero_state")
        b = check_positive_int(batch, "batch", self.name)
        shape = self._state_grid(b)
        check_array((2, *shape), self.dtype.itemsize, f"{self.name}.zero_state({b}), its states together")
        return STATE(np.zeros(shape, self.dtype), np.zeros(shape, self.dtype))

    def unpack_state(self, state: Any, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """The parts ``(h, c)`` of ``state`` (a ``ConvLSTMState`` or a tuple / list of two
        arrays) as arrays of this layer's dtype, each checked against (batch, *O, F)."""
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            got = f"a {type(state).__name__} of {len(state)}" if isinstance(state, (tuple, list)) \
                else type(state).__name__
            raise InvalidInputError(f"{self.name}: expected a ConvLSTMState (h, c) as state, got {got}")
        want = self._state_grid(batch)
        parts = []
        for n, v in zip(("h", "c"), state, strict=True):
            a = self._as_input(v, f"state {n}")
            if a.shape != want:
                raise InvalidInputError(f"{self.name}: state {n!r} must have shape {want}, got {a.shape}")
            parts.append(a)
        return parts[0], parts[1]

    def step(self, x: Any, state: Any) -> Any:
        """Advance ``state`` (``ConvLSTMState(h, c)``) by one timestep of input ``x`` (B, *S, C):
        the new state (its ``h`` is the step's output); inference, records nothing."""
        self._require_built("step")
        arr = self._as_input(x)
        if arr.ndim != self.rank + 2:
            raise InvalidInputError(f"{self.name}.step: expected one timestep (batch, "
                                    f"{', '.join(str(n) for n in self.input_shape.dims[2:])}), got shape "
                                    f"{arr.shape}")
        _, final = self.seq_init(arr[:, None], state)
        return final

    def seq(self, x: Any, ctx: Ctx | None = None) -> tuple[np.ndarray, Any]:
        """Run from the zero state: (every step's h (B, T, *O, F) in processing order, the final
        ``ConvLSTMState``)."""
        return self.seq_init(x, None, ctx)

    def seq_init(self, x: Any, state: Any, ctx: Ctx | None = None) -> tuple[np.ndarray, Any]:
        """Run ``x`` (B, T, *S, C), any number of timesteps, from ``state`` (None: zeros; a
        ``stateful`` layer's carried state is neither read nor changed): (every step's h
        (B, T, *O, F) in processing order, the final ``ConvLSTMState(h, c)``). In a training
        ``ctx`` the pass is recorded: ``layer.backward((d_seq, d_final_state), ctx)`` then returns
        ``(dx, d_state)`` (the gradient of ``state``, None when it was None) and puts the weight
        gradients in ``ctx``; ``d_final_state`` may be None."""
        c = Ctx.inference() if ctx is None else ctx
        arr = self._check_input(x, check_steps=False)
        init = None if state is None else self.unpack_state(state, arr.shape[0])
        out, h_f, c_f = self._pass(arr, init, c, True, "seq")
        return out, STATE(h_f, c_f)

    # -- passes --------------------------------------------------------------------------------
    def _check_input(self, x: Any, check_steps: bool = True) -> np.ndarray:
        """``x`` as a (B, T, *S, C) array; ``check_steps=False`` (streaming) accepts any T."""
        self._require_built()
        arr = self._as_input(x)
        want = self.input_shape.dims
        if arr.ndim != len(want) or arr.shape[2:] != tuple(want[2:]) or arr.shape[1] < 1:
            raise InvalidInputError(f"{self.name}: expected an input (batch, time >= 1, "
                                    f"{', '.join(str(n) for n in want[2:])}), got shape {arr.shape}")
        if check_steps and want[1] is not None and want[1] != arr.shape[1]:
            raise InvalidInputError(f"{self.name}: built for {want[1]} timesteps, got shape {arr.shape}")
        return arr

    def _split(self, x: Any) -> tuple[np.ndarray, Any]:
        if isinstance(x, (list, tuple)):
            if len(x) != 3:
                raise InvalidInputError(f"{self.name}: expected an input or a list [x, h, c] (the initial "
                                        f"state), got a list of {len(x)}")
            return self._check_input(x[0]), (x[1], x[2])
        return self._check_input(x), None

    def forward(self, x: Any, ctx: Ctx) -> Any:
        """Run the layer (see the class docstring); a training ``ctx`` records the pass."""
        arr, init = self._split(x)
        out, h_f, c_f = self._pass(arr, init, ctx, self.return_sequences, "layer")
        return [out, h_f, c_f] if self.return_state else out

    def _pass(self, arr: np.ndarray, init: Any, ctx: Ctx, keep_seq: bool,
              api: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One pass of the checked input ``arr`` from ``init`` (None: zeros, or the carried state
        of a ``stateful`` layer when ``api`` is ``"layer"``): (every step's output when
        ``keep_seq``, else the last one; the final h; the final c). ``api`` ``"seq"`` (the
        streaming calls) neither reads nor writes a carried state; a training ``ctx`` records
        the pass and how its backward takes its gradient."""
        B, T = arr.shape[:2]
        conv, rconv = self._geometry()
        F, P = self.filters, conv.positions
        st_shape = (B, *conv.out, F)
        if init is not None:
            h0, c0 = (self._as_input(v, n) for v, n in zip(init, ("initial h", "initial c"), strict=True))
            for n, v in (("h", h0), ("c", c0)):
                if v.shape != st_shape:
                    raise InvalidInputError(f"{self.name}: the initial state {n} must have shape {st_shape}, "
                                            f"got {v.shape}")
        elif api == "layer" and self.stateful and self._state is not None:
            h0, c0 = self._state
            if h0.shape[0] != B:
                raise InvalidInputError(f"{self.name}: a stateful layer keeps its batch size: the carried "
                                        f"state holds {h0.shape[0]} rows, the input {B}; call "
                                        f"reset_state() first")
        else:
            h0 = c0 = np.zeros(st_shape, self.dtype)
        mask = ctx.mask
        valid = None
        if mask is not None:
            mask.check(B, T, self.name)
            valid = mask.valid(T)
        xs = arr[:, ::-1] if self.go_backwards else arr
        ms = None if valid is None else (valid[:, ::-1] if self.go_backwards else valid)
        frames = np.ascontiguousarray(xs).reshape(B * T, *arr.shape[2:])
        W = self._weights["kernel"].reshape(-1, 4 * F)
        U = self._weights["recurrent_kernel"].reshape(-1, 4 * F)
        drop = rdrop = None
        if ctx.drops and self.dropout > 0.0:
            drop = self._drop_masks(ctx, (B, *arr.shape[2:]), self.dropout)
        if ctx.drops and self.recurrent_dropout > 0.0:
            rdrop = self._drop_masks(ctx, st_shape, self.recurrent_dropout)
        if drop is None:
            xw = matmul(conv.cols(frames), np.ascontiguousarray(W))
        else:
            xw = np.empty((B * T * P, 4 * F), self.dtype)
            x5 = xs.reshape(B, T, *arr.shape[2:])
            for g in range(4):
                cols = conv.cols(np.ascontiguousarray(x5 * drop[g][:, None]).reshape(B * T, *arr.shape[2:]))
                xw[:, g * F:(g + 1) * F] = matmul(cols, np.ascontiguousarray(W[:, g * F:(g + 1) * F]))
        if self.use_bias:
            xw += self._weights["bias"]
        xw = xw.reshape(B, T, P, 4 * F)
        keep = ctx.training_mode
        h, c = h0.reshape(B, P, F), c0.reshape(B, P, F)
        out_prev = np.zeros((B, P, F), self.dtype)
        outs = np.empty((B, T, P, F), self.dtype) if keep_seq else None
        rec: list[tuple[np.ndarray, ...]] = []
        ra, act = self.recurrent_activation, self.activation
        for t in range(T):
            z = np.array(xw[:, t])
            z += self._rconv(rconv, h, rdrop, U, B)
            ra(z[..., :2 * F], out=z[..., :2 * F])
            act(z[..., 2 * F:3 * F], out=z[..., 2 * F:3 * F])
            ra(z[..., 3 * F:], out=z[..., 3 * F:])
            i, f, g_, o = z[..., :F], z[..., F:2 * F], z[..., 2 * F:3 * F], z[..., 3 * F:]
            c_new = f * c + i * g_
            act_c = act(c_new)
            h_new = o * act_c
            if keep:
                rec.append((h, c, z, act_c))
            if ms is not None:
                m = ms[:, t][:, None, None]
                out_t = np.where(m, h_new, out_prev)
                h, c = np.where(m, h_new, h), np.where(m, c_new, c)
            else:
                out_t, h, c = h_new, h_new, c_new
            if outs is not None:
                outs[:, t] = out_t
            out_prev = out_t
        lengths = mask is not None and mask.kind == "lengths"
        if outs is not None:
            if lengths:
                assert ms is not None
                outs *= ms[:, :, None, None]
            out = outs.reshape(B, T, *conv.out, F)
        else:
            out = np.array(out_prev).reshape(st_shape)
        h_f, c_f = np.array(h).reshape(st_shape), np.array(c).reshape(st_shape)
        if self.stateful and api == "layer":
            self._state = (h_f.copy(), c_f.copy())
        if keep:
            ctx.save(self, (arr.shape, frames, ms, lengths, drop, rdrop, rec, out.shape, init is not None,
                            keep_seq, api))
        return out, h_f, c_f

    def _drop_masks(self, ctx: Ctx, shape: tuple[int, ...], rate: float) -> np.ndarray:
        """Keras' four inverted-dropout masks (one per gate) of ``shape``: (4, *shape)."""
        keep = (ctx.rng.random((4, *shape)) >= rate).astype(self.dtype)
        keep /= self.dtype.type(1.0 - rate)
        return keep

    def _rconv(self, rconv: Conv, h: np.ndarray, rdrop: np.ndarray | None, U: np.ndarray,
               B: int) -> np.ndarray:
        """The recurrent convolution of ``h`` (B, P, F): (B, P, 4F)."""
        F, P = self.filters, rconv.positions
        hs = h.reshape(B, *rconv.spatial, F)
        if rdrop is None:
            return matmul(rconv.cols(hs), np.ascontiguousarray(U)).reshape(B, P, 4 * F)
        res = np.empty((B * P, 4 * F), self.dtype)
        for g in range(4):
            res[:, g * F:(g + 1) * F] = matmul(rconv.cols(hs * rdrop[g]),
                                               np.ascontiguousarray(U[:, g * F:(g + 1) * F]))
        return res.reshape(B, P, 4 * F)

    def backward(self, grad: Any, ctx: Ctx) -> Any:
        """BPTT over the pass: adds the weights' gradients into ``ctx`` and returns dL/dx (B, T,
        *S, C) in input order (``[dx, dh0, dc0]`` when the forward had an initial state). With
        ``return_state``, ``grad`` is ``[d_output, d_h, d_c]`` (an entry None: zero). After a
        pass recorded by :meth:`seq_init`, ``grad`` is ``(d_seq, d_final_state)`` and the result
        ``(dx, d_state)`` (``d_state`` a ``ConvLSTMState``, None when the pass started at zeros)."""
        self._require_built("backward")
        in_shape, frames, ms, lengths, drop, rdrop, rec, out_shape, given, keep_seq, api = ctx.peek(self)
        B, T = in_shape[:2]
        conv, rconv = self._geometry()
        F, P = self.filters, conv.positions
        st_shape = (B, *conv.out, F)
        d_h = d_c = None
        if api == "seq":
            if not isinstance(grad, tuple) or len(grad) != 2:
                raise InvalidInputError(f"{self.name}: a pass recorded by seq_init takes backward((d_seq, "
                                        f"d_final_state), ctx); got {type(grad).__name__}")
            grad, d_fin = grad
            if d_fin is not None:
                if not isinstance(d_fin, (tuple, list)) or len(d_fin) != 2:
                    raise InvalidInputError(f"{self.name}: d_final_state must be a ConvLSTMState (d_h, d_c) "
                                            f"or None, got {type(d_fin).__name__}")
                d_h, d_c = d_fin
        elif self.return_state:
            if not isinstance(grad, (list, tuple)) or len(grad) != 3:
                raise InvalidInputError(f"{self.name}: with return_state, backward expects a list [d_output, "
                                        f"d_h, d_c], got {type(grad).__name__}")
            grad, d_h, d_c = grad
        g_out = np.zeros(out_shape, self.dtype) if grad is None else self._as_grad(grad, out_shape)
        dh = np.zeros((B, P, F), self.dtype) if d_h is None else \
            np.array(self._as_grad(d_h, st_shape)).reshape(B, P, F)
        dc = np.zeros((B, P, F), self.dtype) if d_c is None else \
            np.array(self._as_grad(d_c, st_shape)).reshape(B, P, F)
        ctx.load(self)
        W = self._weights["kernel"].reshape(-1, 4 * F)
        U = self._weights["recurrent_kernel"].reshape(-1, 4 * F)
        if keep_seq:
            gseq = g_out.reshape(B, T, P, F)
            if lengths:
                assert ms is not None
                gseq = gseq * ms[:, :, None, None]
            carry = np.zeros((B, P, F), self.dtype)
        else:
            gseq, carry = None, np.array(g_out).reshape(B, P, F)
        dxw = np.empty((B, T, P, 4 * F), self.dtype)
        dU = np.zeros_like(U)
        ra, act = self.recurrent_activation, self.activation
        for t in range(T - 1, -1, -1):
            h_prev, c_prev, z, act_c = rec[t]
            dh_pass: np.ndarray | None
            dc_pass: np.ndarray | None
            gout = carry if gseq is None else carry + gseq[:, t]
            if ms is not None:
                m = ms[:, t][:, None, None]
                dh_new, dc_new = np.where(m, dh + gout, 0), np.where(m, dc, 0)
                dh_pass, dc_pass, carry = np.where(m, 0, dh), np.where(m, 0, dc), np.where(m, 0, gout)
            else:
                dh_new, dc_new = dh + gout, dc
                dh_pass = dc_pass = None
                carry = np.zeros_like(carry)
            i, f, g_, o = z[..., :F], z[..., F:2 * F], z[..., 2 * F:3 * F], z[..., 3 * F:]
            dz = dxw[:, t]
            dz[..., 3 * F:] = ra.vjp(o, dh_new * act_c)
            dcn = dc_new + act.vjp(act_c, dh_new * o)
            dz[..., :F] = ra.vjp(i, dcn * g_)
            dz[..., F:2 * F] = ra.vjp(f, dcn * c_prev)
            dz[..., 2 * F:3 * F] = act.vjp(g_, dcn * i)
            dc = dcn * f
            dh = self._rconv_back(rconv, h_prev, rdrop, U, dz, dU, B)
            if dh_pass is not None:
                assert dc_pass is not None
                dh += dh_pass
                dc += dc_pass
        ctx.add_grad(self, "recurrent_kernel", dU.reshape(self._weights["recurrent_kernel"].shape))
        dxw2 = dxw.reshape(B * T * P, 4 * F)
        if self.use_bias:
            ctx.add_grad(self, "bias", dxw2.sum(axis=0))
        S, C = tuple(in_shape[2:-1]), in_shape[-1]
        need_x = given or ctx.needs_input_grad(self)
        dx = None
        if drop is None:
            cols = conv.cols(frames)
            ctx.add_grad(self, "kernel", matmul_tn(cols, dxw2).reshape(self._weights["kernel"].shape))
            if need_x:
                dx = conv.adjoint(matmul(dxw2, np.ascontiguousarray(W), trans_b=True), B * T, C)
        else:
            dW = np.empty_like(W)
            dx = np.zeros((B, T, *S, C), self.dtype) if need_x else None
            x5 = frames.reshape(B, T, *S, C)
            for g in range(4):
                sl = slice(g * F, (g + 1) * F)
                dg = np.ascontiguousarray(dxw2[:, sl])
                cols = conv.cols(np.ascontiguousarray(x5 * drop[g][:, None]).reshape(B * T, *S, C))
                dW[:, sl] = matmul_tn(cols, dg)
                if dx is not None:
                    d = conv.adjoint(matmul(dg, np.ascontiguousarray(W[:, sl]), trans_b=True), B * T, C)
                    dx += d.reshape(B, T, *S, C) * drop[g][:, None]
            ctx.add_grad(self, "kernel", dW.reshape(self._weights["kernel"].shape))
        if dx is not None:
            dx = dx.reshape(in_shape)
            if self.go_backwards:
                dx = np.ascontiguousarray(dx[:, ::-1])
        if api == "seq":
            return dx, (STATE(dh.reshape(st_shape), dc.reshape(st_shape)) if given else None)
        if given:
            return [dx, dh.reshape(st_shape), dc.reshape(st_shape)]
        return dx

    def _rconv_back(self, rconv: Conv, h_prev: np.ndarray, rdrop: np.ndarray | None, U: np.ndarray,
                    dz: np.ndarray, dU: np.ndarray, B: int) -> np.ndarray:
        """Adds the recurrent kernel's gradient into ``dU``; returns dL/dh_prev (B, P, F)."""
        F, P = self.filters, rconv.positions
        hs = h_prev.reshape(B, *rconv.spatial, F)
        dz2 = np.ascontiguousarray(dz).reshape(B * P, 4 * F)
        if rdrop is None:
            dU += matmul_tn(rconv.cols(hs), dz2)
            return rconv.adjoint(matmul(dz2, np.ascontiguousarray(U), trans_b=True), B, F).reshape(B, P, F)
        dh = np.zeros((B, *rconv.spatial, F), self.dtype)
        for g in range(4):
            sl = slice(g * F, (g + 1) * F)
            dg = np.ascontiguousarray(dz2[:, sl])
            dU[:, sl] += matmul_tn(rconv.cols(hs * rdrop[g]), dg)
            dh += rconv.adjoint(matmul(dg, np.ascontiguousarray(U[:, sl]), trans_b=True), B, F) * rdrop[g]
        return dh.reshape(B, P, F)

    # -- configuration -------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "filters": self.filters, "kernel_size": list(self.kernel_size), "strides": list(self.strides),
            "padding": self.padding, "data_format": "channels_last",
            "dilation_rate": list(self.dilation_rate), "activation": self.activation.name,
            "recurrent_activation": self.recurrent_activation.name, "use_bias": self.use_bias,
            "kernel_initializer": self.kernel_initializer,
            "recurrent_initializer": self.recurrent_initializer,
            "bias_initializer": self.bias_initializer, "unit_forget_bias": self.unit_forget_bias,
            "dropout": self.dropout, "recurrent_dropout": self.recurrent_dropout,
            "return_sequences": self.return_sequences, "return_state": self.return_state,
            "go_backwards": self.go_backwards, "stateful": self.stateful}
        cfg.update(super().get_config())
        cfg.update(config_of(self))
        return cfg


class ConvLSTM1D(ConvLSTM):
    """Keras 3's ``ConvLSTM1D``: inputs (B, T, steps, C), state (B, steps', F); see
    :class:`ConvLSTM` for the arguments, the equations, the weights and the masks."""

    rank: ClassVar[int] = 1


class ConvLSTM2D(ConvLSTM):
    """Keras 3's ``ConvLSTM2D``: inputs (B, T, rows, cols, C), state (B, rows', cols', F); see
    :class:`ConvLSTM` for the arguments, the equations, the weights and the masks."""

    rank: ClassVar[int] = 2
