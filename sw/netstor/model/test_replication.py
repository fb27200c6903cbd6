"""Replication engine semantics (copy lists) and truncation, against hand-computed vectors and
scapy (an independent builder of the expected header-only packets)."""

import pytest
from scapy.all import Ether, Dot1Q, IP, UDP, Raw, IPOption

from netstor.driver.tables import TableWriter, apply_writes
from netstor.lang import APP_BYTES
from netstor.model import DataplaneModel
from netstor.model.replication import (GROUP_BITS, encode_group, decode_group, group_copies,
                                       truncate_frame)
from netstor.model.test_model import prim_frame, prim_hdr, trust_everything, ops, udp_frame
from netstor.programs import default_pipeline
from netstor.programs.primitives import OP_MCAST, PRIM_UDP_PORT


def test_group_word_hand_vector():
    # n=3 in bits 0..4; copy i = port | rid << 4 at bit 5 + 20 i:
    # (1, 7) -> 0x71 << 5 = 0xE20; (1, 8) -> 0x81 << 25 = 0x102000000;
    # (0, 9) -> 0x90 << 45 = 0x12000000000000
    word = 0x12000000000000 + 0x102000000 + 0xE20 + 3
    assert encode_group([(1, 7), (1, 8), (0, 9)]) == word
    assert decode_group(word) == [(1, 7), (1, 8), (0, 9)]
    assert GROUP_BITS == 5 + 16 * 20 == 325
    # 16 copies, all on port 2, rid = 100 + i; the last copy sits at bits 305..324
    full = encode_group([(2, 100 + i) for i in range(16)])
    assert full >> 305 == 2 | 115 << 4 and full & 31 == 16
    # a count above 16 counts as 16; copies beyond the count are ignored
    assert decode_group(full | 31) == decode_group(full)
    assert decode_group(encode_group([(1, 5)]) | (3 | 9 << 4) << 25) == [(1, 5)]
    assert group_copies(encode_group([(5, 1), (0, 2), (15, 3)]), 4) == ([(0, 2)], 2)
    with pytest.raises(ValueError):
        encode_group([(0, 0)] * 17)
    with pytest.raises(ValueError):
        encode_group([(16, 0)])


@pytest.fixture
def lm():
    return trust_everything(DataplaneModel(default_pipeline(), groups="list"))


def test_list_multicast_copies_in_order_same_port(lm):
    m, tw = lm, TableWriter(lm.pipeline)
    assert "tm.groups" in m.memory_names and "tm.mcast" not in m.memory_names
    ops(m, tw, OP_MCAST, "multicast", group=3)
    apply_writes(m, tw.exact_add("prim.copy_tag", [10], "tag_copy", {"tag": 0xAAAA}))
    apply_writes(m, tw.exact_add("prim.copy_tag", [11], "tag_copy", {"tag": 0xBBBB}))
    # three replicas behind port 1, one on port 0, one on port 3, rid 12 has no tag entry
    m.mem_write("tm.groups", 3, encode_group([(1, 10), (1, 11), (0, 12), (3, 10), (1, 12)]))
    f = prim_frame(OP_MCAST, tag=0x1111)
    outs = m.process(f, 0)
    assert [o.port for o in outs] == [1, 1, 0, 3, 1]
    assert [prim_hdr(o.frame)["tag"] for o in outs] == [0xAAAA, 0xBBBB, 0x1111, 0xAAAA, 0x1111]
    assert m.counter("out1.pkts") == 3 and m.counter("out0.pkts") == 1
    assert m.counter("prim.copy_tag.hit") == 3 and m.counter("prim.copy_tag.miss") == 2
    # 16 copies on one port, written by the driver's encoder
    apply_writes(m, tw.mcast_list_set(3, [(2, 11)] * 16))
    assert m.mem_read("tm.groups", 3) == encode_group([(2, 11)] * 16)
    outs = m.process(f, 0)
    assert len(outs) == 16 and {o.port for o in outs} == {2}
    assert all(prim_hdr(o.frame)["tag"] == 0xBBBB for o in outs)
    # a copy to a port that is not an output is not made, and counted
    m.mem_write("tm.groups", 3, encode_group([(7, 10), (0, 11)]))
    assert [o.port for o in m.process(f, 0)] == [0]
    assert m.counter("tm.bad_port") == 1 and m.counter("tm.mcast_empty") == 0
    # empty and unknown groups
    m.mem_write("tm.groups", 3, 0)
    assert m.process(f, 0) == [] and m.counter("tm.mcast_empty") == 1
    ops(m, tw, OP_MCAST, "multicast", group=200)
    assert m.process(f, 0) == [] and m.counter("tm.mcast_empty") == 2


