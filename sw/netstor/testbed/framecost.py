"""What one frame costs the golden model in the test-bed switch, per kind of frame, measured
on its own (no sockets, no other processes competing for the CPU): the floor of what the
``netstor switch`` process adds to every request.

``python -m netstor.testbed.framecost [--n 300] [--model compiled|interpreter|both]
[--out FILE]`` prints a JSON object ``{kind: us per frame}`` for the kinds ``plain_request`` /
``plain_reply`` (storage request and reply, L3 routes only), then every offload's own kinds
(its ``frame_costs`` hook, e.g. ``netclone_request``: cloned, both servers idle, the
recirculated copy included). The median of ``n`` frames after a warm-up. No root needed: the
rack's hosts are only named, never built.

``--model both`` (:func:`model_speed`) measures the interpreter and the compiled model side by
side in one run, kind by kind: ``{"interpreted_us": {kind: us}, "compiled_us": {kind: us},
"speedup": {kind: x}}`` (``make bench`` writes it to ``build/bench/model_speed.json``).

Under load in the test bed the same frames cost more (the switch shares two CPUs with the
clients and servers); the switch reports what they cost there (``timing`` in its stats).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from netstor.compiler import config_ops
from netstor.offloads import offloads
from netstor.proto import Header, Op, Status, STORAGE_UDP_PORT
from netstor.testbed import netns
from netstor.testbed.dataplanes import ModelDataplane
from netstor.testbed.rack import Rack, port_mac, route_config

__all__ = ["measure", "model_speed", "write_model_speed", "main", "udp_frame", "median_us"]


def udp_frame(src, dst, sport, dport, payload):
    """An Ethernet/IPv4/UDP frame from rack host ``src`` to ``dst`` (a host or an address)."""
    return bytes(Ether(src=src.mac_str, dst=netns.mac_str(port_mac(src.segment)))
                 / IP(src=src.ip, dst=dst if isinstance(dst, str) else dst.ip, ttl=64)
                 / UDP(sport=sport, dport=dport) / payload)


def median_us(dp, make, port, n, warm=20):
    """Median wall time (us) of ``dp.process`` on ``make(i)`` (a fresh frame each time)."""
    frames = [make(i) for i in range(n + warm)]
    out = []
    for i, fr in enumerate(frames):
        t = time.perf_counter_ns()
        dp.process(fr, port)
        if i >= warm:
            out.append(time.perf_counter_ns() - t)
    return round(statistics.median(out) / 1e3, 1)


def measure(n=300, model="compiled"):
    """``{kind: median us per frame}`` (see the module doc) of ``model`` (``"compiled"`` or
    ``"interpreter"``, :class:`netstor.testbed.dataplanes.ModelDataplane`)."""
    rack = Rack(3, 3)                           # hosts only, nothing is built
    c, s = rack.clients[0], rack.servers[0]
    get = Header(op=Op.GET, key=7, req_id=1)
    rep = get.reply(Status.NOT_FOUND, server_id=1, queue_len=0)
    dp = ModelDataplane(*config_ops(route_config(rack.hosts)), model=model)
    res = {"plain_request": median_us(dp, lambda i: udp_frame(c, s, 40000, STORAGE_UDP_PORT,
                                                              get.pack()), 0, n),
           "plain_reply": median_us(dp, lambda i: udp_frame(s, c, STORAGE_UDP_PORT, 40000,
                                                            rep.pack()), 1, n)}
    dp.close()
    for off in offloads():
        costs = off.hook("frame_costs")
        if costs is not None:
            res.update(costs(rack, n, model=model))
    return res


def model_speed(n=300, rounds=3):
    """The interpreter and the compiled model side by side in one run: ``{"interpreted_us":
    {kind: us}, "compiled_us": {kind: us}, "speedup": {kind: x}, "n": n, "rounds": rounds}``.
    The two alternate ``rounds`` times and each kind keeps its best median (the machine is
    shared: the least disturbed round is the cost)."""
    interp, comp = {}, {}
    for _ in range(rounds):
        for model, res in (("interpreter", interp), ("compiled", comp)):
            for kind, us in measure(n, model).items():
                res[kind] = min(us, res.get(kind, us))
    return {"interpreted_us": interp, "compiled_us": comp,
            "speedup": {k: round(interp[k] / comp[k], 1) for k in interp if comp.get(k)},
            "n": n, "rounds": rounds}


def write_model_speed(path, n=300, rounds=3):
    """:func:`model_speed` written as JSON to ``path``; returns the dict."""
    res = model_speed(n, rounds)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1) + "\n")
    return res


def format_model_speed(res):
    """The side-by-side table (one line per kind)."""
    lines = [f"{'frame kind':<20}{'interpreter us':>16}{'compiled us':>14}{'speedup':>10}"]
    for k, us in res["interpreted_us"].items():
        lines.append(f"{k:<20}{us:>16.1f}{res['compiled_us'][k]:>14.1f}"
                     f"{res['speedup'][k]:>9.1f}x")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.testbed.framecost",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="frames per kind")
    ap.add_argument("--model", choices=["compiled", "interpreter", "both"], default="compiled")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    if a.model == "both":
        res = write_model_speed(a.out, a.n) if a.out else model_speed(a.n)
        print(format_model_speed(res), file=sys.stderr)
    else:
        res = measure(a.n, a.model)
        if a.out:
            Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
