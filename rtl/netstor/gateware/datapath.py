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

Port numbering is the spec's (``docs/dataplane-spec.md``): inputs ``0..P-1`` wire RX,
``P..2P-1`` host TX, ``2P`` recirculation; outputs ``0..P-1`` wire TX, ``P..2P-1`` host RX.
"""

from __future__ import annotations

from amaranth.hdl import Signal, Module, Cat, Mux
from amaranth.lib import data, wiring, stream
from amaranth.lib.wiring import In, Out

from .axis import beat_layout, pkt_layout
from .packet_buffer import PacketBuffer, EgressQueue
from .arbiter import IngressArbiter
from .parser import Parser, FIRST_TO_PHV, orig_layout
from .kit import HwEnv
from .stages import build_element, build_stage
from .delay import DelayLine
from .deparser import Deparser, PREP_LATENCY
from .traffic_manager import TrafficManager
from .tx_completion import CompletionEvents

__all__ = ["Datapath", "RX_USER", "TX_USER", "TM_LATENCY"]

RX_USER = 97          # Corundum Alveo: wire RX tuser = {PTP ToD timestamp (96), error (1)}
TX_USER = 17          # host TX tuser = {tag (16), flag (1)}
TM_LATENCY = 2
UW = RX_USER          # user width carried through the pipeline


class Datapath(wiring.Component):
    """See the module docstring. ``csr`` is the :class:`~netstor.gateware.csr.CsrBuilder`
    every block declares its registers, counters and memories with."""

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
        for p in range(P):
            members[f"synth{p}_valid"] = Out(1)
            members[f"synth{p}_tag"] = Out(16)
            members[f"synth{p}_ready"] = In(1)
        super().__init__(members)
        self.parser = Parser(pipeline, _arb_layout(data_width), csr)
        self._declare()
        # Build the logic now, not in elaborate(): blocks declare their host-visible memories
        # and counters while they are built, and the control block (elaborated separately)
        # needs the complete list.
        self._module = self._build()

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
        return self._module

    def _build(self):
        m = Module()
        pl, csr, dw = self.pipeline, self.csr, self.dw
        P = pl.n_ports
        nin, nout = pl.n_inputs, pl.n_outputs
        R = pl.recirc_input

        # ---- ingress buffers and arbiter ----------------------------------------------
        bufs = []
        for k in range(nin):
            recirc = k == R
            buf = PacketBuffer(data_width=dw, user_width=UW,
                               depth_beats=self.recirc_beats if recirc else self.in_buffer_beats,
                               backpressure=(P <= k < 2 * P), error_bit=(k < P))
            m.submodules[f"inbuf{k}"] = buf
            bufs.append(buf)
            for what in ("drop_runt", "drop_oversize", "drop_error", "drop_full"):
                m.d.comb += self.ctr[f"in{k}.{what}"].eq(getattr(buf, what))
            if not recirc:
                src = getattr(self, f"in{k}")
                m.d.comb += [
                    buf.i.valid.eq(src.valid), src.ready.eq(buf.i.ready),
                    buf.i.payload.data.eq(src.payload.data),
                    buf.i.payload.keep.eq(src.payload.keep),
                    buf.i.payload.last.eq(src.payload.last),
                    buf.i.payload.user.eq(src.payload.user),
                ]
        arb = IngressArbiter(nin, data_width=dw, user_width=UW)
        m.submodules.arbiter = arb
        for k in range(nin):
            wiring.connect(m, bufs[k].o, arb.i[k])
        m.d.comb += arb.o.ready.eq(1)
        beat = arb.o.payload
        in_pkt = Signal()
        with m.If(arb.o.valid):
            m.d.sync += in_pkt.eq(~beat.last)
        first = arb.o.valid & ~in_pkt
        for k in range(nin):
            m.d.comb += [self.ctr[f"in{k}.pkts"].eq(first & (beat.port == k)),
                         self.ctr[f"in{k}.bytes"].eq(Mux(first & (beat.port == k), beat.len, 0))]

        # ---- parser -------------------------------------------------------------------
        parser = self.parser
        m.submodules.parser = parser
        m.d.comb += [parser.i_valid.eq(arb.o.valid), parser.i.eq(beat)]
        valid, phv = parser.phv_valid, parser.phv

        # ---- ingress elements -----------------------------------------------------------
        S = 0
        for idx, stage in enumerate(pl.stages()):
            valid, phv, lat = build_stage(m, stage, pl, valid, phv, csr, prefix=f"i{idx}")
            S += lat

        # ---- traffic manager (traffic_manager.py) ------------------------------------------
        f = HwEnv(pl, phv).field
        tm = TrafficManager(nout, pl.mcast_groups, pl.max_recirc,
                            group_width=pl.field_width("meta.mcast_group"),
                            port_width=pl.field_width("meta.egress_port"),
                            count_width=pl.field_width("meta.recirc_count"))
        m.submodules.tm = tm
        port = self.mcast_port
        m.d.comb += [
            tm.i_valid.eq(valid), tm.i_drop.eq(f("meta.drop")), tm.i_recirc.eq(f("meta.recirc")),
            tm.i_clone.eq(f("meta.clone")), tm.i_group.eq(f("meta.mcast_group")),
            tm.i_egress_port.eq(f("meta.egress_port")),
            tm.i_recirc_count.eq(f("meta.recirc_count")),
            tm.mc_req.eq(port.req), tm.mc_we.eq(port.we), tm.mc_addr.eq(port.addr),
            tm.mc_wdata.eq(port.wdata), port.ack.eq(tm.mc_ack), port.rdata.eq(tm.mc_rdata),
            self.ctr["tm.drop"].eq(tm.cnt_drop),
            self.ctr["tm.mcast_empty"].eq(tm.cnt_mcast_empty),
            self.ctr["tm.bad_port"].eq(tm.cnt_bad_port),
            self.ctr["tm.recirc_limit"].eq(tm.cnt_recirc_limit),
        ]
        t1_phv = Signal(data.StructLayout(pl.phv.layout()))
        m.d.sync += t1_phv.eq(phv)
        # per copy: registered (valid, phv with egress_port/rid)
        copies = []
        for q in range(nout):
            cv = Signal(name=f"copy{q}_valid")
            cp = Signal(data.StructLayout(pl.phv.layout()), name=f"copy{q}_phv")
            m.d.sync += [cv.eq(tm.copy_valid[q]), cp.eq(t1_phv)]
            e = HwEnv(pl, cp).field
            m.d.sync += [e("meta.egress_port").eq(q), e("meta.rid").eq(tm.copy_rid[q])]
            copies.append((cv, cp))
        rv = Signal(name="copyr_valid")
        rp = Signal(data.StructLayout(pl.phv.layout()), name="copyr_phv")
        m.d.sync += [rv.eq(tm.recirc_valid), rp.eq(t1_phv)]

        # ---- egress elements per copy ---------------------------------------------------
        E = 0
        outs = []
        shared = _SharedCsr(csr, m)
        for q, (cv, cp) in enumerate(copies):
            shared.q = q
            lat_q = 0
            for idx, e in enumerate(pl.egress_elements):
                cv, cp, lat = build_element(m, e, pl, cv, cp, shared,
                                            prefix=f"e{q}_{idx}_{e.program.name}_{e.name}")
                lat_q += lat
            E = lat_q
            outs.append((cv, cp))
        shared.finish()
        for k in range(E):
            nv, np_ = Signal(name=f"copyr_v{k}"), Signal(data.StructLayout(pl.phv.layout()))
            m.d.sync += [nv.eq(rv), np_.eq(rp)]
            rv, rp = nv, np_
        outs.append((rv, rp))

        # ---- original fields and beats wait for the header path ----------------------------
        orig_w = orig_layout().size
        orig_delay = DelayLine(orig_w, S + TM_LATENCY + E)
        m.submodules.orig_delay = orig_delay
        m.d.comb += orig_delay.i.eq(parser.orig)
        orig = Signal(orig_layout())
        m.d.comb += orig.eq(orig_delay.o)

        self.latency = FIRST_TO_PHV + S + TM_LATENCY + E + PREP_LATENCY
        bl = data.StructLayout({"valid": 1, "data": dw, "keep": dw // 8, "last": 1,
                                "len": 14, "port": 4, "user": UW})
        beat_delay = DelayLine(bl.size, self.latency)
        m.submodules.beat_delay = beat_delay
        din = Signal(bl)
        m.d.comb += [din.valid.eq(arb.o.valid), din.data.eq(beat.data), din.keep.eq(beat.keep),
                     din.last.eq(beat.last), din.len.eq(beat.len), din.port.eq(beat.port),
                     din.user.eq(beat.user)]
        m.d.comb += beat_delay.i.eq(din)
        b = Signal(bl)
        m.d.comb += b.eq(beat_delay.o)
        b_in_pkt = Signal()
        bidx = Signal(2)
        with m.If(b.valid):
            m.d.sync += b_in_pkt.eq(~b.last)
            m.d.sync += bidx.eq(Mux(b.last, 0, Mux(bidx == 3, 3, bidx + 1)))
        b_first = b.valid & ~b_in_pkt

        # ---- deparse each copy and hand it to its queue --------------------------------------
        own_copy = [Signal(name=f"own_copy{p}") for p in range(P)]
        for c, (cv, cp) in enumerate(outs):
            is_rc = c == nout
            name = "recirc" if is_rc else f"out{c}"
            extra = Cat((HwEnv(pl, cp).field("meta.recirc_count") + 1)[:3],
                        HwEnv(pl, cp).field("meta.bridge"))
            dep = Deparser(pl, data_width=dw, extra_width=len(extra), name=f"dp_{name}")
            m.submodules[f"dp_{name}"] = dep
            m.d.comb += [dep.copy_valid.eq(cv), dep.copy_phv.eq(cp), dep.orig.eq(orig),
                         dep.extra.eq(extra), dep.beat_valid.eq(b.valid),
                         dep.beat_first.eq(b_first), dep.beat_last.eq(b.last),
                         dep.beat_index.eq(bidx), dep.beat_data.eq(b.data)]
            active, ovalid, odata, pextra = dep.active, dep.valid, dep.data, dep.extra_out
            if is_rc:
                rbuf = bufs[R]
                m.d.comb += [
                    rbuf.i.valid.eq(ovalid), rbuf.i.payload.data.eq(odata),
                    rbuf.i.payload.keep.eq(b.keep), rbuf.i.payload.last.eq(b.last),
                    rbuf.i.payload.user.eq(pextra[:35]),
                ]
                continue
            q = c
            if q < P:
                # a host packet keeps its TX tuser on every wire port (spec); only the copy on
                # its own port is "own" (its MAC completion goes back to the host)
                own = b.port == P + q
                from_host = (b.port >= P) & (b.port < 2 * P)
                user = Cat(Mux(from_host, b.user[:TX_USER], 0), own)
                m.d.comb += own_copy[q].eq(b_first & active & own)
            else:
                user = Mux(b.port < P, b.user, 0)
            eq = EgressQueue(data_width=dw, user_width=len(user), depth_beats=self.out_queue_beats)
            m.submodules[f"outq{q}"] = eq
            m.d.comb += [
                eq.i.valid.eq(ovalid), eq.i.payload.data.eq(odata),
                eq.i.payload.keep.eq(b.keep), eq.i.payload.last.eq(b.last),
                eq.i.payload.user.eq(user), eq.i.payload.len.eq(b.len),
                self.ctr[f"out{q}.drop_full"].eq(eq.drop_full),
            ]
            dst = getattr(self, f"out{q}")
            wiring.connect(m, eq.o, wiring.flipped(dst))
            o_in = Signal(name=f"out{q}_in_pkt")
            with m.If(dst.valid & dst.ready):
                m.d.sync += o_in.eq(~dst.payload.last)
            ofirst = dst.valid & dst.ready & ~o_in
            m.d.comb += [self.ctr[f"out{q}.pkts"].eq(ofirst),
                         self.ctr[f"out{q}.bytes"].eq(Mux(ofirst, dst.payload.len, 0))]
            if q < P:
                self._own_queue_drop(m, q, eq, user, ovalid, b_first)

        # ---- synthesised TX completions for host packets that will not reach their port -------
        for p in range(P):
            k = P + p
            tag_in = Signal(16, name=f"in{k}_first_tag")
            src = getattr(self, f"in{k}")
            src_in = Signal(name=f"in{k}_in_pkt")
            with m.If(src.valid & src.ready):
                m.d.sync += src_in.eq(~src.payload.last)
                with m.If(~src_in):
                    m.d.sync += tag_in.eq(src.payload.user[1:17])
            events = [
                # (a) leaves the pipeline without a copy to its own wire port
                (b_first & (b.port == k) & ~own_copy[p], b.user[1:17]),
                # (b) its own-port copy found the egress queue full
                (self._own_drop[p], self._own_drop_tag[p]),
                # (c) dropped by its input buffer (runt or oversize)
                (bufs[k].drop_runt | bufs[k].drop_oversize, tag_in),
            ]
            ce = CompletionEvents(len(events))
            m.submodules[f"cpl_events{p}"] = ce
            for i, (ev, tag) in enumerate(events):
                m.d.comb += [ce.ev[i].eq(ev), ce.tag[i].eq(tag)]
            m.d.comb += [getattr(self, f"synth{p}_valid").eq(ce.o.valid),
                         getattr(self, f"synth{p}_tag").eq(ce.o.payload),
                         ce.o.ready.eq(getattr(self, f"synth{p}_ready")),
                         self.ctr[f"cpl{p}.synth_lost"].eq(ce.lost)]
        return m

    def _own_queue_drop(self, m, q, eq, user, ovalid, b_first):
        if not hasattr(self, "_own_drop"):
            self._own_drop, self._own_drop_tag = {}, {}
        # the queue's drop pulse comes one cycle after the first beat it refused; remember the
        # tag and ownership of the packet whose first beat it saw last
        tag = Signal(16, name=f"outq{q}_tag")
        own = Signal(name=f"outq{q}_own")
        with m.If(ovalid & b_first):
            m.d.sync += [tag.eq(user[1:17]), own.eq(user[TX_USER])]
        d, t = Signal(name=f"outq{q}_own_drop"), Signal(16, name=f"outq{q}_own_drop_tag")
        m.d.comb += [d.eq(eq.drop_full & own), t.eq(tag)]
        self._own_drop[q], self._own_drop_tag[q] = d, t


def _arb_layout(dw):
    from .axis import arb_layout
    return arb_layout(dw, UW)


class _SharedCsr:
    """Egress elements are replicated per output copy. Copy 0 declares the host memories;
    the other copies get mirrors that see the same write requests (one host write updates
    every copy; copy 0 answers reads). Counters are summed over the copies."""

    def __init__(self, csr, m):
        self.csr, self.m, self.q = csr, m, 0
        self.counters = {}

    def memory(self, name, entry_width, depth, doc="", **meta):
        from .csr import MemoryPort
        if self.q == 0:
            return self.csr.memory(name, entry_width, depth, doc, **meta)
        main = next(mi.port for mi in self.csr.memories if mi.name == name)
        mirror = MemoryPort(f"{name.replace('.', '__')}_copy{self.q}", entry_width, depth)
        self.m.d.comb += [mirror.req.eq(main.req & main.we), mirror.we.eq(main.we),
                          mirror.addr.eq(main.addr), mirror.wdata.eq(main.wdata)]
        return mirror

    def counter(self, name, inc_width=1, doc=""):
        sig = Signal(inc_width, name=f"{name.replace('.', '__')}_copy{self.q}")
        self.counters.setdefault(name, (inc_width, doc, []))[2].append(sig)
        return sig

    def reg(self, *a, **kw):
        raise TypeError("egress elements cannot declare registers")

    def finish(self):
        for name, (w, doc, sigs) in self.counters.items():
            total = self.csr.counter(name, w + len(sigs).bit_length(), doc=doc)
            self.m.d.comb += total.eq(sum(sigs))
