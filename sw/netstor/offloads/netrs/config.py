"""NetRS configuration: the ``netrs:`` section of the netstor config format, and a replica
selection plan turned into one such configuration per device.

The section (registered with :func:`netstor.config.register_section`; ``netstor apply`` and
the controller install it) describes what one device holds, in NetRS terms, and expands into
the data plane's tables and banks (``netstor.offloads.netrs.program``)::

    netrs:
      marker: {pod: 0, rack: 1}            # rs.marker cell 0 = pod << 16 | rack (or an int)
      rsnodes: [5]                         # rs.local: the RSNode ids this device owns
      traffic_groups:                      # rs.tgroups (ToR): client prefix -> RSNode, tg
        - {prefix: 10.77.0.0/24, tg: 0, rsnode: 5}
        - {prefix: 10.77.0.9/32, tg: 1, rsnode: drs}     # DRS: rid 0xFFFF
      forward:                             # rs.forward: RSNodes elsewhere, next hop
        - {rsnode: 9, port: 2, dmac: "02:4e:52:00:03:00", smac: "02:4e:52:00:01:02"}
      servers:                             # rs.servers: server id (< 1024) -> address, way
        - {id: 1, ip: 10.77.1.10, mac: "02:4e:53:00:01:00", smac: "02:4e:53:ff:00:01", port: 1}
      replica_groups:                      # rs.rgroups: group id -> up to 8 server ids
        - {id: 0, servers: [1, 2, 3], algo: c3, n: 1}    # algo c3|lor|p2c|rr (default c3)
        - {id: 1, servers: [4, 5, 6], n: 500, time_unit_us: 262.144, ewma: 1/16}

Replica group settings (defaults in brackets):

* ``algo`` [c3]; ``n`` [1]: C3's multiplier of the outstanding requests (the number of
  independent selectors), 0..31744, carried as an 8-bit code: exact up to 127, beyond that
  the nearest of 16 values per octave (within 3.1 %; ``ranking.n_code``);
* ``time_unit_us`` [65.536]: the unit of the group's service and response times in the
  state (UQ12.4: up to 4095.94 units, then saturated): ``1.024 * 2^u`` us, u = 0..12
  (1.024 us .. 4194.304 us). The default fits the paper's 4 ms service times with a 10x
  fluctuation (means up to 40 ms) with room: it saturates at 268 ms
  (:func:`netstor.offloads.netrs.formats.unit_for` gives the finest unit for a limit);
* ``ewma`` [1/8]: the weight of a new sample in the EWMAs of q, t and r, ``2^-w``, w = 0..7
  (a number or a string like ``"1/8"``).

The state is per server, so two groups of one section that share a server must have the
same ``time_unit_us`` and ``ewma`` (an error names both groups and the server).

Every key is optional; the listed tables are replaced (entries not listed are removed), like
a ``tables:`` entry with ``replace: true``. Errors name the place (``netrs.servers[1]: ...``)
and nothing is written (the whole configuration is one batch).

:func:`plan_configs` turns a plan of :mod:`netstor.offloads.netrs.placement` on a
:class:`netstor.offloads.netrs.topology.FatTree` into ``{switch: config}``: the ``netrs:`` section
of each device (ToRs: traffic groups with the plan's RSNode id or DRS, the source marker;
operators' switches: their RSNode ids; switches on the way to an RSNode in use: a forward
entry to the next hop; RSNodes in use: replica groups and the way to every server) plus
``l3.routes`` (host /32s of the rack, rack /24s of the pod, pod /16s). Ports of a device are
numbered by :func:`device_ports` (ToR: its hosts first, so host index 1 is wire port 1, the
data plane's ``SERVER_PORT``; then the aggregation switches; others: sorted neighbours); MACs
by :func:`port_mac` / :func:`host_mac`. Where the fat tree has several shortest next hops the
lowest-named one is used (the tables hold one next hop). Each configuration also trusts
NetRS reports (``programs.rs.trusted_ports``) from every port of the device but those facing
a client host.

Limits of the data plane seen from here (reported, not hidden): responses are routed by
``l3.routes`` (only requests follow ``rs.forward``), so a response passes its RSNode only when
that RSNode is on the routed server-to-client path (ToR RSNodes always are; a higher one
only if the routes happen to go through it); and the source marker is written on responses
that enter a device on wire port 1 whatever the device's tier.
"""
from __future__ import annotations

import ipaddress
from collections import defaultdict

from netstor.offloads.netrs.formats import (DEFAULT_EWMA, DEFAULT_UNIT, ewma_shift, ewma_weight,
                                           unit_code, unit_us)
