"""Table gateware (exact hash, RAM TCAM for ternary and LPM) against the golden model: the
host writes entries through the table's memory port (the CSR protocol: ``req`` held until
``ack``) while lookups run one per clock; every lookup issued when no write is in flight must
give what the model gives with the same entries, and read-back returns the written words."""
from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from netstor.driver.tables import TableWriter
from netstor.driver.tables import TableFullError
from netstor.elements import Table
from netstor.elements.table import _lpm_probe
from netstor.gateware.lpm import lpm_slot, prefix_mask
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.kit import HwEnv
from netstor.gateware.stages import build_element
from netstor.gateware.tcam import first_set
from netstor.lang import Pipeline, Program, Set
from netstor.lang.program import Action, hash_crc32
from netstor.model.dataplane import DataplaneModel


def _program(kind, size, **kw):
    p = Program("t")
    ka, kb = p.meta("ka", 12), p.meta("kb", 6)
    out, out2 = p.meta("out", 16), p.meta("out2", 8)
    fwd = Action("fwd", {"port": 16}, lambda a: [Set(out, a.port)])
    mark = Action("mark", {"tag": 8, "x": 4},
                  lambda a: [Set(out2, a.tag), Set(out, ka + a.x)])
    key = [ka] if kind == "lpm" else [ka, kb]
    t = p.add(Table("tab", kind=kind, key=key, actions=[fwd, mark], size=size,
                    default=mark, default_params={"tag": 0x5A, "x": 3}, **kw))
    return Pipeline([p]), t, ka, kb, out, out2


def _run(pl, t, writes_rounds, lookups_rounds, out_fields, key_fields, during=None):
    """Apply each round of host writes (then wait until they are done), then its lookups
    (one per clock); returns [[output tuple per lookup]] and the read-back words.
    ``during``: ``(writes, lookups)`` run last, the writes issued (with random gaps) while the
    lookups stream one per clock; its outputs are the last list of the result."""
    m = Module()
    layout = data.StructLayout(pl.phv.layout())
    vin, phv_in = Signal(), Signal(layout)
    csr = CsrBuilder()
    vout, pout, lat = build_element(m, t, pl, vin, phv_in, csr, prefix="tab")
    ports = {mi.name: mi.port for mi in csr.memories}
    port = ports[t.qualname]
    results, readback = [], []
    state = {"stream": False}

    async def access(ctx, p, addr, word=None):
        ctx.set(p.addr, addr)
        ctx.set(p.we, word is not None)
        ctx.set(p.wdata, word or 0)
        ctx.set(p.req, 1)
        for _ in range(5000):
            ack = ctx.get(p.ack)
            rd = ctx.get(p.rdata)
            await ctx.tick()
            if ack:
                break
        else:
            raise AssertionError("no ack")
        ctx.set(p.req, 0)
        return rd

    async def run_lookups(ctx, lookups):
        """One lookup per clock; the outputs, ``lat`` cycles later, in order."""
        got = []
        for k in range(len(lookups) + lat):
            if k < len(lookups):
                for name, v in zip(key_fields, lookups[k]):
                    ctx.set(HwEnv(pl, phv_in).field(name), v)
            ctx.set(vin, int(k < len(lookups)))
            await ctx.tick()
            if k + 1 >= lat and len(got) < len(lookups):
                assert ctx.get(vout) == 1
                got.append(tuple(ctx.get(HwEnv(pl, pout).field(n)) for n in out_fields))
        return got

    async def bench(ctx):
        for writes, lookups in zip(writes_rounds, lookups_rounds):
            for mem, addr, word in writes:
                await access(ctx, ports[mem], addr, word)
            results.append(await run_lookups(ctx, lookups))
        if during is not None:
            state["stream"] = True
            gaps = random.Random(5)
            for _ in range(5):
                await ctx.tick()
            for mem, addr, word in during[0]:
                await access(ctx, ports[mem], addr, word)
                for _ in range(gaps.randrange(0, 4)):
                    await ctx.tick()
            while state["stream"]:
                await ctx.tick()
        for a in range(t.size):
            readback.append(await access(ctx, port, a))

    async def stream(ctx):
        while not state["stream"]:
            await ctx.tick()
        results.append(await run_lookups(ctx, during[1]))
        state["stream"] = False

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    if during is not None:
        sim.add_testbench(stream)
    sim.run()
    return results, readback, lat


