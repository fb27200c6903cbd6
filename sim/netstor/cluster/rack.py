"""One rack in the simulator: clients and servers behind one switch running our data plane,
addressed and routed exactly like the test bed's rack (:mod:`netstor.testbed.rack`).

::

    c0 ─┐                                   ┌─ s0 (server id 1)
    c1 ─┼── wire port 0 ═[ switch ]═ wire port 1 ──┼─ s1 (server id 2)
        │   segment 0: 10.77.0.0/24         │  ...
        └                                   └─ extra hosts of the scheme (a coordinator)

Hosts ``10.77.<segment>.<10 + i>``, MACs :func:`netstor.testbed.rack.host_mac`, the switch
port MACs :func:`netstor.testbed.rack.port_mac`; every host has its own cable (``link_ns``
latency, ``gbps`` rate) to its switch port, the port leading to the segment's hosts by
destination MAC (:mod:`netstor.cluster.net`). The switch is configured with
:func:`netstor.testbed.rack.route_config` (one /32 per host) or the scheme's configuration.

:class:`RackRun` builds one run (one scheme, one load, one seed) and :meth:`RackRun.run` returns
its result dict; everything in it except ``perf`` is a pure function of the arguments.
"""
from __future__ import annotations

import math

import numpy as np

from netstor.agent.server import codecs as server_codecs
from netstor.agent.zipf import zipf_pmf
from netstor.testbed.rack import SUBNET, Host as HostPlan, host_mac, port_mac, route_config

from .engine import Sim
from .host import Client, Host, Server
from .net import Network
from .rng import Streams
from .scheme import SimScheme, sim_schemes
from .service import ServiceTime
from .stats import summary
from .switch import SwitchNode

__all__ = ["RackRun", "run_rack", "rack_plan"]


def rack_plan(n_clients, n_servers, extra=()):
    """Address records (:class:`netstor.testbed.rack.Host`) of a rack: clients on segment 0,
    servers then ``extra`` hosts on segment 1 (the test bed's addressing)."""
    def host(name, seg, i):
        return HostPlan(name=name, ns="", segment=seg, index=i, ip=f"{SUBNET}.{seg}.{10 + i}",
                        mac=host_mac(seg, i), gateway=f"{SUBNET}.{seg}.1")
    clients = [host(f"c{i}", 0, i) for i in range(n_clients)]
    servers = [host(f"s{i}", 1, i) for i in range(n_servers)]
    extras = {name: host(name, 1, n_servers + k) for k, name in enumerate(extra)}
    return clients, servers, extras


