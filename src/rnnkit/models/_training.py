"""The training loop behind ``Model.fit`` and ``Model.evaluate``.

One STEP on a batch ``(xb, yb)`` (a fresh training Ctx each step)::

    pred        = model forward(xb)                   every layer output checked finite
    loss, dpred = loss.value_and_grad(yb, pred)       mean over the batch's samples
    metrics     = m(yb, pred) for each metric         measured on the same, pre-update pred
    model backward(dpred)                             every gradient checked finite
    optimizer.apply_gradients([(layer, name, grad), ...])

One EPOCH: with ``batch_size=None`` (or >= the sample count) one full-batch step; otherwise
``ceil(N / batch_size)`` steps over a permutation drawn each epoch (when ``shuffle``) from one
generator seeded by ``seed``. The epoch's ``loss`` (and each metric) is the SAMPLE-WEIGHTED
mean of the batch values, each measured before its update::

    loss_epoch = sum_b n_b * loss_b / sum_b n_b

(Keras' convention). Weights (Keras' rules): ``sample_weight`` (per sample, or per timestep
for sequence outputs) or ``class_weight`` (``{class: weight}``, turned into per-sample
weights from the targets) weight each loss position (:class:`rnnkit.Loss`); the mask of a
sequence output (from ``Masking``, ``Embedding(mask_zero=True)`` or ``fit(mask=/lengths=)``)
weights the valid steps by ``P / V`` and the rest by 0, so the loss is the mean over the
valid steps; metrics take the mask as weights of a weighted mean (not the sample weights:
Keras' ``metrics=`` are unweighted).
``val_*`` entries: :func:`evaluate_logs` on the validation data after the
epoch's last step. ``validation_split=f`` holds out the LAST ``ceil(f * N)`` samples (before
any shuffling), as Keras does.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
from tqdm import tqdm

from rnnkit import _penalties as _pen
from rnnkit import kernels
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, NonFiniteError
from rnnkit._random import make_rng
from rnnkit.models._base import Data, Model, NonFiniteAt, as_list, check_finite
from rnnkit.models._callbacks import Callback, CallbackList, History
from rnnkit.models._callbacks_more import ProgbarLogger, TerminateOnNaN
from rnnkit.models._resume import fingerprint, restore_state, save_state
from rnnkit.models._weighting import input_masks, output_weights, sample_weights, take_mask


def _targets(model: Model, y: Data, n: int) -> list[np.ndarray]:
    ys = as_list(y, model.n_outputs, "target")
    for k, a in enumerate(ys):
        if a.ndim < 1 or a.shape[0] != n:
            raise InvalidInputError(
                f"{model.name}: target {k} has shape {a.shape}; expected {n} samples on axis 0 "
                f"(as many as the inputs)"
            )
    return ys


def _check_finite_data(arrs: list[np.ndarray], what: str) -> None:
    for k, a in enumerate(arrs):
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            pos = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
            raise InvalidInputError(f"{what}{'' if len(arrs) == 1 else f' {k}'} holds {a[pos]} at {pos}; "
                                    f"expected finite numbers")


def loss_and_grads(model: Model, ys: list[np.ndarray], preds: list[np.ndarray],
                   weights: list[Any] | None = None) -> tuple[float, list[np.ndarray]]:
    """The summed loss over the outputs and d(loss)/d(pred) per output (``weights``: one
    array or None per output, see :class:`rnnkit.Loss`)."""
    total = 0.0
    grads: list[np.ndarray] = []
    for k, (y, p) in enumerate(zip(ys, preds, strict=True)):
        w = None if weights is None else weights[k]
        v, g = model.loss.value_and_grad(y, p) if w is None else model.loss.value_and_grad(y, p, w)
        total += float(v)
        grads.append(np.asarray(g, p.dtype))
    return total, grads


def metric_values(model: Model, ys: list[np.ndarray], preds: list[np.ndarray],
                  weights: list[Any] | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, (y, p) in enumerate(zip(ys, preds, strict=True)):
        w = None if weights is None else weights[k]
        for m in model.metrics:
            key = m.name if len(ys) == 1 else f"output_{k}_{m.name}"
            out[key] = float(m(y, p) if w is None else m(y, p, sample_weight=w))
    return out


class NonFiniteLoss(NonFiniteAt):
    """Internal: the batch's loss itself is NaN/Inf (``logs`` holds it); nothing was applied."""

    def __init__(self, where: str, logs: dict[str, float]) -> None:
        super().__init__(where)
        self.logs = logs


