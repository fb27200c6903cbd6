"""The data plane: buffers, arbiter, parser, match-action stages, traffic manager, deparsers.

::

    wire RX x P --> [PacketBuffer, drop on full] --+
    host TX x P --> [PacketBuffer, back-pressure] -+--> IngressArbiter --> Parser --> PHV
    recirc ------> [PacketBuffer, drop on full] --+           |                      |
                                                              |        element stages
                                                              |        (stages.py)
                                                              |                      |
                                                  beat delay line        traffic manager (mcast,
                                                  (fixed latency)        clone, recirc, drop)
                                                              |                      |
                                                              |        egress elements per copy
                                                              |                      |
                                                              +---> Deparser: merge <- prep
                                                                      |
                       wire TX x P, host RX x P <-- EgressQueue (admit/drop whole packets)
                       recirculation           <-- PacketBuffer (drop on full)

Nothing between the arbiter and the egress queues ever stalls: the header path is a shift
register of ``(valid, PHV)`` and the frame's beats wait in a delay line of the same length, so
the header-path latency is a constant (``self.latency`` cycles from a packet's first beat
leaving the arbiter to its first beat entering an egress queue). Throughput: one beat per
clock on the frame path, one packet per clock on the header path.

The blocks, each a component in a file of its own (ports, latency and throughput in its
docstring): :class:`~.packet_buffer.PacketBuffer`, :class:`~.arbiter.IngressArbiter`,
:class:`~.parser.Parser`, :class:`~.stage.Stage` (one per ingress stage),
:class:`~.traffic_manager.Replicator`, :class:`~.stage.EgressStages`,
:class:`~.delay.DelayLine` (the parser's original fields), :class:`~.delay.FrameDelay`,
:class:`~.deparser.Deparser` (one per output copy), :class:`~.packet_buffer.EgressQueue`,
:class:`~.counters.PacketCounter` and :class:`~.tx_completion.CompletionSynth`. This module
only instantiates and connects them.

Port numbering is the spec's (``docs/dataplane-spec.md``): inputs ``0..P-1`` wire RX,
``P..2P-1`` host TX, ``2P`` recirculation; outputs ``0..P-1`` wire TX, ``P..2P-1`` host RX.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axis import arb_layout, beat_layout, pkt_layout, tap
from .counters import PacketCounter
from .delay import DelayLine, FrameDelay
from .kit import or_tree
from .deparser import Deparser, PREP_LATENCY
from .packet_buffer import PacketBuffer, EgressQueue
from .arbiter import IngressArbiter
from .parser import Parser, FIRST_TO_PHV, orig_layout
from .kit import HwEnv
from .stage import Stage, EgressStages
from .traffic_manager import Replicator, TM_LATENCY, GROUP_WORD_BITS
from .tx_completion import CompletionSynth
from .replica_lane import ReplicaLane, COUNT_BITS, LANE_LATENCY, lane_layout
from .truncate import Truncator, TRUNC_LATENCY, FACTS_LEAD
from .deparser import RECIRC_USER
from .gf_path import GFIngress, GFScaleBeats, SCALE_LATENCY, ST_DONE
from .gf_engine import LATENCY as GF_ENGINE_LATENCY

#: cycles from a direct descriptor entering the idle replication engine to its first copy (the
#: engine's express way; a group descriptor's first copy takes 5)
ENGINE_LATENCY = 1
#: a packet's beats in the lane's descriptors (9,216-byte frames: 144 beats)
LANE_BEAT_BITS = 8

__all__ = ["Datapath", "RX_USER", "TX_USER", "TM_LATENCY"]

RX_USER = 97          # Corundum Alveo: wire RX tuser = {PTP ToD timestamp (96), error (1)}
TX_USER = 17          # host TX tuser = {tag (16), flag (1)}
UW = RX_USER          # user width carried through the pipeline


class Datapath(wiring.Component):
    """See the module docstring. ``csr`` is the :class:`~netstor.gateware.csr.CsrBuilder`
    every block declares its registers, counters and memories with.

    Ports: ``in{k}`` (wire RX ``k < P``: :func:`~.axis.beat_layout` with the 97-bit RX tuser;
    host TX: with the 17-bit TX tuser), ``out{q}`` (wire TX ``q < P``:
    :func:`~.axis.pkt_layout` with ``user = {own, tx tuser}``; host RX: the RX tuser), and
    ``synth[p]`` (stream of tags: host packets of port ``p`` that get no MAC completion).

    Latency: ``self.latency`` cycles from a packet's first beat leaving the arbiter to that
    beat entering its egress queue. Throughput: one beat per clock (all inputs together).
    """

    def __init__(self, pipeline, csr, *, data_width=512, in_buffer_beats=256,
                 out_queue_beats=256, recirc_beats=256, copies="lane", ring_beats=4096,
                 phv_ring=512, desc_fifo=256):
        if data_width != 512:
            raise ValueError("the parser/deparser window is two 512-bit beats; data_width "
                             "must be 512")
        if copies not in ("ports", "lane"):
            raise ValueError(f"copies must be 'ports' or 'lane', not {copies!r}")
        #: "lane" (the default core): every copy through the replication engine and one copy
        #: lane, multicast as copy lists (``tm.groups``); "ports" (the earlier core, kept as a
        #: build option): one egress lane and deparser per output, bitmap multicast (``tm.mcast``)
        self.copies = copies
        self.ring_beats, self.phv_ring, self.desc_fifo = ring_beats, phv_ring, desc_fifo
        if copies == "lane" and (phv_ring & (phv_ring - 1) or phv_ring < 32):
            raise ValueError("phv_ring must be a power of two >= 32")
        self.pipeline, self.csr = pipeline, csr
        self.dw = data_width
        self.in_buffer_beats = in_buffer_beats
        self.out_queue_beats = out_queue_beats
        self.recirc_beats = recirc_beats
        P = pipeline.n_ports
        members = {}
        for k in range(2 * P):
            uw = RX_USER if k < P else TX_USER
            members[f"in{k}"] = In(stream.Signature(beat_layout(data_width, uw)))
        for q in range(2 * P):
            # wire TX: user = {own (1), tx tuser (17)}; host RX: rx tuser (97)
            uw = TX_USER + 1 if q < P else RX_USER
            members[f"out{q}"] = Out(stream.Signature(pkt_layout(data_width, uw)))
        members["synth"] = Out(stream.Signature(16)).array(P)
        super().__init__(members)
        # Blocks that declare host registers do so at construction (elements while they are
        # built), in this order (it is the register map's): the control block (elaborated
        # separately) needs the complete list.
        self.parser = Parser(pipeline, _arb_layout(data_width), csr)
        self._declare()
        self.stages = [Stage(pipeline, stage, csr, prefix=f"i{idx}")
                       for idx, stage in enumerate(pipeline.stages())]
        self.egress = EgressStages(pipeline, csr, n_copies=1 if copies == "lane" else None)
        if (_payload_elements(pipeline, egress=False) or _payload_elements(pipeline, egress=True)) \
                and copies != "lane":
            raise ValueError("payload elements (the GF engine) need the copy-lane core")
        if _payload_elements(pipeline, egress=False):
            # the engine's self-check: a data beat of a packet the header path found DONE
            # that the engine did not complete (the control shadow and the engine disagree)
            self.csr_gf_mismatch = csr.counter(
                "gf.mismatch", doc="GF engine: data beats of a DONE packet the engine did not "
                                   "complete (0 unless the header path and engine disagree)")
        # elements that ask for a cycle without packets (set while the stages were built)
        self.slot_requests = [e.slot_request for e in pipeline.elements
                              if e.slot_request is not None]
        S = sum(st.latency for st in self.stages)
        E = self.egress.latency
        self.orig_latency = S + TM_LATENCY + E
        self.latency = FIRST_TO_PHV + S + TM_LATENCY + E + PREP_LATENCY
        if copies == "lane":
            # idle unicast: t0 (PHV after the stages) -> descriptor at t1 -> the engine's
            # first copy 1 cycle later (go, the express way) -> PHV read, registered (2) -> egress elements
            # -> prep -> the truncator -> the egress queue
            self.latency = (FIRST_TO_PHV + S + 1 + ENGINE_LATENCY + 2 + E + 1 + PREP_LATENCY
                            + TRUNC_LATENCY)

    # CSR declarations happen at construction so the schema is complete before elaboration
    def _declare(self):
        pl, csr = self.pipeline, self.csr
        P = pl.n_ports
        self.ctr = {}
        for k in range(pl.n_inputs):
            for what in ("pkts", "bytes", "drop_runt", "drop_oversize", "drop_error",
                         "drop_full"):
                self.ctr[f"in{k}.{what}"] = csr.counter(
                    f"in{k}.{what}", 14 if what == "bytes" else 1,
                    doc=f"input {k}: {what.replace('_', ' ')}")
        for q in range(pl.n_outputs):
            for what in ("pkts", "bytes", "drop_full"):
                self.ctr[f"out{q}.{what}"] = csr.counter(
                    f"out{q}.{what}", 14 if what == "bytes" else 1,
                    doc=f"output {q}: {what.replace('_', ' ')}")
        lane = self.copies == "lane"
        for what in ("drop", "mcast_empty", "bad_port", "recirc_limit"):
            # the lane: a unicast bad port and a listed bad port may count in one cycle
            self.ctr[f"tm.{what}"] = csr.counter(
                f"tm.{what}", 2 if lane and what == "bad_port" else 1,
                doc=f"traffic manager: {what}")
        if lane:
            for q in range(pl.n_outputs):
                self.ctr[f"out{q}.drop_stale"] = csr.counter(
                    f"out{q}.drop_stale",
                    doc=f"output {q}: copies not sent, their packet overwritten in the lane's "
                        "store before the copy's turn")
            self.ctr["tm.recirc_stale"] = csr.counter(
                "tm.recirc_stale", doc="recirculation copies not sent (stale, as drop_stale)")
            self.ctr["tm.overflow"] = csr.counter(
                "tm.overflow", doc="packets refused by the replication engine (descriptor "
                                   "FIFO full): none of their copies made")
        for p in range(P):
            self.ctr[f"cpl{p}.synth_lost"] = csr.counter(
                f"cpl{p}.synth_lost", doc=f"port {p}: synthesised TX completions lost")
        if lane:
            self.mcast_port = csr.memory(
                "tm.groups", GROUP_WORD_BITS, pl.mcast_groups,
                doc="multicast copy lists: n (5) | 16 x (port (4) | rid (16))", kind="groups")
        else:
            self.mcast_port = csr.memory(
                "tm.mcast", pl.n_outputs + 16 * pl.n_outputs, pl.mcast_groups,
                doc="multicast groups: ports bitmap | rid[0] | rid[1] | ...", kind="mcast")

    def elaborate(self, platform):
        m = Module()
        pl, dw, ctr = self.pipeline, self.dw, self.ctr
        P, nin, nout, R = pl.n_ports, pl.n_inputs, pl.n_outputs, pl.recirc_input

        # ---- ingress buffers, arbiter, parser, stages, traffic manager, egress stages ------
        bufs = []
        for k in range(nin):
            buf = m.submodules[f"inbuf{k}"] = PacketBuffer(
                data_width=dw, user_width=UW,
                depth_beats=self.recirc_beats if k == R else self.in_buffer_beats,
                backpressure=(P <= k < 2 * P), error_bit=(k < P))
            bufs.append(buf)
            for what in ("drop_runt", "drop_oversize", "drop_error", "drop_full"):
                m.d.comb += ctr[f"in{k}.{what}"].eq(getattr(buf, what))
            if k < P:
                wiring.connect(m, wiring.flipped(getattr(self, f"in{k}")), buf.i)
            elif k != R:
                # host TX's 17-bit tuser widens to the pipeline's
                src = getattr(self, f"in{k}")
                m.d.comb += [
                    buf.i.valid.eq(src.valid), src.ready.eq(buf.i.ready),
                    buf.i.payload.data.eq(src.payload.data),
                    buf.i.payload.keep.eq(src.payload.keep),
                    buf.i.payload.last.eq(src.payload.last),
                    buf.i.payload.user.eq(src.payload.user)]
        arb = m.submodules.arbiter = IngressArbiter(nin, data_width=dw, user_width=UW)
        for k in range(nin):
            wiring.connect(m, bufs[k].o, arb.i[k])
        if self.slot_requests:
            # registered: the banks' requests come from deep in the pipeline, and the arbiter's
            # grant feeds every input buffer's ready (11 LUT levels across the blocks unregistered)
            hold = Signal()
            m.d.sync += hold.eq(or_tree(self.slot_requests))
            m.d.comb += arb.hold.eq(hold)
        in_ctr = m.submodules.in_counter = PacketCounter(arb_layout(dw, UW), nin)
        for k in range(nin):
            m.d.comb += [ctr[f"in{k}.pkts"].eq(in_ctr.pkts[k]),
                         ctr[f"in{k}.bytes"].eq(in_ctr.bytes[k])]
        parser = m.submodules.parser = self.parser
        wiring.connect(m, arb.o, parser.i)
        m.d.comb += tap(in_ctr.tap, arb.o)
        phv = parser.o
        for idx, st in enumerate(self.stages):
            m.submodules[f"stage{idx}"] = st
            wiring.connect(m, phv, st.i)
            phv = st.o
        if self.copies == "lane":
            self._elaborate_lane(m, arb, parser, phv, bufs)
            return m
        rep = m.submodules.tm = Replicator(pl)
        wiring.connect(m, phv, rep.i)
        wiring.connect(m, self.mcast_port, rep.mc)
        m.d.comb += [ctr[f"tm.{w}"].eq(getattr(rep.cnt, w))
                     for w in ("drop", "mcast_empty", "bad_port", "recirc_limit")]
        egress = m.submodules.egress = self.egress
        for q in range(nout):
            wiring.connect(m, rep.copy[q], egress.i[q])
        wiring.connect(m, rep.recirc, egress.i[nout])

        # ---- the frame and the original fields wait for the header path --------------------
        orig_delay = m.submodules.orig_delay = DelayLine(orig_layout().size, self.orig_latency)
        m.d.comb += orig_delay.i.eq(parser.orig)
        frame = m.submodules.beat_delay = FrameDelay(self.latency, data_width=dw,
                                                    user_width=UW)
        wiring.connect(m, arb.o, frame.i)

        # ---- deparse each copy and hand it to its queue --------------------------------------
        for c in range(nout + 1):
            if c == nout:
                name, kw = "recirc", dict(output="recirc")
            elif c < P:
                name, kw = f"out{c}", dict(output="wire", port=c)
            else:
                name, kw = f"out{c}", dict(output="host")
            dep = m.submodules[f"dp_{name}"] = Deparser(
                pl, data_width=dw, user_width=UW, n_ports=P, tx_user=TX_USER, name=f"dp_{name}",
                **kw)
            wiring.connect(m, egress.o[c], dep.copy)
            m.d.comb += dep.orig.eq(orig_delay.o)
            wiring.connect(m, frame.o, dep.beat)
            if c == nout:
                wiring.connect(m, dep.o, bufs[R].i)
                continue
            q = c
            oq = self._output_queue(m, q)
            wiring.connect(m, dep.o, oq.i)
            if q < P:
                # ---- synthesised TX completions for host packets of port q ------------------
                k = P + q
                cs = m.submodules[f"cpl_events{q}"] = CompletionSynth(
                    n_ports=P, port=q, data_width=dw, user_width=UW, tx_user=TX_USER)
                m.d.comb += tap(cs.host_in, getattr(self, f"in{k}"))
                m.d.comb += tap(cs.beat, frame.o)
                m.d.comb += tap(cs.queue, dep.o)
                m.d.comb += [cs.host_drop.eq(bufs[k].drop_runt | bufs[k].drop_oversize),
                             cs.own_copy.eq(dep.own_first), cs.queue_drop.eq(oq.drop_full),
                             ctr[f"cpl{q}.synth_lost"].eq(cs.lost)]
                wiring.connect(m, cs.o, wiring.flipped(self.synth[q]))
        return m

    def _output_queue(self, m, q):
        """Egress queue ``q`` (whole packets admitted or dropped) onto port ``out{q}``, with
        its packet/byte/drop counters; returns the queue (its ``i`` for the caller)."""
        P, dw, ctr = self.pipeline.n_ports, self.dw, self.ctr
        uw = TX_USER + 1 if q < P else RX_USER
        oq = m.submodules[f"outq{q}"] = EgressQueue(
            data_width=dw, user_width=uw, depth_beats=self.out_queue_beats)
        dst = getattr(self, f"out{q}")
        wiring.connect(m, oq.o, wiring.flipped(dst))
        oc = m.submodules[f"out{q}_counter"] = PacketCounter(pkt_layout(dw, uw))
        m.d.comb += tap(oc.tap, dst)
        m.d.comb += [ctr[f"out{q}.pkts"].eq(oc.pkts[0]),
                     ctr[f"out{q}.bytes"].eq(oc.bytes[0]),
                     ctr[f"out{q}.drop_full"].eq(oq.drop_full)]
        return oq

    def _payload_ingress(self, m, arb):
        """The beats for the copy lane's store: ``(valid, payload, delay)``. Without a payload
        element, the arbiter's output (delay 0). With one (``GFAccumulate``), the beats wait
        for its tap (``payload_tap_latency`` cycles after its stage's input) in a delay line,
        then go through :class:`~.gf_path.GFIngress` (the engine)."""
        els = _payload_elements(self.pipeline, egress=False)
        if not els:
            return arb.o.valid, arb.o.payload, 0
        if len(els) > 1 or self.copies != "lane":
            raise ValueError("one payload element, on the copy-lane core, is supported")
        el = els[0]
        tap = el.payload_tap
        idx = next(i for i, st in enumerate(self.pipeline.stages()) if el in st)
        T = FIRST_TO_PHV + sum(st.latency for st in self.stages[:idx]) + el.payload_tap_latency
        al = _arb_layout(self.dw)
        line = m.submodules.gf_beats = DelayLine(1 + al.size, T)
        m.d.comb += line.i.eq(Cat(arb.o.valid, arb.o.payload))
        gi = m.submodules.gf_ingress = GFIngress(al, n_ops=el.n_ops, chunk_beats=el.chunk_beats)
        m.d.comb += [gi.i_valid.eq(line.o[0]), gi.i.eq(line.o[1:]),
                     gi.tap_valid.eq(tap["valid"]), gi.tap_run.eq(tap["run"]),
                     gi.tap_done.eq(tap["status"] == ST_DONE), gi.tap_op.eq(tap["op"]),
                     gi.tap_off.eq(tap["off"]), gi.tap_coeff.eq(tap["coeff"]),
                     gi.tap_src.eq(tap["src"]), gi.tap_need.eq(tap["need"]),
                     gi.tap_length.eq(tap["length"])]
        mm = self.csr_gf_mismatch
        m.d.comb += mm.eq(gi.mismatch)
        self.gf_in_delay = T + GF_ENGINE_LATENCY
        return gi.o_valid, gi.o, T + GF_ENGINE_LATENCY

    def _payload_scale(self):
        """The egress payload element (``GFScale``) or None; the fields it reads must not be
        written after it (the data path reads them from the copy's PHV after the egress
        elements)."""
        els = _payload_elements(self.pipeline, egress=True)
        if not els:
            return None
        if len(els) > 1:
            raise ValueError("one egress payload element is supported")
        el = els[0]
        later = self.pipeline.egress_elements[self.pipeline.egress_elements.index(el) + 1:]
        read, _ = self.pipeline.access(el)
        for e in later:
            if read & self.pipeline.access(e)[1]:
                raise ValueError(f"{e.qualname} writes a field {el.qualname} reads")
        return el

    def _elaborate_lane(self, m, arb, parser, phv, bufs):
        """The copy lane (``copies="lane"``): every copy of every packet leaves the traffic
        manager as a descriptor of the replication engine; one lane replays them.

        ::

            arb.o --> ReplicaLane store (every beat, ring of ring_beats)
            PHV (after the stages) + orig --> PHV ring (phv_ring packets, by packet count)
            t1 decision --> descriptor {group | direct copy, recirculation copy, start, nbeats,
                            packet, input, host tag} --> engine --> lane: one copy at a time
            take (go) --> PHV ring read --> PHV with egress port / rid --> egress elements
                      --> Deparser (one) <-- the copy's beats, delayed to meet the window
                      --> Truncator --> by copy port: egress queue q / recirculation buffer
        """
        pl, dw, ctr = self.pipeline, self.dw, self.ctr
        P, nout, R = pl.n_ports, pl.n_outputs, pl.recirc_input
        S = sum(st.latency for st in self.stages)
        E = self.egress.latency
        phv_l = data.StructLayout(pl.phv.layout())
        ol = orig_layout()
        PB = (self.phv_ring - 1).bit_length()
        TW = 16                                        # host TX tag (tuser[16:1])
        # the packet's number (COUNT_BITS: its PHV ring slot is the low bits), input, host tag
        ptag_l = data.StructLayout({"pidx": COUNT_BITS, "inport": 4, "htag": TW})
        gw = pl.field_width("meta.mcast_group")

        lane = m.submodules.lane = ReplicaLane(
            nout, n_groups=pl.mcast_groups, group_width=gw, ring_beats=self.ring_beats,
            data_width=dw, user_width=UW, fifo_depth=self.desc_fifo, beat_bits=LANE_BEAT_BITS,
            ptag_width=ptag_l.size, direct=True, pkt_ring=self.phv_ring)
        # a payload element (the GF engine): the beats reach the store through it, IN_DELAY
        # cycles after the arbiter
        store_v, store_b, IN_DELAY = self._payload_ingress(m, arb)
        m.d.comb += [lane.beat_in.valid.eq(store_v), lane.beat_in.payload.eq(store_b)]
        wiring.connect(m, self.mcast_port, lane.mc)

        # ---- per packet at its first beat: where it is stored, its input and host tag ----------
        # (sampled at t0, FIRST_TO_PHV + S cycles after the packet's first beat)
        b = store_b
        rec_l = data.StructLayout({"start": COUNT_BITS, "nbeats": LANE_BEAT_BITS, "inport": 4,
                                   "htag": TW})
        rec = Signal(rec_l)
        m.d.comb += [rec.start.eq(lane.count), rec.nbeats.eq((b.len + 63) >> 6),
                     rec.inport.eq(b.port), rec.htag.eq(b.user[1:1 + TW])]
        rec_d = m.submodules.rec_delay = DelayLine(rec_l.size, FIRST_TO_PHV + S - IN_DELAY)
        orig_d = m.submodules.orig_delay = DelayLine(ol.size, S)
        m.d.comb += [rec_d.i.eq(rec), orig_d.i.eq(parser.orig)]
        rec0 = Signal(rec_l)
        m.d.comb += rec0.eq(rec_d.o)

        # ---- t0: the PHV and the original fields into the PHV ring ------------------------------
        ring_l = data.StructLayout({"phv": phv_l, "orig": ol})
        pring = m.submodules.phv_ring = Memory(shape=ring_l, depth=self.phv_ring, init=[])
        pw, pr = pring.write_port(), pring.read_port(transparent_for=())
        pidx = Signal(COUNT_BITS)
        m.d.comb += [pw.addr.eq(pidx[:PB]), pw.en.eq(phv.valid), pw.data.phv.eq(phv.payload),
                     pw.data.orig.eq(orig_d.o), lane.pkt_count.eq(pidx)]
        for el in _payload_elements(pl, egress=False):
            # a packet whose data the engine rewrote (DONE) leaves with UDP checksum 0, as the
            # model's element zeroes the frame's: the deparser then keeps 0 (its incremental
            # update starts from the original checksum)
            with m.If(HwEnv(pl, phv.payload).field(el.status.name) == ST_DONE):
                m.d.comb += pw.data.orig.udp_csum.eq(0)
        with m.If(phv.valid):
            m.d.sync += pidx.eq(pidx + 1)

        # ---- t1: the copy decision ---------------------------------------------------------------
        f = HwEnv(pl, phv.payload).field
        v1 = Signal()
        drop1, recirc1, clone1 = (Signal(reset_less=True, name=n_) for n_ in ("drop1", "recirc1",
                                                                              "clone1"))
        group1 = Signal(gw, reset_less=True)
        egp1 = Signal(pl.field_width("meta.egress_port"), reset_less=True)
        count1 = Signal(pl.field_width("meta.recirc_count"), reset_less=True)
        rec1 = Signal(rec_l, reset_less=True)
        pidx1 = Signal(COUNT_BITS, reset_less=True)
        m.d.sync += [v1.eq(phv.valid), drop1.eq(f("meta.drop")), recirc1.eq(f("meta.recirc")),
                     clone1.eq(f("meta.clone")), group1.eq(f("meta.mcast_group")),
                     egp1.eq(f("meta.egress_port")), count1.eq(f("meta.recirc_count")),
                     rec1.eq(rec0), pidx1.eq(pidx)]
        fwd = ~drop1 & ~recirc1
        mcast = fwd & (group1 != 0)
        uni = fwd & (group1 == 0) & (egp1 < nout)
        bad = fwd & (group1 == 0) & (egp1 >= nout)
        want_rc = ~drop1 & (recirc1 | clone1)
        limit = count1 >= pl.max_recirc
        rc = want_rc & ~limit
        dv = Signal()
        m.d.comb += dv.eq(v1 & (mcast | uni | rc))
        d = lane.desc.payload
        m.d.comb += [lane.desc.valid.eq(dv), d.group.eq(group1), d.start.eq(rec1.start),
                     d.nbeats.eq(rec1.nbeats), d.ptag.eq(Cat(pidx1, rec1.inport, rec1.htag)),
                     d.direct.eq(~mcast), d.dcopy.eq(uni), d.dport.eq(egp1), d.rc.eq(rc)]
        m.d.comb += [ctr["tm.drop"].eq(v1 & drop1),
                     ctr["tm.recirc_limit"].eq(v1 & want_rc & limit),
                     ctr["tm.bad_port"].eq((v1 & bad) + lane.cnt.bad_port),
                     ctr["tm.mcast_empty"].eq(lane.cnt.mcast_empty),
                     ctr["tm.overflow"].eq(lane.cnt.overflow)]
        for q in range(nout):
            m.d.comb += ctr[f"out{q}.drop_stale"].eq(lane.stale.valid & (lane.stale.payload.port == q))
        m.d.comb += ctr["tm.recirc_stale"].eq(lane.stale.valid & (lane.stale.payload.port == nout))
        # a refused descriptor's input and tag (the engine's overflow pulse comes one cycle later)
        ovf_in = Signal(4, reset_less=True)
        ovf_tag = Signal(TW, reset_less=True)
        m.d.sync += [ovf_in.eq(rec1.inport), ovf_tag.eq(rec1.htag)]

        # ---- a copy the lane starts (go): its PHV read, port and rid set ----------------------
        tk = lane.take
        tkp = Signal(ptag_l)
        m.d.comb += [tkp.eq(tk.payload.ptag), pr.addr.eq(tkp.pidx[:PB]), pr.en.eq(1)]
        c1v = Signal()
        c1_port = Signal(4, reset_less=True)
        c1_rid = Signal(16, reset_less=True)
        m.d.sync += [c1v.eq(tk.valid), c1_port.eq(tk.payload.port), c1_rid.eq(tk.payload.rid)]
        c2v, c2rv = Signal(), Signal()
        c2_phv = Signal(phv_l, reset_less=True)
        c2_orig = Signal(ol, reset_less=True)
        e2 = HwEnv(pl, c2_phv).field
        c1_rc = c1_port == nout
        m.d.sync += [c2v.eq(c1v & ~c1_rc), c2rv.eq(c1v & c1_rc), c2_phv.eq(pr.data.phv),
                     c2_orig.eq(pr.data.orig)]
        with m.If(~c1_rc):
            m.d.sync += [e2("meta.egress_port").eq(c1_port), e2("meta.rid").eq(c1_rid)]
        egress = m.submodules.egress = self.egress
        m.d.comb += [egress.i[0].valid.eq(c2v), egress.i[0].payload.eq(c2_phv),
                     egress.i[1].valid.eq(c2rv), egress.i[1].payload.eq(c2_phv)]
        # the copy's PHV (the egress lane's, or the recirculation copy's, which the egress
        # elements do not run on) registered before the deparser: the 2:1 choice in front of
        # the deparser's first prep cycle made its app-window sums 9 LUT levels deep
        eorig = m.submodules.egress_orig = DelayLine(ol.size, E + 1)
        m.d.comb += eorig.i.eq(c2_orig)
        xv, xrc = Signal(), Signal(reset_less=True)
        xphv = Signal(phv_l, reset_less=True)
        m.d.sync += [xv.eq(egress.o[0].valid | egress.o[1].valid), xrc.eq(egress.o[1].valid),
                     xphv.eq(Mux(egress.o[1].valid, egress.o[1].payload,
                                 egress.o[0].payload))]
        scale = self._payload_scale()
        if scale is not None:
            # the copy is scaled (GFScale acted and its data is at byte 128), registered beside
            # xphv: its compares stay out of the deparser's first prep cycle
            xsc = Signal()
            m.d.sync += xsc.eq(~egress.o[1].valid
                               & scale.hw_run(HwEnv(pl, egress.o[0].payload)))

        # ---- the copy's beats, delayed to meet the deparser's window ---------------------------
        # the first beat leaves the lane LANE_LATENCY cycles after go; the window is ready
        # 2 + E + PREP_LATENCY cycles after go
        BD = 2 + E + 1 + PREP_LATENCY - LANE_LATENCY
        ll = lane_layout(dw, UW)
        SD = SCALE_LATENCY if scale is not None else 0
        bline = m.submodules.copy_beats = DelayLine(1 + ll.size, BD - SD)
        m.d.comb += bline.i.eq(Cat(lane.o.valid, lane.o.payload))
        lb = Signal(ll)
        lbv = Signal()
        if scale is None:
            m.d.comb += [lbv.eq(bline.o[0]), lb.eq(bline.o[1:])]
        else:
            # the copy's data bytes times its coefficient (the egress elements' GFScale); the
            # copy's first beat enters the scale PREP_LATENCY - SD cycles after its PHV (xv)
            assert PREP_LATENCY - SD >= 1, "the scale latches the copy's arguments at xv"
            xs = HwEnv(pl, xphv)
            sc = m.submodules.gf_scale = GFScaleBeats(ll)
            m.d.comb += [sc.i_valid.eq(bline.o[0]), sc.i.eq(bline.o[1:]),
                         sc.arg_valid.eq(xv), sc.arg_run.eq(xsc),
                         sc.arg_coeff.eq(scale.coeff.hw(xs)[:8]),
                         sc.arg_length.eq(scale.length.hw(xs)[:16]),
                         lbv.eq(sc.o_valid), lb.eq(sc.o)]
        SIDE = 8                                       # copy port, input port
        dep = m.submodules.dp_lane = Deparser(pl, data_width=dw, user_width=UW + SIDE,
                                              n_ports=P, tx_user=TX_USER, name="dp_lane",
                                              output="lane")
        dorig = eorig.o
        if scale is not None:
            dorig = Signal(ol)
            m.d.comb += dorig.eq(eorig.o)
            # a scaled copy leaves with UDP checksum 0 (the model's GFScale zeroes the copy's
            # frame checksum; the deparser keeps a 0)
            with m.If(xsc):
                m.d.comb += dorig.udp_csum.eq(0)
        m.d.comb += [dep.copy.valid.eq(xv), dep.copy.payload.eq(xphv), dep.orig.eq(dorig),
                     dep.beat.valid.eq(lbv), dep.beat.payload.data.eq(lb.data),
                     dep.beat.payload.keep.eq(lb.keep), dep.beat.payload.last.eq(lb.last),
                     dep.beat.payload.len.eq(lb.len), dep.beat.payload.port.eq(lb.port),
                     dep.beat.payload.user.eq(Cat(lb.user, lb.cport, lb.port)),
                     dep.beat.payload.first.eq(lbv & lb.first), dep.beat.payload.index.eq(lb.index)]

        # ---- truncation: the copy's facts (its PHV) as the deparser takes it ------------------
        assert PREP_LATENCY == FACTS_LEAD, "the truncator's sums run beside the deparser's prep"
        xf = HwEnv(pl, xphv).field
        UL = UW + SIDE + RECIRC_USER
        tr = m.submodules.truncate = Truncator(data_width=dw, user_width=UL)
        fa = tr.facts.payload
        has_trunc = "meta.truncate" in pl.phv.fields
        m.d.comb += [tr.facts.valid.eq(xv),
                     fa.trunc.eq((xf("meta.truncate") if has_trunc else 0) & ~xrc),
                     fa.vlan.eq(xf("meta.vlan_valid")), fa.ipv4.eq(xf("meta.ipv4_valid")),
                     fa.udp.eq(xf("meta.udp_valid")), fa.ihl.eq(xf("ipv4.ver_ihl")[:4]),
                     fa.app.eq(xf("meta.hdr_type") != 0), fa.total_len.eq(xf("ipv4.total_len")),
                     fa.src.eq(xf("ipv4.src")), fa.dst.eq(xf("ipv4.dst")),
                     fa.sport.eq(xf("udp.sport")), fa.dport.eq(xf("udp.dport")),
                     fa.window.eq(xf("app"))]
        m.d.comb += [tr.i.valid.eq(dep.o.valid), tr.i.payload.eq(dep.o.payload),
                     dep.o.ready.eq(1)]

        # ---- by copy port: the egress queues and the recirculation buffer ---------------------
        t = tr.o.payload
        t_user, t_cport = t.user[:UW], t.user[UW:UW + 4]
        t_in, t_rx = t.user[UW + 4:UW + SIDE], t.user[UW + SIDE:]
        t_in_pkt = Signal()
        with m.If(tr.o.valid):
            m.d.sync += t_in_pkt.eq(~t.last)
        t_first = tr.o.valid & ~t_in_pkt
        rb = bufs[R].i
        m.d.comb += [rb.valid.eq(tr.o.valid & (t_cport == nout)), rb.payload.data.eq(t.data),
                     rb.payload.keep.eq(t.keep), rb.payload.last.eq(t.last),
                     rb.payload.user.eq(t_rx)]
        land = lane.land
        for q in range(nout):
            oq = self._output_queue(m, q)
            qi = oq.i
            m.d.comb += [qi.valid.eq(tr.o.valid & (t_cport == q)), qi.payload.data.eq(t.data),
                         qi.payload.keep.eq(t.keep), qi.payload.last.eq(t.last),
                         qi.payload.len.eq(t.len)]
            if q < P:
                own = t_in == P + q
                from_host = (t_in >= P) & (t_in < 2 * P)
                m.d.comb += qi.payload.user.eq(Cat(Mux(from_host, t_user[:TX_USER], 0), own))
            else:
                m.d.comb += qi.payload.user.eq(Mux(t_in < P, t_user, 0))
            if q < P:
                # ---- synthesised TX completions: host packets of port q with no own copy -------
                k = P + q
                cs = m.submodules[f"cpl_events{q}"] = CompletionSynth(
                    n_ports=P, port=q, data_width=dw, user_width=UW, tx_user=TX_USER,
                    miss_events=4)
                m.d.comb += tap(cs.host_in, getattr(self, f"in{k}"))
                m.d.comb += tap(cs.queue, qi)
                m.d.comb += cs.queue_first.eq(t_first)
                # (1) no descriptor at all (dropped, bad port, recirculation limit)
                no_desc = v1 & ~dv & (rec1.inport == k)
                # (2) its descriptor refused (engine FIFO full)
                refused = lane.cnt.overflow & (ovf_in == k)
                # (3) its list, as it lands, makes no copy to wire port q
                lt = Signal(ptag_l)
                m.d.comb += lt.eq(land.payload.tag[COUNT_BITS + LANE_BEAT_BITS:])
                own_listed = Cat(*[land.payload.made[s_] &
                                   (land.payload.copies[20 * s_:20 * s_ + 4] == q)
                                   for s_ in range(lane.engine.slots)]).any()
                no_own = land.valid & (lt.inport == k) & ~own_listed
                # (4) its own copy stale
                st = Signal(ptag_l)
                m.d.comb += st.eq(lane.stale.payload.ptag)
                stale_own = lane.stale.valid & (lane.stale.payload.port == q) & (st.inport == k)
                for i_, (ev, tag_) in enumerate(((no_desc, rec1.htag), (refused, ovf_tag),
                                                 (no_own, lt.htag), (stale_own, st.htag))):
                    m.d.comb += cs.miss[i_].eq(Cat(ev, tag_))
                m.d.comb += [cs.host_drop.eq(bufs[k].drop_runt | bufs[k].drop_oversize),
                             cs.queue_drop.eq(oq.drop_full),
                             ctr[f"cpl{q}.synth_lost"].eq(cs.lost)]
                wiring.connect(m, cs.o, wiring.flipped(self.synth[q]))


def _payload_elements(pipeline, egress):
    """The pipeline's payload elements (``rewrites_payload``) of one side."""
    els = pipeline.egress_elements if egress else pipeline.elements
    return [e for e in els if e.rewrites_payload]


def _arb_layout(dw):
    return arb_layout(dw, UW)

