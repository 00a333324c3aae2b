"""The update rules: SGD, Adam, AdamW, RMSprop, each in Keras' or PyTorch's form.

Every optimizer takes ``formula="keras" | "torch"``: the update equations of Keras 3
(``keras.optimizers.X``) or of PyTorch (``torch.optim.X``), which differ where each docstring
shows. The default of each class (SGD ``"keras"``, Adam / AdamW / RMSprop ``"torch"``) is stated
in its docstring; the hyperparameter defaults do not change with ``formula`` (pass PyTorch's
``eps=1e-8`` yourself to match a PyTorch run). ``rnnkit.load_keras`` of a compiled Keras model
gives ``formula="keras"`` with the file's hyperparameters.

Notation: ``w`` weight, ``g`` gradient after clipping, ``lr`` the step's learning rate
(``learning_rate / (1 + decay * iterations)``), ``t`` the parameter's step count (1 at its first
step). Every slot starts at zero.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit._numbers import check_float
from rnnkit.optimizers._base import Optimizer, check_formula


class SGD(Optimizer):
    """Stochastic gradient descent with momentum and Nesterov momentum::

        momentum == 0:   w <- w - lr * g                          (both formulas)
        formula="keras" (default; keras.optimizers.SGD), the slot m holds the step:
                         m <- momentum * m - lr * g
                         w <- w + m                               (nesterov=False)
                         w <- w + momentum * m - lr * g           (nesterov=True)
        formula="torch" (torch.optim.SGD with dampening=0), the slot m holds gradients:
                         m <- momentum * m + g
                         w <- w - lr * m                          (nesterov=False)
                         w <- w - lr * (g + momentum * m)         (nesterov=True)

    With a constant ``lr`` the two give the same weights (the Keras slot is ``-lr`` times the
    PyTorch one); they differ once ``lr`` changes between steps (``decay``, a scheduler): Keras'
    slot keeps the past rates, PyTorch's applies the current rate to the whole velocity.

    Args:
        learning_rate: >= 0 (default 0.01). momentum: in [0, 1] (default 0).
        nesterov: Nesterov momentum; needs ``momentum > 0``.
        formula: ``"keras"`` (default) or ``"torch"``, as above.
        decay, clipnorm, clipvalue, global_clipnorm: see :class:`Optimizer`.
    """

    name: ClassVar[str] = "sgd"

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 *, formula: str = "keras", **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.formula = check_formula(formula, "SGD")
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
        if self.formula == "torch":
            m += g
            return w - lr * (g + self.momentum * m) if self.nesterov else w - lr * m
        m -= lr * g
        if self.nesterov:
            return w + self.momentum * m - lr * g
        return w + m

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov,
                "formula": self.formula}


class Adam(Optimizer):
    """Adam with bias correction::

        m <- beta1 * m + (1 - beta1) * g
        v <- beta2 * v + (1 - beta2) * g**2
        formula="torch" (default; torch.optim.Adam(lr, betas=(beta1, beta2), eps=epsilon)):
            w <- w - lr * m_hat / (sqrt(v_hat) + epsilon)
                 m_hat = m / (1 - beta1**t),  v_hat = v / (1 - beta2**t)
        formula="keras" (keras.optimizers.Adam(learning_rate, beta_1, beta_2, epsilon)):
            w <- w - lr_t * m / (sqrt(v) + epsilon)
                 lr_t = lr * sqrt(1 - beta2**t) / (1 - beta1**t)

    The Keras form is the PyTorch form with ``epsilon * sqrt(1 - beta2**t)`` in place of
    ``epsilon``: Keras' epsilon acts before the bias correction, so early steps (small ``t``)
    feel a smaller effective epsilon. The default epsilon, 1e-7, is Keras'; PyTorch's is 1e-8.

    Positional order ``Adam(lr, beta1, beta2, epsilon, decay)``, e.g.
    ``Adam(0.01, 0.9, 0.999, 1e-8, 0.0)``; ``learning_rate=`` works as a keyword too.

    Args:
        lr: >= 0 (default 0.001). beta1, beta2: in [0, 1) (0.9, 0.999). epsilon: >= 0 (1e-7).
        decay: time-based learning-rate decay, ``lr_t = lr / (1 + decay * iterations)`` (0).
        formula: ``"torch"`` (default) or ``"keras"`` (keyword), as above.
        clipnorm, clipvalue, global_clipnorm: see :class:`Optimizer`.
    """

    name: ClassVar[str] = "adam"

    def __init__(self, lr: float | None = None, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-7, decay: float = 0.0, *, learning_rate: float | None = None,
                 beta_1: float | None = None, beta_2: float | None = None, formula: str = "torch",
                 **kwargs: Any) -> None:
        where = type(self).__name__
        if lr is not None and learning_rate is not None:
            raise InvalidParameterError(f"{where}: give lr or learning_rate, not both "
                                        f"(got lr={lr!r}, learning_rate={learning_rate!r})")
        # Keras' spellings beta_1 / beta_2 stand for beta1 / beta2 (give one spelling of each)
        for keras_name, value, own, default in (("beta_1", beta_1, beta1, 0.9),
                                                ("beta_2", beta_2, beta2, 0.999)):
            if value is not None and check_float(own, keras_name.replace("_", ""), where) != default:
                raise InvalidParameterError(f"{where}: give {keras_name} or {keras_name.replace('_', '')}, "
                                            f"not both")
        beta1 = beta1 if beta_1 is None else beta_1
        beta2 = beta2 if beta_2 is None else beta_2
        rate = lr if lr is not None else (learning_rate if learning_rate is not None else 0.001)
        super().__init__(rate, decay=decay, **kwargs)
        self.beta1 = check_float(beta1, "beta1", where, lo=0.0, hi=1.0, hi_open=True)
        self.beta2 = check_float(beta2, "beta2", where, lo=0.0, hi=1.0, hi_open=True)
        self.epsilon = check_float(epsilon, "epsilon", where, lo=0.0)
        self.formula = check_formula(formula, where)

    def _init_state(self, w: np.ndarray) -> dict[str, Any]:
        return {"m": np.zeros_like(w), "v": np.zeros_like(w)}

    def _update(self, w: np.ndarray, g: np.ndarray, state: dict[str, Any], lr: float) -> np.ndarray:
        # the formulas above, operation for operation, in one scratch array (no temporaries):
        # only the new weight is a new array
        t, b1, b2 = state["t"], self.beta1, self.beta2
        m, v = state["m"], state["v"]
        tmp = self._scratch(w)
        m *= b1
        m += np.multiply(g, 1.0 - b1, out=tmp)
        v *= b2
        np.multiply(g, g, out=tmp)
        tmp *= 1.0 - b2
        v += tmp
        bc1 = 1.0 - b1 ** t
        bc2 = 1.0 - b2 ** t
        np.sqrt(v, out=tmp)
        if self.formula == "keras":
            tmp += self.epsilon
            step = lr * math.sqrt(bc2) / bc1
        else:
            tmp /= math.sqrt(bc2)
            tmp += self.epsilon
            step = lr / bc1
        np.divide(m, tmp, out=tmp)
        tmp *= step
        return np.subtract(w, tmp)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta1": self.beta1, "beta2": self.beta2,
                "epsilon": self.epsilon, "formula": self.formula}


class AdamW(Adam):
    """Adam with decoupled weight decay::

        w <- w * (1 - lr * weight_decay)          then the Adam step of :class:`Adam`

    Both frameworks decay the weight this way before the Adam step; ``formula`` picks the Adam
    step (``"torch"``, the default: ``torch.optim.AdamW``; ``"keras"``: ``keras.optimizers.AdamW``).
    The decay acts on the weight itself, so a parameter whose gradient is 0 still shrinks.

    Args: as :class:`Adam`, plus ``weight_decay`` >= 0 (keyword, default 0.01 as PyTorch;
    Keras' default is 0.004).
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
    """RMSprop, plain, centered or with momentum::

        v <- rho * v + (1 - rho) * g**2
        centered:    a <- rho * a + (1 - rho) * g ;   q = v - a**2
        otherwise:   q = v
        formula="torch" (default; torch.optim.RMSprop(lr, alpha=rho, eps=epsilon, momentum=,
                         centered=)):  s = sqrt(q) + epsilon
            momentum > 0:  b <- momentum * b + g / s ;        w <- w - lr * b
            otherwise:     w <- w - lr * g / s
        formula="keras" (keras.optimizers.RMSprop(learning_rate, rho, momentum, epsilon,
                         centered)):   s = sqrt(q + epsilon)
            momentum > 0:  b <- momentum * b + lr * g / s ;   w <- w - b
            otherwise:     w <- w - lr * g / s

    The two are not a difference of order epsilon. Where ``sqrt(q)`` is small next to
    ``sqrt(epsilon)`` (about 3e-4 at epsilon 1e-7: small or rarely non-zero gradients) Keras'
    denominator stays near ``sqrt(epsilon)`` while PyTorch's falls toward ``epsilon``, so
    PyTorch's step can be up to ``1 / sqrt(epsilon)`` (about 3000) times Keras'. With momentum,
    Keras' slot holds steps (past rates kept) and PyTorch's holds ``g / s`` (the current rate
    applied to all of it). Defaults here (lr 0.001, rho 0.9, epsilon 1e-7)
    are Keras'; PyTorch's are lr 0.01, alpha 0.99, eps 1e-8.

    Args:
        learning_rate: >= 0 (0.001). rho: in [0, 1) (0.9). momentum: in [0, 1] (0).
        epsilon: >= 0 (1e-7). centered: subtract the squared mean gradient (False).
        formula: ``"torch"`` (default) or ``"keras"`` (keyword), as above.
        decay, clipnorm, clipvalue, global_clipnorm: see :class:`Optimizer`.
    """

    name: ClassVar[str] = "rmsprop"

    def __init__(self, learning_rate: float = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False, *, formula: str = "torch",
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.formula = check_formula(formula, "RMSprop")
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
            q = v - a * a
        else:
            q = v
        if self.formula == "keras":
            s = np.sqrt(q + self.epsilon)
            if self.momentum > 0.0:
                b = state["b"]
                b *= self.momentum
                b += lr * (g / s)
                return w - b
            return w - lr * (g / s)
        s = np.sqrt(q)
        s += self.epsilon
        if self.momentum > 0.0:
            b = state["b"]
            b *= self.momentum
            b += g / s
            return w - lr * b
        return w - lr * (g / s)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "momentum": self.momentum,
                "epsilon": self.epsilon, "centered": self.centered, "formula": self.formula}
