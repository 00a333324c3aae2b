"""``fit`` / ``evaluate`` / ``predict`` on batches from anywhere: a :class:`rnnkit.data.Dataset`
(or any object with ``__len__`` and ``__getitem__``, Keras' ``PyDataset``), a Python iterator
or generator, or a re-iterable object, each giving ``(x, y)`` or ``(x, y, sample_weight)``
batches (``x`` alone, or ``(x,)``, for ``predict``).

One EPOCH of ``fit``:

- a Dataset ``ds``: batches ``ds[0] .. ds[steps - 1]`` with ``steps = steps_per_epoch or
  len(ds)``, then ``ds.on_epoch_end()``;
- an iterator / generator: the next ``steps_per_epoch`` batches (all that remain when None) of
  the SAME iterator, which carries on in the next epoch; a re-iterable object (a list of
  batches is not one: lists are arrays): a fresh ``iter()`` each epoch;
- a source that runs out ends the epoch there; an epoch that gets no batch at all stops
  training with a warning (Keras: "your input ran out of data").

Each step is :func:`rnnkit.models._trainer.train_step` on the batch as given (no reshuffle,
no re-batching), with the training generator seeded by ``seed`` drawing one Ctx seed per step
exactly as the array path does — so a generator yielding the batches of ``fit(x, y,
batch_size=b, shuffle=False)`` in order ends with bit-identical weights. The epoch's logs are the
sample-weighted means of the batch logs (Keras' convention), as for arrays.

Lengths: a Dataset with a ``mask(i)`` method (``rnnkit.data.bucket_by_length``'s batches) hands
batch ``i``'s :class:`~rnnkit.Mask` to the model as the mask of its (first) input, as
``fit(lengths=)`` does for arrays: padded steps do not reach a recurrent layer's final state,
and leave a sequence output's loss. ``(x, y, sample_weight)`` batches weight the loss as
``fit(sample_weight=)`` does.

Prefetch: with ``workers >= 1`` (default 1, or a Dataset's own ``workers=`` /
``max_queue_size=``: :func:`read_ahead`) one background thread reads ahead up to
``workers`` batches (a Dataset's ``__getitem__`` / the generator's ``next``) while the current
step computes; batches arrive in order, so results equal ``workers=0`` (no thread) bit for bit.
An exception raised by the source is re-raised as :class:`rnnkit.data.DataSourceError` naming
the batch and the epoch, with the original as its ``__cause__``.
"""

from __future__ import annotations

import queue
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import DataSourceError, InvalidInputError, InvalidParameterError
from rnnkit._numbers import check_int
from rnnkit.data import Dataset
from rnnkit.models._batch import Batch, prepare
from rnnkit.models._checks import Trainable as Model
from rnnkit.models._checks import first_non_finite, unlist
from rnnkit.models._weighting import sample_weights


def is_batch_source(x: Any) -> bool:
    """True for what the batch path takes: an iterator/generator, a Dataset-like object, or a
    re-iterable that is not an array, list, tuple, dict or str."""
    if isinstance(x, (np.ndarray, list, tuple, dict, str, bytes)) or x is None:
        return False
    if hasattr(x, "__next__"):
        return True
    if hasattr(x, "__len__") and hasattr(x, "__getitem__"):
        return not hasattr(x, "__array__") and not hasattr(x, "shape")
    return hasattr(x, "__iter__") and not hasattr(x, "__array__")


def read_ahead(data: Any, workers: int | None) -> int:
    """The batches to read ahead: ``workers`` when given, else a :class:`rnnkit.data.Dataset`'s
    own ``workers=`` / ``max_queue_size=`` (:meth:`~rnnkit.data.Dataset.prefetch`), else 1."""
    if workers is not None:
        return workers
    own = data.prefetch() if isinstance(data, Dataset) else None
    return 1 if own is None else own


class Source:
    """One batch source and how it is walked (see the module docstring)."""

    def __init__(self, data: Any, steps: int | None, where: str) -> None:
        self.data, self.steps, self.where = data, steps, where
        self.indexed = (not hasattr(data, "__next__") and hasattr(data, "__getitem__")
                        and hasattr(data, "__len__"))
        self.iterator: Any = data if hasattr(data, "__next__") else None
        if self.indexed:
            n = self._len()
            if steps is not None and steps > n:
                raise InvalidParameterError(f"{where}: steps {steps} exceed the {n} batches of the dataset")

    def epoch_steps(self) -> int | None:
        if self.indexed:
            return self.steps if self.steps is not None else self._len()
        return self.steps

    def _len(self) -> int:
        """The dataset's batch count; a ``__len__`` that Python refuses (negative, past
        ``sys.maxsize``, not an int) is a typed error naming the source."""
        try:
            return len(self.data)
        except (ValueError, OverflowError, TypeError) as e:
            raise InvalidInputError(f"{self.where}: the dataset's __len__ must give its number of "
                                    f"batches, an int from 0 to sys.maxsize; {e}") from None

    def raw(self) -> Iterator[Any]:
        """The batches of one epoch, produced lazily."""
        if self.indexed:
            for i in range(self.epoch_steps() or 0):
                yield self.data[i]
            return
        it = self.iterator if self.iterator is not None else iter(self.data)
        count = 0
        while self.steps is None or count < self.steps:
            try:
                item = next(it)
            except StopIteration:
                return
            count += 1
            yield item

    def end_epoch(self) -> None:
        if self.indexed and hasattr(self.data, "on_epoch_end"):
            self.data.on_epoch_end()


_DONE = object()


