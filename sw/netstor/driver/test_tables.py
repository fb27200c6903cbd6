"""Table entry encoders: bit layouts (hand-computed), slot choice, LPM ordering, validation."""

import random

import crcmod.predefined
import pytest

from netstor.programs import default_pipeline
from netstor.driver.tables import TableWriter, TableFullError, apply_writes, apply_writes_async

crc32 = crcmod.predefined.mkCrcFun("crc-32")


@pytest.fixture
def tw():
    return TableWriter(default_pipeline())


def splitmix64_ref(x):
    """SplitMix64's output for state ``x`` (Steele, Lea, Flood 2014), written out here."""
    m = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_splitmix64_ref_known_outputs():
    # the generator seeded with 0: first two outputs as published
    assert splitmix64_ref(0) == 0xE220A8397B1DCDAF
    assert splitmix64_ref(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4


def h3_ref(key, way, kw, sbits):
    """The spec's exact-table slot: bit j = parity(key & M(way, j)); M's 64-bit chunk c is
    splitmix64(c * 2**32 + way * 2**16 + j), then its low sbits bits are replaced by bit j."""
    s = 0
    for j in range(sbits):
        mk = sum(splitmix64_ref(c << 32 | way << 16 | j) << 64 * c for c in range((kw + 63) // 64))
        mk = (mk >> sbits << sbits) | (1 << j)
        s |= (bin(key & mk & ((1 << kw) - 1)).count("1") % 2) << j
    return s


def ops_slot(way, key):
    # prim.ops: 4 ways x 16, 8-bit key
    return way * 16 + h3_ref(key, way, 8, 4)


def old_crc_slot(way, key, kw, depth):
    """The exact tables' hash before the H3 change: CRC-32(way byte, key big-endian) mod depth."""
    return crc32(bytes([way]) + key.to_bytes((kw + 7) // 8, "big")) % depth


# ---- bit layouts -----------------------------------------------------------------------------
def test_exact_word_layout(tw):
    # prim.ops: kw = 8, 4 actions -> ab = 3, pw = 8 (largest action: one 8-bit group)
    (w,) = tw.exact_add("prim.ops", [4], "multicast", {"group": 3})
    assert w == ("prim.ops", ops_slot(0, 4), 1 | 4 << 1 | 2 << 9 | 3 << 12)
    (w,) = tw.exact_add("prim.ops", [1], "forward", {"port": 9})
    assert w[2] == 1 | 1 << 1 | 1 << 9 | 9 << 12
    # prim.copy_tag: 2 ways x 8, key meta.rid (16), ab = 1, pw = 16
    (w,) = tw.exact_add("prim.copy_tag", [0x1234], "tag_copy", {"tag": 0xBEEF})
    assert w[1] == h3_ref(0x1234, 0, 16, 3)
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
def _chain_exists(at, slots_of, key, moves):
    """Is there a chain of at most ``moves`` key moves that frees one of ``key``'s slots?
    (depth-first over simple paths: the reference for the driver's breadth-first search)"""
    def dfs(addr, depth, seen):
        if addr not in at:
            return True
        if depth == moves:
            return False
        return any(dfs(a2, depth + 1, seen | {a2})
                   for a2 in slots_of(at[addr]) if a2 != addr and a2 not in seen)
    return any(dfs(a, 0, {a}) for a in slots_of(key))


def test_exact_cuckoo_fill_update_delete(tw):
    """Keys go to a free way slot, else earlier keys move along a chain (each written to its
    new slot before its old slot is overwritten): after every single write every placed key
    is found at one of its slots with its own word; the first failure is a key with no chain
    of at most EXACT_MOVES moves (checked by an independent depth-first search)."""
    from netstor.driver.tables import EXACT_MOVES
    slots_of = lambda k: [ops_slot(w, k) for w in range(4)]   # noqa: E731
    mem, words = {}, {}          # address -> word (the device), key -> its word
    placed, moved = 0, 0
    order = list(range(256))
    random.Random(1).shuffle(order)
    for key in order:
        assert tw.exact_slots("prim.ops", [key]) == slots_of(key)
        at = {(w >> 1) & 0xFF: a for a, w in mem.items()}
        at = {a: k for k, a in at.items()}
        free = [s for s in slots_of(key) if s not in at]
        try:
            writes = tw.exact_add("prim.ops", [key], "forward", {"port": key % 16})
        except TableFullError as e:
            assert e.table == "prim.ops" and e.key == [key]
            assert not free and not _chain_exists(at, slots_of, key, EXACT_MOVES)
            break
        assert writes[-1][1] == (free[0] if free else writes[-1][1])
        assert len(writes) == 1 or not free
        words[key] = writes[-1][2]
        for _, addr, word in writes:
            k = (word >> 1) & 0xFF
            assert addr in slots_of(k) and word == words[k]
            mem[addr] = word
            found = {}
            for a, w in mem.items():
                found.setdefault((w >> 1) & 0xFF, []).append(a)
            assert set(found) == set(words) - ({key} if addr != writes[-1][1] else set())
        moved += len(writes) - 1
        placed += 1
    else:
        pytest.fail("64 slots never filled with 256 keys")
    assert moved > 0, (placed, moved)     # chains were used
    # each key once in the table
    assert len({(w >> 1) & 0xFF for w in mem.values()}) == len(mem) == placed
    # an update rewrites the key's slot even when the table is full
    k, a = next(((w >> 1) & 0xFF, a) for a, w in mem.items())
    (w,) = tw.exact_add("prim.ops", [k], "clone", {"port": 3})
    assert w[1] == a and tw.decode_entry("prim.ops", w[2])["action"] == "clone"
    assert tw.exact_delete("prim.ops", [k]) == [("prim.ops", a, 0)]
    with pytest.raises(KeyError, match=r"prim.ops: no entry with key \[%d\]" % k):
        tw.exact_delete("prim.ops", [k])
    # its slot is free again for a key that wants it
    (w,) = tw.exact_add("prim.ops", [k], "forward", {"port": 1})
    assert w[1] in tw.exact_slots("prim.ops", [k])


def test_exact_ids_in_order_fill_every_slot(tw):
    """A slot's low bits are the key's (the matrix is [I | R]): ids 0..63 in order fill the
    4 x 16 slots of prim.ops exactly, with no move; id 64 finds every slot taken."""
    for k in range(64):
        (w,) = tw.exact_add("prim.ops", [k], "forward", {"port": 0})
        assert w[1] == (k // 16) * 16 + h3_ref(k, k // 16, 8, 4)
    with pytest.raises(TableFullError):
        tw.exact_add("prim.ops", [64], "forward", {"port": 0})


def test_exact_keys_colliding_in_every_way_under_the_old_crc_now_fit(tw):
    """The bug the H3 hashes fix: under CRC-32 with a per-way seed byte, 8-bit keys of
    prim.ops (4 ways x 16) fall into 16 classes of 16 keys that share their slot in all four
    ways, so a class held 4 keys and the 5th was refused. Under independent hashes all 16 fit
    (and the model finds each)."""
    from netstor.model import DataplaneModel
    classes = {}
    for k in range(256):
        classes.setdefault(tuple(old_crc_slot(w, k, 8, 16) for w in range(4)), []).append(k)
    # the correlation: 16 classes, each of 16 keys colliding in every way
    assert len(classes) == 16 and all(len(v) == 16 for v in classes.values())
    cls = next(iter(classes.values()))
    model = DataplaneModel(tw.pipeline)
    for i, k in enumerate(cls):
        apply_writes(model, tw.exact_add("prim.ops", [k], "forward", {"port": i % 16}))
    words = model.memory("prim.ops").words
    for i, k in enumerate(cls):
        (a,) = [a for a in range(64) if words[a] & 1 and (words[a] >> 1) & 0xFF == k]
        assert a in [ops_slot(w, k) for w in range(4)]
        assert tw.decode_entry("prim.ops", words[a])["params"] == {"port": i % 16}


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
    (lambda t: t.mcast_set(0, []), ValueError, "multicast group 0 out of range 1..4095"),
    (lambda t: t.mcast_set(4096, []), ValueError, "multicast group 4096 out of range"),
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
