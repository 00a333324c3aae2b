"""One check for "a real-valued array" shared by layers, losses and metrics."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError


def as_real_array(x: Any, what: str, where: str, *, allow_empty: bool = True) -> np.ndarray:
    """``x`` as a numpy array of booleans, integers or floats (values as given, never reshaped);
    InvalidInputError naming ``where`` and ``what`` otherwise."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"{where}: {what} is not an array ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise InvalidInputError(f"{where}: {what} must hold real numbers, got dtype {arr.dtype}")
    if not allow_empty and arr.size == 0:
        raise InvalidInputError(f"{where}: {what} is empty (shape {arr.shape})")
    return arr
