"""NetRS and its paper's baselines (section 6.1) as schemes of the cluster simulator
(:mod:`netstor.cluster`, the ``sim_schemes`` hook), for runs on a k-ary fat tree
(:class:`netstor.cluster.fattree.FatTreeRun`).

Common to all schemes (so the schemes of one repeat see common random numbers): servers
``run.servers`` in name order, replica groups as consistent hashing with equally spaced
servers and replication factor 3 places them (group ``g`` = servers ``g, g+1, g+2`` mod N,
:func:`netstor.offloads.netrs.config.ring_replica_groups`), a key's group ``key_groups`` =
a fixed 64-bit hash of the key mod N (the hot keys land in pseudo-random groups); a request's
key is ``client.keys[i]`` (Zipf ranks), its group follows from it.

* ``clirs`` -- CliRS: C3 at every client as the C3 authors' simulator runs it (``absim``,
  strategy ``expDelay``; floating point): per server an EWMA (weight ``alpha`` = 0.9 on the
  new sample, the first sample taken as is) of the queue ``q`` (the server's report: the
  queue a new request would wait in), the service time ``T`` and ``nw`` = response time - T
  as the client measured them; the client's own outstanding requests ``os``; score
  ``nw + (1 + os * n + q)^3 * T`` with ``n`` = the number of clients; a server not heard from
  yet scores 0; the lowest score wins (ties: ring order). Plain storage GETs to the winner.
* ``clirs-r95`` -- CliRS-R95: CliRS, and when a request has been outstanding longer than the
  95th-percentile expected latency, a redundant copy to the best other replica by the
  client's C3 (Dean and Barroso's hedged request: the percentile of "this class of
  requests", here the last ``window`` latencies of all clients, recomputed every ``refresh``
  replies once there are ``min_samples``); the first reply counts.
* ``oracle`` -- the replica with the least ``(1 + pending) * current mean service time``
  (absim's ``clairvoyant``: the servers' instantaneous queue, in service included, and the
  mean of their current fluctuation interval).
* ``netrs`` -- NetRS: clients send NetRS requests (RGID = the key's group, every replica
  available) to their backup replica of the group (DRS target; never used here); every switch
  runs our data plane, configured with the ``netrs:`` sections
  :func:`netstor.offloads.netrs.config.plan_configs` makes from a replica selection plan
  (placement ``tor``: :func:`.placement.tor_based_plan`; ``ilp``: the ILP of section 3.2;
  ``adp``: Algorithm 1, :func:`.placement.heuristic_plan`), its ports and MACs mapped onto the
  simulator's fat tree (wire port 0 down, 1 up) and its ``rs.forward`` entries kept where a
  request or response goes through them. The RSNode's device selects with the ranking core
  (C3, fixed point; ``n`` = the plan's number of merged RSNodes, ``time_unit_us``, ``ewma``
  per replica group). ``ranking="float"`` is the ablation's reference: a simulator-side
  re-statement of the same C3 (``R + (1 + q + n * os)^3 * T``, the NetRS authors' form that
  the ranking core computes, the same EWMA weight and tie-break) in floating point, with
  unsaturated state, selecting at the same RSNodes in place of the device's first pass; the
  device still does everything else (traffic groups, RSNode ids, forwarding, its own state
  from the responses, the monitor). ``audit=True`` checks every selection of the device:
  the ranking core's reference on the state the pass reads must pick the server that
  answers, and the float C3 on the same state is recorded beside it.

ILP placement: the symmetry-aggregated ILP of :func:`.placement.aggregated_bound` gives a
lower bound and a plan; when they meet (the usual case at the paper's scale, seconds) the
plan is an optimum of the paper's ILP; otherwise :func:`.placement.solve_ilp` from that plan
with a time limit (the result says which). Capacities: the paper's ``T^max`` =
0.25 * 1 core / 5 us = 50 000 req/s per operator, ``E`` = 10 % of the offered rate; traffic
groups per client host, their traffic from the deployment
(:func:`.placement.groups_from_deployment`). ``plan_rate_rps`` plans for another offered rate
than the run's (the RTL replay's short, dense traces: a plan the capacities allow).
"""
from __future__ import annotations

