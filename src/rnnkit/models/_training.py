"""``fit`` and ``evaluate`` at the door: every argument and the data are checked ONCE, here,
then the one loop of :mod:`rnnkit.models._trainer` runs (nothing re-checked inside it).

What ``fit`` takes (each refused with a typed error naming it otherwise):

- arrays ``x``, ``y`` (finite numbers, one per model input / output, the same sample count),
  with ``batch_size`` (None: one full-batch step per epoch), ``shuffle``, ``seed``,
  ``sample_weight`` / ``class_weight`` (Keras' rules), ``mask=`` / ``lengths=`` (the inputs'
  padding), ``validation_data`` (a pair or ``(x, y, sample_weight)``) or ``validation_split``
  (the LAST ``ceil(f * N)`` samples, before any shuffling, as Keras holds out), ``checkpoint``;
- or a batch source ``x`` (a generator, a :class:`rnnkit.data.Dataset`; each batch checked as
  it arrives: :mod:`rnnkit.models._fit_batches`) with ``steps_per_epoch``,
  ``validation_steps``, ``workers``;
- ``distributed=rk.distributed.MPI()`` with arrays: the same training on every rank of an MPI
  job, masks, sample and class weights and weight regularizers included, equal to one process
  on the same global batches (:mod:`rnnkit.distributed._team`). It takes no ``checkpoint`` (a
  ``ModelCheckpoint`` callback runs on rank 0), no batch source and no activity regularizer.

``epochs`` >= 1, ``initial_epoch`` >= 0, ``verbose`` 0 / 1 / 2 / ``"auto"`` (Keras' meanings:
:mod:`rnnkit.models._habits`), ``callbacks`` a list of Callback. Without ``batch_size`` on more
than 512 samples ``fit`` warns (``FullBatchWarning``) that each epoch is one full-batch step.
While a ``fit`` runs, every layer of the model is busy: a second ``fit`` of any model
holding one of those layers (two models sharing a layer) raises ModelBusyError at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from rnnkit import _penalties as _pen
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, ModelBusyError
from rnnkit._layer import Layer, check_bool, check_float, check_int
from rnnkit._random import check_seed, make_rng
from rnnkit.models._batch import Batch, prepare, take
from rnnkit.models._callbacks import Callback, CallbackList, History
from rnnkit.models._callbacks_more import ProgbarLogger, TerminateOnNaN
from rnnkit.models._checks import Data
from rnnkit.models._checks import Trainable as Model
from rnnkit.models._fit_batches import SourceBatches, is_batch_source
from rnnkit.models._habits import check_batch_axis, check_verbose, warn_full_batch
from rnnkit.models._plan import Plan, eval_facts
from rnnkit.models._resume import fingerprint, restore_state, save_state
from rnnkit.models._trainer import SOLO, Resume, Team, check_weights, evaluate, guarded_step, run
from rnnkit.models._weighting import output_weights

__all__ = ["Parallel", "evaluate_arrays", "fit", "output_weights", "prepare", "train_on_batch"]
T = TypeVar("T")


class Parallel:
    """A way to run ``fit`` / ``evaluate`` on several processes (``rnnkit.distributed.MPI``):
    :meth:`team` makes the :class:`~rnnkit.models._trainer.Team` of one call, :meth:`run`
    runs the whole call on this process (ending the job when it fails outside a guarded
    region)."""

    def team(self, model: Model, what: str) -> Team:
        raise NotImplementedError

    def run(self, fn: Callable[[], T]) -> T:
        return fn()


def check_parallel(obj: Any, where: str) -> Parallel:
    if not isinstance(obj, Parallel):
        raise TypeError(f"{where}: distributed= must be an rnnkit.distributed.MPI object (or None), "
                        f"got {type(obj).__name__}")
    return obj


# -- the data ------------------------------------------------------------------------------
class ArrayBatches:
    """The batches of arrays: each epoch, the team's index batches (a permutation drawn from
    the fit generator when shuffling)."""

    def __init__(self, data: Batch, batch_size: int | None, shuffle: bool, rng: np.random.Generator,
                 team: Team) -> None:
        self.data, self.bs, self.shuffle, self.rng, self.team = data, batch_size, shuffle, rng, team
        self._steps = 0

    def epoch(self, epoch: int) -> Iterator[Batch]:
        idx = self.team.epoch_batches(self.data.n, self.bs, self.shuffle, self.rng)
        self._steps = len(idx)
        return (take(self.data, i) for i in idx)

    def steps(self) -> int | None:
        return self._steps

    def end_epoch(self) -> None:
        pass


def split_validation(data: Batch, split: float) -> tuple[Batch, Batch]:
    n = data.n
    n_val = math.ceil(split * n)
    if n_val >= n:
        raise InvalidInputError(f"fit: validation_split={split} leaves no training samples out of {n}")
    return take(data, slice(0, n - n_val)), take(data, slice(n - n_val, n))


def _weighting(data: Batch) -> dict[str, str]:
    """A digest of the input masks and sample weights for a checkpoint's fingerprint (nothing
    when there are none, so an unweighted run's fingerprint is unchanged)."""
    if data.masks is None and data.sws is None:
        return {}
    h = hashlib.sha256()
    for m, x in zip(data.masks or [], data.xs, strict=False):
        h.update(b"-" if m is None else np.ascontiguousarray(m.valid(x.shape[1])).tobytes())
    for w in data.sws or []:
        h.update(b"-" if w is None else np.ascontiguousarray(w, np.float64).tobytes())
    return {"weighting": h.hexdigest()}