def _phv(frame):
    return trust_everything(DataplaneModel(default_pipeline())).parse(frame, 0)


APP = bytes(range(APP_BYTES))


def test_truncate_prim_packet_scapy():
    payload = APP + bytes(200)
    f = bytes(Ether(dst="02:00:00:00:00:99", src="02:00:00:00:00:98")
              / IP(src="192.0.2.1", dst="10.1.2.3", ttl=64, id=0x1234)
              / UDP(sport=7000, dport=PRIM_UDP_PORT) / Raw(payload))
    phv = _phv(f)
    assert phv["meta.hdr_type"] != 0
    out = truncate_frame(f, phv)
    # headers end at 14 + 20 + 8 + 42 = 84: IPv4 total length 70, UDP length 50 (by hand)
    assert APP_BYTES == 42 and len(out) == 84
    assert out[16:18] == (70).to_bytes(2, "big") and out[38:40] == (50).to_bytes(2, "big")
    ref = bytes(Ether(dst="02:00:00:00:00:99", src="02:00:00:00:00:98")
                / IP(src="192.0.2.1", dst="10.1.2.3", ttl=64, id=0x1234)
                / UDP(sport=7000, dport=PRIM_UDP_PORT) / Raw(APP))
    assert out == ref


def test_truncate_vlan_options_plain_udp_and_zero_checksum():
    opts = [IPOption(b"\x94\x04\x00\x00")]          # router alert: IHL 6
    kw = dict(src="192.0.2.7", dst="10.9.8.7", ttl=9, id=7, options=opts)
    f = bytes(Ether() / Dot1Q(vlan=5) / IP(**kw) / UDP(sport=1, dport=2) / Raw(b"z" * 100))
    out = truncate_frame(f, _phv(f))
    # not a program's packet: the UDP header is the last header; 18 + 24 + 8 = 50 bytes
    assert len(out) == 50
    assert out == bytes(Ether() / Dot1Q(vlan=5) / IP(**kw) / UDP(sport=1, dport=2))
    f0 = bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=1, dport=2, chksum=0)
               / Raw(b"q" * 64))
    out0 = truncate_frame(f0, _phv(f0))
    assert len(out0) == 42 and out0[40:42] == b"\0\0"        # checksum 0 stays 0
    assert out0[:40] == bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8")
                              / UDP(sport=1, dport=2, chksum=0))[:40]


def test_truncate_leaves_short_and_non_ip_frames():
    # a prim packet with its 24-byte header only ends (at 66) before the header end (74):
    # nothing to cut, Ethernet padding after the IPv4 packet kept
    f = prim_frame(OP_MCAST, extra=b"") + bytes(14)
    assert _phv(f)["meta.hdr_type"] != 0 and truncate_frame(f, _phv(f)) == f
    # a plain UDP packet: 4 payload bytes cut (header end 42), padding cut with them
    g = udp_frame(payload=b"abcd") + bytes(14)
    assert truncate_frame(g, _phv(g)) == udp_frame(payload=b"")
    arp = bytes(Ether(type=0x0806) / Raw(bytes(46)))
    assert truncate_frame(arp, _phv(arp)) == arp


def test_driver_list_encoder_checks():
    tw = TableWriter(default_pipeline())
    assert tw.mcast_list_set(5, [(1, 7), (1, 8), (0, 9)]) == [
        ("tm.groups", 5, 0x12000000000000 + 0x102000000 + 0xE20 + 3)]
    assert tw.mcast_list_set(5, []) == [("tm.groups", 5, 0)]
    for bad in ([(0, 1)] * 17, [(4, 1)], [(0, 1 << 16)], [(-1, 0)]):
        with pytest.raises(ValueError):
            tw.mcast_list_set(5, bad)
    with pytest.raises(ValueError):
        tw.mcast_list_set(0, [(0, 1)])
    with pytest.raises(TypeError):
        tw.mcast_list_set(5, [3])