from netstor.offloads.netrs.program import DRS_RID, NR, SERVERS, TGROUPS
from netstor.offloads.netrs.ranking import N_MAX, n_code

__all__ = ["expand_section", "apply_section", "plan_configs", "device_ports", "port_mac",
           "host_mac", "ALGOS", "server_ids", "ring_replica_groups", "DEFAULT_TIME_UNIT_US",
           "DEFAULT_EWMA_WEIGHT", "group_settings"]

ALGOS = {"c3": 0, "lor": 1, "p2c": 2, "rr": 3}
DEFAULT_TIME_UNIT_US = unit_us(DEFAULT_UNIT)        # 65.536
DEFAULT_EWMA_WEIGHT = ewma_weight(DEFAULT_EWMA)     # 0.125
_KEYS = {"marker", "rsnodes", "traffic_groups", "forward", "servers", "replica_groups"}


def _err(where, msg):
    from netstor.config import ConfigError
    return ConfigError(f"{where}: {msg}")


def _list(where, v):
    if not isinstance(v, list):
        raise _err(where, f"expected a list, got {type(v).__name__}")
    return v


def _map(where, v, need=(), allowed=()):
    if not isinstance(v, dict):
        raise _err(where, f"expected a mapping, got {type(v).__name__}")
    missing = [k for k in need if k not in v]
    if missing:
        raise _err(where, f"missing {missing}")
    unknown = set(v) - set(need) - set(allowed)
    if unknown:
        raise _err(where, f"unknown field(s) {sorted(unknown)}")
    return v


def _int(where, v, lo, hi):
    if isinstance(v, float):        # int() would truncate 2.7 to 2
        raise _err(where, f"{v!r} is not an integer")
    try:
        x = int(v, 0) if isinstance(v, str) else int(v)
    except (TypeError, ValueError):
        raise _err(where, f"{v!r} is not an integer") from None
    if isinstance(v, bool) or not lo <= x <= hi:
        raise _err(where, f"{x} is out of range {lo}..{hi}")
    return x


def _rsnode(where, v):
    if v == "drs":
        return DRS_RID
    return _int(where, v, 1, 0xFFFE)


