"""scapy layers vs the independent encoders: netstor.proto.Header and hand-computed bytes."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Padding, Raw, raw

from netstor import proto
from netstor.programs import primitives
from netstor.wire import HEADERS, make_spec, register
from netstor.wire.dissector import generate
from netstor.wire.layers import LAYERS, Netstor, NetstorPrim, make_layer

# field name in proto.FIELDS -> proto.Header attribute (magic/ver/value_len are derived)
_HEADER_ATTRS = [n for n, _ in proto.FIELDS if n not in ("magic", "ver", "value_len")]


def random_header(rng, op=None, status=None):
    w = dict(proto.FIELDS)
    kw = {n: rng.getrandbits(w[n]) for n in _HEADER_ATTRS}
    kw["op"] = op if op is not None else rng.choice(list(proto.Op.NAMES)) | rng.choice(
        [0, proto.REPLY])
    kw["status"] = status if status is not None else rng.choice(list(proto.Status.NAMES))
    value = rng.randbytes(rng.choice([0, 1, 7, 100, proto.MAX_VALUE]))
    return proto.Header(value=value, **kw)


def test_registry_has_the_builtin_headers():
    assert HEADERS["netstor"].fields == tuple(proto.FIELDS)
    assert HEADERS["netstor"].udp_port == proto.STORAGE_UDP_PORT
    prim = primitives.make_primitives()
    assert HEADERS["netstor_prim"].fields == tuple(prim.header_fields)
    assert HEADERS["netstor_prim"].udp_port == primitives.PRIM_UDP_PORT == 0x5EED
    assert HEADERS["netstor_prim"].enums["op"][primitives.OP_CAS] == "CAS"
    assert LAYERS["netstor"] is Netstor and LAYERS["netstor_prim"] is NetstorPrim
    assert len(Netstor()) == proto.HEADER_LEN and len(NetstorPrim()) == prim.header_bytes


def test_scapy_build_matches_proto_unpack():
    rng = random.Random(7430)
    for _ in range(200):
        h = random_header(rng)
        fields = {n: getattr(h, n) for n in _HEADER_ATTRS}
        data = raw(Netstor(**fields) / h.value)            # value_len computed on build
        assert data == h.pack()
        back = proto.Header.unpack(data)
        for n in _HEADER_ATTRS:
            assert getattr(back, n) == fields[n], n
        assert back.value == h.value


def test_proto_pack_dissects_in_scapy():
    rng = random.Random(1)
    for _ in range(200):
        h = random_header(rng)
        for sport, dport in ((40000, proto.STORAGE_UDP_PORT), (proto.STORAGE_UDP_PORT, 40001)):
            pkt = Ether(raw(Ether() / IP() / UDP(sport=sport, dport=dport) / h.pack()))
            s = pkt[Netstor]
            assert s.magic == proto.MAGIC and s.ver == proto.VERSION
            for n in _HEADER_ATTRS:
                assert getattr(s, n) == getattr(h, n), n
            assert s.value_len == len(h.value)
            assert (raw(s.payload) if h.value else b"") == h.value


def test_value_len_bounds_the_payload_and_explicit_value_len_is_kept():
    pkt = Netstor(raw(Netstor(op=1, value_len=3) / b"abc" / Padding(b"xyz")))
    assert pkt[Raw].load == b"abc" and pkt[Padding].load == b"xyz"
    assert raw(Netstor(op=1, value_len=9) / b"a")[14:16] == b"\x00\x09"


def test_binding_sets_the_destination_port_and_names_enums():
    u = UDP(raw(UDP(sport=1234) / Netstor(op=proto.Op.GET | proto.REPLY,
                                          status=proto.Status.BUSY)))
    assert u.dport == proto.STORAGE_UDP_PORT
    assert u[Netstor].sprintf("%op% %status%") == "GET reply BUSY"
    assert UDP(raw(UDP(sport=5) / NetstorPrim())).dport == 0x5EED


def test_prim_layer_matches_hand_computed_bytes():
    pkt = NetstorPrim(op=primitives.OP_CAS, flags=0xA5, tag=0x1234, count=0x01020304,
                      value=0xDEADBEEF, expect=0xCAFEF00D, result=0x0BADC0DE, hops=2, pad=0,
                      bridge_lo=0x0B0B)
    want = bytes.fromhex("02 a5 1234 01020304 deadbeef cafef00d 0badc0de 02 00 0b0b")
    assert raw(pkt) == want
    back = UDP(raw(UDP(sport=50000, dport=0x5EED) / want / b"tail"))
    assert back[NetstorPrim].fields == pkt.fields and back[Raw].load == b"tail"


def test_bit_packed_header_spec():
    spec = make_spec("netstor_bits", 9999, [("a", 4), ("b", 12), ("c", 1), ("d", 7),
                                            ("e", 8)], enums={"a": {3: "THREE"}})
    cls = make_layer(spec, bind=False)
    assert raw(cls(a=3, b=0xABC, c=1, d=0x55, e=0x7F)) == bytes([0x3A, 0xBC, 0xD5, 0x7F])
    lua = generate([spec])
    assert 'ProtoField.uint8("netstor_bits.a", "a", base.DEC, vs.a, 0xf0)' in lua
    assert 'ProtoField.uint16("netstor_bits.b", "b", base.DEC, nil, 0xfff)' in lua
    assert 'ProtoField.uint8("netstor_bits.d", "d", base.DEC, nil, 0x7f)' in lua


@pytest.mark.parametrize("args, kw, msg", [
    (("netstor", 1, [("a", 8)]), {}, "registered twice"),
    (("other", proto.STORAGE_UDP_PORT, [("a", 8)]), {}, "already used"),
    (("x", 1, [("a", 12)]), {}, "whole number of bytes"),
    (("x", 1, [("a", 4), ("b", 36), ("c", 8)]), {}, "spans more than 4 bytes"),
    (("x", 1, [("a", 8), ("a", 8)]), {}, "duplicate"),
    (("x", 1, [("a", 8)]), {"length_field": "b"}, "unknown field"),
    (("x", 1, [("data", 8)]), {}, "clashes"),
    (("X", 1, [("a", 8)]), {}, "lower-case"),
])
def test_register_rejects_bad_specs(args, kw, msg):
    before = dict(HEADERS)
    with pytest.raises(ValueError, match=msg):
        register(*args, **kw)
    assert HEADERS == before


def test_netrs_layer_layout_follows_the_magic():
    """Request and response layouts against hand-computed bytes and the agents' encoder
    (netstor.offloads.netrs.header); the storage message behind it is the Netstor layer."""
    from netstor.offloads.netrs import header as rs
    from netstor.wire.layers import NetstorNetrs
    req = NetstorNetrs(rgid=0x0102, avail=5)
    assert raw(req) == bytes.fromhex("0000 4e5253524551 00000000 0102 05")
    assert raw(req) == rs.RsRequest(rgid=0x0102, avail=5).pack()
    resp = NetstorNetrs(rid=3, mf=rs.M_MON, rv=0x12345678, sm=0x10002, ssl=8, ss_sid=7,
                        ss_q=9, ss_t=0x0042AAFF)
    want = bytes.fromhex("0003 4e52534d4f4e 12345678 00010002 0008 0007 0009 0042aaff")
    assert raw(resp) == want == rs.RsResponse(3, rs.M_MON, 0x12345678, 0x10002, 8, 7, 9,
                                              0x0042AAFF).pack()
    assert resp.summary().endswith("monitored response")
    inner = proto.Header(op=proto.Op.GET, key=5, req_id=6).pack()
    for head, n in ((want, 26), (raw(NetstorNetrs(mf=rs.f(rs.M_DRS), rgid=1)), 15)):
        u = UDP(raw(UDP(sport=rs.NETRS_UDP_PORT, dport=rs.NETRS_UDP_PORT) / head / inner))
        assert len(u[NetstorNetrs]) - len(u[Netstor]) == n
        assert u[Netstor].key == 5 and u[Netstor].req_id == 6
    # an unknown magic keeps only the common part
    odd = NetstorNetrs(raw(NetstorNetrs(mf=1)) + b"abc")
    assert len(raw(NetstorNetrs(mf=1))) == 12 and odd.rgid is None and odd.sm is None
    assert raw(odd.payload) == b"abc"


def test_variant_specs_are_checked():
    with pytest.raises(ValueError, match="selector"):
        make_spec("x", 1, [("a", 8)], variants=[(1, "one", [("b", 8)])])
    with pytest.raises(ValueError, match="repeats"):
        make_spec("x", 1, [("a", 8)], selector="a", variants=[(1, "one", [("a", 8)])])
    with pytest.raises(ValueError, match="twice"):
        make_spec("x", 1, [("a", 8)], selector="a",
                  variants=[(1, "one", [("b", 8)]), (1, "uno", [("c", 8)])])
