"""``Layer``: the base every layer shares — weights, build, seeding, dtype, the weight API.

A built layer holds its configuration and its weights, nothing else. Weights are stored as
read-only arrays; only :meth:`Layer.set_weight` (used by ``set_weights``, optimizers and
loaders) replaces them, after checking the shape and (unless told not to) that every value is
finite. Everything a pass produces lives in the
:class:`~rnnkit.Ctx` handed to ``forward`` / ``backward``. Each weight is declared once, with
its regularizer and constraint (:class:`~rnnkit._weight_decl.WeightDecl`). The argument checks
the layers share live in :mod:`rnnkit._validate` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._budget import check_array
from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import (
    InvalidInputError,
    InvalidParameterError,
    MethodNotImplementedError,
    NotBuiltError,
    UnknownWeightError,
    WeightShapeError,
)
from rnnkit._graph_calls import GraphCalls
from rnnkit._numbers import check_float as check_float
from rnnkit._numbers import check_int as check_int
from rnnkit._numbers import check_positive_int as check_positive_int
from rnnkit._random import check_seed, make_rng
from rnnkit._shape import Shape, pop_input_shape
from rnnkit._tape import ACTIVE, call_layer, forward_with_mask
from rnnkit._validate import as_weight_array as as_weight_array
from rnnkit._validate import check_bool as check_bool
from rnnkit._validate import check_ctx as check_ctx
from rnnkit._validate import check_finite_weight as check_finite_weight
from rnnkit._validate import check_utf8 as check_utf8
from rnnkit._validate import keras_weight_list as keras_weight_list
from rnnkit._validate import resolve_dtype as resolve_dtype
from rnnkit._weight_decl import WeightDecl, keywords_of, weight_of
from rnnkit.constraints import Constraint
from rnnkit.regularizers import Regularizer


class WeightEntry(NamedTuple):
    """One weight of a layer: its name and a read-only view of its live array."""

    name: str
    value: np.ndarray


class _LayerType(type):
    """Constructing any layer takes Keras' ``input_shape=`` / ``input_dim=`` keywords (the
    model's input shape declared on its first layer) besides the class's own arguments: they
    are set aside before ``__init__`` runs and kept as ``declared_input_shape``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        declared = pop_input_shape(cls, kwargs)
        layer = super().__call__(*args, **kwargs)
        if declared is not None:
            layer.declared_input_shape = declared
        return layer