def _model_outputs(pl, t, writes_rounds, lookups_rounds, out_fields, key_fields):
    model = DataplaneModel(pl)
    res, words = [], {}
    for writes, lookups in zip(writes_rounds, lookups_rounds):
        for mem, addr, word in writes:
            model.mem_write(mem, addr, word)
            if mem == t.qualname:
                words[addr] = word
        got = []
        for key in lookups:
            phv = model.parse(bytes(64), 0)
            model.assign(phv, list(zip(key_fields, key)))
            model._run([t], phv)
            got.append(tuple(model.view(phv, n) for n in out_fields))
        res.append(got)
    return res, [words.get(a, 0) for a in range(t.size)]


def _check(pl, t, writes_rounds, lookups_rounds, out, keys, want_latency):
    got, rb, lat = _run(pl, t, writes_rounds, lookups_rounds, out, keys)
    want, wwords = _model_outputs(pl, t, writes_rounds, lookups_rounds, out, keys)
    assert lat == want_latency
    for r, (g, w) in enumerate(zip(got, want)):
        bad = [(i, lookups_rounds[r][i], g[i], w[i]) for i in range(len(w)) if g[i] != w[i]]
        assert not bad, f"round {r}: {len(bad)} mismatches, first {bad[:3]}"
    assert rb == wwords
    return want


@pytest.mark.parametrize("size", [12, 20])
def test_ternary_matches_the_model_lowest_index_wins(size):
    """12 entries: the flip-flop engine (latency 2); 20: the RAM TCAM (latency 4)."""
    pl, t, ka, kb, out, out2 = _program("ternary", size)
    tw = TableWriter(pl)
    rng = random.Random(11)
    entries = {}
    r1 = []
    for prio in rng.sample(range(size), 10):
        v = [rng.getrandbits(12), rng.getrandbits(6)]
        msk = [rng.choice([0xFFF, 0xFF0, 0xF00, 0, rng.getrandbits(12)]),
               rng.choice([0x3F, 0, 0x38, rng.getrandbits(6)])]
        v = [v[0] & msk[0], v[1] & msk[1]]
        entries[prio] = (v, msk)
        if rng.random() < 0.5:
            r1 += tw.ternary_add(t.qualname, v, msk, "fwd", {"port": rng.getrandbits(16)}, prio)
        else:
            r1 += tw.ternary_add(t.qualname, v, msk, "mark",
                                 {"tag": rng.getrandbits(8), "x": rng.getrandbits(4)}, prio)

    def keys(n):
        out_ = []
        for _ in range(n):
            if rng.random() < 0.7:
                v, msk = entries[rng.choice(list(entries))]
                out_.append([(v[0] | (rng.getrandbits(12) & ~msk[0])) & 0xFFF,
                             (v[1] | (rng.getrandbits(6) & ~msk[1])) & 0x3F])
            else:
                out_.append([rng.getrandbits(12), rng.getrandbits(6)])
        return out_
    # round 2: replace some entries in place, delete others, change the default
    r2 = []
    for prio in rng.sample(sorted(entries), 5):
        v, msk = [rng.getrandbits(4) << 8, 0], [0xF00, 0]
        entries[prio] = (v, msk)
        r2 += tw.ternary_add(t.qualname, v, msk, "fwd", {"port": prio}, prio)
    for prio in rng.sample(sorted(entries), 3):
        r2 += tw.ternary_delete(t.qualname, prio)
    r2 += tw.set_default(t.qualname, "fwd", {"port": 0xBEEF})
    want = _check(pl, t, [r1, r2], [keys(150), keys(150)], [out.name, out2.name],
                  [ka.name, kb.name], 2 if size <= 16 else 2 + 2)
    # the vectors exercise hits of several entries and misses
    flat = [w for r in want for w in r]
    assert len(set(flat)) > 10 and (0xBEEF, 0) in want[1]


