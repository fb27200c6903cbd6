"""Formal harnesses for PacketBuffer and EgressQueue (small parameters).

``PacketBufferProps(props, backpressure)``:

* ``"handshake"``: under assumed legal input (``valid`` held until ``ready``, payload stable
  while stalled), ``o`` holds ``valid`` and its payload while stalled, at most one drop pulse
  fires per cycle, ``i.ready`` is 1 when ``backpressure=False``. Meant for k-induction.
* ``"conservation"``: counters of frames in (last beats accepted), frames out (last beats
  transferred) and drop pulses satisfy, every cycle,
  ``in == out + drops + pulse_now + descriptors_queued + packet_in_output``
  (the last two are the DUT's stored packets: descriptor FIFO level, and 1 while the read
  side holds a packet that has not fully left). At quiescence (nothing stored, no pulse) this
  is ``in == out + drops``. Also: every packet on ``o`` has ``last`` exactly on its
  ``ceil(len/bytes_per_beat)``-th beat and ``14 <= len <= max_frame``. Checked by BMC.

``EgressQueueProps(props)``, with gapless input packets of ``ceil(len/bpb)`` beats assumed:

* ``"handshake"``: ``o`` obeys the stream rules, ``i.ready`` is always 1;
* ``"admission"``: the queue never holds more than ``depth_beats``; once a packet is admitted
  at its first beat, every one of its beats finds room (no admitted beat is lost, so admitted
  packets leave whole and dropped ones leave nothing); ``drop_full`` only for a packet that
  was not admitted. Both by k-induction.

The DUT is elaborated directly (``dut.elaborate()``) so the harness can read its internals.
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Mux, ResetSignal, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from netstor.gateware.axis import beats_for_len
from netstor.gateware.packet_buffer import EgressQueue, PacketBuffer
from common import elaborate_inline

__all__ = ["PacketBufferProps", "EgressQueueProps", "past", "stream_assume_legal",
           "stream_assert_legal"]


def past(m, value, name):
    """Register holding ``value`` of the previous cycle (0 in the first cycle)."""
    value = Value.cast(value)
    reg = Signal(len(value), name=f"past_{name}")
    m.d.sync += reg.eq(value)
    return reg


def _rules(m, stream, name, started):
    pv = past(m, stream.valid, f"{name}_valid")
    pr = past(m, stream.ready, f"{name}_ready")
    pp = past(m, stream.payload, f"{name}_payload")
    stalled = started & pv & ~pr
    return stalled, stalled & (~stream.valid | (Value.cast(stream.payload) != pp))


def stream_assume_legal(m, stream, name, started):
    _, bad = _rules(m, stream, name, started)
    m.d.comb += Assume(~bad)


def stream_assert_legal(m, stream, name, started):
    _, bad = _rules(m, stream, name, started)
    m.d.comb += Assert(~bad)


def _started(m):
    started = Signal(name="started")
    m.d.sync += started.eq(1)
    m.d.comb += Assume(~ResetSignal())
    return started


class PacketBufferProps(wiring.Component):
    def __init__(self, props="handshake", backpressure=False, data_width=64, depth_beats=8,
                 max_packets=2, max_frame=24):
        self.props = props
        self.dut = PacketBuffer(data_width=data_width, user_width=1, depth_beats=depth_beats,
                                max_packets=max_packets, backpressure=backpressure,
                                max_frame=max_frame, error_bit=True)
        super().__init__({
            "i": self.dut.signature.members["i"],
            "o": self.dut.signature.members["o"],
        })

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        m.submodules.dut = elaborate_inline(dut, platform)
        dbg = dut._dbg
        wiring.connect(m, wiring.flipped(self.i), dut.i)
        wiring.connect(m, dut.o, wiring.flipped(self.o))
        started = _started(m)

        stream_assume_legal(m, dut.i, "i", started)
        # strengthening: the buffer's registered beat-index flags match their definitions
        m.d.comb += Assert(dbg["flags_ok"])
        # the descriptor FIFO's w_en is not gated by w_rdy: the buffer never writes it full
        m.d.comb += Assert(~dbg["dfifo"].w_en | dbg["dfifo"].w_rdy)
        m.d.comb += Assert(dbg["dfifo"].invariant())
        pulses = [dut.drop_runt, dut.drop_oversize, dut.drop_error, dut.drop_full]

        if self.props == "handshake":
            stream_assert_legal(m, dut.o, "o", started)
            for a in range(4):
                for b in range(a + 1, 4):
                    m.d.comb += Assert(~(pulses[a] & pulses[b]))
            if not dut.backpressure:
                m.d.comb += Assert(dut.i.ready)
            else:
                m.d.comb += Assert(~dut.drop_full)
        elif self.props == "conservation":
            n_in = Signal(8)
            n_out = Signal(8)
            n_drop = Signal(8)
            pulse = Signal()
            m.d.comb += pulse.eq(pulses[0] | pulses[1] | pulses[2] | pulses[3])
            with m.If(dut.i.valid & dut.i.ready & dut.i.payload.last):
                m.d.sync += n_in.eq(n_in + 1)
            with m.If(dut.o.valid & dut.o.ready & dut.o.payload.last):
                m.d.sync += n_out.eq(n_out + 1)
            with m.If(pulse):
                m.d.sync += n_drop.eq(n_drop + 1)
            in_output = Signal()
            m.d.comb += in_output.eq(dut.o.valid | (dbg["remaining"] != 0))
            m.d.comb += Assert(n_in == n_out + n_drop + pulse + dbg["dfifo"].level + in_output)
            # reachability within the BMC depth (checked by the "cover" job): every drop reason,
            # and frames leaving after the buffer was full
            for p in pulses:
                m.d.comb += Cover(p)
            m.d.comb += Cover((n_out >= 2) & (n_drop >= 1) & (dbg["dfifo"].level == 2))
            # beats per packet match len: last exactly on beat ceil(len/bpb)
            beat_no = Signal(8)
            with m.If(dut.o.valid & dut.o.ready):
                m.d.sync += beat_no.eq(Mux(dut.o.payload.last, 0, beat_no + 1))
            with m.If(dut.o.valid):
                need = beats_for_len(dut.o.payload.len, dut.bytes_per_beat)
                m.d.comb += Assert(dut.o.payload.last == (beat_no + 1 == need))
                m.d.comb += Assert(dut.o.payload.len >= 14)
                m.d.comb += Assert(dut.o.payload.len <= dut.max_frame)
        else:
            raise ValueError(self.props)
        return m


class EgressQueueProps(wiring.Component):
    def __init__(self, props="handshake", data_width=16, depth_beats=8):
        self.props = props
        self.dut = EgressQueue(data_width=data_width, user_width=1, depth_beats=depth_beats)
        super().__init__({
            "i": self.dut.signature.members["i"],
            "o": self.dut.signature.members["o"],
        })

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        m.submodules.dut = elaborate_inline(dut, platform)
        dbg = dut._dbg
        wiring.connect(m, wiring.flipped(self.i), dut.i)
        wiring.connect(m, dut.o, wiring.flipped(self.o))
        started = _started(m)
        bpb = dut.bytes_per_beat

        # legal input: gapless packets of ceil(len/bpb) >= 1 beats, len constant in a packet
        in_pkt = Signal()
        beat_no = Signal(8)
        cur_len = Signal(14)
        with m.If(dut.i.valid):
            m.d.sync += [in_pkt.eq(~dut.i.payload.last),
                         beat_no.eq(Mux(dut.i.payload.last, 0, beat_no + 1)),
                         cur_len.eq(dut.i.payload.len)]
        need = beats_for_len(dut.i.payload.len, bpb)
        m.d.comb += [
            Assume(dut.i.payload.len >= 1),
            Assume(dut.i.payload.len <= 4 * dut.depth_beats * bpb),   # keeps the solver fast
            Assume(~in_pkt | dut.i.valid),
            Assume(~dut.i.valid | ~in_pkt | (dut.i.payload.len == cur_len)),
            Assume(~dut.i.valid | (dut.i.payload.last == (beat_no + 1 == need))),
        ]
        if self.props == "handshake":
            stream_assert_legal(m, dut.o, "o", started)
            m.d.comb += Assert(dut.i.ready)
        elif self.props == "admission":
            D = dut.depth_beats
            used = Signal(8)
            free = Signal(8)
            pending = Signal(8)
            m.d.comb += [
                used.eq((dbg["wr_ptr"] - dbg["free_ptr"])[:len(dbg["wr_ptr"])]),
                free.eq(D - used),
                pending.eq((dbg["rd_ptr"] - dbg["free_ptr"])[:len(dbg["wr_ptr"])]),
            ]
            cur_need = beats_for_len(cur_len, bpb)
            admitted_pkt = in_pkt & dbg["admit"]
            m.d.comb += [
                # the queue never holds more than its depth, and the output register holds
                # exactly the one beat read ahead of the free pointer
                Assert(used <= D),
                Assert(pending == dut.o.valid),
                Assert((dbg["wr_ptr"] - dbg["rd_ptr"])[:len(dbg["wr_ptr"])] + pending <= D),
                Assert(dbg["first"] == ~in_pkt),
                # (harness bookkeeping, for the induction)
                Assert(in_pkt | (beat_no == 0)),
                Assert(~in_pkt | ((beat_no >= 1) & (beat_no < cur_need))),
                Assert(~in_pkt | (cur_len >= 1) & (cur_len <= 4 * D * bpb)),
                # an admitted packet's remaining beats always fit: no admitted beat is lost
                Assert(~admitted_pkt | (cur_need - beat_no <= free)),
                Assert(~(dut.i.valid & Mux(dbg["first"], need <= free, dbg["admit"]))
                       | (used < D)),
                # a drop pulse follows exactly a first beat that did not fit
                Assert(~dut.drop_full | ~dbg["admit"]),
            ]
        else:
            raise ValueError(self.props)
        return m
