"""The likelihood heads of the DeepAR forecaster: log-probabilities against
torch.distributions, gradients against float64 central differences, the loss that trains them,
the NumPy gamma functions against math/torch, and seeded sampling moments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rnnkit import InvalidInputError
from rnnkit.timeseries._likelihood import (
    Gaussian,
    NegativeBinomial,
    NegativeLogLikelihood,
    StudentT,
    digamma,
    lgamma,
)

HEADS = [Gaussian(), StudentT(), NegativeBinomial()]


def _case(head: object, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 40
    raw = rng.normal(0.0, 1.0, size=(n, head.k))  # type: ignore[attr-defined]
    scale = rng.uniform(0.5, 30.0, size=n)
    if isinstance(head, NegativeBinomial):
        y = rng.integers(0, 60, size=n).astype(np.float64)
    else:
        y = scale * rng.normal(0.0, 1.5, size=n)
    return y, raw, scale


def test_lgamma_and_digamma_match_math_and_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.concatenate([np.linspace(1e-3, 10, 500), np.geomspace(10, 1e6, 200)])
    want = np.array([math.lgamma(v) for v in x])
    # the Stirling remainder after the x^-9 term at x >= 8 is 691/360360/8^11 < 3e-13; the
    # shifted logs add rounding of a few ulps of the result
    np.testing.assert_allclose(lgamma(x), want, rtol=1e-12, atol=5e-13)
    np.testing.assert_allclose(digamma(x), torch.special.digamma(torch.tensor(x)).numpy(),
                               rtol=1e-12, atol=1e-12)


def test_log_prob_matches_torch_distributions() -> None:
    torch = pytest.importorskip("torch")
    D = torch.distributions
    for head in HEADS:
        y, raw, scale = _case(head)
        ll, _ = head.log_prob(y, raw, scale)
        p = {k: torch.tensor(v) for k, v in head.params(raw, scale).items()}
        t = torch.tensor(y)
        if isinstance(head, Gaussian):
            want = D.Normal(p["mu"], p["sigma"]).log_prob(t)
        elif isinstance(head, StudentT):
            want = D.StudentT(p["df"], p["mu"], p["sigma"]).log_prob(t)
        else:
            r = 1.0 / p["alpha"]
            want = D.NegativeBinomial(total_count=r, logits=torch.log(p["mu"] / r)).log_prob(t)
        # float64 both sides; lgamma differences of numbers up to ~100 lose a few ulps of ~500
        np.testing.assert_allclose(ll, want.numpy(), rtol=1e-11, atol=1e-11, err_msg=head.name)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.name)
def test_log_prob_gradient_matches_central_differences(head: object) -> None:
    y, raw, scale = _case(head, 1)
    _, g = head.log_prob(y, raw, scale, grad=True)  # type: ignore[attr-defined]
    assert g is not None
    h = 1e-6
    num = np.empty_like(raw)
    for j in range(raw.shape[1]):
        up, dn = raw.copy(), raw.copy()
        up[:, j] += h
        dn[:, j] -= h
        num[:, j] = (head.log_prob(y, up, scale)[0] - head.log_prob(y, dn, scale)[0]) / (2 * h)  # type: ignore[attr-defined]
    # central differences in float64: truncation O(h^2 f''') ~ 1e-12 relative, rounding
    # ~ eps |f| / h ~ 1e-10 * |ll| (|ll| < 30)
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=5e-8)


def test_gradient_matches_torch_autograd() -> None:
    torch = pytest.importorskip("torch")
    F, D = torch.nn.functional, torch.distributions
    for head in HEADS:
        y, raw, scale = _case(head, 2)
        _, g = head.log_prob(y, raw, scale, grad=True)
        o = torch.tensor(raw, requires_grad=True)
        nu, t = torch.tensor(scale), torch.tensor(y)
        if isinstance(head, Gaussian):
            lp = D.Normal(nu * o[:, 0], nu * F.softplus(o[:, 1])).log_prob(t)
        elif isinstance(head, StudentT):
            lp = D.StudentT(2 + F.softplus(o[:, 2]), nu * o[:, 0], nu * F.softplus(o[:, 1])).log_prob(t)
        else:
            mu, r = nu * F.softplus(o[:, 0]), torch.sqrt(nu) / F.softplus(o[:, 1])
            lp = D.NegativeBinomial(total_count=r, logits=torch.log(mu / r)).log_prob(t)
        lp.sum().backward()
        np.testing.assert_allclose(g, o.grad.numpy(), rtol=1e-9, atol=1e-10, err_msg=head.name)


def test_loss_is_the_mean_negative_log_likelihood_and_its_gradient() -> None:
    head = StudentT()
    y, raw, scale = _case(head, 3)
    yt = np.stack([y, scale], axis=-1).reshape(4, 10, 2)
    yp = raw.reshape(4, 10, 3)
    loss = NegativeLogLikelihood("student_t")
    value, grad = loss.value_and_grad(yt, yp)
    ll, g = head.log_prob(y, raw, scale, grad=True)
    assert g is not None
    assert value == pytest.approx(-ll.mean(), rel=1e-14)
    np.testing.assert_allclose(grad, (-g / 40).reshape(4, 10, 3), rtol=1e-14)
    with pytest.raises(InvalidInputError, match=r"y_true must be \(\.\.\., 2\)"):
        loss.value_and_grad(yt[..., :1], yp)


def test_sampling_is_seeded_and_has_the_distribution_moments() -> None:
    n = 200_000
    for head in HEADS:
        raw = np.tile(np.array([[0.7, -0.2, 1.5][:head.k]]), (n, 1))
        scale = np.full(n, 3.0)
        a = head.sample(raw, scale, np.random.default_rng(5))
        b = head.sample(raw, scale, np.random.default_rng(5))
        np.testing.assert_array_equal(a, b)
        p = {k: float(v[0]) for k, v in head.params(raw[:1], scale[:1]).items()}
        if isinstance(head, NegativeBinomial):
            mean, var = p["mu"], p["mu"] + p["alpha"] * p["mu"] ** 2
        elif isinstance(head, StudentT):
            mean, var = p["mu"], p["sigma"] ** 2 * p["df"] / (p["df"] - 2)
        else:
            mean, var = p["mu"], p["sigma"] ** 2
        # the sample mean's standard error is sqrt(var / n); 5 of them is a 1-in-10^6 miss
        assert abs(a.mean() - mean) < 5 * math.sqrt(var / n), head.name


def test_negative_binomial_refuses_negative_values() -> None:
    with pytest.raises(InvalidInputError, match=r"series 'a'.*counts, values >= 0.*-2"):
        NegativeBinomial().check_target(np.array([1.0, -2.0]), "series 'a'")
