"""Regularizers and constraints, and where they enter training (Keras' rules).

A weight's regularizer and constraint are part of its declaration (``Layer._add_weight``;
:class:`~rnnkit._weight_decl.WeightDecl`, read with ``layer.declaration(name)``). Keras'
keywords (``kernel_regularizer=``, ``recurrent_constraint=``, ...; :func:`attach`, which the
layers' constructors call) give them to the weights they name: the layer keeps the keywords,
its build declares each weight with its own, and attaching to a built layer changes the
declarations of the weights named. ``layer.activity_regularizer`` (Regularizer | None) is the
layer's, on its output. ``layer.regularizers`` / ``layer.constraints`` list them by weight.

In a training step (and in ``evaluate``, as Keras reports it) the loss is::

    loss = sum over outputs of loss(y, pred)
         + sum over weights w of regularizer(w)                          before the update
         + sum over layers of activity_regularizer(output) / batch      Keras divides by batch

and the gradient gets ``regularizer.grad(w)`` for each regularized weight (and
``activity.grad(output) / batch`` on the layer's output gradient). After the optimizer step,
every constrained weight is replaced by ``constraint(weight)``; a recurrent layer's ``(1, N)``
bias is constrained as Keras' flat ``(N,)`` vector. Metrics are not affected.

Who applies what: the trainer reads the declarations once per run (:class:`Plan`) and does
nothing for a model whose weights declare none; a model (Sequential, GraphModel) records a
layer's activity penalty in the pass's Ctx after its forward (:func:`activity_forward`) and
adds its gradient before its backward (:func:`activity_backward`). A layer's own ``forward`` /
``backward`` are never changed, so a bare ``layer.forward`` has no activity penalty (nor does
a layer inside a wrapper such as Bidirectional).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from rnnkit import constraints, regularizers
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidParameterError
from rnnkit._layer import Layer
from rnnkit._weight_decl import WEIGHT_KEYWORDS, WeightDecl, keywords_of, weight_of


class Model(Protocol):
    """What this module reads of a model: its weights by name (and ``layers``, when it has them)."""

    def named_weights(self) -> dict[str, tuple[Layer, str]]: ...

KEYWORDS = (*WEIGHT_KEYWORDS, "activity_regularizer")


def attach(layer: Layer, **keywords: Any) -> Layer:
    """Set regularizers and constraints on ``layer`` from Keras' keyword names
    (``kernel_regularizer``, ``recurrent_regularizer``, ``bias_regularizer``,
    ``embeddings_regularizer``, ``activity_regularizer``, ``kernel_constraint``,
    ``recurrent_constraint``, ``bias_constraint``, ``embeddings_constraint``); each value is
    anything ``rnnkit.regularizers.get`` / ``rnnkit.constraints.get`` takes, None removes it.
    A built layer's weights are declared again with them (an unbuilt one's, at its build).
    Returns the layer. A weight the (built) layer lacks is refused, typed, and nothing changes."""
    if not isinstance(layer, Layer):
        raise TypeError(f"attach: expected a Layer, got {type(layer).__name__}")
    table = dict(layer._weight_keywords)
    activity = layer.activity_regularizer
    for key, value in keywords.items():
        if key not in KEYWORDS:
            raise TypeError(f"{layer.name}: unknown keyword {key!r}; expected one of {list(KEYWORDS)}")
        getter = constraints.get if key.endswith("_constraint") else regularizers.get
        obj: Any = _get(getter, value, key, layer)
        if key == "activity_regularizer":
            activity = obj
        elif obj is None:
            table.pop(key, None)
        else:
            table[key] = obj
    named = {weight_of(k) for k in keywords if k != "activity_regularizer"}
    if layer.built:
        missing = sorted(n for n in named if n not in layer.weight_names)
        if missing:
            key = next(k for k in keywords if k != "activity_regularizer" and weight_of(k) == missing[0])
            raise InvalidParameterError(
                f"{layer.name} ({type(layer).__name__}) has no weight {missing[0]!r} for {key}=; its "
                f"weights: {layer.weight_names}")
    layer._weight_keywords = table
    layer.activity_regularizer = activity
    if layer.built:
        for name in named:
            keys = keywords_of(name)
            assert keys is not None
            old = layer.declaration(name)
            layer._decls[name] = WeightDecl(old.name, old.shape, table.get(keys[0]), table.get(keys[1]))
    return layer


def _get(getter: Any, value: Any, key: str, layer: Layer) -> Any:
    """``getter(value)``; its InvalidParameterError names the layer and the keyword."""
    try:
        return getter(value)
    except InvalidParameterError as e:
        raise InvalidParameterError(f"{layer.name} ({type(layer).__name__}): {key}={value!r} is refused: "
                                    f"{e}") from None


def config_of(layer: Layer) -> dict[str, Any]:
    """The layer's regularizer and constraint keywords -> serialized dicts (only those set),
    for ``get_config`` and model files."""
    out: dict[str, Any] = {}
    for key, obj in layer._weight_keywords.items():
        out[key] = (constraints.serialize if key.endswith("_constraint") else regularizers.serialize)(obj)
    if layer.activity_regularizer is not None:
        out["activity_regularizer"] = regularizers.serialize(layer.activity_regularizer)
    return out


def check_layer(layer: Layer) -> None:
    """InvalidParameterError when a regularizer or constraint keyword names a weight the
    layer lacks."""
    layer._check_weight_keywords()


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


class Plan:
    """The regularized and the constrained weights of a model, read from the weights'
    declarations once (a training run reads them as they are when it starts): ``regs``
    ``(layer, name, Regularizer)``, ``cons`` ``(layer, name, Constraint, flat)`` (``flat``:
    constrained as Keras' flat vector, :attr:`~rnnkit._weight_decl.WeightDecl.flat`), each
    weight under the name the model's gradients use. Empty lists when no weight declares one,
    and then training does nothing for them."""

    def __init__(self, model: Model) -> None:
        self.regs: list[tuple[Layer, str, Any]] = []
        self.cons: list[tuple[Layer, str, Any, bool]] = []
        seen: set[tuple[int, str]] = set()
        for layer, name in model.named_weights().values():
            if (id(layer), name) in seen:   # a weight two keys name (a tied one) counts once
                continue
            seen.add((id(layer), name))
            decl = layer.declaration(name)
            if decl.regularizer is not None:
                self.regs.append((layer, name, decl.regularizer))
            if decl.constraint is not None:
                self.cons.append((layer, name, decl.constraint, decl.flat))

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
