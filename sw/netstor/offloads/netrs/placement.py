"""RSNode placement for NetRS (Su et al., IEEE TCC 2020, sections 3-4).

A *replica selection plan* (RSP, :class:`Plan`) maps every traffic group to the NetRS operator
that is its RSNode, or marks it for degraded replica selection (DRS, section 4.1).

Three ways to get a plan:

* :func:`solve_ilp` -- the ILP of section 3.2 solved with HiGHS (``highspy``, model built with
  its ``HighsLp`` API); :func:`solve_with_drs` adds the DRS fallback of section 4.1 (i).
* :class:`AdaptivePlacer` -- Algorithm 1 (upward / horizontal / downward migration with
  multi-confirm), starting from the ToR-based plan of section 4.2 (:func:`tor_based_plan`).
* :func:`failure_update` -- Algorithm 2, repair after operator / switch failures.

ILP encoding (``i`` traffic group, ``j`` operator, ``t(.)`` tier ID, ``h(i,j) = t(i) - t(j)``):

(1) objective ``min sum_j D_j`` -- the number of merged RSNodes;
(2) every ``P_ij`` and ``D_j`` is a binary column (integrality ``kInteger``, bounds [0, 1]);
(3) one row ``D_j - P_ij >= 0`` per modelled pair (i, j);
(4) ``R_ij - P_ij >= 0``: by default a column ``P_ij`` is only created where ``R_ij = 1``
    (the constraint as a variable-elimination; rows with ``R_ij = 0`` would fix ``P_ij = 0``).
    ``explicit_r=True`` creates every pair and writes the literal row ``P_ij <= R_ij``;
(5) one row ``sum_j P_ij = 1`` per group;
(6) one row ``sum_i P_ij * sum_{k=0}^{t(i)} T_ik <= T^max_j`` per operator;
(7) one row ``sum_ij P_ij * sum_{k=0}^{h(i,j)} 2 (h(i,j) - k) T_{i, t(i)-k} <= E``.

``tighten=True`` (default) also adds the valid inequality ``sum_i L_i P_ij <= T^max_j D_j`` (it
is implied by (3) and (6) for integer points, so the optimum is unchanged, but the LP bound
becomes ``ceil(total / T^max)`` instead of ~1, which matters for the 16-ary instance).

Choices where the paper is ambiguous (documented here, reported to the team):

* ``R``: rules (i)-(iii) of section 3.2 -- every core, the aggregation switches of the group's
  pod, the group's own ToR.  Failed operators get ``T^max = 0`` (Algorithm 2) and, in the ILP,
  no columns at all (a zero-traffic group could otherwise sit on a dead operator).
* Traffic of a group: ``T_ik`` from a client/server deployment assuming the data store spreads
  a client's requests evenly over the servers (consistent hashing + replica selection keeps
  servers evenly loaded); see :func:`groups_from_deployment`.
* Algorithm 1, the undefined sub-steps:
  - *destination choice*: every migration first looks at operators that already host
    RSNodes (merging) and takes the best fit (the most loaded one that still satisfies
    constraints 2 and 3 after the move); only if none fits does it open an empty operator
    (the largest ``T^max``, ties by name).  Downward migration for a constraint-3 violation
    only checks capacity (it can only lower the extra hops).
  - *horizontal merge* (lines 11, 14) moves the RSNode only to an occupied operator whose
    load is strictly larger than the source's load without the group (this strictly
    increases sum(load^2), so horizontal merges cannot cycle).
  - *"upward migration can potentially reduce merged RSNodes"* (line 10) is the paper's
    cases (i)/(ii) checked on aggregate capacity: all RSNodes of the current operator plus
    those of the ``x`` least loaded other occupied operators of the same tier (that share the
    same upper-tier candidates) fit into the residual capacity of occupied upper operators
    plus ``x`` empty ones, within the remaining extra-hop budget; ``x = 0`` is case (i).
  - *postpone* (line 12): (i) the share of the group's traffic that already crosses the upper
    tier, ``sum_{k<t(o)} T_k / sum_k T_k``, is below ``t_up`` (a fraction, default 0.5);
    (ii) no upper-tier RSNode serves a group whose ``R`` contains the current operator
    (i.e. none could be migrated downward and merged with this RSNode).
  - *multi-confirm*: a counter per group counts consecutive evaluations in which Algorithm 1
    decided an upward migration that had to be postponed; the migration happens when the
    counter reaches ``c`` (``c = 1`` disables multi-confirm); any other decision resets it.
  - a constraint-2 violation with no horizontal or downward destination (e.g. an overloaded
    ToR) enables DRS for the group (section 4.1 (ii)); a DRS group that reports traffic is
    placed again on the lowest-tier operator that fits.
  - a *round* reports every group once (sorted by name); :meth:`AdaptivePlacer.run` repeats
    rounds until a round changes nothing (no migration, no confirm counter change).
* Algorithm 2: groups are re-placed in decreasing traffic order; horizontal first (prefer
  merging), then downward tier by tier down to the group's own ToR (the paper's single
  ``DownwardMigration`` step, repeated); a group with no feasible live operator keeps DRS.
* DRS when the ILP is infeasible (section 4.1 (i)): groups in decreasing traffic order get
  DRS until the rest is feasible; feasibility is monotone in the number of DRS groups, so the
  smallest such prefix is found by binary search.  When inputs change under an ILP plan
  (:func:`drs_for_violations`) the groups causing violations get DRS, highest traffic first.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from .topology import AGG, CORE, TOR, FatTree, accelerator_capacity

EPS = 1e-9


# ----------------------------------------------------------------------------------------
# Problem data
# ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrafficGroup:
    """Requests from ``hosts`` (all behind ToR ``tor``); ``traffic[k]`` is the Tier-k traffic
    ``T_ik`` in requests/s for k = 0..t(i) (0: other pods, 1: same pod, 2: same rack)."""
    name: str
    tor: str
    hosts: tuple[str, ...]
    traffic: tuple[float, ...]

    @property
    def total(self) -> float:
        return float(sum(self.traffic))


@dataclass
class Plan:
    """Replica selection plan: group -> RSNode operator, and the groups with DRS enabled."""
    assignment: dict[str, str] = field(default_factory=dict)
    drs: set[str] = field(default_factory=set)

    @property
    def rsnodes(self) -> set[str]:
        """Operators hosting at least one RSNode (merged RSNodes)."""
        return set(self.assignment.values())

    @property
    def num_rsnodes(self) -> int:
        return len(self.rsnodes)

    def copy(self) -> "Plan":
        return Plan(dict(self.assignment), set(self.drs))

    def to_json(self) -> dict:
        return {"assignment": dict(sorted(self.assignment.items())), "drs": sorted(self.drs)}


class Instance:
    """One placement problem: topology, traffic groups, ``T^max`` per operator, ``E``.

    ``failed`` operators (and all operators of ``failed_switches``) get ``T^max = 0`` and are
    never eligible."""

    def __init__(self, topo: FatTree, groups: Sequence[TrafficGroup], extra_hop_limit: float,
                 *, capacities: Mapping[str, float] | None = None,
                 failed: Iterable[str] = (), failed_switches: Iterable[str] = ()):
        self.topo = topo
        self.groups: dict[str, TrafficGroup] = {}
        for g in groups:
            if g.name in self.groups:
                raise ValueError(f"duplicate traffic group {g.name}")
            if g.tor not in topo.switches or topo.switches[g.tor].tier != TOR:
                raise ValueError(f"group {g.name}: {g.tor} is not a ToR switch")
            if len(g.traffic) != TOR + 1 or any(x < 0 for x in g.traffic):
                raise ValueError(f"group {g.name}: traffic must be {TOR + 1} non-negative rates")
            self.groups[g.name] = g
        self.E = float(extra_hop_limit)
        failed = set(failed)
        for sw in failed_switches:
            failed.update(topo.operators_of_switch(sw))
        unknown = failed - set(topo.operators)
        if unknown:
            raise ValueError(f"unknown operators {sorted(unknown)}")
        self.failed = frozenset(failed)
        caps = {o.name: o.capacity for o in topo.operators.values()}
        caps.update(capacities or {})
        for o in self.failed:
            caps[o] = 0.0
        self.capacity: dict[str, float] = caps
        self._eligible: dict[str, list[str]] = {}

    # -- derived copies ------------------------------------------------------------------
    def replace(self, *, groups: Sequence[TrafficGroup] | None = None,
                extra_hop_limit: float | None = None, failed: Iterable[str] = (),
                failed_switches: Iterable[str] = (),
                capacities: Mapping[str, float] | None = None) -> "Instance":
        caps = {o: c for o, c in self.capacity.items() if o not in self.failed}
        caps.update(capacities or {})
        return Instance(self.topo, list(self.groups.values()) if groups is None else groups,
                        self.E if extra_hop_limit is None else extra_hop_limit,
                        capacities=caps, failed=set(self.failed) | set(failed),
                        failed_switches=failed_switches)

    def with_traffic(self, traffic: Mapping[str, Sequence[float]]) -> "Instance":
        gs = [TrafficGroup(g.name, g.tor, g.hosts, tuple(float(x) for x in traffic[g.name]))
              if g.name in traffic else g for g in self.groups.values()]
        return self.replace(groups=gs)

    # -- the paper's quantities ----------------------------------------------------------
    def group_tier(self, g: str) -> int:
        return self.topo.switches[self.groups[g].tor].tier

    def related(self, g: str, op: str) -> bool:
        """``R_ij`` by the rules (i)-(iii) of section 3.2 (failures ignored)."""
        o = self.topo.operators[op]
        grp = self.groups[g]
        if o.tier == CORE:
            return True
        if o.tier == AGG:
            return o.pod == self.topo.switches[grp.tor].pod
        return o.switch == grp.tor

    def eligible(self, g: str) -> list[str]:
        """Live operators ``j`` with ``R_gj = 1``, sorted by (tier, name)."""
        e = self._eligible.get(g)
        if e is None:
            e = sorted((o for o in self.topo.operators
                        if o not in self.failed and self.related(g, o)),
                       key=lambda o: (self.topo.operators[o].tier, o))
            self._eligible[g] = e
        return e

    def load(self, g: str) -> float:
        """``sum_{k=0}^{t(i)} T_ik`` -- the traffic the RSNode of ``g`` handles."""
        grp = self.groups[g]
        return float(sum(grp.traffic[: self.group_tier(g) + 1]))

    def extra(self, g: str, op: str) -> float:
        """Extra hops of group ``g`` using ``op`` as RSNode (summand of constraint (7))."""
        ti = self.group_tier(g)
        h = ti - self.topo.operators[op].tier
        t = self.groups[g].traffic
        return float(sum(2 * (h - k) * t[ti - k] for k in range(0, h + 1)))

    @property
    def total_traffic(self) -> float:
        return sum(self.load(g) for g in self.groups)


def plan_loads(inst: Instance, plan: Plan) -> dict[str, float]:
    loads: dict[str, float] = defaultdict(float)
    for g, o in plan.assignment.items():
        loads[o] += inst.load(g)
    return dict(loads)


def plan_extra(inst: Instance, plan: Plan) -> float:
    return sum(inst.extra(g, o) for g, o in plan.assignment.items())


def violations(inst: Instance, plan: Plan, *, tol: float = 1e-6) -> list[str]:
    """Constraint violations of ``plan`` (empty list: feasible).  DRS groups are exempt."""
    out = []
    for g in inst.groups:
        if (g in plan.assignment) == (g in plan.drs):
            out.append(f"group {g}: must have exactly one RSNode or DRS")
    for g, o in plan.assignment.items():
        if g not in inst.groups:
            out.append(f"unknown group {g}")
        elif o not in inst.eligible(g):
            out.append(f"group {g}: operator {o} not eligible (R=0 or failed)")
    for o, ld in plan_loads(inst, plan).items():
        if ld > inst.capacity.get(o, 0.0) * (1 + tol) + tol:
            out.append(f"operator {o}: load {ld:.3f} > T^max {inst.capacity.get(o, 0.0):.3f}")
    ex = plan_extra(inst, plan)
    if ex > inst.E * (1 + tol) + tol:
        out.append(f"extra hops {ex:.3f} > E {inst.E:.3f}")
    return out


# ----------------------------------------------------------------------------------------
# Workloads (paper section 6.1)
# ----------------------------------------------------------------------------------------

def random_deployment(topo: FatTree, n_clients: int, n_servers: int,
                      seed: int = 0) -> tuple[list[str], list[str]]:
    """Clients and servers on distinct random hosts (each host one role, section 6.1)."""
    hosts = sorted(topo.hosts)
    if n_clients + n_servers > len(hosts):
        raise ValueError("more clients + servers than hosts")
    rng = random.Random(seed)
    chosen = rng.sample(hosts, n_clients + n_servers)
    return sorted(chosen[:n_clients]), sorted(chosen[n_clients:])


def groups_from_deployment(topo: FatTree, clients: Sequence[str], servers: Sequence[str],
                           rate_per_client: float, granularity: str = "host"
                           ) -> list[TrafficGroup]:
    """Traffic groups of the clients.  A client sends ``rate_per_client`` requests/s spread
    evenly over ``servers``; Tier-k traffic is the share of servers in tier-k relation.

    ``granularity``: ``"host"`` (one group per client host) or ``"rack"`` (one per rack with
    clients)."""
    if not servers:
        raise ValueError("need at least one server")
    per: dict[str, list[float]] = {}
    for c in clients:
        t = [0.0, 0.0, 0.0]
        for s in servers:
            t[topo.traffic_tier(c, s)] += rate_per_client / len(servers)
        per[c] = t
    if granularity == "host":
        return [TrafficGroup(f"g_{c}", topo.hosts[c].tor, (c,), tuple(per[c]))
                for c in sorted(clients)]
    if granularity == "rack":
        racks: dict[str, list[str]] = defaultdict(list)
        for c in clients:
            racks[topo.hosts[c].tor].append(c)
        return [TrafficGroup(f"g_{tor}", tor, tuple(sorted(cs)),
                             tuple(sum(per[c][k] for c in cs) for k in range(3)))
                for tor, cs in sorted(racks.items())]
    raise ValueError("granularity must be 'host' or 'rack'")


# Section 6.1/6.2 parameters.
PAPER = dict(k=16, n_clients=500, n_servers=100, t_kv=4e-3, n_parallel=4, utilization=0.9,
             acc_utilization=0.25, acc_cores=1, acc_service_time=5e-6, extra_fraction=0.10)


def paper_instance(k: int = 16, *, seed: int = 0, granularity: str = "host",
                   n_clients: int | None = None, n_servers: int | None = None,
                   scale_capacity: bool = True) -> Instance:
    """The evaluation setup of section 6: a k-ary fat tree, one accelerator per switch,
    500 clients and 100 servers on random hosts (scaled by host count for k != 16), aggregate
    rate ``A`` at 90 % system utilization (``t_kv A / (N_s N_p) = 0.9``), ``E = 10 % A``,
    ``T^max = U c / t = 0.25 * 1 / 5 us = 50 000 req/s``.

    For k != 16 with ``scale_capacity`` the accelerator capacity is scaled by ``A_k / A_16``
    so the capacity-to-load ratio (and so the shape of the problem) matches the paper's."""
    p = PAPER
    n_hosts = k ** 3 // 4
    if n_clients is None:
        n_clients = max(1, round(p["n_clients"] * n_hosts / 1024))
    if n_servers is None:
        n_servers = max(3, round(p["n_servers"] * n_hosts / 1024))
    rate = p["utilization"] * n_servers * p["n_parallel"] / p["t_kv"]
    cap = accelerator_capacity(p["acc_utilization"], p["acc_cores"], p["acc_service_time"])
    if scale_capacity and k != p["k"]:
        cap *= n_servers / p["n_servers"]
    topo = FatTree(k, capacity=cap)
    clients, servers = random_deployment(topo, n_clients, n_servers, seed)
    groups = groups_from_deployment(topo, clients, servers, rate / n_clients, granularity)
    return Instance(topo, groups, p["extra_fraction"] * rate)


