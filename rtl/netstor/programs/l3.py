"""L3 forwarding: LPM on the destination IPv4 address, MAC rewrite, TTL decrement.

Applies to well-formed IPv4 packets arriving from the wire (``meta.ingress_port < n_ports``)
that no storage program claimed (``meta.hdr_type == 0``) or that belong to a program listed in
``also`` (NetClone). Table ``l3.routes`` (LPM, 64
entries): ``route(port, dmac, smac)`` sends the packet out of ``port`` with new MAC
addresses and TTL - 1; ``to_host()`` leaves it on the default path (to the host);
``drop()`` drops it. Miss: the default action (``to_host`` at reset, settable from the host).

Packets with TTL <= 1 or a malformed IPv4 header are not routed (fragments and UDP-level
errors are: routing only needs a valid IPv4 header): they go to the host (as a
router punts them to its control plane).
"""
from netstor.elements import Compute, Table
from netstor.lang import Program, Action, Set, F


def make_l3(n_ports=2, also=()):
    """``also``: storage programs whose packets are routed too (their own elements, later in
    the pipeline, may override the route, as NetClone does for requests)."""
    p = Program("l3")
    routable = p.meta("routable", 1)
    route = Action("route", {"port": 4, "dmac": 48, "smac": 48}, lambda a: [
        Set(F.eth.dst, a.dmac),
        Set(F.eth.src, a.smac),
        Set(F.ipv4.ttl, F.ipv4.ttl - 1),
        Set(F.meta.egress_port, a.port),
    ])
    to_host = Action("to_host")
    drop = Action("drop", {}, lambda a: [Set(F.meta.drop, 1)])
    p.add(Compute("classify", [
        Set(routable, F.meta.ipv4_valid & _any([F.meta.hdr_type == 0]
                                               + [q.selected for q in also])
            & (F.meta.ingress_port < n_ports) & (F.ipv4.ttl > 1)),
    ]))
    p.add(Table("routes", kind="lpm", key=[F.ipv4.dst], size=64,
                actions=[route, to_host, drop], default=to_host, when=routable))
    return p


def _any(conds):
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out
