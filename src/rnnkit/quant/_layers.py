"""The int8 layers: ``QuantizedDense`` and ``QuantizedRecurrent`` (SimpleRNN, LSTM, GRU).

Their weights, as saved in model files: each float kernel W (K, N) becomes ``<name>_q`` (N, K)
int8 in [-127, 127] (one row per output) and ``<name>_scale`` (N,) float32 > 0, with
``W ~= (<name>_q * <name>_scale[:, None]).T``; biases stay float32. The arithmetic is
:mod:`rnnkit.kernels._int8`'s (compiled) or :mod:`rnnkit.quant._reference`'s (NumPy), the same
to the bit. Inference only: a training pass or a backward raises InvalidInputError.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._kind import builtin_kind
from rnnkit._layer import Layer, check_bool, check_positive_int
from rnnkit._shape import Shape
from rnnkit.kernels import _pool
from rnnkit.kernels._threads import run_blocks
from rnnkit.layers._common import activation_config, activation_from
from rnnkit.quant import _reference
from rnnkit.recurrent import RecurrentLayer
from rnnkit.recurrent._cell import Arrays, Cell

F32 = np.float32


def backend() -> ModuleType:
    """The module that runs the int8 arithmetic here: the compiled loops, or the reference."""
    return kernels.int8() or _reference


def refuse_training(layer: Layer, ctx: Ctx) -> None:
    if ctx.training_mode:
        raise InvalidInputError(
            f"{layer.name} ({type(layer).__name__}) is an int8 inference layer: it has no training "
            f"pass; train the float32 model and quantize it again")


class Int8Weights:
    """Mixin: ``*_q`` weights kept as int8 (integral values in [-127, 127]), ``*_scale`` as
    positive finite float32, everything else as float32; the packed products cached until a
    weight changes."""

    name: str
    _weights: dict[str, np.ndarray]

    def _store_weight(self, name: str, value: np.ndarray) -> None:
        arr = np.asarray(value)
        if name.endswith("_q"):
            f = arr.astype(np.float64)
            if arr.size and (not np.all(np.isfinite(f)) or np.any(f != np.rint(f))
                             or f.min() < -127 or f.max() > 127):
                raise InvalidInputError(f"{self.name}.{name}: int8 weights must be integers in "
                                        f"[-127, 127], got values in [{f.min()}, {f.max()}]")
            arr = np.array(arr, dtype=np.int8, copy=True, order="C")
        else:
            arr = np.array(arr, dtype=F32, copy=True, order="C")
            if name.endswith("_scale") and arr.size and not (np.all(np.isfinite(arr)) and arr.min() > 0):
                raise InvalidInputError(f"{self.name}.{name}: scales must be finite and > 0, got "
                                        f"values in [{arr.min()}, {arr.max()}]")
        arr.flags.writeable = False
        self._weights[name] = arr.view()
        self._packed: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _product(self, name: str, mod: ModuleType, rows: slice = slice(None)) -> tuple[np.ndarray, ...]:
        """(packed weights, int32 row sums, scales) of ``name`` (rows ``rows``) for ``mod``."""
        key = f"{mod.__name__}:{name}:{rows}"
        cache = getattr(self, "_packed", None)
        if cache is None:
            cache = self._packed = {}
        if key not in cache:
            q = np.ascontiguousarray(self._weights[name + "_q"][rows])
            cache[key] = (mod.pack(q), q.sum(axis=1, dtype=np.int32),
                          np.ascontiguousarray(self._weights[name + "_scale"][rows]))
        return cache[key]


class QuantizedDense(Int8Weights, Layer):
    """``QuantizedDense(units, activation="linear", *, use_bias=True, ...)``: ``Dense`` with an
    int8 kernel: ``y = act(dequant(quant(x) @ kernel_q^T) + bias)``, each row of ``x`` (every
    leading position) quantized on its own. Weights ``kernel_q`` (units, F) int8,
    ``kernel_scale`` (units,), ``bias`` (units,)."""

    supports_masking = True

    def __init__(self, units: int, activation: Any = "linear", *, use_bias: bool = True,
                 seed: int | None = None, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(seed=seed, dtype=dtype, name=name)
        if self.dtype != np.float32:
            raise InvalidParameterError(f"{self.name}: int8 layers compute in float32, got {self.dtype}")
        self.units = check_positive_int(units, "units", self.name)
        self.activation = activation_from(activation, self.name)
        self.use_bias = check_bool(use_bias, "use_bias", self.name)

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        if shape.rank < 2 or shape[-1] is None:
            raise InvalidInputError(f"{self.name}: expected an input shape (batch, ..., features) "
                                    f"with a known width, got {shape}")
        F = int(shape[-1])  # type: ignore[arg-type]
        self._add_weight("kernel_q", np.zeros((self.units, F), np.int8))
        self._add_weight("kernel_scale", np.ones(self.units, F32))
        if self.use_bias:
            self._add_weight("bias", np.zeros(self.units, F32))

    @property
    def trainable_names(self) -> list[str]:
        return []

    def compute_output_shape(self, shape: Any) -> Shape:
        return Shape((*Shape.of(shape)[:-1], self.units))

    def forward(self, x: Any, ctx: Ctx) -> np.ndarray:
        """``act(dequant(quant(x) @ kernel_q^T) + bias)`` over the last axis of ``x``."""
        self._require_built()
        refuse_training(self, ctx)
        arr = np.asarray(self._as_input(x), F32)
        F = self._weights["kernel_q"].shape[1]
        if arr.ndim < 2 or arr.shape[-1] != F:
            raise InvalidInputError(f"{self.name}: expected an input (batch, ..., {F}), got {arr.shape}")
        mod = backend()
        wp, col, ws = self._product("kernel", mod)
        x2 = np.ascontiguousarray(arr.reshape(-1, F))
        out = np.empty((x2.shape[0], self.units), F32)
        bias = self._weights["bias"] if self.use_bias else np.zeros(self.units, F32)
        mod.project(x2, wp, col, ws, bias, out)
        y = out.reshape(*arr.shape[:-1], self.units)
        return np.asarray(self.activation(y), F32)

    def backward(self, grad: Any, ctx: Ctx) -> Any:
        raise InvalidInputError(f"{self.name} ({type(self).__name__}) is an int8 inference layer: "
                                f"it has no backward pass")

    def get_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"units": self.units, "activation": activation_config(self.activation),
                               "use_bias": self.use_bias}
        cfg.update(super().get_config())
        return cfg


def check_quantizable(cell: Cell, where: str) -> None:
    """InvalidParameterError unless ``cell`` is a built-in SimpleRNN / LSTM / GRU cell without an
    output projection whose activations have an int8 form (tanh, sigmoid, relu, linear,
    hard_sigmoid)."""
    kind = builtin_kind(cell)
    if kind is None:
        raise InvalidParameterError(f"{where}: int8 layers exist for the SimpleRNN, LSTM and GRU cells, "
                                    f"got {type(cell).__name__}")
    proj = getattr(cell, "proj_size", 0)
    if proj:
        raise InvalidParameterError(f"{where}: an LSTM with proj_size has no int8 form (proj_size="
                                    f"{proj}); keep this layer in float32")
    for what in ("activation", "recurrent_activation"):
        fn = getattr(cell, what, None)
        if fn is not None and kernels.activation_code(fn) is None:
            raise InvalidParameterError(f"{where}: {what} {getattr(fn, 'name', fn)!r} has no int8 form "
                                        f"(expected one of {sorted(kernels.ACTIVATION_CODES)})")


class QuantizedRecurrent(Int8Weights, RecurrentLayer):
    """``QuantizedRecurrent(cell, *, return_sequences, go_backwards, return_state, stateful, ...)``
    (the keywords of :class:`~rnnkit.RecurrentLayer`): the cell's time loop with int8 products.

    The input products of all steps are one product (every (step, sample) row quantized on its
    own); each step quantizes the state rows ``h_{t-1}`` (and, for a GRU with
    ``reset_after=False``, the rows of ``r * h_{t-1}``) and multiplies them by the int8 recurrent
    kernel; gates in float32 (tanh as a clamped rational, sigmoid = 0.5 + 0.5 tanh(x / 2)).
    Masks, lengths, ``go_backwards``, initial / final / carried states behave as in the float
    layer. Weights ``kernel_q`` (GH, F), ``kernel_scale`` (GH,), ``recurrent_kernel_q`` (GH, H),
    ``recurrent_kernel_scale`` (GH,), ``bias`` (rows, GH) as in the float cell."""

    def __init__(self, cell: Cell | dict[str, Any], **kwargs: Any) -> None:
        super().__init__(cell, **kwargs)
        check_quantizable(self.cell, self.name)
        if self.dtype != np.float32:
            raise InvalidParameterError(f"{self.name}: int8 layers compute in float32, got {self.dtype}")

    def _weight_shapes(self, input_dim: int) -> dict[str, tuple[int, ...]]:
        shapes = super()._weight_shapes(input_dim)
        out: dict[str, tuple[int, ...]] = {}
        for name, shp in shapes.items():
            if name in ("kernel", "recurrent_kernel"):
                out[name + "_q"] = (shp[1], shp[0])
                out[name + "_scale"] = (shp[1],)
            else:
                out[name] = shp
        return out

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        for name, shp in self._weight_shapes(int(shape[2])).items():  # type: ignore[arg-type]
            self._add_weight(name, np.ones(shp, F32) if name.endswith("_scale") else np.zeros(shp, F32))
        self._trainable = []

    def backward(self, grad: Any, ctx: Ctx) -> Any:
        raise InvalidInputError(f"{self.name} ({type(self).__name__}) is an int8 inference layer: "
                                f"it has no backward pass")

    def _pass(self, x: Any, init: Any, ctx: Ctx, keep_seq: bool, api: str,
              check_steps: bool = True) -> tuple[np.ndarray, Arrays]:
        """One inference pass: (output, final state parts), as :meth:`RecurrentLayer._pass`."""
        refuse_training(self, ctx)
        arr = self._check_input(x, check_steps)
        B, T = arr.shape[:2]
        mask = ctx.mask
        if mask is not None:
            mask.check(B, T, self.name)
        parts = self.unpack_state(init, B) if init is not None else \
            (self._carried_state(B) if api == "layer" else None)
        idx, m_tm = self._order(mask, B, T)
        state = [np.zeros((B, n), F32) for n in self.cell.state_sizes()] if parts is None else \
            [np.array(p, F32, order="C") for p in parts]
        m8 = np.zeros((0, 0), np.uint8) if m_tm is None else np.ascontiguousarray(m_tm != 0, np.uint8)
        if idx is None:   # a time-major view of the input, no copy
            x_tm = np.ascontiguousarray(arr, F32).transpose(1, 0, 2)
            x_tm = x_tm[::-1] if self.go_backwards else x_tm
            if x_tm.flags.f_contiguous and not x_tm.flags.c_contiguous:
                # (one feature: the view is Fortran-ordered, a layout of its own for Numba, so a
                # third compiled version of the loop; a copy of one value per row and step is 'C')
                x_tm = np.ascontiguousarray(x_tm)
        else:
            x_tm = np.ascontiguousarray(arr[np.arange(B)[None, :], idx], F32)
        # (every step writes its rows of the output: a pooled array, no fresh pages per call)
        H = self.cell.units
        seq = _pool.empty((B, T, H), F32) if keep_seq else np.zeros((0, B, H), F32)
        self._walk(x_tm, state, m8, seq.transpose(1, 0, 2) if keep_seq else seq)
        final = tuple(state)
        if self.stateful and api == "layer":
            self._state = tuple(np.array(f) for f in final)
        if keep_seq:
            out = seq
            if mask is not None and mask.kind == "lengths":
                assert m_tm is not None
                out *= m_tm.T[:, :, None].astype(F32)
        else:
            out = np.array(final[0])
        if not (self.return_state or api != "layer"):
            return out, ()
        return out, tuple(np.array(f) for f in final)

    def _walk(self, x_tm: np.ndarray, state: list[np.ndarray], mask: np.ndarray, seq: np.ndarray) -> None:
        """Run the backend's loop over ``x_tm`` (T, B, F), processing order, any strides;
        ``state`` updated in place; ``seq`` (T, B, H), or (0, B, H), receives every output. The
        compiled loops run on blocks of the batch's rows, one per core (:func:`run_blocks`, as
        the float walker): every row is computed on its own (its own quantization, its own
        products), so the blocks give each row the bits of one call over the whole batch."""
        mod = backend()
        cell, w = self.cell, self._weights
        H = cell.units
        T, B, F = x_tm.shape
        G = w["kernel_q"].shape[0]
        bias = w["bias"] if "bias" in w else np.zeros((1, G), F32)
        ra = bool(getattr(cell, "reset_after", False))
        # row 1 of a bias adds to the recurrent product under reset_after; otherwise (PyTorch's
        # bias_ih and bias_hh, bias_layout="torch") both rows add to every pre-activation
        b_in = bias[0] if ra or bias.shape[0] == 1 else bias[0] + bias[1]
        xin = (*self._product("kernel", mod), np.ascontiguousarray(b_in))
        code = int(kernels.activation_code(cell.activation))  # type: ignore[arg-type]
        kind = builtin_kind(cell)
        if kind == "SimpleRNN":
            up, ucol, us = self._product("recurrent_kernel", mod)

            def walk(x: np.ndarray, st: list[np.ndarray], m: np.ndarray, sq: np.ndarray) -> None:
                mod.walk_simple(x, *xin, up, ucol, us, st[0], m, sq, code)
        elif kind == "LSTM":
            rcode = int(kernels.activation_code(cell.recurrent_activation))  # type: ignore[attr-defined,arg-type]
            up, ucol, us = self._product("recurrent_kernel", mod)

            def walk(x: np.ndarray, st: list[np.ndarray], m: np.ndarray, sq: np.ndarray) -> None:
                mod.walk_lstm(x, *xin, up, ucol, us, st[0], st[1], m, sq, code, rcode)
        else:
            rcode = int(kernels.activation_code(cell.recurrent_activation))  # type: ignore[attr-defined,arg-type]
            hb = np.ascontiguousarray(bias[1]) if ra and bias.shape[0] > 1 else np.zeros(G, F32)
            if ra:
                up, ucol, us = self._product("recurrent_kernel", mod)
                un, ncol, uns = up, ucol, us
            else:
                up, ucol, us = self._product("recurrent_kernel", mod, slice(0, 2 * H))
                un, ncol, uns = self._product("recurrent_kernel", mod, slice(2 * H, 3 * H))

            def walk(x: np.ndarray, st: list[np.ndarray], m: np.ndarray, sq: np.ndarray) -> None:
                mod.walk_gru(x, *xin, up, ucol, us, hb, st[0], m, sq, code, rcode, ra, un, ncol, uns)

        if mod is _reference:
            walk(x_tm, state, mask, seq)
            return

        def block(lo: int, hi: int) -> None:
            if lo == 0 and hi == B:
                walk(x_tm, state, mask, seq)
                return
            m = np.ascontiguousarray(mask[:, lo:hi]) if mask.shape[0] else mask
            walk(x_tm[:, lo:hi], [s[lo:hi] for s in state], m, seq[:, lo:hi])

        # (the products' multiply-adds of one row over the pass, in float32 terms: an int8
        # multiply-add costs about a quarter)
        run_blocks(B, block, T * G * (F + H) // 4)
