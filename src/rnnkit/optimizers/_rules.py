"""The update rules: SGD (Keras' momentum / Nesterov), Adam, AdamW (PyTorch's), RMSprop.

Notation: ``w`` weight, ``g`` gradient after clipping, ``lr`` the step's learning rate
(``learning_rate / (1 + decay * iterations)``), ``t`` the parameter's step count (1 at its first
step). Every slot starts at zero.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit.optimizers._base import Optimizer, check_float


class SGD(Optimizer):
    """Stochastic gradient descent, with Keras' momentum and Nesterov formulas::

        momentum == 0:   w <- w - lr * g
        otherwise:       m <- momentum * m - lr * g
                         w <- w + m                              (nesterov=False)
                         w <- w + momentum * m - lr * g          (nesterov=True)

    With a constant ``lr`` this equals ``torch.optim.SGD(momentum=, nesterov=, dampening=0)``.

    Args:
        learning_rate: >= 0 (default 0.01). momentum: in [0, 1] (default 0).
        nesterov: Nesterov momentum; needs ``momentum > 0``.
        decay, clipnorm, clipvalue, global_clipnorm: see :class:`Optimizer`.
    """

    name: ClassVar[str] = "sgd"

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.momentum = check_float(momentum, "momentum", "SGD", lo=0.0, hi=1.0)
        if not isinstance(nesterov, (bool, np.bool_)):
            raise InvalidParameterError(f"SGD: nesterov must be a bool, got {nesterov!r}")
        self.nesterov = bool(nesterov)
        if self.nesterov and self.momentum == 0.0:
            raise InvalidParameterError("SGD: nesterov=True needs momentum > 0, got momentum=0.0")

    def _init_state(self, w: np.ndarray) -> dict[str, Any]:
        return {"m": np.zeros_like(w)} if self.momentum > 0.0 else {}

    def _update(self, w: np.ndarray, g: np.ndarray, state: dict[str, Any], lr: float) -> np.ndarray:
        if self.momentum == 0.0:
            return w - lr * g
        m = state["m"]
        m *= self.momentum
        m -= lr * g
        if self.nesterov:
            return w + self.momentum * m - lr * g
        return w + m

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}


class Adam(Optimizer):
    """Adam with bias correction and PyTorch's epsilon placement::

        m <- beta1 * m + (1 - beta1) * g
        v <- beta2 * v + (1 - beta2) * g**2
        w <- w - lr * m_hat / (sqrt(v_hat) + epsilon)
             m_hat = m / (1 - beta1**t),  v_hat = v / (1 - beta2**t)

    Equals ``torch.optim.Adam(lr, betas=(beta1, beta2), eps=epsilon)``. (Keras adds epsilon to
    ``sqrt(v)`` before the bias correction, a difference of order epsilon.)

    Positional order ``Adam(lr, beta1, beta2, epsilon, decay)``, e.g.
    ``Adam(0.01, 0.9, 0.999, 1e-8, 0.0)``; ``learning_rate=`` works as a keyword too.

    Args:
        lr: >= 0 (default 0.001). beta1, beta2: in [0, 1) (0.9, 0.999). epsilon: >= 0 (1e-7).
        decay: time-based learning-rate decay, ``lr_t = lr / (1 + decay * iterations)`` (0).
        clipnorm, clipvalue, global_clipnorm: see :class:`Optimizer`.
    """

    name: ClassVar[str] = "adam"

    def __init__(self, lr: float | None = None, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-7, decay: float = 0.0, *, learning_rate: float | None = None,
                 beta_1: float | None = None, beta_2: float | None = None, **kwargs: Any) -> None:
        where = type(self).__name__
        if lr is not None and learning_rate is not None:
            raise InvalidParameterError(f"{where}: give lr or learning_rate, not both "
                                        f"(got lr={lr!r}, learning_rate={learning_rate!r})")
        # Keras' spellings beta_1 / beta_2 stand for beta1 / beta2 (give one spelling of each)
        for keras_name, value, own, default in (("beta_1", beta_1, beta1, 0.9),
                                                ("beta_2", beta_2, beta2, 0.999)):
            if value is not None and own != default:
                raise InvalidParameterError(f"{where}: give {keras_name} or {keras_name.replace('_', '')}, "
                                            f"not both")
        beta1 = beta1 if beta_1 is None else beta_1
        beta2 = beta2 if beta_2 is None else beta_2
        rate = lr if lr is not None else (learning_rate if learning_rate is not None else 0.001)
        super().__init__(rate, decay=decay, **kwargs)
        self.beta1 = check_float(beta1, "beta1", where, lo=0.0, hi=1.0, hi_open=True)
        self.beta2 = check_float(beta2, "beta2", where, lo=0.0, hi=1.0, hi_open=True)
        self.epsilon = check_float(epsilon, "epsilon", where, lo=0.0)

    def _init_state(self, w: np.ndarray) -> dict[str, Any]:
        return {"m": np.zeros_like(w), "v": np.zeros_like(w)}

    def _update(self, w: np.ndarray, g: np.ndarray, state: dict[str, Any], lr: float) -> np.ndarray:
        t, b1, b2 = state["t"], self.beta1, self.beta2
        m, v = state["m"], state["v"]
        m *= b1
        m += (1.0 - b1) * g
        v *= b2
        v += (1.0 - b2) * (g * g)
        bc1 = 1.0 - b1 ** t
        bc2 = 1.0 - b2 ** t
        denom = np.sqrt(v) / math.sqrt(bc2)
        denom += self.epsilon
        return w - (lr / bc1) * (m / denom)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta1": self.beta1, "beta2": self.beta2,
                "epsilon": self.epsilon}


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's ``torch.optim.AdamW``)::

        w <- w * (1 - lr * weight_decay)          then the Adam step of :class:`Adam`

    The decay acts on the weight itself, so a parameter whose gradient is 0 still shrinks.

    Args: as :class:`Adam`, plus ``weight_decay`` >= 0 (keyword, default 0.01 as PyTorch).
    """

    name: ClassVar[str] = "adamw"

    def __init__(self, lr: float | None = None, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-7, decay: float = 0.0, *, weight_decay: float = 0.01,
                 **kwargs: Any) -> None:
        super().__init__(lr, beta1, beta2, epsilon, decay, **kwargs)
        self.weight_decay = check_float(weight_decay, "weight_decay", "AdamW", lo=0.0)

    def _update(self, w: np.ndarray, g: np.ndarray, state: dict[str, Any], lr: float) -> np.ndarray:
        decayed = w * (1.0 - lr * self.weight_decay)
        return super()._update(decayed, g, state, lr)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "weight_decay": self.weight_decay}


