"""Formal harness of :class:`netstor.gateware.traffic_manager.ReplicationEngine` (BMC).

Free inputs: descriptors (valid, group, tag) every cycle, ``o.ready``, host requests (reads
and writes of any group with any word). One descriptor, chosen by the solver (``watch``), is
followed: its tag is unique, it is not refused (the FIFO has room), no host request starts
from then on (its group's word is frozen) and that word lists only good ports. Asserted:

* the ``k``-th copy out with the watched tag is the word's copy ``k`` (port and rid), ``first``
  iff ``k == 0``, ``last`` iff ``k == min(n, 16) - 1``, and no copy with that tag follows its
  last (order, content and flags under any back-pressure and any other traffic);
* ``o`` holds its payload while ``valid & ~ready``; every copy out has a port ``< n_outputs``;
* host port: ``ack`` two cycles after a request starts; a read returns the last word written
  to that group (reads share the packets' read port).
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from netstor.gateware.traffic_manager import ReplicationEngine, GROUP_COPY_BITS
from props_packet_buffer import _started
from common import elaborate_inline

__all__ = ["ReplicationProps"]


class ReplicationProps(wiring.Component):
    def __init__(self, n_outputs=3, n_groups=2, fifo_depth=2, tag_width=3, copies=4):
        self.dut = ReplicationEngine(n_outputs, n_groups, group_width=2, tag_width=tag_width,
                                     fifo_depth=fifo_depth, copies=copies)
        W = self.dut.word_bits
        self.nout, self.G, self.tw = n_outputs, n_groups, tag_width
        super().__init__({
            "valid": In(1), "group": In(2), "tag": In(tag_width), "ready": In(1),
            "watch": In(1), "t": In(tag_width), "h_start": In(1), "h_we": In(1), "h_addr": In(1),
            "h_wdata": In(W),
        })

    def elaborate(self, platform):
        m = Module()
        dut, G, nout = self.dut, self.G, self.nout
        mod = elaborate_inline(dut, platform)
        m.submodules.dut = mod
        started = _started(m)
        m.d.comb += [dut.i.valid.eq(self.valid), dut.i.payload.group.eq(self.group),
                     dut.i.payload.tag.eq(self.tag), dut.o.ready.eq(self.ready)]

        # ---- host driver and the table as written ---------------------------------------------
        req, we = Signal(), Signal()
        addr, wdata = Signal(1), Signal(dut.word_bits)
        age = Signal(3)
        with m.If(~req):
            with m.If(self.h_start):
                m.d.sync += [req.eq(1), we.eq(self.h_we), addr.eq(self.h_addr),
                             wdata.eq(self.h_wdata), age.eq(0)]
        with m.Else():
            m.d.sync += age.eq(age + 1)
            with m.If(dut.mc.ack):
                m.d.sync += req.eq(0)
        m.d.comb += [dut.mc.req.eq(req), dut.mc.we.eq(we), dut.mc.addr.eq(addr),
                     dut.mc.wdata.eq(wdata)]
        tbl = [Signal(dut.word_bits, name=f"tbl{g}") for g in range(G)]
        with m.If(req & we & (age == 0)):
            for g in range(G):
                with m.If(addr == g):
                    m.d.sync += tbl[g].eq(wdata)
        m.d.comb += Assert(~dut.mc.ack | (req & (age == 2)))
        m.d.comb += Assert(~(req & (age == 2)) | dut.mc.ack)
        rd_exp = Mux(addr == 0, tbl[0], tbl[1])
        m.d.comb += Assert(~(dut.mc.ack & ~we) | (dut.mc.rdata == rd_exp))
        # the memory starts as zeros, like the shadow (Amaranth memories initialise to init=[])

        # ---- the watched descriptor: tag T (chosen by the solver, fixed), unique -------------
        T = self.t                             # a free input held constant
        t_prev = Signal(self.tw)
        m.d.sync += t_prev.eq(T)
        m.d.comb += Assume(~started | (T == t_prev))
        watching = Signal()
        wword = Signal(dut.word_bits)
        fifo = mod.submodules.dfifo
        start = self.watch & ~watching
        cur_word = Mux(self.group == 0, tbl[0], tbl[1])
        with m.If(start):
            m.d.sync += [watching.eq(1), wword.eq(cur_word)]
        m.d.comb += [
            Assume(~start | (self.valid & fifo.w_rdy & (self.group < G) & ~req
                             & ~self.h_start & (self.tag == T))),
            Assume(~watching | ~self.h_start),
            Assume(~(self.valid & ~start) | (self.tag != T)),
        ]
        for k in range(dut.copies):          # the watched group lists good ports only
            port = cur_word[5 + GROUP_COPY_BITS * k:9 + GROUP_COPY_BITS * k]
            m.d.comb += Assume(~start | (port < nout))
        wtag = T

        n = wword[:5]
        count = Mux(n > dut.copies, dut.copies, n)
        seen = Signal(5)
        o = dut.o.payload
        out = dut.o.valid & self.ready
        mine = out & (o.tag == wtag) & watching
        exp_port = Signal(4)
        exp_rid = Signal(16)
        with m.Switch(seen):
            for k in range(dut.copies):
                with m.Case(k):
                    c = wword[5 + GROUP_COPY_BITS * k:5 + GROUP_COPY_BITS * (k + 1)]
                    m.d.comb += [exp_port.eq(c[:4]), exp_rid.eq(c[4:])]
        with m.If(mine):
            m.d.sync += seen.eq(seen + 1)
        m.d.comb += [
            Assert(~mine | (seen < count)),
            Assert(~mine | ((o.port == exp_port) & (o.rid == exp_rid))),
            Assert(~mine | (o.first == (seen == 0))),
            Assert(~mine | (o.last == (seen == count - 1))),
            Assert(~dut.o.valid | (o.port < nout)),
        ]
        # ---- stream rule ------------------------------------------------------------------------
        was_stall = Signal()
        last_payload = Signal.like(dut.o.payload)
        m.d.sync += [was_stall.eq(dut.o.valid & ~self.ready), last_payload.eq(dut.o.payload)]
        m.d.comb += Assert(~(started & was_stall) | (dut.o.valid & (dut.o.payload.as_value()
                                                                    == last_payload.as_value())))
        m.d.comb += [Cover(watching & (seen == 3) & (count == 3)),
                     Cover(watching & (seen == 2) & (count == 2) & ~self.ready),
                     Cover(dut.mc.ack & ~we & (rd_exp != 0))]
        return m
