"""``Optimizer``: the base every optimizer shares — learning rate, decay, clipping, state, apply.

One call of :meth:`Optimizer.apply_gradients` is one training step::

    pairs = [(layer, "kernel", dL/dkernel), (layer, "bias", dL/dbias), ...]
    1. check every pair (the layer has the weight, the gradient has its shape, no duplicates)
    2. clip the gradients (at most one of the three options, Keras' semantics):
         clipnorm          g <- g * c / max(||g||, c)          each tensor on its own
         global_clipnorm   g <- g * c / max(||G||, c)          ||G|| = sqrt(sum ||g_i||^2) over
                                                                every tensor of this call
         clipvalue         g <- clip(g, -c, c)                 elementwise
       with ``clip_formula="torch"`` the two norm clips follow PyTorch's
       ``torch.nn.utils.clip_grad_norm_`` instead:
                           g <- g * min(1, c / (||G|| + 1e-6))  (||g|| for clipnorm)
    3. lr_t = learning_rate / (1 + decay * iterations)         time-based decay (Keras' legacy
                                                                ``decay``); ``iterations`` counts
                                                                the steps taken BEFORE this one
    4. new = rule(weight, g, state, lr_t) for each pair, installed as the weight without a copy
    5. iterations += 1

Per-parameter state (moments, velocities, the step count ``t``) lives in the optimizer, keyed by
``(layer, weight_name)``; a parameter seen for the first time starts with zero state and ``t = 1``.
Computation happens in the weight's dtype. Weights are read-only arrays: a step replaces each
by the rule's new array (never copied, never written to afterwards); the gradients handed in are
read, never written to or copied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

import numpy as np

from rnnkit._consistency import WEIGHTS
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._layer import Layer
from rnnkit._numbers import check_float
from rnnkit.optimizers._norms import sum_of_squares

GradPair = tuple["Layer", str, np.ndarray]


def _triples(pairs: Iterable[Any], where: str) -> list[Any]:
    """``(layer, name, gradient)`` triples from triples or Keras' ``(gradient, (layer, name))``
    pairs (None gradients dropped; InvalidInputError when every gradient is None)."""
    out: list[Any] = []
    skipped = []
    for item in pairs:
        if isinstance(item, tuple) and len(item) == 2:
            grad, ref = item
            if not (isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[0], Layer)
                    and isinstance(ref[1], str)):
                raise InvalidInputError(
                    f"{where}: a (gradient, weight) pair names the weight as (layer, weight name), as "
                    f"model.trainable_weights() lists them; got a {type(ref).__name__}")
            if grad is None:
                skipped.append(f"{ref[0].name}.{ref[1]}")
                continue
            out.append((ref[0], ref[1], grad))
        else:
            out.append(item)
    if skipped and not out:
        raise InvalidInputError(f"{where}: no gradient for any weight (every gradient is None: "
                                f"{', '.join(skipped)}); expected at least one array")
    return out


#: the frameworks whose update formulas an optimizer can follow (its ``formula=`` argument)
FORMULAS = ("keras", "torch")


def check_formula(value: Any, where: str) -> str:
    """``value`` if it is one of :data:`FORMULAS`, else InvalidParameterError saying so."""
    if not isinstance(value, str) or value not in FORMULAS:
        raise InvalidParameterError(f"{where}: formula must be one of {list(FORMULAS)} (the framework "
                                    f"whose update equations to follow), got {value!r}")
    return value


def _check_clip(value: Any, arg: str, where: str) -> float | None:
    return None if value is None else check_float(value, arg, where, lo=0.0, lo_open=True)


#: the formulas of the norm clips: Keras' ``c / max(norm, c)`` and PyTorch's
#: ``min(1, c / (norm + 1e-6))`` (``torch.nn.utils.clip_grad_norm_``)
CLIP_FORMULAS = ("keras", "torch")
#: the term ``torch.nn.utils.clip_grad_norm_`` adds to the norm it divides by
TORCH_CLIP_EPS = 1e-6


def _clip_scale(norm: float, c: float, formula: str) -> float | None:
    """The factor a norm clip multiplies the gradients by (None: leave them as they are)."""
    if formula == "torch":
        coef = c / (norm + TORCH_CLIP_EPS)
        return coef if coef < 1.0 else None
    return c / norm if norm > c else None


class Optimizer:
    """Base class. Subclasses implement :meth:`_update` (and :meth:`_init_state` for slots).

    Args (keyword-only here, every subclass takes them):
        learning_rate: step size (>= 0); settable later (``opt.learning_rate = 0.01``), which
            is what learning-rate schedulers do.
        decay: time-based decay, ``lr_t = learning_rate / (1 + decay * iterations)`` (>= 0).
        clipnorm / global_clipnorm / clipvalue: gradient clipping (> 0; at most one of them).
        clip_formula: ``"keras"`` (default: ``g * c / max(norm, c)``) or ``"torch"`` (PyTorch's
            ``clip_grad_norm_``: ``g * min(1, c / (norm + 1e-6))``), the formula of
            ``clipnorm`` and ``global_clipnorm``.
    """

    #: the name ``get`` / ``serialize`` use
    name: ClassVar[str] = "optimizer"

    def __init__(self, learning_rate: float = 0.01, *, decay: float = 0.0, clipnorm: float | None = None,
                 clipvalue: float | None = None, global_clipnorm: float | None = None,
                 clip_formula: str = "keras") -> None:
        where = type(self).__name__
        if not isinstance(clip_formula, str) or clip_formula not in CLIP_FORMULAS:
            raise InvalidParameterError(f"{where}: clip_formula must be one of {list(CLIP_FORMULAS)} "
                                        f"(whose norm-clipping formula to follow), got {clip_formula!r}")
        self.clip_formula = clip_formula
        self._learning_rate = check_float(learning_rate, "learning_rate", where, lo=0.0)
        self.decay = check_float(decay, "decay", where, lo=0.0)
        self.clipnorm = _check_clip(clipnorm, "clipnorm", where)
        self.clipvalue = _check_clip(clipvalue, "clipvalue", where)
        self.global_clipnorm = _check_clip(global_clipnorm, "global_clipnorm", where)
        set_ = [n for n, v in (("clipnorm", clipnorm), ("clipvalue", clipvalue),
                               ("global_clipnorm", global_clipnorm)) if v is not None]
        if len(set_) > 1:
            raise InvalidParameterError(
                f"{where}: only one of clipnorm, clipvalue and global_clipnorm can be set, got {set_}"
            )
        #: number of apply_gradients calls so far
        self.iterations: int = 0
        self._state: dict[tuple[Layer, str], dict[str, Any]] = {}

    # -- learning rate -----------------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The base learning rate (before ``decay``)."""
        return self._learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self._learning_rate = check_float(value, "learning_rate", type(self).__name__, lo=0.0)

    @property
    def current_learning_rate(self) -> float:
        """The rate the next step uses: ``learning_rate / (1 + decay * iterations)``."""
        return self._learning_rate / (1.0 + self.decay * self.iterations)

    # -- state -------------------------------------------------------------------------------
    def get_state(self, layer: Layer, name: str) -> dict[str, Any]:
        """The slots of one parameter (copies), e.g. ``{"t": 2, "m": ..., "v": ...}``; ``{}``
        before its first step."""
        st = self._state.get((layer, name), {})
        return {k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in st.items()}

    def reset(self) -> None:
        """Forget every slot and set ``iterations`` back to 0."""
        self._state.clear()
        self.iterations = 0

    def _init_state(self, w: np.ndarray) -> dict[str, Any]:
        """The zero slots of a parameter seen for the first time (override)."""
        return {}

    def _update(self, w: np.ndarray, g: np.ndarray, state: dict[str, Any], lr: float) -> np.ndarray:
        """The new value of weight ``w`` given the (clipped) gradient ``g``; updates ``state``."""
        raise NotImplementedError

    # -- the step ----------------------------------------------------------------------------
    def _check_pairs(self, pairs: Iterable[GradPair]) -> list[tuple[Layer, str, np.ndarray, np.ndarray]]:
        where = f"{type(self).__name__}.apply_gradients"
        out: list[tuple[Layer, str, np.ndarray, np.ndarray]] = []
        seen: set[tuple[int, str]] = set()
        for item in pairs:
            try:
                layer, name, grad = item
            except (TypeError, ValueError):
                raise InvalidInputError(
                    f"{where}: expected (layer, weight_name, gradient) triples, got {item!r}"
                ) from None
            if not isinstance(layer, Layer) or not isinstance(name, str):
                raise TypeError(f"{where}: each pair must be (Layer, weight name str, gradient), got "
                                f"({type(layer).__name__}, {name!r}, ...)")
            try:
                w = layer.weight(name)
            except KeyError as e:
                raise InvalidInputError(f"{where}: {e.args[0]}") from None
            key = (id(layer), name)
            if key in seen:
                raise InvalidInputError(f"{where}: {layer.name}.{name} appears twice in one call; "
                                        f"sum its gradients first")
            seen.add(key)
            g = np.asarray(grad)
            if g.dtype.kind not in "biuf":
                raise InvalidInputError(f"{where}: gradient of {layer.name}.{name} must hold real "
                                        f"numbers, got dtype {g.dtype}")
            if g.shape != w.shape:
                raise InvalidInputError(f"{where}: gradient of {layer.name}.{name} must have the "
                                        f"weight's shape {w.shape}, got {g.shape}")
            out.append((layer, name, w, g.astype(w.dtype, copy=False)))  # the rules never write to g
        return out

    def _clip(self, grads: list[np.ndarray]) -> list[np.ndarray]:
        if self.global_clipnorm is not None:
            total = math.sqrt(sum(sum_of_squares(g) for g in grads))
            scale = _clip_scale(total, self.global_clipnorm, self.clip_formula)
            return grads if scale is None else [g * scale for g in grads]
        if self.clipnorm is not None:
            out = []
            for g in grads:
                scale = _clip_scale(math.sqrt(sum_of_squares(g)), self.clipnorm, self.clip_formula)
                out.append(g if scale is None else g * scale)
            return out
        if self.clipvalue is not None:
            c = self.clipvalue
            return [np.clip(g, -c, c) for g in grads]
        return grads

    def apply_gradients(self, pairs: Iterable[Any]) -> list[np.ndarray]:
        """One step over ``pairs`` = [(layer, weight_name, gradient), ...] (see the module doc),
        or Keras' spelling ``zip(grads, weights)``: ``(gradient, (layer, weight_name))`` pairs,
        as ``tape.gradient(loss, model.trainable_weights())`` and the weight list make them; a
        None gradient there (a weight the loss did not reach) is skipped, as Keras skips it.
        Returns the new values of the weights (the arrays the rule made), in pair order.

        Every pair is checked before anything changes: a bad pair raises InvalidInputError and
        leaves every weight, slot and ``iterations`` as they were. The step is one write
        (:mod:`rnnkit._consistency`): ``predict`` and friends in other threads see every weight
        from before it or every weight from after it (a custom loop's or ``train_step``'s step
        too).
        """
        checked = self._check_pairs(_triples(pairs, f"{type(self).__name__}.apply_gradients"))
        with WEIGHTS:   # one write: a reader in another thread sees the weights before or after it
            return self._step(checked)

    def _apply_known(self, pairs: list[GradPair]) -> list[np.ndarray]:
        """:meth:`apply_gradients` for pairs whose layer, weight name and uniqueness the caller
        vouches for (the trainer's: each trainable weight of the model it trains, once). Only
        the gradient's shape and dtype are looked at; a pair of another shape goes through
        :meth:`apply_gradients`' checks (and their error)."""
        checked: list[tuple[Layer, str, np.ndarray, np.ndarray]] = []
        for layer, name, g in pairs:
            w = layer._weights.get(name)
            if w is None:  # a layer keeping its weights elsewhere (a wrapper)
                w = layer.weight(name)
            if g.shape != w.shape:
                return self.apply_gradients(pairs)
            checked.append((layer, name, w, g if g.dtype == w.dtype else g.astype(w.dtype)))
        return self._step(checked)

    def _scratch(self, like: np.ndarray) -> np.ndarray:
        """A work array of ``like``'s shape, dtype and memory order (Fortran for a Fortran-ordered
        weight, such as an ``rnnkit.rnn`` net's matrices: every operand of the rule's element-wise
        passes then runs in one order) that this optimizer keeps and reuses (its contents are
        undefined; a rule uses it within one ``_update``, never returns it)."""
        bufs: dict[tuple[Any, ...], np.ndarray] = self.__dict__.setdefault("_buffers", {})
        order: Literal["C", "F"] = "F" if like.flags.f_contiguous and not like.flags.c_contiguous else "C"
        key = (like.shape, like.dtype.str, order)
        buf = bufs.get(key)
        if buf is None:
            buf = bufs[key] = np.empty(like.shape, like.dtype, order=order)
        return buf

    def _step(self, checked: list[tuple[Layer, str, np.ndarray, np.ndarray]]) -> list[np.ndarray]:
        """Steps 2-5 of the module docstring on checked ``(layer, name, weight, gradient)``."""
        grads = self._clip([g for *_, g in checked])
        lr = self.current_learning_rate
        new: list[np.ndarray] = []
        for (layer, name, w, _), g in zip(checked, grads, strict=True):
            key = (layer, name)
            state = self._state.get(key)
            if state is None:
                state = {"t": 0, **self._init_state(w)}
                self._state[key] = state
            state["t"] += 1
            value = self._update(w, g, state, lr)
            layer._install(name, value)
            new.append(value)
        self.iterations += 1
        return new

    # -- configuration -----------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The constructor keywords that rebuild this optimizer (JSON-serialisable)."""
        return {"learning_rate": self._learning_rate, "decay": self.decay, "clipnorm": self.clipnorm,
                "clipvalue": self.clipvalue, "global_clipnorm": self.global_clipnorm,
                "clip_formula": self.clip_formula}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Optimizer:
        """A fresh optimizer (no slots, ``iterations = 0``) from :meth:`get_config`'s dict."""
        return cls(**config)

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items()
                        if v is not None and not (k == "decay" and v == 0.0)
                        and not (k == "clip_formula" and v == "keras"))
        return f"{type(self).__name__}({cfg})"
