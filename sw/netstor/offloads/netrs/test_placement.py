"""Placement: ILP vs brute force, an independent constraint checker, Algorithm 1/2, DRS.

The checker and the brute force below do not use the ILP code or ``Instance.extra``/
``Instance.related``: eligibility (constraint 4) is derived from shortest paths in the
topology, extra hops (constraint 7) from path lengths through the RSNode."""

from __future__ import annotations

import itertools
import random

import pytest

from netstor.offloads.netrs.placement import (AdaptivePlacer, Instance, Plan, TrafficGroup,
                                     aggregated_bound, failure_update, heuristic_plan,
                                     paper_instance, solve_ilp, solve_with_drs,
                                     tor_based_plan)
from netstor.offloads.netrs.topology import FatTree

# ---------------------------------------------------------------------------------------
# independent reference: BFS on the topology's adjacency
# ---------------------------------------------------------------------------------------


from netstor.offloads.netrs.refcheck import bfs  # noqa: E402


class Ref:
    """Independent model of the paper's constraints for one instance."""

    def __init__(self, topo, groups, E, caps, failed=()):
        self.topo, self.groups, self.E, self.caps = topo, groups, E, caps
        self.failed = set(failed)
        self.dist = {}
        self.elig = {}
        self.extra = {}
        for g in groups:
            host = g.hosts[0]
            dh = self._d(host)
            hp = topo.hosts[host]
            others = [h for h, x in topo.hosts.items() if x.pod != hp.pod]
            # representative server per traffic tier: 0 other pod, 1 same pod, 2 same rack
            reps = {0: others[0],
                    1: next(h for h, x in topo.hosts.items()
                            if x.pod == hp.pod and x.tor != hp.tor),
                    2: next((h for h, x in topo.hosts.items() if x.tor == hp.tor and h != host),
                            None)}
            el = []
            for o, op in topo.operators.items():
                if o in self.failed:
                    continue
                sw = op.switch
                # R_ij: on a default (shortest) path between g's host and a host of another
                # pod, reached on the way up (eq. (4): no descending before the RSNode)
                if any(dh[sw] + self._d(sw)[h] == dh[h] and dh[sw] <= self._d(sw)[h]
                       for h in others):
                    el.append(o)
                    x = 0.0
                    for tier, rep in reps.items():
                        if rep is None:
                            assert g.traffic[tier] == 0
                            continue
                        via = dh[sw] + self._d(sw)[rep]
                        x += g.traffic[tier] * (via - dh[rep])
                    self.extra[(g.name, o)] = x
            self.elig[g.name] = el

    def _d(self, n):
        if n not in self.dist:
            self.dist[n] = bfs(self.topo, n)
        return self.dist[n]

    def check(self, assignment, open_ops=None, drs=()):
        """Constraints (2)-(7) on P (assignment) and D (open_ops; default: used operators)."""
        errs = []
        served = [g for g in self.groups if g.name not in drs]
        D = set(assignment.values()) if open_ops is None else set(open_ops)
        load = {}
        extra = 0.0
        for g in served:
            o = assignment.get(g.name)
            if o is None:                                      # (5)
                errs.append(f"(5) {g.name} has no RSNode")
                continue
            if o not in D:                                     # (3)
                errs.append(f"(3) D[{o}] = 0 but P[{g.name},{o}] = 1")
            if o not in self.elig[g.name]:                     # (4)
                errs.append(f"(4) {o} not on a default path of {g.name}")
                continue
            load[o] = load.get(o, 0.0) + sum(g.traffic)
            extra += self.extra[(g.name, o)]
        for g in assignment:
            if g in drs or g not in {x.name for x in self.groups}:
                errs.append(f"(5) {g} assigned although DRS/unknown")
        for o, ld in load.items():                              # (6)
            if ld > self.caps[o] + 1e-6:
                errs.append(f"(6) {o} load {ld} > {self.caps[o]}")
        if extra > self.E + 1e-6:                              # (7)
            errs.append(f"(7) extra {extra} > {self.E}")
        return errs

    def brute_force(self, drs=()):
        """Minimum number of merged RSNodes over all placements (None: infeasible)."""
        served = [g for g in self.groups if g.name not in drs]
        best = None
        for combo in itertools.product(*(self.elig[g.name] for g in served)):
            n = len(set(combo))
            if best is not None and n >= best:
                continue
            if not self.check(dict(zip((g.name for g in served), combo)), drs=drs):
                best = n
        return 0 if not served else best


