import math
import random

import pytest

from netstor.agent import servicetime
from netstor.agent.zipf import Zipf


# -- service-time models ------------------------------------------------------------------
def test_parse_specs():
    assert servicetime.parse("none").sample_ns() == 0
    assert servicetime.parse(None).kind == "none"
    assert servicetime.parse("const:250").sample_ns() == 250_000
    m = servicetime.parse("exp:100", seed=1)
    assert (m.kind, m.params, m.mean_us) == ("exp", (100.0,), 100.0)
    b = servicetime.parse("bimodal:0.1:10:1000")
    assert b.params == (0.1, 10.0, 1000.0) and b.mean_us == pytest.approx(109.0)
    s = servicetime.parse("slowdown:50:4:100")
    assert s.params == (50.0, 4.0, 100.0, 0.5) and s.mean_us == pytest.approx(125.0)


@pytest.mark.parametrize("spec,msg", [
    ("gauss:1", "unknown service model"), ("exp", "takes 1 parameter"),
    ("exp:abc", "not a number"), ("exp:-5", "out of range"),
    ("bimodal:1.5:1:2", "out of range"), ("bimodal:0.5:1", "takes 3"),
    ("slowdown:1:2:0", "out of range"), ("const:inf", "out of range"),
])
def test_parse_errors(spec, msg):
    with pytest.raises(servicetime.SpecError, match=msg):
        servicetime.parse(spec)


def test_exp_mean_and_seed():
    a = [servicetime.parse("exp:200", seed=7).sample_ns() for _ in range(1)]
    m1, m2 = servicetime.parse("exp:200", seed=7), servicetime.parse("exp:200", seed=7)
    xs = [m1.sample_ns() for _ in range(20000)]
    assert xs == [m2.sample_ns() for _ in range(20000)]
    assert a[0] == xs[0]
    mean = sum(xs) / len(xs) / 1000
    assert mean == pytest.approx(200, rel=0.04)
    # exponential: the fraction above the mean is e^-1
    assert sum(x > 200_000 for x in xs) / len(xs) == pytest.approx(math.exp(-1), abs=0.02)


def test_bimodal_fraction():
    m = servicetime.parse("bimodal:0.2:10:500", seed=3)
    xs = [m.sample_ns() for _ in range(20000)]
    assert set(xs) == {10_000, 500_000}
    assert xs.count(500_000) / len(xs) == pytest.approx(0.2, abs=0.015)


def test_slowdown_phases():
    m = servicetime.parse("slowdown:100:10:200:0.25", seed=5)
    t0 = m._t0
    # slow during the first quarter of every 200 ms period
    assert m.slow_phase(t0 + 10_000_000) and m.slow_phase(t0 + 210_000_000)
    assert not m.slow_phase(t0 + 60_000_000) and not m.slow_phase(t0 + 390_000_000)
    slow = [m.sample_ns(t0 + 1_000_000) for _ in range(5000)]
    fast = [m.sample_ns(t0 + 100_000_000) for _ in range(5000)]
    assert sum(slow) / len(slow) / 1000 == pytest.approx(1000, rel=0.08)
    assert sum(fast) / len(fast) / 1000 == pytest.approx(100, rel=0.08)


# -- Zipf -----------------------------------------------------------------------------------
def _chi2_critical(df, z=3.09):
    """Wilson-Hilferty approximation of the chi-square quantile (z=3.09: alpha = 0.001)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi2(counts, probs, n):
    # independent reference: the analytic pmf computed here, not by the sampler module
    return sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, probs))


def _pmf(n, theta):
    w = [1.0 / k ** theta for k in range(1, n + 1)]
    s = math.fsum(w)
    return [x / s for x in w]


def _counts(z, nsamp):
    c = [0] * z.n
    for _ in range(nsamp):
        c[z.sample()] += 1
    return c


def test_zipf_chi_square_fits_analytic_pmf():
    n, nsamp = 1000, 100_000
    z = Zipf(n, 0.99, seed=12345)
    counts = _counts(z, nsamp)
    probs = _pmf(n, 0.99)
    assert min(nsamp * p for p in probs) > 5       # chi-square validity
    stat = _chi2(counts, probs, nsamp)
    assert stat < _chi2_critical(n - 1), stat
    # rank 1 gets about 1/H(n, 0.99) of the samples
    assert counts[0] / nsamp == pytest.approx(probs[0], rel=0.03)
    # and the test has power: the same samples are rejected against a different skew
    assert _chi2(counts, _pmf(n, 0.9), nsamp) > 3 * _chi2_critical(n - 1)


def test_zipf_theta0_is_uniform():
    n, nsamp = 200, 100_000
    counts = _counts(Zipf(n, 0.0, seed=99), nsamp)
    stat = _chi2(counts, [1.0 / n] * n, nsamp)
    assert stat < _chi2_critical(n - 1), stat


def test_zipf_edges():
    z = Zipf(1, 0.99, seed=1)
    assert {z.sample() for _ in range(100)} == {0}
    z = Zipf(5, 2.0, rng=random.Random(4))
    assert all(0 <= x < 5 for x in z.samples(1000))
    with pytest.raises(ValueError):
        Zipf(0)
    with pytest.raises(ValueError):
        Zipf(10, -1)


def test_fluct_modes_per_interval():
    """NetRS paper's fluctuation: per 50 ms interval the mean is 4000 us or 1000 us (d = 4);
    the per-interval sample means fall near one of the two, about half the intervals each,
    and a seeded model repeats its modes."""
    from netstor.agent import servicetime as st
    m = st.parse("fluct:4000:4:50", seed=11)
    assert m.mean_us == 2500.0
    t0 = m._t0
    slow_n = 0
    for i in range(40):
        now = t0 + int((i + 0.5) * 50e6)
        xs = [m.sample_ns(now) / 1000 for _ in range(400)]
        mean = sum(xs) / len(xs)
        slow = m.fluct_slow(now)
        slow_n += slow
        want = 4000 if slow else 1000
        assert abs(mean - want) < 0.2 * want, (i, mean, slow)
    assert 10 <= slow_n <= 30
    again = st.parse("fluct:4000:4:50", seed=11)
    assert [again.fluct_slow(again._t0 + int((i + 0.5) * 50e6)) for i in range(40)] == \
        [m.fluct_slow(t0 + int((i + 0.5) * 50e6)) for i in range(40)]
    with pytest.raises(st.SpecError):
        st.parse("fluct:4000:0.5:50")
