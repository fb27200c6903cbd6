"""NICE's figures in the cluster simulator (:mod:`.sim`; the ``make eval`` section).

The paper's set-up (Al-Kiswany et al., HPDC 2017, section 6; the text in ``../shared/papers/``):
15 storage nodes + 1 metadata node, 1 Gb/s NICs, one switch, replication 3, objects 4 B ..
1 MB, one client doing one operation after another (sections 6.1, 6.2, 6.4: the mean of 1,000
operations; ours: fewer, repeated with other seeds for 95 % intervals). Figures:

* fig 4 -- get time against object size: NICE, NOOB with RAC, RAG, ROG;
* fig 5 -- put time against object size (NOOB primary-backup): the paper's "up to 4.3x / 3.4x /
  2.6x" faster than ROG / RAG / RAC;
* fig 6 -- network load of a put (bytes over every cable); fig 7 -- bytes a put moves through
  its primary over those through a secondary;
* fig 9 -- put time against the replication level 1..9 at 4 B and 1 MB: NICE, NOOB-RAC
  primary-only (primary-backup) and NOOB-RAC 2PC (the paper: NICE +17 % from R1 to R9 at
  1 MB, NOOB up to 7x);
* fig 10 -- load balancing (weak scaling): R replicas, 1 client putting one object while R-1
  clients get it (and the get-only workload without the put client), R = 3, 5, 7, 9, 4 B and
  1 MB: NICE (its gets through the divisions), NOOB-RAC primary-only and NOOB-RAC 2PC (gets
  balanced by the client); the workload's completion time, the gets per replica, the gets
  that waited on a lock (``docs/nice.md``, "Evaluation: load balancing");
* fig 11 -- the failure timeline: 3 clients, 20/80 put/get of 1 KB objects in one partition,
  gets load-balanced (client i's division is replica i), a secondary fails at 30 s and comes
  back at 90 s; detection by the metadata service after 2 time-out reports or 3 missed
  heartbeats (period ``HEARTBEAT_S``), and a heartbeat-only run beside it.

Taken from the paper: the set-up above, the 1,400-byte fragments, the 2 s client retry after
a failed put. Measured (:func:`.sim.measure_costs`, :data:`.sim.COSTS`): every per-message
CPU cost. Ours, chosen before any run and stated in the report: stores fsync'd (the paper's
figure 3 draws the log and the object write as forced writes; no fsync is the variant row),
one CPU per node (our agents are single-threaded), whole-object relaying at every
application hop, 0.5 us per cable; from our agents: the primary's PUT_ACK wait
(``codec.ACK_TIMEOUT``, 0.4 s), heartbeats every ``metadata.BEAT`` (1 s), the agents' writes
(lock + log + pending in one LMDB transaction; commit: the log record deleted, the object
written).

``python -m netstor.offloads.nice.eval --out build/eval/nice.json [--preset
smoke|headline|full] [--jobs 2]``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from netstor.cluster.stats import ci95

from .codec import ACK_TIMEOUT
from .metadata import BEAT
from .sim import COSTS, LB_SYSTEMS, failure_run, latency_run, lb_run, measure_costs
from netstor.evaluation.report import ci_text as _ci

__all__ = ["PRESETS", "tasks", "run", "aggregate", "summary_of", "plot", "report_markdown",
           "EVALUATION", "main"]

PAPER = {"put_speedup_vs_rog": 4.3, "put_speedup_vs_rag": 3.4, "put_speedup_vs_rac": 2.6,
         "get_speedup_small_vs_rog": 2.0, "get_speedup_small_vs_rag": 1.5,
         "load_reduction": [1.7, 3.5], "noob_primary_ratio": 3.0,
         "put_time_growth_r1_to_r9": 1.17, "noob_growth_r1_to_r9": 7.0,
         "nice_vs_2pc_4b": 1.3, "nice_vs_noob_1mb": 5.5, "unavailable_s": 2.0}
NOOB = ("rac", "rag", "rog")
SCHEMES = ("nice",) + NOOB
REPL = (("nice", "pb"), ("rac", "pb"), ("rac", "2pc"))
HEARTBEAT_S = BEAT                  # metadata.BEAT: our nodes' heartbeat period
ACK_TIMEOUT_S = ACK_TIMEOUT         # codec.ACK_TIMEOUT: our agents' PUT_ACK wait
SIZES = [4, 64, 1024, 4096, 16384, 65536, 262144, 1 << 20]
#: Figure 10's replication levels (the paper does not list them; R >= 2: R-1 get clients)
LB_REPLICAS = [3, 5, 7, 9]
LB_NAMES = {"nice": "NICE", "pb": "NOOB-RAC primary-only", "2pc": "NOOB-RAC 2PC"}

PRESETS = {
    "smoke": {"sizes": [4, 65536], "ops": {4: 8, 65536: 3}, "repeats": 2, "cost_rounds": 3,
              "replicas": [1, 9], "rep_sizes": [4, 65536], "nosync": [4],
              "lb": {"sizes": [4, 16384], "replicas": [3, 5], "n": {4: 20, 16384: 4},
                     "repeats": 2, "nosync": []},
              "fail": {"duration_s": 6.0, "fail_s": 2.0, "rejoin_s": 4.0, "rate": 40.0,
                       "heartbeat_s": 0.1, "ack_timeout_s": 0.05, "retry_s": 0.2,
                       "timeout_s": 0.2, "bin_s": 0.25}},
    "headline": {"sizes": SIZES, "ops": {4: 40, 64: 40, 1024: 40, 4096: 40, 16384: 30,
                                        65536: 15, 262144: 8, 1 << 20: 5},
                 "repeats": 3, "replicas": list(range(1, 10)), "rep_sizes": [4, 1 << 20],
                 "nosync": [4, 1 << 20],
                 "lb": {"sizes": [4, 1 << 20], "replicas": LB_REPLICAS,
                        "n": {4: 200, 1 << 20: 8}, "repeats": 4, "nosync": [4]},
                 "fail": {"duration_s": 120.0, "fail_s": 30.0, "rejoin_s": 90.0, "rate": 50.0,
                          "heartbeat_s": HEARTBEAT_S, "ack_timeout_s": ACK_TIMEOUT_S,
                          "retry_s": 2.0, "timeout_s": 2.0, "bin_s": 1.0}},
    "full": {"sizes": SIZES, "ops": {s: 200 for s in SIZES}, "repeats": 5,
             "replicas": list(range(1, 10)), "rep_sizes": [4, 1 << 20], "nosync": SIZES,
             "lb": {"sizes": [4, 1 << 20], "replicas": LB_REPLICAS,
                    "n": {4: 1000, 1 << 20: 40}, "repeats": 5, "nosync": [4, 1 << 20]},
             "fail": {"duration_s": 120.0, "fail_s": 30.0, "rejoin_s": 90.0, "rate": 200.0,
                      "heartbeat_s": HEARTBEAT_S, "ack_timeout_s": ACK_TIMEOUT_S,
                      "retry_s": 2.0, "timeout_s": 2.0, "bin_s": 1.0}},
}


def _switch():
    from .sim import model_available
    return "model" if model_available() else "ref"


def tasks(preset="headline", seed0=1):
    """The runs: ``[kwargs of run()]`` (groups ``get``, ``put``, ``rep``, ``fail``, ``costs``)."""
    p = PRESETS[preset]
    sw = _switch()
    out = [{"group": "costs", "seed": seed0, "repeat": 0, "rounds": p.get("cost_rounds", 20)}]
    for rep in range(p["repeats"]):
        seed = seed0 + rep
        for size in p["sizes"]:
            n = p["ops"][size]
            for s in SCHEMES:
                out.append({"group": "get", "scheme": s, "size": size, "n": n, "seed": seed,
                            "repeat": rep, "switch": sw})
                out.append({"group": "put", "scheme": s, "size": size, "n": n, "seed": seed,
                            "repeat": rep, "switch": sw, "sync": True})
                if size in p["nosync"]:
                    out.append({"group": "put", "scheme": s, "size": size, "n": n,
                                "seed": seed, "repeat": rep, "switch": sw, "sync": False})
        for size in p["rep_sizes"]:
            n = p["ops"][size]
            for R in p["replicas"]:
                for s, cons in REPL:
                    out.append({"group": "rep", "scheme": s, "consistency": cons, "size": size,
                                "replicas": R, "n": n, "seed": seed, "repeat": rep,
                                "switch": sw, "sync": True})
    lb = p.get("lb")
    for rep in range(lb["repeats"] if lb else 0):
        seed = seed0 + rep
        for size in lb["sizes"]:
            for sync in (True, False) if size in lb["nosync"] else (True,):
                for R in lb["replicas"]:
                    for system in LB_SYSTEMS:
                        for get_only in (False, True):
                            out.append({"group": "lb", "system": system, "size": size,
                                        "replicas": R, "get_only": get_only,
                                        "n": lb["n"][size], "seed": seed, "repeat": rep,
                                        "switch": sw, "sync": sync})
    for role, reports in (("secondary", True), ("secondary", False), ("primary", True)):
        out.append({"group": "fail", "seed": seed0, "repeat": 0, "switch": sw,
                    "fail_role": role, "report_timeouts": reports, **p["fail"]})
    return out


def run(group, seed, repeat, **kw):
    """One evaluation task (see :func:`tasks`)."""
    base = dict(group=group, seed=seed, repeat=repeat, **kw)
    t0 = time.process_time()
    if group == "costs":
        return dict(base, result=measure_costs(rounds=kw.get("rounds", 20)),
                    cpu_s=round(time.process_time() - t0, 2))
    if group == "lb":
        res = lb_run(kw["system"], kw["size"], kw["replicas"], n=kw["n"],
                     get_only=kw["get_only"], seed=seed, switch=kw.get("switch", "ref"),
                     sync=kw.get("sync", True))
        return dict(base, result=res, cpu_s=round(time.process_time() - t0, 2))
    if group == "fail":
        args = {k: v for k, v in kw.items() if k != "switch"}
        res = failure_run(seed=seed, switch=kw.get("switch", "ref"), **args)
        return dict(base, result=res, cpu_s=round(time.process_time() - t0, 2))
    kind = "get" if group == "get" else "put"
    res = latency_run(kw["scheme"], kind, kw["size"], n=kw["n"],
                      replicas=kw.get("replicas", 3), consistency=kw.get("consistency", "pb"),
                      seed=seed, sync=kw.get("sync", True), switch=kw.get("switch", "ref"))
    return dict(base, result=res, cpu_s=round(time.process_time() - t0, 2))


# ---- aggregation -----------------------------------------------------------------------------
def _by(done, **match):
    return [t for t in done if all(t.get(k) == v for k, v in match.items())]


def _mci(values, nd=3):
    v = [x for x in values if x is not None]
    m, (lo, hi) = ci95(v)
    rnd = (lambda x: None if x is None else round(x, nd))
    return {"mean": rnd(m), "ci95": [rnd(lo), rnd(hi)], "n": len(v)}


def _val(ts, key="mean_us"):
    return {t["seed"]: t["result"][key] for t in ts}


def _ratio_ci(a, b):
    """Per-seed ratio a / b (paired: the same seed), mean and 95 % CI."""
    return _mci([a[s] / b[s] for s in a if s in b and a[s] and b[s]])


def aggregate(done, *, preset=None, wall_s=None):
    seeds = sorted({t["seed"] for t in done if t["group"] in ("get", "put")})
    sizes = sorted({t["size"] for t in done if t["group"] == "put"})
    res = {"figure": "NICE (HPDC'17): figures 4, 5, 6, 7, 9, 10, 11",
           "setup": {"storage_nodes": 15, "metadata_nodes": 1, "gbps": 1.0, "replicas": 3,
                     "frag_data": 1400, "link_ns": 500, "sync": True,
                     "heartbeat_s": HEARTBEAT_S, "ack_timeout_s": ACK_TIMEOUT_S,
                     "preset": preset, "seeds": seeds,
                     "switch": sorted({t.get("switch") for t in done if t.get("switch")}),
                     "model": sorted({t["result"].get("model") for t in done
                                      if t["group"] in ("get", "put") and t.get("scheme") == "nice"}),
                     "costs": {k: v for k, v in COSTS.items() if k != "ratio"}}}
    fresh = _by(done, group="costs")
    res["costs_now"] = {k: v for k, v in fresh[0]["result"].items() if k != "ratio"} \
        if fresh else None
    # figures 4 and 5 (+ 6, 7)
    for fig, group, sync in (("get", "get", None), ("put", "put", True),
                             ("put_nosync", "put", False)):
        sel = dict(group=group) if sync is None else dict(group=group, sync=sync)
        ts = _by(done, **sel)
        szs = sorted({t["size"] for t in ts})
        if not szs:
            continue
        e = {"sizes": szs, "schemes": {}}
        for s in SCHEMES:
            rows = [_by(ts, scheme=s, size=z) for z in szs]
            e["schemes"][s] = {
                "mean_us": [_mci([t["result"]["mean_us"] for t in r], 2) for r in rows],
                "link_bytes_per_op": [_mci([t["result"]["link_bytes_per_op"] for t in r], 0)
                                      for r in rows],
                "primary_over_secondary": [_mci([
                    t["result"]["primary_bytes_per_op"] / t["result"]["secondary_bytes_per_op"]
                    for t in r if t["result"]["secondary_bytes_per_op"]], 3) for r in rows],
                "failed": sum(t["result"]["failed"] for rr in rows for t in rr)}
        for o in NOOB:
            e[f"speedup_vs_{o}"] = [_ratio_ci(_val(_by(ts, scheme=o, size=z)),
                                              _val(_by(ts, scheme="nice", size=z)))
                                    for z in szs]
            e[f"load_vs_{o}"] = [_ratio_ci(_val(_by(ts, scheme=o, size=z), "link_bytes_per_op"),
                                           _val(_by(ts, scheme="nice", size=z),
                                                "link_bytes_per_op")) for z in szs]
        res[fig] = e
    # figure 9
    rp = _by(done, group="rep")
    if rp:
        Rs = sorted({t["replicas"] for t in rp})
        e = {"replicas": Rs, "sizes": sorted({t["size"] for t in rp}), "systems": {}}
        for z in e["sizes"]:
            for s, cons in REPL:
                name = "nice" if s == "nice" else f"noob_{cons}"
                e["systems"].setdefault(name, {})[str(z)] = [
                    _mci([t["result"]["mean_us"] for t in
                          _by(rp, scheme=s, consistency=cons, size=z, replicas=R)], 2)
                    for R in Rs]
            for s, cons in REPL:
                name = "nice" if s == "nice" else f"noob_{cons}"
                lo = _val(_by(rp, scheme=s, consistency=cons, size=z, replicas=Rs[0]))
                hi = _val(_by(rp, scheme=s, consistency=cons, size=z, replicas=Rs[-1]))
                e.setdefault("growth", {}).setdefault(name, {})[str(z)] = _ratio_ci(hi, lo)
            nice = {R: _val(_by(rp, scheme="nice", size=z, replicas=R)) for R in Rs}
            for cons in ("pb", "2pc"):
                e.setdefault("speedup", {}).setdefault(f"noob_{cons}", {})[str(z)] = [
                    _ratio_ci(_val(_by(rp, scheme="rac", consistency=cons, size=z,
                                       replicas=R)), nice[R]) for R in Rs]
        res["rep"] = e
    # figure 10
    lb = aggregate_lb(_by(done, group="lb"))
    if lb:
        res["lb"] = lb
    # figure 11
    res["fail"] = [dict(t["result"], cpu_s=t["cpu_s"]) for t in _by(done, group="fail")]
    cpu = [t.get("cpu_s", 0) for t in done]
    res["perf"] = {"runs": len(done), "cpu_s": round(sum(cpu), 1), "wall_s": wall_s,
                   "cpu_s_by_group": {g: round(sum(t.get("cpu_s", 0) for t in done
                                                    if t["group"] == g), 1)
                                      for g in ("costs", "get", "put", "rep", "lb", "fail")}}
    return res


def _upto(lst):
    """The largest mean of a per-size list of CIs, with its index."""
    best, at = None, None
    for i, d in enumerate(lst or []):
        if d and d.get("mean") is not None and (best is None or d["mean"] > best["mean"]):
            best, at = d, i
    return best, at


#: The paper's figure 10 claims (section 6.5), for the summary and the report.
PAPER_LB = {"speedup_vs_pb": 7.5, "speedup_vs_2pc": 5.5, "growth_pb_4": 10.0,
            "growth_pb_1048576": 3.5, "growth_2pc": 2.6, "growth_nice_4": 1.8,
            "growth_nice_1048576": 1.2}


def _lb_tag(size, sync):
    return str(size) + ("" if sync else "_nosync")


def aggregate_lb(ts):
    """Figure 10 from the ``lb`` runs: per system, size (``"4"``, ``"1048576"``; ``_nosync``
    without fsync) and R, the workload's completion time (``mixed``: 1 put client and R-1
    get clients, ``get_only``: the get clients alone; ms), the mean operation times (all
    operations pooled, gets, puts; us), NICE's speed-up over each baseline and each system's
    growth from the lowest to the highest R (paired per seed; on the completion time, and as
    ``*_mean_op`` on the pooled mean), the gets per replica and the locked gets (the
    measurements that explain them)."""
    if not ts:
        return None
    Rs = sorted({t["replicas"] for t in ts})
    e = {"replicas": Rs, "sizes": sorted({t["size"] for t in ts}),
         "n": {str(t["size"]): t["n"] for t in ts},
         "seeds": sorted({t["seed"] for t in ts}),
         "metric": "completion time of the workload (ms): every client done",
         "tags": [], "systems": {}, "speedup": {}, "growth": {}, "speedup_mean_op": {},
         "growth_mean_op": {}, "gets_per_replica": {},
         "locked_gets": {}, "divisions": {}}
    for sync in (True, False):
        for z in e["sizes"]:
            sel = _by(ts, size=z, sync=sync)
            if not sel:
                continue
            tag = _lb_tag(z, sync)
            e["tags"].append(tag)
            for sysn in LB_SYSTEMS:
                row = {}
                for wl, go in (("mixed", False), ("get_only", True)):
                    rr = [_by(sel, system=sysn, replicas=R, get_only=go) for R in Rs]
                    row[wl] = [_mci([t["result"]["makespan_ms"] for t in r], 3) for r in rr]
                    row[f"{wl}_mean_op_us"] = [_mci([t["result"]["mean_op_us"] for t in r], 2)
                                               for r in rr]
                    if not go:
                        for k in ("get_us", "put_us", "throughput_ops_s"):
                            row[f"mixed_{k}"] = [_mci([t["result"][k] for t in r], 2)
                                                 for r in rr]
                    e["gets_per_replica"].setdefault(sysn, {}).setdefault(tag, {})[wl] = [
                        [round(sum(t["result"]["gets_in"][k] for t in r) / len(r), 1)
                         for k in range(R)] if r else None for R, r in zip(Rs, rr)]
                    if not go:
                        e["locked_gets"].setdefault(sysn, {})[tag] = [{
                            "share": round(sum(t["result"]["gets_waited"] for t in r)
                                           / max(1, sum(sum(t["result"]["gets_served"])
                                                        for t in r)), 4),
                            "wait_us": round(sum(t["result"]["lock_wait_us"]
                                                 * t["result"]["gets_waited"] for t in r)
                                             / max(1, sum(t["result"]["gets_waited"]
                                                          for t in r)), 1)}
                            for r in rr]
                e["systems"].setdefault(sysn, {})[tag] = row
                for name, key in (("growth", "makespan_ms"), ("growth_mean_op", "mean_op_us")):
                    e[name].setdefault(sysn, {})[tag] = {
                        wl: _ratio_ci(_val(_by(sel, system=sysn, replicas=Rs[-1],
                                               get_only=go), key),
                                      _val(_by(sel, system=sysn, replicas=Rs[0],
                                               get_only=go), key))
                        for wl, go in (("mixed", False), ("get_only", True))}
            for o in ("pb", "2pc"):
                for name, key in (("speedup", "makespan_ms"), ("speedup_mean_op", "mean_op_us")):
                    e[name].setdefault(o, {})[tag] = {
                        wl: [_ratio_ci(_val(_by(sel, system=o, replicas=R, get_only=go), key),
                                       _val(_by(sel, system="nice", replicas=R, get_only=go),
                                            key)) for R in Rs]
                        for wl, go in (("mixed", False), ("get_only", True))}
    nice = _by(ts, system="nice")
    for k in ("nice.divisions.hit", "nice.divisions.miss", "nice.division"):
        v = sum(t["result"]["counters"].get(k, 0) for t in nice)
        if v or k != "nice.division":
            e["divisions"][k] = v
    e["divisions"]["gets"] = sum(sum(t["result"]["gets_in"]) for t in nice)
    e["divisions"]["gets_at_primary"] = sum(t["result"]["gets_in"][0] for t in nice)
    e["failed"] = sum(t["result"]["failed"] for t in ts)
    return e


def lb_summary(lb):
    """``summary.json``'s ``load_balancing_fig10``: per size (fsync'd stores), NICE's largest
    speed-up over primary-only and 2PC (the mixed workload's completion time, over the
    replication levels) and each system's growth from the lowest to the highest R."""
    out = {"replicas": lb["replicas"], "metric": lb["metric"]}
    for o, name in (("pb", "primary_only"), ("2pc", "2pc")):
        out[f"speedup_vs_{name}"] = {}
        for z in lb["sizes"]:
            best, at = _upto(lb["speedup"][o].get(str(z), {}).get("mixed"))
            out[f"speedup_vs_{name}"][str(z)] = best and best["mean"]
            out[f"speedup_vs_{name}_at_R"] = out.get(f"speedup_vs_{name}_at_R", {})
            out[f"speedup_vs_{name}_at_R"][str(z)] = None if at is None else lb["replicas"][at]
    for sysn, name in (("nice", "nice"), ("pb", "primary_only"), ("2pc", "2pc")):
        out[f"growth_{name}"] = {str(z): (lb["growth"][sysn].get(str(z)) or {}).get(
            "mixed", {}).get("mean") for z in lb["sizes"]}
    d = lb["divisions"]
    out["nice_gets_at_primary"] = d["gets_at_primary"]
    out["nice_gets"] = d["gets"]
    out["failed"] = lb["failed"]
    return out


