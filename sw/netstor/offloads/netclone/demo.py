"""The NetClone step of ``make demo`` (:mod:`netstor.testbed.demo`): on the demo's rack, with
its storage servers still running (they listen on the NetClone port too), the switch is
restarted with the NetClone configuration and every client sends NetClone requests for a
few seconds; one line of results."""
from __future__ import annotations

import json
from pathlib import Path

from netstor.compiler import config_ops
from netstor.proto import Header, Op, Status
from netstor.testbed.dataplanes import ModelDataplane
from netstor.testbed.experiment import pct, start_switch
from netstor.testbed.framecost import median_us, udp_frame

from .compare import run_clients
from .config import netclone_config
from .header import NETCLONE_UDP_PORT as PORT, OP_REQ, OP_REPLY, NcHeader

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


def demo_step(rack, workdir, *, rate, duration):
    """The ``make demo`` step: ``(result, line)``. A NetClone request costs the Python switch
    ~10x a plain frame (two passes, two replies): at most 100 req/s per client for at most
    3 s keeps the switch out of the result."""
    res = run_netclone_step(rack, workdir, rate=min(rate, 100.0), duration=min(duration, 3.0))
    return res, format_line(res["summary"])


def frame_costs(rack, n, model="compiled"):
    """The model switch's cost of NetClone frames (``netstor.testbed.framecost``): replies
    first, so the servers are idle in the switch's state and the requests get cloned.
    ``model``: ``"compiled"`` or ``"interpreter"``."""
    c, s = rack.clients[0], rack.servers[0]
    get = Header(op=Op.GET, key=7, req_id=1)
    rep = get.reply(Status.NOT_FOUND, server_id=1, queue_len=0)
    setup = netclone_config(rack.hosts, rack.servers)
    dp = ModelDataplane(*config_ops(setup.config), model=model)
    try:
        return {
            "netclone_reply": median_us(dp, lambda i: udp_frame(
                s, c, PORT, PORT, NcHeader(op=OP_REPLY, group=0, seq=i,
                                           server_id=1 + i % 3).pack() + rep.pack()), 1, n),
            "netclone_request": median_us(dp, lambda i: udp_frame(
                c, setup.vip, PORT, PORT,
                NcHeader(op=OP_REQ, group=i % len(setup.groups)).pack() + get.pack()), 0, n)}
    finally:
        dp.close()
