"""Exact Zipf sampler over ``n`` keys: ``P(rank k) = k**-theta / H(n, theta)``, k = 1..n.

The CDF is precomputed once (``O(n)`` memory: 8 bytes a key) and each sample is one uniform draw plus a
bisection, so the distribution is exact (up to float rounding) for any ``theta >= 0``;
``theta = 0`` is uniform. :meth:`Zipf.sample` returns a 0-based index (rank - 1), so index 0 is
the most popular key.
"""

from __future__ import annotations

import bisect
import itertools
import random
from array import array

__all__ = ["Zipf", "zipf_pmf"]


def zipf_pmf(n, theta):
    """The analytic probabilities of ranks 1..n (a list of length n)."""
    w = [k ** -theta for k in range(1, n + 1)]
    s = sum(w)
    return [x / s for x in w]


class Zipf:
    def __init__(self, n, theta=0.99, seed=None, rng=None):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"number of keys must be a positive integer, got {n!r}")
        if not theta >= 0:
            raise ValueError(f"zipf theta must be >= 0, got {theta!r}")
        self.n, self.theta = n, float(theta)
        self.rng = rng if rng is not None else random.Random(seed)
        if self.theta == 0.0:
            self._cdf = None
        else:
            t = self.theta
            self._cdf = array("d", itertools.accumulate(k ** -t for k in range(1, n + 1)))
            self._total = self._cdf[-1]

    def sample(self):
        """One 0-based key index (0 = most popular)."""
        if self._cdf is None:
            return self.rng.randrange(self.n)
        i = bisect.bisect_right(self._cdf, self.rng.random() * self._total)
        return i if i < self.n else self.n - 1

    def samples(self, count):
        return [self.sample() for _ in range(count)]