# -- the arguments -------------------------------------------------------------------------
def check_callbacks(callbacks: Any, where: str) -> list[Callback]:
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        raise InvalidParameterError(f"{where}: callbacks must be a list of Callback instances (or None), "
                                    f"got {type(callbacks).__name__}")
    return list(callbacks)


_BUSY: set[int] = set()
_BUSY_LOCK = threading.Lock()


@contextlib.contextmanager
def busy(model: Model) -> Iterator[None]:
    """Mark every layer of ``model`` busy for the block; ModelBusyError when one already is."""
    layers: list[Layer] = _pen.layers_of(model)
    ids = {id(la) for la in layers}
    with _BUSY_LOCK:
        taken = [la.name for la in layers if id(la) in _BUSY]
        if taken:
            raise ModelBusyError(f"{model.name}: fit was called while layer(s) {taken} of this model are "
                                 f"already training (in another thread, or in another model sharing them); "
                                 f"a layer trains in one fit at a time (build a second model from "
                                 f"model.get_config() to train in parallel)")
        _BUSY.update(ids)
    try:
        yield
    finally:
        with _BUSY_LOCK:
            _BUSY.difference_update(ids)


def fit(model: Model, x: Data, y: Data, epochs: Any, *, batch_size: Any, validation_data: Any,
        validation_split: Any, callbacks: Any, verbose: Any, shuffle: Any, seed: Any, initial_epoch: Any,
        checkpoint: Any, distributed: Any, sample_weight: Any, class_weight: Any, mask: Any, lengths: Any,
        steps_per_epoch: Any, validation_steps: Any, workers: Any) -> History:
    """``Model.fit`` (see the module docstring)."""
    where = f"{model.name}.fit"
    model._require_compiled("fit")  # type: ignore[attr-defined]
    n_epochs = check_int(epochs, "epochs", "fit", lo=1)
    start = check_int(initial_epoch, "initial_epoch", "fit", lo=0)
    bs = check_int(batch_size, "batch_size", "fit", lo=1, none_ok=True)
    check_seed(seed, where)
    check_bool(shuffle, "shuffle", where)
    verbose = check_verbose(verbose, where)
    n_workers = check_int(workers, "workers (0: no prefetch thread)", "fit", lo=0, none_ok=True)
    cb_list = check_callbacks(callbacks, where)
    split = 0.0 if validation_split is None else check_float(validation_split, "validation_split", where)
    if not 0.0 <= split < 1.0:
        raise InvalidParameterError(f"fit: validation_split must be a number in [0, 1), got "
                                    f"{validation_split!r}")
    parallel = None if distributed is None else check_parallel(distributed, "fit")
    check_batch_axis(model, where, batch_size=bs is not None, shuffle=bool(shuffle),
                     validation_split=bool(split), sample_weight=sample_weight is not None,
                     class_weight=class_weight is not None)
    source = is_batch_source(x) or steps_per_epoch is not None
    if source:
        if not is_batch_source(x):
            raise InvalidParameterError(f"{where}: steps_per_epoch needs a batch source (a generator or a "
                                        f"Dataset) as x, got {type(x).__name__}")
        if any(v is not None for v in (sample_weight, class_weight, mask, lengths)):
            raise InvalidParameterError(f"{where}: sample_weight= / class_weight= / mask= / lengths= cannot "
                                        f"be given with a batch source as x (the batches carry sample "
                                        f"weights; a source's mask(i) gives lengths)")
        given = {"y": y is not None, "batch_size": bs is not None, "validation_split": bool(split),
                 "checkpoint": checkpoint is not None, "distributed": parallel is not None}
        bad = [k for k, v in given.items() if v]
        if bad:
            raise InvalidParameterError(f"{where}: {', '.join(bad)} cannot be given with a batch source as x "
                                        f"(the batches carry the targets and their size; Keras' rule)")
        if validation_data is not None and not is_batch_source(validation_data) and (
                not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2):
            raise InvalidParameterError("fit: validation_data must be a pair (x_val, y_val) or a batch "
                                        "source")
    else:
        if y is None:
            raise InvalidInputError(f"{where}: y (the targets) is missing; give y beside the arrays x, or a "
                                    f"batch source of (x, y) batches as x")
        if validation_data is not None and (not isinstance(validation_data, (tuple, list))
                                            or len(validation_data) not in (2, 3)):
            raise InvalidParameterError("fit: validation_data must be a pair (x_val, y_val) or a triple "
                                        "(x_val, y_val, sample_weight_val)")
    if parallel is not None:
        if checkpoint is not None:
            raise InvalidParameterError(
                f"{where}: checkpoint= is not available with distributed=; use a ModelCheckpoint callback "
                f"(it runs on rank 0) and load its file on rank 0 to resume")
        if any(getattr(la, "activity_regularizer", None) is not None for la in _pen.layers_of(model)):
            raise InvalidParameterError(f"{where}: distributed= does not apply activity regularizers; remove "
                                        f"them (activity_regularizer=None) or train on one process")
    assert n_epochs is not None and start is not None
    history = History()
    extra: list[Callback] = [ProgbarLogger(n_epochs)] if verbose == 2 else []
    cbs = CallbackList([*cb_list, *extra, history], model)  # type: ignore[arg-type]  # History last
    nan_stops = any(isinstance(cb, TerminateOnNaN) for cb in cbs.callbacks)
    common = {"epochs": n_epochs, "initial_epoch": start, "verbose": int(verbose), "nan_stops": nan_stops}
    with busy(model):
        if source:
            steps = check_int(steps_per_epoch, "steps_per_epoch", "fit", lo=1, none_ok=True)
            batches = SourceBatches(model, x, steps, n_workers, where)
            vsteps = check_int(validation_steps, "validation_steps", "fit", lo=1, none_ok=True)

            def validate_source() -> dict[str, float]:
                return evaluate_source(model, validation_data, vsteps, n_workers, f"{where} (validation)")

            return run(model, batches, make_rng(seed), cbs, history,
                       validate=None if validation_data is None else validate_source,
                       on_empty_epoch=batches.ran_out, **common)  # type: ignore[arg-type]

        def body() -> History:
            team = SOLO if parallel is None else parallel.team(model, "fit")
            data: Batch | None = None
            val: Batch | None = None
            with team.region("checking the data"):
                data = prepare(model, x, y, "fit", sample_weight=sample_weight, class_weight=class_weight,
                               mask=mask, lengths=lengths)  # builds the model
                for layer in _pen.layers_of(model):
                    _pen.check_layer(layer)
                if (data.masks is not None or data.sws is not None) and split:
                    raise InvalidParameterError("fit: validation_split with mask=/lengths=/sample_weight=/"
                                                "class_weight= is not supported; pass validation_data")
                if validation_data is not None:
                    vsw = validation_data[2] if len(validation_data) == 3 else None
                    val = prepare(model, validation_data[0], validation_data[1], "fit: validation_data",
                                  sample_weight=vsw)
                elif split:
                    data, val = split_validation(data, split)
            rng = make_rng(seed)
            team.start(model, data, val, rng, seed)  # a team: raises every rank's failure on every rank
            assert data is not None
            n = data.n
            if team.is_root:
                warn_full_batch(n, bs, where)
            step_bs = n if bs is None else min(bs, n)
            resume = None if checkpoint is None else _resume(model, checkpoint, data, rng, {
                "epochs": n_epochs, "batch_size": step_bs, "shuffle": bool(shuffle), "seed": seed,
                "initial_epoch": start, "validation": val is not None, **_weighting(data)})
            batches = ArrayBatches(data, bs, bool(shuffle), rng, team)
            facts = None if val is None else eval_facts(model)

            def validate_arrays() -> dict[str, float]:
                assert val is not None
                return evaluate(model, (take(val, i) for i in team.eval_batches(val.n, bs)), team,
                                "validation", facts)

            return run(model, batches, rng, cbs, history, team=team, resume=resume,
                       validate=None if val is None else validate_arrays, **common)  # type: ignore[arg-type]

        return body() if parallel is None else parallel.run(body)