def test_lpm_matches_the_model_and_scales_priority_beyond_one_tree_level():
    pl, t, ka, kb, out, out2 = _program("lpm", 70)      # 70 entries: a 2-level tree
    tw = TableWriter(pl)
    rng = random.Random(12)
    routes = set()
    while len(routes) < 40:
        plen = rng.randrange(0, 13)
        routes.add((rng.getrandbits(12) & (((1 << plen) - 1) << (12 - plen)), plen))
    # longest first (each add lands at the end), the last three out of order (they shift
    # the entries after them down)
    routes = sorted(routes, key=lambda r: -r[1])
    routes = routes[:-3] + [routes[-1], routes[-2], routes[-3]]
    r1 = []
    for i, (pre, plen) in enumerate(routes):
        r1 += tw.lpm_add(t.qualname, pre, plen, "fwd", {"port": i + 1})
    keys = []
    for _ in range(200):
        pre, plen = rng.choice(routes)
        keys.append([pre | (rng.getrandbits(12) & ((1 << (12 - plen)) - 1))])
    # delete three of the shortest (the end of the table) and one near the end
    r2 = []
    for pre, plen in [routes[-1], routes[-2], routes[-4], routes[-3]]:
        r2 += tw.lpm_delete(t.qualname, pre, plen)
    _check(pl, t, [r1, r2], [keys, keys], [out.name, out2.name], [ka.name], 3 + 2)


def test_exact_matches_the_model():
    pl, t, ka, kb, out, out2 = _program("exact", 32, ways=4)
    tw = TableWriter(pl)
    rng = random.Random(13)
    present, r1 = [], []
    for _ in range(40):
        k = [rng.getrandbits(12), rng.getrandbits(6)]
        try:
            r1 += tw.exact_add(t.qualname, k, "mark", {"tag": rng.getrandbits(8), "x": 5})
            present.append(k)
        except Exception:
            pass
    keys = [rng.choice(present) if rng.random() < 0.7 else [rng.getrandbits(12),
                                                              rng.getrandbits(6)]
            for _ in range(200)]
    r2 = []
    for k in present[:6]:
        r2 += tw.exact_delete(t.qualname, k)
    _check(pl, t, [r1, r2], [keys, keys], [out.name, out2.name], [ka.name, kb.name], 3)


def test_exact_old_crc_colliding_keys_fit_and_moves_never_hide_a_key():
    """Keys that share their slot in every way under the old hash (CRC-32 with a per-way seed
    byte: 4 ways x 8 slots held at most 4 of them) all fit under the per-way H3 hashes; the
    gateware equals the model on them. Then the table is filled with random keys while
    lookups of the keys placed before stream one per clock: the inserts move keys between
    ways (cuckoo, make-before-break), and every such lookup finds its key's own action."""
    pl, t, ka, kb, out, out2 = _program("exact", 32, ways=4)
    kw, depth = t.key_width, t.depth
    tw = TableWriter(pl)

    def old_slots(k):
        return tuple(hash_crc32(k, kw, seed=w) % depth for w in range(4))

    rng = random.Random(17)
    first = rng.getrandbits(kw)
    cls = [first]
    while len(cls) < 10:
        k = rng.getrandbits(kw)
        if k not in cls and old_slots(k) == old_slots(first):
            cls.append(k)
    # old: these 10 keys had 4 addresses between them (w * depth + old_slots(first)[w])
    split = lambda k: [k & 0xFFF, k >> 12]   # noqa: E731  (ka, kb)
    r1, want = [], {}
    for i, k in enumerate(cls):
        r1 += tw.exact_add(t.qualname, split(k), "mark", {"tag": i + 1, "x": 2})
        want[k] = (((k & 0xFFF) + 2) & 0xFFFF, i + 1)
    assert len({a for _, a, _ in r1}) >= len(cls)
    keys1 = [split(k) for k in cls] * 3 + [split(rng.getrandbits(kw)) for _ in range(20)]
    got1 = _check(pl, t, [r1], [keys1], [out.name, out2.name], [ka.name, kb.name], 3)[0]
    assert got1[:len(cls)] == [want[k] for k in cls]

    # fill with moves while the placed keys are looked up
    r2, added = [], 0
    for _ in range(200):
        k = rng.getrandbits(kw)
        if k in want:
            continue
        try:
            r2 += tw.exact_add(t.qualname, split(k), "fwd", {"port": 0x100 + added})
            added += 1
        except TableFullError:
            break
    moves = len(r2) - added
    assert moves > 0 and len(cls) + added > 4 * 4, (moves, added)
    keys2 = [split(rng.choice(cls)) for _ in range(4 * len(r2) + 40)]
    got, rb, lat = _run(pl, t, [r1], [keys1], [out.name, out2.name], [ka.name, kb.name],
                        during=(r2, keys2))
    bad = [(i, k, g) for i, (k, g) in enumerate(zip(keys2, got[-1]))
           if g != want[k[0] | k[1] << 12]]
    assert not bad, f"{len(bad)} lookups missed a placed key, first {bad[:3]}"
    model = DataplaneModel(pl)
    for mem, addr, word in r1 + r2:
        model.mem_write(mem, addr, word)
    assert rb == [model.memory(t.qualname).words[a] for a in range(t.size)]


