"""ReplicationEngine (gateware, Amaranth simulator) against the model's copy-list semantics
(netstor.model.replication): random groups (empty, 1..16 copies, counts above 16, bad ports,
groups out of range), random descriptors with random back-pressure and host reads during
traffic; then back-to-back timing: copies of successive packets in consecutive cycles."""

import random

from amaranth.sim import Simulator

from netstor.gateware.traffic_manager import ReplicationEngine
from netstor.model.replication import encode_group, group_copies, MAX_COPIES

NOUT, NG = 4, 64


async def host_op(ctx, mc, addr, wdata=None):
    """One MemoryPort request; returns rdata for a read."""
    ctx.set(mc.req, 1)
    ctx.set(mc.we, wdata is not None)
    ctx.set(mc.addr, addr)
    ctx.set(mc.wdata, wdata or 0)
    while True:
        await ctx.tick()
        if ctx.get(mc.ack):
            r = ctx.get(mc.rdata)
            ctx.set(mc.req, 0)
            await ctx.tick()
            return r


def random_word(rng):
    k = rng.choice([0, 1, 1, 2, 3, 5, 8, 16, 16])
    copies = [(rng.choice([0, 1, 2, 3, 3, 3, 4, 15]) if rng.random() < 0.3
               else rng.randrange(NOUT), rng.randrange(1 << 16)) for _ in range(k)]
    w = encode_group(copies)
    if k == 16 and rng.random() < 0.3:
        w |= rng.choice([17, 20, 31])         # counts above 16 count as 16
    return w


def run(tb_factory, dut):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb_factory)
    sim.run()


def test_engine_random_against_model():
    rng = random.Random(12)
    dut = ReplicationEngine(NOUT, NG, group_width=12, tag_width=8, fifo_depth=8)
    words = {g: random_word(rng) for g in range(NG)}
    # bad ports after the last good copy, before it, and only bad ports
    words.update({0: encode_group([(0, 1), (9, 2)]), 1: encode_group([(7, 1), (2, 3), (4, 4)]),
                  2: encode_group([(5, 1)]), 3: encode_group([(1, 2), (4, 0), (1, 3), (6, 6)])})
    got, expected, counts = [], [], {"mcast_empty": 0, "bad_port": 0, "overflow": 0}
    sent = []

    async def tb(ctx):
        for g, w in words.items():
            await host_op(ctx, dut.mc, g, w)
        for g in rng.sample(range(NG), 8):
            assert await host_op(ctx, dut.mc, g) == words[g]
        host_reads = 0
        hpend = None                         # (addr, cycles waited) of a read in flight
        for cyc in range(3000):
            v = cyc < 2600 and rng.random() < 0.45
            group = rng.choice([rng.randrange(NG), NG + rng.randrange(8)])
            tag = cyc & 0xFF
            ctx.set(dut.i.valid, v)
            ctx.set(dut.i.payload.group, group)
            ctx.set(dut.i.payload.tag, tag)
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            # a host read now and then, through the packets' read port
            if hpend is None and rng.random() < 0.02:
                a = rng.randrange(NG)
                ctx.set(dut.mc.req, 1)
                ctx.set(dut.mc.we, 0)
                ctx.set(dut.mc.addr, a)
                hpend = [a, 0]
            elif hpend is not None and ctx.get(dut.mc.ack):
                assert ctx.get(dut.mc.rdata) == words[hpend[0]]
                ctx.set(dut.mc.req, 0)
                hpend, host_reads = None, host_reads + 1
            elif hpend is not None:
                hpend[1] += 1
                assert hpend[1] <= 2              # ack two cycles after the request
            if ctx.get(dut.o.valid) and ready:
                p = ctx.get(dut.o.payload)
                got.append((p.port, p.rid, p.tag, p.first, p.last))
            for k in counts:
                counts[k] += ctx.get(getattr(dut.cnt, k))
            if ctx.get(dut.cnt.overflow):
                sent.pop()                          # the descriptor of the previous cycle
            if v:
                sent.append((group, tag))
            await ctx.tick()
        assert host_reads > 20

    run(tb, dut)
    empty = bad = 0
    for group, tag in sent:
        if group >= NG:
            empty += 1
            continue
        made, nbad = group_copies(words[group], NOUT)
        bad += nbad
        if not made and not nbad:
            empty += 1
        for i, (port, rid) in enumerate(made):
            expected.append((port, rid, tag, int(i == 0), int(i == len(made) - 1)))
    assert counts["overflow"] > 0 and len(sent) > 400
    assert got == expected
    assert counts["mcast_empty"] == empty and counts["bad_port"] == bad


def test_engine_back_to_back():
    """Groups of 3, 1 and 16 copies: with o always ready, every copy of 8 packets leaves in
    consecutive cycles, the first 5 cycles after the first descriptor."""
    dut = ReplicationEngine(NOUT, NG, group_width=12, tag_width=8, fifo_depth=16)
    lists = {1: [(1, 10), (1, 11), (1, 12)], 2: [(3, 5)],
             3: [(i % NOUT, 100 + i) for i in range(MAX_COPIES)]}
    order = [1, 2, 2, 3, 1, 2, 3, 2]
    out = []

    async def tb(ctx):
        for g, copies in lists.items():
            await host_op(ctx, dut.mc, g, encode_group(copies))
        ctx.set(dut.o.ready, 1)
        for cyc in range(80):
            if cyc < len(order):
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload.group, order[cyc])
                ctx.set(dut.i.payload.tag, cyc)
            else:
                ctx.set(dut.i.valid, 0)
            if ctx.get(dut.o.valid):
                p = ctx.get(dut.o.payload)
                out.append((cyc, p.port, p.rid, p.tag))
            await ctx.tick()

    run(tb, dut)
    exp = [(port, rid, t) for t, g in enumerate(order) for port, rid in lists[g]]
    assert [o[1:] for o in out] == exp
    cycles = [o[0] for o in out]
    assert cycles == list(range(cycles[0], cycles[0] + len(exp)))     # one copy per clock
    assert cycles[0] == 5


