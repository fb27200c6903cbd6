"""The ``nice:`` configuration section: vrings, storage nodes, partitions, subgroups,
divisions and membership (``docs/nice.md``, "Configuration"); and the pure function from a
ring state to the switch's table entries and copy lists (:func:`entries`), which the metadata
service (:mod:`.metadata`), the test bed and the simulator reuse.

::

    nice:
      smac: "02:00:00:00:ff:01"        # the switch's MAC (source of rewritten packets)
      mcast_base: 1024                 # copy-list group of partition p: mcast_base + p
      unicast: 10.10.0.0/16            # the unicast vring (gets)       default 10.10.0.0/16
      multicast: 10.11.0.0/16          # the multicast vring (puts, TS) default 10.11.0.0/16
      subgroup: 24                     # subgroup prefix length, both rings (default 24)
      nodes:                           # node id (0..nodes-1) -> addresses
        0: {ip: 10.0.1.1, mac: "02:00:00:00:01:01", port: 1}          # udp: default 7470
        1: {ip: 10.0.1.2, mac: "02:00:00:00:01:02", port: 1, udp: 7471}
      partitions:                      # partition id 0..P-1 -> replica set, primary first
        0: [0, 1, 2]
      subgroups: {0: 0, 1: 0}          # optional subgroup -> partition; default: all of them,
                                       # contiguous (header.default_partition)
      clients: [10.0.0.0/24]           # optional: the client space cut into divisions
      divisions:                       # optional, per partition, instead of the computed ones
        0: [[10.0.0.0/25, 1], [10.0.0.128/25, 2]]
      down: [2]                        # failed nodes: in no mapping at all
      joining: [3]                     # rejoin phase 1: in the put sets, not in the get ring
      handoff: {0: {2: 5}}             # partition -> {failed or rejoining member: handoff}
      pending: {0: [6]}                # partition -> members being added (ring
                                       # reconfiguration): put set only until caught up

Membership rules (per partition ``p``, members in order, primary first):

* a node is **live** when it is neither ``down`` nor ``joining``; a ``pending`` member of
  ``p`` (being added to its replica set) counts for ``p`` as a joining one;
* the **primary** is the first live member (the metadata service promotes a secondary by
  reordering the members); a partition without a live member is unavailable: none of its
  subgroups is mapped (its packets are dropped and counted);
* the **get set**: each member in order if live, else its handoff if it has a live one;
* the **put set** (the copy list): each member in order if not down (live or joining), and
  after it its handoff if it has a live one (a joining member keeps its handoff in both rings
  until rejoin phase 2 removes the handoff);
* a ``down`` node is in no mapping: no subgroup, division or copy list names it, and its
  ``nice.nodes`` / ``nice.copies`` entries are removed.

Divisions (get load balancing): for each client prefix ``a/n`` and each partition with ``k``
nodes in its get set: ``m = ceil(log2 k)`` bits more cut ``a/n`` into ``2**m`` pieces; the
first ``2**m - k`` nodes (the get set rotated by ``p mod k``, so that the larger share moves
around the ring) take two pieces (one prefix of length ``n + m - 1``), the others one
(``n + m``): ``k`` entries per partition per client prefix, ``R`` at full strength -- the
paper's ``(R + 1) N`` entries with the subgroup entries. A client outside every division goes
to the primary.

Entries (:func:`entries`, ``(table, match, action, params)``; ``match`` is the key list of an
exact table or ``(prefix, length)`` of an LPM table):

* ``nice.rings``: ``(ring base, prefix) -> ring(kind)`` for both rings (1 unicast, 2 multicast);
* ``nice.unicast``: per mapped subgroup ``s`` of an available partition ``p``: ``(unicast
  subgroup s) -> primary(part=p, node=primary(p))``;
* ``nice.multicast``: ``(multicast subgroup s) -> replicate(part=p, mcast=mcast_base + p)``;
* ``nice.divisions``: ``(p << 32 | a, 16 + len) -> replica(node)``;
* ``nice.nodes`` / ``nice.copies``: per node not down: ``[node] -> node(ip, mac, smac, port,
  dport)`` / ``copy(ip, mac, smac, dport)``;

and copy lists ``mcast_base + p -> [(port, node), ...]`` (the put set).

:func:`parse` validates a section into a :class:`RingState`; :func:`entries` is the pure
function; :func:`diff` gives what changes between two plans (the metadata service writes only
that); :func:`apply_section` writes a section through a :class:`netstor.api.Device`;
:func:`model_writes` gives the memory writes for a golden model.
"""
from __future__ import annotations