@pytest.mark.parametrize("n", [1, 5, 8, 9, 64, 100])
def test_priority_tree_gives_the_lowest_set_bit(n):
    m = Module()
    bits = Signal(n)
    found, index, regs = first_set(m, [bits[i] for i in range(n)], prefix="pe")
    rng = random.Random(n)
    vecs = [0, (1 << n) - 1] + [1 << rng.randrange(n) for _ in range(10)] + \
        [rng.getrandbits(n) & rng.getrandbits(n) for _ in range(40)]
    got = []

    async def bench(ctx):
        for k in range(len(vecs) + regs):
            if k < len(vecs):
                ctx.set(bits, vecs[k])
            await ctx.tick()
            if k >= regs - 1 and len(got) < len(vecs):
                got.append((ctx.get(found), ctx.get(index)))

    if regs == 0:
        async def bench(ctx):       # noqa: F811 (combinational: no register)
            for v in vecs:
                ctx.set(bits, v)
                await ctx.delay(1e-9)
                got.append((ctx.get(found), ctx.get(index)))
    sim = Simulator(m)
    if regs:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = [(int(v != 0), (v & -v).bit_length() - 1 if v else None) for v in vecs]
    assert [(f, i if f else None) for f, i in got] == want


# ---- hashed LPM (512+ entries: hash banks, netstor.gateware.lpm) ---------------------------------

def _routes(rng, n, kw, lengths=None):
    """``n`` distinct random routes ``(prefix, len)``, lengths uniform over ``lengths``."""
    lengths = list(range(kw + 1)) if lengths is None else lengths
    out = set()
    while len(out) < n:
        plen = rng.choice(lengths)
        out.add((rng.getrandbits(kw) & prefix_mask(plen, kw), plen))
    return sorted(out)


def _keys_for(rng, routes, kw, n, p_route=0.8):
    keys = []
    for _ in range(n):
        if rng.random() < p_route:
            pre, plen = rng.choice(routes)
            keys.append(pre | (rng.getrandbits(kw) & ~prefix_mask(plen, kw) & ((1 << kw) - 1)))
        else:
            keys.append(rng.getrandbits(kw))
    return keys


def _longest(routes, key, kw):
    """Reference: the longest installed route containing ``key`` (a dict lookup per length)."""
    for plen in range(kw, -1, -1):
        hit = routes.get((key & prefix_mask(plen, kw), plen))
        if hit is not None:
            return hit
    return None


