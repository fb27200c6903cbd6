"""Formal harnesses for the handshake rules of TxCompletions (``m_cpl``) and AxiLiteCsr.

``TxCplProps(n_ports, tag_width, ts_width, depth)``: every input of
:class:`~netstor.gateware.tx_completion.TxCompletions` is free every cycle (``m_cpl_ready``
too: no assumption on the host). Asserted per port: once ``m_cpl_valid`` is high it stays high
until ``m_cpl_ready``, and ``m_cpl_ts``/``m_cpl_tag`` do not change while stalled;
``s_cpl_ready`` is 1. Converted with ``platform="formal"`` so the SyncFIFOs carry their own
pointer/level invariants (needed for induction).

``AxiLiteProps(bready_gap, rready_gap, ack_gap)``: :class:`~netstor.gateware.csr.AxiLiteCsr`
made by a :class:`~netstor.gateware.csr.CsrBuilder` with two registers (8-bit rw, 8-bit ro
driven by a free input), one counter (free increment) and one memory (8 bits x 4, its owner's
``ack`` free). The master is assumed to follow AXI: ``*valid`` held until ``*ready`` with
address/data stable; ``bready``/``rready`` are free except for the fairness assumption that
neither stays low more than ``bready_gap``/``rready_gap`` cycles while its ``valid`` is high
(only the liveness assertions need this). The memory owner acks only a pending request, and
within ``ack_gap`` cycles. Asserted:

* ``bvalid`` held until ``bready``, ``bresp`` stable (OKAY); ``rvalid`` held until ``rready``,
  ``rdata``/``rresp`` stable;
* one response per request: writes outstanding (AW accepted, B not yet given) ==
  ``~awready + bvalid`` (<= 2), likewise for W; B only when an AW and a W were accepted;
  reads outstanding == ``~arready`` (at most one), R only after an accepted AR;
* never a hang (a wait counter counts the consecutive cycles a request waits; each bound is
  the smallest that holds with the default gaps of 2): an accepted write (AW and W both in)
  raises ``bvalid`` within 2 cycles, an accepted read ``rvalid`` within 2; an offered AW
  (with its W offered or already held) and an offered W (with its AW offered or held) are
  accepted within ``2 + bready_gap`` cycles, an offered AR within ``3 + rready_gap``;
* the indirect memory request is held until ``ack`` with ``we``/``addr``/``wdata`` unchanged,
  and dropped the cycle after ``ack``.
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Signal, Cat, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from netstor.gateware.csr import CsrBuilder
from netstor.gateware.tx_completion import TxCompletions
from props_packet_buffer import _started, past

__all__ = ["TxCplProps", "AxiLiteProps"]


class TxCplProps(wiring.Component):
    def __init__(self, n_ports=2, tag_width=2, ts_width=2, depth=2):
        self.dut = TxCompletions(n_ports, tag_width=tag_width, ts_width=ts_width, depth=depth)
        self.n = n_ports
        members = {k: v for k, v in self.dut.signature.members.items()}
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        dut, n = self.dut, self.n
        m.submodules.dut = dut
        wiring.connect(m, wiring.flipped(self), dut)
        started = _started(m)
        for p in range(n):
            valid, ready = dut.m_cpl_valid[p], dut.m_cpl_ready[p]
            payload = Cat(dut.m_cpl_ts[p], dut.m_cpl_tag[p])
            pv = past(m, valid, f"v{p}")
            pr = past(m, ready, f"r{p}")
            pp = past(m, payload, f"p{p}")
            stalled = started & pv & ~pr
            m.d.comb += [
                Assert(~stalled | valid),
                Assert(~stalled | (payload == pp)),
                Assert(dut.s_cpl_ready[p]),
            ]
            m.d.comb += [
                Cover(stalled & (dut.m_cpl_ts[p] != 0)),       # a forwarded one held
                Cover(stalled & past(m, stalled, f"st{p}") & (dut.m_cpl_ts[p] == 0)
                      & dut.cnt_forwarded[p]),
            ]
        return m


class AxiLiteProps(wiring.Component):
    ADDR_WIDTH = 10

    def __init__(self, bready_gap=2, rready_gap=2, ack_gap=3):
        b = CsrBuilder(addr_width=self.ADDR_WIDTH)
        self.r_rw = b.reg("r_rw", 8, "rw", reset=0x5A)
        self.r_ro = b.reg("r_ro", 8, "ro")
        self.c0 = b.counter("c0")
        self.port = b.memory("mem", 8, 4)
        self.dut, self.schema = b.build(app_id=0x4E535452, version=(1, 0))
        self.bgap, self.rgap, self.agap = bready_gap, rready_gap, ack_gap
        members = dict(self.dut.signature.members)
        members.update({"ro_in": In(8), "inc": In(1), "ack_in": In(1), "rdata_in": In(8)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        m.submodules.dut = dut
        for name in dut.signature.members:
            if name.startswith("s_axil_"):
                mine, theirs = getattr(self, name), getattr(dut, name)
                if dut.signature.members[name].flow == In:
                    m.d.comb += theirs.eq(mine)
                else:
                    m.d.comb += mine.eq(theirs)
        s = lambda n: getattr(dut, f"s_axil_{n}")              # noqa: E731
        port = self.port
        m.d.comb += [self.r_ro.eq(self.ro_in), self.c0.eq(self.inc),
                     port.ack.eq(self.ack_in), port.rdata.eq(self.rdata_in)]
        started = _started(m)

        def held(valid, ready, payload, name, assume):
            pv, pr = past(m, valid, f"{name}_v"), past(m, ready, f"{name}_r")
            pp = past(m, payload, f"{name}_p")
            stalled = started & pv & ~pr
            cond = ~stalled | (valid & (payload == pp))
            m.d.comb += (Assume(cond) if assume else Assert(cond))

        # ---- master: AXI rules (assumed) ------------------------------------------------
        held(s("awvalid"), s("awready"), Cat(s("awaddr"), s("awprot")), "aw", True)
        held(s("wvalid"), s("wready"), Cat(s("wdata"), s("wstrb")), "w", True)
        held(s("arvalid"), s("arready"), Cat(s("araddr"), s("arprot")), "ar", True)
        # ---- slave responses (asserted) --------------------------------------------------
        held(s("bvalid"), s("bready"), s("bresp"), "b", False)
        held(s("rvalid"), s("rready"), Cat(s("rdata"), s("rresp")), "r", False)

        # ---- fairness of bready / rready and of the memory owner (assumed) ----------------
        def gap_counter(cond, name, width=4):
            c = Signal(width, name=name)
            with m.If(cond):
                m.d.sync += c.eq(Mux(c == 2**width - 1, c, c + 1))
            with m.Else():
                m.d.sync += c.eq(0)
            return c

        bstall = gap_counter(s("bvalid") & ~s("bready"), "bstall")
        rstall = gap_counter(s("rvalid") & ~s("rready"), "rstall")
        m.d.comb += [Assume(~(s("bvalid") & ~s("bready")) | (bstall < self.bgap)),
                     Assume(~(s("rvalid") & ~s("rready")) | (rstall < self.rgap))]
        apend = gap_counter(port.req & ~port.ack, "apend")
        m.d.comb += [Assume(~port.ack | port.req),
                     Assume(~(port.req & ~port.ack) | (apend < self.agap))]
        acked = past(m, port.ack, "ack")
        m.d.comb += Assume(~acked | ~port.ack)            # a one-cycle ack per request

        # ---- one response per request ------------------------------------------------------
        aw_hs = s("awvalid") & s("awready")
        w_hs = s("wvalid") & s("wready")
        ar_hs = s("arvalid") & s("arready")
        b_hs = s("bvalid") & s("bready")
        r_hs = s("rvalid") & s("rready")
        out_aw, out_w, out_ar = Signal(3), Signal(3), Signal(3)
        m.d.sync += [out_aw.eq(out_aw + aw_hs - b_hs), out_w.eq(out_w + w_hs - b_hs),
                     out_ar.eq(out_ar + ar_hs - r_hs)]
        m.d.comb += [
            Assert(out_aw == (~s("awready")).as_unsigned() + s("bvalid")),
            Assert(out_w == (~s("wready")).as_unsigned() + s("bvalid")),
            Assert(out_aw <= 2), Assert(out_w <= 2),
            Assert(~s("bvalid") | ((out_aw != 0) & (out_w != 0))),
            Assert(out_ar == (~s("arready")).as_unsigned()),
            Assert(~s("rvalid") | (out_ar == 1)),
            Assert(s("bresp") == 0), Assert(s("rresp") == 0),
        ]

        # ---- never a hang (bounded response / acceptance) ---------------------------------
        wr_in = (out_aw != 0) & (out_w != 0) & ~s("bvalid")      # accepted, not yet answered
        N_B = 3                        # write: decode, perform, bvalid (CSR block timing)
        N_R = 3                        # read: select, group mux, OR stage
        N_AW = 3 + self.bgap
        N_AR = 4 + self.rgap
        t_b = gap_counter(wr_in, "t_b")
        t_r = gap_counter((out_ar != 0) & ~s("rvalid"), "t_r")
        t_aw = gap_counter(s("awvalid") & ~s("awready") & (s("wvalid") | ~s("wready")), "t_aw")
        t_w = gap_counter(s("wvalid") & ~s("wready") & (s("awvalid") | ~s("awready")), "t_w")
        t_ar = gap_counter(s("arvalid") & ~s("arready"), "t_ar")
        m.d.comb += [Assert(t_b < N_B), Assert(t_r < N_R), Assert(t_aw < N_AW),
                     Assert(t_w < N_AW), Assert(t_ar < N_AR),
                     Assert(bstall <= self.bgap), Assert(rstall <= self.rgap)]

        # ---- indirect memory request stable until ack ------------------------------------
        req_p = past(m, port.req & ~port.ack, "req")
        fields = Cat(port.we, port.addr, port.wdata)
        fields_p = past(m, fields, "req_fields")
        m.d.comb += [Assert(~(started & req_p) | (port.req & (fields == fields_p))),
                     Assert(~(started & acked) | ~port.req)]
        # strengthening (k-induction): a request and an ack still in the completion stages
        # belong to the command in progress
        m.d.comb += [Assert(~port.req | dut.cmd_busy), Assert(~dut.ack_inflight | dut.cmd_busy)]

        # ---- covers -------------------------------------------------------------------------
        m.d.comb += [
            # full write throughput: a response every 3 cycles (decode, perform, bvalid)
            Cover(started & b_hs & past(m, past(m, past(m, b_hs, "bhs1"), "bhs2"), "bhs3")
                  & past(m, past(m, past(m, past(m, past(m, past(m, b_hs, "bhs4"), "bhs5"),
                                                     "bhs6"), "bhs7"), "bhs8"), "bhs9")),
            Cover(started & s("bvalid") & ~s("bready") & past(m, s("bvalid") & ~s("bready"),
                                                                  "bst2")),
            Cover(started & r_hs & (s("rdata") == 0x5A)),
            Cover(started & port.ack & port.we),
            Cover(started & aw_hs & ~w_hs & past(m, w_hs & ~aw_hs, "worder")),
        ]
        return m