class RMSprop(Optimizer):
    """RMSprop in PyTorch's form (epsilon outside the square root, as :class:`Adam`)::

        v <- rho * v + (1 - rho) * g**2
        centered:    a <- rho * a + (1 - rho) * g ;   s = sqrt(v - a**2) + epsilon
        otherwise:   s = sqrt(v) + epsilon
        momentum > 0:  b <- momentum * b + g / s ;   w <- w - lr * b
        otherwise:     w <- w - lr * g / s

    Equals ``torch.optim.RMSprop(lr, alpha=rho, eps=epsilon, momentum=, centered=)``. (Keras puts
    epsilon inside the square root, a difference of order epsilon.)

    Args:
        learning_rate: >= 0 (0.001). rho: in [0, 1) (0.9). momentum: in [0, 1] (0).
        epsilon: >= 0 (1e-7). centered: subtract the squared mean gradient (False).
        decay, clipnorm, clipvalue, global_clipnorm: see :class:`Optimizer`.
    """

    name: ClassVar[str] = "rmsprop"

    def __init__(self, learning_rate: float = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.rho = check_float(rho, "rho", "RMSprop", lo=0.0, hi=1.0, hi_open=True)
        self.momentum = check_float(momentum, "momentum", "RMSprop", lo=0.0, hi=1.0)
        self.epsilon = check_float(epsilon, "epsilon", "RMSprop", lo=0.0)
        if not isinstance(centered, (bool, np.bool_)):
            raise InvalidParameterError(f"RMSprop: centered must be a bool, got {centered!r}")
        self.centered = bool(centered)

    def _init_state(self, w: np.ndarray) -> dict[str, Any]:
        st = {"v": np.zeros_like(w)}
        if self.centered:
            st["a"] = np.zeros_like(w)
        if self.momentum > 0.0:
            st["b"] = np.zeros_like(w)
        return st

    def _update(self, w: np.ndarray, g: np.ndarray, state: dict[str, Any], lr: float) -> np.ndarray:
        rho = self.rho
        v = state["v"]
        v *= rho
        v += (1.0 - rho) * (g * g)
        if self.centered:
            a = state["a"]
            a *= rho
            a += (1.0 - rho) * g
            s = np.sqrt(v - a * a)
        else:
            s = np.sqrt(v)
        s += self.epsilon
        if self.momentum > 0.0:
            b = state["b"]
            b *= self.momentum
            b += g / s
            return w - lr * b
        return w - lr * (g / s)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "momentum": self.momentum,
                "epsilon": self.epsilon, "centered": self.centered}
