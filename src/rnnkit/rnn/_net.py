"""Multi-layer, optionally bidirectional RNN / LSTM / GRU networks with PyTorch's parameter names
and layouts (PyTorch's ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``), run whole or step by step
(``zero_state``, ``step``, ``seq``, ``seq_init``).

Parameters (``k`` = layer, ``_reverse`` for the second direction), exactly PyTorch's::

    weight_ih_l{k}[_reverse]   (G*H, in_k)    in_0 = in_dim, in_k = O * num_directions
    weight_hh_l{k}[_reverse]   (G*H, O)       O = H, or proj_size P for a projected LSTM
    bias_ih_l{k}[_reverse]     (G*H,)          only with has_biases
    bias_hh_l{k}[_reverse]     (G*H,)
    weight_hr_l{k}[_reverse]   (P, H)          only for an LSTM with proj_size P

with gate blocks ``i, f, g, o`` (LSTM), ``r, z, n`` (GRU, reset applied after the recurrent
matmul: PyTorch's only form) and one block for RNN (tanh or relu). Every (layer, direction)
is an ``rk.LSTM`` / ``rk.GRU`` (``reset_after=True``) / ``rk.SimpleRNN`` of its own (the second
direction with ``go_backwards``), made once when the net is built; :mod:`rnnkit._layouts`
converts the weights and the gradients back. The net keeps its matrices in Fortran order, so
each layer's ``kernel`` / ``recurrent_kernel`` / ``projection_kernel`` is the parameter's
transpose itself, a view (a GRU's: one copy with the ``r``, ``z`` blocks swapped), and the
gradients come back as the layers' gradients transposed, without a copy; an optimizer step
replaces one parameter and the one layer weight made from it, nothing else. So a state dict
copied from ``torch.nn.RNN/LSTM/GRU`` gives PyTorch's outputs, and the gradients come back under
PyTorch's names.

Outputs follow PyTorch: ``(B, T, D*O)`` (``(T, B, D*O)`` when ``batch_first=False``), each
timestep ``[forward | reverse]`` in INPUT order; final states ``(num_layers * D, B, O)``
(an LSTM's ``c``: ``(num_layers * D, B, H)``), as the cell's state type (``LSTMState``,
``GRUState``, ``SimpleRNNState``).
Dropout (``config.dropout``) acts on the outputs of every layer but the last, only in a training
``Ctx`` and only when ``config.train`` is True.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnkit._budget import check_array
from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, WeightShapeError
from rnnkit._layer import Layer, as_weight_array, check_bool, check_finite_weight, check_positive_int
from rnnkit._layouts import RK_WEIGHT_OF, from_torch_weight
from rnnkit._shape import Shape
from rnnkit.layers import register_layer
from rnnkit.recurrent import RecurrentLayer
from rnnkit.rnn._config import RNNConfig
from rnnkit.rnn._directions import direction_layer, take_torch_grads

_GATES = {"rnn": 1, "lstm": 4, "gru": 3}


class RNNNet(Layer):
    """A stack of recurrent layers in PyTorch layout. Build with :func:`lstm`, :func:`gru` or
    :func:`rnn`. ``config`` is an :class:`RNNConfig` (or its ``to_config()`` dict, as a model
    file stores it)."""

    def __init__(self, mode: str, in_dim: int, hidden_dim: int,
                 config: RNNConfig | dict[str, Any] | None = None, *, seed: int | None = None,
                 dtype: Any = "float32", name: str | None = None, return_state: bool = False) -> None:
        if mode not in _GATES:
            raise InvalidParameterError(f"RNNNet: mode must be 'rnn', 'lstm' or 'gru', got {mode!r}")
        super().__init__(seed=seed, dtype=dtype, name=name if name is not None else mode.upper())
        self.mode = mode
        self.gates = _GATES[mode]
        self.in_dim = check_positive_int(in_dim, "in_dim", self.name)
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim", self.name)
        self.config = RNNConfig() if config is None else RNNConfig.from_config(config)
        P = self.config.proj_size
        if P and (mode != "lstm" or P >= self.hidden_dim):
            raise InvalidParameterError(
                f"{self.name}: proj_size applies to an LSTM only and must be < hidden_dim "
                f"({self.hidden_dim}), got proj_size={P} for mode {mode!r}")
        if mode != "rnn" and self.config.nonlinearity != "tanh":
            raise InvalidParameterError(
                f"{self.name}: nonlinearity={self.config.nonlinearity!r} applies to rnnkit.rnn.rnn only")
        self.directions = 2 if self.config.bidirectional else 1
        self.return_state = check_bool(return_state, "return_state", self.name)
        #: the width of each direction's output and hidden state: proj_size, or hidden_dim
        self.out_dim = P or self.hidden_dim
        self._layers: dict[tuple[int, int], RecurrentLayer] = {}
        self.build(Shape((None, None, self.in_dim)))

    # -- parameters --------------------------------------------------------------------------
    def _suffix(self, k: int, d: int) -> str:
        return f"_l{k}" + ("_reverse" if d else "")

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        c, H, G, out = self.config, self.hidden_dim, self.gates, self.out_dim
        self._layers = {}  # a (re)build draws new weights: the derived layers are made below
        for k in range(c.num_layers):
            in_k = self.in_dim if k == 0 else out * self.directions
            for d in range(self.directions):
                sfx = self._suffix(k, d)
                self._add_weight("weight_ih" + sfx, c.w_ih_init.draw(rng, (G * H, in_k), self.dtype, G))
                self._add_weight("weight_hh" + sfx, c.w_hh_init.draw(rng, (G * H, out), self.dtype, G))
                if c.has_biases:
                    for nm, init in (("bias_ih", c.b_ih_init), ("bias_hh", c.b_hh_init)):
                        val = (np.zeros(G * H, self.dtype) if init is None
                               else init.draw(rng, (G * H,), self.dtype))
                        self._add_weight(nm + sfx, val)
                if c.proj_size:
                    hr = c.w_hh_init.draw(rng, (c.proj_size, H), self.dtype, 1)
                    self._add_weight("weight_hr" + sfx, hr)
        for k in range(c.num_layers):  # eagerly, so no pass ever changes the net
            for d in range(self.directions):
                self._layers[(k, d)] = self._make_layer(k, d)
        for name in self._weights:   # the layers' matrices: views of the parameters
            self._refresh(name)

    def _store_weight(self, name: str, value: np.ndarray) -> None:
        """Keep ``value`` as parameter ``name``: a read-only copy in the net's dtype, a matrix in
        Fortran order, so that its transpose -- the direction layer's weight, in rnnkit's layout
        (``kernel = weight_ih.T``) -- is C-contiguous and is that layer's weight without a copy
        (a GRU's needs its gate blocks permuted: one copy, no transposition)."""
        arr = np.array(value, dtype=self.dtype, copy=True, order="F")
        arr.flags.writeable = False
        self._weights[name] = arr.view()

    def set_weight(self, name: str, value: Any, *, check_finite: bool = True) -> None:
        super().set_weight(name, value, check_finite=check_finite)
        self._refresh(name)

    def _install(self, name: str, arr: np.ndarray) -> None:
        """The optimizer's write (:meth:`rnnkit.Layer._install`): ``arr`` becomes the parameter
        without a copy when it can (a new array of the net's dtype in the parameters' Fortran
        order, as the optimizer's rules make it from a parameter so stored), and the one rnnkit
        weight made from it is updated in the direction's layer (:meth:`_refresh`: for an LSTM
        or RNN a view, no copy); nothing is rebuilt."""
        old = self._weights.get(name)
        if (old is None or arr.shape != old.shape or arr.dtype != self.dtype or not arr.flags.owndata
                or not arr.flags.f_contiguous or not arr.flags.writeable):
            self.set_weight(name, arr, check_finite=False)   # the trainer checks the new weights
            return
        arr.flags.writeable = False
        self._weights[name] = arr.view()
        self._refresh(name)

    def _refresh(self, name: str) -> None:
        """Install in the direction's rnnkit layer the weight that parameter ``name`` makes
        (``weight_ih_l1`` -> layer 1's ``kernel``; a bias -> the ``bias`` both biases make), the
        same values a rebuild from every parameter gives: the parameter's transpose itself (a
        read-only view) where no gate is moved, else a new read-only array in the net's dtype."""
        m = re.fullmatch(r"(\w+)_l(\d+)(_reverse)?", name)
        assert m is not None
        k, d = int(m.group(2)), int(m.group(3) is not None)
        layer = self._layers[(k, d)]
        rk = RK_WEIGHT_OF[m.group(1)]
        value = from_torch_weight(layer.cell, rk, self._torch_params(k, d), self.dtype)
        if value.dtype != self.dtype or not value.flags.c_contiguous:
            value = _c_copy(value, self.dtype)
        _freeze(value)
        layer._share(rk, value)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install PyTorch-named tensors (numpy arrays, or anything ``np.asarray`` reads, such as
        CPU torch tensors after ``.detach().numpy()``). Every name must be present and fit, and
        every value be finite in the net's dtype (NaN or Inf, or a value the cast would make Inf:
        InvalidInputError naming the tensor, as the file loaders refuse them);
        all are checked before anything changes."""
        if not isinstance(state, Mapping):
            raise TypeError(f"{self.name}.load_state_dict: state must be a mapping of names to arrays, "
                            f"got {type(state).__name__}")
        missing = sorted(set(self._weights) - set(state))
        extra = sorted(map(str, set(state) - set(self._weights)))
        if missing or extra:
            raise InvalidInputError(f"{self.name}.load_state_dict: missing {missing}, unexpected {extra}")
        where = f"{self.name}.load_state_dict"
        arrs = {name: as_weight_array(state[name], f"{where}: {name!r}") for name in self._weights}
        for name, a in arrs.items():
            old = self._weights[name]
            if a.shape != old.shape:
                raise WeightShapeError(name, old.shape, a.shape, f"layer {self.name}")
            if a.dtype.kind not in "biuf":
                raise InvalidInputError(f"{where}: {name!r} must hold real numbers, got {a.dtype}")
            arrs[name] = check_finite_weight(a, f"{where}: {name!r}", self.dtype)
        with WEIGHTS:   # one write: a reader in another thread sees all of it or none
            for name, a in arrs.items():
                self.set_weight(name, a, check_finite=False)    # checked above

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of every parameter under its PyTorch name."""
        return {n: np.array(v) for n, v in self._weights.items()}

    def _layer(self, k: int, d: int) -> RecurrentLayer:
        """The rnnkit layer that runs (layer k, direction d), made when the weights change."""
        return self._layers[(k, d)]

    def _torch_params(self, k: int, d: int) -> dict[str, np.ndarray]:
        """The parameters of (layer k, direction d) under PyTorch's names without the suffix."""
        sfx = self._suffix(k, d)
        return {base: w for base in RK_WEIGHT_OF if (w := self._weights.get(base + sfx)) is not None}

    def _make_layer(self, k: int, d: int) -> RecurrentLayer:
        """A new rnnkit layer for (layer k, direction d), weights converted from PyTorch's."""
        return direction_layer(self.mode, self.hidden_dim, self.config, bool(d), self.dtype,
                               self._torch_params(k, d))

    # -- shapes ------------------------------------------------------------------------------
    @property
    def input_layout(self) -> str:
        """``"batch_first"``: inputs (batch, seq_len, features); ``"time_major"``: (seq_len,
        batch, features) -- as ``config.batch_first`` says. A model reads a Keras-style
        ``input_shape`` (one sample, no batch axis) by it: ``(None, F)`` builds ``(None, None, F)``
        either way, ``(T, F)`` builds ``(None, T, F)`` or ``(T, None, F)``. A model's
        ``fit`` / ``evaluate`` / ``predict`` cut and shuffle data along axis 0, which is time for a
        time-major net, so a model holding one refuses ``batch_size=``, ``shuffle=True``,
        ``validation_split`` and sample weights (InvalidParameterError): give it whole batches,
        or use ``batch_first=True``."""
        return "batch_first" if self.config.batch_first else "time_major"

    def _check_build_shape(self, shape: Shape) -> None:
        if shape.rank != 3 or shape[-1] != self.in_dim:
            order = "(batch, seq_len, features)" if self.config.batch_first else "(seq_len, batch, features)"
            raise InvalidInputError(f"{self.name}: expected a 3D input shape {order} with {self.in_dim} "
                                    f"features, got {shape}")

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        s = Shape.of(shape)
        return Shape((s[0], s[1], self.out_dim * self.directions))

    def _check(self, x: Any) -> np.ndarray:
        arr = self._as_input(x)
        if arr.ndim != 3 or arr.shape[2] != self.in_dim:
            order = "(batch, seq_len, features)" if self.config.batch_first else "(seq_len, batch, features)"
            raise InvalidInputError(
                f"{self.name}: expected a 3D input {order} with {self.in_dim} features, got shape {arr.shape}"
            )
        return arr if self.config.batch_first else arr.transpose(1, 0, 2)

    def _out(self, y: np.ndarray) -> np.ndarray:
        return y if self.config.batch_first else np.ascontiguousarray(y.transpose(1, 0, 2))

    # -- the RNN trait -----------------------------------------------------------------------
    def _state_sizes(self) -> tuple[int, ...]:
        return self._layers[(0, 0)].cell.state_sizes()

    def zero_state(self, batch: int) -> Any:
        b = check_positive_int(batch, "batch", self.name)
        L = self.config.num_layers * self.directions
        cell = self._layers[(0, 0)].cell
        sizes = self._state_sizes()
        check_array((L, b, sum(sizes)), np.dtype(self.dtype).itemsize,
                    f"{self.name}.zero_state({b}), its states together")
        return cell.make_state(tuple(np.zeros((L, b, n), self.dtype) for n in sizes))

    def step(self, x: Any, state: Any) -> Any:
        """One timestep ``x`` (B, in_dim) through every layer; returns the new state."""
        arr = self._as_input(x)
        if arr.ndim != 2:
            raise InvalidInputError(f"{self.name}.step: expected (batch, features), got shape {arr.shape}")
        seq_in = arr[:, None, :] if self.config.batch_first else arr[None, :, :]
        return self.seq_init(seq_in, state)[1]

    def seq(self, x: Any) -> tuple[np.ndarray, Any]:
        """The whole sequence from the zero state: (output, final state)."""
        arr = self._check(x)
        return self._run(arr, self.zero_state(arr.shape[0]))

    def seq_init(self, x: Any, state: Any, ctx: Ctx | None = None) -> tuple[np.ndarray, Any]:
        """The whole sequence from ``state``: (output, final state). Records nothing, unless
        ``ctx`` is a training context: then ``net.backward((d_output, d_final_state), ctx)``
        returns ``(dx, d_state)`` and puts the weight gradients in ``ctx``."""
        if ctx is None or not ctx.training_mode:
            return self._run(self._check(x), state)
        out, final = self._forward(self._check(x), state, ctx, "seq")
        return out, self._layers[(0, 0)].cell.make_state(final)

    def _state_parts(self, state: Any, B: int) -> tuple[np.ndarray, ...]:
        L, D = self.config.num_layers, self.directions
        names = self._layers[(0, 0)].cell.state_names
        if not isinstance(state, (tuple, list)) or len(state) != len(names):
            raise InvalidInputError(f"{self.name}: expected the state parts ({', '.join(names)}), got "
                                    f"{type(state).__name__}")
        parts = tuple(self._as_input(q, "state") for q in state)
        for name, q, n in zip(names, parts, self._state_sizes(), strict=True):
            if q.shape != (L * D, B, n):
                raise InvalidInputError(f"{self.name}: state {name!r} must have shape {(L * D, B, n)}, "
                                        f"got {q.shape}")
        return parts

    def _run(self, x: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        L, D, B = self.config.num_layers, self.directions, x.shape[0]
        cell = self._layers[(0, 0)].cell
        cls = type(cell.make_state(tuple(np.empty(0) for _ in cell.state_names)))
        if not isinstance(state, cls):
            raise InvalidInputError(f"{self.name}: expected a {cls.__name__}, got {type(state).__name__}")
        parts = tuple(self._as_input(p, "state") for p in state)
        for name, p, n in zip(cell.state_names, parts, self._state_sizes(), strict=True):
            if p.shape != (L * D, B, n):
                raise InvalidInputError(
                    f"{self.name}: state {name!r} must have shape {(L * D, B, n)}, got {p.shape}")
        finals: list[list[np.ndarray]] = [[] for _ in parts]
        inp = x
        for k in range(L):
            outs = []
            for d in range(D):
                layer = self._layer(k, d)
                y, fin = layer.seq_init(inp, tuple(p[k * D + d] for p in parts))
                outs.append(y[:, ::-1] if d else y)
                for lst, f in zip(finals, fin, strict=True):
                    lst.append(f)
            inp = np.concatenate(outs, axis=-1) if D == 2 else outs[0]
        new = cell.make_state(tuple(np.stack(f) for f in finals))
        return self._out(np.ascontiguousarray(inp)), new

    # -- training ----------------------------------------------------------------------------
    supports_masking = True

    def forward(self, x: Any, ctx: Ctx) -> Any:
        """The output sequence; a training ``ctx`` records for backward. ``x`` may be a list
        ``[x, *initial_state_parts]`` (each ``(num_layers * D, B, width)``, PyTorch's ``h_0`` /
        ``c_0``); ``ctx.mask`` (always (B, T)) marks the real steps of a padded batch
        (``lengths``: PyTorch's packed sequences). With ``return_state`` the result is
        ``[output, *final_state_parts]`` (PyTorch's ``h_n`` / ``c_n``)."""
        init = None
        if isinstance(x, (list, tuple)):
            names = self._layers[(0, 0)].cell.state_names
            if len(x) != 1 + len(names):
                raise InvalidInputError(f"{self.name}: expected an input or a list [x, {', '.join(names)}] "
                                        f"(the initial state, PyTorch's h_0 / c_0), got a list of {len(x)}")
            x, init = x[0], tuple(x[1:])
        out, final = self._forward(self._check(x), init, ctx, "layer")
        return [out, *final] if self.return_state else out

    def compute_mask(self, x: Any, mask: Any) -> Any:
        return [mask] + [None] * len(self._layers[(0, 0)].cell.state_names) if self.return_state else mask

    def _align(self, y: np.ndarray, mask: Any) -> np.ndarray:
        """A reverse direction's outputs (processing order) in input order (an involution)."""
        return y[:, ::-1] if mask is None else mask.reverse_time(y)

    def _forward(self, arr: np.ndarray, init: Any, ctx: Ctx, api: str) -> tuple[np.ndarray, tuple[Any, ...]]:
        L, D, p = self.config.num_layers, self.directions, float(self.config.dropout)
        B = arr.shape[0]
        mask = ctx.mask
        parts = None if init is None else self._state_parts(init, B)
        layers = {(k, d): self._layer(k, d) for k in range(L) for d in range(D)}
        drops: list[np.ndarray | None] = []
        finals: list[list[np.ndarray]] = [[] for _ in self._state_sizes()]
        inp = arr
        for k in range(L):
            outs = []
            for d in range(D):
                x_in: Any = inp if parts is None else [inp, *(q[k * D + d] for q in parts)]
                y, *fin = layers[(k, d)].forward(x_in, ctx)
                outs.append(self._align(y, mask) if d else y)
                for lst, f in zip(finals, fin, strict=True):
                    lst.append(f)
            inp = np.concatenate(outs, axis=-1) if D == 2 else outs[0]
            drop = None
            if ctx.drops and self.config.train and p > 0.0 and k < L - 1:
                drop = (ctx.rng.random(inp.shape) >= p).astype(self.dtype) / (1.0 - p)
                inp = inp * drop
            drops.append(drop)
        ctx.save(self, {"layers": layers, "drops": drops, "out_shape": inp.shape, "mask": mask,
                        "given": parts is not None, "api": api})
        return self._out(np.ascontiguousarray(inp)), tuple(np.stack(f) for f in finals)

    def backward(self, grad: Any, ctx: Ctx) -> Any:
        """dL/dx (``[dx, *d_initial_state_parts]`` when the forward had an initial state);
        gradients land in ``ctx`` under PyTorch's names: ``ctx.grad(net, "weight_ih_l0")``.
        With ``return_state``, ``grad`` is ``[d_output, *d_final_state_parts]`` (any entry None:
        zero);
        after :meth:`seq_init` in a training ``ctx`` it is ``(d_output, d_final_state)`` and
        the result ``(dx, d_state)``."""
        cache = ctx.peek(self)
        g_state = None
        if cache["api"] == "seq" or self.return_state:
            n = 2 if cache["api"] == "seq" else 1 + len(self._state_sizes())
            if not isinstance(grad, (list, tuple)) or len(grad) != n:
                names = ", ".join("d_" + s for s in self._layers[(0, 0)].cell.state_names)
                want = "(d_output, d_final_state)" if n == 2 else f"a list [d_output, {names}]"
                raise InvalidInputError(f"{self.name}: backward expects {want}, got {type(grad).__name__}")
            grad, g_state = grad[0], (grad[1] if cache["api"] == "seq" else grad[1:])
        if grad is None:   # no gradient for the output (only the states are used downstream)
            shape = cache["out_shape"]
            grad = np.zeros(shape if self.config.batch_first else (shape[1], shape[0], shape[2]), self.dtype)
        g = self._as_input(grad, "upstream gradient")
        if g.ndim == 3 and not self.config.batch_first:
            g = g.transpose(1, 0, 2)
        if g.shape != cache["out_shape"]:
            raise InvalidInputError(
                f"{self.name}: expected a gradient of shape {cache['out_shape']} (batch first), "
                f"got {g.shape}"
            )
        B = g.shape[0]
        sizes = self._state_sizes()
        L, D, H = self.config.num_layers, self.directions, self.out_dim
        gs = None if g_state is None or all(q is None for q in g_state) else tuple(
            np.zeros((L * D, B, n), self.dtype) if q is None else self._as_input(q, "state gradient")
            for q, n in zip(g_state, sizes, strict=True))
        ctx.load(self)  # consumed only once the gradient fits
        d_init = [np.zeros((L * D, B, n), self.dtype) for n in sizes]
        for k in range(L - 1, -1, -1):
            if cache["drops"][k] is not None:
                g = g * cache["drops"][k]
            dx = None
            for d in range(D):
                gd = g[:, :, d * H:(d + 1) * H]
                layer = cache["layers"][(k, d)]
                g_fin = [None] * len(sizes) if gs is None else [q[k * D + d] for q in gs]
                res = layer.backward([self._align(gd, cache["mask"]) if d else gd, *g_fin], ctx)
                dxd = res[0] if cache["given"] else res
                if cache["given"]:
                    for q, r in zip(d_init, res[1:], strict=True):
                        q[k * D + d] = r
                dx = dxd if dx is None else dx + dxd
                self._move_grads(layer, self._suffix(k, d), ctx)
            assert dx is not None
            g = dx
        dx_out = self._out(g)
        if cache["api"] == "seq":
            return dx_out, (self._layers[(0, 0)].cell.make_state(tuple(d_init)) if cache["given"] else None)
        return [dx_out, *d_init] if cache["given"] else dx_out

    def _move_grads(self, layer: RecurrentLayer, sfx: str, ctx: Ctx) -> None:
        for n, g in take_torch_grads(layer, ctx).items():   # taken out of ctx: nobody else holds them
            ctx.give_grad(self, n + sfx, g, fortran=True)

    def get_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"mode": self.mode, "in_dim": self.in_dim, "hidden_dim": self.hidden_dim,
                               "config": self.config.to_config()}
        if self.return_state:
            cfg["return_state"] = True
        cfg.update(super().get_config())
        return cfg