import copy as _copy
import ipaddress
from dataclasses import dataclass, field

from netstor.config import write_plan

from .header import (MAX_NODES, MAX_REPLICAS, MULTICAST, NICE_UDP_PORT, RING_MULTICAST,
                     RING_UNICAST, UNICAST, Ring, default_partition)

__all__ = ["RingState", "Plan", "parse", "entries", "plan", "diff", "apply_plan", "apply_section",
           "model_writes", "model_apply", "DEFAULT_MCAST_BASE", "divide", "MAX_COPIES",
           "section_of", "check_put_sets"]

DEFAULT_MCAST_BASE = 1024
MAX_COPIES = MAX_REPLICAS           # copies of one copy list (the replication engine's 16)
_KEYS = {"smac", "mcast_base", "unicast", "multicast", "subgroup", "nodes", "partitions",
         "subgroups", "clients", "divisions", "down", "joining", "handoff", "pending"}
_NODE_KEYS = {"ip", "mac", "port", "udp"}


def _err(msg):
    return ValueError(f"nice: {msg}")


def _mac(v, where):
    try:
        m = v if isinstance(v, int) and not isinstance(v, bool) else \
            int(str(v).replace(":", "").replace("-", ""), 16)
    except ValueError:
        raise _err(f"{where}: {v!r} is not a MAC address") from None
    if not 0 <= m < 1 << 48:
        raise _err(f"{where}: MAC out of range")
    return m


def _ip(v, where):
    try:
        return v if isinstance(v, int) and not isinstance(v, bool) else \
            int(ipaddress.IPv4Address(str(v)))
    except ValueError:
        raise _err(f"{where}: {v!r} is not an IPv4 address") from None


def _prefix(v, where):
    """``(addr, len)`` of ``"a.b.c.d/n"`` or ``(addr, n)``; host bits must be 0."""
    try:
        if isinstance(v, str):
            net = ipaddress.IPv4Network(v, strict=True)
            return int(net.network_address), net.prefixlen
        a, n = v
        net = ipaddress.IPv4Network((_ip(a, where), int(n)), strict=True)
        return int(net.network_address), net.prefixlen
    except (TypeError, ValueError) as e:
        raise _err(f"{where}: {v!r} is not a prefix ({e})") from None


def _int(v, where, lo, hi):
    if isinstance(v, bool):
        raise _err(f"{where}: {v!r} is not a number")
    try:
        x = int(v)
    except (TypeError, ValueError):
        raise _err(f"{where}: {v!r} is not a number") from None
    if not lo <= x <= hi:
        raise _err(f"{where}: {x} out of range {lo}..{hi}")
    return x