def random_instance(seed, n_groups=4, k=4):
    rng = random.Random(seed)
    topo = FatTree(k)
    tors = sorted(topo.tors)
    groups = []
    hosts_used = set()
    for i in range(n_groups):
        while True:
            tor = rng.choice(tors)
            free = [h for h in topo.hosts_of_tor(tor) if h not in hosts_used]
            if free:
                break
        h = free[0]
        hosts_used.add(h)
        tr = (rng.uniform(5, 60), rng.uniform(0, 30), rng.uniform(0, 15))
        groups.append(TrafficGroup(f"g{i}", tor, (h,), tr))
    total = sum(sum(g.traffic) for g in groups)
    cap = total * rng.choice([0.3, 0.45, 0.6, 1.1])
    caps = {o: cap * rng.choice([1.0, 1.0, 0.5]) for o in topo.operators}
    E = total * rng.choice([0.02, 0.1, 0.3, 2.0])
    return Instance(topo, groups, E, capacities=caps), caps


def ref_of(inst, caps=None):
    return Ref(inst.topo, list(inst.groups.values()), inst.E,
               caps or inst.capacity, inst.failed)


# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(14))
def test_ilp_matches_brute_force_and_checker(seed):
    inst, caps = random_instance(seed, n_groups=4 if seed % 2 else 5)
    ref = ref_of(inst, caps)
    assert {g: sorted(inst.eligible(g)) for g in inst.groups} == \
        {g: sorted(v) for g, v in ref.elig.items()}
    opt = ref.brute_force()
    res = solve_ilp(inst)
    if opt is None:
        assert res.plan is None and res.status == "Infeasible"
        return
    assert res.optimal and res.objective == opt
    assert ref.check(res.plan.assignment, res.open_ops) == []
    assert len(res.open_ops) == opt
    # the literal (4) rows give the same optimum
    assert solve_ilp(inst, explicit_r=True, tighten=False).objective == opt
    # the aggregated relaxation is a lower bound
    assert aggregated_bound(inst).lower_bound <= opt
    # Algorithm 1: feasible, never better than the optimum
    plan, _ = heuristic_plan(inst)
    if not plan.drs:
        assert ref.check(plan.assignment) == []
        assert plan.num_rsnodes >= opt


def test_checker_catches_violations():
    inst, caps = random_instance(3)
    ref = ref_of(inst, caps)
    g0 = sorted(inst.groups)[0]
    not_eligible = next(o for o in inst.topo.operators if o not in ref.elig[g0])
    a = {g: ref.elig[g][0] for g in inst.groups}
    a[g0] = not_eligible
    assert any(e.startswith("(4)") for e in ref.check(a))
    a = {g: ref.elig[g][0] for g in inst.groups}
    assert any(e.startswith("(3)") for e in ref.check(a, open_ops=set()))
    del a[g0]
    assert any(e.startswith("(5)") for e in ref.check(a))


def test_extra_hop_example_from_paper():
    # Tier-2 traffic with the RSNode in the core tier: 4 extra hops per request (section 3.2)
    topo = FatTree(4)
    g = TrafficGroup("g", "t0_0", ("h0_0_0",), (0.0, 0.0, 1.0))
    inst = Instance(topo, [g], 100)
    assert inst.extra("g", "c0/acc0") == 4
    assert ref_of(inst).extra[("g", "c0/acc0")] == 4
    assert inst.extra("g", "a0_0/acc0") == 2 and inst.extra("g", "t0_0/acc0") == 0


def test_paper_instance_setup():
    inst = paper_instance(16)
    assert len(inst.topo.hosts) == 1024 and len(inst.groups) == 500
    assert inst.total_traffic == pytest.approx(90_000)         # 90 % of 100 servers * 4 / 4 ms
    assert inst.E == pytest.approx(9_000)
    assert all(c == pytest.approx(50_000) for c in inst.capacity.values())


def test_heuristic_feasible_on_scaled_paper_setup():
    inst = paper_instance(8, seed=1)
    ref = ref_of(inst)
    plan, placer = heuristic_plan(inst)
    assert not plan.drs and ref.check(plan.assignment) == []
    res = solve_ilp(inst, time_limit=20, start_plan=plan)
    assert res.plan is not None and ref.check(res.plan.assignment, res.open_ops) == []
    assert plan.num_rsnodes >= res.bound - 1e-6
    assert plan.num_rsnodes < len(tor_based_plan(inst).rsnodes)   # it did consolidate


