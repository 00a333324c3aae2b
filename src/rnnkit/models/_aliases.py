"""The other spellings of the model level, all here, each a thin alias of the canonical (Keras')
one — kept because programs written against them must keep running:

=========================================================  ============================================
alias                                                      canonical
=========================================================  ============================================
``SequentialBuilder(name).add(a).add(b).build(shape)``     ``Sequential([a, b], name=name).build(shape)``
``model.fit_with_batches(x, y, epochs, batch_size, **kw)``  ``model.fit(x, y, epochs, batch_size=batch_size,
                                                           **kw)``
=========================================================  ============================================

``SequentialBuilder`` is defined beside ``Sequential`` (:mod:`rnnkit.models._sequential`), which
it builds; ``fit_with_batches`` here. (The layer level's: ``layer.with_random_state(seed)`` for
``seed=``, a recurrent layer's ``with_return_sequences()`` / ``with_go_backwards()`` for
``return_sequences=`` / ``go_backwards=``, ``Shape.with_free_batch(dims)`` for
``Shape((None, *dims[1:]))``.)
"""

from __future__ import annotations

from typing import Any, Protocol

from rnnkit._numbers import check_int
from rnnkit.models._callbacks import History


class _Fits(Protocol):
    def fit(self, x: Any, y: Any = None, epochs: int = 1, **kwargs: Any) -> History: ...


class FitAliases:
    """``fit_with_batches``, mixed into :class:`rnnkit.models.Model`."""

    def fit_with_batches(self: _Fits, x: Any, y: Any, epochs: int, batch_size: int, **kwargs: Any) -> History:
        """``fit(x, y, epochs, batch_size=batch_size, **kwargs)``; ``batch_size`` must be an
        int >= 1 here (None is refused: that is ``fit``'s full-batch rule)."""
        bs = check_int(batch_size, "batch_size", "fit_with_batches", lo=1)
        return self.fit(x, y, epochs, batch_size=bs, **kwargs)
