"""The GF engine's frame-path pieces (:mod:`netstor.gateware.gf_path`) in the Amaranth
simulator against the golden model.

* The header-path half of ``GFAccumulate`` (the control shadow, 16 banks): random packets one
  per clock (or with gaps), most of them on a few slots of two ops (back-to-back packets on
  one slot; packets split differently, so statuses absorbed / done / dup / split all occur),
  out-of-range and misaligned ones: each packet's status and the tap equal the model's
  (``GFAccumulate.run`` on the same packets in the same order).
* ``GFScaleBeats``: copies of random lengths, scaled per copy, against ``bytes.translate``
  of ``netstor.model.gf``'s table (and a hand-computed product).
"""
from __future__ import annotations

import random

from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from netstor.elements.gf import (GFAccumulate, SLOT_BITS, ST_ABSORBED, ST_BAD, ST_DONE,
                                 ST_DUP, ST_MISALIGNED, ST_SPLIT)
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.gf_path import ACC_LATENCY, GFScaleBeats
from netstor.gateware.kit import HwEnv
from netstor.gateware.stages import build_element
from netstor.lang import Pipeline, Program
from netstor.model import gf

OPS, CB = 4, 32


def _program():
    p = Program("t")
    f = {n: p.meta(n, w) for n, w in (("op", 16), ("off", 16), ("coeff", 8), ("src", 4),
                                      ("need", 5), ("len", 16), ("status", 3), ("go", 1))}
    el = p.add(GFAccumulate("eng", op=f["op"], off=f["off"], coeff=f["coeff"], src=f["src"],
                            need=f["need"], length=f["len"], status=f["status"], n_ops=OPS,
                            chunk_beats=CB, max_beats=16, when=f["go"] == 1))
    return Pipeline([p]), el


def _packets(rng, n):
    out = []
    for _ in range(n):
        if rng.random() < 0.1:
            out.append(None)
            continue
        if rng.random() < 0.8:                           # hot: a few slots, all valid
            length = rng.choice([64, 100, 512, 1024])
            out.append(dict(op=rng.randrange(2), off=rng.choice([0, 8, 16]),
                            coeff=rng.randrange(256), src=rng.randrange(6),
                            need=rng.choice([1, 2, 3, 3, 4]), len=length, go=1, vlan=0, ihl=5,
                            pkt_len=128 + length))
            continue
        op = rng.choice([0, 1, 1, 3, 5])                 # 5: out of range
        off = rng.choice([0, 0, 4, 8, 16, 30])
        length = rng.choice([1, 64, 65, 200, 256, 512, 1024, 1025])
        need = rng.choice([1, 2, 3, 3, 0])
        out.append(dict(op=op, off=off, coeff=rng.randrange(256), src=rng.randrange(4),
                        need=need, len=length, go=int(rng.random() < 0.95),
                        vlan=int(rng.random() < 0.05), ihl=5 if rng.random() < 0.95 else 6,
                        pkt_len=128 + length + rng.choice([0, 0, 10, -1])))
    return out


