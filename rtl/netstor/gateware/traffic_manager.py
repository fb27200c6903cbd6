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

Outputs (all at t1, combinational from t1 registers): ``o_valid`` (a packet is at t1),
``copy_valid[q]``, ``copy_rid[q]``, ``recirc_valid`` and the four counter pulses. The data
path registers each copy together with the packet's PHV (``TM_LATENCY`` = 2 in total).
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["TrafficManager"]


class TrafficManager(wiring.Component):
    def __init__(self, n_outputs, mcast_groups, max_recirc, *, group_width=8, port_width=4,
                 count_width=3, rid_width=16):
        self.n_outputs, self.mcast_groups, self.max_recirc = n_outputs, mcast_groups, max_recirc
        self.rid_width = rid_width
        self.entry_width = n_outputs + rid_width * n_outputs
        abits = max(1, (mcast_groups - 1).bit_length())
        super().__init__({
            "i_valid": In(1),
            "i_drop": In(1),
            "i_recirc": In(1),
            "i_clone": In(1),
            "i_group": In(group_width),
            "i_egress_port": In(port_width),
            "i_recirc_count": In(count_width),
            # host access to the multicast table (MemoryPort protocol)
            "mc_req": In(1),
            "mc_we": In(1),
            "mc_addr": In(abits),
            "mc_wdata": In(self.entry_width),
            "mc_ack": Out(1),
            "mc_rdata": Out(self.entry_width),
            # decision, at t1
            "o_valid": Out(1),
            "copy_valid": Out(n_outputs),
            "copy_rid": Out(data.ArrayLayout(rid_width, n_outputs)),
            "recirc_valid": Out(1),
            "cnt_drop": Out(1),
            "cnt_mcast_empty": Out(1),
            "cnt_bad_port": Out(1),
            "cnt_recirc_limit": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        nout, rw = self.n_outputs, self.rid_width
        mc = Memory(shape=self.entry_width, depth=self.mcast_groups, init=[])
        m.submodules.mcast = mc
        mc_rp, mc_wp, mc_hp = mc.read_port(), mc.write_port(), mc.read_port()
        gbits = max(1, (self.mcast_groups - 1).bit_length())
        m.d.comb += [mc_rp.addr.eq(self.i_group[:gbits]), mc_rp.en.eq(1)]
        mpend = Signal()
        m.d.comb += [mc_wp.addr.eq(self.mc_addr), mc_wp.data.eq(self.mc_wdata),
                     mc_wp.en.eq(self.mc_req & self.mc_we & ~self.mc_ack),
                     mc_hp.addr.eq(self.mc_addr), mc_hp.en.eq(1),
                     self.mc_rdata.eq(mc_hp.data)]
        m.d.sync += [mpend.eq(self.mc_req & ~mpend & ~self.mc_ack), self.mc_ack.eq(mpend)]

        # t1 registers
        valid = Signal()
        drop, recirc, clone = Signal(), Signal(), Signal()
        group = Signal.like(self.i_group)
        egp = Signal.like(self.i_egress_port)
        count = Signal.like(self.i_recirc_count)
        m.d.sync += [valid.eq(self.i_valid), drop.eq(self.i_drop), recirc.eq(self.i_recirc),
                     clone.eq(self.i_clone), group.eq(self.i_group),
                     egp.eq(self.i_egress_port), count.eq(self.i_recirc_count)]
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
            self.o_valid.eq(valid),
            self.copy_valid.eq(Mux(valid, mask, 0)),
            self.recirc_valid.eq(valid & rc),
            self.cnt_drop.eq(valid & drop),
            self.cnt_mcast_empty.eq(valid & ~drop & ~recirc & (group != 0) & (mask == 0)),
            self.cnt_bad_port.eq(valid & ~drop & ~recirc & (group == 0) & (egp >= nout)),
            self.cnt_recirc_limit.eq(valid & want_rc & limit),
        ]
        for q in range(nout):
            m.d.comb += self.copy_rid[q].eq(rids[q])
        return m
