"""RSNode placement benchmark: ILP (HiGHS) vs Algorithm 1 on the paper's setup.

``python -m netstor.offloads.netrs.bench --out build/bench/placement.json``

For each k (default 4, 8, 16; k = 16 is the paper's 1024-host fat tree, section 6.1: 500
clients, 100 servers on random hosts, one accelerator per switch, ``T^max`` = 50 000 req/s,
``A`` at 90 % utilization, ``E = 10 % A``; smaller k scale clients, servers, ``A`` and
``T^max`` by the host count) it measures:

* ``tor``: the ToR-based plan (NetRS-ToR, the starting point of Algorithm 1);
* ``heuristic``: Algorithm 1 (NetRS-ADP) run to quiescence -- time, RSNodes, rounds, moves;
* ``ilp``: the paper's ILP solved by HiGHS from scratch with a time limit (``--ilp-time-limit``)
  -- status, incumbent, HiGHS dual bound and gap, time, model size;
* ``aggregated``: the symmetry-aggregated relaxation (a valid lower bound on the ILP optimum)
  and its first-fit-decreasing plan -- if both meet, the optimum is proven;
* ``optimum``: the best verified plan and whether it is proven optimal; the heuristic's
  excess over it;
* ``failure``: Algorithm 2 after the busiest RSNode of the best plan fails.

With ``--warm-start`` the ILP also gets Algorithm 1's plan as the initial incumbent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from .placement import (Instance, aggregated_bound, failure_update, heuristic_plan,
                        paper_instance, solve_ilp, tor_based_plan, violations)


def bench_one(k: int, *, seed: int, granularity: str, ilp_time_limit: float,
              warm_start: bool, confirm: int, t_up: float) -> dict:
    inst: Instance = paper_instance(k, seed=seed, granularity=granularity)
    out: dict = {
        "k": k, "hosts": len(inst.topo.hosts), "switches": len(inst.topo.switches),
        "operators": len(inst.topo.operators), "groups": len(inst.groups),
        "granularity": granularity, "seed": seed,
        "total_traffic": inst.total_traffic, "E": inst.E,
        "capacity": max(inst.capacity.values()),
    }
    tor = tor_based_plan(inst)
    out["tor"] = {"rsnodes": tor.num_rsnodes, "drs": len(tor.drs)}

    t0 = time.perf_counter()
    plan, placer = heuristic_plan(inst, confirm=confirm, t_up=t_up)
    out["heuristic"] = {"seconds": time.perf_counter() - t0, "rsnodes": plan.num_rsnodes,
                        "drs": len(plan.drs), "rounds": placer.round_no,
                        "moves": len(placer.moves), "confirm": confirm, "t_up": t_up,
                        "feasible": not violations(inst, plan)}

    res = solve_ilp(inst, time_limit=ilp_time_limit)
    out["ilp"] = res.to_json()
    out["ilp"]["time_limit"] = ilp_time_limit
    out["ilp"]["feasible"] = res.plan is not None and not violations(inst, res.plan)
    candidates = [(plan.num_rsnodes, "heuristic", plan)] if not plan.drs else []
    if res.plan is not None:
        candidates.append((res.plan.num_rsnodes, "ilp", res.plan))
    if warm_start:
        w = solve_ilp(inst, time_limit=ilp_time_limit, start_plan=plan)
        out["ilp_warm"] = w.to_json()
        if w.plan is not None:
            candidates.append((w.plan.num_rsnodes, "ilp_warm", w.plan))

    agg = aggregated_bound(inst, time_limit=ilp_time_limit)
    out["aggregated"] = agg.to_json()
    if agg.plan is not None and not violations(inst, agg.plan):
        candidates.append((agg.plan.num_rsnodes, "aggregated", agg.plan))
    lower = max(agg.lower_bound, res.bound or 0.0)
    if res.optimal:
        lower = max(lower, res.objective)
    best_n, best_src, best = min(candidates, key=lambda c: c[0])
    out["optimum"] = {"rsnodes": best_n, "source": best_src, "lower_bound": lower,
                      "proven": best_n <= lower + 1e-9}
    out["heuristic"]["excess_over_best"] = plan.num_rsnodes - best_n

    busiest = max(best.rsnodes, key=lambda o: sum(1 for x in best.assignment.values()
                                                    if x == o))
    t0 = time.perf_counter()
    new_inst, new_plan, rep = failure_update(inst, best, failed=[busiest])
    out["failure"] = {"failed": busiest, "seconds": time.perf_counter() - t0,
                      "affected": len(rep.affected), "moved": len(rep.moved),
                      "drs": len(rep.drs), "rsnodes_after": new_plan.num_rsnodes,
                      "feasible": not violations(new_inst, new_plan)}
    return out


def summary(results: list[dict]) -> str:
    lines = [f"{'k':>3} {'hosts':>5} {'grp':>4} | {'ToR':>4} | {'heur':>4} {'t_heur':>7} | "
             f"{'ILP':>4} {'bound':>5} {'gap':>6} {'t_ILP':>7} {'status':<20} | "
             f"{'aggLB':>5} {'t_agg':>6} | {'best':>4} proven | Alg2"]
    for r in results:
        il, h, a, o, f = r["ilp"], r["heuristic"], r["aggregated"], r["optimum"], r["failure"]
        ilp_n = "-" if il["rsnodes"] is None else f"{il['rsnodes']}"
        gap = "-" if il["gap"] is None else f"{100 * il['gap']:.0f}%"
        bound = "-" if il["bound"] is None else f"{il['bound']:.0f}"
        lines.append(
            f"{r['k']:>3} {r['hosts']:>5} {r['groups']:>4} | {r['tor']['rsnodes']:>4} | "
            f"{h['rsnodes']:>4} {h['seconds']:>6.2f}s | {ilp_n:>4} {bound:>5} {gap:>6} "
            f"{il['seconds']:>6.1f}s {il['status'][:20]:<20} | {a['lower_bound']:>5.0f} "
            f"{a['seconds']:>5.2f}s | {o['rsnodes']:>4} {str(o['proven']):<6} | "
            f"{f['affected']} moved {f['moved']} drs {f['drs']} {1e3 * f['seconds']:.1f}ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/bench/placement.json")
    ap.add_argument("--k", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--granularity", choices=["host", "rack"], default="host")
    ap.add_argument("--ilp-time-limit", type=float, default=60.0,
                    help="HiGHS time limit per ILP solve, seconds (default 60)")
    ap.add_argument("--warm-start", action="store_true",
                    help="also solve the ILP with Algorithm 1's plan as initial incumbent")
    ap.add_argument("--confirm", type=int, default=2, help="multi-confirm threshold c")
    ap.add_argument("--t-up", type=float, default=0.5, help="Algorithm 1 threshold t_up")
    args = ap.parse_args(argv)
    results = []
    for k in args.k:
        results.append(bench_one(k, seed=args.seed, granularity=args.granularity,
                                 ilp_time_limit=args.ilp_time_limit,
                                 warm_start=args.warm_start, confirm=args.confirm,
                                 t_up=args.t_up))
        print(f"k={k} done", file=sys.stderr, flush=True)
    doc = {"benchmark": "netrs-placement", "python": platform.python_version(),
           "cpus": os.cpu_count(), "args": vars(args), "results": results}
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
    print(summary(results))
    if args.out:
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
