"""The cell contract: what ONE timestep of a recurrent layer computes, forward and backward.

A :class:`Cell` is the only thing that differs between SimpleRNN, LSTM, GRU and a user's own
recurrence. :class:`~rnnkit.RecurrentLayer` (the walker) does everything else — weights, the walk
along time in either direction, ``return_sequences``, the per-step caches in the ``Ctx``,
backpropagation through time — for any cell, and knows no parameter name.

Notation, used by every cell and by the walker:

- ``B`` batch, ``T`` timesteps, ``F`` input features, ``H`` units, ``N`` the width of the
  step input (``G*H`` for a cell with ``G`` fused gate blocks).
- ``s`` is the processing step (0..T-1). Under ``go_backwards`` step ``s`` reads input
  timestep ``T-1-s``; otherwise timestep ``s``.
- ``inp_s``: what step ``s`` receives. A cell that names an :attr:`Cell.input_kernel` ``W``
  (F, N) gets the projection ``inp_s = x_s @ W + b[0]`` (``b`` the :attr:`Cell.bias`, if any),
  computed by the walker for every step in one GEMM; any other cell gets ``x_s`` (B, F).
- ``prev``: the state parts entering step ``s`` (a tuple, in :attr:`Cell.state_names` order);
  the step returns the parts leaving it. Part 0 is the layer's output at that step.
- Backward names a gradient ``d<name>`` (``dh`` = dL/dh) and numbers its steps after the
  forward steps they undo (forward step ``3`` is undone by backward step ``3b``).

What a cell declares:

- :meth:`Cell.params` — its parameters (:class:`Param`: name, shape from the input width and
  the units, initialiser, trained or not), in the order they are drawn from the seed.
- :attr:`Cell.state_names` / :meth:`Cell.state_sizes` / :attr:`Cell.state_type` — its state.
- :meth:`Cell.step` and :meth:`Cell.step_back`, side by side in the cell's file.
- Optionally, a parallel form (:meth:`Cell.sequence_forward` / :meth:`Cell.sequence_backward`,
  every step at once; with :attr:`Cell.sequence_takes_mask` also for a masked pass), which
  the walker alone chooses for a pass, and :meth:`Cell.check_init`, which refuses an initial
  state the recurrence cannot start from.
- Optionally, the batched reductions (today's fast default): a cell that names an
  ``input_kernel`` lets the walker compute ``dW = X^T dinp`` and ``dx = dinp W^T`` as two GEMMs
  over all steps; one that names a ``recurrent_kernel`` ``U`` (S, N) lets it compute ``dU`` from
  the per-step ``d_rec`` (dL/d of the step's recurrent product) with one GEMM per group of
  :meth:`Cell.rec_groups`; one that names a ``bias`` gets ``db[0] = sum(dinp)`` (and, for a bias
  of two rows whose row 1 the cell adds to its recurrent product, ``db[1] = sum(d_rec)``). Every
  other parameter's gradient is the sum of what :meth:`Cell.step_back` returns in
  :attr:`StepBack.params`.

A cell holds configuration only (units, activations, options): no weights and nothing of a
pass. The layer over it holds the weights (:attr:`Cell.holder`); the built-in cells can also be
called one step at a time, as Keras' cells (:mod:`rnnkit.recurrent._step_call`), and then
build such a layer of their own. A cell may also give its step compiled (:attr:`Cell.compiled_step`, a
:class:`rnnkit.kernels.Step`: the gate arithmetic between the walker's products, forward and
backward, as numba functions over rows); the compiled walker then runs it, for the
configurations it declares it computes (:attr:`rnnkit.kernels.Step.implements`: the values of
every option in :meth:`Cell.get_config`). A cell without one, or with another configuration,
runs this reference arithmetic: a compiled path runs exactly what the reference runs, or does
not run.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple

import numpy as np

from rnnkit._activations import ActivationFn, ActivationLike, resolve_activation
from rnnkit._errors import InvalidParameterError, MethodNotImplementedError
from rnnkit._layer import check_positive_int
from rnnkit.kernels import Step

Arrays = tuple[np.ndarray, ...]
#: an initialiser: ``init(rng, shape, dtype) -> array`` (drawn in float64, cast to ``dtype``)
Initializer = Callable[[np.random.Generator, tuple[int, ...], np.dtype], np.ndarray]


@dataclass(frozen=True)
class Param:
    """One parameter of a cell: its name (the layer's weight name, the gradient key in the
    ``Ctx`` and the key in weight files), its shape, its initialiser, and whether it trains
    (a parameter with ``trainable=False`` never receives a gradient)."""

    name: str
    shape: tuple[int, ...]
    init: Initializer
    trainable: bool = True


class SequenceBack(NamedTuple):
    """What :meth:`Cell.sequence_backward` returns for a whole sequence.

    ``d_init``: dL/d(state entering step 0), one (B, size) array per part. ``d_inp`` (T, B, N):
    dL/d(every step's input ``inp_s``). ``d_rec`` (T, B, N): dL/d(every step's recurrent
    product), only for a cell with a ``recurrent_kernel`` whose products differ from ``d_inp``
    (None otherwise). ``params``: the gradient of every parameter the walker does not reduce
    itself (already summed over the steps).
    """

    d_init: Arrays
    d_inp: np.ndarray
    d_rec: np.ndarray | None = None
    params: Mapping[str, np.ndarray] | None = None


class StepBack(NamedTuple):
    """What :meth:`Cell.step_back` returns for one step.

    ``d_prev``: dL/d(state entering the step), one array per state part. ``d_inp``: dL/d(the
    step's input ``inp_s``). ``d_rec``: dL/d(the step's recurrent product), only when it differs
    from ``d_inp`` (None otherwise). ``params``: this step's contribution to the gradient of
    any parameter the walker does not reduce itself (summed over the steps by the walker).
    """

    d_prev: Arrays
    d_inp: np.ndarray
    d_rec: np.ndarray | None = None
    params: Mapping[str, np.ndarray] | None = None


_STATE_TYPES: dict[tuple[str, tuple[str, ...]], type] = {}


def state_type_for(name: str, parts: tuple[str, ...]) -> type:
    """A named tuple type ``{name}State`` with one field per state part (made once per name)."""
    key = (name, parts)
    if key not in _STATE_TYPES:
        _STATE_TYPES[key] = collections.namedtuple(f"{name}State", parts)  # type: ignore[misc]
    return _STATE_TYPES[key]


class Cell:
    """Base of every cell; subclass it to write a new recurrence (see the module docstring).

    ``Cell(units, activation="tanh")``: ``units`` H >= 1; ``activation`` any spelling rnnkit
    accepts (``"tanh"``, ``Activation.TANH``, ``Tanh()`` ...).
    """

    #: the layer name used in messages and as a layer's default name
    name: ClassVar[str] = "Cell"
    #: the built-in recurrence this exact class computes (``"SimpleRNN"``, ``"LSTM"``, ``"GRU"``),
    #: declared only in the body of a built-in cell class; read it with
    #: :func:`rnnkit._kind.builtin_kind`, which ignores an inherited value
    kind: ClassVar[str | None] = None
    #: the state parts, each (B, size); part :attr:`output_part` (0) is the output
    state_names: ClassVar[tuple[str, ...]] = ("h",)
    #: which state part is the layer's output at each step (the reference walker reads it; a
    #: compiled step's is part 0)
    output_part: int = 0
    #: the state named tuple (made from ``name`` and ``state_names`` when left None)
    state_type: ClassVar[type | None] = None
    #: names of the parameters the walker reduces in batched GEMMs (None: the cell does not opt in)
    input_kernel: str | None = None
    recurrent_kernel: str | None = None
    bias: str | None = None
    #: the parameter (width, S) an output projection multiplies into state part 0 (compiled steps)
    projection: str | None = None
    #: whether the cell applies a recurrent dropout mask: in a training pass of a layer with
    #: ``recurrent_dropout``, ``step`` and ``step_back`` get the keyword ``rdrop`` (B, S), which
    #: multiplies state part 0 where it enters the recurrent products (not where it is carried)
    supports_recurrent_dropout: ClassVar[bool] = False
    #: the step compiled (:class:`rnnkit.kernels.Step`), or None: the reference runs. It counts
    #: only for the class that declares it and its subclasses that keep its ``step``,
    #: ``step_back`` and ``rec_groups``, and only for a cell whose every option (``get_config()``
    #: but ``units``) has a value its ``implements`` declares
    compiled_step: ClassVar[Step | None] = None
    #: Keras' cell options that a layer over the cell takes when it sets none of its own: the
    #: dropout rates, and the regularizer / constraint keywords (``{"kernel_regularizer": ...}``)
    dropout: float = 0.0
    recurrent_dropout: float = 0.0
    weight_keywords: Mapping[str, Any] = MappingProxyType({})
    #: the layer that holds this cell's weights: the last :class:`~rnnkit.RecurrentLayer` made
    #: over it (``rk.LSTM(8).cell.holder`` is that LSTM), or the one a standalone call built;
    #: None before either
    holder: Any = None

    def __init__(self, units: int, activation: ActivationLike = "tanh") -> None:
        self.units = check_positive_int(units, "units", self.name)
        self.activation: ActivationFn = resolve_activation(activation, self.name)

    def compiled_view(self, w: Mapping[str, np.ndarray]) -> tuple[Cell, Mapping[str, np.ndarray]] | None:
        """A cell and weights whose compiled walk computes exactly this cell's recurrence on
        ``w``, for a cell that has no compiled step of its own (None, the default: the cell
        itself, compiled or not). The walker runs the view's forward and backward and hands its
        weight gradients to :meth:`grads_from_view`."""
        return None

    def grads_from_view(self, grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """This cell's weight gradients from those of the walk of :meth:`compiled_view`."""
        return grads

    # -- declarations ------------------------------------------------------------------------
    def params(self, input_dim: int) -> list[Param]:
        """The parameters for inputs of ``input_dim`` features, in draw order."""
        raise MethodNotImplementedError(f"{type(self).__name__}.params is not implemented; a "
                                        f"subclass provides it")

    def state_sizes(self) -> tuple[int, ...]:
        """The width of each state part (default: ``units`` for every part)."""
        return tuple(self.units for _ in self.state_names)

    @property
    def output_size(self) -> int:
        """Width of the layer's output at each step: state part :attr:`output_part`."""
        return self.state_sizes()[self.output_part]

    def rec_groups(self, width: int) -> list[tuple[str, int, int]]:
        """For the batched ``dU``: ``(source, c0, c1)`` = which array was multiplied by the
        columns ``[c0, c1)`` of the recurrent kernel (a state part entering the step, or a name
        the cell parks). Default: state part 0 times every column (``width`` of them)."""
        return [(self.state_names[0], 0, width)]

    def make_state(self, parts: Arrays) -> Any:
        """The state object for ``parts`` (this cell's named tuple)."""
        cls = self.state_type or state_type_for(self.name, self.state_names)
        return cls(*parts)

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this cell (JSON-serialisable)."""
        return {"units": self.units, "activation": self.activation.name}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Cell:
        """The cell a model file's ``config`` (a :meth:`get_config`) describes: ``cls(**config)``."""
        return cls(**config)

    def check(self, where: str) -> None:
        """Raise InvalidParameterError when the cell cannot run inside a layer (optional)."""

    def check_init(self, init: Arrays, where: str) -> None:
        """Raise InvalidInputError when the given initial state parts ``init`` (each (B, size))
        are outside the states the recurrence can start from (optional; default: any state).
        The walker calls it on every given initial state, before either form runs."""

    # -- arithmetic --------------------------------------------------------------------------
    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        """Forward one step: return the new state parts. ``w`` maps parameter names to arrays;
        ``park`` is a dict to fill with whatever :meth:`step_back` needs later (training), or
        None (inference: park nothing). A cell with :attr:`supports_recurrent_dropout` also
        takes the keyword ``rdrop`` (the pass's mask, or None), here and in :meth:`step_back`."""
        raise MethodNotImplementedError(f"{type(self).__name__}.step is not implemented; a "
                                        f"subclass provides it")

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> StepBack:
        """Backward one step. ``d`` is dL/d(new state), one array per part. ``inp`` is the
        step's input ``x_s`` for a cell without an input kernel, else None (park what you need).
        ``park`` holds what :meth:`step` parked at this step."""
        raise MethodNotImplementedError(f"{type(self).__name__}.step_back is not implemented; a "
                                        f"subclass provides it")

    # -- the parallel (whole-sequence) form: optional ---------------------------------------
    #: ``sequence_forward`` / ``sequence_backward`` compute every step of a pass at once (a scan
    #: over time, for a recurrence whose gates do not read the state). They are optional: a cell
    #: that overrides both has a parallel form, and the walker (:func:`rnnkit.recurrent._walker.
    #: sequence_form`, the one place that chooses) runs it for a pass of two steps or more without
    #: a mask (unless :attr:`sequence_takes_mask`) and without recurrent dropout, training or
    #: inference, from zeros or a given (``stateful``) state; every other pass (one step at a
    #: time: streaming, a cell called as a Keras cell, a served step; a masked or padded batch of
    #: a cell whose parallel form takes no mask; recurrent dropout) runs the step form.
    #: Both forms must compute the same numbers (to rounding): check it with
    #: :func:`rnnkit.testing.check_cell`. The form counts only for the class that overrides
    #: ``sequence_forward`` and its subclasses that keep its ``step`` and ``step_back``.

    #: whether the parallel form also computes a masked pass: then ``sequence_forward`` and
    #: ``sequence_backward`` get the keyword ``mask`` (T, B) bool, processing order, True for a
    #: real step, whenever the pass has one. A masked step carries every state part over
    #: unchanged (the state leaving it is the state entering it, as in the step walk); its
    #: backward passes the gradient straight through and contributes nothing to any parameter
    #: or input (``d_inp`` zero at that row).
    sequence_takes_mask: ClassVar[bool] = False

    #: whether the parallel form returns, for every state part but the output part
    #: (:attr:`output_part`, part 0 but in a stack of cells), only
    #: the state leaving the LAST step, (1, B, size) instead of (T, B, size) (a cell whose state
    #: is far larger than its output, such as a matrix memory, keeps no state per step); its
    #: ``sequence_backward`` then gets those parts' ``d`` and ``states`` as (1, B, size) too.
    #: Only for a cell whose recurrent products (if any) read no other part than part 0.
    sequence_last_states: ClassVar[bool] = False

    def sequence_forward(self, w: Mapping[str, np.ndarray], inp: np.ndarray, init: Arrays,
                         park: dict[str, np.ndarray] | None) -> Arrays:
        """Forward every step at once: return the state parts leaving every step, one
        (T, B, size) array per part (row ``s`` is what :meth:`step` returns at step ``s``; with
        :attr:`sequence_last_states`, every part but the output part is (1, B, size), the last
        step's).
        ``inp`` (T, B, N) holds every step's input ``inp_s`` (as :meth:`step` receives it, in
        processing order); ``init`` the state parts entering step 0, each (B, size); ``park`` a
        dict to fill with whatever :meth:`sequence_backward` needs (training) or None
        (inference); ``mask`` (keyword, only for a cell with :attr:`sequence_takes_mask` in a
        masked pass) the real steps. Never called on a cell that does not override it."""
        raise MethodNotImplementedError(f"{type(self).__name__}.sequence_forward is not implemented; a "
                                        f"subclass provides it")

    def sequence_backward(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None,
                          init: Arrays, states: Arrays, park: Mapping[str, np.ndarray]) -> SequenceBack:
        """Backward through every step at once. ``d`` holds, per state part, (T, B, size):
        the gradient that reaches the part leaving step ``s`` from OUTSIDE the recurrence (the
        layer's output gradient at each step, the final state's gradient at step T-1); what flows
        back through later steps is this method's to add. ``inp`` is ``x`` (T, B, F) for a cell
        without an input kernel, else None; ``init`` / ``states`` / ``park`` (and ``mask``) are
        what :meth:`sequence_forward` was given, returned and parked."""
        raise MethodNotImplementedError(f"{type(self).__name__}.sequence_backward is not implemented; a "
                                        f"subclass provides it")


def check_softmax_axis(act: ActivationFn, where: str) -> None:
    """A softmax inside a cell acts over the units: only ``axis=-1``."""
    if act.name == "softmax" and act.axis != -1:
        raise InvalidParameterError(f"{where}: an embedded softmax accepts only axis=-1, got axis={act.axis}")
