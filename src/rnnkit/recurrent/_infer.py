"""The inference passes of a :class:`~rnnkit.recurrent._base.RecurrentLayer` that take a
shorter way than its general pass (``RecurrentLayer._pass``), with the same values:

- :func:`infer_array`: one array, a zero state, no mask: the compiled walker's prepared call
  (:func:`rnnkit.recurrent._walker.infer`), whose per-call Python is the plan's lookup, the
  results' allocation and one call of the compiled version's entry point;
- :func:`infer_one_length`: the same under ``lengths`` for one row: its first steps, then zeros;
- :func:`longest_first`: the order of the rows, longest first, in which a padded batch under
  ``lengths`` runs its inference (the compiled walker computes a step's rows only up to the last
  one still running, so the rows that have ended cost nothing).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._mask import Mask
from rnnkit.kernels._threads import swap01
from rnnkit.recurrent._walker import infer, walk


def infer_array(layer: Any, x: np.ndarray) -> np.ndarray:
    """``layer.forward(x, Ctx.inference())`` for a layer without ``stateful`` or
    ``return_state`` on one array, from a zero state, without a mask (what its ``_pass`` gives
    then): the compiled walker's prepared call when it takes the call, else the walk."""
    return _infer(layer, layer._check_input(x))


def infer_one_length(layer: Any, x: np.ndarray, mask: Mask) -> np.ndarray | None:
    """:func:`infer_array` under a ``lengths`` mask of one row of length ``n`` >= 1: the first
    ``n`` steps (reversed under ``go_backwards``) without a mask, zeros after them (the values
    of ``_pass``: a masked step computes nothing, carries the state and outputs zeros under
    ``lengths``); None (nothing run) for any other mask."""
    if mask.kind != "lengths" or mask.batch != 1:
        return None
    arr = layer._check_input(x)
    B, T = arr.shape[:2]
    mask.check(B, T, layer.name)
    n = int(mask.ends(T)[0])
    if n == 0:
        return None
    if n == T:
        return _infer(layer, arr)
    got = _infer(layer, arr[:, :n])
    if not layer.return_sequences:
        return got
    out = np.zeros((1, T, got.shape[2]), got.dtype)
    out[:, :n] = got
    return out


def _infer(layer: Any, arr: np.ndarray) -> np.ndarray:
    """:func:`infer_array` on the checked input ``arr``."""
    B, T, F = arr.shape
    f = arr.flags
    if B == 1 and not layer.go_backwards and f.c_contiguous and f.writeable and f.aligned:
        x_tm = arr.reshape(T, 1, F)               # one row: time-major is the same memory
    else:
        x_tm = swap01(arr[:, ::-1] if layer.go_backwards else arr)
    keep_seq = layer.return_sequences
    got = infer(layer.cell, layer._weights, x_tm, keep_seq)
    if got is not None:
        return got
    seq, final, _ = walk(layer.cell, layer._weights, x_tm, None, False, keep_seq)
    if not keep_seq:
        return np.array(final[layer.cell.output_part])
    assert seq is not None
    out = seq.transpose(1, 0, 2)                  # (the walk's own new array)
    return out if out.flags.c_contiguous else swap01(seq)


def longest_first(mask: Mask | None, B: int, T: int) -> np.ndarray | None:
    """The rows of a ``lengths`` mask of ``B`` > 1 rows in decreasing order of length (ties
    in their order), or None: no such mask, or the rows are in that order already."""
    if mask is None or mask.kind != "lengths" or B < 2:
        return None
    n = mask.ends(T)
    if bool(np.all(n[:-1] >= n[1:])):
        return None
    return np.argsort(-n, kind="stable")