def _run_hw(packets, timeout=0):
    """The shadow on ``packets`` (one per cycle, None: idle), the host's ``timeout`` written
    first. Returns ``(outputs, timeouts counted, latency)``."""
    pl, el = _program()
    m = Module()
    csr = CsrBuilder()
    layout = data.StructLayout(pl.phv.layout())
    vin, phv_in = Signal(), Signal(layout)
    vout, pout, lat = build_element(m, el, pl, vin, phv_in, csr, prefix="ga")
    fi = lambda n: HwEnv(pl, phv_in).field(n)            # noqa: E731
    fo = lambda n: HwEnv(pl, pout).field(n)              # noqa: E731
    tap = el.payload_tap
    tport = next(mi.port for mi in csr.memories if mi.name == "t.eng.timeout")
    tinc = next(c.inc for c in csr.counters if c.name == "t.eng.timeouts")
    eport = next(mi.port for mi in csr.memories if mi.name == "t.eng.expired")
    got, n_to, expired = [], [0], []

    async def host(ctx, addr, we=0, wdata=0):
        """One host access to ``.expired`` (the control block's protocol: req until ack)."""
        ctx.set(eport.req, 1)
        ctx.set(eport.we, we)
        ctx.set(eport.addr, addr)
        ctx.set(eport.wdata, wdata)
        for _ in range(8):
            await ctx.tick()
            if ctx.get(eport.ack):
                rd = ctx.get(eport.rdata)
                ctx.set(eport.req, 0)
                await ctx.tick()
                return rd
        raise AssertionError("no ack from .expired")

    async def bench(ctx):
        ctx.set(tport.req, 1)
        ctx.set(tport.we, 1)
        ctx.set(tport.wdata, timeout)
        await ctx.tick()
        ctx.set(tport.req, 0)
        await ctx.tick()
        assert ctx.get(tport.rdata) == timeout
        for cyc in range(len(packets) + lat + 2):
            pk = packets[cyc] if cyc < len(packets) else None
            ctx.set(vin, int(pk is not None))
            if pk is not None:
                for n in ("op", "off", "coeff", "src", "need", "len", "status", "go"):
                    ctx.set(fi(f"t.m.{n}"), pk[n] if n != "status" else 0)
                ctx.set(fi("meta.vlan_valid"), pk["vlan"])
                ctx.set(fi("ipv4.ver_ihl"), 0x40 | pk["ihl"])
                ctx.set(fi("meta.pkt_len"), pk["pkt_len"])
            await ctx.tick()
            n_to[0] += ctx.get(tinc)
            if ctx.get(vout):
                got.append((ctx.get(fo("t.m.status")), ctx.get(tap["run"]),
                            ctx.get(tap["status"]), ctx.get(tap["op"]), ctx.get(tap["off"]),
                            ctx.get(tap["coeff"]), ctx.get(tap["length"])))
        for _ in range(OPS + 8):                      # the scanner's last round
            await ctx.tick()
            n_to[0] += ctx.get(tinc)
        expired.extend([await host(ctx, op) for op in range(OPS)])
        # the host may write a word (clear it) and reads back what it wrote
        await host(ctx, 1, we=1, wdata=0xFFFFFFFF)
        assert await host(ctx, 1) == 0xFFFFFFFF
        await host(ctx, 1, we=1, wdata=expired[1])
        assert [await host(ctx, op) for op in range(OPS)] == expired

    sim = Simulator(m)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    _run_hw.expired = expired
    return got, n_to[0], lat, el


def _run_model(el, packets, timeout=0):
    """The element's own ``run()`` over the same packets in the same order (a dummy frame of
    the length; ``meta.arrival`` = the packet's cycle). Returns ``(wanted, counts)``."""
    state = ([0] * (OPS * CB), [0] * OPS, [timeout], [0] * OPS)
    _run_model.expired = state[3]
    counts = {}
    want = []
    for cyc, pk in enumerate(packets):
        if pk is None:
            continue
        if not pk["go"]:
            want.append((0, 0))
            continue
        frame = bytes(max(pk["pkt_len"], 0))
        _f, st = el.run(state, lambda n: counts.__setitem__(n, counts.get(n, 0) + 1), frame,
                        pk["op"], pk["off"], pk["coeff"], pk["src"], pk["need"], pk["len"],
                        pk["vlan"], 0x40 | pk["ihl"], pk["pkt_len"], cyc)
        want.append((st, int(st in (ST_ABSORBED, ST_DONE, ST_DUP, ST_SPLIT))))
    return want, counts


def _compare(got, want, packets):
    assert len(got) == len(want)
    seen = set()
    for i, ((st, run, tst, op, off, coeff, length), (wst, wrun), pk) in enumerate(
            zip(got, want, [p for p in packets if p is not None])):
        assert (st, run) == (wst, wrun), f"packet {i} {pk}: hw {(st, run)} model {(wst, wrun)}"
        if run:
            # the tap's op carries the op's generation above the id
            assert tst == st and (op % OPS, off, coeff, length) == (pk["op"], pk["off"],
                                                                   pk["coeff"], pk["len"])
        seen.add(st)
    return seen


