"""CompletionSynth in the copy lane's form (``miss_events``: the data path's own events) in
Amaranth simulation, against hand-worked cycles: a miss event reaches ``o`` two cycles after its
pulse (registered on entry, then the pending slot; one cycle before d27b9af, which each case
here would catch); simultaneous events of different sources all come out, lowest source first, none lost;
a second event of one source while its first is still pending (``o`` stalled) is lost and
pulses ``lost`` one cycle after it (as the event reaches the slot)."""
from __future__ import annotations

from amaranth.sim import Simulator

from .tx_completion import CompletionSynth

TW = 16


def _dut():
    return CompletionSynth(n_ports=2, port=0, data_width=64, user_width=32, tx_user=17,
                           miss_events=4)


def _run(bench):
    dut = _dut()
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def tb(ctx):
        await bench(ctx, dut)
    sim.add_testbench(tb)
    sim.run()


def _miss(dut, ctx, i, tag, valid=1):
    ctx.set(dut.miss[i], (tag << 1) | valid)


def test_miss_event_two_cycles_to_o():
    seen = {}

    async def bench(ctx, dut):
        ctx.set(dut.o.ready, 0)
        for c in range(8):
            if c == 1:
                _miss(dut, ctx, 3, 0x1234)       # (4) own copy stale, at cycle 1
            else:
                ctx.set(dut.miss[3], 0)
            await ctx.delay(1e-9)
            seen[c] = (ctx.get(dut.o.valid), ctx.get(dut.o.payload))
            await ctx.tick()

    _run(bench)
    assert [seen[c][0] for c in range(8)] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert seen[3][1] == 0x1234


def test_simultaneous_sources_lowest_first_none_lost():
    out, lost = [], []

    async def bench(ctx, dut):
        ctx.set(dut.o.ready, 1)
        for c in range(12):
            for i in range(4):
                _miss(dut, ctx, i, 0x100 + i, valid=int(c == 2 and i != 1))
            await ctx.delay(1e-9)
            if ctx.get(dut.o.valid):
                out.append((c, ctx.get(dut.o.payload)))
            lost.append(ctx.get(dut.lost))
            await ctx.tick()

    _run(bench)
    # events at cycle 2 -> slots at 4 -> one taken per cycle, lowest source first
    assert out == [(4, 0x100), (5, 0x102), (6, 0x103)]
    assert not any(lost)


def test_second_event_while_pending_is_lost():
    out, lost = [], []

    async def bench(ctx, dut):
        for c in range(12):
            ctx.set(dut.o.ready, int(c >= 8))
            tag = {1: 0xA, 3: 0xB}.get(c)
            _miss(dut, ctx, 0, tag or 0, valid=int(tag is not None))
            await ctx.delay(1e-9)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                out.append((c, ctx.get(dut.o.payload)))
            lost.append(ctx.get(dut.lost))
            await ctx.tick()

    _run(bench)
    # 0xA pending from cycle 3 until taken at 8; 0xB reaches the slot at cycle 4: lost
    assert out == [(8, 0xA)]
    assert [c for c, v in enumerate(lost) if v] == [4]
