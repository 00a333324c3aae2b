"""Keras' model subclassing: ``class M(rk.Model)`` with layers made in ``__init__`` and the pass
written in ``call``::

    class Tagger(rk.Model):
        def __init__(self):
            super().__init__()
            self.encoder = rk.LSTM(32, return_sequences=True)
            self.head = rk.Dense(5)

        def call(self, inputs, training=False):
            return self.head(self.encoder(inputs))

``rk.Model`` is Keras' functional constructor (:mod:`rnnkit.models._functional`); a class
deriving from it derives from :class:`SubclassModel` instead, so everything below applies.

Tracking (Keras' auto-tracking). The layers are the values of the model's attributes, in the
order the attributes were first assigned (a list, tuple or dict of layers: its items in order;
an rnnkit model, subclassed or not: its layers), each layer once. Weight names are the
attribute paths: ``encoder.kernel``, ``blocks.0.bias``, ``heads.fwd.kernel``, a nested
model's own names after its attribute (``enc.0.kernel`` for a Sequential); so they are
deterministic, and ``save_weights`` / ``load_weights`` / ``get_weights`` follow them. After the
model is built no layer may be assigned (Keras locks its tracker): InvalidInputError.

Building (Keras builds on the first call). The first ``fit`` / ``predict`` / ``evaluate`` /
``model(x)`` (or ``build(input_shape)``, on zeros of that shape) runs ``call`` once on one
sample, recorded on a tape: the layers build for what they receive, the model learns its
number of inputs (a list or tuple of arrays: one per item) and outputs (``call`` returning a
list or tuple: one per item), and a layer that ``call`` used but that is not tracked (made in
``call``, or kept where tracking does not look) is refused with InvalidInputError naming it,
since no training step would update it. Every axis but the batch axis is free: the layers
check what they are given.

The pass. In a training context (the trainer's step) ``call(inputs, training=...)`` runs on a
tape of the model's own (:func:`rnnkit._tape.recording_alone`), with the step's Ctx seed for
the layers' dropout (:func:`rnnkit._tape.call_scope`); ``_backward`` is that tape's gradient
of the outputs with the loss's output gradients, and the weight gradients go into the Ctx as
any model's do. So the ONE trainer (:mod:`rnnkit.models._trainer`) trains a subclassed model as
it trains a Sequential: batches, validation, callbacks, sample and class weights, checkpoints,
MPI. In an inference context ``call(inputs, training=False)`` runs without a tape. Called while
a :class:`~rnnkit.GradientTape` records (a custom loop, a ``train_step``), ``model(x)`` runs
``call`` on that tape directly: its layer calls are the tape's entries. ``training`` given to
the model is what its layer calls get when they do not say (Keras' call context). ``call``
takes ``mask=`` when it declares that parameter (a boolean (B, T) array): the mask of the
(first) input; the outputs carry no mask. Masks given to a model whose ``call`` takes no
``mask`` are refused.

``train_step(data)`` (Keras 3): overriding it makes the trainer run it for every batch
(:func:`rnnkit.models._trainer.custom_step`): ``data`` is ``(x, y)`` or ``(x, y,
sample_weight)``; inside, ``self(x, training=True)`` on a tape, :meth:`compute_loss`,
``tape.gradient`` and ``self.optimizer.apply_gradients`` as in Keras; it returns the logs dict.
:attr:`metrics` are Keras' stateful trackers: the loss tracker ``Mean(name="loss")`` first,
then one per compiled metric (``update_state`` / ``result`` / ``reset_state``), reset at the
start of every epoch; the epoch's logs are the last step's (Keras'). :meth:`compute_metrics`
updates the compiled metrics' trackers and returns :meth:`get_metrics_result`.

``test_step(data)`` and ``predict_step(data)`` (Keras 3): overriding them makes ``evaluate``
run ``test_step((x, y[, sample_weight]))`` on each batch (trackers reset first; the last
batch's logs are the result) and ``predict`` run ``predict_step(x)`` on each batch of the
inputs (the results concatenated along axis 0).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, NotBuiltError
from rnnkit._layer import Layer, check_bool
from rnnkit._mask import Mask
from rnnkit._numbers import check_int
from rnnkit._shape import Shape
from rnnkit._tape import ACTIVE, GradientTape, call_scope, recording_alone
from rnnkit.losses._base import loss_on_tape
from rnnkit.models._base import Model, check_finite
from rnnkit.models._batch import prepare, take
from rnnkit.models._checks import Data, as_list, first_non_finite, unlist
from rnnkit.models._fit_batches import is_batch_source
from rnnkit.models._habits import check_verbose, report
from rnnkit.models._sequential import layer_label
from rnnkit.models._summary import param_text, shape_text

Tracked = list[tuple[str, Any]]   # (attribute path, layer or model)


def snake_case(class_name: str) -> str:
    """Keras' ``naming.to_snake_case``: ``"SimpleRNN"`` -> ``"simple_rnn"``."""
    name = re.sub(r"\W+", "", class_name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


class Mean:
    """Keras' ``Mean`` tracker: the mean of the values given to :meth:`update_state` (each
    weighted by ``sample_weight``, 1 when None) since :meth:`reset_state`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.total = 0.0
        self.count = 0.0

    def update_state(self, value: Any, sample_weight: Any = None) -> None:
        w = 1.0 if sample_weight is None else float(sample_weight)
        self.total += float(np.asarray(value)) * w
        self.count += w

    def result(self) -> float:
        """The running mean (0.0 before any value, as Keras)."""
        return self.total / self.count if self.count else 0.0

    def reset_state(self) -> None:
        self.total = 0.0
        self.count = 0.0


class MetricTracker(Mean):
    """A compiled metric as Keras' stateful metric: :meth:`update_state` ``(y_true, y_pred,
    sample_weight=None)`` adds the metric's value on the batch, weighted by its sample count
    (Keras' per-sample mean over the batches seen); calling it is calling the metric."""

    def __init__(self, fn: Any) -> None:
        super().__init__(fn.name)
        self.fn = fn

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Any = None) -> None:  # type: ignore[override]
        y = np.asarray(y_true)
        v = self.fn(y, np.asarray(y_pred)) if sample_weight is None else self.fn(y, np.asarray(y_pred),
                                                                                   sample_weight=sample_weight)
        n = float(y.shape[0]) if y.ndim else 1.0
        self.total += float(v) * n
        self.count += n

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        return self.fn(y_true, y_pred, sample_weight)


