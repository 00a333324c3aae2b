"""``Model``: what Sequential and graph models share — compile, fit, evaluate, predict,
weights by name, summary, files. A model keeps no per-call state: every pass runs in its own
:class:`~rnnkit.Ctx`, so ``predict`` from several threads at once is safe.

Subclasses implement ``_ensure_built(xs)``, ``_forward(xs, ctx, check)``,
``_backward(grads, ctx, check)`` (lists of arrays, one per model input / output),
``named_weights()``, ``_summary_rows()`` and ``get_config()``; one whose pass is a maskless
chain of layers sets ``_chain`` (:mod:`rnnkit.models._inference`), and ``predict(x)`` /
``model(x)`` on one array then run just the layers.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from rnnkit import losses, optimizers
from rnnkit import metrics as metrics_mod
from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, MethodNotImplementedError, NotBuiltError
from rnnkit._layer import Layer, check_bool, check_ctx, check_int, check_utf8
from rnnkit._shape import Shape
from rnnkit._tape import ACTIVE, call_layer
from rnnkit.models import _training
from rnnkit.models._aliases import FitAliases
from rnnkit.models._batch import Batch, take
from rnnkit.models._callbacks import Callback, History
from rnnkit.models._checks import Data, NonFiniteAt, as_list, check_finite, first_non_finite, unlist
from rnnkit.models._fit_batches import is_batch_source, predict_source
from rnnkit.models._habits import cast_inputs, check_batch_axis, check_verbose, report
from rnnkit.models._inference import ChainPlan
from rnnkit.models._weighting import input_masks
from rnnkit.models._weights_api import WeightsAPI

__all__ = ["Data", "Model", "NonFiniteAt", "as_list", "check_finite", "unlist"]

class Model(FitAliases, WeightsAPI):
    """Base class of :class:`Sequential` and :class:`GraphModel` (see the module docstring)."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}: name must be a str, got {name!r}")
        self.name = check_utf8(name, "name", type(self).__name__)
        self.optimizer: Any = None
        self.loss: Any = None
        self.metrics: list[Any] = []
        self.stop_training = False
        self.history: History | None = None
        self._build_lock = threading.Lock()

    # -- subclass API ------------------------------------------------------------------------
    n_inputs: int = 1
    n_outputs: int = 1
    #: the plan of ``predict(x)`` / ``model(x)`` on one array (:mod:`rnnkit.models._inference`),
    #: set by a model whose pass is a maskless chain of layers; None: always the general path
    _chain: ChainPlan | None = None

    @property
    def built(self) -> bool:
        raise MethodNotImplementedError(f"{type(self).__name__}.built is not implemented; a "
                                        f"subclass provides it")

    def input_shapes(self) -> list[Shape]:
        raise MethodNotImplementedError(f"{type(self).__name__}.input_shapes is not implemented; a "
                                        f"subclass provides it")

    def _ensure_built(self, xs: list[np.ndarray]) -> None:
        if not self.built:
            raise NotBuiltError(self.name, "this call")

    def _forward(self, xs: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        raise MethodNotImplementedError(f"{type(self).__name__}._forward is not implemented; a "
                                        f"subclass provides it")

    def _backward(self, grads: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        raise MethodNotImplementedError(f"{type(self).__name__}._backward is not implemented; a "
                                        f"subclass provides it")

    def _unread_input_grads(self) -> tuple[Layer, ...]:
        """The layers whose input gradient a training step never reads (the trainer tells them
        to skip it, :meth:`rnnkit.Ctx.skip_input_grad`); none unless the model says so."""
        return ()

    def _compiled_metrics(self) -> list[Any]:
        """The metric functions ``compile(metrics=...)`` gave, which the trainer and the
        evaluator compute (a subclassed model's ``metrics`` are Keras' stateful trackers)."""
        return self.metrics

    def _custom_step(self) -> Any:
        """``(train_step, reset_metrics)`` of a model that overrides Keras' ``train_step``
        (the trainer then runs it for each batch); None: the trainer's own step."""
        return None

    def _forward_masks(self, xs: list[np.ndarray], ctx: Ctx, check: bool,
                       masks: list[Any] | None = None) -> tuple[list[np.ndarray], list[Any]]:
        """``_forward`` with the input masks (default ``ctx.mask`` for the first input) and
        the output masks returned; a model without mask support refuses a mask."""
        if (masks is not None and any(m is not None for m in masks)) or ctx.mask is not None:
            raise InvalidInputError(f"{self.name}: this model does not propagate masks")
        outs = self._forward(xs, ctx, check)
        return outs, [None] * len(outs)

    def _keep_chain(self, plan: ChainPlan | None, maker: type[Model]) -> None:
        """Make ``plan`` the inference plan (:attr:`_chain`), unless the model's class overrides
        what ``maker`` (the class making the plan) runs a pass with — ``forward``, ``_forward``
        or ``_forward_masks`` — so that a subclass's own pass is what runs."""
        cls = type(self)
        same = all(getattr(cls, n) is getattr(maker, n) for n in ("forward", "_forward", "_forward_masks"))
        self._chain = plan if same else None

    def named_weights(self) -> dict[str, tuple[Layer, str]]:
        raise MethodNotImplementedError(f"{type(self).__name__}.named_weights is not implemented; a "
                                        f"subclass provides it")

    def _summary_rows(self) -> tuple[list[str], list[list[str]]]:
        raise MethodNotImplementedError(f"{type(self).__name__}._summary_rows is not implemented; a "
                                        f"subclass provides it")

    def get_config(self) -> dict[str, Any]:
        raise MethodNotImplementedError(f"{type(self).__name__}.get_config is not implemented; a "
                                        f"subclass provides it")

    # -- passes ------------------------------------------------------------------------------
    def _inputs(self, x: Data) -> list[np.ndarray]:
        """The model's input arrays from ``x``, each checked once against the build shape (the
        door of every pass: ``predict``, ``evaluate``, ``fit``, ``model(x)``)."""
        if self.n_inputs == 1 and type(x) is np.ndarray and x.dtype.kind in "biuf":
            xs = [x]   # what as_list makes of one array of numbers
        else:
            xs = as_list(x, self.n_inputs, "input")
        xs = cast_inputs(self, xs)
        self._ensure_built(xs)
        shapes = self.input_shapes()   # one per input (as_list made one array per input)
        for k, a in enumerate(xs):
            shp = shapes[k]
            want = shp.dims
            got = a.shape
            if got[1:] != want[1:] and (len(got) != len(want) or not all(  # (the quick test first)
                    d is None or d == s for d, s in zip(want[1:], got[1:], strict=True))):
                which = f"input {k}" if self.n_inputs > 1 else "input"
                raise InvalidInputError(
                    f"{self.name}: {which} has shape {a.shape}; the model was built for {shp} "
                    f"(None = any extent)"
                )
            if not got or got[0] < 1:
                raise InvalidInputError(f"{self.name}: input holds no samples (shape {a.shape})")
        if len(xs) > 1 and len({a.shape[0] for a in xs}) > 1:
            raise InvalidInputError(
                f"{self.name}: inputs hold different sample counts {[a.shape for a in xs]}"
            )
        return xs

    def forward(self, x: Data, ctx: Ctx) -> Data:
        """Run the model in ``ctx`` (one input: an array; several: a list, same for outputs).
        ``ctx.mask`` (``ctx.set_mask(lengths=n)``) is the mask of the (first) input; the model
        hands masks from layer to layer and clears ``ctx.mask`` afterwards."""
        return unlist(self._forward(self._inputs(x), check_ctx(ctx, f"{self.name}.forward"), False))

    def backward(self, grad: Data, ctx: Ctx) -> Data:
        """Backpropagate the output gradient(s); weight gradients go into ``ctx``. Returns the
        input gradient(s)."""
        grads = as_list(grad, self.n_outputs, "gradient")
        return unlist(self._backward(grads, check_ctx(ctx, f"{self.name}.backward"), False))

    def __call__(self, x: Data, ctx: Ctx | None = None) -> Data:
        """``model(x)`` on arrays: an inference pass, on the weights of one whole optimizer step
        while ``fit`` runs in another thread (as :meth:`predict`; NaN passes through as the
        layers pass it). ``model(x, ctx)`` is :meth:`forward` in the caller's ``ctx``, the raw
        pass, which reads the weights as they are. While a :class:`~rnnkit.GradientTape`
        records (and no ``ctx`` is given): the whole model's pass, recorded as one entry whose
        backward is :meth:`backward`. On graph nodes (``rk.Input(...)``; Keras' nested-model
        call): the model's layers called on them, giving the output node(s)."""
        if ctx is None and ACTIVE.tapes:
            return call_layer(self, x, None, None, None)
        chain = self._chain
        if chain is not None and ctx is None and type(x) is np.ndarray:
            start = WEIGHTS.count   # WEIGHTS.read, inlined for the quickest call (as predict)
            if start & 1:
                y = WEIGHTS.read_once(chain.run, x, False)
            else:
                y = chain.run(x, False)   # the layers' own passes (None: not the quick door's case)
                if y is not None and WEIGHTS.count != start:
                    y = WEIGHTS.read_once(chain.run, x, False)
            if y is not None:
                return y
        if any(getattr(type(a), "_symbolic", False) for a in (x if isinstance(x, (list, tuple)) else [x])):
            return self._call_nodes(x, ctx)
        if ctx is not None:
            return self.forward(x, ctx)
        return WEIGHTS.read(self._infer, x)

    def _infer(self, x: Data) -> Data:
        return self.forward(x, Ctx.inference())

    def _call_nodes(self, x: Any, ctx: Ctx | None) -> Any:
        """``model(node)``: the model called on graph nodes (Sequential, GraphModel)."""
        raise InvalidInputError(f"{self.name}: {type(self).__name__} cannot be called on graph nodes")

    def predict(self, x: Data, batch_size: int | None = None, *, mask: Any = None,
                lengths: Any = None, steps: int | None = None, workers: int | None = None,
                verbose: Any = 0) -> Data:
        """Outputs for ``x`` in an inference pass; with ``batch_size``, ``batch_size`` samples
        at a time, concatenated. Thread-safe. A padded batch: ``lengths=`` ((B,) ints,
        PyTorch's packed semantics) or ``mask=`` (boolean (B, T), Keras' semantics) — a list
        with one per input for several inputs — or a ``Masking`` / ``Embedding(mask_zero=True)``
        layer in the model. ``x`` may be a batch source (a generator, a
        :class:`rnnkit.data.Dataset`; ``steps`` batches of it, all when None; see
        :mod:`rnnkit.models._fit_batches`). Inputs holding NaN or Inf are refused with
        InvalidInputError naming the first (as ``fit`` and ``evaluate`` refuse them).
        ``verbose``: 0 (default) prints nothing; 1, 2 or ``"auto"`` print one line when done
        (:func:`rnnkit.models._habits.report`).

        While ``fit`` trains the model in another thread, every output of one ``predict`` call
        comes from the weights of one whole optimizer step (those before some step, or after
        it), never from a mixture: the call runs without a lock and is run again, holding the
        lock that an optimizer step takes, when a step started or ended while it ran (a batch
        source, which cannot be read twice, is predicted holding that lock throughout, so the
        steps wait for it); :mod:`rnnkit._consistency`."""
        # each argument and the data are checked once here, each in one quick test where the
        # common case passes it (an array, no batch_size, no mask, verbose=0); the pass runs on
        # the checked arrays as they are. A maskless chain on one array that passes the quick
        # door is the layers' own passes, no more (anything else: the general path below)
        chain = self._chain
        if (chain is not None and batch_size is None and mask is None and lengths is None
                and type(x) is np.ndarray and type(verbose) is int and verbose == 0):
            start = WEIGHTS.count   # WEIGHTS.read, inlined for the quickest call
            if start & 1:
                out = WEIGHTS.read_once(chain.run, x, True)
            else:
                out = chain.run(x, True)
                if out is not None and WEIGHTS.count != start:
                    out = WEIGHTS.read_once(chain.run, x, True)
            if out is not None:
                return out
        shown = 0 if type(verbose) is int and verbose == 0 else check_verbose(verbose, f"{self.name}.predict")
        if not isinstance(x, np.ndarray) and is_batch_source(x):
            if mask is not None or lengths is not None:
                raise InvalidParameterError(f"{self.name}.predict: mask= / lengths= cannot be given with a "
                                            f"batch source as x (a source's mask(i) gives them)")
            out = WEIGHTS.read_once(predict_source, self, x, steps, workers)
            if shown:
                report(shown, f"{self.name}.predict", len(as_list(out, self.n_outputs, "output")[0]))
            return out
        outs, n = WEIGHTS.read(self._predict_arrays, x, batch_size, mask, lengths)
        if shown:
            report(shown, f"{self.name}.predict", n)
        return unlist(outs)

    def _predict_arrays(self, x: Data, batch_size: int | None, mask: Any,
                        lengths: Any) -> tuple[list[np.ndarray], int]:
        """:meth:`predict`'s general path on arrays: the outputs and the sample count."""
        xs = self._inputs(x)
        first_non_finite(xs, f"{self.name}.predict: x")
        n = xs[0].shape[0]
        if batch_size is None and mask is None and lengths is None:   # one batch, no masks
            outs = self._forward_masks(xs, Ctx.inference(), False, None)[0]
        else:
            bs = n if batch_size is None else check_int(batch_size, "batch_size", f"{self.name}.predict",
                                                        lo=1)
            check_batch_axis(self, f"{self.name}.predict", batch_size=bs < n)
            masks = input_masks(self, xs, mask, lengths)
            if bs >= n:   # the whole input is one batch: no slicing, no concatenation
                outs = self._forward_masks(xs, Ctx.inference(), False, masks)[0]
            else:
                data = Batch(xs, [], masks)
                parts: list[list[np.ndarray]] = []
                for a in range(0, n, bs):
                    part = take(data, slice(a, a + bs))
                    parts.append(self._forward_masks(part.xs, Ctx.inference(), False, part.masks)[0])
                outs = [np.concatenate([p[k] for p in parts]) for k in range(self.n_outputs)]
        return outs, n

    # -- compile / train ---------------------------------------------------------------------
    def compile(self, optimizer: Any = "adam", loss: Any = "mse", metrics: list[Any] | None = None) -> Model:
        """Set the optimizer (object or name, via ``rnnkit.optimizers.get``), the loss (object
        or name, via ``rnnkit.losses.get``) and the metrics (``rnnkit.metrics.get`` each).
        Returns the model. With several outputs the loss is applied to each and summed."""
        self.optimizer = optimizers.get(optimizer)
        self.loss = losses.get(loss)
        if metrics is not None and not isinstance(metrics, (list, tuple)):
            raise InvalidParameterError(f"compile: metrics must be a list, got {type(metrics).__name__}")
        self.metrics = [metrics_mod.get(m) for m in (metrics or [])]
        return self

    def _require_compiled(self, action: str) -> None:
        if self.optimizer is None or self.loss is None:
            raise NotBuiltError(self.name, action, f"{self.name}: {action} needs a compiled model; "
                                f"call compile(optimizer, loss) first")

    def fit(self, x: Data, y: Data = None, epochs: int = 1, *, batch_size: int | None = None,
            validation_data: tuple[Data, Data] | None = None, validation_split: float = 0.0,
            callbacks: list[Callback] | None = None, verbose: int | str = 0, shuffle: bool = True,
            seed: int | None = None, initial_epoch: int = 0, checkpoint: Any = None,
            distributed: Any = None, sample_weight: Any = None,
            class_weight: dict[int, float] | None = None, mask: Any = None,
            lengths: Any = None, steps_per_epoch: int | None = None,
            validation_steps: int | None = None, workers: int | None = None) -> History:
        """Train. ``fit(x, y, epochs)`` takes ONE full-batch step per epoch;
        ``batch_size=`` takes mini-batch steps, reshuffled each epoch (``shuffle``) by a
        generator seeded with ``seed`` (else the global seed, else entropy). What each argument
        takes: :mod:`rnnkit.models._training`; the step, the epoch loss, validation and
        callbacks: :mod:`rnnkit.models._trainer`.
        Raises :class:`~rnnkit.NonFiniteError` naming the epoch and the layer when a pass
        produces NaN or Inf. ``sample_weight`` (per sample, or per timestep for sequence
        outputs) or ``class_weight`` (``{class: weight}``) weight the loss as Keras does;
        ``mask=`` / ``lengths=`` mark the padding of the inputs (as in :meth:`predict`), and the
        mask of a sequence output leaves its padded steps out of the loss and metrics.
        ``checkpoint=DIR``: after each epoch the whole training state
        (weights, optimizer slots, generator, history) is written to ``DIR`` atomically, and a
        later ``fit`` with the same arguments resumes after the last completed epoch, ending
        bit-identical to an uninterrupted run (:mod:`rnnkit.models._resume`). Returns the
        :class:`History`. ``distributed=rk.distributed.MPI()`` trains data-parallel on every
        rank of an MPI job (``batch_size`` is then the global batch), masks, sample and class
        weights and weight regularizers included; it takes no ``checkpoint=`` (a
        ``ModelCheckpoint`` callback runs on rank 0). ``x`` may be a batch source instead of
        arrays (a generator / iterable of ``(x, y)`` or ``(x, y, sample_weight)`` batches, a
        :class:`rnnkit.data.Dataset`), with ``steps_per_epoch``, ``validation_steps`` and
        ``workers`` (prefetch threads); see :mod:`rnnkit.models._fit_batches`. ``verbose``: 0
        silent, 1 or ``"auto"`` a progress bar (epochs, with the steps per epoch), 2 one line per
        epoch (Keras' meanings). Without ``batch_size`` on more than 512 samples a
        :class:`~rnnkit.FullBatchWarning` says once that each epoch is one full-batch step.
        ``fit_with_batches(x, y, epochs, batch_size)`` is this with ``batch_size`` given.
        Threads: each optimizer step (with its constraints) replaces the weights as one write,
        so ``predict``, ``evaluate``, ``model(x)``, ``get_weights``, ``save_weights`` and
        ``save`` in other threads meanwhile see the weights of one whole step, never a mixture
        (:mod:`rnnkit._consistency`); a second ``fit`` of this model, or of one sharing a layer
        with it, raises :class:`~rnnkit.ModelBusyError`."""
        return _training.fit(self, x, y, epochs, batch_size=batch_size, validation_data=validation_data,
                             validation_split=validation_split, callbacks=callbacks, verbose=verbose,
                             shuffle=shuffle, seed=seed, initial_epoch=initial_epoch, checkpoint=checkpoint,
                             distributed=distributed, sample_weight=sample_weight, class_weight=class_weight,
                             mask=mask, lengths=lengths, steps_per_epoch=steps_per_epoch,
                             validation_steps=validation_steps, workers=workers)

    def evaluate(self, x: Data, y: Data = None, batch_size: int | None = None, return_dict: bool = False,
                 distributed: Any = None, *, sample_weight: Any = None, mask: Any = None,
                 lengths: Any = None, steps: int | None = None,
                 workers: int | None = None, verbose: Any = 0) -> float | list[float] | dict[str, float]:
        """Loss (and metrics) over ``x``/``y`` in inference passes; batches are combined as the
        sample-weighted mean. ``sample_weight``, ``mask``, ``lengths`` as in :meth:`fit`.
        Returns the loss alone when there are no metrics, else ``[loss, *metrics]``, or a dict
        with ``return_dict=True``. With ``distributed=rk.distributed.MPI()`` the ranks share
        the samples and every rank returns the result over all of them.
        ``x`` may be a batch source (``steps`` batches of it, all when None;
        :mod:`rnnkit.models._fit_batches`). ``verbose``: 0 (default) prints nothing; 1, 2 or
        ``"auto"`` print the results as one line (:func:`rnnkit.models._habits.report`).
        While ``fit`` trains the model in another thread, the whole evaluation uses the weights
        of one whole optimizer step, as :meth:`predict` does."""
        self._require_compiled("evaluate")
        shown = check_verbose(verbose, f"{self.name}.evaluate")
        check_bool(return_dict, "return_dict", f"{self.name}.evaluate")
        bs = check_int(batch_size, "batch_size", f"{self.name}.evaluate", lo=1, none_ok=True)
        check_batch_axis(self, f"{self.name}.evaluate", batch_size=bs is not None,
                         sample_weight=sample_weight is not None)
        if is_batch_source(x):
            if y is not None or distributed is not None or any(
                    v is not None for v in (sample_weight, mask, lengths)):
                raise InvalidParameterError(f"{self.name}.evaluate: y, distributed=, sample_weight=, mask= "
                                            f"and lengths= cannot be given with a batch source as x")
            logs = WEIGHTS.read_once(_training.evaluate_source, self, x,
                                     check_int(steps, "steps", "evaluate", lo=1, none_ok=True),
                                     check_int(workers, "workers (0: no prefetch thread)", "evaluate", lo=0,
                                               none_ok=True), f"{self.name}.evaluate")
        elif y is None:
            raise InvalidInputError(f"{self.name}.evaluate: y (the targets) is missing; give y beside the "
                                    f"arrays x, or a batch source of (x, y) batches as x")
        else:
            # (the ranks of a distributed evaluation run it once, together)
            read = WEIGHTS.read if distributed is None else WEIGHTS.read_once
            logs = read(_training.evaluate_arrays, self, x, y, bs, sample_weight=sample_weight, mask=mask,
                        lengths=lengths, distributed=distributed)
        if shown:
            n = None if is_batch_source(x) else len(as_list(x, self.n_inputs, "input")[0])
            report(shown, f"{self.name}.evaluate", n, logs)
        return _flat_logs(logs, return_dict)

    # -- one batch (Keras' *_on_batch) ---------------------------------------------------------
    def train_on_batch(self, x: Data, y: Data = None, sample_weight: Any = None,
                       class_weight: dict[int, float] | None = None,
                       return_dict: bool = False) -> float | list[float] | dict[str, float]:
        """One optimizer step on the whole of ``x`` / ``y`` (one batch, however many samples):
        the step :meth:`fit` takes, with its checks, masks of ``Masking`` / ``Embedding`` layers,
        ``sample_weight`` / ``class_weight`` (Keras' rules), penalties and constraints; no
        callback runs and no history is kept. Returns what Keras' ``train_on_batch`` returns:
        the loss (penalties included) computed in the step's pass, BEFORE the update, alone
        when the model has no metrics, else ``[loss, *metrics]``, or a dict with
        ``return_dict=True``."""
        check_bool(return_dict, "return_dict", f"{self.name}.train_on_batch")
        logs = _training.train_on_batch(self, x, y, sample_weight=sample_weight, class_weight=class_weight)
        return _flat_logs(logs, return_dict)

    def test_on_batch(self, x: Data, y: Data = None, sample_weight: Any = None,
                      return_dict: bool = False) -> float | list[float] | dict[str, float]:
        """The loss (penalties included) and metrics on ``x`` / ``y`` in one inference pass
        over the whole batch (Keras' ``test_on_batch``): :meth:`evaluate` without
        ``batch_size``; the same return forms as :meth:`train_on_batch`."""
        return self.evaluate(x, y, None, return_dict, sample_weight=sample_weight)

    def predict_on_batch(self, x: Data) -> Data:
        """The outputs for ``x`` in one inference pass over the whole batch (Keras'
        ``predict_on_batch``): :meth:`predict` without ``batch_size``."""
        return self.predict(x)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, built={self.built})"



def _flat_logs(logs: dict[str, float], as_dict: bool) -> float | list[float] | dict[str, float]:
    """Keras' return of ``evaluate`` / ``*_on_batch``: the dict, else the loss alone when it is
    the only value, else the list of the values in log order."""
    if as_dict:
        return logs
    vals = list(logs.values())
    return vals[0] if len(vals) == 1 else vals
