"""k-ary fat tree (Al-Fares et al.) with NetRS operators (switch + network accelerator).

Tiers follow the NetRS paper (section 3.2): the *tier ID* of a device is its distance to the top
tier, so core switches are tier 0, aggregation switches tier 1, ToR switches tier 2 and a
traffic group has the tier of the ToR its hosts hang off.

Naming (stable, used by :mod:`netstor.offloads.netrs.rules`):

* core switches   ``c<i>``            i in [0, (k/2)^2)
* aggregation     ``a<pod>_<i>``      i in [0, k/2)
* ToR (edge)      ``t<pod>_<rack>``   rack in [0, k/2)
* hosts           ``h<pod>_<rack>_<i>`` i in [0, k/2), IPv4 ``10.<pod>.<rack>.<i+2>``
* NetRS operators ``<switch>/acc<n>`` (a switch with several accelerators belongs to several
  operators, paper section 2).

Wiring: ToR ``t<p>_<r>`` connects to every ``a<p>_<j>``; ``a<p>_<j>`` connects to the cores
``c<j*k/2 + m>`` for m in [0, k/2); host ``h<p>_<r>_<i>`` connects to ``t<p>_<r>``.

Accelerator capacity: an operator can take at most ``T^max = U * c_ac / t_ac`` requests per
second as RSNode (paper section 3.2); :func:`accelerator_capacity` computes it, the defaults
are the evaluation's numbers (section 6: U = 25 %, 1 core, 5 us per selection -> 50 000 req/s).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping

CORE, AGG, TOR = 0, 1, 2
TIER_NAMES = {CORE: "core", AGG: "aggregation", TOR: "tor"}


def accelerator_capacity(utilization: float = 0.25, cores: int = 1,
                         service_time: float = 5e-6) -> float:
    """``T^max = U * c^ac / t^ac`` in requests per second (paper section 3.2)."""
    if service_time <= 0:
        raise ValueError("service_time must be positive")
    return utilization * cores / service_time


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


@dataclass(frozen=True)
class Operator:
    """A NetRS operator: one accelerator attached to one switch."""
    name: str
    switch: str
    slot: int
    tier: int
    pod: int | None
    capacity: float      # T^max_j, requests per second


class FatTree:
    """A k-ary fat tree: k pods, k/2 aggregation and k/2 ToR switches per pod, (k/2)^2 cores,
    k/2 hosts per rack (k^3/4 hosts).

    ``accelerators`` maps switch name -> number of attached accelerators (default: one on every
    switch, as in the paper's evaluation); ``capacity`` is the default ``T^max`` of an operator
    and ``capacities`` overrides it per operator name.
    """

    def __init__(self, k: int, *, accelerators: Mapping[str, int] | None = None,
                 capacity: float | None = None,
                 capacities: Mapping[str, float] | None = None):
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
        cap = accelerator_capacity() if capacity is None else float(capacity)
        capacities = dict(capacities or {})
        self.operators: dict[str, Operator] = {}
        for sw in self.switches.values():
            n = 1 if accelerators is None else int(accelerators.get(sw.name, 0))
            for slot in range(n):
                name = f"{sw.name}/acc{slot}"
                self.operators[name] = Operator(name, sw.name, slot, sw.tier, sw.pod,
                                                float(capacities.get(name, cap)))
        unknown = set(capacities) - set(self.operators)
        if unknown:
            raise ValueError(f"capacities for unknown operators: {sorted(unknown)}")
        self._dist: dict[str, dict[str, int]] = {}

    # -- construction helpers -------------------------------------------------------------
    def _add_switch(self, sw: Switch) -> None:
        self.switches[sw.name] = sw
        self._adj[sw.name] = []

    def _link(self, a: str, b: str) -> None:
        self._adj[a].append(b)
        self._adj[b].append(a)

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

    def operators_of_switch(self, switch: str) -> list[str]:
        return [o.name for o in self.operators.values() if o.switch == switch]

    def neighbors(self, node: str) -> list[str]:
        return list(self._adj[node])

    def links(self) -> Iterable[tuple[str, str]]:
        for a, nbrs in self._adj.items():
            for b in nbrs:
                if a < b:
                    yield a, b

    def tier(self, node: str) -> int:
        """Tier ID of a switch or operator (hosts: the tier of their ToR)."""
        if node in self.operators:
            return self.operators[node].tier
        if node in self.hosts:
            return TOR
        return self.switches[node].tier

    def pod(self, node: str) -> int | None:
        if node in self.operators:
            return self.operators[node].pod
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
        """Number of links on a shortest path (operators are located at their switch)."""
        a = self.operators[a].switch if a in self.operators else a
        b = self.operators[b].switch if b in self.operators else b
        return self.distances_from(b)[a]

    def next_hops(self, node: str, target: str) -> list[str]:
        """Neighbours of ``node`` on a shortest path towards ``target`` (ECMP set, sorted)."""
        target = self.operators[target].switch if target in self.operators else target
        d = self.distances_from(target)
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