import functools
import math
from collections import defaultdict

import numpy as np

from netstor.cluster.frames import udp_frame
from netstor.cluster.scheme import SimScheme, storage_request
from netstor.cluster.switch import CLOCK_NS, pass_cycles
from netstor.cluster.topology import AGG, CORE, TOR, host_mac as sim_host_mac, switch_mac
from netstor.proto import Op, STORAGE, STORAGE_UDP_PORT

from .codec import NetRSCodec
from .config import device_ports, plan_configs, ring_replica_groups
from .formats import (DEFAULT_EWMA, DEFAULT_UNIT, ewma_shift, ewma_weight, rv_pack,
                      saturation_shares, unit_code, unit_us)
from .header import DRS_RID, M_MON, M_REQ, M_RESP, NETRS_UDP_PORT, SERVERS, RsRequest, f
from .program import GROUPS
from .ranking import C3, Replica, n_code, n_value, rank, rank_c3_float

__all__ = ["SIM_SCHEMES", "CliRS", "CliRS95", "Oracle", "NetRSSim", "key_groups",
           "placement", "GROUP_SALT"]

_ST = STORAGE.struct
_M64 = (1 << 64) - 1
#: the fixed salt of the key -> replica group hash (the same in every run and scheme)
GROUP_SALT = 0x6E657472735F7267


def key_groups(keys, n_groups):
    """Replica group of every key: SplitMix64(key + salt) mod ``n_groups`` (vectorised)."""
    k = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = k + np.uint64(GROUP_SALT)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(n_groups)).astype(np.int64)


class _Groups(SimScheme):
    """Replica groups on a ring of the run's servers; each client's per-request groups."""
    replication = 3

    def setup(self, run):
        super().setup(run)
        n = len(run.servers)
        self.n_servers = n
        self.rgroups = ring_replica_groups(list(range(n)), self.replication)
        self.glist = [self.rgroups[g] for g in range(len(self.rgroups))]
        self.ips = [s.host.ip for s in run.servers]
        self.sim = run.sim
        for c in run.clients:
            c.groups = key_groups(c.keys, len(self.glist)).tolist()


# ---- CliRS ------------------------------------------------------------------------------------

class CliRS(_Groups):
    """C3 at every client, as the C3 authors' simulator (see the module doc)."""
    name = "clirs"
    help = "NetRS paper's CliRS: C3 at every client (absim's expDelay, floating point)"
    options = {"alpha": 0.9, "n": None}

    def setup(self, run):
        super().setup(run)
        self.nc = len(run.clients) if self.n is None else int(self.n)
        self.workers = run.workers
        for c in run.clients:
            # per server: [seen, q, T, nw] and the client's outstanding requests
            c.c3 = [[False, 0.0, 0.0, 0.0] for _ in range(self.n_servers)]
            c.os = [0] * self.n_servers
            c.sent_at = {}
            c.heard = [None] * self.n_servers      # when the client last heard from a server
        self.selections = [0] * self.n_servers
        self.age = [0, 0]                           # summed age (ns) of the candidates' state

    def score(self, client, s):
        st = client.c3[s]
        if not st[0]:
            return 0.0
        theta = 1.0 + client.os[s] * self.nc + st[1]
        return st[3] + theta * theta * theta * st[2]

    def ranked(self, client, group):
        """The group's servers, best first (stable: ring order among equal scores)."""
        return sorted(self.glist[group], key=lambda s: self.score(client, s))

    def pick(self, client, group):
        best, bs = None, None
        now, age, heard = self.sim.now, self.age, client.heard
        for s in self.glist[group]:
            v = self.score(client, s)
            if bs is None or v < bs:
                best, bs = s, v
            if heard[s] is not None:
                age[0] += now - heard[s]
                age[1] += 1
        return best

    def _send_to(self, client, rid, i, s):
        client.os[s] += 1
        client.sent_at[(rid, s)] = self.sim.now
        self.selections[s] += 1
        client.host.send(self.ips[s], self.client_port, STORAGE_UDP_PORT,
                         storage_request(Op.GET, client.keys[i], rid))

    def send(self, client, rid, i):
        self._send_to(client, rid, i, self.pick(client, client.groups[i]))

    def on_reply(self, client, view):
        p = view.payload
        if len(p) < 32 or p[0:2] != b"NS" or not p[3] & 0x80:
            client.stray += 1
            return
        (_m, _v, _op, _st, _fl, sid, rid, qlen, _vl, sns, _k, _seq) = _ST.unpack_from(p)
        s = sid - 1
        t0 = client.sent_at.pop((rid, s), None)
        if t0 is None or not 0 <= s < self.n_servers:
            client.stray += 1
            return
        client.os[s] -= 1
        client.heard[s] = self.sim.now
        resp = self.sim.now - t0
        q = float(max(0, qlen - self.workers))
        t = float(sns)
        nw = float(resp) - t
        st = client.c3[s]
        if not st[0]:
            st[0], st[1], st[2], st[3] = True, q, t, nw
        else:
            a = self.alpha
            st[1] = a * q + (1 - a) * st[1]
            st[2] = a * t + (1 - a) * st[2]
            st[3] = a * nw + (1 - a) * st[3]
        self.completed(client, rid)

    def completed(self, client, rid):
        client.complete(rid)

    def config(self):
        return {"alpha": self.alpha, "n": self.n}

    def result(self, run):
        return {"n": self.nc, "alpha": self.alpha, "selections": self.selections,
                "info_age_ms": round(self.age[0] / max(1, self.age[1]) / 1e6, 3)}


