"""Formal harness for the GF(2^8) engine (:class:`netstor.gateware.gf_engine.GFEngine`): every
beat on a chosen slot leaves with what the spec's accumulation gives, whatever other beats
run beside it (back to back on the same slot, on its neighbours, or idle cycles).

The engine is built small: 2 operations x 2 beats (4 slots), one lane (8-bit data), 2-bit
generations, timeouts off. The engine's inputs are free top-level inputs, new every cycle;
the chosen slot ``(op*, off*)`` is a free input assumed constant.

Reference (the accumulate semantics of ``netstor.model.gf``, not the engine's expressions):
a shadow of the chosen slot (sum, contributor set, count) is updated in the cycle a beat of
that slot enters: ``need`` 0 is refused (bad); a contributor already in a live slot's set is
refused (dup); otherwise the sum XORs ``coeff * data`` (here by shift-and-add, not the engine's
bit matrix) and the count grows, the slot freed when it reaches ``need``. The answer (done,
dup, bad, the sum after the beat) is carried ``LATENCY`` cycles beside the beat.

Asserted (BMC from the all-zero state): every output beat of the chosen slot has the shadow's
done, dup, bad and data. So no contribution is lost or counted twice, also for beats one, two
or three cycles apart (each forwarding path), and the sum is linear: XOR of the products.
"""
from __future__ import annotations

from amaranth.hdl import Assert, Assume, Cat, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from netstor.gateware.gf_engine import GFEngine, LATENCY, POLY


def gf_mul_ref(m, a, b, name):
    """``a * b`` in GF(2^8)/0x11D by shift-and-add (8 conditional XORs of ``a * x^i``)."""
    acc = Signal(8, name=f"{name}_p0")
    m.d.comb += acc.eq(0)
    cur = a
    for i in range(8):
        nxt_acc = Signal(8, name=f"{name}_p{i + 1}")
        m.d.comb += nxt_acc.eq(acc ^ Mux(b[i], cur, 0))
        acc = nxt_acc
        sh = Signal(9, name=f"{name}_x{i + 1}")
        m.d.comb += sh.eq(Cat(Signal(1), cur))
        red = Signal(8, name=f"{name}_r{i + 1}")
        m.d.comb += red.eq(Mux(sh[8], (sh ^ POLY)[:8], sh[:8]))
        cur = red
    return acc


