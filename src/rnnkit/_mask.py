"""``Mask``: which timesteps of a padded batch are real, as a boolean mask or as lengths.

Two semantics, as the two frameworks users come from define them:

- ``Mask(mask)`` with a boolean ``(B, T)`` array (True = a real step): Keras' masking. A masked
  step carries the state over unchanged and repeats the previous output (zeros before the
  first real step).
- ``Mask(lengths=...)`` with ``(B,)`` lengths: PyTorch's packed sequences. Steps ``t >=
  lengths[b]`` are padding: outputs there are zero, and the final state is the state at the
  sequence's last real step.

Either way a layer reading backwards (``go_backwards``, the backward branch of a
Bidirectional) reverses each sequence within its own length (the index of its last real step
plus one), so it never starts on the padding and every sequence gets exactly its unpadded
result.

A mask reaches a layer through the ``Ctx`` (:meth:`rnnkit.Ctx.set_mask`); models set it from
the layers that produce one (``Masking``, ``Embedding(mask_zero=True)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError

#: the largest length a Mask holds (its lengths are int64)
_MAX_LENGTH = int(np.iinfo(np.int64).max)


def _array(value: Any, expected: str) -> np.ndarray:
    """``value`` as an array, or InvalidInputError (a ragged list, ``[array, None]``, ...)."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as e:
        raise InvalidInputError(f"Mask: expected {expected}, got {type(value).__name__} that is not "
                                f"an array ({e})") from None


def _bounds(n: np.ndarray) -> tuple[int, int]:
    """(smallest, largest) of the 1-D int array ``n``, ``(0, 0)`` when empty: through Python
    ints for a short one (where two NumPy reductions cost more than the list), else NumPy's."""
    if n.size <= 256:
        got = n.tolist()
        return (min(got), max(got)) if got else (0, 0)
    return int(n.min()), int(n.max())


class Mask:
    """``Mask(mask)`` (boolean (B, T)) or ``Mask(lengths=lengths)`` ((B,) ints in [0, T])."""

    __slots__ = ("kind", "_mask", "_lengths", "_top", "_tm")

    def __init__(self, mask: Any = None, *, lengths: Any = None) -> None:
        if (mask is None) == (lengths is None):
            raise InvalidInputError("Mask: give exactly one of a boolean (batch, timesteps) mask or lengths")
        if isinstance(mask, Mask) or isinstance(lengths, Mask):
            raise InvalidInputError("Mask: already a Mask; pass it as it is")
        self._mask: np.ndarray | None = None
        self._lengths: np.ndarray | None = None
        self._top = 0                      # the longest length (lengths only)
        self._tm: tuple[int, np.ndarray] | None = None   # (T, time_major(T)), made on first use
        if mask is not None:
            m = _array(mask, "a boolean (batch, timesteps) mask")
            if m.ndim != 2 or not (m.dtype == np.bool_ or m.dtype.kind in "iu" and np.isin(m, (0, 1)).all()):
                raise InvalidInputError(
                    f"Mask: expected a boolean (batch, timesteps) mask, got dtype {m.dtype} shape {m.shape}")
            self.kind = "mask"
            self._mask = m.astype(bool)
        else:
            n = _array(lengths, "lengths as non-negative ints of shape (batch,)")
            lo, self._top = _bounds(n) if n.ndim == 1 and n.dtype.kind in "iu" else (-1, 0)
            if lo < 0:
                raise InvalidInputError(
                    f"Mask: expected lengths as non-negative ints of shape (batch,), got dtype {n.dtype} "
                    f"shape {n.shape}")
            if self._top > _MAX_LENGTH:
                raise InvalidInputError(f"Mask: a length of {self._top} is beyond any sequence "
                                        f"(at most {_MAX_LENGTH})")
            self.kind = "lengths"
            self._lengths = n.astype(np.int64)

    @classmethod
    def of(cls, value: Any) -> Mask | None:
        """``None``, a ``Mask``, or a boolean (B, T) array (read as Keras' mask)."""
        if value is None or isinstance(value, Mask):
            return value
        return cls(value)

    @property
    def batch(self) -> int:
        return int((self._mask if self._mask is not None else self._lengths).shape[0])  # type: ignore[union-attr]

    def check(self, B: int, T: int, where: str) -> None:
        """InvalidInputError unless the mask fits a (B, T, ...) input."""
        if self._mask is not None and self._mask.shape != (B, T):
            raise InvalidInputError(f"{where}: the mask has shape {self._mask.shape}, the input (batch, "
                                    f"timesteps) is {(B, T)}")
        if self._lengths is not None:
            if self._lengths.shape != (B,):
                raise InvalidInputError(f"{where}: lengths has shape {self._lengths.shape}, expected ({B},)")
            if self._top > T:
                raise InvalidInputError(f"{where}: a length of {self._top} exceeds the "
                                        f"{T} timesteps of the input")

    def valid(self, T: int) -> np.ndarray:
        """The (B, T) boolean array of real steps."""
        if self._mask is not None:
            return self._mask
        assert self._lengths is not None
        return np.arange(T)[None, :] < self._lengths[:, None]

    def time_major(self, T: int) -> np.ndarray:
        """The (T, B) boolean array of real steps, C-contiguous (``valid(T).T`` laid out in time
        order), made once per ``T`` and then the same array: read it, never write it."""
        got = self._tm
        if got is not None and got[0] == T:
            return got[1]
        if self._lengths is not None:
            tm = np.arange(T)[:, None] < self._lengths[None, :]
        else:
            tm = np.ascontiguousarray(self.valid(T).T)
        self._tm = (T, tm)
        return tm

    def ends(self, T: int) -> np.ndarray:
        """Per sequence, the index of its last real step plus one (its length; 0 when empty)."""
        if self._lengths is not None:
            return self._lengths
        m = self.valid(T)
        return np.where(m.any(axis=1), T - np.argmax(m[:, ::-1], axis=1), 0)

    def reverse_index(self, T: int) -> np.ndarray:
        """(B, T) time indices that reverse each sequence within its own length: position ``s``
        takes timestep ``end - 1 - s`` for ``s < end`` and stays ``s`` past the end. Applying it
        twice is the identity."""
        end = self.ends(T)[:, None]
        s = np.arange(T)[None, :]
        return np.where(s < end, end - 1 - s, s)

    def reverse_time(self, x: np.ndarray) -> np.ndarray:
        """``x`` (B, T, ...) with each sequence reversed within its own length."""
        idx = self.reverse_index(x.shape[1])
        return np.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)

    def __repr__(self) -> str:
        arr = self._mask if self._mask is not None else self._lengths
        return f"Mask({self.kind}, shape={arr.shape})"  # type: ignore[union-attr]
