"""NetRS (the switch selects replicas with C3) against client-side C3 (the paper's CliRS), at
equal offered load, in the real-socket test bed (needs root).

``python -m netstor.offloads.netrs.compare [--out build/bench/netrs.json] [--duration 20] [--rate 33.75]
[--clients 4] [--selectors 25] [--servers 3] [--workers 1] [--tkv-us 20000] [--interval-ms 250]
[--repeats 2]``

Set-up (one rack, :class:`netstor.testbed.rack.Rack`): clients and storage servers in network
namespaces, every frame through the golden-model switch, which is the ToR and the only RSNode
(:func:`netstor.offloads.netrs.config.rack_config`). Replica groups: 3 consecutive servers on a ring
(replication factor 3, as consistent hashing places them); key ``k`` belongs to group
``k mod #groups``; keys Zipf 0.99 over 1000 keys, GETs, Poisson open loop at the same rate
per client process for both schemes.

Servers: the paper's fluctuating service (section 6.1, after C3): exponential service time
whose mean is redrawn every interval, independently per server, as ``t_kv`` or ``t_kv / d``
with equal probability (``d = 4``), service model ``fluct:T_KV_US:4:INTERVAL_MS``; nominal
utilisation ``t_kv * A / (servers * workers)`` = 0.9 as in the paper (3 servers x 1 worker,
the paper: 100 x 4).

Selectors (CliRS): the paper's effect rests on many independent client-side selectors, each
seeing a small share of the traffic (500 clients, 100 servers). Two CPUs do not run 100
client processes, so each of the 4 ``netstor-load`` processes runs 25 independent C3
selectors (``--c3-selectors``: each request drawn to one; each learns only from its own
replies), 100 selectors in all, C3's ``n`` = 100. The staleness this gives is the paper's:
a selector hears from a given server about every 2.2 s here (0.45 replies/s), i.e. once per
~9 fluctuation intervals; in the paper a client (180 req/s over 100 servers) hears from a
server about every 0.55 s, ~11 intervals. The switch (one selector) hears from each server
~11 times per interval here.

Scale (times 5: ``t_kv`` 20 ms instead of 4 ms, interval 250 ms instead of 50 ms: the ratio
of interval to service time is the paper's). Why not the paper's 4 ms: the golden model's
cost for NetRS frames. Measured on its own (``model_us_per_frame``,
:mod:`netstor.testbed.framecost`): plain frame ~80-150 us, NetRS request ~1.5-2.3 ms (two
passes, the ranking core, 8 state copies; the elements of the matching program are not
skipped), NetRS response ~0.4-0.75 ms; in the running test bed (``switch_timing``, sharing
two CPUs with 4 clients and 3 servers) 2.6 ms per request and 1.4 ms per response, ~4 ms of
switch CPU per NetRS request. So the switch keeps up with NetRS only up to ~150 req/s, with
a mean sojourn of ~5 ms per NetRS frame already at 135 req/s. At the paper's 4 ms and 0.9
utilisation 3 servers x 1 worker need 675 req/s (measured: the switch falls behind by
seconds, NetRS p50 1.3 s); at 4 ms and the 150 req/s the switch sustains (utilisation 0.2)
the switch's queue (mean sojourn 9-16 ms per NetRS frame) is several times the service time
(measured: c3 p50 3.3 ms / p99 22 ms, NetRS p50 15 ms / p99 72..321 ms: the switch, not the
selection). At x5 the switch's ~10 ms per NetRS round trip is half a slow-mode service time.
Time unit: both schemes keep their state in the unit ``TIME_UNIT_US`` = 262.144 us (u = 8:
service and response times up to 1.07 s, resolution 16 us), the replica groups' setting in
the switch and ``--c3-time-unit-us`` at the clients; each row reports the measured share of
saturated samples: ``saturated`` (the switch's bank ``rs.samples``, NetRS; the clients'
own count, c3) and ``over_saturation`` (the share of latencies beyond the unit's limit).
The findings below were measured before the unit was a setting, when the state's time
fields were UQ12.4 us (max 4.096 ms): then Exp(20 ms) / Exp(5 ms) service times were mostly
above it and 88 % (c3) / 99.8 % (NetRS) of the latencies too (``over_4096us``), so R was
saturated for both schemes and C3 ranked on q, os and a compressed T.

Schemes:

* ``c3`` (CliRS): every selector ranks the group's replicas with C3 on its own state (EWMA of
  the queue length and service time piggybacked in the storage reply, EWMA of its measured
  response time, its own outstanding requests times ``n``) and sends a plain storage request
  to the winner (``netstor-load --scheme c3 --c3-selectors K``);
* ``netrs``: every client sends a NetRS request to its backup replica of the group; the switch
  selects with C3 (``n = 1``: one selector) on the state it learns from every response
  (``netstor-load --scheme netrs``).

Latency: per request from the client's send to the reply, exact nearest-rank percentiles over
all clients. Instrumentation per run: requests per server, the share of requests served while
their server was in its slow mode (``slow_share``: the quantity replica selection should keep
low; uniform choice gives about 0.5), the switch's frame rate and its ``switch_timing`` per
input port (data-plane us per frame, sojourn from the kernel's receive stamp to sent),
timeouts.

Findings (defaults; 2 repeats of 20 s per scheme, ``build/bench/netrs.json``): NetRS gives the
lower mean and tail, in the paper's direction: c3 mean 43.0 / 36.6 ms, p50 18.9 / 15.8 ms,
p99 199 / 218 ms; NetRS mean 30.2 / 25.5 ms, p50 19.8 / 18.8 ms, p99 158 / 101 ms (NetRS vs
client C3: mean -30 %, p99 -38 %; the paper: mean -35..-50 %, p99 -36..-56 %). The median is
~11 % higher with NetRS: the switch's own cost, ~5 ms mean sojourn per NetRS frame each way
against ~0.7 ms for plain frames. The selection is better: slow-mode share 0.38 / 0.35 with
NetRS against 0.45 / 0.43 with 100 client selectors (the earlier run with 3 client processes
and one selector each, x10 scale: 0.37 vs 0.41, and NetRS lost, p99 +21 %). Doubts: two
repeats only and the p99 of 20 s runs (~2700 requests) rests on ~27 samples (NetRS p99
varied 101..158 ms); the switch's queue delays the state updates it selects on (a response
waits ~5 ms before it updates the state), and R is saturated for both; at the paper's own
time scale the model switch, not the selection, decides (above).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from netstor.testbed import experiment
from netstor.testbed.experiment import (STORAGE_PORT, fmt, latency_row, rack_session,
                                        run_main, server_stats, start_switch, stop_run,
                                        write_result)

from netstor.api import Device
from netstor.offloads.netrs.config import rack_config
from netstor.offloads.netrs.formats import saturation_shares, saturation_us, unit_code
from netstor.offloads.netrs.header import NETRS_UDP_PORT

__all__ = ["run_scheme", "run_compare", "format_table", "SCHEMES", "main", "FINDINGS"]

SCHEMES = ("c3", "netrs")
#: the state's time unit at x5 scale (slow-mode means of 80 ms): up to 1.07 s
TIME_UNIT_US = 262.144

FINDINGS = __doc__.split("Findings")[1]


def start_servers(rack, tmp, service_model, *, workers=1, seed=0, tag=""):
    """``netstor-server`` on every server host (ids 1..n, storage port 7430, NetRS port 7432,
    NetClone off); returns the processes once all are listening."""
    return experiment.start_servers(rack, tmp, service_model,
                                    offload_ports={"netrs": NETRS_UDP_PORT, "netclone": 0},
                                    workers=workers, seed=seed, tag=tag)


def load_argv(rack, groups, scheme, *, rate, duration, seed, out, workers, timeout=2.0,
              selectors=1):
    """The ``netstor-load`` command of one client for ``scheme`` (``netrs`` or ``c3``)."""
    spec = ";".join(",".join(str(k) for k in g) for g in groups)
    port = NETRS_UDP_PORT if scheme == "netrs" else STORAGE_PORT
    extra = ["--replica-groups", spec]
    if scheme == "c3":
        extra += ["--c3-n", len(rack.clients) * selectors, "--c3-workers", workers,
                  "--c3-selectors", selectors, "--c3-time-unit-us", TIME_UNIT_US]
    return experiment.load_argv(scheme, [f"{h.ip}:{port}" for h in rack.servers], rate=rate,
                                duration=duration, seed=seed, out=out, timeout=timeout,
                                extra=extra)


def _server_counts(procs):
    out = server_stats(procs, ("served", "busy", "service_ns", "rs_received", "rs_dropped", "slow_served"))
    for v in out.values():
        v["service_s"] = v.pop("service_ns") / 1e9
    return out


def run_scheme(rack, groups, config, scheme, tmp, *, service_model, rate, duration, seed=1,
               workers=1, tag="", selectors=1):
    """One run: fresh switch and servers (same seeds: the same fluctuation), every client at
    ``rate``; returns the summary row."""
    tmp = Path(tmp)
    stats = tmp / f"{tag}{scheme}-switch.json"
    ctl = tmp / f"{tag}{scheme}-switch.sock"
    start_switch(rack, config, tmp, stats_json=stats, log=tmp / f"{tag}{scheme}-sw.log",
                 name=f"switch-rs-{scheme}", control=ctl)
    procs = start_servers(rack, tmp, service_model, workers=workers, seed=seed * 100,
                          tag=tag + scheme)
    try:
        res = experiment.run_clients(
            rack, tmp, scheme,
            lambda i, h, out: load_argv(rack, groups, scheme, rate=rate, duration=duration,
                                        seed=seed + i, out=out, workers=workers,
                                        selectors=selectors),
            duration=duration, tag=tag)
        with Device.open(f"unix:{ctl}") as dev:          # samples by saturation pattern
            samples = [dev.bank("rs.samples").read(k) for k in range(8)]
    finally:
        stop_run(rack, procs)
    sw = json.loads(stats.read_text())
    servers = _server_counts(procs)
    row, lat = latency_row(scheme, res, rate * len(rack.clients))
    limit = saturation_us(unit_code(TIME_UNIT_US))
    served = sum(s["served"] for s in servers.values())
    ports = sw.get("ports") or {}
    row.update({
        # share of latencies (~ the response times R the selectors see) beyond the state's
        # range in its time unit; the samples that saturated, counted where they were taken
        "over_saturation": round(sum(1 for x in lat if x >= limit) / len(lat), 4)
        if lat else None,
        "saturated": saturation_shares(samples) if scheme == "netrs" else _c3_saturated(res),
        "per_server": {sid: s["served"] for sid, s in servers.items()},
        "slow_share": round(sum(s["slow_served"] for s in servers.values()) / max(1, served),
                            3),
        "util": round(sum(s["service_s"] for s in servers.values()) / duration
                      / max(1, len(servers)) / workers, 3),
        "switch_fps": round(sum(v["rx_frames"] for v in ports.values()) / duration, 1),
        "switch_drops": sw.get("drops", 0),
        "switch_timing": sw.get("timing"),
        "servers": servers,
        "dataplane": {k: v for k, v in (sw.get("dataplane") or {}).items() if v},
    })
    if scheme == "netrs":
        row["selected_by_switch"] = sum((r.get("netrs") or {}).get("selected", 0)
                                        for r in res.values())
        row["redirected"] = sum((r.get("netrs") or {}).get("redirected", 0)
                                for r in res.values())
    else:
        row["client_selections"] = [r.get("c3", {}).get("selections") for r in res.values()]
    return row


def _c3_saturated(res):
    """The client-side selectors' saturated samples, over all clients."""
    n = sum((r.get("c3") or {}).get("saturated", {}).get("samples", 0) for r in res.values())
    out = {"samples": n}
    for k in ("q", "t", "r", "any"):
        out[k] = None if n == 0 else sum(
            (r["c3"]["saturated"][k] or 0) * r["c3"]["saturated"]["samples"]
            for r in res.values() if (r.get("c3") or {}).get("saturated")) / n
    return out


