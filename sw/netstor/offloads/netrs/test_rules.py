"""Rules: walk packets through the generated tables only (no placement code) and check each
traffic group's requests reach exactly the planned RSNode, on its path, with the extra hops
of constraint (7); responses come back through the same RSNode; DRS groups skip NetRS."""

from __future__ import annotations

import ipaddress
import random

import pytest

from netstor.offloads.netrs.placement import (Plan, failure_update, paper_instance, solve_ilp,
                                     solve_with_drs, tor_based_plan)
from netstor.offloads.netrs.rules import (DRS_RSNODE_ID, assign_rsnode_ids, diff_rules, plan_rules)


from netstor.offloads.netrs.refcheck import bfs  # noqa: E402


class Tables:
    def __init__(self, rules):
        self.t = {}
        for r in rules:
            key = (r["device"], r["table"])
            self.t.setdefault(key, []).append(r)

    def lookup(self, device, table, **fields):
        best, best_len = None, -1
        for r in self.t.get((device, table), []):
            m = r["match"]
            ok, plen = True, 0
            for f, v in m.items():
                if isinstance(v, str) and "/" in v:
                    net = ipaddress.ip_network(v)
                    ok &= ipaddress.ip_address(fields[f]) in net
                    plen = max(plen, net.prefixlen)
                else:
                    ok &= fields.get(f) == v
            if ok and (m or best is None) and (plen > best_len or not m and best is None):
                best, best_len = r, plen
        return best


def walk(topo, tables, rng, start_tor, rsnode_id, dst_host):
    """Follow NetRS rules from ``start_tor`` until an operator owns ``rsnode_id``, then the
    shortest path to ``dst_host``.  Returns (visited switches, operators that handled it)."""
    at, path, handled = start_tor, [start_tor], []
    for _ in range(20):
        own = tables.lookup(at, "netrs_local_id", rsnode_id=rsnode_id)
        if own is not None:
            handled.append(own["params"]["operator"])
            break
        fwd = tables.lookup(at, "netrs_forward", rsnode_id=rsnode_id)
        assert fwd is not None, f"no route for RSNode {rsnode_id} at {at}"
        nxt = rng.choice(fwd["params"]["next_hops"])
        assert nxt in topo.neighbors(at)
        at = nxt
        path.append(at)
    else:
        raise AssertionError("forwarding loop")
    d = bfs(topo, dst_host)
    while at != topo.hosts[dst_host].tor:       # regular routing after replica selection
        at = rng.choice(sorted(v for v in topo.neighbors(at) if d[v] == d[at] - 1))
        path.append(at)
    return path, handled


@pytest.mark.parametrize("seed", range(3))
def test_requests_and_responses_reach_exactly_the_planned_rsnode(seed):
    inst = paper_instance(4, seed=seed)
    res, _ = solve_with_drs(inst)
    plan = res.plan.copy()
    # put one group on DRS to exercise that path too
    g_drs = sorted(plan.assignment)[0]
    del plan.assignment[g_drs]
    plan.drs.add(g_drs)
    rules = plan_rules(inst, plan)
    tables = Tables(rules)
    topo = inst.topo
    rng = random.Random(seed)
    ids = assign_rsnode_ids(topo)
    assert len(set(ids.values())) == len(ids) and min(ids.values()) >= 1
    for g, grp in inst.groups.items():
        for host in grp.hosts:
            ip = topo.hosts[host].ip
            cls = tables.lookup(grp.tor, "netrs_group", src_ip=ip)
            act = tables.lookup(grp.tor, "netrs_rsnode", group_id=cls["params"]["group_id"])
            if g in plan.drs:
                assert act["action"] == "enable_drs"
                assert act["params"]["rsnode_id"] == DRS_RSNODE_ID
                assert tables.lookup(grp.tor, "netrs_rsnode",
                                     group_id=-99)["action"] == "mark_drs"
                continue
            rid = act["params"]["rsnode_id"]
            assert act["action"] == "set_rsnode_id"
            for server in rng.sample(sorted(topo.hosts), 6):
                if server == host:
                    continue
                path, handled = walk(topo, tables, rng, grp.tor, rid, server)
                assert handled == [plan.assignment[g]]         # exactly one RSNode, the plan's
                rs_switch = topo.operators[handled[0]].switch
                dh, ds = bfs(topo, host), bfs(topo, server)
                # the RSNode is on the way up: no descent before it (constraint 4)
                assert dh[rs_switch] <= 3 and rs_switch in path
                # forwards through the RSNode = default + the per-request extra hops
                extra = len(path) - (dh[server] - 1)
                assert extra == dh[rs_switch] + ds[rs_switch] - dh[server]
                tier = topo.traffic_tier(host, server)
                h = 2 - topo.operators[handled[0]].tier
                assert extra == max(0, 2 * (h - (2 - tier)))   # the summand of eq. (7)
                # the response carries the same RSNode ID back from the server's ToR
                back, handled_back = walk(topo, tables, rng, topo.hosts[server].tor, rid, host)
                assert handled_back == handled


def test_rules_shape_and_diff():
    inst = paper_instance(4, seed=0)
    before = tor_based_plan(inst)
    res = solve_ilp(inst)
    r0, r1 = plan_rules(inst, before), plan_rules(inst, res.plan)
    for r in r1:
        assert set(r) == {"device", "table", "match", "action", "params"}
        assert r["device"] in inst.topo.switches
    # every live operator owns exactly one ID, on its own switch
    own = [r for r in r1 if r["table"] == "netrs_local_id"]
    assert len(own) == len(inst.topo.operators)
    assert all(inst.topo.operators[r["params"]["operator"]].switch == r["device"] for r in own)
    d = diff_rules(r0, r1)
    assert d["modify"] and not any(x["table"] == "netrs_local_id" for x in d["add"] + d["delete"])
    assert diff_rules(r1, r1) == {"delete": [], "add": [], "modify": []}
    # after a failure the dead operator no longer owns an ID
    dead = sorted(res.plan.rsnodes)[0]
    new_inst, new_plan, _ = failure_update(inst, res.plan, failed=[dead])
    r2 = plan_rules(new_inst, new_plan)
    assert not any(r["table"] == "netrs_local_id" and r["params"]["operator"] == dead
                   for r in r2)
    assert not any(r["table"] == "netrs_rsnode" and r["params"].get("operator") == dead
                   for r in r2)


def test_rack_level_groups_use_prefix_match():
    inst = paper_instance(4, seed=2, granularity="rack")
    plan = tor_based_plan(inst)
    rules = plan_rules(inst, plan)
    tables = Tables(rules)
    for g, grp in inst.groups.items():
        rack = inst.topo.hosts_of_tor(grp.tor)
        if set(grp.hosts) == set(rack):
            for host in rack:
                hit = tables.lookup(grp.tor, "netrs_group", src_ip=inst.topo.hosts[host].ip)
                assert hit["match"]["src_ip"].endswith("/24")
    assert isinstance(Plan().to_json(), dict)