@dataclass
class RingState:
    """What the metadata service knows: the section, parsed. Mutable (the metadata service
    changes ``partitions``, ``down``, ``joining``, ``handoff``); :func:`entries` reads it."""
    nodes: dict                                     # node -> {"ip", "mac", "port", "udp"}
    partitions: dict                                # p -> [node, ...] primary first
    subgroups: dict                                 # s -> p
    unicast: Ring = UNICAST
    multicast: Ring = MULTICAST
    smac: int = 0
    mcast_base: int = DEFAULT_MCAST_BASE
    clients: list = field(default_factory=list)     # [(addr, len)]
    divisions: dict = field(default_factory=dict)   # p -> [(addr, len, node)] (explicit)
    down: set = field(default_factory=set)
    joining: set = field(default_factory=set)
    handoff: dict = field(default_factory=dict)     # p -> {member: handoff node}
    pending: dict = field(default_factory=dict)     # p -> {node, ...} being added to p

    def copy(self):
        return _copy.deepcopy(self)

    def live(self, n, p=None):
        """``n`` serves gets (of partition ``p``: not pending there)."""
        return (n in self.nodes and n not in self.down and n not in self.joining
                and (p is None or n not in self.pending.get(p, ())))

    def primary(self, p):
        """The partition's primary (first live member) or None (unavailable)."""
        return next((m for m in self.partitions[p] if self.live(m, p)), None)

    def _handoff(self, p, m):
        h = self.handoff.get(p, {}).get(m)
        return h if h is not None and self.live(h) else None

    def get_set(self, p):
        """Nodes that serve gets of ``p``, in member order (handoffs in their member's place)."""
        out = []
        for m in self.partitions[p]:
            n = m if self.live(m, p) else self._handoff(p, m)
            if n is not None and n not in out:
                out.append(n)
        return out

    def put_set(self, p):
        """Nodes that get every put / TS copy of ``p`` (the copy list), in order."""
        out = []
        for m in self.partitions[p]:
            if m not in self.down and m not in out:
                out.append(m)
            h = self._handoff(p, m) if not self.live(m, p) else None
            if h is not None and h not in out:
                out.append(h)
        return out

    def divisions_of(self, p):
        """``[(addr, len, node)]``: the divisions of partition ``p`` (see the module doc)."""
        if p in self.divisions:
            out = []
            for a, n, node in self.divisions[p]:
                if not self.live(node, p):
                    node = self._handoff(p, node)
                if node is not None:
                    out.append((a, n, node))
            return out
        g = self.get_set(p)
        out = []
        for a, n in self.clients:
            out += divide(a, n, g, p)
        return out


def divide(addr, plen, nodes, rotate=0):
    """Cut the client prefix ``addr/plen`` among ``nodes`` (list): ``[(addr, len, node)]``,
    one power-of-two-aligned prefix per node, covering ``addr/plen`` exactly (see the module
    doc; ``rotate``: the first node to take a double share is ``nodes[rotate % k]``). A
    prefix with fewer addresses than nodes gives one address to each of the first ones."""
    k = len(nodes)
    if k == 0:
        return []
    r = rotate % k
    order = list(nodes[r:]) + list(nodes[:r])
    if k > 1 << (32 - plen):               # a client space smaller than the get set: the
        k = 1 << (32 - plen)               # first nodes of the rotation take one address each
        order = order[:k]
    m = (k - 1).bit_length()
    double = (1 << m) - k
    piece = 1 << (32 - plen - m)
    out, off = [], 0
    for i, node in enumerate(order):
        if i < double:
            out.append((addr + off * piece, plen + m - 1, node))
            off += 2
        else:
            out.append((addr + off * piece, plen + m, node))
            off += 1
    assert off == 1 << m
    return out


@dataclass
class Plan:
    """A ring state's switch state: ``entries`` ``{(table, match): (action, params)}`` and
    ``mcast`` ``{group: [(port, rid)]}`` (only the partitions' groups)."""
    entries: dict
    mcast: dict

    def rows(self):
        """``[(table, match, action, params)]`` in a stable order."""
        return [(t, m, a, p) for (t, m), (a, p) in self.entries.items()]

    def table(self, name):
        """``{match: (action, params)}`` of one table."""
        return {m: v for (t, m), v in self.entries.items() if t == name}


