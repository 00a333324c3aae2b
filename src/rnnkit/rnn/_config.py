"""``RNNConfig`` and ``Init``: the tch-rs ``nn::RNNConfig`` in Python.

Defaults follow the tch-rs page: ``has_biases=True``, ``num_layers=1``, ``dropout=0.0``,
``train=True``, ``bidirectional=False``, ``batch_first=True`` (tch's default, unlike
PyTorch's ``nn.LSTM``), weights Kaiming-uniform (``U(-l, l)``, ``l = sqrt(2) * sqrt(3 / fan_in)``,
``fan_in`` = the weight's second axis), biases ``Const(0.0)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit._initializers import kaiming_uniform, orthogonal, uniform


@dataclass(frozen=True)
class Init:
    """A weight initialiser: ``Init.const(v)``, ``Init.uniform(lo, hi)``,
    ``Init.kaiming_uniform()``, ``Init.orthogonal()`` (per gate block), ``Init.randn(mean, std)``."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    @classmethod
    def const(cls, value: float) -> Init:
        return cls("const", float(value))

    @classmethod
    def uniform(cls, lo: float, hi: float) -> Init:
        if not lo <= hi:
            raise InvalidParameterError(f"Init.uniform: expected lo <= hi, got lo={lo}, hi={hi}")
        return cls("uniform", float(lo), float(hi))

    @classmethod
    def kaiming_uniform(cls) -> Init:
        return cls("kaiming_uniform")

    @classmethod
    def orthogonal(cls) -> Init:
        return cls("orthogonal")

    @classmethod
    def randn(cls, mean: float = 0.0, std: float = 1.0) -> Init:
        if std < 0:
            raise InvalidParameterError(f"Init.randn: std must be >= 0, got {std}")
        return cls("randn", float(mean), float(std))

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype,
             blocks: int = 1) -> np.ndarray:
        """A tensor of ``shape`` (PyTorch layout: (G*H, in) for weights, (G*H,) for biases)."""
        if self.kind == "const":
            return np.full(shape, self.a, dtype=dtype)
        if self.kind == "uniform":
            return uniform(rng, shape, self.a, self.b, dtype)
        if self.kind == "randn":
            return (self.a + self.b * rng.standard_normal(shape)).astype(dtype)
        if self.kind == "kaiming_uniform":
            return kaiming_uniform(rng, shape, shape[-1] if len(shape) > 1 else shape[0], dtype)
        if self.kind == "orthogonal":
            rows, cols = shape
            if rows != blocks * cols:
                raise InvalidParameterError(
                    f"Init.orthogonal: needs square gate blocks, got shape {shape} with {blocks} gates"
                )
            return np.concatenate([orthogonal(rng, cols, dtype) for _ in range(blocks)], axis=0)
        raise InvalidParameterError(f"Init: unknown kind {self.kind!r}")


@dataclass(frozen=True)
class RNNConfig:
    """Configuration shared by :func:`rnnkit.rnn.lstm` and :func:`rnnkit.rnn.gru`."""

    has_biases: bool = True
    num_layers: int = 1
    dropout: float = 0.0
    train: bool = True
    bidirectional: bool = False
    batch_first: bool = True
    w_ih_init: Init = field(default_factory=Init.kaiming_uniform)
    w_hh_init: Init = field(default_factory=Init.kaiming_uniform)
    b_ih_init: Init | None = field(default_factory=lambda: Init.const(0.0))
    b_hh_init: Init | None = field(default_factory=lambda: Init.const(0.0))

    def __post_init__(self) -> None:
        if isinstance(self.num_layers, bool) or not isinstance(self.num_layers, int) or self.num_layers < 1:
            raise InvalidParameterError(f"RNNConfig: num_layers must be an int >= 1, got {self.num_layers!r}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise InvalidParameterError(f"RNNConfig: dropout must be in [0, 1), got {self.dropout!r}")
