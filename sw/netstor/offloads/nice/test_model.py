"""NICE in the golden model and the compiled model: hand-worked cases, frames in, frames out.

Expected frames are built here from scratch (:func:`frame`: Ethernet/IPv4/UDP with the IPv4
header checksum and the UDP checksum over the pseudo-header computed by :func:`inet_csum`),
so a packet matches byte for byte only if the switch rewrote exactly the addresses, the UDP
port and ``part`` and updated both checksums. Which node a packet must reach is worked out
by hand below from the section, not with the config's functions.

Rack: clients 10.0.0.x behind port 0; storage nodes 1..5 at 10.0.1.n and node 1500 at
10.0.5.220, all behind port 1 (several copies on one port); node 2 listens on UDP 7472, the
others on 7470. Partitions: 0 = [1, 2, 3], 1 = [2, 3, 1500], 2 = [3, 4, 5]. Rings: the
defaults (unicast 10.10.0.0/16, multicast 10.11.0.0/16, /24 subgroups: 256), subgroup s ->
partition ``3 s // 256``: s <= 85 -> 0, 86..170 -> 1, 171..255 -> 2. Client space
10.0.0.0/24 cut in divisions (k = 3 nodes: a /25 and two /26, the get set rotated by p mod 3):

    p 0, order [1, 2, 3]:     1 <- .0/25,  2 <- .128/26,  3 <- .192/26
    p 1, order [3, 1500, 2]:  3 <- .0/25,  1500 <- .128/26,  2 <- .192/26
    p 2, order [5, 3, 4]:     5 <- .0/25,  3 <- .128/26,  4 <- .192/26
"""
from __future__ import annotations

import pytest

from netstor.driver.tables import TableWriter, apply_writes
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

from .config import model_writes
from .header import (KEY_LEN, NICE_UDP_PORT, OP_GET, OP_GET_REPLY, OP_PUT, OP_TS, NiceHeader)
from .metadata import Metadata, ModelSink

SW_MAC = 0x0200000000FF
CLIENT_PORT, NODE_PORT = 0, 1
NODES = (1, 2, 3, 4, 5, 1500)
KINDS = ["interp", "compiled"]


def ip(s):
    a, b, c, d = (int(x) for x in s.split("."))
    return a << 24 | b << 16 | c << 8 | d


def nip(n):
    return ip("10.0.5.220") if n == 1500 else ip(f"10.0.1.{n}")


def nmac(n):
    return 0x020000000100 + n


def nudp(n):
    return 7472 if n == 2 else NICE_UDP_PORT


def cmac(c):
    return 0x020000000000 + (c & 0xFF)


def section(**kw):
    s = {"smac": SW_MAC, "mcast_base": 100,
         "nodes": {n: {"ip": nip(n), "mac": nmac(n), "port": NODE_PORT, "udp": nudp(n)}
                   for n in NODES},
         "partitions": {0: [1, 2, 3], 1: [2, 3, 1500], 2: [3, 4, 5]},
         "clients": ["10.0.0.0/24"]}
    s.update(kw)
    return s


_PIPE = {}


def pipeline():
    if "p" not in _PIPE:
        _PIPE["p"] = default_pipeline()
    return _PIPE["p"]


def model(kind):
    pl = pipeline()
    return (CompiledModel if kind == "compiled" else DataplaneModel)(pl, groups="list")


def l3_writes(w):
    """Routes to the clients (port 0) and nodes (port 1): replies are plain L3."""
    out = []
    for c in (ip("10.0.0.100"), ip("10.0.0.130"), ip("10.0.0.200"), ip("10.0.5.1")):
        out += w.lpm_add("l3.routes", c, 32, "route",
                         {"port": CLIENT_PORT, "dmac": cmac(c), "smac": SW_MAC})
    for n in NODES:
        out += w.lpm_add("l3.routes", nip(n), 32, "route",
                         {"port": NODE_PORT, "dmac": nmac(n), "smac": SW_MAC})
    return out


