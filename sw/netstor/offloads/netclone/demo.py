"""The NetClone step of ``make demo`` (:mod:`netstor.testbed.demo`): on the demo's rack, with
its storage servers still running (they listen on the NetClone port too), the switch is
restarted with the NetClone configuration and every client sends NetClone requests for a
few seconds; one line of results."""
from __future__ import annotations

import json
from pathlib import Path

from netstor.offloads.netclone.compare import pct, run_clients
from netstor.offloads.netclone.config import netclone_config, start_switch

__all__ = ["run_netclone_step", "format_line"]


def run_netclone_step(rack, workdir, *, rate, duration, timeout=1.0):
    """Returns ``{"clients": {name: load result}, "switch": stats, "summary": {...}}``; the
    rack's servers must be up (server ids 1..n, NetClone port 7431)."""
    workdir = Path(workdir)
    setup = netclone_config(rack.hosts, rack.servers)
    stats = workdir / "netclone-switch.json"
    start_switch(rack, setup.config, workdir, stats_json=stats, name="switch-nc",
                 log=workdir / "netclone-switch.log")
    try:
        res = run_clients(rack, setup, "netclone", workdir, rate=rate, duration=duration,
                          tag="demo-", timeout=timeout)
    finally:
        rack.stop_switch()
    sw = json.loads(stats.read_text())
    lat = sorted(x for r in res.values() for x in (r.get("samples_us") or []))
    p0, p1 = sw["ports"]["0"], sw["ports"]["1"]
    summary = {
        "sent": sum(r["sent"] for r in res.values()),
        "replies": sum(r["replies"] for r in res.values()),
        "timeouts": sum(r["timeouts"] for r in res.values()),
        "rps": round(sum(r["rps"] for r in res.values()), 1),
        "cloned_replies": sum(r["netclone"]["cloned_replies"] for r in res.values()),
        "duplicates": sum(r["engine"]["duplicates"] for r in res.values()),
        "switch_clones": p1["tx_frames"] - p0["rx_frames"],
        "switch_filtered": p1["rx_frames"] - p0["tx_frames"],
        "p50_us": pct(lat, 50), "p99_us": pct(lat, 99),
        "groups": len(setup.groups),
    }
    return {"clients": res, "switch": sw, "summary": summary}


def format_line(s):
    cloned = s["cloned_replies"] / max(1, s["replies"])
    f = (lambda v: "-" if v is None else f"{v:.0f}")
    return (f"NetClone ({s['groups']} server pairs): sent {s['sent']}, answered {s['replies']} "
            f"({s['rps']:.0f}/s), timeouts {s['timeouts']}, {cloned:.0%} cloned by the switch "
            f"({s['switch_clones']} clones), {s['switch_filtered']} slower replies filtered, "
            f"{s['duplicates']} duplicates at the clients; p50 {f(s['p50_us'])} us, "
            f"p99 {f(s['p99_us'])} us")