def batches(source: Source, workers: int, epoch: int) -> Iterator[tuple[int, Any]]:
    """``(step, batch)`` for one epoch, read ahead on a thread when ``workers >= 1``; a source
    error becomes DataSourceError naming the step."""
    where = source.where

    def fail(step: int, e: BaseException) -> DataSourceError:
        err = DataSourceError(f"{where}: the batch source raised {type(e).__name__}: {e} while producing "
                              f"batch {step + 1} of epoch {epoch + 1}")
        err.__cause__ = e
        return err

    raw = source.raw()
    if workers == 0:
        step = 0
        while True:
            try:
                item = next(raw)
            except StopIteration:
                return
            except Exception as e:
                raise fail(step, e) from e
            yield step, item
            step += 1
    q: queue.Queue[Any] = queue.Queue(maxsize=workers)
    stop = threading.Event()

    def put(v: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(v, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        step = 0
        while not stop.is_set():
            try:
                item = next(raw)
            except StopIteration:
                put(_DONE)
                return
            except BaseException as e:  # handed to the consumer, raised there
                put(("error", step, e))
                return
            if not put(("ok", step, item)):
                return
            step += 1

    t = threading.Thread(target=produce, name=f"rnnkit-prefetch-{where}", daemon=True)
    t.start()
    try:
        while True:
            got = q.get()
            if got is _DONE:
                return
            kind, step, value = got
            if kind == "error":
                raise fail(step, value) from value
            yield step, value
    finally:
        stop.set()
        t.join()


def split_batch(model: Any, item: Any, where: str, need_y: bool) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` of one batch item, refusing other layouts, typed."""
    if isinstance(item, tuple) and 1 <= len(item) <= 3:
        x = item[0]
        y = item[1] if len(item) > 1 else None
        sw = item[2] if len(item) > 2 else None
    elif not need_y and not isinstance(item, tuple):
        x, y, sw = item, None, None
    else:
        got = f"a tuple of {len(item)}" if isinstance(item, tuple) else type(item).__name__
        raise InvalidInputError(f"{where}: each batch must be a tuple (x, y) or (x, y, sample_weight), "
                                f"got {got}")
    if need_y and y is None:
        raise InvalidInputError(f"{where}: a batch holds no targets; yield (x, y) or (x, y, sample_weight)")
    return x, y, sw


def warn_ran_out(where: str, epoch: int) -> None:
    warnings.warn(f"{where}: the batch source gave no batch in epoch {epoch + 1}; training stops there "
                  f"(a generator is used up: pass steps_per_epoch, or a Dataset / re-iterable object)",
                  UserWarning, stacklevel=4)
    sys.stderr.flush()


def mask_of(source: Source) -> Any:
    """The ``mask(i)`` method of an indexed source that has one, else None."""
    fn = getattr(source.data, "mask", None)
    return fn if source.indexed and callable(fn) else None


class SourceBatches:
    """The batches of a source for the trainer's loop, each checked as it arrives (its ``x``
    and ``y`` finite, its sample weights matching); a bad batch raises InvalidInputError naming
    the batch (and the epoch, when ``epochs``)."""

    def __init__(self, model: Model, data: Any, steps: int | None, workers: int | None, where: str, *,
                 epochs: bool = True) -> None:
        self.model, self.where, self.workers, self.epochs = model, where, read_ahead(data, workers), epochs
        self.source = Source(data, steps, where)
        self.mask = mask_of(self.source)

    def steps(self) -> int | None:
        return self.source.epoch_steps()

    def epoch(self, epoch: int) -> Iterator[Batch]:
        total = self.source.epoch_steps()
        of = "" if total is None else f"/{total}"
        for b, item in batches(self.source, self.workers, epoch):
            at = (f"{self.where}: batch {b + 1}{of} of epoch {epoch + 1}" if self.epochs
                  else f"{self.where}: batch {b + 1}")
            try:
                x, y, sw = split_batch(self.model, item, at, True)
                data = prepare(self.model, x, y, at)
                if sw is not None:
                    data.sws = sample_weights(self.model, data.ys, sw, None)
            except InvalidInputError as e:
                if not self.epochs or str(e).startswith(at):
                    raise
                raise InvalidInputError(f"{at}: {e}") from None
            data.masks = None if self.mask is None else [self.mask(b)]
            yield data

    def end_epoch(self) -> None:
        self.source.end_epoch()

    def ran_out(self, epoch: int) -> None:
        warn_ran_out(self.where, epoch)


def predict_source(model: Model, data: Any, steps: int | None, workers: int | None) -> Any:
    """Outputs for every batch of a source, concatenated (``x`` of ``(x, y)`` batches too);
    each batch's inputs checked finite as it arrives."""
    where = f"{model.name}.predict"
    source = Source(data, check_int(steps, "steps", "predict", lo=1, none_ok=True), where)
    masks = mask_of(source)
    parts: list[list[np.ndarray]] = []
    n_out = 1
    n_workers = check_int(workers, "workers (0: no prefetch thread)", where, lo=0, none_ok=True)
    for b, item in batches(source, read_ahead(data, n_workers), 0):
        at = f"{where}: batch {b + 1}"
        x, _, _ = split_batch(model, item, at, False)
        xs = model._inputs(x)
        first_non_finite(xs, f"{at}: x")
        out = model._forward_masks(xs, Ctx.inference(), False, None if masks is None else [masks(b)])[0]
        n_out = len(out)
        parts.append(out)
    if not parts:
        raise InvalidInputError(f"{where}: the batch source gave no batch")
    return unlist([np.concatenate([p[k] for p in parts]) for k in range(n_out)])
