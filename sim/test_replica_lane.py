"""ReplicaLane (gateware, Amaranth simulator): packets written once into the store, their copy
lists replayed, against the model's copy-list semantics (netstor.model.replication): every copy
of every packet in list order, each the packet's beats unchanged with its port and rid, copies
back to back while copies wait; then a small store under a multicast burst: copies whose packet
was overwritten are not sent (counted stale) and every copy sent is intact."""

import random

from amaranth.sim import Simulator

from netstor.gateware.replica_lane import ReplicaLane, LANE_LATENCY
from netstor.model.replication import encode_group, group_copies

NOUT, NG = 4, 32


async def host_write(ctx, mc, addr, wdata):
    ctx.set(mc.req, 1)
    ctx.set(mc.we, 1)
    ctx.set(mc.addr, addr)
    ctx.set(mc.wdata, wdata)
    while True:
        await ctx.tick()
        if ctx.get(mc.ack):
            ctx.set(mc.req, 0)
            await ctx.tick()
            return


def random_word(rng):
    k = rng.choice([0, 1, 2, 3, 4, 16])
    return encode_group([(rng.randrange(NOUT) if rng.random() < 0.9 else rng.randrange(NOUT, 16),
                          rng.randrange(1 << 16)) for _ in range(k)])


def random_packet(rng, n):
    """``n`` beats: (data, keep, last, len, port, user) per beat."""
    length = 64 * (n - 1) + rng.randrange(1, 65)
    beats = []
    for k in range(n):
        nb = min(64, length - 64 * k)
        beats.append((rng.getrandbits(512), (1 << nb) - 1, int(k == n - 1), length,
                      rng.randrange(16), rng.randrange(8)))
    return beats


def run_lane(rng, *, ring, n_packets, gap, burst=False):
    dut = ReplicaLane(NOUT, n_groups=NG, ring_beats=ring, user_width=3, fifo_depth=16)
    words = {g: random_word(rng) for g in range(NG)}
    words[1] = encode_group([(2, 5)] * 16)              # 16 copies on one port
    words[2] = encode_group([(1, 9), (7, 1), (1, 10)])   # a bad port between two copies
    pkts = []
    for i in range(n_packets):
        n = rng.choice([1, 1, 2, 3, 5, 24, rng.randrange(1, 25)])
        g = rng.choice([1, 2, rng.randrange(NG), NG + 3 if rng.random() < 0.05 else 0])
        if burst:
            g = rng.choice([1, 1, 2])
        pkts.append((random_packet(rng, n), g))
    got = []                 # (cport, rid, copy_first, copy_last, [beats])
    cycles_out = []
    counts = {"stale": 0, "bad_port": 0, "mcast_empty": 0, "overflow": 0}

    async def tb(ctx):
        for g, w in words.items():
            await host_write(ctx, dut.mc, g, w)
        cur = None
        pending = []                                    # descriptors due after last beats
        cyc = 0
        feed = []
        for beats, g in pkts:
            feed += [(beats, g, k) for k in range(len(beats))]
            feed += [None] * rng.choice(gap)
        start = None
        quiet = 0
        while quiet < 100 or pending:
            if feed:
                ev = feed.pop(0)
            else:
                ev = None
                quiet = 0 if ctx.get(dut.o.valid) else quiet + 1
            if ev is None:
                ctx.set(dut.beat_in.valid, 0)
            else:
                beats, g, k = ev
                if k == 0:
                    start = ctx.get(dut.count)
                d, keep, last, ln, port, user = beats[k]
                ctx.set(dut.beat_in.valid, 1)
                p = dut.beat_in.payload
                ctx.set(p.data, d)
                ctx.set(p.keep, keep)
                ctx.set(p.last, last)
                ctx.set(p.len, ln)
                ctx.set(p.port, port)
                ctx.set(p.user, user)
                if last and g:                      # group 0: unicast, not the lane's
                    pending.append((cyc + 1, g, start, len(beats)))
            # a descriptor the cycle after its packet's last beat was written
            if pending and pending[0][0] <= cyc:
                _, dg, dstart, dn = pending.pop(0)
                ctx.set(dut.desc.valid, 1)
                ctx.set(dut.desc.payload.group, dg)
                ctx.set(dut.desc.payload.start, dstart)
                ctx.set(dut.desc.payload.nbeats, dn)
            else:
                ctx.set(dut.desc.valid, 0)
            for c in counts:
                counts[c] += ctx.get(getattr(dut.cnt, c))
            if ctx.get(dut.o.valid):
                o = ctx.get(dut.o.payload)
                beat = (o.data, o.keep, o.last, o.len, o.port, o.user)
                if o.first:
                    assert cur is None
                    cur = (o.cport, o.rid, o.copy_first, o.copy_last, [])
                    assert o.index == 0
                else:
                    assert cur is not None and o.index == min(len(cur[4]), 3)
                cur[4].append(beat)
                cycles_out.append(cyc)
                if o.last:
                    got.append(cur)
                    cur = None
            await ctx.tick()
            cyc += 1
        assert cur is None

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return pkts, words, got, counts, cycles_out


def expected(pkts, words):
    exp, bad, empty = [], 0, 0
    for beats, g in pkts:
        if g == 0:
            continue
        made, b = group_copies(words[g], NOUT) if g < NG else ([], 0)
        bad += b
        empty += not made and not b
        for i, (port, rid) in enumerate(made):
            exp.append((port, rid, int(i == 0), int(i == len(made) - 1), beats))
    return exp, bad, empty


def test_lane_against_model():
    rng = random.Random(3)
    pkts, words, got, counts, cycles = run_lane(rng, ring=1024, n_packets=70,
                                                gap=[0, 0, 5, 60, 400])
    exp, bad, empty = expected(pkts, words)
    assert counts["stale"] == 0 and counts["overflow"] == 0
    assert len(got) == len(exp) > 150
    for k, (g, e) in enumerate(zip(got, exp)):
        assert (g[0], g[1], g[2], g[3]) == e[:4], k
        assert g[4] == e[4], k
    assert counts["bad_port"] == bad > 0 and counts["mcast_empty"] == empty > 0
    # back to back: while copies wait the lane sends a beat every clock (the 16-copy group
    # of 24-beat packets alone gives long runs)
    runs, run = [], 1
    for a, b in zip(cycles, cycles[1:]):
        if b == a + 1:
            run += 1
        else:
            runs.append(run)
            run = 1
    assert max(runs + [run]) >= 200


def test_lane_small_store_stale_copies():
    """A 64-beat store and back-to-back packets to the 16-copy group: the store is overwritten
    while copies wait. A copy is either sent intact (every beat its packet's) or not at all
    (stale), never torn; the copies sent are a subsequence of the expected, in order."""
    rng = random.Random(8)
    pkts, words, got, counts, _ = run_lane(rng, ring=64, n_packets=40, gap=[0], burst=True)
    exp, _, _ = expected(pkts, words)
    assert counts["stale"] > 0
    i = 0
    for g in got:
        while i < len(exp) and (exp[i][0], exp[i][1], exp[i][4]) != (g[0], g[1], g[4]):
            i += 1
        assert i < len(exp), "a copy sent that is not its packet's (torn or out of order)"
        i += 1
