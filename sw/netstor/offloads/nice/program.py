"""NICE's data-plane program (``nice``): virtual rings mapped onto storage nodes by table
lookups alone. Protocol: ``docs/nice.md``; header: :mod:`.header`; entries: :mod:`.config`.

Packets on UDP port 7470 (register ``parser.udp_port.nice``). The switch holds **no per-object
state and no register banks**: everything it does is what the metadata service wrote into
its tables, so failure hiding, handoff and rejoin are table writes (each one word, atomic
for a lookup) and nothing else. Counters are the tables' own ``<table>.hit`` / ``.miss``.

Tables (all written by the controller, :mod:`.config`):

* ``nice.rings`` (LPM on ``ipv4.dst``, 4 entries, flip-flops): the two vrings' prefixes ->
  ``ring(kind)`` (1 unicast, 2 multicast). A miss: not a vring address: the packet is plain
  L3 (replies to clients, node-to-node messages to physical addresses, NACK re-sends).
  ``nice.rings.hit`` counts vring packets.
* ``nice.unicast`` (hashed LPM on ``ipv4.dst``, ``subgroups`` slots in ``ring_banks`` BRAM
  banks): a unicast subgroup prefix -> ``primary(part, node)``: the partition and its
  primary node id. Miss (a vring address whose subgroup has no mapping): dropped, counted in
  ``nice.unicast.miss``.
* ``nice.multicast`` (hashed LPM on ``ipv4.dst``, the same shape): a multicast subgroup
  prefix -> ``replicate(part, mcast)``: the partition and its copy-list multicast group (one
  ``(port, rid = node id)`` copy per member of the put set). Miss: dropped, counted in
  ``nice.multicast.miss``.
* ``nice.divisions`` (hashed LPM on the 48-bit key ``part << 32 | ipv4.src``, ``divisions``
  slots in ``division_banks`` banks): get load balancing. A division of partition ``p`` is a
  power-of-two-aligned client prefix ``a/n``, written as the route ``(p << 32 | a) / (16 +
  n)`` -> ``replica(node)``. Longest prefix wins; a client outside every division of its
  partition misses and goes to the primary. ``nice.divisions.hit`` counts balanced gets.
* ``nice.nodes`` (exact on the chosen node id, ``nodes`` entries, 4-way hashed in BRAM):
  ``node(ip, mac, smac, port, dport)``: the unicast packet's new ``ipv4.dst``, ``eth.dst``,
  ``eth.src``, output port and UDP destination port. A miss runs the default action
  ``drop`` (``nice.nodes.miss``).
* ``nice.copies`` (egress, exact on the copy's rid = node id, ``nodes`` entries):
  ``copy(ip, mac, smac, dport)``: the rewrite of each multicast copy. A miss runs the
  default action ``drop`` on that copy (``nice.copies.miss``).

Per packet: unicast vring -> ``part`` written into the header, the division's replica or
the primary, rewritten from ``nice.nodes``; multicast vring -> ``part`` written, the packet
goes through the partition's copy list, each copy rewritten in egress from its rid; other
NICE packets: untouched here (plain L3, :mod:`netstor.programs.l3`).

Why an LPM on ``(part, src)`` for the divisions (and not a ternary table on ``(part, src)``
or an exact table on ``(part, src bit slice)``): the divisions are prefixes of the client
address space chosen at run time (the paper: power-of-two divisions from the observed
client ranges); an LPM in hash banks holds them at one BRAM slot per division whatever the
client subnet is, needs no priority encoder over all entries (a RAM TCAM over 3,072 entries
of 48 bits would), and does not fix at build time which source bits tell divisions apart (an
exact table on a bit slice would). ``docs/nice.md`` has the numbers.
"""
from netstor.elements import Compute, Table
from netstor.lang import Action, Cat, F, Mux, Program, Set

from .header import HEADER, NICE_UDP_PORT, RING_MULTICAST, RING_UNICAST

__all__ = ["make_nice", "SUBGROUPS", "DIVISIONS", "NODES", "RING_BANKS", "DIVISION_BANKS",
           "RINGS", "RING_UNICAST", "RING_MULTICAST", "PART_BITS", "NODE_BITS"]