def expand_section(value):
    """The ``netrs:`` section -> ``{"tables": {...}, "banks": {...}}`` in the netstor config
    format (raises :class:`netstor.config.ConfigError`)."""
    sec = _map("netrs", value, allowed=_KEYS)
    tables, banks = {}, {}
    if "marker" in sec:
        m = sec["marker"]
        if isinstance(m, dict):
            _map("netrs.marker", m, need=("pod", "rack"))
            m = (_int("netrs.marker.pod", m["pod"], 0, 0xFFFF) << 16) | \
                _int("netrs.marker.rack", m["rack"], 0, 0xFFFF)
        else:
            m = _int("netrs.marker", m, 0, 0xFFFF_FFFF)
        banks["rs.marker"] = {0: m}
    if "rsnodes" in sec:
        ids = [_rsnode(f"netrs.rsnodes[{i}]", r)
               for i, r in enumerate(_list("netrs.rsnodes", sec["rsnodes"]))]
        if DRS_RID in ids:
            raise _err("netrs.rsnodes", "'drs' is not an RSNode a device can own")
        tables["rs.local"] = {"entries": [{"key": r, "action": "local"} for r in ids]}
    if "traffic_groups" in sec:
        ents = []
        for i, e in enumerate(_list("netrs.traffic_groups", sec["traffic_groups"])):
            w = f"netrs.traffic_groups[{i}]"
            _map(w, e, need=("prefix", "rsnode"), allowed=("tg",))
            try:
                net = ipaddress.IPv4Network(str(e["prefix"]))
            except ValueError as x:
                raise _err(f"{w}.prefix", str(x)) from None
            ents.append({"prefix": str(net), "action": "rsnode",
                         "params": {"rid": _rsnode(f"{w}.rsnode", e["rsnode"]),
                                    "tg": _int(f"{w}.tg", e.get("tg", 0), 0, TGROUPS - 1)}})
        tables["rs.tgroups"] = {"entries": ents}
    if "forward" in sec:
        ents = []
        for i, e in enumerate(_list("netrs.forward", sec["forward"])):
            w = f"netrs.forward[{i}]"
            _map(w, e, need=("rsnode", "port", "dmac", "smac"))
            ents.append({"key": _rsnode(f"{w}.rsnode", e["rsnode"]), "action": "forward",
                         "params": {"port": e["port"], "dmac": e["dmac"], "smac": e["smac"]}})
        tables["rs.forward"] = {"entries": ents}
    if "servers" in sec:
        ents = []
        for i, e in enumerate(_list("netrs.servers", sec["servers"])):
            w = f"netrs.servers[{i}]"
            _map(w, e, need=("id", "ip", "mac", "smac", "port"))
            ents.append({"key": _int(f"{w}.id", e["id"], 0, SERVERS - 1), "action": "server",
                         "params": {k: e[k] for k in ("ip", "mac", "smac", "port")}})
        tables["rs.servers"] = {"entries": ents}
    if "replica_groups" in sec:
        ents = []
        owner = {}                       # server id -> (entry index, group id, unit, ewma)
        for i, e in enumerate(_list("netrs.replica_groups", sec["replica_groups"])):
            w = f"netrs.replica_groups[{i}]"
            _map(w, e, need=("id", "servers"), allowed=("algo", "n", "time_unit_us", "ewma"))
            gid = _int(f"{w}.id", e["id"], 0, 0xFFFF)
            sids = [_int(f"{w}.servers[{k}]", s, 0, SERVERS - 1)
                    for k, s in enumerate(_list(f"{w}.servers", e["servers"]))]
            if not 1 <= len(sids) <= NR:
                raise _err(f"{w}.servers", f"{len(sids)} servers (1..{NR})")
            algo = e.get("algo", "c3")
            if algo not in ALGOS:
                raise _err(f"{w}.algo", f"{algo!r} is not one of {sorted(ALGOS)}")
            unit, ew = group_settings(w, e)
            for s in sids:
                if s in owner and owner[s][2:] != (unit, ew):
                    j, other, u2, w2 = owner[s]
                    raise _err(w, f"server {s} is also in group {other} "
                                  f"(netrs.replica_groups[{j}]) with time_unit_us "
                                  f"{unit_us(u2):g} and ewma 1/{1 << w2}, here "
                                  f"{unit_us(unit):g} and 1/{1 << ew}: the groups of a server "
                                  "share its state, so they need the same unit and weight")
                owner.setdefault(s, (i, gid, unit, ew))
            params = {"algo": ALGOS[algo],
                      "n": n_code(_int(f"{w}.n", e.get("n", 1), 0, N_MAX)),
                      "mask": (1 << len(sids)) - 1, "unit": unit, "ewma": ew}
            params.update({f"s{k}": (sids[k] if k < len(sids) else 0) for k in range(NR)})
            ents.append({"key": gid, "action": "replicas", "params": params})
        tables["rs.rgroups"] = {"entries": ents}
    return {"tables": tables, "banks": banks}


def group_settings(where, e):
    """``(unit code, EWMA shift)`` of a replica group entry (defaults 65.536 us, 1/8)."""
    try:
        unit = unit_code(e.get("time_unit_us", DEFAULT_TIME_UNIT_US))
    except ValueError as x:
        raise _err(f"{where}.time_unit_us", str(x)) from None
    try:
        ew = ewma_shift(e.get("ewma", DEFAULT_EWMA_WEIGHT))
    except ValueError as x:
        raise _err(f"{where}.ewma", str(x)) from None
    return unit, ew


def apply_section(dev, value, dry_run=False):
    """The ``netrs:`` section handler (inside :func:`netstor.config.apply_config`'s batch)."""
    from netstor.config import ConfigError, _apply_table
    exp = expand_section(value)
    for name, spec in exp["tables"].items():
        where = f"netrs ({name})"
        try:
            _apply_table(dev, name, spec, where)
        except ConfigError:
            raise
        except (KeyError, ValueError, TypeError) as e:
            raise ConfigError(f"{where}: {e.args[0] if e.args else e}") from None
    for name, cells in exp["banks"].items():
        for idx, v in cells.items():
            dev.bank(name).write(idx, v)


# ---- plan -> per-device configurations ---------------------------------------------------------

def device_ports(topo, switch):
    """Wire port ``i`` of ``switch`` faces ``device_ports(topo, switch)[i]``."""
    nb = topo.neighbors(switch)
    hosts = sorted(n for n in nb if n in topo.hosts)
    return hosts + sorted(n for n in nb if n not in topo.hosts)


def _index(topo):
    return {s: i for i, s in enumerate(sorted(topo.switches))}


def port_mac(topo, switch, port):
    """The MAC of ``switch``'s wire port ``port``: 02:4e:52:<switch index>:<port>."""
    return f"02:4e:52:{_index(topo)[switch] >> 8 & 0xFF:02x}:{_index(topo)[switch] & 0xFF:02x}:" \
           f"{port:02x}"


