"""cocotb checks of sim/lean_axis.py on a two-channel register-stage top (tb_lean).

* lean source -> DUT -> cocotbext AxiStreamSink (random back-pressure): frames and tuser equal;
* cocotbext AxiStreamSource (random idle) -> DUT -> lean sink (random back-pressure,
  capture="all" and "first"): frames and tuser equal;
* lean -> lean back-to-back: every output frame starts exactly one edge after its input frame
  (the register stage), no idle edge in between, beat counts equal; the cocotbext models on
  channel b run concurrently so both kinds coexist in one simulation.
"""
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from netstor.sim.lean_axis import LeanEngine, LeanSink, LeanSource


def pause_gen(rng, prob):
    while True:
        yield rng.random() < prob


def frames(rng, n):
    sizes = [1, 63, 64, 65, 127, 128, 129, 200, 1518] + [rng.randrange(1, 600) for _ in range(n)]
    return [(bytes(rng.getrandbits(8) for _ in range(s)), rng.getrandbits(16)) for s in sizes]


async def reset(dut):
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    for c in ("a", "b"):
        getattr(dut, f"s_{c}_tvalid").value = 0
        getattr(dut, f"m_{c}_tready").value = 1
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)


def user_of(f):
    u = f.tuser
    return u if isinstance(u, int) else (u[0] if u else 0)


@cocotb.test()
async def test_lean_source_vs_cocotbext_sink(dut):
    rng = random.Random(1)
    await reset(dut)
    eng = LeanEngine(dut.clk)
    src = eng.add(LeanSource(dut, "s_a", idle=pause_gen(rng, 0.2)))
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_a"), dut.clk, dut.rst)
    sink.set_pause_generator(pause_gen(rng, 0.3))
    fs = frames(rng, 40)
    for f, u in fs:
        src.send(f, u)
    assert await eng.run_until(lambda: src.idle_now(), timeout=20000)
    got = []
    for _ in fs:
        f = await sink.recv()
        got.append((bytes(f.tdata), user_of(f)))
    assert got == fs
    assert src.frames_sent == len(fs)
    assert src.beats == sum(max(1, -(-len(f) // 64)) for f, _ in fs)


@cocotb.test()
async def test_cocotbext_source_vs_lean_sink(dut):
    rng = random.Random(2)
    await reset(dut)
    eng = LeanEngine(dut.clk)
    sink_a = eng.add(LeanSink(dut, "m_a", pause=pause_gen(rng, 0.3), capture="all"))
    sink_b = eng.add(LeanSink(dut, "m_b", pause=pause_gen(rng, 0.5), capture="first"))
    src_a = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_a"), dut.clk, dut.rst)
    src_b = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_b"), dut.clk, dut.rst)
    src_a.set_pause_generator(pause_gen(rng, 0.2))
    fa, fb = frames(rng, 40), frames(rng, 20)
    for f, u in fa:
        await src_a.send(AxiStreamFrame(f, tuser=u))
    for f, u in fb:
        await src_b.send(AxiStreamFrame(f, tuser=u))
    assert await eng.run_until(lambda: len(sink_a.frames) == len(fa)
                               and len(sink_b.frames) == len(fb), timeout=30000)
    assert sink_a.frames == fa
    assert [(int.from_bytes(f[:64], "little"), len(f), u) for f, u in fb] == sink_b.frames


@cocotb.test()
async def test_lean_to_lean_timing(dut):
    """Back-to-back frames through one register stage: latency 1 edge, no gaps, and the
    cocotbext models keep working alongside on channel b."""
    rng = random.Random(3)
    await reset(dut)
    eng = LeanEngine(dut.clk)
    src = eng.add(LeanSource(dut, "s_a"))
    sink = eng.add(LeanSink(dut, "m_a", capture="all"))
    xsrc = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_b"), dut.clk, dut.rst)
    xsink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_b"), dut.clk, dut.rst)
    fs = frames(rng, 60)
    xs = frames(rng, 5)
    for f, u in fs:
        src.send(f, u)
    for f, u in xs:
        await xsrc.send(AxiStreamFrame(f, tuser=u))
    assert await eng.run_until(lambda: len(sink.frames) == len(fs), timeout=20000)
    assert sink.frames == fs
    assert [b - a for a, b in zip(src.starts, sink.starts)] == [1] * len(fs)
    assert [b - a for a, b in zip(src.ends, sink.ends)] == [1] * len(fs)
    total = sum(max(1, -(-len(f) // 64)) for f, _ in fs)
    assert sink.beats == src.beats == total
    # gapless: the last frame ends exactly total-1 edges after the first started
    assert sink.ends[-1] - sink.starts[0] == total - 1
    assert src.busy_edges == total
    got = []
    for _ in xs:
        f = await xsink.recv()
        got.append((bytes(f.tdata), user_of(f)))
    assert got == xs
    # speed figure for the log
    eng2 = LeanEngine(dut.clk)
    s2 = eng2.add(LeanSource(dut, "s_a"))
    k2 = eng2.add(LeanSink(dut, "m_a", capture="first"))
    big = bytes(range(256)) * 8
    for _ in range(100):
        s2.send(big)
    eng.stop()
    import time
    t0 = time.perf_counter()
    await eng2.run_until(lambda: len(k2.frames) == 100, timeout=10000)
    dt = time.perf_counter() - t0
    dut._log.info("lean driver: %d beats in %.2f s = %.0f beats/s", k2.beats, dt, k2.beats / dt)
