"""Latency summaries and confidence intervals (numpy only)."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["summary", "ci95", "T95"]

#: two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def summary(samples_ns, timeouts=0):
    """``{n, timeouts, mean_us, p50_us, p99_us, p999_us, max_us}`` of latency samples in ns
    (timeouts already in the samples at the timeout value; percentiles interpolate linearly
    between order statistics)."""
    a = np.asarray(samples_ns, dtype=np.float64)
    if a.size == 0:
        return {"n": 0, "timeouts": int(timeouts), "mean_us": None, "p50_us": None,
                "p99_us": None, "p999_us": None, "max_us": None}
    p50, p99, p999 = np.percentile(a, [50, 99, 99.9])
    return {"n": int(a.size), "timeouts": int(timeouts),
            "mean_us": round(float(a.mean()) / 1e3, 4), "p50_us": round(float(p50) / 1e3, 4),
            "p99_us": round(float(p99) / 1e3, 4), "p999_us": round(float(p999) / 1e3, 4),
            "max_us": round(float(a.max()) / 1e3, 4)}


def ci95(values):
    """``(mean, [lo, hi])``: the mean of ``values`` (repeats) and its 95 % confidence interval
    (Student's t; one value: the interval is that value)."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return None, [None, None]
    m = sum(v) / len(v)
    if len(v) == 1:
        return m, [m, m]
    s = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    df = len(v) - 1
    t = T95[df - 1] if df <= len(T95) else 1.96
    h = t * s / math.sqrt(len(v))
    return m, [m - h, m + h]
