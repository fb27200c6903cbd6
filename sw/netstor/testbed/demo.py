"""``make demo``: a storage rack on one machine, every packet through the netstor data plane.

``python -m netstor.testbed.demo [--servers 3] [--clients 2] [--rate 1000] [--duration 5]
[--write-ratio 0.1] [--dataplane model|rtl] [--json FILE]`` (root):

1. builds a rack (:class:`netstor.testbed.rack.Rack`): client and server namespaces on two
   bridged segments, the switch process between them (default data plane: the golden model),
   ``l3.routes`` holding a /32 per host;
2. starts ``netstor-server`` on every server host (LMDB in a temporary directory);
3. runs ``netstor-load`` open loop on every client at the same time (Poisson arrivals, Zipf
   0.99 keys over 1000 keys, 10 % PUTs, 64-byte values), every request and reply crossing the
   switch;
4. prints per client and in total: requests/s, mean/p50/p99/p99.9 latency, and the switch's
   counters (per port, to host, drops, and the data plane's own counters);
5. tears everything down -- also on Ctrl-C or SIGTERM (processes stopped, namespaces gone).

The total row's mean is exact; its percentiles come from the clients' merged log histograms
(10 buckets per decade: the value shown is the upper bound of the bucket holding the
percentile).
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import tempfile
import time
from pathlib import Path

from netstor.offloads import offloads

from . import netns
from .rack import Rack

STORAGE_PORT = 7430


def _buckets(r):
    h = r.get("histogram") or []
    return h.get("buckets", []) if isinstance(h, dict) else h


def _merged_percentiles(results):
    hist = {}
    for r in results:
        for bound, n in _buckets(r):
            hist[bound] = hist.get(bound, 0) + n
    total = sum(hist.values())
    out = {}
    for name, p in (("p50", 50), ("p99", 99), ("p999", 99.9)):
        if not total:
            out[name] = None
            continue
        rank = max(1, math.ceil(p / 100 * total))
        acc = 0
        for bound in sorted(hist):
            acc += hist[bound]
            if acc >= rank:
                out[name] = bound
                break
    good = sum(r.get("replies", 0) for r in results)
    means = [(r["latency_us"]["mean"], sum(n for _, n in _buckets(r)))
             for r in results if r.get("latency_us", {}).get("mean") is not None]
    w = sum(n for _, n in means)
    out["mean"] = round(sum(m * n for m, n in means) / w, 1) if w else None
    out["replies"] = good
    return out


def _fmt(v):
    return "-" if v is None else f"{v:.1f}"


def format_report(results, switch_stats, wall):
    lines = [f"{'client':<10}{'sent':>8}{'replies':>9}{'timeouts':>9}{'req/s':>9}"
             f"{'mean us':>11}{'p50 us':>11}{'p99 us':>11}{'p99.9 us':>11}"]
    for name, r in results.items():
        lat = r["latency_us"]
        lines.append(f"{name:<10}{r['sent']:>8}{r['replies']:>9}{r['timeouts']:>9}"
                     f"{r['rps']:>9.1f}{_fmt(lat['mean']):>11}{_fmt(lat['p50']):>11}"
                     f"{_fmt(lat['p99']):>11}{_fmt(lat['p999']):>11}")
    tot = _merged_percentiles(list(results.values()))
    sent = sum(r["sent"] for r in results.values())
    tmo = sum(r["timeouts"] for r in results.values())
    rps = sum(r["rps"] for r in results.values())
    lines.append(f"{'total':<10}{sent:>8}{tot['replies']:>9}{tmo:>9}{rps:>9.1f}"
                 f"{_fmt(tot['mean']):>11}{'<=' + _fmt(tot['p50']):>11}"
                 f"{'<=' + _fmt(tot['p99']):>11}{'<=' + _fmt(tot['p999']):>11}")
    st = switch_stats or {}
    lines.append("")
    lines.append(f"switch ({st.get('dataplane_kind', '?')} data plane), {wall:.1f} s wall:")
    for p, v in sorted((st.get("ports") or {}).items()):
        lines.append(f"  wire port {p}: in {v['rx_frames']:>7} frames {v['rx_bytes']:>9} B   "
                     f"out {v['tx_frames']:>7} frames {v['tx_bytes']:>9} B")
    lines.append(f"  to host {st.get('to_host_total', 0)}, dropped {st.get('drops', 0)}, "
                 f"tx errors {st.get('tx_errors', 0)}")
    dpc = {k: v for k, v in (st.get("dataplane") or {}).items() if v and not k.endswith("bytes")}
    lines.append("  data plane counters: "
                 + ", ".join(f"{k}={v}" for k, v in sorted(dpc.items())))
    if "counter_mismatches" in st:
        bad = st["counter_mismatches"] or st.get("output_problems")
        lines.append(f"  RTL vs golden model: {'MISMATCH ' + str(bad) if bad else 'every output frame and every counter equal'}"
                     f" ({st.get('cycles', 0)} cycles simulated, {st.get('sim_khz', 0)} kHz)")
    if st.get("error"):
        lines.append(f"  switch ERROR: {st['error']}")
    return "\n".join(lines)


def run_demo(*, servers=3, clients=2, rate=250.0, duration=5.0, write_ratio=0.1, keys=1000,
             value_size=64, dataplane="model", out=None):
    """Run the demo; returns ``{"clients": {name: load result}, "switch": stats}``."""
    out = out or sys.stdout
    py = sys.executable
    t0 = time.monotonic()
    netns.cleanup_stale()
    with tempfile.TemporaryDirectory(prefix="netstor-demo-") as tmp, \
            Rack(clients, servers, workdir=tmp) as rack:
        tmp = Path(tmp)
        print(f"rack {rack.prefix}: {clients} client(s) on 10.77.0.0/24 (port 0), "
              f"{servers} storage server(s) on 10.77.1.0/24 (port 1), switch: {dataplane}; "
              f"work dir {tmp}",
              file=out, flush=True)
        stats_path = tmp / "switch.json"
        rack.start_switch(dataplane=dataplane, stats_json=stats_path,
                          ready_timeout=60 if dataplane == "model" else 900,
                          log=tmp / "switch.log")
        srv = []
        for k, h in enumerate(rack.servers):
            (tmp / f"db{k}").mkdir()
            srv.append(rack.spawn(h, [py, "-m", "netstor.agent.server", "--bind", h.ip,
                                      "--port", STORAGE_PORT, "--db", tmp / f"db{k}",
                                      "--workers", 2, "--server-id", k + 1, "--no-sync",
                                      "--log-level", "WARNING"]))
        for p in srv:
            p.wait_line(r"^netstor-server \d+ listening on", timeout=30)
        targets = ",".join(f"{h.ip}:{STORAGE_PORT}" for h in rack.servers)
        print(f"{servers} netstor-server(s) up; {clients} netstor-load client(s): open loop "
              f"{rate:g} req/s each for {duration:g} s, Zipf 0.99 over {keys} keys, "
              f"{write_ratio:.0%} PUTs of {value_size} B", file=out, flush=True)
        results = rack.run_on_clients(
            lambda i, h, out_json: [
                py, "-m", "netstor.agent.load", "--target", targets, "--mode", "open",
                "--rate", rate, "--duration", duration, "--keys", keys, "--zipf", 0.99,
                "--write-ratio", write_ratio, "--value-size", value_size, "--seed", i + 1,
                "--timeout", 1.0 if dataplane == "model" else 20.0, "--out", out_json,
                "--quiet"],
            tmp, timeout=duration + 60)
        rack.stop_switch()
        switch_stats = json.loads(stats_path.read_text())
        wall = time.monotonic() - t0
        print(format_report(results, switch_stats, wall), file=out, flush=True)
        res = {"clients": results, "switch": switch_stats, "wall_s": wall}
        if dataplane == "model" and servers >= 2:
            # every offload's step: the same servers, the switch restarted with its tables
            for off in offloads():
                step = off.hook("demo")
                if step is not None:
                    res[off.name], line = step(rack, tmp, rate=rate, duration=duration)
                    print(line, file=out, flush=True)
        return res


def main(argv=None):
    ap = argparse.ArgumentParser(prog="netstor demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rate", type=float, default=None,
                    help="requests/s per client (default 250; rtl: 5)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of load (default 5; rtl: 10)")
    ap.add_argument("--write-ratio", type=float, default=0.1)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--value-size", type=int, default=64)
    ap.add_argument("--dataplane", choices=["model", "rtl"], default="model")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args(argv)
    # Ctrl-C must tear the rack down even when this process inherited SIGINT as ignored (a
    # parent such as a test-runner worker may ignore it; Python then installs no handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rtl = a.dataplane == "rtl"
    try:
        netns.check_prereqs()
    except netns.NetnsError as e:
        print(f"netstor demo: {e}", file=sys.stderr)
        return 2
    try:
        res = run_demo(servers=a.servers, clients=a.clients,
                       rate=a.rate or (5.0 if rtl else 250.0),
                       duration=a.duration or (10.0 if rtl else 5.0),
                       write_ratio=a.write_ratio, keys=a.keys, value_size=a.value_size,
                       dataplane=a.dataplane)
    except KeyboardInterrupt:
        print("netstor demo: interrupted; rack torn down", file=sys.stderr)
        return 130
    except SystemExit as e:     # SIGTERM/SIGHUP (the rack turns them into SystemExit)
        print("netstor demo: terminated; rack torn down", file=sys.stderr)
        return e.code if isinstance(e.code, int) else 1
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