# ----------------------------------------------------------------------------------------
# ILP (section 3.2) with HiGHS
# ----------------------------------------------------------------------------------------

@dataclass
class IlpResult:
    plan: Plan | None           # None if no feasible solution was found
    status: str                 # HiGHS model status, e.g. "Optimal", "Time limit reached"
    optimal: bool
    objective: float | None     # number of merged RSNodes of ``plan``
    bound: float | None         # HiGHS dual bound
    gap: float | None           # HiGHS relative MIP gap
    seconds: float
    num_cols: int
    num_rows: int
    num_nz: int
    open_ops: set[str] = field(default_factory=set)     # operators with D_j = 1

    def to_json(self) -> dict:
        return {"status": self.status, "optimal": self.optimal, "objective": self.objective,
                "bound": self.bound, "gap": self.gap, "seconds": self.seconds,
                "num_cols": self.num_cols, "num_rows": self.num_rows, "num_nz": self.num_nz,
                "rsnodes": None if self.plan is None else self.plan.num_rsnodes}


def solve_ilp(inst: Instance, *, drs: Iterable[str] = (), time_limit: float | None = None,
              mip_rel_gap: float | None = None, explicit_r: bool = False, tighten: bool = True,
              threads: int | None = None, seed: int = 0, verbose: bool = False,
              start_plan: Plan | None = None) -> IlpResult:
    """Solve the ILP (1)-(7) for all groups except those in ``drs`` (they get DRS).

    ``start_plan`` (e.g. Algorithm 1's plan) is handed to HiGHS as the initial incumbent."""
    import highspy

    t0 = time.perf_counter()
    drs = set(drs)
    groups = [g for g in inst.groups if g not in drs]
    if explicit_r:
        ops = sorted(o for o in inst.topo.operators if o not in inst.failed)
        pairs = [(g, o) for g in groups for o in ops]
    else:
        pairs = [(g, o) for g in groups for o in inst.eligible(g)]
        ops = sorted({o for _, o in pairs})
    if not groups:
        return IlpResult(Plan({}, drs), "Optimal", True, 0.0, 0.0, 0.0,
                         time.perf_counter() - t0, 0, 0, 0)
    gidx = {g: i for i, g in enumerate(groups)}
    oidx = {o: j for j, o in enumerate(ops)}
    n_p, n_d = len(pairs), len(ops)
    n_col = n_p + n_d           # columns: P pairs, then D_j
    rows_r: list[int] = []
    rows_c: list[int] = []
    rows_v: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    inf = highspy.kHighsInf

    def row(cols: Sequence[int], vals: Sequence[float], lower: float, upper: float) -> None:
        r = len(lo)
        rows_r.extend([r] * len(cols))
        rows_c.extend(cols)
        rows_v.extend(vals)
        lo.append(lower)
        hi.append(upper)

    loads = {g: inst.load(g) for g in groups}
    # (3) D_j - P_ij >= 0
    for p, (g, o) in enumerate(pairs):
        row([n_p + oidx[o], p], [1.0, -1.0], 0.0, inf)
    # (4) R_ij - P_ij >= 0  (explicit form only; otherwise P_ij exists only where R_ij = 1)
    if explicit_r:
        for p, (g, o) in enumerate(pairs):
            r_ij = 1.0 if o in set(inst.eligible(g)) else 0.0
            row([p], [1.0], -inf, r_ij)
    # (5) sum_j P_ij = 1
    by_group: dict[int, list[int]] = defaultdict(list)
    by_op: dict[int, list[int]] = defaultdict(list)
    for p, (g, o) in enumerate(pairs):
        by_group[gidx[g]].append(p)
        by_op[oidx[o]].append(p)
    for i in range(len(groups)):
        row(by_group[i], [1.0] * len(by_group[i]), 1.0, 1.0)
    # (6) sum_i P_ij L_i <= T^max_j
    for j, o in enumerate(ops):
        cols = by_op[j]
        row(cols, [loads[pairs[p][0]] for p in cols], -inf, inst.capacity[o])
    # (7) sum_ij P_ij X_ij <= E
    ex_cols, ex_vals = [], []
    for p, (g, o) in enumerate(pairs):
        x = inst.extra(g, o)
        if x:
            ex_cols.append(p)
            ex_vals.append(x)
    row(ex_cols, ex_vals, -inf, inst.E)
    # valid inequality: sum_i L_i P_ij - T^max_j D_j <= 0
    if tighten:
        for j, o in enumerate(ops):
            cols = by_op[j]
            row(cols + [n_p + j], [loads[pairs[p][0]] for p in cols] + [-inst.capacity[o]],
                -inf, 0.0)

    # CSC matrix
    rr = np.asarray(rows_r, dtype=np.int32)
    cc = np.asarray(rows_c, dtype=np.int32)
    vv = np.asarray(rows_v, dtype=np.float64)
    order = np.lexsort((rr, cc))
    rr, cc, vv = rr[order], cc[order], vv[order]
    start = np.zeros(n_col + 1, dtype=np.int32)
    np.add.at(start, cc + 1, 1)
    start = np.cumsum(start).astype(np.int32)

    lp = highspy.HighsLp()
    lp.num_col_ = n_col
    lp.num_row_ = len(lo)
    lp.col_cost_ = np.concatenate([np.zeros(n_p), np.ones(n_d)])       # (1)
    lp.col_lower_ = np.zeros(n_col)
    lp.col_upper_ = np.ones(n_col)                                       # (2) with integrality
    lp.row_lower_ = np.asarray(lo, dtype=np.float64)
    lp.row_upper_ = np.asarray(hi, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = rr
    lp.a_matrix_.value_ = vv
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n_col           # (2)
    lp.sense_ = highspy.ObjSense.kMinimize

    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(verbose))
    h.setOptionValue("random_seed", int(seed))
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    if mip_rel_gap is not None:
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    h.passModel(lp)
    if start_plan is not None:
        x0 = np.zeros(n_col)
        pidx = {pr: p for p, pr in enumerate(pairs)}
        for g, o in start_plan.assignment.items():
            if (g, o) in pidx:
                x0[pidx[(g, o)]] = 1.0
                x0[n_p + oidx[o]] = 1.0
        sol = highspy.HighsSolution()
        sol.col_value = list(x0)
        sol.value_valid = True
        h.setSolution(sol)
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    plan = None
    obj = bound = gap = None
    open_ops: set[str] = set()
    if info.primal_solution_status == 2:       # kSolutionStatusFeasible
        x = np.asarray(h.getSolution().col_value)
        assign = {}
        for p, (g, o) in enumerate(pairs):
            if x[p] > 0.5:
                assign[g] = o
        if len(assign) == len(groups):
            plan = Plan(assign, drs & set(inst.groups))
            open_ops = {o for j, o in enumerate(ops) if x[n_p + j] > 0.5}
            obj = float(plan.num_rsnodes)
        bound = float(info.mip_dual_bound)
        gap = float(info.mip_gap)
    return IlpResult(plan, h.modelStatusToString(status),
                     status == highspy.HighsModelStatus.kOptimal, obj, bound, gap,
                     time.perf_counter() - t0, n_col, len(lo), len(vv), open_ops)


