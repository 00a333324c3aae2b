"""``pad_sequences``: Keras' ``keras.utils.pad_sequences`` — a list of sequences as one array
``(len(sequences), maxlen, *sample_shape)``, padded with ``value`` and cut to ``maxlen``.

``maxlen`` None: the longest sequence's length. A longer sequence loses its first steps
(``truncating="pre"``) or its last (``"post"``); a shorter one gets ``value`` before it
(``padding="pre"``) or after it (``"post"``); an empty sequence is all ``value``. The result
equals Keras' on everything Keras gives a result for, but nothing is changed silently:
values that ``dtype`` cannot hold (a float 0.5 in the default ``"int32"``, which Keras would
truncate to 0; an int beyond its range) and a ``value`` it cannot hold are refused with a typed
error, as are strings (``dtype=object``: rnnkit pads numbers) and steps of different shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._numbers import check_int
from rnnkit.data._buckets import pad_value_of
from rnnkit.data._dataset import as_array, check_dtype

_WHERE = "pad_sequences"


def _fits(a: np.ndarray, dt: np.dtype, k: int) -> None:
    """InvalidInputError unless every value of sequence ``k`` survives the cast to ``dt``."""
    if a.size == 0 or a.dtype == dt:
        return
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if a.dtype.kind == "f" and not (np.isfinite(a) & (a == np.round(a))).all():
            raise InvalidInputError(f"{_WHERE}: sequence {k} holds non-integer values ({a.dtype}); dtype "
                                    f"{dt} would truncate them (pass dtype='float32')")
        lo, hi = (float(a.min()), float(a.max()))
        if lo < info.min or hi > info.max:
            raise InvalidInputError(f"{_WHERE}: sequence {k} holds values in [{lo:g}, {hi:g}], outside dtype "
                                    f"{dt}'s [{info.min}, {info.max}]")
    elif dt.kind == "f":
        big = float(np.abs(a[np.isfinite(a)] if a.dtype.kind == "f" else a).max(initial=0))
        if big > float(np.finfo(dt).max):
            raise InvalidInputError(f"{_WHERE}: sequence {k} holds {big!r}, beyond dtype {dt}'s largest "
                                    f"value")


def pad_sequences(sequences: Any, maxlen: int | None = None, dtype: Any = "int32", padding: str = "pre",
                  truncating: str = "pre", value: float = 0.0) -> np.ndarray:
    """``sequences`` padded and truncated to one array (see the module docstring).

    ``sequences``: a non-empty list (or tuple) of sequences — lists or arrays of shape
    ``(T_i, *sample_shape)``, the same ``sample_shape`` for all; ``maxlen``: an int >= 1 or
    None; ``dtype``: an int or float dtype; ``padding`` / ``truncating``: ``"pre"`` or
    ``"post"``; ``value``: a finite number ``dtype`` holds exactly."""
    if not isinstance(sequences, (list, tuple)) or not sequences:
        empty = isinstance(sequences, (list, tuple)) and not sequences
        raise InvalidInputError(f"{_WHERE}: sequences must be a non-empty list of sequences, got "
                                f"{type(sequences).__name__}{' (empty)' if empty else ''}")
    for arg, v in (("padding", padding), ("truncating", truncating)):
        if not isinstance(v, str) or v not in ("pre", "post"):
            raise InvalidParameterError(f"{_WHERE}: {arg} must be 'pre' or 'post', got {v!r}")
    dt = check_dtype(dtype, _WHERE)
    fill = pad_value_of(value, dt, _WHERE, "value")
    seqs: list[np.ndarray] = []
    for k, s in enumerate(sequences):
        a = as_array(s, f"sequence {k}", _WHERE)
        if a.ndim == 0 or (a.size and a.dtype.kind not in "biuf"):
            raise InvalidInputError(f"{_WHERE}: sequence {k} must be a list or array of numbers with time on "
                                    f"axis 0, got dtype {a.dtype} shape {a.shape}")
        seqs.append(a)
    shaped = [a for a in seqs if len(a)]
    sample = shaped[0].shape[1:] if shaped else ()
    for k, a in enumerate(seqs):
        if len(a) and a.shape[1:] != sample:
            raise InvalidInputError(f"{_WHERE}: the steps of sequence {k} have shape {a.shape[1:]}; those of "
                                    f"the first non-empty sequence {sample}")
    n = max(len(a) for a in seqs) if maxlen is None else check_int(maxlen, "maxlen", _WHERE, lo=1)
    out = np.full((len(seqs), n, *sample), fill, dtype=dt)
    for k, a in enumerate(seqs):
        if not len(a) or not n:
            continue
        cut = a[-n:] if truncating == "pre" else a[:n]
        _fits(cut, dt, k)
        if padding == "post":
            out[k, :len(cut)] = cut
        else:
            out[k, n - len(cut):] = cut
    return out
