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

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .axis import arb_layout, beat_layout, pkt_layout, tap
from .counters import PacketCounter
from .delay import DelayLine, FrameDelay
from .kit import or_tree
from .deparser import Deparser, PREP_LATENCY
from .packet_buffer import PacketBuffer, EgressQueue
from .arbiter import IngressArbiter
from .parser import Parser, FIRST_TO_PHV, orig_layout
from .stage import Stage, EgressStages
from .traffic_manager import Replicator, TM_LATENCY
from .tx_completion import CompletionSynth

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
                 out_queue_beats=256, recirc_beats=256):
        if data_width != 512:
            raise ValueError("the parser/deparser window is two 512-bit beats; data_width "
                             "must be 512")
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
        self.egress = EgressStages(pipeline, csr)
        # elements that ask for a cycle without packets (set while the stages were built)
        self.slot_requests = [e.slot_request for e in pipeline.elements
                              if e.slot_request is not None]
        S = sum(st.latency for st in self.stages)
        E = self.egress.latency
        self.orig_latency = S + TM_LATENCY + E
        self.latency = FIRST_TO_PHV + S + TM_LATENCY + E + PREP_LATENCY

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
        for what in ("drop", "mcast_empty", "bad_port", "recirc_limit"):
            self.ctr[f"tm.{what}"] = csr.counter(f"tm.{what}", doc=f"traffic manager: {what}")
        for p in range(P):
            self.ctr[f"cpl{p}.synth_lost"] = csr.counter(
                f"cpl{p}.synth_lost", doc=f"port {p}: synthesised TX completions lost")
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
            uw = TX_USER + 1 if q < P else RX_USER
            oq = m.submodules[f"outq{q}"] = EgressQueue(
                data_width=dw, user_width=uw, depth_beats=self.out_queue_beats)
            wiring.connect(m, dep.o, oq.i)
            dst = getattr(self, f"out{q}")
            wiring.connect(m, oq.o, wiring.flipped(dst))
            oc = m.submodules[f"out{q}_counter"] = PacketCounter(pkt_layout(dw, uw))
            m.d.comb += tap(oc.tap, dst)
            m.d.comb += [ctr[f"out{q}.pkts"].eq(oc.pkts[0]),
                         ctr[f"out{q}.bytes"].eq(oc.bytes[0]),
                         ctr[f"out{q}.drop_full"].eq(oq.drop_full)]
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


def _arb_layout(dw):
    return arb_layout(dw, UW)
