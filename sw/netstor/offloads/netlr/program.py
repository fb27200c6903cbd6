"""NetLR's data-plane program (``nl``): switch-sequenced leaderless replication with an
in-network inconsistent-object list. Protocol: ``docs/netlr.md``; header: :mod:`.header`.

Packets on UDP port 7460 (register ``parser.udp_port.nl``). State:

* bank ``nl.seq`` (1 x 32): the global write sequence;
* bank ``nl.slots`` (``slots`` x 112, default 128K: 14,680,064 bits): the inconsistent-object
  list, one cell per slot: ``fp`` (bits 0..63, 0 = free), ``seq`` (64..95, the slot's last
  write), ``rid`` (96..103, its latest known consistent replica), ``acks`` (104..111, one bit
  per member position of the group: the live members that acked ``seq``). One
  read-modify-write per packet does a whole step of the protocol (compare-and-set on the
  fingerprint and the seq, the ack bitmap, the commit), so no two packets ever see a
  half-updated slot;
* bank ``nl.rr`` (``groups`` x 4): the read rotation of each group;
* counters (banks of 1 x 32): ``nl.collide``, ``nl.stale``, ``nl.absorbed``, ``nl.commits``,
  ``nl.ignored``, ``nl.refused``.

Tables (the controller's, :mod:`.config`):

* ``nl.groups`` (exact on ``group``): ``group(mcast, live, members, reads, nread, gidx)``:
  the copy-list multicast group of the write set (live members and joining ones), the live
  mask over member positions 0..7, the members' rids (position ``i`` in bits ``8i..8i+7``),
  the live members' rids in position order (``reads``, ``nread`` of them) and the group's
  rotation cell ``gidx``. A miss drops the packet (``nl.groups.miss``).
* ``nl.replicas`` (exact on a rid, ingress): ``replica(ip, mac, smac, port, dport)``: where
  a read steered to that replica goes. A miss drops the read (``nl.replicas.miss``).
* ``nl.copies`` (exact on the copy's rid, egress): ``copy(ip, mac, smac, dport)``: the
  rewrite of each write copy (and ``rid`` <- the copy's rid).

Per packet (after the trust guard: replies are reports, trusted only from the replicas'
ports/sources; an untrusted packet is dropped and counted in ``nl.trust.miss``):

* **WRITE** (``fp != 0``, the group has a live replica, else dropped and counted in
  ``nl.refused``): ``seq = ++nl.seq`` (written into the header); the slot: free or holding
  this ``fp``: it becomes ``(fp, seq, rid, acks 0)`` with ``rid`` kept when the slot held this
  ``fp`` and the group's first live replica when it was free; the write goes out through the
  group's copy list, ``nrep`` = the live count, each copy rewritten from its rid (egress).
  A slot holding another ``fp``: dropped, counted in ``nl.collide`` (the sequence number it
  drew is unused: sequence numbers only need to grow).
* **WRITE_REPLY** from a live member (``rid`` at a live position of the group's members)
  with ``fp != 0`` (others: dropped, ``nl.ignored``; a reply with ``fp`` 0 would match a free
  slot, whose ``fp`` is 0, and pass as a commit of no write: found by the ``netlr_ack``
  formal job): the slot holds this ``fp`` and this ``seq``: the
  member's bit is set in ``acks`` and ``rid`` <- the member; when ``acks`` covers the live
  mask the write commits: the slot is freed (``fp`` 0) and this reply goes on to the client
  (routed by ``l3.routes``; ``nl.commits``); otherwise it is absorbed (dropped,
  ``nl.absorbed``). Any other slot content: stale, dropped (``nl.stale``). A duplicated ack
  sets a bit that is already set, so only distinct live members count.
* **READ**: the slot holds this ``fp`` (a write of the object is in flight): to the slot's
  ``rid``; otherwise to the group's next live replica in rotation (``nl.rr``). The read is
  rewritten from ``nl.replicas`` (addresses, UDP port, output port, ``rid``).
* **READ_REPLY**: routed to the client like any IPv4 packet.
"""
from netstor.elements import Compute, RegisterOp, Table
from netstor.elements.trust import guard
from netstor.lang import Action, Cat, Const, F, Mux, Old, Program, Set

from .header import (HEADER, MAX_REPLICAS, NETLR_UDP_PORT, OP_READ, OP_READ_REPLY, OP_WRITE,
                     OP_WRITE_REPLY)

__all__ = ["make_netlr", "SLOTS", "GROUPS", "RIDS", "SLOT_WIDTH", "slot_word", "slot_fields",
           "slot_memory_bits", "COUNTERS"]