# ---------------------------------------------------------------------------------------
# DRS (section 4.1)
# ---------------------------------------------------------------------------------------

def test_drs_when_infeasible_highest_traffic_first():
    topo = FatTree(4)
    gs = [TrafficGroup("big", "t0_0", ("h0_0_0",), (500.0, 0.0, 0.0)),
          TrafficGroup("mid", "t1_0", ("h1_0_0",), (80.0, 0.0, 0.0)),
          TrafficGroup("small", "t2_0", ("h2_0_0",), (30.0, 0.0, 0.0))]
    inst = Instance(topo, gs, 0.0, capacities={o: 100.0 for o in topo.operators})
    assert solve_ilp(inst).status == "Infeasible"
    res, drs = solve_with_drs(inst)
    assert drs == {"big"} and res.plan.drs == {"big"}
    ref = ref_of(inst)
    assert ref.check(res.plan.assignment, drs=drs) == []
    assert ref.brute_force(drs={"big"}) == res.objective
    # the ToR-based start also leaves only the oversized group to DRS
    assert tor_based_plan(inst).drs == {"big"}


# ---------------------------------------------------------------------------------------
# Algorithm 2 (section 4.3)
# ---------------------------------------------------------------------------------------

def _assert_served_or_drs(inst, plan, ref):
    for g in inst.groups:
        if g in plan.drs:
            assert g not in plan.assignment
        else:
            o = plan.assignment[g]
            assert o not in inst.failed and o in ref.elig[g]
    assert ref.check(plan.assignment, drs=plan.drs) == []


@pytest.mark.parametrize("seed", range(4))
def test_failure_update_rsnode_operator(seed):
    inst = paper_instance(4, seed=seed)
    res = solve_ilp(inst)
    busiest = max(res.plan.rsnodes,
                  key=lambda o: sum(1 for x in res.plan.assignment.values() if x == o))
    new_inst, plan, rep = failure_update(inst, res.plan, failed=[busiest])
    assert busiest in new_inst.failed and new_inst.capacity[busiest] == 0
    assert set(rep.drs_first) == {g for g, o in res.plan.assignment.items() if o == busiest}
    _assert_served_or_drs(new_inst, plan, ref_of(new_inst))
    for g, o in res.plan.assignment.items():        # unaffected groups keep their RSNode
        if o != busiest:
            assert plan.assignment[g] == o
    assert set(plan.drs) == set(rep.drs) | set(res.plan.drs)


def test_failure_update_switch_failures_and_drs():
    topo = FatTree(4)
    gs = [TrafficGroup("a", "t0_0", ("h0_0_0",), (50.0, 10.0, 40.0)),
          TrafficGroup("b", "t0_0", ("h0_0_1",), (50.0, 10.0, 40.0)),
          TrafficGroup("c", "t1_1", ("h1_1_0",), (90.0, 5.0, 5.0))]
    inst = Instance(topo, gs, 200.0, capacities={o: 150.0 for o in topo.operators})
    plan = Plan({"a": "t0_0/acc0", "b": "a0_1/acc0", "c": "c3/acc0"})
    ref = ref_of(inst)
    assert ref.check(plan.assignment) == []
    # ToR failure: no horizontal candidate, nothing below a ToR -> DRS stays on
    new_inst, new, rep = failure_update(inst, plan, failed_switches=["t0_0"])
    assert rep.drs == ["a"] and new.drs == {"a"}
    _assert_served_or_drs(new_inst, new, ref_of(new_inst))
    # core switch failure: horizontal migration to another core
    new_inst, new, rep = failure_update(inst, plan, failed_switches=["c3"])
    assert new.assignment["c"].startswith("c") and new.assignment["c"] != "c3/acc0"
    assert rep.drs == []
    # all cores fail: downward to the group's pod aggregation (merging with b there if fits)
    new_inst, new, rep = failure_update(inst, plan, failed_switches=topo.cores)
    assert topo.operators[new.assignment["c"]].tier == 1
    _assert_served_or_drs(new_inst, new, ref_of(new_inst))
    # a second failure on top of the first
    new_inst2, new2, _ = failure_update(new_inst, new, failed=[new.assignment["c"]])
    assert new_inst.failed <= new_inst2.failed
    _assert_served_or_drs(new_inst2, new2, ref_of(new_inst2))