def _resume(model: Model, checkpoint: Any, data: Batch, rng: np.random.Generator,
            run_: dict[str, Any]) -> Resume:
    fp = fingerprint(model, data.xs, data.ys, run_)  # type: ignore[arg-type]

    def restore(history: History, callbacks: list[Any]) -> int | None:
        return restore_state(checkpoint, model, rng, history, callbacks, fp)  # type: ignore[arg-type]

    def save(done: int, history: History, callbacks: list[Any]) -> None:
        save_state(checkpoint, model, rng, done, history, callbacks, fp)  # type: ignore[arg-type]

    return Resume(restore, save)


def evaluate_source(model: Model, data: Any, steps: int | None, workers: int | None,
                    where: str) -> dict[str, float]:
    """Loss and metrics over a batch source, or over a pair of arrays."""
    if not is_batch_source(data):
        return evaluate_arrays(model, data[0], data[1], None)
    logs = evaluate(model, SourceBatches(model, data, steps, workers, where, epochs=False).epoch(0))
    if not logs:
        raise InvalidInputError(f"{where}: the batch source gave no batch")
    return logs


def evaluate_arrays(model: Model, x: Data, y: Data, batch_size: int | None, *, sample_weight: Any = None,
                    mask: Any = None, lengths: Any = None, distributed: Any = None) -> dict[str, float]:
    """``Model.evaluate`` on arrays: loss and metrics, sample-weighted over batches."""
    parallel = None if distributed is None else check_parallel(distributed, "evaluate")

    def body() -> dict[str, float]:
        team = SOLO if parallel is None else parallel.team(model, "evaluate")
        data: Batch | None = None
        with team.region("checking the data"):
            data = prepare(model, x, y, "evaluate", sample_weight=sample_weight, mask=mask, lengths=lengths)
        team.start(model, data, None, None, None)
        assert data is not None
        return evaluate(model, (take(data, i) for i in team.eval_batches(data.n, batch_size)), team)

    return body() if parallel is None else parallel.run(body)