def solve_with_drs(inst: Instance, **kw) -> tuple[IlpResult, set[str]]:
    """Section 4.1 (i): if the ILP is infeasible, enable DRS for the groups with the highest
    traffic until a feasible plan exists (smallest prefix, by binary search)."""
    res = solve_ilp(inst, **kw)
    if res.plan is not None or res.status not in ("Infeasible",):
        return res, set()
    order = sorted(inst.groups, key=lambda g: (-inst.load(g), g))
    lo, hi = 1, len(order)          # prefix sizes; hi (all groups DRS) is always feasible
    best = None
    while lo < hi:
        mid = (lo + hi) // 2
        r = solve_ilp(inst, drs=order[:mid], **kw)
        if r.plan is not None:
            hi, best = mid, r
        elif r.status == "Infeasible":
            lo = mid + 1
        else:                       # time limit without incumbent: treat as infeasible
            lo = mid + 1
    if best is None or len(best.plan.drs) != lo:
        best = solve_ilp(inst, drs=order[:lo], **kw)
    return best, set(order[:lo])


def drs_for_violations(inst: Instance, plan: Plan) -> Plan:
    """Section 4.1 (ii)/(iii) / 4.2: inputs changed under a fixed plan -- enable DRS for the
    groups of failed operators, then for the highest-traffic groups of every overloaded
    operator until it fits, then for the groups with the most extra hops until (7) holds."""
    new = plan.copy()
    for g in list(new.assignment):
        if g not in inst.groups:
            del new.assignment[g]
        elif new.assignment[g] in inst.failed or new.assignment[g] not in inst.eligible(g):
            del new.assignment[g]
            new.drs.add(g)
    new.drs = {g for g in new.drs if g in inst.groups}
    for g in inst.groups:
        if g not in new.assignment and g not in new.drs:
            new.drs.add(g)
    loads = plan_loads(inst, new)
    for o, ld in sorted(loads.items()):
        members = sorted((g for g, x in new.assignment.items() if x == o),
                         key=lambda g: (-inst.load(g), g))
        for g in members:
            if ld <= inst.capacity[o] + EPS:
                break
            ld -= inst.load(g)
            del new.assignment[g]
            new.drs.add(g)
    ex = plan_extra(inst, new)
    for g in sorted(new.assignment, key=lambda g: (-inst.extra(g, new.assignment[g]), g)):
        if ex <= inst.E + EPS:
            break
        ex -= inst.extra(g, new.assignment[g])
        del new.assignment[g]
        new.drs.add(g)
    return new


