"""RegisterOp's pipelined read-modify-write against the golden model (Amaranth simulator).

Random packets, one per clock or with gaps, most of them on two cells (back-to-back hits on
one cell), a conditional write that depends on the old value, and host reads and writes
through the bank's MemoryPort driven like the control block drives it. The reference is the
golden model (``RegisterOp.evaluate`` through :class:`netstor.model.dataplane.DataplaneModel`)
run over the packets in arrival order, each host access placed at its slot, which the test
reads off the port alone: an access acked in cycle a was performed in cycle a-1, after every
packet that entered before a-1-L and before every packet that entered after a-1-L (the one
that entered in a-1-L, L the latency, did not act: that is the free slot). Plus the bounded wait: with a packet
acting every clock, the bank pulses ``slot_request`` after ``HOST_PATIENCE`` cycles and a
one-cycle bubble answering it gets the access served; the arbiter turns ``hold`` into that
bubble.
"""
from __future__ import annotations

import random

from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from netstor.elements import RegisterOp
from netstor.gateware.arbiter import IngressArbiter
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.kit import HwEnv
from netstor.gateware.stages import build_element
from netstor.lang import Old, Pipeline, Program
from netstor.model.dataplane import DataplaneModel

W, DEPTH = 16, 8
L = RegisterOp.LATENCY


def _bank_program():
    p = Program("t")
    idx, a, b = p.meta("idx", 4), p.meta("a", W), p.meta("b", W)
    res = p.meta("res", W)
    bank = p.bank("bank", width=W, depth=DEPTH)
    # add a, unless the cell holds b (then keep it); result: the old value
    op = p.add(RegisterOp("op", bank, index=idx, update=lambda old: old + a,
                          write=(Old(W) != b), result=res, returns="old"))
    return Pipeline([p]), op


def _frame():
    eth = bytes(6) + bytes([2, 0, 0, 0, 0, 1]) + b"\x08\x00"
    return eth + bytes(46)


def _build():
    pl, op = _bank_program()
    m = Module()
    csr = CsrBuilder()
    layout = data.StructLayout(pl.phv.layout())
    vin, phv_in = Signal(), Signal(layout)
    vout, pout, lat = build_element(m, op, pl, vin, phv_in, csr, prefix="rb")
    return pl, op, m, csr.memories[0].port, vin, phv_in, vout, pout, lat


def _run(packets, host_ops, *, bubble_on_request=False, extra=40):
    """Drive ``packets`` (one per clock: ``None`` or ``(idx, a, b)``) and ``host_ops``
    (``(start cycle, we, addr, wdata)``, one at a time, each starting no earlier than
    given); return the outputs, the host completions and the slot-request cycles."""
    pl, op, m, port, vin, phv_in, vout, pout, lat = _build()
    assert lat == RegisterOp.LATENCY == 3
    f = lambda name: HwEnv(pl, phv_in).field(name)           # noqa: E731
    outs, done, pulses, entered = [], [], [], []

    async def bench(ctx):
        ops = list(host_ops)
        cur, started_at = None, None
        bubble = False
        for cyc in range(len(packets) + extra):
            pk = packets[cyc] if cyc < len(packets) else None
            if bubble:
                pk, bubble = None, False
            entered.append(pk)
            ctx.set(vin, int(pk is not None))
            if pk is not None:
                ctx.set(f("t.m.idx"), pk[0])
                ctx.set(f("t.m.a"), pk[1])
                ctx.set(f("t.m.b"), pk[2])
                ctx.set(f("t.m.res"), 0x5A5A)
            if cur is None and ops and ops[0][0] <= cyc:
                cur, started_at = ops.pop(0), cyc
                ctx.set(port.req, 1)
                ctx.set(port.we, cur[1])
                ctx.set(port.addr, cur[2])
                ctx.set(port.wdata, cur[3])
            elif cur is not None and cur == "drop":
                ctx.set(port.req, 0)
                cur = None
            # settle, then sample the combinational outputs of this cycle
            await ctx.delay(1e-9)
            if ctx.get(op.slot_request):
                pulses.append(cyc)
                if bubble_on_request:
                    bubble = True           # the bubble enters next cycle (the arbiter's)
            if ctx.get(vout):
                outs.append((cyc, ctx.get(HwEnv(pl, pout).field("t.m.res"))))
            if cur not in (None, "drop") and ctx.get(port.ack):
                done.append((cyc, started_at, cur, ctx.get(port.rdata)))
                cur = "drop"
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return pl, op, outs, done, pulses, entered


