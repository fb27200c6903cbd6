"""Table entry encoders: bit layouts (hand-computed), slot choice, LPM ordering, validation."""

import crcmod.predefined
import pytest

from netstor.programs import default_pipeline
from netstor.driver.tables import TableWriter, TableFullError, apply_writes, apply_writes_async

crc32 = crcmod.predefined.mkCrcFun("crc-32")


@pytest.fixture
def tw():
    return TableWriter(default_pipeline())


def ops_slot(way, key):
    # prim.ops: 4 ways x 16, 8-bit key; slot = CRC-32(seed byte, key byte) mod 16
    return way * 16 + crc32(bytes([way, key])) % 16


# ---- bit layouts -----------------------------------------------------------------------------
def test_exact_word_layout(tw):
    # prim.ops: kw = 8, 4 actions -> ab = 3, pw = 8 (largest action: one 8-bit group)
    (w,) = tw.exact_add("prim.ops", [4], "multicast", {"group": 3})
    assert w == ("prim.ops", ops_slot(0, 4), 1 | 4 << 1 | 2 << 9 | 3 << 12)
    (w,) = tw.exact_add("prim.ops", [1], "forward", {"port": 9})
    assert w[2] == 1 | 1 << 1 | 1 << 9 | 9 << 12
    # prim.copy_tag: 2 ways x 8, key meta.rid (16), ab = 1, pw = 16
    (w,) = tw.exact_add("prim.copy_tag", [0x1234], "tag_copy", {"tag": 0xBEEF})
    assert w[1] == crc32(b"\0\x12\x34") % 8
    assert w[2] == 1 | 0x1234 << 1 | 1 << 17 | 0xBEEF << 18


def test_ternary_and_lpm_word_layout(tw):
    # prim.acl: key (ipv4.src 32, udp.sport 16): kw = 48, ab = 2, pw = 1
    (w,) = tw.ternary_add("prim.acl", [0x0A000001, 80], [0xFFFFFFFF, 0], "deny", priority=7)
    value = 0x0A000001 | 80 << 32
    mask = 0xFFFFFFFF
    assert w == ("prim.acl", 7, 1 | value << 1 | mask << 49 | 1 << 97)
    # l3.routes: kw = 32, ab = 2, params port(4) dmac(48) smac(48)
    (w,) = tw.lpm_add("l3.routes", 0xC0A80000, 16, "route",
                      {"port": 2, "dmac": 0x112233445566, "smac": 0xAABBCCDDEEFF})
    params = 2 | 0x112233445566 << 4 | 0xAABBCCDDEEFF << 52
    assert w == ("l3.routes", 0, 1 | 0xC0A80000 << 1 | 0xFFFF0000 << 33 | 1 << 65
                 | params << 67)


def test_default_mcast_bank_words(tw):
    assert tw.set_default("l3.routes", "drop") == [("l3.routes.default", 0, 3)]
    assert tw.set_default("l3.routes", "route", {"port": 1, "dmac": 2, "smac": 3}) == \
        [("l3.routes.default", 0, 1 | (1 | 2 << 4 | 3 << 52) << 2)]
    assert tw.set_default("prim.ops", None) == [("prim.ops.default", 0, 0)]
    # tm.mcast with P = 2: ports(4) | rid[0] | rid[1] | rid[2] | rid[3]
    assert tw.mcast_set(5, [(3, 0xABCD), (1, 7)]) == \
        [("tm.mcast", 5, 0b1010 | 7 << (4 + 16) | 0xABCD << (4 + 48))]
    assert tw.mcast_set(15, []) == [("tm.mcast", 15, 0)]
    assert tw.bank_write("prim.cells", 255, 0xFFFFFFFF) == [("prim.cells", 255, 0xFFFFFFFF)]


