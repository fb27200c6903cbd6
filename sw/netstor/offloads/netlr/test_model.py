"""NetLR in the golden model and the compiled model: hand-worked cases, frames in, frames out.

The reference is written here, not taken from the switch: expected frames are built from
scratch (:func:`frame`: Ethernet/IPv4/UDP with a full IPv4 header checksum and a full UDP
checksum over the pseudo-header, computed by :func:`inet_csum` here), so a copy matches byte
for byte only if the switch rewrote exactly the addresses, the UDP port, ``seq``/``rid``/
``nrep`` and updated both checksums right. Slot contents are checked against hand-worked
``(fp, seq, rid, acks)`` tuples.

Rack: client 10.0.0.100 behind port 0; replicas rid 1..5 at 10.0.1.r behind port 1 (one ToR
port, several copies on it), UDP port 7460 + r; group 0 = [1, 2, 3], group 1 = [4, 5].
Replies are trusted from port 1 only.
"""
from __future__ import annotations

import collections
import itertools

import pytest

from netstor.driver.tables import TableWriter, apply_writes
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

from .config import model_writes
from .header import (KEY_LEN, LR_LEN, NETLR_UDP_PORT, OP_READ, OP_READ_REPLY, OP_WRITE,
                     OP_WRITE_REPLY, LrHeader)
from .program import SLOTS, slot_fields

SW_MAC = 0x0200000000FF
CLIENT_IP, CLIENT_MAC, CLIENT_PORT = 0x0A000064, 0x020000000064, 0
VIP = 0x0A0000FE                       # the service address clients send to
REPLICA_PORT = 1
CLIENT_PORT_OUT = 0


def rip(r):
    return 0x0A000100 + r


def rmac(r):
    return 0x020000000100 + r


def rudp(r):
    return NETLR_UDP_PORT + r


def section(down=(), joining=()):
    return {"smac": SW_MAC, "mcast_base": 100,
            "replicas": {r: {"ip": rip(r), "mac": rmac(r), "port": REPLICA_PORT, "udp": rudp(r)}
                         for r in range(1, 6)},
            "groups": {0: [1, 2, 3], 1: [4, 5]},
            "down": list(down), "joining": list(joining)}


_PIPE = {}


def pipeline():
    if "p" not in _PIPE:
        _PIPE["p"] = default_pipeline()
    return _PIPE["p"]


def switch(kind):
    pl = pipeline()
    m = (CompiledModel if kind == "compiled" else DataplaneModel)(pl, groups="list")
    w = TableWriter(pl)
    writes = w.lpm_add("l3.routes", CLIENT_IP, 32, "route",
                       {"port": CLIENT_PORT_OUT, "dmac": CLIENT_MAC, "smac": SW_MAC})
    for r in range(1, 6):
        writes += w.lpm_add("l3.routes", rip(r), 32, "route",
                            {"port": REPLICA_PORT, "dmac": rmac(r), "smac": SW_MAC})
    _, cw = model_writes(pl, section(), writer=w, trusted_ports=[REPLICA_PORT])
    apply_writes(m, writes + cw)
    m.writer = w
    return m


def reconfigure(m, **kw):
    """The controller applies the section again with a new membership."""
    _, cw = model_writes(m.pipeline, section(**kw), writer=m.writer)
    apply_writes(m, cw)


# ---- an independent frame builder -------------------------------------------------------------
def inet_csum(data):
    """RFC 1071 Internet checksum of ``data``."""
    if len(data) % 2:
        data += b"\0"
    s = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(src, dst, sport, dport, hdr, body=b"", *, smac=0x020000000099, dmac=SW_MAC, ttl=64):
    payload = hdr.pack() + body
    ulen = 8 + len(payload)
    ip = bytearray(b"\x45\x00" + (20 + ulen).to_bytes(2, "big") + b"\x12\x34\x00\x00"
                   + bytes([ttl, 17]) + b"\0\0" + src.to_bytes(4, "big") + dst.to_bytes(4, "big"))
    ip[10:12] = inet_csum(bytes(ip)).to_bytes(2, "big")
    pseudo = (src.to_bytes(4, "big") + dst.to_bytes(4, "big") + bytes([0, 17])
              + ulen.to_bytes(2, "big"))
    udp = sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + ulen.to_bytes(2, "big")
    c = inet_csum(pseudo + udp + b"\0\0" + payload) or 0xFFFF
    udp += c.to_bytes(2, "big")
    return (dmac.to_bytes(6, "big") + smac.to_bytes(6, "big") + b"\x08\x00" + bytes(ip) + udp
            + payload)