# ----------------------------------------------------------------------------------------
# Algorithm 1 (section 3.3) and the ToR-based initial plan (section 4.2)
# ----------------------------------------------------------------------------------------

def tor_based_plan(inst: Instance) -> Plan:
    """Every group's RSNode on an operator of its own ToR (the one with most room); groups
    that do not fit get DRS, highest traffic first (section 4.1)."""
    plan = Plan()
    room = dict(inst.capacity)
    by_tor: dict[str, list[str]] = defaultdict(list)
    for g, grp in inst.groups.items():
        by_tor[grp.tor].append(g)
    for tor, gs in by_tor.items():
        ops = [o for o in inst.topo.operators_of_switch(tor) if o not in inst.failed]
        # smallest first so that the highest-traffic groups are the ones left for DRS
        for g in sorted(gs, key=lambda g: (inst.load(g), g)):
            cands = [o for o in ops if room[o] + EPS >= inst.load(g)]
            if cands:
                o = max(cands, key=lambda o: (room[o], o))
                room[o] -= inst.load(g)
                plan.assignment[g] = o
            else:
                plan.drs.add(g)
    return plan


@dataclass
class Move:
    round: int
    group: str
    src: str | None
    dst: str | None             # None: DRS enabled
    reason: str


class AdaptivePlacer:
    """Algorithm 1: adaptively migrate RSNodes, one traffic-statistics report at a time.

    ``confirm`` is the multi-confirm threshold ``c``; ``t_up`` the upper-tier traffic share
    below which an upward migration is postponed.  ``plan`` defaults to the ToR-based plan."""

    def __init__(self, inst: Instance, *, confirm: int = 2, t_up: float = 0.5,
                 plan: Plan | None = None):
        if confirm < 1:
            raise ValueError("confirm must be >= 1")
        self.inst = inst.replace()          # own copy: traffic reports update it
        self.c = confirm
        self.t_up = t_up
        self.assign: dict[str, str] = {}
        self.drs: set[str] = set()
        self.members: dict[str, set[str]] = defaultdict(set)
        self.load: dict[str, float] = defaultdict(float)
        self.extra_total = 0.0
        self.confirmed: dict[str, int] = defaultdict(int)
        self.moves: list[Move] = []
        self.round_no = 0
        self._cands: dict[tuple[str, int], list[str]] = {}
        self._cand_sets: dict[tuple[str, int], frozenset[str]] = {}
        plan = tor_based_plan(inst) if plan is None else plan
        for g, o in plan.assignment.items():
            self._add(g, o)
        self.drs = set(plan.drs)

    # -- state ---------------------------------------------------------------------------
    @property
    def plan(self) -> Plan:
        return Plan(dict(self.assign), set(self.drs))

    def _add(self, g: str, o: str) -> None:
        self.assign[g] = o
        self.members[o].add(g)
        self.load[o] += self.inst.load(g)
        self.extra_total += self.inst.extra(g, o)

    def _remove(self, g: str) -> str:
        o = self.assign.pop(g)
        self.members[o].discard(g)
        if not self.members[o]:
            del self.members[o]
            self.load.pop(o, None)
        else:
            self.load[o] -= self.inst.load(g)
        self.extra_total -= self.inst.extra(g, o)
        return o

    def _move(self, g: str, dst: str | None, reason: str) -> str | None:
        src = self.assign.get(g)
        if dst == src and g not in self.drs:
            return dst
        if src is not None:
            self._remove(g)
        if dst is None:
            self.drs.add(g)
        else:
            self.drs.discard(g)
            self._add(g, dst)
        self.moves.append(Move(self.round_no, g, src, dst, reason))
        return dst

    def set_traffic(self, g: str, traffic: Sequence[float]) -> None:
        """A new traffic report for ``g`` (updates the instance and the cached totals)."""
        o = self.assign.get(g)
        if o is not None:
            self._remove(g)
        grp = self.inst.groups[g]
        self.inst.groups[g] = TrafficGroup(grp.name, grp.tor, grp.hosts,
                                           tuple(float(x) for x in traffic))
        if o is not None:
            self._add(g, o)

    # -- candidate search ----------------------------------------------------------------
    def _fits(self, g: str, d: str, check_extra: bool = True) -> bool:
        cur = self.assign.get(g)
        ld = self.load.get(d, 0.0) - (self.inst.load(g) if cur == d else 0.0)
        if ld + self.inst.load(g) > self.inst.capacity[d] + EPS:
            return False
        if check_extra:
            ex = self.extra_total - (self.inst.extra(g, cur) if cur else 0.0)
            if ex + self.inst.extra(g, d) > self.inst.E + EPS:
                return False
        return True

    def _pick(self, g: str, cands: Iterable[str], check_extra: bool = True) -> str | None:
        """Best-fit among occupied candidates, else the largest empty one."""
        cur = self.assign.get(g)
        occ, empty = [], []
        for d in cands:
            if d == cur or not self._fits(g, d, check_extra):
                continue
            (occ if d in self.members else empty).append(d)
        if occ:
            return max(occ, key=lambda d: (self.load[d], _neg(d)))
        if empty:
            return max(empty, key=lambda d: (self.inst.capacity[d], _neg(d)))
        return None

    def _tier_cands(self, g: str, tier: int) -> list[str]:
        key = (g, tier)
        c = self._cands.get(key)
        if c is None:
            c = [o for o in self.inst.eligible(g) if self.inst.topo.operators[o].tier == tier]
            self._cands[key] = c
            self._cand_sets[key] = frozenset(c)
        return c

    def _tier_cand_set(self, g: str, tier: int) -> frozenset[str]:
        self._tier_cands(g, tier)
        return self._cand_sets[(g, tier)]

    def horizontal(self, g: str) -> str | None:
        o = self.assign[g]
        return self._pick(g, self._tier_cands(g, self.inst.topo.operators[o].tier))

    def horizontal_merge(self, g: str) -> str | None:
        o = self.assign[g]
        rest = self.load[o] - self.inst.load(g)
        cands = [d for d in self._tier_cands(g, self.inst.topo.operators[o].tier)
                 if d != o and d in self.members and self.load[d] > rest + EPS
                 and self._fits(g, d)]
        if not cands:
            return None
        return max(cands, key=lambda d: (self.load[d], _neg(d)))

    def downward(self, g: str, check_extra: bool = True) -> str | None:
        o = self.assign[g]
        t = self.inst.topo.operators[o].tier
        if t >= self.inst.group_tier(g):
            return None
        return self._pick(g, self._tier_cands(g, t + 1), check_extra)

    def upward(self, g: str) -> str | None:
        o = self.assign[g]
        t = self.inst.topo.operators[o].tier
        if t <= CORE:
            return None
        return self._pick(g, self._tier_cands(g, t - 1))

    def upward_potential(self, g: str) -> bool:
        """Cases (i)/(ii) of section 3.3 (aggregate-capacity check, see module docstring)."""
        inst = self.inst
        o = self.assign[g]
        t = inst.topo.operators[o].tier
        up = [self._tier_cand_set(x, t - 1) for x in self.members[o]]
        U = frozenset.intersection(*up) if up else frozenset()
        if not U:
            return False
        occ_room = sum(max(0.0, inst.capacity[u] - self.load[u]) for u in U if u in self.members)
        empty_caps = sorted((inst.capacity[u] for u in U if u not in self.members), reverse=True)
        budget = inst.E - self.extra_total
        u0 = next(iter(U))

        def cost(op: str) -> tuple[float, float]:
            ld = dx = 0.0
            for x in self.members[op]:
                ld += inst.load(x)
                dx += inst.extra(x, u0) - inst.extra(x, op)
            return ld, dx

        need_ld, need_dx = cost(o)
        if need_dx <= budget + EPS and need_ld <= occ_room + EPS and occ_room > 0:
            return True                                  # case (i)
        others = []
        for op in self.members:
            if op == o or inst.topo.operators[op].tier != t:
                continue
            if all(U <= self._tier_cand_set(x, t - 1) for x in self.members[op]):
                others.append((cost(op), op))
        others.sort(key=lambda e: (e[0][0], e[1]))
        room = occ_room
        for x, ((ld, dx), _) in enumerate(others, start=1):   # case (ii)
            if x > len(empty_caps):
                break
            need_ld += ld
            need_dx += dx
            room += empty_caps[x - 1]
            if need_dx <= budget + EPS and need_ld <= room + EPS:
                return True
        return False

    def postpone(self, g: str) -> bool:
        inst = self.inst
        o = self.assign[g]
        t = inst.topo.operators[o].tier
        tr = inst.groups[g].traffic
        total = inst.load(g)
        if total > 0 and sum(tr[:t]) / total < self.t_up:
            return True                                  # (i) little upper-tier traffic
        for u, gs in self.members.items():              # (ii) nothing to merge with
            if inst.topo.operators[u].tier == t - 1:
                if any(o in inst.eligible(x) for x in gs):
                    return False
        return True

    # -- Algorithm 1 ---------------------------------------------------------------------
    def update(self, g: str, traffic: Sequence[float] | None = None) -> str | None:
        """UpdateRSP for a new report of ``g``; returns the RSNode operator (None: DRS)."""
        if traffic is not None:
            self.set_traffic(g, traffic)
        inst = self.inst
        if g in self.drs:
            self.confirmed[g] = 0
            for tier in range(inst.group_tier(g), CORE - 1, -1):
                d = self._pick(g, self._tier_cands(g, tier))
                if d is not None:
                    return self._move(g, d, "drs-replace")
            return None
        o = self.assign[g]
        if self.extra_total > inst.E + EPS:                        # lines 2-3
            self.confirmed[g] = 0
            if inst.extra(g, o) > 0:
                d = self.downward(g, check_extra=False)
                if d is not None:
                    return self._move(g, d, "c3-downward")
            return o
        if self.load[o] > inst.capacity[o] + EPS:                  # lines 4-8
            self.confirmed[g] = 0
            d = self.horizontal(g)
            if d is None or d not in self.members:
                dd = self.downward(g)
                if dd is not None:
                    d = dd
            if d is None:
                return self._move(g, None, "c2-drs")
            return self._move(g, d, "c2-migrate")
        d = self.upward(g)                                         # line 9
        if d is None or not self.upward_potential(g):              # lines 10-11
            self.confirmed[g] = 0
            m = self.horizontal_merge(g)
            return self._move(g, m, "merge") if m is not None else o
        if self.postpone(g):                                       # lines 12-15
            self.confirmed[g] += 1
            if self.confirmed[g] < self.c:
                m = self.horizontal_merge(g)
                return self._move(g, m, "merge") if m is not None else o
        self.confirmed[g] = 0
        return self._move(g, d, "upward")

    def round(self, order: Sequence[str] | None = None) -> int:
        """Every group reports once; returns the number of migrations."""
        self.round_no += 1
        n = len(self.moves)
        for g in (sorted(self.inst.groups) if order is None else order):
            self.update(g)
        return len(self.moves) - n

    def run(self, max_rounds: int = 1000) -> Plan:
        """Rounds until nothing changes (no migration, no multi-confirm counter change)."""
        for _ in range(max_rounds):
            before = dict(self.confirmed)
            if self.round() == 0 and {k: v for k, v in self.confirmed.items() if v} == \
                    {k: v for k, v in before.items() if v}:
                break
        return self.plan