# ---------------------------------------------------------------------------------------
# Algorithm 1: multi-confirm
# ---------------------------------------------------------------------------------------

A = (90.0, 9.0, 1.0)        # mostly upper-tier traffic: going up is feasible
B = (90.0, 0.0, 10.0)       # too much rack-local traffic: going up would break E


def _two_racks(confirm):
    topo = FatTree(4)
    gs = [TrafficGroup("g1", "t0_0", ("h0_0_0",), A),
          TrafficGroup("g2", "t0_1", ("h0_1_0",), A)]
    inst = Instance(topo, gs, 10.0, capacities={o: 1000.0 for o in topo.operators})
    return AdaptivePlacer(inst, confirm=confirm)


def test_multi_confirm_delays_postponed_upward_migration():
    p = _two_racks(confirm=3)
    assert p.plan.num_rsnodes == 2
    for rnd in (1, 2):
        assert p.round() == 0, rnd
        assert p.confirmed["g1"] == rnd
    assert p.round() == 2                      # third consecutive confirmation: both go up
    assert p.plan.num_rsnodes == 1
    assert p.inst.topo.operators[p.assign["g1"]].tier == 1
    assert p.assign["g1"] == p.assign["g2"]


def test_multi_confirm_prevents_oscillation():
    def run(confirm):
        p = _two_racks(confirm)
        for rnd in range(8):
            p.update("g1", A if rnd % 2 == 0 else B)
            p.update("g2", A)
            ref = ref_of(p.inst)
            assert ref.check(p.assign) == [] or rnd % 2 == 1 and confirm == 1
        return [m for m in p.moves if m.group == "g1"]

    flapping = run(confirm=1)
    assert len(flapping) >= 6                 # up, down, up, down ...
    assert {m.reason for m in flapping} == {"upward", "c3-downward"}
    assert run(confirm=2) == []               # never confirmed twice in a row


def test_adaptive_reacts_to_capacity_violation():
    topo = FatTree(4)
    gs = [TrafficGroup(f"g{i}", f"t0_{i % 2}", (f"h0_{i % 2}_{i // 2}",), (40.0, 5.0, 0.0))
          for i in range(4)]
    inst = Instance(topo, gs, 1000.0, capacities={o: 200.0 for o in topo.operators})
    p = AdaptivePlacer(inst, confirm=1)
    p.run()
    assert p.plan.num_rsnodes == 1 and not p.plan.drs
    for g in sorted(inst.groups):                 # workload grows: 4 * 90 > 200
        p.set_traffic(g, (80.0, 10.0, 0.0))
    p.run()
    ref = ref_of(p.inst)
    assert ref.check(p.assign) == [] and not p.plan.drs
    assert p.plan.num_rsnodes == 2


def test_drs_for_violations_after_workload_change():
    from netstor.offloads.netrs.placement import drs_for_violations
    inst = paper_instance(4, seed=1)
    res = solve_ilp(inst)
    # every group's traffic grows 3x: capacities and E no longer hold for the old plan
    grown = inst.with_traffic({g: tuple(3 * x for x in grp.traffic)
                               for g, grp in inst.groups.items()})
    ref = ref_of(grown)
    assert ref.check(res.plan.assignment) != []
    new = drs_for_violations(grown, res.plan)
    assert new.drs and ref.check(new.assignment, drs=new.drs) == []
    for g, o in new.assignment.items():            # survivors keep their RSNode
        assert res.plan.assignment[g] == o
    # within each overloaded operator, DRS went to the highest-traffic groups first
    for o in res.plan.rsnodes:
        members = [g for g, x in res.plan.assignment.items() if x == o]
        kept = [g for g in members if g in new.assignment]
        dropped = [g for g in members if g in new.drs]
        if kept and dropped:
            assert min(grown.load(g) for g in dropped) >= max(grown.load(g) for g in kept) \
                or plan_extra_changed(grown, res.plan, new)


def plan_extra_changed(inst, old, new):
    from netstor.offloads.netrs.placement import plan_extra
    return plan_extra(inst, new) < plan_extra(inst, old)