SUBGROUPS = 2048         #: slots of nice.unicast and of nice.multicast (>= 1,024 partitions)
DIVISIONS = 8192         #: slots of nice.divisions ((R = 3) x 1,024 partitions at <= 40 %)
NODES = 2048             #: entries of nice.nodes and nice.copies (node ids 0..2047)
RING_BANKS = 4           #: hash banks of nice.unicast / nice.multicast (512 slots each: a BRAM36 pair)
DIVISION_BANKS = 16      #: hash banks of nice.divisions (512 slots each)
RINGS = 4                #: entries of nice.rings (flip-flops)
PART_BITS = 16           #: partition ids (the header's ``part``)
NODE_BITS = 16           #: node ids (= the copy list's rid)


def make_nice(n_ports=2, *, subgroups=SUBGROUPS, divisions=DIVISIONS, nodes=NODES,
              ring_banks=RING_BANKS, division_banks=DIVISION_BANKS):
    p = Program("nice", udp_port=NICE_UDP_PORT)
    h = p.header(HEADER.fields)

    # which vring (if any)
    ring = p.meta("ring", 2)
    p.add(Table("rings", kind="lpm", key=[F.ipv4.dst], size=RINGS,
                actions=[Action("ring", {"kind": 2}, lambda a: [Set(ring, a.kind)])]))
    uni, multi = ring == RING_UNICAST, ring == RING_MULTICAST

    # the subgroup -> partition maps (one per ring: separate hit/miss counters, and the two
    # lookups sit side by side in one stage)
    uhit, upart, primary = p.meta("uhit", 1), p.meta("upart", PART_BITS), p.meta("primary",
                                                                                  NODE_BITS)
    mhit, mpart, mcopy = p.meta("mhit", 1), p.meta("mpart", PART_BITS), p.meta("mcopy", 1)
    p.add(Table("unicast", kind="lpm", key=[F.ipv4.dst], size=subgroups, lpm_banks=ring_banks,
                actions=[Action("primary", {"part": PART_BITS, "node": NODE_BITS}, lambda a: [
                    Set(uhit, 1), Set(upart, a.part), Set(primary, a.node)])],
                when=uni))
    p.add(Table("multicast", kind="lpm", key=[F.ipv4.dst], size=subgroups,
                lpm_banks=ring_banks,
                actions=[Action("replicate", {"part": PART_BITS, "mcast": 12}, lambda a: [
                    Set(mhit, 1), Set(mpart, a.part), Set(F.meta.mcast_group, a.mcast),
                    Set(mcopy, 1)])],
                when=multi))

    # the resolved partition into the header (both rings); an unmapped subgroup: dropped
    p.add(Compute("part", [Set(h["part"], Mux(uhit, upart, mpart))], when=uhit | mhit))
    p.add(Compute("unmapped", [Set(F.meta.drop, 1)],
                  when=(uni & ~uhit) | (multi & ~mhit)))

    # gets: the client's division of the partition, else the primary
    dhit, dnode = p.meta("dhit", 1), p.meta("dnode", NODE_BITS)
    p.add(Table("divisions", kind="lpm", key=[Cat(F.ipv4.src, upart)], size=divisions,
                lpm_banks=division_banks,
                actions=[Action("replica", {"node": NODE_BITS}, lambda a: [
                    Set(dhit, 1), Set(dnode, a.node)])],
                when=uhit))
    # (a miss runs the default action, drop: no extra element, no extra cycle)
    drop = Action("drop", {}, lambda a: [Set(F.meta.drop, 1)])
    p.add(Table("nodes", kind="exact", key=[Mux(dhit, dnode, primary)], size=nodes, ways=4,
                actions=[Action("node", {"ip": 32, "mac": 48, "smac": 48, "port": 4,
                                         "dport": 16}, lambda a: [
                    Set(F.ipv4.dst, a.ip), Set(F.eth.dst, a.mac), Set(F.eth.src, a.smac),
                    Set(F.meta.egress_port, a.port), Set(F.udp.dport, a.dport)]), drop],
                default=drop, when=uhit))

    # puts and timestamps: each copy of the partition's copy list, rewritten from its rid
    p.add_egress(Table("copies", kind="exact", key=[F.meta.rid], size=nodes, ways=4,
                       actions=[Action("copy", {"ip": 32, "mac": 48, "smac": 48, "dport": 16},
                                       lambda a: [
                           Set(F.ipv4.dst, a.ip), Set(F.eth.dst, a.mac),
                           Set(F.eth.src, a.smac), Set(F.udp.dport, a.dport)]), drop],
                       default=drop, when=mcopy))
    return p