def host_mac(topo, host):
    h = topo.hosts[host]
    return f"02:4e:48:{h.pod:02x}:{h.rack:02x}:{h.index:02x}"


def _hop(topo, dev, target):
    """``(port, dmac, smac)`` from ``dev`` one hop towards ``target`` (host or switch)."""
    nxt = topo.next_hops(dev, target)[0]
    ports = device_ports(topo, dev)
    port = ports.index(nxt)
    if nxt in topo.hosts:
        dmac = host_mac(topo, nxt)
    else:
        dmac = port_mac(topo, nxt, device_ports(topo, nxt).index(dev))
    return port, dmac, port_mac(topo, dev, port)


def server_ids(servers):
    """Server host -> NetRS server id (1.. in name order; ids must stay below ``SERVERS`` =
    1,024, so up to 1,023 servers; id 0 is left to a storage agent's default id)."""
    ids = {s: i + 1 for i, s in enumerate(sorted(servers))}
    if len(ids) >= SERVERS:
        raise ValueError(f"{len(ids)} servers: NetRS server ids are below {SERVERS}")
    return ids


def ring_replica_groups(servers, r=3):
    """Replica groups as consistent hashing with replication factor ``r`` places them: group
    ``g`` = servers ``g .. g+r-1`` (mod n) of the name-sorted list."""
    s = sorted(servers)
    r = min(r, len(s))
    return {g: [s[(g + i) % len(s)] for i in range(r)] for g in range(len(s))}


def _routes(topo, dev):
    sw = topo.switches[dev]
    pods = sorted({h.pod for h in topo.hosts.values()})
    ents = []

    def route(prefix, host):
        port, dmac, smac = _hop(topo, dev, host)
        ents.append({"prefix": prefix, "action": "route",
                     "params": {"port": port, "dmac": dmac, "smac": smac}})
    by_rack = defaultdict(list)
    for h in sorted(topo.hosts.values(), key=lambda h: h.name):
        by_rack[(h.pod, h.rack)].append(h)
    for (pod, rack), hs in sorted(by_rack.items()):
        if sw.pod == pod and hs[0].tor == dev:
            for h in hs:
                route(f"{h.ip}/32", h.name)
        elif sw.pod == pod:
            route(f"10.{pod}.{rack}.0/24", hs[0].name)
    for pod in pods:
        if pod != sw.pod:
            first = next(h for h in sorted(topo.hosts.values(), key=lambda h: h.name)
                         if h.pod == pod)
            route(f"10.{pod}.0.0/16", first.name)
    return ents


