"""``GatedCell``: what SimpleRNN, LSTM and GRU cells share — fused gate blocks, the three
standard parameters and their initialisation, the walker's batched reductions.

Parameters (``G`` gate blocks of ``H`` units, ``S`` the width of the recurrent state, H unless
an LSTM projects it), in draw order::

    kernel            W (F, G*H)   Glorot-uniform with the per-gate fan F + H
    recurrent_kernel  U (S, G*H)   one independent (semi-)orthogonal (S, H) block per gate
    bias              b (R, G*H)   zeros (LSTM: the forget block 1.0); R = 1, or 2 for a GRU
                                   with reset_after (row 1 acts on the recurrent product);
                                   absent with ``use_bias=False`` (no parameter at all)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from rnnkit import constraints, regularizers
from rnnkit._activations import ActivationFn, ActivationLike, resolve_activation
from rnnkit._errors import InvalidParameterError
from rnnkit._initializers import glorot_uniform, semi_orthogonal, uniform
from rnnkit._layer import check_bool, resolve_dtype
from rnnkit._numbers import check_float
from rnnkit._random import check_seed
from rnnkit.kernels import activation_code
from rnnkit.recurrent._cell import Cell, Initializer, Param, check_softmax_axis
from rnnkit.recurrent._step_call import StepCalls

#: recurrent (gate) activations a gated cell accepts
GATE_ACTIVATIONS = ("sigmoid", "hard_sigmoid", "tanh", "relu", "linear")


def glorot_gates(fan_in: int, fan_out: int) -> Any:
    """Glorot-uniform with the fan of ONE gate (``fan_in + fan_out``), not the fused width."""
    return lambda rng, shape, dt: glorot_uniform(rng, shape, fan_in, fan_out, dt)


def orthogonal_blocks(gates: int) -> Any:
    """``gates`` independent (semi-)orthogonal blocks side by side along the columns."""
    def init(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        rows, cols = shape
        return np.concatenate([semi_orthogonal(rng, rows, cols // gates, dt) for _ in range(gates)],
                              axis=1)
    return init


def resolve_gate_activation(act: ActivationLike, where: str) -> ActivationFn:
    fn = resolve_activation(act, where)
    if fn.name not in GATE_ACTIVATIONS:
        raise InvalidParameterError(
            f"{where}: recurrent_activation must be one of {', '.join(GATE_ACTIVATIONS)}, got {fn.name!r}")
    return fn


#: Keras' initializer names a built-in cell takes (``kernel_initializer=`` ...): each draws from
#: the weight's whole shape, as Keras does (a callable ``init(rng, shape, dtype)`` is taken too)
INITIALIZERS: dict[str, Initializer] = {
    "zeros": lambda rng, shape, dt: np.zeros(shape, dtype=dt),
    "ones": lambda rng, shape, dt: np.ones(shape, dtype=dt),
    "glorot_uniform": lambda rng, shape, dt: glorot_uniform(rng, shape, shape[0], shape[-1], dt),
    "orthogonal": lambda rng, shape, dt: semi_orthogonal(rng, shape[0], shape[-1], dt),
    "random_uniform": lambda rng, shape, dt: uniform(rng, shape, -0.05, 0.05, dt),
    "random_normal": lambda rng, shape, dt: (rng.standard_normal(shape) * 0.05).astype(dt),
}


def resolve_initializer(init: Any, arg: str, where: str) -> Initializer | None:
    """``init`` (None: the cell's own default; a name of :data:`INITIALIZERS`; a callable
    ``init(rng, shape, dtype)``) as an initialiser, or None."""
    if init is None or callable(init):
        return init  # type: ignore[no-any-return]
    if isinstance(init, str) and init in INITIALIZERS:
        return INITIALIZERS[init]
    raise InvalidParameterError(f"{where}: {arg} must be None (the cell's default), one of "
                                f"{', '.join(INITIALIZERS)} or a callable init(rng, shape, dtype), "
                                f"got {init!r}")


def check_rate(rate: Any, arg: str, where: str) -> float:
    """A dropout rate: a number in [0, 1)."""
    return check_float(rate, arg, where, lo=0.0, hi=1.0, hi_open=True)


class GatedCell(StepCalls, Cell):
    """Base of the built-in cells: ``gates`` fused blocks, optional bias, batched reductions.

    Keras' cell options, besides ``units``, ``activation`` and ``use_bias`` (every one keyword
    only, for a cell inside a layer as for a cell called alone,
    :mod:`rnnkit.recurrent._step_call`):

    - ``kernel_initializer``, ``recurrent_initializer``, ``bias_initializer``: None (the
      defaults of the module docstring), a name of :data:`INITIALIZERS` or a callable
      ``init(rng, shape, dtype)``; applied to the weight's whole shape (rnnkit's storage: the
      bias (1, G*H) or (2, 3H));
    - ``kernel_regularizer``, ``recurrent_regularizer``, ``bias_regularizer``,
      ``kernel_constraint``, ``recurrent_constraint``, ``bias_constraint``: as the layers take
      them; they go to the layer that holds the weights;
    - ``dropout``, ``recurrent_dropout``: rates in [0, 1) of the holding layer's passes (a
      layer over the cell that sets neither takes them);
    - ``seed``, ``dtype``: of the weights a cell called alone builds (a layer over the cell has
      its own).

    The options a layer keeps in its own configuration (dropout, regularizers, constraints,
    seed, dtype) and the initialisers, which only draw the first weights, are not part of the
    cell's :meth:`get_config`: a model file records the layer and its weights.
    """

    gates: ClassVar[int] = 1
    #: bias rows: 1, or 2 when row 1 adds to the recurrent product (GRU reset_after, and the
    #: SimpleRNN / LSTM cells with PyTorch's two biases)
    bias_rows: ClassVar[int] = 1
    #: ``"fused"``: one bias row (the sum of PyTorch's two); ``"torch"``: PyTorch's ``bias_ih``
    #: and ``bias_hh`` as rows 0 and 1, two parameters in training (GRU reset_after: always)
    bias_layout: ClassVar[str] = "fused"
    input_kernel = "kernel"
    recurrent_kernel = "recurrent_kernel"
    supports_recurrent_dropout: ClassVar[bool] = True
    #: constructor arguments that configure the layer holding the weights, never the step's
    #: arithmetic (the walker applies dropout alike on both paths; initialisers draw the first
    #: weights): the compiled step's rule that ``get_config`` records every argument skips them
    layer_options: ClassVar[tuple[str, ...]] = (
        "kernel_initializer", "recurrent_initializer", "bias_initializer", "kernel_regularizer",
        "recurrent_regularizer", "bias_regularizer", "kernel_constraint", "recurrent_constraint",
        "bias_constraint", "dropout", "recurrent_dropout", "seed", "dtype")

    def __init__(self, units: int, activation: ActivationLike = "tanh", *, use_bias: bool = True,
                 kernel_initializer: Any = None, recurrent_initializer: Any = None,
                 bias_initializer: Any = None, kernel_regularizer: Any = None,
                 recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 kernel_constraint: Any = None, recurrent_constraint: Any = None,
                 bias_constraint: Any = None, dropout: float = 0.0, recurrent_dropout: float = 0.0,
                 seed: int | None = None, dtype: Any = "float32") -> None:
        super().__init__(units, activation)
        check_softmax_axis(self.activation, self.name)
        self.use_bias = check_bool(use_bias, "use_bias", self.name)
        self.bias = "bias" if self.use_bias else None  # type: ignore[misc]
        self.kernel_initializer = resolve_initializer(kernel_initializer, "kernel_initializer", self.name)
        self.recurrent_initializer = resolve_initializer(recurrent_initializer, "recurrent_initializer",
                                                         self.name)
        self.bias_initializer = resolve_initializer(bias_initializer, "bias_initializer", self.name)
        given = {"kernel_regularizer": kernel_regularizer, "recurrent_regularizer": recurrent_regularizer,
                 "bias_regularizer": bias_regularizer, "kernel_constraint": kernel_constraint,
                 "recurrent_constraint": recurrent_constraint, "bias_constraint": bias_constraint}
        self.weight_keywords = {  # type: ignore[misc]
            k: (constraints.get if k.endswith("_constraint") else regularizers.get)(v)
            for k, v in given.items() if v is not None}
        self.dropout = check_rate(dropout, "dropout", self.name)  # type: ignore[misc]
        self.recurrent_dropout = check_rate(recurrent_dropout, "recurrent_dropout", self.name)  # type: ignore[misc]
        self.seed = check_seed(seed, self.name)
        self.dtype = resolve_dtype(dtype, self.name)

    @property
    def gate_width(self) -> int:
        return self.gates * self.units

    @property
    def rec_width(self) -> int:
        """S: the width of the state the recurrent kernel multiplies."""
        return self.units

    def initial_bias(self, rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        """The bias at initialisation: ``bias_initializer``'s, by default zeros (LSTM overrides:
        forget block = 1.0)."""
        if self.bias_initializer is not None:
            return self.bias_initializer(rng, shape, dt)
        return np.zeros(shape, dtype=dt)

    def params(self, input_dim: int) -> list[Param]:
        GH, H = self.gate_width, self.units
        out = [Param("kernel", (input_dim, GH), self.kernel_initializer or glorot_gates(input_dim, H)),
               Param("recurrent_kernel", (self.rec_width, GH),
                     self.recurrent_initializer or orthogonal_blocks(self.gates))]
        if self.use_bias:
            out.append(Param("bias", (self.bias_rows, GH), self.initial_bias))
        return out

    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        cfg["use_bias"] = self.use_bias
        return cfg


def summed_bias_view(cell: GatedCell, plain: Cell,
                     w: Mapping[str, np.ndarray]) -> tuple[Cell, Mapping[str, np.ndarray]]:
    """The compiled view (:meth:`Cell.compiled_view`) of a cell with PyTorch's two bias rows
    both added at every step (LSTM, SimpleRNN): ``plain``, the one-row cell of the same
    configuration, on ``w`` with the bias ``b_ih + b_hh`` as its one row. The sum is kept on
    ``cell`` for as long as the bias is the same read-only array (a weight is replaced, never
    written to), so the compiled walker keeps its plan (its packed panels) from pass to pass."""
    b = w["bias"]
    kept: tuple[np.ndarray, np.ndarray] | None = getattr(cell, "_summed", None)
    if kept is None or kept[0] is not b or b.flags.writeable:
        total = b[0] + b[1]
        total.flags.writeable = False         # (the whole chain read-only: the plan is kept)
        kept = (b, total[None, :])
        cell._summed = kept  # type: ignore[attr-defined]
    return plain, {**w, "bias": kept[1]}


def both_bias_rows(grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The gradients of a two-row cell from its :func:`summed_bias_view`'s: each row of the bias
    gets the summed row's gradient (the gradient of their sum)."""
    if "bias" in grads:
        db = grads["bias"]
        grads["bias"] = np.concatenate([db, db])
    return grads


