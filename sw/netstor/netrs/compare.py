"""NetRS (the switch selects replicas with C3) against client-side C3 (the paper's CliRS), at
equal offered load, in the real-socket test bed (needs root).

``python -m netstor.netrs.compare [--out build/bench/netrs.json] [--duration 30] [--rate 20]
[--clients 3] [--servers 3] [--workers 1] [--tkv-us 40000] [--interval-ms 500] [--repeats 2]``

Set-up (one rack, :class:`netstor.testbed.rack.Rack`): clients and storage servers in network
namespaces, every frame through the golden-model switch, which is the ToR and the only RSNode
(:func:`netstor.netrs.config.rack_config`). Replica groups: 3 consecutive servers on a ring
(replication factor 3, as consistent hashing places them); key ``k`` belongs to group
``k mod #groups``; keys Zipf 0.99 over 1000 keys, GETs, Poisson open loop at the same rate
per client for both schemes.

Servers: the paper's fluctuating service (section 6.1, after C3): exponential service time
whose mean is redrawn every interval, independently per server, as ``t_kv`` or ``t_kv / d``
with equal probability (``d = 4``), service model ``fluct:T_KV_US:4:INTERVAL_MS``.

Scale (times 10: ``t_kv`` 40 ms instead of 4 ms, interval 500 ms instead of 50 ms, so the
ratio of fluctuation interval to service time is the paper's). Why: the golden model in the
switch costs ~0.45 ms per plain frame and ~1.5 ms per NetRS request (two passes, the ranking
core, 8 state copies) on these two shared CPUs, so the switch keeps up with NetRS only at a
few tens of requests per second (measured: at 180 req/s with ~0 service time NetRS p50 was
53 ms against 3.5 ms for plain requests: the switch's own queue), and even at 60 req/s NetRS
requests pay ~3 ms more at the median and ~14 ms more at p99 than plain ones (no service
time: p50 6.6 vs 3.2 ms, p99 23 vs 9.4 ms) -- a cost of the Python model, not of the data
plane (40 cycles in hardware). At 60 req/s a nominal utilisation ``t_kv * A / (servers *
workers)`` of 0.8 (the paper: 0.9) needs ``t_kv`` = 40 ms with 3 servers x 1 worker (the
paper: 4 slots per server, 100 servers). The price: the data plane's units cap the reported
service time and the response time at 4.1 ms (UQ12.4 us in 16 bits), so at this scale both
saturate for both schemes (the client C3 uses the same units on purpose) and C3 ranks by
``q_hat = 1 + q + n*os`` alone: the queue length the servers report and the outstanding
requests.

Schemes:

* ``c3`` (CliRS): every client ranks the group's replicas with C3 on its own state (EWMA of
  the queue length and service time piggybacked in the storage reply, EWMA of its measured
  response time, its own outstanding requests times ``n`` = number of clients) and sends a
  plain storage request to the winner (``netstor-load --scheme c3``);
* ``netrs``: every client sends a NetRS request to its backup replica of the group; the switch
  selects with C3 (``n = 1``: one selector) on the state it learns from every response
  (``netstor-load --scheme netrs``).

Latency: per request from the client's send to the reply, exact nearest-rank percentiles over
all clients. Instrumentation per run: requests per server, the share of requests served while
their server was in its slow mode (``slow_share``: the quantity replica selection should keep
low; with random selection it is about the slow servers' share of capacity), the switch's
frame rate, timeouts.

Findings (defaults; 2 repeats of 30 s per scheme, ``build/bench/netrs.json``): NetRS does
NOT give the lower latency here. Measured: c3 p50 20.5 / 17.3 ms, p99 221 / 181 ms;
NetRS p50 22.0 / 20.5 ms, p99 247 / 238 ms (mean +12 %, p99 +21 % for NetRS; the paper:
-35..-56 % p99). The switch's selections ARE better by the instrument that isolates
selection from the test bed: the share of requests served by a server in its slow mode is
0.37 / 0.35 with NetRS against 0.41 / 0.38 with client C3 (uniform choice: 0.5). Our reading
(partly measured, partly not proven): (1) the model switch's cost lands on NetRS requests
only (above: +3 ms p50, +14 ms p99 with no service time, and more under CPU contention with
servers and clients), which at this scale is of the order of the gain; (2) with 3 clients the
paper's main lever, many independent selectors herding, is small (the paper's CliRS gets
worse with 100..700 clients; here n = 3); (3) the saturated T and R leave C3 only q and os,
so the freshness advantage of the switch shows only through the queue length. A test with
more clients needs a faster switch (the RTL in the loop is slower still).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from netstor.netclone.compare import pct
from netstor.netclone.config import start_switch
from netstor.netrs.config import rack_config
from netstor.netrs.header import NETRS_UDP_PORT

__all__ = ["run_scheme", "run_compare", "format_table", "SCHEMES", "main", "FINDINGS"]

STORAGE_PORT = 7430
SCHEMES = ("c3", "netrs")
_STOPPED = re.compile(r"stopped: served (\d+), busy (\d+).*service time ([\d.]+) s.*"
                      r"netrs received (\d+), netrs dropped (\d+), slow served (\d+)")

FINDINGS = __doc__.split("Findings")[1]


def start_servers(rack, tmp, service_model, *, workers=1, seed=0, tag=""):
    py = sys.executable
    procs = []
    for k, h in enumerate(rack.servers):
        db = Path(tmp) / f"db{tag}{k}"
        db.mkdir(exist_ok=True)
        procs.append(rack.spawn(h, [py, "-m", "netstor.agent.server", "--bind", h.ip,
                                    "--port", STORAGE_PORT, "--netrs-port", NETRS_UDP_PORT,
                                    "--netclone-port", 0, "--db", db, "--workers", workers,
                                    "--server-id", k + 1, "--no-sync",
                                    "--service-model", service_model, "--seed", seed + k,
                                    "--log-level", "INFO"]))
    for p in procs:
        p.wait_line(r"^netstor-server \d+ listening on", timeout=30)
    return procs


def load_argv(rack, groups, scheme, *, rate, duration, seed, out, workers, timeout=2.0):
    spec = ";".join(",".join(str(k) for k in g) for g in groups)
    port = NETRS_UDP_PORT if scheme == "netrs" else STORAGE_PORT
    argv = [sys.executable, "-m", "netstor.agent.load", "--mode", "open", "--rate", rate,
            "--duration", duration, "--keys", 1000, "--zipf", 0.99, "--seed", seed,
            "--timeout", timeout, "--out", out, "--quiet", "--samples", "--scheme", scheme,
            "--target", ",".join(f"{h.ip}:{port}" for h in rack.servers),
            "--replica-groups", spec]
    if scheme == "c3":
        argv += ["--c3-n", len(rack.clients), "--c3-workers", workers]
    return argv


def _server_counts(procs):
    out = {}
    for k, p in enumerate(procs):
        m = None
        for line in p.output().splitlines():
            m = _STOPPED.search(line) or m
        out[str(k + 1)] = ({"served": int(m[1]), "busy": int(m[2]), "service_s": float(m[3]),
                            "rs_received": int(m[4]), "rs_dropped": int(m[5]),
                            "slow_served": int(m[6])} if m else
                           {"served": 0, "busy": 0, "service_s": 0.0, "rs_received": 0,
                            "rs_dropped": 0, "slow_served": 0})
    return out


def run_scheme(rack, groups, config, scheme, tmp, *, service_model, rate, duration, seed=1,
               workers=1, tag=""):
    """One run: fresh switch and servers (same seeds: the same fluctuation), every client at
    ``rate``; returns the summary row."""
    tmp = Path(tmp)
    stats = tmp / f"{tag}{scheme}-switch.json"
    start_switch(rack, config, tmp, stats_json=stats, log=tmp / f"{tag}{scheme}-sw.log",
                 name=f"switch-rs-{scheme}")
    procs = start_servers(rack, tmp, service_model, workers=workers, seed=seed * 100,
                          tag=tag + scheme)
    try:
        outs, lp = {}, {}
        for i, h in enumerate(rack.clients):
            outs[h.name] = tmp / f"{tag}{scheme}-{h.name}.json"
            lp[h.name] = rack.spawn(h, load_argv(rack, groups, scheme, rate=rate,
                                                 duration=duration, seed=seed + i,
                                                 out=outs[h.name], workers=workers))
        res = {}
        for name, p in lp.items():
            rc = p.wait(timeout=duration + 60)
            if rc != 0:
                raise RuntimeError(f"netstor-load {scheme} on {name} failed ({rc}):\n"
                                   f"{p.output()}")
            res[name] = json.loads(outs[name].read_text())
    finally:
        for p in procs:
            p.stop()
            if p in rack.procs:
                rack.procs.remove(p)
        rack.stop_switch()
        if rack.switch in rack.procs:
            rack.procs.remove(rack.switch)
    sw = json.loads(stats.read_text())
    servers = _server_counts(procs)
    lat = sorted(x for r in res.values() for x in (r.get("samples_us") or []))
    replies = sum(r["replies"] for r in res.values())
    served = sum(s["served"] for s in servers.values())
    ports = sw.get("ports") or {}
    row = {
        "scheme": scheme,
        "offered_rps": rate * len(rack.clients),
        "sent": sum(r["sent"] for r in res.values()),
        "replies": replies,
        "timeouts": sum(r["timeouts"] for r in res.values()),
        "achieved_rps": round(sum(r["rps"] for r in res.values()), 1),
        "p50_us": pct(lat, 50), "p99_us": pct(lat, 99), "p999_us": pct(lat, 99.9),
        "mean_us": round(sum(lat) / len(lat), 1) if lat else None,
        "per_server": {sid: s["served"] for sid, s in servers.items()},
        "slow_share": round(sum(s["slow_served"] for s in servers.values()) / max(1, served),
                            3),
        "util": round(sum(s["service_s"] for s in servers.values()) / duration
                      / max(1, len(servers)) / workers, 3),
        "switch_fps": round(sum(v["rx_frames"] for v in ports.values()) / duration, 1),
        "switch_drops": sw.get("drops", 0),
        "servers": servers,
        "dataplane": {k: v for k, v in (sw.get("dataplane") or {}).items() if v},
    }
    if scheme == "netrs":
        row["selected_by_switch"] = sum((r.get("netrs") or {}).get("selected", 0)
                                        for r in res.values())
        row["redirected"] = sum((r.get("netrs") or {}).get("redirected", 0)
                                for r in res.values())
    else:
        row["client_selections"] = [r.get("c3", {}).get("selections") for r in res.values()]
    return row


def run_compare(*, clients=3, servers=3, rate=20.0, duration=30.0, tkv_us=40000.0, d=4.0,
                interval_ms=500.0, workers=1, schemes=SCHEMES, out=None, log=None, seed=1,
                repeats=2):
    from netstor.testbed import netns
    from netstor.testbed.rack import Rack
    log = log or sys.stdout
    t0 = time.monotonic()
    netns.cleanup_stale()
    model = f"fluct:{tkv_us:g}:{d:g}:{interval_ms:g}"
    offered = rate * clients
    result = {"setup": {"clients": clients, "servers": servers, "workers_per_server": workers,
                        "rate_per_client": rate, "offered_rps": offered,
                        "duration_s": duration, "service_model": model,
                        "nominal_util": round(tkv_us * 1e-6 * offered / (servers * workers),
                                              3),
                        "replica_groups": "3 consecutive servers on a ring, key mod groups",
                        "switch": "golden model (python), ToR = the only RSNode, C3 n=1",
                        "latency": "client send to reply, exact nearest-rank percentiles "
                                   "over all clients"},
              "runs": []}
    with tempfile.TemporaryDirectory(prefix="netstor-rs-") as tmp, \
            Rack(clients, servers, workdir=tmp) as rack:
        config, groups = rack_config(rack.hosts, rack.clients, rack.servers)
        print(f"rack {rack.prefix}: {clients} clients, {servers} servers x {workers} "
              f"worker(s), {len(groups)} replica groups; {offered:g} req/s offered "
              f"(nominal utilisation {result['setup']['nominal_util']:.2f}), {model}, "
              f"{duration:g} s per run", file=log, flush=True)
        for rep in range(repeats):
            for scheme in schemes:
                row = run_scheme(rack, groups, config, scheme, tmp, service_model=model,
                                 rate=rate, duration=duration, seed=seed + rep,
                                 workers=workers, tag=f"r{rep}-")
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
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1))
    return result


HEAD = (f"{'scheme':<8}{'offered':>8}{'achieved':>9}{'mean us':>9}{'p50 us':>9}{'p99 us':>9}"
        f"{'timeouts':>9}{'slow':>6}{'util':>6}{'sw fps':>8}  per server")


def _f(v, spec=".0f"):
    return "-" if v is None else format(v, spec)


def format_row(r):
    per = " ".join(str(v) for _, v in sorted(r["per_server"].items(), key=lambda x: int(x[0])))
    return (f"{r['scheme']:<8}{r['offered_rps']:>8.0f}{r['achieved_rps']:>9.1f}"
            f"{_f(r['mean_us']):>9}{_f(r['p50_us']):>9}{_f(r['p99_us']):>9}"
            f"{r['timeouts']:>9}{r['slow_share']:>6.2f}{r['util']:>6.2f}"
            f"{r['switch_fps']:>8.0f}  {per}")


def format_table(result):
    lines = [HEAD] + [format_row(r) for r in result["runs"]]
    if "netrs_vs_c3" in result:
        lines.append("NetRS vs client C3: " + ", ".join(
            f"{k.replace('_us', '')} {v:+.1f} %" for k, v in result["netrs_vs_c3"].items()))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.netrs.compare",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/bench/netrs.json")
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20.0, help="req/s per client")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds per run")
    ap.add_argument("--tkv-us", type=float, default=40000.0,
                    help="slow-mode mean service time (us)")
    ap.add_argument("--d", type=float, default=4.0, help="range parameter of the fluctuation")
    ap.add_argument("--interval-ms", type=float, default=500.0)
    ap.add_argument("--workers", type=int, default=1, help="worker slots per server")
    ap.add_argument("--scheme", action="append", choices=SCHEMES)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    from netstor.testbed import netns
    try:
        netns.check_prereqs()
    except netns.NetnsError as e:
        print(f"netrs compare: {e}", file=sys.stderr)
        return 2
    try:
        res = run_compare(clients=a.clients, servers=a.servers, rate=a.rate,
                          duration=a.duration, tkv_us=a.tkv_us, d=a.d,
                          interval_ms=a.interval_ms, workers=a.workers,
                          schemes=a.scheme or SCHEMES, out=a.out, seed=a.seed,
                          repeats=a.repeats)
    except KeyboardInterrupt:
        print("netrs compare: interrupted; rack torn down", file=sys.stderr)
        return 130
    print(format_table(res))
    print(f"written {a.out} ({res['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
