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

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from netstor.gateware.traffic_manager import ReplicationEngine, GROUP_COPY_BITS
from props_packet_buffer import _started
from common import elaborate_inline

__all__ = ["ReplicationProps"]


class ReplicationProps(wiring.Component):
    """``direct=True``: the data path's engine (direct descriptors, the recirculation copy,
    the express way). Descriptors then also carry free ``d_direct``/``d_copy``/``d_port``/
    ``d_rc``; the watched one's expected list is ``[recirculation copy if rc] + (its direct
    copy, or its group's copies)``; and a second watched tag ``t2``, entering after the first,
    has no copy out before the first's last (no overtaking, the express way included)."""

    def __init__(self, n_outputs=3, n_groups=2, fifo_depth=2, tag_width=3, copies=4,
                 direct=False):
        self.dut = ReplicationEngine(n_outputs, n_groups, group_width=2, tag_width=tag_width,
                                     fifo_depth=fifo_depth, copies=copies, direct=direct)
        W = self.dut.word_bits
        self.nout, self.G, self.tw, self.is_direct = n_outputs, n_groups, tag_width, direct
        ports = {
            "valid": In(1), "group": In(2), "tag": In(tag_width), "ready": In(1),
            "watch": In(1), "t": In(tag_width), "h_start": In(1), "h_we": In(1), "h_addr": In(1),
            "h_wdata": In(W),
        }
        if direct:
            ports.update({"d_direct": In(1), "d_copy": In(1), "d_port": In(4), "d_rc": In(1),
                          "t2": In(tag_width)})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        dut, G, nout = self.dut, self.G, self.nout
        mod = elaborate_inline(dut, platform)
        m.submodules.dut = mod
        started = _started(m)
        m.d.comb += [dut.i.valid.eq(self.valid), dut.i.payload.group.eq(self.group),
                     dut.i.payload.tag.eq(self.tag), dut.o.ready.eq(self.ready)]
        if self.is_direct:
            ip = dut.i.payload
            m.d.comb += [ip.direct.eq(self.d_direct), ip.dcopy.eq(self.d_copy),
                         ip.dport.eq(self.d_port), ip.rc.eq(self.d_rc)]
            # the traffic manager sends a direct copy only to a good port
            m.d.comb += Assume(~(self.valid & self.d_direct & self.d_copy) | (self.d_port < nout))

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
        fifo = mod.submodules.dfifo
        start = self.watch & ~watching
        cur_word = Mux(self.group == 0, tbl[0], tbl[1])
        m.d.comb += [
            Assume(~start | (self.valid & fifo.w_rdy & (self.group < G) & ~req
                             & ~self.h_start & (self.tag == T))),
            Assume(~watching | ~self.h_start),
            Assume(~(self.valid & ~start) | (self.tag != T)),
        ]
        CB, NC = GROUP_COPY_BITS, dut.copies
        g_copy = [cur_word[5 + CB * k:5 + CB * (k + 1)] for k in range(NC)]
        for k in range(NC):                  # the watched group lists good ports only
            m.d.comb += Assume(~start | (g_copy[k][:4] < nout))
        g_n = cur_word[:5]
        g_cnt = Mux(g_n > NC, NC, g_n)
        # the watched list, as it should come out: copies (port | rid << 4) and their count
        if self.is_direct:
            dcp = Cat(self.d_port, Const(0, 16))
            base = [Mux(self.d_direct, dcp, g_copy[0])] + g_copy[1:] + [Const(0, CB)]
            lst = [Mux(self.d_rc, Const(nout, CB) if k == 0 else base[k - 1], base[k])
                   for k in range(NC + 1)]
            cnt = self.d_rc + Mux(self.d_direct, self.d_copy, g_cnt)
        else:
            lst, cnt = g_copy, g_cnt
        w_list = [Signal(CB, name=f"w_list{k}") for k in range(len(lst))]
        count = Signal(5)
        with m.If(start):
            m.d.sync += [watching.eq(1), count.eq(cnt)] + [w.eq(l_) for w, l_ in zip(w_list, lst)]
        wtag = T

        seen = Signal(5)
        o = dut.o.payload
        out = dut.o.valid & self.ready
        mine = out & (o.tag == wtag) & watching
        exp_port = Signal(4)
        exp_rid = Signal(16)
        with m.Switch(seen):
            for k in range(len(lst)):
                with m.Case(k):
                    m.d.comb += [exp_port.eq(w_list[k][:4]), exp_rid.eq(w_list[k][4:])]
        with m.If(mine):
            m.d.sync += seen.eq(seen + 1)
        m.d.comb += [
            Assert(~mine | (seen < count)),
            Assert(~mine | ((o.port == exp_port) & (o.rid == exp_rid))),
            Assert(~mine | (o.first == (seen == 0))),
            Assert(~mine | (o.last == (seen == count - 1))),
            Assert(~dut.o.valid | (o.port < (nout + 1 if self.is_direct else nout))),
        ]
        if self.is_direct:
            # a later descriptor (tag t2, unique, entering after the watched one) never
            # overtakes it
            T2 = self.t2
            t2_prev = Signal(self.tw)
            m.d.sync += t2_prev.eq(T2)
            m.d.comb += Assume(~started | (T2 == t2_prev))
            m.d.comb += Assume(T2 != T)
            entered2 = Signal()
            with m.If(self.valid & (self.tag == T2) & watching & ~start):
                m.d.sync += entered2.eq(1)
            m.d.comb += Assume(~(self.valid & (self.tag == T2)) | (watching & ~start & ~entered2))
            m.d.comb += Assert(~(out & (o.tag == T2)) | (seen == count))
            m.d.comb += Cover(watching & entered2 & (seen == count) & (count == 2)
                              & out & (o.tag == T2))
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
