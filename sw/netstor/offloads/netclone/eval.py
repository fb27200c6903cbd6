"""NetClone at the paper's scale, in the cluster simulator (:mod:`netstor.cluster`).

The setup of the NetClone authors' evaluation (their public code: ``client.c``, ``server.c``):
2 open-loop Poisson clients and 6 servers of 15 workers each behind one switch; RPC service
times Exp(25 us) and Bimodal(90 % 25 us, 10 % 250 us), each request slowed down x15 with
probability 1 %; schemes

* ``none`` -- no cloning: each request to one random server (the simulator's ``direct``);
* ``cclone`` -- client cloning to two random servers (:class:`.sim.CClone`);
* ``laedge`` -- a coordinator host cloning only when two servers are idle, one outstanding
  request per server as in the authors' coordinator (:class:`.sim.Laedge`);
* ``netclone`` -- our NetClone program in the switch (:class:`.sim.NetCloneScheme`: the
  program, the configuration and the server codec of this folder, the device's latency).

A *task* is one (distribution, offered load, repeat); it runs the four schemes on the same
arrivals, groups and per-request service draws (common random numbers; the repeat's seed).
Loads are fractions of the servers' capacity, ``servers * workers / mean service time`` (the
mean including the slowdown: 28.5 us for Exp, 54.15 us for Bimodal). Every scheme's point is
(measured throughput, p99), the paper's axes; means over repeats with 95 % confidence
intervals (Student's t).

``python -m netstor.offloads.netclone.eval --out build/eval/netclone.json [--preset
headline|full] [--jobs 2] [--plot build/eval/netclone.png]`` (the JSON's top-level ``loads`` and
``p99_us`` are the Exp(25) panel, the summary's ``netclone`` keys).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

from netstor.cluster.rack import RackRun
from netstor.cluster.service import ServiceTime
from netstor.cluster.stats import ci95

__all__ = ["DISTS", "SCHEMES", "PRESETS", "tasks", "run_task", "run", "aggregate", "plot",
           "main", "check_model", "report_markdown", "EVALUATION"]

#: the paper's distributions: (spec, label)
DISTS = {"exp": ("exp:25", "Exp(25)"),
         "bimodal": ("bimodal:0.1:25:250", "Bimodal(90%-25, 10%-250)")}
SLOW_P, SLOW_FACTOR = 0.01, 15.0
CLIENTS, SERVERS, WORKERS = 2, 6, 15
#: paper name -> (simulator scheme, options)
SCHEMES = {"none": ("direct", {}), "cclone": ("cclone", {}),
           "laedge": ("laedge", {"slots": 1}), "netclone": ("netclone", {"policy": "random"})}
#: network: 1 us a cable (each way; NIC + stack included), 100 Gb/s; the switch adds its own
LINK_NS, GBPS = 1_000, 100.0
TIMEOUT_US = 5_000.0
PRESETS = {
    # `make eval`: 12 loads x 2 distributions x 3 repeats x 4 schemes x 20k requests, ~580
    # CPU-seconds (~5 min on 2 free cores; docs/simulator.md)
    "headline": {"loads": [0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
                 "requests": 20_000, "repeats": 3},
    "full": {"loads": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7,
                       0.8, 0.85, 0.9, 0.95],
             "requests": 100_000, "repeats": 3},
    # the test's: small and fast
    "smoke": {"loads": [0.02, 0.3, 0.6], "requests": 1_500, "repeats": 1},
}


def service(dist):
    return ServiceTime(DISTS[dist][0], slow_p=SLOW_P, slow_factor=SLOW_FACTOR)


def capacity_rps(dist):
    """Requests/s the servers complete at most (no cloning)."""
    return SERVERS * WORKERS / (service(dist).mean_ns / 1e9)


def tasks(preset="headline", *, loads=None, repeats=None, requests=None, dists=None,
          schemes=None, seed0=1):
    p = dict(PRESETS[preset])
    loads = p["loads"] if loads is None else list(loads)
    repeats = p["repeats"] if repeats is None else repeats
    requests = p["requests"] if requests is None else requests
    out = []
    for dist in (dists or list(DISTS)):
        for li, load in enumerate(loads):
            for r in range(repeats):
                out.append({"dist": dist, "load": load, "load_index": li, "repeat": r,
                            "seed": seed0 + r, "requests": requests,
                            "schemes": list(schemes or SCHEMES)})
    return out


def _model_class(name):
    if name in (None, "default"):
        return None
    if name == "interpreter":
        from netstor.model.dataplane import DataplaneModel
        return DataplaneModel
    if name == "compiled":
        from netstor.model.compiled import CompiledModel
        return CompiledModel
    raise ValueError(f"model {name!r}: default, compiled or interpreter")


def run_task(task, model=None):
    """Run one task: ``{scheme: compact result}`` plus the task's keys."""
    rate = task["load"] * capacity_rps(task["dist"])
    out = dict(task, offered_rps=round(rate, 3), results={})
    for paper_name in task["schemes"]:
        scheme, options = SCHEMES[paper_name]
        r = RackRun(scheme, scheme_options=options, clients=CLIENTS, servers=SERVERS,
                    workers=WORKERS, service=service(task["dist"]), rate_rps=rate,
                    requests=task["requests"], seed=task["seed"], timeout_us=TIMEOUT_US,
                    link_ns=LINK_NS, gbps=GBPS, model_class=_model_class(model)).run()
        keep = {k: r[k] for k in ("measured", "timeouts", "mean_us", "p50_us", "p99_us",
                                  "p999_us", "throughput_rps", "duplicates")}
        keep["utilisation"] = round(sum(s.get("utilisation", 0) for s in r["servers"])
                                    / len(r["servers"]), 4)
        if scheme in r:
            keep[scheme] = r[scheme]
        keep["model"] = r["args"]["model"]
        keep["perf"] = r["perf"]
        out["results"][paper_name] = keep
    return out


