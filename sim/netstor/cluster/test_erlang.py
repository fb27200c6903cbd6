"""The M/M/c formulas against independent statements of them: M/M/1 in closed form, Erlang C
by its defining sum, the survival function's integral against the mean, the distribution
against a Monte Carlo of W + S drawn from the formula's own parts."""
import math

import numpy as np
import pytest

from netstor.cluster.erlang import (erlang_c, mmc_mean_response, mmc_response_quantile,
                                    mmc_response_sf)


def erlang_c_by_sum(c, a):
    top = a ** c / math.factorial(c) * c / (c - a)
    return top / (sum(a ** k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize("c,a", [(1, 0.3), (2, 1.5), (4, 2.0), (4, 3.2), (15, 12.0), (90, 80.0)])
def test_erlang_c_matches_its_defining_sum(c, a):
    assert erlang_c(c, a) == pytest.approx(erlang_c_by_sum(c, a), rel=1e-9)


def test_mm1_is_exponential():
    lam, mu = 0.7, 1.0
    assert erlang_c(1, lam / mu) == pytest.approx(0.7)
    assert mmc_mean_response(lam, mu, 1) == pytest.approx(1 / (mu - lam))
    for p in (0.5, 0.99, 0.999):
        assert mmc_response_quantile(p, lam, mu, 1) == pytest.approx(
            -math.log(1 - p) / (mu - lam), rel=1e-9)


@pytest.mark.parametrize("c,rho", [(2, 0.5), (4, 0.7), (15, 0.9)])
def test_survival_integrates_to_the_mean(c, rho):
    mu = 1 / 25.0
    lam = rho * c * mu
    t = np.linspace(0, 3000, 300_001)
    sf = np.array([mmc_response_sf(x, lam, mu, c) for x in t[::100]])
    integral = np.trapezoid(sf, t[::100])
    assert integral == pytest.approx(mmc_mean_response(lam, mu, c), rel=2e-4)


def test_quantile_against_monte_carlo():
    c, mu = 4, 1 / 25.0
    lam = 0.8 * c * mu
    rng = np.random.default_rng(5)
    n = 2_000_000
    pc = erlang_c(c, lam / mu)
    wait = np.where(rng.random(n) < pc, rng.exponential(1 / (c * mu - lam), n), 0.0)
    t = wait + rng.exponential(1 / mu, n)
    assert np.percentile(t, 99) == pytest.approx(mmc_response_quantile(0.99, lam, mu, c),
                                                 rel=0.01)


def test_unstable_queue_is_refused():
    with pytest.raises(ValueError):
        erlang_c(4, 4.0)
