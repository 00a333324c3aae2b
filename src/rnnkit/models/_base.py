"""``Model``: what Sequential and graph models share — compile, fit, evaluate, predict,
weights by name, summary, files. A model keeps no per-call state: every pass runs in its own
:class:`~rnnkit.Ctx`, so ``predict`` from several threads at once is safe.

Subclasses implement ``_ensure_built(xs)``, ``_forward(xs, ctx, check)``,
``_backward(grads, ctx, check)`` (lists of arrays, one per model input / output),
``named_weights()``, ``_summary_rows()`` and ``get_config()``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from rnnkit._arrays import as_real_array
from rnnkit._ctx import Ctx
from rnnkit._errors import (
    InvalidInputError,
    InvalidParameterError,
    ModelBusyError,
    NotBuiltError,
)
from rnnkit._layer import Layer, check_bool, check_real
from rnnkit._random import check_seed
from rnnkit._shape import Shape
from rnnkit.models._callbacks import Callback, History
from rnnkit.models._weights_api import WeightsAPI

Data = Any  # an array, or a list of arrays (one per model input / output)


class NonFiniteAt(Exception):
    """Internal: a pass produced NaN/Inf at ``where``; ``fit`` adds the epoch."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


def check_finite(arr: np.ndarray, where: str) -> None:
    if not np.isfinite(arr).all():
        raise NonFiniteAt(where)


def as_list(x: Data, n: int, what: str) -> list[np.ndarray]:
    """One array per model input/output: a plain array when ``n == 1`` (nested Python lists are
    one array; a list holding exactly one ndarray is accepted too), a list of ``n`` otherwise."""
    if n == 1:
        if isinstance(x, (list, tuple)) and len(x) == 1 and isinstance(x[0], np.ndarray):
            return [_real(x[0], what)]
        return [_real(x, what)]
    if not isinstance(x, (list, tuple)) or len(x) != n:
        got = f"a list of {len(x)}" if isinstance(x, (list, tuple)) else "one array"
        want = "a list" if n > 1 else "one array"
        raise InvalidInputError(f"expected {n} {what} array(s) ({want}), got {got}")
    return [_real(a, what) for a in x]


def _real(x: Any, what: str) -> np.ndarray:
    """An array of real numbers (ragged nested lists and objects are refused, typed)."""
    return as_real_array(x, what, "model")


def unlist(xs: list[np.ndarray]) -> Data:
    return xs[0] if len(xs) == 1 else xs