def test_accumulate_status_equals_model():
    rng = random.Random(7)
    packets = _packets(rng, 400)
    got, n_to, lat, el = _run_hw(packets)
    assert lat == ACC_LATENCY == 3
    want, _counts = _run_model(el, packets)
    seen = _compare(got, want, packets)
    assert {ST_ABSORBED, ST_DONE, ST_DUP, ST_SPLIT, ST_BAD, ST_MISALIGNED} <= seen, seen
    assert SLOT_BITS == 541 and n_to == 0


def test_accumulate_timeout_equals_model():
    """A nonzero timeout: bursts of packets on a few slots (ages inside a burst below the
    timeout) with idle gaps longer than the timeout plus the scanner's window, so every
    op left with open slots at the end of a burst is freed before the next (its partial slots
    read free: a later contribution starts a new sum) in the RTL as in the model; each
    packet's status equals the model's, and the timeouts counted are the model's (a last
    packet after the last gap makes the model count the last burst's)."""
    rng = random.Random(11)
    T, burst, gap = 40, 25, 60
    packets = []
    for _ in range(10):
        packets += [p if rng.random() < 0.8 else None for p in _packets(rng, burst)]
        packets += [None] * gap
    packets.append(dict(op=3, off=0, coeff=1, src=0, need=1, len=64, go=1, vlan=0, ihl=5,
                        pkt_len=192))
    got, n_to, _lat, el = _run_hw(packets, timeout=T)
    want, counts = _run_model(el, packets, timeout=T)
    _compare(got, want, packets)
    assert counts.get("t.eng.timeouts", 0) == n_to >= 5, (counts, n_to)
    # the per-op expired count (the core's host memory, the model's) equal, op by op
    assert _run_hw.expired == _run_model.expired and sum(_run_hw.expired) == n_to
    assert sum(1 for x in _run_hw.expired if x) >= 2
    # without the timeout the same packets give other statuses (the slots stay live)
    want0, _c = _run_model(el, packets, timeout=0)
    assert want0 != want


def test_scale_beats():
    rng = random.Random(3)
    lay = data.StructLayout({"data": 512, "first": 1, "tag": 8})
    dut = GFScaleBeats(lay)
    copies = []
    for i in range(12):
        n = rng.choice([1, 2, 3, 5, 18])
        length = rng.randrange(0, 64 * max(n - 2, 0) + 1)
        copies.append((rng.randrange(256), length, rng.random() < 0.8,
                       [rng.randbytes(64) for _ in range(n)]))
    # the schedule: per copy its arguments one cycle, then its beats back to back
    sched = []
    for coeff, length, run, beats in copies:
        sched.append(("arg", coeff, length, run))
        sched += [("beat", j, b) for j, b in enumerate(beats)]
    sched += [None] * 6
    out = []

    async def bench(ctx):
        for ev in sched:
            ctx.set(dut.arg_valid, 0)
            ctx.set(dut.i_valid, 0)
            if ev and ev[0] == "arg":
                ctx.set(dut.arg_valid, 1)
                ctx.set(dut.arg_coeff, ev[1])
                ctx.set(dut.arg_length, ev[2])
                ctx.set(dut.arg_run, int(ev[3]))
            elif ev:
                ctx.set(dut.i_valid, 1)
                ctx.set(dut.i.data, int.from_bytes(ev[2], "little"))
                ctx.set(dut.i.first, int(ev[1] == 0))
                ctx.set(dut.i.tag, ev[1])
            await ctx.tick()
            if ctx.get(dut.o_valid):
                out.append(ctx.get(dut.o.data).to_bytes(64, "little"))

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    table = [bytes(r) for r in gf.mul_table()]
    want = []
    for coeff, length, run, beats in copies:
        fr = b"".join(beats)
        if run:
            fr = fr[:128] + fr[128:128 + length].translate(table[coeff]) + fr[128 + length:]
        want += [fr[64 * j:64 * j + 64] for j in range(len(beats))]
    assert out == want
    assert table[2][0x80] == 0x1D and table[0x80][2] == 0x1D     # x^8 = x^4+x^3+x^2+1
