"""The other spellings of the model level, each a thin alias of the canonical (Keras') one --
kept because programs written against them must keep running -- and :data:`ALIASES`, every
alias of the package with its canonical spelling: the one list, which the user guide's table of
aliases (``docs/aliases.md``) shows row for row.

``SequentialBuilder`` is defined beside ``Sequential`` (:mod:`rnnkit.models._sequential`), which
it builds; ``fit_with_batches`` here.
"""

from __future__ import annotations

from typing import Any, Protocol

from rnnkit._numbers import check_int
from rnnkit.models._callbacks import History

#: every alias of the package (as the user guide's table writes it) -> its canonical spelling
ALIASES: dict[str, str] = {
    "rk.SequentialBuilder(name).add(a).add(b).build(shape)": "rk.Sequential([a, b], name=name).build(shape)",
    "Model.fit_with_batches(x, y, epochs, batch_size)": "Model.fit(x, y, epochs, batch_size=batch_size)",
    "Layer.with_random_state(seed)": "seed=seed",
    "RecurrentLayer.with_return_sequences(flag)": "return_sequences=flag",
    "RecurrentLayer.with_go_backwards(flag)": "go_backwards=flag",
    "Shape.with_free_batch(dims)": "rk.Shape((None, *dims[1:]))",
    "rk.BinaryCrossEntropy": "rk.BinaryCrossentropy",
    "rk.CategoricalCrossEntropy": "rk.CategoricalCrossentropy",
    "rk.SparseCategoricalCrossEntropy": "rk.SparseCategoricalCrossentropy",
    "rk.models.FunctionalModel": "rk.Model",
    "rk.losses.QuantileLoss": "rk.losses.Pinball",
    "rk.RecurrentLayer(rk.LSTMCell(n))": "rk.LSTM(n)",
}


class _Fits(Protocol):
    def fit(self, x: Any, y: Any = None, epochs: int = 1, **kwargs: Any) -> History: ...


class FitAliases:
    """``fit_with_batches``, mixed into :class:`rnnkit.models.Model`."""

    def fit_with_batches(self: _Fits, x: Any, y: Any, epochs: int, batch_size: int, **kwargs: Any) -> History:
        """``fit(x, y, epochs, batch_size=batch_size, **kwargs)``; ``batch_size`` must be an
        int >= 1 here (None is refused: that is ``fit``'s full-batch rule)."""
        bs = check_int(batch_size, "batch_size", "fit_with_batches", lo=1)
        return self.fit(x, y, epochs, batch_size=bs, **kwargs)
