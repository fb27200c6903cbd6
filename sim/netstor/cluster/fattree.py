"""One run on a k-ary fat tree (:mod:`netstor.cluster.topology`): clients and storage servers on
random hosts, every switch running our data plane, the scheme choosing what clients send.

The counterpart of :class:`netstor.cluster.rack.RackRun` for multi-switch experiments
(:class:`FatTreeRun`; one run = one scheme, one load, one seed; everything in its result but
``perf`` is a pure function of the arguments):

* **Deployment.** ``servers`` and ``clients`` hosts drawn without replacement from the tree's
  hosts with the stream ``deploy`` of ``deploy_seed`` (default ``seed``): servers first, so a
  sweep over the number of clients keeps the servers where they are. Each host has one role.
  :attr:`FatTreeRun.server_hosts` and :attr:`FatTreeRun.client_hosts` are the names, servers in
  name order: server ``k`` (``run.servers[k]``, service draws indexed by ``k``) has server id
  ``k + 1`` in its replies.
* **Network.** :func:`netstor.cluster.topology.build_fat_tree`: ``link_ns`` per cable (host
  cables too), ``gbps`` (None: no serialisation), the device's pipeline latency per switch pass;
  routes by :func:`netstor.cluster.topology.route_config`, merged per switch with what the
  scheme's ``switch_config(run)`` returns -- here ``None`` or ``{switch name: configuration}``
  (a scheme may look at :attr:`tree`, :attr:`server_hosts`, :attr:`client_hosts`,
  :attr:`rate_rps` to compute it; the network does not exist yet).
* **Load.** Open loop: client ``c`` sends ``requests / clients`` requests (the remainder to
  the first ones) as a Poisson process of rate ``rate_rps / clients`` (stream
  ``arrivals/<c>``); per-request uniforms ``client.picks`` (``picks/<c>``) and keys
  ``client.keys`` (``keys/<c>``: None = the request id; ``(n, theta)`` = Zipf ranks over ``n``
  keys, :class:`netstor.cluster.keys.ZipfKeys`). Requests ``rid = i * clients + c``; a
  server's service time for ``rid`` is drawn from the counter streams at
  ``rid * SERVICE_STRIDE + k``: the same in every scheme that sends ``rid`` to server ``k``.
* **Measurement.** The first ``warmup`` fraction of each client's requests is not measured;
  latency from the scheduled arrival to the first reply; no reply within ``timeout_us`` = a
  timeout, counted at the timeout value. The run ends ``timeout_us`` after the last arrival.

``result()`` has the latency summary (:func:`netstor.cluster.stats.summary`), throughput,
per-server counters and utilisation, the switches' frame counts and data-plane counters summed
over the tree, the scheme's own section and ``perf`` (events, wall and CPU seconds, build
time, events/s, requests per second of wall time).
"""
from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np

from netstor.agent.server import codecs as server_codecs

from .engine import Sim
from .host import Client, Server, SERVICE_STRIDE
from .keys import ZipfKeys
from .net import Network
from .rng import Streams
from .scheme import SimScheme, sim_schemes
from .service import ServiceTime
from .stats import summary
from .topology import FatTree, build_fat_tree

__all__ = ["FatTreeRun", "run_fat_tree", "deploy"]


def deploy(tree, n_clients, n_servers, seed):
    """``(client hosts, server hosts)``, each sorted by name: distinct random hosts of
    ``tree`` (servers drawn first; stream ``deploy`` of ``seed``)."""
    hosts = sorted(tree.hosts)
    if n_clients + n_servers > len(hosts):
        raise ValueError(f"{n_clients} clients + {n_servers} servers > {len(hosts)} hosts")
    if n_servers >= SERVICE_STRIDE:
        raise ValueError(f"at most {SERVICE_STRIDE - 1} servers")
    perm = Streams(seed).generator("deploy").permutation(len(hosts))
    servers = sorted(hosts[i] for i in perm[:n_servers])
    clients = sorted(hosts[i] for i in perm[n_servers:n_servers + n_clients])
    return clients, servers