class Model(WeightsAPI):
    """Base class of :class:`Sequential` and :class:`GraphModel` (see the module docstring)."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}: name must be a str, got {name!r}")
        self.name = name
        self.optimizer: Any = None
        self.loss: Any = None
        self.metrics: list[Any] = []
        self.stop_training = False
        self.history: History | None = None
        self._build_lock = threading.Lock()
        self._fit_lock = threading.Lock()

    # -- subclass API ------------------------------------------------------------------------
    n_inputs: int = 1
    n_outputs: int = 1

    @property
    def built(self) -> bool:
        raise NotImplementedError

    def input_shapes(self) -> list[Shape]:
        raise NotImplementedError

    def _ensure_built(self, xs: list[np.ndarray]) -> None:
        if not self.built:
            raise NotBuiltError(self.name, "this call")

    def _forward(self, xs: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        raise NotImplementedError

    def _backward(self, grads: list[np.ndarray], ctx: Ctx, check: bool) -> list[np.ndarray]:
        raise NotImplementedError

    def _forward_masks(self, xs: list[np.ndarray], ctx: Ctx, check: bool,
                       masks: list[Any] | None = None) -> tuple[list[np.ndarray], list[Any]]:
        """``_forward`` with the input masks (default ``ctx.mask`` for the first input) and
        the output masks returned; a model without mask support refuses a mask."""
        if (masks is not None and any(m is not None for m in masks)) or ctx.mask is not None:
            raise InvalidInputError(f"{self.name}: this model does not propagate masks")
        outs = self._forward(xs, ctx, check)
        return outs, [None] * len(outs)

    def named_weights(self) -> dict[str, tuple[Layer, str]]:
        raise NotImplementedError

    def _summary_rows(self) -> tuple[list[str], list[list[str]]]:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- passes ------------------------------------------------------------------------------
    def _inputs(self, x: Data) -> list[np.ndarray]:
        xs = as_list(x, self.n_inputs, "input")
        self._ensure_built(xs)
        for k, (a, shp) in enumerate(zip(xs, self.input_shapes(), strict=True)):
            if a.ndim != shp.rank or not all(d is None or d == s for d, s in zip(shp[1:], a.shape[1:],
                                                                                 strict=True)):
                which = f"input {k}" if self.n_inputs > 1 else "input"
                raise InvalidInputError(
                    f"{self.name}: {which} has shape {a.shape}; the model was built for {shp} "
                    f"(None = any extent)"
                )
            if a.shape[0] < 1:
                raise InvalidInputError(f"{self.name}: input holds no samples (shape {a.shape})")
        if len({a.shape[0] for a in xs}) > 1:
            raise InvalidInputError(
                f"{self.name}: inputs hold different sample counts {[a.shape for a in xs]}"
            )
        return xs

    def forward(self, x: Data, ctx: Ctx) -> Data:
        """Run the model in ``ctx`` (one input: an array; several: a list, same for outputs).
        ``ctx.mask`` (``ctx.set_mask(lengths=n)``) is the mask of the (first) input; the model
        hands masks from layer to layer and clears ``ctx.mask`` afterwards."""
        return unlist(self._forward(self._inputs(x), ctx, False))

    def backward(self, grad: Data, ctx: Ctx) -> Data:
        """Backpropagate the output gradient(s); weight gradients go into ``ctx``. Returns the
        input gradient(s)."""
        return unlist(self._backward(as_list(grad, self.n_outputs, "gradient"), ctx, False))

    def __call__(self, x: Data, ctx: Ctx | None = None) -> Data:
        return self.forward(x, ctx if ctx is not None else Ctx.inference())

    def predict(self, x: Data, batch_size: int | None = None, *, mask: Any = None,
                lengths: Any = None, steps: int | None = None, workers: int = 1) -> Data:
        """Outputs for ``x`` in an inference pass; with ``batch_size``, ``batch_size`` samples
        at a time, concatenated. Thread-safe. A padded batch: ``lengths=`` ((B,) ints,
        PyTorch's packed semantics) or ``mask=`` (boolean (B, T), Keras' semantics) — a list
        with one per input for several inputs — or a ``Masking`` / ``Embedding(mask_zero=True)``
        layer in the model. ``x`` may be a batch source (a generator, a
        :class:`rnnkit.data.Dataset`; ``steps`` batches of it, all when None; see
        :mod:`rnnkit.models._fit_batches`)."""
        from rnnkit.models._fit_batches import is_batch_source, predict_source
        from rnnkit.models._weighting import input_masks, take_mask

        if is_batch_source(x):
            if mask is not None or lengths is not None:
                raise InvalidParameterError(f"{self.name}.predict: mask= / lengths= cannot be given with a "
                                            f"batch source as x (a source's mask(i) gives them)")
            return predict_source(self, x, steps, workers)
        xs = self._inputs(x)
        n = xs[0].shape[0]
        masks = input_masks(self, xs, mask, lengths)
        bs = n if batch_size is None else _check_batch_size(batch_size)
        parts: list[list[np.ndarray]] = []
        for a in range(0, n, bs):
            mb = None if masks is None else [take_mask(m, slice(a, a + bs), v.shape[1])
                                             for m, v in zip(masks, xs, strict=True)]
            parts.append(self._forward_masks([v[a:a + bs] for v in xs], Ctx.inference(), False,
                                             mb)[0])
        if len(parts) == 1:
            return unlist(parts[0])
        return unlist([np.concatenate([p[k] for p in parts]) for k in range(self.n_outputs)])

    # -- compile / train ---------------------------------------------------------------------
    def compile(self, optimizer: Any = "adam", loss: Any = "mse", metrics: list[Any] | None = None) -> Model:
        """Set the optimizer (object or name, via ``rnnkit.optimizers.get``), the loss (object
        or name, via ``rnnkit.losses.get``) and the metrics (``rnnkit.metrics.get`` each).
        Returns the model. With several outputs the loss is applied to each and summed."""
        from rnnkit import losses, optimizers
        from rnnkit import metrics as metrics_mod

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
            callbacks: list[Callback] | None = None, verbose: int = 0, shuffle: bool = True,
            seed: int | None = None, initial_epoch: int = 0, checkpoint: Any = None,
            distributed: Any = None, sample_weight: Any = None,
            class_weight: dict[int, float] | None = None, mask: Any = None,
            lengths: Any = None, steps_per_epoch: int | None = None,
            validation_steps: int | None = None, workers: int = 1) -> History:
        """Train. ``fit(x, y, epochs)`` takes ONE full-batch step per epoch;
        ``batch_size=`` takes mini-batch steps, reshuffled each epoch (``shuffle``) by a
        generator seeded with ``seed`` (else the global seed, else entropy). See
        :func:`rnnkit.models._training.run_fit` for the epoch loss, validation and callbacks.
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
        rank of an MPI job (``batch_size`` is then the global batch; see
        :mod:`rnnkit.distributed._fit`); it does not take ``checkpoint=`` (a
        ``ModelCheckpoint`` callback runs on rank 0), nor weights or masks. ``x`` may be a
        batch source instead of arrays (a generator / iterable of ``(x, y)`` or ``(x, y,
        sample_weight)`` batches, a :class:`rnnkit.data.Dataset`), with ``steps_per_epoch``,
        ``validation_steps`` and ``workers`` (prefetch threads); see
        :mod:`rnnkit.models._fit_batches`."""
        from rnnkit.models._fit_batches import check_workers, is_batch_source
        from rnnkit.models._training import run_fit

        if is_batch_source(x) or steps_per_epoch is not None:
            if any(v is not None for v in (sample_weight, class_weight, mask, lengths)):
                raise InvalidParameterError(f"{self.name}.fit: sample_weight= / class_weight= / mask= / "
                                            f"lengths= cannot be given with a batch source as x (the batches "
                                            f"carry sample weights; a source's mask(i) gives lengths)")
            return self._fit_source(x, y, epochs, batch_size, validation_data, validation_split, callbacks,
                                    verbose, shuffle, seed, initial_epoch, checkpoint, distributed,
                                    steps_per_epoch, validation_steps, check_workers(workers, "fit"))
        if y is None:
            raise InvalidInputError(f"{self.name}.fit: y (the targets) is missing; give y beside the "
                                    f"arrays x, or a batch source of (x, y) batches as x")

        check_seed(seed, f"{self.name}.fit")
        check_bool(shuffle, "shuffle", f"{self.name}.fit")
        if not isinstance(verbose, (int, np.integer)) or verbose < 0:
            raise InvalidParameterError(f"{self.name}.fit: verbose must be an int >= 0 or a bool, "
                                        f"got {verbose!r}")
        if validation_split is not None:
            validation_split = check_real(validation_split, "validation_split", f"{self.name}.fit")
        if distributed is not None and checkpoint is not None:
            raise InvalidParameterError(
                f"{self.name}.fit: checkpoint= is not available with distributed=; "
                f"use a ModelCheckpoint callback (it runs on rank 0) and load its file on rank 0 to resume")
        weighted = any(v is not None for v in (sample_weight, class_weight, mask, lengths))
        if distributed is not None and weighted:
            raise InvalidParameterError(f"{self.name}.fit: distributed= takes no sample_weight, "
                                        f"class_weight, mask or lengths")
        if not self._fit_lock.acquire(blocking=False):
            raise ModelBusyError(f"{self.name}: fit was called while the model is already training in "
                                 f"another thread; one model trains in one thread at a time (build a "
                                 f"second model from model.get_config() to train in parallel)")
        try:
            if distributed is not None:
                from rnnkit._penalties import has_any
                from rnnkit.distributed._fit import run_fit_distributed

                if has_any(self):
                    raise InvalidParameterError(
                        f"{self.name}.fit: regularizers and constraints are not applied by distributed= "
                        f"training; remove them (rk.attach_regularization(layer, ...=None)) "
                        f"or train on one process")

                return run_fit_distributed(
                    self, x, y, epochs, batch_size=batch_size, validation_data=validation_data,
                    validation_split=validation_split, callbacks=callbacks, verbose=verbose,
                    shuffle=shuffle, seed=seed, initial_epoch=initial_epoch, distributed=distributed)
            return run_fit(self, x, y, epochs, batch_size=batch_size, validation_data=validation_data,
                           validation_split=validation_split, callbacks=callbacks, verbose=verbose,
                           shuffle=shuffle, seed=seed, initial_epoch=initial_epoch, checkpoint=checkpoint,
                           sample_weight=sample_weight, class_weight=class_weight, mask=mask,
                           lengths=lengths)
        finally:
            self._fit_lock.release()

    def _fit_source(self, x: Data, y: Data, epochs: int, batch_size: Any, validation_data: Any,
                    validation_split: Any, callbacks: Any, verbose: Any, shuffle: Any, seed: Any,
                    initial_epoch: int, checkpoint: Any, distributed: Any, steps_per_epoch: Any,
                    validation_steps: Any, workers: int) -> History:
        """``fit`` on a batch source: the array-only options are refused, typed."""
        from rnnkit.models._fit_batches import is_batch_source, run_fit_source

        where = f"{self.name}.fit"
        if not is_batch_source(x):
            raise InvalidParameterError(f"{where}: steps_per_epoch needs a batch source (a generator or a "
                                        f"Dataset) as x, got {type(x).__name__}")
        given = {"y": y is not None, "batch_size": batch_size is not None, "validation_split":
                 bool(validation_split), "checkpoint": checkpoint is not None,
                 "distributed": distributed is not None}
        bad = [k for k, v in given.items() if v]
        if bad:
            raise InvalidParameterError(f"{where}: {', '.join(bad)} cannot be given with a batch source as x "
                                        f"(the batches carry the targets and their size; Keras' rule)")
        check_seed(seed, where)
        check_bool(shuffle, "shuffle", where)
        if not isinstance(verbose, (int, np.integer)) or verbose < 0:
            raise InvalidParameterError(f"{where}: verbose must be an int >= 0 or a bool, got {verbose!r}")
        if not self._fit_lock.acquire(blocking=False):
            raise ModelBusyError(f"{self.name}: fit was called while the model is already training in "
                                 f"another thread")
        try:
            return run_fit_source(self, x, epochs, steps_per_epoch=steps_per_epoch,  # type: ignore[no-any-return]
                                  validation_data=validation_data, validation_steps=validation_steps,
                                  callbacks=callbacks, verbose=int(verbose), seed=seed,
                                  initial_epoch=initial_epoch, workers=workers)
        finally:
            self._fit_lock.release()

    def fit_with_batches(self, x: Data, y: Data, epochs: int, batch_size: int, **kwargs: Any) -> History:
        """:meth:`fit` with mini-batches: ``batch_size`` is the fourth positional argument."""
        return self.fit(x, y, epochs, batch_size=_check_batch_size(batch_size), **kwargs)

    def evaluate(self, x: Data, y: Data = None, batch_size: int | None = None, return_dict: bool = False,
                 distributed: Any = None, *, sample_weight: Any = None, mask: Any = None,
                 lengths: Any = None, steps: int | None = None,
                 workers: int = 1) -> float | list[float] | dict[str, float]:
        """Loss (and metrics) over ``x``/``y`` in inference passes; batches are combined as the
        sample-weighted mean. ``sample_weight``, ``mask``, ``lengths`` as in :meth:`fit`.
        Returns the loss alone when there are no metrics, else ``[loss, *metrics]``, or a dict
        with ``return_dict=True``. With ``distributed=rk.distributed.MPI()`` the ranks share
        the samples and every rank returns the result over all of them (no weights or masks).
        ``x`` may be a batch source (``steps`` batches of it, all when None;
        :mod:`rnnkit.models._fit_batches`)."""
        from rnnkit.models._fit_batches import check_steps, check_workers, evaluate_any, is_batch_source
        from rnnkit.models._training import evaluate_logs

        self._require_compiled("evaluate")
        check_bool(return_dict, "return_dict", f"{self.name}.evaluate")
        bs = None if batch_size is None else _check_batch_size(batch_size)
        if is_batch_source(x):
            if y is not None or distributed is not None or any(
                    v is not None for v in (sample_weight, mask, lengths)):
                raise InvalidParameterError(f"{self.name}.evaluate: y, distributed=, sample_weight=, mask= "
                                            f"and lengths= cannot be given with a batch source as x")
            logs = evaluate_any(self, x, None, check_steps(steps, "evaluate: steps"),
                                check_workers(workers, "evaluate"), f"{self.name}.evaluate")
        elif y is None:
            raise InvalidInputError(f"{self.name}.evaluate: y (the targets) is missing; give y beside the "
                                    f"arrays x, or a batch source of (x, y) batches as x")
        elif distributed is not None:
            from rnnkit.distributed._fit import run_evaluate_distributed

            if any(v is not None for v in (sample_weight, mask, lengths)):
                raise InvalidParameterError("evaluate: distributed= takes no sample_weight, mask or "
                                            "lengths")
            logs = run_evaluate_distributed(self, x, y, bs, distributed)
        else:
            logs = evaluate_logs(self, x, y, bs, sample_weight=sample_weight, mask=mask, lengths=lengths)
        if return_dict:
            return logs
        vals = list(logs.values())
        return vals[0] if len(vals) == 1 else vals

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, built={self.built})"


def _check_batch_size(batch_size: object) -> int:
    if isinstance(batch_size, bool) or not hasattr(batch_size, "__index__") or int(batch_size) < 1:  # type: ignore[call-overload]
        raise InvalidParameterError(f"batch_size must be an int >= 1, got {batch_size!r}")
    return int(batch_size)  # type: ignore[call-overload]