def test_engine_direct_descriptors():
    """``direct=True`` (the data path's engine): random descriptors mixing group reads,
    direct copies (unicast: one copy to ``dport``, rid 0) and the recirculation copy
    (port ``NOUT``, rid 0, prepended), under random back-pressure; the copies, their
    first/last flags, ``mcast_empty`` / ``bad_port`` and the ``land`` port's lists against
    the model's copy lists."""
    rng = random.Random(5)
    dut = ReplicationEngine(NOUT, NG, group_width=12, tag_width=8, fifo_depth=8, direct=True)
    words = {g: random_word(rng) for g in range(NG)}
    got, landed, sent = [], [], []
    counts = {"mcast_empty": 0, "bad_port": 0, "overflow": 0}

    async def tb(ctx):
        for g, w in words.items():
            await host_op(ctx, dut.mc, g, w)
        for cyc in range(2500):
            v = cyc < 2200 and rng.random() < 0.4
            d = dict(group=rng.choice([rng.randrange(NG), NG + 3]), tag=cyc & 0xFF,
                     direct=int(rng.random() < 0.5), dcopy=int(rng.random() < 0.8),
                     dport=rng.randrange(NOUT), rc=int(rng.random() < 0.3))
            ctx.set(dut.i.valid, v)
            for k_, val in d.items():
                ctx.set(getattr(dut.i.payload, k_), val)
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid) and ready:
                p = ctx.get(dut.o.payload)
                got.append((p.port, p.rid, p.tag, p.first, p.last))
            if ctx.get(dut.land.valid):
                lp = ctx.get(dut.land.payload)
                made = [((lp.copies >> (20 * s)) & 0xF, (lp.copies >> (20 * s + 4)) & 0xFFFF)
                        for s in range(dut.slots) if lp.made >> s & 1]
                landed.append((lp.tag, made))
            for k_ in counts:
                counts[k_] += ctx.get(getattr(dut.cnt, k_))
            if ctx.get(dut.cnt.overflow):
                sent.pop()
            if v:
                sent.append(d)
            await ctx.tick()

    run(tb, dut)
    expected, exp_landed, empty, bad = [], [], 0, 0
    for d in sent:
        made = [(NOUT, 0)] if d["rc"] else []
        if d["direct"]:
            made += [(d["dport"], 0)] if d["dcopy"] else []
        else:
            g_made, nbad = group_copies(words[d["group"]], NOUT) if d["group"] < NG else ([], 0)
            bad += nbad
            if not g_made and not nbad:
                empty += 1
            made += g_made
        exp_landed.append((d["tag"], made))
        for i, (port, rid) in enumerate(made):
            expected.append((port, rid, d["tag"], int(i == 0), int(i == len(made) - 1)))
    assert counts["overflow"] > 0 and len(sent) > 400
    assert got == expected
    assert landed == exp_landed
    assert counts["mcast_empty"] == empty and counts["bad_port"] == bad


def test_engine_express_latency():
    """The express way: an idle engine's direct descriptor has its first copy on ``o`` one
    cycle after ``i`` (a group descriptor's, 5 cycles); a direct descriptor behind a group
    descriptor still waits its turn (list order across packets); unicast descriptors on
    consecutive cycles each take the express way (each copy one cycle after its descriptor)."""
    dut = ReplicationEngine(NOUT, NG, group_width=12, tag_width=8, fifo_depth=8, direct=True)
    seen = []

    async def tb(ctx):
        await host_op(ctx, dut.mc, 7, encode_group([(1, 11), (2, 22)]))
        ctx.set(dut.o.ready, 1)
        plan = {10: dict(direct=1, dcopy=1, dport=3, rc=0, tag=1),     # idle: express
                30: dict(direct=0, group=7, rc=0, tag=2),               # group read: 5 cycles
                31: dict(direct=1, dcopy=1, dport=0, rc=1, tag=3),      # behind it: waits
                60: dict(direct=1, dcopy=1, dport=2, rc=1, tag=4),      # idle, two copies
                # unicast back to back: each the express way as the one before leaves
                70: dict(direct=1, dcopy=1, dport=1, rc=0, tag=5),
                71: dict(direct=1, dcopy=1, dport=2, rc=0, tag=6),
                72: dict(direct=1, dcopy=1, dport=0, rc=0, tag=7)}
        for cyc in range(90):
            d = plan.get(cyc)
            ctx.set(dut.i.valid, d is not None)
            if d:
                for k_ in ("group", "tag", "direct", "dcopy", "dport", "rc"):
                    ctx.set(getattr(dut.i.payload, k_), d.get(k_, 0))
            if ctx.get(dut.o.valid):
                p = ctx.get(dut.o.payload)
                seen.append((cyc, p.port, p.rid, p.tag))
            await ctx.tick()

    run(tb, dut)
    assert seen == [(11, 3, 0, 1),
                    (35, 1, 11, 2), (36, 2, 22, 2),
                    (37, NOUT, 0, 3), (38, 0, 0, 3),
                    (61, NOUT, 0, 4), (62, 2, 0, 4),
                    (71, 1, 0, 5), (72, 2, 0, 6), (73, 0, 0, 7)], seen