def test_lpm_hashed_matches_the_model_with_updates_during_lookups():
    """512 slots in 16 banks of 32 (a 12-bit key, 13 prefix lengths): random overlapping
    routes of every length (latency 4); read-back; then deletions, re-routes and new routes
    written while lookups stream one per clock: every lookup must give the answer of the table
    after some prefix of the writes, later lookups never an earlier prefix; then raw words the
    driver never writes (a mask that is not the bank's, a disabled bank, two banks of one
    length holding the same prefix, a length beyond the key) against the model."""
    pl, t, ka, kb, out, out2 = _program("lpm", 512, lpm_banks=16)
    assert t.lpm_hashed and t.depth == 32
    tw = TableWriter(pl)
    rng = random.Random(21)
    kw = 12
    routes = {}
    r1, full = [], 0
    for i, (pre, plen) in enumerate(_routes(rng, 220, kw)):
        try:
            r1 += tw.lpm_add(t.qualname, pre, plen, "fwd", {"port": i + 1})
            routes[(pre, plen)] = i + 1
        except TableFullError:
            full += 1
    assert len(routes) >= 150, (len(routes), full)
    assert sum(1 for m_, _, _ in r1 if m_.endswith(".lengths")) >= 13   # every length, banks
    rl = sorted(routes)
    keys1 = [[k] for k in _keys_for(rng, rl, kw, 300)]
    want = _check(pl, t, [r1], [keys1], [out.name, out2.name], [ka.name], 4)
    # the model is LPM: every answer is the longest installed route (or the default's)
    for (k,), (o, o2) in zip(keys1, want[0]):
        ref = _longest(routes, k, kw)
        assert (o, o2) == ((ref, 0) if ref is not None else ((k + 3) & 0xFFFF, 0x5A))
    assert len({o for o, _ in want[0]}) > 60

    # writes during lookups
    r2 = []
    for pre, plen in rng.sample(rl, 40):
        r2 += tw.lpm_delete(t.qualname, pre, plen)
        routes.pop((pre, plen))
    for pre, plen in rng.sample(sorted(routes), 20):
        r2 += tw.lpm_add(t.qualname, pre, plen, "mark", {"tag": plen, "x": 1})
    for pre, plen in _routes(rng, 15, kw, lengths=[3, 7, 11]):
        try:
            r2 += tw.lpm_add(t.qualname, pre, plen, "fwd", {"port": 0x700 + plen})
        except TableFullError:
            pass
    # deletions release banks: at least one length word cleared
    keys2 = [[k] for k in _keys_for(rng, rl, kw, 500)]
    got, rb, lat = _run(pl, t, [r1], [keys1], [out.name, out2.name], [ka.name],
                        during=(r2, keys2))
    model = DataplaneModel(pl)
    states = []

    def answers():
        res = []
        for key in keys2:
            phv = model.parse(bytes(64), 0)
            model.assign(phv, [(ka.name, key[0])])
            model._run([t], phv)
            res.append((model.view(phv, out.name), model.view(phv, out2.name)))
        return res
    for mem, addr, word in r1:
        model.mem_write(mem, addr, word)
    states.append(answers())
    for mem, addr, word in r2:
        model.mem_write(mem, addr, word)
        states.append(answers())
    k, seen = 0, set()
    for i, g in enumerate(got[-1]):
        while k < len(states) and states[k][i] != g:
            k += 1
        assert k < len(states), f"lookup {i} (key {keys2[i]}): {g} is no state's answer " \
            "at or after the previous lookup's"
        seen.add(k)
    # the stream spans the writes (~4 cycles each): many states seen, the last 100 lookups
    # come after the last write
    assert len(seen) > 10 and got[-1][-100:] == states[-1][-100:]
    assert rb == [model.memory(t.qualname).words[a] for a in range(t.size)]

    # raw words the driver never writes, against the model
    ab = t.action_bits
    L = f"{t.qualname}.lengths"

    def word(pre, msk, port):
        return 1 | pre << 1 | msk << (1 + kw) | 1 << (1 + 2 * kw) | port << (1 + 2 * kw + ab)
    pre = 0xAB0
    slot = lambda b, p: b * t.depth + lpm_slot(p, b, kw, t.depth)   # noqa: E731
    raw = [(L, 3, 1 | 12 << 1), (L, 5, 1 | 12 << 1), (L, 6, 1 | 14 << 1), (L, 7, 1 | 4 << 1),
           (L, 9, 1 | 12 << 1),
           (t.qualname, slot(3, pre), word(pre, 0xFFF, 0x111)),      # same prefix, two banks:
           (t.qualname, slot(5, pre), word(pre, 0xFFF, 0x222)),      # the lower bank wins
           (t.qualname, slot(3, 0x123), word(0x123, 0xFF0, 0x333)),  # mask not the bank's
           (t.qualname, slot(6, 0x456), word(0x456, 0xFFF, 0x444)),  # length 14 > kw
           (t.qualname, slot(7, 0x400), word(0x400, 0xF00, 0x555)),  # /4 under them
           (t.qualname, slot(9, 0x789), word(0x789, 0xFFF, 0x666)),  # then its bank disabled
           (L, 9, 12 << 1)]
    keys3 = [[k] for k in [pre, 0x123, 0x456, 0x457, 0x789, 0x4FF, 0xAB1]] + \
        [[rng.getrandbits(kw)] for _ in range(40)]
    want3 = _check(pl, t, [raw], [keys3], [out.name, out2.name], [ka.name], 4)[0]
    dflt = lambda k: ((k + 3) & 0xFFFF, 0x5A)   # noqa: E731
    assert want3[:7] == [(0x111, 0), dflt(0x123), (0x444, 0), (0x555, 0), dflt(0x789),
                         (0x555, 0), dflt(0xAB1)]


