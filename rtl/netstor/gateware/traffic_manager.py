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

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axis import flow_signature
from .csr import memory_port_signature
from .kit import HwEnv

__all__ = ["TrafficManager", "Replicator", "TM_LATENCY", "request_layout", "decision_layout",
           "counter_layout"]

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
