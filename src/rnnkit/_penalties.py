"""Regularizers and constraints on layers, and where they enter training (Keras' rules).

A layer carries them in three documented attributes, set by :func:`attach` (which the layers'
``kernel_regularizer=`` ... keywords call)::

    layer.regularizers          {weight name: Regularizer}     e.g. {"kernel": L2(0.01)}
    layer.constraints           {weight name: Constraint}      e.g. {"kernel": MaxNorm(2.0)}
    layer.activity_regularizer  Regularizer | None             on the layer's output

Keras' keyword names map to weight names: ``kernel_*`` -> ``kernel``, ``recurrent_*`` ->
``recurrent_kernel``, ``bias_*`` -> ``bias``, ``embeddings_*`` -> ``embeddings``.

In a training step (and in ``evaluate``, as Keras reports it) the loss is::

    loss = sum over outputs of loss(y, pred)
         + sum over (layer, w) of layer.regularizers[w](weight)         before the update
         + sum over layers of activity_regularizer(output) / batch      Keras divides by batch

and the gradient gets ``regularizer.grad(weight)`` for each regularized weight (and
``activity.grad(output) / batch`` on the layer's output gradient). After the optimizer step,
every constrained weight is replaced by ``constraint(weight)``; a recurrent layer's ``(1, N)``
bias is constrained as Keras' flat ``(N,)`` vector. Metrics are not affected.

Who applies what: the trainer finds the regularized and constrained weights once per run
(:class:`Plan`) and does nothing for a model without them; a model (Sequential, GraphModel)
records a layer's activity penalty in the pass's Ctx after its forward
(:func:`activity_forward`) and adds its gradient before its backward
(:func:`activity_backward`). A layer's own ``forward`` / ``backward`` are never changed, so a
bare ``layer.forward`` has no activity penalty (nor does a layer inside a wrapper such as
Bidirectional).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from rnnkit import constraints, regularizers
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidParameterError
from rnnkit._layer import Layer


class Model(Protocol):
    """What this module reads of a model: its weights by name (and ``layers``, when it has them)."""

    def named_weights(self) -> dict[str, tuple[Layer, str]]: ...

_ROLES = {"kernel": "kernel", "recurrent": "recurrent_kernel", "bias": "bias", "embeddings": "embeddings"}
KEYWORDS = (*(f"{r}_{kind}" for kind in ("regularizer", "constraint") for r in _ROLES),
            "activity_regularizer")


def attach(layer: Layer, **keywords: Any) -> Layer:
    """Set regularizers and constraints on ``layer`` from Keras' keyword names
    (``kernel_regularizer``, ``recurrent_regularizer``, ``bias_regularizer``,
    ``embeddings_regularizer``, ``activity_regularizer``, ``kernel_constraint``,
    ``recurrent_constraint``, ``bias_constraint``, ``embeddings_constraint``); each value is
    anything ``rnnkit.regularizers.get`` / ``rnnkit.constraints.get`` takes, None removes it.
    Returns the layer. A weight the (built) layer lacks is refused, typed."""
    if not isinstance(layer, Layer):
        raise TypeError(f"attach: expected a Layer, got {type(layer).__name__}")
    regs: dict[str, Any] = dict(getattr(layer, "regularizers", None) or {})
    cons: dict[str, Any] = dict(getattr(layer, "constraints", None) or {})
    for key, value in keywords.items():
        if key not in KEYWORDS:
            raise TypeError(f"{layer.name}: unknown keyword {key!r}; expected one of {list(KEYWORDS)}")
        if key == "activity_regularizer":
            layer.activity_regularizer = _get(regularizers.get, value, key, layer)
            continue
        role, kind = key.rsplit("_", 1)
        name = _ROLES[role]
        table = regs if kind == "regularizer" else cons
        obj: Any = _get(regularizers.get if kind == "regularizer" else constraints.get, value, key, layer)
        if obj is None:
            table.pop(name, None)
        else:
            table[name] = obj
    layer.regularizers = regs  # type: ignore[attr-defined]
    layer.constraints = cons  # type: ignore[attr-defined]
    if layer.built:
        check_layer(layer)
    return layer


def _get(getter: Any, value: Any, key: str, layer: Layer) -> Any:
    """``getter(value)``; its InvalidParameterError names the layer and the keyword."""
    try:
        return getter(value)
    except InvalidParameterError as e:
        raise InvalidParameterError(f"{layer.name} ({type(layer).__name__}): {key}={value!r} is refused: "
                                    f"{e}") from None


def config_of(layer: Layer) -> dict[str, Any]:
    """The layer's regularizers and constraints as Keras keywords -> serialized dicts (only
    those set), for ``get_config`` and model files."""
    inv = {w: r for r, w in _ROLES.items()}
    out: dict[str, Any] = {}
    for name, reg in (getattr(layer, "regularizers", None) or {}).items():
        out[f"{inv[name]}_regularizer"] = regularizers.serialize(reg)
    for name, con in (getattr(layer, "constraints", None) or {}).items():
        out[f"{inv[name]}_constraint"] = constraints.serialize(con)
    act = getattr(layer, "activity_regularizer", None)
    if act is not None:
        out["activity_regularizer"] = regularizers.serialize(act)
    return out


def check_layer(layer: Layer) -> None:
    """InvalidParameterError when a regularizer or constraint names a weight the layer lacks."""
    for what in ("regularizers", "constraints"):
        for name in getattr(layer, what, None) or {}:
            if name not in layer.weight_names:
                raise InvalidParameterError(
                    f"{layer.name} ({type(layer).__name__}) has {what[:-1]} on weight {name!r}, which it "
                    f"does not have; its weights: {layer.weight_names}")


def layers_of(model: Model) -> list[Layer]:
    """Every layer of the model, the layers inside a wrapper (Bidirectional's two directions)
    included."""
    seen: dict[int, Layer] = {}
    for layer in [*(la for la, _ in model.named_weights().values()), *(getattr(model, "layers", []) or [])]:
        if isinstance(layer, Layer):
            seen.setdefault(id(layer), layer)
            for _, inner in getattr(layer, "_parts", None) or []:
                if isinstance(inner, Layer):
                    seen.setdefault(id(inner), inner)
    return list(seen.values())


def _entries(model: Model) -> list[tuple[Layer, str, Layer, str]]:
    """``(owner, name, holder, inner)`` for every weight: ``owner.weight(name)`` is how the model
    (and the Ctx's gradients) name it; ``holder.regularizers[inner]`` / ``constraints[inner]``
    is where its regularizer / constraint lives (the owner itself, or the direction inside a
    wrapper such as Bidirectional)."""
    out: list[tuple[Layer, str, Layer, str]] = []
    seen: set[tuple[int, str]] = set()
    for layer, name in model.named_weights().values():
        if (id(layer), name) in seen:
            continue
        seen.add((id(layer), name))
        holder, inner = layer, name
        split = getattr(layer, "_split", None)
        if callable(split) and name not in (getattr(layer, "regularizers", None) or {}) \
                and name not in (getattr(layer, "constraints", None) or {}):
            holder, inner = split(name)
        out.append((layer, name, holder, inner))
    return out


def has_any(model: Model) -> bool:
    return any(getattr(la, "regularizers", None) or getattr(la, "constraints", None)
               or getattr(la, "activity_regularizer", None) is not None for la in layers_of(model))


class Plan:
    """The regularized and the constrained weights of a model, found once (a training run reads
    them as they are when it starts): ``regs`` ``(owner, name, Regularizer)``, ``cons``
    ``(owner, name, Constraint, flat)`` (``flat``: a recurrent layer's ``(1, N)`` bias,
    constrained as Keras' ``(N,)``). Empty lists when the model has none, and then training
    does nothing for them."""

    def __init__(self, model: Model) -> None:
        self.regs: list[tuple[Layer, str, Any]] = []
        self.cons: list[tuple[Layer, str, Any, bool]] = []
        for owner, name, holder, inner in _entries(model):
            reg = (getattr(holder, "regularizers", None) or {}).get(inner)
            if reg is not None:
                self.regs.append((owner, name, reg))
            con = (getattr(holder, "constraints", None) or {}).get(inner)
            if con is not None:
                w = owner.weight(name)
                flat = inner == "bias" and w.ndim == 2 and w.shape[0] == 1 and not _is_dense_like(holder)
                self.cons.append((owner, name, con, flat))

    def weight_penalty(self) -> float:
        """The sum of every weight regularizer's penalty (0.0 when none)."""
        total = 0.0
        for owner, name, reg in self.regs:
            total += reg.penalty(owner.weight(name))
        return total

    def add_grads(self, pairs: list[Any]) -> list[Any]:
        """``pairs`` (``(layer, name, gradient)``) with each weight regularizer's gradient added
        (a new array; a new pair for a weight without a gradient)."""
        if not self.regs:
            return pairs
        index = {(id(la), n): k for k, (la, n, _) in enumerate(pairs)}
        for owner, name, reg in self.regs:
            w = owner.weight(name)
            extra = reg.grad(w).astype(w.dtype)
            k = index.get((id(owner), name))
            if k is None:
                index[(id(owner), name)] = len(pairs)
                pairs.append((owner, name, extra))
            else:
                pairs[k] = (owner, name, pairs[k][2] + extra)
        return pairs

    def apply_constraints(self) -> None:
        """Replace every constrained weight by ``constraint(weight)`` (after the optimizer step)."""
        for owner, name, con, flat in self.cons:
            w = owner.weight(name)
            new = con(np.array(w[0] if flat else w))
            owner.set_weight(name, new[None, :] if flat else new, check_finite=False)  # fit checks after


def _is_dense_like(layer: Layer) -> bool:
    return "recurrent_kernel" not in layer.weight_names


# -- activity regularization -------------------------------------------------------------------
def activity_penalty(ctx: Ctx) -> float:
    """The sum of the activity penalties the passes in ``ctx`` recorded (0.0 when none)."""
    return float(sum(ctx.penalties)) if ctx.penalties else 0.0


class _Token:
    """Keys the saved output of a layer's activity regularizer in the Ctx."""

    def __init__(self, layer: Layer) -> None:
        self.name = f"{layer.name} (activity regularizer)"


def activity_forward(layer: Layer, y: Any, ctx: Ctx) -> None:
    """After ``layer``'s forward in a model: record ``activity_regularizer(y) / batch`` in the
    Ctx (and, in training, ``y`` for :func:`activity_backward`). Nothing without a regularizer."""
    reg = layer.activity_regularizer
    if reg is None or not isinstance(y, np.ndarray) or y.ndim == 0:
        return
    ctx.penalties.append(reg.penalty(y) / y.shape[0])
    ctx.save(_token_of(layer), y)  # type: ignore[arg-type]


def activity_backward(layer: Layer, grad: Any, ctx: Ctx) -> Any:
    """Before ``layer``'s backward in a model: the upstream gradient plus the activity
    regularizer's, ``activity.grad(y) / batch`` (``grad`` itself without a regularizer)."""
    reg = layer.activity_regularizer
    if reg is None or not ctx.is_training:
        return grad
    token = _token_of(layer)
    if id(token) not in ctx._caches:
        return grad
    y = ctx.load(token)  # type: ignore[arg-type]
    return np.asarray(grad) + (reg.grad(y) / y.shape[0]).astype(y.dtype)


def _token_of(layer: Layer) -> _Token:
    token = layer.__dict__.get("_activity_token")
    if token is None:
        token = layer.__dict__["_activity_token"] = _Token(layer)
    return token  # type: ignore[no-any-return]
