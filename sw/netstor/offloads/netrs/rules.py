"""A replica selection plan as NetRS rules (paper section 5.2), as plain data.

Every rule is a dict::

    {"device": <switch name>, "table": <logical table>, "match": {<field>: <value>, ...},
     "action": <action name>, "params": {<name>: <value>, ...}}

``match`` is an exact match unless a value is an IPv4 prefix ``"a.b.c.d/len"`` (LPM);
``match == {}`` is the table's default entry.  This is the *logical* view of the rules
(table names ``netrs_*``, ECMP next-hop sets), which the rule-walking tests check; the
entries the data plane really holds (``rs.tgroups``, ``rs.local``, ``rs.forward``,
``rs.rgroups``, ``rs.servers``, ``rs.marker``, ``l3.routes``) come from
:func:`netstor.offloads.netrs.config.plan_configs`, as one netstor configuration (with a ``netrs:``
section) per device.

Logical tables:

``netrs_local_id`` (every switch with live NetRS operators -- *RSNode ID ownership*)
    match ``rsnode_id`` -> ``to_accelerator(operator, slot)``.  Each operator gets one
    unique positive ID (:func:`assign_rsnode_ids`, stable: ordered by tier then name);
    requests are sent to the accelerator, responses are cloned to it (section 5.2).
``netrs_forward`` (switches on a shortest path from some host to an RSNode in use)
    match ``rsnode_id`` -> ``forward(next_hops=[...], toward=<switch>)``; ``next_hops`` is
    the ECMP set of neighbours one hop closer to the RSNode's switch.
``netrs_group`` (ToR)
    match ``src_ip`` (host /32, or the rack /24 when a group is a whole rack) ->
    ``set_group(group_id)``.  Group IDs are 1.. in group-name order.
``netrs_rsnode`` (ToR)
    match ``group_id`` -> ``set_rsnode_id(rsnode_id, operator)``, or, for a DRS group,
    ``enable_drs(rsnode_id=DRS_RSNODE_ID)``; the default entry (``match == {}``) maps an
    illegal RSNode ID to ``mark_drs`` (magic field ``f(M_drs)``: the packet leaves NetRS and
    goes to the client's backup replica, section 4.1/5.2).
``netrs_source_marker`` (ToR, default entry) -> ``set_source_marker(pod, rack)`` for responses.
``netrs_monitor`` (ToR, egress) match ``dst_ip`` -> ``count(group_id)`` (section 5.4).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

import numpy as np

from .placement import Instance, Plan
from .topology import TOR, FatTree

DRS_RSNODE_ID = -1          # the paper's illegal RSNode ID (0xFFFF in the 16-bit RID field)

TABLES = ("netrs_local_id", "netrs_forward", "netrs_group", "netrs_rsnode",
          "netrs_source_marker", "netrs_monitor")


def assign_rsnode_ids(topo: FatTree) -> dict[str, int]:
    """Unique positive RSNode ID per operator (stable across plans and failures)."""
    ops = sorted(topo.operators.values(), key=lambda o: (o.tier, o.name))
    if len(ops) >= 0xFFFF:
        raise ValueError("more operators than 16-bit RSNode IDs")
    return {o.name: i + 1 for i, o in enumerate(ops)}


def group_ids(inst: Instance) -> dict[str, int]:
    return {g: i + 1 for i, g in enumerate(sorted(inst.groups))}


def _rule(device: str, table: str, match: dict, action: str, params: dict) -> dict:
    return {"device": device, "table": table, "match": match, "action": action,
            "params": params}


def _tor_distances(topo: FatTree) -> tuple[list[str], list[str], np.ndarray]:
    switches = sorted(topo.switches)
    tors = sorted(topo.tors)
    dt = np.array([[topo.distance(t, s) for s in switches] for t in tors], dtype=np.int32)
    return switches, tors, dt


def plan_rules(inst: Instance, plan: Plan, *, ids: Mapping[str, int] | None = None,
               gids: Mapping[str, int] | None = None) -> list[dict]:
    """NetRS rules realising ``plan`` on every switch (see the module docstring)."""
    topo = inst.topo
    ids = dict(assign_rsnode_ids(topo) if ids is None else ids)
    gids = dict(group_ids(inst) if gids is None else gids)
    rules: list[dict] = []
    # RSNode ID ownership
    for o in sorted(topo.operators.values(), key=lambda o: ids[o.name]):
        if o.name in inst.failed:
            continue
        rules.append(_rule(o.switch, "netrs_local_id", {"rsnode_id": ids[o.name]},
                           "to_accelerator", {"operator": o.name, "slot": o.slot}))
    # forwarding towards every RSNode in use
    used = sorted({plan.assignment[g] for g in plan.assignment}, key=lambda o: ids[o])
    if used:
        switches, tors, dt = _tor_distances(topo)
        col = {s: i for i, s in enumerate(switches)}
        for o in used:
            target = topo.operators[o].switch
            dx = np.array([topo.distance(s, target) for s in switches], dtype=np.int32)
            on_path = np.any(dt + dx[None, :] == dt[:, col[target]][:, None], axis=0)
            for i, s in enumerate(switches):
                if s == target or not on_path[i]:
                    continue
                rules.append(_rule(s, "netrs_forward", {"rsnode_id": ids[o]}, "forward",
                                   {"next_hops": [n for n in topo.next_hops(s, target)
                                                  if n in topo.switches],
                                    "toward": target}))
    # ToR: traffic group classification, RSNode ID / DRS, source marker, monitor
    by_tor: dict[str, list[str]] = defaultdict(list)
    for g, grp in inst.groups.items():
        by_tor[grp.tor].append(g)
    for tor in sorted(topo.tors):
        sw = topo.switches[tor]
        rack_hosts = set(topo.hosts_of_tor(tor))
        for g in sorted(by_tor.get(tor, [])):
            hosts = inst.groups[g].hosts
            if set(hosts) == rack_hosts and len(hosts) > 1:
                ip = topo.hosts[hosts[0]].ip.rsplit(".", 1)[0] + ".0/24"
                rules.append(_rule(tor, "netrs_group", {"src_ip": ip}, "set_group",
                                   {"group_id": gids[g], "group": g}))
            else:
                for hst in hosts:
                    rules.append(_rule(tor, "netrs_group",
                                       {"src_ip": topo.hosts[hst].ip + "/32"}, "set_group",
                                       {"group_id": gids[g], "group": g}))
            if g in plan.assignment:
                o = plan.assignment[g]
                rules.append(_rule(tor, "netrs_rsnode", {"group_id": gids[g]},
                                   "set_rsnode_id", {"rsnode_id": ids[o], "operator": o}))
            else:
                rules.append(_rule(tor, "netrs_rsnode", {"group_id": gids[g]}, "enable_drs",
                                   {"rsnode_id": DRS_RSNODE_ID}))
            for hst in inst.groups[g].hosts:
                rules.append(_rule(tor, "netrs_monitor", {"dst_ip": topo.hosts[hst].ip + "/32"},
                                   "count", {"group_id": gids[g]}))
        rules.append(_rule(tor, "netrs_rsnode", {}, "mark_drs",
                           {"rsnode_id": DRS_RSNODE_ID}))
        rules.append(_rule(tor, "netrs_source_marker", {}, "set_source_marker",
                           {"pod": sw.pod, "rack": sw.index}))
    return rules


def _key(r: dict) -> tuple:
    return (r["device"], r["table"], tuple(sorted(r["match"].items())))


def diff_rules(old: Iterable[dict], new: Iterable[dict]) -> dict[str, list[dict]]:
    """Minimal update from ``old`` to ``new``: ``{"delete": [...], "add": [...],
    "modify": [...]}`` (modify = same device/table/match, different action or params)."""
    o = {_key(r): r for r in old}
    n = {_key(r): r for r in new}
    return {
        "delete": [o[k] for k in sorted(o.keys() - n.keys())],
        "add": [n[k] for k in sorted(n.keys() - o.keys())],
        "modify": [n[k] for k in sorted(o.keys() & n.keys())
                   if (o[k]["action"], o[k]["params"]) != (n[k]["action"], n[k]["params"])],
    }


def rules_by_device(rules: Iterable[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rules:
        out[r["device"]].append(r)
    return dict(out)


__all__ = ["DRS_RSNODE_ID", "TABLES", "assign_rsnode_ids", "group_ids", "plan_rules",
           "diff_rules", "rules_by_device", "TOR"]