# ---- exact tables ----------------------------------------------------------------------------
def test_exact_ways_full_update_delete(tw):
    placed = {}
    for key in range(256):
        slots = [ops_slot(w, key) for w in range(4)]
        free = [s for s in slots if s not in placed.values()]
        assert tw.exact_slots("prim.ops", [key]) == slots
        if not free:
            with pytest.raises(TableFullError, match=rf"prim.ops is full.*\[{key}\]") as ei:
                tw.exact_add("prim.ops", [key], "forward", {"port": 0})
            assert ei.value.table == "prim.ops" and ei.value.key == [key]
            break
        (w,) = tw.exact_add("prim.ops", [key], "forward", {"port": 0})
        assert w[1] == free[0]
        placed[key] = w[1]
    else:
        pytest.fail("64 slots never filled with 256 keys")
    # an update rewrites the key's slot even when the table is full
    k = next(iter(placed))
    (w,) = tw.exact_add("prim.ops", [k], "clone", {"port": 3})
    assert w[1] == placed[k] and tw.decode_entry("prim.ops", w[2])["action"] == "clone"
    assert tw.exact_delete("prim.ops", [k]) == [("prim.ops", placed[k], 0)]
    with pytest.raises(KeyError, match=r"prim.ops: no entry with key \[%d\]" % k):
        tw.exact_delete("prim.ops", [k])
    # its slot is free again for a key that wants it
    (w,) = tw.exact_add("prim.ops", [k], "forward", {"port": 1})
    assert w[1] in tw.exact_slots("prim.ops", [k])


# ---- LPM ---------------------------------------------------------------------------------------
def route(port):
    return {"port": port, "dmac": 0, "smac": 0}


def snapshot(tw, mem, writes):
    for name, addr, word in writes:
        assert name == "l3.routes"
        mem[addr] = word
    return [(d["prefix"], d["prefix_len"], d["params"]["port"])
            for d in (tw.decode_entry("l3.routes", mem.get(a, 0)) for a in range(64))
            if d["valid"]]


def test_lpm_sorted_insert_update_delete(tw):
    mem = {}
    assert snapshot(tw, mem, tw.lpm_add("l3.routes", 0x0A000000, 8, "route", route(1))) == \
        [(0x0A000000, 8, 1)]
    w = tw.lpm_add("l3.routes", 0, 0, "route", route(2))
    assert [a for _, a, _ in w] == [1]
    snapshot(tw, mem, w)
    # a /24 goes first: the two entries shift down, written last-first, then the new one
    w = tw.lpm_add("l3.routes", 0x0A010200, 24, "route", route(3))
    assert [a for _, a, _ in w] == [2, 1, 0]
    assert snapshot(tw, mem, w) == [(0x0A010200, 24, 3), (0x0A000000, 8, 1), (0, 0, 2)]
    w = tw.lpm_add("l3.routes", 0x0A010000, 16, "route", route(4))
    assert [a for _, a, _ in w] == [3, 2, 1]
    assert snapshot(tw, mem, w) == [(0x0A010200, 24, 3), (0x0A010000, 16, 4),
                                    (0x0A000000, 8, 1), (0, 0, 2)]
    # update in place: one write
    w = tw.lpm_add("l3.routes", 0x0A010000, 16, "drop")
    assert len(w) == 1 and w[0][1] == 1
    assert tw.decode_entry("l3.routes", w[0][2])["action"] == "drop"
    snapshot(tw, mem, tw.lpm_add("l3.routes", 0x0A010000, 16, "route", route(4)))
    # delete: the tail shifts up, the last address is cleared
    w = tw.lpm_delete("l3.routes", 0x0A000000, 8)
    assert [a for _, a, _ in w] == [2, 3] and w[-1][2] == 0
    assert snapshot(tw, mem, w) == [(0x0A010200, 24, 3), (0x0A010000, 16, 4), (0, 0, 2)]
    assert tw.lpm_entries("l3.routes")[1] == (0x0A010000, 16, "route", route(4))
    with pytest.raises(KeyError, match=r"no route 0xa000000/8"):
        tw.lpm_delete("l3.routes", 0x0A000000, 8)


def test_lpm_full(tw):
    for i in range(64):
        tw.lpm_add("l3.routes", i << 24, 8, "to_host")
    with pytest.raises(TableFullError, match="l3.routes is full"):
        tw.lpm_add("l3.routes", 0xFF000000, 8, "to_host")
    tw.lpm_add("l3.routes", 5 << 24, 8, "drop")     # an update still fits