def _freeze(a: np.ndarray) -> None:
    """Make ``a`` and every array under it (``.base``) read-only: a new array made from the
    parameters, or a view of them (already read-only), so nobody writes a layer's weight."""
    at: Any = a
    while isinstance(at, np.ndarray):
        at.flags.writeable = False
        at = at.base


def _c_copy(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A new C-contiguous array of ``a``'s values in ``dtype``; a transposed matrix (a parameter
    in PyTorch's layout read as rnnkit's kernel) is copied 64 rows of its source at a time, which
    keeps both sides in cache (2-2.5x NumPy's whole strided copy at (512, 128) and (1024, 256))."""
    if a.ndim == 2 and a.flags.f_contiguous and not a.flags.c_contiguous:
        src = a.T
        out = np.empty(a.shape, dtype)
        for i in range(0, src.shape[0], 64):
            out[:, i:i + 64] = src[i:i + 64].T
        return out
    return np.array(a, dtype=dtype, order="C")


def lstm(in_dim: int, hidden_dim: int, config: RNNConfig | None = None, *, seed: int | None = None,
         dtype: Any = "float32", return_state: bool = False) -> RNNNet:
    """A (multi-layer, optionally bidirectional) LSTM in PyTorch layout."""
    return RNNNet("lstm", in_dim, hidden_dim, config, seed=seed, dtype=dtype, return_state=return_state)


def gru(in_dim: int, hidden_dim: int, config: RNNConfig | None = None, *, seed: int | None = None,
        dtype: Any = "float32", return_state: bool = False) -> RNNNet:
    """A (multi-layer, optionally bidirectional) GRU in PyTorch layout."""
    return RNNNet("gru", in_dim, hidden_dim, config, seed=seed, dtype=dtype, return_state=return_state)


def rnn(in_dim: int, hidden_dim: int, config: RNNConfig | None = None, *, seed: int | None = None,
        dtype: Any = "float32", return_state: bool = False) -> RNNNet:
    """PyTorch's ``nn.RNN``: a (multi-layer, optionally bidirectional) Elman network in PyTorch
    layout, ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` with ``act`` =
    ``config.nonlinearity`` (``"tanh"`` or ``"relu"``)."""
    return RNNNet("rnn", in_dim, hidden_dim, config, seed=seed, dtype=dtype, return_state=return_state)


register_layer(RNNNet)  # saves and loads inside Sequential / graph models
