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
from netstor.elements import Table
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.kit import HwEnv
from netstor.gateware.stages import build_element
from netstor.gateware.tcam import first_set
from netstor.lang import Pipeline, Program, Set
from netstor.lang.program import Action
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


def _run(pl, t, writes_rounds, lookups_rounds, out_fields, key_fields):
    """Apply each round of host writes (then wait until they are done), then its lookups
    (one per clock); returns [[output tuple per lookup]] and the read-back words."""
    m = Module()
    layout = data.StructLayout(pl.phv.layout())
    vin, phv_in = Signal(), Signal(layout)
    csr = CsrBuilder()
    vout, pout, lat = build_element(m, t, pl, vin, phv_in, csr, prefix="tab")
    port = next(mi.port for mi in csr.memories if mi.name == t.qualname)
    dport = next(mi.port for mi in csr.memories if mi.name == f"{t.qualname}.default")
    results, readback = [], []

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

    async def bench(ctx):
        for writes, lookups in zip(writes_rounds, lookups_rounds):
            for mem, addr, word in writes:
                await access(ctx, dport if mem.endswith(".default") else port, addr, word)
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
            results.append(got)
        for a in range(t.size):
            readback.append(await access(ctx, port, a))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
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