def test_lpm_with_model_matches_independent_reference():
    """Random overlapping prefixes: the model's longest match equals a brute-force one."""
    import random
    from netstor.model import DataplaneModel
    from scapy.all import Ether, IP, UDP, Raw
    pl = default_pipeline()
    m, tw = DataplaneModel(pl), TableWriter(pl)
    rng = random.Random(7)
    routes = {}
    base = 0x0A000000
    while len(routes) < 40:
        plen = rng.randint(0, 32)
        pfx = (base | rng.getrandbits(24) & rng.choice([0xFF, 0xFFFF, 0xFFFFFF])) \
            & (((1 << plen) - 1) << (32 - plen))
        routes[(pfx, plen)] = rng.randrange(4)
    for (pfx, plen), port in routes.items():
        apply_writes(m, tw.lpm_add("l3.routes", pfx, plen, "route", route(port)))
    for _ in range(30):           # delete some, so shifting is exercised both ways
        (pfx, plen) = rng.choice(list(routes))
        apply_writes(m, tw.lpm_delete("l3.routes", pfx, plen))
        del routes[(pfx, plen)]
        if rng.random() < 0.5:
            routes[(pfx, plen)] = rng.randrange(4)
            apply_writes(m, tw.lpm_add("l3.routes", pfx, plen, "route",
                                       route(routes[(pfx, plen)])))
    for _ in range(300):
        dst = base | rng.getrandbits(rng.choice([8, 16, 24]))
        matches = [(plen, port) for (pfx, plen), port in routes.items()
                   if dst >> (32 - plen) << (32 - plen) == pfx]
        best = max(matches) if matches else None
        f = bytes(Ether() / IP(dst=str(dst >> 24) + "." + str(dst >> 16 & 255) + "."
                               + str(dst >> 8 & 255) + "." + str(dst & 255)) / UDP() /
                  Raw(b"r" * 8))
        (o,) = m.process(f, 1)
        assert o.port == (best[1] if best else 3)


# ---- decoding --------------------------------------------------------------------------------
def test_decode_round_trip(tw):
    (_, _, w) = tw.exact_add("prim.ops", [6], "clone", {"port": 2})[0]
    assert tw.decode_entry("prim.ops", w) == {"valid": True, "key": [6], "action_id": 4,
                                              "action": "clone", "params": {"port": 2}}
    (_, _, w) = tw.ternary_add("prim.acl", [1, 2], [3, 4], "allow", priority=0)[0]
    assert tw.decode_entry("prim.acl", w) == {"valid": True, "value": [1, 2], "mask": [3, 4],
                                              "action_id": 2, "action": "allow",
                                              "params": {}}
    (_, _, w) = tw.lpm_add("l3.routes", 0x0A800000, 9, "route", route(1))[0]
    d = tw.decode_entry("l3.routes", w)
    assert (d["prefix"], d["prefix_len"], d["mask"]) == (0x0A800000, 9, [0xFF800000])
    (_, _, w) = tw.set_default("prim.copy_tag", "tag_copy", {"tag": 9})[0]
    assert tw.decode_entry("prim.copy_tag.default", w) == {"action_id": 1,
                                                           "action": "tag_copy",
                                                           "params": {"tag": 9}}
    assert tw.decode_entry("prim.ops", 0) == {"valid": False, "key": [0], "action_id": 0,
                                              "action": None, "params": {}}
    assert tw.decode_entry("prim.ops", 1 | 7 << 9)["action"] is None    # id 7: none


