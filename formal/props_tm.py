"""Formal harness for the traffic manager (``netstor.gateware.traffic_manager``).

The TM decision the data path uses, standalone: free TM fields every cycle (``valid``,
``drop``, ``recirc``, ``clone``, ``mcast_group`` (8 bits, so unknown groups occur),
``egress_port`` (4 bits, so bad ports occur), ``recirc_count`` (3 bits)); the multicast table's
host port is driven like :class:`~netstor.gateware.csr.AxiLiteCsr` drives a
:class:`~netstor.gateware.csr.MemoryPort` (free writes and reads of any group, with free data,
held until ``ack``).

Abstract model: the table as the host last wrote it (committed at the write's ``ack``); while
a write to group ``g`` is pending, a packet looking up ``g`` may see the old or the new entry
(never a mix: every assertion below must hold entirely for one of the two).

Asserted for every packet (one per clock), at the TM output one cycle after its input, from
``docs/dataplane-spec.md``:

* copies (``o.payload.copies`` bits and ``o.payload.recirc``) and counter pulses are all 0 without a
  packet;
* ``drop``: no copy at all, ``tm.drop`` pulses;
* ``recirc``: exactly the recirculation copy (or, at ``recirc_count == max_recirc``, none and
  ``tm.recirc_limit``);
* multicast: ``o.payload.copies`` = the group's port bitmap (so exactly ``popcount`` copies), each
  copy's rid = the group's rid for its port; an empty or unknown group gives none and
  ``tm.mcast_empty``;
* unicast: exactly one copy, to ``egress_port``, rid 0; a port ``>= n_outputs`` gives none and
  ``tm.bad_port``;
* ``clone`` (not ``drop``/``recirc``): exactly one more (recirculation) copy, or
  ``tm.recirc_limit`` at the limit;
* conservation: ``popcount(copies) == `` the spec's copy count; every packet has exactly one
  primary outcome (counted drop, counted empty group, counted bad port, >= 1 egress copy, or
  the recirculation path) and asks for recirculation iff it gets the copy or a
  ``recirc_limit`` count; running totals (8-bit, modular) of copies out and of the spec's
  copies agree;
* recirculation bounded: a recirculation copy always has ``recirc_count < max_recirc``, so it
  re-enters with ``recirc_count + 1 <= max_recirc`` (no packet recirculates more than
  ``max_recirc`` times, given the recirculation input carries the count, which is not
  part of this proof);
* host port: ``ack`` only while ``req``; a read returns the committed entry (no other write
  can be pending).
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Mux, Signal, Cat
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from netstor.gateware.traffic_manager import TrafficManager
from props_packet_buffer import _started
from common import elaborate_inline

__all__ = ["TmProps"]


def popcount(v, n):
    return sum((v[i] for i in range(n)), start=0)



def tm_harness_ports(dut):
    """Free inputs of a TrafficManager harness: one packet's decision fields and a host
    request to the multicast table."""
    return {
        "valid": In(1), "drop": In(1), "recirc": In(1), "clone": In(1), "group": In(8),
        "egp": In(4), "count": In(3),
        "h_start": In(1), "h_we": In(1), "h_addr": In(len(dut.mc.addr)),
        "h_wdata": In(dut.entry_width),
    }

class TmProps(wiring.Component):
    def __init__(self, n_outputs=4, mcast_groups=4, max_recirc=2, rid_width=16):
        self.dut = TrafficManager(n_outputs, mcast_groups, max_recirc, rid_width=rid_width)
        self.n, self.G, self.maxr, self.rw = n_outputs, mcast_groups, max_recirc, rid_width
        super().__init__(tm_harness_ports(self.dut))

    def elaborate(self, platform):
        m = Module()
        dut, n, G, rw = self.dut, self.n, self.G, self.rw
        mod = elaborate_inline(dut, platform)
        m.submodules.dut = mod
        started = _started(m)
        ew = dut.entry_width
        m.d.comb += [dut.i.valid.eq(self.valid), dut.i.payload.drop.eq(self.drop),
                     dut.i.payload.recirc.eq(self.recirc), dut.i.payload.clone.eq(self.clone),
                     dut.i.payload.group.eq(self.group), dut.i.payload.egress_port.eq(self.egp),
                     dut.i.payload.recirc_count.eq(self.count)]
        mem = mod.submodules.mcast
        cells = []
        for g in range(G):
            p = mem.read_port(domain="comb")
            m.d.comb += p.addr.eq(g)
            cells.append(p.data)

        # ---- host driver -------------------------------------------------------------------
        req, we = Signal(), Signal()
        addr, wdata = Signal.like(dut.mc.addr), Signal(ew)
        with m.If(~req):
            with m.If(self.h_start):
                m.d.sync += [req.eq(1), we.eq(self.h_we), addr.eq(self.h_addr),
                             wdata.eq(self.h_wdata)]
        with m.Elif(dut.mc.ack):
            m.d.sync += req.eq(0)
        m.d.comb += [dut.mc.req.eq(req), dut.mc.we.eq(we), dut.mc.addr.eq(addr),
                     dut.mc.wdata.eq(wdata), Assume(self.h_addr < G)]

        # ---- model of the table --------------------------------------------------------------
        tbl = [Signal(ew, name=f"tbl{g}") for g in range(G)]
        pend_w = Signal()
        m.d.comb += pend_w.eq(req & we)
        with m.If(pend_w & dut.mc.ack):
            for g in range(G):
                with m.If(addr == g):
                    m.d.sync += tbl[g].eq(wdata)
        for g in range(G):
            m.d.comb += Assert((cells[g] == tbl[g]) | (pend_w & (addr == g)
                                                       & (cells[g] == wdata)))
        m.d.comb += Assert(~dut.mc.ack | req)
        rd_exp = Signal(ew)
        for g in range(G):
            with m.If(addr == g):
                m.d.comb += rd_exp.eq(tbl[g])
        m.d.comb += Assert(~(dut.mc.ack & ~we) | (dut.mc.rdata == rd_exp))

        # ---- spec, evaluated at the input for the old and the new entry ------------------------
        e_old, e_new = Signal(ew), Signal(ew)
        for g in range(G):
            with m.If(self.group == g):
                m.d.comb += e_old.eq(tbl[g])
        m.d.comb += e_new.eq(Mux(pend_w & (self.group == addr) & (self.group < G), wdata,
                                 e_old))
        mcast = ~self.drop & ~self.recirc & (self.group != 0)
        ucast = ~self.drop & ~self.recirc & (self.group == 0)
        want_rc = ~self.drop & (self.recirc | self.clone)
        at_limit = self.count >= self.maxr
        x = {}
        for tag, e in (("old", e_old), ("new", e_new)):
            mask = Signal(n, name=f"x_mask_{tag}")
            with m.If(mcast & (self.group < G)):
                m.d.comb += mask.eq(e[:n])
            with m.Elif(ucast):
                for q in range(n):
                    m.d.comb += mask[q].eq(self.egp == q)
            x[tag] = (mask, e[n:])
        spec = {
            "rc": want_rc & ~at_limit,
            "limit": want_rc & at_limit,
            "drop": self.drop,
            "empty": mcast & ((self.group >= G) | (e_old[:n] == 0)),
            "empty_new": mcast & ((self.group >= G) | (e_new[:n] == 0)),
            "bad": ucast & (self.egp >= n),
            "mcast": mcast, "rcpath": ~self.drop & self.recirc, "want_rc": want_rc,
        }
        r = {k: Signal(name=f"s1_{k}") for k in spec}
        v1 = Signal()
        mask1 = {t: Signal(n, name=f"s1_mask_{t}") for t in x}
        rids1 = {t: Signal(rw * n, name=f"s1_rids_{t}") for t in x}
        count1 = Signal(3)
        m.d.sync += [v1.eq(self.valid), count1.eq(self.count)]
        m.d.sync += [r[k].eq(v) for k, v in spec.items()]
        for t in x:
            m.d.sync += [mask1[t].eq(x[t][0]), rids1[t].eq(x[t][1])]

        # ---- assertions at the output -------------------------------------------------------
        cv, rv = dut.o.payload.copies, dut.o.payload.recirc
        ncopies = Signal(range(n + 2))
        m.d.comb += ncopies.eq(popcount(cv, n) + rv)
        m.d.comb += [
            Assert(dut.o.valid == v1),
            Assert(v1 | ((cv == 0) & ~rv & ~dut.cnt.drop & ~dut.cnt.mcast_empty
                         & ~dut.cnt.bad_port & ~dut.cnt.recirc_limit)),
        ]
        ok = {}
        exp_count = {}
        for t in x:
            ok_t = Signal(name=f"ok_{t}")
            cnt_t = Signal(range(n + 2), name=f"exp_count_{t}")
            m.d.comb += cnt_t.eq(popcount(mask1[t], n) + r["rc"])
            rid_ok = Cat(*[~cv[q] | (dut.o.payload.rids[q] == Mux(r["mcast"],
                                                             rids1[t][rw * q:rw * q + rw], 0))
                           for q in range(n)]).all()
            empty = r["empty"] if t == "old" else r["empty_new"]
            m.d.comb += ok_t.eq((cv == mask1[t]) & rid_ok & (ncopies == cnt_t)
                                & (dut.cnt.mcast_empty == empty))
            ok[t], exp_count[t] = ok_t, cnt_t
        primary = Signal(3)
        m.d.comb += primary.eq(dut.cnt.drop + dut.cnt.mcast_empty + dut.cnt.bad_port
                               + (cv != 0) + r["rcpath"])
        with m.If(v1):
            m.d.comb += [
                Assert(ok["old"] | ok["new"]),
                Assert(dut.cnt.drop == r["drop"]),
                Assert(dut.cnt.bad_port == r["bad"]),
                Assert(rv == r["rc"]),
                Assert(dut.cnt.recirc_limit == r["limit"]),
                Assert(primary == 1),
                Assert((rv + dut.cnt.recirc_limit) == r["want_rc"]),
                Assert(~r["drop"] | ((cv == 0) & ~rv)),
                Assert(~r["rcpath"] | (cv == 0)),
            ]
        # recirculation bounded
        m.d.comb += Assert(~rv | (count1 < self.maxr))
        m.d.comb += Assert(~rv | (count1 + 1 <= self.maxr))

        # running totals (modular): copies out == the spec's copy count
        tot_out, tot_exp = Signal(8), Signal(8)
        exp_now = Signal(range(n + 2))
        m.d.comb += exp_now.eq(Mux(ok["old"], exp_count["old"], exp_count["new"]))
        m.d.sync += [tot_out.eq(tot_out + ncopies), tot_exp.eq(tot_exp + Mux(v1, exp_now, 0))]
        m.d.comb += Assert(tot_out == tot_exp)

        # ---- covers ------------------------------------------------------------------------
        m.d.comb += [
            Cover(started & v1 & r["mcast"] & (popcount(cv, n) == 3)),
            Cover(started & v1 & r["mcast"] & (popcount(cv, n) == 3) & rv),
            Cover(started & v1 & r["limit"]),
            Cover(started & v1 & r["bad"]),
            Cover(started & v1 & r["mcast"] & ~ok["old"] & ok["new"]),   # sees a fresh write
            Cover(started & dut.mc.ack & ~we & (dut.mc.rdata != 0)),
        ]
        return m
