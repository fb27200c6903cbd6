"""Fixed-latency delay line: ``o`` equals ``i`` from exactly ``cycles`` clocks earlier.

Used to hold frame beats (and the parser's original-field record) while their header travels
the match-action pipeline, whose latency is fixed because nothing in it ever stalls. Short
delays are a register chain; longer ones a simple dual-port memory (one write and one
synchronous read per clock, BRAM/LUTRAM) plus one output register.

* :class:`DelayLine`: a plain value, ``i`` -> ``o``.
* :class:`FrameDelay`: the arbiter's beat stream, delayed, with each beat's position in its
  packet added (``first``, ``index``) for the deparsers.
"""

from amaranth.hdl import Signal, Module, Const, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.lib.memory import Memory

from .axis import arb_layout, flow_signature, frame_layout

__all__ = ["DelayLine", "FrameDelay"]


class DelayLine(wiring.Component):
    """``o`` = ``i`` delayed by ``cycles`` clocks (ports: ``i``, ``o``, ``width`` bits each).

    Latency: ``cycles``. Throughput: one value per clock. Up to 4 cycles: a register chain;
    longer: a memory ring of ``2**ceil(log2(cycles - 1))`` entries plus its read register.
    """

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


class FrameDelay(wiring.Component):
    """The frame's beats wait here while their header travels the match-action pipeline.

    Ports: ``i`` (:func:`~.axis.flow_signature` of :func:`~.axis.arb_layout`, the arbiter's
    output), ``o`` (:func:`~.axis.flow_signature` of :func:`~.axis.frame_layout`: the same beat
    ``cycles`` clocks later, plus ``first`` = the packet's first beat and ``index`` = 0, 1, 2, then
    3 for every later beat). The beat (valid included) goes through one :class:`DelayLine`.

    Latency: ``cycles``. Throughput: one beat per clock.
    """

    def __init__(self, cycles, *, data_width=512, user_width=1):
        self.cycles = cycles
        self.data_width, self.user_width = data_width, user_width
        super().__init__({
            "i": In(flow_signature(arb_layout(data_width, user_width))),
            "o": Out(flow_signature(frame_layout(data_width, user_width))),
        })

    def elaborate(self, platform):
        m = Module()
        dw, uw = self.data_width, self.user_width
        bl = data.StructLayout({"valid": 1, "data": dw, "keep": dw // 8, "last": 1,
                                "len": 14, "port": 4, "user": uw})
        line = m.submodules.line = DelayLine(bl.size, self.cycles)
        beat = self.i.payload
        din = Signal(bl)
        m.d.comb += [din.valid.eq(self.i.valid), din.data.eq(beat.data), din.keep.eq(beat.keep),
                     din.last.eq(beat.last), din.len.eq(beat.len), din.port.eq(beat.port),
                     din.user.eq(beat.user)]
        m.d.comb += line.i.eq(din)
        b = Signal(bl)
        m.d.comb += b.eq(line.o)
        in_pkt = Signal()
        index = Signal(2)
        with m.If(b.valid):
            m.d.sync += in_pkt.eq(~b.last)
            m.d.sync += index.eq(Mux(b.last, 0, Mux(index == 3, 3, index + 1)))
        o = self.o.payload
        m.d.comb += [
            self.o.valid.eq(b.valid), o.data.eq(b.data), o.keep.eq(b.keep), o.last.eq(b.last),
            o.len.eq(b.len), o.port.eq(b.port), o.user.eq(b.user),
            o.first.eq(b.valid & ~in_pkt), o.index.eq(index),
        ]
        return m