def train_on_batch(model: Model, x: Data, y: Data, *, sample_weight: Any,
                   class_weight: Any) -> dict[str, float]:
    """``Model.train_on_batch``: ONE optimizer step on the whole of ``x`` / ``y``, the step
    ``fit`` takes (:func:`rnnkit.models._trainer.train_step`; Keras' ``train_on_batch``), with
    no callback, no history and no full-batch warning. Returns the step's logs: the loss
    (penalties included) and the metrics of the pass BEFORE the update, as Keras returns them."""
    where = f"{model.name}.train_on_batch"
    model._require_compiled("train_on_batch")  # type: ignore[attr-defined]
    if y is None:
        raise InvalidInputError(f"{where}: y (the targets) is missing; give y beside x")
    with busy(model):
        data = prepare(model, x, y, "train_on_batch", sample_weight=sample_weight, class_weight=class_weight)
        for layer in _pen.layers_of(model):
            _pen.check_layer(layer)
        plan = Plan(model)
        if plan.custom is not None:
            plan.custom[1]()   # a train_step's metrics: this batch's values only, as Keras returns them
        ctx = Ctx.training(int(make_rng(None).integers(0, 2**63 - 1)))
        _, values = guarded_step(model, data, ctx, SOLO, where, False, plan)
        plan.previous = where
        check_weights(model, SOLO, plan)
    return {k: float(v) for k, v in zip(plan.keys, values, strict=True)}