def run(**task):
    """:func:`run_task` with the task as keywords (an evaluation runner's task function)."""
    model = task.pop("model", None)
    return run_task(task, model)


def check_model(model=None, requests=300):
    """The model class the runs use against the interpreter on a short NetClone trace (the
    same frames, every output frame equal); returns the number of frames compared."""
    from netstor.cluster.switch import cached_config_ops
    from netstor.driver.tables import apply_writes
    from netstor.model.dataplane import DataplaneModel
    run = RackRun("netclone", clients=CLIENTS, servers=SERVERS, workers=WORKERS,
                  service=service("exp"), rate_rps=0.3 * capacity_rps("exp"), requests=requests,
                  seed=0, timeout_us=TIMEOUT_US, link_ns=LINK_NS, gbps=GBPS,
                  model_class=_model_class(model), trace=10 * requests)
    run.run()
    ref = DataplaneModel(run.switch.pipeline)
    writes, regs = cached_config_ops(run.config)
    apply_writes(ref, writes)
    for name, value in regs:
        ref.reg_write(name, value)
    for n, ((t, port, frame, arrival), outs) in enumerate(zip(run.switch.trace,
                                                              run.switch.trace_out)):
        exp = [(o.port, o.frame) for o in ref.process(frame, port, arrival=arrival)]
        if exp != [(q, f) for _, q, f in outs]:
            raise RuntimeError(f"model {run.switch.model_class.__name__} differs from the "
                               f"interpreter on frame {n} of a NetClone trace; run with "
                               "--model interpreter")
    return len(run.switch.trace)


def _series(points, key):
    mean, ci = [], []
    for p in points:
        m, c = ci95([x.get(key) for x in p])
        mean.append(None if m is None else round(m, 3))
        ci.append([None if v is None else round(v, 3) for v in c])
    return mean, ci