def test_lpm_hashed_expanded_routes_gateware_equals_model_and_brute_force():
    """Prefix expansion (driver) on the gateware: 8 banks holding /3, /6, /9, /12 only (a
    12-bit key), random nested routes of every length, some deleted; the element's lookups
    equal the model's (and read-back its words), and every answer is the longest route of a
    scan over the route list."""
    pl, t, ka, kb, out, out2 = _program("lpm", 512, lpm_banks=8)
    tw = TableWriter(pl, lpm_lengths={t.qualname: (3, 6, 9, 12)})
    rng = random.Random(12)
    kw = 12
    routes, r1 = {}, []
    for i, (pre, plen) in enumerate(_routes(rng, 70, kw)):
        r1 += tw.lpm_add(t.qualname, pre, plen, "fwd", {"port": i + 1})
        routes[(pre, plen)] = i + 1
    for pre, plen in rng.sample(sorted(routes), 20):
        r1 += tw.lpm_delete(t.qualname, pre, plen)
        del routes[(pre, plen)]
    assert sum(1 for m_, _, _ in r1 if not m_.endswith(".lengths")) > 2 * 70   # expansions
    assert {n for n in tw._lpm[t.qualname].bank_len if n is not None} <= {3, 6, 9, 12}
    keys = [[k] for k in _keys_for(rng, sorted(routes), kw, 400)]
    want = _check(pl, t, [r1], [keys], [out.name, out2.name], [ka.name], 4)
    for (k,), (o, o2) in zip(keys, want[0]):
        scan = max(((n, v) for (p_, n), v in routes.items() if k >> (kw - n) == p_ >> (kw - n)),
                   default=None)
        assert (o, o2) == ((scan[1], 0) if scan else ((k + 3) & 0xFFFF, 0x5A)), hex(k)


def test_lpm_hashed_model_is_longest_prefix_at_16k():
    """The bench's table (32-bit keys, 64K slots in 64 banks): 16,384 routes with a
    BGP-like length mix fit; the model (what the gateware computes) gives the longest
    installed route for random keys, after adds and after deletions; a second writer loads
    the table from its words."""
    p = Program("t")
    dst, nh = p.meta("dst", 32), p.meta("nh", 16)
    t = p.add(Table("r", kind="lpm", key=[dst], size=1 << 16, lpm_banks=64,
                    actions=[Action("route", {"nh": 16}, lambda a: [Set(nh, a.nh)])]))
    pl = Pipeline([p])
    tw = TableWriter(pl)
    rng = random.Random(7)
    mix = {24: 55, 23: 9, 22: 10, 21: 4, 20: 5, 19: 4, 18: 2, 17: 2, 16: 6, 15: 0.5, 14: 0.5,
           13: 0.3, 12: 0.2, 11: 0.1, 10: 0.05, 8: 0.02, 25: 0.3, 26: 0.2, 28: 0.2, 30: 0.1,
           32: 0.5, 0: 0.001}
    lens, wts = list(mix), list(mix.values())
    routes, words, lengths = {}, [0] * t.size, [0] * t.ways
    while len(routes) < 16384:
        plen = rng.choices(lens, wts)[0]
        pre = rng.getrandbits(32) & prefix_mask(plen, 32)
        if (pre, plen) in routes:
            continue
        nhv = rng.getrandbits(16)
        for mem, addr, w in tw.lpm_add(t.qualname, pre, plen, "route", {"nh": nhv}):
            (lengths if mem.endswith(".lengths") else words)[addr] = w
        routes[(pre, plen)] = nhv

    def check():
        rl = sorted(routes)
        for k in _keys_for(rng, rl, 32, 3000):
            e = _lpm_probe(t, words, lengths, k)
            ref = _longest(routes, k, 32)
            assert (None if e is None else e >> t.action_bits) == ref, hex(k)
    check()
    for pre, plen in rng.sample(sorted(routes), 4000):
        for mem, addr, w in tw.lpm_delete(t.qualname, pre, plen):
            (lengths if mem.endswith(".lengths") else words)[addr] = w
        del routes[(pre, plen)]
    check()
    # a new writer takes the table over from the words read back (lengths inferred)
    tw2 = TableWriter(pl)
    tw2.load_shadow(t.qualname, words)
    assert tw2.lpm_entries(t.qualname) == tw.lpm_entries(t.qualname)
    assert tw2._lpm[t.qualname].bank_len == tw._lpm[t.qualname].bank_len
    pre, plen = next(iter(routes))
    assert tw2.lpm_delete(t.qualname, pre, plen) == tw.lpm_delete(t.qualname, pre, plen)


