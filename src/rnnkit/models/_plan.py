"""What one training run finds ONCE, when it starts (:class:`Plan`), so that no step looks it up
again: the log keys, the trainable weights and their names, the regularized and constrained
weights, the layers whose input gradient no step reads, whether the loss's gradient is taken
w.r.t. the output layer's logits, and which per-batch callback hooks anyone listens to.

The weights of a model do not change while it trains (which weights, their shapes and dtypes;
their values do), and a fit holds every layer of the model busy, so the plan stays true for
the whole run."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit import _penalties as _pen
from rnnkit._errors import NonFiniteError
from rnnkit.models._callbacks import Callback, CallbackList
from rnnkit.models._checks import Trainable as Model
from rnnkit.models._checks import all_finite
from rnnkit.models._objective import log_keys, softmax_fusion
from rnnkit.optimizers import Optimizer

_BASE_APPLY = Optimizer.apply_gradients

#: the hooks ``fit`` calls once per batch
BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end")


def listens(cb: Callback, hook: str) -> bool:
    """Whether ``cb`` does anything in ``hook``: its class overrides the base's no-op, or the
    instance holds its own function under that name."""
    return hook in vars(cb) or getattr(type(cb), hook, None) is not getattr(Callback, hook)


def batch_listeners(cbs: CallbackList | None) -> dict[str, bool]:
    """For each of :data:`BATCH_HOOKS`: whether any callback of ``cbs`` listens to it."""
    cbl = [] if cbs is None else cbs.callbacks
    return {hook: any(listens(cb, hook) for cb in cbl) for hook in BATCH_HOOKS}


class Plan:
    """The facts of one training run (see the module docstring).

    ``keys`` the log keys; ``names`` ``{(id(layer), weight): "model key"}``; ``trainable``
    ``(layer, weight)`` in ``trainable_weights()`` order; ``penalties`` the
    :class:`rnnkit._penalties.Plan`; ``unread`` the layers whose input gradient no step reads;
    ``fused`` :func:`~rnnkit.models._objective.softmax_fusion`; ``batch_begin`` /
    ``batch_end`` whether any callback listens to those hooks (when none does, no step calls
    them and no step's logs are made)."""

    def __init__(self, model: Model, cbs: CallbackList | None = None) -> None:
        self.keys = log_keys(model)
        named = model.named_weights()
        self.names = {(id(la), n): key for key, (la, n) in named.items()}
        self.trainable = model.trainable_weights()
        self.penalties = _pen.Plan(model)
        self.unread = model._unread_input_grads()
        self.fused = softmax_fusion(model)
        #: whether the model was compiled with metrics (the step computes them)
        self.metered = bool(model._compiled_metrics())
        #: ``(train_step, reset_metrics)`` of a model overriding Keras' ``train_step`` (its step
        #: is that, :func:`rnnkit.models._trainer.custom_step`); None: the trainer's own step
        self.custom: tuple[Any, Any] | None = model._custom_step()
        hooks = batch_listeners(cbs)
        self.batch_begin = hooks["on_train_batch_begin"]
        self.batch_end = hooks["on_train_batch_end"]
        #: how errors name the last step run (None before the first): the step whose optimizer
        #: update made the weights what they are
        self.previous: str | None = None

    def apply(self, model: Model, pairs: list[Any]) -> None:
        """The optimizer step on ``pairs`` ``(layer, weight, gradient)``, the trainer's own: an
        optimizer whose ``apply_gradients`` is the base's skips its argument checks (the trainer
        hands it each trainable weight's own gradient, once); any other gets ``apply_gradients``."""
        opt = model.optimizer
        if type(opt).apply_gradients is _BASE_APPLY:
            opt._apply_known(pairs)
        else:
            opt.apply_gradients(pairs)

    def bad_weight(self) -> str | None:
        """``"KEY (LayerType)"`` of the first trainable weight holding NaN or Inf, None when
        every one is finite (:func:`~rnnkit.models._checks.all_finite`)."""
        with np.errstate(over="ignore", invalid="ignore"):
            for layer, n in self.trainable:
                w = layer._weights.get(n)
                w = layer.weight(n) if w is None else w  # (a wrapper keeps them in its parts)
                if not all_finite(w):
                    return f"{self.names.get((id(layer), n), n)} ({type(layer).__name__})"
        return None

    def stale_error(self, model: Model) -> NonFiniteError | None:
        """The error naming a weight that an earlier optimizer step (:attr:`previous`) made NaN
        or Inf; None when every weight is finite, or before the first step."""
        bad = None if self.previous is None else self.bad_weight()
        if bad is None or self.previous is None:
            return None
        return non_finite(model, self.previous, f"weight {bad} after the optimizer step")


def non_finite(model: Model, at: str, where: str) -> NonFiniteError:
    """The error of a training step (``at``) that produced NaN or Inf, first at ``where``."""
    return NonFiniteError(f"{model.name}: training produced NaN or Inf in {at}: first at {where}")


Facts = tuple[list[str], _pen.Plan]


def eval_facts(model: Model) -> Facts:
    """What every evaluation of ``model`` looks up first: the log keys and the regularizers."""
    return log_keys(model), _pen.Plan(model)