def run_compare(*, clients=4, servers=3, rate=33.75, duration=20.0, tkv_us=20000.0, d=4.0,
                interval_ms=250.0, workers=1, schemes=SCHEMES, out=None, log=None, seed=1,
                repeats=2, selectors=25):
    log = log or sys.stdout
    t0 = time.monotonic()
    model = f"fluct:{tkv_us:g}:{d:g}:{interval_ms:g}"
    offered = rate * clients
    result = {"setup": {"clients": clients, "selectors_per_client": selectors,
                        "c3_n": clients * selectors, "time_unit_us": TIME_UNIT_US,
                        "servers": servers, "workers_per_server": workers,
                        "rate_per_client": rate, "offered_rps": offered,
                        "duration_s": duration, "service_model": model,
                        "nominal_util": round(tkv_us * 1e-6 * offered / (servers * workers),
                                              3),
                        "replica_groups": "3 consecutive servers on a ring, key mod groups",
                        "switch": "golden model (python), ToR = the only RSNode, C3 n=1",
                        "latency": "client send to reply, exact nearest-rank percentiles "
                                   "over all clients"},
              "runs": []}
    with rack_session(result, clients, servers, tag="rs") as (rack, tmp):
        config, groups = rack_config(rack.hosts, rack.clients, rack.servers,
                                     time_unit_us=TIME_UNIT_US)
        print(f"rack {rack.prefix}: {clients} clients, {servers} servers x {workers} "
              f"worker(s), {len(groups)} replica groups; {offered:g} req/s offered "
              f"(nominal utilisation {result['setup']['nominal_util']:.2f}), {model}, "
              f"{duration:g} s per run", file=log, flush=True)
        for rep in range(repeats):
            for scheme in schemes:
                row = run_scheme(rack, groups, config, scheme, tmp, service_model=model,
                                 rate=rate, duration=duration, seed=seed + rep,
                                 workers=workers, tag=f"r{rep}-", selectors=selectors)
                row["repeat"] = rep
                result["runs"].append(row)
                print("  " + format_row(row), file=log, flush=True)
    by = {s: [r for r in result["runs"] if r["scheme"] == s] for s in schemes}
    if "c3" in by and "netrs" in by and by["c3"] and by["netrs"]:
        def avg(rows, k):
            v = [r[k] for r in rows if r[k] is not None]
            return sum(v) / len(v) if v else None
        c, n = by["c3"], by["netrs"]
        result["netrs_vs_c3"] = {
            k: round(100.0 * (avg(n, k) - avg(c, k)) / avg(c, k), 1)
            for k in ("mean_us", "p50_us", "p99_us") if avg(c, k)}
        result["netrs_lower_p99"] = avg(n, "p99_us") < avg(c, "p99_us")
    result["wall_s"] = round(time.monotonic() - t0, 1)
    if out:
        write_result(out, result)
    return result