def _reference(pl, op, entered, done):
    """The golden model over the packets in arrival order, each host access at its slot:
    returns (expected result per packet, expected read data per host access, final cells)."""
    model = DataplaneModel(pl)
    bank = op.bank.qualname
    events = []                     # (slot cycle, order, kind, payload)
    for t, pk in enumerate(entered):
        if pk is not None:
            events.append((t + L, 1, "pkt", (t, pk)))
    for k, (ack_cyc, _, (_, we, addr, wdata), _) in enumerate(done):
        events.append((ack_cyc - 1, 0, "host", (k, we, addr, wdata)))
    events.sort(key=lambda e: (e[0], e[1]))
    results, reads = {}, {}
    for slot, _, kind, payload in events:
        if kind == "pkt":
            t, (idx, a, b) = payload
            phv = model.parse(_frame(), 0)
            model.assign(phv, [("t.m.idx", idx), ("t.m.a", a), ("t.m.b", b),
                               ("t.m.res", 0x5A5A)])
            model._run([op], phv)
            results[t] = model.view(phv, "t.m.res")
        else:
            k, we, addr, wdata = payload
            if we:
                model.mem_write(bank, addr, wdata)
            else:
                reads[k] = model.mem_read(bank, addr)
    return results, reads, list(model.memory(bank).words)


def _check(pl, op, outs, done, entered):
    results, reads, _ = _reference(pl, op, entered, done)
    got = {cyc - L: v for cyc, v in outs}
    assert sorted(got) == sorted(results)
    assert got == results
    for k, (_, _, (_, we, _, _), rdata) in enumerate(done):
        if not we:
            assert rdata == reads[k], k
    # no acting packet entered L+1 cycles before an ack (the access took that packet's slot)
    for ack_cyc, *_ in done:
        pk = entered[ack_cyc - 1 - L]
        assert pk is None or pk[0] >= DEPTH


def test_back_to_back_packets_and_host_accesses_match_the_model():
    rng = random.Random(12)
    n = 600
    packets = []
    for t in range(n):
        if rng.random() < 0.15:
            packets.append(None)
        else:
            idx = rng.choice([1, 1, 1, 5, 5, rng.randrange(16)])   # >= 8: out of range
            packets.append((idx, rng.randrange(1, 4), rng.choice([0, 7, 9, 12])))
    host = []
    t = 5
    for _ in range(40):
        host.append((t, rng.random() < 0.5, rng.choice([1, 5, rng.randrange(DEPTH)]),
                     rng.randrange(1 << W)))
        t += rng.randrange(3, 20)
    pl, op, outs, done, pulses, entered = _run(packets, host)
    assert len(done) == len(host)
    assert sum(1 for _, _, h, _ in done if h[1]) and sum(1 for _, _, h, _ in done if not h[1])
    _check(pl, op, outs, done, entered)


def test_host_access_waits_for_a_free_slot_then_asks_for_one():
    """A packet acting every clock: the access waits; after HOST_PATIENCE cycles the bank
    pulses slot_request; a bubble answering it gets the access done a few cycles later."""
    packets = [(3, 1, 0)] * 120
    # no bubble: the access never completes while packets act every clock
    pl, op, outs, done, pulses, entered = _run(packets, [(10, 1, 3, 1000)], extra=0)
    assert done == []
    P, R = RegisterOp.HOST_PATIENCE, RegisterOp.HOST_RETRY
    assert pulses and pulses[0] == 10 + P and all(b - a == R for a, b in zip(pulses, pulses[1:]))
    # with the bubble: served, and every packet's update still lands (model over the slots)
    pl, op, outs, done, pulses, entered = _run(packets, [(10, 1, 3, 1000), (10, 0, 3, 0)],
                                               bubble_on_request=True)
    assert len(done) == 2
    # req in cycle s, pulse in s+P, bubble enters in s+P+1, reaches C in s+P+L, access
    # performed in s+P+L+1, acked in s+P+L+2
    assert done[0][0] - done[0][1] == P + L + 2
    assert done[1][0] - done[1][1] <= P + L + 2
    _check(pl, op, outs, done, entered)


def test_arbiter_hold_makes_one_idle_cycle_between_packets():
    """IngressArbiter.hold: a held cycle grants nothing (and takes no beat), a packet in
    progress is not cut."""
    arb = IngressArbiter(1, data_width=8, user_width=1)
    seen = []

    async def bench(ctx):
        # one input with 1-beat packets always ready, beats 5-6 a 2-beat packet; hold in
        # cycles 3 (between packets) and 7 (beat 6 taken then: mid-packet, ignored)
        beats = [(1, 1)] * 5 + [(1, 0), (1, 1)] + [(1, 1)] * 4
        k = 0
        ctx.set(arb.o.ready, 1)
        for cyc in range(12):
            ctx.set(arb.hold, int(cyc in (3, 7)))
            if k < len(beats):
                ctx.set(arb.i[0].valid, 1)
                ctx.set(arb.i[0].payload.data, k)
                ctx.set(arb.i[0].payload.last, beats[k][1])
            else:
                ctx.set(arb.i[0].valid, 0)
            await ctx.delay(1e-9)
            took = ctx.get(arb.i[0].ready) and k < len(beats)
            seen.append((ctx.get(arb.o.valid), ctx.get(arb.o.payload.data)))
            if took:
                k += 1
            await ctx.tick()

    sim = Simulator(arb)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    valid = [v for v, _ in seen]
    # cycle 3 held -> output idle in cycle 4; the hold in cycle 7 does not cut beats 5-6
    assert valid == [0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]
    assert [d for v, d in seen if v] == list(range(10))
