"""The ``netlr:`` configuration section: replicas, replica groups, liveness (``docs/netlr.md``,
"Configuration").

::

    netlr:
      smac: "02:00:00:00:ff:01"        # the switch's MAC (source of steered reads and copies)
      mcast_base: 2048                 # copy-list group of replica group g: mcast_base + g
      slots: 131072                    # optional: the data plane's slot count (checked)
      replicas:                        # rid (0..255) -> the replica's addresses
        1: {ip: 10.0.0.1, mac: "02:00:00:00:00:01", port: 1, udp: 7461}
        2: {ip: 10.0.0.2, mac: "02:00:00:00:00:02", port: 1, udp: 7461}
        3: {ip: 10.0.0.3, mac: "02:00:00:00:00:03", port: 1}      # udp: default 7460
      groups:                          # group ids 0..N-1 (the key -> group rule needs N)
        0: [1, 2, 3]                   # members (rids) in position order (at most 8)
      down: [2]                        # failed replicas: out of every write set and read set
      joining: [3]                     # rejoin phase 1: write copies only (not counted/read)

Per group ``g`` the controller writes (:func:`plan`):

* ``nl.groups`` ``[g] -> group(mcast, live, members, reads, nread, gidx)``: ``mcast`` =
  ``mcast_base + g``; ``live`` the mask of member positions neither down nor joining;
  ``members`` the rids by position (byte ``i``); ``reads`` the live rids in position order,
  ``nread`` of them; ``gidx`` = ``g`` (the group's read-rotation cell);
* copy list ``mcast_base + g``: ``(port, rid)`` of every member not down (live and joining),
  in position order;

and per replica ``r``: ``nl.replicas [r] -> replica(ip, mac, smac, port, dport)`` (steered
reads) and ``nl.copies [r] -> copy(ip, mac, smac, dport)`` (write copies, egress).

A membership change (a replica fails, a rejoin phase) is the same section with ``down`` /
``joining`` changed, applied again: only ``nl.groups`` entries and copy lists change (an
update in place), never a slot. The ``nl`` program's trust guard is the ``programs:``
section's (``programs: {nl: {trusted_ports: [...]}}``: the replicas' ports,
:func:`trust_spec`); :func:`model_writes` can write it too for a model without a Device.

:func:`plan` computes it (pure); :func:`apply_section` writes it through a
:class:`netstor.api.Device` (``netstor apply``; ``dry_run``: validate only);
:func:`model_writes` gives the memory writes for a golden model of
``default_pipeline()`` (the simulator, the test bed, tests).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from netstor.config import write_plan

from .header import MAX_REPLICAS, MAX_RID, NETLR_UDP_PORT

__all__ = ["Plan", "plan", "apply_section", "model_writes", "trust_spec", "DEFAULT_MCAST_BASE"]

DEFAULT_MCAST_BASE = 2048
_KEYS = {"smac", "mcast_base", "slots", "replicas", "groups", "down", "joining"}
_REPLICA_KEYS = {"ip", "mac", "port", "udp"}


@dataclass
class Plan:
    replicas: dict                                  # rid -> {"ip", "mac", "port", "udp"}
    groups: dict                                    # group -> [rid, ...] (positions)
    down: frozenset = frozenset()
    joining: frozenset = frozenset()
    mcast_base: int = DEFAULT_MCAST_BASE
    slots: int | None = None
    entries: list = field(default_factory=list)    # (table, key list, action, params)
    mcast: list = field(default_factory=list)      # (mcast group, [(port, rid)])

    def live(self, group):
        """The live members (counted, readable) of ``group``, in position order."""
        return [r for r in self.groups[group] if r not in self.down and r not in self.joining]

    def write_set(self, group):
        """The members that get write copies (live and joining), in position order."""
        return [r for r in self.groups[group] if r not in self.down]


def _mac(v):
    if isinstance(v, int):
        return v
    return int(str(v).replace(":", "").replace("-", ""), 16)


def _ip(v):
    return v if isinstance(v, int) else int(ipaddress.IPv4Address(str(v)))


def _rid(v, where):
    try:
        r = int(v)
    except (TypeError, ValueError):
        raise ValueError(f"netlr: {where}: {v!r} is not a replica id") from None
    if isinstance(v, bool) or not 0 <= r <= MAX_RID:
        raise ValueError(f"netlr: {where}: replica id {v!r} out of range 0..{MAX_RID}")
    return r


def plan(value, *, mcast_groups=4096, n_ports=2, groups_max=256, slots=None):
    """The controller's computation for a ``netlr:`` section (see the module doc).
    ``mcast_groups``, ``n_ports``, ``groups_max`` (``nl.groups`` entries) and ``slots`` (the
    data plane's) bound what is accepted."""
    if not isinstance(value, dict):
        raise ValueError("netlr: expected a mapping")
    unknown = set(value) - _KEYS
    if unknown:
        raise ValueError(f"netlr: unknown key(s) {sorted(unknown)}")
    smac = _mac(value.get("smac", 0))
    if not 0 <= smac < 1 << 48:
        raise ValueError("netlr: smac out of range")
    replicas = {}
    for k, rv in (value.get("replicas") or {}).items():
        r = _rid(k, "replicas")
        if not isinstance(rv, dict):
            raise ValueError(f"netlr: replica {r}: expected a mapping")
        bad = set(rv) - _REPLICA_KEYS
        if bad:
            raise ValueError(f"netlr: replica {r}: unknown key(s) {sorted(bad)}")
        try:
            ent = {"ip": _ip(rv["ip"]), "mac": _mac(rv["mac"]), "port": int(rv["port"]),
                   "udp": int(rv.get("udp", NETLR_UDP_PORT))}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"netlr: replica {r}: {e!r}") from None
        if not 0 <= ent["port"] < 2 * n_ports:
            raise ValueError(f"netlr: replica {r}: port {ent['port']} out of range "
                             f"0..{2 * n_ports - 1}")
        if not 0 < ent["udp"] < 1 << 16:
            raise ValueError(f"netlr: replica {r}: udp port {ent['udp']} out of range")
        if not 0 <= ent["mac"] < 1 << 48:
            raise ValueError(f"netlr: replica {r}: mac out of range")
        if r in replicas:
            raise ValueError(f"netlr: replica {r} listed twice")
        replicas[r] = ent
    groups = {}
    for k, members in (value.get("groups") or {}).items():
        try:
            g = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"netlr: group {k!r} is not a number") from None
        if isinstance(members, dict):
            members = members.get("members")
        if not isinstance(members, (list, tuple)) or not members:
            raise ValueError(f"netlr: group {g}: expected a non-empty list of replica ids")
        ms = [_rid(x, f"group {g}") for x in members]
        if len(ms) > MAX_REPLICAS:
            raise ValueError(f"netlr: group {g}: {len(ms)} members, at most {MAX_REPLICAS}")
        if len(set(ms)) != len(ms):
            raise ValueError(f"netlr: group {g}: a replica is listed twice")
        missing = [x for x in ms if x not in replicas]
        if missing:
            raise ValueError(f"netlr: group {g}: unknown replica(s) {missing}")
        groups[g] = ms
    if sorted(groups) != list(range(len(groups))):
        raise ValueError(f"netlr: group ids must be 0..N-1 (the key -> group rule is "
                         f"hash mod N), got {sorted(groups)}")
    if len(groups) > groups_max:
        raise ValueError(f"netlr: {len(groups)} groups, the data plane has {groups_max}")
    state = {}
    for what in ("down", "joining"):
        rs = [_rid(x, what) for x in (value.get(what) or [])]
        unknown_r = [x for x in rs if x not in replicas]
        if unknown_r:
            raise ValueError(f"netlr: {what}: unknown replica(s) {unknown_r}")
        state[what] = frozenset(rs)
    both = state["down"] & state["joining"]
    if both:
        raise ValueError(f"netlr: replica(s) {sorted(both)} both down and joining")
    base = int(value.get("mcast_base", DEFAULT_MCAST_BASE))
    if groups and not (1 <= base and base + len(groups) <= mcast_groups):
        raise ValueError(f"netlr: multicast groups {base}..{base + len(groups) - 1} outside "
                         f"1..{mcast_groups - 1}")
    want_slots = value.get("slots")
    if want_slots is not None:
        want_slots = int(want_slots)
        if slots is not None and want_slots != slots:
            raise ValueError(f"netlr: slots: {want_slots} configured, the data plane has "
                             f"{slots}")
    out = Plan(replicas, groups, state["down"], state["joining"], base, want_slots)
    for r, ent in sorted(replicas.items()):
        out.entries.append(("nl.replicas", [r], "replica",
                            {"ip": ent["ip"], "mac": ent["mac"], "smac": smac,
                             "port": ent["port"], "dport": ent["udp"]}))
        out.entries.append(("nl.copies", [r], "copy",
                            {"ip": ent["ip"], "mac": ent["mac"], "smac": smac,
                             "dport": ent["udp"]}))
    for g, ms in sorted(groups.items()):
        live_mask = sum(1 << i for i, r in enumerate(ms)
                        if r not in out.down and r not in out.joining)
        reads = out.live(g)
        out.entries.append(("nl.groups", [g], "group", {
            "mcast": base + g, "live": live_mask,
            "members": sum(r << 8 * i for i, r in enumerate(ms)),
            "reads": sum(r << 8 * i for i, r in enumerate(reads)),
            "nread": len(reads), "gidx": g}))
        out.mcast.append((base + g, [(replicas[r]["port"], r) for r in out.write_set(g)]))
    return out