def parse(value, *, nodes_max=MAX_NODES, mcast_groups=4096, n_ports=2,
          subgroups_max=None) -> RingState:
    """Validate a ``nice:`` section into a :class:`RingState`. ``nodes_max`` (``nice.nodes``
    entries), ``mcast_groups``, ``n_ports`` and ``subgroups_max`` (slots of
    ``nice.unicast``) bound what is accepted."""
    if not isinstance(value, dict):
        raise _err("expected a mapping")
    unknown = set(value) - _KEYS
    if unknown:
        raise _err(f"unknown key(s) {sorted(unknown)}")
    smac = _mac(value.get("smac", 0), "smac")
    sub = _int(value.get("subgroup", UNICAST.sub), "subgroup", 1, 32)
    rings = {}
    for name, dflt in (("unicast", UNICAST), ("multicast", MULTICAST)):
        v = value.get(name)
        a, n = (dflt.base, dflt.prefix) if v is None else _prefix(v, name)
        if n > sub:
            raise _err(f"{name}: /{n} is longer than the subgroup length /{sub}")
        rings[name] = Ring(a, n, sub)
    u, mr = rings["unicast"], rings["multicast"]
    if u.prefix != mr.prefix:
        raise _err(f"unicast /{u.prefix} and multicast /{mr.prefix} rings must have the same "
                   "size (a key is in the same subgroup in both)")
    if u.contains(mr.base) or mr.contains(u.base):
        raise _err("the unicast and multicast rings overlap")
    if subgroups_max is not None and u.n_subgroups > subgroups_max and "subgroups" not in value:
        raise _err(f"{u.n_subgroups} subgroups per ring, the data plane holds {subgroups_max}")

    nodes = {}
    for k, nv in (value.get("nodes") or {}).items():
        n = _int(k, "nodes", 0, nodes_max - 1)
        if not isinstance(nv, dict):
            raise _err(f"node {n}: expected a mapping")
        bad = set(nv) - _NODE_KEYS
        if bad:
            raise _err(f"node {n}: unknown key(s) {sorted(bad)}")
        if "ip" not in nv or "mac" not in nv or "port" not in nv:
            raise _err(f"node {n}: needs ip, mac and port")
        if n in nodes:
            raise _err(f"node {n} listed twice")
        nodes[n] = {"ip": _ip(nv["ip"], f"node {n}: ip"), "mac": _mac(nv["mac"], f"node {n}: mac"),
                    "port": _int(nv["port"], f"node {n}: port", 0, 2 * n_ports - 1),
                    "udp": _int(nv.get("udp", NICE_UDP_PORT), f"node {n}: udp", 1, 65535)}
    ips = [e["ip"] for e in nodes.values()]
    if len(set(ips)) != len(ips):
        raise _err("two nodes share an IP address")

    def node_id(v, where):
        n = _int(v, where, 0, nodes_max - 1)
        if n not in nodes:
            raise _err(f"{where}: unknown node {n}")
        return n

    parts = {}
    for k, ms in (value.get("partitions") or {}).items():
        p = _int(k, "partitions", 0, (1 << 16) - 1)
        if not isinstance(ms, (list, tuple)) or not ms:
            raise _err(f"partition {p}: expected a non-empty list of node ids")
        members = [node_id(x, f"partition {p}") for x in ms]
        if len(set(members)) != len(members):
            raise _err(f"partition {p}: a node is listed twice")
        parts[p] = members
    if sorted(parts) != list(range(len(parts))):
        raise _err(f"partition ids must be 0..P-1, got {sorted(parts)}")
    if not parts and nodes:
        raise _err("nodes but no partitions")
    base = _int(value.get("mcast_base", DEFAULT_MCAST_BASE), "mcast_base", 1, mcast_groups - 1)
    if parts and base + len(parts) > mcast_groups:
        raise _err(f"multicast groups {base}..{base + len(parts) - 1} outside "
                   f"1..{mcast_groups - 1}")

    if "subgroups" in value:
        sgs = {}
        for k, p in (value.get("subgroups") or {}).items():
            s = _int(k, "subgroups", 0, u.n_subgroups - 1)
            sgs[s] = _int(p, f"subgroup {s}", 0, len(parts) - 1)
    elif parts:
        if len(parts) > u.n_subgroups:
            raise _err(f"{len(parts)} partitions but {u.n_subgroups} subgroups per ring")
        sgs = {s: default_partition(s, u.n_subgroups, len(parts)) for s in range(u.n_subgroups)}
    else:
        sgs = {}
    if subgroups_max is not None and len(sgs) > subgroups_max:
        raise _err(f"{len(sgs)} subgroups mapped, the data plane holds {subgroups_max}")

    clients = [_prefix(c, "clients") for c in (value.get("clients") or [])]
    divisions = {}
    for k, ds in (value.get("divisions") or {}).items():
        p = _int(k, "divisions", 0, len(parts) - 1)
        out = []
        for d in ds or []:
            try:
                pre, n = d
            except (TypeError, ValueError):
                raise _err(f"divisions of partition {p}: {d!r} is not [prefix, node]") from None
            a, ln = _prefix(pre, f"divisions of partition {p}")
            out.append((a, ln, node_id(n, f"divisions of partition {p}")))
        divisions[p] = out

    st = {}
    for what in ("down", "joining"):
        st[what] = {node_id(x, what) for x in (value.get(what) or [])}
    both = st["down"] & st["joining"]
    if both:
        raise _err(f"node(s) {sorted(both)} both down and joining")
    handoff = {}
    for k, hm in (value.get("handoff") or {}).items():
        p = _int(k, "handoff", 0, len(parts) - 1)
        if not isinstance(hm, dict):
            raise _err(f"handoff of partition {p}: expected {{member: handoff node}}")
        handoff[p] = {}
        for m, h in hm.items():
            m = node_id(m, f"handoff of partition {p}")
            h = node_id(h, f"handoff of partition {p}")
            if m not in parts[p]:
                raise _err(f"handoff of partition {p}: {m} is not a member")
            if h in parts[p]:
                raise _err(f"handoff of partition {p}: {h} is already a member")
            handoff[p][m] = h
        if len(set(handoff[p].values())) != len(handoff[p]):
            raise _err(f"handoff of partition {p}: one node hands off for two members")
    pending = {}
    for k, ns in (value.get("pending") or {}).items():
        p = _int(k, "pending", 0, len(parts) - 1)
        pending[p] = {node_id(x, f"pending of partition {p}") for x in ns or []}
        if pending[p] - set(parts[p]):
            raise _err(f"pending of partition {p}: {sorted(pending[p] - set(parts[p]))} not "
                       "members")
    state = RingState(nodes, parts, sgs, u, mr, smac, base, clients, divisions,
                      st["down"], st["joining"], handoff, pending)
    check_put_sets(state)
    return state