def _holds_layer(value: Any) -> bool:
    if isinstance(value, (Layer, Model)):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_layer(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_layer(v) for v in value.values())
    return False


def _walk(path: str, value: Any) -> Iterator[tuple[str, Any]]:
    """(path, layer or model) for every layer or model in ``value`` (lists, tuples and dicts
    walked in order; a path's parts joined by ``.``)."""
    if isinstance(value, (Layer, Model)):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for k, v in enumerate(value):
            yield from _walk(f"{path}.{k}", v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(f"{path}.{k}", v)


#: attributes of every model, never walked for layers
_OWN = frozenset({"name", "optimizer", "loss", "history", "stop_training"})


class SubclassModel(Model):
    """The base of ``class M(rk.Model)`` (see the module docstring). ``__init__`` takes
    Keras' ``name=`` (default: the class name in snake case, ``MyModel`` -> ``"my_model"``);
    the subclass's ``__init__`` calls ``super().__init__()`` before assigning layers."""

    def __init__(self, *args: Any, name: str | None = None, **kwargs: Any) -> None:
        if args or kwargs:
            given = [*(repr(a) for a in args), *kwargs]
            raise InvalidParameterError(f"{type(self).__name__}: a subclassed model's super().__init__ takes "
                                        f"name= only; got {', '.join(given)} (a functional model: "
                                        f"rk.Model(inputs, outputs))")
        from_class = snake_case(type(self).__name__)
        if name is not None and not isinstance(name, str):
            raise InvalidParameterError(f"{type(self).__name__}: name must be a str, got {name!r}")
        self._shapes: list[Shape] | None = None
        self._compiled: list[Any] = []
        self._trackers: list[Any] = []
        self._loss_tracker = Mean("loss")
        sig = inspect.signature(type(self).call)
        self._takes_training = "training" in sig.parameters
        self._takes_mask = "mask" in sig.parameters
        super().__init__(from_class if name is None else name)

    # -- Keras' API --------------------------------------------------------------------------
    def call(self, inputs: Any, training: bool = False) -> Any:
        """The pass, written by the subclass."""
        raise NotImplementedError

    def __setattr__(self, key: str, value: Any) -> None:
        d = self.__dict__
        if "_build_lock" not in d and key not in ("_shapes", "_compiled", "_trackers", "_loss_tracker",
                                                  "_takes_training", "_takes_mask") and _holds_layer(value):
            raise InvalidInputError(f"{type(self).__name__}: a layer was assigned to self.{key} before "
                                    f"super().__init__() ran; call super().__init__() first in __init__")
        if d.get("_shapes") is not None and _holds_layer(value):
            raise InvalidInputError(f"{self.name}: self.{key} = {type(value).__name__} after the model was "
                                    f"built; a subclassed model's layers are made in __init__ (Keras locks "
                                    f"its layers once built)")
        object.__setattr__(self, key, value)

    @property
    def metrics(self) -> list[Any]:  # type: ignore[override]
        """Keras' stateful trackers: ``Mean(name="loss")`` then one per compiled metric (empty
        before ``compile``)."""
        return [self._loss_tracker, *self._trackers] if self.__dict__.get("loss") is not None else []

    @metrics.setter
    def metrics(self, value: list[Any]) -> None:
        self._compiled = list(value)
        self._trackers = [MetricTracker(m) for m in value]

    def _compiled_metrics(self) -> list[Any]:
        return self._compiled

    def reset_metrics(self) -> None:
        """Reset every tracker of :attr:`metrics`."""
        for m in self.metrics:
            m.reset_state()

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None,
                     training: bool = True) -> Any:
        """The compiled loss of ``y_pred`` against ``y`` (summed over the outputs; each output's
        ``sample_weight``, as ``fit`` takes it): while a tape records ``y_pred``, a 0-d array
        recorded on it (Keras' ``compute_loss``; ``x`` and ``training`` are not used)."""
        self._require_compiled("compute_loss")
        ys = as_list(y, self.n_outputs, "target")
        preds = list(y_pred) if isinstance(y_pred, (list, tuple)) else [y_pred]
        if len(preds) != len(ys):
            raise InvalidInputError(f"{self.name}.compute_loss: {len(ys)} target(s) but {len(preds)} "
                                    f"prediction(s)")
        ws = None if sample_weight is None else (list(sample_weight) if len(ys) > 1 else [sample_weight])
        if ACTIVE.tapes and any(t.tracks(p) for t in ACTIVE.tapes for p in preds):
            return loss_on_tape(self.loss, ys, preds, ws)
        return float(sum(self.loss(yk, pk, None if ws is None else ws[k])
                         for k, (yk, pk) in enumerate(zip(ys, preds, strict=True))))

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> dict[str, float]:
        """Update the compiled metrics' trackers on the batch and return
        :meth:`get_metrics_result` (Keras')."""
        for m in self._trackers:
            m.update_state(y, y_pred, sample_weight)
        return self.get_metrics_result()

    def get_metrics_result(self) -> dict[str, float]:
        """``{tracker.name: tracker.result()}`` over :attr:`metrics`."""
        return {m.name: m.result() for m in self.metrics}

    def train_step(self, data: Any) -> dict[str, float]:
        """Keras 3's default step, spelled as a user would override it: the pass on a tape,
        :meth:`compute_loss`, the gradients, ``apply_gradients``, the loss tracker and
        :meth:`compute_metrics`. (``fit`` runs its own step, with every check and feature,
        unless a subclass overrides this method.)"""
        x, y = data[0], data[1]
        sw = data[2] if len(data) > 2 else None
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sw)
        weights = self.trainable_weights()
        grads = tape.gradient(loss, weights)
        self.optimizer.apply_gradients(zip(grads, weights, strict=True))
        self._loss_tracker.update_state(loss, sample_weight=len(as_list(x, self.n_inputs, "input")[0]))
        return self.compute_metrics(x, y, y_pred, sw)

    def test_step(self, data: Any) -> dict[str, float]:
        """Keras 3's default evaluation step, spelled as a user would override it: ``data`` is
        ``(x, y)`` or ``(x, y, sample_weight)``; the inference pass ``self(x, training=False)``,
        :meth:`compute_loss`, the loss tracker and :meth:`compute_metrics`; it returns the logs.
        (``evaluate`` runs the evaluator's own loop, with every check and feature, unless a
        subclass overrides this method.)"""
        x, y = data[0], data[1]
        sw = data[2] if len(data) > 2 else None
        y_pred = self(x, training=False)
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sw, training=False)
        self._loss_tracker.update_state(loss, sample_weight=len(as_list(x, self.n_inputs, "input")[0]))
        return self.compute_metrics(x, y, y_pred, sw)

    def predict_step(self, data: Any) -> Any:
        """Keras 3's default prediction step: ``data`` is one batch of the inputs (an array, or
        a list of arrays for several inputs), the result ``self(data, training=False)``.
        (``predict`` runs its own pass unless a subclass overrides this method.)"""
        return self(data, training=False)

    def evaluate(self, x: Data, y: Data = None, batch_size: int | None = None, return_dict: bool = False,
                 distributed: Any = None, *, sample_weight: Any = None, mask: Any = None,
                 lengths: Any = None, steps: int | None = None,
                 workers: int | None = None, verbose: Any = 0) -> float | list[float] | dict[str, float]:
        """:meth:`rnnkit.models.Model.evaluate`; a subclass overriding :meth:`test_step` has it
        called on each batch instead (Keras 3): the trackers are reset first, ``data`` is
        ``(x, y)`` or ``(x, y, sample_weight)`` of the batch (the data checked as ``evaluate``
        checks it), and the last batch's logs are the result (with stateful trackers: the
        whole evaluation's). It evaluates arrays in one process: a batch source, ``mask=``,
        ``lengths=`` or ``distributed=`` is refused (InvalidParameterError)."""
        if type(self).test_step is SubclassModel.test_step:
            return super().evaluate(x, y, batch_size, return_dict, distributed, sample_weight=sample_weight,
                                    mask=mask, lengths=lengths, steps=steps, workers=workers, verbose=verbose)
        where = f"{self.name}.evaluate"
        self._require_compiled("evaluate")
        shown = check_verbose(verbose, where)
        check_bool(return_dict, "return_dict", where)
        bs = check_int(batch_size, "batch_size", where, lo=1, none_ok=True)
        _refuse_with_own_step(where, "test_step", is_batch_source(x), distributed=distributed, mask=mask,
                              lengths=lengths, steps=steps, workers=workers)
        if y is None:
            raise InvalidInputError(f"{where}: y (the targets) is missing; give y beside the arrays x")
        logs = WEIGHTS.read(self._evaluate_own, x, y, bs, sample_weight, where)
        if shown:
            report(shown, where, len(as_list(x, self.n_inputs, "input")[0]), logs)
        if return_dict:
            return logs
        vals = list(logs.values())
        return vals[0] if len(vals) == 1 else vals

    def _evaluate_own(self, x: Data, y: Data, bs: int | None, sample_weight: Any,
                      where: str) -> dict[str, float]:
        """:meth:`evaluate` through the overriding :meth:`test_step`."""
        data = prepare(self, x, y, "evaluate", sample_weight=sample_weight)
        self.reset_metrics()
        logs: Any = None
        for a in range(0, data.n, data.n if bs is None else bs):
            b = take(data, slice(a, a + (data.n if bs is None else bs)))
            xb, yb = unlist(b.xs), unlist(b.ys)
            logs = self.test_step((xb, yb) if b.sws is None else (xb, yb, unlist(b.sws)))
            if not isinstance(logs, dict) or not all(isinstance(k, str) for k in logs):
                raise InvalidInputError(f"{where}: test_step must return a dict of str -> number (Keras' "
                                        f"logs), got {type(logs).__name__}")
        return {k: float(v) for k, v in logs.items()}

    def predict(self, x: Data, batch_size: int | None = None, *, mask: Any = None,
                lengths: Any = None, steps: int | None = None, workers: int | None = None,
                verbose: Any = 0) -> Data:
        """:meth:`rnnkit.models.Model.predict`; a subclass overriding :meth:`predict_step` has
        it called on each batch of the inputs instead (Keras 3: ``data`` is the batch's input
        array, or the list of them for several inputs; the inputs checked as ``predict`` checks
        them) and the batches' results concatenated along axis 0 (each result an array, or a
        list / tuple of arrays: one concatenation per item). It predicts arrays: a batch
        source, ``mask=`` or ``lengths=`` is refused (InvalidParameterError)."""
        if type(self).predict_step is SubclassModel.predict_step:
            return super().predict(x, batch_size, mask=mask, lengths=lengths, steps=steps, workers=workers,
                                   verbose=verbose)
        where = f"{self.name}.predict"
        shown = check_verbose(verbose, where)
        bs = check_int(batch_size, "batch_size", where, lo=1, none_ok=True)
        _refuse_with_own_step(where, "predict_step", is_batch_source(x), mask=mask, lengths=lengths,
                              steps=steps, workers=workers)
        out, n = WEIGHTS.read(self._predict_own, x, bs, where)
        if shown:
            report(shown, where, n)
        return out

    def _predict_own(self, x: Data, bs: int | None, where: str) -> tuple[Data, int]:
        """:meth:`predict` through the overriding :meth:`predict_step`: the result and the
        sample count."""
        xs = self._inputs(x)
        first_non_finite(xs, f"{where}: x")
        n = int(xs[0].shape[0])
        size = n if bs is None else bs
        parts: list[list[np.ndarray]] = []
        many = False
        for a in range(0, n, size):
            got = self.predict_step(unlist([v[a:a + size] for v in xs]))
            many = isinstance(got, (list, tuple))
            items = list(got) if many else [got]
            if not items or not all(isinstance(o, np.ndarray) and o.ndim >= 1 for o in items) or (
                    parts and len(items) != len(parts[0])):
                raise InvalidInputError(f"{where}: predict_step must return an array with a batch axis, or "
                                        f"a list / tuple of them (as many every batch), got "
                                        f"{type(got).__name__}")
            parts.append(items)
        outs = [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]
        return (outs if many else outs[0]), n

    def _custom_step(self) -> tuple[Callable[[Any], Any], Callable[[], None]] | None:
        if type(self).train_step is SubclassModel.train_step:
            return None
        return self.train_step, self.reset_metrics

    # -- tracking ----------------------------------------------------------------------------
    def _tracked(self) -> Tracked:
        """(attribute path, layer or model) in tracking order, each object once."""
        seen: set[int] = set()
        out: Tracked = []
        for key, value in self.__dict__.items():
            if key in _OWN or key.startswith("_") and key in SubclassModel._INTERNAL:
                continue
            for path, obj in _walk(key, value):
                if id(obj) not in seen and obj is not self:
                    seen.add(id(obj))
                    out.append((path, obj))
        return out

    _INTERNAL = frozenset({"_shapes", "_compiled", "_trackers", "_loss_tracker", "_build_lock"})

    @property
    def layers(self) -> list[Any]:
        """The tracked layers and models, in tracking order (Keras' ``model.layers``)."""
        return [obj for _, obj in self._tracked()]

    def _all_layers(self) -> list[Layer]:
        """Every layer the model holds, those of nested models included."""
        out: list[Layer] = []
        for _, obj in self._tracked():
            if isinstance(obj, SubclassModel):
                out += obj._all_layers()
            elif isinstance(obj, Model):
                out += [la for la, _ in obj.named_weights().values()] + list(getattr(obj, "layers", []))
            else:
                out.append(obj)
        return out

    def named_weights(self) -> dict[str, tuple[Layer, str]]:
        """``{"{attribute path}.{weight}": (layer, weight)}`` in tracking order; a nested model's
        names after its attribute path; a weight reached twice keeps its first name."""
        out: dict[str, tuple[Layer, str]] = {}
        seen: set[tuple[int, str]] = set()
        for path, obj in self._tracked():
            if isinstance(obj, Model):
                items = [(f"{path}.{k}", ref) for k, ref in obj.named_weights().items()]
            else:
                items = [(f"{path}.{n}", (obj, n)) for n in (obj.weight_names if obj.built else [])]
            for key, (la, n) in items:
                if (id(la), n) not in seen:
                    seen.add((id(la), n))
                    out[key] = (la, n)
        return out

    # -- building ----------------------------------------------------------------------------
    @property
    def built(self) -> bool:
        return self._shapes is not None

    def input_shapes(self) -> list[Shape]:
        if self._shapes is None:
            raise NotBuiltError(self.name, "input_shapes")
        return self._shapes

    def build(self, input_shape: Any) -> SubclassModel:
        """Build on zeros of ``input_shape`` (a shape, or a list of shapes for several inputs;
        ``None`` extents, the batch axis included, are taken as 1). Returns the model."""
        many = (isinstance(input_shape, list) and bool(input_shape)
                and isinstance(input_shape[0], (list, tuple, Shape)))
        shapes = list(input_shape) if many else [input_shape]
        xs = []
        for s in shapes:
            dims = s.dims if isinstance(s, Shape) else tuple(s)
            if not dims or any(d is not None and (not isinstance(d, int) or d < 1) for d in dims):
                raise InvalidParameterError(f"{self.name}.build: expected a shape of ints >= 1 or None, "
                                            f"got {s!r}")
            xs.append(np.zeros([1 if d is None else d for d in dims], np.float32))
        self.n_inputs = len(xs)
        self._ensure_built(xs)
        return self

    def _inputs(self, x: Data) -> list[np.ndarray]:
        if self._shapes is None:
            self.n_inputs = (len(x) if isinstance(x, (list, tuple)) and len(x) > 1
                             and all(isinstance(a, np.ndarray) for a in x) else 1)
        return super()._inputs(x)

    def _ensure_built(self, xs: list[np.ndarray]) -> None:
        if self._shapes is not None:
            return
        with self._build_lock:
            if self._shapes is None:
                self._build_on(xs)

    def _build_on(self, xs: list[np.ndarray]) -> None:
        """The build pass (see the module docstring) on the first sample of ``xs``."""
        if any(a.ndim < 1 for a in xs):
            raise InvalidInputError(f"{self.name}: expected array inputs with a batch axis, got a scalar")
        if type(self).call is SubclassModel.call:
            raise NotBuiltError(self.name, "this call", f"{self.name}: {type(self).__name__} defines no "
                                f"call(self, inputs, training=False); a subclassed model computes in call")
        tape = GradientTape()
        one = [a[:1] for a in xs]
        # the build pass runs on one sample and must leave no carried state behind: a stateful
        # layer's state is put back as it was (the first real call starts where it would have)
        held = self._all_layers()
        held += [part for la in held for _, part in getattr(la, "_parts", None) or []]   # wrappers'
        carried = [(la, la._state) for la in held if getattr(la, "stateful", False) and hasattr(la, "_state")]
        try:
            with recording_alone(tape), call_scope(False):
                out = self.call(unlist(one), **self._call_kwargs(False, None))
        finally:
            for la, state in carried:
                la._state = state
        outs = self._outputs(out)
        mine = {id(la) for la in self._all_layers()}
        for la, _ in tape._weight_of.values():
            if id(la) not in mine:
                raise InvalidInputError(
                    f"{self.name}: call used layer {la.name} ({type(la).__name__}), which the model does not "
                    f"track: make every layer in __init__ and assign it to an attribute of the model (a "
                    f"list or dict of layers is tracked too); no training step would update it")
        self.n_outputs = len(outs)
        self._shapes = [Shape((None,) * a.ndim) for a in xs]

    def _call_kwargs(self, training: bool, mask: Any) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self._takes_training:
            kw["training"] = training
        if mask is not None:
            if not self._takes_mask:
                raise InvalidInputError(f"{self.name}: the input carries a mask, and {type(self).__name__}"
                                        f".call takes no mask= (Keras' rule: a mask is never silently "
                                        f"dropped)")
            kw["mask"] = mask
        return kw

    def _outputs(self, out: Any) -> list[np.ndarray]:
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        for k, o in enumerate(outs):
            if not isinstance(o, np.ndarray) or o.dtype.kind != "f":
                raise InvalidInputError(f"{self.name}: call returned {type(o).__name__}"
                                        f"{'' if len(outs) == 1 else f' as output {k}'}; expected arrays of "
                                        f"floats (one, or a list / tuple of them)")
        if self._shapes is not None and len(outs) != self.n_outputs:
            raise InvalidInputError(f"{self.name}: call returned {len(outs)} output(s); it returned "
                                    f"{self.n_outputs} when the model was built")
        return outs

    # -- passes ------------------------------------------------------------------------------
    def __call__(self, x: Data, ctx: Ctx | None = None, *, training: bool | None = None,  # type: ignore[override]
                 mask: Any = None) -> Data:
        """``model(x)``: while a tape records, ``call`` on that tape (its layer calls recorded
        there; ``training`` what they get when they do not say); otherwise an inference pass
        (``training=True``: a training pass, dropout on), or :meth:`forward` in ``ctx``."""
        if ctx is None and ACTIVE.tapes:
            if self._shapes is None:
                self._ensure_built(as_list(x, len(x) if isinstance(x, (list, tuple)) else 1, "input"))
            with call_scope(training):
                return self.call(x, **self._call_kwargs(bool(training), mask))
        if ctx is not None:
            if training is not None or mask is not None:
                raise InvalidParameterError(f"{self.name}: give ctx, or mask= / training=, not both (the ctx "
                                            f"holds its mask and mode)")
            return self.forward(x, ctx)
        if not training and mask is None:
            return super().__call__(x)
        xs = self._inputs(x)
        pass_ = Ctx.training() if training else Ctx.inference()
        return unlist(self._forward_masks(xs, pass_, False, [mask] + [None] * (len(xs) - 1))[0])

    def _forward_masks(self, xs: list[np.ndarray], ctx: Ctx, check: bool,
                       masks: list[Any] | None = None) -> tuple[list[np.ndarray], list[Any]]:
        mask = masks[0] if masks is not None else ctx.mask
        if masks is not None and any(m is not None for m in masks[1:]):
            raise InvalidInputError(f"{self.name}: a subclassed model takes the mask of its first input only")
        ctx.set_mask(None)
        if isinstance(mask, Mask):
            mask = mask.valid(xs[0].shape[1])
        inputs = unlist(xs)
        if not ctx.training_mode:
            with call_scope(False):
                outs = self._outputs(self.call(inputs, **self._call_kwargs(False, mask)))
        else:
            tape = GradientTape()
            drops = ctx.drops
            with recording_alone(tape), call_scope(drops, ctx.seed):
                watched = [a for a in xs if a.dtype.kind == "f"] if ctx.needs_input_grad(self) else []
                tape.watch(watched)
                outs = self._outputs(self.call(inputs, **self._call_kwargs(drops, mask)))
            ctx.save(self, (tape, outs, watched))
        if check:
            for k, o in enumerate(outs):
                check_finite(o, f"output {k} of {self.name}.call")
        return outs, [None] * len(outs)

    def _forward(self, xs: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        return self._forward_masks(xs, ctx, check)[0]

    def _backward(self, grads: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        tape, outs, watched = ctx.load(self)
        weights = self.trainable_weights()
        wg, xg = tape.gradient(outs, [weights, watched], output_gradients=[np.asarray(g) for g in grads])
        for (la, n), g in zip(weights, wg, strict=True):
            if g is not None:
                if check:
                    check_finite(g, f"the gradient of {la.name}.{n} ({type(la).__name__})")
                ctx.grads.add((la, n), g)
        return [np.zeros_like(o) for o in outs] if not watched else [
            np.zeros_like(x) if g is None else g for x, g in zip(watched, xg, strict=True)]

    def _unread_input_grads(self) -> tuple[Any, ...]:
        """The model itself: the trainer reads no gradient of the data (its inputs are not
        watched, so the first layers compute none)."""
        return (self,)

    # -- description -------------------------------------------------------------------------
    def _summary_rows(self) -> tuple[list[str], list[list[str]]]:
        rows = []
        for path, obj in self._tracked():
            if isinstance(obj, Model):
                rows.append([f"{path} ({type(obj).__name__})", "?", f"{obj.param_count():,}"])
                continue
            shape = "?"
            if obj.built:
                try:
                    s = obj.compute_output_shape(obj._input_shape)
                    shape = ", ".join(shape_text(p) for p in s) if isinstance(s, list) else shape_text(s)
                except (InvalidInputError, NotImplementedError):
                    shape = "?"
            rows.append([layer_label(path, obj), shape, param_text(obj)])
        return ["Layer (type)", "Output Shape", "Param #"], rows

    def get_config(self) -> dict[str, Any]:
        """Keras' ``get_config`` of a subclassed model: its name only (the architecture is the
        class's code, which no file holds; ``save_weights`` keeps the weights)."""
        return {"class_name": type(self).__name__, "config": {"name": self.name}}


def _refuse_with_own_step(where: str, step: str, source: bool, **given: Any) -> None:
    """InvalidParameterError naming what a model overriding ``step`` (``test_step`` /
    ``predict_step``) cannot take: a batch source as ``x``, or any of ``given`` that is not None."""
    bad = (["a batch source as x"] if source else []) + [f"{k}=" for k, v in given.items() if v is not None]
    if bad:
        raise InvalidParameterError(f"{where}: a model overriding {step} runs it on arrays in one process; "
                                    f"it takes no {', '.join(bad)}")