def switch(kind, value=None):
    m = model(kind)
    w = TableWriter(m.pipeline)
    _, writes = model_writes(m.pipeline, section() if value is None else value, writer=w)
    apply_writes(m, l3_writes(w) + writes)
    m.writer = w
    return m


def managed(kind, clock):
    """A switch whose tables the metadata service writes (every change, diffed)."""
    m = model(kind)
    w = TableWriter(m.pipeline)
    apply_writes(m, l3_writes(w))
    md = Metadata(section(), clock=clock, sink=ModelSink(m, w))
    return m, md


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
    iph = bytearray(b"\x45\x00" + (20 + ulen).to_bytes(2, "big") + b"\x12\x34\x00\x00"
                    + bytes([ttl, 17]) + b"\0\0" + src.to_bytes(4, "big")
                    + dst.to_bytes(4, "big"))
    iph[10:12] = inet_csum(bytes(iph)).to_bytes(2, "big")
    pseudo = (src.to_bytes(4, "big") + dst.to_bytes(4, "big") + bytes([0, 17])
              + ulen.to_bytes(2, "big"))
    udp = sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + ulen.to_bytes(2, "big")
    c = inet_csum(pseudo + udp + b"\0\0" + payload) or 0xFFFF
    udp += c.to_bytes(2, "big")
    return (dmac.to_bytes(6, "big") + smac.to_bytes(6, "big") + b"\x08\x00" + bytes(iph) + udp
            + payload)


KEY = b"object-7".ljust(KEY_LEN, b"\0")


def request(op, client, vaddr, *, req=1, data=b"", frag=0, nfrag=1):
    h = NiceHeader(op=op, frag=frag, nfrag=nfrag, client=client, req=req, size=len(data))
    return h, frame(client, vaddr, 5000, NICE_UDP_PORT, h, KEY + data, smac=cmac(client))


def delivered(h, client, node, part, data=b"", *, src=None, sport=5000):
    """What node ``node`` must receive: the request with its addresses, UDP port and the
    resolved ``part`` (TTL untouched: the vring has no L3 route)."""
    return frame(client if src is None else src, nip(node), sport, nudp(node),
                 h._replace(part=part), KEY + data, smac=SW_MAC, dmac=nmac(node))


def send(m, f, port=CLIENT_PORT):
    return [(o.port, o.frame) for o in m.process(f, port)]


def counters(m):
    return {k[5:]: v for k, v in m.counters().items() if k.startswith("nice.")}


# ---- gets: the unicast vring ------------------------------------------------------------------
GETS = [  # (client, vnode, partition, node): worked out in the module docstring
    ("10.0.0.100", "10.10.5.7", 0, 1), ("10.0.0.130", "10.10.5.7", 0, 2),
    ("10.0.0.200", "10.10.85.255", 0, 3), ("10.0.5.1", "10.10.0.0", 0, 1),
    ("10.0.0.100", "10.10.86.1", 1, 3), ("10.0.0.130", "10.10.100.9", 1, 1500),
    ("10.0.0.200", "10.10.170.3", 1, 2), ("10.0.5.1", "10.10.100.9", 1, 2),
    ("10.0.0.100", "10.10.171.0", 2, 5), ("10.0.0.130", "10.10.200.200", 2, 3),
    ("10.0.0.200", "10.10.255.255", 2, 4), ("10.0.5.1", "10.10.255.1", 2, 3),
]


@pytest.mark.parametrize("kind", KINDS)
def test_gets_go_to_the_division_or_the_primary_byte_for_byte(kind):
    m = switch(kind)
    for i, (client, vaddr, part, node) in enumerate(GETS):
        h, f = request(OP_GET, ip(client), ip(vaddr), req=i)
        assert send(m, f) == [(NODE_PORT, delivered(h, ip(client), node, part))], (client,
                                                                                    vaddr)
    c = counters(m)
    # 9 clients inside a division, 3 outside (to the primary)
    assert (c["rings.hit"], c["unicast.hit"], c["divisions.hit"], c["divisions.miss"],
            c["nodes.hit"]) == (12, 12, 9, 3, 12)
    assert c["multicast.hit"] == c["unicast.miss"] == c["copies.hit"] == 0