def _neg(name: str) -> tuple:
    """Tie-break key preferring the lexicographically smallest name under max()."""
    return tuple(-ord(ch) for ch in name) + (0,)


def heuristic_plan(inst: Instance, *, confirm: int = 2, t_up: float = 0.5,
                   max_rounds: int = 1000) -> tuple[Plan, AdaptivePlacer]:
    p = AdaptivePlacer(inst, confirm=confirm, t_up=t_up)
    return p.run(max_rounds), p


# ----------------------------------------------------------------------------------------
# Algorithm 2 (section 4.3)
# ----------------------------------------------------------------------------------------

@dataclass
class FailureReport:
    affected: list[str]                 # groups whose RSNode was on a failed operator
    moved: dict[str, str]               # group -> new operator
    drs: list[str]                      # groups left with DRS enabled
    drs_first: list[str]                # groups DRS-enabled immediately (lines 2-3)


def failure_update(inst: Instance, plan: Plan, *, failed: Iterable[str] = (),
                   failed_switches: Iterable[str] = ()) -> tuple[Instance, Plan, FailureReport]:
    """Algorithm 2: DRS for RSNodes on failed operators, ``T^max = 0`` for failed operators,
    then horizontal, else downward migration of each affected RSNode.  Returns the updated
    instance (failures recorded), the new plan and what happened."""
    new_inst = inst.replace(failed=failed, failed_switches=failed_switches)
    dead = new_inst.failed
    topo = new_inst.topo
    plan = plan.copy()
    old_tier = {g: topo.operators[o].tier for g, o in plan.assignment.items() if o in dead}
    affected = sorted(old_tier)
    for g in affected:                                  # lines 2-3: DRS first
        del plan.assignment[g]
        plan.drs.add(g)
    drs_first = list(affected)
    # lines 4-5: T^max = 0 for failed operators (done by Instance.replace)
    loads: dict[str, float] = defaultdict(float, plan_loads(new_inst, plan))
    extra = plan_extra(new_inst, plan)
    moved: dict[str, str] = {}

    def pick(g: str, tier: int) -> str | None:
        occ, empty = [], []
        for d in new_inst.eligible(g):
            if topo.operators[d].tier != tier:
                continue
            if loads[d] + new_inst.load(g) > new_inst.capacity[d] + EPS:
                continue
            if extra + new_inst.extra(g, d) > new_inst.E + EPS:
                continue
            (occ if loads.get(d, 0.0) > 0 or d in plan.rsnodes else empty).append(d)
        if occ:
            return max(occ, key=lambda d: (loads[d], _neg(d)))
        if empty:
            return max(empty, key=lambda d: (new_inst.capacity[d], _neg(d)))
        return None

    for g in sorted(affected, key=lambda g: (-new_inst.load(g), g)):      # lines 6-10
        d = pick(g, old_tier[g])                                         # horizontal
        tier = old_tier[g]
        while d is None and tier < new_inst.group_tier(g):               # downward
            tier += 1
            d = pick(g, tier)
        if d is None:
            continue                                                     # DRS stays on
        plan.drs.discard(g)
        plan.assignment[g] = d
        loads[d] += new_inst.load(g)
        extra += new_inst.extra(g, d)
        moved[g] = d
    return new_inst, plan, FailureReport(affected, moved, sorted(set(affected) - set(moved)),
                                         drs_first)


