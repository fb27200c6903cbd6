"""cocotb/Verilator test of the control block (``netstor.gateware.csr.AxiLiteCsr``).

The test top declares a few registers, three counters fed by a free-running pattern and two
memories (``fast`` acks combinationally in the request cycle, ``slow`` after a pseudo-random
delay plus the ``test.stall`` register), builds the control block and exposes its AXI-Lite
port. ``sim/cocotb_csr.py`` drives it with cocotbext-axi and :class:`AsyncCsrClient`; the
schema and the memories' initial contents reach it in a JSON file (``CSR_TEST_PARAMS``).
"""
from __future__ import annotations

import json

import pytest
from amaranth.hdl import Module, Signal, Array
from amaranth.lib import wiring
from amaranth.lib.memory import Memory

from netstor.sim.harness import BUILD, elaborate, run_cocotb
from netstor.gateware.csr import CsrBuilder, axil_slave_signature, NETSTOR_APP_ID

FAST_W, FAST_DEPTH = 40, 16
SLOW_W, SLOW_DEPTH = 72, 5
INIT_FAST = [(i * 0x9E3779B97F + 0x1111) % 2**FAST_W for i in range(FAST_DEPTH)]
INIT_SLOW = [((i + 1) * 0x1234567890ABCDEF1) % 2**SLOW_W for i in range(SLOW_DEPTH)]
VERSION = (3, 7)


class CsrTestTop(wiring.Component):
    """Test top: the control block plus the gateware that owns its registers and memories."""

    def __init__(self):
        b = CsrBuilder()
        self.ctl = b.reg("ctl", 32, "rw", 0x12345678, doc="plain rw word")
        self.small = b.reg("small", 12, "rw", 0x5, doc="12-bit rw")
        self.wide = b.reg("wide", 48, "rw", 0, doc="48-bit rw (two words)")
        self.dotted = b.reg("blk.dotted", 8, "rw", 0xA5, doc="dotted name")
        self.stall = b.reg("test.stall", 8, "rw", 0, doc="extra ack delay of memory slow")
        self.mirror = b.reg("mirror", 32, "ro", doc="~ctl")
        self.wide_mirror = b.reg("wide_mirror", 48, "ro", doc="wide + 1")
        b.reg("const", 20, "ro", 0xABCDE, doc="undriven ro register: its reset value")
        self.c_cycles = b.counter("cnt.cycles", 1, doc="+1 per cycle")
        self.c_pattern = b.counter("cnt.pattern", 3, doc="+ (t mod 8) per cycle")
        self.c_big = b.counter("cnt.big", 32, doc="+0xFFFFFFFF per cycle")
        self.fast = b.memory("fast", FAST_W, FAST_DEPTH, doc="acks in the request cycle",
                             kind="test")
        self.slow = b.memory("slow", SLOW_W, SLOW_DEPTH, doc="acks after a delay", kind="test")
        self.csr, self.schema = b.build(app_id=NETSTOR_APP_ID, version=VERSION,
                                        schema_extra={"test": {"top": "CsrTestTop"}})
        super().__init__(axil_slave_signature(b.addr_width))

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = self.csr
        wiring.connect(m, wiring.flipped(self), self.csr)

        t = Signal(32)
        m.d.sync += t.eq(t + 1)
        m.d.comb += [
            self.mirror.eq(~self.ctl),
            self.wide_mirror.eq(self.wide + 1),
            self.c_cycles.eq(1),
            self.c_pattern.eq(t[:3]),
            self.c_big.eq(0xFFFF_FFFF),
        ]

        # memory "fast": combinational read, ack = req
        fp = self.fast
        m.submodules.fast_mem = fmem = Memory(shape=FAST_W, depth=FAST_DEPTH, init=INIT_FAST)
        rp = fmem.read_port(domain="comb")
        wp = fmem.write_port()
        m.d.comb += [
            rp.addr.eq(fp.addr), fp.rdata.eq(rp.data), fp.ack.eq(fp.req),
            wp.addr.eq(fp.addr), wp.data.eq(fp.wdata), wp.en.eq(fp.req & fp.we),
        ]

        # memory "slow": waits lfsr[3:0] + stall cycles, then a registered one-cycle ack
        sp = self.slow
        cells = Array(Signal(SLOW_W, init=v, name=f"slow{i}") for i, v in enumerate(INIT_SLOW))
        lfsr = Signal(16, init=0xACE1)
        m.d.sync += lfsr.eq((lfsr << 1) | (lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10]))
        delay = Signal(9)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(sp.req):
                    m.d.sync += delay.eq(lfsr[:4] + self.stall)
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(delay == 0):
                    m.d.sync += [sp.ack.eq(1), sp.rdata.eq(cells[sp.addr])]
                    with m.If(sp.we):
                        m.d.sync += cells[sp.addr].eq(sp.wdata)
                    m.next = "ACK"
                with m.Else():
                    m.d.sync += delay.eq(delay - 1)
            with m.State("ACK"):
                m.d.sync += sp.ack.eq(0)
                m.next = "IDLE"
        return m


@pytest.mark.cocotb
def test_csr_cocotb():
    top = CsrTestTop()
    verilog_text = elaborate(top, "csr_top")
    params = BUILD / "csr" / "params.json"
    params.parent.mkdir(parents=True, exist_ok=True)
    params.write_text(json.dumps({
        "schema": top.schema, "init_fast": INIT_FAST, "init_slow": INIT_SLOW,
        "version": list(VERSION)}, indent=1))
    run_cocotb("csr", "cocotb_csr", toplevel="csr_top", verilog_text=verilog_text,
               extra_env={"CSR_TEST_PARAMS": str(params)})