def train_step(model: Model, xb: list[np.ndarray], yb: list[np.ndarray], ctx: Ctx,
               masks: list[Any] | None = None, sws: list[Any] | None = None) -> dict[str, float]:
    """One optimizer step (see the module docstring); returns the pre-update loss and metrics.
    ``masks``: the input masks; ``sws``: the sample weights per output."""
    with _pen.collecting() as activity:
        preds, out_masks = model._forward_masks(xb, ctx, True, masks)
    lw, mw = output_weights(preds, out_masks, sws)
    loss, grads = loss_and_grads(model, yb, preds, lw)
    loss += _pen.weight_penalty(model) + sum(activity)  # regularizers (rnnkit/_penalties.py)
    lname = type(model.loss).__name__
    if not math.isfinite(loss):
        raise NonFiniteLoss(f"the loss ({lname}) is {loss}",
                            {"loss": loss, **metric_values(model, yb, preds, mw)})
    for g in grads:
        check_finite(g, f"the gradient of the loss ({lname}) w.r.t. the model output")
    logs = {"loss": loss, **metric_values(model, yb, preds, mw)}
    model._backward(grads, ctx, True)
    _pen.add_penalty_grads(model, ctx)
    pairs = [(layer, n, ctx.grads[(layer, n)]) for layer, n in model.trainable_weights()
             if (layer, n) in ctx.grads]
    model.optimizer.apply_gradients(pairs)
    _pen.apply_constraints(model)
    for key, (layer, n) in model.named_weights().items():
        check_finite(layer.weight(n), f"weight {key} ({type(layer).__name__}) after the optimizer step")
    return logs


def evaluate_logs(model: Model, x: Data, y: Data, batch_size: int | None, *, sample_weight: Any = None,
                  mask: Any = None, lengths: Any = None) -> dict[str, float]:
    """Loss and metrics in inference passes, sample-weighted over batches of ``batch_size``."""
    xs = model._inputs(x)
    n = xs[0].shape[0]
    ys = _targets(model, y, n)
    masks = input_masks(model, xs, mask, lengths)
    sws = sample_weights(model, ys, sample_weight, None)
    bs = n if batch_size is None else batch_size
    sums: dict[str, float] = {}
    for a in range(0, n, bs):
        sl = slice(a, a + bs)
        xb, yb = [v[sl] for v in xs], [v[sl] for v in ys]
        mb = None if masks is None else [take_mask(m, sl, v.shape[1]) for m, v in zip(masks, xs, strict=True)]
        wb = None if sws is None else [None if w is None else w[sl] for w in sws]
        with _pen.collecting() as activity:
            preds, out_masks = model._forward_masks(xb, Ctx.inference(), False, mb)
        lw, mw = output_weights(preds, out_masks, wb)
        loss, _ = loss_and_grads(model, yb, preds, lw)
        loss += _pen.weight_penalty(model) + sum(activity)
        nb = xb[0].shape[0]
        for k, v in {"loss": loss, **metric_values(model, yb, preds, mw)}.items():
            sums[k] = sums.get(k, 0.0) + nb * v
    return {k: v / n for k, v in sums.items()}


def _split(model: Model, xs: list[np.ndarray], ys: list[np.ndarray], split: float) -> tuple[Any, ...]:
    if isinstance(split, bool) or not isinstance(split, (int, float, np.floating)) or not 0.0 <= split < 1.0:
        raise InvalidParameterError(f"fit: validation_split must be a number in [0, 1), got {split!r}")
    n = xs[0].shape[0]
    n_val = math.ceil(split * n)
    if n_val >= n:
        raise InvalidInputError(f"fit: validation_split={split} leaves no training samples out of {n}")
    cut = n - n_val
    return [v[:cut] for v in xs], [v[:cut] for v in ys], [v[cut:] for v in xs], [v[cut:] for v in ys]