def check_put_sets(state: RingState):
    """``ValueError`` if a partition's put set (its copy list: members not down, their
    handoffs, joining and pending nodes) has more than :data:`MAX_COPIES` nodes (the
    data plane's copy list holds 16 copies; ``header.MAX_REPLICAS``)."""
    for p in sorted(state.partitions):
        ps = state.put_set(p)
        if len(ps) > MAX_COPIES:
            raise _err(f"partition {p}: put set of {len(ps)} nodes {ps} (members, handoffs, "
                       f"joining and pending nodes), a copy list holds {MAX_COPIES} "
                       f"(MAX_REPLICAS)")


def entries(state: RingState) -> Plan:
    """The pure function: a ring state -> the switch's entries and copy lists."""
    e, mc = {}, {}
    u, mr = state.unicast, state.multicast
    e[("nice.rings", (u.base, u.prefix))] = ("ring", {"kind": RING_UNICAST})
    e[("nice.rings", (mr.base, mr.prefix))] = ("ring", {"kind": RING_MULTICAST})
    for n, a in sorted(state.nodes.items()):
        if n in state.down:
            continue
        e[("nice.nodes", (n,))] = ("node", {"ip": a["ip"], "mac": a["mac"], "smac": state.smac,
                                            "port": a["port"], "dport": a["udp"]})
        e[("nice.copies", (n,))] = ("copy", {"ip": a["ip"], "mac": a["mac"],
                                             "smac": state.smac, "dport": a["udp"]})
    avail = {}
    for p in sorted(state.partitions):
        prim = state.primary(p)
        g = state.mcast_base + p
        if prim is None:
            mc[g] = []
            continue
        avail[p] = prim
        mc[g] = [(state.nodes[n]["port"], n) for n in state.put_set(p)]
        for a, ln, node in state.divisions_of(p):
            e[("nice.divisions", ((p << 32) | a, 16 + ln))] = ("replica", {"node": node})
    for s, p in sorted(state.subgroups.items()):
        if p not in avail:
            continue
        e[("nice.unicast", u.subgroup_prefix(s))] = ("primary", {"part": p, "node": avail[p]})
        e[("nice.multicast", mr.subgroup_prefix(s))] = ("replicate",
                                                         {"part": p, "mcast": state.mcast_base + p})
    return Plan(e, mc)


