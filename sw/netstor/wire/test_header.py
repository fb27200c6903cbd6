"""Headers declared once (netstor.wire.header) and the one Internet checksum
(netstor.wire.checksum), against hand-made bytes and independent references."""
from __future__ import annotations

import struct

import pytest

from netstor.wire.checksum import checksum, ones_sum
from netstor.wire.header import Header


def test_pack_by_fields_or_values_and_unpack_to_named_tuple():
    h = Header("demo", [("op", 8), ("mark", 24), ("group", 16), ("seq", 32)])
    assert h.size == 10 and h.struct is None             # 24 bits: no plain struct
    want = bytes.fromhex("02 0a0b0c 0102 deadbeef")
    assert h.pack(op=2, mark=0x0A0B0C, group=0x102, seq=0xDEADBEEF) == want
    assert h.pack((2, 0x0A0B0C, 0x102, 0xDEADBEEF)) == want
    assert h.pack(op=1) == bytes.fromhex("01 000000 0000 00000000")
    t = h.unpack(want + b"rest")
    assert t == (2, 0x0A0B0C, 0x102, 0xDEADBEEF) and t.mark == 0x0A0B0C and t.seq == 0xDEADBEEF
    with pytest.raises(ValueError, match="9 bytes: shorter than the 10-byte demo header"):
        h.unpack(want[:9])
    with pytest.raises(ValueError, match="group=65536 does not fit in 16 bits"):
        h.pack(group=0x10000)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['grp'\]"):
        h.pack(grp=1)
    with pytest.raises(ValueError, match="not whole bytes"):
        Header("bad", [("x", 12)])


def test_variants_selected_by_a_field():
    h = Header("kv", [("kind", 8), ("id", 16)], selector="kind",
               variants=[(1, "ask", [("key", 32)]), (2, "answer", [("value", 16), ("ok", 8)]),
                         (3, "ask again", [("key", 32)])])
    assert h.size == 3 and h.layout(1) is h.layout(3) and h.layout(1).size == 7
    assert h.pack(kind=1, id=5, key=0x01020304) == bytes.fromhex("01 0005 01020304")
    ans = h.unpack(bytes.fromhex("02 0007 abcd 01"))
    assert ans._fields == ("kind", "id", "value", "ok") and (ans.value, ans.ok) == (0xABCD, 1)
    assert h.unpack(bytes.fromhex("03 0001 00000009")).key == 9
    with pytest.raises(ValueError, match="no layout for kind = 0x9"):
        h.unpack(bytes.fromhex("09 0000 00"))
    with pytest.raises(ValueError, match="shorter than the 6-byte kv answer header"):
        h.unpack(bytes.fromhex("02 0007 ab"))


def test_storage_header_is_the_declared_one():
    from netstor import proto
    raw = proto.Header(op=proto.Op.PUT, key=7, req_id=9, seq=3, value=b"xy").pack()
    t = proto.STORAGE.unpack(raw)
    assert (t.magic, t.ver, t.op, t.key, t.req_id, t.seq, t.value_len) == \
        (proto.MAGIC, proto.VERSION, proto.Op.PUT, 7, 9, 3, 2)
    assert proto.STORAGE.fields == tuple(proto.FIELDS) and proto.STORAGE.size == 32


def test_netrs_layouts_come_from_one_declaration():
    from netstor.offloads.netrs import header as rs
    req = rs.RsRequest(rgid=0x0102, avail=5).pack()
    assert req == bytes.fromhex("0000 4e5253524551 00000000 0102 05")
    assert rs.HEADER.unpack(req)._fields == tuple(n for n, _ in rs.REQ_FIELDS)
    resp = rs.RsResponse(rid=3, mf=rs.M_MON, rv=1, ss_sid=2, ss_q=4, ss_t=16)
    assert rs.HEADER.unpack(resp.pack()) == tuple(resp)
    assert rs.HEADER.pack(**resp._asdict()) == resp.pack()


def test_checksum_rfc1071_vector_and_ipv4_reference():
    # RFC 1071 section 3 example: the sum of 0001 f203 f4f5 f6f7 is ddf2
    assert ones_sum(bytes.fromhex("0001f203f4f5f6f7")) == 0xDDF2
    assert checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    assert ones_sum(b"\x01") == 0x0100                     # odd length: zero padded
    from netstor.model.dataplane import ipv4_header_checksum     # the model's own copy
    hdr = bytes.fromhex("4500 0073 0000 4000 4011 0000 c0a8 0001 c0a8 00c7")
    assert checksum(hdr) == ipv4_header_checksum(hdr) == 0xB861
    filled = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
    assert ones_sum(filled) == 0xFFFF
