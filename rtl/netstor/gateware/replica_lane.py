"""The replica lane: a packet stored once, its copy list replayed from the store (issue 12 item 3).

The default core's (``Datapath(..., copies="lane")``, ``docs/dataplane-spec.md``, "Copy
lists") store and replay: the data path runs the egress elements,
the deparser and the truncator on the lane's beats. There the lane is built with ``direct``
(unicast and recirculation copies as direct descriptors of the engine), ``beat_bits`` = 8
(9,216-byte frames), a ``ptag`` (the packet's number, input and host tag) that comes back on
``take`` (the copy starting, in the cycle it is taken: the data path reads the copy's PHV
then) and ``stale``, and ``pkt_ring`` (the data path's PHV ring: a copy is also stale when its
packet's PHV was overwritten). The arbiter sends a packet's beats back to back, so a copy that
starts after its first beat was written never overtakes the writes of its later beats.

* **Packet store**: a ring of ``ring_beats`` frame beats in one simple dual-port memory (BRAM:
  512 beats of 512 bits + sideband = 16 RAMB36), written with every beat of ``beat_in`` (the
  arbiter's output: all packets, one beat per clock, never stalled). A packet is addressed by
  the beat count at its first beat, ``start`` (:data:`COUNT_BITS` bits; the ring address is
  its low bits), and its number of beats ``nbeats``. Nothing is allocated or freed: a packet
  stays readable until ``ring_beats`` later beats overwrite it.
* **Descriptors** ``desc`` (never stalled) ``{group, start, nbeats}`` enter a
  :class:`~.traffic_manager.ReplicationEngine` whose tag is ``{start, nbeats}``; the packet's
  last beat must have been written before its descriptor enters (in the data path the header
  reaches the traffic manager ``FIRST_TO_PHV + S`` >= 24 cycles after its first beat, and a
  packet has at most 24 beats).
* **Replay**: each copy the engine makes (``port``, ``rid``) reads the packet's beats from
  the store, one per clock, and the next copy starts in the clock after a copy's last beat:
  copies leave back to back across copies and packets. A copy whose packet has been
  (partly) overwritten by the time it starts (``count - start > ring_beats - nbeats``) is
  not sent (``cnt.stale``); with the engine's FIFO of 16 packets of 16 copies of 24 beats
  waiting at most ~6K beats, a ring of >= 8K beats never goes stale, a smaller one may under
  a multicast burst.
* ``o`` (never stalled: what follows, egress elements, deparser, egress queues, does not
  stall either): the copy's beats as :func:`lane_layout` (the beat as :func:`~.axis.frame_layout`
  gives it to a deparser, ``first`` and ``index`` counted per copy, plus the copy's ``cport``,
  ``rid`` and ``copy_first`` / ``copy_last``, the packet's first / last copy).

Latency: a copy's first beat is on ``o`` 3 cycles after the engine offers it (read, memory
output, output register; the engine's first copy comes 5 cycles after the descriptor), so 8
cycles from ``desc`` with everything idle.
Throughput: one beat per clock.

Size (Yosys ``synth_xilinx``, this block alone: 4,096 groups, 512-beat ring, 97-bit tuser): 47
RAMB36 (37 the group memory, 10 the ring), ~480 LUT + 30 RAM32M16 (the engine's FIFOs), 1,607
FF, 6 LUT levels (the engine's prefetch credit). As the copy-lane core builds it (``direct``,
4,096-beat ring, 256-packet descriptor FIFO, ``beat_bits`` 8, a 36-bit ``ptag``, ``pkt_ring``
512): 114 RAMB36 (37 groups, 77 ring), 1,604 LUT (632 of them LUTRAM: the descriptor FIFO),
2,111 FF, 6 LUT levels (the descriptor FIFO's level counter); Yosys 435 s.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axis import LEN_WIDTH, PORT_WIDTH, arb_layout, flow_signature, frame_layout
from .csr import memory_port_signature
from .traffic_manager import GROUP_PORT_BITS, GROUP_RID_BITS, ReplicationEngine

__all__ = ["ReplicaLane", "lane_layout", "desc_layout", "take_layout", "lane_counter_layout", "COUNT_BITS",
           "BEAT_BITS", "LANE_LATENCY"]

#: width of the beat counter that names a packet (its first beat's count)
COUNT_BITS = 16
#: width of a packet's beat count (a 1,518-byte frame is 24 beats of 64 bytes)
BEAT_BITS = 5
#: cycles from the engine offering a copy to its first beat on ``o``
LANE_LATENCY = 3


def desc_layout(group_width=12, *, beat_bits=BEAT_BITS, ptag_width=0, direct=False):
    """A descriptor: ``group``, the packet's ``start`` and ``nbeats``; with ``ptag_width`` a
    ``ptag`` carried to the lane's ``take`` port; with ``direct`` the engine's direct fields
    (:class:`~.traffic_manager.ReplicationEngine`)."""
    f = {"group": group_width, "start": COUNT_BITS, "nbeats": beat_bits}
    if ptag_width:
        f["ptag"] = ptag_width
    if direct:
        f.update({"direct": 1, "dcopy": 1, "dport": GROUP_PORT_BITS, "rc": 1})
    return data.StructLayout(f)


def take_layout(ptag_width):
    """A copy the lane starts (``take``, in its ``go`` cycle: its first beat is on ``o``
    :data:`LANE_LATENCY` cycles later) or finds stale (``stale``): ``port``, ``rid``, ``ptag``,
    ``first`` / ``last`` (the packet's first / last copy)."""
    return data.StructLayout({"port": GROUP_PORT_BITS, "rid": GROUP_RID_BITS,
                              "ptag": max(1, ptag_width), "first": 1, "last": 1})


def lane_layout(data_width=512, user_width=1):
    """A beat of a copy: :func:`~.axis.frame_layout` plus ``cport`` (output), ``rid``,
    ``copy_first`` / ``copy_last`` (the packet's first / last copy made)."""
    return data.StructLayout({**dict(frame_layout(data_width, user_width).members),
                              "cport": GROUP_PORT_BITS, "rid": GROUP_RID_BITS,
                              "copy_first": 1, "copy_last": 1})


def lane_counter_layout():
    """Counter pulses: the engine's (``mcast_empty``, ``bad_port``, ``overflow``) and
    ``stale`` (a copy not sent: its packet was overwritten in the store)."""
    return data.StructLayout({"mcast_empty": 1, "bad_port": 1, "overflow": 1, "stale": 1})


class ReplicaLane(wiring.Component):
    """See the module docstring. Ports: ``beat_in`` (flow of :func:`~.axis.arb_layout`),
    ``count`` (out: the beat count the next beat of ``beat_in`` will be stored at, i.e. a
    first beat's ``start``), ``desc`` (flow of :func:`desc_layout`), ``mc`` (the group
    memory's host port, :class:`~.traffic_manager.ReplicationEngine`'s), ``o`` (flow of
    :func:`lane_layout`), ``cnt`` (:func:`lane_counter_layout` pulses)."""

    def __init__(self, n_outputs, *, n_groups=4096, group_width=12, ring_beats=512,
                 data_width=512, user_width=1, fifo_depth=16, copies=16, beat_bits=BEAT_BITS,
                 ptag_width=0, direct=False, pkt_ring=0):
        if ring_beats & (ring_beats - 1) or not 32 <= ring_beats <= 1 << (COUNT_BITS - 1):
            raise ValueError("ring_beats must be a power of two, 32..32K")
        self.n_outputs, self.ring_beats = n_outputs, ring_beats
        self.dw, self.uw, self.group_width = data_width, user_width, group_width
        self.beat_bits, self.ptag_width, self.direct = beat_bits, ptag_width, direct
        #: with ``pkt_ring`` (the data path's PHV ring of that many packets): ``ptag``'s low
        #: :data:`COUNT_BITS` bits are the packet's number, ``pkt_count`` the next packet's,
        #: and a copy is also stale when ``pkt_count - number > pkt_ring - 2``
        self.pkt_ring = pkt_ring
        if pkt_ring and ptag_width < COUNT_BITS:
            raise ValueError("pkt_ring needs a ptag of at least COUNT_BITS bits")
        self.engine = ReplicationEngine(n_outputs, n_groups, group_width=group_width,
                                        tag_width=COUNT_BITS + beat_bits + ptag_width,
                                        fifo_depth=fifo_depth, copies=copies, direct=direct)
        super().__init__({
            "beat_in": In(flow_signature(arb_layout(data_width, user_width))),
            "count": Out(COUNT_BITS),
            "desc": In(flow_signature(desc_layout(group_width, beat_bits=beat_bits,
                                                  ptag_width=ptag_width, direct=direct))),
            "mc": In(memory_port_signature(self.engine.word_bits, n_groups)),
            "o": Out(flow_signature(lane_layout(data_width, user_width))),
            "take": Out(flow_signature(take_layout(ptag_width))),
            "stale": Out(flow_signature(take_layout(ptag_width))),
            "cnt": Out(lane_counter_layout()),
            **({"pkt_count": In(COUNT_BITS)} if pkt_ring else {}),
            "land": Out(self.engine.signature.members["land"].signature),
        })

    def elaborate(self, platform):
        m = Module()
        R = self.ring_beats
        abits = (R - 1).bit_length()
        eng = m.submodules.engine = self.engine
        wiring.connect(m, wiring.flipped(self.mc), eng.mc)
        wiring.connect(m, eng.land, wiring.flipped(self.land))
        dp = self.desc.payload
        tag = [dp.start, dp.nbeats] + ([dp.ptag] if self.ptag_width else [])
        m.d.comb += [eng.i.valid.eq(self.desc.valid),
                     eng.i.payload.group.eq(dp.group),
                     eng.i.payload.tag.eq(Cat(*tag)),
                     *([eng.i.payload.direct.eq(dp.direct), eng.i.payload.dcopy.eq(dp.dcopy),
                        eng.i.payload.dport.eq(dp.dport), eng.i.payload.rc.eq(dp.rc)]
                       if self.direct else []),
                     self.cnt.mcast_empty.eq(eng.cnt.mcast_empty),
                     self.cnt.bad_port.eq(eng.cnt.bad_port),
                     self.cnt.overflow.eq(eng.cnt.overflow)]

        # ---- the store: every beat, at the running beat count ---------------------------------
        sl = data.StructLayout({"data": self.dw, "keep": self.dw // 8, "last": 1,
                                "len": LEN_WIDTH, "port": PORT_WIDTH, "user": self.uw})
        store = m.submodules.store = Memory(shape=sl, depth=R, init=[])
        wp, rp = store.write_port(), store.read_port(transparent_for=())
        count = Signal(COUNT_BITS)
        b = self.beat_in.payload
        m.d.comb += [wp.addr.eq(count[:abits]), wp.en.eq(self.beat_in.valid),
                     wp.data.data.eq(b.data), wp.data.keep.eq(b.keep), wp.data.last.eq(b.last),
                     wp.data.len.eq(b.len), wp.data.port.eq(b.port), wp.data.user.eq(b.user),
                     self.count.eq(count)]
        with m.If(self.beat_in.valid):
            m.d.sync += count.eq(count + 1)

        # ---- replay: one copy at a time, one beat per clock ------------------------------------
        # A copy taken at t reads its beats at t+1 .. t+nbeats; the next copy is taken in the
        # cycle its last beat is read.
        busy = Signal()                                  # control: reset
        addr = Signal(COUNT_BITS, reset_less=True)
        left = Signal(self.beat_bits, reset_less=True)        # beats after the one read now
        index = Signal(2, reset_less=True)
        head = Signal(reset_less=True)                   # the beat read now is the copy's first
        c_port = Signal(GROUP_PORT_BITS, reset_less=True)
        c_rid = Signal(GROUP_RID_BITS, reset_less=True)
        c_first = Signal(reset_less=True)
        c_last = Signal(reset_less=True)
        ec = eng.o.payload
        e_start = ec.tag[:COUNT_BITS]
        e_nbeats = ec.tag[COUNT_BITS:COUNT_BITS + self.beat_bits]
        e_ptag = ec.tag[COUNT_BITS + self.beat_bits:]
        free = ~busy | (left == 0)
        take = Signal()
        m.d.comb += [take.eq(eng.o.valid & free), eng.o.ready.eq(free)]
        # stale: a beat read at t+1+k is overwritten by the write of count start+k+R, which
        # comes no earlier than t+1+k (the read sees the old word) while count - start < R;
        # one beat of margin. The counter is wide enough not to wrap while a packet waits.
        age = Signal(COUNT_BITS)
        m.d.comb += age.eq(count - e_start)
        stale = age > R - 2
        if self.pkt_ring:
            page = Signal(COUNT_BITS)
            m.d.comb += page.eq(self.pkt_count - e_ptag[:COUNT_BITS])
            stale = stale | (page > self.pkt_ring - 2)
        go = take & ~stale
        m.d.sync += self.cnt.stale.eq(take & stale)
        for port_, ev in ((self.take, go), (self.stale, take & stale)):
            m.d.comb += [port_.valid.eq(ev), port_.payload.port.eq(ec.port),
                         port_.payload.rid.eq(ec.rid), port_.payload.first.eq(ec.first),
                         port_.payload.last.eq(ec.last)]
            if self.ptag_width:
                m.d.comb += port_.payload.ptag.eq(e_ptag)
        with m.If(busy):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1),
                         index.eq(Mux(index == 3, 3, index + 1)), head.eq(0)]
            with m.If(left == 0):
                m.d.sync += busy.eq(0)
        with m.If(go):
            m.d.sync += [busy.eq(1), addr.eq(e_start), left.eq(e_nbeats - 1), index.eq(0),
                         head.eq(1), c_port.eq(ec.port), c_rid.eq(ec.rid),
                         c_first.eq(ec.first), c_last.eq(ec.last)]
        m.d.comb += [rp.addr.eq(addr[:abits]), rp.en.eq(1)]
        # beat read at t, data at t+1: the copy's fields registered alongside
        r_valid = Signal()
        r_first = Signal(reset_less=True)
        r_index = Signal(2, reset_less=True)
        r_port, r_rid = Signal.like(c_port), Signal.like(c_rid)
        r_cf, r_cl = Signal(reset_less=True), Signal(reset_less=True)
        m.d.sync += [r_valid.eq(busy), r_first.eq(head), r_index.eq(index),
                     r_port.eq(c_port), r_rid.eq(c_rid), r_cf.eq(c_first), r_cl.eq(c_last)]
        # output register (flip-flops on every output)
        o = self.o.payload
        ov = Signal()
        od = Signal(lane_layout(self.dw, self.uw), reset_less=True)
        s = rp.data
        m.d.sync += [ov.eq(r_valid),
                     od.data.eq(s.data), od.keep.eq(s.keep), od.last.eq(s.last),
                     od.len.eq(s.len), od.port.eq(s.port), od.user.eq(s.user),
                     od.first.eq(r_first), od.index.eq(r_index), od.cport.eq(r_port),
                     od.rid.eq(r_rid), od.copy_first.eq(r_cf), od.copy_last.eq(r_cl)]
        m.d.comb += [self.o.valid.eq(ov), o.eq(od)]
        return m
