"""Service-time distributions of simulated servers, drawn from uniforms the caller supplies.

The distribution is a spec of the test bed's language (:mod:`netstor.agent.servicetime`:
``const:US``, ``exp:MEAN_US``, ``bimodal:P:FAST_US:SLOW_US``, ``fluct:MEAN_US:D:INTERVAL_MS``;
parsed and validated there) plus NetClone's per-request slowdown: with probability
``slow_p`` a request takes ``slow_factor`` times as long (the paper's 1 % x15).

A service time is a function of two uniforms (``u`` for the base distribution by inversion,
``v`` for the slowdown), the server and, for ``fluct``, the time service starts; the simulator
draws ``u`` and ``v`` from counter streams indexed by request and server
(:mod:`netstor.cluster.rng`), so every scheme sees the same service time for the same request
at the same server.

``fluct`` (NetRS section 6.1, after C3): exponential with a mean that each server redraws every
interval, ``MEAN_US`` or ``MEAN_US / D`` with equal probability; the mode of interval ``i`` of a
server is the test bed's (:meth:`netstor.agent.servicetime.ServiceModel.fluct_slow`) for a
model seeded per server, with interval 0 starting at virtual time 0.
"""
from __future__ import annotations

import math

from netstor.agent.servicetime import parse

__all__ = ["ServiceTime"]


class ServiceTime:
    """``ServiceTime("exp:25", slow_p=0.01, slow_factor=15)``; :meth:`ns` gives one service
    time in ns; :attr:`mean_ns` is the analytic mean (slowdown included)."""

    def __init__(self, spec, *, slow_p=0.0, slow_factor=1.0, seed=0):
        self.model = parse(spec)
        self.kind, self.params = self.model.kind, self.model.params
        if self.kind not in ("none", "const", "exp", "bimodal", "fluct"):
            raise ValueError(f"service model {spec!r}: the simulator takes none, const, exp, "
                             "bimodal and fluct (slowdown is time-driven by the wall clock; "
                             "use slow_p/slow_factor for a per-request slowdown)")
        if not 0.0 <= slow_p <= 1.0:
            raise ValueError(f"slow_p = {slow_p} is not a probability")
        if slow_factor < 0:
            raise ValueError(f"slow_factor = {slow_factor} is negative")
        self.spec, self.slow_p, self.slow_factor = self.model.spec, float(slow_p), float(slow_factor)
        self.seed = int(seed)
        self._fluct = {}           # server -> ServiceModel (its interval modes)

    def __repr__(self):
        s = f"ServiceTime({self.spec!r}"
        if self.slow_p:
            s += f", slow_p={self.slow_p:g}, slow_factor={self.slow_factor:g}"
        return s + ")"

    @property
    def mean_ns(self):
        return self.model.mean_us * 1e3 * (1.0 + self.slow_p * (self.slow_factor - 1.0))

    def describe(self):
        return {"spec": self.spec, "slow_p": self.slow_p, "slow_factor": self.slow_factor,
                "mean_us": round(self.mean_ns / 1e3, 6)}

    def _fluct_slow(self, server, now_ns):
        m = self._fluct.get(server)
        if m is None:
            m = self._fluct[server] = parse(self.spec, seed=self.seed * 1_000_003 + server)
        # the test bed's model counts intervals from its creation (m._t0, monotonic clock);
        # the simulator's interval 0 starts at virtual time 0
        return m.fluct_slow(m._t0 + now_ns)

    def current_mean_ns(self, server=0, now_ns=0):
        """The mean service time server ``server`` has at ``now_ns`` (for ``fluct`` the
        interval's mode; slowdown excluded): what a clairvoyant scheduler knows."""
        if self.kind == "fluct":
            p = self.params
            return (p[0] if self._fluct_slow(server, now_ns) else p[0] / p[1]) * 1e3
        return self.model.mean_us * 1e3

    def ns(self, u, v=1.0, server=0, now_ns=0):
        """The service time (int ns) for uniforms ``u`` (base) and ``v`` (slowdown)."""
        k, p = self.kind, self.params
        if k == "exp":
            t = -math.log(1.0 - u) * p[0] * 1e3
        elif k == "bimodal":
            t = (p[2] if u < p[0] else p[1]) * 1e3
        elif k == "const":
            t = p[0] * 1e3
        elif k == "fluct":
            mean = p[0] if self._fluct_slow(server, now_ns) else p[0] / p[1]
            t = -math.log(1.0 - u) * mean * 1e3
        else:
            t = 0.0
        if v < self.slow_p:
            t *= self.slow_factor
        return int(t)