class CliRS95(CliRS):
    """CliRS plus a redundant request after the 95th-percentile latency."""
    name = "clirs-r95"
    help = "NetRS paper's CliRS-R95: CliRS + a hedged request after the p95 latency"
    options = dict(CliRS.options, window=10_000, min_samples=1_000, refresh=500)

    def setup(self, run):
        super().setup(run)
        self.window_ns = []
        self.pos = self.since = 0
        self.p95 = None
        self.hedged = 0

    def send(self, client, rid, i):
        s = self.pick(client, client.groups[i])
        self._send_to(client, rid, i, s)
        if self.p95 is not None:
            self.sim.at(client._arr[i] + self.p95, self._hedge, client, rid, i, s)

    def _hedge(self, client, rid, i, primary):
        if client.latency[i] >= 0:
            return
        others = [s for s in self.ranked(client, client.groups[i]) if s != primary]
        if others:
            self.hedged += 1
            self._send_to(client, rid, i, others[0])

    def completed(self, client, rid):
        if client.complete(rid):
            lat = int(client.latency[(rid - client.offset) // client.stride])
            w = self.window_ns
            if len(w) < self.window:
                w.append(lat)
            else:
                w[self.pos] = lat
                self.pos = (self.pos + 1) % self.window
            self.since += 1
            if len(w) >= self.min_samples and (self.p95 is None or self.since >= self.refresh):
                self.p95 = int(np.percentile(w, 95))
                self.since = 0

    def config(self):
        return dict(super().config(), window=self.window, min_samples=self.min_samples,
                    refresh=self.refresh)

    def result(self, run):
        out = super().result(run)
        out["hedged"] = self.hedged
        out["p95_us"] = None if self.p95 is None else round(self.p95 / 1e3, 1)
        return out


# ---- Oracle ---------------------------------------------------------------------------------------

class Oracle(_Groups):
    """The replica with the least (1 + pending) * current mean service time."""
    name = "oracle"
    help = "NetRS paper's Oracle: instantaneous (1 + queue) * service time of every replica"

    def setup(self, run):
        super().setup(run)
        self.servers = run.servers
        self.service = run.service
        self.selections = [0] * self.n_servers

    def send(self, client, rid, i):
        now = self.sim.now
        best, bs = None, None
        for s in self.glist[client.groups[i]]:
            srv = self.servers[s]
            v = (1 + srv.pending) * self.service.current_mean_ns(srv.index, now)
            if bs is None or v < bs:
                best, bs = s, v
        self.selections[best] += 1
        client.host.send(self.ips[best], self.client_port, STORAGE_UDP_PORT,
                         storage_request(Op.GET, client.keys[i], rid))

    def result(self, run):
        return {"selections": self.selections}


# ---- NetRS ----------------------------------------------------------------------------------------

#: the paper's accelerator (section 6.1): T^max = U * cores / t = 0.25 * 1 / 5 us
ACC_CAPACITY = 50_000.0
#: E = 10 % of the offered rate (section 6.2)
EXTRA_FRACTION = 0.10


@functools.lru_cache(maxsize=32)
def placement(k, clients, servers, rate_rps, how, ilp_time_limit=120.0):
    """``(instance, plan, info)`` for a deployment (tuples of host names): the NetRS fat tree
    with one accelerator per switch (``T^max`` 50 000 req/s), host-level traffic groups from
    the deployment, ``E`` = 10 % of ``rate_rps``; ``how``: tor, ilp or adp."""
    from . import placement as pl
    from .topology import FatTree
    topo = FatTree(k, capacity=ACC_CAPACITY)
    groups = pl.groups_from_deployment(topo, clients, servers, rate_rps / len(clients),
                                       "host")
    inst = pl.Instance(topo, groups, EXTRA_FRACTION * rate_rps)
    info = {"how": how}
    if how == "tor":
        plan = pl.tor_based_plan(inst)
    elif how == "adp":
        plan, placer = pl.heuristic_plan(inst)
        info.update(rounds=placer.round_no, moves=len(placer.moves))
    elif how == "ilp":
        agg = pl.aggregated_bound(inst, time_limit=ilp_time_limit)
        plan = agg.plan if agg.plan is not None and not pl.violations(inst, agg.plan) else None
        info.update(lower_bound=agg.lower_bound, method="aggregated ILP")
        if plan is None or plan.num_rsnodes > agg.lower_bound + 1e-9:
            res = pl.solve_ilp(inst, time_limit=ilp_time_limit, start_plan=plan)
            if res.plan is not None and (plan is None or
                                         res.plan.num_rsnodes < plan.num_rsnodes):
                plan = res.plan
            info.update(method="ILP (HiGHS) from the aggregated plan", status=res.status,
                        bound=res.bound)
        info["proven_optimal"] = plan is not None and plan.num_rsnodes <= \
            info["lower_bound"] + 1e-9
    else:
        raise ValueError(f"placement {how!r}: tor, ilp or adp")
    if plan is None:
        raise RuntimeError(f"no {how} plan for this deployment")
    bad = pl.violations(inst, plan)
    if bad:
        raise RuntimeError(f"{how} plan violates the constraints: {bad[:3]}")
    tiers = defaultdict(int)
    for o in plan.rsnodes:
        tiers[("core", "aggregation", "tor")[topo.operators[o].tier]] += 1
    info.update(rsnodes=plan.num_rsnodes, drs=len(plan.drs), tiers=dict(tiers),
                extra_hops=round(pl.plan_extra(inst, plan), 3), E=inst.E,
                max_load=round(max(pl.plan_loads(inst, plan).values()), 1))
    return inst, plan, info


def _mac(b):
    return ":".join(f"{x:02x}" for x in b)


def _sim_hop(tree, num, dev, nb):
    """``(port, dmac, smac)`` from ``dev`` to its neighbour ``nb`` in the simulator's fat tree
    (wire port 0 faces down, 1 up; :mod:`netstor.cluster.topology`)."""
    if nb in tree.hosts:
        return 0, _mac(sim_host_mac(tree.hosts[nb])), _mac(switch_mac(num[dev], 0))
    if tree.switches[nb].tier > tree.switches[dev].tier:       # nb is below dev
        return 0, _mac(switch_mac(num[nb], 1)), _mac(switch_mac(num[dev], 0))
    return 1, _mac(switch_mac(num[nb], 0)), _mac(switch_mac(num[dev], 1))


def _forward_fits(entries):
    """Whether ``rs.forward`` takes these entries: the device's table is hashed (2 ways), so a
    few keys can collide; the host API's own loader decides (as it would on the card)."""
    from netstor.compiler import config_ops
    from netstor.config import ConfigTableFull
    try:
        config_ops({"netrs": {"forward": entries}})
    except ConfigTableFull:
        return False
    return True


def sim_plan_configs(inst, plan, server_hosts, *, n, time_unit_us, ewma, device_groups=True,
                     max_attempts=64):
    """``({switch: configuration}, info)``: :func:`.config.plan_configs` of the plan (no
    routes: the simulator's fat tree brings its own), its next hops mapped onto the
    simulator's ports and MACs, and ``rs.forward`` entries only where a request or response
    of an RSNode in use passes (``info``: RSNode id and switch per operator in use, the most
    forward entries on one switch, the id attempt). ``device_groups=False``: the RSNodes get
    no replica groups and servers (the float ablation selects outside the device; that way it
    runs with more servers than the device's 1,023 server ids).

    RSNode ids: :func:`.rules.assign_rsnode_ids`; when the forward entries of some device
    collide in its hashed ``rs.forward`` table, the RSNodes in use get other ids (401 and up,
    a deterministic sequence of attempts) until every device takes its entries -- the
    controller is free to number its operators."""
    from .rules import assign_rsnode_ids
    topo = inst.topo
    num = {name: i for i, name in enumerate(topo.switches)}
    base = assign_rsnode_ids(topo)
    rgroups = ring_replica_groups(list(server_hosts)) if device_groups else {}
    members = defaultdict(list)
    for g, o in plan.assignment.items():
        members[o].append(g)
    used = sorted(members, key=lambda o: base[o])
    # where forward entries are needed: from the ToRs of an RSNode's groups (requests) and,
    # for an RSNode above the ToRs, from every server's ToR (responses) up to the RSNode
    need = set()
    server_tors = {topo.hosts[s].tor for s in server_hosts}
    for o in used:
        target = topo.operators[o].switch
        starts = {inst.groups[g].tor for g in members[o]}
        if topo.switches[target].tier != TOR:
            starts |= server_tors
        for s in starts:
            while s != target:
                need.add((s, o))
                s = topo.next_hops(s, target)[0]
    for attempt in range(max_attempts):
        ids = dict(base)
        if attempt:
            for i, o in enumerate(used):
                ids[o] = 401 + (7 * i + 13 * attempt) % 4000
        cfgs = plan_configs(inst, plan, rgroups, algo="c3", n=n, routes=False, ids=ids,
                            time_unit_us=time_unit_us, ewma=ewma)
        wanted = {(dev, ids[o]) for dev, o in need}
        most, fits = 0, True
        for dev, cfg in cfgs.items():
            sec = cfg["netrs"]
            ports = device_ports(topo, dev)
            # trust: the simulator maps every device onto two wire ports (0 down, 1 up), so
            # a ToR's clients and servers share port 0: reports are trusted from both ports
            # (the placement's per-port trust cannot be expressed on two ports)
            cfg["programs"] = {"rs": {"trusted_ports": "any"}}
            if "forward" in sec:
                fw = []
                for e in sec["forward"]:
                    if (dev, e["rsnode"]) in wanted:
                        p, d, sm = _sim_hop(topo, num, dev, ports[e["port"]])
                        fw.append(dict(e, port=p, dmac=d, smac=sm))
                if fw:
                    sec["forward"] = fw
                    most = max(most, len(fw))
                    if len(fw) > 2 and not _forward_fits(fw):
                        fits = False
                else:
                    del sec["forward"]
            if "servers" in sec:
                sec["servers"] = [dict(e, **dict(zip(("port", "mac", "smac"),
                                                     _sim_hop(topo, num, dev,
                                                              ports[e["port"]]))))
                                  for e in sec["servers"]]
        if fits:
            break
    else:
        raise RuntimeError(f"no RSNode numbering in {max_attempts} attempts fits every "
                           "device's rs.forward table")
    info = {"rsnodes": {o: (ids[o], topo.operators[o].switch) for o in used},
            "max_forward_entries": most, "id_attempt": attempt}
    return cfgs, info


class NetRSSim(_Groups):
    """NetRS requests; the switches' data plane selects (see the module doc)."""
    name = "netrs"
    # the busiest switch of a 4-ary fat tree, 1.024 us time units: the response times the RTL
    # stamps (256-cycle ticks) show in the state and the selections
    replay = {"topology": "fattree",
              "scheme_options": {"placement": "tor", "plan_rate_rps": 20_000,
                                 "time_unit_us": 1.024}}
    help = "NetRS: the data plane selects at the RSNodes of a placement (tor, ilp, adp)"
    client_port = NETRS_UDP_PORT
    options = {"placement": "ilp", "ranking": "switch", "audit": False,
               "time_unit_us": unit_us(DEFAULT_UNIT), "ewma": ewma_weight(DEFAULT_EWMA),
               "n": None, "plan_rate_rps": None}

    def __init__(self, **options):
        super().__init__(**options)
        if self.ranking not in ("switch", "float"):
            raise ValueError(f"ranking {self.ranking!r}: switch or float")
        self.codec = NetRSCodec()

    def config(self):
        return {k: getattr(self, k) for k in self.options}

    def switch_config(self, run):
        self.inst, self.plan, self.place_info = placement(
            run.tree.k, tuple(run.client_hosts), tuple(run.server_hosts),
            run.rate_rps if self.plan_rate_rps is None else float(self.plan_rate_rps),
            self.placement)
        self.n_eff = self.plan.num_rsnodes if self.n is None else int(self.n)
        cfgs, self.cfg_info = sim_plan_configs(self.inst, self.plan, run.server_hosts,
                                               n=self.n_eff, time_unit_us=self.time_unit_us,
                                               ewma=self.ewma,
                                               device_groups=self.ranking == "switch")
        self.cfgs = cfgs
        return cfgs

    def setup(self, run):
        super().setup(run)
        self.counts = {"selected": 0, "drs": 0, "other": 0, "stray": 0}
        self.run_ = run
        nr = len(self.glist[0])
        self.head = [RsRequest(rgid=g, avail=(1 << len(m)) - 1).pack()
                     for g, m in enumerate(self.glist)]
        for c in run.clients:       # the backup replica of each group (DRS target)
            c.backup = [m[(c.index + g) % nr] for g, m in enumerate(self.glist)]
        self.float_nodes, self.audits, self.audits_done = [], [], []
        by_switch = {sw: rid for rid, sw in self.cfg_info["rsnodes"].values()}
        for sw, rid in sorted(by_switch.items()):
            node = run.switches[sw]
            if self.ranking == "float":
                self.float_nodes.append(_FloatRSNode(self, node, rid))
            elif self.audit:
                self.audits.append(_Audit(self, node))
        self.audit_log = {}

    def selects_here(self, switch):
        """``f(frame, rid) -> bool``: is a NetRS request (``M_REQ``, RID ``rid``) selected
        at ``switch``? Its RID names one of the switch's RSNodes, or it is 0 (from a client)
        and the switch's traffic-group rule gives such a RID."""
        mine = {r for r, sw in self.cfg_info["rsnodes"].values() if sw == switch}
        tg = {}
        for e in self.cfgs[switch]["netrs"].get("traffic_groups", ()):
            ip = e["prefix"].split("/")[0]
            tg[bytes(int(b) for b in ip.split("."))] = e["rsnode"]

        def here(frame, rid):
            return rid in mine or (rid == 0 and tg.get(bytes(frame[26:30])) in mine)
        return here

    def send(self, client, rid, i):
        g = client.groups[i]
        s = client.backup[g]
        client.host.send(self.ips[s], NETRS_UDP_PORT, NETRS_UDP_PORT,
                         self.head[g] + storage_request(Op.GET, client.keys[i], rid))

    def on_reply(self, client, view):
        split = self.codec.split_reply(view.payload)
        if split is None:
            self.counts["stray"] += 1
            client.stray += 1
            return
        h, body = split
        rid = int.from_bytes(body[8:12], "big")
        if h.rid == DRS_RID:
            self.counts["drs"] += 1
        elif h.mf == M_MON:
            self.counts["selected"] += 1
        else:
            self.counts["other"] += 1
        if self.audit_log:
            a = self.audit_log.pop(rid, None)
            if a is not None:
                a.append(h.ss_sid - 1)
                self.audits_done.append(a)
        client.complete(rid)

    def result(self, run):
        cells = [0] * 8
        noreplica = 0
        for node in run.switches.values():
            m = node.model
            for k in range(8):
                cells[k] += m.mem_read("rs.samples", k)
            noreplica += m.mem_read("rs.noreplica", 0)
        counters = defaultdict(int)
        for node in run.switches.values():
            for k, v in node.counters().items():
                if k.startswith("rs."):
                    counters[k] += v
        out = {"placement": self.place_info,
               "rsnode_switches": sorted(sw for _, sw in self.cfg_info["rsnodes"].values()),
               "max_forward_entries": self.cfg_info["max_forward_entries"],
               "rsnode_id_attempt": self.cfg_info["id_attempt"],
               "n": self.n_eff, "n_code_value": n_value(n_code(self.n_eff)),
               "ranking": self.ranking, "time_unit_us": self.time_unit_us, "ewma": self.ewma,
               "replies": dict(self.counts), "noreplica": noreplica,
               "samples_bank": cells, "saturated": saturation_shares(cells),
               "selections_in_switch": counters.get("rs.servers.hit", 0),
               "counters": dict(sorted(counters.items()))}
        if self.float_nodes:
            age = [sum(x.age[0] for x in self.float_nodes), sum(x.age[1] for x in self.float_nodes)]
            out["float"] = {"selections": sum(x.selections for x in self.float_nodes),
                            "responses": sum(x.responses for x in self.float_nodes),
                            "info_age_ms": round(age[0] / max(1, age[1]) / 1e6, 3)}
        if self.audits:
            done = self.audits_done
            out["audit"] = {"selections": len(done),
                            "reference_equals_device": sum(1 for fx, fl, act in done
                                                           if fx == act),
                            "float_equals_device": sum(1 for fx, fl, act in done
                                                       if fl == act)}
        return out


def _parse_rs(frame):
    """``(payload offset, rid, mf)`` of a NetRS datagram in ``frame`` (else None)."""
    if len(frame) < 42 + 12 or frame[12:14] != b"\x08\x00" or frame[23] != 17 \
            or frame[14] != 0x45:
        return None
    if int.from_bytes(frame[36:38], "big") != NETRS_UDP_PORT:
        return None
    return 42, int.from_bytes(frame[42:44], "big"), int.from_bytes(frame[44:50], "big")


class _Audit:
    """Every selection of the device at one RSNode: the state its first pass reads (the
    ``rs.st<k>`` cells of the group's servers, the group's ``rs.rr`` pointer), the ranking
    core's reference and the float C3 on it; the server that answers is the device's pick."""

    def __init__(self, scheme, node):
        self.scheme, self.node = scheme, node
        self.nc = n_code(scheme.n_eff)
        self.mine = scheme.selects_here(node.name)
        m = node.model
        orig = m.process

        def process(frame, port, arrival=0):
            x = _parse_rs(frame)
            if x is not None and x[2] == M_REQ and self.mine(frame, x[1]):
                o = x[0]
                g = int.from_bytes(frame[o + 12:o + 14], "big")
                if g < len(scheme.glist):
                    sids = [s + 1 for s in scheme.glist[g]]
                    reps = []
                    for k, sid in enumerate(sids):
                        c = m.mem_read(f"rs.st{k}", sid & (SERVERS - 1))
                        reps.append(Replica(q=c & 0xFFFF, os=(c >> 16) & 0xFF,
                                            t=(c >> 24) & 0xFFFF, r=(c >> 40) & 0xFFFF))
                    rr = m.mem_read("rs.rr", g & (GROUPS - 1)) & 7
                    mask = frame[o + 14] & ((1 << len(sids)) - 1)
                    _f, idx, _s = rank(C3, mask, reps, n=self.nc, rr=rr)
                    fl = rank_c3_float(mask, reps, n=self.nc)
                    rid = int.from_bytes(frame[o + 15 + 8:o + 15 + 12], "big")
                    scheme.audit_log[rid] = [sids[idx] - 1, sids[fl] - 1]
            return orig(frame, port, arrival=arrival)
        m.process = process


class _FloatRSNode:
    """The float C3 ablation at one RSNode (see the module doc): a NetRS request for this
    RSNode is selected here in floating point and re-enters the device one pass later as the
    device's second pass would leave it (destination = the chosen server, ``MF = f(M_RESP)``),
    so it is routed to the server after two passes as on the device; a response for this
    RSNode updates the float state and then goes through the device as it is."""

    def __init__(self, scheme, node, rid):
        self.scheme, self.node, self.rid = scheme, node, rid
        self.mine = scheme.selects_here(node.name)
        self.unit, self.ewma_code = unit_code(scheme.time_unit_us), ewma_shift(scheme.ewma)
        self.sim = node.sim
        n = scheme.n_servers
        self.q, self.t, self.r = [0.0] * n, [0.0] * n, [0.0] * n
        self.os = [0] * n
        self.w = float(scheme.ewma)
        self.rr = [0] * len(scheme.glist)
        self.sent = {}
        self.heard = [None] * n          # when this RSNode last learnt about a server
        self.age = [0, 0]
        self.selections = self.responses = 0
        self.orig = node.receive
        node.receive = self.receive

    def receive(self, frame, port):
        x = _parse_rs(frame)
        if x is None:
            return self.orig(frame, port)
        o, rid, mf = x
        if mf == M_REQ and self.mine(frame, rid):
            return self._select(frame, port, o)
        if mf == M_RESP and rid == self.rid:
            self._learn(frame, o)
        return self.orig(frame, port)

    def _select(self, frame, port, o):
        sc = self.scheme
        g = int.from_bytes(frame[o + 12:o + 14], "big")
        avail = frame[o + 14]
        members = sc.glist[g]
        rr = self.rr[g]
        self.rr[g] = rr + 1 if rr + 1 < len(members) else 0
        n = sc.n_eff
        best, key = None, None
        now, heard, age = self.sim.now, self.heard, self.age
        for i, s in enumerate(members):
            if not avail >> i & 1:
                continue
            if heard[s] is not None:
                age[0] += now - heard[s]
                age[1] += 1
            qh = 1.0 + self.q[s] + n * self.os[s]
            k = (self.r[s] + qh * qh * qh * self.t[s], (i - rr) & 7)
            if key is None or k < key:
                best, key = s, k
        if best is None:
            return None
        self.selections += 1
        self.os[best] += 1
        rid = int.from_bytes(frame[o + 15 + 8:o + 15 + 12], "big")
        self.sent[rid] = self.sim.now
        payload = bytearray(frame[o:14 + 20 + int.from_bytes(frame[38:40], "big")])
        payload[0:2] = self.rid.to_bytes(2, "big")
        payload[2:8] = f(M_RESP).to_bytes(6, "big")
        # the RV the device would set (its arrival stamp, the group's unit and weight): the
        # device learns from the response as it would after its own selection
        arrival = (self.sim.now // CLOCK_NS) & 0xFFFF_FFFF
        payload[8:12] = rv_pack(arrival, self.unit, self.ewma_code).to_bytes(4, "big")
        out = udp_frame(frame[0:6], frame[6:12], frame[26:30], sc.ips[best],
                        NETRS_UDP_PORT, NETRS_UDP_PORT, bytes(payload), ttl=frame[22],
                        ident=int.from_bytes(frame[18:20], "big"))
        self.sim.after(pass_cycles(len(frame)) * CLOCK_NS, self.orig, out, port)
        return None

    def _learn(self, frame, o):
        sid = int.from_bytes(frame[o + 18:o + 20], "big") - 1
        if not 0 <= sid < len(self.q):
            return
        q = int.from_bytes(frame[o + 20:o + 22], "big")
        t = int.from_bytes(frame[o + 22:o + 26], "big")
        rid = int.from_bytes(frame[o + 26 + 8:o + 26 + 12], "big")
        t0 = self.sent.pop(rid, None)
        self.responses += 1
        self.heard[sid] = self.sim.now
        self.os[sid] = max(0, self.os[sid] - 1)
        w = self.w
        self.q[sid] += w * (q - self.q[sid])
        self.t[sid] += w * (t - self.t[sid])
        if t0 is not None:
            self.r[sid] += w * ((self.sim.now - t0) - self.r[sid])


SIM_SCHEMES = {s.name: s for s in (CliRS, CliRS95, Oracle, NetRSSim)}