# ---- validation ------------------------------------------------------------------------------
@pytest.mark.parametrize("call,exc,msg", [
    (lambda t: t.exact_add("prim.nope", [1], "forward", {"port": 1}), KeyError,
     "no table 'prim.nope'"),
    (lambda t: t.exact_add("prim.ops", [1], "fly", {}), KeyError,
     "prim.ops has no action 'fly'"),
    (lambda t: t.exact_add("prim.ops", [1], "forward", {"port": 16}), ValueError,
     "parameter port = 0x10 does not fit in 4 bits"),
    (lambda t: t.exact_add("prim.ops", [1], "forward", {"port": -1}), ValueError,
     "port = -1 is negative"),
    (lambda t: t.exact_add("prim.ops", [1], "forward", {}), ValueError,
     r"needs parameter\(s\) \['port'\]"),
    (lambda t: t.exact_add("prim.ops", [1], "forward", {"port": 1, "x": 2}), KeyError,
     r"has no parameter\(s\) \['x'\]"),
    (lambda t: t.exact_add("prim.ops", [256], "forward", {"port": 1}), ValueError,
     "key part 0 = 0x100 does not fit in 8 bits"),
    (lambda t: t.exact_add("prim.ops", [1, 2], "forward", {"port": 1}), ValueError,
     r"key has 2 part\(s\), the key has 1"),
    (lambda t: t.exact_add("prim.acl", [1, 2], "deny", {}), ValueError,
     "prim.acl is a ternary table, not exact"),
    (lambda t: t.ternary_add("prim.acl", [1, 2], [1 << 32, 0], "deny"), ValueError,
     "mask part 0 = 0x100000000 does not fit in 32 bits"),
    (lambda t: t.ternary_add("prim.acl", [1, 1 << 16], [0, 0], "deny"), ValueError,
     "value part 1 = 0x10000 does not fit in 16 bits"),
    (lambda t: t.ternary_add("prim.acl", [1, 2], [3], "deny"), ValueError,
     r"mask has 1 part\(s\)"),
    (lambda t: t.ternary_add("prim.acl", [1, 2], [3, 4], "deny", priority=16), ValueError,
     "priority 16 out of range 0..15"),
    (lambda t: t.ternary_add("l3.routes", [1], [1], "drop"), ValueError,
     "l3.routes is a lpm table, not ternary"),
    (lambda t: t.ternary_delete("prim.acl", 3), KeyError, "no entry at priority 3"),
    (lambda t: t.lpm_add("l3.routes", 0, 33, "drop"), ValueError,
     "prefix length 33 out of range 0..32"),
    (lambda t: t.lpm_add("l3.routes", 0x0A000001, 8, "drop"), ValueError,
     "prefix 0xa000001/8 has bits set beyond its length"),
    (lambda t: t.lpm_add("l3.routes", 1 << 32, 32, "drop"), ValueError, "does not fit"),
    (lambda t: t.lpm_add("l3.routes", 0, 0, "route", {"port": 1, "dmac": 1 << 48, "smac": 0}),
     ValueError, "parameter dmac"),
    (lambda t: t.set_default("l3.routes", None, {"port": 1}), ValueError,
     "'no action' takes no parameters"),
    (lambda t: t.mcast_set(0, []), ValueError, "multicast group 0 out of range 1..15"),
    (lambda t: t.mcast_set(16, []), ValueError, "multicast group 16 out of range"),
    (lambda t: t.mcast_set(1, [(4, 0)]), ValueError, "port 4 out of range 0..3"),
    (lambda t: t.mcast_set(1, [(1, 0), (1, 2)]), ValueError, "port 1 listed twice"),
    (lambda t: t.mcast_set(1, [(1, 1 << 16)]), ValueError, "rid of port 1 = 0x10000"),
    (lambda t: t.mcast_set(1, [3]), TypeError, r"\(port, rid\) pairs"),
    (lambda t: t.bank_write("prim.nope", 0, 0), KeyError, "no register bank 'prim.nope'"),
    (lambda t: t.bank_write("prim.cells", 256, 0), ValueError, "index 256 out of range"),
    (lambda t: t.bank_write("prim.cells", 0, 1 << 32), ValueError, "does not fit in 32 bits"),
])
def test_validation(tw, call, exc, msg):
    with pytest.raises(exc, match=msg):
        call(tw)


def test_apply_writes_sync_and_async(tw):
    import asyncio

    class Fake:
        def __init__(self):
            self.log = []

        def mem_write(self, name, addr, word):
            self.log.append((name, addr, word))

    class AsyncFake(Fake):
        async def mem_write(self, name, addr, word):
            self.log.append((name, addr, word))

    writes = tw.lpm_add("l3.routes", 0, 0, "drop") + tw.mcast_set(1, [(0, 5)])
    f, af = Fake(), AsyncFake()
    apply_writes(f, writes)
    asyncio.run(apply_writes_async(af, writes))
    assert f.log == af.log == writes