def key(i):
    return i.to_bytes(KEY_LEN, "big")


def body(i, value=b""):
    return key(i) + value


FP = {1: 0x1111222233334444, 2: 0x5555666677778888, 3: 0x0123456789ABCDEF}


def write(obj, req, *, slot=7, group=0, value=b"v"):
    """The client's WRITE of object ``obj`` (fingerprint FP[obj]) in ``slot``."""
    h = LrHeader(op=OP_WRITE, group=group, slot=slot, fp=FP[obj], req=req)
    return h, frame(CLIENT_IP, VIP, NETLR_UDP_PORT, NETLR_UDP_PORT, h, body(obj, value))


def read(obj, req, *, slot=7, group=0):
    h = LrHeader(op=OP_READ, group=group, slot=slot, fp=FP[obj], req=req)
    return h, frame(CLIENT_IP, VIP, NETLR_UDP_PORT, NETLR_UDP_PORT, h, body(obj))


def ack(h, seq, r, *, fp=None):
    """Replica ``r``'s WRITE_REPLY to write header ``h`` carrying ``seq``."""
    a = h._replace(op=OP_WRITE_REPLY, seq=seq, rid=r, fp=h.fp if fp is None else fp)
    return a, frame(rip(r), CLIENT_IP, rudp(r), NETLR_UDP_PORT, a, body(0), smac=rmac(r))


def copy_of(h, wframe_body, seq, r, nrep):
    """The copy the switch must send to replica ``r``: the same frame with the replica's
    addresses and UDP port, ``seq``, ``rid``, ``nrep`` (TTL untouched: L3 does not route
    frames it does not know, the VIP has no route)."""
    c = h._replace(seq=seq, rid=r, nrep=nrep)
    return frame(CLIENT_IP, rip(r), NETLR_UDP_PORT, rudp(r), c, wframe_body, smac=SW_MAC,
                 dmac=rmac(r))


def routed(a, r):
    """Replica ``r``'s reply ``a`` as L3 sends it to the client (MACs, TTL - 1)."""
    return frame(rip(r), CLIENT_IP, rudp(r), NETLR_UDP_PORT, a, body(0), smac=SW_MAC,
                 dmac=CLIENT_MAC, ttl=63)


def slot(m, s=7):
    return slot_fields(m.mem_read("nl.slots", s))


def counters(m):
    return {n: m.mem_read(f"nl.{n}", 0) for n in
            ("collide", "stale", "absorbed", "commits", "ignored", "refused")}


def send(m, f, port):
    return [(o.port, o.frame) for o in m.process(f, port)]


KINDS = ["interp", "compiled"]