# ---- puts and timestamps: the multicast vring -------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_put_fragment_makes_one_copy_per_member_byte_for_byte(kind):
    m = switch(kind)
    data = bytes(range(200)) * 7                               # a 1,400-byte fragment
    h, f = request(OP_PUT, ip("10.0.0.100"), ip("10.11.100.9"), req=9, data=data, frag=2,
                   nfrag=5)
    assert send(m, f) == [(NODE_PORT, delivered(h, ip("10.0.0.100"), n, 1, data))
                          for n in (2, 3, 1500)]                # the copy list's order
    h, f = request(OP_PUT, ip("10.0.5.1"), ip("10.11.0.1"), req=10, data=b"x")
    assert send(m, f) == [(NODE_PORT, delivered(h, ip("10.0.5.1"), n, 0, b"x"))
                          for n in (1, 2, 3)]
    c = counters(m)
    assert (c["multicast.hit"], c["copies.hit"], c["copies.miss"]) == (2, 6, 0)
    assert c["unicast.hit"] == c["divisions.hit"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_primary_timestamp_reaches_every_replica(kind):
    """TS: the primary (node 3 of partition 2) multicasts to the partition's vnode."""
    m = switch(kind)
    h = NiceHeader(op=OP_TS, client=ip("10.0.0.100"), req=4, ts=0x0301_0007, size=3)
    f = frame(nip(3), ip("10.11.222.0"), NICE_UDP_PORT, NICE_UDP_PORT, h, KEY, smac=nmac(3))
    assert send(m, f, NODE_PORT) == [
        (NODE_PORT, delivered(h, None, n, 2, src=nip(3), sport=NICE_UDP_PORT))
        for n in (3, 4, 5)]


# ---- misses and plain L3 ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_unmapped_subgroup_is_dropped_and_counted(kind):
    m = switch(kind, section(subgroups={5: 0, 100: 1}))
    h, f = request(OP_GET, ip("10.0.0.100"), ip("10.10.5.1"))
    assert send(m, f) == [(NODE_PORT, delivered(h, ip("10.0.0.100"), 1, 0))]
    for vaddr in ("10.10.6.1", "10.10.255.0"):
        assert send(m, request(OP_GET, ip("10.0.0.100"), ip(vaddr))[1]) == []
    assert send(m, request(OP_PUT, ip("10.0.0.100"), ip("10.11.6.1"), data=b"v")[1]) == []
    c = counters(m)
    assert (c["unicast.hit"], c["unicast.miss"], c["multicast.miss"]) == (1, 2, 1)
    assert c["nodes.hit"] == 1 and c["copies.hit"] == 0
    # a partition whose members are all down: its subgroups are unmapped too
    m = switch(kind, section(down=[3, 4, 5]))
    assert send(m, request(OP_GET, ip("10.0.0.100"), ip("10.10.200.1"))[1]) == []
    assert send(m, request(OP_PUT, ip("10.0.0.100"), ip("10.11.200.1"), data=b"v")[1]) == []
    assert (counters(m)["unicast.miss"], counters(m)["multicast.miss"]) == (1, 1)


@pytest.mark.parametrize("kind", KINDS)
def test_replies_and_messages_to_physical_addresses_are_plain_l3(kind):
    m = switch(kind)
    h = NiceHeader(op=OP_GET_REPLY, client=ip("10.0.0.130"), req=3, size=1, part=1)
    f = frame(nip(1500), ip("10.0.0.130"), NICE_UDP_PORT, 5000, h, KEY + b"v", smac=nmac(1500))
    want = frame(nip(1500), ip("10.0.0.130"), NICE_UDP_PORT, 5000, h, KEY + b"v", smac=SW_MAC,
                 dmac=cmac(ip("10.0.0.130")), ttl=63)
    assert send(m, f, NODE_PORT) == [(CLIENT_PORT, want)]
    assert not any(counters(m).values())        # to the client's port: not a NICE packet
    # a PUT_ACK from secondary 2 to the primary 3 (UDP 7470): a NICE
    # packet to a physical address: no vring, plain L3
    h = NiceHeader(op=3, client=ip("10.0.0.130"), req=3, size=1, part=2)
    f = frame(nip(2), nip(3), 7472, NICE_UDP_PORT, h, KEY, smac=nmac(2))
    want = frame(nip(2), nip(3), 7472, NICE_UDP_PORT, h, KEY, smac=SW_MAC, dmac=nmac(3),
                 ttl=63)
    assert send(m, f, NODE_PORT) == [(NODE_PORT, want)]
    c = counters(m)
    assert c["rings.miss"] == 1 and c["rings.hit"] == 0
    assert c["unicast.hit"] == c["multicast.hit"] == c["unicast.miss"] == 0


# ---- table changes between packets (the metadata service writing) -----------------------------
def gets_to(m, part_vaddr):
    """``{client: node}`` of a GET from each client to ``part_vaddr`` (checked byte for
    byte against the node's addresses)."""
    out = {}
    for client in ("10.0.0.100", "10.0.0.130", "10.0.0.200", "10.0.5.1"):
        h, f = request(OP_GET, ip(client), ip(part_vaddr))
        got = send(m, f)
        assert len(got) == 1
        n = next(n for n in NODES if got[0][1][30:34] == nip(n).to_bytes(4, "big"))
        assert got == [(NODE_PORT, delivered(h, ip(client), n, 0))]
        out[client] = n
    return out


def puts_to(m, vaddr):
    h, f = request(OP_PUT, ip("10.0.0.100"), ip(vaddr), data=b"v")
    got = send(m, f)
    nodes = [next(n for n in NODES if d[30:34] == nip(n).to_bytes(4, "big")) for _, d in got]
    assert got == [(NODE_PORT, delivered(h, ip("10.0.0.100"), n, 0, b"v")) for n in nodes]
    return nodes


@pytest.mark.parametrize("kind", KINDS)
def test_failure_handoff_and_two_phase_rejoin_between_packets(kind):
    t = [0.0]
    m, md = managed(kind, lambda: t[0])
    assert gets_to(m, "10.10.5.7") == {"10.0.0.100": 1, "10.0.0.130": 2, "10.0.0.200": 3,
                                       "10.0.5.1": 1}
    assert puts_to(m, "10.11.5.7") == [1, 2, 3]
    # node 1 (primary of 0) misses its beats; the others beat
    t[0] = 2.0
    for n in NODES[1:]:
        md.heartbeat(n)
    t[0] = 3.5
    md.tick()
    # 2 promoted (members [2, 1, 3]); handoff: a live node outside, nearest after 2 among
    # ids [1, 2, 3, 4, 5, 1500]: 4. Get set [2, 4, 3] (rotation 0): 2 <- /25, 4 <- .128/26
    assert gets_to(m, "10.10.5.7") == {"10.0.0.100": 2, "10.0.0.130": 4, "10.0.0.200": 3,
                                       "10.0.5.1": 2}
    assert puts_to(m, "10.11.5.7") == [2, 4, 3]
    # rejoin phase 1: puts reach 1 (before its handoff), gets do not
    assert md.rejoin(1) == {0: 4}
    assert gets_to(m, "10.10.5.7") == {"10.0.0.100": 2, "10.0.0.130": 4, "10.0.0.200": 3,
                                       "10.0.5.1": 2}
    assert puts_to(m, "10.11.5.7") == [2, 1, 4, 3]
    # phase 2: 1 serves its division again (now .128/26: members [2, 1, 3]); 4 is gone
    md.caught_up(1)
    assert gets_to(m, "10.10.5.7") == {"10.0.0.100": 2, "10.0.0.130": 1, "10.0.0.200": 3,
                                       "10.0.5.1": 2}
    assert puts_to(m, "10.11.5.7") == [2, 1, 3]
    # the other partitions never changed
    h, f = request(OP_GET, ip("10.0.0.130"), ip("10.10.100.9"))
    assert send(m, f) == [(NODE_PORT, delivered(h, ip("10.0.0.130"), 1500, 1))]
