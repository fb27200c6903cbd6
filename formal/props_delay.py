"""Formal harness for :class:`~netstor.gateware.delay.DelayLine`.

``DelayProps(width, cycles)``: ``i`` is free every cycle; a shadow shift register of
``cycles`` stages (written here, from the definition) holds the inputs of the last
``cycles`` cycles. Asserted every cycle from reset: ``o == i`` of exactly ``cycles`` cycles
earlier (the DUT's registers and memory start at 0, so for the first ``cycles`` cycles the
expected value is 0, the shadow's reset value), except in the very first cycle of the memory
version: its output is the memory read port's register, to which Amaranth gives no initial
value (``INIT_VALUE`` x in RTLIL), so ``o`` is undefined until the first clock edge. ``cycles <= 4`` is the register chain,
``cycles > 4`` the memory ring (depth ``2**ceil(log2(cycles))``, synchronous read).

For k-induction on the memory version the harness states the ring's invariant (each of the
``cycles - 1`` most recently written ring entries equals the matching shadow stage, and the
read register holds the oldest one), reading the ring through extra asynchronous read ports
on the DUT's memory.

Cover: an output equal to a non-zero input of ``cycles`` cycles earlier, after reset.
"""

from amaranth.hdl import Assert, Cover, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from netstor.gateware.delay import DelayLine
from props_packet_buffer import _started
from common import elaborate_inline

__all__ = ["DelayProps"]


class DelayProps(wiring.Component):
    def __init__(self, width=3, cycles=3):
        self.width, self.cycles = width, cycles
        self.dut = DelayLine(width, cycles)
        super().__init__({"i": In(width), "o": Out(width)})

    def elaborate(self, platform):
        m = Module()
        dut, n, w = self.dut, self.cycles, self.width
        mod = elaborate_inline(dut, platform)
        m.submodules.dut = mod
        m.d.comb += [dut.i.eq(self.i), self.o.eq(dut.o)]
        started = _started(m)
        sh = [Signal(w, name=f"sh{k}") for k in range(n)]    # sh[k] = i of k+1 cycles ago
        prev = self.i
        for k in range(n):
            m.d.sync += sh[k].eq(prev)
            prev = sh[k]
        if n > 4:
            # the ring's read register has no defined power-up value (Amaranth emits
            # INIT_VALUE x for a memory read port): cycle 0 is excluded
            m.d.comb += Assert(~started | (dut.o == prev))
        else:
            m.d.comb += Assert(dut.o == prev)
        if n > 4:
            mem = mod.submodules.mem
            depth = mem.depth
            bits = (depth - 1).bit_length()
            ptr_reads = []
            # the DUT's write pointer is the only counter: recover it from its write port
            wp = mem.write_ports[0]
            ptr = wp.addr
            for k in range(1, n):
                # the entry written k cycles ago (address ptr - k) holds sh[k-1]
                p = mem.read_port(domain="comb")
                m.d.comb += p.addr.eq((ptr - k)[:bits])
                ptr_reads.append(p)
                m.d.comb += Assert(p.data == sh[k - 1])
        nz = Signal()
        m.d.comb += nz.eq(prev != 0)
        m.d.comb += Cover(started & nz & (dut.o == prev))
        return m
