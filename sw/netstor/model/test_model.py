"""Golden-model tests. scapy builds the frames and is the independent reference for headers and
checksums; crcmod is the independent reference for the hash."""

import random
import struct

import crcmod.predefined
import pytest
from scapy.all import Ether, Dot1Q, IP, UDP, Raw, ARP, IPOption
from scapy.layers.inet6 import IPv6

from netstor.elements import Compute, Hash, RegisterOp, Table
from netstor.lang import Program, Pipeline, Action, Set, F, Field, PARSE_ERRORS, APP_BYTES
from netstor.programs import default_pipeline
from netstor.programs.primitives import (PRIM_UDP_PORT, OP_FORWARD, OP_CAS, OP_MAX, OP_MCAST,
                                         OP_RECIRC, OP_CLONE)
from netstor.model import DataplaneModel, Output, ones_add, ipv4_header_checksum, MAX_FRAME
from netstor.driver.tables import TableWriter, TableFullError, apply_writes

crc32 = crcmod.predefined.mkCrcFun("crc-32")
ERR = {name: code for code, name in PARSE_ERRORS.items()}
MAC_A, MAC_B = 0x02AA00000001, 0x02BB00000002


@pytest.fixture
def pl():
    return default_pipeline()


def trust_everything(model):
    """Every guarded program trusts every packet (one all-wildcard entry in ``<prog>.trust``):
    these tests are about the platform and the primitives, not the trust guard, which
    ``test_trust.py`` covers, unconfigured included."""
    w = TableWriter(model.pipeline)
    for t in model.pipeline.tables:
        if t.name == "trust":
            apply_writes(model, w.ternary_add(t.qualname, [0, 0, 0], [0, 0, 0], "trusted", {}, 0))
    return model


@pytest.fixture
def m(pl):
    # bitmap multicast (``tm.mcast``, the copies="ports" core's): these cases check its
    # semantics; copy lists (the default core's) are test_copy_lists.py / test_replication.py
    return trust_everything(DataplaneModel(pl, groups="bitmap"))


@pytest.fixture
def tw(pl):
    return TableWriter(pl)


def nonzero(model):
    return {k: v for k, v in model.counters().items() if v}


def udp_frame(dst="10.1.2.3", src="192.0.2.1", sport=1234, dport=4321, payload=b"x" * 30,
              ttl=64, vlan=None, options=None, chksum=None, **ip):
    l2 = Ether(dst="02:00:00:00:00:99", src="02:00:00:00:00:98")
    if vlan is not None:
        l2 = l2 / Dot1Q(vlan=vlan, prio=3)
    kw = dict(src=src, dst=dst, ttl=ttl, id=0x1234, **ip)
    if options:
        kw["options"] = options
    u = UDP(sport=sport, dport=dport) if chksum is None else UDP(sport=sport, dport=dport,
                                                                   chksum=chksum)
    return bytes(l2 / IP(**kw) / u / Raw(payload))


PRIM = struct.Struct(">BBHIIIIBBH")      # op flags tag count value expect result hops pad br


def prim_hdr(frame):
    """The prim header fields of an output frame (scapy finds the UDP payload)."""
    p = Ether(frame)
    names = ("op", "flags", "tag", "count", "value", "expect", "result", "hops", "pad",
             "bridge_lo")
    return dict(zip(names, PRIM.unpack(bytes(p[UDP].payload)[:PRIM.size])))


def prim_frame(op, tag=0, value=0, expect=0, src="192.0.2.1", sport=7000, extra=b"tail",
               **kw):
    payload = PRIM.pack(op, 0, tag, 0, value, expect, 0, 0, 0, 0) + extra
    return udp_frame(src=src, sport=sport, dport=PRIM_UDP_PORT, payload=payload, **kw)


def assert_checksums_ok(frame):
    """scapy recomputes both checksums: they must equal what the model wrote."""
    p = Ether(frame)
    ip = p[IP]
    ref = ip.__class__(bytes(ip))
    del ref.chksum
    if UDP in ref:
        ref_udp_sum = ref[UDP].chksum
        del ref[UDP].chksum
    rebuilt = ip.__class__(bytes(ref))
    assert rebuilt.chksum == ip.chksum, "IPv4 header checksum"
    if UDP in p and p[UDP].chksum != 0:
        assert rebuilt[UDP].chksum == p[UDP].chksum, "UDP checksum"
    elif UDP in p:
        assert ref_udp_sum == 0


# ---- primitives ------------------------------------------------------------------------------
def test_ones_add_and_ipv4_checksum_hand_vectors():
    assert ones_add(0xFFFF, 0x0001) == 0x0001
    assert ones_add(0x8000, 0x8000) == 0x0001
    assert ones_add(0x1234, 0x0001) == 0x1235
    assert ones_add(0xFFFF, 0x0000) == 0xFFFF
    # the classic example header (checksum field zeroed) -> 0xB861
    hdr = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert ipv4_header_checksum(hdr) == 0xB861
    # and with the checksum bytes set, they are ignored
    assert ipv4_header_checksum(hdr[:10] + b"\xb8\x61" + hdr[12:]) == 0xB861


