"""What a layer declares with each weight besides its value: its regularizer and its constraint.

A layer declares a weight once, in its build (``Layer._add_weight(name, value, *,
regularizer=None, constraint=None)``); :meth:`rnnkit.Layer.declaration` returns the
:class:`WeightDecl`, and training reads the penalties from there (a weight with neither costs
nothing). Keras' constructor keywords name the weights by role, and a weight declared without
an explicit regularizer / constraint takes the one its keyword gave the layer::

    kernel_regularizer      kernel_constraint        the weight "kernel"
    recurrent_regularizer   recurrent_constraint     "recurrent_kernel"
    bias_regularizer        bias_constraint          "bias"
    embeddings_regularizer  embeddings_constraint    "embeddings"

(``activity_regularizer`` is not a weight's: it is the layer's, on its output.)
"""

from __future__ import annotations

from dataclasses import dataclass

from rnnkit.constraints import Constraint
from rnnkit.regularizers import Regularizer

#: Keras' keyword role -> the weight it names
ROLES = {"kernel": "kernel", "recurrent": "recurrent_kernel", "bias": "bias", "embeddings": "embeddings"}
_ROLE_OF = {weight: role for role, weight in ROLES.items()}
#: the keywords that give a weight its regularizer or constraint, in that order of kinds
WEIGHT_KEYWORDS = tuple(f"{role}_{kind}" for kind in ("regularizer", "constraint") for role in ROLES)


def weight_of(keyword: str) -> str:
    """The weight a keyword of :data:`WEIGHT_KEYWORDS` names (``"recurrent_constraint"`` ->
    ``"recurrent_kernel"``)."""
    return ROLES[keyword.rsplit("_", 1)[0]]


def keywords_of(name: str) -> tuple[str, str] | None:
    """The (regularizer, constraint) keywords that name the weight ``name``; None for a weight
    no keyword names."""
    role = _ROLE_OF.get(name)
    return None if role is None else (f"{role}_regularizer", f"{role}_constraint")


@dataclass(frozen=True)
class WeightDecl:
    """How a layer declared one weight: its name (in the layer that declared it), its shape,
    its regularizer and its constraint (None: none)."""

    name: str
    shape: tuple[int, ...]
    regularizer: Regularizer | None = None
    constraint: Constraint | None = None

    @property
    def flat(self) -> bool:
        """Whether the constraint sees the weight as a flat vector: a recurrent layer's ``(1, N)``
        bias is Keras' ``(N,)`` (a reset-after GRU's ``(2, 3H)`` is Keras' shape already)."""
        return self.name == "bias" and len(self.shape) == 2 and self.shape[0] == 1
