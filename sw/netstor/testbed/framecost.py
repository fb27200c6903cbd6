"""What one frame costs the golden model in the test-bed switch, per kind of frame, measured
on its own (no sockets, no other processes competing for the CPU): the floor of what the
``netstor switch`` process adds to every request.

``python -m netstor.testbed.framecost [--n 300]`` prints a JSON object ``{kind: us per
frame}`` for the kinds ``plain_request`` / ``plain_reply`` (storage request and reply, L3
routes only), ``netrs_request`` (a NetRS request selected by the switch, the recirculated
pass that counts it outstanding included), ``netrs_response``, ``netclone_request`` (cloned:
both servers idle; the recirculated copy included) and ``netclone_reply``. The median of
``n`` frames after a warm-up. No root needed: the rack's hosts are only named, never built.

Under load in the test bed the same frames cost more (the switch shares two CPUs with the
clients and servers); the switch reports what they cost there (``timing`` in its stats).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

__all__ = ["measure", "main"]


def _frame(src, dst, sport, dport, payload):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from netstor.testbed import netns
    from netstor.testbed.rack import port_mac
    return bytes(Ether(src=src.mac_str, dst=netns.mac_str(port_mac(src.segment)))
                 / IP(src=src.ip, dst=dst if isinstance(dst, str) else dst.ip, ttl=64)
                 / UDP(sport=sport, dport=dport) / payload)


def _time(dp, make, port, n, warm=20):
    """Median wall time (us) of ``dp.process`` on ``make(i)`` (a fresh frame each time)."""
    frames = [make(i) for i in range(n + warm)]
    out = []
    for i, fr in enumerate(frames):
        t = time.perf_counter_ns()
        dp.process(fr, port)
        if i >= warm:
            out.append(time.perf_counter_ns() - t)
    return round(statistics.median(out) / 1e3, 1)


def measure(n=300):
    """``{kind: median us per frame}`` (see the module doc)."""
    from netstor.offloads.netclone.config import netclone_config
    from netstor.offloads.netclone.header import NETCLONE_UDP_PORT, OP_REQ, OP_REPLY, NcHeader
    from netstor.offloads.netrs.config import rack_config
    from netstor.offloads.netrs.header import NETRS_UDP_PORT, RsRequest, f, M_RESP
    from netstor.proto import Header, Op, Status, STORAGE_UDP_PORT
    from netstor.testbed.rack import Rack
    from netstor.testbed.switch import ModelDataplane, config_ops
    rack = Rack(3, 3)                           # hosts only, nothing is built
    c, s = rack.clients[0], rack.servers[0]
    get = Header(op=Op.GET, key=7, req_id=1)
    rep = get.reply(Status.NOT_FOUND, server_id=1, queue_len=0)
    res = {}

    cfg, _groups = rack_config(rack.hosts, rack.clients, rack.servers)
    dp = ModelDataplane(*config_ops(cfg))
    res["plain_request"] = _time(dp, lambda i: _frame(c, s, 40000, STORAGE_UDP_PORT,
                                                      get.pack()), 0, n)
    res["plain_reply"] = _time(dp, lambda i: _frame(s, c, STORAGE_UDP_PORT, 40000,
                                                    rep.pack()), 1, n)
    res["netrs_request"] = _time(dp, lambda i: _frame(
        c, s, NETRS_UDP_PORT, NETRS_UDP_PORT, RsRequest(rgid=i % 3).pack() + get.pack()), 0, n)
    # responses: the header a server writes for a request the switch selected (rid 0 here:
    # the cost does not depend on it)
    res["netrs_response"] = _time(dp, lambda i: _frame(
        s, c, NETRS_UDP_PORT, NETRS_UDP_PORT,
        RsRequest(rgid=0, mf=f(M_RESP)).response(1, 0, 500.0).pack() + rep.pack()), 1, n)
    dp.close()

    setup = netclone_config(rack.hosts, rack.servers)
    dp = ModelDataplane(*config_ops(setup.config))
    # replies first, so the servers are idle in the switch's state and requests get cloned
    res["netclone_reply"] = _time(dp, lambda i: _frame(
        s, c, NETCLONE_UDP_PORT, NETCLONE_UDP_PORT,
        NcHeader(op=OP_REPLY, group=0, seq=i, server_id=1 + i % 3).pack() + rep.pack()), 1, n)
    res["netclone_request"] = _time(dp, lambda i: _frame(
        c, setup.vip, NETCLONE_UDP_PORT, NETCLONE_UDP_PORT,
        NcHeader(op=OP_REQ, group=i % len(setup.groups)).pack() + get.pack()), 0, n)
    dp.close()
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.testbed.framecost",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="frames per kind")
    a = ap.parse_args(argv)
    print(json.dumps(measure(a.n), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