def check_torch_bias(cell: GatedCell) -> None:
    """InvalidParameterError unless ``cell`` (a cell with PyTorch's two bias rows) has a bias."""
    if not cell.use_bias:
        raise InvalidParameterError(f"{cell.name}: bias_layout='torch' keeps PyTorch's two biases and "
                                    f"needs use_bias=True, got use_bias=False")


def fed_back(rdrop: np.ndarray | None, h_prev: np.ndarray) -> np.ndarray:
    """The state as the recurrent products see it: ``h_prev``, or ``h_prev`` times the pass's
    recurrent dropout mask ``rdrop``."""
    return h_prev if rdrop is None else h_prev * rdrop


def fed_back_grad(rdrop: np.ndarray | None, d: np.ndarray) -> np.ndarray:
    """dL/dh_prev from dL/d(the state as the recurrent products saw it)."""
    return d if rdrop is None else d * rdrop


def gate_codes(cell: Any, extra: tuple[int, ...] = ()) -> tuple[int, ...] | None:
    """The compiled steps' options of a gated cell: (activation code, gate activation code,
    *extra), or None when an activation has no compiled form (the reference runs)."""
    code = activation_code(cell.activation)
    rcode = activation_code(getattr(cell, "recurrent_activation", None) or cell.activation)
    if code is None or rcode is None:
        return None
    return (code, rcode, *extra)