def aggregate(done, *, preset=None, wall_s=None, jobs=None, model_check=None):
    """The JSON of a set of finished tasks (see the module doc)."""
    dists = {}
    for t in done:
        dists.setdefault(t["dist"], {}).setdefault(t["load_index"], []).append(t)
    out = {"figure": "NetClone (SIGCOMM '23) Figs. 7 and 9: p99 latency vs throughput",
           "setup": {"clients": CLIENTS, "servers": SERVERS, "workers": WORKERS,
                     "slowdown": {"p": SLOW_P, "factor": SLOW_FACTOR},
                     "link_ns": LINK_NS, "gbps": GBPS, "timeout_us": TIMEOUT_US,
                     "schemes": {k: {"scheme": s, "options": o} for k, (s, o) in SCHEMES.items()},
                     "preset": preset, "model_check_frames": model_check},
           "dists": {}}
    total_req = 0
    for dist, by_load in sorted(dists.items(), key=lambda kv: list(DISTS).index(kv[0])):
        idx = sorted(by_load)
        loads = [by_load[i][0]["load"] for i in idx]
        schemes = by_load[idx[0]][0]["schemes"]
        d = {"label": DISTS[dist][1], "spec": DISTS[dist][0],
             "capacity_rps": round(capacity_rps(dist), 1), "loads": loads,
             "offered_rps": [by_load[i][0]["offered_rps"] for i in idx],
             "repeats": len(by_load[idx[0]]),
             "requests_per_run": by_load[idx[0]][0]["requests"], "schemes": {}}
        for s in schemes:
            pts = [[t["results"][s] for t in by_load[i]] for i in idx]
            e = {}
            for key in ("p99_us", "mean_us", "p50_us", "p999_us", "throughput_rps",
                        "utilisation"):
                e[key], e[key.replace("_us", "").replace("_rps", "") + "_ci95"] = \
                    _series(pts, key)
            e["timeouts"] = [sum(x["timeouts"] for x in p) for p in pts]
            e["measured"] = [sum(x["measured"] for x in p) for p in pts]
            extra = SCHEMES[s][0]
            if extra in pts[0][0]:
                e["extra"] = [p[0][extra] for p in pts]
            d["schemes"][s] = e
            total_req += sum(len(p) for p in pts) * d["requests_per_run"]
        dists[dist] = d
        out["dists"][dist] = d
    head = out["dists"].get("exp") or next(iter(out["dists"].values()), None)
    if head:
        out["loads"] = head["loads"]
        out["throughput_rps"] = {s: v["throughput_rps"] for s, v in head["schemes"].items()}
        out["p99_us"] = {s: v["p99_us"] for s, v in head["schemes"].items()}
        out["p99_ci95"] = {s: v["p99_ci95"] for s, v in head["schemes"].items()}
        out["mean_us"] = {s: v["mean_us"] for s, v in head["schemes"].items()}
        out["p50_us"] = {s: v["p50_us"] for s, v in head["schemes"].items()}
    perf = [x["perf"] for t in done for x in t["results"].values()]
    sim_wall = sum(p["wall_s"] for p in perf)
    sim_cpu = sum(p.get("cpu_s", 0) for p in perf)
    events = sum(p["events"] for p in perf)
    out["perf"] = {"runs": len(perf), "requests_simulated": total_req, "events": events,
                   "wall_s": wall_s, "jobs": jobs, "sim_wall_s": round(sim_wall, 1),
                   "sim_cpu_s": round(sim_cpu, 1),
                   "requests_per_cpu_min": round(total_req / sim_cpu * 60) if sim_cpu else None,
                   "events_per_cpu_s": round(events / sim_cpu) if sim_cpu else None,
                   "per_scheme_requests_per_cpu_min": {
                       s: round(60 * sum(t["requests"] for t in done if s in t["results"])
                                / max(1e-9, sum(t["results"][s]["perf"].get("cpu_s", 0)
                                                for t in done if s in t["results"])))
                       for s in SCHEMES if any(s in t["results"] for t in done)}}
    return out


STYLE = {"none": ("NoClone", "o", "tab:gray"), "cclone": ("C-Clone", "s", "tab:blue"),
         "laedge": ("LAEDGE", "^", "tab:green"), "netclone": ("NetClone", "D", "tab:red")}


