"""Equivalence: the TrafficManager component (plus the data path's copy registers) against the
traffic-manager logic as it was written inline in ``Datapath._build`` before the refactor
(commit 1ca9d6e), transcribed below on the TM fields only (the rest of the PHV only rides
along). Same free inputs and host requests to both; asserted every cycle: the registered
copy valids, the registered rid of every copy made, the registered recirculation valid, the four
counter pulses and the host port's ``ack`` (and ``rdata`` with it) are identical, and (for induction) the two
multicast memories hold the same entries.
"""

from amaranth.hdl import Assert, Assume, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from netstor.gateware.traffic_manager import TrafficManager
from props_packet_buffer import _started
from props_tm import tm_harness_ports
from common import elaborate_inline

__all__ = ["TmEquivProps"]


def reference_tm(m, nout, mcast_groups, max_recirc, valid, fld, port):
    """The pre-refactor inline logic (datapath.py at 1ca9d6e), TM fields only."""
    mc = Memory(shape=nout + 16 * nout, depth=mcast_groups, init=[])
    m.submodules.ref_mcast = mc
    mc_rp, mc_wp, mc_hp = mc.read_port(), mc.write_port(), mc.read_port()
    gbits = max(1, (mcast_groups - 1).bit_length())
    m.d.comb += [mc_rp.addr.eq(fld["group"][:gbits]), mc_rp.en.eq(1)]
    mpend = Signal(name="ref_mpend")
    m.d.comb += [mc_wp.addr.eq(port["addr"]), mc_wp.data.eq(port["wdata"]),
                 mc_wp.en.eq(port["req"] & port["we"] & ~port["ack"]),
                 mc_hp.addr.eq(port["addr"]), mc_hp.en.eq(1), port["rdata"].eq(mc_hp.data)]
    m.d.sync += [mpend.eq(port["req"] & ~mpend & ~port["ack"]), port["ack"].eq(mpend)]

    t1_valid = Signal(name="ref_t1_valid")
    t1 = {k: Signal.like(v, name=f"ref_t1_{k}") for k, v in fld.items()}
    m.d.sync += [t1_valid.eq(valid)] + [t1[k].eq(fld[k]) for k in fld]
    group = t1["group"]
    entry = mc_rp.data
    in_range_group = group < mcast_groups
    drop = t1["drop"]
    recirc = t1["recirc"]
    mask = Signal(nout, name="ref_mask")
    rids = [Signal(16, name=f"ref_rid{q}") for q in range(nout)]
    egp = t1["egp"]
    with m.If(drop | recirc):
        m.d.comb += mask.eq(0)
    with m.Elif(group != 0):
        m.d.comb += mask.eq(Mux(in_range_group, entry[:nout], 0))
        for q in range(nout):
            m.d.comb += rids[q].eq(entry[nout + 16 * q:nout + 16 * q + 16])
    with m.Else():
        for q in range(nout):
            m.d.comb += mask[q].eq(egp == q)
    want_rc = ~drop & (recirc | t1["clone"])
    limit = t1["count"] >= max_recirc
    rc = want_rc & ~limit
    ctr = {
        "drop": t1_valid & drop,
        "mcast_empty": t1_valid & ~drop & ~recirc & (group != 0) & (mask == 0),
        "bad_port": t1_valid & ~drop & ~recirc & (group == 0) & (egp >= nout),
        "recirc_limit": t1_valid & want_rc & limit,
    }
    cvs, crids = [], []
    for q in range(nout):
        cv, rid = Signal(name=f"ref_copy{q}_valid"), Signal(16, name=f"ref_copy{q}_rid")
        m.d.sync += [cv.eq(t1_valid & mask[q]), rid.eq(rids[q])]
        cvs.append(cv)
        crids.append(rid)
    rv = Signal(name="ref_copyr_valid")
    m.d.sync += rv.eq(t1_valid & rc)
    return cvs, crids, rv, ctr, mc


class TmEquivProps(wiring.Component):
    def __init__(self, n_outputs=4, mcast_groups=4, max_recirc=2):
        self.dut = TrafficManager(n_outputs, mcast_groups, max_recirc)
        self.n, self.G, self.maxr = n_outputs, mcast_groups, max_recirc
        super().__init__(tm_harness_ports(self.dut))

    def elaborate(self, platform):
        m = Module()
        dut, n, G = self.dut, self.n, self.G
        mod = elaborate_inline(dut, platform)
        m.submodules.dut = mod
        _started(m)
        fld = {"drop": self.drop, "recirc": self.recirc, "clone": self.clone,
               "group": self.group, "egp": self.egp, "count": self.count}
        m.d.comb += [dut.i.valid.eq(self.valid), dut.i.payload.drop.eq(self.drop),
                     dut.i.payload.recirc.eq(self.recirc), dut.i.payload.clone.eq(self.clone),
                     dut.i.payload.group.eq(self.group), dut.i.payload.egress_port.eq(self.egp),
                     dut.i.payload.recirc_count.eq(self.count)]
        # host requests (MemoryPort protocol), the same to both; each side has its own ack
        req, we = Signal(), Signal()
        addr, wdata = Signal.like(dut.mc.addr), Signal(dut.entry_width)
        with m.If(~req):
            with m.If(self.h_start):
                m.d.sync += [req.eq(1), we.eq(self.h_we), addr.eq(self.h_addr),
                             wdata.eq(self.h_wdata)]
        with m.Elif(dut.mc.ack):
            m.d.sync += req.eq(0)
        m.d.comb += [dut.mc.req.eq(req), dut.mc.we.eq(we), dut.mc.addr.eq(addr),
                     dut.mc.wdata.eq(wdata), Assume(self.h_addr < G)]
        rport = {"req": req, "we": we, "addr": addr, "wdata": wdata,
                 "ack": Signal(name="ref_ack"), "rdata": Signal(dut.entry_width)}
        cvs, crids, rv, ctr, ref_mem = reference_tm(m, n, G, self.maxr, self.valid, fld,
                                                    rport)

        # the data path's copy registers behind the component
        for q in range(n):
            cv, rid = Signal(name=f"new_copy{q}_valid"), Signal(16, name=f"new_copy{q}_rid")
            m.d.sync += [cv.eq(dut.o.payload.copies[q]), rid.eq(dut.o.payload.rids[q])]
            # rids compared where a copy exists (an unknown group >= a non-power-of-2 depth
            # reads beyond the memory: undefined in both, and never used)
            m.d.comb += [Assert(cv == cvs[q]), Assert(~cv | (rid == crids[q]))]
        nrv = Signal()
        m.d.sync += nrv.eq(dut.o.payload.recirc)
        m.d.comb += [
            Assert(nrv == rv),
            Assert(dut.cnt.drop == ctr["drop"]),
            Assert(dut.cnt.mcast_empty == ctr["mcast_empty"]),
            Assert(dut.cnt.bad_port == ctr["bad_port"]),
            Assert(dut.cnt.recirc_limit == ctr["recirc_limit"]),
            Assert(dut.mc.ack == rport["ack"]),
            # rdata only matters with ack (a read port register has no power-up value)
            Assert(~dut.mc.ack | (dut.mc.rdata == rport["rdata"])),
        ]
        mem = mod.submodules.mcast
        for g in range(G):
            a, b = mem.read_port(domain="comb"), ref_mem.read_port(domain="comb")
            m.d.comb += [a.addr.eq(g), b.addr.eq(g), Assert(a.data == b.data)]
        return m