class Layer(GraphCalls, metaclass=_LayerType):
    """Base class of every layer.

    Subclasses define ``_build(shape, rng)`` (create weights with :meth:`_add_weight`),
    ``compute_output_shape(shape)``, ``forward(x, ctx)`` and ``backward(grad, ctx)``.

    Masks (Keras' rules): a layer with ``supports_masking = True`` accepts the mask of its
    input (``ctx.mask`` during its ``forward``) and :meth:`compute_mask` says what mask its output
    carries; a layer without it that receives a mask raises, never ignores it.
    """

    #: whether the layer accepts a masked input (see :meth:`compute_mask`)
    supports_masking: bool = False
    #: a Regularizer on the layer's output, applied by the model around forward / backward
    #: (``rnnkit._penalties``; set with the ``activity_regularizer=`` keyword)
    activity_regularizer: Any = None
    #: whether ``forward`` itself refuses the values it cannot take (then :meth:`predict` and
    #: ``layer(x)`` leave the NaN/Inf check to it)
    checks_values: bool = False
    #: the build shape Keras' ``input_shape=`` / ``input_dim=`` keyword declared (batch axis
    #: free), or None; a Sequential whose first layer declares one is built for it
    declared_input_shape: Shape | None = None
    #: the regularizers and constraints Keras' keywords gave the layer (``kernel_regularizer``
    #: -> its Regularizer, ..., only those set; ``rnnkit.attach_regularization`` sets them): what
    #: the build declares its weights with, and what ``get_config`` writes back
    _weight_keywords: Mapping[str, Any] = MappingProxyType({})

    def compute_mask(self, x: Any, mask: Any) -> Any:
        """The mask of this layer's output given its input ``x`` and the input's ``mask`` (a
        :class:`~rnnkit.Mask` or None). Default: None stays None; a layer that supports masking
        passes the mask on unchanged; any other layer raises InvalidInputError."""
        if mask is None:
            return None
        if not self.supports_masking:
            raise InvalidInputError(
                f"{self.name} ({type(self).__name__}) cannot take a masked input, and it received one; "
                f"remove the mask before it (Keras' rule: a mask is never silently dropped)")
        return mask

    def __init__(self, *, seed: int | None = None, dtype: Any = "float32", name: str | None = None) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}: name must be a str or None, got {name!r}")
        self.name: str = (check_utf8(name, "name", type(self).__name__) if name is not None
                          else type(self).__name__)
        self._seed = check_seed(seed, self.name)
        self.dtype: np.dtype = resolve_dtype(dtype, self.name)
        self._weights: dict[str, np.ndarray] = {}
        self._decls: dict[str, WeightDecl] = {}
        self._input_shape: Shape | None = None

    # -- building ----------------------------------------------------------------------------
    @property
    def built(self) -> bool:
        return self._input_shape is not None

    @property
    def input_shape(self) -> Shape:
        if self._input_shape is None:
            raise NotBuiltError(self.name, "input_shape")
        return self._input_shape

    @property
    def seed(self) -> int | None:
        return self._seed

    def build(self, shape: Shape | tuple[int | None, ...]) -> None:
        """Create the weights for inputs of ``shape`` (a free batch axis is ``None``).

        Building an already-built layer with a compatible shape keeps its weights.
        """
        shp = Shape.of(shape)
        self._check_build_shape(shp)
        if self._input_shape is not None:
            self._check_rebuild(shp)
            return
        self._weights, self._decls = {}, {}
        self._build(shp, make_rng(self._seed))
        self._check_weight_keywords()
        self._input_shape = shp

    def _check_build_shape(self, shape: Shape) -> None:
        """Raise InvalidInputError when ``shape`` cannot be built from (override per layer)."""

    def _check_rebuild(self, shape: Shape) -> None:
        """A built layer accepts another shape with the same last axis by default."""
        if shape[-1] != self.input_shape[-1]:
            raise InvalidInputError(
                f"{self.name}: built for feature width {self.input_shape[-1]}, "
                f"asked to build again for shape {shape}"
            )

    def _build(self, shape: Shape, rng: np.random.Generator) -> None:
        """Create the weights. Layers without weights keep this default."""

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Shape:
        raise MethodNotImplementedError(f"{self.name} ({type(self).__name__}): compute_output_shape is not "
                                        f"implemented by this layer class")

    def with_random_state(self, seed: int) -> Layer:
        """Record ``seed`` for the build (chainable). A built layer redraws its weights."""
        self._seed = check_seed(seed, self.name)
        if self._input_shape is not None:
            shape, self._input_shape = self._input_shape, None
            self.build(shape)
        return self

    # -- passes ------------------------------------------------------------------------------
    def forward(self, x: np.ndarray, ctx: Ctx) -> np.ndarray:
        """The pass (every layer class implements it; the base raises MethodNotImplementedError)."""
        raise MethodNotImplementedError(f"{self.name} ({type(self).__name__}): forward is not "
                                        f"implemented: the Layer base has no pass; a subclass defines "
                                        f"forward and backward")

    def backward(self, grad: np.ndarray, ctx: Ctx) -> Any:
        """Add the weights' gradients into ``ctx`` and return dL/dx (an array; a list for a
        layer of several inputs); a layer may return None instead when
        ``ctx.needs_input_grad(self)`` is False (nobody reads it)."""
        raise MethodNotImplementedError(f"{self.name} ({type(self).__name__}): backward is not "
                                        f"implemented: the Layer base has no pass; a subclass defines "
                                        f"forward and backward")

    def forward_mut(self, x: Any, ctx: Ctx) -> np.ndarray:
        """Build from ``x``'s shape (free batch) if needed, then run :meth:`forward`."""
        if not self.built:
            arr = np.asarray(x)
            if arr.ndim == 0:
                raise InvalidInputError(f"{self.name}: expected an array input, got a scalar")
            self.build(Shape.with_free_batch(arr.shape))
        return self.forward(x, check_ctx(ctx, f"{self.name}.forward"))

    def predict(self, x: Any) -> np.ndarray:
        """An inference pass (records nothing). An input holding NaN or Inf is refused with
        InvalidInputError naming the first, as ``Model.predict`` refuses it; ``forward`` is
        the raw pass, which checks nothing of the values (NaN in, NaN out). While ``fit``
        trains the layer in another thread the pass uses the weights of one whole optimizer
        step (:mod:`rnnkit._consistency`; ``forward`` reads them as they are)."""
        return WEIGHTS.read(self._predict, x)

    def _predict(self, x: Any) -> np.ndarray:
        return self.forward(self._finite(x), Ctx.inference())

    def __call__(self, x: Any, ctx: Ctx | None = None, *, initial_state: Any = None, mask: Any = None,
                 training: bool | None = None) -> Any:
        """On arrays: :meth:`forward` in ``ctx`` (default: an inference Ctx; ``training=True``: a
        training one, dropout on) after refusing an input holding NaN or Inf (as :meth:`predict`);
        an unbuilt layer is first built for one array's shape (batch free).
        ``initial_state=[h, c]`` starts a recurrent layer there; ``mask=`` (a boolean (B, T)
        array or a :class:`~rnnkit.Mask`) marks the real steps (Keras' call arguments).

        While a :class:`~rnnkit.GradientTape` records (and no ``ctx`` is given): the call is
        recorded as one entry whose backward is this layer's :meth:`backward` (``rnnkit._tape``).

        On graph nodes (``rk.Input(...)``, another call's output; Keras' functional API): a
        symbolic call building the layer for the nodes' shapes. Returns a node, or the list of
        a multi-output call's nodes (``out, h, c = rk.LSTM(8, return_state=True)(x)``)."""
        states = initial_state if isinstance(initial_state, (list, tuple)) else [initial_state]
        for a in [*(x if isinstance(x, (list, tuple)) else [x]), *states]:
            if getattr(type(a), "_symbolic", False):
                if ctx is not None or mask is not None or training is not None:
                    raise InvalidParameterError(
                        f"{self.name}: a call on graph nodes takes no ctx, mask or training (the "
                        f"model's fit / predict give them)")
                return type(a)._call_layer(self, x, initial_state)
        if initial_state is not None and isinstance(x, (list, tuple)):
            raise InvalidInputError(f"{self.name}: initial_state= came with a list input; pass x "
                                    f"alone, or [x, *initial_state] without initial_state=")
        if ctx is not None and (mask is not None or training is not None):
            raise InvalidParameterError(f"{self.name}: give ctx, or mask= / training=, not both (the "
                                        f"ctx holds its mask and mode)")
        if not self.built and not isinstance(x, (list, tuple)):
            if not np.shape(x):
                raise InvalidInputError(f"{self.name}: expected an array input, got a scalar")
            self.build(Shape.with_free_batch(np.shape(x)))
        if ctx is None and ACTIVE.tapes:
            return call_layer(self, self._finite(x, ACTIVE.tapes), initial_state, mask, training)
        x = x if initial_state is None else [x, *states]
        if ctx is None:
            if not training and mask is None:
                return WEIGHTS.read(self._predict, x)

            def run(v: Any) -> Any:
                pass_ = Ctx.training() if training else Ctx.inference()
                return forward_with_mask(self, self._finite(v), mask, pass_)
            # a training pass may write weights of its own (BatchNormalization moves its moving
            # statistics): it runs once, holding the lock, never again after a write it made itself
            return (WEIGHTS.read_once if training else WEIGHTS.read)(run, x)
        return self.forward(self._finite(x), check_ctx(ctx, f"{self.name}.forward"))

    def _output_within_budget(self, x: np.ndarray) -> None:
        """MemoryBudgetError when an output of this layer for ``x``, or an array its pass makes
        (:meth:`_work_shapes`), would be over the budget (:meth:`_pass_within_budget`)."""
        self._pass_within_budget(x.shape, max(x.itemsize, np.dtype(self.dtype).itemsize))

    def _work_shapes(self, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The shapes of the arrays, besides its outputs, that a pass on an input of ``shape``
        makes and whose size grows with the input (none by default; a recurrent layer's input
        projection and step states)."""
        return []

    def _pass_within_budget(self, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...] | None:
        """MemoryBudgetError (:func:`~rnnkit._budget.check_array`) when an output of this layer
        for an input of ``shape``, or an array of :meth:`_work_shapes`, is over the budget, with
        elements of ``itemsize`` bytes; checked before anything runs. Returns the (first) output's
        shape, for the next layer of a chain; None when it cannot be told from ``shape`` alone
        (the layer's pass then reports what it refuses)."""
        try:
            outs = self.compute_output_shape(shape)
        except Exception:  # noqa: BLE001 - any layer's refusal of the shape is its pass's to report
            return None
        first: tuple[int, ...] | None = None
        for k, out in enumerate(outs if isinstance(outs, list) else [outs]):
            dims = tuple(d for d in out if isinstance(d, int))
            if len(dims) == len(tuple(out)):
                check_array(dims, itemsize, f"{self.name}: the output for an input of shape {shape}")
                if k == 0:
                    first = dims
        for work in self._work_shapes(shape):
            check_array(work, itemsize, f"{self.name}: an array its pass makes for an input of shape {shape}")
        return first

    def _finite(self, x: Any, tapes: Sequence[Any] = ()) -> Any:
        """``x``, refused when it (or, for a list of inputs, one of them) is an array of floats
        holding NaN or Inf; other inputs are left to :meth:`forward` to convert and check.
        Data is checked where it enters: an array one of the recording ``tapes`` tracks (the
        output of a call or op it recorded, made from inputs checked when they entered, or a
        weight) is not read again at every layer it passes through.
        A call on one array is also refused, before anything runs, when an output it would make
        is larger than the memory budget (:func:`~rnnkit._budget.check_array`: MemoryBudgetError
        naming the layer, the input's shape, the output's, and how to raise the budget)."""
        if isinstance(x, np.ndarray) and self.built:
            self._output_within_budget(x)
        if self.checks_values:
            return x
        for a in (x if isinstance(x, (list, tuple)) else [x]):
            if isinstance(a, np.ndarray) and a.dtype.kind in "fc" and not any(t.tracks(a) for t in tapes) \
                    and not np.isfinite(a).all():
                pos = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
                raise InvalidInputError(f"{self.name}: input holds {a[pos]} at {pos}; expected finite "
                                        f"numbers")
        return x

    def _require_built(self, action: str = "forward") -> None:
        if self._input_shape is None:
            raise NotBuiltError(self.name, action)

    def _as_input(self, x: Any, what: str = "input") -> np.ndarray:
        """``x`` as an array of this layer's dtype (values converted, never reshaped)."""
        arr = as_real_array(x, what, self.name)
        if arr.dtype == self.dtype:
            return arr
        if arr.dtype.kind == "f" and arr.dtype.itemsize > self.dtype.itemsize and arr.size:
            big = np.finfo(self.dtype).max
            with np.errstate(invalid="ignore"):
                over = np.abs(arr) > big  # NaN compares False; Inf is Inf in both dtypes
            over &= np.isfinite(arr)
            if over.any():
                pos = tuple(int(i) for i in np.argwhere(over)[0])
                raise InvalidInputError(
                    f"{self.name}: {what} holds {arr[pos]!r} at {pos}, beyond the largest "
                    f"{self.dtype.name} ({big:.4g}); casting would make it inf. Scale the data or "
                    f"use dtype='float64'")
        return arr.astype(self.dtype)

    def _as_grad(self, grad: Any, expected: tuple[int, ...]) -> np.ndarray:
        g = self._as_input(grad, "upstream gradient")
        if g.shape != expected:
            raise InvalidInputError(
                f"{self.name}: backward expected an upstream gradient of the forward output's "
                f"shape {expected}, got {g.shape}"
            )
        return g

    # -- weights -----------------------------------------------------------------------------
    def _add_weight(self, name: str, value: np.ndarray, *, regularizer: Regularizer | None = None,
                    constraint: Constraint | None = None) -> None:
        """Declare the weight ``name``: its first ``value`` (kept by :meth:`_store_weight`), its
        regularizer and its constraint -- those given, else the ones the layer's Keras keywords
        give that weight (``kernel_regularizer`` for ``kernel``, ...; :mod:`rnnkit._weight_decl`).
        Training reads them from :meth:`declaration`."""
        self._store_weight(name, value)
        keys = keywords_of(name)
        if keys is not None:
            regularizer = self._weight_keywords.get(keys[0]) if regularizer is None else regularizer
            constraint = self._weight_keywords.get(keys[1]) if constraint is None else constraint
        self._decls[name] = WeightDecl(name, self._weights[name].shape, regularizer, constraint)

    def _store_weight(self, name: str, value: np.ndarray) -> None:
        """Keep ``value`` as the weight ``name``'s array: a read-only copy in the layer's dtype
        (a layer keeping other arrays, such as int8 ones, overrides this)."""
        arr = np.array(value, dtype=self.dtype, copy=True, order="C")
        arr.flags.writeable = False
        # a view of a read-only array cannot be made writeable again (flags.writeable = True
        # raises), so weights()/weight() hand out arrays that nobody can change in place
        self._weights[name] = arr.view()

    def weights(self) -> list[WeightEntry]:
        """Every weight, in a fixed order, as (name, read-only view)."""
        return [WeightEntry(n, v) for n, v in self._weights.items()]

    def get_weights(self) -> list[np.ndarray]:
        """Writable COPIES of every weight, in :meth:`weights` order (Keras' ``get_weights``).
        ``set_weights(layer.get_weights())`` copies one layer's weights into another of the
        same configuration. While ``fit`` trains the layer in another thread they are the
        weights of one whole optimizer step (:mod:`rnnkit._consistency`)."""
        return WEIGHTS.read(self._copy_weights)

    def _copy_weights(self) -> list[np.ndarray]:
        return [np.array(v) for v in self._weights.values()]

    def set_weights(self, weights: Any) -> None:
        """Keras' ``layer.set_weights(weights)``: ONE list of arrays in :meth:`weights` order (a
        Keras layer's ``get_weights()``), each in its weight's shape or in Keras' spelling of it
        (:meth:`from_keras_weight`). The layer must be built. The count, every shape and every
        value are checked before anything changes: InvalidInputError for another count (naming
        the weights), WeightShapeError naming the position, the weight, the expected and the
        given shape, InvalidInputError naming a weight holding NaN or Inf."""
        self._require_built("set_weights")
        names = self.weight_names
        if not isinstance(weights, (list, tuple)):
            raise InvalidInputError(f"{self.name}.set_weights: expected one list of {len(names)} arrays "
                                    f"({', '.join(names)}), got {type(weights).__name__}")
        if len(weights) != len(names):
            raise InvalidInputError(f"{self.name}.set_weights: expected {len(names)} arrays "
                                    f"({', '.join(names)}), got {len(weights)}")
        arrs = [as_weight_array(self.from_keras_weight(n, w), f"{self.name}.{n}")
                for n, w in zip(names, weights, strict=True)]
        for i, (n, a) in enumerate(zip(names, arrs, strict=True)):
            want = self.weight(n).shape
            if a.shape != want:
                raise WeightShapeError(n, want, a.shape, f"position {i} of layer {self.name}'s list")
            arrs[i] = check_finite_weight(a, f"{self.name}.{n}", self.dtype)
        with WEIGHTS:   # one write: a reader in another thread sees all of it or none
            for n, a in zip(names, arrs, strict=True):
                self.set_weight(n, a)

    @property
    def weight_names(self) -> list[str]:
        return list(self._weights)

    def from_keras_weight(self, name: str, value: Any) -> Any:
        """``value`` as this layer stores its weight ``name`` where ``value`` is Keras' spelling
        of that weight and Keras spells it another way (a recurrent layer's one-row bias:
        Keras' ``(G*H,)`` for the ``(1, G*H)`` kept here); anything else is returned as given,
        for the shape checks that follow to refuse a misfit. Default: as given."""
        return value

    @property
    def trainable_names(self) -> list[str]:
        """The weights training updates (every weight, unless the layer says otherwise)."""
        return list(self._weights)

    def weight(self, name: str) -> np.ndarray:
        """The live weight ``name`` (read-only view)."""
        self._require_built("weight")
        try:
            return self._weights[name]
        except KeyError:
            raise UnknownWeightError(
                f"{self.name} has no weight {name!r}; it has {list(self._weights)}") from None

    def set_weight(self, name: str, value: Any, *, check_finite: bool = True) -> None:
        """Replace one weight; the shape must match exactly (WeightShapeError otherwise). NaN or
        Inf is refused (InvalidInputError naming the weight; nothing changes), as the file
        loaders refuse it, and so is a finite value beyond the layer's dtype (1e300 for a
        float32 layer: the cast would make it Inf; finiteness is checked after the cast).
        ``check_finite=False`` skips those checks: the optimizer and the constraints write
        with it, since ``fit`` finds a NaN/Inf weight and names the step that made it
        (:class:`~rnnkit.NonFiniteError`)."""
        old = self.weight(name)
        arr = as_weight_array(value, f"{self.name}.{name}")
        if arr.shape != old.shape:
            raise WeightShapeError(name, old.shape, arr.shape, f"layer {self.name}")
        if arr.dtype.kind not in "biuf":
            raise InvalidInputError(f"{self.name}.{name}: weights must be real numbers, got {arr.dtype}")
        if check_finite:
            arr = check_finite_weight(arr, f"{self.name}.{name}", self.dtype)
        self._store_weight(name, arr)  # (its declaration stays)

    def _install(self, name: str, arr: np.ndarray) -> None:
        """Make ``arr`` (a new array nobody else holds, of the weight's shape and dtype, e.g. an
        optimizer's update) the weight ``name`` without copying it; anything else, and any
        weight of a layer whose :meth:`set_weight` does more (a wrapper keeping its parts in
        step), goes through :meth:`set_weight`."""
        old = self._weights.get(name)
        if (type(self).set_weight is not Layer.set_weight or old is None or arr.shape != old.shape
                or arr.dtype != self.dtype or not arr.flags.owndata or not arr.flags.c_contiguous
                or not arr.flags.writeable):
            self.set_weight(name, arr, check_finite=False)  # the trainer checks the new weights
            return
        arr.flags.writeable = False
        self._weights[name] = arr.view()

    def _share(self, name: str, arr: np.ndarray) -> None:
        """Make ``arr`` the weight ``name`` without a copy: a read-only C-contiguous array of the
        weight's shape and the layer's dtype whose memory nobody writes (a view of weights its
        owner holds and replaces, never writes: an ``rnnkit.rnn`` net's parameters, whose
        transposes are its layers' kernels). Anything else goes through :meth:`set_weight`."""
        old = self._weights.get(name)
        if (old is None or arr.shape != old.shape or arr.dtype != self.dtype or arr.flags.writeable
                or not arr.flags.c_contiguous):
            self.set_weight(name, arr, check_finite=False)
            return
        self._weights[name] = arr

    def declaration(self, name: str) -> WeightDecl:
        """How the weight ``name`` was declared: shape, regularizer, constraint (see
        :meth:`_add_weight`)."""
        self.weight(name)  # NotBuiltError / UnknownWeightError
        return self._decls.get(name) or WeightDecl(name, self._weights[name].shape)

    @property
    def regularizers(self) -> dict[str, Regularizer]:
        """``{weight name: regularizer}`` of the weights that have one: their declarations once
        built; before, the weights the keywords name."""
        if not self.built:
            return {weight_of(k): v for k, v in self._weight_keywords.items() if k.endswith("_regularizer")}
        decls = {n: self.declaration(n) for n in self.weight_names}
        return {n: d.regularizer for n, d in decls.items() if d.regularizer is not None}

    @property
    def constraints(self) -> dict[str, Constraint]:
        """``{weight name: constraint}``, as :attr:`regularizers`."""
        if not self.built:
            return {weight_of(k): v for k, v in self._weight_keywords.items() if k.endswith("_constraint")}
        decls = {n: self.declaration(n) for n in self.weight_names}
        return {n: d.constraint for n, d in decls.items() if d.constraint is not None}

    def _check_weight_keywords(self) -> None:
        """InvalidParameterError when a regularizer or constraint keyword names a weight the
        (built) layer does not have."""
        for key in self._weight_keywords:
            if weight_of(key) not in self.weight_names:
                raise InvalidParameterError(
                    f"{self.name} ({type(self).__name__}) has {key.rsplit('_', 1)[1]} on weight "
                    f"{weight_of(key)!r}, which it does not have; its weights: {self.weight_names}")

    def param_count(self) -> int:
        """Number of scalar weights (0 before build)."""
        return int(sum(v.size for v in self._weights.values()))

    # -- configuration -----------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this layer (JSON-serialisable)."""
        return {"seed": self._seed, "dtype": self.dtype.name, "name": self.name}

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k not in ("name",))
        return f"{type(self).__name__}({cfg})"
