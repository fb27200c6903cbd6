"""Service-time models: an extra delay a server worker adds on top of the real storage work.

Specs (all times in microseconds unless the name says otherwise):

``none``
    no extra delay (default).
``const:US``
    a fixed delay.
``exp:MEAN_US``
    exponentially distributed delay with that mean (the NetClone / NetRS style workload).
``bimodal:P:FAST_US:SLOW_US``
    ``SLOW_US`` with probability ``P``, else ``FAST_US``.
``slowdown:MEAN_US:FACTOR:PERIOD_MS[:DUTY]``
    time-varying: exponential with mean ``MEAN_US``, multiplied by ``FACTOR`` during the
    first ``DUTY`` fraction (default 0.5) of every ``PERIOD_MS`` window (counted from when
    the model was created).
``fluct:MEAN_US:D:INTERVAL_MS``
    the NetRS paper's fluctuating server (section 6.1, after C3): exponential service time
    whose mean changes every ``INTERVAL_MS`` (counted from when the model was created),
    independently per server: ``MEAN_US`` or ``MEAN_US / D`` with equal probability (a
    bimodal distribution with range parameter ``D``). The mode of interval ``i`` is drawn
    from the model's seed and ``i`` alone, so a seeded server repeats its fluctuation.

:func:`parse` turns a spec into a model; every model has ``sample_ns(now_ns=None) -> int``.
"""

from __future__ import annotations

import math
import random
import threading
import time

__all__ = ["ServiceModel", "parse", "SpecError", "SPEC_HELP"]

SPEC_HELP = ("none | const:US | exp:MEAN_US | bimodal:P:FAST_US:SLOW_US | "
             "slowdown:MEAN_US:FACTOR:PERIOD_MS[:DUTY] | fluct:MEAN_US:D:INTERVAL_MS")


class SpecError(ValueError):
    """A service-model spec that does not parse."""


class ServiceModel:
    """A parsed service-time model. ``sample_ns`` is thread-safe."""

    def __init__(self, kind, params, seed=None, spec=None):
        self.kind = kind
        self.params = tuple(params)
        self.spec = spec if spec is not None else ":".join([kind, *map(_fmt, params)])
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._t0 = time.monotonic_ns()
        self._seed = random.Random(seed).getrandbits(64)
        self._mode = (None, False)          # fluct: (interval index, slow?)

    def __repr__(self):
        return f"ServiceModel({self.spec!r})"

    @property
    def mean_us(self):
        """The long-run mean extra delay in microseconds."""
        p = self.params
        if self.kind == "none":
            return 0.0
        if self.kind in ("const", "exp"):
            return float(p[0])
        if self.kind == "bimodal":
            return (1 - p[0]) * p[1] + p[0] * p[2]
        if self.kind == "fluct":
            return p[0] * (1 + 1 / p[1]) / 2
        mean, factor, _period, duty = p
        return mean * (duty * factor + (1 - duty))

    def slow_phase(self, now_ns=None):
        """True while a ``slowdown`` model is in its slow phase (always False otherwise)."""
        if self.kind != "slowdown":
            return False
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        _mean, _factor, period_ms, duty = self.params
        period_ns = period_ms * 1e6
        return ((now_ns - self._t0) % period_ns) < duty * period_ns

    def fluct_slow(self, now_ns=None):
        """``fluct``: True while the current interval is in the slow mode (mean MEAN_US)."""
        if self.kind != "fluct":
            return False
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        i = int((now_ns - self._t0) // (self.params[2] * 1e6))
        idx, slow = self._mode
        if idx != i:
            slow = random.Random(self._seed * 1_000_003 + i).random() < 0.5
            self._mode = (i, slow)
        return slow

    def sample_ns(self, now_ns=None):
        """One extra delay in nanoseconds (``now_ns``: monotonic time, for ``slowdown``)."""
        k, p = self.kind, self.params
        if k == "none":
            return 0
        if k == "const":
            return int(p[0] * 1000)
        with self._lock:
            u = self._rng.random()
        if k == "exp":
            return int(-math.log(1.0 - u) * p[0] * 1000)
        if k == "bimodal":
            return int((p[2] if u < p[0] else p[1]) * 1000)
        if k == "fluct":
            with self._lock:
                slow = self.fluct_slow(now_ns)
            mean = p[0] if slow else p[0] / p[1]
            return int(-math.log(1.0 - u) * mean * 1000)
        mean = p[0] * (p[1] if self.slow_phase(now_ns) else 1.0)
        return int(-math.log(1.0 - u) * mean * 1000)


def _fmt(v):
    return f"{v:g}" if isinstance(v, float) else str(v)


def _num(text, what, spec, lo=0.0, hi=math.inf, lo_open=False):
    try:
        v = float(text)
    except ValueError:
        raise SpecError(f"service model {spec!r}: {what} {text!r} is not a number "
                        f"(expected {SPEC_HELP})") from None
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise SpecError(f"service model {spec!r}: {what} = {text} is out of range {rng}")
    return v


_ARITY = {"none": (0, 0), "const": (1, 1), "exp": (1, 1), "bimodal": (3, 3),
          "slowdown": (3, 4), "fluct": (3, 3)}


def parse(spec, seed=None):
    """Parse a service-model spec (see the module doc); raises :class:`SpecError`."""
    if isinstance(spec, ServiceModel):
        return spec
    if spec is None:
        spec = "none"
    text = str(spec).strip()
    kind, *args = text.split(":") if text else ["none"]
    kind = kind.strip().lower()
    if kind not in _ARITY:
        raise SpecError(f"unknown service model {text!r} (expected {SPEC_HELP})")
    lo, hi = _ARITY[kind]
    if not lo <= len(args) <= hi:
        want = str(lo) if lo == hi else f"{lo}..{hi}"
        raise SpecError(f"service model {text!r}: {kind} takes {want} parameter(s), got "
                        f"{len(args)} (expected {SPEC_HELP})")
    if kind == "none":
        params = ()
    elif kind in ("const", "exp"):
        params = (_num(args[0], "delay (us)" if kind == "const" else "mean (us)", text),)
    elif kind == "bimodal":
        params = (_num(args[0], "probability P", text, 0.0, 1.0),
                  _num(args[1], "FAST_US", text), _num(args[2], "SLOW_US", text))
    elif kind == "fluct":
        params = (_num(args[0], "MEAN_US", text), _num(args[1], "D", text, 1.0),
                  _num(args[2], "INTERVAL_MS", text, lo_open=True))
    else:
        params = (_num(args[0], "MEAN_US", text), _num(args[1], "FACTOR", text),
                  _num(args[2], "PERIOD_MS", text, lo_open=True),
                  _num(args[3], "DUTY", text, 0.0, 1.0) if len(args) > 3 else 0.5)
    return ServiceModel(kind, params, seed=seed, spec=text if text else "none")
