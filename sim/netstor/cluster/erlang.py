"""The M/M/c queue in closed form: Erlang C, the mean and the distribution of the response time
(waiting + service), independent of the simulator (the reference its validation compares to).

With arrival rate ``lam``, service rate ``mu`` per worker, ``c`` workers and ``a = lam / mu <
c``: the probability of waiting is Erlang C, ``C(c, a)``; a waiting request waits ``Exp(theta)``
with ``theta = c mu - lam``; the response time is ``T = W + S`` with ``S ~ Exp(mu)`` independent
of ``W``, so ``P(T > t) = (1 - C) e^(-mu t) + C P(W' + S > t)`` where ``W' ~ Exp(theta)`` and
``P(W' + S > t) = (theta e^(-mu t) - mu e^(-theta t)) / (theta - mu)`` (``(1 + mu t) e^(-mu t)`` when
``theta = mu``). Quantiles by bisection on that survival function.
"""
from __future__ import annotations

import math

__all__ = ["erlang_b", "erlang_c", "mmc_mean_response", "mmc_response_sf",
           "mmc_response_quantile"]


def _check(c, a):
    if not isinstance(c, int) or c < 1:
        raise ValueError(f"c = {c!r} must be a positive integer")
    if not 0 <= a < c:
        raise ValueError(f"offered load a = {a} must be in [0, c = {c}) for a stable queue")


def erlang_b(c, a):
    """Blocking probability of M/M/c/c (the stable recursion B(k) = a B(k-1) / (k + a B(k-1)))."""
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b


def erlang_c(c, a):
    """Probability that an arrival waits in M/M/c with offered load ``a = lam / mu``."""
    _check(c, a)
    b = erlang_b(c, a)
    return c * b / (c - a * (1.0 - b))


def mmc_mean_response(lam, mu, c):
    """Mean response time E[T] = C / (c mu - lam) + 1 / mu."""
    a = lam / mu
    return erlang_c(c, a) / (c * mu - lam) + 1.0 / mu


def mmc_response_sf(t, lam, mu, c):
    """P(T > t) of the M/M/c response time."""
    a = lam / mu
    pc = erlang_c(c, a)
    theta = c * mu - lam
    if abs(theta - mu) < 1e-12 * mu:
        tail = (1.0 + mu * t) * math.exp(-mu * t)
    else:
        tail = (theta * math.exp(-mu * t) - mu * math.exp(-theta * t)) / (theta - mu)
    return (1.0 - pc) * math.exp(-mu * t) + pc * tail


def mmc_response_quantile(p, lam, mu, c, *, rel_tol=1e-12):
    """The ``p``-quantile of the response time (same unit as ``1 / mu``)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p = {p} must be in (0, 1)")
    target = 1.0 - p
    lo, hi = 0.0, 1.0 / mu
    while mmc_response_sf(hi, lam, mu, c) > target:
        hi *= 2.0
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if mmc_response_sf(mid, lam, mu, c) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