SLOTS = 128 * 1024       #: inconsistent-object list slots (the paper: 128K suffice)
GROUPS = 256             #: replica groups (entries of nl.groups, cells of nl.rr)
RIDS = 256               #: replica ids (entries of nl.replicas and nl.copies)
SLOT_WIDTH = 112         #: bits per slot: fp 64, seq 32, rid 8, acks 8
COUNTERS = ("collide", "stale", "absorbed", "commits", "ignored", "refused")


def slot_word(fp, seq, rid, acks):
    """The ``nl.slots`` cell of ``(fp, seq, rid, acks)``."""
    return fp | seq << 64 | rid << 96 | acks << 104


def slot_fields(word):
    """``(fp, seq, rid, acks)`` of an ``nl.slots`` cell."""
    return (word & (1 << 64) - 1, word >> 64 & 0xFFFFFFFF, word >> 96 & 0xFF, word >> 104 & 0xFF)


def slot_memory_bits(slots=SLOTS):
    """Bits of the inconsistent-object list with ``slots`` slots."""
    return slots * SLOT_WIDTH


def make_netlr(n_ports=2, *, slots=SLOTS, groups=GROUPS, rids=RIDS):
    if slots <= 0 or slots & (slots - 1):
        raise ValueError(f"netlr: slots must be a power of two, got {slots}")
    if groups <= 0 or groups & (groups - 1) or groups % 4:
        raise ValueError(f"netlr: groups must be a power of two >= 4, got {groups}")
    p = Program("nl", udp_port=NETLR_UDP_PORT)
    h = p.header(HEADER.fields)
    op, fp, seq, rid = h["op"], h["fp"], h["seq"], h["rid"]
    M = MAX_REPLICAS

    # replies report replica state (acks): trusted ports/sources only
    guard(p, reports=(op == OP_WRITE_REPLY) | (op == OP_READ_REPLY))
    # the op, decoded once (this also places the group lookup in the second stage, whose
    # latency the other programs already set, not in the first: header-path latency)
    rd, wr, ack = p.meta("rd", 1), p.meta("wr", 1), p.meta("ack", 1)
    p.add(Compute("classify", [Set(rd, op == OP_READ), Set(wr, op == OP_WRITE),
                               Set(ack, op == OP_WRITE_REPLY)]))

    # the group
    ghit = p.meta("group_hit", 1)
    gmcast, live = p.meta("mcast", 12), p.meta("live", M)
    members, reads = p.meta("members", 8 * M), p.meta("reads", 8 * M)
    gbits = max(1, (groups - 1).bit_length())
    nread, gidx = p.meta("nread", 4), p.meta("gidx", gbits)
    group = Action("group", {"mcast": 12, "live": M, "members": 8 * M, "reads": 8 * M,
                             "nread": 4, "gidx": gbits}, lambda a: [
        Set(ghit, 1), Set(gmcast, a.mcast), Set(live, a.live), Set(members, a.members),
        Set(reads, a.reads), Set(nread, a.nread), Set(gidx, a.gidx)])
    p.add(Table("groups", kind="exact", key=[h["group"]], size=groups, ways=4,
                actions=[group], when=rd | wr | ack))

    # the ack's member position (one-hot, live members only) and what each packet may do
    # (one element: ok_ack is computed from the same comparisons as abit)
    abit = p.meta("abit", M)
    hits = [(rid == members[8 * i:8 * i + 8]) & live[i] for i in range(M)]
    any_hit = hits[0]
    for x in hits[1:]:
        any_hit = any_hit | x
    ok_wr, ok_rd, ok_ack = p.meta("ok_wr", 1), p.meta("ok_rd", 1), p.meta("ok_ack", 1)
    avail = ghit & (nread != 0)
    p.add(Compute("admit", [Set(abit, Cat(*hits)), Set(ok_wr, wr & avail & (fp != 0)),
                            Set(ok_rd, rd & avail),
                            Set(ok_ack, ack & ghit & any_hit & (fp != 0))],
                  when=rd | wr | ack))

    # the global write sequence; the read rotation
    p.add(RegisterOp.add("seq", p.bank("seq", width=32, depth=1), 0, 1, result=seq,
                         when=ok_wr))
    ridx = p.meta("ridx", 4)
    p.add(RegisterOp("rr", p.bank("rr", width=4, depth=groups), index=gidx,
                     update=lambda old: Mux((old + 1) >= nread, Const(0, 4), old + 1),
                     result=ridx, returns="old", when=ok_rd))

    # the inconsistent-object list: one read-modify-write per packet
    first = reads[0:8]
    sold = p.meta("slot_old", SLOT_WIDTH)

    def update(old):
        ofp, oseq, orid, oacks = old[0:64], old[64:96], old[96:104], old[104:112]
        w_new = Cat(fp, seq, Mux(ofp == fp, orid, first), Const(0, 8))
        nacks = oacks | abit
        commit = (nacks & live) == live
        a_new = Mux(commit, Cat(Const(0, 64), oseq, rid, Const(0, 8)),
                    Cat(ofp, oseq, rid, nacks))
        return Mux(ok_wr, w_new, a_new)

    def take(o):
        return (o[0:64] == 0) | (o[0:64] == fp)

    def match(o):
        return (o[0:64] == fp) & (o[64:96] == seq)

    o = Old(SLOT_WIDTH)
    sbits = max(1, (slots - 1).bit_length())
    p.add(RegisterOp("slots", p.bank("slots", width=SLOT_WIDTH, depth=slots),
                     index=h["slot"][0:sbits], update=update,
                     write=(ok_wr & take(o)) | (ok_ack & match(o)),
                     result=sold, returns="old", when=ok_wr | ok_rd | ok_ack))

    # the decision, from the slot as it was
    ofp, oseq, orid, oacks = sold[0:64], sold[64:96], sold[96:104], sold[104:112]
    collide, stale = p.meta("collide", 1), p.meta("stale", 1)
    absorbed, commit = p.meta("absorbed", 1), p.meta("commit", 1)
    ignored, refused = p.meta("ignored", 1), p.meta("refused", 1)
    target, wcopy = p.meta("target", 8), p.meta("wcopy", 1)
    matched = (ofp == fp) & (oseq == seq)
    done = ((oacks | abit) & live) == live
    rsel = Mux(ridx >= nread, Const(0, 4), ridx)
    rr_rid = reads[0:8]
    for i in range(1, M):
        rr_rid = Mux(rsel == i, reads[8 * i:8 * i + 8], rr_rid)
    p.add(Compute("decide", [
        Set(collide, ok_wr & ~((ofp == 0) | (ofp == fp))),
        Set(stale, ok_ack & ~matched),
        Set(absorbed, ok_ack & matched & ~done),
        Set(commit, ok_ack & matched & done),
        Set(ignored, ack & ghit & ~ok_ack),
        Set(refused, (rd | wr) & ghit & ~ok_wr & ~ok_rd),
        Set(target, Mux((ofp == fp) & (fp != 0), orid, rr_rid)),
    ], when=rd | wr | ack))

    # writes: through the group's copy list (rewritten per copy in egress)
    p.add(Compute("write_out", [Set(F.meta.mcast_group, gmcast), Set(h["nrep"], nread),
                                Set(wcopy, 1), Set(F.meta.drop, 0)],
                  when=ok_wr & ~collide))
    # reads: to the chosen replica
    rhit = p.meta("replica_hit", 1)
    replica = Action("replica", {"ip": 32, "mac": 48, "smac": 48, "port": 4, "dport": 16},
                     lambda a: [Set(rhit, 1), Set(F.ipv4.dst, a.ip), Set(F.eth.dst, a.mac),
                                Set(F.eth.src, a.smac), Set(F.meta.egress_port, a.port),
                                Set(F.udp.dport, a.dport)])
    p.add(Table("replicas", kind="exact", key=[target], size=rids, ways=4, actions=[replica],
                when=ok_rd))
    p.add(Compute("read_rid", [Set(rid, target)], when=ok_rd & rhit))
    # everything the protocol does not pass on
    p.add(Compute("drop", [Set(F.meta.drop, 1)], when=(
        ((rd | wr | ack) & ~ghit) | collide | stale | absorbed | ignored | refused
        | (ok_rd & ~rhit))))
    for name, cond in (("collide", collide), ("stale", stale), ("absorbed", absorbed),
                       ("commits", commit), ("ignored", ignored), ("refused", refused)):
        p.add(RegisterOp.add(f"count_{name}", p.bank(name, width=32, depth=1), 0, 1,
                             when=cond))

    # egress, per write copy: the replica's addresses and rid
    copy = Action("copy", {"ip": 32, "mac": 48, "smac": 48, "dport": 16}, lambda a: [
        Set(F.ipv4.dst, a.ip), Set(F.eth.dst, a.mac), Set(F.eth.src, a.smac),
        Set(F.udp.dport, a.dport), Set(rid, F.meta.rid[0:8])])
    p.add_egress(Table("copies", kind="exact", key=[F.meta.rid[0:8]], size=rids, ways=4,
                       actions=[copy], when=p.selected & wcopy))
    return p
