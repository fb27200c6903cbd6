"""k-ary fat trees (Al-Fares et al.): the graph, and the simulated network of it.

**The graph** (:class:`FatTree`). Tiers follow the NetRS paper (section 3.2): the *tier* of a
device is its distance to the top, so core switches are tier 0, aggregation switches tier 1 and
ToR (edge) switches tier 2. Names are stable:

* core switches   ``c<i>``            i in [0, (k/2)^2)
* aggregation     ``a<pod>_<i>``      i in [0, k/2)
* ToR (edge)      ``t<pod>_<rack>``   rack in [0, k/2)
* hosts           ``h<pod>_<rack>_<i>`` i in [0, k/2), IPv4 ``10.<pod>.<rack>.<i+2>``

Wiring: ToR ``t<p>_<r>`` connects to every ``a<p>_<j>``; ``a<p>_<j>`` connects to the cores
``c<j*k/2 + m>`` for m in [0, k/2); host ``h<p>_<r>_<i>`` connects to ``t<p>_<r>``. A k-ary
fat tree has (k/2)^2 cores, k pods of k/2 aggregation and k/2 ToR switches, k^3/4 hosts.

**The network** (:func:`build_fat_tree`): every switch is a :class:`netstor.cluster.switch.SwitchNode`
running the default bitstream's pipeline, which has 2 wire ports (the device's; a pipeline
takes at most 7, ``meta.ingress_port`` being 4 bits, fewer than a k=16 switch's 16 ports). The
port mapping that lets it be any fat-tree switch: **wire port 0 faces down, wire port 1 faces
up**, and each is an L2 segment of the switch's cables on that side (:mod:`netstor.cluster.net`):
a frame out of a port takes the cable to the node owning its destination MAC, which the route
that sent it wrote (``route(port, dmac, smac)``). So the route's port picks the direction and its
next-hop MAC picks the cable, one LPM entry per destination prefix:

* ToR ``t<p>_<r>``: a /32 per host of the rack (port 0); a /24 per other rack ``s`` of the pod
  and a /16 per other pod ``q`` (port 1, towards aggregation switch ``(s + r) mod k/2`` or
  ``(q + r) mod k/2``: destination-based ECMP spread over the source rack);
* aggregation ``a<p>_<j>``: a /24 per rack of the pod (port 0, that rack's ToR); a /16 per other
  pod ``q`` (port 1, core ``j*k/2 + q mod k/2``);
* core ``c<i>``: a /16 per pod (port 0, that pod's aggregation switch ``i div k/2``).

That is k/2 + k - 1 + k/2 - 1 entries at a ToR (30 for k = 16, 62 for k = 32), within
``l3.routes``' 64. Every switch is configured with those routes as a configuration file
(:func:`route_config`) plus what ``switch_config(name)`` adds (an offload's section).
MACs: host ``h<p>_<r>_<i>`` ``02:4e:54:<p>:<r>:<i>``; switch number ``n`` (cores, then per pod
its aggregation and ToR switches) port ``q`` ``02:4e:55:<n>:<q>`` (n on 16 bits).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable

from .host import Host as HostNode
from .switch import SwitchNode

__all__ = ["CORE", "AGG", "TOR", "TIER_NAMES", "Switch", "Host", "FatTree", "FatTreeNet",
           "build_fat_tree", "route_config", "host_mac", "switch_mac"]

CORE, AGG, TOR = 0, 1, 2
TIER_NAMES = {CORE: "core", AGG: "aggregation", TOR: "tor"}
DOWN, UP = 0, 1


@dataclass(frozen=True)
class Switch:
    name: str
    tier: int            # CORE / AGG / TOR
    pod: int | None      # None for core switches
    index: int           # core: global index; agg: index in pod; ToR: rack index in pod


@dataclass(frozen=True)
class Host:
    name: str
    pod: int
    rack: int
    index: int
    ip: str
    tor: str


class FatTree:
    """A k-ary fat tree: k pods, k/2 aggregation and k/2 ToR switches per pod, (k/2)^2 cores,
    k/2 hosts per rack (k^3/4 hosts)."""

    def __init__(self, k: int):
        if k < 2 or k % 2:
            raise ValueError("k must be an even number >= 2")
        self.k = k
        self.half = h = k // 2
        self.switches: dict[str, Switch] = {}
        self.hosts: dict[str, Host] = {}
        self._adj: dict[str, list[str]] = {}
        for i in range(h * h):
            self._add_switch(Switch(f"c{i}", CORE, None, i))
        for p in range(k):
            for i in range(h):
                self._add_switch(Switch(f"a{p}_{i}", AGG, p, i))
            for r in range(h):
                self._add_switch(Switch(f"t{p}_{r}", TOR, p, r))
        for p in range(k):
            for j in range(h):
                agg = f"a{p}_{j}"
                for m in range(h):
                    self._link(agg, f"c{j * h + m}")
                for r in range(h):
                    self._link(f"t{p}_{r}", agg)
            for r in range(h):
                for i in range(h):
                    host = Host(f"h{p}_{r}_{i}", p, r, i, f"10.{p}.{r}.{i + 2}", f"t{p}_{r}")
                    self.hosts[host.name] = host
                    self._adj[host.name] = []
                    self._link(host.name, host.tor)
        self._dist: dict[str, dict[str, int]] = {}

    # -- construction helpers -------------------------------------------------------------
    def _add_switch(self, sw: Switch) -> None:
        self.switches[sw.name] = sw
        self._adj[sw.name] = []

    def _link(self, a: str, b: str) -> None:
        self._adj[a].append(b)
        self._adj[b].append(a)

    def locate(self, node: str) -> str:
        """The graph node ``node`` stands for (itself here; subclasses map attached devices,
        such as NetRS's accelerators, to their switch)."""
        return node

    # -- queries ------------------------------------------------------------------------
    @property
    def cores(self) -> list[str]:
        return [s.name for s in self.switches.values() if s.tier == CORE]

    @property
    def aggs(self) -> list[str]:
        return [s.name for s in self.switches.values() if s.tier == AGG]

    @property
    def tors(self) -> list[str]:
        return [s.name for s in self.switches.values() if s.tier == TOR]

    def tor(self, pod: int, rack: int) -> str:
        return f"t{pod}_{rack}"

    def hosts_of_tor(self, tor: str) -> list[str]:
        return [h.name for h in self.hosts.values() if h.tor == tor]

    def neighbors(self, node: str) -> list[str]:
        return list(self._adj[node])

    def links(self) -> Iterable[tuple[str, str]]:
        for a, nbrs in self._adj.items():
            for b in nbrs:
                if a < b:
                    yield a, b

    def tier(self, node: str) -> int:
        """Tier of a switch (hosts: the tier of their ToR)."""
        if node in self.hosts:
            return TOR
        return self.switches[node].tier

    def pod(self, node: str) -> int | None:
        if node in self.hosts:
            return self.hosts[node].pod
        return self.switches[node].pod

    def distances_from(self, node: str) -> dict[str, int]:
        """Link-hop distances from ``node`` to every node (BFS, cached)."""
        d = self._dist.get(node)
        if d is None:
            d = {node: 0}
            q = deque([node])
            while q:
                u = q.popleft()
                for v in self._adj[u]:
                    if v not in d:
                        d[v] = d[u] + 1
                        q.append(v)
            self._dist[node] = d
        return d

    def distance(self, a: str, b: str) -> int:
        """Number of links on a shortest path."""
        return self.distances_from(self.locate(b))[self.locate(a)]

    def next_hops(self, node: str, target: str) -> list[str]:
        """Neighbours of ``node`` on a shortest path towards ``target`` (ECMP set, sorted)."""
        d = self.distances_from(self.locate(target))
        return sorted(v for v in self._adj[node] if d[v] == d[node] - 1)

    def on_shortest_path(self, node: str, src: str, dst: str) -> bool:
        return self.distance(src, node) + self.distance(node, dst) == self.distance(src, dst)

    def forwards(self, src: str, dst: str) -> int:
        """Switch forwardings on a shortest host->host path (the paper's hop count)."""
        return self.distance(src, dst) - 1

    def traffic_tier(self, src_host: str, dst_host: str) -> int:
        """Highest tier crossed by default paths: 2 same rack, 1 same pod, 0 otherwise."""
        a, b = self.hosts[src_host], self.hosts[dst_host]
        if a.tor == b.tor:
            return TOR
        if a.pod == b.pod:
            return AGG
        return CORE


# ---- the simulated network ---------------------------------------------------------------------
def host_mac(host: Host) -> bytes:
    return bytes([0x02, 0x4E, 0x54, host.pod, host.rack, host.index])


def switch_mac(number: int, port: int) -> bytes:
    return bytes([0x02, 0x4E, 0x55, number >> 8 & 0xFF, number & 0xFF, port])


def _numbers(tree):
    return {name: n for n, name in enumerate(tree.switches)}


def _mac_str(b):
    return ":".join(f"{x:02x}" for x in b)


def route_config(tree: FatTree, switch: str) -> dict:
    """The routes of fat-tree switch ``switch`` (see the module doc) as a configuration."""
    num = _numbers(tree)
    sw, h, k = tree.switches[switch], tree.half, tree.k
    me = num[switch]
    entries = []

    def route(prefix, port, nxt_mac):
        entries.append({"prefix": prefix, "action": "route",
                        "params": {"port": port, "dmac": _mac_str(nxt_mac),
                                   "smac": _mac_str(switch_mac(me, port))}})
    if sw.tier == TOR:
        p, r = sw.pod, sw.index
        for hn in tree.hosts_of_tor(switch):
            host = tree.hosts[hn]
            route(f"{host.ip}/32", DOWN, host_mac(host))
        for s in range(h):
            if s != r:
                route(f"10.{p}.{s}.0/24", UP, switch_mac(num[f"a{p}_{(s + r) % h}"], DOWN))
        for q in range(k):
            if q != p:
                route(f"10.{q}.0.0/16", UP, switch_mac(num[f"a{p}_{(q + r) % h}"], DOWN))
    elif sw.tier == AGG:
        p, j = sw.pod, sw.index
        for s in range(h):
            route(f"10.{p}.{s}.0/24", DOWN, switch_mac(num[f"t{p}_{s}"], UP))
        for q in range(k):
            if q != p:
                route(f"10.{q}.0.0/16", UP, switch_mac(num[f"c{j * h + q % h}"], DOWN))
    else:
        i = sw.index
        for q in range(k):
            route(f"10.{q}.0.0/16", DOWN, switch_mac(num[f"a{q}_{i // h}"], UP))
    return {"tables": {"l3.routes": {"default": {"action": "drop"}, "entries": entries}}}


class FatTreeNet:
    """A fat tree's simulated network: ``switches`` and ``hosts`` (name -> node)."""

    def __init__(self, tree, switches, hosts):
        self.tree, self.switches, self.hosts = tree, switches, hosts


def build_fat_tree(net, tree: FatTree, *, link_ns=1_000, gbps=None, model_class=None,
                   switch_config=None, trace=0, udp_checksum=True):
    """Switches and hosts of ``tree`` in ``net`` (:class:`netstor.cluster.net.Network`), cabled
    (``link_ns`` per cable, ``gbps``) and configured: every switch with :func:`route_config`,
    merged with ``switch_config(name)`` when given (a configuration dict whose ``tables`` are
    added to the routes' and whose other sections are taken as they are)."""
    num = _numbers(tree)
    switches = {}
    for name, sw in tree.switches.items():
        macs = {DOWN: switch_mac(num[name], DOWN)}
        if sw.tier != CORE:
            macs[UP] = switch_mac(num[name], UP)
        switches[name] = SwitchNode(net, name, macs, model_class=model_class, trace=trace)
    hosts = {}
    for hn, h in tree.hosts.items():
        hosts[hn] = HostNode(net, hn, host_mac(h), h.ip, switch_mac(num[h.tor], DOWN),
                             udp_checksum=udp_checksum)
        net.connect(hosts[hn], 0, switches[h.tor], DOWN, latency_ns=link_ns, gbps=gbps)
    for a, b in tree.links():
        if a in tree.hosts or b in tree.hosts:
            continue
        lo, hi = sorted((a, b), key=lambda n: tree.switches[n].tier, reverse=True)
        # lo is the lower switch (higher tier number): its up port to hi's down port
        net.connect(switches[lo], UP, switches[hi], DOWN, latency_ns=link_ns, gbps=gbps)
    for name, node in switches.items():
        cfg = route_config(tree, name)
        extra = switch_config(name) if switch_config else None
        if extra:
            extra = dict(extra)
            tables = extra.pop("tables", {}) or {}
            cfg["tables"].update(tables)
            cfg.update(extra)
        node.configure(cfg)
    return FatTreeNet(tree, switches, hosts)