def summary_of(res):
    """The ``summary.json`` entry: the issue's keys (fsync'd stores, the headline)."""
    put = res.get("put") or {}
    out = {}
    for o in NOOB:
        best, _ = _upto(put.get(f"speedup_vs_{o}"))
        out[f"put_speedup_vs_{o}"] = best and best["mean"]
    rp = res.get("rep") or {}
    g = (rp.get("growth") or {}).get("nice", {}).get(str(max(rp.get("sizes") or [0])))
    out["put_time_growth_r1_to_r9"] = g and g["mean"]
    main = [f for f in res.get("fail", []) if f.get("report_timeouts")
            and f.get("fail_role", "secondary") == "secondary"]
    f = main[0] if main else {}
    out["unavailable_s"] = f.get("unavailable_s")
    out["acked_puts_lost"] = None if not res.get("fail") else sum(
        x["acked_puts_lost"] for x in res["fail"])
    out["heartbeat_s"] = f.get("heartbeat_s")
    lb = res.get("lb")
    if lb:
        out["load_balancing_fig10"] = lb_summary(lb)
    return out


# ---- figure and report -------------------------------------------------------------------------
STYLE = {"nice": ("NICE", "D", "tab:red"), "rac": ("NOOB-RAC", "o", "tab:gray"),
         "rag": ("NOOB-RAG", "s", "tab:blue"), "rog": ("NOOB-ROG", "^", "tab:green"),
         "noob_pb": ("NOOB-RAC primary-only", "o", "tab:gray"),
         "noob_2pc": ("NOOB-RAC 2PC", "s", "tab:purple")}


