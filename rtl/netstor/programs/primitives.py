"""A test program that exercises every platform primitive.

Recognised by UDP destination port ``PRIM_UDP_PORT`` (run-time register ``prim`` port).
Storage header ``prim`` (24 bytes, after the UDP header)::

     0        1        2                 4                                 8
    +--------+--------+-----------------+---------------------------------+
    |   op   | flags  |     tag         |            count                |
    +--------+--------+-----------------+---------------------------------+
    |            value (32)             |           expect (32)           |
    +-----------------------------------+---------------------------------+
    |            result (32)            |  hops  |  pad   |   bridge_lo   |
    +-----------------------------------+---------------------------------+

Per packet, in order (after the trust guard, :mod:`netstor.elements.trust`: every packet of
this program counts as a report, so only packets from the configured ports and sources
update ``flows`` and ``cells``; an untrusted one is dropped and counted in
``prim.trust.miss``):

1. ``flow_hash``: CRC-32 of (ipv4.src, ipv4.dst, udp.sport) into ``prim.m.flow`` (10 bits).
2. ``flow_count``: register bank ``flows`` (1024 x 32): ``flows[flow] += 1``; the new count
   is written into ``prim.count`` (first pass only).
3. ``cas``: register bank ``cells`` (256 x 32), index ``tag[0:8]``: compare-and-swap,
   ``if cells[i] == expect: cells[i] = value``; the old value goes to ``prim.result``
   (op ``OP_CAS`` only). ``OP_MAX`` keeps ``max(cells[i], value)`` instead.
4. ``acl`` (ternary, 16 entries) on (ipv4.src, udp.sport): ``deny()`` drops.
5. ``ops`` (exact, 4 ways x 16) on ``prim.op``: ``forward(port)``, ``multicast(group)``,
   ``recirculate()`` (first pass: send to recirculation with ``meta.bridge = 0xB0B``; second
   pass: forward to ``port``), ``clone(port)`` (forward and a copy to recirculation).
6. ``hops``: on a recirculated pass, ``prim.hops`` = ``meta.recirc_count`` and
   ``prim.bridge_lo`` = ``meta.bridge[0:16]``.
7. Egress table ``copy_tag`` (exact on ``meta.rid``): ``tag_copy(tag)`` writes ``prim.tag``
   per multicast copy.
"""
from netstor.elements import Compute, Hash, RegisterOp, Table
from netstor.elements.trust import guard
from netstor.lang import Program, Action, Set, Mux, Const, F

PRIM_UDP_PORT = 0x5EED
OP_FORWARD, OP_CAS, OP_MAX, OP_MCAST, OP_RECIRC, OP_CLONE = 1, 2, 3, 4, 5, 6


def make_primitives(n_ports=2):
    p = Program("prim", udp_port=PRIM_UDP_PORT)
    h = p.header([("op", 8), ("flags", 8), ("tag", 16), ("count", 32), ("value", 32),
                  ("expect", 32), ("result", 32), ("hops", 8), ("pad", 8), ("bridge_lo", 16)])
    is_prim = p.meta("is_prim", 1)
    flow = p.meta("flow", 10)
    first = F.meta.recirc_count == 0
    guard(p)                  # every primitives packet writes state: trusted ports only

    p.add(Compute("match", [Set(is_prim, p.selected)]))
    p.add(Hash("flow_hash", flow, [F.ipv4.src, F.ipv4.dst, F.udp.sport], when=is_prim))
    flows = p.bank("flows", width=32, depth=1024)
    p.add(RegisterOp.add("flow_count", flows, flow, 1, result=h["count"],
                         when=is_prim & first))
    cells = p.bank("cells", width=32, depth=256)
    is_cas = h["op"] == OP_CAS
    p.add(RegisterOp("cas", cells, index=h["tag"][0:8],
                     update=lambda old: Mux(is_cas, h["value"],
                                            Mux(old > h["value"], old, h["value"])),
                     write=Mux(is_cas, Mux(_old_eq(cells, h["expect"]), 1, 0), 1),
                     result=h["result"], returns="old",
                     when=is_prim & first & ((h["op"] == OP_CAS) | (h["op"] == OP_MAX))))
    deny = Action("deny", {}, lambda a: [Set(F.meta.drop, 1)])
    allow = Action("allow")
    p.add(Table("acl", kind="ternary", key=[F.ipv4.src, F.udp.sport], size=16,
                actions=[deny, allow], default=allow, when=is_prim))
    forward = Action("forward", {"port": 4}, lambda a: [Set(F.meta.egress_port, a.port)])
    multicast = Action("multicast", {"group": 8}, lambda a: [Set(F.meta.mcast_group, a.group)])
    recirculate = Action("recirculate", {"port": 4}, lambda a: [
        Set(F.meta.recirc, first),
        Set(F.meta.bridge, Mux(first, Const(0xB0B, 32), F.meta.bridge)),
        Set(F.meta.egress_port, a.port),
    ])
    clone = Action("clone", {"port": 4}, lambda a: [
        Set(F.meta.clone, first),
        Set(F.meta.egress_port, a.port),
    ])
    p.add(Table("ops", kind="exact", key=[h["op"]], size=64, ways=4,
                actions=[forward, multicast, recirculate, clone], when=is_prim))
    p.add(Compute("hops", [Set(h["hops"], F.meta.recirc_count),
                           Set(h["bridge_lo"], F.meta.bridge[0:16])],
                  when=is_prim & (F.meta.recirc_count != 0)))
    tag_copy = Action("tag_copy", {"tag": 16}, lambda a: [Set(h["tag"], a.tag)])
    p.add_egress(Table("copy_tag", kind="exact", key=[F.meta.rid], size=16, ways=2,
                       actions=[tag_copy], when=is_prim))
    return p


def _old_eq(bank, value):
    from netstor.lang import Old
    return Old(bank.width) == value
