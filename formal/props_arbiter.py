"""Formal harness for IngressArbiter (small parameters; k-induction).

Assumed: every input obeys the stream rules (``valid`` held until ``ready``, payload stable
while stalled); ``o.ready`` is free (so stalls are covered too). Asserted:

* ``o`` obeys the stream rules;
* at most one input is ready in any cycle, and while input ``k`` is inside a packet (a beat
  without ``last`` was taken from it) no other input is ready (input-side atomicity);
* on ``o``, ``port`` does not change inside a packet (output-side atomicity);
* bounded wait: while input ``k`` offers the first beat of a packet, at most ``n - 1`` packets
  of other inputs are granted before it.

Helper invariants (they make the induction close, and are true statements about the design):
the harness's packet tracking agrees with the arbiter's ``busy``/``grant``, and a waiting
input's count plus its round-robin distance from the last grant is at most ``n - 1``.
"""

from amaranth.hdl import Assert, Module, Signal
from amaranth.lib import wiring

from netstor.gateware.arbiter import IngressArbiter
from props_packet_buffer import _started, stream_assert_legal, stream_assume_legal
from common import elaborate_inline

__all__ = ["ArbiterProps"]


class ArbiterProps(wiring.Component):
    def __init__(self, n=3, data_width=8, user_width=1):
        self.n = n
        self.dut = IngressArbiter(n, data_width=data_width, user_width=user_width)
        super().__init__({"i": self.dut.signature.members["i"],
                          "o": self.dut.signature.members["o"]})

    def elaborate(self, platform):
        m = Module()
        dut, n = self.dut, self.n
        m.submodules.dut = elaborate_inline(dut, platform)
        dbg = dut._dbg
        for k in range(n):
            wiring.connect(m, wiring.flipped(self.i[k]), dut.i[k])
        wiring.connect(m, dut.o, wiring.flipped(self.o))
        started = _started(m)

        for k in range(n):
            stream_assume_legal(m, dut.i[k], f"i{k}", started)
        stream_assert_legal(m, dut.o, "o", started)

        # ---- input side: atomicity --------------------------------------------------------
        take = [dut.i[k].valid & dut.i[k].ready for k in range(n)]
        in_pkt = [Signal(name=f"in_pkt{k}") for k in range(n)]
        for k in range(n):
            with m.If(take[k]):
                m.d.sync += in_pkt[k].eq(~dut.i[k].payload.last)
            m.d.comb += Assert(in_pkt[k] == (dbg["busy"] & (dbg["grant"] == k)))
            for j in range(n):
                if j != k:
                    m.d.comb += Assert(~(dut.i[k].ready & dut.i[j].ready))
                    m.d.comb += Assert(~(in_pkt[k] & dut.i[j].ready))
        m.d.comb += Assert(~dbg["busy"] | (dbg["grant"] == dbg["last_grant"]))
        m.d.comb += Assert(dbg["grant"] < n)
        m.d.comb += Assert(dbg["last_grant"] < n)

        # ---- output side: port constant inside a packet ---------------------------------
        out_in_pkt = Signal()
        out_port = Signal(4)
        o = dut.o
        with m.If(o.valid & o.ready):
            m.d.sync += [out_in_pkt.eq(~o.payload.last), out_port.eq(o.payload.port)]
        m.d.comb += [
            Assert(~(o.valid & out_in_pkt) | (o.payload.port == out_port)),
            # helpers
            Assert(~(o.valid & ~o.payload.last)
                   | (dbg["busy"] & (dbg["grant"] == o.payload.port))),
            Assert(~(out_in_pkt & ~o.valid) | (dbg["busy"] & (dbg["grant"] == out_port))),
            Assert(~o.valid | (o.payload.port < n)),
        ]

        # ---- bounded wait -----------------------------------------------------------------
        first_take = [take[k] & ~in_pkt[k] for k in range(n)]
        for k in range(n):
            waiting = dut.i[k].valid & ~in_pkt[k]
            wait = Signal(range(n + 2), name=f"wait{k}")
            others = 0
            for j in range(n):
                if j != k:
                    others = others | first_take[j]
            with m.If(~waiting | first_take[k]):
                m.d.sync += wait.eq(0)
            with m.Elif(others):
                m.d.sync += wait.eq(wait + 1)
            m.d.comb += Assert(wait <= n - 1)
            # helper: wait + round-robin distance from the last grant to k <= n - 1
            dist = Signal(range(n), name=f"dist{k}")
            with m.Switch(dbg["last_grant"]):
                for lg in range(n):
                    with m.Case(lg):
                        m.d.comb += dist.eq((k - lg - 1) % n)
            m.d.comb += Assert(~waiting | (wait + dist <= n - 1))
            m.d.comb += Assert(waiting | (wait == 0))
        return m
