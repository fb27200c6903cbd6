"""The NetRS step of ``make demo`` (:mod:`netstor.testbed.demo`): on the demo's rack, with its
storage servers still running (they listen on the NetRS port too), the switch is restarted
with the NetRS configuration (:func:`netstor.offloads.netrs.config.rack_config`: the switch is the ToR
and the RSNode, C3) and every client sends NetRS requests to a backup replica for a few
seconds at a rate the model switch keeps up with; one line of results, with the monitor
counters read from the switch's control window."""
from __future__ import annotations

import json
from pathlib import Path

from netstor.api import Device
from netstor.compiler import config_ops
from netstor.proto import Header, Op, Status
from netstor.testbed.dataplanes import ModelDataplane
from netstor.testbed.experiment import pct, start_switch
from netstor.testbed.framecost import median_us, udp_frame

from .compare import load_argv
from .config import rack_config
from .header import NETRS_UDP_PORT as PORT, M_RESP, RsRequest, f

__all__ = ["run_netrs_step", "format_line"]

MAX_RATE = 15.0         # req/s per client: the Python model costs ~2 ms per NetRS request


def run_netrs_step(rack, workdir, *, rate, duration, workers=2):
    """Returns ``{"clients", "switch", "monitor", "summary"}``; the rack's servers must be up
    (server ids 1..n, NetRS port 7432)."""
    workdir = Path(workdir)
    config, groups = rack_config(rack.hosts, rack.clients, rack.servers)
    stats = workdir / "netrs-switch.json"
    ctl = workdir / "netrs-switch.sock"
    start_switch(rack, config, workdir, stats_json=stats, name="switch-rs", control=ctl,
                 log=workdir / "netrs-switch.log")
    rate = min(rate, MAX_RATE)
    try:
        res = rack.run_on_clients(
            lambda i, h, out: load_argv(rack, groups, "netrs", rate=rate, duration=duration,
                                        seed=i + 1, out=out, workers=workers),
            workdir, timeout=duration + 60, tag="demo-netrs-", what="netstor-load netrs")
        with Device.open(f"unix:{ctl}") as dev:
            monitor = {c: dev.bank("rs.monitor").read(c) for c in range(3)}   # tg 0
            noreplica = dev.bank("rs.noreplica").read(0)
    finally:
        rack.stop_switch()
    sw = json.loads(stats.read_text())
    lat = sorted(x for r in res.values() for x in (r.get("samples_us") or []))
    per = {}
    for r in res.values():
        for sid, v in r["by_server"].items():
            per[sid] = per.get(sid, 0) + v["replies"]
    replies = sum(r["replies"] for r in res.values())
    summary = {
        "sent": sum(r["sent"] for r in res.values()),
        "replies": replies,
        "timeouts": sum(r["timeouts"] for r in res.values()),
        "rps": round(sum(r["rps"] for r in res.values()), 1),
        "selected": sum(r["netrs"]["selected"] for r in res.values()),
        "redirected": sum(r["netrs"]["redirected"] for r in res.values()),
        "per_server": dict(sorted(per.items(), key=lambda kv: int(kv[0]))),
        "p50_us": pct(lat, 50), "p99_us": pct(lat, 99),
        "monitor": {"same_rack": monitor[0], "same_pod": monitor[1], "other_pod": monitor[2]},
        "noreplica": noreplica,
        "groups": len(groups),
    }
    return {"clients": res, "switch": sw, "summary": summary}


def format_line(s):
    f = (lambda v: "-" if v is None else f"{v:.0f}")
    share = s["selected"] / max(1, s["replies"])
    per = ", ".join(f"s{k}: {v}" for k, v in s["per_server"].items())
    m = s["monitor"]
    return (f"NetRS ({s['groups']} replica groups of 3, C3 in the switch): sent {s['sent']}, "
            f"answered {s['replies']} ({s['rps']:.0f}/s), timeouts {s['timeouts']}, "
            f"{share:.0%} selected by the switch ({s['redirected']} away from the client's "
            f"backup replica), per server {per}; p50 {f(s['p50_us'])} us, p99 "
            f"{f(s['p99_us'])} us; monitor: same rack {m['same_rack']}, same pod "
            f"{m['same_pod']}, other pod {m['other_pod']}")


def demo_step(rack, workdir, *, rate, duration):
    """The ``make demo`` step: ``(result, line)`` (at most 3 s of load)."""
    res = run_netrs_step(rack, workdir, rate=rate, duration=min(duration, 3.0))
    return res, format_line(res["summary"])


def frame_costs(rack, n, model="compiled"):
    """The model switch's cost of NetRS frames (``netstor.testbed.framecost``): a request the
    switch selects (its recirculated pass included) and a response. ``model``:
    ``"compiled"`` or ``"interpreter"``."""
    c, s = rack.clients[0], rack.servers[0]
    get = Header(op=Op.GET, key=7, req_id=1)
    rep = get.reply(Status.NOT_FOUND, server_id=1, queue_len=0)
    cfg, _groups = rack_config(rack.hosts, rack.clients, rack.servers)
    dp = ModelDataplane(*config_ops(cfg), model=model)
    try:
        return {
            "netrs_request": median_us(dp, lambda i: udp_frame(
                c, s, PORT, PORT, RsRequest(rgid=i % 3).pack() + get.pack()), 0, n),
            # the header a server writes for a request the switch selected (rid 0 here: the
            # cost does not depend on it)
            "netrs_response": median_us(dp, lambda i: udp_frame(
                s, c, PORT, PORT,
                RsRequest(rgid=0, mf=f(M_RESP)).response(1, 0, 500_000).pack() + rep.pack()),
                1, n)}
    finally:
        dp.close()
