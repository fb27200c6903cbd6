"""Statistics of repeated runs: means with Student-t 95 % confidence intervals, and paired
relative differences (the schemes of one figure share their random numbers, so run ``i`` of
scheme A and run ``i`` of scheme B saw the same arrivals, keys and service draws)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import t as student_t

__all__ = ["Interval", "mean_ci", "paired_rel_diff", "percentile"]


@dataclass(frozen=True)
class Interval:
    """A mean and its two-sided ``level`` confidence interval over ``n`` repeats (``lo`` =
    ``hi`` = ``mean`` for a single repeat: no interval can be given)."""
    mean: float
    lo: float
    hi: float
    n: int

    @property
    def half_width(self):
        return (self.hi - self.lo) / 2

    def as_list(self, digits=2):
        return [round(self.lo, digits), round(self.hi, digits)]

    def fmt(self, digits=1, unit=""):
        if self.n < 2:
            return f"{self.mean:.{digits}f}{unit} (1 run)"
        return f"{self.mean:.{digits}f}{unit} ± {self.half_width:.{digits}f}"


def mean_ci(values, level=0.95) -> Interval:
    """Mean of ``values`` with the Student-t interval (independent repeats)."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError("mean_ci of no values")
    m = sum(xs) / n
    if n == 1:
        return Interval(m, m, m, 1)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    h = student_t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Interval(m, m - h, m + h, n)


def paired_rel_diff(a, b, level=0.95) -> Interval:
    """``100 * (a_i - b_i) / b_i`` per repeat (percent; negative: ``a`` is lower), its mean
    and interval. ``a`` and ``b`` are the same repeats of two schemes."""
    if len(a) != len(b):
        raise ValueError(f"paired_rel_diff: {len(a)} and {len(b)} repeats")
    return mean_ci([100.0 * (x - y) / y for x, y in zip(a, b)], level)


def percentile(sorted_values, q):
    """The ``q``-th percentile (0..100) of already sorted values, nearest rank (the value
    below which ``q`` % of the samples lie; what a latency histogram's bucket reports)."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    k = max(0, min(n - 1, math.ceil(q / 100 * n) - 1))
    return sorted_values[k]
