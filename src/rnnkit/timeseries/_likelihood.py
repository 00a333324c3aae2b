"""Likelihood heads of a probabilistic forecaster (DeepAR, Salinas et al. 2020) and the loss that
trains a network by maximising them.

A head maps the network's raw outputs ``o`` (..., k) at one timestep and the series' scale
``nu`` (mean absolute value of its context, > 0) to a distribution in data units, with the
softplus parametrisation GluonTS uses (``softplus(o) = log(1 + exp(o))``):

======================  =====  ====================================================================
Gaussian                k = 2  mu = nu o0, sigma = nu softplus(o1)
StudentT                k = 3  mu = nu o0, sigma = nu softplus(o1), df = 2 + softplus(o2)
NegativeBinomial        k = 2  mean mu = nu softplus(o0), shape alpha = softplus(o1) / sqrt(nu)
======================  =====  ====================================================================

The negative binomial is the Gamma-Poisson mixture of mean ``mu`` and variance
``mu + alpha mu**2`` (``r = 1 / alpha`` "failures", as ``torch.distributions.NegativeBinomial(
total_count=r, logits=log(mu / r))``), for counts y >= 0; its log-probability is evaluated for
any real y >= 0 through the gamma function.

Every log-probability and its gradient with respect to ``o`` are computed in float64 in closed
form; the gamma and digamma functions are :func:`lgamma` and :func:`digamma` (NumPy, no SciPy).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit.losses import Loss
from rnnkit.losses._base import PerPosition

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def lgamma(x: np.ndarray) -> np.ndarray:
    """``log Gamma(x)`` for x > 0, element-wise in float64 (shifted to x >= 8, then Stirling's
    series to the x**-9 term: its remainder is below 3e-13)."""
    x = np.array(x, dtype=np.float64)
    acc = np.zeros_like(x)
    for _ in range(8):
        small = x < 8.0
        acc -= np.where(small, np.log(np.where(small, x, 1.0)), 0.0)
        x = np.where(small, x + 1.0, x)
    r = 1.0 / x
    r2 = r * r
    series = r * (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 * (1.0 / 1680 - r2 / 1188))))
    return acc + (x - 0.5) * np.log(x) - x + _HALF_LOG_2PI + series


def digamma(x: np.ndarray) -> np.ndarray:
    """``d/dx log Gamma(x)`` for x > 0, element-wise in float64 (shifted to x >= 8, then the
    asymptotic series to the x**-10 term)."""
    x = np.array(x, dtype=np.float64)
    acc = np.zeros_like(x)
    for _ in range(8):
        small = x < 8.0
        acc -= np.where(small, 1.0 / np.where(small, x, 1.0), 0.0)
        x = np.where(small, x + 1.0, x)
    r2 = 1.0 / (x * x)
    series = r2 * (1.0 / 12 - r2 * (1.0 / 120 - r2 * (1.0 / 252 - r2 * (1.0 / 240 - r2 / 132))))
    return acc + np.log(x) - 0.5 / x - series


def softplus(o: np.ndarray) -> np.ndarray:
    """``log(1 + exp(o))`` without overflow."""
    return np.logaddexp(0.0, o)


def sigmoid(o: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-o))`` (the derivative of :func:`softplus`) without overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * o))


class Likelihood:
    """A distribution head: ``k`` raw outputs per step -> a distribution in data units.

    ``log_prob(y, raw, scale, grad)`` returns ``(log p(y), d log p / d raw or None)``; ``raw`` is
    (..., k), ``y`` and ``scale`` broadcast against ``raw.shape[:-1]``. ``sample(raw, scale,
    rng)`` draws one value per position; ``params(raw, scale)`` gives the distribution's
    parameters by name (data units)."""

    name: ClassVar[str] = ""
    k: ClassVar[int] = 0
    param_names: ClassVar[tuple[str, ...]] = ()

    def _split(self, raw: Any, scale: Any) -> tuple[list[np.ndarray], np.ndarray]:
        o = np.asarray(raw, dtype=np.float64)
        if o.ndim < 1 or o.shape[-1] != self.k:
            raise InvalidInputError(f"{type(self).__name__}: expected {self.k} raw output(s) per "
                                    f"position on the last axis, got shape {o.shape}")
        return [o[..., j] for j in range(self.k)], np.asarray(scale, dtype=np.float64)

    def params(self, raw: Any, scale: Any) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def log_prob(self, y: Any, raw: Any, scale: Any,
                 grad: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def sample(self, raw: Any, scale: Any, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def check_target(self, y: np.ndarray, what: str) -> None:
        """InvalidInputError when ``y`` lies outside the distribution's support (``what`` names
        the series)."""
        if not np.isfinite(y).all():
            raise InvalidInputError(f"{what}: the {self.name} likelihood needs finite values")


class Gaussian(Likelihood):
    """Normal(mu, sigma): mu = nu o0, sigma = nu softplus(o1)."""

    name: ClassVar[str] = "gaussian"
    k: ClassVar[int] = 2
    param_names: ClassVar[tuple[str, ...]] = ("mu", "sigma")

    def params(self, raw: Any, scale: Any) -> dict[str, np.ndarray]:
        (o0, o1), nu = self._split(raw, scale)
        return {"mu": nu * o0, "sigma": nu * softplus(o1)}

    def log_prob(self, y: Any, raw: Any, scale: Any,
                 grad: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        (o0, o1), nu = self._split(raw, scale)
        yv = np.asarray(y, dtype=np.float64)
        sigma = nu * softplus(o1)
        z = (yv - nu * o0) / sigma
        ll = -_HALF_LOG_2PI - np.log(sigma) - 0.5 * z * z
        if not grad:
            return ll, None
        g = np.empty(np.broadcast_shapes(ll.shape, o0.shape) + (2,))
        g[..., 0] = nu * z / sigma                               # d/dmu = z / sigma
        g[..., 1] = nu * sigmoid(o1) * (z * z - 1.0) / sigma     # d/dsigma = (z^2 - 1) / sigma
        return ll, g

    def sample(self, raw: Any, scale: Any, rng: np.random.Generator) -> np.ndarray:
        p = self.params(raw, scale)
        return p["mu"] + p["sigma"] * rng.standard_normal(p["mu"].shape)


class StudentT(Likelihood):
    """Student's t(df, mu, sigma): mu = nu o0, sigma = nu softplus(o1), df = 2 + softplus(o2)."""

    name: ClassVar[str] = "student_t"
    k: ClassVar[int] = 3
    param_names: ClassVar[tuple[str, ...]] = ("mu", "sigma", "df")

    def params(self, raw: Any, scale: Any) -> dict[str, np.ndarray]:
        (o0, o1, o2), nu = self._split(raw, scale)
        return {"mu": nu * o0, "sigma": nu * softplus(o1), "df": 2.0 + softplus(o2)}

    def log_prob(self, y: Any, raw: Any, scale: Any,
                 grad: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        (o0, o1, o2), nu = self._split(raw, scale)
        yv = np.asarray(y, dtype=np.float64)
        sigma = nu * softplus(o1)
        df = 2.0 + softplus(o2)
        z = (yv - nu * o0) / sigma
        q = z * z / df
        ll = (lgamma(0.5 * (df + 1.0)) - lgamma(0.5 * df) - 0.5 * np.log(df * math.pi)
              - np.log(sigma) - 0.5 * (df + 1.0) * np.log1p(q))
        if not grad:
            return ll, None
        w = (df + 1.0) / (df + z * z)                            # (df + 1) / (df + z^2)
        g = np.empty(np.broadcast_shapes(ll.shape, o0.shape) + (3,))
        g[..., 0] = nu * w * z / sigma
        g[..., 1] = nu * sigmoid(o1) * (w * z * z - 1.0) / sigma
        d_df = (0.5 * digamma(0.5 * (df + 1.0)) - 0.5 * digamma(0.5 * df) - 0.5 / df
                - 0.5 * np.log1p(q) + 0.5 * w * z * z / df)
        g[..., 2] = sigmoid(o2) * d_df
        return ll, g

    def sample(self, raw: Any, scale: Any, rng: np.random.Generator) -> np.ndarray:
        p = self.params(raw, scale)
        return p["mu"] + p["sigma"] * rng.standard_t(p["df"])


class NegativeBinomial(Likelihood):
    """Negative binomial of mean mu = nu softplus(o0) and shape alpha = softplus(o1) / sqrt(nu)
    (variance mu + alpha mu^2), for values >= 0."""

    name: ClassVar[str] = "negative_binomial"
    k: ClassVar[int] = 2
    param_names: ClassVar[tuple[str, ...]] = ("mu", "alpha")

    def params(self, raw: Any, scale: Any) -> dict[str, np.ndarray]:
        (o0, o1), nu = self._split(raw, scale)
        return {"mu": nu * softplus(o0), "alpha": softplus(o1) / np.sqrt(nu)}

    def log_prob(self, y: Any, raw: Any, scale: Any,
                 grad: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        (o0, o1), nu = self._split(raw, scale)
        yv = np.asarray(y, dtype=np.float64)
        mu = nu * softplus(o0)
        alpha = softplus(o1) / np.sqrt(nu)
        r = 1.0 / alpha
        log_rm = np.log(r + mu)
        ll = (lgamma(yv + r) - lgamma(yv + 1.0) - lgamma(r)
              + r * (np.log(r) - log_rm) + yv * (np.log(mu) - log_rm))
        if not grad:
            return ll, None
        d_mu = yv / mu - (yv + r) / (r + mu)
        d_r = digamma(yv + r) - digamma(r) + np.log(r) - log_rm + (mu - yv) / (r + mu)
        g = np.empty(np.broadcast_shapes(ll.shape, o0.shape) + (2,))
        g[..., 0] = d_mu * nu * sigmoid(o0)
        g[..., 1] = d_r * (-r * r) * sigmoid(o1) / np.sqrt(nu)   # dr/dalpha = -1/alpha^2
        return ll, g

    def sample(self, raw: Any, scale: Any, rng: np.random.Generator) -> np.ndarray:
        p = self.params(raw, scale)
        r = 1.0 / p["alpha"]
        return rng.poisson(rng.gamma(r, p["mu"] / r)).astype(np.float64)

    def check_target(self, y: np.ndarray, what: str) -> None:
        super().check_target(y, what)
        bad = np.flatnonzero(y < 0)
        if bad.size:
            raise InvalidInputError(f"{what}: the negative binomial likelihood is for counts, values "
                                    f">= 0; {bad.size} value(s) are negative (the first "
                                    f"{float(y[bad[0]]):g}, "
                                    f"at row {int(bad[0])}); use likelihood='gaussian' or 'student_t'")


LIKELIHOODS: dict[str, type[Likelihood]] = {c.name: c for c in (Gaussian, StudentT, NegativeBinomial)}


def get_likelihood(name: str | Likelihood) -> Likelihood:
    """A head by name (``"gaussian"``, ``"student_t"``, ``"negative_binomial"``) or as given."""
    if isinstance(name, Likelihood):
        return name
    cls = LIKELIHOODS.get(str(name).lower().replace("-", "_"))
    if cls is None:
        raise InvalidParameterError(f"likelihood must be one of {', '.join(LIKELIHOODS)}, got {name!r}")
    return cls()


class NegativeLogLikelihood(Loss):
    """The loss that trains a likelihood head: the mean over positions of ``-log p(y)``.

    ``y_true`` (..., 2) holds each position's value in data units and its series' scale ``nu``;
    ``y_pred`` (..., k) the head's raw outputs. The gradient is the head's closed form."""

    name: ClassVar[str] = "negative_log_likelihood"

    def __init__(self, likelihood: str | Likelihood = "gaussian") -> None:
        self.likelihood = get_likelihood(likelihood)

    def _per_position(self, y_true: Any, y_pred: Any, grad: bool) -> PerPosition:
        yt = np.asarray(y_true, dtype=np.float64)
        yp = np.asarray(y_pred)
        dt = yp.dtype if yp.dtype.kind == "f" else np.dtype(np.float64)
        if yt.shape[-1:] != (2,) or yt.shape[:-1] != yp.shape[:-1]:
            raise InvalidInputError(f"NegativeLogLikelihood: y_true must be (..., 2) (value, scale) "
                                    f"matching y_pred {yp.shape} but for the last axis; got {yt.shape}")
        ll, g = self.likelihood.log_prob(yt[..., 0], yp, yt[..., 1], grad)
        return -ll, None if g is None else -g, dt

    def get_config(self) -> dict[str, Any]:
        return {"likelihood": self.likelihood.name}


__all__ = ["LIKELIHOODS", "Gaussian", "Likelihood", "NegativeBinomial", "NegativeLogLikelihood",
           "StudentT", "digamma", "get_likelihood", "lgamma", "sigmoid", "softplus"]