@pytest.mark.parametrize("held", [None, (8, 16, 24, 32)])
def test_lpm_hashed_compiled_model_agrees(held):
    """The compiled model's hashed LPM (its generated code probes the live memories) gives the
    interpreter's frames, and both route by the longest installed prefix, through adds,
    deletions and a bank released and taken again; ``held``: the driver holds only these
    lengths and expands the others (/0 into 256 entries of /8, /20 into 16 of /24, ...)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from netstor.lang import F
    from netstor.model.compiled import CompiledModel

    p = Program("t")
    t = p.add(Table("r", kind="lpm", key=[F.ipv4.dst], size=1024 if held is None else 4096,
                    lpm_banks=16, actions=[Action("mark", {"tag": 16},
                                                  lambda a: [Set(F.ipv4.ident, a.tag)])]))
    pl = Pipeline([p])
    ref, comp = DataplaneModel(pl), CompiledModel(pl)
    tw = TableWriter(pl, lpm_lengths=held and {t.qualname: held})
    rng = random.Random(3)
    routes = {}

    def apply(ws):
        for mem, addr, w in ws:
            ref.mem_write(mem, addr, w)
            comp.mem_write(mem, addr, w)

    def check(n):
        rl = sorted(routes)
        for k in _keys_for(rng, rl, 32, n):
            frame = bytes(Ether() / IP(dst=f"{k >> 24}.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}",
                                       id=0xFFFF) / UDP(sport=1, dport=2) / bytes(20))
            a, b = ref.process(frame, 0), comp.process(frame, 0)
            assert [o.frame for o in a] == [o.frame for o in b]
            ident = int.from_bytes(a[0].frame[18:20], "big")
            want = _longest(routes, k, 32)
            assert ident == (0xFFFF if want is None else want), hex(k)
    for pre, plen in _routes(rng, 150, 32, lengths=[0, 8, 16, 20, 24, 28, 32]):
        routes[(pre, plen)] = rng.getrandbits(15)
        apply(tw.lpm_add(t.qualname, pre, plen, "mark", {"tag": routes[(pre, plen)]}))
    check(150)
    if held:
        assert {n for n in tw._lpm[t.qualname].bank_len if n is not None} <= set(held)
        assert sum(len(tw.lpm_addresses(t.qualname, p_, n)) > 1 for p_, n in routes) > 40
    for pre, plen in [r for r in sorted(routes) if r[1] in (0, 8)]:   # empties two banks
        del routes[(pre, plen)]
        apply(tw.lpm_delete(t.qualname, pre, plen))
    for pre, plen in _routes(rng, 20, 32, lengths=[12]):
        routes[(pre, plen)] = rng.getrandbits(15)
        apply(tw.lpm_add(t.qualname, pre, plen, "mark", {"tag": routes[(pre, plen)]}))
    check(150)