class FatTreeRun:
    """One simulated run on a k-ary fat tree (see the module doc). Arguments as
    :class:`netstor.cluster.rack.RackRun`'s, plus ``k``, ``deploy_seed`` and ``keys``
    (None or ``(n_keys, theta)``)."""

    def __init__(self, scheme, *, k=4, clients=4, servers=4, workers=1, service="exp:25",
                 rate_rps=10_000.0, requests=10_000, seed=0, deploy_seed=None, warmup=0.1,
                 timeout_us=10_000.0, link_ns=1_000, gbps=None, keys=None, model_class=None,
                 trace=0, udp_checksum=True, value_len=0, scheme_options=None, start_ns=0):
        t_build = time.perf_counter()
        if isinstance(scheme, str):
            scheme = sim_schemes()[scheme](**(scheme_options or {}))
        elif scheme_options:
            raise TypeError("scheme_options only with a scheme name")
        if not isinstance(scheme, SimScheme):
            raise TypeError(f"scheme {scheme!r} is not a SimScheme")
        if not 0.0 <= warmup < 1.0:
            raise ValueError(f"warmup {warmup} is not in [0, 1)")
        if rate_rps <= 0 or requests < clients or clients < 1 or servers < 1:
            raise ValueError("rate_rps must be > 0, clients and servers >= 1, "
                             "requests >= clients")
        self.scheme, self.seed = scheme, int(seed)
        self.deploy_seed = self.seed if deploy_seed is None else int(deploy_seed)
        self.streams = Streams(self.seed)
        if isinstance(service, str):
            service = ServiceTime(service, seed=self.seed)
        self.service = service
        self.workers = int(workers)
        self.rate_rps, self.requests, self.warmup = float(rate_rps), int(requests), warmup
        self.timeout_ns = int(timeout_us * 1e3)
        self.tree = FatTree(k)
        self.client_hosts, self.server_hosts = deploy(self.tree, clients, servers,
                                                      self.deploy_seed)
        self.sim = Sim()
        self.net = Network(self.sim)
        configs = scheme.switch_config(self) or {}
        unknown = set(configs) - set(self.tree.switches)
        if unknown:
            raise ValueError(f"scheme {scheme.name}: configuration for unknown switches "
                             f"{sorted(unknown)[:5]}")
        self.configs = configs
        self.fabric = build_fat_tree(self.net, self.tree, link_ns=link_ns, gbps=gbps,
                                     model_class=model_class, trace=trace,
                                     udp_checksum=udp_checksum,
                                     switch_config=configs.get)
        self.switches, self.hosts = self.fabric.switches, self.fabric.hosts
        draws = (self.streams.counter("service/u"), self.streams.counter("service/v"))
        cods = server_codecs()
        self.servers = [Server(self.hosts[h], i, i + 1, self.workers, service, draws,
                               codecs=cods, value_len=value_len)
                        for i, h in enumerate(self.server_hosts)]
        self.extra = {}
        self.clients = []
        per = [requests // clients + (1 if c < requests % clients else 0)
               for c in range(clients)]
        rate_c = self.rate_rps / clients
        zipf = None if keys is None else ZipfKeys(int(keys[0]), float(keys[1]))
        for c, h in enumerate(self.client_hosts):
            e = self.streams.generator(f"arrivals/{c}").standard_exponential(per[c])
            arr = np.floor(np.cumsum(e) * (1e9 / rate_c)).astype(np.int64) + int(start_ns)
            cl = Client(self.hosts[h], c, scheme, arr, stride=clients, offset=c,
                        timeout_ns=self.timeout_ns)
            cl.picks = self.streams.generator(f"picks/{c}").random(per[c]).tolist()
            if zipf is None:
                cl.keys = [cl.rid(i) for i in range(per[c])]
            else:
                cl.keys = zipf.sample(self.streams.generator(f"keys/{c}"), per[c]).tolist()
            self.clients.append(cl)
        scheme.setup(self)
        self.build_s = time.perf_counter() - t_build
        self.args = {"k": k, "clients": clients, "servers": servers, "workers": workers,
                     "service": service.describe(), "rate_rps": self.rate_rps,
                     "requests": self.requests, "seed": self.seed,
                     "deploy_seed": self.deploy_seed, "warmup": warmup,
                     "timeout_us": timeout_us, "link_ns": link_ns, "gbps": gbps,
                     "keys": list(keys) if keys is not None else None,
                     "model": next(iter(self.switches.values())).model_class.__name__}

    def run(self, release=False):
        """Run to the end (the last arrival plus the timeout) and return the result dict.
        ``release``: then give the switches' models back to the process's pool
        (:meth:`netstor.cluster.switch.SwitchNode.release`; the next run in this process
        builds its network faster; this one's switches have no model afterwards)."""
        for c in self.clients:
            c.start()
        last = max(int(c.arrivals[-1]) for c in self.clients if c.n)
        self.sim.run(until=last + self.timeout_ns)
        out = self.result()
        if release:
            for node in self.switches.values():
                node.release()
        return out

    def result(self):
        samples, tos, measured, done = [], 0, 0, 0
        t0 = math.inf
        t1 = max(int(c.arrivals[-1]) for c in self.clients if c.n)
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
        sw = Counter()
        counters = Counter()
        for node in self.switches.values():
            sw.update(node.stats())
            counters.update(node.counters())
        out["switch"] = dict(sw)
        out["switch_counters"] = {k: v for k, v in sorted(counters.items()) if v}
        out["hosts_dropped"] = {n: {k: v for k, v in h.dropped.items() if v}
                                for n, h in self.hosts.items() if any(h.dropped.values())}
        extra = self.scheme.result(self)
        if extra is not None:
            out[self.scheme.name] = extra
        ev, wall, cpu = self.sim.events, self.sim.wall_s, self.sim.cpu_s
        out["perf"] = {"events": ev, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                       "build_s": round(self.build_s, 3),
                       "switch_passes": sw["frames_in"] + sw["recirculated"],
                       "events_per_s": round(ev / wall) if wall else None,
                       "requests_per_s": round(self.requests / wall, 1) if wall else None,
                       "requests_per_cpu_s": round(self.requests / cpu, 1) if cpu else None}
        return out


def run_fat_tree(scheme, **kw):
    """``FatTreeRun(scheme, **kw).run()``."""
    return FatTreeRun(scheme, **kw).run()
