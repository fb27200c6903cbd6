"""Traffic manager decision: which copies a packet makes (``docs/dataplane-spec.md``).

Takes the TM-relevant PHV fields of the packet leaving the last ingress element (cycle t0)
and, one cycle later (t1), says which copies to make:

* ``meta.drop`` -> no copy (``cnt_drop``);
* ``meta.recirc`` -> the recirculation copy only;
* else ``meta.mcast_group != 0`` -> one copy per set bit ``q`` of the group's port bitmap,
  ``copy_rid[q]`` = the group's rid for ``q``; an empty or unknown (``>= mcast_groups``) group
  gives none (``cnt_mcast_empty``);
* else one copy to ``meta.egress_port``, rid 0; a port ``>= n_outputs`` gives none
  (``cnt_bad_port``);
* and, unless dropped, ``recirc`` or ``clone`` asks for the recirculation copy, which is not
  made when ``meta.recirc_count >= max_recirc`` (``cnt_recirc_limit``).

The multicast table (``n_outputs + 16*n_outputs`` bits per group: ports bitmap, then rid[0],
rid[1], ...) is a memory read at t0 (so a packet sees the entry as it was before any host
write in its t0 cycle) with a host port following the :class:`~netstor.gateware.csr.MemoryPort`
protocol (``mc_*``): a write lands in the first cycle of the request, ``ack`` two cycles later;
a read's ``rdata`` is valid in the ``ack`` cycle.

:class:`TrafficManager` is that decision on the TM fields alone (``i``: a
:func:`~.axis.flow_signature` of :func:`request_layout`; ``o`` at t1, combinational from t1
registers: ``copies`` (one bit per output, 0 when no packet is at t1), ``rids``, ``recirc``;
``cnt``: the four counter pulses). :class:`Replicator` is the block the data path uses: it
takes the PHV stream, makes the copies as registered PHV streams (egress port and rid set,
``TM_LATENCY`` = 2 cycles in total) and declares the multicast table and the counters.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axis import flow_signature
from .csr import memory_port_signature
from .kit import HwEnv

__all__ = ["TrafficManager", "Replicator", "TM_LATENCY", "request_layout", "decision_layout",
           "counter_layout", "ReplicationEngine", "copy_layout", "engine_counter_layout",
           "GROUP_COPIES", "GROUP_WORD_BITS"]

#: cycles from a PHV entering :class:`Replicator` to its copies leaving it
TM_LATENCY = 2


def request_layout(group_width=8, port_width=4, count_width=3):
    """The TM fields of one packet: ``drop``, ``recirc``, ``clone``, ``group``
    (``meta.mcast_group``), ``egress_port``, ``recirc_count``."""
    return data.StructLayout({"drop": 1, "recirc": 1, "clone": 1, "group": group_width,
                              "egress_port": port_width, "recirc_count": count_width})


def decision_layout(n_outputs, rid_width=16):
    """Which copies to make: ``copies`` (bit ``q`` = a copy to output ``q``), ``rids``
    (``rids[q]``: the copy's rid), ``recirc`` (the recirculation copy)."""
    return data.StructLayout({"copies": n_outputs,
                              "rids": data.ArrayLayout(rid_width, n_outputs), "recirc": 1})


def counter_layout():
    """The traffic manager's counter pulses."""
    return data.StructLayout({"drop": 1, "mcast_empty": 1, "bad_port": 1, "recirc_limit": 1})


class TrafficManager(wiring.Component):
    """The copy decision of the module docstring on the TM fields of one packet.

    Ports: ``i`` (:func:`~.axis.flow_signature` of :func:`request_layout`, at t0); ``mc``
    (the multicast table's host port, :func:`~.csr.memory_port_signature`); ``o``
    (:func:`~.axis.flow_signature` of :func:`decision_layout`, at t1); ``cnt``
    (:func:`counter_layout` pulses, at t1).

    Latency: 1 cycle (t0 -> t1). Throughput: one decision per clock.
    """

    def __init__(self, n_outputs, mcast_groups, max_recirc, *, group_width=8, port_width=4,
                 count_width=3, rid_width=16):
        self.n_outputs, self.mcast_groups, self.max_recirc = n_outputs, mcast_groups, max_recirc
        self.rid_width = rid_width
        self.entry_width = n_outputs + rid_width * n_outputs
        super().__init__({
            "i": In(flow_signature(request_layout(group_width, port_width, count_width))),
            # host access to the multicast table (MemoryPort protocol)
            "mc": In(memory_port_signature(self.entry_width, mcast_groups)),
            # decision, at t1
            "o": Out(flow_signature(decision_layout(n_outputs, rid_width))),
            "cnt": Out(counter_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        nout, rw = self.n_outputs, self.rid_width
        req, dec = self.i.payload, self.o.payload
        mc_port = self.mc
        mc = Memory(shape=self.entry_width, depth=self.mcast_groups, init=[])
        m.submodules.mcast = mc
        mc_rp, mc_wp, mc_hp = mc.read_port(), mc.write_port(), mc.read_port()
        gbits = max(1, (self.mcast_groups - 1).bit_length())
        m.d.comb += [mc_rp.addr.eq(req.group[:gbits]), mc_rp.en.eq(1)]
        mpend = Signal()
        m.d.comb += [mc_wp.addr.eq(mc_port.addr), mc_wp.data.eq(mc_port.wdata),
                     mc_wp.en.eq(mc_port.req & mc_port.we & ~mc_port.ack),
                     mc_hp.addr.eq(mc_port.addr), mc_hp.en.eq(1),
                     mc_port.rdata.eq(mc_hp.data)]
        m.d.sync += [mpend.eq(mc_port.req & ~mpend & ~mc_port.ack), mc_port.ack.eq(mpend)]

        # t1 registers
        valid = Signal()
        drop, recirc, clone = Signal(), Signal(), Signal()
        group = Signal.like(req.group)
        egp = Signal.like(req.egress_port)
        count = Signal.like(req.recirc_count)
        m.d.sync += [valid.eq(self.i.valid), drop.eq(req.drop), recirc.eq(req.recirc),
                     clone.eq(req.clone), group.eq(req.group),
                     egp.eq(req.egress_port), count.eq(req.recirc_count)]
        entry = mc_rp.data
        in_range_group = group < self.mcast_groups
        mask = Signal(nout)
        rids = [Signal(rw, name=f"rid{q}") for q in range(nout)]
        with m.If(drop | recirc):
            m.d.comb += mask.eq(0)
        with m.Elif(group != 0):
            m.d.comb += mask.eq(Mux(in_range_group, entry[:nout], 0))
            for q in range(nout):
                m.d.comb += rids[q].eq(entry[nout + rw * q:nout + rw * q + rw])
        with m.Else():
            for q in range(nout):
                m.d.comb += mask[q].eq(egp == q)
        want_rc = ~drop & (recirc | clone)
        limit = count >= self.max_recirc
        rc = want_rc & ~limit
        m.d.comb += [
            self.o.valid.eq(valid),
            dec.copies.eq(Mux(valid, mask, 0)),
            dec.recirc.eq(valid & rc),
            self.cnt.drop.eq(valid & drop),
            self.cnt.mcast_empty.eq(valid & ~drop & ~recirc & (group != 0) & (mask == 0)),
            self.cnt.bad_port.eq(valid & ~drop & ~recirc & (group == 0) & (egp >= nout)),
            self.cnt.recirc_limit.eq(valid & want_rc & limit),
        ]
        for q in range(nout):
            m.d.comb += dec.rids[q].eq(rids[q])
        return m


class Replicator(wiring.Component):
    """The traffic manager as the data path sees it: PHVs in, the copies out.

    Ports: ``i`` (the PHV stream after the last ingress stage, :func:`~.axis.flow_signature`);
    ``copy[q]`` (one per output ``q``: the packet's PHV with ``meta.egress_port = q`` and
    ``meta.rid`` set, valid when :class:`TrafficManager` makes that copy); ``recirc`` (the
    recirculation copy, PHV unchanged); ``mc`` (the multicast table's host port, connect it
    to ``csr``'s ``tm.mcast`` memory); ``cnt`` (the counter pulses, :func:`counter_layout`).

    Latency: ``TM_LATENCY`` = 2 cycles (the decision at t1, the copies registered at t2).
    Throughput: one PHV per clock in; up to ``n_outputs + 1`` copies of it per clock out.
    """

    def __init__(self, pipeline):
        pl = self.pipeline = pipeline
        nout = pl.n_outputs
        phv = flow_signature(data.StructLayout(pl.phv.layout()))
        self.tm = TrafficManager(nout, pl.mcast_groups, pl.max_recirc,
                                 group_width=pl.field_width("meta.mcast_group"),
                                 port_width=pl.field_width("meta.egress_port"),
                                 count_width=pl.field_width("meta.recirc_count"))
        super().__init__({
            "i": In(phv),
            "mc": In(memory_port_signature(self.tm.entry_width, pl.mcast_groups)),
            "copy": Out(phv).array(nout),
            "recirc": Out(phv),
            "cnt": Out(counter_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        pl, tm = self.pipeline, self.tm
        m.submodules.tm = tm
        f = HwEnv(pl, self.i.payload).field
        m.d.comb += [
            tm.i.valid.eq(self.i.valid), tm.i.payload.drop.eq(f("meta.drop")),
            tm.i.payload.recirc.eq(f("meta.recirc")), tm.i.payload.clone.eq(f("meta.clone")),
            tm.i.payload.group.eq(f("meta.mcast_group")),
            tm.i.payload.egress_port.eq(f("meta.egress_port")),
            tm.i.payload.recirc_count.eq(f("meta.recirc_count")),
            self.cnt.eq(tm.cnt),
        ]
        wiring.connect(m, wiring.flipped(self.mc), tm.mc)
        t1_phv = Signal(data.StructLayout(pl.phv.layout()))
        m.d.sync += t1_phv.eq(self.i.payload)
        for q, copy in enumerate(self.copy):
            e = HwEnv(pl, copy.payload).field
            m.d.sync += [copy.valid.eq(tm.o.payload.copies[q]), copy.payload.eq(t1_phv)]
            m.d.sync += [e("meta.egress_port").eq(q), e("meta.rid").eq(tm.o.payload.rids[q])]
        m.d.sync += [self.recirc.valid.eq(tm.o.payload.recirc),
                     self.recirc.payload.eq(t1_phv)]
        return m


# ---- replication engine (issue 12 item 3): copy lists -------------------------------------------
#: copies per group, and the ``tm.groups`` word (netstor.model.replication is the reference):
#: ``n (5) | copy[0] | ... | copy[15]``, copy = ``port (4) | rid (16)``
GROUP_COPIES = 16
GROUP_COUNT_BITS = 5
GROUP_PORT_BITS = 4
GROUP_RID_BITS = 16
GROUP_COPY_BITS = GROUP_PORT_BITS + GROUP_RID_BITS
GROUP_WORD_BITS = GROUP_COUNT_BITS + GROUP_COPIES * GROUP_COPY_BITS


def copy_layout(tag_width):
    """One copy out of :class:`ReplicationEngine`: ``port``, ``rid``, the packet's ``tag``,
    ``first`` / ``last`` (the packet's first / last copy made)."""
    return data.StructLayout({"port": GROUP_PORT_BITS, "rid": GROUP_RID_BITS,
                              "tag": tag_width, "first": 1, "last": 1})


def engine_counter_layout():
    """:class:`ReplicationEngine`'s counter pulses: ``mcast_empty`` (a group listing no copy,
    or a group number ``>= n_groups``), ``bad_port`` (one listed copy to a port
    ``>= n_outputs``: not made), ``overflow`` (a packet refused: descriptor FIFO full)."""
    return data.StructLayout({"mcast_empty": 1, "bad_port": 1, "overflow": 1})


class ReplicationEngine(wiring.Component):
    """Multicast as copy lists: a packet (a descriptor ``{group, tag}``; ``tag`` names the
    packet stored once, e.g. its packet-store slot) becomes the group's copies, in list order,
    **one copy per clock**, back to back across packets (``netstor.model.replication``).

    * Group memory: ``n_groups`` words of :data:`GROUP_WORD_BITS` (325) bits, one synchronous
      read port (BRAM: 4,096 groups = 1.3 Mbit), one write port. The host port ``mc``
      (:func:`~.csr.memory_port_signature`, the :class:`~.csr.MemoryPort` protocol: a write
      lands in the request's first cycle, ``ack`` two cycles later, a read's ``rdata`` valid in
      the ``ack`` cycle) reads through the packets' read port: a host read takes it in the
      request's first cycle (the engine waits that cycle), so the host never starves and the
      memory has no second read port.
    * ``i`` (valid only, never stalled): descriptors enter a ``fifo_depth`` FIFO; one that finds
      it full is refused (``cnt.overflow``).
    * Pipeline: FIFO head -> memory read (1 cycle) -> per-copy masks registered into a
      4-entry prefetch FIFO (listed: ``i < n``; made: also ``port < n_outputs``; an entry
      listing nothing is counted ``mcast_empty`` and dropped) -> the current list, a shift
      register that emits copy 0 and shifts each cycle ``o`` takes it. The next list loads in
      the cycle the current one's last listed copy leaves, so copies of successive packets
      leave back to back; a listed copy to a bad port costs one idle cycle (``bad_port``).
    * ``o``: stream of :func:`copy_layout` with ``ready`` (the packet store / egress lane may
      wait). Latency: a descriptor's first copy is valid 5 cycles after it enters ``i`` (with
      the FIFOs empty and no host read). Throughput: one copy per clock.
    * ``direct=True`` (the data path: every copy of every packet leaves through the engine, so
      each output keeps packet order): the descriptor also has ``direct`` (no group: the
      memory read is ignored; ``group`` is not looked at), ``dcopy`` (with ``direct``: one copy
      to ``dport``, rid 0; the traffic manager has checked the port) and ``rc`` (prepend the
      recirculation copy: port ``n_outputs``, rid 0, made before the group's or the direct
      copy). A list is then up to ``copies + 1`` long; ``mcast_empty`` counts a group
      descriptor (``direct`` = 0) whose group lists nothing, with or without ``rc``.
      **Express way:** a direct descriptor that finds the engine idle (FIFO, group read,
      landing, prefetch FIFO and current list all empty) becomes the current list at once:
      its first copy is valid 1 cycle after it enters ``i`` (an idle unicast packet's
      latency), and it lands on ``land`` in that cycle.
    """

    def __init__(self, n_outputs, n_groups=4096, *, group_width=12, tag_width=8,
                 fifo_depth=16, copies=GROUP_COPIES, direct=False):
        if not 1 <= n_outputs <= 1 << GROUP_PORT_BITS:
            raise ValueError("n_outputs must fit the 4-bit port of a copy")
        if direct and n_outputs >= 1 << GROUP_PORT_BITS:
            raise ValueError("direct descriptors need port n_outputs (the recirculation copy)")
        if not 1 <= copies <= GROUP_COPIES:
            raise ValueError(f"copies must be 1..{GROUP_COPIES}")
        self.n_outputs, self.n_groups = n_outputs, n_groups
        #: copies per group (16 in the data path; fewer only for small formal models)
        self.copies = copies
        #: direct descriptors (the data path's unicast and recirculation copies, see the class
        #: docstring)
        self.direct = direct
        self.word_bits = GROUP_COUNT_BITS + copies * GROUP_COPY_BITS
        self.slots = copies + 1 if direct else copies
        self.group_width, self.tag_width, self.fifo_depth = group_width, tag_width, fifo_depth
        desc = {"group": group_width, "tag": tag_width}
        if direct:
            desc.update({"direct": 1, "dcopy": 1, "dport": GROUP_PORT_BITS, "rc": 1})
        super().__init__({
            "i": In(flow_signature(data.StructLayout(desc))),
            "mc": In(memory_port_signature(self.word_bits, n_groups)),
            "o": Out(stream.Signature(copy_layout(tag_width))),
            "cnt": Out(engine_counter_layout()),
            # every list as it lands (one cycle, before the prefetch FIFO): the copies it
            # will make (``made`` per slot, ``copies`` port|rid per slot) and the tag
            "land": Out(flow_signature(data.StructLayout({
                "made": self.slots, "copies": self.slots * GROUP_COPY_BITS, "tag": tag_width}))),
        })

    def elaborate(self, platform):
        m = Module()
        NG, CB, tw = self.copies, GROUP_COPY_BITS, self.tag_width
        N = NG + 1 if self.direct else NG       # list slots
        gbits = max(1, (self.n_groups - 1).bit_length())

        # ---- descriptor FIFO ----------------------------------------------------------------
        ip = self.i.payload
        fields = [ip.group, ip.tag]
        if self.direct:
            fields += [ip.direct, ip.dcopy, ip.dport, ip.rc]
        din = Cat(*fields)
        dfifo = m.submodules.dfifo = SyncFIFO(width=len(din), depth=self.fifo_depth)
        m.d.comb += [dfifo.w_data.eq(din), dfifo.w_en.eq(self.i.valid)]
        m.d.sync += self.cnt.overflow.eq(self.i.valid & ~dfifo.w_rdy)
        head_group = dfifo.r_data[:self.group_width]
        head_tag = dfifo.r_data[self.group_width:self.group_width + tw]
        head_dir = dfifo.r_data[self.group_width + tw:]

        # ---- group memory and its host port -------------------------------------------------
        mem = m.submodules.groups = Memory(shape=self.word_bits, depth=self.n_groups, init=[])
        rp, wp = mem.read_port(), mem.write_port()
        mc = self.mc
        mpend = Signal()
        first = mc.req & ~mpend & ~mc.ack
        hread = Signal()
        m.d.comb += hread.eq(first & ~mc.we)
        m.d.comb += [wp.addr.eq(mc.addr), wp.data.eq(mc.wdata), wp.en.eq(first & mc.we)]
        m.d.sync += [mpend.eq(first), mc.ack.eq(mpend)]
        h_rdata = Signal(self.word_bits, reset_less=True)
        m.d.sync += h_rdata.eq(rp.data)          # read at t, data at t+1, ack at t+2
        m.d.comb += mc.rdata.eq(h_rdata)

        # ---- issue: one memory read per packet, with credit for the prefetch FIFO ----------
        pf_depth = 4
        pf = m.submodules.prefetch = SyncFIFO(width=2 * N + CB * N + tw, depth=pf_depth)
        pending = Signal()                       # a read whose data is on rp.data
        l_valid = Signal()                       # its masks registered, written to pf now
        p_tag = Signal(tw, reset_less=True)
        p_inrange = Signal(reset_less=True)
        credit = (pf.level + pending + l_valid) < pf_depth
        issue = Signal()
        # ``skip``: the FIFO's head went the express way (below): popped, not issued
        skip = Signal()
        m.d.comb += issue.eq(dfifo.r_rdy & credit & ~hread & ~skip)
        m.d.comb += [dfifo.r_en.eq(issue | skip), rp.en.eq(1),
                     rp.addr.eq(Mux(hread, mc.addr, head_group[:gbits]))]
        m.d.sync += [pending.eq(issue)]
        m.d.sync += [p_tag.eq(head_tag),
                     p_inrange.eq(head_group < self.n_groups)]
        if self.direct:
            p_direct, p_dcopy, p_rc = (Signal(reset_less=True, name=n_)
                                       for n_ in ("p_direct", "p_dcopy", "p_rc"))
            p_dport = Signal(GROUP_PORT_BITS, reset_less=True)
            m.d.sync += Cat(p_direct, p_dcopy, p_dport, p_rc).eq(head_dir)

        # ---- landing: masks from the entry, into the prefetch FIFO (registered) -------------
        entry = rp.data
        n = entry[:GROUP_COUNT_BITS]
        l_listed = Signal(N, reset_less=True)
        l_made = Signal(N, reset_less=True)
        l_copies = Signal(CB * N, reset_less=True)
        l_tag = Signal(tw, reset_less=True)
        l_gempty = Signal(reset_less=True)       # a group descriptor whose group lists nothing
        m.d.sync += l_valid.eq(pending)
        g_listed = []
        for k in range(NG):
            port = entry[GROUP_COUNT_BITS + CB * k:GROUP_COUNT_BITS + CB * k + GROUP_PORT_BITS]
            g_listed.append(p_inrange & (n > k))
            if not self.direct:
                m.d.sync += [l_listed[k].eq(g_listed[k]),
                             l_made[k].eq(g_listed[k] & (port < self.n_outputs))]
        if not self.direct:
            m.d.sync += [l_copies.eq(entry[GROUP_COUNT_BITS:]), l_tag.eq(p_tag),
                         l_gempty.eq(Cat(*g_listed) == 0)]
        else:
            # base list: the group's copies, or the direct copy (slot 0); then the
            # recirculation copy, when asked for, prepended (every slot shifts by one)
            base = []                             # (listed, made, copy) per base slot
            for k in range(NG):
                gcopy = entry[GROUP_COUNT_BITS + CB * k:GROUP_COUNT_BITS + CB * (k + 1)]
                gport = gcopy[:GROUP_PORT_BITS]
                if k == 0:
                    listed = Mux(p_direct, p_dcopy, g_listed[0])
                    made = Mux(p_direct, p_dcopy, g_listed[0] & (gport < self.n_outputs))
                    copy = Mux(p_direct, Cat(p_dport, Const(0, GROUP_RID_BITS)), gcopy)
                else:
                    listed = ~p_direct & g_listed[k]
                    made = listed & (gport < self.n_outputs)
                    copy = gcopy
                base.append((listed, made, copy))
            rc_copy = Const(self.n_outputs, CB)   # port n_outputs, rid 0
            for k in range(N):
                lk, mk, ck = base[k] if k < NG else (Const(0), Const(0), Const(0, CB))
                if k == 0:
                    pl_, pm_, pc_ = Const(1), Const(1), rc_copy
                else:
                    pl_, pm_, pc_ = base[k - 1]
                m.d.sync += [l_listed[k].eq(Mux(p_rc, pl_, lk)), l_made[k].eq(Mux(p_rc, pm_, mk)),
                             l_copies[CB * k:CB * (k + 1)].eq(Mux(p_rc, pc_, ck))]
            m.d.sync += [l_tag.eq(p_tag), l_gempty.eq(~p_direct & (Cat(*g_listed) == 0))]
        l_empty = l_listed == 0
        m.d.comb += [pf.w_en.eq(l_valid & ~l_empty),
                     pf.w_data.eq(Cat(l_listed, l_made, l_copies, l_tag))]
        m.d.sync += self.cnt.mcast_empty.eq(l_valid & l_gempty)

        # ---- the current list ---------------------------------------------------------------
        c_listed = Signal(N)                     # control: reset
        c_made = Signal(N, reset_less=True)
        c_copies = Signal(CB * N, reset_less=True)
        c_tag = Signal(tw, reset_less=True)
        c_first = Signal(reset_less=True)
        c_rest = Signal(init=1)                  # c_listed[1:] == 0, kept registered
        c_rest_made = Signal(reset_less=True)    # c_made[1:] == 0
        busy = c_listed[0]                       # listed copies are a prefix: i < n
        emit = c_listed[0] & c_made[0]
        step = Signal()
        m.d.comb += step.eq(busy & (~emit | self.o.ready))
        load = Signal()
        m.d.comb += load.eq(pf.r_rdy & (~busy | (step & c_rest)))
        m.d.comb += pf.r_en.eq(load)
        f_listed = pf.r_data[:N]
        f_made = pf.r_data[N:2 * N]
        f_copies = pf.r_data[2 * N:2 * N + CB * N]
        f_tag = pf.r_data[2 * N + CB * N:]

        with m.If(load):
            m.d.sync += [c_listed.eq(f_listed), c_made.eq(f_made), c_copies.eq(f_copies),
                         c_tag.eq(f_tag), c_first.eq(1),
                         c_rest.eq(f_listed[1:] == 0), c_rest_made.eq(f_made[1:] == 0)]
        with m.Elif(step):
            m.d.sync += [c_listed.eq(c_listed[1:]), c_made.eq(c_made[1:]),
                         c_copies.eq(c_copies[CB:]),
                         c_rest.eq(c_listed[2:] == 0), c_rest_made.eq(c_made[2:] == 0)]
            with m.If(emit):
                m.d.sync += c_first.eq(0)
        # ---- the express way (``direct``): an idle engine loads a direct list at once -------
        # Every stage empty (FIFO, read, landing, prefetch FIFO; the current list empty or its
        # last copy leaving now): a direct descriptor needs no group read and nothing is ahead
        # of it, so its list is the current list in the next cycle (its first copy 1 cycle
        # after ``i`` instead of 5; unicast packets back to back each take this way). The
        # descriptor is still written to the FIFO (the write enable stays ``i.valid``: no logic
        # in front of the FIFO's level counter) and popped unissued in the next cycle (``skip``).
        express = Signal()
        x_land = Signal()                        # the express list lands (on ``land``)
        if self.direct:
            # (the FIFO holds just the previous express descriptor, popped now, when ``skip``:
            # that one found it empty and was its only write)
            idle = ((~dfifo.r_rdy | skip) & ~pending & ~l_valid & ~pf.r_rdy
                    & (~busy | (step & c_rest)))
            m.d.comb += express.eq(self.i.valid & ip.direct & idle)
            m.d.sync += [skip.eq(express), x_land.eq(express)]
            dcopy = Cat(ip.dport, Const(0, GROUP_RID_BITS))
            x_list = Cat(ip.rc | ip.dcopy, ip.rc & ip.dcopy, Const(0, N - 2))
            x_copy = Cat(Mux(ip.rc, Const(self.n_outputs, CB), dcopy), dcopy,
                         Const(0, CB * (N - 2)))
            with m.If(express):
                # (after the load/step assignments above, so it wins over a step of the list
                # ending now; ``load`` is 0: the prefetch FIFO is empty; ``made`` = ``listed``:
                # the traffic manager checked the direct port)
                m.d.sync += [c_listed.eq(x_list), c_made.eq(x_list), c_copies.eq(x_copy),
                             c_tag.eq(ip.tag), c_first.eq(1), c_rest.eq(x_list[1:] == 0),
                             c_rest_made.eq(x_list[1:] == 0)]
        # every list as it lands: the landing registers, or the express list the cycle it is
        # current (never both: the express way needs the landing stage empty)
        m.d.comb += [self.land.valid.eq(l_valid | x_land),
                     self.land.payload.made.eq(Mux(x_land, c_made, l_made)),
                     self.land.payload.copies.eq(Mux(x_land, c_copies, l_copies)),
                     self.land.payload.tag.eq(Mux(x_land, c_tag, l_tag))]
        m.d.sync += self.cnt.bad_port.eq(step & c_listed[0] & ~c_made[0])
        o = self.o.payload
        m.d.comb += [self.o.valid.eq(emit),
                     o.port.eq(c_copies[:GROUP_PORT_BITS]),
                     o.rid.eq(c_copies[GROUP_PORT_BITS:CB]),
                     o.tag.eq(c_tag), o.first.eq(c_first), o.last.eq(c_rest_made)]
        return m