# ----------------------------------------------------------------------------------------
# Symmetry-aggregated relaxation: a fast lower bound (and usually a plan) for big instances
# ----------------------------------------------------------------------------------------

@dataclass
class AggregatedResult:
    lower_bound: float          # valid lower bound on the optimum of the ILP (1)-(7)
    plan: Plan | None           # first-fit-decreasing realisation of the relaxed optimum
    status: str
    seconds: float

    def to_json(self) -> dict:
        return {"lower_bound": self.lower_bound, "status": self.status,
                "seconds": self.seconds,
                "rsnodes": None if self.plan is None else self.plan.num_rsnodes}


def operator_classes(inst: Instance) -> list[list[str]]:
    """Live operators grouped by (tier, capacity, set of groups they may serve)."""
    serves: dict[str, list[str]] = defaultdict(list)
    for g in sorted(inst.groups):
        for o in inst.eligible(g):
            serves[o].append(g)
    classes: dict[tuple, list[str]] = defaultdict(list)
    for o, gs in serves.items():
        classes[(inst.topo.operators[o].tier, inst.capacity[o], tuple(gs))].append(o)
    return [sorted(v) for _, v in sorted(classes.items(), key=lambda kv: kv[1][0])]


def aggregated_bound(inst: Instance, *, time_limit: float | None = 60.0,
                     verbose: bool = False) -> AggregatedResult:
    """Relaxation of the ILP exploiting the fat tree's symmetry: operators that are
    interchangeable (same tier, ``T^max`` and ``R`` column) form a class; the model picks a
    class per group (``y_gc``) and a number of open operators per class (``n_c``) with
    ``sum_g L_g y_gc <= T^max_c n_c``.  Every ILP plan maps onto a solution with the same
    objective, so its optimum (or HiGHS's dual bound) bounds the ILP optimum from below.  The
    relaxed solution is turned into a real plan by first-fit decreasing within each class."""
    import highspy

    t0 = time.perf_counter()
    classes = operator_classes(inst)
    groups = sorted(inst.groups)
    if not groups:
        return AggregatedResult(0.0, Plan(), "Optimal", time.perf_counter() - t0)
    cls_of = {o: c for c, ops in enumerate(classes) for o in ops}
    pairs = sorted({(g, cls_of[o]) for g in groups for o in inst.eligible(g)})
    n_p, n_c = len(pairs), len(classes)
    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(verbose))
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    inf = highspy.kHighsInf
    cost = np.concatenate([np.zeros(n_p), np.ones(n_c)])
    upper = np.concatenate([np.ones(n_p), [float(len(c)) for c in classes]])
    h.addVars(n_p + n_c, np.zeros(n_p + n_c), upper)
    h.changeColsCost(n_p + n_c, np.arange(n_p + n_c, dtype=np.int32), cost)
    h.changeColsIntegrality(n_p + n_c, np.arange(n_p + n_c, dtype=np.int32),
                            np.array([highspy.HighsVarType.kInteger] * (n_p + n_c)))
    by_g: dict[str, list[int]] = defaultdict(list)
    by_c: dict[int, list[int]] = defaultdict(list)
    for p, (g, c) in enumerate(pairs):
        by_g[g].append(p)
        by_c[c].append(p)

    def add_row(lo: float, hi: float, idx: list[int], val: list[float]) -> None:
        h.addRow(lo, hi, len(idx), np.asarray(idx, dtype=np.int32),
                 np.asarray(val, dtype=np.float64))

    for g in groups:
        add_row(1.0, 1.0, by_g[g], [1.0] * len(by_g[g]))
    for c, ops in enumerate(classes):
        cap = inst.capacity[ops[0]]
        ps = by_c[c]
        add_row(-inf, 0.0, ps + [n_p + c], [inst.load(pairs[p][0]) for p in ps] + [-cap])
        for p in ps:
            add_row(0.0, inf, [n_p + c, p], [1.0, -1.0])
    ex = [(p, inst.extra(g, classes[c][0])) for p, (g, c) in enumerate(pairs)]
    ex = [(p, x) for p, x in ex if x]
    add_row(-inf, inst.E, [p for p, _ in ex], [x for _, x in ex])
    h.run()
    info = h.getInfo()
    status = h.modelStatusToString(h.getModelStatus())
    if h.getModelStatus() == highspy.HighsModelStatus.kInfeasible:
        return AggregatedResult(math.inf, None, status, time.perf_counter() - t0)
    lb = float(info.mip_dual_bound) if info.mip_dual_bound == info.mip_dual_bound else 0.0
    lb = math.ceil(lb - 1e-6)                      # the objective is integral
    plan = None
    if info.primal_solution_status == 2:
        x = np.asarray(h.getSolution().col_value)
        chosen: dict[int, list[str]] = defaultdict(list)
        for p, (g, c) in enumerate(pairs):
            if x[p] > 0.5:
                chosen[c].append(g)
        plan = Plan()
        for c, gs in chosen.items():
            room = {o: inst.capacity[o] for o in classes[c]}
            opened: list[str] = []
            for g in sorted(gs, key=lambda g: (-inst.load(g), g)):
                tgt = next((o for o in opened if room[o] + EPS >= inst.load(g)), None)
                if tgt is None:
                    tgt = next((o for o in classes[c] if o not in opened
                                and room[o] + EPS >= inst.load(g)), None)
                    if tgt is None:
                        plan = None
                        break
                    opened.append(tgt)
                room[tgt] -= inst.load(g)
                plan.assignment[g] = tgt
            if plan is None:
                break
    return AggregatedResult(float(lb), plan, status, time.perf_counter() - t0)