class GFEngineProps(wiring.Component):
    def __init__(self, n_ops=2, chunk_beats=2):
        self.n_ops, self.chunk_beats = n_ops, chunk_beats
        ob, fb = (n_ops - 1).bit_length(), (chunk_beats - 1).bit_length()
        super().__init__({
            "valid": In(1), "op": In(ob), "off": In(fb), "coeff": In(8), "src": In(4),
            "need": In(5), "keep": In(1), "data": In(8), "first": In(1), "last": In(1),
            "op_c": In(ob), "off_c": In(fb),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.eng = eng = GFEngine(n_ops=self.n_ops, chunk_beats=self.chunk_beats,
                                          gen_bits=2, tick_shift=0, lanes=1)
        m.d.comb += Assume(~ResetSignal())          # the RAM has no reset: neither the shadow
        for name in ("valid", "op", "off", "coeff", "src", "need", "keep", "data", "first",
                     "last"):
            m.d.comb += getattr(eng, f"i_{name}").eq(getattr(self, name))
        m.d.comb += eng.timeout.eq(0)

        op_c, off_c = self.op_c, self.off_c
        started = Signal()
        prev = Signal(len(op_c) + len(off_c))
        m.d.sync += [started.eq(1), prev.eq(Cat(op_c, off_c))]
        m.d.comb += Assume(~started | (Cat(op_c, off_c) == prev))
        mine = Signal()
        m.d.comb += mine.eq(eng.i_valid & (eng.i_op == op_c) & (eng.i_off == off_c))

        # the shadow slot
        s_acc, s_seen, s_count = Signal(8), Signal(16), Signal(5)
        live = s_count != 0
        x = Signal(8)
        m.d.comb += x.eq(Mux(eng.i_keep[0], eng.i_data, 0))
        prod = gf_mul_ref(m, eng.i_coeff, x, "ref")
        bad = eng.i_need == 0
        dup = ~bad & live & (s_seen >> eng.i_src)[0]
        cnt = Signal(6)
        m.d.comb += cnt.eq(Mux(live, s_count, 0) + 1)
        done = ~bad & ~dup & (cnt >= eng.i_need)
        base = Mux(live, s_acc, 0)
        e_data = Signal(8)
        m.d.comb += e_data.eq(Mux(bad | dup, base, base ^ prod))
        with m.If(mine & ~bad & ~dup):
            m.d.sync += s_acc.eq(e_data)
            with m.If(done):
                m.d.sync += [s_count.eq(0), s_seen.eq(0)]
            with m.Else():
                m.d.sync += [s_count.eq(cnt), s_seen.eq(Mux(live, s_seen, 0)
                                                         | (1 << eng.i_src))]

        # the expected answer, carried LATENCY cycles
        pipe = Cat(mine, done, dup, bad, e_data)
        for k in range(LATENCY):
            nxt = Signal(pipe.shape(), name=f"exp{k + 1}")
            m.d.sync += nxt.eq(pipe)
            pipe = nxt
        p_mine, p_done, p_dup, p_bad, p_data = pipe[0], pipe[1], pipe[2], pipe[3], pipe[4:12]
        with m.If(p_mine):
            m.d.comb += [Assert(eng.o_valid), Assert(eng.o_op == op_c),
                         Assert(eng.o_off == off_c), Assert(eng.o_done == p_done),
                         Assert(eng.o_dup == p_dup), Assert(eng.o_bad == p_bad),
                         Assert(eng.o_data == p_data)]
        return m


class GFPathProps(wiring.Component):
    """The header path's half of the engine in the core (``GFAccumulate``'s control shadow,
    :func:`netstor.gateware.gf_path.build_accumulate`: 16 banks with the register banks'
    forwarding), packets one per clock with free arguments: for a chosen slot ``(op*, off*)``
    every packet that covers it (its beats ``off .. off + nb - 1``, ``nb`` of 1 or 2, so a
    packet spans two banks) leaves with the status the spec's accumulation gives, whatever
    packets run beside it (back to back on the slot or across it, in other banks, idle
    cycles). The spec here: a shadow of the slot's contributor set and count; a packet that
    covers only the chosen slot must be DONE / DUP / ABSORBED as the shadow says; a
    two-beat packet's status must agree with the chosen beat (DONE or DUP only if the chosen
    beat is; ABSORBED only if the chosen beat neither completes nor is refused).
    So no contribution is lost or counted twice in the core's header path."""

    def __init__(self):
        from netstor.elements.gf import GFAccumulate
        from netstor.lang import Pipeline, Program
        p = Program("t")
        f = {n: p.meta(n, w) for n, w in (("op", 1), ("off", 4), ("src", 2), ("need", 2),
                                          ("len", 8), ("status", 3))}
        self.el = p.add(GFAccumulate("eng", op=f["op"], off=f["off"], coeff=0, src=f["src"],
                                     need=f["need"], length=f["len"], status=f["status"],
                                     n_ops=2, chunk_beats=16, max_beats=2))
        self.pl = Pipeline([p])
        super().__init__({"valid": In(1), "op": In(1), "off": In(4), "src": In(2),
                          "need": In(2), "two": In(1), "op_c": In(1), "off_c": In(4)})

    def elaborate(self, platform):
        from amaranth.lib import data
        from netstor.elements.gf import ST_ABSORBED, ST_DONE, ST_DUP
        from netstor.gateware.csr import CsrBuilder
        from netstor.gateware.gf_path import ACC_LATENCY
        from netstor.gateware.kit import HwEnv
        from netstor.gateware.stages import build_element
        m = Module()
        pl = self.pl
        m.d.comb += Assume(~ResetSignal())
        phv = Signal(data.StructLayout(pl.phv.layout()))
        vin = Signal()
        vout, pout, lat = build_element(m, self.el, pl, vin, phv, CsrBuilder(), prefix="ga")
        assert lat == ACC_LATENCY
        fi = lambda n: HwEnv(pl, phv).field(n)              # noqa: E731
        # every packet is aligned and in range: 1 or 2 beats, need >= 1, off + nb <= 16
        nb = Mux(self.two, 2, 1)
        m.d.comb += [vin.eq(self.valid), fi("t.m.op").eq(self.op), fi("t.m.off").eq(self.off),
                     fi("t.m.src").eq(self.src), fi("t.m.need").eq(self.need),
                     fi("t.m.len").eq(Mux(self.two, 128, 64)), fi("ipv4.ver_ihl").eq(0x45),
                     fi("meta.pkt_len").eq(256), fi("meta.vlan_valid").eq(0)]
        m.d.comb += [Assume(self.need != 0), Assume(self.off + nb <= 16)]
        started = Signal()
        prev = Signal(5)
        m.d.sync += [started.eq(1), prev.eq(Cat(self.op_c, self.off_c))]
        m.d.comb += Assume(~started | (Cat(self.op_c, self.off_c) == prev))
        covers = Signal()
        m.d.comb += covers.eq(self.valid & (self.op == self.op_c) & (self.off <= self.off_c)
                              & (self.off_c < self.off + nb))
        # the shadow of the chosen slot
        s_seen, s_count = Signal(4), Signal(3)
        live = s_count != 0
        dup = live & (s_seen >> self.src)[0]
        cnt = Signal(3)
        m.d.comb += cnt.eq(Mux(live, s_count, 0) + 1)
        done = ~dup & (cnt >= self.need)
        with m.If(covers & ~dup):
            with m.If(done):
                m.d.sync += [s_count.eq(0), s_seen.eq(0)]
            with m.Else():
                m.d.sync += [s_count.eq(cnt), s_seen.eq(Mux(live, s_seen, 0) | (1 << self.src))]
        pipe = Cat(covers, done, dup, self.two)
        for k in range(lat):
            nxt = Signal(pipe.shape(), name=f"exp{k + 1}")
            m.d.sync += nxt.eq(pipe)
            pipe = nxt
        p_cov, p_done, p_dup, p_two = pipe[0], pipe[1], pipe[2], pipe[3]
        st = HwEnv(pl, pout).field("t.m.status")
        with m.If(p_cov):
            m.d.comb += Assert(vout)
            with m.If(~p_two):
                m.d.comb += Assert(st == Mux(p_done, ST_DONE, Mux(p_dup, ST_DUP, ST_ABSORBED)))
            with m.Else():
                m.d.comb += [Assert((st != ST_DONE) | p_done), Assert((st != ST_DUP) | p_dup),
                             Assert((st != ST_ABSORBED) | (~p_done & ~p_dup))]
        return m
