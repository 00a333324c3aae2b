"""The state objects of the built-in cells: named tuples, unpackable, read by attribute.

``LSTMState(h, c)``, ``GRUState(h)`` (``.value`` is another name of ``h``) and
``SimpleRNNState(h)``. A layer's state parts are (B, width); a multi-layer network's
(num_layers * directions, B, width). A custom cell gets ``{name}State`` made from its
``state_names``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class LSTMState(NamedTuple):
    """The state of an LSTM: ``h`` the hidden state (the output; ``proj_size`` wide when the LSTM
    projects it) and ``c`` the cell state (``units`` wide)."""

    h: np.ndarray
    c: np.ndarray


class GRUState(NamedTuple):
    """The state of a GRU: ``h``, the hidden state (also the output)."""

    h: np.ndarray

    @property
    def value(self) -> np.ndarray:
        """``h`` under a second name, ``value``."""
        return self.h


class SimpleRNNState(NamedTuple):
    """The state of a SimpleRNN: ``h``, the hidden state (also the output)."""

    h: np.ndarray