# ---- writes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_write_makes_one_copy_per_replica_byte_for_byte(kind):
    m = switch(kind)
    h, f = write(1, req=42, value=b"hello")
    out = send(m, f, CLIENT_PORT)
    assert out == [(REPLICA_PORT, copy_of(h, body(1, b"hello"), 1, r, 3)) for r in (1, 2, 3)]
    # the slot: (fp, seq 1, the group's first live replica, no acks)
    assert slot(m) == (FP[1], 1, 1, 0)
    assert m.mem_read("nl.seq", 0) == 1
    # a second group: two copies, the next sequence number
    h2, f2 = write(2, req=43, slot=9, group=1)
    out = send(m, f2, CLIENT_PORT)
    assert out == [(REPLICA_PORT, copy_of(h2, body(2, b"v"), 2, r, 2)) for r in (4, 5)]
    assert slot(m, 9) == (FP[2], 2, 4, 0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("order", list(itertools.permutations((1, 2, 3))))
def test_acks_in_every_order_commit_once_on_the_last(kind, order):
    m = switch(kind)
    h, f = write(1, req=5)
    send(m, f, CLIENT_PORT)
    acks_bits = 0
    for i, r in enumerate(order):
        a, af = ack(h, 1, r)
        out = send(m, af, REPLICA_PORT)
        if i < 2:
            assert out == []                                   # absorbed
            acks_bits |= 1 << (r - 1)                          # position of rid r is r - 1
            assert slot(m) == (FP[1], 1, r, acks_bits)         # rid <- the latest acker
        else:
            assert out == [(CLIENT_PORT_OUT, routed(a, r))]    # the commit, to the client
            assert slot(m)[0] == 0                             # slot freed
    c = counters(m)
    assert (c["commits"], c["absorbed"], c["stale"]) == (1, 2, 0)
    # a late duplicate of any ack after the commit: stale, dropped
    assert send(m, ack(h, 1, order[0])[1], REPLICA_PORT) == []
    assert counters(m)["stale"] == 1 and counters(m)["commits"] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_duplicate_acks_count_once(kind):
    m = switch(kind)
    h, f = write(1, req=5)
    send(m, f, CLIENT_PORT)
    for _ in range(3):
        assert send(m, ack(h, 1, 2)[1], REPLICA_PORT) == []
    assert slot(m) == (FP[1], 1, 2, 0b010)
    assert send(m, ack(h, 1, 1)[1], REPLICA_PORT) == []
    a, af = ack(h, 1, 3)
    assert send(m, af, REPLICA_PORT) == [(CLIENT_PORT_OUT, routed(a, 3))]
    assert counters(m)["absorbed"] == 4 and counters(m)["commits"] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_stale_acks_are_dropped_and_counted(kind):
    m = switch(kind)
    h1, f1 = write(1, req=1)
    send(m, f1, CLIENT_PORT)                     # seq 1
    send(m, ack(h1, 1, 1)[1], REPLICA_PORT)      # acked by 1
    h2, f2 = write(1, req=2)                     # the same object again: seq 2 supersedes
    out = send(m, f2, CLIENT_PORT)
    assert len(out) == 3
    assert slot(m) == (FP[1], 2, 1, 0)           # rid kept (1 acked seq 1), acks reset
    before = slot(m)
    for r in (2, 3):                              # acks of seq 1: stale
        assert send(m, ack(h1, 1, r)[1], REPLICA_PORT) == []
    assert send(m, ack(h2, 2, 1, fp=FP[2])[1], REPLICA_PORT) == []   # other object: stale
    assert slot(m) == before
    assert counters(m)["stale"] == 3
    for r in (3, 1):
        assert send(m, ack(h2, 2, r)[1], REPLICA_PORT) == []
    a, af = ack(h2, 2, 2)
    assert send(m, af, REPLICA_PORT) == [(CLIENT_PORT_OUT, routed(a, 2))]


@pytest.mark.parametrize("kind", KINDS)
def test_slot_collision_drops_and_retry_succeeds(kind):
    m = switch(kind)
    ha, fa = write(1, req=1, slot=3)
    send(m, fa, CLIENT_PORT)                                   # seq 1 holds slot 3
    hb, fb = write(2, req=2, slot=3 + SLOTS)                   # masked to slot 3: collision
    assert send(m, fb, CLIENT_PORT) == []
    assert counters(m)["collide"] == 1
    assert slot(m, 3) == (FP[1], 1, 1, 0)
    for r in (1, 2, 3):
        send(m, ack(ha, 1, r)[1], REPLICA_PORT)
    assert slot(m, 3)[0] == 0
    # the client's retry (same request, after its timeout) takes the freed slot: seq 3 (2 was
    # drawn by the dropped write)
    out = send(m, fb, CLIENT_PORT)
    assert out == [(REPLICA_PORT, copy_of(hb, body(2, b"v"), 3, r, 3)) for r in (1, 2, 3)]
    assert slot(m, 3) == (FP[2], 3, 1, 0)


# ---- reads --------------------------------------------------------------------------------------
def read_target(m, obj, req, **kw):
    """The replica a READ went to, checking the steered frame byte for byte."""
    h, f = read(obj, req, **kw)
    out = send(m, f, CLIENT_PORT)
    assert len(out) == 1
    port, data = out[0]
    r = LrHeader.unpack(data[42:]).rid
    assert (port, data) == (REPLICA_PORT,
                            frame(CLIENT_IP, rip(r), NETLR_UDP_PORT, rudp(r), h._replace(rid=r),
                                  body(obj), smac=SW_MAC, dmac=rmac(r)))
    return r


@pytest.mark.parametrize("kind", KINDS)
def test_reads_round_robin_when_not_listed(kind):
    m = switch(kind)
    assert [read_target(m, 1, i) for i in range(7)] == [1, 2, 3, 1, 2, 3, 1]
    assert [read_target(m, 2, i, group=1) for i in range(3)] == [4, 5, 4]


@pytest.mark.parametrize("kind", KINDS)
def test_reads_during_a_write_go_to_the_latest_consistent_replica(kind):
    m = switch(kind)
    read_target(m, 1, 0)                          # rotation now at 2
    h, f = write(1, req=1)
    send(m, f, CLIENT_PORT)
    # no ack yet: the slot's rid (the group's first live replica), every time
    assert [read_target(m, 1, i) for i in range(3)] == [1, 1, 1]
    # another object in another slot is not listed: round robin goes on
    assert read_target(m, 2, 9, slot=8) == 2
    send(m, ack(h, 1, 3)[1], REPLICA_PORT)
    assert [read_target(m, 1, i) for i in range(2)] == [3, 3]
    send(m, ack(h, 1, 2)[1], REPLICA_PORT)
    assert read_target(m, 1, 5) == 2
    # a different object mapped to the same slot is not listed
    assert read_target(m, 2, 6) == 3
    send(m, ack(h, 1, 1)[1], REPLICA_PORT)        # commit
    assert [read_target(m, 1, i) for i in range(3)] == [1, 2, 3]


@pytest.mark.parametrize("kind", KINDS)
def test_read_replies_pass_to_the_client(kind):
    m = switch(kind)
    a = LrHeader(op=OP_READ_REPLY, group=0, slot=7, fp=FP[1], seq=4, rid=2, req=9)
    f = frame(rip(2), CLIENT_IP, rudp(2), NETLR_UDP_PORT, a, body(0), smac=rmac(2))
    assert send(m, f, REPLICA_PORT) == [(CLIENT_PORT_OUT, routed(a, 2))]


# ---- membership ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_replica_failure_mid_write(kind):
    m = switch(kind)
    h, f = write(1, req=1)
    send(m, f, CLIENT_PORT)
    send(m, ack(h, 1, 1)[1], REPLICA_PORT)
    reconfigure(m, down=[3])                      # replica 3 fails: out by table writes only
    a, af = ack(h, 1, 2)
    assert send(m, af, REPLICA_PORT) == [(CLIENT_PORT_OUT, routed(a, 2))]   # 1 and 2 suffice
    # the next write goes to the two live replicas; the dead one's late ack is ignored
    h2, f2 = write(1, req=2)
    assert send(m, f2, CLIENT_PORT) == [(REPLICA_PORT, copy_of(h2, body(1, b"v"), 2, r, 2))
                                        for r in (1, 2)]
    assert send(m, ack(h2, 2, 3)[1], REPLICA_PORT) == []
    assert counters(m)["ignored"] == 1
    assert [read_target(m, 2, i, slot=8) for i in range(3)] == [1, 2, 1]


@pytest.mark.parametrize("kind", KINDS)
def test_failure_after_the_other_acks_needs_the_clients_retry(kind):
    """Both surviving replicas acked before the third failed: no ack is left to commit the
    write, so its client times out and retries it; the retry (a new seq) commits."""
    m = switch(kind)
    h, f = write(1, req=1)
    send(m, f, CLIENT_PORT)
    for r in (1, 2):
        send(m, ack(h, 1, r)[1], REPLICA_PORT)
    reconfigure(m, down=[3])
    assert slot(m) == (FP[1], 1, 2, 0b011)        # still listed: reads go to replica 2
    assert read_target(m, 1, 3) == 2
    send(m, f, CLIENT_PORT)                       # the retry: seq 2
    assert slot(m) == (FP[1], 2, 2, 0)
    send(m, ack(h, 2, 1)[1], REPLICA_PORT)
    a, af = ack(h, 2, 2)
    assert send(m, af, REPLICA_PORT) == [(CLIENT_PORT_OUT, routed(a, 2))]


@pytest.mark.parametrize("kind", KINDS)
def test_rejoin_in_two_phases(kind):
    m = switch(kind)
    reconfigure(m, down=[3])
    # phase 1: 3 gets write copies, its acks do not count, reads never go to it
    reconfigure(m, joining=[3])
    h, f = write(1, req=1)
    out = send(m, f, CLIENT_PORT)
    assert out == [(REPLICA_PORT, copy_of(h, body(1, b"v"), 1, r, 2)) for r in (1, 2, 3)]
    assert send(m, ack(h, 1, 3)[1], REPLICA_PORT) == []
    assert counters(m)["ignored"] == 1 and slot(m) == (FP[1], 1, 1, 0)
    send(m, ack(h, 1, 1)[1], REPLICA_PORT)
    a, af = ack(h, 1, 2)
    assert send(m, af, REPLICA_PORT) == [(CLIENT_PORT_OUT, routed(a, 2))]
    assert [read_target(m, 2, i, slot=8) for i in range(4)] == [1, 2, 1, 2]
    # phase 2: live: counted and readable
    reconfigure(m)
    h2, f2 = write(1, req=2)
    assert len(send(m, f2, CLIENT_PORT)) == 3
    for r in (1, 2):
        assert send(m, ack(h2, 2, r)[1], REPLICA_PORT) == []
    a, af = ack(h2, 2, 3)
    assert send(m, af, REPLICA_PORT) == [(CLIENT_PORT_OUT, routed(a, 3))]
    assert sorted(read_target(m, 2, i, slot=8) for i in range(3)) == [1, 2, 3]


# ---- refusals and trust -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_refused_and_unknown(kind):
    m = switch(kind)
    h = LrHeader(op=OP_WRITE, group=0, slot=7, fp=0, req=1)          # fp 0: refused
    assert send(m, frame(CLIENT_IP, VIP, NETLR_UDP_PORT, NETLR_UDP_PORT, h, body(1)),
                CLIENT_PORT) == []
    assert counters(m)["refused"] == 1 and m.mem_read("nl.seq", 0) == 0
    _, f = write(1, req=2, group=5)                                  # no such group
    assert send(m, f, CLIENT_PORT) == []
    assert m.counter("nl.groups.miss") == 1
    reconfigure(m, down=[4, 5])                                      # group 1 has no replica
    _, f = read(2, 3, group=1)
    assert send(m, f, CLIENT_PORT) == []
    assert counters(m)["refused"] == 2
    assert slot(m) == (0, 0, 0, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_acks_from_an_untrusted_port_change_nothing(kind):
    m = switch(kind)
    h, f = write(1, req=1)
    send(m, f, CLIENT_PORT)
    before = slot(m)
    for r in (1, 2, 3):                            # forged on the client's port
        assert send(m, ack(h, 1, r)[1], CLIENT_PORT) == []
    assert slot(m) == before and counters(m)["commits"] == 0
    assert m.counter("nl.trust.miss") == 3


def test_header_layout():
    """The header is the lead's 26 bytes in this order (offsets worked by hand)."""
    h = LrHeader(op=2, flags=0x81, group=0x0102, slot=0x03040506, fp=0x0708090A0B0C0D0E,
                 seq=0x0F101112, rid=0x13, nrep=0x14, req=0x15161718)
    assert LR_LEN == 26
    assert h.pack() == bytes([2, 0x81, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                              17, 18, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18])


def test_commit_exactly_when_every_live_member_acked():
    """Exhaustive over small cases: every live set of group 0 (the others down) and every
    sequence of 4 acks from {1, 2, 3, 5} (5: not a member), duplicates included. The
    reference, worked here: acks of others than the live members are ignored; the write
    commits on the first ack after which the distinct live members that acked cover the live
    set, and that ack alone reaches the client; earlier live acks are absorbed, later ones
    stale."""
    m = switch("interp")
    slot_no = 0
    for live in ([1], [2], [3], [1, 2], [1, 3], [2, 3], [1, 2, 3]):
        reconfigure(m, down=[r for r in (1, 2, 3) if r not in live])
        for seq_acks in itertools.product((1, 2, 3, 5), repeat=4):
            slot_no += 1
            h, f = write(1, req=slot_no, slot=slot_no)
            assert len(send(m, f, CLIENT_PORT)) == len(live)
            seq = m.mem_read("nl.seq", 0)
            before = counters(m)
            acked, committed, want = set(), False, collections.Counter()
            for r in seq_acks:
                a, af = ack(h, seq, r)
                out = send(m, af, REPLICA_PORT)
                if r not in live:
                    want["ignored"] += 1
                    assert out == []
                elif committed:
                    want["stale"] += 1
                    assert out == []
                else:
                    acked.add(r)
                    if acked >= set(live):
                        committed = True
                        want["commits"] += 1
                        assert out == [(CLIENT_PORT_OUT, routed(a, r))]
                    else:
                        want["absorbed"] += 1
                        assert out == []
            after = counters(m)
            assert {k: after[k] - before[k] for k in after} == {
                k: want[k] for k in after}, (live, seq_acks)
            assert (slot(m, slot_no)[0] == 0) == committed


def test_copies_are_exactly_the_write_set():
    """Every state of replicas 1..3 (live, joining, down): a write to group 0 makes one copy
    per member not down, in position order, each byte for byte, ``nrep`` = the live count;
    none when every member is down (refused)."""
    m = switch("interp")
    n = 0
    for states in itertools.product(("live", "joining", "down"), repeat=3):
        down = [r for r, st in zip((1, 2, 3), states) if st == "down"]
        joining = [r for r, st in zip((1, 2, 3), states) if st == "joining"]
        reconfigure(m, down=down, joining=joining)
        n += 1
        h, f = write(1, req=n, slot=100 + n)
        seq = m.mem_read("nl.seq", 0) + 1
        nlive = 3 - len(down) - len(joining)
        want = [(REPLICA_PORT, copy_of(h, body(1, b"v"), seq, r, nlive))
                for r in (1, 2, 3) if r not in down] if nlive else []
        assert send(m, f, CLIENT_PORT) == want, states