def plot(res, path):
    """Draw the figure as the paper does: per distribution, p99 latency (us) against the
    measured throughput (KRPS), one line per scheme (error bars: 95 % CI of the p99)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dists = list(res["dists"].items())
    fig, axes = plt.subplots(1, len(dists), figsize=(5.2 * len(dists), 3.8), squeeze=False)
    for ax, (tag, (dist, d)) in zip(axes[0], zip("abcd", dists)):
        for s, e in d["schemes"].items():
            label, marker, color = STYLE.get(s, (s, "x", None))
            x = [v / 1e3 if v is not None else None for v in e["throughput_rps"]]
            y = e["p99_us"]
            err = [[max(0.0, yy - lo) if yy is not None and lo is not None else 0
                    for yy, (lo, hi) in zip(y, e["p99_ci95"])],
                   [max(0.0, hi - yy) if yy is not None and hi is not None else 0
                    for yy, (lo, hi) in zip(y, e["p99_ci95"])]]
            ax.errorbar(x, y, yerr=err, label=label, marker=marker, color=color, ms=4,
                        capsize=2, lw=1.3)
        # the y range of the paper's figures: the no-cloning curve's, with room; points of
        # saturated schemes above it leave the frame (the JSON has them)
        base = [v for v in d["schemes"].get("none", {}).get("p99_us", []) if v is not None]
        top = 3 * max(base) if base else None
        ax.set_ylim(0, top)
        ax.set_xlim(0, 1.05 * d["capacity_rps"] / 1e3)
        ax.set_xlabel("Throughput (KRPS)")
        ax.set_ylabel("99th-percentile latency (us)")
        ax.set_title(f"({tag}) {d['label']}, 1% x{res['setup']['slowdown']['factor']:g}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def report_markdown(res):
    """The report section: setup, the paper's claims beside ours, the p99 table, the
    differences we know of and why."""
    lines = [
        f"Setup as in the NetClone authors' evaluation (their public code): {CLIENTS} clients, "
        f"{SERVERS} servers x {WORKERS} workers behind one switch, open-loop Poisson, every "
        f"request slowed down x{SLOW_FACTOR:g} with probability {SLOW_P:g}; our NetClone program "
        "in the switch (its configuration and server codec), the device's latency (beats + 45 "
        f"cycles at 250 MHz), {LINK_NS / 1e3:g} us per cable and {GBPS:g} Gb/s (assumed: the "
        "paper's testbed latencies are not in our sources). Loads are fractions of the "
        "servers' capacity; each point is (measured throughput, p99), mean over "
        f"{next(iter(res['dists'].values()))['repeats']} repeat(s) with 95 % intervals; the "
        "schemes of one load share arrivals, groups and per-request service draws.", "",
        "| claim (paper, slides in ../shared/papers) | ours |", "|---|---|"]
    for dist, d in res["dists"].items():
        sc = d["schemes"]
        i_lo = 0
        nc, no = sc.get("netclone"), sc.get("none")
        cc, la = sc.get("cclone"), sc.get("laedge")
        if nc and no:
            r = _ratio(nc["p99_us"][i_lo], no["p99_us"][i_lo])
            last = max((i for i, v in enumerate(nc["timeouts"]) if v == 0), default=0)
            lines.append(
                f"| NetClone lowers the tail, keeps throughput ({d['label']}) | p99 "
                f"{nc['p99_us'][i_lo]:.1f} us vs {no['p99_us'][i_lo]:.1f} us without cloning "
                f"at {d['loads'][i_lo]:g} load (ratio {r:.2f}); up to "
                f"{nc['throughput_rps'][last] / 1e3:.0f} KRPS without a timeout, like no "
                f"cloning ({no['throughput_rps'][last] / 1e3:.0f} KRPS) |")
        if cc:
            sat = max(v for v in cc["throughput_rps"] if v is not None)
            lines.append(f"| C-Clone helps only in a sweet spot ({d['label']}) | at most "
                         f"{sat / 1e3:.0f} KRPS ({sat / d['capacity_rps']:.0%} of capacity: "
                         "every request is served twice) |")
        if la:
            sat = max(v for v in la["throughput_rps"] if v is not None)
            lines.append(f"| LAEDGE: coordinator overhead, limited throughput ({d['label']}) "
                         f"| at most {sat / 1e3:.0f} KRPS ({sat / d['capacity_rps']:.0%}): one "
                         "outstanding request per server, as the authors' coordinator keeps |")
    lines.append("")
    for dist, d in res["dists"].items():
        names = list(d["schemes"])
        lines += [f"**{d['label']}**, capacity {d['capacity_rps'] / 1e3:.0f} KRPS: p99 us "
                  "(95 % CI), throughput KRPS", "",
                  "| load | " + " | ".join(names) + " |",
                  "|---" * (len(names) + 1) + "|"]
        for i, load in enumerate(d["loads"]):
            cells = []
            for n in names:
                e = d["schemes"][n]
                lo, hi = e["p99_ci95"][i]
                to = " (timeouts)" if e["timeouts"][i] else ""
                cells.append(f"{e['p99_us'][i]:.1f} [{lo:.1f}, {hi:.1f}] @ "
                             f"{e['throughput_rps'][i] / 1e3:.0f}{to}")
            lines.append(f"| {load:g} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "Differences we know of: the servers' idleness is ours, not the authors' (a reply "
        "reports 0 when a new request would find a free worker; their server reports its "
        "queue length and drops a clone only when requests wait); the NetClone program picks "
        "a random candidate when it does not clone (the authors' default, no RackSched); LAEDGE "
        "uses the 6 servers (the authors' coordinator took one of theirs) and costs no CPU time "
        "per message (only its extra hops); past saturation a scheme's p99 grows with the "
        "run's length (ours are a few ms of virtual time, the authors' 20 s), so those points "
        "only bound it from below. The paper's own figures are not in our sources (only its "
        "slides), so its numbers are not quoted."]
    return "\n".join(lines)


class _Evaluation:
    """NetClone's part of ``make eval`` (:mod:`netstor.evaluation`, the ``evaluation`` hook)."""
    name = "netclone"

    def tasks(self, scale, seed):
        from netstor.evaluation.runner import Task
        out = []
        for t in tasks(scale, seed0=seed):
            key = f"netclone/{t['dist']}/load{t['load']:g}/r{t['repeat']}"
            cost = t["requests"] * (1 + t["load"])
            out.append(Task(key, f"{__name__}:run", t, cost=cost))
        return out

    def summarise(self, results, out_dir, scale=None):
        from netstor.evaluation.report import written_section
        res = aggregate(list(results.values()), preset=scale)
        summary = {k: res[k] for k in ("loads", "p99_us", "p99_ci95", "mean_us", "p50_us",
                                       "throughput_rps") if k in res}
        summary["bimodal"] = {k: v for k, v in res["dists"].get("bimodal", {}).items()
                              if k in ("loads", "capacity_rps")}
        if "bimodal" in res["dists"]:
            summary["bimodal"]["p99_us"] = {s: e["p99_us"] for s, e in
                                            res["dists"]["bimodal"]["schemes"].items()}
        summary["perf"] = res["perf"]
        return written_section("netclone", "NetClone (request cloning) at the paper's scale", res,
                               out_dir, summary=summary, markdown=report_markdown(res), plot=plot)