HEAD = (f"{'scheme':<8}{'offered':>8}{'achieved':>9}{'mean us':>9}{'p50 us':>9}{'p99 us':>9}"
        f"{'timeouts':>9}{'slow':>6}{'util':>6}{'sw fps':>8}  per server")


def format_row(r):
    per = " ".join(str(v) for _, v in sorted(r["per_server"].items(), key=lambda x: int(x[0])))
    return (f"{r['scheme']:<8}{r['offered_rps']:>8.0f}{r['achieved_rps']:>9.1f}"
            f"{fmt(r['mean_us']):>9}{fmt(r['p50_us']):>9}{fmt(r['p99_us']):>9}"
            f"{r['timeouts']:>9}{r['slow_share']:>6.2f}{r['util']:>6.2f}"
            f"{r['switch_fps']:>8.0f}  {per}")


def format_table(result):
    lines = [HEAD] + [format_row(r) for r in result["runs"]]
    if "netrs_vs_c3" in result:
        lines.append("NetRS vs client C3: " + ", ".join(
            f"{k.replace('_us', '')} {v:+.1f} %" for k, v in result["netrs_vs_c3"].items()))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.netrs.compare",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/bench/netrs.json")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--rate", type=float, default=33.75, help="req/s per client")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per run")
    ap.add_argument("--tkv-us", type=float, default=20000.0,
                    help="slow-mode mean service time (us)")
    ap.add_argument("--d", type=float, default=4.0, help="range parameter of the fluctuation")
    ap.add_argument("--interval-ms", type=float, default=250.0)
    ap.add_argument("--workers", type=int, default=1, help="worker slots per server")
    ap.add_argument("--scheme", action="append", choices=SCHEMES)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--selectors", type=int, default=25,
                    help="c3: independent C3 selectors per client process")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    return run_main("netrs compare", lambda: run_compare(
        clients=a.clients, servers=a.servers, rate=a.rate, duration=a.duration,
        tkv_us=a.tkv_us, d=a.d, interval_ms=a.interval_ms, workers=a.workers,
        schemes=a.scheme or SCHEMES, out=a.out, seed=a.seed, repeats=a.repeats,
        selectors=a.selectors),
                    format_table, a.out)


if __name__ == "__main__":
    sys.exit(main())