def plan_configs(inst, plan, replica_groups=None, *, algo="c3", n=1, routes=True, ids=None,
                 time_unit_us=DEFAULT_TIME_UNIT_US, ewma=DEFAULT_EWMA_WEIGHT):
    """``{switch: config}`` realising ``plan`` (see the module doc). ``replica_groups``:
    ``{group id: [server host, ...]}`` (default: :func:`ring_replica_groups` of every host
    that is not in a traffic group); ``ids``: operator -> RSNode id (default
    :func:`netstor.offloads.netrs.rules.assign_rsnode_ids`); ``algo``, ``n``,
    ``time_unit_us``, ``ewma``: every replica group's settings (module doc)."""
    from .rules import assign_rsnode_ids
    topo = inst.topo
    ids = dict(assign_rsnode_ids(topo) if ids is None else ids)
    if replica_groups is None:
        clients = {h for g in inst.groups.values() for h in g.hosts}
        replica_groups = ring_replica_groups([h for h in topo.hosts if h not in clients])
    servers = sorted({s for g in replica_groups.values() for s in g})
    sid = server_ids(servers)
    secs = {s: {} for s in topo.switches}
    # RSNode ids owned (live operators)
    for o in sorted(topo.operators.values(), key=lambda o: ids[o.name]):
        if o.name not in inst.failed:
            secs[o.switch].setdefault("rsnodes", []).append(ids[o.name])
    # ToRs: traffic groups (tg = position among the ToR's groups), marker
    by_tor = defaultdict(list)
    for g, grp in inst.groups.items():
        by_tor[grp.tor].append(g)
    for tor in sorted(topo.tors):
        sw = topo.switches[tor]
        secs[tor]["marker"] = {"pod": sw.pod, "rack": sw.index}
        gs = sorted(by_tor.get(tor, []))
        if len(gs) > TGROUPS:
            raise ValueError(f"{tor}: {len(gs)} traffic groups (the monitor counts "
                             f"{TGROUPS})")
        tg_ents = []
        for tg, g in enumerate(gs):
            rid = ids[plan.assignment[g]] if g in plan.assignment else "drs"
            for h in inst.groups[g].hosts:
                tg_ents.append({"prefix": f"{topo.hosts[h].ip}/32", "tg": tg, "rsnode": rid})
        secs[tor]["traffic_groups"] = tg_ents
    # forwarding towards every RSNode in use; replica groups and servers at the RSNodes
    used = sorted({plan.assignment[g] for g in plan.assignment}, key=lambda o: ids[o])
    for o in used:
        target = topo.operators[o].switch
        for s in sorted(topo.switches):
            if s == target:
                continue
            port, dmac, smac = _hop(topo, s, target)
            secs[s].setdefault("forward", []).append(
                {"rsnode": ids[o], "port": port, "dmac": dmac, "smac": smac})
    for dev in sorted({topo.operators[o].switch for o in used}):
        secs[dev]["replica_groups"] = [
            {"id": g, "servers": [sid[s] for s in members], "algo": algo, "n": n,
             "time_unit_us": time_unit_us, "ewma": ewma}
            for g, members in sorted(replica_groups.items())]
        ents = []
        for s in servers:
            port, dmac, smac = _hop(topo, dev, s)
            ents.append({"id": sid[s], "ip": topo.hosts[s].ip, "mac": dmac, "smac": smac,
                         "port": port})
        secs[dev]["servers"] = ents
    clients = {h for g in inst.groups.values() for h in g.hosts}
    out = {}
    for dev in sorted(topo.switches):
        # trust: reports (responses, monitor packets) from every port but those facing a
        # client host (servers and other switches report; clients only send requests)
        cfg = {"netrs": secs[dev],
               "programs": {"rs": {"trusted_ports": [
                   i for i, nb in enumerate(device_ports(topo, dev)) if nb not in clients]}}}
        if routes:
            cfg["tables"] = {"l3.routes": {"default": {"action": "drop"},
                                           "entries": _routes(topo, dev)}}
        out[dev] = cfg
    return out


# ---- a test-bed rack -----------------------------------------------------------------------------

RACK_RSNODE = 1


def rack_config(hosts, clients, servers, *, groups=None, algo="c3", n=1, rsnode=RACK_RSNODE,
                time_unit_us=DEFAULT_TIME_UNIT_US, ewma=DEFAULT_EWMA_WEIGHT):
    """The configuration that runs NetRS on a test-bed rack (:class:`netstor.testbed.rack.Rack`):
    the switch is the ToR and the only RSNode (id ``rsnode``): the clients' /24 is one traffic
    group, server ``rack.servers[k]`` is NetRS server ``k + 1``, replica groups are
    ``groups`` (lists of indexes into ``servers``; default: 3 consecutive servers on a ring,
    as :func:`netstor.offloads.netrs.schemes.parse_replica_groups` makes them), plus the rack's /32
    routes (responses and requests after selection are routed); every group with ``algo``,
    ``n``, ``time_unit_us`` and ``ewma``. Returns ``(config, groups)``.
    """
    from netstor.testbed import netns
    from netstor.testbed.rack import port_mac, route_config
    from netstor.offloads.netrs.schemes import parse_replica_groups
    servers, clients = list(servers), list(clients)
    groups = parse_replica_groups(groups, len(servers))
    if len(servers) >= SERVERS:
        raise ValueError(f"{len(servers)} servers: NetRS server ids are below {SERVERS}")
    cfg = route_config(list(hosts))
    seg = clients[0].segment
    # trust: responses and monitor packets only from the servers' wire ports
    cfg["programs"] = {"rs": {"trusted_ports": sorted({h.segment for h in servers})}}
    cfg["netrs"] = {
        "marker": {"pod": 0, "rack": 0},
        "rsnodes": [rsnode],
        "traffic_groups": [{"prefix": f"{c.ip}/32", "tg": 0, "rsnode": rsnode}
                           for c in clients if c.segment == seg],
        "servers": [{"id": k + 1, "ip": h.ip, "mac": h.mac_str,
                     "smac": netns.mac_str(port_mac(h.segment)), "port": h.segment}
                    for k, h in enumerate(servers)],
        "replica_groups": [{"id": g, "servers": [k + 1 for k in members], "algo": algo,
                            "n": n, "time_unit_us": time_unit_us, "ewma": ewma}
                           for g, members in enumerate(groups)],
    }
    return cfg, groups
