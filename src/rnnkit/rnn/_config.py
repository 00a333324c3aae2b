"""``RNNConfig`` and ``Init``: how :mod:`rnnkit.rnn` builds a network.

Defaults: ``has_biases=True``, ``num_layers=1``, ``dropout=0.0``,
``train=True``, ``bidirectional=False``, ``batch_first=True`` (unlike
PyTorch's ``nn.LSTM``), weights Kaiming-uniform (``U(-l, l)``, ``l = sqrt(2) * sqrt(3 / fan_in)``,
``fan_in`` = the weight's second axis), biases ``Const(0.0)``. Also PyTorch's options
``proj_size`` (LSTM only: ``weight_hr_l{k}`` (P, H), drawn with ``w_hh_init``) and
``nonlinearity`` (``"tanh"`` or ``"relu"``, :func:`rnnkit.rnn.rnn` only).

Every field is checked when the config is made (InvalidParameterError naming it); at most
:data:`MAX_LAYERS` layers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit._initializers import kaiming_uniform, orthogonal, reserve, uniform
from rnnkit._numbers import check_float, check_int


@dataclass(frozen=True)
class Init:
    """A weight initialiser: ``Init.const(v)``, ``Init.uniform(lo, hi)``,
    ``Init.kaiming_uniform()``, ``Init.orthogonal()`` (per gate block), ``Init.randn(mean, std)``."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in _KINDS:
            raise InvalidParameterError(f"Init: kind must be one of {_KINDS}, got {self.kind!r}")
        for nm in ("a", "b"):
            object.__setattr__(self, nm, check_float(getattr(self, nm), nm, f"Init.{self.kind}"))

    @classmethod
    def const(cls, value: float) -> Init:
        return cls("const", _num(value, "Init.const", "value"))

    @classmethod
    def uniform(cls, lo: float, hi: float) -> Init:
        lo, hi = _num(lo, "Init.uniform", "lo"), _num(hi, "Init.uniform", "hi")
        if not lo <= hi:
            raise InvalidParameterError(f"Init.uniform: expected lo <= hi, got lo={lo}, hi={hi}")
        return cls("uniform", lo, hi)

    @classmethod
    def kaiming_uniform(cls) -> Init:
        return cls("kaiming_uniform")

    @classmethod
    def orthogonal(cls) -> Init:
        return cls("orthogonal")

    @classmethod
    def randn(cls, mean: float = 0.0, std: float = 1.0) -> Init:
        mean, std = _num(mean, "Init.randn", "mean"), _num(std, "Init.randn", "std")
        if std < 0:
            raise InvalidParameterError(f"Init.randn: std must be >= 0, got {std}")
        return cls("randn", mean, std)

    def to_config(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_config(cls, cfg: Any) -> Init:
        if isinstance(cfg, Init):
            return cfg
        if not isinstance(cfg, dict) or set(cfg) - {"kind", "a", "b"} or "kind" not in cfg:
            raise InvalidParameterError(f"Init: expected {{'kind', 'a', 'b'}}, got {cfg!r}")
        return cls(**cfg)

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype,
             blocks: int = 1) -> np.ndarray:
        """A tensor of ``shape`` (PyTorch layout: (G*H, in) for weights, (G*H,) for biases)."""
        if self.kind in ("const", "randn"):  # the others count themselves against a loader's budget
            reserve(shape)
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


_KINDS = ("const", "uniform", "kaiming_uniform", "orthogonal", "randn")
#: the most layers an RNNConfig accepts
MAX_LAYERS = 1024


def _num(v: Any, where: str, what: str) -> float:
    return check_float(v, what, where)


@dataclass(frozen=True)
class RNNConfig:
    """Configuration shared by :func:`rnnkit.rnn.lstm`, :func:`rnnkit.rnn.gru` and
    :func:`rnnkit.rnn.rnn`."""

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
    proj_size: int = 0
    nonlinearity: str = "tanh"

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_layers",
                           check_int(self.num_layers, "num_layers", "RNNConfig", lo=1, hi=MAX_LAYERS))
        object.__setattr__(self, "dropout",
                           check_float(self.dropout, "dropout", "RNNConfig", lo=0.0, hi=1.0, hi_open=True))
        for nm in ("has_biases", "train", "bidirectional", "batch_first"):
            if not isinstance(getattr(self, nm), (bool, np.bool_)):
                raise InvalidParameterError(f"RNNConfig: {nm} must be a bool, got {getattr(self, nm)!r}")
        for nm in ("w_ih_init", "w_hh_init", "b_ih_init", "b_hh_init"):
            v = getattr(self, nm)
            if not isinstance(v, Init) and not (v is None and nm.startswith("b_")):
                raise InvalidParameterError(
                    f"RNNConfig: {nm} must be an rnnkit.rnn.Init (e.g. Init.const(0.0)), got {v!r}")
        object.__setattr__(self, "proj_size", check_int(self.proj_size, "proj_size", "RNNConfig", lo=0))
        if self.nonlinearity not in ("tanh", "relu"):
            raise InvalidParameterError(
                f"RNNConfig: nonlinearity must be 'tanh' or 'relu', got {self.nonlinearity!r}")

    def to_config(self) -> dict[str, Any]:
        """A JSON-serialisable dict that :meth:`from_config` turns back into this config."""
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            out[k] = v.to_config() if isinstance(v, Init) else v
        return out

    @classmethod
    def from_config(cls, cfg: Any) -> RNNConfig:
        if isinstance(cfg, RNNConfig):
            return cfg
        if not isinstance(cfg, dict):
            raise InvalidParameterError(f"RNNConfig: expected a dict of fields, got {type(cfg).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise InvalidParameterError(f"RNNConfig: unknown fields {unknown}; known: {sorted(known)}")
        kw: dict[str, Any] = {k: (Init.from_config(v) if k.endswith("_init") and v is not None else v)
                              for k, v in cfg.items()}
        return cls(**kw)