EVALUATION = _Evaluation()


def _run(args):
    task, model = args
    return run_task(task, model)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.netclone.eval",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/eval/netclone.json")
    ap.add_argument("--plot", default=None, help="PNG path (default: --out with .png)")
    ap.add_argument("--preset", default="headline", choices=sorted(PRESETS))
    ap.add_argument("--loads", default=None, help="comma-separated fractions of capacity")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--requests", type=int, default=None, help="requests per run")
    ap.add_argument("--dists", default=None, help=f"comma-separated, of {sorted(DISTS)}")
    ap.add_argument("--schemes", default=None, help=f"comma-separated, of {list(SCHEMES)}")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--model", default="default", choices=["default", "compiled", "interpreter"])
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    ts = tasks(a.preset, loads=[float(x) for x in a.loads.split(",")] if a.loads else None,
               repeats=a.repeats, requests=a.requests,
               dists=a.dists.split(",") if a.dists else None,
               schemes=a.schemes.split(",") if a.schemes else None)
    # a terminated run stops its worker processes too (the pool's exit terminates them)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.time()
    checked = check_model(a.model) if a.model != "interpreter" else None
    done = []
    bar = None
    if not a.no_progress:
        from tqdm import tqdm
        bar = tqdm(total=len(ts), desc="netclone eval", unit="task", file=sys.stderr)
    if a.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(a.jobs) as pool:
            for r in pool.imap_unordered(_run, [(t, a.model) for t in ts]):
                done.append(r)
                if bar:
                    bar.update()
    else:
        for t in ts:
            done.append(run_task(t, a.model))
            if bar:
                bar.update()
    if bar:
        bar.close()
    res = aggregate(done, preset=a.preset, wall_s=round(time.time() - t0, 1), jobs=a.jobs,
                    model_check=checked)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    png = a.plot or str(out.with_suffix(".png"))
    plot(res, png)
    print(f"netclone eval: {len(ts)} tasks, {res['perf']['requests_simulated']} requests in "
          f"{res['perf']['wall_s']} s ({a.jobs} jobs) -> {out}, {png}")
    for dist, d in res["dists"].items():
        print(f"{d['label']} (capacity {d['capacity_rps'] / 1e3:.0f} KRPS): p99 us per load")
        print("load    " + "".join(f"{s:>12}" for s in d["schemes"]))
        for i, load in enumerate(d["loads"]):
            print(f"{load:<8g}" + "".join(
                f"{(e['p99_us'][i] if e['p99_us'][i] is not None else float('nan')):12.1f}"
                for e in d["schemes"].values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