def plan(value, **limits) -> Plan:
    """:func:`entries` of a section (validated by :func:`parse` with ``limits``)."""
    return entries(parse(value, **limits))


def diff(old: Plan | None, new: Plan):
    """What to write to go from ``old`` (None: an empty switch) to ``new``:
    ``[("add", table, match, action, params) | ("delete", table, match) | ("mcast", group,
    copies)]``; unchanged entries and groups are not in it. Order: new and changed entries,
    then copy lists, then deletions -- every write on its own is atomic for a lookup, and a
    state between two of them never names a node that neither the old nor the new state
    names."""
    oe = {} if old is None else old.entries
    om = {} if old is None else old.mcast
    ops = []
    for k, v in new.entries.items():
        if oe.get(k) != v:
            ops.append(("add", k[0], k[1], v[0], v[1]))
    for g, c in sorted(new.mcast.items()):
        if om.get(g) != c and (g in om or c):
            ops.append(("mcast", g, c))
    for g in sorted(set(om) - set(new.mcast)):
        if om[g]:
            ops.append(("mcast", g, []))
    for k in oe:
        if k not in new.entries:
            ops.append(("delete", k[0], k[1]))
    return ops


def _match_arg(match):
    """The api's match argument: an exact key list or an LPM ``(addr, len)``."""
    return list(match) if len(match) == 1 else tuple(match)


def apply_plan(dev, ops):
    """Write :func:`diff`'s ops through a :class:`netstor.api.Device` (in one batch)."""
    with dev.batch():
        for op in ops:
            if op[0] == "add":
                _, t, m, a, params = op
                dev.table(t).add(_match_arg(m), a, params)
            elif op[0] == "delete":
                dev.table(op[1]).delete(_match_arg(op[2]))
            else:
                dev.mcast_set(op[1], op[2])


def _device_limits(dev):
    schema = getattr(dev, "schema", None)
    kw = {"mcast_groups": schema.get("mcast_groups", 4096) if isinstance(schema, dict)
          else 4096}
    view = getattr(dev, "pipeline_view", None)
    if view is not None:
        kw["n_ports"] = view.pipeline.n_ports
        t = view.tables_by_name
        if "nice.nodes" in t:
            kw["nodes_max"] = min(t["nice.nodes"].size, MAX_NODES)
        if "nice.unicast" in t:
            kw["subgroups_max"] = t["nice.unicast"].size
    return kw


_TABLES = ("nice.rings", "nice.unicast", "nice.multicast", "nice.divisions", "nice.nodes",
           "nice.copies")


def _held(dev):
    """``{(table, match)}`` of the entries the device holds in NICE's tables (from the host
    API's shadow, synchronised from the device), or None for a device without one."""
    w, sync = getattr(dev, "writer", None), getattr(dev, "_sync", None)
    view = getattr(dev, "pipeline_view", None)
    if w is None or sync is None or view is None:
        return None
    out = set()
    for t in _TABLES:
        if t not in view.tables_by_name:
            continue
        sync(t)
        if t in ("nice.nodes", "nice.copies"):
            out |= {(t, (k,)) for k in w._exact[t]}
        else:
            out |= {(t, tuple(r)) for r in w.lpm_routes(t)}
    return out


