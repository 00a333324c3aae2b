"""``Layer``: the base every layer shares — weights, build, seeding, dtype, the weight API.

A built layer holds its configuration and its weights, nothing else. Weights are stored as
read-only arrays; only :meth:`Layer.set_weight` (used by ``set_weights``, optimizers and
loaders) replaces them, after checking the shape and (unless told not to) that every value is
finite. Everything a pass produces lives in the
:class:`~rnnkit.Ctx` handed to ``forward`` / ``backward``.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._ctx import Ctx
from rnnkit._errors import (
    GraphCallError,
    InvalidInputError,
    InvalidParameterError,
    NotBuiltError,
    UnknownWeightError,
    WeightShapeError,
)
from rnnkit._random import check_seed, make_rng
from rnnkit._shape import Shape, pop_input_shape

_DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def resolve_dtype(dtype: Any, where: str) -> np.dtype:
    """``"float32"`` / ``"float64"`` (or the numpy types) to a numpy dtype. ``None`` is refused
    (numpy would read it as float64)."""
    try:
        dt = None if dtype is None else np.dtype(dtype)
    except (TypeError, ValueError):
        dt = None
    if dt is None or dt.name not in _DTYPES:
        raise InvalidParameterError(f"{where}: dtype must be 'float32' or 'float64', got {dtype!r}")
    return dt


def check_positive_int(value: object, what: str, where: str) -> int:
    """An int >= 1 or InvalidParameterError naming the argument."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < 1:  # type: ignore[call-overload]
        raise InvalidParameterError(f"{where}: {what} must be an int >= 1, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def check_bool(value: object, what: str, where: str) -> bool:
    """A bool (Python or numpy) or TypeError naming the argument: no truthy strings."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{where}: {what} must be a bool (True or False), got {value!r}")
    return bool(value)


def as_weight_array(value: Any, where: str) -> np.ndarray:
    """``value`` as an array (``np.asarray``), or InvalidInputError naming ``where`` when numpy
    cannot make one (a ragged list, a tensor that requires grad)."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError, RuntimeError) as e:
        raise InvalidInputError(f"{where}: not an array ({type(value).__name__}: {e})") from None


def check_finite_weight(value: np.ndarray, where: str) -> None:
    """InvalidInputError when the weight ``value`` holds NaN or Inf, naming ``where`` (the layer
    and weight, or the model's key) and the first such position: what the file loaders refuse."""
    if value.dtype.kind in "fc" and not np.isfinite(value).all():
        pos = tuple(int(i) for i in np.argwhere(~np.isfinite(value))[0])
        raise InvalidInputError(f"{where}: the weight holds {value[pos]} at {pos}; expected finite numbers "
                                f"(nothing was changed)")


def check_real(value: object, what: str, where: str) -> float:
    """A finite real number (Python or numpy, not a bool) as a float, or InvalidParameterError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidParameterError(f"{where}: {what} must be a real number, got {value!r}")
    out = float(value)
    if out != out or out in (float("inf"), float("-inf")):
        raise InvalidParameterError(f"{where}: {what} must be finite, got {value!r}")
    return out


def check_ctx(ctx: Any, where: str) -> Ctx:
    """``ctx``, or a TypeError naming ``where`` when it is not an :class:`~rnnkit.Ctx`. The doors
    that take a caller's Ctx check it once (``layer(x, ctx)``, ``forward_mut``, a model's
    ``forward`` / ``backward``); a layer's own ``forward`` / ``backward`` is the raw pass, which
    expects a Ctx and checks nothing."""
    if not isinstance(ctx, Ctx):
        raise TypeError(f"{where}: ctx must be an rnnkit.Ctx (Ctx.inference() or Ctx.training(seed)), "
                        f"got {type(ctx).__name__}; layer(x) runs inference")
    return ctx


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


class Layer(metaclass=_LayerType):
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
        self.name: str = name if name is not None else type(self).__name__
        self._seed = check_seed(seed, self.name)
        self.dtype: np.dtype = resolve_dtype(dtype, self.name)
        self._weights: dict[str, np.ndarray] = {}
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
        self._weights = {}
        self._build(shp, make_rng(self._seed))
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
        raise NotImplementedError

    def with_random_state(self, seed: int) -> Layer:
        """Record ``seed`` for the build (chainable). A built layer redraws its weights."""
        self._seed = check_seed(seed, self.name)
        if self._input_shape is not None:
            shape, self._input_shape = self._input_shape, None
            self.build(shape)
        return self

    # -- passes ------------------------------------------------------------------------------
    def forward(self, x: np.ndarray, ctx: Ctx) -> np.ndarray:
        raise NotImplementedError

    def backward(self, grad: np.ndarray, ctx: Ctx) -> Any:
        """Add the weights' gradients into ``ctx`` and return dL/dx (an array; a list for a
        layer of several inputs); a layer may return None instead when
        ``ctx.needs_input_grad(self)`` is False (nobody reads it)."""
        raise NotImplementedError

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
        the raw pass, which checks nothing of the values (NaN in, NaN out)."""
        return self.forward(self._finite(x), Ctx.inference())

    def __call__(self, x: Any, ctx: Ctx | None = None, *, initial_state: Any = None) -> Any:
        """On arrays: :meth:`forward` in ``ctx`` (default: an inference Ctx) after refusing an
        input holding NaN or Inf (as :meth:`predict`); an unbuilt layer is first built for one
        array's shape (batch free). ``initial_state=[h, c]`` starts a recurrent layer there.

        On graph nodes (``rk.Input(...)``, another call's output; Keras' functional API): a
        symbolic call building the layer for the nodes' shapes. Returns a node, or the list of
        a multi-output call's nodes (``out, h, c = rk.LSTM(8, return_state=True)(x)``)."""
        states = initial_state if isinstance(initial_state, (list, tuple)) else [initial_state]
        for a in [*(x if isinstance(x, (list, tuple)) else [x]), *states]:
            if getattr(type(a), "_symbolic", False):
                if ctx is not None:
                    raise TypeError(f"{self.name}: a call on graph nodes takes no ctx")
                return type(a)._call_layer(self, x, initial_state)
        if initial_state is not None and isinstance(x, (list, tuple)):
            raise InvalidInputError(f"{self.name}: initial_state= came with a list input; pass x "
                                    f"alone, or [x, *initial_state] without initial_state=")
        if not self.built and not isinstance(x, (list, tuple)):
            if not np.shape(x):
                raise InvalidInputError(f"{self.name}: expected an array input, got a scalar")
            self.build(Shape.with_free_batch(np.shape(x)))
        x = x if initial_state is None else [x, *states]
        run = Ctx.inference() if ctx is None else check_ctx(ctx, f"{self.name}.forward")
        return self.forward(self._finite(x), run)

    def _record_call(self, inputs: Any, outputs: Any) -> None:
        """Note a call on graph nodes (nodes read, node(s) made) for :attr:`input` / :attr:`output`."""
        self.__dict__.setdefault("_graph_calls", []).append((inputs, outputs))

    def _one_call(self, what: str) -> tuple[Any, Any]:
        calls = self.__dict__.get("_graph_calls", [])
        if len(calls) != 1:
            raise GraphCallError(f"{self.name}: layer.{what} is defined for a layer called once on "
                                 f"graph nodes; this one was called {len(calls)} times")
        return calls[0]

    @property
    def input(self) -> Any:
        """The node(s) the one call on graph nodes read (a list for several; Keras' ``layer.input``)."""
        return self._one_call("input")[0]

    @property
    def output(self) -> Any:
        """The node of the one call on graph nodes, a list for several outputs (Keras' ``layer.output``)."""
        return self._one_call("output")[1]

    def _finite(self, x: Any) -> Any:
        """``x``, refused when it (or, for a list of inputs, one of them) is an array of floats
        holding NaN or Inf; other inputs are left to :meth:`forward` to convert and check."""
        if self.checks_values:
            return x
        for a in (x if isinstance(x, (list, tuple)) else [x]):
            if isinstance(a, np.ndarray) and a.dtype.kind in "fc" and not np.isfinite(a).all():
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
    def _add_weight(self, name: str, value: np.ndarray) -> None:
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
        ``set_weights(*layer.get_weights())`` copies one layer's weights into another of the
        same configuration."""
        return [np.array(v) for v in self._weights.values()]

    @property
    def weight_names(self) -> list[str]:
        return list(self._weights)

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
        loaders refuse it. ``check_finite=False`` skips that check: the optimizer and the
        constraints write with it, since ``fit`` finds a NaN/Inf weight and names the step that
        made it (:class:`~rnnkit.NonFiniteError`)."""
        old = self.weight(name)
        arr = as_weight_array(value, f"{self.name}.{name}")
        if arr.shape != old.shape:
            raise WeightShapeError(name, old.shape, arr.shape, f"layer {self.name}")
        if arr.dtype.kind not in "biuf":
            raise InvalidInputError(f"{self.name}.{name}: weights must be real numbers, got {arr.dtype}")
        if check_finite:
            check_finite_weight(arr, f"{self.name}.{name}")
        self._add_weight(name, arr)

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
