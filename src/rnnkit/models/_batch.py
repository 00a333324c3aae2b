"""One batch of checked data (:class:`Batch`), made once at the door of ``fit`` / ``evaluate``
/ ``predict`` from what the caller gave, and cut into the batches of a pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError
from rnnkit.models._checks import Data, as_list, first_non_finite
from rnnkit.models._checks import Trainable as Model
from rnnkit.models._habits import align_target
from rnnkit.models._weighting import input_masks, sample_weights, take_mask

Arrays = list[np.ndarray]


@dataclass
class Batch:
    """Inputs, targets, the input masks and the sample weights per output (None: none), all
    already checked; in a team, one process's part of one batch."""

    xs: Arrays
    ys: Arrays
    masks: list[Any] | None = None
    sws: list[Any] | None = None

    @property
    def n(self) -> int:
        return int(self.xs[0].shape[0])


def targets(model: Model, y: Data, n: int) -> list[np.ndarray]:
    ys = [align_target(model, k, a) for k, a in enumerate(as_list(y, model.n_outputs, "target"))]
    for k, a in enumerate(ys):
        if a.ndim < 1 or a.shape[0] != n:
            raise InvalidInputError(f"{model.name}: target {k} has shape {a.shape}; expected {n} samples on "
                                    f"axis 0 (as many as the inputs)")
    return ys


def prepare(model: Model, x: Data, y: Data, what: str, *, sample_weight: Any = None, class_weight: Any = None,
            mask: Any = None, lengths: Any = None) -> Batch:
    """The whole data of a call as one checked :class:`Batch` (finite inputs and targets, masks
    and weights matching them)."""
    xs = model._inputs(x)
    ys = targets(model, y, xs[0].shape[0])
    first_non_finite(xs, f"{what}: x")
    first_non_finite(ys, f"{what}: y")
    return Batch(xs, ys, input_masks(model, xs, mask, lengths),
                 sample_weights(model, ys, sample_weight, class_weight))


def take(data: Batch, idx: Any) -> Batch:
    """The samples ``idx`` (a slice or an index array) of ``data``: views for a slice, one
    ``take`` per array for an index array."""
    if data.masks is None and data.sws is None:
        return Batch([v[idx] for v in data.xs], [v[idx] for v in data.ys])
    xs = [v[idx] for v in data.xs]
    masks = None if data.masks is None else [take_mask(m, idx, v.shape[1])
                                             for m, v in zip(data.masks, data.xs, strict=True)]
    sws = None if data.sws is None else [None if w is None else w[idx] for w in data.sws]
    return Batch(xs, [v[idx] for v in data.ys], masks, sws)