def trust_spec(value, **kw):
    """The ``programs: {nl: ...}`` entry that trusts replies from the replicas' ports."""
    p = plan(value, **kw)
    return {"trusted_ports": sorted({e["port"] for e in p.replicas.values()})}


def _device_limits(dev):
    """What the device bounds: its multicast groups, ports, ``nl.groups`` size, slots (a
    device that does not describe one of them is not checked on it)."""
    schema = getattr(dev, "schema", None)
    kw = {"mcast_groups": schema.get("mcast_groups", 4096) if isinstance(schema, dict)
          else 4096}
    view = getattr(dev, "pipeline_view", None)
    if view is not None:
        kw["n_ports"] = view.pipeline.n_ports
        if "nl.groups" in view.tables_by_name:
            kw["groups_max"] = view.tables_by_name["nl.groups"].size
        if "nl.slots" in view.banks_by_name:
            kw["slots"] = view.banks_by_name["nl.slots"].depth
    return kw


def apply_section(dev, value, dry_run=False):
    """The ``netlr:`` section handler (inside :func:`netstor.config.apply_config`'s batch)."""
    p = plan(value, **_device_limits(dev))
    if dry_run:
        return
    write_plan(dev, "netlr", p.entries, p.mcast, copies_are="write copies")


def model_writes(pipeline, value, *, writer=None, trusted_ports=None):
    """``(plan, [(memory, address, word)])``: the writes that configure a golden model of
    ``pipeline`` (one holding the ``nl`` program, built with ``groups="list"``) for the
    section ``value``. ``trusted_ports``: also fill ``nl.trust`` (replies trusted from these
    ingress ports, requests from any port), what ``programs: {nl: ...}`` does on a Device."""
    from netstor.driver.tables import TableWriter
    w = writer or TableWriter(pipeline)
    bank = next(b for b in pipeline.banks if b.qualname == "nl.slots")
    groups_max = next(t.size for t in pipeline.tables if t.qualname == "nl.groups")
    p = plan(value, mcast_groups=pipeline.mcast_groups, n_ports=pipeline.n_ports,
             groups_max=groups_max, slots=bank.depth)
    writes = []
    for table, key, action, params in p.entries:
        writes += w.exact_add(table, key, action, params)
    for g, copies in p.mcast:
        writes += w.mcast_list_set(g, copies)
    if trusted_ports is not None:
        prio = 0
        for port in trusted_ports:
            writes += w.ternary_add("nl.trust", [1, port, 0], [1, 0xF, 0], "trusted", {}, prio)
            prio += 1
        writes += w.ternary_add("nl.trust", [0, 0, 0], [1, 0, 0], "trusted", {}, prio)
    return p, writes