def apply_section(dev, value, dry_run=False):
    """The ``nice:`` section handler (inside :func:`netstor.config.apply_config`'s batch):
    the plan's entries and copy lists, and (on a device with a host shadow) the deletion of
    NICE entries the plan no longer has -- a section applied again after a membership change
    must not leave a division or a subgroup naming a hidden node."""
    p = plan(value, **_device_limits(dev))
    if dry_run:
        return
    write_plan(dev, "nice", [(t, _match_arg(m), a, params) for t, m, a, params in p.rows()],
               [(g, c) for g, c in sorted(p.mcast.items())], copies_are="put copies")
    held = _held(dev)
    for t, m in sorted(held - set(p.entries)) if held is not None else ():
        dev.table(t).delete(_match_arg(m))


def _pipeline_limits(pipeline):
    t = {x.qualname: x for x in pipeline.tables}
    return {"mcast_groups": pipeline.mcast_groups, "n_ports": pipeline.n_ports,
            "nodes_max": min(t["nice.nodes"].size, MAX_NODES),
            "subgroups_max": t["nice.unicast"].size}


def model_apply(writer, ops):
    """The memory writes of :func:`diff`'s ``ops`` through a
    :class:`netstor.driver.tables.TableWriter` (its shadow follows)."""
    out = []
    for op in ops:
        if op[0] == "add":
            _, t, m, a, params = op
            if t in ("nice.nodes", "nice.copies"):
                out += writer.exact_add(t, list(m), a, params)
            else:
                out += writer.lpm_add(t, m[0], m[1], a, params)
        elif op[0] == "delete":
            _, t, m = op
            if t in ("nice.nodes", "nice.copies"):
                out += writer.exact_delete(t, list(m))
            else:
                out += writer.lpm_delete(t, m[0], m[1])
        else:
            out += writer.mcast_list_set(op[1], op[2])
    return out


def model_writes(pipeline, value, *, writer=None, old=None):
    """``(plan, [(memory, address, word)])``: the writes that bring a golden model of
    ``pipeline`` (one holding the ``nice`` program, built with ``groups="list"``) from the
    plan ``old`` (None: empty) to the section ``value`` (a mapping or a
    :class:`RingState`)."""
    from netstor.driver.tables import TableWriter
    w = writer or TableWriter(pipeline)
    state = value if isinstance(value, RingState) else parse(value, **_pipeline_limits(pipeline))
    p = entries(state)
    return p, model_apply(w, diff(old, p))


def section_of(state: RingState) -> dict:
    """A ``nice:`` section (plain YAML-able values) that :func:`parse` turns into ``state``."""
    ip = lambda a: str(ipaddress.IPv4Address(a))            # noqa: E731
    mac = lambda m: ":".join(f"{m >> 8 * i & 0xFF:02x}" for i in range(5, -1, -1))  # noqa
    return {
        "smac": mac(state.smac), "mcast_base": state.mcast_base,
        "unicast": f"{ip(state.unicast.base)}/{state.unicast.prefix}",
        "multicast": f"{ip(state.multicast.base)}/{state.multicast.prefix}",
        "subgroup": state.unicast.sub,
        "nodes": {n: {"ip": ip(a["ip"]), "mac": mac(a["mac"]), "port": a["port"],
                      "udp": a["udp"]} for n, a in sorted(state.nodes.items())},
        "partitions": {p: list(ms) for p, ms in sorted(state.partitions.items())},
        "subgroups": dict(sorted(state.subgroups.items())),
        "clients": [f"{ip(a)}/{n}" for a, n in state.clients],
        "divisions": {p: [[f"{ip(a)}/{n}", node] for a, n, node in ds]
                      for p, ds in sorted(state.divisions.items())},
        "down": sorted(state.down), "joining": sorted(state.joining),
        "handoff": {p: dict(hm) for p, hm in sorted(state.handoff.items()) if hm},
        "pending": {p: sorted(ns) for p, ns in sorted(state.pending.items()) if ns},
    }
