"""Fixed-latency delay line: ``o`` equals ``i`` from exactly ``cycles`` clocks earlier.

Used to hold frame beats (and the parser's original-field record) while their header travels
the match-action pipeline, whose latency is fixed because nothing in it ever stalls. Short
delays are a register chain; longer ones a simple dual-port memory (one write and one
synchronous read per clock, BRAM/LUTRAM) plus one output register.
"""

from amaranth.hdl import Signal, Module, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.lib.memory import Memory

__all__ = ["DelayLine"]


class DelayLine(wiring.Component):
    def __init__(self, width, cycles):
        if cycles < 0:
            raise ValueError("delay must be non-negative")
        self.width, self.cycles = width, cycles
        super().__init__({"i": In(width), "o": Out(width)})

    def elaborate(self, platform):
        m = Module()
        n = self.cycles
        if n <= 4:
            prev = self.i
            for k in range(n):
                r = Signal(self.width, name=f"d{k}")
                m.d.sync += r.eq(prev)
                prev = r
            m.d.comb += self.o.eq(prev)
            return m
        # memory of depth >= n-1: write at wp, read the entry written n-1 cycles ago
        # (sync read adds the last cycle)
        depth = 1 << (n - 1).bit_length()
        bits = (depth - 1).bit_length()
        mem = Memory(shape=self.width, depth=depth, init=[])
        m.submodules.mem = mem
        wp, rp = mem.write_port(), mem.read_port()
        ptr = Signal(bits)
        m.d.sync += ptr.eq(ptr + 1)
        m.d.comb += [wp.addr.eq(ptr), wp.data.eq(self.i), wp.en.eq(1),
                     rp.addr.eq((ptr - (n - 1))[:bits]), rp.en.eq(1),
                     self.o.eq(rp.data)]
        return m