class RackRun:
    """One simulated run on a rack. Arguments:

    * ``scheme``: a :class:`SimScheme` instance or a registered name (``scheme_options``).
    * ``clients``, ``servers``, ``workers`` (per server), ``service`` (a
      :class:`ServiceTime` or a spec string).
    * ``rate_rps``: offered load, requests/s over all clients (each client ``rate / clients``,
      Poisson); ``requests``: requests over all clients; ``warmup``: the fraction of each
      client's first requests not measured; ``timeout_us``: a request without reply by then is a
      timeout (its sample is the timeout).
    * ``link_ns`` (per host cable, each direction), ``gbps`` (None: no serialisation delay).
    * ``keys``: None (key = request id) or ``(n_keys, zipf_theta)``.
    * ``model_class``, ``trace`` (frames the switch records), ``udp_checksum``,
      ``check_checksums`` (hosts verify every frame), ``value_len`` (GET reply value bytes).
    * ``start_ns``: the clients' first arrivals are shifted by this much (the switch's
      ``arrival`` stamps grow with it: a trace replayed on the RTL needs its first frame after
      the configuration writes).
    """

    def __init__(self, scheme, *, clients=2, servers=6, workers=1, service="exp:25",
                 rate_rps=10_000.0, requests=10_000, seed=0, warmup=0.1, timeout_us=10_000.0,
                 link_ns=1_000, gbps=100.0, keys=None, model_class=None, trace=0,
                 udp_checksum=True, check_checksums=False, value_len=0, scheme_options=None,
                 start_ns=0):
        if isinstance(scheme, str):
            scheme = sim_schemes()[scheme](**(scheme_options or {}))
        elif scheme_options:
            raise TypeError("scheme_options only with a scheme name")
        if not isinstance(scheme, SimScheme):
            raise TypeError(f"scheme {scheme!r} is not a SimScheme")
        if not 0.0 <= warmup < 1.0:
            raise ValueError(f"warmup {warmup} is not in [0, 1)")
        if rate_rps <= 0 or requests < clients:
            raise ValueError("rate_rps must be > 0 and requests >= clients")
        self.scheme, self.seed = scheme, int(seed)
        self.streams = Streams(seed)
        if isinstance(service, str):
            service = ServiceTime(service, seed=seed)
        self.service = service
        self.rate_rps, self.requests, self.warmup = float(rate_rps), int(requests), warmup
        self.timeout_ns = int(timeout_us * 1e3)
        self.sim = Sim()
        self.net = Network(self.sim)
        pc, ps, px = rack_plan(clients, servers, tuple(scheme.extra_hosts))
        self.plan_clients, self.plan_servers, self.plan_extra = pc, ps, px
        self.plan = pc + ps + list(px.values())
        self.switch = SwitchNode(self.net, "tor", {0: port_mac(0).to_bytes(6, "big"),
                                                   1: port_mac(1).to_bytes(6, "big")},
                                 model_class=model_class, trace=trace)
        self.hosts = {}
        for h in self.plan:
            node = Host(self.net, h.name, h.mac, h.ip, port_mac(h.segment),
                        udp_checksum=udp_checksum, check_checksums=check_checksums)
            self.net.connect(node, 0, self.switch, h.segment, latency_ns=link_ns, gbps=gbps)
            self.hosts[h.name] = node
        draws = (self.streams.counter("service/u"), self.streams.counter("service/v"))
        cods = server_codecs()
        self.servers = [Server(self.hosts[h.name], k, k + 1, workers, service, draws,
                               codecs=cods, value_len=value_len) for k, h in enumerate(ps)]
        self.extra = {name: self.hosts[name] for name in px}
        self.clients = []
        per = [requests // clients + (1 if c < requests % clients else 0)
               for c in range(clients)]
        rate_c = self.rate_rps / clients
        cdf = None
        if keys is not None:
            n_keys, theta = keys
            cdf = np.cumsum(zipf_pmf(int(n_keys), float(theta)))
        for c, h in enumerate(pc):
            e = self.streams.generator(f"arrivals/{c}").standard_exponential(per[c])
            arr = np.floor(np.cumsum(e) * (1e9 / rate_c)).astype(np.int64) + int(start_ns)
            cl = Client(self.hosts[h.name], c, scheme, arr, stride=clients, offset=c,
                        timeout_ns=self.timeout_ns)
            cl.picks = self.streams.generator(f"picks/{c}").random(per[c]).tolist()
            if cdf is None:
                cl.keys = [cl.rid(i) for i in range(per[c])]
            else:
                u = self.streams.generator(f"keys/{c}").random(per[c])
                cl.keys = np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"),
                                     len(cdf) - 1).tolist()
            self.clients.append(cl)
        self.config = scheme.switch_config(self)
        if self.config is None:
            self.config = self.route_config()
        self.switch.configure(self.config)
        scheme.setup(self)
        self.args = {"clients": clients, "servers": servers, "workers": workers,
                     "service": service.describe(), "rate_rps": self.rate_rps,
                     "requests": self.requests, "seed": self.seed, "warmup": warmup,
                     "timeout_us": timeout_us, "link_ns": link_ns, "gbps": gbps,
                     "keys": list(keys) if keys is not None else None,
                     "model": self.switch.model_class.__name__}

    def route_config(self):
        """The rack's routes: one /32 per host (:func:`netstor.testbed.rack.route_config`)."""
        return route_config(self.plan)

    def run(self):
        """Run to the end (the last arrival plus the timeout) and return the result dict."""
        for c in self.clients:
            c.start()
        last = max(int(c.arrivals[-1]) for c in self.clients if c.n)
        self.sim.run(until=last + self.timeout_ns)
        return self.result()

    def result(self):
        samples, tos, done = [], 0, 0
        t0 = math.inf
        t1 = max(int(c.arrivals[-1]) for c in self.clients if c.n)
        measured = 0
        for c in self.clients:
            first = min(c.n, math.ceil(self.warmup * c.n))
            if first < c.n:
                t0 = min(t0, int(c.arrivals[first]))
            s, to = c.samples(first)
            samples.append(s)
            tos += int(to.sum())
            measured += c.n - first
        for c in self.clients:
            d = c.done_at
            done += int(((d >= t0) & (d <= t1)).sum())
        allsamples = np.concatenate(samples) if samples else np.zeros(0)
        out = {"scheme": self.scheme.name, "scheme_config": self.scheme.config(),
               "args": self.args, "measured": measured}
        out.update(summary(allsamples, tos))
        span = t1 - t0
        out["throughput_rps"] = round(done / span * 1e9, 3) if span > 0 else None
        out["duplicates"] = sum(c.duplicates for c in self.clients)
        out["stray_replies"] = sum(c.stray for c in self.clients)
        out["servers"] = [s.stats(t1) for s in self.servers]
        out["switch"] = self.switch.stats()
        out["switch_counters"] = {k: v for k, v in self.switch.counters().items() if v}
        out["hosts_dropped"] = {n: {k: v for k, v in h.dropped.items() if v}
                                for n, h in self.hosts.items() if any(h.dropped.values())}
        extra = self.scheme.result(self)
        if extra is not None:
            out[self.scheme.name] = extra
        ev, wall, cpu = self.sim.events, self.sim.wall_s, self.sim.cpu_s
        out["perf"] = {"events": ev, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                       "events_per_s": round(ev / wall) if wall else None,
                       "requests_per_min": round(self.requests / wall * 60) if wall else None,
                       "requests_per_cpu_min": round(self.requests / cpu * 60) if cpu else None}
        return out


def run_rack(scheme, **kw):
    """``RackRun(scheme, **kw).run()``."""
    return RackRun(scheme, **kw).run()