def _weighting(xs: list[np.ndarray], masks: list[Any] | None, sws: list[Any] | None) -> dict[str, str]:
    """A digest of the input masks and sample weights for a checkpoint's fingerprint (nothing
    when there are none, so an unweighted run's fingerprint is unchanged)."""
    if masks is None and sws is None:
        return {}
    h = hashlib.sha256()
    for m, x in zip(masks or [], xs, strict=False):
        h.update(b"-" if m is None else np.ascontiguousarray(m.valid(x.shape[1])).tobytes())
    for w in sws or []:
        h.update(b"-" if w is None else np.ascontiguousarray(w, np.float64).tobytes())
    return {"weighting": h.hexdigest()}


def guarded_step(model: Any, xb: list[np.ndarray], yb: list[np.ndarray], ctx: Ctx, masks: Any, sws: Any,
                 nan_stops: bool, at: str) -> dict[str, float]:
    """One :func:`train_step`; NaN or Inf becomes a NonFiniteError naming ``at`` (the epoch and
    batch) and where it first appeared, except a NaN loss when ``nan_stops`` (TerminateOnNaN is
    among the callbacks): then the step's logs go to the callbacks, which stop training."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # reported as NonFiniteError
            return train_step(model, xb, yb, ctx, masks, sws)
    except NonFiniteLoss as e:
        if nan_stops:
            return e.logs
        where = e.where
    except NonFiniteAt as e:
        where = e.where
    raise NonFiniteError(f"{model.name}: training produced NaN or Inf in {at}: first at {where}")


class EpochBar:
    """``fit``'s progress bar (``verbose=1``): it counts completed epochs, shows the last logs,
    leaves the time spent compiling kernels out of its rate and estimates, and ends where training
    stops (an early stop makes its total the epochs run)."""

    def __init__(self, name: str, epochs: int, initial: int, verbose: int) -> None:
        self.bar = tqdm(total=int(epochs), initial=int(initial), desc=name, unit="epoch",
                        disable=verbose != 1, dynamic_ncols=True)
        self.compiled = kernels.compile_seconds()

    def epoch_done(self, logs: dict[str, float], stop: bool) -> None:
        bar = self.bar
        bar.set_postfix({k: f"{v:.4g}" for k, v in logs.items()}, refresh=False)
        now = kernels.compile_seconds()   # compiling kernels is not training time
        if not bar.disable:
            bar.start_t += now - self.compiled
            bar.last_print_t += now - self.compiled
        self.compiled = now
        bar.update(1)
        if stop:
            bar.total = bar.n

    def close(self) -> None:
        self.bar.close()


def check_fit_counts(epochs: Any, initial_epoch: Any, batch_size: Any) -> None:
    """``fit``'s counts: ``epochs`` >= 1, ``initial_epoch`` >= 0, ``batch_size`` >= 1 or None."""
    for arg, val_, lo in (("epochs", epochs, 1), ("initial_epoch", initial_epoch, 0)):
        if isinstance(val_, bool) or not hasattr(val_, "__index__") or int(val_) < lo:
            raise InvalidParameterError(f"fit: {arg} must be an int >= {lo}, got {val_!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not hasattr(batch_size, "__index__")
                                   or int(batch_size) < 1):
        raise InvalidParameterError(f"fit: batch_size must be an int >= 1 or None, got {batch_size!r}")