def _err(pts, scale=1.0):
    m = [p["mean"] / scale if p and p["mean"] is not None else float("nan") for p in pts]
    lo = [(p["mean"] - p["ci95"][0]) / scale if p and p["mean"] is not None else 0 for p in pts]
    hi = [(p["ci95"][1] - p["mean"]) / scale if p and p["mean"] is not None else 0 for p in pts]
    return m, [lo, hi]


def _plot_lb(lb, axes):
    """Figure 10: bars = the mixed workload's completion time per system and R, the black
    markers the get-only workload's; one panel per size (fsync'd, then without fsync)."""
    import numpy as np
    colors = {"nice": "tab:red", "pb": "tab:gray", "2pc": "tab:purple"}
    Rs = lb["replicas"]
    x = np.arange(len(Rs))
    w = 0.27
    for ax, tag in zip(axes, lb["tags"]):
        for j, sysn in enumerate(LB_SYSTEMS):
            d = lb["systems"][sysn][tag]
            m, err = _err(d["mixed"])
            ax.bar(x + (j - 1) * w, m, w, yerr=err, color=colors[sysn], capsize=2,
                   label=LB_NAMES[sysn])
            g, gerr = _err(d["get_only"])
            ax.errorbar(x + (j - 1) * w, g, yerr=gerr, fmt="_", color="k", ms=14, mew=3,
                        label="get-only" if j == 0 else None)
        ax.set_xticks(x)
        ax.set_xticklabels([str(R) for R in Rs])
        ax.set_xlabel("replication level R (clients: 1 put + R-1 get)")
        ax.set_ylabel("workload completion time (ms)")
        z, _, ns = tag.partition("_")
        ax.set_title(f"(fig 10) load balancing, {_size(z)}" + (" (no fsync)" if ns else ""))
    for ax in axes[len(lb["tags"]):]:
        ax.set_visible(False)


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lb = res.get("lb")
    fig, axes = plt.subplots(3 if lb else 2, 5, figsize=(26, 12 if lb else 8))
    axes = axes.ravel()
    if lb:
        _plot_lb(lb, axes[10:])
    for ax, fig_name, title in ((axes[0], "get", "(fig 4) get time"),
                                (axes[1], "put", "(fig 5) put time (fsync'd stores)")):
        e = res.get(fig_name)
        if not e:
            continue
        for s, d in e["schemes"].items():
            label, marker, color = STYLE[s]
            m, err = _err(d["mean_us"], 1e3)
            ax.errorbar(e["sizes"], m, yerr=err, marker=marker, color=color, label=label,
                        capsize=2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("object size (bytes)")
        ax.set_ylabel("time (ms)")
        ax.set_title(title)
    e = res.get("put")
    if e:
        ax = axes[2]
        for s, d in e["schemes"].items():
            label, marker, color = STYLE[s]
            m, err = _err(d["link_bytes_per_op"], 1e6)
            ax.errorbar(e["sizes"], m, yerr=err, marker=marker, color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("object size (bytes)")
        ax.set_ylabel("bytes over all cables per put (MB)")
        ax.set_title("(fig 6) network load of a put")
        ax = axes[3]
        for s, d in e["schemes"].items():
            label, marker, color = STYLE[s]
            m, err = _err(d["primary_over_secondary"])
            ax.errorbar(e["sizes"], m, yerr=err, marker=marker, color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("object size (bytes)")
        ax.set_ylabel("primary / secondary bytes")
        ax.set_title("(fig 7) storage load ratio")
    rp = res.get("rep")
    if rp:
        for ax, z in ((axes[5], str(min(rp["sizes"]))), (axes[6], str(max(rp["sizes"])))):
            t = f"(fig 9) put, {_size(z)}"
            for name, d in rp["systems"].items():
                if z not in d:
                    continue
                label, marker, color = STYLE[name if name != "nice" else "nice"]
                m, err = _err(d[z], 1e3)
                ax.errorbar(rp["replicas"], m, yerr=err, marker=marker, color=color,
                            label=label, capsize=2)
            ax.set_xlabel("replication level")
            ax.set_ylabel("put time (ms)")
            ax.set_title(t)
    for k, f in enumerate(res.get("fail", [])[:3]):
        ax = axes[7 + k]
        xs = [i * f["bin_s"] for i in range(len(f["puts"]))]
        ax.plot(xs, [x / f["bin_s"] for x in f["puts"]], color="tab:red", label="puts/s")
        ax.plot(xs, [x / f["bin_s"] for x in f["gets"]], color="tab:blue", label="gets/s")
        ax.axvline(f["fail_s"], color="k", ls=":",
                   label=f"{f.get('fail_role', 'secondary')} fails")
        if f.get("rejoin_s") is not None:
            ax.axvline(f["rejoin_s"], color="k", ls="--", label="rejoins")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("operations/s")
        how = ("2 time-out reports or 3 missed heartbeats" if f.get("report_timeouts")
               else "heartbeats only")
        ax.set_title(f"(fig 11) {f.get('fail_role', 'secondary')} fails: {how} "
                     f"(heartbeat {f['heartbeat_s']:g} s)", fontsize=9)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _size(z):
    z = int(z)
    return f"{z >> 20} MB" if z >= 1 << 20 else f"{z >> 10} KB" if z >= 1024 else f"{z} B"


def report_markdown(res):
    st = res["setup"]
    su = summary_of(res)
    c = st["costs"]
    L = [f"Set-up from the paper: {st['storage_nodes']} storage nodes + "
         f"{st['metadata_nodes']} metadata node, {st['gbps']:g} Gb/s cables to one switch, "
         f"replication {st['replicas']}, objects in {st['frag_data']:,}-byte fragments, one "
         "client, operations one after the other. The switch: "
         f"{', '.join(st['switch'])} ({', '.join(st['model']) or 'n/a'}). Per-message costs "
         f"measured on this machine ({c['source']}): datagram out {c['tx_frag_us']} us, in "
         f"{c['rx_frag_us']} us (ours: Python), LMDB put {c['store_us']} us + "
         f"{c['store_per_kib_us']} us/KiB, fsync {c['fsync_us']} us, get {c['get_us']} us + "
         f"{c['get_per_kib_us']} us/KiB; each draw the median times a ratio from the measured "
         "distribution. Ours (chosen before any run): stores fsync'd (figure 3's forced "
         "writes), one CPU per node, every relay receives the whole object before "
         "forwarding, replies straight to the client, 0.5 us per cable."]
    cn = res.get("costs_now")
    if cn:
        L += ["", f"Costs re-measured in this run: datagram out {cn['tx_frag_us']} us, in "
              f"{cn['rx_frag_us']} us, LMDB put {cn['store_us']} us + "
              f"{cn['store_per_kib_us']} us/KiB, fsync {cn.get('fsync_us')} us (the figures "
              "use the committed table, so they do not move with the machine's load; an "
              "fsync on this shared VM's disk has measured from 0.18 to 12 ms depending on "
              "the other jobs, which is why the no-fsync rows are given beside)."]
    put = res.get("put") or {}
    nos = res.get("put_nosync") or {}
    get = res.get("get") or {}
    L += ["", "| claim | paper | ours (95 % CI over repeats; at the size where it is largest) |",
          "|---|---|---|"]
    for o in ("rog", "rag", "rac"):
        best, at = _upto(put.get(f"speedup_vs_{o}"))
        nb, nat = _upto(nos.get(f"speedup_vs_{o}"))
        L.append(f"| put: NICE faster than NOOB-{o.upper()} | up to "
                 f"{PAPER[f'put_speedup_vs_{o}']}x | {_ci(best)} at "
                 f"{_size(put['sizes'][at]) if at is not None else 'n/a'}"
                 + (f"; without fsync {_ci(nb)} at {_size(nos['sizes'][nat])}"
                    if nat is not None else "") + " |")
    if get:
        for o, k in (("rog", "get_speedup_small_vs_rog"), ("rag", "get_speedup_small_vs_rag")):
            sp = get[f"speedup_vs_{o}"]
            L.append(f"| get, small objects: NICE faster than NOOB-{o.upper()} | {PAPER[k]}x | "
                     f"{_ci(sp[0])} at {_size(get['sizes'][0])}; {_ci(sp[-1])} at "
                     f"{_size(get['sizes'][-1])} |")
        sp = get["speedup_vs_rac"]
        L.append(f"| get: NICE vs NOOB-RAC | the same | {_ci(sp[0])} at "
                 f"{_size(get['sizes'][0])}; {_ci(sp[-1])} at {_size(get['sizes'][-1])} |")
    if put:
        lo = min(put[f"load_vs_{o}"][-1]["mean"] for o in NOOB)
        hi = max(put[f"load_vs_{o}"][-1]["mean"] for o in NOOB)
        L.append(f"| network load of a put: NOOB / NICE | 1.7x to 3.5x | {lo:.2f}x to "
                 f"{hi:.2f}x at {_size(put['sizes'][-1])} |")
        pr = put["schemes"]
        L.append(f"| primary / secondary load | NOOB 3x, NICE 1x | NOOB-RAC "
                 f"{_ci(pr['rac']['primary_over_secondary'][-1])}, NICE "
                 f"{_ci(pr['nice']['primary_over_secondary'][-1])} at "
                 f"{_size(put['sizes'][-1])} |")
    rp = res.get("rep")
    if rp:
        g = rp["growth"]
        big, small = str(max(rp["sizes"])), str(min(rp["sizes"]))
        rr = f"R={rp['replicas'][-1]} / R={rp['replicas'][0]}, {_size(big)}"
        L.append(f"| put time {rr}: NICE | 1.17 (R9 / R1, 1 MB) | {_ci(g['nice'].get(big))} |")
        L.append(f"| put time {rr}: NOOB | 7x (R9 / R1, 1 MB) | primary-only "
                 f"{_ci(g['noob_pb'].get(big))}, 2PC {_ci(g['noob_2pc'].get(big))} |")
        sp = rp["speedup"]
        if small in sp["noob_2pc"]:
            b, at = _upto(sp["noob_2pc"][small])
            L.append(f"| put {_size(small)}: NICE faster than NOOB-2PC | up to 1.3x (4 B) | {_ci(b)} (R = "
                     f"{rp['replicas'][at]}); primary-only / NICE at R = 3: "
                     f"{_ci(sp['noob_pb'][small][min(2, len(rp['replicas']) - 1)])} |")
        if big in sp["noob_pb"]:
            b, at = _upto(sp["noob_pb"][big])
            b2, at2 = _upto(sp["noob_2pc"][big])
            L.append(f"| put {_size(big)}: NICE faster than NOOB | up to 5.5x (1 MB) | "
                     "primary-only "
                     f"{_ci(b)} (R = {rp['replicas'][at]}), 2PC {_ci(b2)} (R = "
                     f"{rp['replicas'][at2]}) |")
    for f in res.get("fail", []):
        how = "reports or heartbeats" if f["report_timeouts"] else "heartbeats only"
        role = f.get("fail_role", "secondary")
        L.append(f"| puts unavailable after a {role} fails ({how}) | "
                 f"{'< 2 s' if role == 'secondary' else '(not measured)'} | "
                 f"{f['unavailable_s']} s (heartbeat {f['heartbeat_s']:g} s, PUT_ACK wait "
                 f"{f['ack_timeout_s']:g} s) |")
    if res.get("fail"):
        L.append(f"| acknowledged puts lost | 0 | {su['acked_puts_lost']} (of "
                 f"{sum(f['acked_puts'] for f in res['fail'])}; under-replicated: "
                 f"{sum(f['acked_puts_under_replicated'] for f in res['fail'])}) |")
    lb = res.get("lb")
    if lb:
        L += _lb_claims(lb)
    # tables
    for fig, title in (("get", "Get time (ms), figure 4"),
                       ("put", "Put time (ms), figure 5 (fsync'd stores, NOOB primary-backup)"),
                       ("put_nosync", "Put time (ms) without fsync")):
        e = res.get(fig)
        if not e:
            continue
        L += ["", f"{title}:", "", "| size | " + " | ".join(STYLE[s][0] for s in SCHEMES)
              + " |", "|---" * (len(SCHEMES) + 1) + "|"]
        for i, z in enumerate(e["sizes"]):
            L.append(f"| {_size(z)} | " + " | ".join(
                _ci(e["schemes"][s]["mean_us"][i], 3, 1e3) for s in SCHEMES) + " |")
    if put:
        L += ["", "Network load of a put (bytes over every cable, per byte of object) and the "
              "primary / secondary byte ratio, figures 6 and 7:", "",
              "| size | " + " | ".join(f"{STYLE[s][0]} load" for s in SCHEMES) + " | "
              + " | ".join(f"{STYLE[s][0]} P/S" for s in SCHEMES) + " |",
              "|---" * (2 * len(SCHEMES) + 1) + "|"]
        for i, z in enumerate(put["sizes"]):
            L.append(f"| {_size(z)} | " + " | ".join(
                f"{put['schemes'][s]['link_bytes_per_op'][i]['mean'] / z:.2f}"
                for s in SCHEMES) + " | " + " | ".join(
                f"{put['schemes'][s]['primary_over_secondary'][i]['mean']:.2f}"
                for s in SCHEMES) + " |")
    if rp:
        for z in rp["sizes"]:
            L += ["", f"Put time (ms) against the replication level, {_size(z)} (figure 9; "
                  "NOOB with RAC):", "", "| R | " + " | ".join(
                      STYLE[n][0] for n in rp["systems"]) + " |",
                  "|---" * (len(rp["systems"]) + 1) + "|"]
            for i, R in enumerate(rp["replicas"]):
                L.append(f"| {R} | " + " | ".join(
                    _ci(d[str(z)][i], 3, 1e3) for d in rp["systems"].values()) + " |")
    for f in res.get("fail", []):
        how = ("detection: 2 time-out reports or 3 missed heartbeats" if f["report_timeouts"]
               else "detection: 3 missed heartbeats only (time-out reports off)")
        L += ["", f"Failure timeline, the partition's {f.get('fail_role', 'secondary')} (node "
              f"{f.get('failed_node')}) killed ({how}; heartbeat period {f['heartbeat_s']:g} s, the "
              f"primary's PUT_ACK wait {f['ack_timeout_s']:g} s, client retry "
              f"{f['retry_s']:g} s; {f['clients']} clients x {f['rate_per_client']:g} ops/s, "
              f"{100 * f['put_ratio']:.0f} % puts of {f['size']} B): puts available again "
              f"{f['unavailable_s']} s after the failure; {f['aborts']} ABORTs, "
              f"{f['timeouts']} client time-outs, {f['forwarded_gets']} gets forwarded by "
              f"the handoff, {f['acked_puts']} puts acknowledged, {f['acked_puts_lost']} "
              "lost. Events: " + "; ".join(
                  f"{e['t_s']:.3f} s {e['event']} {e.get('detail')}"
                  + (f" ({e['objects_fetched']} objects fetched)" if "objects_fetched" in e
                     else "") for e in f["events"]) + "."]
    if lb:
        L += _lb_tables(lb)
    L += ["", _explain(res)]
    if lb:
        L += ["", _explain_lb(lb)]
    p = res["perf"]
    L += ["", f"CPU: {p['cpu_s']} s over {p['runs']} runs ({p['cpu_s_by_group']})."]
    return "\n".join(L)


def _lb_claims(lb):
    """Figure 10's rows of the claims table."""
    L = []
    top = lb["tags"][:len(lb["sizes"])]         # the fsync'd sizes
    for o, name, paper in (("pb", "primary-only", 7.5), ("2pc", "2PC", 5.5)):
        parts = []
        for tag in top:
            b, at = _upto(lb["speedup"][o][tag]["mixed"])
            parts.append(f"{_ci(b)} at {_size(tag)} (R = {lb['replicas'][at]})"
                         if at is not None else "n/a")
        L.append(f"| load balancing (fig 10): NICE faster than NOOB-RAC {name} | up to "
                 f"{paper}x (both sizes) | " + "; ".join(parts) + " |")
    for sysn, name, paper in (("pb", "primary-only", "10x (4 B), 3.5x (1 MB)"),
                              ("2pc", "2PC", "2.6x (both)"),
                              ("nice", "NICE", "1.8x (4 B), 1.2x (1 MB)")):
        parts = [f"{_ci(lb['growth'][sysn][tag]['mixed'])} at {_size(tag)}" for tag in top]
        L.append(f"| fig 10: {name}'s completion time R = {lb['replicas'][0]} -> "
                 f"{lb['replicas'][-1]} (weak scaling) | {paper} | " + "; ".join(parts) + " |")
    d = lb["divisions"]
    L.append(f"| fig 10: NICE's gets spread over the replicas (divisions) | yes | "
             f"{d['gets'] - d['gets_at_primary']} of {d['gets']} gets served by secondaries "
             f"(switch: divisions hit {d.get('nice.divisions.hit', d.get('nice.division'))}, "
             f"miss {d.get('nice.divisions.miss', 0)}) |")
    return L


def _lb_tables(lb):
    """Figure 10's tables: per size, the mixed and get-only mean operation times."""
    L = []
    Rs = lb["replicas"]
    for tag in lb["tags"]:
        z, _, ns = tag.partition("_")
        L += ["", f"Load balancing, {_size(z)}{' without fsync' if ns else ''} (figure 10; "
              f"1 client puts one object {lb['n'][z]} times while R-1 clients get it "
              f"{lb['n'][z]} times each, closed loop): the workload's completion time (ms) "
              "[get-only workload: the R-1 get clients alone], NICE's speed-up, mean get / "
              "put time (ms) in the workload, gets per replica (primary first, mean per "
              "run), gets that found the object locked:", "",
              "| R | " + " | ".join(LB_NAMES[s_] for s_ in LB_SYSTEMS)
              + " | NICE vs primary-only | NICE vs 2PC | get / put: NICE, primary-only, 2PC "
              "| NICE gets per replica | primary-only gets per replica "
              "| locked gets NICE / 2PC (mean wait) |",
              "|---" * 10 + "|"]
        for i, R in enumerate(Rs):
            cells = []
            for s_ in LB_SYSTEMS:
                d = lb["systems"][s_][tag]
                cells.append(f"{_ci(d['mixed'][i], 1)} [{_ci(d['get_only'][i], 1)}]")
            sp = [_ci(lb["speedup"][o][tag]["mixed"][i]) for o in ("pb", "2pc")]
            sp.append("; ".join(
                f"{_m(lb['systems'][s_][tag]['mixed_get_us'][i]) / 1e3:.3f} / "
                f"{_m(lb['systems'][s_][tag]['mixed_put_us'][i]) / 1e3:.3f}"
                for s_ in LB_SYSTEMS))
            gp = [lb["gets_per_replica"][s_][tag]["mixed"][i] for s_ in ("nice", "pb")]
            lk = [lb["locked_gets"][s_][tag][i] for s_ in ("nice", "2pc")]
            L.append(f"| {R} | " + " | ".join(cells) + " | " + " | ".join(sp) + " | "
                     + " | ".join("/".join(f"{v:g}" for v in g) for g in gp) + " | "
                     + " / ".join(f"{100 * k['share']:.0f} % ({k['wait_us']:g} us)"
                                  for k in lk) + " |")
    return L


def _get_cpu_us():
    """A 4-byte get's CPU at the node by the :data:`.sim.COSTS` medians: the request in, the
    LMDB read, the reply out."""
    return COSTS["rx_ctrl_us"] + COSTS["get_us"] + COSTS["tx_ctrl_us"]


def _explain_lb(lb):
    """Why figure 10 comes out as it does, from the measurements (filled in from ``lb``)."""
    Rs = lb["replicas"]
    lo, hi = 0, len(Rs) - 1
    sy = lb["systems"]
    d = lb["divisions"]
    hit = d.get("nice.divisions.hit", d.get("nice.division"))
    parts = [
        f"Figure 10, why (measured): NICE's switch sent all {d['gets']} gets to the "
        f"secondaries of their clients' divisions ({d['gets_at_primary']} at the primary; "
        f"the switch model's nice.divisions.hit {hit}, miss {d.get('nice.divisions.miss', 0)}): "
        "each get client has a replica of its own (gets per replica in the tables), and "
        "2PC's client-side choice does the same; primary-only serves every get at the primary."]
    for tag in lb["tags"]:
        z, _, ns = tag.partition("_")
        if ns:
            continue
        g = {s_: sy[s_][tag] for s_ in LB_SYSTEMS}

        def v(s_, k, i):
            return _m(g[s_][k][i])
        go = {s_: lb["growth"][s_][tag]["get_only"]["mean"] for s_ in LB_SYSTEMS}
        gm = {s_: lb["growth"][s_][tag]["mixed"]["mean"] for s_ in LB_SYSTEMS}
        lk = lb["locked_gets"]["nice"][tag]
        if int(z) >= 65536:
            parts.append(
                f"At {_size(z)} the primary's cable decides. Get-only: NICE and 2PC take "
                f"{v('nice', 'get_only', hi):.1f} ms at every R ({go['nice']:.2f}x from R = "
                f"{Rs[lo]} to {Rs[hi]}: one client per replica), primary-only "
                f"{v('pb', 'get_only', lo):.1f} -> {v('pb', 'get_only', hi):.1f} ms "
                f"({go['pb']:.2f}x; the R-1 clients' replies share the primary's one cable: "
                f"{(Rs[hi] - 1) / (Rs[lo] - 1):.1f}x more of them). With the put client, every "
                "system finishes when its put client does: a NICE put stays at "
                f"{v('nice', 'mixed_put_us', lo) / 1e3:.1f} -> "
                f"{v('nice', 'mixed_put_us', hi) / 1e3:.1f} ms (the object crosses the "
                "client's cable once; the switch copies it), a 2PC put grows "
                f"{v('2pc', 'mixed_put_us', lo) / 1e3:.1f} -> "
                f"{v('2pc', 'mixed_put_us', hi) / 1e3:.1f} ms (the primary sends R-1 copies on "
                "its cable), a primary-only put "
                f"{v('pb', 'mixed_put_us', lo) / 1e3:.1f} -> "
                f"{v('pb', 'mixed_put_us', hi) / 1e3:.1f} ms (the copies and every get's "
                f"reply on that cable): completion grows NICE {gm['nice']:.2f}x, 2PC "
                f"{gm['2pc']:.2f}x, primary-only {gm['pb']:.2f}x (paper: 1.2x, 2.6x, 3.5x). "
                f"NICE's gets in the mixed run take {v('nice', 'mixed_get_us', hi) / 1e3:.1f} ms "
                f"against {v('nice', 'get_only_mean_op_us', hi) / 1e3:.1f} ms alone: "
                f"{100 * lk[hi]['share']:.0f} % of them found the object locked by a put and "
                f"waited {lk[hi]['wait_us'] / 1e3:.1f} ms for its commit (R = {Rs[hi]}).")
        else:
            pbg = v("pb", "get_only_mean_op_us", hi)
            parts.append(
                f"At {_size(z)} the per-message costs decide. Get-only: NICE and 2PC flat "
                f"({go['nice']:.2f}x), primary-only {go['pb']:.2f}x from R = {Rs[lo]} to "
                f"{Rs[hi]} (its get time {v('pb', 'get_only_mean_op_us', lo):.0f} -> "
                f"{pbg:.0f} us: the primary's CPU takes a datagram in, an LMDB read and a "
                f"datagram out, {_get_cpu_us():.1f} us by the medians, for each of R-1 = {Rs[hi] - 1} "
                "closed-loop "
                "clients). With the put client, completion is the put client's in every "
                f"system (200 puts of {v('nice', 'mixed_put_us', lo) / 1e3:.2f} ms in NICE, "
                f"{v('pb', 'mixed_put_us', lo) / 1e3:.2f} ms primary-only, "
                f"{v('2pc', 'mixed_put_us', lo) / 1e3:.2f} ms 2PC at R = {Rs[lo]}; the get "
                "clients are done long before): with fsync'd stores a NICE put has three "
                "synced transactions on its path against primary-only's two (see figure 9), "
                f"so NICE is {_m(lb['speedup']['pb'][tag]['mixed'][hi]):.2f}x primary-only and "
                f"{_m(lb['speedup']['2pc'][tag]['mixed'][hi]):.2f}x 2PC at R = {Rs[hi]}; "
                f"completion grows NICE {gm['nice']:.2f}x, primary-only {gm['pb']:.2f}x, "
                f"2PC {gm['2pc']:.2f}x (the put's PUT_ACK / TS_ACK handling grows with R). "
                "The paper's 7.5x and primary-only's 10x at 4 B need a primary that R-1 get "
                f"clients saturate: ours, at {pbg:.0f} us a get with {Rs[hi] - 1} clients, is "
                f"not; the prototype's NOOB ran TCP connections (section 6.4), whose "
                "per-request cost we do not have (our NOOB runs on NICE's datagram agents).")
    nos = [t for t in lb["tags"] if t.endswith("_nosync")]
    for tag in nos:
        z = tag.partition("_")[0]
        parts.append(
            f"Without fsync ({_size(z)}), the put is cheap and primary-only's get load shows: "
            f"NICE {_ci(lb['speedup']['pb'][tag]['mixed'][hi])}x primary-only and "
            f"{_ci(lb['speedup']['2pc'][tag]['mixed'][hi])}x 2PC at R = {Rs[hi]}; growth "
            f"NICE {lb['growth']['nice'][tag]['mixed']['mean']:.2f}x, primary-only "
            f"{lb['growth']['pb'][tag]['mixed']['mean']:.2f}x, 2PC "
            f"{lb['growth']['2pc'][tag]['mixed']['mean']:.2f}x.")
    parts.append(
        "The pooled mean operation time (in nice.json as *_mean_op) is not a weak-scaling "
        "measure: the workload's mix moves from 1 put in R = 3 operations to 1 in 9, so it "
        "falls with R whenever a put is slower than a get.")
    return " ".join(parts)


def _transfer_ns(size):
    """One object's fragments on one 1 Gb/s cable (the independent formula)."""
    from .sim import frame_len, wire_ns
    full, rest = divmod(size, 1400)
    return full * wire_ns(frame_len(1400)) + (wire_ns(frame_len(rest)) if rest else 0)


def _m(d):
    return d["mean"] if d and d.get("mean") is not None else None


def _explain(res):
    put, nos, get = res.get("put") or {}, res.get("put_nosync") or {}, res.get("get") or {}
    parts = []
    if put:
        z = put["sizes"][-1]
        t1 = _transfer_ns(z) / 1e3
        sch = put["schemes"]
        tr = {s: _m(sch[s]["mean_us"][-1]) / t1 for s in SCHEMES}
        sp = {o: _m(put[f"speedup_vs_{o}"][-1]) for o in NOOB}
        parts.append(
            f"Why the put ratios are what they are (measured): one {_size(z)} object's fragments "
            f"take {t1 / 1e3:.2f} ms on a 1 Gb/s cable. A NICE put took {tr['nice']:.2f} of "
            "these (the switch copies every fragment to the three replicas on their own "
            "cables at line rate; the rest is NICE-2PC's small messages, the stores and their "
            f"fsyncs); NOOB-RAC {tr['rac']:.2f} (the primary receives the object, then sends "
            f"R-1 = 2 copies over its one cable), NOOB-RAG {tr['rag']:.2f} (one more "
            f"whole-object hop), NOOB-ROG {tr['rog']:.2f} (two more, one when the random node "
            "is the primary).")
        rel = {o: PAPER[f"put_speedup_vs_{o}"] / sp[o] for o in NOOB}
        if z != 1 << 20:
            parts.append(f"(The paper's ratios are at 1 MB; this run stops at {_size(z)}.)")
        elif all(abs(r - 1) <= 0.1 for r in rel.values()):
            parts.append(
                "The paper's 2.6x / 3.4x / 4.3x are "
                f"{rel['rac']:.2f} / {rel['rag']:.2f} / {rel['rog']:.2f} of ours: the same "
                "transfer counts with a NICE put of about the same cost in transfers.")
        else:
            parts.append(
                "The paper's 2.6x / 3.4x / 4.3x are "
                f"{rel['rac']:.2f} / {rel['rag']:.2f} / {rel['rog']:.2f} of ours; with the "
                "same transfer counts that needs the prototype's NICE put to cost "
                f"{tr['nice'] * sp['rac'] / 2.6:.2f} transfers against our {tr['nice']:.2f} "
                "(not measured here: its reliable multicast acknowledges for flow control, "
                "section 5, ours sends at line rate and repairs by NACK).")
        a, b = _m(sch["nice"]["mean_us"][0]), _m(sch["rac"]["mean_us"][0])
        fs_us = res["setup"]["costs"]["fsync_us"]
        line = (f"At {_size(put['sizes'][0])} the per-message costs decide: NICE "
                f"{a / 1e3:.3f} ms against NOOB-RAC primary-backup's {b / 1e3:.3f} ms with "
                "fsync'd writes. On the critical path a NICE put has three synced "
                "transactions (lock + log + pending at the replicas, then the commit's two: "
                "our agents' codec deletes the log record and writes the object again), "
                "primary-backup two (the primary's store, the secondary's), each the slowest "
                f"of the replicas' fsyncs (median {fs_us:g} us, drawn from the measured "
                "spread), and NICE-2PC one message round more")
        if nos and nos["sizes"][0] == put["sizes"][0]:
            c, d = _m(nos["schemes"]["nice"]["mean_us"][0]), _m(nos["schemes"]["rac"]["mean_us"][0])
            line += (f"; without fsync {c:.1f} us against {d:.1f} us (the round: TS and "
                     "TS_ACK)")
        line += (". The paper has NICE comparable to primary-only at 4 B (figure 9a) and "
                 "puts it down to NOOB's TCP connections (section 6.4), which our NOOB, on "
                 "the same datagram agents as NICE, does not have" if a > b * 1.1 else "")
        parts.append(line + ".")
    if get:
        parts.append(
            f"Gets: at {_size(get['sizes'][0])} a relayed request costs a gateway hop's "
            "datagram in and out and two cables, the reply goes straight to the client, so "
            f"ROG / RAG take {_m(get['speedup_vs_rog'][0]):.2f}x / "
            f"{_m(get['speedup_vs_rag'][0]):.2f}x NICE's time (paper: 2x / 1.5x); at "
            f"{_size(get['sizes'][-1])} the reply's transfer dominates "
            f"({_m(get['speedup_vs_rog'][-1]):.2f}x).")
    if put:
        lo = {o: _m(put[f"load_vs_{o}"][-1]) for o in NOOB}
        parts.append(
            f"Network load (bytes on every cable, measured): a NICE put crosses 1 + R = 4 "
            "cables with the data, NOOB-RAC 2 + 2(R-1) = 6, RAG 8, ROG 10 (fewer when the "
            f"random node is the primary): {lo['rac']:.2f}x / {lo['rag']:.2f}x / "
            f"{lo['rog']:.2f}x at {_size(put['sizes'][-1])}; the paper's 1.7x to 3.5x does "
            "not say what it counts (its load balancers' own cables, TCP's acknowledgements "
            "would add to NOOB's side).")
    rp = res.get("rep")
    if rp:
        big = str(max(rp["sizes"]))
        g = rp["growth"]
        parts.append(
            f"Replication level ({_size(big)}): NICE's put time grows "
            f"{_m(g['nice'].get(big)):.2f}x from R = {rp['replicas'][0]} to "
            f"{rp['replicas'][-1]} (the data crosses the client's cable once whatever R; "
            "what grows is the primary's PUT_ACK / TS_ACK handling and the chance that one of "
            "R replicas draws a slow fsync); NOOB primary-only "
            f"{_m(g['noob_pb'].get(big)):.2f}x and 2PC {_m(g['noob_2pc'].get(big)):.2f}x "
            "(R-1 copies on the primary's cable: R transfers, so at most R9 / R1 = 9x when "
            "the transfer dominates). The paper: NICE 1.17x, NOOB 7x.")
    fs = res.get("fail") or []
    if fs:
        f = next((x for x in fs if x["report_timeouts"]
                  and x.get("fail_role", "secondary") == "secondary"), fs[0])
        parts.append(
            "Failure: puts to the partition wait on the dead secondary's PUT_ACK until the "
            f"primary's wait ({f['ack_timeout_s']:g} s) ends: ABORT (the client retries after "
            f"{f['retry_s']:g} s) and a time-out report; the second report hides the node "
            f"and adds the handoff: puts succeed again {f['unavailable_s']} s after the "
            "failure (the paper: < 2 s). Heartbeats alone (reports off) take 3 missed beats "
            f"plus the check's phase: {next((x['unavailable_s'] for x in fs if not x['report_timeouts']), 'n/a')} s "
            f"at a {f['heartbeat_s']:g} s period. A failed primary (only primaries report "
            "time-outs, as our agents do) is found by the heartbeats too, then a secondary is "
            "promoted: puts back after "
            f"{next((x['unavailable_s'] for x in fs if x.get('fail_role') == 'primary'), 'n/a')}"
            " s. The rejoining node fetches the handoff's "
            "objects in the put ring, then takes its get division back; acknowledged puts "
            f"lost: {sum(x['acked_puts_lost'] for x in fs)}, left with fewer than R "
            f"replicas: {sum(x['acked_puts_under_replicated'] for x in fs)} (of "
            f"{sum(x['acked_puts'] for x in fs)}).")
    return " ".join(parts)


# ---- the evaluation hook -------------------------------------------------------------------
class _Evaluation:
    """NICE's part of ``make eval`` (:mod:`netstor.evaluation`)."""
    name = "nice"

    def tasks(self, scale, seed):
        from netstor.evaluation.runner import Task
        out = []
        for t in tasks(scale, seed0=seed):
            extra = "".join(f"/{k}{t[k]}" for k in ("scheme", "system", "consistency", "size",
                                                    "replicas", "get_only", "sync", "fail_role",
                                                    "report_timeouts", "n")
                            if k in t)
            key = f"nice/{t['group']}{extra}/s{t['seed']}"
            size = t.get("size", 1024)
            cost = 20 + t.get("n", 1) * (1 + size // 1400) * t.get("replicas", 3)
            if t["group"] == "fail":
                cost = int(t["duration_s"] * t["rate"] * 40)
            out.append(Task(key, f"{__name__}:run", t, cost=cost))
        return out

    def summarise(self, results, out_dir, scale=None):
        from netstor.evaluation.report import written_section
        res = aggregate(list(results.values()), preset=scale)
        return written_section("nice", "NICE (network-integrated key-value storage)", res,
                               out_dir, summary=summary_of(res), markdown=report_markdown(res),
                               plot=plot)


EVALUATION = _Evaluation()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.nice.eval",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/eval/nice.json")
    ap.add_argument("--preset", default="headline", choices=sorted(PRESETS))
    ap.add_argument("--groups", default=None, help="comma-separated subset of task groups")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--raw", default=None, help="also write the runs' results (JSON) here")
    a = ap.parse_args(argv)
    ts = tasks(a.preset, a.seed)
    if a.groups:
        ts = [t for t in ts if t["group"] in a.groups.split(",")]
    t0 = time.time()
    if a.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(a.jobs) as pool:
            done = list(pool.map(_run_kw, ts))
    else:
        done = [run(**t) for t in ts]
    res = aggregate(done, preset=a.preset, wall_s=round(time.time() - t0, 1))
    if a.raw:
        Path(a.raw).parent.mkdir(parents=True, exist_ok=True)
        Path(a.raw).write_text(json.dumps(done) + "\n")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    plot(res, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(report_markdown(res) + "\n")
    print(json.dumps(summary_of(res), indent=1))
    print(f"nice eval: {len(ts)} runs in {res['perf']['wall_s']} s, CPU {res['perf']['cpu_s']} s "
          f"-> {out}")
    return 0


def _run_kw(t):
    return run(**t)


if __name__ == "__main__":
    sys.exit(main())