def test_hash_crc32_matches_crcmod():
    from netstor.lang import hash_crc32
    rng = random.Random(1)
    for _ in range(200):
        width = rng.randint(1, 200)
        v = rng.getrandbits(width)
        seed = rng.randint(0, 255)
        ref = crc32(bytes([seed]) + v.to_bytes((width + 7) // 8, "big"))
        assert hash_crc32(v, width, seed) == ref


# ---- default path, ingress buffers, tuser ---------------------------------------------------
def test_default_path_is_a_nic(m):
    f = udp_frame(dst="203.0.113.9")     # no route: l3 default action to_host
    assert m.process(f, 0, user=0x1230) == [Output(2, f, 0x1230)]
    assert m.process(f, 1) == [Output(3, f, 0)]
    assert m.process(f, 2, user=0x77) == [Output(0, f, 0x77)]   # host TX tuser to wire TX
    assert m.process(f, 3, user=0x77) == [Output(1, f, 0x77)]
    arp = bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP())
    assert m.process(arp, 1) == [Output(3, arp, 0)]
    c = m.counters()
    assert c["in0.pkts"] == 1 and c["in0.bytes"] == len(f)
    assert c["out2.pkts"] == 1 and c["out3.pkts"] == 2 and c["out3.bytes"] == len(f) + len(arp)
    assert c["l3.routes.miss"] == 2 and c["l3.routes.hit"] == 0   # only wire RX is routable


def test_ingress_buffer_drops(m):
    assert m.process(b"\x01" * 13, 0) == []
    assert m.process(b"", 3) == []
    assert m.process(bytes(MAX_FRAME + 1), 1) == []
    f = udp_frame()
    assert m.process(f, 1, user=1) == []                    # MAC bad-frame flag, wire RX
    assert m.process(f, 2, user=1) == [Output(0, f, 1)]     # host TX: no error flag
    big = udp_frame(payload=bytes(MAX_FRAME - 42))
    assert len(big) == MAX_FRAME and len(m.process(big, 0)) == 1
    assert nonzero(m) == {"in0.drop_runt": 1, "in3.drop_runt": 1, "in1.drop_oversize": 1,
                          "in1.drop_error": 1, "in2.pkts": 1, "in2.bytes": len(f),
                          "out0.pkts": 1, "out0.bytes": len(f), "in0.pkts": 1,
                          "in0.bytes": MAX_FRAME, "out2.pkts": 1, "out2.bytes": MAX_FRAME,
                          "l3.routes.miss": 1}


def test_min_frame_is_parsed_with_zero_padding(m):
    f = bytes.fromhex("0102030405060a0b0c0d0e0f0800")
    phv = m.parse(f, 0)
    assert phv["eth.dst"] == 0x010203040506 and phv["eth.type"] == 0x0800
    # the missing header reads as zeros: the version check (first) fails
    assert phv["meta.parse_error"] == ERR["ipv4_version"]
    assert m.process(f, 0) == [Output(2, f, 0)]
    assert m.counter("parser.err.ipv4_version") == 1


# ---- L3 ---------------------------------------------------------------------------------------
def route(tw, prefix, plen, port, dmac=MAC_A, smac=MAC_B):
    return tw.lpm_add("l3.routes", prefix, plen, "route",
                      {"port": port, "dmac": dmac, "smac": smac})


def ip(s):
    return int.from_bytes(bytes(int(x) for x in s.split(".")), "big")


@pytest.mark.parametrize("variant", ["plain", "vlan", "options", "udp_csum_zero", "tcp"])
def test_l3_route_rewrites_and_checksums(m, tw, variant):
    apply_writes(m, route(tw, ip("10.0.0.0"), 8, 1))
    kw = {}
    if variant == "vlan":
        kw["vlan"] = 42
    if variant == "options":
        kw["options"] = [IPOption(b"\x94\x04\x00\x00")]     # router alert: ihl 6
    if variant == "udp_csum_zero":
        kw["chksum"] = 0
    f = udp_frame(dst="10.9.8.7", ttl=17, tos=0x28, **kw)
    if variant == "tcp":
        from scapy.all import TCP
        f = bytes(Ether() / IP(dst="10.9.8.7", ttl=17, tos=0x28) / TCP() / Raw(b"y" * 9))
    outs = m.process(f, 0, user=0xABC0)
    assert len(outs) == 1 and outs[0].port == 1 and outs[0].user == 0   # wire RX -> wire TX
    o = outs[0].frame
    assert len(o) == len(f)
    p, q = Ether(o), Ether(f)
    assert p.dst == "02:aa:00:00:00:01" and p.src == "02:bb:00:00:00:02"
    assert p[IP].ttl == 16 and p[IP].tos == 0x28 and p[IP].dst == "10.9.8.7"
    assert_checksums_ok(o)
    if variant == "vlan":
        assert p[Dot1Q].vlan == 42 and p[Dot1Q].prio == 3
    if variant == "options":
        assert p[IP].ihl == 6 and bytes(p[IP].options[0]) == b"\x94\x04\x00\x00"
    if variant == "udp_csum_zero":
        assert p[UDP].chksum == 0
    # everything but MACs, TTL and the IPv4 checksum is untouched
    i = 18 if variant == "vlan" else 14
    assert o[i + 12:] == f[i + 12:] and o[12:i + 8] == f[12:i + 8]
    assert q[IP].ttl == 17
    assert m.counter("l3.routes.hit") == 1


def test_l3_ipv4_checksum_hand_vector(m, tw):
    # TTL 0x40 -> 0x3F in the classic header: checksum 0xB861 -> 0xB961
    hdr = bytes.fromhex("45000073000040004011b861c0a80001c0a800c7")
    udp = struct.pack(">HHHH", 1, 2, 0x73 - 20, 0)       # UDP checksum 0: not checked
    f = bytes.fromhex("020000000001020000000002" "0800") + hdr + udp + bytes(0x73 - 28)
    apply_writes(m, route(tw, ip("192.168.0.0"), 16, 0))
    (o,) = m.process(f, 1)
    assert o.port == 0 and o.frame[14 + 8] == 0x3F and o.frame[14 + 10:14 + 12] == b"\xb9\x61"


def test_l3_lpm_longest_match_overlapping(m, tw):
    routes = [("0.0.0.0", 0, 3), ("10.0.0.0", 8, 0), ("10.1.0.0", 16, 1), ("10.1.2.0", 24, 2),
              ("10.1.2.128", 25, 3), ("10.1.2.77", 32, 0)]
    rng = random.Random(5)
    rng.shuffle(routes)
    for pfx, plen, port in routes:
        apply_writes(m, route(tw, ip(pfx), plen, port, dmac=0x020000000000 | plen))
    # the memory is sorted longest prefix first
    lens = []
    for a in range(64):
        d = tw.decode_entry("l3.routes", m.mem_read("l3.routes", a))
        if d["valid"]:
            lens.append(d["prefix_len"])
    assert lens == sorted(lens, reverse=True) and len(lens) == 6

    def where(dst):
        (o,) = m.process(udp_frame(dst=dst), 0)
        return o.port, int(Ether(o.frame).dst.replace(":", ""), 16) & 0xFF

    assert where("10.1.2.77") == (0, 32)
    assert where("10.1.2.200") == (3, 25)
    assert where("10.1.2.5") == (2, 24)
    assert where("10.1.99.5") == (1, 16)
    assert where("10.200.0.1") == (0, 8)
    assert where("11.0.0.1") == (3, 0)
    apply_writes(m, tw.lpm_delete("l3.routes", ip("10.1.0.0"), 16))
    assert where("10.1.99.5") == (0, 8)
    assert where("10.1.2.5") == (2, 24)
    apply_writes(m, tw.lpm_delete("l3.routes", ip("0.0.0.0"), 0))
    (o,) = m.process(udp_frame(dst="11.0.0.1"), 0)
    assert o.port == 2                            # miss: default action to_host
    assert m.counter("l3.routes.miss") == 1


def test_l3_not_routed(m, tw):
    apply_writes(m, route(tw, 0, 0, 1))
    for f, inp, out in [(udp_frame(ttl=1), 0, 2),                  # TTL <= 1: to the host
                        (udp_frame(ttl=0), 1, 3),
                        (udp_frame(), 2, 0)]:                      # from the host: not routed
        assert m.process(f, inp) == [Output(out, f, 0)]
    (o,) = m.process(prim_frame(OP_FORWARD), 0)           # a storage program claims it
    assert o.port == 2 and Ether(o.frame)[IP].ttl == 64 and prim_hdr(o.frame)["count"] == 1
    assert m.counter("l3.routes.hit") == 0 and m.counter("l3.routes.miss") == 0


def test_l3_default_drop_and_route(m, tw):
    f = udp_frame(dst="198.51.100.1")
    apply_writes(m, tw.set_default("l3.routes", "drop"))
    assert m.process(f, 0) == []
    assert m.counter("tm.drop") == 1 and m.counter("l3.routes.miss") == 1
    apply_writes(m, tw.set_default("l3.routes", "route", {"port": 3, "dmac": 1, "smac": 2}))
    (o,) = m.process(f, 0)
    assert o.port == 3 and Ether(o.frame)[IP].ttl == 63
    apply_writes(m, tw.set_default("l3.routes", "route", {"port": 9, "dmac": 1, "smac": 2}))
    assert m.process(f, 0) == [] and m.counter("tm.bad_port") == 1
    apply_writes(m, tw.set_default("l3.routes", None))           # no action: default path
    assert m.process(f, 0) == [Output(2, f, 0)]


def test_default_table_reset_words(m, pl):
    t = {x.qualname: x for x in pl.tables}["l3.routes"]
    assert m.mem_read("l3.routes.default", 0) == t.action_id("to_host") == 2
    assert m.mem_read("prim.acl.default", 0) == 2          # allow
    assert m.mem_read("prim.ops.default", 0) == 0
    assert m.mem_read("prim.ops", 63) == 0 and m.mem_read("tm.mcast", 15) == 0
    m.mem_write("l3.routes.default", 0, 3)
    m.reset()
    assert m.mem_read("l3.routes.default", 0) == 2


# ---- parse errors ----------------------------------------------------------------------------
def _raw_ip(ver_ihl=0x45, total_len=None, flags_frag=0, proto=17, fix_csum=True,
            payload=None, udp_len=None, l2=None):
    if payload is None:
        payload = struct.pack(">HHHH", 1, 2, udp_len if udp_len is not None else 16, 0) \
            + b"z" * 8
    ihl = ver_ihl & 15
    opts = bytes(max(0, 4 * ihl - 20))
    tl = total_len if total_len is not None else 20 + len(opts) + len(payload)
    hdr = struct.pack(">BBHHHBBH4s4s", ver_ihl, 0, tl, 1, flags_frag, 64, proto, 0,
                      bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + opts
    if fix_csum:
        c = ipv4_header_checksum(hdr)
        hdr = hdr[:10] + c.to_bytes(2, "big") + hdr[12:]
    return (l2 or bytes.fromhex("02000000000102000000000208 00".replace(" ", ""))) \
        + hdr + payload


@pytest.mark.parametrize("name,frame", [
    ("ipv4_version", _raw_ip(ver_ihl=0x65)),
    ("ipv4_version", _raw_ip(ver_ihl=0x05)),
    ("ipv4_ihl", _raw_ip(ver_ihl=0x44)),
    ("ipv4_ihl", _raw_ip(ver_ihl=0x40)),
    ("ipv4_length", _raw_ip(total_len=200)),                    # longer than the frame
    ("ipv4_length", _raw_ip(total_len=19)),                     # shorter than the header
    ("ipv4_length", _raw_ip(ver_ihl=0x47, total_len=24)),       # shorter than IHL*4
    ("ipv4_length", _raw_ip()[:14 + 19]),                       # truncated header
    ("ipv4_checksum", _raw_ip(fix_csum=False)),
    ("ipv4_checksum", _raw_ip(ver_ihl=0x46, fix_csum=False)),
    ("udp_length", _raw_ip(udp_len=7)),
    ("udp_length", _raw_ip(udp_len=17)),                        # > IPv4 payload (16)
    ("ipv4_fragment", _raw_ip(flags_frag=0x2000)),              # MF
    ("ipv4_fragment", _raw_ip(flags_frag=0x0001)),              # offset 8
])
def test_parse_errors(m, tw, name, frame):
    apply_writes(m, route(tw, 0, 0, 1))          # would route anything well-formed
    phv = m.parse(frame, 0)
    assert phv["meta.parse_error"] == ERR[name]
    assert phv["meta.udp_valid"] == 0
    assert phv["meta.ipv4_valid"] == int(name in ("udp_length", "ipv4_fragment"))
    out = m.process(frame, 0)
    c = nonzero(m)
    assert c[f"parser.err.{name}"] == 1
    assert not [k for k in c if k.startswith("parser.err.") and k != f"parser.err.{name}"]
    if name in ("udp_length", "ipv4_fragment"):
        # a valid IPv4 header is all routing needs: fragments and UDP-level errors are routed
        assert [o.port for o in out] == [1] and out[0].frame[14 + 8] == frame[14 + 8] - 1
        assert c["l3.routes.hit"] == 1
    else:
        assert out == [Output(2, frame, 0)]      # malformed IPv4: punted unchanged
        assert "l3.routes.hit" not in c


def test_parse_error_order_and_non_udp(m):
    # version is checked before IHL, length and checksum
    assert m.parse(_raw_ip(ver_ihl=0x63, total_len=999, fix_csum=False), 0)[
        "meta.parse_error"] == ERR["ipv4_version"]
    assert m.parse(_raw_ip(total_len=999, fix_csum=False), 0)[
        "meta.parse_error"] == ERR["ipv4_length"]
    # fragment / UDP checks apply to UDP only: a TCP fragment is valid IPv4 without errors
    phv = m.parse(_raw_ip(flags_frag=0x2000, proto=6), 0)
    assert (phv["meta.parse_error"], phv["meta.ipv4_valid"], phv["meta.udp_valid"]) == (0, 1, 0)
    # DF alone is not a fragment
    phv = m.parse(_raw_ip(flags_frag=0x4000), 0)
    assert (phv["meta.parse_error"], phv["meta.udp_valid"]) == (0, 1)


def test_parse_good_fields(m):
    f = prim_frame(OP_FORWARD, tag=7, vlan=5)
    phv = m.parse(f, 3, arrival=99)
    assert phv["meta.vlan_valid"] == 1 and phv["vlan.tci"] == (3 << 13) | 5
    assert phv["vlan.type"] == 0x0800 and phv["eth.type"] == 0x8100
    assert (phv["meta.ipv4_valid"], phv["meta.udp_valid"], phv["meta.parse_error"]) == (1, 1, 0)
    assert phv["meta.hdr_type"] == 1           # l3 has no storage header: prim is type 1
    assert phv["meta.ingress_port"] == 3 and phv["meta.egress_port"] == 1
    assert phv["meta.pkt_len"] == len(f) and phv["meta.arrival"] == 99
    assert phv["udp.dport"] == PRIM_UDP_PORT and phv["ipv4.ttl"] == 64
    assert phv["app"] >> (APP_BYTES * 8 - 32) == (OP_FORWARD << 24) | 7
    assert m.view(phv, "prim.tag") == 7 and m.view(phv, "prim.op") == OP_FORWARD


def test_vlan_and_non_ipv4(m):
    short_vlan = bytes.fromhex("0200000000010200000000028100") + b"\x00\x05"   # L = 16
    phv = m.parse(short_vlan, 0)
    assert phv["meta.vlan_valid"] == 0 and phv["vlan.tci"] == 0
    assert phv["meta.parse_error"] == 0 and phv["meta.ipv4_valid"] == 0
    assert m.process(short_vlan, 0) == [Output(2, short_vlan, 0)]
    for f in (bytes(Ether() / IPv6() / UDP() / Raw(b"q" * 20)), bytes(Ether() / ARP()),
              bytes(Ether() / Dot1Q(vlan=9) / ARP())):
        phv = m.parse(f, 1)
        assert (phv["meta.parse_error"], phv["meta.ipv4_valid"], phv["meta.udp_valid"]) \
            == (0, 0, 0)
        assert m.process(f, 1) == [Output(3, f, 0)]
    assert not [k for k, v in m.counters().items() if v and k.startswith("parser.err")]


def test_udp_port_register_and_header_length(m):
    f = prim_frame(OP_FORWARD)
    assert m.reg_read("parser.udp_port.prim") == PRIM_UDP_PORT
    assert m.parse(f, 0)["meta.hdr_type"] != 0
    m.reg_write("parser.udp_port.prim", 9999)
    assert m.parse(f, 0)["meta.hdr_type"] == 0
    assert m.parse(udp_frame(dport=9999, payload=bytes(24)), 0)["meta.hdr_type"] == 1
    # a UDP payload shorter than the storage header is not claimed
    assert m.parse(udp_frame(dport=9999, payload=bytes(23)), 0)["meta.hdr_type"] == 0
    with pytest.raises(KeyError, match="no register 'parser.udp_port.l3'"):
        m.reg_read("parser.udp_port.l3")
    with pytest.raises(ValueError, match="does not fit in 16 bits"):
        m.reg_write("parser.udp_port.prim", 1 << 16)


# ---- prim: exact table, ternary, registers ---------------------------------------------------
def ops(m, tw, op, action, **params):
    apply_writes(m, tw.exact_add("prim.ops", [op], action, params))


def test_prim_forward_and_flow_counter(m, tw):
    ops(m, tw, OP_FORWARD, "forward", port=1)
    src, dst, sport = ip("192.0.2.1"), ip("10.1.2.3"), 7000
    cat = src | dst << 32 | sport << 64
    flow = crc32(b"\0" + cat.to_bytes(10, "big")) % 1024
    for n in range(1, 4):
        f = prim_frame(OP_FORWARD)
        (o,) = m.process(f, 2, user=0x5550)
        assert o.port == 1 and o.user == 0x5550
        h = prim_hdr(o.frame)
        assert h["count"] == n and h["op"] == OP_FORWARD
        assert_checksums_ok(o.frame)
        assert Ether(o.frame)[IP].ttl == 64
    assert m.mem_read("prim.flows", flow) == 3
    assert sum(m.mem_read("prim.flows", i) for i in range(1024)) == 3
    # another flow counts separately
    (o,) = m.process(prim_frame(OP_FORWARD, sport=7001), 2)
    assert prim_hdr(o.frame)["count"] == 1
    m.mem_write("prim.flows", flow, 0xFFFFFFFF)                # wraps at 32 bits
    (o,) = m.process(prim_frame(OP_FORWARD), 2)
    assert prim_hdr(o.frame)["count"] == 0
    assert m.counter("prim.ops.hit") == 5


def test_prim_cas_and_max(m, tw):
    ops(m, tw, OP_CAS, "forward", port=0)
    ops(m, tw, OP_MAX, "forward", port=0)

    def run(op, value, expect=0, tag=0x1205):
        (o,) = m.process(prim_frame(op, tag=tag, value=value, expect=expect), 3)
        assert_checksums_ok(o.frame)
        return prim_hdr(o.frame)["result"], m.mem_read("prim.cells", tag & 0xFF)

    assert run(OP_CAS, 5, expect=0) == (0, 5)        # success: old value returned
    assert run(OP_CAS, 7, expect=0) == (5, 5)        # failure: unchanged
    assert run(OP_CAS, 9, expect=5) == (5, 9)
    assert run(OP_MAX, 3) == (9, 9)
    assert run(OP_MAX, 20) == (9, 20)
    assert run(OP_MAX, 20) == (20, 20)
    assert run(OP_CAS, 1, expect=20, tag=0x3305) == (20, 1)    # index is tag[0:8]
    assert m.mem_read("prim.cells", 0x05) == 1
    # other ops leave the cells alone and the result field untouched
    ops(m, tw, OP_FORWARD, "forward", port=0)
    (o,) = m.process(prim_frame(OP_FORWARD, tag=5, value=77), 3)
    assert prim_hdr(o.frame)["result"] == 0 and m.mem_read("prim.cells", 5) == 1


def test_prim_acl_ternary_priority(m, tw):
    ops(m, tw, OP_FORWARD, "forward", port=1)
    a = ip("192.0.2.0")
    # priority 0: allow 192.0.2.1 sport 7000 exactly; priority 1: deny 192.0.2.0/24 any port
    apply_writes(m, tw.ternary_add("prim.acl", [a | 1, 7000], [0xFFFFFFFF, 0xFFFF], "allow",
                                   priority=0))
    apply_writes(m, tw.ternary_add("prim.acl", [a, 0], [0xFFFFFF00, 0], "deny", priority=1))
    assert len(m.process(prim_frame(OP_FORWARD, src="192.0.2.1", sport=7000), 2)) == 1
    assert m.process(prim_frame(OP_FORWARD, src="192.0.2.1", sport=7001), 2) == []
    assert m.process(prim_frame(OP_FORWARD, src="192.0.2.9"), 2) == []
    assert len(m.process(prim_frame(OP_FORWARD, src="192.0.3.9"), 2)) == 1
    assert m.counter("prim.acl.hit") == 3 and m.counter("prim.acl.miss") == 1
    assert m.counter("tm.drop") == 2
    # swap priorities: the deny now wins for everything in the /24
    apply_writes(m, tw.ternary_add("prim.acl", [a, 0], [0xFFFFFF00, 0], "deny", priority=0))
    apply_writes(m, tw.ternary_add("prim.acl", [a | 1, 7000], [0xFFFFFFFF, 0xFFFF], "allow",
                                   priority=1))
    assert m.process(prim_frame(OP_FORWARD, src="192.0.2.1", sport=7000), 2) == []
    # an invalid entry never matches
    apply_writes(m, tw.ternary_delete("prim.acl", 0))
    assert len(m.process(prim_frame(OP_FORWARD, src="192.0.2.1", sport=7000), 2)) == 1


def test_exact_ways_collisions_and_full(m, tw, pl):
    t = {x.qualname: x for x in pl.tables}["prim.ops"]
    placed = {}
    full = None
    order = list(range(256))
    random.Random(4).shuffle(order)
    for key in order:
        # independent slot computation: the spec's H3 slot of the 8-bit key in each way
        slots = [way * t.depth + _h3_spec(key, way, 8, 4) for way in range(t.ways)]
        free = [s for s in slots if s not in set(placed.values())]
        try:
            writes = tw.exact_add("prim.ops", [key], "forward", {"port": key % 4})
        except TableFullError as e:
            assert not free
            full = (key, e)
            break
        if free:
            assert [w[1] for w in writes] == [free[0]]     # the first way whose slot is free
        else:                                   # moves first (to another slot of their key)
            assert len(writes) > 1 and writes[-1][1] in slots
        apply_writes(m, writes)
        for _, a, word in writes:
            placed[(word >> 1) & 0xFF] = a
    assert full is not None
    key, e = full
    assert "prim.ops" in str(e) and str([key]) in str(e) and e.table == "prim.ops"
    assert any(a >= t.depth for a in placed.values())       # collisions went to later ways
    assert sorted(placed.values()) == sorted(set(placed.values()))
    # every placed key is found by the model: a packet with op=key goes to port key % 4
    hits = 0
    for key in placed:
        if key in (OP_CAS, OP_MAX, OP_MCAST, OP_RECIRC, OP_CLONE):
            continue
        outs = m.process(prim_frame(key), 2)
        assert [o.port for o in outs] == [key % 4], key
        hits += 1
    assert m.counter("prim.ops.hit") == hits
    # an entry at a slot that is not the key's hashed slot is never found
    m2 = trust_everything(DataplaneModel(pl, groups="bitmap"))
    k = next(iter(placed))
    good = tw.exact_slots("prim.ops", [k])
    bad = next(a for a in range(t.size) if a not in good)
    word = m.mem_read("prim.ops", placed[k])
    m2.mem_write("prim.ops", bad, word)
    assert [o.port for o in m2.process(prim_frame(k), 2)] == [0]     # default path
    assert m2.counter("prim.ops.miss") == 1


def test_exact_update_and_delete(m, tw):
    (w1,) = tw.exact_add("prim.ops", [OP_FORWARD], "forward", {"port": 1})
    (w2,) = tw.exact_add("prim.ops", [OP_FORWARD], "forward", {"port": 3})
    assert w1[1] == w2[1] and w1[2] != w2[2]
    apply_writes(m, [w1, w2])
    assert [o.port for o in m.process(prim_frame(OP_FORWARD), 2)] == [3]
    apply_writes(m, tw.exact_delete("prim.ops", [OP_FORWARD]))
    assert [o.port for o in m.process(prim_frame(OP_FORWARD), 2)] == [0]   # default path
    assert m.counter("prim.ops.miss") == 1


# ---- traffic manager -------------------------------------------------------------------------
def test_multicast_with_rid_rewrite(m, tw):
    ops(m, tw, OP_MCAST, "multicast", group=3)
    apply_writes(m, tw.mcast_set(3, [(3, 12), (0, 10), (2, 11)]))
    apply_writes(m, tw.exact_add("prim.copy_tag", [10], "tag_copy", {"tag": 0xAAAA}))
    apply_writes(m, tw.exact_add("prim.copy_tag", [11], "tag_copy", {"tag": 0xBBBB}))
    f = prim_frame(OP_MCAST, tag=0x1111)
    outs = m.process(f, 0, user=0x40)
    assert [o.port for o in outs] == [0, 2, 3]
    assert [o.user for o in outs] == [0, 0x40, 0x40]          # wire RX -> host RX keeps tuser
    assert [prim_hdr(o.frame)["tag"] for o in outs] == [0xAAAA, 0xBBBB, 0x1111]
    for o in outs:
        assert_checksums_ok(o.frame)
        assert prim_hdr(o.frame)["count"] == 1
    assert m.counter("prim.copy_tag.hit") == 2 and m.counter("prim.copy_tag.miss") == 1
    assert m.counter("out3.pkts") == 1 and m.counter("out1.pkts") == 0
    # empty and unknown groups
    ops(m, tw, OP_MCAST, "multicast", group=4)
    assert m.process(f, 0) == []
    ops(m, tw, OP_MCAST, "multicast", group=200)
    assert m.process(f, 0) == []
    assert m.counter("tm.mcast_empty") == 2
    apply_writes(m, tw.mcast_set(3, []))
    ops(m, tw, OP_MCAST, "multicast", group=3)
    assert m.process(f, 0) == [] and m.counter("tm.mcast_empty") == 3


def test_recirculation_once(m, tw):
    ops(m, tw, OP_RECIRC, "recirculate", port=1)
    f = prim_frame(OP_RECIRC, tag=3)
    (o,) = m.process(f, 2, user=0x99, arrival=5)
    assert o.port == 1 and o.user == 0                      # the recirculated pass has no tuser
    h = prim_hdr(o.frame)
    assert h["hops"] == 1 and h["bridge_lo"] == 0xB0B and h["count"] == 1
    assert_checksums_ok(o.frame)
    c = m.counters()
    assert c["in2.pkts"] == 1 and c["in4.pkts"] == 1 and c["in4.bytes"] == len(f)
    assert c["prim.ops.hit"] == 2 and c["tm.recirc_limit"] == 0
    assert sum(m.mem_read("prim.flows", i) for i in range(1024)) == 1   # first pass only


def test_clone(m, tw):
    ops(m, tw, OP_CLONE, "clone", port=0)
    outs = m.process(prim_frame(OP_CLONE), 3)
    assert [o.port for o in outs] == [0, 0]
    assert [prim_hdr(o.frame)["hops"] for o in outs] == [0, 1]
    assert prim_hdr(outs[1].frame)["bridge_lo"] == 0
    for o in outs:
        assert_checksums_ok(o.frame)


def test_drop_wins_over_clone_and_bad_port(m, tw):
    ops(m, tw, OP_CLONE, "clone", port=0)
    apply_writes(m, tw.ternary_add("prim.acl", [0, 0], [0, 0], "deny", priority=5))
    assert m.process(prim_frame(OP_CLONE), 3) == []
    assert m.counter("tm.drop") == 1 and m.counter("in4.pkts") == 0
    apply_writes(m, tw.ternary_delete("prim.acl", 5))
    ops(m, tw, OP_FORWARD, "forward", port=4)
    assert m.process(prim_frame(OP_FORWARD), 3) == []
    assert m.counter("tm.bad_port") == 1
    # bad port with clone: the clone copy still recirculates
    ops(m, tw, OP_CLONE, "clone", port=15)
    outs = m.process(prim_frame(OP_CLONE), 3)
    assert m.counter("tm.bad_port") == 3      # both passes have port 15
    assert outs == [] and m.counter("in4.pkts") == 1


# ---- a test program for the remaining primitives ---------------------------------------------
def _test_pipeline(max_recirc=2):
    p = Program("t", udp_port=0x7000)
    h = p.header([("a", 16), ("b", 16), ("c", 32)])
    mm = p.meta("x", 8)
    sel = p.selected
    p.add(Compute("swap", [Set(h["a"], h["b"]), Set(h["b"], h["a"]), Set(mm, h["a"] + 0x1FF)],
                  when=sel))
    bank = p.bank("small", width=8, depth=4)
    p.add(RegisterOp.add("acc", bank, h["b"], 200, result=h["c"], when=sel))
    p.add(Hash("h", Field("t.c", 32), [F.ipv4.src, h["a"]], seed=7,
               when=sel & (h["a"] == 0xEEEE)))
    loop = Action("loop", {}, lambda a: [Set(F.meta.recirc, 1),
                                         Set(F.meta.bridge, F.meta.bridge + 1)])
    p.add(Table("loops", kind="exact", key=[h["a"]], size=4, ways=1, actions=[loop],
                when=sel))
    return Pipeline([p], max_recirc=max_recirc)


def t_frame(a, b, c=0, src="192.0.2.1"):
    return udp_frame(src=src, dport=0x7000, payload=struct.pack(">HHI", a, b, c))


def t_hdr(frame):
    return struct.unpack(">HHI", bytes(Ether(frame)[UDP].payload)[:8])


def test_parallel_assignment_views_and_register_oob():
    tp = _test_pipeline()
    m = DataplaneModel(tp)
    (o,) = m.process(t_frame(1, 2), 1)
    # swap is parallel: a=2, b=1; then acc uses b (now 1): small[1] = 200, c = new value
    assert t_hdr(o.frame) == (2, 1, 200)
    assert_checksums_ok(o.frame)
    (o,) = m.process(t_frame(1, 2), 1)
    assert t_hdr(o.frame) == (2, 1, (400) & 0xFF)            # 8-bit bank wraps
    # index >= depth: nothing happens, result not written, counted
    (o,) = m.process(t_frame(9, 7, 0x1234), 1)
    assert t_hdr(o.frame) == (7, 9, 0x1234)
    assert m.counter("t.acc.index_oob") == 1
    assert [m.mem_read("t.small", i) for i in range(4)] == [0, 400 & 0xFF, 0, 0]
    # program metadata is truncated to its width (a + 0x1FF, 8 bits)
    phv = m.parse(t_frame(1, 2), 1)
    m._run(tp.elements, phv)
    assert phv["t.m.x"] == (1 + 0x1FF) & 0xFF


def test_hash_element():
    tp = _test_pipeline()
    m = DataplaneModel(tp)
    # swap makes a = 0xEEEE; the hash of Cat(ipv4.src, a) with seed 7 lands in c
    (o,) = m.process(t_frame(0, 0xEEEE), 1)
    src = ip("192.0.2.1")
    ref = crc32(bytes([7]) + (src | 0xEEEE << 32).to_bytes(6, "big"))
    assert t_hdr(o.frame) == (0xEEEE, 0, ref)
    assert_checksums_ok(o.frame)


def test_recirc_limit():
    for limit in (1, 2, 3):
        tp = _test_pipeline(max_recirc=limit)
        m = DataplaneModel(tp)
        tw = TableWriter(tp)
        apply_writes(m, tw.exact_add("t.loops", [5], "loop", {}))
        assert m.process(t_frame(5, 5), 3) == []           # a = 5 on every pass
        assert m.counter("tm.recirc_limit") == 1
        assert m.counter("in4.pkts") == limit
        assert m.counter("t.loops.hit") == limit + 1


def test_bad_udp_checksum_stays_bad(m, tw):
    ops(m, tw, OP_FORWARD, "forward", port=1)
    good = prim_frame(OP_FORWARD)
    csum = Ether(good)[UDP].chksum
    bad = prim_frame(OP_FORWARD, chksum=csum ^ 0x0101)
    (og,) = m.process(good, 2)
    m2 = trust_everything(DataplaneModel(m.pipeline, groups="bitmap"))  # same flow count (1)
    apply_writes(m2, TableWriter(m.pipeline).exact_add("prim.ops", [OP_FORWARD], "forward",
                                                        {"port": 1}))
    (ob,) = m2.process(bad, 2)
    cg, cb = Ether(og.frame)[UDP].chksum, Ether(ob.frame)[UDP].chksum
    assert_checksums_ok(og.frame)
    assert cb != cg
    # the error is carried through: in ones' complement, ~cb - ~cg == ~bad - ~good
    def diff(x, y):
        return ones_add(~x & 0xFFFF, y)
    assert diff(cb, cg) == diff(csum ^ 0x0101, csum)
    # prim with checksum 0: stays 0 although the header changes
    (oz,) = m.process(prim_frame(OP_FORWARD, chksum=0), 2)
    assert Ether(oz.frame)[UDP].chksum == 0 and prim_hdr(oz.frame)["count"] == 2


def test_udp_checksum_incremental_hand_vector(m):
    """A prim packet whose only change is count 0 -> 1 (one app word +1)."""
    # build the frame with a known checksum, then check csum_out = csum_in - 1 (ones' compl.)
    f = prim_frame(0x77)          # op 0x77: no ops entry: default path, count written
    c_in = Ether(f)[UDP].chksum
    (o,) = m.process(f, 2)
    c_out = Ether(o.frame)[UDP].chksum
    exp = ~ones_add(ones_add(~c_in & 0xFFFF, 0xFFFF), 0x0001) & 0xFFFF
    assert c_out == (exp or 0xFFFF)
    assert_checksums_ok(o.frame)


# ---- robustness ------------------------------------------------------------------------------
def test_random_frames_never_raise(m, tw):
    """Random sizes 14..9216: fully random frames, well-formed Ether/IP/UDP (a prim header or
    not) with random bytes after the UDP header, and the same with inconsistent lengths.
    Nothing raises, lengths never change, and a correct UDP checksum stays correct."""
    rng = random.Random(1234)
    apply_writes(m, route(tw, ip("10.0.0.0"), 8, 1))
    for op, act, kw in [(OP_FORWARD, "forward", {"port": 1}), (OP_MCAST, "multicast",
                        {"group": 1}), (OP_RECIRC, "recirculate", {"port": 0}),
                        (OP_CLONE, "clone", {"port": 2}), (OP_CAS, "forward", {"port": 3})]:
        ops(m, tw, op, act, **kw)
    apply_writes(m, tw.mcast_set(1, [(0, 1), (1, 2), (3, 3)]))
    apply_writes(m, tw.exact_add("prim.copy_tag", [2], "tag_copy", {"tag": 0x2222}))
    checked = 0
    for i in range(450):
        n = rng.choice([14, 15, 17, 18, 33, 34, 41, 42, 60, 64, 66, 67, 100, 1500,
                        rng.randint(14, MAX_FRAME)])
        rand = bytes(rng.getrandbits(8) for _ in range(n))
        valid_udp = False
        if i % 3 == 0:
            f = rand
        else:
            if rng.random() < 0.6:
                payload = PRIM.pack(rng.randint(0, 8), 0, rng.getrandbits(16), 0,
                                    rng.getrandbits(32), rng.getrandbits(32), 0, 0, 0, 0)
            else:
                payload = b""
            payload = (payload + rand)[:max(0, n - 42)]
            f = udp_frame(dst=f"10.{rng.randint(0, 255)}.0.1", sport=rng.getrandbits(16),
                          dport=rng.choice([PRIM_UDP_PORT, 53]), payload=payload,
                          ttl=rng.randint(0, 255), chksum=rng.choice([None, None, 0]))
            valid_udp = i % 3 == 1 and len(f) <= MAX_FRAME
            if i % 3 == 2:      # break lengths / truncate
                f = f[:rng.randint(14, len(f))] + rand[:rng.randint(0, 8)]
        outs = m.process(f, rng.randrange(4), user=rng.getrandbits(16) & ~1,
                         arrival=rng.getrandbits(32))
        for o in outs:
            assert len(o.frame) == len(f) and 0 <= o.port < 4
            if valid_udp:
                assert_checksums_ok(o.frame)
                checked += 1
    assert checked > 100
    c = m.counters()
    assert c["prim.ops.hit"] > 5 and c["l3.routes.hit"] > 5 and c["in4.pkts"] > 0
    assert sum(v for k, v in c.items() if k.startswith("parser.err.")) > 20


# ---- control plane errors --------------------------------------------------------------------
def test_control_plane_errors(m):
    with pytest.raises(KeyError, match="no memory 'l3.nope'"):
        m.mem_write("l3.nope", 0, 0)
    with pytest.raises(IndexError, match=r"prim.ops: address 64 out of range 0..63"):
        m.mem_write("prim.ops", 64, 0)
    with pytest.raises(IndexError, match="out of range"):
        m.mem_read("l3.routes.default", 1)
    with pytest.raises(ValueError, match="does not fit in 20 bits"):
        m.mem_write("prim.ops", 0, 1 << 20)
    with pytest.raises(ValueError, match="does not fit"):
        m.mem_write("prim.ops", 0, -1)
    m.mem_write("prim.ops", 0, (1 << 20) - 1)
    with pytest.raises(KeyError, match="no counter"):
        m.counter("tm.nope")
    with pytest.raises(ValueError, match="ingress port 4"):
        m.process(udp_frame(), 4)
    assert m.counter_read("tm.drop") == 0 and "tm.mcast" in m.memory_names
    assert m.register_names == ["parser.udp_port.prim", "parser.udp_port.nc",
                                "parser.udp_port.rs", "parser.udp_port.nl",
                                "parser.udp_port.xi", "parser.udp_port.nice"]
    m.process(udp_frame(), 0)
    assert m.counter_read("in0.pkts") == 1
    m.counter_clear("in0.pkts")
    assert m.counter("in0.pkts") == 0 and m.counter("in0.bytes") > 0
    mems = m.memories()
    assert mems["tm.mcast"] == (4096, 4 + 4 * 16)
    assert mems["prim.flows"] == (1024, 32) and mems["l3.routes"] == (64, 1 + 64 + 2 + 100)
    names = set(m.counters())
    for k in range(5):
        assert {f"in{k}.pkts", f"in{k}.bytes", f"in{k}.drop_runt", f"in{k}.drop_oversize",
                f"in{k}.drop_error"} <= names
    assert {f"parser.err.{n}" for n in PARSE_ERRORS.values()} <= names
    assert {"tm.drop", "tm.mcast_empty", "tm.bad_port", "tm.recirc_limit", "out3.bytes",
            "prim.flow_count.index_oob", "prim.cas.index_oob", "prim.copy_tag.hit",
            "l3.routes.miss"} <= names


# ---- exact tables: the per-way H3 slot (spec "Entry encodings") ------------------------------
def _splitmix64(x):
    m64 = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & m64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
    return z ^ (z >> 31)


def _h3_spec(key, way, kw, sbits):
    """The spec's slot, written from its text: bit j = parity(key & M(way, j)), chunk c of
    M(way, j) = splitmix64(c * 2**32 + way * 2**16 + j), its low sbits bits replaced by
    bit j."""
    out = 0
    for j in range(sbits):
        mk = 0
        for c in range((kw + 63) // 64):
            mk |= _splitmix64(c * 2**32 + way * 2**16 + j) << (64 * c)
        mk = mk - mk % 2**sbits + 2**j
        out |= (bin(key & mk % 2**kw).count("1") & 1) << j
    return out


@pytest.mark.parametrize("widths", [(12, 6), (40, 40, 8)])
def test_exact_table_probes_each_way_at_its_h3_slot(widths):
    """Entries written by hand (no driver) at the spec's address of their key in some way hit;
    the same word one slot off, or in the right slot of another way, misses; 88-bit keys use
    the second 64-bit chunk of the masks."""
    p = Program("x")
    parts = [p.meta(f"k{i}", w) for i, w in enumerate(widths)]
    out = p.meta("out", 16)
    fwd = Action("fwd", {"v": 16}, lambda a: [Set(out, a.v)])
    t = p.add(Table("t", kind="exact", key=parts, actions=[fwd], size=64, ways=4))
    pl = Pipeline([p])
    kw, depth, ab = t.key_width, t.depth, t.action_bits
    m = DataplaneModel(pl)
    rng = random.Random(len(widths))

    def look(key):
        phv = m.parse(bytes(64), 0)
        vals, sh = [], 0
        for w in widths:
            vals.append((key >> sh) & ((1 << w) - 1))
            sh += w
        m.assign(phv, [(f.name, v) for f, v in zip(parts, vals)])
        m._run([t], phv)
        return m.view(phv, out.name)

    placed = {}
    for i in range(24):
        key, way = rng.getrandbits(kw), i % 4
        addr = way * depth + _h3_spec(key, way, kw, 4)
        if addr in placed.values():
            continue
        m.mem_write(t.qualname, addr, 1 | key << 1 | 1 << (1 + kw) | (i + 1) << (1 + kw + ab))
        placed[(key, i + 1)] = addr
    assert len(placed) > 12
    for (key, v), addr in placed.items():
        assert look(key) == v
        assert t.way_index(key, addr // depth) == addr % depth
    # misplaced words: one slot off, or the slot another way gives the key
    key = rng.getrandbits(kw)
    s0, s1 = _h3_spec(key, 0, kw, 4), _h3_spec(key, 1, kw, 4)
    m = DataplaneModel(pl)          # an empty table (look() reads this one)
    word = 1 | key << 1 | 1 << (1 + kw) | 0x77 << (1 + kw + ab)
    m.mem_write(t.qualname, (s0 + 1) % depth, word)
    m.mem_write(t.qualname, 2 * depth + s1, word if s1 != _h3_spec(key, 2, kw, 4) else 0)
    assert look(key) == 0
    m.mem_write(t.qualname, depth + s1, word)
    assert look(key) == 0x77