def run_fit(model: Model, x: Data, y: Data, epochs: int, *, batch_size: int | None,
            validation_data: tuple[Data, Data] | None, validation_split: float,
            callbacks: list[Callback] | None, verbose: int, shuffle: bool, seed: int | None,
            initial_epoch: int, checkpoint: Any = None, sample_weight: Any = None,
            class_weight: Any = None, mask: Any = None, lengths: Any = None) -> History:
    """``Model.fit`` (see the module docstring)."""
    model._require_compiled("fit")
    check_fit_counts(epochs, initial_epoch, batch_size)
    xs = model._inputs(x)
    ys = _targets(model, y, xs[0].shape[0])
    for layer in _pen._layers(model):
        _pen.check_layer(layer)
    _check_finite_data(xs, "fit: x")
    _check_finite_data(ys, "fit: y")
    masks = input_masks(model, xs, mask, lengths)
    sws = sample_weights(model, ys, sample_weight, class_weight)
    if (masks is not None or sws is not None) and validation_split:
        raise InvalidParameterError("fit: validation_split with mask=/lengths=/sample_weight=/class_weight= "
                                    "is not supported; pass validation_data")
    val: tuple[Any, Any] | None = None
    val_sw: Any = None
    if validation_data is not None:
        if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
            raise InvalidParameterError("fit: validation_data must be a pair (x_val, y_val) or a triple "
                                        "(x_val, y_val, sample_weight_val)")
        val = (validation_data[0], validation_data[1])
        val_sw = validation_data[2] if len(validation_data) == 3 else None
    elif validation_split:
        xs, ys, vx, vy = _split(model, xs, ys, validation_split)
        val = (vx[0] if len(vx) == 1 else vx, vy[0] if len(vy) == 1 else vy)
    n = xs[0].shape[0]
    bs = n if batch_size is None else min(int(batch_size), n)
    rng = make_rng(seed)
    history = History()
    extra: list[Callback] = [ProgbarLogger(int(epochs))] if verbose == 2 else []
    cbs = CallbackList([*(callbacks or []), *extra, history], model)  # History last, as Keras
    nan_stops = any(isinstance(cb, TerminateOnNaN) for cb in cbs.callbacks)
    model.stop_training = False
    cbs.on_train_begin({})
    start, fp = int(initial_epoch), None
    if checkpoint is not None:  # resume after the last completed epoch (models/_resume.py)
        fp = fingerprint(model, xs, ys, {"epochs": int(epochs), "batch_size": bs, "shuffle": bool(shuffle),
                                         "seed": seed, "initial_epoch": start, "validation": val is not None,
                                         **_weighting(xs, masks, sws)})
        done = restore_state(checkpoint, model, rng, history, cbs.callbacks, fp)
        start = start if done is None else (int(epochs) if model.stop_training else done)
    logs: dict[str, float] = {}
    bar = EpochBar(model.name, epochs, start, verbose)
    try:
        for epoch in range(start, int(epochs)):
            cbs.on_epoch_begin(epoch, {})
            if bs >= n:
                batches: list[Any] = [slice(None)]
            else:
                order = rng.permutation(n) if shuffle else np.arange(n)
                batches = [order[a:a + bs] for a in range(0, n, bs)]
            sums: dict[str, float] = {}
            seen = 0
            for b, idx in enumerate(batches):
                xb, yb = [v[idx] for v in xs], [v[idx] for v in ys]
                mb = None if masks is None else [take_mask(m, idx, v.shape[1])
                                                 for m, v in zip(masks, xs, strict=True)]
                wb = None if sws is None else [None if w is None else w[idx] for w in sws]
                ctx = Ctx.training(int(rng.integers(0, 2**63 - 1)))
                cbs.on_train_batch_begin(b, {})
                step_logs = guarded_step(model, xb, yb, ctx, mb, wb, nan_stops,
                                         f"epoch {epoch + 1}/{epochs} (batch {b + 1}/{len(batches)})")
                nb = int(xb[0].shape[0])
                for k, v in step_logs.items():
                    sums[k] = sums.get(k, 0.0) + nb * v
                cbs.on_train_batch_end(b, step_logs)
                seen += nb
                if model.stop_training:  # Keras 3 checks after every batch
                    break
            logs = {k: v / seen for k, v in sums.items()}
            if val is not None:
                vlogs = evaluate_logs(model, val[0], val[1], batch_size, sample_weight=val_sw)
                logs.update({f"val_{k}": v for k, v in vlogs.items()})
            cbs.on_epoch_end(epoch, logs)
            if checkpoint is not None:
                save_state(checkpoint, model, rng, epoch + 1, history, cbs.callbacks, fp or {})
            bar.epoch_done(logs, model.stop_training)
            if model.stop_training:
                break
    finally:
        bar.close()
    cbs.on_train_end(logs)
    model.history = history
    return history
