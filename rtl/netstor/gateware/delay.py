"""Fixed-latency delay line: ``o`` equals ``i`` from exactly ``cycles`` clocks earlier.

Used to hold frame beats (and the parser's original-field record) while their header travels
the match-action pipeline, whose latency is fixed because nothing in it ever stalls. Short
delays are a register chain; longer ones a simple dual-port memory (one write and one
synchronous read per clock, BRAM/LUTRAM) plus one output register.

* :class:`DelayLine`: a plain value, ``i`` -> ``o``.
* :class:`FrameDelay`: the arbiter's beat stream, delayed, with each beat's position in its
  packet added (``first``, ``index``) for the deparsers.
"""

from amaranth.hdl import Signal, Module, Const, Mux, Cat
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
                r = Signal(self.width, name=f"d{k}", reset_less=True)
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
    3 for every later beat). The beat (valid, first and index included, computed at the input)
    goes through one :class:`DelayLine` of ``cycles - 1`` and an output register, so every
    output is a flip-flop (the selects ``first``/``index`` carry ``max_fanout`` for the tools
    to replicate them; only ``valid`` is reset).

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
        bl = data.StructLayout({"valid": 1, "first": 1, "index": 2, "last": 1, "data": dw,
                                "keep": dw // 8, "len": 14, "port": 4, "user": uw})
        # first/index are known at the input: they travel with the beat, so that the
        # deparsers' merge selects come from the output register below, never from the
        # delay memory's read data.
        beat = self.i.payload
        in_pkt = Signal()
        index = Signal(2)
        with m.If(self.i.valid):
            m.d.sync += [in_pkt.eq(~beat.last),
                         index.eq(Mux(beat.last, 0, Mux(index == 3, 3, index + 1)))]
        din = Signal(bl)
        m.d.comb += [din.valid.eq(self.i.valid), din.first.eq(self.i.valid & ~in_pkt),
                     din.index.eq(Mux(in_pkt, index, 0)),
                     din.data.eq(beat.data), din.keep.eq(beat.keep),
                     din.last.eq(beat.last), din.len.eq(beat.len), din.port.eq(beat.port),
                     din.user.eq(beat.user)]
        if self.cycles == 0:
            b = din
        else:
            line = m.submodules.line = DelayLine(bl.size, self.cycles - 1)
            m.d.comb += line.i.eq(din)
            # output register: valid resets; the selects ask the tools to replicate them
            # (each drives the 1,152-bit window muxes of every deparser)
            b = Signal(bl)
            raw = Signal(bl)
            m.d.comb += raw.eq(line.o)
            valid = Signal()
            first = Signal(attrs={"max_fanout": "64"}, reset_less=True)
            idx = Signal(2, attrs={"max_fanout": "64"}, reset_less=True)
            rest = Signal(bl.size - 4, reset_less=True)
            m.d.sync += [valid.eq(raw.valid), first.eq(raw.first), idx.eq(raw.index),
                         rest.eq(raw.as_value()[4:])]
            m.d.comb += b.eq(Cat(valid, first, idx, rest))
        o = self.o.payload
        m.d.comb += [
            self.o.valid.eq(b.valid), o.data.eq(b.data), o.keep.eq(b.keep), o.last.eq(b.last),
            o.len.eq(b.len), o.port.eq(b.port), o.user.eq(b.user),
            o.first.eq(b.valid & b.first), o.index.eq(b.index),
        ]
        return m
