"""Zipf keys over very many objects (the NetRS paper's 100 million) without a 100-million-entry
table.

``P(rank k) = k^-theta / Z`` for k = 1..n. The first ``head`` ranks (default 2^20) are drawn
from their exact cumulative table (as :class:`netstor.agent.zipf.Zipf` does for all ranks);
a rank beyond the head is drawn from the continuous density ``x^-theta`` on
``[head + 1/2, n + 1/2]`` by inversion and rounded to the nearest integer: the midpoint rule,
whose relative error per rank is about ``theta (theta + 1) / (24 k^2)`` (below 10^-13 past
the head). The head's and the tail's masses are weighted exactly that way, so every rank's
probability is the analytic one to that precision. The hot keys -- the ones that decide which
replica groups are hot -- are always exact.

:meth:`ZipfKeys.sample` takes a numpy ``Generator`` and returns 0-based ranks (0 = the most
popular key), vectorised.
"""
from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["ZipfKeys"]


@functools.lru_cache(maxsize=8)
def _head(n_head, theta):
    w = np.arange(1, n_head + 1, dtype=np.float64) ** -theta
    return np.cumsum(w)


def _tail_mass(a, b, theta):
    """``integral_a^b x^-theta dx``."""
    if abs(theta - 1.0) < 1e-12:
        return math.log(b / a)
    e = 1.0 - theta
    return (b ** e - a ** e) / e


class ZipfKeys:
    """Zipf(``theta``) ranks over ``n`` keys (see the module doc)."""

    def __init__(self, n, theta=0.99, head=1 << 20):
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"number of keys must be a positive integer, got {n!r}")
        if not theta >= 0:
            raise ValueError(f"zipf theta must be >= 0, got {theta!r}")
        self.n, self.theta = int(n), float(theta)
        self.n_head = min(self.n, int(head))
        self.cdf = _head(self.n_head, self.theta)
        self.head_mass = float(self.cdf[-1])
        self.a, self.b = self.n_head + 0.5, self.n + 0.5
        self.tail_mass = _tail_mass(self.a, self.b, self.theta) if self.n > self.n_head else 0.0
        self.total = self.head_mass + self.tail_mass

    def p(self, rank0):
        """The probability of 0-based rank ``rank0`` (head: exact; tail: the midpoint rule's)."""
        k = rank0 + 1
        if k <= self.n_head:
            return k ** -self.theta / self.total
        return _tail_mass(k - 0.5, k + 0.5, self.theta) / self.total

    def sample(self, gen, count):
        """``count`` 0-based ranks drawn with the numpy Generator ``gen`` (int64 array)."""
        v = gen.random(count) * self.total
        out = np.searchsorted(self.cdf, v, side="right").astype(np.int64)
        tail = v >= self.head_mass
        if tail.any():
            w = v[tail] - self.head_mass
            t = self.theta
            if abs(t - 1.0) < 1e-12:
                x = self.a * np.exp(w)
            else:
                e = 1.0 - t
                x = (self.a ** e + w * e) ** (1.0 / e)
            k = np.clip(np.floor(x + 0.5), self.n_head + 1, self.n).astype(np.int64)
            out[tail] = k - 1
        np.minimum(out, self.n - 1, out=out)
        return out
